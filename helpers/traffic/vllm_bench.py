"""`vllm bench serve` at one request rate on the lab's own server: its figures beside the course tester's.

Most published serving numbers come from vLLM's benchmark tool, so lab 2 runs it once, on the server
it has just swept, at one of the sweep's rates: the same prompt mix (the course's prompts, written
as the ShareGPT file its ``--dataset-name sharegpt`` reads), the same output length
(``--ignore-eos``), the same arrival times (``--request-rate``, ``--burstiness`` and ``--seed``: the
course draws its gaps as the tool does, so a sweep's rate run with seed S and the tool's run with
``--seed S`` send at the same moments), and the same SLO (``--goodput``). Its per-request records
are summarized by the course's own code into a :class:`~helpers.traffic.rates.RatePoint`, so both
columns follow one set of definitions; vLLM's own aggregates stand beside them under the names its
report prints. Same arrivals are not the same run: the server meets each in another state (the
sweep's first rate, usually, on a fresh server, the tool's after the overloaded ones).
scripts/bench_vs_vllm.py is the controlled comparison (alternating pairs, hundreds of requests),
whose results are recorded in ``results/``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from helpers import validate
from helpers.files import write_atomically
from helpers.hardware import describe_machine, detect_cpu
from helpers.load.workload import LAB_PROMPT_LENS, build_workload
from helpers.paths import course_pythonpath
from helpers.traffic.rates import RatePoint, rate_point
from helpers.traffic.sweep import check_rates, check_slo, check_up

if TYPE_CHECKING:
    from helpers.load.run import LoadTestRun

ROOT = Path(__file__).resolve().parents[2]
RESTART = ("run the cell that starts the server again (in lab 2, section 2's sweep, which leaves the smaller "
           "setting's server up for this cell), then this cell")
# Lab 2's cell stops its server once the tool has run, so a second run of that cell meets None or a stopped server.
STOPPED_HERE = f"this cell stopped its server when it finished, so a second run needs it back: {RESTART}"
# (the course's words, the attribute of a RatePoint, its scale to the unit shown, vLLM's key, vLLM's report line)
ROWS = (
    ("output tokens/s", "output_tok_per_s", 1, "output_throughput", "Output token throughput (tok/s)"),
    ("total tokens/s (prompt + output)", "total_tok_per_s", 1, "total_token_throughput",
     "Total Token throughput (tok/s)"),
    ("TTFT p50 (ms)", "ttft_p50_s", 1e3, "median_ttft_ms", "Median TTFT (ms)"),
    ("TTFT p95 (ms)", "ttft_p95_s", 1e3, "p95_ttft_ms", "P95 TTFT (ms)"),
    ("TPOT p50 (ms)", "tpot_p50_ms", 1, "median_tpot_ms", "Median TPOT (ms)"),
    ("ITL p50 (ms)", "itl_p50_ms", 1, "median_itl_ms", "Median ITL (ms)"),
    ("end-to-end p50 (ms)", "e2e_p50_s", 1e3, "median_e2el_ms", "Median E2EL (ms)"),
    ("goodput (requests/s)", "goodput_per_s", 1, "request_goodput", "Request goodput (req/s)"),
)


@dataclass(frozen=True)
class BenchPoint:
    """One `vllm bench serve` run: its records summarized by the course, and vLLM's own figures."""

    point: RatePoint
    reported: dict[str, Any]  # vLLM's aggregates (helpers.traffic.bench_file.REPORTED), None where absent
    layout: str  # which result file layout was read: "0.32 layout (...)" or "0.26 layout (...)"
    tool_s: float  # the tool's whole run, its imports included
    result_path: Path


async def bench_at_rate(server: Any, rate: float, *, num_requests: int, burstiness: float = 1.0, slo: Any = None,
                        prompt_lens: tuple[int, ...] = LAB_PROMPT_LENS, output_tokens: int = 16,
                        folder: Path | str, timeout_s: float = 300.0, setting_label: str | None = None,
                        seed: int = 0) -> BenchPoint:
    """Run `vllm bench serve` against ``server`` at ``rate`` requests/s; read its result as a RatePoint.

    ``seed``: its arrivals are the course's ``arrival_times(num_requests, rate, burstiness, seed)``
    (0, a sweep's default: the same moments as that sweep's run at this rate and request count).

    Everything is checked before the tool starts: the server (the object, not None or its URL, and
    neither stopped nor dead), the rate and burstiness (positive, finite rate),
    ``num_requests`` and ``output_tokens`` (positive integers), ``seed``, the SLO (vLLM's spelling,
    milliseconds) and ``timeout_s``. The tool is stopped at ``timeout_s`` (or when the cell is
    interrupted), and a failure raises RuntimeError with the end of its log."""
    check_up(server, STOPPED_HERE)
    from helpers.serve.process import death_of

    if (death := death_of(server, wait_s=0)) is not None:  # the tool would only fail, after its imports
        raise RuntimeError(f"{death}: {RESTART}.")
    (rate,) = check_rates([rate], burstiness)  # finite: an infinite rate is lab 1's burst, not open loop
    num_requests = validate.positive_int(num_requests, "num_requests")
    output_tokens = validate.positive_int(output_tokens, "output_tokens")
    timeout_s = validate.positive_number(timeout_s, "timeout_s", unit="seconds")
    slo = check_slo(slo)
    seed = validate.non_negative_int(seed, "seed")
    from helpers.load.poller import scrape
    from helpers.load.run import server_facts
    from helpers.serve.model import resolve_model
    from helpers.traffic.bench_file import arrival_args, bench_serve_args, read_bench_result, sharegpt_prompts

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    workload = build_workload(server, num_requests=num_requests, prompt_lens=prompt_lens,
                              output_tokens=output_tokens, seed=7)  # fresh prompts: its own tag, nothing cached
    dataset, result = folder / "prompts-sharegpt.json", folder / "vllm-bench-serve.json"
    write_atomically(dataset, json.dumps(sharegpt_prompts(workload)))
    argv = [sys.executable, "-m", "helpers.traffic.vllm_cli", "bench", "serve",
            *bench_serve_args(server, workload, dataset, resolve_model(server.config.model).model, result,
                              arrival_args(rate, burstiness, seed, slo))]
    before = await asyncio.to_thread(scrape, server)
    began, started = time.monotonic(), datetime.now(timezone.utc)
    await _run_tool(argv, folder / "vllm-bench-serve.log", timeout_s)
    tool_s = time.monotonic() - began
    after = await asyncio.to_thread(scrape, server)
    read = read_bench_result(json.loads(result.read_text()))
    if read.records is None:
        raise RuntimeError(f"{result} has no per-request records: was it saved without --save-detailed?")
    run = bench_run(read.records, rate, burstiness, server_facts(server), started)
    label = setting_label or f"max_num_seqs={server.config.max_num_seqs}"
    point = rate_point(run, before, after, setting=label, offered_rate=rate, burstiness=burstiness, slo=slo)
    return BenchPoint(point, read.reported, read.layout, tool_s, result)


def bench_run(records: list[Any], rate: float, burstiness: float, server: Any, started: datetime) -> LoadTestRun:
    """The tool's records as a :class:`~helpers.load.run.LoadTestRun`, described as the course's own runs are:
    this machine (``describe_machine``) and its start in ISO 8601, UTC (a naive ``started`` is taken as local
    time), so a saved point says where and when it ran, whichever tool sent it.

    >>> run = bench_run([], 1.0, 1.0, {}, datetime(2026, 12, 3, 9, 30, 5, 123, tzinfo=timezone.utc))
    >>> run.started_at, run.hardware == describe_machine()
    ('2026-12-03T09:30:05+00:00', True)
    """
    from helpers.load.run import LoadTestRun  # at call time, as bench_at_rate imports the load room

    wall_s = max((r.done_s for r in records if r.done_s is not None), default=0.0)
    return LoadTestRun("vllm bench serve", {"request_rate": rate, "burstiness": burstiness}, server,
                       describe_machine(), started.astimezone(timezone.utc).isoformat(timespec="seconds"),
                       wall_s, list(records), cpu_cores=detect_cpu().cores)


async def _run_tool(argv: list[str], log_path: Path, timeout_s: float) -> None:
    """The tool as a child process with its output in ``log_path``; killed on timeout or interruption."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": course_pythonpath(os.environ)}
    with open(log_path, "w") as log:  # noqa: ASYNC230 - opening a local log file does not wait on anything
        process = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=asyncio.subprocess.STDOUT,
                                                       stdin=asyncio.subprocess.DEVNULL, env=env, cwd=ROOT)
        try:
            code = await asyncio.wait_for(process.wait(), timeout_s)
        except asyncio.TimeoutError:
            code = None
        finally:  # past the time bound, or in an interrupted cell: never leave it sending
            if process.returncode is None:
                process.kill()
                await process.wait()
    if code != 0:
        what = f"still running after {timeout_s:g} s" if code is None else f"exit code {code}"
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"vllm bench serve failed ({what}); the end of {log_path}:\n{tail}")


def beside_vllm_bench(ours: RatePoint, theirs: BenchPoint, slo: Any = None) -> str:
    """A Markdown table: each measure as the course's tester saw its run, as the course reads vLLM's tool's
    records, and as vLLM's tool reports its own run, under vLLM's name. ``slo``: the goodput row for the
    course's run too (a sweep point is measured before the SLO is chosen; its latencies say which requests met it)."""
    slo = check_slo(slo)
    if slo is not None and ours.ran and ours.wall_s:
        ours = replace(ours, goodput_per_s=ours.share_good(slo) * ours.num_requests / ours.wall_s)
    lines = [("| measure | course's tester | vllm bench serve, read by the course | vLLM's own figure | "
              "vLLM's name |"), "|---|---:|---:|---:|---|"]
    for words, attr, scale, key, vllm_name in ROWS:
        mine, read = getattr(ours, attr), getattr(theirs.point, attr)
        own = theirs.reported.get(key)
        if mine is None and read is None and own is None:
            continue
        lines.append(f"| {words} | {_fmt(mine, scale)} | {_fmt(read, scale)} | {_fmt(own, 1)} | {vllm_name} |")
    return "\n".join(lines)


def _fmt(value: float | None, scale: float) -> str:
    if value is None:
        return "n/a"
    shown = value * scale
    return f"{shown:,.0f}" if abs(shown) >= 100 else f"{shown:.3g}"
