"""What a CPU server's KV pool costs its start: the same server started with pools of several sizes.

vLLM's CPU build takes its KV pool in bytes (``--kv-cache-memory-bytes``; the course gives 2 GiB unless told
otherwise) and sets it up inside "init engine (profile, create kv cache, warmup model)", whose seconds it logs.
This script starts the course's server (``max_num_seqs`` 4) with each pool size in turn, ``--rounds`` times
alternating, and records per start: seconds to ready, vLLM's own "init engine" seconds, and the pool in tokens.
It prints a table of medians and writes them, with the machine, to ``--out`` (default
``build/kv_pool_start.json``); the committed run is ``results/cpu/kv_pool_start.json``:

    .venv/bin/python scripts/bench_kv_pool_start.py --out results/cpu/kv_pool_start.json

About 4 minutes on a quiet 2-core machine (six starts); run it with no other vLLM server running. The tests use
the smallest of these pools wherever the pool plays no part in what they check (``tests/real_server.py``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from datetime import datetime, timezone
from pathlib import Path

from helpers.files import write_atomically
from helpers.hardware import describe_machine
from helpers.paths import build_dir
from helpers.serve.log import MILESTONES
from helpers.serve.server import start_server

# vLLM's own "init engine ... took N s" line, as the server's start-up milestones read it
INIT_ENGINE = re.compile(next(pattern for pattern, label in MILESTONES if label.startswith("engine initialised")))


def one_start(pool_gib: float) -> dict:
    """Start and stop one server with this pool; what the start cost."""
    with start_server(max_num_seqs=4, kv_cache_space_gib=pool_gib, quiet=True) as server:
        found = INIT_ENGINE.search(server.log_text())
        return {"pool_gib": pool_gib, "ready_s": round(server.startup_seconds, 1),
                "init_engine_s": float(found["secs"]) if found else None,
                "pool_tokens": server.kv_cache.num_tokens if server.kv_cache else None,
                "dtype": server.kv_cache.dtype if server.kv_cache else None}


def summary(starts: list[dict]) -> list[dict]:
    """Medians per pool size, smallest pool first."""
    rows = []
    for pool in sorted({s["pool_gib"] for s in starts}):
        mine = [s for s in starts if s["pool_gib"] == pool]
        inits = [s["init_engine_s"] for s in mine if s["init_engine_s"] is not None]
        rows.append({"pool_gib": pool, "starts": len(mine), "pool_tokens": mine[0]["pool_tokens"],
                     "ready_s_median": round(statistics.median(s["ready_s"] for s in mine), 1),
                     "init_engine_s_median": round(statistics.median(inits), 2) if inits else None})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pools", default="0.25,2", help="KV pool sizes in GiB, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="starts per pool size, the sizes alternating")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    pools = [float(p) for p in args.pools.split(",")]
    if not pools or any(p <= 0 for p in pools) or args.rounds < 1:
        parser.error("--pools takes positive sizes in GiB and --rounds at least 1")
    out = args.out or build_dir() / "kv_pool_start.json"
    machine = describe_machine()
    print(f"{machine}: {len(pools) * args.rounds} starts", flush=True)
    starts = []
    for round_index in range(args.rounds):
        for pool in pools:
            starts.append(one_start(pool))
            print(f"  round {round_index + 1}: {pool:g} GiB ready in {starts[-1]['ready_s']} s, "
                  f"init engine {starts[-1]['init_engine_s']} s", flush=True)
    rows = summary(starts)
    print(f"\n{'pool GiB':>8}  {'tokens':>8}  {'ready s (median)':>16}  {'init engine s (median)':>22}")
    for row in rows:
        print(f"{row['pool_gib']:>8g}  {row['pool_tokens'] or 0:>8,}  {row['ready_s_median']:>16}  "
              f"{row['init_engine_s_median']:>22}")
    if len(rows) > 1 and rows[0]["init_engine_s_median"] is not None and rows[-1]["init_engine_s_median"] is not None:
        per_gib = ((rows[-1]["init_engine_s_median"] - rows[0]["init_engine_s_median"])
                   / (rows[-1]["pool_gib"] - rows[0]["pool_gib"]))
        print(f"init engine: {per_gib:.1f} s more per GiB of pool")
    result = {"machine": machine, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "server": {"max_num_seqs": 4, "model": "the course's default"}, "summary": rows, "starts": starts}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, json.dumps(result, indent=1) + "\n")
    print(f"saved: {out}")


if __name__ == "__main__":
    main()
