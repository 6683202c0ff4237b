"""Does a decode step of the same batch cost the same on servers started with different ``max_num_seqs``?

Notebook 04 fits its step clock on a server with 64 slots and predicts lab 1's throughput at 8 and at 64 from it.
On the H200 (SmolLM2, 2026-12-03) the lab's time per output token at 8 slots was 2.68-2.89 ms, against 2.4 ms for a
decode step of 8 on the clock's 64-slot server, and the prediction missed the lab's 64/8 ratio by 19%. The first
candidate (a server's CUDA graphs cover steps of up to twice its ``max_num_seqs``, so an 8-slot server would run
every step with a prompt chunk in it eagerly) did not hold up: see below. This script times the same decode batches (and the prefill pair) on
servers that differ only in ``max_num_seqs``, the settings taking turns ``--rounds`` times, so the difference is
measured rather than argued. It prints the per-step milliseconds of each decode batch on each server and writes
them, with the machine, to ``--out`` (default ``build/step_clock_slots.json``).

Its first run (H200, 2026-12-04, ``results/gpu/step_clock_slots.json``) found the 8-slot server's decode steps the
faster ones (1.95 against 2.38 ms for 8 sequences), and a prefill pair of 32 and 512 tokens 14.7 ms apart on the
64-slot server against 2.0 ms on the 8-slot one: vLLM captures CUDA graphs for steps of up to
min(2 x max_num_seqs, 512) tokens, so on the 64-slot server the 32-token step runs in a graph and the 512-token one
does not. ``--prefill-pairs`` times other pairs beside it, e.g. one above every server's graph sizes:

    .venv/bin/python scripts/bench_step_clock_slots.py --settings 8,64 --rounds 2 --prefill-pairs 32:512,256:1024

Each server answers one short warm-up request first (``measure_step_times`` does), and its timings are medians of
three rounds or more. Four server starts with the defaults; run it with no other vLLM server on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from datetime import datetime, timezone
from pathlib import Path

from helpers.batching.measure import measure_step_times
from helpers.files import write_atomically
from helpers.hardware import describe_machine, detect_device
from helpers.paths import build_dir
from helpers.serve.server import start_server


async def one_server(max_num_seqs: int, batch_sizes: tuple[int, ...], output_len: int,
                     prefill_pairs: list[tuple[int, int]]) -> dict:
    """Start a server with ``max_num_seqs`` slots, time its decode batches and each prefill pair, stop it.

    ``clock`` is the fit with the first pair, ``clocks`` the fit with each pair ("SHORT:LONG")."""
    with start_server(max_num_seqs=max_num_seqs, quiet=True) as server:
        step_ms, clocks = {}, {}
        for short, long in prefill_pairs:
            data = await measure_step_times(server, batch_sizes=batch_sizes, output_len=output_len, prompt_len=256,
                                            prefill_len=long, short_prefill_len=short, repeats=3)
            for m in data.measurements:  # the decode batches of the first pair; every pair's prefill
                step_ms.setdefault(m.label, round(m.seconds * 1e3, 4))
            fit = data.fit()
            clocks[f"{short}:{long}"] = {"overhead_ms": round(fit.overhead_s * 1e3, 4),
                                         "prefill_token_ms": round(fit.prefill_token_s * 1e3, 5),
                                         "decode_seq_ms": round(fit.decode_seq_s * 1e3, 5),
                                         "max_num_batched_tokens": fit.max_num_batched_tokens}
        return {"max_num_seqs": max_num_seqs, "device": server.device, "ready_s": round(server.startup_seconds, 1),
                "step_ms": step_ms, "clock": next(iter(clocks.values())), "clocks": clocks}


def parse_prefill_pairs(text: str) -> list[tuple[int, int]]:
    """``"32:512,256:1024"`` -> ``[(32, 512), (256, 1024)]``; each pair a shorter and a longer prompt.

    >>> parse_prefill_pairs("32:512")
    [(32, 512)]
    """
    pairs = []
    for item in text.split(","):
        short, sep, long = item.partition(":")
        if not (sep and short.strip().isdigit() and long.strip().isdigit()) or not 0 < int(short) < int(long):
            raise ValueError(f"--prefill-pairs takes SHORT:LONG prompt lengths in tokens, 0 < SHORT < LONG, "
                             f"comma-separated (e.g. 32:512,256:1024); got {item!r}")
        pairs.append((int(short), int(long)))
    return pairs


def summary(servers: list[dict]) -> dict[str, dict[str, float]]:
    """Median milliseconds of each measurement, per ``max_num_seqs``: {label: {"8": ms, "64": ms}}."""
    table: dict[str, dict[str, float]] = {}
    for label in servers[0]["step_ms"]:
        for seqs in sorted({s["max_num_seqs"] for s in servers}):
            values = [s["step_ms"][label] for s in servers if s["max_num_seqs"] == seqs and label in s["step_ms"]]
            if values:
                table.setdefault(label, {})[str(seqs)] = round(statistics.median(values), 4)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default="8,64", help="max_num_seqs values, comma-separated")
    parser.add_argument("--batches", default="1,8", help="decode batch sizes timed on every server (each at most "
                                                         "the smallest setting)")
    parser.add_argument("--output-len", type=int, default=None,
                        help="tokens per timed decode request (default: 256 on a GPU, 32 on a CPU)")
    parser.add_argument("--rounds", type=int, default=2, help="servers per setting, the settings taking turns")
    parser.add_argument("--prefill-pairs", default="32:512",
                        help="prompt lengths SHORT:LONG whose prefill steps are timed against each other, "
                             "comma-separated; on a GPU keep a pair above the server's CUDA-graph sizes "
                             "(min(2 x max_num_seqs, 512) tokens) beside the default, e.g. 32:512,256:1024")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    try:
        prefill_pairs = parse_prefill_pairs(args.prefill_pairs)
    except ValueError as bad:
        parser.error(str(bad))
    settings = [int(s) for s in args.settings.split(",")]
    batches = tuple(int(b) for b in args.batches.split(","))
    if len(settings) < 2 or min(settings) < 1 or not batches or max(batches) > min(settings) or args.rounds < 1:
        parser.error("--settings takes two or more positive max_num_seqs, --batches sizes up to the smallest of them, "
                     "--rounds at least 1")
    output_len = args.output_len or (256 if detect_device() == "cuda" else 32)
    out = args.out or build_dir() / "step_clock_slots.json"
    machine = describe_machine()
    print(f"{machine}: {len(settings) * args.rounds} servers, decode batches {batches}, {output_len} tokens each",
          flush=True)
    servers = []
    for round_index in range(args.rounds):
        for seqs in settings:
            servers.append(asyncio.run(one_server(seqs, batches, output_len, prefill_pairs)))
            steps = ", ".join(f"{label} {ms:.3f} ms" for label, ms in servers[-1]["step_ms"].items())
            print(f"  round {round_index + 1}: max_num_seqs={seqs} (ready in {servers[-1]['ready_s']} s): {steps}",
                  flush=True)
    table = summary(servers)
    print(f"\n{'measurement (median ms)':<24}" + "".join(f"{f'max_num_seqs={s}':>18}" for s in settings))
    for label, row in table.items():
        print(f"{label:<24}" + "".join(f"{row.get(str(s), float('nan')):>18.3f}" for s in settings))
    result = {"machine": machine, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "settings": settings, "decode_batches": list(batches), "output_len": output_len,
              "prefill_pairs": [f"{short}:{long}" for short, long in prefill_pairs],
              "summary_ms": table, "servers": servers}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, json.dumps(result, indent=1) + "\n")
    print(f"saved: {out}")


if __name__ == "__main__":
    main()
