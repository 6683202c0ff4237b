"""`vllm bench serve` result files (vLLM 0.26 and 0.32) read as the course's records; its prompt file and its arguments written.

What ``--save-result --save-detailed`` writes (vllm/benchmarks/serve.py at v0.26.0 and v0.32.0):

- both: ``duration``, ``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``,
  ``output_throughput``, ``total_token_throughput``, ``max_output_tokens_per_s``, the aggregates
  ``{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms`` and, per request, ``start_times``, ``ttfts``, ``itls``,
  ``input_lens``, ``output_lens``, ``errors``, ``generated_texts`` (the per-request lists only with
  ``--save-detailed``);
- 0.32 adds per request ``latencies`` and ``queue_times`` (kept even without ``--save-detailed``);
- 0.26 has no per-request latency. Its e2el also counts the trailing usage chunk; 0.32's ends at the last token,
  which is what ttft + sum(itls) gives, so that is the end-to-end time read from a 0.26 file.

Used by lab 2 (:mod:`helpers.traffic.vllm_bench`) and scripts/bench_vs_vllm.py; tested in
tests/test_bench_vs_vllm.py on captured files of both versions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.load.client import RequestRecord

PER_REQUEST = ("start_times", "ttfts", "itls", "output_lens", "errors")
# vLLM's own aggregates, kept beside the course's reading of the same records (the names its report prints)
REPORTED = ("duration", "completed", "failed", "total_output_tokens", "output_throughput", "total_token_throughput",
            "median_ttft_ms", "p95_ttft_ms", "median_tpot_ms", "p95_tpot_ms", "median_itl_ms", "p95_itl_ms",
            "median_e2el_ms", "p95_e2el_ms", "mean_tpot_ms", "request_goodput")


@dataclass(frozen=True)
class BenchRead:
    """One result file: its requests as records (None when it has only aggregates), and where each number came from."""

    layout: str
    records: list[RequestRecord] | None
    sources: dict[str, str]
    reported: dict[str, Any]  # vLLM's own aggregates, None where the file lacks one


def read_bench_result(result: Mapping[str, Any]) -> BenchRead:
    """A `vllm bench serve` result (the JSON as a dict) as the course's records, either version.

    >>> read = read_bench_result({"start_times": [5.0, 5.5], "ttfts": [0.5, 0.25], "itls": [[0.25], [0.25]],
    ...                           "output_lens": [2, 2], "errors": ["", ""], "duration": 1.0})
    >>> read.layout, [r.e2e_s for r in read.records], read.sources["e2e"]
    ('0.26 layout (end-to-end = TTFT + ITLs)', [0.75, 0.5], 'ttfts + sum(itls), per request')
    """
    reported = {key: result.get(key) for key in REPORTED}
    if not all(key in result for key in PER_REQUEST):
        sources = {"output tok/s": "output_throughput (vLLM's aggregate)", "ttft p50": "median_ttft_ms (aggregate)",
                   "wall": "duration (aggregate)", "output tokens": "total_output_tokens (aggregate)"}
        return BenchRead("aggregates only (saved without --save-detailed)", None, sources, reported)
    count = len(result["start_times"])
    lists = [key for key in (*PER_REQUEST, "latencies", "input_lens") if key in result]
    if any(len(result[key]) != count for key in lists):
        raise ValueError("the per-request lists differ in length: "
                         + ", ".join(f"{key} {len(result[key])}" for key in lists))
    has_latencies = "latencies" in result
    start = min(result["start_times"], default=0.0)
    records = []
    for i in range(count):
        error = result["errors"][i] or None
        ttft, gaps = result["ttfts"][i], list(result["itls"][i] or ())
        e2e = result["latencies"][i] if has_latencies else ttft + sum(gaps)
        sent = result["start_times"][i] - start
        prompt = result["input_lens"][i] if "input_lens" in result else None
        records.append(RequestRecord(
            index=i, ok=error is None, error=error, prompt_len=prompt or 0, prompt_tokens=prompt,
            output_tokens=result["output_lens"][i], send_s=sent, ttft_s=None if error else ttft,
            e2e_s=None if error else e2e, done_s=sent + (0.0 if error else e2e), itl_s=gaps))
    sources = {"send times": "start_times", "ttft": "ttfts, per request", "itl": "itls, per request",
               "output tokens": "output_lens, per request", "errors": "errors, per request",
               "e2e": "latencies, per request" if has_latencies else "ttfts + sum(itls), per request",
               "wall": "first start_time to last request end, from those"}
    # 0.26's file lists no end-to-end latencies of its own: they are rebuilt from its TTFTs and ITLs
    layout = "0.32 layout (its own end-to-end latencies)" if has_latencies else "0.26 layout (end-to-end = TTFT + ITLs)"
    return BenchRead(layout, records, sources, reported)


def sharegpt_prompts(workload: Any) -> list[dict[str, Any]]:
    """A workload's prompts in the ShareGPT layout `vllm bench serve --dataset-name sharegpt` reads, in order
    (with ``--disable-shuffle``); the answers' length comes from ``--sharegpt-output-len``, not from here.

    >>> from types import SimpleNamespace as NS
    >>> sharegpt_prompts(NS(requests=[NS(index=0, prompt="hello")]))[0]["conversations"][0]
    {'from': 'human', 'value': 'hello'}
    """
    return [{"id": str(spec.index), "conversations": [
        {"from": "human", "value": spec.prompt}, {"from": "gpt", "value": "(unused: --sharegpt-output-len)"}]}
        for spec in workload.requests]


def arrival_args(rate: float, burstiness: float, seed: int, slo: Any = None) -> list[str]:
    """`vllm bench serve`'s arrivals (and ``slo``'s ``--goodput``): with ``--seed`` it sends at the moments
    ``helpers.load.arrivals.arrival_times(n, rate, burstiness, seed)`` gives, so both tools send together.

    >>> arrival_args(13.0, 1.0, 2)
    ['--request-rate', '13', '--burstiness', '1', '--seed', '2']
    """
    return ["--request-rate", f"{rate:g}", "--burstiness", f"{burstiness:g}", "--seed", str(seed),
            *(slo.vllm_args() if slo is not None else ())]


def bench_serve_args(server: Any, workload: Any, dataset: Path, tokenizer_path: str, result: Path,
                     arrivals: Sequence[str]) -> list[str]:
    """`vllm bench serve`'s arguments (after ``bench serve``) for ``workload`` against ``server``: its prompts
    from ``dataset`` (:func:`sharegpt_prompts`) in order, each answer exactly the workload's ``output_tokens``
    long, ``arrivals`` as given (``--request-rate ...``), every per-request record saved to ``result``."""
    return ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", server.url,
            "--model", server.model_name, "--tokenizer", tokenizer_path,
            "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
            "--num-prompts", str(len(workload.requests)), "--sharegpt-output-len", str(workload.output_tokens),
            "--ignore-eos", "--temperature", "0", *arrivals,
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
            "--save-result", "--save-detailed", "--result-dir", str(result.parent), "--result-filename", result.name,
            "--disable-tqdm"]
