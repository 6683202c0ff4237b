"""The lab's client exercise: the learner writes the asyncio client, the course checks it against its own.

The module's exercise asks for "a simple asyncio client". The learner writes one coroutine,
``send_one(client, model, prompt, max_tokens)``, with the official ``openai.AsyncOpenAI``: it
streams one chat completion and returns one record, a dict with

- ``"send"``, ``"first_token"``, ``"end"``: ``time.perf_counter()`` when the request was sent,
  when the first piece of text arrived, when the last one did (None where it never came);
- ``"tokens"``: the output tokens the server counted (``usage.completion_tokens``);
- ``"error"``: None, or the error as text: a failed request is a record, not an exception.

:func:`run_learner_client` sends a workload through it, every request at once, and turns the
dicts into the course's records; :func:`compare_clients` holds the result against the course's
own load tester on the same kind of workload: every request accounted for, the same token counts,
and throughput and TTFT p50 within tolerances wide enough for run-to-run noise and narrow enough
to catch a client that serializes its requests or times the wrong moment.
The course's tester is the same client with more care: a connection pool sized to the load,
a timeout per request, raw streaming without objects per chunk (``helpers.load.client``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from helpers.load.client import RequestRecord
from helpers.load.run import LoadTestRun, server_facts
from helpers.load.summary import peak_overlap

THROUGHPUT_TOLERANCE = 0.15  # relative; the spread of repeated runs on the course's CPU machines is about 10%
TTFT_TOLERANCE = 0.25
SendOne = Callable[[Any, str, str, int], Awaitable[dict[str, Any]]]


async def run_learner_client(send_one: SendOne, target: Any, workload: Any, *, timeout_s: float = 600.0) -> LoadTestRun:
    """Send every request of ``workload`` at once through ``send_one``; return the records as a LoadTestRun.

    ``send_one`` gets an ``openai.AsyncOpenAI`` for ``target`` (no retries), the model's name,
    the prompt and ``max_tokens``. A record it returns malformed, or an exception it raises,
    becomes a failed request that says what was wrong."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=target.base_url, api_key=getattr(target, "api_key", "not-needed"), max_retries=0,
                         timeout=timeout_s)
    began = time.perf_counter()
    try:
        results = await asyncio.gather(*(_guarded(send_one, client, target.model_name, spec, timeout_s)
                                         for spec in workload.requests))
    finally:
        await client.close()
    records = [_record(spec, result, began) for spec, result in zip(workload.requests, results)]
    wall_s = max((r.done_s for r in records if r.ok), default=time.perf_counter() - began)  # to the last token
    return LoadTestRun("your client", {**workload.settings(), "client": "learner"}, server_facts(target), "",
                       time.strftime("%Y-%m-%dT%H:%M:%S"), wall_s, records)


async def _guarded(send_one: SendOne, client: Any, model: str, spec: Any, timeout_s: float) -> dict[str, Any]:
    try:
        return await asyncio.wait_for(send_one(client, model, spec.prompt, spec.max_tokens), timeout_s)
    except Exception as error:  # noqa: BLE001 - the learner's code may raise anything; it becomes the record
        return {"error": f"send_one raised {type(error).__name__}: {error}"}


def _record(spec: Any, result: Any, began: float) -> RequestRecord:
    record = RequestRecord(index=spec.index, prompt_len=spec.prompt_tokens)
    if not isinstance(result, dict):
        record.error = f"send_one returned {type(result).__name__}, not a dict"
        return record
    send, first, end = (result.get(key) for key in ("send", "first_token", "end"))
    record.error = result.get("error")
    record.output_tokens = result.get("tokens")
    if isinstance(send, (int, float)):
        record.send_s = send - began
        if isinstance(first, (int, float)):
            record.ttft_s = first - send
        if isinstance(end, (int, float)):
            record.e2e_s = end - send
            record.done_s = end - began
    if record.error is None:
        missing = [key for key, value in (("send", send), ("first_token", first), ("end", end)) if value is None]
        if missing or not (send <= first <= end):
            record.error = (f"times missing ({', '.join(missing)})" if missing else
                            "times out of order: send <= first_token <= end must hold")
        elif record.output_tokens != spec.max_tokens:
            record.error = f"asked for {spec.max_tokens} tokens, the record says {record.output_tokens}"
    record.ok = record.error is None
    return record


@dataclass(frozen=True)
class ClientCheck:
    """The learner's client against the course's on the same workload shape."""

    accounted: bool  # one record per request, all successful
    same_tokens: bool  # the same output tokens in total
    throughput_ratio: float | None  # learner's output tok/s / the course's
    ttft_ratio: float | None  # learner's TTFT p50 / the course's
    first_is_last: bool = False  # every "first token" came with the last one: timed after the stream, not in it
    one_at_a_time: bool = False  # no two requests were in flight at once (a lock, or a blocking client in async code)

    @property
    def passed(self) -> bool:
        return (self.accounted and self.same_tokens and not self.first_is_last and not self.one_at_a_time
                and self.throughput_ratio is not None
                and abs(self.throughput_ratio - 1) <= THROUGHPUT_TOLERANCE and self.ttft_ratio is not None
                and abs(self.ttft_ratio - 1) <= TTFT_TOLERANCE)

    def describe(self) -> str:
        if not self.accounted:
            return "Not yet: some requests have no successful record; look at the errors of your run."
        if not self.same_tokens:
            return "Not yet: your records count other output tokens than the server generated; read usage.completion_tokens."
        if self.one_at_a_time:
            return ("Not yet: your requests ran one after another, never two at once. Is something in send_one "
                    "blocking the event loop (the synchronous OpenAI client, time.sleep) or holding a lock? "
                    "Use AsyncOpenAI and await its calls.")
        if self.first_is_last:
            return ("Not yet: in every request the first token came at the same moment as the last; take "
                    "perf_counter() when the first piece of text arrives, inside the loop over the stream.")
        verdict = "Your client measures what the course's does" if self.passed else "Not yet"
        return (f"{verdict}: output tok/s {self.throughput_ratio:.2f}x the course's (within "
                f"{THROUGHPUT_TOLERANCE:.0%} passes), TTFT p50 {self.ttft_ratio:.2f}x (within {TTFT_TOLERANCE:.0%}).")


def compare_clients(learner: LoadTestRun, course: LoadTestRun) -> ClientCheck:
    mine, theirs = learner.summary, course.summary
    ratio = lambda a, b: a / b if a is not None and b else None  # noqa: E731
    return ClientCheck(accounted=mine.num_ok == mine.num_requests == theirs.num_requests,
                       same_tokens=mine.output_tokens_total == theirs.output_tokens_total,
                       throughput_ratio=ratio(mine.output_tok_per_s, theirs.output_tok_per_s),
                       ttft_ratio=ratio(mine.ttft_p50_s, theirs.ttft_p50_s),
                       first_is_last=_first_is_last(learner.records),
                       one_at_a_time=_one_at_a_time(learner.records))


def _one_at_a_time(records: list[RequestRecord]) -> bool:
    ok = [r for r in records if r.ok]
    return len(ok) > 1 and peak_overlap((r.send_s, r.send_s + r.e2e_s) for r in ok) == 1


def _first_is_last(records: list[RequestRecord]) -> bool:
    streamed = [r for r in records if r.ok and (r.output_tokens or 0) > 1]
    return bool(streamed) and all(r.ttft_s == r.e2e_s for r in streamed)
