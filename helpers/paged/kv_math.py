"""KV-cache arithmetic from a model's config: bytes per token and how many tokens fit.

Every token a request holds keeps one key and one value vector per layer and KV head.
For SmolLM2-135M (30 layers, 3 KV heads of 64 dims, bf16 = 2 bytes):
2 x 30 x 3 x 64 x 2 = 23,040 bytes per token, which is what vLLM's CPU build reports
(93,184 tokens in a 2 GiB pool). :func:`check_pool` repeats the engine's sizing of its pool by
hand, in blocks and tokens, and says how close it lands. Taught in ``notebooks/01_start_server.ipynb``.

Example::

    >>> kv_bytes_per_token({"num_hidden_layers": 30, "num_attention_heads": 9,
    ...                     "num_key_value_heads": 3, "hidden_size": 576}, dtype_bytes=2)
    23040
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.errors import InvalidArgumentError

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1}


def load_config(model_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(model_dir) / "config.json").read_text())


def kv_bytes_per_token(config: Mapping[str, Any], dtype_bytes: int | None = None) -> int:
    """Bytes of KV cache one token occupies: 2 (key and value) x layers x KV heads x head size x bytes.

    Leaves out quantized KV caches (``--kv-cache-dtype fp8``): pass ``dtype_bytes=1`` for those.
    """
    config = config.get("text_config") or config  # multimodal checkpoints nest the language model's
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or config["hidden_size"] // heads)
    if dtype_bytes is None:
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").removeprefix("torch.")
        dtype_bytes = DTYPE_BYTES.get(dtype, 2)
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def tokens_that_fit(pool_bytes: int, bytes_per_token: int, block_size: int) -> int:
    """Token slots in a pool of whole blocks: vLLM allocates KV memory block by block.

    >>> tokens_that_fit(2 * 2**30, 23_040, 128)  # SmolLM2-135M, 2 GiB, blocks of 128: 728 blocks
    93184
    """
    blocks = pool_bytes // (bytes_per_token * block_size)
    return blocks * block_size


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks a request of `num_tokens` tokens holds: the last one may be partly empty.

    >>> blocks_for(37, 16), blocks_for(128, 128), blocks_for(129, 128)
    (3, 1, 2)
    """
    if num_tokens < 0 or block_size < 1:
        raise InvalidArgumentError(f"need num_tokens >= 0 and block_size >= 1, got {num_tokens}, {block_size}")
    return -(-num_tokens // block_size)


@dataclass(frozen=True)
class PoolCheck:
    """The engine's KV pool sized by hand (its bytes over a block's bytes, in whole blocks), beside its own count.

    Where the engine gives the pool's bytes exactly (vLLM's CPU build: ``kv_cache_memory_bytes`` on
    ``/metrics``) the hand count is one number; where its log rounds them (vLLM 0.26 on a GPU:
    "Available KV cache memory: 127.95 GiB", to the decimals printed) it is the range of block counts the
    rounded figure allows.
    """

    pool_bytes: int
    rounding_bytes: int  # pool_bytes is exact (0) or within +/- this
    bytes_per_token: int
    block_size: int
    engine_blocks: int  # blocks the engine reported

    @property
    def block_bytes(self) -> int:
        return self.bytes_per_token * self.block_size

    @property
    def blocks(self) -> tuple[int, int]:
        """Fewest and most whole blocks the pool's bytes allow (equal where the bytes are exact)."""
        return ((self.pool_bytes - self.rounding_bytes) // self.block_bytes,
                (self.pool_bytes + self.rounding_bytes) // self.block_bytes)

    @property
    def lands(self) -> bool:
        return self.blocks[0] <= self.engine_blocks <= self.blocks[1]

    def describe(self) -> str:
        """What was divided by what, and how close the result is to the engine's figure, in blocks and tokens.

        >>> print(PoolCheck(2 * 2**30, 0, 23_040, 128, engine_blocks=728).describe())
        2,147,483,648 bytes / (23,040 bytes a token x 128 tokens = 2,949,120 bytes a block) = 728 whole blocks = 93,184 tokens: exactly the engine's 728 blocks (93,184 tokens).
        """
        low, high = self.blocks
        bs, engine = self.block_size, self.engine_blocks
        per_block = f"({self.bytes_per_token:,} bytes a token x {bs} tokens = {self.block_bytes:,} bytes a block)"
        theirs = f"the engine's {engine:,} blocks ({engine * bs:,} tokens)"
        if not self.rounding_bytes:
            verdict = (f"exactly {theirs}." if self.lands else
                       f"{theirs} are {engine - low:+,} blocks from it: {_ELSEWISE}.")
            return f"{self.pool_bytes:,} bytes / {per_block} = {low:,} whole blocks = {low * bs:,} tokens: {verdict}"
        gib, mid = 2**30, self.pool_bytes // self.block_bytes
        shown, off = gib_as_vllm_logs(self.pool_bytes), engine - mid
        gap = (f"{abs(off):,} block{'s' * (abs(off) != 1)} ({abs(off) * bs:,} tokens) {'short of' if off > 0 else 'over'}"
               if off else "exactly")
        head = (f"The log gives the pool as {shown}, and {shown} / {per_block} = {mid:,} whole blocks = "
                f"{mid * bs:,} tokens, {gap} {theirs}. ")
        span = (f"anything from {(self.pool_bytes - self.rounding_bytes) / gib:.3f} to "
                f"{(self.pool_bytes + self.rounding_bytes) / gib:.3f} GiB prints as {shown} and gives {low:,}-{high:,} blocks")
        if self.lands:
            return head + f"The log's rounding allows that: {span}; the engine's count lies inside."
        return head + f"More than the log's rounding allows ({span}): {_ELSEWISE}."


# Why a hand count can miss: what the formula assumes (one dtype, unpadded blocks, every layer alike).
_ELSEWISE = "the engine sized its pool differently from this formula (another dtype, padded blocks, or layers of another kind)"


def gib_as_vllm_logs(num_bytes: float) -> str:
    """Bytes in GiB as vLLM's GPU worker logs them (its ``format_gib``: ``round(b / GiB, 2)``, so a trailing zero
    goes): a pool read from "128.0 GiB" shows as the log did, not as "128.00 GiB".

    >>> gib_as_vllm_logs(128 * 2**30), gib_as_vllm_logs(127.95 * 2**30), gib_as_vllm_logs(0.5 * 2**30)
    ('128.0 GiB', '127.95 GiB', '0.5 GiB')
    """
    return f"{round(num_bytes / 2**30, 2)} GiB"


def check_pool(report: Any, bytes_per_token: int) -> PoolCheck | None:
    """:class:`PoolCheck` for a server's :class:`~helpers.serve.log.KVCacheReport`; None where the
    engine gave no pool bytes or no block size."""
    if not report.memory_bytes or not report.block_size:
        return None
    engine_blocks = report.num_blocks or report.num_tokens // report.block_size
    return PoolCheck(report.memory_bytes, report.memory_rounding_bytes, bytes_per_token, report.block_size,
                     engine_blocks)
