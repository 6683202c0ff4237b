"""A well-known model's exact shape with random weights, for GPU throughput labs without a model hub.

The embedded SmolLM2-135M leaves a large GPU mostly idle: each engine step costs so little
that batching has little to win. vLLM can serve any architecture from its ``config.json``
alone with ``--load-format dummy`` (random weights, no checkpoint files). This module writes
such a folder: the architecture of a public model (Llama-3.1-8B: 32 layers, hidden size 4096,
32 query heads sharing 8 KV heads, MLP 14336, llama3 rope) and the embedded model's tokenizer,
so the vocabulary is SmolLM2's 49,152 tokens instead of Llama's 128,256.

Every step then does the matrix work and reads the KV cache of the real 8B model, so
throughput, KV capacity and batching behave like it. Its text is meaningless: use it only
with fixed output lengths (``ignore_eos``, as the lab does), and say so wherever it appears.

Choose it with ``VLLM_COURSE_MODEL=dummy:llama-3.1-8b`` or ``start_server(model="dummy:llama-3.1-8b")``.
It needs a GPU with room for about 13.8 GiB (14.8 GB) of bf16 weights (7.38 billion parameters: Llama's
8.03 billion less the embedding and output rows of the 79,104 tokens SmolLM2's vocabulary lacks) plus the KV
cache: more than a T4 holds, and ``helpers.serve.preflight`` refuses it there before launch.

Example::

    >>> parse_dummy_name("dummy:llama-3.1-8b")
    'llama-3.1-8b'
    >>> parse_dummy_name("HuggingFaceTB/SmolLM2-135M-Instruct") is None
    True
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from helpers.errors import ModelNotAvailableError
from helpers.paths import written_whole

DUMMY_PREFIX = "dummy:"
# Published shapes (the models' own config.json files); vocabulary and special tokens come
# from the tokenizer that is copied in.
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "tie_word_embeddings": False,
        "hidden_act": "silu",
    },
}
_MARKER = ".course-dummy.json"  # written last: a folder without it was interrupted
_NOT_TOKENIZER = {"config.json", "model.safetensors", "generation_config.json", ".course-complete.json"}


def weight_gib(config: dict[str, Any]) -> float:
    """GiB of a dummy folder's random weights in bf16 (Llama's layout: no biases, untied output head), read
    from its config.json, whose vocabulary is the copied tokenizer's.

    >>> round(weight_gib({**ARCHITECTURES["llama-3.1-8b"], "vocab_size": 49152}), 2)   # SmolLM2's vocabulary
    13.75
    """
    hidden, mlp, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim  # q and o, k and v
    embeddings = config["vocab_size"] * hidden * (1 if config.get("tie_word_embeddings") else 2)
    parameters = embeddings + layers * (attention + 3 * hidden * mlp + 2 * hidden) + hidden
    return parameters * 2 / 2**30


def parse_dummy_name(model: str) -> str | None:
    """The architecture name in ``dummy:<name>``, or None for any other model string."""
    text = model.strip().lower()
    return text[len(DUMMY_PREFIX):].strip() if text.startswith(DUMMY_PREFIX) else None


def dummy_served_name(architecture: str) -> str:
    """The name clients send: says "dummy" so no plot or table passes it off as the real model.

    >>> dummy_served_name("llama-3.1-8b")
    'dummy-llama-3.1-8b'
    """
    return f"dummy-{architecture}"


def prepare_dummy_model(architecture: str, tokenizer_dir: Path, cache_dir: Path) -> Path:
    """Write (once) a folder vLLM serves with ``--load-format dummy``; return it.

    ``tokenizer_dir`` is a checkpoint whose tokenizer files are copied (the embedded model's).
    """
    if architecture not in ARCHITECTURES:
        raise ModelNotAvailableError(
            f"Unknown dummy architecture {architecture!r}: choose one of "
            f"{', '.join(DUMMY_PREFIX + name for name in ARCHITECTURES)}."
        )
    target = cache_dir / dummy_served_name(architecture)
    if (target / _MARKER).is_file() and (target / "config.json").is_file():
        return target
    with written_whole(target) as staging:
        for item in tokenizer_dir.iterdir():
            if item.is_file() and item.name not in _NOT_TOKENIZER:
                shutil.copy2(item, staging / item.name)
        dummy_config(architecture, tokenizer_dir).save_pretrained(staging)
        (staging / _MARKER).write_text(json.dumps({"architecture": architecture, "weights": "random"}))
    return target


def dummy_config(architecture: str, tokenizer_dir: Path) -> Any:
    """A transformers config of the architecture, with the tokenizer's vocabulary and special tokens.

    Built through transformers itself, so the file uses whatever format the installed
    version (and the vLLM that reads it) expects, e.g. ``rope_parameters`` in transformers 5.
    """
    from transformers import AutoConfig

    source = json.loads((tokenizer_dir / "config.json").read_text())
    spec = dict(ARCHITECTURES[architecture])
    architectures = spec.pop("architectures")
    config = AutoConfig.for_model(
        spec.pop("model_type"),
        vocab_size=source["vocab_size"],
        bos_token_id=source.get("bos_token_id"),
        eos_token_id=source.get("eos_token_id"),
        pad_token_id=source.get("pad_token_id"),
        **spec,
    )
    config.architectures = architectures
    config.dtype = "bfloat16"  # what the real checkpoint ships in; vLLM's --dtype auto follows it
    return config
