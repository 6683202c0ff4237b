"""Both CPU classes, both dtypes: server start, one request's decode rate, the lab at 8 and 64.

For each CPU class (this machine as it is, and, where it has AVX-512, the same machine limited to
AVX2 through ``VLLM_COURSE_CPU_ISA=avx2``) and each dtype (bfloat16, float32), it starts the
course's server at ``max_num_seqs`` 64 and 8 and measures:

- the start: seconds to ready and each phase (imports, engine process, weights, KV cache, ...);
- one request alone: its decode rate; and the notebooks' pace probe (``helpers.load.pace.measure_pace``,
  8 short requests at once), whose bfloat16 figure here is ``helpers.load.pace.REFERENCE_TOK_S``;
- the lab's load: 50 requests of the lab's prompt mix, sent at once, 32 output tokens each.

It also checks that the emulation reaches vLLM's kernels: which of vLLM's kernel libraries
(``_C``, ``_C_AVX512``, ``_C_AVX2``) each server process loaded, and whether oneDNN fell back
("Failed to create oneDNN linear") in the log. Results go to one JSON file per class in
``--out`` (default ``build/cpu-classes``; ``amx.json`` for this machine as it is where it has AMX); the committed
ones are in ``results/cpu/classes/``:

    .venv/bin/python scripts/bench_cpu_classes.py --out results/cpu/classes

About 10 minutes on a quiet 2-core machine; run it with no other vLLM server running.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from helpers.files import write_atomically
from helpers.hardware import describe_machine, detect_cpu
from helpers.load.pace import measure_pace, one_request_decode_tok_s
from helpers.load.run import run_load_test
from helpers.load.workload import LAB_PROMPT_LENS, build_workload
from helpers.paths import build_dir
from helpers.serve.server import start_server


async def measure(dtype: str, max_num_seqs: int, num_requests: int, output_tokens: int) -> dict:
    with start_server(max_num_seqs=max_num_seqs, dtype=dtype, quiet=True) as server:
        row = {"dtype": dtype, "max_num_seqs": max_num_seqs, "start_s": round(server.startup_seconds, 1),
               "phases_s": server.startup_phases, "kernel_libraries": sorted(server.kernel_libraries()),
               "onednn_fallback": "Failed to create oneDNN linear" in server.log_text(),
               "served_dtype": server.kv_cache.dtype if server.kv_cache else None}
        if max_num_seqs == 64:
            row["pace_probe_tok_s"] = (await measure_pace(server)).tok_s
            row["one_request_decode_tok_s"] = await one_request_decode_tok_s(server)
        workload = build_workload(server, num_requests=num_requests, output_tokens=output_tokens)
        run = await run_load_test(server, workload, label=f"{dtype}, max_num_seqs={max_num_seqs}", progress=False)
        summary = run.summary  # written to the JSON file below, under the summary's field names
        row.update(output_tok_per_s=round(summary.output_tok_per_s or 0.0, 1), wall_s=round(summary.wall_s, 1),
                   e2e_p95_s=summary.e2e_p95_s, num_errors=summary.num_errors)
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="folder for one JSON file per CPU class")
    parser.add_argument("--classes", default="native,avx2", help="native, avx2 or both (avx2 emulated)")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--num-requests", type=int, default=50)
    parser.add_argument("--output-tokens", type=int, default=32)
    args = parser.parse_args()
    out = args.out or build_dir("cpu-classes")
    out.mkdir(parents=True, exist_ok=True)
    for cpu_class in args.classes.split(","):
        if cpu_class == "avx2":
            if not detect_cpu().isa.startswith("AVX-512"):
                print("this CPU has no AVX-512: its native class is already the AVX2 one; skipping the emulation")
                continue
            os.environ["VLLM_COURSE_CPU_ISA"] = "avx2"
        elif cpu_class == "native":
            os.environ.pop("VLLM_COURSE_CPU_ISA", None)
        else:
            sys.exit(f"--classes takes native and/or avx2, got {cpu_class!r}")
        machine = describe_machine()
        print(f"== {cpu_class}: {machine}", flush=True)
        rows = [asyncio.run(measure(dtype, seqs, args.num_requests, args.output_tokens))
                for dtype in args.dtypes.split(",") for seqs in (64, 8)]
        result = {"cpu_class": cpu_class, "machine": machine, "cpu_flags_seen": detect_cpu().isa,
                  "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "workload": {"num_requests": args.num_requests, "prompt_lens": list(LAB_PROMPT_LENS),
                               "output_tokens": args.output_tokens, "sent": "all at once"},
                  "runs": rows}
        # a CPU with AMX is a class of its own (helpers.hardware.CPUInfo.amx): its file must not replace native.json's
        stem = "amx" if cpu_class == "native" and detect_cpu().amx else cpu_class
        write_atomically(out / f"{stem}.json", json.dumps(result, indent=1) + "\n")
        print_table(result)


def print_table(result: dict) -> None:
    print(f"\n{result['machine']}")
    print(f"{'dtype':>9} {'start s':>8} {'1-request tok/s':>16} {'probe tok/s':>12} {'tok/s at 8':>11} "
          f"{'tok/s at 64':>12} {'64 vs 8':>8}")
    by_dtype: dict[str, dict[int, dict]] = {}
    for row in result["runs"]:
        by_dtype.setdefault(row["dtype"], {})[row["max_num_seqs"]] = row
    for dtype, rows in by_dtype.items():
        at8, at64 = rows[8], rows[64]
        starts = f"{min(at8['start_s'], at64['start_s']):.0f}-{max(at8['start_s'], at64['start_s']):.0f}"
        print(f"{dtype:>9} {starts:>8} {at64['one_request_decode_tok_s']:>16.1f} {at64['pace_probe_tok_s']:>12.1f} "
              f"{at8['output_tok_per_s']:>11.1f} "
              f"{at64['output_tok_per_s']:>12.1f} {at64['output_tok_per_s'] / at8['output_tok_per_s']:>7.2f}x")
    print()


if __name__ == "__main__":
    main()
