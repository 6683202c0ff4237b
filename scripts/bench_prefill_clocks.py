"""Does the server's prefill clock agree with the client's? Lone prompts timed on both at once.

Notebook 04 fits the prefill term of its step clock from two lone prompts timed on vLLM's
``request_prefill_time_seconds``. On the H200 (vLLM 0.26, 2026-12-05) that clock read 0.98 us a prompt
token on Llama-3.1-8B's shape, too little for an 8B model by an order of magnitude, and nothing at all on
8-slot servers (``results/gpu/README.md``). This script starts one server, sends lone prompts of each
``--lengths`` (one output token each, ``--repeats`` times, the order flipped every repeat), and prints
each length's median on the server's clock and on the client's time to first token, with each clock's
slope between the shortest and the longest. It writes them, with the machine and the raw timings, to
``--out`` (default ``build/prefill_clocks.json``).

    .venv/bin/python scripts/bench_prefill_clocks.py --max-num-seqs 64 --lengths 32,256,1024,1536
    VLLM_COURSE_MODEL=dummy:llama-3.1-8b .venv/bin/python scripts/bench_prefill_clocks.py   # on a GPU

One server start; run it with no other vLLM server on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from helpers.batching.prefill_clocks import CLOCKS, time_lone_prompts
from helpers.files import write_atomically
from helpers.hardware import describe_machine
from helpers.paths import build_dir
from helpers.serve.server import VLLMServer


async def measure(max_num_seqs: int, lengths: list[int], repeats: int) -> dict:
    """Start the server, time the lone prompts, stop it; the result as JSON data. Prompts that would not fit the
    server's max_model_len are refused before it starts."""
    server = VLLMServer(max_num_seqs=max_num_seqs)
    too_long = [n for n in lengths if n >= server.config.max_model_len]
    if too_long:
        raise SystemExit(f"--lengths {too_long} do not fit max_model_len={server.config.max_model_len} with "
                         "their one output token: pass shorter prompts.")
    with server.start(quiet=True):
        clocks = await time_lone_prompts(server, lengths, repeats)
        print(clocks.table(), flush=True)
        if clocks.failed:
            print(f"{clocks.failed} request(s) failed and are left out; the server's log: {server.log_path}")
        return {"model": server.model_name, "device": server.device, "max_num_seqs": max_num_seqs,
                "ready_s": round(server.startup_seconds, 1),
                "slope_us_a_token": {clock: None if (s := clocks.slope_s(clock)) is None else round(s * 1e6, 3)
                                     for clock in CLOCKS},
                "timings_s": asdict(clocks)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--lengths", default="32,256,1024,1536", help="prompt lengths in tokens, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    try:
        lengths = sorted({int(n) for n in args.lengths.split(",")})
    except ValueError:
        parser.error(f"--lengths takes prompt lengths in tokens, comma-separated (e.g. 32,1024); got {args.lengths!r}")
    if len(lengths) < 2 or lengths[0] < 1 or args.repeats < 1 or args.max_num_seqs < 1:
        parser.error("--lengths takes two or more positive lengths; --repeats and --max-num-seqs at least 1")
    machine = describe_machine()
    print(f"{machine}: lone prompts of {lengths} tokens, {args.repeats} times each", flush=True)
    result = {"machine": machine, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "lengths": lengths, "repeats": args.repeats,
              **asyncio.run(measure(args.max_num_seqs, lengths, args.repeats))}
    out = args.out or build_dir() / "prefill_clocks.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, json.dumps(result, indent=1) + "\n")
    print(f"saved: {out}")


if __name__ == "__main__":
    main()
