"""The tuning notebook's arithmetic: parameters, memory, KV blocks and pools, server settings.

Pure functions of numbers and configs (nothing here talks to a server or reads a file):

- quantization: parameters from a model's config (:func:`count_parameters`) and how a memory
  budget splits between weights and KV cache at each precision (:func:`memory_rows`);
- KV blocks: what prefix caching can serve at best (:func:`ideal_prefix_hits`), the blocks
  each request of a run held (:func:`blocks_per_request`), and how many of them fit a pool at
  once (:func:`fit_in_pool`);
- server settings: one change to a base (:func:`server_settings`), a pool that holds a number of
  the served model's tokens (:func:`pool_holding`), and pools resized for another KV dtype
  (:func:`pools_for_dtype`).

Example::

    >>> config = {"vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30,
    ...           "num_attention_heads": 9, "num_key_value_heads": 3,
    ...           "intermediate_size": 1536, "tie_word_embeddings": True}
    >>> count_parameters(config)   # SmolLM2-135M
    134515008
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helpers import validate
from helpers.paged.kv_math import blocks_for, kv_bytes_per_token

GIB = 2**30
# Llama-3.1-8B's public shapes: the size class most often served on one GPU, for comparison.
LLAMA_31_8B = {"vocab_size": 128256, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "intermediate_size": 14336, "tie_word_embeddings": False}
# Llama-3.1-70B's public shapes: weights that no single GPU of 2026 holds in bf16.
LLAMA_31_70B = {"vocab_size": 128256, "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
                "num_key_value_heads": 8, "intermediate_size": 28672, "tie_word_embeddings": False}
BYTES_PER_WEIGHT = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5}  # int4 leaves out its per-group scales
_CONFIG_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size")
_BLOCK_HINT = "vLLM's blocks hold e.g. 16 or 128 tokens."


# ----- quantization -------------------------------------------------------------------------------
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


# ----- KV blocks --------------------------------------------------------------------------------------
def ideal_prefix_hits(num_requests: int, shared_tokens: int, block_size: int) -> int:
    """Prompt tokens the prefix cache can serve when requests share their first ``shared_tokens``.

    Only full blocks are shared, and the first request has nothing to reuse:
    (num_requests - 1) x the shared tokens rounded down to whole blocks.

    >>> ideal_prefix_hits(12, 560, 128)   # 4 full blocks of 128 shared by 11 later requests
    5632
    """
    num_requests = validate.non_negative_int(num_requests, "num_requests")
    shared_tokens = validate.non_negative_int(shared_tokens, "shared_tokens")
    block_size = validate.positive_int(block_size, "block_size", hint=_BLOCK_HINT)
    return max(0, num_requests - 1) * (shared_tokens // block_size) * block_size


def blocks_per_request(measurement: Any, block_size: int) -> list[int]:
    """KV blocks each successful request of a :class:`~helpers.tuning.measurement.Measurement`
    held at its longest: prompt (with the chat template, as the server counted it) plus every
    output token, in whole blocks. Failed requests are left out (their token counts are incomplete).
    """
    block_size = validate.positive_int(block_size, "block_size", hint=_BLOCK_HINT)
    return [blocks_for((r.prompt_tokens or 0) + (r.output_tokens or 0), block_size)
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


# ----- server settings -------------------------------------------------------------------------------
def server_settings(base: Mapping[str, Any], *, extra_args: Sequence[str] = (), **changes: Any) -> dict[str, Any]:
    """``base`` with ``changes`` applied, for ``start_server(**...)``; ``extra_args`` are appended
    to the base's own, so a flag every server needs is never lost.

    >>> server_settings({"max_num_seqs": 64, "extra_args": ("-a",)}, extra_args=("-b",), max_num_seqs=8)
    {'max_num_seqs': 8, 'extra_args': ('-a', '-b')}
    """
    merged = {**base, **changes}
    merged["extra_args"] = tuple(base.get("extra_args", ())) + tuple(extra_args)
    return merged


def pool_holding(tokens: int, bytes_per_token: int | None, fallback_gib: float) -> tuple[str, dict[str, Any]]:
    """A KV pool setting, (label, change to the base), sized to hold ``tokens`` tokens of a model whose KV cache
    takes ``bytes_per_token`` (:func:`helpers.paged.kv_math.kv_bytes_per_token`); ``fallback_gib`` where that
    is unknown. A pool given in GiB holds 5.7x fewer tokens of an 8B model than of SmolLM2: too few for one
    request of ``max_model_len``, and vLLM refuses to start.

    >>> pool_holding(2_330, 23_040, 0.05)    # SmolLM2 in bfloat16: the 0.05 GiB of the course's GPU runs
    ('0.05 GiB', {'kv_cache_space_gib': 0.049996})
    >>> pool_holding(2_330, 131_072, 0.05)   # Llama-3.1-8B's shape in bfloat16: 128 KiB a token
    ('0.284 GiB', {'kv_cache_space_gib': 0.284424})
    """
    tokens = validate.positive_int(tokens, "tokens", hint="e.g. 2,330: about 2.3 requests of 1,024 tokens.")
    gib = round(tokens * bytes_per_token / GIB, 6) if bytes_per_token else fallback_gib
    return f"{gib:.3g} GiB", {"kv_cache_space_gib": gib}


def pools_for_dtype(pools: Sequence[tuple[str, dict[str, Any]]], bytes_per_value: int | None,
                    planned_bytes: int = 2) -> list[tuple[str, dict[str, Any]]]:
    """The notebook's KV pools given in GiB (``kv_cache_space_gib``), resized to hold the same tokens at
    ``bytes_per_value`` as they were sized for at ``planned_bytes`` (bfloat16's 2). A float32 server
    needs twice the GiB: 0.025 GiB of float32 holds 4 blocks of 128 tokens, less than one 1,024-token
    request, and vLLM refuses to start. Pools without a size (the default) are kept as they are.

    >>> pools_for_dtype([("2 GiB", {}), ("0.05 GiB", {"kv_cache_space_gib": 0.05})], 4)
    [('2 GiB', {}), ('0.1 GiB', {'kv_cache_space_gib': 0.1})]
    """
    planned_bytes = validate.positive_int(planned_bytes, "planned_bytes", hint="bfloat16 takes 2 bytes a value.")
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
