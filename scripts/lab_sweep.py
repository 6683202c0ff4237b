"""The lab's sweep: the same load test at max_num_seqs 1, 2, 4, 8, 16, 32, 64, one server start each.

Writes one JSON file per run (helpers.lab.results format, raw records included) to the output
folder and prints the pooled table. The committed reference results in results/cpu/ were
made with the defaults:

    .venv/bin/python scripts/lab_sweep.py --out results/cpu/sweep

About 17 minutes on a quiet 2-core CPU machine (max_num_seqs=1 alone takes 2 x 130 s); run it when no other vLLM server is running
(the script says how many it saw and the load average, and records both in every file).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import psutil

from helpers import validate
from helpers.errors import InvalidArgumentError, NotEnoughMemoryError, PortInUseError, ServerStartError
from helpers.load.workload import DEFAULT_NUM_REQUESTS, DEFAULT_OUTPUT_TOKENS, LAB_PROMPT_LENS, build_workload
from helpers.load.run import run_load_test
from helpers.paths import build_dir
from helpers.lab.results import format_table, load_runs, runs_table, save_run
from helpers.serve.server import start_server

SETTINGS = (1, 2, 4, 8, 16, 32, 64)


def other_vllm_servers() -> int:
    """vLLM API servers running on this machine that this script did not start."""
    count = 0
    for proc in psutil.process_iter(["cmdline"]):
        if "vllm.entrypoints.openai.api_server" in " ".join(proc.info["cmdline"] or []):
            count += 1
    return count


def check_settings(settings: list[int], repetitions: int, num_requests: int, output_tokens: int,
                   max_model_len: int | None = None) -> None:
    """Refuse settings that could not make a sweep, before any server starts (``ValueError``).

    ``max_model_len``: the servers' context length, when known; the lab's longest prompt plus
    ``output_tokens`` must fit in it.
    """
    if not settings:
        raise InvalidArgumentError("settings must list at least one max_num_seqs value, got none.")
    for value in settings:
        validate.positive_int(value, "each max_num_seqs setting", hint="e.g. --settings 1 8 64.")
    validate.positive_int(repetitions, "repetitions", hint="It is how many load tests run per server start.")
    validate.positive_int(num_requests, "num_requests")
    validate.positive_int(output_tokens, "output_tokens")
    validate.fits_context(max(LAB_PROMPT_LENS) + output_tokens, max_model_len,
                          f"the lab's longest prompt ({max(LAB_PROMPT_LENS)} tokens) plus "
                          f"output_tokens={output_tokens}", "Pass fewer --output-tokens.")


def measure(max_num_seqs: int, repetitions: int, num_requests: int, output_tokens: int, out: Path,
            attempts: int = 2) -> list[Path]:
    """Start a server, run the load test `repetitions` times with fresh prompts, stop it."""
    check_settings([max_num_seqs], repetitions, num_requests, output_tokens)
    attempts = validate.positive_int(attempts, "attempts")
    for attempt in range(1, attempts + 1):
        others = other_vllm_servers()
        try:
            server = start_server(max_num_seqs=max_num_seqs, quiet=True)
        except (ServerStartError, PortInUseError, NotEnoughMemoryError) as error:
            # a port race or memory taken by other servers: wait and try again
            print(f"  start failed ({getattr(error, 'cause', type(error).__name__)}), "
                  f"attempt {attempt} of {attempts}", flush=True)
            if attempt == attempts:
                raise
            time.sleep(20)
            continue
        break
    paths = []
    with server:
        print(f"  server ready in {server.startup_seconds:.0f} s", flush=True)
        for repetition in range(repetitions):
            workload = build_workload(server, num_requests=num_requests, output_tokens=output_tokens, seed=repetition)
            run = asyncio.run(run_load_test(server, workload, progress=False, label=f"max_num_seqs={max_num_seqs}"))
            run.settings["other_vllm_servers_at_start"] = others
            summary = run.summary()
            paths.append(save_run(run, out))
            print(f"  run {repetition + 1}: {summary['output_tok_per_s']:.1f} tok/s, wall {summary['wall_s']:.1f} s, "
                  f"p95 e2e {summary['e2e_p95_s']:.1f} s, errors {summary['num_errors']}, "
                  f"load avg {run.settings['load_avg_1m_at_start']}, other servers {others}", flush=True)
    return paths


def _positive_int_arg(text: str) -> int:
    """argparse type: a positive integer; argparse names the option in its message when it is not."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _default_max_model_len() -> int | None:
    """The context length start_server() gives a server when none is passed (None if unknown)."""
    try:
        from helpers.serve.config import ServerConfig

        return int(ServerConfig.__dataclass_fields__["max_model_len"].default)
    except (ImportError, AttributeError, KeyError, TypeError, ValueError):
        return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", type=_positive_int_arg, nargs="+", default=list(SETTINGS),
                        help="max_num_seqs values")
    parser.add_argument("--repetitions", type=_positive_int_arg, default=2,
                        help="load tests per server start (fresh prompts)")
    parser.add_argument("--num-requests", type=_positive_int_arg, default=DEFAULT_NUM_REQUESTS)
    parser.add_argument("--output-tokens", type=_positive_int_arg, default=DEFAULT_OUTPUT_TOKENS)
    parser.add_argument("--out", type=Path, default=None, help="folder for the JSON files (default build/lab/sweep)")
    args = parser.parse_args(argv)
    try:
        check_settings(args.settings, args.repetitions, args.num_requests, args.output_tokens,
                       _default_max_model_len())
    except InvalidArgumentError as error:
        parser.error(str(error))
    out = args.out or build_dir("lab", "sweep")
    out.mkdir(parents=True, exist_ok=True)
    print(f"sweep {args.settings} x {args.repetitions} runs -> {out}; other vLLM servers now: "
          f"{other_vllm_servers()}, load average {os.getloadavg()[0]:.2f}", flush=True)
    began = time.monotonic()
    paths = []
    for seqs in args.settings:
        print(f"max_num_seqs={seqs}", flush=True)
        paths += measure(seqs, args.repetitions, args.num_requests, args.output_tokens, out)
    print(f"\ndone in {time.monotonic() - began:.0f} s\n")
    print(format_table(runs_table(load_runs(paths), pooled=True),
                       ("max_num_seqs", "run", "wall_s", "output_tok_per_s", "output_tok_per_s_min",
                        "output_tok_per_s_max", "e2e_p50_s", "e2e_p95_s", "ttft_p50_s", "ttft_p95_s",
                        "tpot_mean_ms", "peak_generating", "num_errors")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
