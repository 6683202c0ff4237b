"""KV-cache arithmetic from a model's config: bytes per token and how many tokens fit.

Every token a request holds keeps one key and one value vector per layer and KV head.
For SmolLM2-135M (30 layers, 3 KV heads of 64 dims, bf16 = 2 bytes):
2 x 30 x 3 x 64 x 2 = 23,040 bytes per token, which is what vLLM's CPU build reports
(93,184 tokens in a 2 GiB pool). Taught in ``notebooks/01_start_server.ipynb``.

Example::

    >>> kv_bytes_per_token({"num_hidden_layers": 30, "num_attention_heads": 9,
    ...                     "num_key_value_heads": 3, "hidden_size": 576}, dtype_bytes=2)
    23040
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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
