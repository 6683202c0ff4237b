"""Throughput tuning: change one server setting, load-test before and after, say what changed.

The pieces the tuning notebook needs on top of the load tester (:mod:`helpers.load`) and
the ``/metrics`` reader (:mod:`helpers.load.poller`):

- :func:`measure`: one load test while ``/metrics`` is polled, kept as a :class:`Measurement`
  with the server's KV-cache report, the engine's counters for the run (preemptions, prefix
  cache queries and hits) and the client's summary;
- :func:`shared_prefix_workload`: many requests behind one long system prompt, the traffic
  that prefix caching exists for;
- :func:`compare`: two measurements as ratios, and :func:`describe_change`, a sentence built
  from them that calls a change smaller than the run-to-run noise what it is;
- arithmetic for quantization: parameters from a model's config (:func:`count_parameters`,
  checked against the checkpoint by :func:`checkpoint_parameters`) and how many KV tokens a
  memory budget leaves at each number of bytes per weight (:func:`memory_rows`).

Drawings are in :mod:`helpers.tuning.plots`. Taught in ``notebooks/05_throughput_tuning.ipynb``.

Leaves out: repetitions (each setting is measured once, so the notebook stays within minutes;
the lab shows how far repetitions differ), arrival processes other than "all at once".

Example::

    >>> config = {"vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30,
    ...           "num_attention_heads": 9, "num_key_value_heads": 3,
    ...           "intermediate_size": 1536, "tie_word_embeddings": True}
    >>> count_parameters(config)   # SmolLM2-135M
    134515008
"""

from __future__ import annotations

import json
import math
import random
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from helpers import validate
from helpers.paged.kv_math import kv_bytes_per_token
from helpers.load.client import DEFAULT_TIMEOUT_S, RequestSpec
from helpers.load.run import LoadTestRun, run_load_test
from helpers.load.workload import ServerTokenizer, Workload, _corpus_ids, _prompt_of_exact_length
from helpers.load.summary import describe_failures
from helpers.load.prometheus import MetricsSample, MetricsSummary, counter_delta, summarize_samples
from helpers.load.poller import watch

# Separate server starts on the course's 2-core CPU differed by 20-25% in throughput for the
# same setting (lab repetitions, docs of the CPU build): a smaller change is not a finding.
NOISE = 0.25
GIB = 2**30


# ----- one measurement ------------------------------------------------------------------------------
@dataclass
class Measurement:
    """One load test of one server setting, with what the engine itself counted meanwhile."""

    lever: str  # which setting this run varies, e.g. "KV pool"
    setting: str  # its value, for tables and legends, e.g. "0.05 GiB"
    run: LoadTestRun
    samples: list[MetricsSample] = field(repr=False)  # /metrics polled during the run
    max_num_seqs: int | None = None  # the server's cap (None: vLLM's default)
    other_servers: int = 0  # other vLLM servers seen on this machine when the run started or ended

    @property
    def summary(self) -> dict[str, Any]:
        """The client's numbers: throughput, latency percentiles (see helpers.load.summary)."""
        return self.run.summary()

    @property
    def engine(self) -> MetricsSummary:
        """The engine's numbers: peak running / waiting, KV usage, preemptions during the run."""
        return summarize_samples(self.samples, self.max_num_seqs)

    @property
    def kv_cache(self) -> dict[str, Any] | None:
        """The KV pool the server reported at start-up (tokens, blocks, maximum concurrency)."""
        return self.run.server.get("kv_cache")

    @property
    def num_preemptions(self) -> int:
        return int(counter_delta(self.samples, "num_preemptions"))

    @property
    def prefix_cache_queries(self) -> int:
        """Prompt tokens the engine looked up in its prefix cache during the run."""
        return int(counter_delta(self.samples, "prefix_cache_queries"))

    @property
    def prefix_cache_hits(self) -> int:
        """Of those, tokens whose KV was found there (not computed again)."""
        return int(counter_delta(self.samples, "prefix_cache_hits"))

    @property
    def prefix_hit_rate(self) -> float | None:
        """hits / queries over the run; None when nothing was looked up (prefix caching off)."""
        queries = self.prefix_cache_queries
        return self.prefix_cache_hits / queries if queries else None

    def as_setting(self, lever: str, setting: str) -> Measurement:
        """The same run under another name, e.g. the baseline as the "64" of the max_num_seqs lever."""
        return replace(self, lever=lever, setting=setting)

    def row(self) -> dict[str, Any]:
        """One flat row for tables: units in the names."""
        s, kv = self.summary, self.kv_cache or {}
        return {
            "lever": self.lever, "setting": self.setting,
            "kv_tokens": kv.get("num_tokens"), "max_concurrency": kv.get("max_concurrency"),
            "output_tok_per_s": s["output_tok_per_s"], "requests_per_s": s["requests_per_s"],
            "e2e_p50_s": s["e2e_p50_s"], "e2e_p95_s": s["e2e_p95_s"],
            "ttft_p50_s": s["ttft_p50_s"], "ttft_p95_s": s["ttft_p95_s"],
            "peak_running": self.engine.peak_running, "num_preemptions": self.num_preemptions,
            "prefix_hit_rate": self.prefix_hit_rate, "num_errors": s["num_errors"], "wall_s": s["wall_s"],
        }


async def measure(server: Any, workload: Workload, *, lever: str, setting: str,
                  interval_s: float = 0.25, timeout_s: float = DEFAULT_TIMEOUT_S,
                  progress: bool = True) -> Measurement:
    """Run ``workload`` against ``server`` (all requests at once) while polling ``/metrics``.

    In a notebook: ``m = await measure(server, workload, lever="KV pool", setting="2 GiB")``.
    Counters (preemptions, prefix-cache hits) are differences over the run, so a server can
    serve several measurements in a row. ``interval_s`` and ``timeout_s`` must be positive,
    finite numbers of seconds (``ValueError`` otherwise, before anything is sent).
    """
    interval_s = validate.positive_number(interval_s, "interval_s", unit="seconds",
                                          hint="It is how often /metrics is polled, e.g. 0.25.")
    timeout_s = validate.positive_number(timeout_s, "timeout_s", unit="seconds")
    label = f"{lever}: {setting}"
    others = other_vllm_servers(server)
    run, samples = await watch(run_load_test(server, workload, label=label, timeout_s=timeout_s,
                                             progress=progress), server, interval_s=interval_s)
    others = max(others, other_vllm_servers(server))
    if others and progress:
        print(f"{label}: {others} other vLLM server(s) ran on this machine during the run; they share its CPU "
              "(or GPU), so these numbers are less reliable than usual.")
    return Measurement(lever, setting, run, samples, getattr(server.config, "max_num_seqs", None), others)


def other_vllm_servers(server: Any = None) -> int:
    """vLLM API servers running on this machine other than ``server``: on a shared machine each
    one competes for the same cores, which distorts any timing (the tuning notebook flags it)."""
    import psutil

    own = getattr(getattr(server, "process", None), "pid", None)
    count = 0
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["pid"] != own and "vllm.entrypoints.openai.api_server" in cmdline:
            count += 1
    return count


def server_settings(base: Mapping[str, Any], *, extra_args: Sequence[str] = (), **changes: Any) -> dict[str, Any]:
    """``base`` with ``changes`` applied, for ``start_server(**...)``; ``extra_args`` are appended
    to the base's own, so a flag every server needs is never lost.

    >>> server_settings({"max_num_seqs": 64, "extra_args": ("-a",)}, extra_args=("-b",), max_num_seqs=8)
    {'max_num_seqs': 8, 'extra_args': ('-a', '-b')}
    """
    merged = {**base, **changes}
    merged["extra_args"] = tuple(base.get("extra_args", ())) + tuple(extra_args)
    return merged


# ----- a shared system prompt -------------------------------------------------------------------------
def shared_prefix_workload(
    tokenizer: Any,
    num_requests: int = 12,
    system_tokens: int = 512,
    question_tokens: int = 24,
    output_tokens: int = 8,
    seed: int = 0,
    run_tag: str | None = None,
) -> Workload:
    """``num_requests`` chats that share one long system prompt and differ in the user message.

    The system prompt has exactly ``system_tokens`` tokens and starts with ``run_tag``
    (random by default): within a run every request shares it, but a second run gets a new
    one, so its first request must compute it again and a rerun cannot inherit the first
    run's cache. Each user message (``question_tokens`` tokens) opens with the tag and its own
    index, so no two requests share more than the system prompt and the chat template.
    ``tokenizer``: a :class:`~helpers.load.workload.Tokenizer` or a server (its own tokenizer).
    Counts must be positive integers (``system_tokens`` above 8: the system prompt's opening
    words take about that many), ``seed`` 0 or more, and system prompt + question + output
    must fit a server's ``max_model_len``; otherwise ``ValueError`` says what to pass.
    """
    num_requests = validate.positive_int(num_requests, "num_requests")
    system_tokens = validate.int_above(system_tokens, "system_tokens", 8,
                                       hint="The system prompt's opening words take about 8 tokens.")
    question_tokens = validate.positive_int(question_tokens, "question_tokens")
    output_tokens = validate.positive_int(output_tokens, "output_tokens")
    seed = validate.non_negative_int(seed, "seed")
    if run_tag is not None and (not isinstance(run_tag, str) or not run_tag.strip()):
        raise validate.InvalidArgumentError(
            f"run_tag must be a non-empty string, or None for a random one, got {run_tag!r}.")
    validate.fits_context(system_tokens + question_tokens + output_tokens, validate.context_length(tokenizer),
                          f"system_tokens={system_tokens} + question_tokens={question_tokens} + "
                          f"output_tokens={output_tokens}",
                          "Pass a shorter system prompt or fewer output tokens (the chat template adds about 30 "
                          "tokens more), or start the server with a larger max_model_len.")
    if not hasattr(tokenizer, "encode"):
        tokenizer = ServerTokenizer.of(tokenizer)
    tag = run_tag if run_tag is not None else uuid.uuid4().hex[:4]
    corpus = _corpus_ids(tokenizer, max(system_tokens, question_tokens))
    rng = random.Random(seed)
    system = _prompt_of_exact_length(tokenizer, f"[{tag}] Answer questions about this text. ", corpus,
                                     rng.randrange(0, len(corpus) - system_tokens), system_tokens)
    requests = []
    for index in range(num_requests):
        question = _prompt_of_exact_length(tokenizer, f"({tag}/{index}) ", corpus,
                                           rng.randrange(0, len(corpus) - question_tokens), question_tokens)
        requests.append(RequestSpec(index, question, question_tokens, output_tokens, system=system))
    return Workload(tuple(requests), (question_tokens,), output_tokens, seed, tag)


def ideal_prefix_hits(num_requests: int, shared_tokens: int, block_size: int) -> int:
    """Prompt tokens the prefix cache can serve when requests share their first ``shared_tokens``.

    Only full blocks are shared, and the first request has nothing to reuse:
    (num_requests - 1) x the shared tokens rounded down to whole blocks.

    >>> ideal_prefix_hits(12, 560, 128)   # 4 full blocks of 128 shared by 11 later requests
    5632
    """
    num_requests = validate.non_negative_int(num_requests, "num_requests")
    shared_tokens = validate.non_negative_int(shared_tokens, "shared_tokens")
    block_size = validate.positive_int(block_size, "block_size", hint="vLLM's blocks hold e.g. 16 or 128 tokens.")
    return max(0, num_requests - 1) * (shared_tokens // block_size) * block_size


def shared_prefix_tokens(server: Any, workload: Workload) -> int:
    """Tokens the first two requests of ``workload`` have in common once the server's chat
    template is applied: the most any request can share with another (template, system
    prompt, and the start of the user turn). Asks the server's ``/tokenize``."""
    tokenizer = ServerTokenizer.of(server)
    ids = []
    for spec in workload.requests[:2]:
        messages = [{"role": "system", "content": spec.system}] if spec.system is not None else []
        body = {"model": server.model_name, "messages": messages + [{"role": "user", "content": spec.prompt}],
                "add_generation_prompt": True}
        ids.append(tokenizer._post("/tokenize", body)["tokens"])
    if len(ids) < 2:
        return 0
    common = 0
    for a, b in zip(*ids):
        if a != b:
            break
        common += 1
    return common


def blocks_per_request(measurement: Measurement, block_size: int) -> list[int]:
    """KV blocks each successful request held at its longest: prompt (with the chat template,
    as the server counted it) plus every output token, in whole blocks. Failed requests are
    left out (their token counts are incomplete)."""
    block_size = validate.positive_int(block_size, "block_size", hint="vLLM's blocks hold e.g. 16 or 128 tokens.")
    return [-(-((r.prompt_tokens or 0) + (r.output_tokens or 0)) // block_size)
            for r in measurement.run.records if r.ok]


def fit_in_pool(blocks: Sequence[int], num_blocks: int) -> int:
    """How many requests, taken in order, hold their blocks at once in a pool of ``num_blocks``.

    >>> fit_in_pool([1, 2, 3, 5, 1, 2, 3, 5], 18)   # 1+2+3+5+1+2+3 = 17 blocks; the next needs 5
    7
    """
    num_blocks = validate.non_negative_int(num_blocks, "num_blocks")
    blocks = [validate.non_negative_int(need, f"blocks[{i}]") for i, need in enumerate(blocks)]
    used = count = 0
    for need in blocks:
        if used + need > num_blocks:
            break
        used, count = used + need, count + 1
    return count


# ----- before and after ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    """``after`` relative to ``before``: ratios above 1 mean the number grew."""

    before: str
    after: str
    throughput_ratio: float | None  # output tokens/s, after / before
    e2e_p95_ratio: float | None
    ttft_p50_ratio: float | None
    ttft_p95_ratio: float | None


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def compare(before: Measurement, after: Measurement) -> Change:
    b, a = before.summary, after.summary
    return Change(
        before.setting, after.setting,
        throughput_ratio=_ratio(a["output_tok_per_s"], b["output_tok_per_s"]),
        e2e_p95_ratio=_ratio(a["e2e_p95_s"], b["e2e_p95_s"]),
        ttft_p50_ratio=_ratio(a["ttft_p50_s"], b["ttft_p50_s"]),
        ttft_p95_ratio=_ratio(a["ttft_p95_s"], b["ttft_p95_s"]),
    )


def describe_ratio(ratio: float | None, what: str, noise: float = NOISE) -> str:
    """A ratio in words, treating a change smaller than ``noise`` as no finding.

    >>> describe_ratio(1.8, "throughput"), describe_ratio(0.5, "p95 latency")
    ('throughput 1.80x (up 80%)', 'p95 latency 0.50x (down 50%)')
    >>> describe_ratio(1.1, "throughput")
    'throughput 1.10x (within the run-to-run noise of about 25%)'
    >>> describe_ratio(None, "p95 latency")
    'p95 latency: not measured'
    """
    noise = validate.non_negative_number(noise, "noise", hint="It is a fraction, e.g. 0.25 for 25%.")
    if ratio is None or not math.isfinite(ratio):
        return f"{what}: not measured"
    if abs(ratio - 1) < noise:
        return f"{what} {ratio:.2f}x (within the run-to-run noise of about {noise:.0%})"
    return f"{what} {ratio:.2f}x ({'up' if ratio > 1 else 'down'} {abs(ratio - 1):.0%})"


def describe_change(before: Measurement, after: Measurement) -> str:
    """One sentence: what moving from ``before`` to ``after`` did, with the measured numbers.

    A number that could not be measured (every request of a run failed) reads "-", and
    failed requests are counted in words at the end, with their errors.
    """
    b, a, c = before.summary, after.summary, compare(before, after)
    shared = before.other_servers or after.other_servers
    caution = (" Another vLLM server shared the machine during these runs: the difference may be partly "
               "theirs." if shared else "")
    failures = "".join(f" {m.setting}: {text}" for m in (before, after)
                       if (text := describe_failures(m.run.records)) is not None)
    return (f"{before.lever} {before.setting} -> {after.setting}: "
            f"{describe_ratio(c.throughput_ratio, 'throughput')} "
            f"({_arrow(b['output_tok_per_s'], a['output_tok_per_s'], '.0f')} output tok/s), "
            f"{describe_ratio(c.e2e_p95_ratio, 'p95 latency')} "
            f"({_arrow(b['e2e_p95_s'], a['e2e_p95_s'], '.1f', missing_one=True)} s), "
            f"{describe_ratio(c.ttft_p50_ratio, 'median TTFT')} "
            f"({_arrow(b['ttft_p50_s'], a['ttft_p50_s'], '.2f', missing_one=True)} s).{caution}{failures}")


# ----- quantization arithmetic ------------------------------------------------------------------------
# Llama-3.1-8B's public shapes: the size class the seed's commands serve, for comparison.
LLAMA_31_8B = {"vocab_size": 128256, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "intermediate_size": 14336, "tie_word_embeddings": False}
BYTES_PER_WEIGHT = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5}  # int4 leaves out its per-group scales
_CONFIG_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size")


def count_parameters(config: Mapping[str, Any]) -> int:
    """Parameters of a Llama-style decoder from its config: embeddings, per layer attention
    (q, k, v, o) + gated MLP (3 matrices) + 2 norms, the final norm, and the output head
    unless it is tied to the embeddings. Leaves out biases (Llama has none).

    >>> count_parameters(LLAMA_31_8B)
    8030261248
    """
    config = config.get("text_config") or config
    missing = [key for key in _CONFIG_KEYS if key not in config]
    if missing:
        raise validate.InvalidArgumentError(
            f"the model config has no {', '.join(missing)}; pass a Llama-style config.json as a dict "
            "(helpers.paged.kv_math.load_config reads one).")
    hidden, layers, heads, vocab, mlp = (validate.positive_int(config[key], f"config[{key!r}]") for key in _CONFIG_KEYS)
    kv_heads = validate.positive_int(config.get("num_key_value_heads") or heads, "config['num_key_value_heads']")
    head_dim = validate.positive_int(config.get("head_dim") or hidden // heads, "config['head_dim']")
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q and o, k and v
    per_layer = attention + 3 * hidden * mlp + 2 * hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return embeddings + layers * per_layer + hidden


def checkpoint_parameters(model_dir: str | Path) -> int:
    """Parameters actually stored in a folder's ``*.safetensors`` files, read from their headers
    (a little-endian length, then JSON with every tensor's shape): no tensor is loaded."""
    total = 0
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, tensor in header.items():
            if name != "__metadata__":
                count = 1
                for dim in tensor["shape"]:
                    count *= dim
                total += count
    return total


@dataclass(frozen=True)
class MemoryRow:
    """How a memory budget splits between weights and KV cache at one precision."""

    weights: str  # e.g. "fp8"
    kv_cache: str  # e.g. "bf16"
    weight_gib: float
    kv_gib: float  # what is left for the KV pool (0 if the weights do not fit)
    kv_tokens: int
    requests_at_len: int  # requests of `request_len` tokens that fit at once


def memory_rows(config: Mapping[str, Any], budget_gib: float, *, overhead_gib: float = 1.0,
                request_len: int = 2048, weights: Sequence[str] = ("bf16", "fp8", "int4"),
                kv_dtypes: Sequence[str] = ("bf16", "fp8")) -> list[MemoryRow]:
    """KV room left in ``budget_gib`` (e.g. GPU memory x gpu_memory_utilization) once the
    weights and ``overhead_gib`` (activations, CUDA graphs: about 1 GiB for SmolLM2 on an
    H200) are taken, at each weight precision; the KV dtype sets the bytes per token.

    >>> rows = memory_rows(LLAMA_31_8B, 22.0, weights=("bf16", "fp8"), kv_dtypes=("bf16",))
    >>> [(r.weights, round(r.weight_gib, 1), round(r.kv_gib, 1)) for r in rows]
    [('bf16', 15.0, 6.0), ('fp8', 7.5, 13.5)]

    ``budget_gib`` must be a positive, finite number, ``overhead_gib`` 0 or more,
    ``request_len`` a positive integer within the model's ``max_position_embeddings`` (when
    the config has one), and every precision one of :data:`BYTES_PER_WEIGHT`.
    """
    budget_gib = validate.positive_number(budget_gib, "budget_gib", unit="GiB")
    overhead_gib = validate.non_negative_number(overhead_gib, "overhead_gib", unit="GiB")
    request_len = validate.positive_int(request_len, "request_len", hint="It is a request's length in tokens.")
    context = (config.get("text_config") or config).get("max_position_embeddings")
    validate.fits_context(request_len, context if isinstance(context, int) and context > 0 else None,
                          f"request_len={request_len}", "Pass a request length the model supports.")
    weights = [validate.one_of(w, "weights", BYTES_PER_WEIGHT) for w in weights]
    kv_dtypes = [validate.one_of(d, "kv_dtypes", BYTES_PER_WEIGHT) for d in kv_dtypes]
    params = count_parameters(config)
    rows = []
    for kv_dtype in kv_dtypes:
        per_token = kv_bytes_per_token(config, dtype_bytes=int(BYTES_PER_WEIGHT[kv_dtype]))
        for w in weights:
            weight_gib = params * BYTES_PER_WEIGHT[w] / GIB
            kv_gib = max(0.0, budget_gib - overhead_gib - weight_gib)
            tokens = int(kv_gib * GIB // per_token)
            rows.append(MemoryRow(w, kv_dtype, weight_gib, kv_gib, tokens, tokens // request_len))
    return rows


def memory_table(rows: Sequence[MemoryRow], request_len: int = 2048) -> str:
    """The rows as a Markdown table."""
    request_len = validate.positive_int(request_len, "request_len")
    lines = ["| weights | KV cache | weights, GiB | left for KV, GiB | KV tokens | "
             f"requests of {request_len:,} tokens |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.weights} | {r.kv_cache} | {r.weight_gib:.2f} | {r.kv_gib:.2f} | {r.kv_tokens:,} | "
                     f"{r.requests_at_len:,} |")
    return "\n".join(lines)


# ----- what this machine supports ----------------------------------------------------------------
def cpu_supports_fp8_kv() -> bool:
    """Whether vLLM's CPU build can keep the KV cache in FP8 here: it needs x86 with AVX-512 or
    AMX (``vllm/v1/attention/backends/cpu_attn.py``). Follows ``VLLM_COURSE_CPU_ISA=avx2`` too."""
    from helpers.hardware import detect_cpu

    flags = detect_cpu().flags
    return "avx512f" in flags or "amx_tile" in flags


def kv_pool_bytes(server: Any) -> int | None:
    """The bytes of the server's KV pool: the size it was given (``kv_cache_space_gib``), else
    the engine's own log line "Available KV cache memory: X GiB" (a GPU sized by
    ``gpu_memory_utilization``); None when neither is known."""
    import re

    kv = getattr(server, "kv_cache", None)
    if kv is not None and kv.memory_bytes:
        return int(kv.memory_bytes)
    match = re.search(r"Available KV cache memory: ([\d.]+) GiB", server.log_text())
    return int(float(match.group(1)) * GIB) if match else None


# ----- the closing checklist -----------------------------------------------------------------------
def _arrow(before: float | None, after: float | None, fmt: str, missing_one: bool = False) -> str:
    """``"1.0 -> 2.0"``; "-" when either is unknown, or with ``missing_one`` the unknown side alone.

    >>> _arrow(1.0, None, ".1f"), _arrow(1.0, None, ".1f", missing_one=True)
    ('-', '1.0 -> -')
    """
    if before is None and after is None or not missing_one and (before is None or after is None):
        return "-"
    show = lambda v: "-" if v is None else f"{v:{fmt}}"  # noqa: E731
    return f"{show(before)} -> {show(after)}"


def _failed_note(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    failed = [(s["num_errors"], s["num_requests"]) for s in (before, after)]
    if not any(n for n, _ in failed):
        return ""
    return f"; failed requests {failed[0][0]} of {failed[0][1]} -> {failed[1][0]} of {failed[1][1]}"


def checklist(pairs: Sequence[tuple[Measurement, Measurement]], noise: float = NOISE) -> str:
    """A Markdown table: one row per lever, before -> after for every number this run measured,
    and a verdict computed from the throughput and p95 ratios (changes under ``noise`` are
    called noise; runs during which another vLLM server ran are marked less reliable).
    Failed requests are counted in the verdict; numbers no request measured read "-".
    """
    noise = validate.non_negative_number(noise, "noise", hint="It is a fraction, e.g. 0.25 for 25%.")
    lines = ["| lever | before -> after | output tok/s | p95 end-to-end s | TTFT p50 s | KV tokens | "
             "peak running | preemptions | prefix-cache hits | other vLLM servers | verdict from this run |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for before, after in pairs:
        b, a, c = before.summary, after.summary, compare(before, after)
        kb, ka = before.kv_cache or {}, after.kv_cache or {}
        rate = lambda m: "-" if m.prefix_hit_rate is None else f"{m.prefix_hit_rate:.0%}"  # noqa: E731
        lines.append(
            f"| {before.lever} | {before.setting} -> {after.setting} "
            f"| {_arrow(b['output_tok_per_s'], a['output_tok_per_s'], '.0f')} "
            f"| {_arrow(b['e2e_p95_s'], a['e2e_p95_s'], '.1f')} "
            f"| {_arrow(b['ttft_p50_s'], a['ttft_p50_s'], '.2f')} "
            f"| {_arrow(kb.get('num_tokens'), ka.get('num_tokens'), ',')} "
            f"| {before.engine.peak_running} -> {after.engine.peak_running} "
            f"| {before.num_preemptions} -> {after.num_preemptions} "
            f"| {rate(before)} -> {rate(after)} "
            f"| {before.other_servers} -> {after.other_servers} "
            f"| {describe_ratio(c.throughput_ratio, 'throughput', noise)}; "
            f"{describe_ratio(c.e2e_p95_ratio, 'p95', noise)}"
            f"{' (machine shared: less reliable)' if before.other_servers or after.other_servers else ''}"
            f"{_failed_note(b, a)} |")
    return "\n".join(lines)


def pools_for_dtype(pools: Sequence[tuple[str, dict[str, Any]]], bytes_per_value: int | None,
                    planned_bytes: int = 2) -> list[tuple[str, dict[str, Any]]]:
    """The notebook's KV pools given in GiB (``kv_cache_space_gib``), resized to hold the same tokens at
    ``bytes_per_value`` as they were sized for at ``planned_bytes`` (bfloat16's 2). A float32 server
    needs twice the GiB: 0.025 GiB of float32 holds 4 blocks of 128 tokens, less than one 1,024-token
    request, and vLLM refuses to start. Pools without a size (the default) are kept as they are.

    >>> pools_for_dtype([("2 GiB", {}), ("0.05 GiB", {"kv_cache_space_gib": 0.05})], 4)
    [('2 GiB', {}), ('0.1 GiB', {'kv_cache_space_gib': 0.1})]
    """
    if not bytes_per_value or bytes_per_value == planned_bytes:
        return list(pools)
    scale = bytes_per_value / planned_bytes
    resized = []
    for label, change in pools:
        if "kv_cache_space_gib" in change:
            gib = round(change["kv_cache_space_gib"] * scale, 6)
            label, change = f"{gib:g} GiB", {**change, "kv_cache_space_gib": gib}
        resized.append((label, change))
    return resized
