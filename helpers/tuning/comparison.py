"""Before and after: two :class:`~helpers.tuning.measurement.Measurement` objects as ratios
(:func:`compare_measurements`) and in words (:func:`describe_ratio`, :func:`describe_change`),
calling a change within the run-to-run noise what it is (:func:`within_noise`: one rule for every
sentence and table that judges a ratio). Pure: numbers in, text out.

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
from helpers.units import share

# Separate server starts on the course's 2-core CPU differed by 20-25% in throughput for the
# same setting (the lab's repetitions show it; notebook 05's Concepts cite them): a smaller change
# is not a finding. A GPU's single runs spread wider (results/gpu/README.md), which is why its
# repeated runs' ranges, where they exist, decide instead (within_noise).
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


def within_noise(ratio: float, noise: float = NOISE, overlapping: bool | None = None) -> bool:
    """Whether a ratio is no finding: where both sides repeated their runs (``overlapping`` not None),
    whether their ranges overlap; else whether it is under ``1 + noise`` either way, so that a
    change and its reverse (1.25x and 0.8x) get the same verdict.

    >>> within_noise(1.2), within_noise(1 / 1.2), within_noise(1.25), within_noise(0.8)
    (True, True, False, False)
    >>> within_noise(1.2, overlapping=False), within_noise(2.0, overlapping=True)
    (False, True)
    """
    if overlapping is not None:  # measured spreads say more about this run than the CPU's constant
        return overlapping
    return ratio > 0 and max(ratio, 1 / ratio) < 1 + noise


def describe_noise(noise: float = NOISE) -> str:
    """The noise threshold in words: the factor either way and, for the course's, what it is.

    >>> describe_noise()
    "a change under 1.25x either way counts as noise: the course's chosen band for one run of each setting on its own server start, on the safe side (notebook 05's Concepts)"
    >>> describe_noise(0.1)
    'a change under 1.10x either way counts as noise'
    """
    # a choice, not a measurement: no results file records how far two starts of one setting differ
    where = (": the course's chosen band for one run of each setting on its own server start, on the safe side "
             "(notebook 05's Concepts)" if noise == NOISE else "")
    return f"a change under {1 + noise:.2f}x either way counts as noise{where}"


def describe_ratio(ratio: float | None, what: str, noise: float = NOISE, overlapping: bool | None = None) -> str:
    """A ratio in words, calling it noise by :func:`within_noise`. ``overlapping``: whether the
    repeated runs' ranges of the two sides overlap (:func:`spreads_overlap`); None where either side
    ran once, and then the ``noise`` threshold decides (:func:`describe_noise` says where it comes from; a
    sentence of several ratios says it once, not in each).

    >>> describe_ratio(1.8, "throughput"), describe_ratio(0.5, "p95 latency")
    ('throughput 1.80x (up 80%)', 'p95 latency 0.50x (down 50%)')
    >>> describe_ratio(1.1, "throughput"), describe_ratio(0.9, "throughput", noise=0.05)
    ('throughput 1.10x (within the noise: under 1.25x either way)', 'throughput 0.90x (down 10%)')
    >>> describe_ratio(1.4, "throughput", overlapping=True)
    "throughput 1.40x (within the run-to-run noise: the runs' ranges overlap)"
    >>> describe_ratio(1.2, "throughput", overlapping=False)
    "throughput 1.20x (up 20%: the runs' ranges do not overlap)"
    >>> describe_ratio(None, "p95 latency")
    'p95 latency: not measured'
    """
    noise = validate.non_negative_number(noise, "noise", hint="It is a fraction, e.g. 0.25 for 25%.")
    if ratio is None or not math.isfinite(ratio):
        return f"{what}: not measured"
    if overlapping:
        return f"{what} {ratio:.2f}x (within the run-to-run noise: the runs' ranges overlap)"
    if within_noise(ratio, noise, overlapping):
        return f"{what} {ratio:.2f}x (within the noise: under {1 + noise:.2f}x either way)"
    # Disjoint ranges make a change a finding that the threshold alone would call noise: say why.
    apart = ": the runs' ranges do not overlap" if within_noise(ratio, noise) else ""
    return f"{what} {ratio:.2f}x ({'up' if ratio > 1 else 'down'} {share(abs(ratio - 1))}{apart})"


def spreads_overlap(before: Any, after: Any) -> bool | None:
    """Whether the ranges of output tok/s of two sides that each ran their load more than once meet;
    None where either side ran it once (no range to compare).

    >>> from dataclasses import replace
    >>> m = Measurement.not_run("KV pool", "2 GiB", "x")
    >>> spreads_overlap(replace(m, runs_tok_s=(9.0, 11.0)), replace(m, runs_tok_s=(10.0, 12.0)))
    True
    >>> spreads_overlap(replace(m, runs_tok_s=(9.0, 11.0)), replace(m, runs_tok_s=(12.0, 13.0)))
    False
    >>> print(spreads_overlap(replace(m, runs_tok_s=(9.0, 11.0)), m))
    None
    """
    a, b = getattr(before, "spread", None), getattr(after, "spread", None)
    if a is None or b is None:
        return None
    return a[0] <= b[1] and b[0] <= a[1]


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

    Where a load ran more than once (on a GPU), the throughput names each side's range over its runs, and
    whether the ranges overlap decides whether the change is noise (see :func:`within_noise`); where a ratio
    was judged by the fixed threshold instead, a last sentence says what that threshold is. A number that
    could not be measured (every request of a run failed) reads "-", and
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
    overlapping = spreads_overlap(before, after)
    judged_by_threshold = any(r is not None and math.isfinite(r) and within_noise(r, NOISE, o) and o is None
                              for r, o in ((c.throughput_ratio, overlapping), (c.e2e_p95_ratio, None),
                                           (c.ttft_p50_ratio, None)))
    note = describe_noise()
    threshold = f" {note[0].upper()}{note[1:]}." if judged_by_threshold else ""
    return (f"{before.lever} {before.setting} -> {after.setting}: "
            f"{describe_ratio(c.throughput_ratio, 'throughput', overlapping=overlapping)} "
            f"({arrow(b.output_tok_per_s, a.output_tok_per_s, '.0f')} output tok/s"
            f"{describe_spreads(before, after)}), "
            f"{describe_ratio(c.e2e_p95_ratio, 'p95 latency')} "
            f"({arrow(b.e2e_p95_s, a.e2e_p95_s, '.1f', missing_one=True)} s), "
            f"{describe_ratio(c.ttft_p50_ratio, 'median TTFT')} "
            f"({arrow(b.ttft_p50_s, a.ttft_p50_s, '.2f', missing_one=True)} s).{threshold}{caution}{failures}")


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
