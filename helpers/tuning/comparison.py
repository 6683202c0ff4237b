"""Before and after: two :class:`~helpers.tuning.measurement.Measurement` objects as ratios
(:func:`compare_measurements`) and in words (:func:`describe_ratio`, :func:`describe_change`),
calling a change smaller than the run-to-run noise what it is. Pure: numbers in, text out.

A side that was not measured (None, or a run cut short by its server dying: ``failure`` set)
is not compared: its ratios are None, and the sentences name it and why.

Example::

    >>> describe_ratio(0.5, "p95 latency")
    'p95 latency 0.50x (down 50%)'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from helpers import validate
from helpers.tuning.measurement import Measurement

# Separate server starts on the course's 2-core CPU differed by 20-25% in throughput for the
# same setting (the lab's repetitions show it): a smaller change is not a finding.
NOISE = 0.25


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


def stand_in(m: Any, other: Any) -> Any:
    """``m``, or where it is None (a side never measured) a not-run measurement of ``other``'s lever.

    >>> stand_in(None, Measurement.not_run("KV pool", "2 GiB", "x")).failure
    'not run: no measurement was given'
    """
    if m is not None:
        return m
    lever = getattr(other, "lever", "setting")
    return Measurement.not_run(lever, "(not measured)", "no measurement was given")


def _comparable(m: Any) -> bool:
    return getattr(m, "failure", None) is None


def compare_measurements(before: Any, after: Any) -> Change:
    """``after``'s throughput and latencies over ``before``'s; all None where either side was
    not measured (None, not run, or cut short by its server: ``failure`` set), else None where
    either number is unmeasured."""
    before, after = stand_in(before, after), stand_in(after, before)
    if not (_comparable(before) and _comparable(after)):
        return Change(before.setting, after.setting, None, None, None, None)
    b, a = before.summary, after.summary
    return Change(
        before.setting, after.setting,
        throughput_ratio=_ratio(a.output_tok_per_s, b.output_tok_per_s),
        e2e_p95_ratio=_ratio(a.e2e_p95_s, b.e2e_p95_s),
        ttft_p50_ratio=_ratio(a.ttft_p50_s, b.ttft_p50_s),
        ttft_p95_ratio=_ratio(a.ttft_p95_s, b.ttft_p95_s),
    )


def describe_ratio(ratio: float | None, what: str, noise: float = NOISE, overlapping: bool = False) -> str:
    """A ratio in words, treating a change smaller than ``noise``, or one whose repeated runs' ranges
    overlap (``overlapping``), as no finding.

    >>> describe_ratio(1.8, "throughput"), describe_ratio(0.5, "p95 latency")
    ('throughput 1.80x (up 80%)', 'p95 latency 0.50x (down 50%)')
    >>> describe_ratio(1.1, "throughput")
    'throughput 1.10x (within the run-to-run noise of about 25%)'
    >>> describe_ratio(1.4, "throughput", overlapping=True)
    "throughput 1.40x (within the run-to-run noise: the runs' ranges overlap)"
    >>> describe_ratio(None, "p95 latency")
    'p95 latency: not measured'
    """
    noise = validate.non_negative_number(noise, "noise", hint="It is a fraction, e.g. 0.25 for 25%.")
    if ratio is None or not math.isfinite(ratio):
        return f"{what}: not measured"
    if abs(ratio - 1) < noise:
        return f"{what} {ratio:.2f}x (within the run-to-run noise of about {noise:.0%})"
    if overlapping:
        return f"{what} {ratio:.2f}x (within the run-to-run noise: the runs' ranges overlap)"
    return f"{what} {ratio:.2f}x ({'up' if ratio > 1 else 'down'} {abs(ratio - 1):.0%})"


def spreads_overlap(before: Any, after: Any) -> bool:
    """Whether both sides ran their load more than once and the ranges of their output tok/s meet."""
    a, b = getattr(before, "spread", None), getattr(after, "spread", None)
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def describe_spreads(before: Any, after: Any) -> str:
    """``"; runs 10,900-12,000 -> 19,800-20,600"``: each side's range of output tok/s over its repeated runs, or
    "" where neither side repeated its load.

    >>> from dataclasses import replace
    >>> from helpers.tuning.measurement import Measurement
    >>> m = Measurement.not_run("KV pool", "2 GiB", "x")
    >>> describe_spreads(replace(m, runs_tok_s=(900.0, 1200.0)), replace(m, runs_tok_s=(2000.0,)))
    '; runs 900-1,200 -> 2,000'
    >>> describe_spreads(m, m)
    ''
    """
    def one(m: Any) -> str:
        values, spread = getattr(m, "runs_tok_s", ()), getattr(m, "spread", None)
        if spread is not None:
            return f"{spread[0]:,.0f}-{spread[1]:,.0f}"
        return f"{values[0]:,.0f}" if values else "-"

    if getattr(before, "spread", None) is None and getattr(after, "spread", None) is None:
        return ""
    return f"; runs {one(before)} -> {one(after)}"


def describe_change(before: Any, after: Any) -> str:
    """One sentence: what moving from ``before`` to ``after`` did, with the measured numbers.

    Where a load ran more than once (on a GPU), the throughput names each side's range over its runs and
    calls the change noise where the ranges overlap. A number that could not be measured (every request of a run
    failed) reads "-", and
    failed requests are counted in words at the end, with their errors. A side that was not
    measured (None, not run, or cut short by its server dying) is not compared: its numbers
    read "-" and the sentence ends with what happened to it.
    """
    if before is None and after is None:
        return "Nothing to compare: neither side was measured."
    before, after = stand_in(before, after), stand_in(after, before)
    shared = before.other_servers or after.other_servers
    caution = (" Another vLLM server shared the machine during these runs: the difference may be partly "
               "theirs." if shared else "")
    failures = "".join(f" {text}" for m in (before, after) if (text := m.trouble()) is not None)
    if not (_comparable(before) and _comparable(after)):
        measured = "".join(f" Measured at {m.setting}: {_numbers(m.summary)}." for m in (before, after)
                           if _comparable(m))
        return f"{before.lever} {before.setting} -> {after.setting}: not compared.{failures}{measured}{caution}"
    b, a, c = before.summary, after.summary, compare_measurements(before, after)
    return (f"{before.lever} {before.setting} -> {after.setting}: "
            f"{describe_ratio(c.throughput_ratio, 'throughput', overlapping=spreads_overlap(before, after))} "
            f"({arrow(b.output_tok_per_s, a.output_tok_per_s, '.0f')} output tok/s"
            f"{describe_spreads(before, after)}), "
            f"{describe_ratio(c.e2e_p95_ratio, 'p95 latency')} "
            f"({arrow(b.e2e_p95_s, a.e2e_p95_s, '.1f', missing_one=True)} s), "
            f"{describe_ratio(c.ttft_p50_ratio, 'median TTFT')} "
            f"({arrow(b.ttft_p50_s, a.ttft_p50_s, '.2f', missing_one=True)} s).{caution}{failures}")


def _numbers(s: Any) -> str:
    """A summary's throughput and latencies in words; "-" where unmeasured."""
    show = lambda v, fmt: "-" if v is None else f"{v:{fmt}}"
    return (f"{show(s.output_tok_per_s, '.0f')} output tok/s, p95 latency {show(s.e2e_p95_s, '.1f')} s, "
            f"median TTFT {show(s.ttft_p50_s, '.2f')} s")


def arrow(before: float | None, after: float | None, fmt: str, missing_one: bool = False) -> str:
    """``"1.0 -> 2.0"``; "-" when either is unknown, or with ``missing_one`` the unknown side alone.

    >>> arrow(1.0, 2.0, ".1f"), arrow(1.0, None, ".1f"), arrow(1.0, None, ".1f", missing_one=True)
    ('1.0 -> 2.0', '-', '1.0 -> -')
    """
    if before is None and after is None or not missing_one and (before is None or after is None):
        return "-"
    show = lambda v: "-" if v is None else f"{v:{fmt}}"
    return f"{show(before)} -> {show(after)}"
