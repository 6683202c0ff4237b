"""Lab 1's 64/8 ratio measured in alternating pairs on two servers up at once, against notebook 04's prediction.

On the H200 a step of SmolLM2 is mostly the host CPU's work (Python scheduling at 8 slots, the API server streaming
at 64), so lab 1's runs move with the host: on 2026-12-04 its five 8-slot runs were 2,297-3,375 output tok/s in two
groups, and its five 64-slot runs 10,480-15,542, and the session means of the ratio have been 3.2x-4.9x. Lab 1 runs
one setting's five loads, then the other's, on servers started one after the other, so a slow minute of the host
lands on one setting. Here both servers are up at once (each with a KV pool the lab fits in, not 92% of the GPU) and
the settings take turns, the order flipped every pair, so both sides see the same host: the ratio of each pair, and
their spread, say how steady the lab's ratio can be on this machine.

Before the pairs, each server is timed as notebook 04 times it on a GPU (``helpers.batching.fit_plan``): decode
batches and the prefill pair for its own clock, and on the 64-slot server the front end
(``helpers.batching.front_end``). The prediction is notebook 04's (``prediction_record`` with each setting's clock),
made before any pair runs.

    .venv/bin/python scripts/bench_lab_pairs.py --pairs 8 --out build/lab_pairs.json

Bounded: two servers on 127.0.0.1, each timed with a few dozen requests, then 2 x ``--pairs`` loads of the lab's 50
requests. Run it with no other vLLM server on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from helpers.batching.fit_plan import plan_step_fit, prefill_pair_for
from helpers.batching.front_end import measure_front_end
from helpers.batching.measure import measure_step_times
from helpers.batching.prediction import prediction_record
from helpers.batching.trace import lab_trace
from helpers.files import write_atomically
from helpers.hardware import describe_machine, detect_device
from helpers.load.pace import LAB_OUTPUT_TOKENS
from helpers.load.run import run_load_test
from helpers.load.warmup import warm_up
from helpers.load.workload import LAB_PROMPT_LENS, build_workload
from helpers.paths import build_dir
from helpers.serve.config import GPU_SHARE
from helpers.serve.server import VLLMServer
from helpers.serve.together import start_together

LAB_REQUESTS = 50


async def clock_of(server, batch_sizes: tuple[int, ...], output_len: int):
    """The server's own step clock, timed as notebook 04 times it."""
    pair = prefill_pair_for(server)
    data = await measure_step_times(server, batch_sizes=batch_sizes, output_len=output_len, prompt_len=256,
                                    prefill_len=pair.long, short_prefill_len=pair.short, long_group=pair.long_group,
                                    repeats=3)
    return data.fit(), data.measurements


async def one_load(server, output_tokens: int, seed: int) -> dict:
    workload = build_workload(server, num_requests=LAB_REQUESTS, prompt_lens=LAB_PROMPT_LENS,
                              output_tokens=output_tokens, seed=seed)
    run = await run_load_test(server, workload, progress=False)
    if run.summary.num_errors:
        raise RuntimeError(f"{run.summary.num_errors} requests failed at max_num_seqs={server.config.max_num_seqs}")
    return {"output_tok_per_s": round(run.summary.output_tok_per_s, 1), "wall_s": round(run.summary.wall_s, 3)}


async def main(args: argparse.Namespace) -> dict:
    low, high = args.settings
    output_tokens = args.output_tokens
    # each with half of notebook 06's share of the GPU: vLLM checks at start-up that its utilization's share is free
    share = round(GPU_SHARE / 2, 2) if detect_device() == "cuda" else None
    servers = [VLLMServer(max_num_seqs=n, kv_cache_space_gib=args.kv_gib, gpu_memory_utilization=share)
               for n in (low, high)]
    try:
        # at once on a CPU, its memory checked for both; one after the other on a GPU. Called here, not in a
        # thread, so a Ctrl-C reaches its clean-up instead of leaving a thread starting servers nobody stops.
        start_together(servers, labels=[f"max_num_seqs={n}" for n in (low, high)], quiet=True)
        by_setting = dict(zip((low, high), servers))
        device = servers[0].device
        plan = plan_step_fit(device, demo_max_num_seqs=low, demo_output_len=output_tokens,
                             lab_output_len=output_tokens, lab_settings=(low, high))
        clocks, measurements = {}, []
        for n, sizes in ((low, plan.low_batch_sizes or plan.batch_sizes), (high, plan.batch_sizes)):
            clocks[n], rows = await clock_of(by_setting[n], sizes, plan.output_len)
            measurements += rows
            print(f"max_num_seqs={n}: {clocks[n]}", flush=True)
        front = await measure_front_end(by_setting[high], output_len=128) if plan.front_end else None
        if front:
            print(front.describe(clocks[high], batch=min(high, LAB_REQUESTS)), flush=True)
            clocks = {n: front.applied_to(c) for n, c in clocks.items()}
        prediction = prediction_record(clocks, settings=(low, high), trace=lab_trace(output_len=output_tokens),
                                       measurements=measurements, served_model=servers[0].model_name, device=device)
        predicted = prediction[f"ratio_{high}_vs_{low}"]
        print(f"predicted: {prediction['predicted_output_tok_s'][0]:,.0f} and "
              f"{prediction['predicted_output_tok_s'][1]:,.0f} output tok/s: {predicted:.2f}x", flush=True)
        for n, server in by_setting.items():
            await warm_up(server, build_workload(server, num_requests=LAB_REQUESTS, prompt_lens=LAB_PROMPT_LENS,
                                                 output_tokens=output_tokens, seed=999))
        pairs = []
        for i in range(args.pairs):
            order = (low, high) if i % 2 == 0 else (high, low)
            runs = {n: await one_load(by_setting[n], output_tokens, seed=100 * i + n) for n in order}
            ratio = runs[high]["output_tok_per_s"] / runs[low]["output_tok_per_s"]
            pairs.append({"order": list(order), "runs": {str(n): r for n, r in runs.items()}, "ratio": round(ratio, 3)})
            print(f"pair {i + 1}: {runs[low]['output_tok_per_s']:,.0f} at {low}, {runs[high]['output_tok_per_s']:,.0f} "
                  f"at {high}: {ratio:.2f}x", flush=True)
    finally:
        for server in servers:
            server.stop()
    ratios = [p["ratio"] for p in pairs]
    means = {n: statistics.mean(p["runs"][str(n)]["output_tok_per_s"] for p in pairs) for n in (low, high)}
    pooled = means[high] / means[low]
    result = {
        "machine": describe_machine(), "model": servers[0].model_name, "device": device,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": [low, high], "kv_cache_space_gib": args.kv_gib, "output_tokens": output_tokens,
        "num_requests": LAB_REQUESTS, "prediction": {k: prediction[k] for k in
                                                     ("predicted_output_tok_s", f"ratio_{high}_vs_{low}",
                                                      "step_time_models")},
        "front_end": asdict(front) if front else None, "pairs": pairs,
        "mean_output_tok_per_s": {str(n): round(v, 1) for n, v in means.items()},
        "ratio_of_means": round(pooled, 3), "pair_ratio_median": round(statistics.median(ratios), 3),
        "pair_ratio_range": [min(ratios), max(ratios)], "prediction_error": round(predicted / pooled - 1, 3),
    }
    print(f"measured: {pooled:.2f}x (ratio of the means; pairs {min(ratios):.2f}-{max(ratios):.2f}x, median "
          f"{statistics.median(ratios):.2f}x); predicted {predicted:.2f}x: {predicted / pooled - 1:+.1%}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", type=lambda s: tuple(int(x) for x in s.split(",")), default=(8, 64))
    parser.add_argument("--pairs", type=int, default=8, help="alternating pairs of lab loads (default 8)")
    parser.add_argument("--output-tokens", type=int, default=LAB_OUTPUT_TOKENS["cuda"],
                        help="output tokens a request (default: the lab's on a GPU)")
    parser.add_argument("--kv-gib", type=float, default=2.0, help="each server's KV pool (default 2 GiB)")
    parser.add_argument("--out", type=Path, default=build_dir() / "lab_pairs.json")
    arguments = parser.parse_args()
    if arguments.pairs < 2 or arguments.pairs % 2:
        parser.error("--pairs must be an even number, at least 2: the order flips every pair")
    arguments.out.parent.mkdir(parents=True, exist_ok=True)  # before the run: its report is minutes of work
    report = asyncio.run(main(arguments))
    write_atomically(arguments.out, json.dumps(report, indent=2) + "\n")
    print(f"written to {arguments.out}")
