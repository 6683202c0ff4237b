"""A request-rate sweep on one running server: open-loop traffic at each rate, lowest first, one point each.

I/O: it sends load to a server and writes a results file. :func:`sweep_rates` draws seeded
arrivals (:mod:`helpers.load.arrivals`) at each rate, scrapes ``/metrics`` before and after, sends
the requests with no cap on how many are in flight (the server, not the client, queues them:
:func:`helpers.load.run.run_load_test` without ``concurrency``), and keeps one
:class:`~helpers.traffic.rates.RatePoint` per rate. Each rate gets fresh prompts (vLLM's prefix
cache would skip a repeated prompt's prefill) and the same arrival shape, scaled to its rate, so
rates differ only in rate. A GPU server gets an untimed warm-up burst first (:mod:`helpers.load.warmup`).
Taught in ``labs/02_serving_real_traffic.ipynb``.

Bounded: the sweep never runs past ``time_limit_s`` by more than a scrape or two. A rate whose
arrivals would not end ``MIN_DRAIN_S`` before the limit is not started (``"not run: time bound"``),
and each request's timeout is cut so the last one gives up by the limit. A server that dies ends
the sweep at once: the point it died in is ``"failed: server died ..."``, the rest ``"not run:
..."``. With ``out_path`` the file is rewritten (whole: :func:`helpers.files.write_atomically`)
after every rate, the rates not yet reached marked not run, so a kernel stopped mid-sweep still
leaves a true file. Everything is checked before a request is sent.

Bracketing (``bracket=True``): a sweep planned from a prediction can miss the knee: every rate kept up, none
did, or the lightest was already queueing (:mod:`helpers.traffic.bracket`). Then one more rate is run, within
the same time bound: twice the highest planned rate, or half the lowest, so the sweep holds a light rate
below the knee and an overloaded one to estimate what the server serves.

Example::

    >>> points = await sweep_rates(server, [0.5, 1, 2], num_requests=20, output_tokens=16)  # doctest: +SKIP
    >>> [p.status for p in points]                                                          # doctest: +SKIP
    ['ok', 'ok', 'ok']
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from helpers import validate
from helpers.hardware import describe_machine
from helpers.load.arrivals import arrival_times, with_arrivals
from helpers.load.client import DEFAULT_TIMEOUT_S
from helpers.load.poller import scrape
from helpers.load.run import MAX_REQUESTS, run_load_test, server_facts
from helpers.load.slo import SLO
from helpers.load.warmup import warm_up
from helpers.load.workload import LAB_PROMPT_LENS, build_workload, check_server
from helpers.serve.process import death_of
from helpers.traffic.bracket import bracketing_rate, why_bracketed
from helpers.traffic.rates import RatePoint, not_run, rate_point, save_rate_sweep

MIN_DRAIN_S = 5.0  # seconds the last arrival's request gets, at least, before the time limit
MIN_REQUESTS = 3  # per rate: fewer give no completion rate (helpers.traffic.rates.pace)
# MAX_REQUESTS (helpers.load.run) bounds each rate's count too, whatever the duration asked for: a rate is one run
START_AGAIN = ("a cell that has finished with its server stops it (and may set it to None): run the cell that "
               "starts the server again (or start one: server = start_server(...)), then this one")
PENDING = "sweep stopped before this rate"


async def sweep_rates(
    server: Any,
    rates: Sequence[float],
    *,
    setting_label: str | None = None,
    num_requests: int | None = None,
    duration_s: float | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    slo: SLO | str | None = None,
    time_limit_s: float = 600.0,
    prompt_lens: Sequence[int] = LAB_PROMPT_LENS,
    output_tokens: int = 16,
    request_timeout_s: float = DEFAULT_TIMEOUT_S,
    out_path: Path | str | None = None,
    quiet: bool = False,
    bracket: bool = False,
) -> list[RatePoint]:
    """One point per rate of ``rates`` (requests per second, run lowest first), every planned rate
    in the result whatever happened to it. Give ``num_requests`` (the same at each rate) or
    ``duration_s`` (each rate sends ``rate * duration_s`` requests, at least 3). ``burstiness``: the
    arrivals' gamma shape (1: Poisson). ``slo``: an :class:`~helpers.load.slo.SLO` or vLLM's
    spelling ``"ttft:500 tpot:50"`` (ms), for each point's goodput. ``setting_label``: default
    ``"max_num_seqs=N"`` from the server. Prompts cycle through ``prompt_lens`` tokens, each
    answer ``output_tokens`` long. Prints one line per rate unless ``quiet``. ``bracket``: one more rate
    where the planned ones all kept up, none did, or the lowest was already queueing (module docstring).
    In a notebook ``points = await sweep_rates(...)``; in a script ``asyncio.run(sweep_rates(...))``.
    """
    check_up(server, START_AGAIN)
    rates = check_rates(rates, burstiness)
    slo = check_slo(slo)
    time_limit_s = validate.positive_number(time_limit_s, "time_limit_s", unit="seconds",
                                            hint="It bounds the whole sweep, e.g. 360 for six minutes.")
    request_timeout_s = validate.positive_number(request_timeout_s, "request_timeout_s", unit="seconds")
    validate.positive_int(output_tokens, "output_tokens", hint="It is how many tokens each request generates.")
    lens = validate.positive_ints(prompt_lens, "prompt_lens", hint="Prompt lengths are in tokens.")
    validate.fits_context(max(lens) + output_tokens, validate.context_length(server),
                          f"the longest prompt ({max(lens)} tokens) plus output_tokens={output_tokens}",
                          "Pass fewer output_tokens or shorter prompt_lens.")
    counts = _request_counts(rates, num_requests, duration_s)
    first_span = counts[0] / rates[0]
    if first_span + MIN_DRAIN_S > time_limit_s:
        raise validate.InvalidArgumentError(
            f"{counts[0]} requests at {rates[0]:g} req/s arrive over {first_span:.0f} s, which with {MIN_DRAIN_S:g} s "
            f"to finish does not fit in time_limit_s={time_limit_s:g}: pass fewer requests, a higher lowest rate, "
            "or a longer time_limit_s.")
    label = setting_label or f"max_num_seqs={getattr(getattr(server, 'config', None), 'max_num_seqs', None)}"
    facts = server_facts(server)
    about = {"setting": label, "server": facts.to_dict(), "hardware": describe_machine(),
             "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "burstiness": burstiness, "seed": seed, "slo": " ".join(slo.vllm_args()[1:]) if slo else None,
             "time_limit_s": time_limit_s, "prompt_lens": list(lens), "output_tokens": output_tokens}
    plan = list(zip(rates, counts))
    points = [not_run(label, rate, burstiness, n, PENDING) for rate, n in plan]
    began = time.monotonic()
    stop_reason: str | None = None
    for index, (rate, n) in enumerate(plan):  # bracketing may add one rate to the plan as it goes
        if stop_reason is None:
            stop_reason = death_of(server, wait_s=0)
        if stop_reason is not None:
            points[index] = not_run(label, rate, burstiness, n, stop_reason)
            continue
        remaining = time_limit_s - (time.monotonic() - began)
        span = n / rate
        if span + MIN_DRAIN_S > remaining:
            points[index] = not_run(label, rate, burstiness, n, "time bound")
            _report(quiet, f"  {label}, {rate:g} req/s: not run (time bound: {span:.0f} s of arrivals, "
                           f"{remaining:.0f} s left of {time_limit_s:g})")
            continue
        points[index], stop_reason = await _one_rate(
            server, label, rate, n, burstiness=burstiness, seed=seed, index=index, slo=slo, lens=lens,
            first=all(p.status.startswith("not run") for p in points[:index]),
            output_tokens=output_tokens, timeout_s=min(request_timeout_s, remaining - span))
        _report(quiet, describe_point(points[index]))
        extra = bracketing_rate(points) if bracket and index == len(rates) - 1 and stop_reason is None else None
        if extra is not None:
            plan.append((extra, extra_requests(extra, num_requests, duration_s)))
            points.append(not_run(label, extra, burstiness, plan[-1][1], PENDING))
            _report(quiet, f"  {label}: {why_bracketed(points, extra)}")
        if out_path is not None:
            save_rate_sweep(_by_rate(points), out_path, **about)
    points = _by_rate(points)
    if out_path is not None:
        save_rate_sweep(points, out_path, **about)
    return points


def extra_requests(rate: float, num_requests: int | None, duration_s: float | None) -> int:
    """Requests at bracketing's extra rate: as many as each planned rate (``num_requests``), or ``duration_s`` of
    arrivals, capped at ``MAX_REQUESTS`` where a planned rate would be refused: 20 s at 3x an H100's predicted 174
    requests/s (64 slots) is 10,400, and the rates already measured must not be lost to a refusal.

    >>> extra_requests(520.9, None, 20) == MAX_REQUESTS, extra_requests(0.1, None, 10), extra_requests(9.0, 4, None)
    (True, 3, 4)
    """
    return num_requests if num_requests is not None else min(MAX_REQUESTS, _arrivals_in(duration_s, rate))


def _arrivals_in(duration_s: float, rate: float) -> int:
    """Requests in ``duration_s`` seconds of arrivals at ``rate``, at least ``MIN_REQUESTS``."""
    return max(MIN_REQUESTS, round(rate * duration_s))


def describe_point(point: RatePoint) -> str:
    """One line per point: achieved rate, p50/p95 TTFT and end-to-end, queueing, errors; or its status."""
    head = f"  {point.setting}, {point.offered_rate:g} req/s"
    if point.achieved_rate is None or point.ttft_p50_s is None:
        return f"{head}: {point.status}, {point.num_ok} of {point.num_requests} requests finished"
    queue = f", queued {point.queue_mean_s:.2f} s" if point.queue_mean_s is not None else ""
    line = (f"{head}: completes {point.achieved_rate:.2f} req/s, TTFT p50/p95 {point.ttft_p50_s:.2f}/"
            f"{point.ttft_p95_s:.2f} s, e2e p50/p95 {point.e2e_p50_s:.2f}/{point.e2e_p95_s:.2f} s{queue}, "
            f"errors {point.num_requests - point.num_ok}")
    return line if point.ran else f"{line} ({point.status})"


def _by_rate(points: list[RatePoint]) -> list[RatePoint]:
    return sorted(points, key=lambda p: p.offered_rate)


async def _one_rate(server: Any, label: str, rate: float, n: int, *, burstiness: float, seed: int, index: int,
                    first: bool, slo: SLO | None, lens: tuple[int, ...], output_tokens: int,
                    timeout_s: float) -> tuple[RatePoint, str | None]:
    """The point of one rate, and why the sweep must stop (the server died or stopped answering), or None."""
    try:
        # fresh prompts each rate (seed + index); the same arrival shape at every rate (seed)
        workload = build_workload(server, num_requests=n, prompt_lens=lens, output_tokens=output_tokens,
                                  seed=seed + index)
        before = scrape(server)
    except OSError as error:  # the tokenizer and /metrics are the server's: one that no longer answers
        reason = death_of(server) or f"server stopped answering: {error}"
        return not_run(label, rate, burstiness, n, reason), reason
    workload = with_arrivals(workload, arrival_times(n, rate, burstiness, seed=seed))
    if first and await warm_up(server, workload) is not None:  # before the first rate measured
        before = scrape(server)  # the warm-up's requests are not the point's
    run = await run_load_test(server, workload, timeout_s=timeout_s, progress=False,
                              label=f"{label}, {rate:g} req/s")
    death = death_of(server) if run.summary.num_errors else None
    try:
        after = scrape(server) if death is None else before
    except OSError as error:
        death = death_of(server) or f"server stopped answering: {error}"
        after = before
    point = rate_point(run, before, after, setting=label, offered_rate=rate, burstiness=burstiness, slo=slo)
    if death is not None:
        return replace(point, status=f"failed: {death}"), death
    return point, None


def check_up(server: Any, start_again: str) -> Any:
    """``server``, after refusing None, its URL, and a server this kernel has not started or has stopped.

    A notebook cell that stops its server when it finishes leaves None or a stopped server behind, which a
    second run of the cell would otherwise meet as an AttributeError or a sweep of refused connections.
    ``start_again`` says how to get a server back. One that died stays the sweep's to report, point by point."""
    check_server(server, "server", if_none=f"{start_again}.")
    if not callable(getattr(server, "is_running", None)):  # a shared server (connect(url)): not this kernel's
        return server
    process = getattr(server, "process", None)
    if process is None:
        raise validate.InvalidArgumentError(
            "the server has not been started: call server.start(), or make it with start_server(...).")
    if process.poll() is not None and getattr(server, "last_stop", None) is not None:
        raise validate.InvalidArgumentError(
            f"{server!r} was stopped (server.stop()): {start_again}.")
    return server


def check_rates(rates: Any, burstiness: Any) -> tuple[float, ...]:
    """The rates in ascending order, after refusing a rate or burstiness that is not a positive number.

    >>> check_rates([2, 0.5], 1.0)
    (0.5, 2.0)
    """
    if isinstance(rates, (int, float)) or not rates:
        raise validate.InvalidArgumentError(
            f"rates must be a list of request rates, e.g. [0.5, 1, 2, 4] (requests per second); got {rates!r}.")
    hint = "It is requests per second, e.g. 2.0; to send everything at once use run_load_test without arrivals."
    checked = sorted(validate.positive_number(rate, "each rate", unit="requests per second", hint=hint)
                     for rate in rates)
    if burstiness != math.inf:
        validate.positive_number(burstiness, "burstiness",
                                 hint="1.0 is Poisson, below 1 burstier, above 1 more even (inf: evenly spaced).")
    return tuple(checked)


def check_slo(slo: Any) -> SLO | None:
    """``slo`` as an :class:`~helpers.load.slo.SLO` (None stays None); text is read in vLLM's spelling."""
    if slo is None or isinstance(slo, SLO):
        return slo
    if isinstance(slo, str):
        return SLO.parse(slo)
    raise validate.InvalidArgumentError(
        f"slo must be an SLO or vLLM's spelling of one in milliseconds, e.g. SLO(ttft_ms=500) or 'ttft:500 tpot:50'; "
        f"got {slo!r} (a {type(slo).__name__}), which says neither which latency nor its unit.")


def _request_counts(rates: tuple[float, ...], num_requests: Any, duration_s: Any) -> list[int]:
    if (num_requests is None) == (duration_s is None):
        raise validate.InvalidArgumentError(
            "pass either num_requests (the same at every rate, e.g. 20) or duration_s (seconds of arrivals per "
            "rate, e.g. 30), not both and not neither.")
    if num_requests is not None:
        n = validate.int_above(num_requests, "num_requests", MIN_REQUESTS - 1,
                               hint=f"A completion rate needs at least {MIN_REQUESTS} requests.")
        counts = [n] * len(rates)
    else:
        duration_s = validate.positive_number(duration_s, "duration_s", unit="seconds")
        counts = [_arrivals_in(duration_s, rate) for rate in rates]
    if max(counts) > MAX_REQUESTS:
        raise validate.InvalidArgumentError(
            f"{max(counts):,} requests at one rate is more than the sweep's bound of {MAX_REQUESTS:,}; "
            "pass fewer requests or a shorter duration_s.")
    return counts


def _report(quiet: bool, line: str) -> None:
    if not quiet:
        print(line, flush=True)
