"""Checks of what a caller passes in: a clear ``ValueError`` before any work starts.

Shared by the load tester (:mod:`helpers.load`), the tuning helpers (:mod:`helpers.tuning`)
and the lab's sweep script (``scripts/lab_sweep.py``). Each check returns the value (as an
``int`` or ``float``) or raises :class:`helpers.errors.InvalidArgumentError`, a ``ValueError``
whose message says what was given and what to pass instead. Unlike ``assert``, these checks
still run under ``python -O``. A ``bool`` is never accepted as a number (``True`` is not 1
request), nor is a float where a count is expected (``2.5`` requests, or even ``2.0``).

This module imports nothing else from ``helpers`` except the error class, so any helper can use it.
(:class:`helpers.serve.config.ServerConfig` uses these checks and raises their message as a ``ConfigError``.)

Example::

    >>> positive_int(64, "output_tokens")
    64
    >>> positive_int(0, "output_tokens")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: output_tokens must be a positive integer, got 0.
    >>> positive_number(float("nan"), "timeout_s", unit="seconds")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: timeout_s must be a positive, finite number of seconds, got nan.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

from helpers.errors import InvalidArgumentError


def given(value: Any, *, typed: bool = False) -> str:
    """How a message shows what was passed: its repr, and its type when that is not obvious (always
    where ``typed``: a number where text was expected).

    >>> given("300"), given(None), given(2.0), given(0.5), given(8, typed=True)
    ("'300' (a str)", 'None (a NoneType)', '2.0 (a float)', '0.5', '8 (an int)')
    """
    if typed or isinstance(value, (bool, str, bytes)) or not isinstance(value, numbers.Real):
        kind = type(value).__name__
        return f"{value!r} ({'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind})"
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return f"{value!r} (a float)"
    return repr(value)


def _fail(name: str, wanted: str, value: Any, hint: str = "") -> InvalidArgumentError:
    return InvalidArgumentError(f"{name} must be {wanted}, got {given(value)}." + (f" {hint}" if hint else ""))


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(value: Any, name: str, *, hint: str = "") -> int:
    """``value`` as an int if it is a whole number of at least 1 (a count: requests, tokens, slots).

    >>> positive_int(True, "num_requests")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: num_requests must be a positive integer, got True (a bool).
    >>> positive_int(2.5, "concurrency")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: concurrency must be a positive integer, got 2.5.
    """
    if not _is_int(value) or value < 1:
        raise _fail(name, "a positive integer", value, hint)
    return int(value)


def non_negative_int(value: Any, name: str, *, hint: str = "") -> int:
    """``value`` as an int if it is a whole number of at least 0 (a seed, an index, a count that may be 0).

    >>> non_negative_int(-1, "seed")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: seed must be an integer of 0 or more, got -1.
    """
    if not _is_int(value) or value < 0:
        raise _fail(name, "an integer of 0 or more", value, hint)
    return int(value)


def int_above(value: Any, name: str, floor: int, *, hint: str = "") -> int:
    """``value`` as an int if it is a whole number larger than ``floor``.

    >>> int_above(8, "system_tokens", 8, hint="The system prompt opens with about 8 tokens of its own.")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: system_tokens must be an integer above 8, got 8. The system prompt opens with about 8 tokens of its own.
    """
    if not _is_int(value) or value <= floor:
        raise _fail(name, f"an integer above {floor}", value, hint)
    return int(value)


def optional_positive_int(value: Any, name: str, *, none_means: str, hint: str = "") -> int | None:
    """None (whose meaning the message states), or a positive integer.

    >>> optional_positive_int(0, "concurrency", none_means="every request at once")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: concurrency must be a positive integer, or None for every request at once, got 0.
    """
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise _fail(name, f"a positive integer, or None for {none_means}", value, hint)
    return int(value)


def positive_number(value: Any, name: str, *, unit: str = "", hint: str = "") -> float:
    """``value`` as a float if it is a finite number above 0 (not NaN, not infinite, not a bool).

    >>> positive_number(0.25, "interval_s", unit="seconds")
    0.25
    >>> positive_number(float("inf"), "timeout_s", unit="seconds")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: timeout_s must be a positive, finite number of seconds, got inf.
    """
    if not _is_real(value) or not math.isfinite(value) or value <= 0:
        raise _fail(name, "a positive, finite number" + (f" of {unit}" if unit else ""), value, hint)
    return float(value)


def non_negative_number(value: Any, name: str, *, unit: str = "", hint: str = "") -> float:
    """``value`` as a float if it is a finite number of 0 or more.

    >>> non_negative_number(-0.5, "overhead_gib", unit="GiB")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: overhead_gib must be a finite number of 0 or more GiB, got -0.5.
    """
    if not _is_real(value) or not math.isfinite(value) or value < 0:
        raise _fail(name, "a finite number of 0 or more" + (f" {unit}" if unit else ""), value, hint)
    return float(value)


def fraction(value: Any, name: str, *, of: str = "", hint: str = "") -> float:
    """``value`` as a float if it is a number above 0 and at most 1 (a share of memory, of a GPU).

    >>> fraction("0.9", "gpu_memory_utilization", of="memory")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: gpu_memory_utilization must be a fraction of memory in (0, 1], got '0.9' (a str).
    """
    if not _is_real(value) or not 0 < value <= 1:  # NaN fails the comparison too
        raise _fail(name, "a fraction" + (f" of {of}" if of else "") + " in (0, 1]", value, hint)
    return float(value)


def boolean(value: Any, name: str, *, none_means: str = "", hint: str = "") -> bool | None:
    """``value`` if it is True or False; None too where ``none_means`` says what None means.

    Anything else is refused rather than read as true or false: ``"False"`` and ``"no"`` are truthy.

    >>> boolean("False", "enable_prefix_caching", none_means="vLLM's default")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: enable_prefix_caching must be True or False, or None for vLLM's default, got 'False' (a str).
    """
    if value is None and none_means:
        return None
    if not isinstance(value, bool):
        raise _fail(name, "True or False" + (f", or None for {none_means}" if none_means else ""), value, hint)
    return value


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def positive_ints(values: Any, name: str, *, hint: str = "") -> tuple[int, ...]:
    """A non-empty sequence of positive integers, as a tuple.

    >>> positive_ints([16, 64], "prompt_lens")
    (16, 64)
    >>> positive_ints([16, 0], "prompt_lens")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: prompt_lens[1] must be a positive integer, got 0.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise _fail(name, "a non-empty sequence of positive integers, e.g. (16, 64, 256, 512)", values, hint)
    items = tuple(values)
    if not items:
        raise _fail(name, "a non-empty sequence of positive integers, e.g. (16, 64, 256, 512)", values, hint)
    return tuple(positive_int(v, f"{name}[{i}]", hint=hint) for i, v in enumerate(items))


def one_of(value: Any, name: str, options: Iterable[Any], *, hint: str = "") -> Any:
    """``value`` if it is one of ``options`` (a list or other unhashable value is simply not one of them).

    >>> one_of("fp4", "weights", ("bf16", "fp8", "int4"))
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: weights must be one of 'bf16', 'fp8', 'int4', got 'fp4' (a str).
    """
    options = tuple(options)
    try:
        if value in options:
            return value
    except TypeError:  # an unhashable or incomparable value is not one of them either
        pass
    raise _fail(name, "one of " + ", ".join(map(repr, options)), value, hint)


def fits_context(tokens: int, max_model_len: int | None, what: str, hint: str) -> None:
    """Refuse a request of ``tokens`` tokens that a server of ``max_model_len`` could never serve.

    ``max_model_len`` None means the context length is unknown, and nothing is checked.

    >>> fits_context(2100, 2048, "the longest prompt (512 tokens) plus output_tokens=1588", "Pass fewer output_tokens.")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: the longest prompt (512 tokens) plus output_tokens=1588 is 2,100 tokens, more than the model's context (max_model_len=2,048). Pass fewer output_tokens.
    """
    if max_model_len is not None and tokens > max_model_len:
        raise InvalidArgumentError(f"{what} is {tokens:,} tokens, more than the model's context "
                                   f"(max_model_len={max_model_len:,}). {hint}")


def context_length(target: Any) -> int | None:
    """The context length a server was started with (``target.config.max_model_len``), else None.

    >>> from types import SimpleNamespace
    >>> context_length(SimpleNamespace(config=SimpleNamespace(max_model_len=2048))), context_length(object())
    (2048, None)
    """
    value = getattr(getattr(target, "config", None), "max_model_len", None)
    return int(value) if _is_int(value) and value > 0 else None
