"""Service-level objectives and goodput, in ``vllm bench serve --goodput``'s sense.

An SLO here is a limit, in milliseconds, on any of three per-request latencies:

- ``ttft``: time to first token (send -> first token);
- ``tpot``: time per output token after the first: (end-to-end - TTFT) / (output tokens - 1),
  0 for a one-token answer (as vLLM counts it);
- ``e2el``: end-to-end latency (send -> last token).

A request is *good* when it succeeded and meets every limit given. **Goodput** is good requests
per second of the run: the rate a service can promise, where throughput counts every request,
however late. :meth:`SLO.parse` reads vLLM's own spelling, ``"ttft:500 tpot:50"``, and
:meth:`SLO.vllm_args` writes it back, so the same objective can be handed to vLLM's tool.

    >>> slo = SLO.parse("ttft:500 tpot:50")
    >>> slo
    SLO(ttft_ms=500.0, tpot_ms=50.0, e2el_ms=None)
    >>> slo.vllm_args()
    ['--goodput', 'ttft:500', 'tpot:50']
    >>> tpot_ms(e2e_s=1.3, ttft_s=0.3, output_tokens=11)
    100.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from helpers import validate

NAMES = ("ttft", "tpot", "e2el")


@dataclass(frozen=True)
class SLO:
    """Limits in milliseconds; None: no limit on that latency. At least one is given."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def __post_init__(self) -> None:
        limits = {name: getattr(self, f"{name}_ms") for name in NAMES}
        if all(value is None for value in limits.values()):
            raise validate.InvalidArgumentError(
                "an SLO needs at least one limit, e.g. SLO(ttft_ms=500, tpot_ms=50) or SLO.parse('ttft:500 tpot:50').")
        for name, value in limits.items():
            if value is not None:
                object.__setattr__(self, f"{name}_ms", validate.non_negative_number(
                    value, f"{name}_ms", unit="milliseconds", hint="SLO limits are in milliseconds, e.g. 500."))

    @classmethod
    def parse(cls, text: str) -> SLO:
        """``"ttft:500 tpot:50"`` (milliseconds; names ttft, tpot, e2el) -> SLO."""
        limits: dict[str, float] = {}
        for pair in str(text).replace(",", " ").split():
            name, _, value = pair.partition(":")
            if name not in NAMES or not value:
                raise validate.InvalidArgumentError(
                    f"cannot read {pair!r} as an SLO limit: write NAME:MILLISECONDS pairs with NAME one of "
                    f"{', '.join(NAMES)}, e.g. 'ttft:500 tpot:50'.")
            try:
                limits[f"{name}_ms"] = float(value.removesuffix("ms"))
            except ValueError:
                raise validate.InvalidArgumentError(
                    f"{pair!r}: the limit must be a number of milliseconds, e.g. {name}:500.") from None
        return cls(**limits)

    def vllm_args(self) -> list[str]:
        """The same objective for ``vllm bench serve``."""
        pairs = [f"{name}:{getattr(self, f'{name}_ms'):g}" for name in NAMES if getattr(self, f"{name}_ms") is not None]
        return ["--goodput", *pairs]

    def met_by(self, record: Any) -> bool:
        """Did this request (a RequestRecord) succeed within every limit?"""
        if not record.ok or record.ttft_s is None or record.e2e_s is None:
            return False
        measured = {"ttft": record.ttft_s * 1000, "e2el": record.e2e_s * 1000,
                    "tpot": tpot_ms(record.e2e_s, record.ttft_s, record.output_tokens or 0)}
        return all(measured[name] <= getattr(self, f"{name}_ms") for name in NAMES
                   if getattr(self, f"{name}_ms") is not None)

    def describe(self) -> str:
        words = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "end-to-end latency"}
        return ", ".join(f"{words[name]} <= {getattr(self, f'{name}_ms'):g} ms" for name in NAMES
                         if getattr(self, f"{name}_ms") is not None)


def tpot_ms(e2e_s: float, ttft_s: float, output_tokens: int) -> float:
    """Time per output token after the first, in ms; 0 for an answer of one token or none."""
    return (e2e_s - ttft_s) * 1000 / (output_tokens - 1) if output_tokens > 1 else 0.0


@dataclass(frozen=True)
class Goodput:
    """How many requests of a run met the SLO, and at what rate."""

    good: int
    completed: int  # requests that succeeded, good or not
    total: int
    duration_s: float

    @property
    def per_s(self) -> float:
        """Good requests per second of the run (vLLM's "request goodput")."""
        return self.good / self.duration_s if self.duration_s > 0 else math.nan

    @property
    def fraction(self) -> float:
        """Good requests as a fraction of all requests sent."""
        return self.good / self.total if self.total else math.nan


def goodput(records: Sequence[Any], slo: SLO, duration_s: float) -> Goodput:
    """The goodput of a run's records under ``slo``, over ``duration_s`` (the run's wall time)."""
    duration_s = validate.positive_number(duration_s, "duration_s", unit="seconds")
    return Goodput(good=sum(slo.met_by(record) for record in records),
                   completed=sum(bool(record.ok) for record in records), total=len(records), duration_s=duration_s)
