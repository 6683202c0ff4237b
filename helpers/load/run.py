"""A load test: send a workload with at most ``concurrency`` requests in flight, keep every record.

:func:`run_load_test` sends the requests of a :class:`~helpers.load.workload.Workload` through
the one client (:mod:`helpers.load.client`), at most ``concurrency`` at a time (default: all
at once), each at its ``arrival_s`` after the start (default 0: a closed burst). It returns a
:class:`LoadTestRun`: settings, server facts, the machine, and one record per request. Its
numbers (:attr:`LoadTestRun.summary`) come from :mod:`helpers.load.summary`; saving and
loading runs is :mod:`helpers.lab.results`. Taught in ``labs/01_concurrency_lab.ipynb``.

What it leaves out: multi-turn chats, sampling (temperature 0 only), retries (a failed
request is a counted error, not retried).

Example::

    >>> workload = build_workload(server, num_requests=50)        # doctest: +SKIP
    >>> run = await run_load_test(server, workload)               # doctest: +SKIP
    >>> run.summary.num_ok                                        # doctest: +SKIP
    50
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from functools import cached_property
from typing import Any

from helpers import answer_audit, validate
from helpers.hardware import describe_machine, detect_cpu
from helpers.load.client import DEFAULT_TIMEOUT_S, RequestRecord, RequestSpec, send_request
from helpers.load.http import make_client
from helpers.load.summary import RunSummary, describe_failures, summarize
from helpers.load.workload import Workload, check_server
from helpers.local_http import read_body

POOL_HEADROOM = 4  # connections above the in-flight cap (the client's aiohttp connection pool must not be the limit)
MAX_REQUESTS = 10_000  # per run: without a cap on concurrency each is a socket open at once
# The whole run's default bound past the last arrival: the longest run recorded under results/ took 435 s, so no
# course load meets it; a run that does is stuck, and its requests would otherwise each wait out their own timeout.
RUN_TIME_LIMIT_S = 3600.0


@dataclass(frozen=True)
class ServerFacts:
    """What a run records about the server it measured; None where it was not known."""

    model: str
    url: str | None = None
    model_source: str | None = None  # "dummy": random weights (helpers.serve.dummy_model), text meaningless
    vllm_version: str | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    device: str | None = None  # "cpu" or "cuda"
    kv_cache: dict[str, Any] | None = None  # helpers.serve.log.KVCacheReport as a dict

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerFacts:
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


@dataclass
class LoadTestRun:
    """One load test: its settings, where it ran, and the raw records (one per request)."""

    label: str
    settings: dict[str, Any]  # workload + client settings (concurrency, timeout, ...)
    server: ServerFacts
    hardware: str  # helpers.hardware.describe_machine()
    started_at: str  # ISO 8601, UTC
    wall_s: float  # run start -> last request returned, client clock
    records: list[RequestRecord]
    cpu_cores: int | None = None  # the client machine's cores (None in files that predate it)

    @property
    def max_num_seqs(self) -> int | None:
        return self.server.max_num_seqs

    @cached_property
    def summary(self) -> RunSummary:
        """The run's numbers, computed once from the records."""
        return summarize(self.records)


async def run_load_test(
    target: Any,
    workload: Workload,
    *,
    concurrency: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    label: str | None = None,
    progress: bool = True,
    time_limit_s: float | None = None,
) -> LoadTestRun:
    """Send every request of ``workload`` to ``target``; return the run with one record each.

    ``target``: a VLLMServer or an :class:`Endpoint` (the object, not its URL). ``concurrency``: most
    requests in flight at once, a positive integer (None, the default: all of them, i.e. all sent at
    t=0; 0 is an error, not "all"). At most :data:`MAX_REQUESTS` requests. Bounded in time: each
    request gives up after ``timeout_s`` (a positive, finite number of seconds), and the whole run
    after ``time_limit_s`` from its start (default: the last arrival plus the larger of
    :data:`RUN_TIME_LIMIT_S` and ``timeout_s``); requests left then are cancelled and kept as failed
    records that say so. A request too long for the server's ``max_model_len`` (where the target
    knows it) is refused before anything is sent. In a notebook: ``run = await run_load_test(...)``;
    in a script: ``asyncio.run(run_load_test(...))``. When requests fail, it prints how many and why.
    """
    from tqdm.auto import tqdm

    check_server(target, "target")
    concurrency = validate.optional_positive_int(concurrency, "concurrency", none_means="every request at once")
    timeout_s = validate.positive_number(timeout_s, "timeout_s", unit="seconds",
                                         hint="It is how long each request may take before it counts as failed.")
    if not getattr(workload, "requests", None):
        raise validate.InvalidArgumentError(
            f"the workload has no requests (got {workload!r:.80}); make one with "
            "build_workload(server, num_requests=...).")
    if len(workload.requests) > MAX_REQUESTS:
        raise validate.InvalidArgumentError(
            f"{len(workload.requests):,} requests is more than a run's bound of {MAX_REQUESTS:,}; build the "
            "workload with fewer, or send it in parts.")
    time_limit_s = _time_limit(workload, time_limit_s, timeout_s)
    longest = max(workload.requests, key=lambda spec: spec.prompt_tokens + spec.max_tokens)
    validate.fits_context(longest.prompt_tokens + longest.max_tokens, validate.context_length(target),
                          f"request {longest.index} ({longest.prompt_tokens} prompt + {longest.max_tokens} "
                          "output tokens)", "Build the workload with fewer output_tokens or shorter prompts.")
    in_flight = min(concurrency or len(workload.requests), len(workload.requests))
    # A few connections more than requests in flight: the HTTP pool must never be what limits the load.
    max_connections = in_flight + POOL_HEADROOM
    server = server_facts(target)
    label = label or f"max_num_seqs={server.max_num_seqs}"
    client = make_client(target, max_connections, timeout_s)
    semaphore = asyncio.Semaphore(in_flight)
    bar = tqdm(total=len(workload.requests), desc=label, unit="req", disable=not progress, leave=True)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    sent_at: dict[int, float] = {}  # position in the workload -> when it was sent, for a request cut short

    async def limited(position: int, spec: RequestSpec) -> RequestRecord:
        if spec.arrival_s > 0:  # open-loop traffic: wait for this request's arrival, then for a slot
            await asyncio.sleep(max(0.0, run_start + spec.arrival_s - time.perf_counter()))
        async with semaphore:
            sent_at[position] = time.perf_counter() - run_start
            record = await send_request(client, target.model_name, spec, run_start, timeout_s)
        bar.update(1)
        return record

    load_at_start = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    run_start = time.perf_counter()
    tasks = [asyncio.ensure_future(limited(position, spec)) for position, spec in enumerate(workload.requests)]
    try:
        await asyncio.wait(tasks, timeout=time_limit_s)
    finally:  # past the bound, or in an interrupted cell: nothing may go on sending
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        wall_s = time.perf_counter() - run_start
        bar.close()
        await client.close()
    records = [_cut_short(spec, sent_at.get(position), wall_s, time_limit_s) if task.cancelled() else task.result()
               for position, (spec, task) in enumerate(zip(workload.requests, tasks))]
    failures = describe_failures(records)
    if failures and progress:
        print(f"{label}: {failures}")
    settings = {**workload.settings(), "concurrency": in_flight, "max_connections": max_connections,
                "timeout_s": timeout_s, "time_limit_s": time_limit_s, "temperature": 0.0, "ignore_eos": True,
                "stream": True,
                # other programs on the machine distort timings; keep a trace of how busy it was
                "load_avg_1m_at_start": load_at_start}
    answer_audit.note_made(records)  # while the course audits itself: no cell before this one showed these
    return LoadTestRun(label, settings, server, describe_machine(), started_at, wall_s, list(records),
                       cpu_cores=detect_cpu().cores)


def _time_limit(workload: Workload, time_limit_s: Any, timeout_s: float) -> float:
    last_arrival = max(spec.arrival_s for spec in workload.requests)
    if time_limit_s is None:
        return last_arrival + max(RUN_TIME_LIMIT_S, timeout_s)
    time_limit_s = validate.positive_number(time_limit_s, "time_limit_s", unit="seconds",
                                            hint="It bounds the whole run, from its start; None for the default.")
    if time_limit_s <= last_arrival:
        raise validate.InvalidArgumentError(
            f"the workload's last request arrives {last_arrival:g} s after the start, not before "
            f"time_limit_s={time_limit_s:g}: pass a longer time_limit_s, or fewer requests or a higher rate.")
    return time_limit_s


def _cut_short(spec: RequestSpec, sent_s: float | None, now_s: float, time_limit_s: float) -> RequestRecord:
    """The record of a request the run's time limit cancelled: failed, saying so, at the moment it ended."""
    what = "not sent" if sent_s is None else "no complete answer"
    return RequestRecord(index=spec.index, prompt_len=spec.prompt_tokens, send_s=now_s if sent_s is None else sent_s,
                         done_s=now_s, error=f"time limit: {what} within the run's time_limit_s={time_limit_s:g} s")


def server_facts(target: Any) -> ServerFacts:
    """What the results need to know about the server; never raises (None where unknown)."""
    facts: dict[str, Any] = {"url": getattr(target, "url", None), "model": target.model_name}
    # "dummy": random weights (helpers.serve.dummy_model), whose text means nothing; tables say so
    facts["model_source"] = getattr(target, "model_source", None)
    try:
        facts["vllm_version"] = json.loads(read_body(f"{target.url}/version", timeout=5)).get("version")
    except (OSError, ValueError, AttributeError):
        facts["vllm_version"] = None
    config = getattr(target, "config", None)
    facts["max_num_seqs"] = getattr(config, "max_num_seqs", None)
    facts["max_model_len"] = getattr(config, "max_model_len", None)
    facts["device"] = getattr(target, "device", None)
    kv = getattr(target, "kv_cache", None)
    facts["kv_cache"] = asdict(kv) if kv is not None else None
    return ServerFacts(**facts)
