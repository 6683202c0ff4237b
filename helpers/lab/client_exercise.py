"""The lab's client exercise: the learner writes the asyncio client, the course checks it against its own.

The module's exercise asks for "a simple asyncio client". The learner writes one coroutine,
``send_one(client, model, prompt, max_tokens)``, with the official ``openai.AsyncOpenAI``: it
streams one chat completion and returns one record, a dict with

- ``"send"``, ``"first_token"``, ``"end"``: ``time.perf_counter()`` when the request was sent,
  when the first piece of text arrived, when the last one did (None where it never came);
- ``"tokens"``: the output tokens the server counted (``usage.completion_tokens``);
- ``"error"``: None, or the error as text: a failed request is a record, not an exception.

The times must be numbers and ``"tokens"`` an int: any other value (``time.perf_counter`` without its
parentheses, text) fails that one request with what to fix, and the check goes on with the others.

:func:`run_learner_client` sends a workload through it, every request at once, and turns the
dicts into the course's records. :func:`compare_clients` judges them against the same run seen
from outside the learner's code: vLLM's own count of the tokens it generated and its own mean
TTFT (the ``/metrics`` counters and histogram, read before and after), and the harness's clock
(when each ``send_one`` call returned). That reference shares the run, so run-to-run noise cannot
fail a right client: on the course's 2-core CPU two runs of one load differ by up to 10-25%
(the first check against the course's tester, 2026-12-02, read 0.77x for the solution), while a
right client's mean TTFT came within 1-4% of vLLM's over five runs. It still catches a client that
serializes its requests or times the wrong moment. The course's own load tester runs the same
shape just before, and its numbers stand beside the learner's; it is the same client with more
care: a connection pool sized to the load, a timeout per request, raw streaming without objects
per chunk (``helpers.load.client``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from helpers.hardware import describe_machine, detect_cpu
from helpers.load.client import RequestRecord
from helpers.load.run import LoadTestRun, server_facts
from helpers.load.summary import describe_failures, peak_overlap

# Against the harness's clock: the learner's last token comes before send_one returns, by the stream's closing
# chunks only (milliseconds), so a right client reads 1.00-1.01x; ending the clock at the first token reads far more.
THROUGHPUT_TOLERANCE = 0.10
# Against vLLM's own TTFT: the client's adds the way there and back and its own parsing (1-4% on the 2-core CPU),
# and on a GPU, where a TTFT is tens of milliseconds, a few milliseconds more: a relative and an absolute slack.
TTFT_TOLERANCE, TTFT_SLACK_S = 0.25, 0.05
SendOne = Callable[[Any, str, str, int], Awaitable[dict[str, Any]]]


@dataclass
class LearnerRun:
    """The learner's records, and the same run seen from outside their code."""

    run: LoadTestRun
    harness_wall_s: float  # first send -> the last send_one call returned, on the harness's clock
    server_tokens: int | None  # output tokens vLLM generated during the run (None: /metrics unreadable)
    server_ttft_mean_s: float | None  # vLLM's own mean TTFT over the run's requests


async def run_learner_client(send_one: SendOne, target: Any, workload: Any, *, timeout_s: float = 600.0) -> LearnerRun:
    """Send every request of ``workload`` at once through ``send_one``; return the records and vLLM's view.

    ``send_one`` gets an ``openai.AsyncOpenAI`` for ``target`` (no retries), the model's name,
    the prompt and ``max_tokens``. A record it returns malformed, or an exception it raises,
    becomes a failed request that says what was wrong. ``/metrics`` is read before and after."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=target.base_url, api_key=getattr(target, "api_key", "not-needed"), max_retries=0,
                         timeout=timeout_s)
    before = await _server_view(target)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")  # as run_load_test stamps its runs
    began = time.perf_counter()
    try:
        results = await asyncio.gather(*(_guarded(send_one, client, target.model_name, spec, timeout_s)
                                         for spec in workload.requests))
    finally:
        await client.close()
    harness_wall_s = max(returned for _, returned in results) - began
    records = [_record(spec, result, began) for spec, (result, _) in zip(workload.requests, results)]
    wall_s = max((r.done_s for r in records if r.ok), default=harness_wall_s)  # to the last token
    run = LoadTestRun("your client", {**workload.settings(), "client": "learner"}, server_facts(target),
                      describe_machine(), started_at, wall_s, records, cpu_cores=detect_cpu().cores)
    after = await _server_view(target, settle_s=0.5)  # a request's last metrics land just after its last chunk
    tokens = ttft = None
    if before is not None and after is not None:
        tokens = int(after["generation_tokens"] - before["generation_tokens"])
        count = after["time_to_first_token_seconds_count"] - before["time_to_first_token_seconds_count"]
        if count > 0:
            ttft = (after["time_to_first_token_seconds_sum"] - before["time_to_first_token_seconds_sum"]) / count
    return LearnerRun(run, harness_wall_s, tokens, ttft)


async def _server_view(target: Any, settle_s: float = 0.0) -> dict[str, float] | None:
    from helpers.load.poller import scrape

    await asyncio.sleep(settle_s)
    try:
        values = (await asyncio.to_thread(scrape, target)).values
    except (OSError, ValueError):  # an endpoint without /metrics: the check falls back to the records alone
        return None
    return {key: values.get(key, 0.0) for key in _VIEW}


_VIEW = ("generation_tokens", "time_to_first_token_seconds_sum", "time_to_first_token_seconds_count")


async def _guarded(send_one: SendOne, client: Any, model: str, spec: Any, timeout_s: float) -> tuple[Any, float]:
    try:
        result = await asyncio.wait_for(send_one(client, model, spec.prompt, spec.max_tokens), timeout_s)
    except Exception as error:  # noqa: BLE001 - the learner's code may raise anything; it becomes the record
        result = {"error": f"send_one raised {type(error).__name__}: {error}"}
    return result, time.perf_counter()


def _record(spec: Any, result: Any, began: float) -> RequestRecord:
    record = RequestRecord(index=spec.index, prompt_len=spec.prompt_tokens)
    if not isinstance(result, dict):
        record.error = f"send_one returned {type(result).__name__}, not a dict"
        return record
    error = result.get("error")
    record.error = None if error is None else str(error)
    # A value of the wrong type (a function, a string) is the learner's mistake in one record: it must become that
    # record's error, not a TypeError that loses the whole check, and it must not reach the sums of the summary.
    times = {key: result.get(key) for key in ("send", "first_token", "end")}
    wrong = [_not_a_number(key, value) for key, value in times.items() if value is not None and not _is_number(value)]
    send, first, end = (value if _is_number(value) else None for value in times.values())
    tokens = result.get("tokens")
    if tokens is not None and not (isinstance(tokens, int) and not isinstance(tokens, bool)):
        wrong.append(_not_a_count(tokens))
    else:
        record.output_tokens = tokens
    if send is not None:
        record.send_s = send - began
        if first is not None:
            record.ttft_s = first - send
        if end is not None:
            record.e2e_s = end - send
            record.done_s = end - began
    if record.error is None:
        missing = [key for key, value in times.items() if value is None]
        if wrong:
            record.error = "; ".join(wrong)
        elif missing:
            record.error = f"times missing ({', '.join(missing)})"
        elif not (send <= first <= end):
            record.error = "times out of order: send <= first_token <= end must hold"
        elif record.output_tokens != spec.max_tokens:
            record.error = (f"asked for {spec.max_tokens} tokens, the record says {record.output_tokens}"
                            + (" (fewer: did the request pass extra_body={'ignore_eos': True}, so the model cannot stop early?)"
                               if isinstance(record.output_tokens, int) and record.output_tokens < spec.max_tokens else ""))
    record.ok = record.error is None
    return record


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _not_a_number(key: str, value: Any) -> str:
    if callable(value):
        return f"`{key}` is a function, not a number: call time.perf_counter(), with the parentheses"
    return (f"`{key}` is {_kind(value)}, not a number: store what time.perf_counter() returns, "
            "not text or another object")


def _not_a_count(value: Any) -> str:
    return (f"`tokens` is {_kind(value)}, not an int: store usage.completion_tokens as the server sent it "
            "(an int), not text or a float")


def _kind(value: Any) -> str:
    return f"a {type(value).__name__} ({value!r:.40})"


@dataclass(frozen=True)
class ClientCheck:
    """The learner's client against the same run seen from outside, and beside the course's tester."""

    accounted: bool  # one record per request, all successful
    same_tokens: bool  # the records' output tokens add up to what vLLM generated (and to the course's run)
    throughput_ratio: float | None  # learner's output tok/s / the same tokens over the harness's clock
    ttft_mean_s: float | None  # the learner's mean TTFT
    server_ttft_mean_s: float | None  # vLLM's, for the same requests
    course_throughput_ratio: float | None = None  # learner's output tok/s / the course tester's (another run)
    course_ttft_ratio: float | None = None  # learner's TTFT p50 / the course tester's
    first_is_last: bool = False  # every "first token" came with the last one: timed after the stream, not in it
    one_at_a_time: bool = False  # no two requests were in flight at once (a lock, or a blocking client in async code)
    failures: str | None = None  # the failed records' errors, counted (helpers.load.summary.describe_failures)

    @property
    def ttft_agrees(self) -> bool:
        mine, theirs = self.ttft_mean_s, self.server_ttft_mean_s
        if mine is None or theirs is None:
            return False
        # no slack below: a client cannot see the first token much before vLLM made it
        return theirs * (1 - TTFT_TOLERANCE) <= mine <= theirs * (1 + TTFT_TOLERANCE) + TTFT_SLACK_S

    @property
    def passed(self) -> bool:
        return (self.accounted and self.same_tokens and not self.first_is_last and not self.one_at_a_time
                and self.throughput_ratio is not None and abs(self.throughput_ratio - 1) <= THROUGHPUT_TOLERANCE
                and self.ttft_agrees)

    def describe(self) -> str:
        if not self.accounted:
            # the reasons _record wrote are what the learner must fix: say them, not only that there are some
            return ("Not yet: some requests have no successful record; look at the errors of your run. "
                    + (f"{self.failures} " if self.failures else "")
                    + "Each reason (in brackets: how many requests gave it) is the `error` of a record your "
                    "send_one returned, or what it raised; every record, "
                    "with its `error`, is in the run's `records` (in the lab: `small.learner.run.records`).")
        if not self.same_tokens:
            return ("Not yet: your records count other output tokens than the server generated; read "
                    "usage.completion_tokens.")
        if self.one_at_a_time:
            return ("Not yet: your requests ran one after another, never two at once. Is something in send_one "
                    "blocking the event loop (the synchronous OpenAI client, time.sleep) or holding a lock? "
                    "Use AsyncOpenAI and await its calls.")
        if self.first_is_last:
            return ("Not yet: in every request the first token came at the same moment as the last; take "
                    "perf_counter() when the first piece of text arrives, inside the loop over the stream.")
        verdict = "Your client measures what happened" if self.passed else "Not yet"
        mine = "none" if self.ttft_mean_s is None else f"{self.ttft_mean_s:.3f} s"
        theirs = "unreadable" if self.server_ttft_mean_s is None else f"{self.server_ttft_mean_s:.3f} s"
        lines = [(f"{verdict}: your output tok/s is {_x(self.throughput_ratio)} the same tokens over the harness's "
                 f"clock (within {THROUGHPUT_TOLERANCE:.0%} passes); your mean TTFT {mine} against vLLM's own "
                 f"{theirs} for the same requests (within {TTFT_TOLERANCE:.0%}, "
                 f"and up to {TTFT_SLACK_S * 1e3:.0f} ms more for the way back, passes).")]
        if self.course_throughput_ratio is not None:
            lines.append(f"Beside the course's tester, on its own run of the same shape just before: output tok/s "
                         f"{_x(self.course_throughput_ratio)}, TTFT p50 {_x(self.course_ttft_ratio)}. Two runs of "
                         "one load differ by themselves (on a 2-core CPU by 10% and more), which is why the "
                         "check holds your numbers against your own run.")
        return "\n\n".join(lines)


def _x(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def compare_clients(learner: LearnerRun, course: LoadTestRun | None = None) -> ClientCheck:
    """Judge ``learner`` against vLLM's view and the harness's clock of the same run; ``course`` stands beside."""
    mine = learner.run.summary
    ratio = lambda a, b: a / b if a is not None and b else None  # noqa: E731
    expected = learner.server_tokens if learner.server_tokens is not None else mine.output_tokens_total
    harness_tok_per_s = ratio(expected, learner.harness_wall_s)
    theirs = course.summary if course is not None else None
    same_tokens = mine.output_tokens_total == expected and (theirs is None or
                                                            theirs.output_tokens_total == mine.output_tokens_total)
    ttfts = [r.ttft_s for r in learner.run.records if r.ok and r.ttft_s is not None]
    return ClientCheck(accounted=mine.num_ok == mine.num_requests == len(learner.run.records),
                       same_tokens=same_tokens,
                       throughput_ratio=ratio(mine.output_tok_per_s, harness_tok_per_s),
                       ttft_mean_s=sum(ttfts) / len(ttfts) if ttfts else None,
                       server_ttft_mean_s=learner.server_ttft_mean_s,
                       course_throughput_ratio=ratio(mine.output_tok_per_s, theirs and theirs.output_tok_per_s),
                       course_ttft_ratio=ratio(mine.ttft_p50_s, theirs and theirs.ttft_p50_s),
                       first_is_last=_first_is_last(learner.run.records),
                       one_at_a_time=_one_at_a_time(learner.run.records),
                       failures=describe_failures(learner.run.records, max_reasons=5))


def _one_at_a_time(records: list[RequestRecord]) -> bool:
    ok = [r for r in records if r.ok]
    return len(ok) > 1 and peak_overlap((r.send_s, r.send_s + r.e2e_s) for r in ok) == 1


def _first_is_last(records: list[RequestRecord]) -> bool:
    streamed = [r for r in records if r.ok and (r.output_tokens or 0) > 1]
    return bool(streamed) and all(r.ttft_s == r.e2e_s for r in streamed)
