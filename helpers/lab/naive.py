"""The naive baseline: the lab's requests served one at a time by a plain ``model.generate`` loop.

The module text says vLLM is "dramatically more efficient at high concurrency than a naive
serving loop". :func:`naive_run` measures that loop: the same model, loaded by Hugging Face
``transformers`` in this process, in the server's dtype, answering each request of a workload
in turn (its chat template applied, greedy, exactly ``max_tokens`` new tokens). No batching, no
KV-cache sharing, no overlap: what a first server written around ``generate()`` does.
:func:`compare_naive` sets it against a vLLM run of the same requests.

On a CPU stop every vLLM server first: the loop and a server would share the cores, and each
would measure the other. Bounded by the workload you give it; the lab passes a subset of its
requests, and the comparison states how many.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from helpers import validate
from helpers.load.client import chat_messages

TORCH_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16", "float32": "float32"}


@dataclass(frozen=True)
class NaiveRun:
    """One request after another through ``generate()``: per request, its tokens and seconds."""

    model: str
    dtype: str
    device: str
    load_s: float  # loading the model (not counted in the serving time)
    prompt_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # each request's generate() call

    @property
    def wall_s(self) -> float:
        """Serving all the requests, one after another."""
        return sum(self.seconds)

    @property
    def output_tok_per_s(self) -> float:
        return sum(self.output_tokens) / self.wall_s


def naive_run(model_dir: str, workload: Any, *, dtype: str = "float32", device: str = "cpu") -> NaiveRun:
    """Serve every request of ``workload`` (text prompts) in turn with ``transformers``' ``generate``.

    ``dtype``: the server's, e.g. ``server.kv_cache.dtype`` ("bfloat16", "float16", "float32").
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in TORCH_DTYPES:
        raise validate.InvalidArgumentError(f"dtype must be one of {sorted(TORCH_DTYPES)}, got {dtype!r}; pass the "
                                            "server's own, server.kv_cache.dtype.")
    if any(spec.is_tokens for spec in workload.requests):
        raise validate.InvalidArgumentError("the naive loop takes text prompts (chat requests); build the workload "
                                            "with build_workload(server, ...).")
    began = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, TORCH_DTYPES[dtype])).to(device).eval()
    run = NaiveRun(model=str(model_dir), dtype=dtype, device=device, load_s=time.perf_counter() - began)
    with torch.inference_mode():
        for spec in workload.requests:
            ids = tokenizer.apply_chat_template(chat_messages(spec), add_generation_prompt=True,
                                                return_tensors="pt", return_dict=True)["input_ids"].to(device)
            start = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=spec.max_tokens,
                                 min_new_tokens=spec.max_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
            if device == "cuda":
                torch.cuda.synchronize()
            run.seconds.append(time.perf_counter() - start)
            run.prompt_tokens.append(int(ids.shape[1]))
            run.output_tokens.append(int(out.shape[1] - ids.shape[1]))
    return run


@dataclass(frozen=True)
class NaiveComparison:
    """The same requests: one at a time through ``generate()``, and all at once through vLLM."""

    requests: int
    naive_tok_per_s: float
    naive_wall_s: float
    vllm_tok_per_s: float
    vllm_wall_s: float
    max_num_seqs: int | None

    @property
    def speedup(self) -> float:
        """vLLM's output tokens/s over the loop's."""
        return self.vllm_tok_per_s / self.naive_tok_per_s

    def describe(self) -> str:
        return (f"{self.requests} requests: a generate() loop took {self.naive_wall_s:.1f} s "
                f"({self.naive_tok_per_s:.1f} output tok/s); vLLM at max_num_seqs={self.max_num_seqs} took "
                f"{self.vllm_wall_s:.1f} s ({self.vllm_tok_per_s:.1f} tok/s): {self.speedup:.1f}x the throughput, "
                f"the batch done in {_share(self.vllm_wall_s / self.naive_wall_s)} of the time.")


def _share(fraction: float) -> str:
    """A share of the time; below 1%, where a percentage would round to nothing, as a fraction (a GPU's batch).

    >>> _share(0.23), _share(0.0046)
    ('23%', '1/217')
    """
    return f"{fraction:.0%}" if fraction >= 0.01 else f"1/{1 / fraction:,.0f}"


def compare_naive(naive: NaiveRun, vllm_run: Any) -> NaiveComparison:
    """``vllm_run``: a LoadTestRun of the same requests. Both counted over successful requests only."""
    summary = vllm_run.summary
    if summary.num_ok != len(naive.output_tokens) or sum(naive.output_tokens) != summary.output_tokens_total:
        raise ValueError(f"the runs did not serve the same requests: the loop made {sum(naive.output_tokens)} "
                         f"tokens for {len(naive.output_tokens)} requests, vLLM {summary.output_tokens_total} for "
                         f"{summary.num_ok}; give both the same workload and let every request finish.")
    return NaiveComparison(requests=len(naive.output_tokens), naive_tok_per_s=naive.output_tok_per_s,
                           naive_wall_s=naive.wall_s, vllm_tok_per_s=summary.output_tok_per_s,
                           vllm_wall_s=vllm_run.wall_s, max_num_seqs=vllm_run.max_num_seqs)
