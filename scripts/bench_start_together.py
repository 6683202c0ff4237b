"""What starting servers together saves: lab 1's two servers started one after the other, then together.

``helpers.serve.together.start_together`` launches several servers at once on a CPU. This script starts lab 1's
two servers (``max_num_seqs`` 8 and 64, each with the KV pool ``helpers.lab.side_by_side.lab_kv_gib`` gives
them) ``--rounds`` times each way, alternating: one after the other (two ``start()`` calls) and together. It
records the wall time until both are ready and each server's own ``startup_seconds``, prints medians, and writes
them with the machine to ``--out`` (default ``build/start_together.json``); committed runs are in ``results/cpu/``:

    .venv/bin/python scripts/bench_start_together.py --out results/cpu/start_together-DATE.json

``--servers 3`` adds a third (``max_num_seqs`` 2), as lab 2 starts its three on a CPU, and ``--kv-gib`` gives every
server another pool (lab 2's 0.5 GiB; notebook 05's pairs have the course's default, 2 GiB). ``--blocks 0`` leaves
out the check below.

Then it checks what lab 1 assumes when its two servers are up at once: that the idle one costs the measured one
nothing. On the 8-slot server it runs lab-sized loads (50 requests, ``--output-tokens`` each) in blocks of two, with
the 64-slot server stopped and with it up and idle, ``--blocks`` times each, the order flipped every time, and
prints both sets of output tok/s.

About 8 minutes on a quiet 2-core machine with the default 2 rounds; run it with no other vLLM server running and
nothing else busy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from helpers.files import write_atomically
from helpers.hardware import describe_machine
from helpers.lab.side_by_side import lab_kv_gib
from helpers.lab.sweep import SweepPlan
from helpers.load.pace import LAB_OUTPUT_TOKENS
from helpers.load.run import run_load_test
from helpers.load.workload import build_workload
from helpers.paths import build_dir
from helpers.serve.server import VLLMServer, start_server
from helpers.serve.together import start_together

SETTINGS = (8, 64)
THIRD = 2  # max_num_seqs of a third server (--servers 3): lab 2's smaller setting on a CPU


def start_all(together: bool, pool_gib: float, count: int = 2) -> dict:
    """Start ``count`` servers one way, stop them; the wall time until all were ready and each one's start."""
    servers = [VLLMServer(max_num_seqs=n, kv_cache_space_gib=pool_gib) for n in (*SETTINGS, THIRD)[:count]]
    began = time.monotonic()
    try:
        if together:
            start_together(servers, quiet=True)
        else:
            for server in servers:
                server.start(quiet=True)
        wall_s = time.monotonic() - began
        device = servers[0].device
    finally:
        for server in servers:
            server.stop()
    return {"together": together, "both_ready_s": round(wall_s, 1), "device": device,
            "startup_s": [round(s.startup_seconds, 1) for s in servers]}


async def idle_neighbour(blocks: int, pool_gib: float, output_tokens: int, loads_per_block: int = 2) -> dict:
    """Output tok/s of lab-sized loads on the 8-slot server, alone and with the 64-slot server up and idle: in
    ``blocks`` pairs of blocks of ``loads_per_block`` loads, the order of each pair flipped."""
    tok_s: dict[str, list[float]] = {"alone": [], "beside an idle server": []}
    seed = 0

    async def one_load(server: VLLMServer) -> float:
        nonlocal seed
        workload = build_workload(server, num_requests=50, output_tokens=output_tokens, seed=seed)
        seed += 1
        return round((await run_load_test(server, workload, progress=False)).summary.output_tok_per_s, 1)

    with start_server(max_num_seqs=SETTINGS[0], kv_cache_space_gib=pool_gib, quiet=True) as measured:
        await one_load(measured)  # untimed: the first load of a fresh server is the slow one
        for block in range(blocks):
            for way in (("alone", "beside an idle server") if block % 2 == 0 else ("beside an idle server", "alone")):
                if way == "alone":
                    values = [await one_load(measured) for _ in range(loads_per_block)]
                else:
                    with start_server(max_num_seqs=SETTINGS[1], kv_cache_space_gib=pool_gib, quiet=True):
                        values = [await one_load(measured) for _ in range(loads_per_block)]
                tok_s[way] += values
                print(f"  block {block + 1}, {way}: {', '.join(map(str, values))} output tok/s", flush=True)
    return {"output_tokens": output_tokens, "loads_per_block": loads_per_block, "output_tok_per_s": tok_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="pairs of starts each way, the ways alternating")
    parser.add_argument("--blocks", type=int, default=3, help="pairs of blocks (alone, beside) in the idle-neighbour check")
    parser.add_argument("--output-tokens", type=int, default=56, help="per request, in the idle-neighbour check")
    parser.add_argument("--servers", type=int, default=2, choices=(2, 3), help="servers started each way")
    parser.add_argument("--kv-gib", type=float, default=None, help="every server's KV pool (default: lab 1's)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if min(args.rounds, args.output_tokens) < 1 or args.blocks < 0:
        parser.error("--rounds and --output-tokens take at least 1, --blocks at least 0")
    out = args.out or build_dir() / "start_together.json"
    machine = describe_machine()
    pool_gib = args.kv_gib or lab_kv_gib(SweepPlan(2, 50, LAB_OUTPUT_TOKENS["cpu"]))
    settings = (*SETTINGS, THIRD)[:args.servers]
    print(f"{machine}: servers {settings}, {pool_gib:g} GiB of KV pool each, {args.rounds} rounds", flush=True)
    starts = []
    for round_index in range(args.rounds):
        for together in ((False, True) if round_index % 2 == 0 else (True, False)):
            starts.append(start_all(together, pool_gib, args.servers))
            way = "together" if together else "one after the other"
            print(f"  round {round_index + 1}, {way}: all ready in {starts[-1]['both_ready_s']} s "
                  f"(each {starts[-1]['startup_s']} s)", flush=True)
    medians = {way: round(statistics.median(s["both_ready_s"] for s in starts if s["together"] == (way == "together")), 1)
               for way in ("one after the other", "together")}
    saved = medians["one after the other"] - medians["together"]
    print(f"\nall ready (median): one after the other {medians['one after the other']} s, together "
          f"{medians['together']} s: {saved:.1f} s saved ({saved / medians['one after the other']:.0%})")
    neighbour = None
    if args.blocks:
        print("the 8-slot server's load, alone and beside the 64-slot server up and idle:", flush=True)
        neighbour = asyncio.run(idle_neighbour(args.blocks, pool_gib, args.output_tokens))
        for way, values in neighbour["output_tok_per_s"].items():
            print(f"  {way}: median {statistics.median(values):.1f} output tok/s ({', '.join(map(str, values))})")
    result = {"machine": machine, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "servers": {"max_num_seqs": list(settings), "kv_cache_space_gib": pool_gib,
                          "model": "the course's default"},
              "median_both_ready_s": medians, "starts": starts, "idle_neighbour": neighbour}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, json.dumps(result, indent=1) + "\n")
    print(f"saved: {out}")


if __name__ == "__main__":
    main()
