"""Does a decode step of the same batch cost the same on servers started with different ``max_num_seqs``?

Notebook 04 fits its step clock on a server with 64 slots and predicts lab 1's throughput at 8 and at 64 from it.
On the H200 (SmolLM2, 2026-12-03) the lab's time per output token at 8 slots was 2.68-2.89 ms, against 2.4 ms for a
decode step of 8 on the clock's 64-slot server, and the prediction missed the lab's 64/8 ratio by 19%. One candidate:
a server's CUDA graphs are captured for batch sizes up to about twice its ``max_num_seqs``, so an 8-slot server runs
eagerly every step with a prompt chunk in it. This script times the same decode batches (and the prefill pair) on
servers that differ only in ``max_num_seqs``, the settings taking turns ``--rounds`` times, so the difference is
measured rather than argued. It prints the per-step milliseconds of each decode batch on each server and writes
them, with the machine, to ``--out`` (default ``build/step_clock_slots.json``):

    .venv/bin/python scripts/bench_step_clock_slots.py --settings 8,64 --rounds 2

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


async def one_server(max_num_seqs: int, batch_sizes: tuple[int, ...], output_len: int) -> dict:
    """Start a server with ``max_num_seqs`` slots, time its decode batches and prefill pair, stop it."""
    with start_server(max_num_seqs=max_num_seqs, quiet=True) as server:
        data = await measure_step_times(server, batch_sizes=batch_sizes, output_len=output_len, prompt_len=256,
                                        prefill_len=512, repeats=3)
        fit = data.fit()
        return {"max_num_seqs": max_num_seqs, "device": server.device, "ready_s": round(server.startup_seconds, 1),
                "step_ms": {m.label: round(m.seconds * 1e3, 4) for m in data.measurements},
                "clock": {"overhead_ms": round(fit.overhead_s * 1e3, 4),
                          "prefill_token_ms": round(fit.prefill_token_s * 1e3, 5),
                          "decode_seq_ms": round(fit.decode_seq_s * 1e3, 5),
                          "max_num_batched_tokens": fit.max_num_batched_tokens}}


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
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
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
            servers.append(asyncio.run(one_server(seqs, batches, output_len)))
            steps = ", ".join(f"{label} {ms:.3f} ms" for label, ms in servers[-1]["step_ms"].items())
            print(f"  round {round_index + 1}: max_num_seqs={seqs} (ready in {servers[-1]['ready_s']} s): {steps}",
                  flush=True)
    table = summary(servers)
    print(f"\n{'measurement (median ms)':<24}" + "".join(f"{f'max_num_seqs={s}':>18}" for s in settings))
    for label, row in table.items():
        print(f"{label:<24}" + "".join(f"{row.get(str(s), float('nan')):>18.3f}" for s in settings))
    result = {"machine": machine, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "settings": settings, "decode_batches": list(batches), "output_len": output_len,
              "summary_ms": table, "servers": servers}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, json.dumps(result, indent=1) + "\n")
    print(f"saved: {out}")


if __name__ == "__main__":
    main()
