"""The lab's measurement: for each ``max_num_seqs``, start a server, run the load test, save, stop.

I/O: it starts vLLM servers, sends load, writes one run file each (:func:`helpers.lab.results.save_run`).
:func:`run_sweep` is the one loop the lab's cells (8 and 64; the optional live sweep) and
``scripts/lab_sweep.py`` (1 ... 64, the committed reference runs) share. Each repetition gets
fresh prompts (``seed`` = the repetition), since vLLM's prefix cache would skip a repeated
prompt's prefill. :func:`check_sweep` refuses impossible plans before any server starts.
Taught in ``labs/01_concurrency_lab.ipynb``. The lab measures its two settings side by side
(``helpers.lab.side_by_side``), with the pieces of one load test here (:func:`run_one_load` and others).

A server that dies does not end the sweep with a traceback: the run it cut short is saved with
what finished before (``settings["server_died"]`` says why), its setting's remaining load tests
are marked not run, and the next setting gets a fresh server. A server that will not start
marks its setting and every later one not run and ends the sweep. Not-run load tests are
:class:`~helpers.lab.results.NotRunPoint` entries in ``SweepResult.not_run``, printed with their
reason and saved to the output folder (:func:`helpers.lab.results.save_not_run`).

Example::

    >>> plan = SweepPlan(repetitions=2, num_requests=50, output_tokens=64)
    >>> check_sweep((8, 64), plan, max_model_len=2048)
    >>> result = await run_sweep((8, 64), plan, "build/lab/now")         # doctest: +SKIP
    >>> len(result.runs)                                                # doctest: +SKIP
    4
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from helpers import validate
from helpers.errors import START_ERRORS, CourseError, InvalidArgumentError
from helpers.hardware import other_vllm_servers
from helpers.lab.results import NotRunPoint, save_not_run, save_run
from helpers.load.pace import LAB_OUTPUT_TOKENS, lab_output_tokens, measure_pace
from helpers.load.run import LoadTestRun, run_load_test
from helpers.load.warmup import WARM_UP_OUTPUT_TOKENS, warm_up
from helpers.load.workload import LAB_PROMPT_LENS, Workload, build_workload
from helpers.serve.process import death_of
from helpers.serve.server import start_server

SWEEP_SETTINGS = (1, 2, 4, 8, 16, 32, 64)  # the full sweep: scripts/lab_sweep.py and the lab's RUN_SWEEP
RETRY_WAIT_S = 20  # after a failed start: a port race or memory still held by a server that is stopping


@dataclass(frozen=True)
class SweepPlan:
    """How much load each setting gets: ``repetitions`` load tests of ``num_requests`` requests
    with ``output_tokens`` each."""

    repetitions: int
    num_requests: int
    output_tokens: int


@dataclass
class SweepResult:
    runs: list[LoadTestRun] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)  # each run's workload, in the same order
    plan: SweepPlan | None = None  # as run: after ``fit`` where one was given
    not_run: list[NotRunPoint] = field(default_factory=list)  # load tests planned and not run, with why
    not_run_file: Path | None = None  # where they were saved (None when every load test ran)

    def describe_not_run(self) -> str | None:
        """The load tests not run, one line each with the reason; None when all ran."""
        if not self.not_run:
            return None
        planned = len(self.runs) + len(self.not_run)
        return "\n".join([f"{len(self.not_run)} of {planned} load tests not run:",
                          *(f"  {point}" for point in self.not_run)])


# ``fit``: called with the first server and the planned load; returns the load to run instead.
Fit = Callable[[Any, SweepPlan], Awaitable[SweepPlan]]


def check_sweep(settings: Sequence[int], plan: SweepPlan, max_model_len: int | None = None) -> None:
    """Refuse settings that could not make a sweep (``ValueError``), before any server starts.

    ``max_model_len``: the servers' context length, when known; the lab's longest prompt plus
    ``output_tokens`` must fit in it.

    >>> check_sweep((8, 0), SweepPlan(2, 50, 64))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: each max_num_seqs setting must be a positive integer, got 0. ...
    """
    if not settings:
        raise InvalidArgumentError("settings must list at least one max_num_seqs value, got none.")
    for value in settings:
        validate.positive_int(value, "each max_num_seqs setting", hint="e.g. --settings 1 8 64.")
    validate.positive_int(plan.repetitions, "repetitions", hint="It is how many load tests run per server start.")
    validate.positive_int(plan.num_requests, "num_requests")
    validate.positive_int(plan.output_tokens, "output_tokens")
    validate.fits_context(max(LAB_PROMPT_LENS) + plan.output_tokens, max_model_len,
                          f"the lab's longest prompt ({max(LAB_PROMPT_LENS)} tokens) plus "
                          f"output_tokens={plan.output_tokens}", "Pass fewer --output-tokens.")


def default_max_model_len() -> int | None:
    """The context length ``start_server()`` gives a server when none is passed (None if unknown)."""
    try:
        from helpers.serve.config import ServerConfig

        return int(ServerConfig.__dataclass_fields__["max_model_len"].default)
    except (ImportError, AttributeError, KeyError, TypeError, ValueError):
        return None


def fit_to_pace(device: str) -> Fit:
    """A ``fit`` for :func:`run_sweep`: time this machine on the first server (a few seconds) and,
    where it is slower than the course's reference, send fewer output tokens (down to 32 at half its pace) and,
    below three quarters of its pace, fewer repetitions; prints what it changed."""

    async def fit(server: Any, plan: SweepPlan) -> SweepPlan:
        pace = await measure_pace(server)
        fitted = replace(plan, output_tokens=lab_output_tokens(pace, device),
                         repetitions=pace.scaled(plan.repetitions, minimum=1))
        print(pace.describe({"output tokens": (LAB_OUTPUT_TOKENS[device], fitted.output_tokens),
                             "repetitions": (plan.repetitions, fitted.repetitions)}))
        return fitted

    return fit


async def run_sweep(settings: Sequence[int], plan: SweepPlan, out: Path | str, *, fit: Fit | None = None,
                    attempts: int = 1, quiet: bool = False) -> SweepResult:
    """For each ``max_num_seqs`` in ``settings``: start a server, run ``plan.repetitions`` load
    tests (fresh prompts each), save every run to ``out``, stop the server; one line per run.

    ``fit``: sizes the load on the first server (e.g. :func:`fit_to_pace`). ``attempts``:
    server starts to try per setting (a shared machine's port race or memory, 20 s apart).
    ``quiet``: no server log and no progress bars (a script's output). Each run's settings
    record the load average and how many other vLLM servers were running at its start.
    In a notebook: ``await run_sweep(...)``; in a script: ``asyncio.run(run_sweep(...))``.

    Bounded when a server dies (see the module docstring): what was measured is kept and saved,
    the load tests that could not run are in ``result.not_run`` (and ``<start>-not-run.json``
    in ``out``), listed with their reason at the end; nothing is raised for it.
    """
    check_sweep(settings, plan, default_max_model_len())
    attempts = validate.positive_int(attempts, "attempts")
    result = SweepResult(plan=plan)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    fitted = fit is None
    for index, max_num_seqs in enumerate(settings):
        others = other_vllm_servers()
        try:
            server = start_with_retries(max_num_seqs, attempts, quiet)
        except START_ERRORS as error:
            for later in settings[index:]:
                mark_not_run(result, later, 0, f"server did not start: {start_failure(error)}", out, started_at)
            break
        with server:
            if quiet:
                print(f"max_num_seqs={max_num_seqs}: server ready in {server.startup_seconds:.0f} s", flush=True)
            if not fitted:
                if not await fit_on(server, max_num_seqs, fit, result, out, started_at):
                    continue
                fitted = True
            for repetition in range(result.plan.repetitions):  # until the server dies, if it does
                if not await run_one_load(server, max_num_seqs, repetition, others, result, out, quiet, started_at):
                    break
    if result.not_run:
        print(result.describe_not_run() + f"\n(saved in {result.not_run_file})", flush=True)
    return result


async def fit_on(server: Any, max_num_seqs: int, fit: Fit, result: SweepResult, out: Path | str,
                 started_at: str) -> bool:
    """Size ``result.plan`` on this server; False (its setting marked not run) if the server died doing it."""
    try:
        result.plan = await fit(server, result.plan)
        return True
    except (RuntimeError, OSError):
        if (death := death_of(server)) is None:
            raise
        mark_not_run(result, max_num_seqs, 0, death, out, started_at)
        return False


def start_failure(error: Exception) -> str:
    """Why a server did not start, in a few words: the error's cause, else its first line."""
    return getattr(error, "cause", None) or str(error).splitlines()[0]


async def run_one_load(server: Any, max_num_seqs: int, repetition: int, others: int, result: SweepResult,
                       out: Path | str, quiet: bool, started_at: str, **recorded: Any) -> bool:
    """One load test of a setting on its server (the first one warmed first on a GPU, untimed: see
    :mod:`helpers.load.warmup`), saved with ``recorded`` among its settings. False when the server died
    (or no longer answered) before or during it: this repetition and the setting's later ones are then
    marked not run."""
    if (death := death_of(server, wait_s=0)) is not None:
        mark_not_run(result, max_num_seqs, repetition, death, out, started_at)
        return False
    try:
        workload = build_workload(server, num_requests=result.plan.num_requests,
                                  output_tokens=result.plan.output_tokens, seed=repetition)
    except OSError as error:  # its tokenizer is the server's: a server that no longer answers
        mark_not_run(result, max_num_seqs, repetition, death_of(server) or
                     f"server stopped answering: {error}", out, started_at)
        return False
    if repetition == 0 and (warmed_s := await warm_up(server, workload)) is not None:
        print(f"  max_num_seqs={max_num_seqs}: warm-up burst of {len(workload.requests)} requests x "
              f"{WARM_UP_OUTPUT_TOKENS} tokens, untimed, {warmed_s:.1f} s", flush=True)
    run = await run_load_test(server, workload, progress=not quiet,
                              label=f"max_num_seqs={max_num_seqs}, run {repetition + 1}")
    run.settings["other_vllm_servers_at_start"] = others
    run.settings.update(recorded)
    death = death_of(server) if run.summary.num_errors else None
    if death is not None:
        run.settings["server_died"] = death
    save_run(run, out)
    result.runs.append(run)
    result.workloads.append(workload)
    print(describe_run(run, detail=quiet), flush=True)
    if death is not None:
        s = run.summary
        print(f"  max_num_seqs={max_num_seqs}, run {repetition + 1}: {death} during the run; kept the {s.num_ok} "
              f"of {s.num_requests} requests that finished before it, the other {s.num_errors} count as errors",
              flush=True)
        mark_not_run(result, max_num_seqs, repetition + 1, death, out, started_at)
        return False
    return True


def mark_not_run(result: SweepResult, max_num_seqs: int, first: int, reason: str, out: Path | str,
                 started_at: str) -> None:
    """Mark the setting's load tests from repetition ``first`` (from 0) not run; print and save them."""
    points = [NotRunPoint(max_num_seqs, repetition + 1, reason)
              for repetition in range(first, result.plan.repetitions)]
    for point in points:
        print(f"  {point}", flush=True)
    result.not_run += points
    if points:
        result.not_run_file = save_not_run(result.not_run, out, started_at)


def require_every_setting(result: SweepResult, settings: Sequence[int]) -> None:
    """Raise a clear error, naming what was not run and why, unless each setting has a run with
    at least one finished request: the lab's comparison needs them all.

    >>> require_every_setting(SweepResult(), (8, 64))
    Traceback (most recent call last):
    ...
    helpers.errors.CourseError: The comparison needs a finished run at max_num_seqs=8, 64, and there is none. ...
    """
    measured = {run.max_num_seqs for run in result.runs if run.summary.num_ok}
    missing = [setting for setting in settings if setting not in measured]
    if missing:
        raise CourseError(
            f"The comparison needs a finished run at max_num_seqs={', '.join(map(str, missing))}, and there is none. "
            + (result.describe_not_run() or "") + " What was measured is saved; run this cell again to measure anew.")


def describe_run(run: LoadTestRun, detail: bool = False) -> str:
    """One line per run: requests and errors; ``detail`` (scripts/lab_sweep.py) adds the wall time, throughput,
    latencies and how busy the machine was. The lab's line leaves all of those out: its questions ask the learner for
    them, from the records, below this output, and the wall time gives two of them away (when every request is sent at
    once the p95 latency ends near it, and output tokens over it is the throughput).

    >>> from helpers.load.client import RequestRecord
    >>> from helpers.load.run import LoadTestRun, ServerFacts
    >>> records = [RequestRecord(0, ok=True, output_tokens=64, send_s=0.0, ttft_s=1.0, e2e_s=4.0, done_s=4.0)]
    >>> run = LoadTestRun("x", {"load_avg_1m_at_start": 0.5}, ServerFacts("smollm2"), "CPU: 2 cores", "", 4.0, records)
    >>> print(describe_run(run))
      1 of 1 requests ok, errors 0
    >>> print(describe_run(run, detail=True))
      1 of 1 requests ok, wall 4.0 s, errors 0; 16.0 output tok/s, p50 / p95 e2e 4.0 / 4.0 s, load avg 0.5, other servers 0
    """
    s = run.summary
    if not detail:
        return f"  {s.num_ok} of {s.num_requests} requests ok, errors {s.num_errors}"
    line = f"  {s.num_ok} of {s.num_requests} requests ok, wall {s.wall_s:.1f} s, errors {s.num_errors}"
    if s.output_tok_per_s is not None and s.e2e_p50_s is not None:
        line += f"; {s.output_tok_per_s:.1f} output tok/s, p50 / p95 e2e {s.e2e_p50_s:.1f} / {s.e2e_p95_s:.1f} s"
    return line + (f", load avg {run.settings.get('load_avg_1m_at_start')}, "
                   f"other servers {run.settings.get('other_vllm_servers_at_start', 0)}")


def start_with_retries(max_num_seqs: int, attempts: int, quiet: bool, **settings: Any) -> Any:
    """A started server, after up to ``attempts`` tries; the last failure is raised."""
    attempt = 1
    while True:
        try:
            return start_server(max_num_seqs=max_num_seqs, quiet=quiet, **settings)
        except START_ERRORS as error:
            if attempt >= attempts:
                raise
            print(f"  start failed ({getattr(error, 'cause', type(error).__name__)}), "
                  f"attempt {attempt} of {attempts}", flush=True)
            time.sleep(RETRY_WAIT_S)
            attempt += 1
