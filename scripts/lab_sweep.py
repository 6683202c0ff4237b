"""The lab's sweep: the same load test at max_num_seqs 1, 2, 4, 8, 16, 32, 64, one server start each.

Writes one JSON file per run (helpers.lab.results format, raw records included) to the output
folder and prints the pooled table. The committed reference results in results/cpu/ were
made with the defaults:

    .venv/bin/python scripts/lab_sweep.py --out results/cpu/sweep

About 17 minutes on a quiet 2-core CPU machine (max_num_seqs=1 alone takes 2 x 130 s); run it when no other vLLM server is running
(the script says how many it saw and the load average, and records both in every file).

If a server dies mid-sweep (or will not start), what was measured is kept and saved, the load
tests that could not run are listed with their reason (and saved in <start>-not-run.json), and
the script exits with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

from helpers.errors import InvalidArgumentError
from helpers.hardware import other_vllm_servers
from helpers.lab.sweep import SWEEP_SETTINGS, SweepPlan, check_sweep, default_max_model_len, run_sweep
from helpers.lab.table import format_table, runs_table
from helpers.load.workload import DEFAULT_NUM_REQUESTS, DEFAULT_OUTPUT_TOKENS
from helpers.paths import build_dir

START_ATTEMPTS = 2  # a shared machine: a port race or memory still held by a stopping server
POOLED_COLUMNS = ("max_num_seqs", "run", "wall_s", "output_tok_per_s", "output_tok_per_s_min",
                  "output_tok_per_s_max", "e2e_p50_s", "e2e_p95_s", "ttft_p50_s", "ttft_p95_s",
                  "tpot_mean_ms", "peak_generating", "num_errors")


def _positive_int_arg(text: str) -> int:
    """argparse type: a positive integer; argparse names the option in its message when it is not."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", type=_positive_int_arg, nargs="+", default=list(SWEEP_SETTINGS),
                        help="max_num_seqs values")
    parser.add_argument("--repetitions", type=_positive_int_arg, default=2,
                        help="load tests per server start (fresh prompts)")
    parser.add_argument("--num-requests", type=_positive_int_arg, default=DEFAULT_NUM_REQUESTS)
    parser.add_argument("--output-tokens", type=_positive_int_arg, default=DEFAULT_OUTPUT_TOKENS)
    parser.add_argument("--out", type=Path, default=None, help="folder for the JSON files (default build/lab/sweep)")
    args = parser.parse_args(argv)
    plan = SweepPlan(repetitions=args.repetitions, num_requests=args.num_requests, output_tokens=args.output_tokens)
    try:
        check_sweep(args.settings, plan, default_max_model_len())
    except InvalidArgumentError as error:
        parser.error(str(error))
    out = args.out or build_dir("lab", "sweep")
    out.mkdir(parents=True, exist_ok=True)
    print(f"sweep {args.settings} x {args.repetitions} runs -> {out}; other vLLM servers now: "
          f"{other_vllm_servers()}, load average {os.getloadavg()[0]:.2f}", flush=True)
    began = time.monotonic()
    result = asyncio.run(run_sweep(args.settings, plan, out, attempts=START_ATTEMPTS, quiet=True))
    print(f"\ndone in {time.monotonic() - began:.0f} s\n")
    print(format_table(runs_table(result.runs, pooled=True), POOLED_COLUMNS), flush=True)
    if result.not_run:
        print(f"\nlab_sweep: the sweep is incomplete. {result.describe_not_run()}\n"
              f"What was measured is saved in {out}; the load tests not run are listed in {result.not_run_file}.",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
