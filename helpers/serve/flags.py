"""Which of ``ServerConfig.extra_args`` would pass around the helper, read as vLLM reads them.

The helper sets ``--host``, ``--port``, ``--model`` and the other flags of :data:`OWNED` itself,
waits for HTTP on host:port (:data:`BYPASSES` would change that), and keeps keys off the
command line (:data:`SECRET`). vLLM's parser takes the
last of two equal flags, so an extra ``--host 0.0.0.0`` would open the server to the network
without a key, and an extra ``--port`` would leave the helper waiting on the wrong one. It also
accepts ``--flag=value``, underscores for dashes (``--max_model_len``), dotted JSON keys
(``--port.x``), short aliases (``-q``) and any unique prefix (``--max-model``): every spelling
is checked. Prefixes are resolved by vLLM's own parser, built once, and only when an argument
is neither a flag of :data:`OWNED` nor of :data:`KNOWN_FREE` (importing vLLM takes seconds);
without vLLM, a prefix of an owned flag is refused.

>>> check_extra_args(("--seed", "0", "--enforce-eager", "-O0", "--attention-backend", "TRITON_ATTN"))
>>> check_extra_args(("--max_model_len=4096",))
Traceback (most recent call last):
...
helpers.errors.ConfigError: extra_args sets --max-model-len (as '--max_model_len=4096'), which the helper sets itself from ServerConfig.max_model_len: pass max_model_len=... instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from helpers.errors import ConfigError

# vLLM's destination name -> (its flags, the ServerConfig field that sets it, how to pass that field).
OWNED: dict[str, tuple[tuple[str, ...], str, str]] = {
    "host": (("--host",), "host", "host=... (beyond this machine, with api_key=...)"),
    "port": (("--port",), "port", "port=... (or port=None for the first free one)"),
    "model": (("--model",), "model", "model=..."),
    "served_model_name": (("--served-model-name",), "model", "model=... (the served name follows the model)"),
    "kv_cache_memory_bytes": (("--kv-cache-memory-bytes",), "kv_cache_space_gib", "kv_cache_space_gib=..."),
    "gpu_memory_utilization": (("--gpu-memory-utilization", "--device-memory-utilization"),
                               "gpu_memory_utilization", "gpu_memory_utilization=..."),
    "max_model_len": (("--max-model-len",), "max_model_len", "max_model_len=..."),
    "max_num_seqs": (("--max-num-seqs",), "max_num_seqs", "max_num_seqs=..."),
    "dtype": (("--dtype",), "dtype", "dtype=..."),
    "quantization": (("--quantization", "-q"), "quantization", "quantization=..."),
    "enable_prefix_caching": (("--enable-prefix-caching", "--no-enable-prefix-caching"),
                              "enable_prefix_caching", "enable_prefix_caching=True or False"),
    "distributed_executor_backend": (("--distributed-executor-backend",), "device",
                                     "device=... (on CPU the model runs in the engine process)"),
}
# Flags the helper does not set, but which would take the server out of its hands: dest -> (flags, why).
BYPASSES: dict[str, tuple[tuple[str, ...], str]] = {
    "uds": (("--uds",), "vLLM would listen on a Unix socket instead of host:port, where the helper waits for it; "
                        "pass host=... and port=... instead."),
    "grpc": (("--grpc",), "vLLM would serve gRPC, not the HTTP the helper waits for on host:port; "
                          "the course's servers speak HTTP."),
    "headless": (("--headless",), "vLLM would serve no HTTP on host:port, where the helper waits for it; "
                                  "the course's servers speak HTTP."),
    "config": (("--config",), "vLLM would read more flags from a file the helper cannot check, and they could set "
                              "any flag it owns; pass the ServerConfig fields, or each other flag in extra_args."),
}
# Flags that carry a secret, which argv shows to every user of the machine (`ps`): dest -> (flags, what to do).
SECRET: dict[str, tuple[tuple[str, ...], str]] = {
    "api_key": (("--api-key",), "pass api_key=..., which the helper hands to the server's key guard through its environment"),
    "hf_token": (("--hf-token",), "set HF_TOKEN in the environment before starting Jupyter"),
}
# Exact flags known to be neither: the notebooks' and a few common ones, checked without vLLM.
KNOWN_FREE = frozenset({
    "--seed", "--enforce-eager", "--no-enforce-eager", "--attention-backend", "--kv-cache-dtype",
    "--max-num-batched-tokens", "--block-size", "--enable-chunked-prefill", "--no-enable-chunked-prefill",
    "--compilation-config", "-cc", "--optimization-level", "--async-scheduling", "--no-async-scheduling",
    "--disable-log-stats", "--enable-log-requests", "--no-enable-log-requests",
    "--enable-scale-out",  # the render endpoints vllm-router's cache-aware policy calls (helpers.route.replicas)
})
_GUARDED: dict[str, tuple[str, ...]] = {dest: entry[0] for table in (OWNED, BYPASSES, SECRET) for dest, entry in table.items()}
_BY_FLAG = {flag: dest for dest, flags in _GUARDED.items() for flag in flags}
_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse reads these as values, not flags
_KEY_LIKE = re.compile(r"\bhf_[A-Za-z0-9]{30,}|\bsk-[A-Za-z0-9_-]{20,}")  # Hugging Face / OpenAI-style keys


def check_extra_args(extra_args: Sequence[Any], api_key: str | None = None) -> None:
    """Raise :class:`ConfigError` for an argument vLLM would read as a flag the helper owns, or a secret.

    ``api_key`` is the config's own key: it must not appear in ``extra_args`` either.

    >>> check_extra_args(("--api-key", "abc"))
    Traceback (most recent call last):
    ...
    helpers.errors.ConfigError: extra_args would put a secret on vLLM's command line (--api-key), where `ps` shows it to every user of this machine. Keys travel through api_key= and the environment, never argv: pass api_key=..., which the helper hands to the server's key guard through its environment.
    """
    for arg in extra_args:
        if not isinstance(arg, str):
            raise ConfigError(f"extra_args holds strings, as on a command line; got {arg!r} ({type(arg).__name__}).")
        if (api_key and (arg == api_key or (len(api_key) >= 8 and api_key in arg))) or _KEY_LIKE.search(arg):
            raise ConfigError(
                "extra_args holds what looks like a key, and would put it on vLLM's command line where "
                "`ps` shows it to every user of this machine. Keys travel through api_key= and the "
                "environment, never argv: pass api_key=... (a Hugging Face token: set HF_TOKEN)."
            )
        dest, flag = _flag_of(arg)
        spelled = "" if arg == flag else f" (as {arg!r})"
        if dest in SECRET:
            raise ConfigError(
                f"extra_args would put a secret on vLLM's command line ({flag}), where `ps` shows it to every "
                "user of this machine. Keys travel through api_key= and the environment, never argv: "
                f"{SECRET[dest][1]}."
            )
        if dest in BYPASSES:
            raise ConfigError(f"extra_args sets {flag}{spelled}: {BYPASSES[dest][1]}")
        if dest in OWNED:
            _, field, how = OWNED[dest]
            raise ConfigError(
                f"extra_args sets {flag}{spelled}, which the helper sets itself from ServerConfig.{field}: "
                f"pass {how} instead."
            )


def _flag_of(arg: str) -> tuple[str | None, str | None]:
    """(vLLM's destination, the flag it resolves to) when ``arg`` sets a guarded flag, else (None, None)."""
    name = flag_name(arg)
    if name is None or name in KNOWN_FREE:
        return None, None
    if name in _BY_FLAG:
        return _BY_FLAG[name], name
    parser = _vllm_parser()
    if parser is not None:
        resolved = _resolve(parser, name)
        if resolved and resolved[0] in _GUARDED:
            return resolved
        return None, None
    # Without vLLM: a unique prefix of an owned flag, or a short alias with its value attached (-qfp8).
    for flag, dest in _BY_FLAG.items():
        if (name.startswith("--") and len(name) > 2 and flag.startswith(name)) or (
            not flag.startswith("--") and not name.startswith("--") and name.startswith(flag)
        ):
            return dest, flag
    return None, None


def flag_name(arg: str) -> str | None:
    """The flag ``arg`` names after vLLM's own rewriting, or None for a value.

    vLLM's FlexibleArgumentParser turns underscores into dashes and ``--flag.key value`` into
    ``--flag '{"key": value}'``, and reads ``-O3`` as ``--optimization-level 3``.

    >>> [flag_name(a) for a in ("--max_model_len=9", "--port.x", "-O0", "-qfp8", "-1", "fp8")]
    ['--max-model-len', '--port', '--optimization-level', '-qfp8', None, None]
    """
    if not arg.startswith("-") or arg in ("-", "--") or _NUMBER.match(arg) or " " in arg:
        return None
    if arg.startswith("--"):
        return arg.split("=", 1)[0].split(".", 1)[0].replace("_", "-")
    if arg.startswith("-O"):
        return "--optimization-level"
    return arg.split("=", 1)[0].split(".", 1)[0]


@lru_cache(maxsize=1)
def _vllm_parser() -> Any:
    """vLLM's own API-server parser, or None where vLLM cannot be imported. Built once: seconds."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                from vllm.utils.argparse_utils import FlexibleArgumentParser
            except ImportError:  # older vLLM
                from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined, no-redef]
            try:
                from vllm.entrypoints.launchers.cli_args import make_arg_parser
            except ImportError:  # older vLLM
                from vllm.entrypoints.openai.cli_args import make_arg_parser  # type: ignore[no-redef]
            return make_arg_parser(FlexibleArgumentParser())
    except Exception:  # not installed, or a build that cannot import here: exact matching only
        return None


def _resolve(parser: Any, arg: str) -> tuple[str, str] | None:
    """(destination, flag) as ``parser`` reads ``arg``, prefixes included; None for a value or an
    ambiguous prefix (vLLM refuses that itself, before starting)."""

    def refuse(message: str) -> None:
        raise ValueError(message)

    parser.error = refuse  # argparse reports an ambiguous prefix through error(), which would exit
    try:
        found = parser._parse_optional(arg)
    except (ValueError, AttributeError, TypeError):
        return None
    finally:
        del parser.error  # the class's own again
    candidates = found if isinstance(found, list) else [found]  # a list from Python 3.12.7 on
    actions = {(c[0].dest, c[1]) for c in candidates if c and c[0] is not None}
    return actions.pop() if len(actions) == 1 else None
