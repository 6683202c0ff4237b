"""Does the server's prefill clock agree with the client's? Prefills timed on both at once, alone and in groups.

Notebook 04 fits the prefill term of its step clock from two lone prompts timed on vLLM's
``request_prefill_time_seconds``. On the H200 (vLLM 0.26, 2026-12-05) that clock read 0.8 ms for 768 more
prompt tokens on Llama-3.1-8B's shape; this script's first GPU run showed the client's clock reading the same
(``results/gpu/README.md``): a lone prompt of 256-1,536 tokens takes 31-38 ms there whatever its length on vLLM's clock
(37-46 ms on the client's).
This script starts one server, sends prompts of each ``--lengths`` alone and in each ``--groups`` size at
once (one output token each, ``--repeats`` times, the order flipped every repeat), and prints each shape's
median on the server's clock and on the client's (the group's last first token), with each clock's slope
between the fewest and the most prompt tokens. It writes them, with the machine, the server's step budget
and the raw timings, to ``--out`` (default ``build/prefill_clocks.json``).

    .venv/bin/python scripts/bench_prefill_clocks.py --max-num-seqs 64 --lengths 32,256,1024,1536
    VLLM_COURSE_MODEL=dummy:llama-3.1-8b .venv/bin/python scripts/bench_prefill_clocks.py   # on a GPU
    ... --lengths 1024 --groups 1,2,8   # one prompt against groups that fill a GPU's step budget (8,192)

One server start; run it with no other vLLM server on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from helpers.batching.prefill_clocks import CLOCKS, prefill_shapes, time_prefills
from helpers.errors import InvalidArgumentError
from helpers.files import write_atomically
from helpers.hardware import describe_machine
from helpers.paths import build_dir
from helpers.serve.budget import step_budget
from helpers.serve.server import VLLMServer


async def measure(max_num_seqs: int, lengths: list[int], repeats: int, groups: list[int]) -> dict:
    """Start the server, time the prefills, stop it; the result as JSON data. Prompts that would not fit the
    server's max_model_len are refused before it starts."""
    server = VLLMServer(max_num_seqs=max_num_seqs)
    too_long = [n for n in lengths if n >= server.config.max_model_len]
    if too_long:
        raise SystemExit(f"--lengths {too_long} do not fit max_model_len={server.config.max_model_len} with "
                         "their one output token: pass shorter prompts.")
    with server.start(quiet=True):
        budget = step_budget(server.log_text())
        print(f"step budget: {budget or 'not in the log'}", flush=True)
        clocks = await time_prefills(server, lengths, repeats, groups=groups)
        print(clocks.table(), flush=True)
        if clocks.failed:
            print(f"{clocks.failed} send(s) had a failed request and are left out; the server's log: {server.log_path}")
        return {"model": server.model_name, "device": server.device, "max_num_seqs": max_num_seqs,
                "step_budget_tokens": budget.tokens if budget else None,
                "ready_s": round(server.startup_seconds, 1),
                "slope_us_a_token": {clock: None if (s := clocks.slope_s(clock)) is None else round(s * 1e6, 3)
                                     for clock in CLOCKS},
                "timings_s": asdict(clocks)}


def _positive_list(parser: argparse.ArgumentParser, name: str, text: str) -> list[int]:
    try:
        values = sorted({int(n) for n in text.split(",")})
    except ValueError:
        parser.error(f"{name} takes positive whole numbers, comma-separated (e.g. 32,1024); got {text!r}")
    if values[0] < 1:
        parser.error(f"{name} takes positive whole numbers; got {text!r}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--lengths", default="32,256,1024,1536", help="prompt lengths in tokens, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--groups", default="1", help="how many prompts of each length go at once, comma-separated")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lengths, groups = (_positive_list(parser, name, text) for name, text in (("--lengths", args.lengths),
                                                                            ("--groups", args.groups)))
    if len(lengths) * len(groups) < 2 or args.repeats < 1 or args.max_num_seqs < 1:
        parser.error("--lengths and --groups must make two or more shapes to compare (e.g. --lengths 32,1024, or "
                     "--lengths 1024 --groups 1,8); --repeats and --max-num-seqs at least 1")
    if groups[-1] > args.max_num_seqs:
        parser.error(f"--groups {groups[-1]} is more prompts than --max-num-seqs {args.max_num_seqs} runs at once: "
                     "the rest would wait, and the wait is not a prefill")
    try:
        prefill_shapes(lengths, groups)  # refused here, before the server starts, rather than after
    except InvalidArgumentError as error:
        parser.error(str(error))
    machine = describe_machine()
    print(f"{machine}: prompts of {lengths} tokens in groups of {groups}, {args.repeats} times each", flush=True)
    result = {"machine": machine, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "lengths": lengths, "groups": groups, "repeats": args.repeats,
              **asyncio.run(measure(args.max_num_seqs, lengths, args.repeats, groups))}
    out = args.out or build_dir() / "prefill_clocks.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, json.dumps(result, indent=1) + "\n")
    print(f"saved: {out}")


if __name__ == "__main__":
    main()
