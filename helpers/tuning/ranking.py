"""The module text's claim that the tuning levers come "roughly in order of impact", tested with one run's numbers.

Each lever's impact is one number, its **factor**: the output tokens/s of the setting you would tune towards over
that of the other setting, both measured on the same load (the checklist's throughput ratio). A lever's **size** is
how far the factor is from 1 in either direction (2.0 and 0.5 both have size 2), so a lever that hurts counts as much
as one that helps. :func:`rank` orders the measured levers by size; :func:`judge_order` takes every pair of levers
in the module's order (the one it lists first above the other) and says whether this run agrees:

- ``"right"``: the lever the module lists first is larger by more than the noise;
- ``"wrong"``: it is smaller by more than the noise;
- ``"too close"``: the two sizes are within the noise of each other (under a factor of ``1 + noise`` either way,
  :func:`~helpers.tuning.comparison.within_noise`, the rule the checklist's verdicts use);
- pairs with a lever not measured in this run are left out.

:func:`compare_prediction` scores a learner's predicted order on the same pairs, and counts a pair that is too close
to call as neither right nor wrong.

What it leaves out: a factor holds for this load and these two settings only (a pool shrunk until it bites shows
a large factor; the same lever between two ample pools shows none), and throughput only: prefix caching's gain in
time to first token is not part of it. Pure: numbers in, verdicts out.
Taught in ``notebooks/05_throughput_tuning.ipynb``.

Example::

    >>> impacts = [LeverImpact("kv pool", 2.0, "0.025 -> 2 GiB"), LeverImpact("max_num_seqs", 1.1, "8 -> 64"),
    ...            LeverImpact("prefix caching", 4.5, "off -> on")]
    >>> [i.lever for i in rank(impacts)]
    ['prefix caching', 'kv pool', 'max_num_seqs']
    >>> [(v.first, v.second, v.verdict) for v in judge_order(impacts)]
    [('kv pool', 'max_num_seqs', 'right'), ('kv pool', 'prefix caching', 'wrong'), ('max_num_seqs', 'prefix caching', 'wrong')]
    >>> print(score(judge_order(impacts)))
    the module's order gets 1 of 3 pairs right on this run (2 wrong, 0 too close to call)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from helpers import validate
from helpers.tuning.comparison import NOISE, compare_measurements, spreads_overlap, within_noise

# The module text's "Key levers, roughly in order of impact", first to last, in the names the exercises use.
MODULE_ORDER = ("kv pool", "max_num_seqs", "quantization", "prefix caching")


@dataclass(frozen=True)
class LeverImpact:
    """One lever, measured: ``factor`` = output tok/s at the tuned setting / at the other (None: not measured)."""

    lever: str  # one of MODULE_ORDER
    factor: float | None
    settings: str  # the two settings compared, in words, e.g. "0.025 GiB -> 2 GiB pool"
    overlapping: bool | None = None  # whether the two sides' repeated runs' ranges overlap; None: a side ran once

    @property
    def size(self) -> float | None:
        """How many times throughput moved, either way: ``max(factor, 1 / factor)``.

        >>> LeverImpact("kv pool", 0.5, "").size, LeverImpact("kv pool", None, "").size
        (2.0, None)
        """
        if self.factor is None or not math.isfinite(self.factor) or self.factor <= 0:
            return None
        return max(self.factor, 1 / self.factor)


def impact_of(lever: str, before: Any, after: Any) -> LeverImpact:
    """A lever's impact from two :class:`~helpers.tuning.measurement.Measurement` objects (``after``: the setting
    you would tune towards); the factor is None when either side was not measured (see ``compare_measurements``)."""
    if lever not in MODULE_ORDER:
        raise ValueError(f"lever must be one of {', '.join(MODULE_ORDER)}, got {lever!r}.")
    change = compare_measurements(before, after)
    return LeverImpact(lever, change.throughput_ratio, f"{change.before} -> {change.after}",
                       spreads_overlap(before, after))


def rank(impacts: Sequence[LeverImpact]) -> list[LeverImpact]:
    """The measured levers, largest size first (equal sizes keep their given order); unmeasured ones left out."""
    return sorted((i for i in impacts if i.size is not None), key=lambda i: -i.size)


@dataclass(frozen=True)
class PairVerdict:
    """Two levers in the module's order (``first`` listed above ``second``) and what this run says of that order."""

    first: str
    second: str
    ratio: float  # size of first / size of second
    verdict: str  # "right", "wrong" or "too close"


def judge_order(impacts: Sequence[LeverImpact], claimed: Sequence[str] = MODULE_ORDER,
                noise: float = NOISE) -> list[PairVerdict]:
    """Every pair of measured levers, in ``claimed`` order, judged by the ratio of their sizes.

    >>> [v.verdict for v in judge_order([LeverImpact("kv pool", 1.2, ""), LeverImpact("max_num_seqs", 1.1, "")])]
    ['too close']
    """
    noise = validate.non_negative_number(noise, "noise", hint="It is a fraction, e.g. 0.25 for 25%.")
    sizes = {i.lever: i.size for i in impacts if i.size is not None}
    unknown = set(sizes) - set(claimed)
    if unknown:
        raise ValueError(f"levers not in the claimed order: {sorted(unknown)}")
    measured = [lever for lever in claimed if lever in sizes]
    verdicts = []
    for n, first in enumerate(measured):
        for second in measured[n + 1:]:
            ratio = sizes[first] / sizes[second]
            verdicts.append(PairVerdict(first, second, ratio, _verdict(ratio, noise)))
    return verdicts


def _verdict(ratio: float, noise: float) -> str:
    """A pair's verdict from the ratio of its sizes (the first listed over the second)."""
    return "too close" if within_noise(ratio, noise) else "right" if ratio > 1 else "wrong"


def score(verdicts: Sequence[PairVerdict]) -> str:
    """How many pairs the module's order gets right, in one line."""
    count = {v: sum(p.verdict == v for p in verdicts) for v in ("right", "wrong", "too close")}
    return (f"the module's order gets {count['right']} of {len(verdicts)} pairs right on this run "
            f"({count['wrong']} wrong, {count['too close']} too close to call)")


def ranking_table(impacts: Sequence[LeverImpact], noise: float = NOISE) -> str:
    """A Markdown table: the measured levers by size, with the module's place for each, then the unmeasured ones.
    A size is marked "(within the noise)" by the rule the checklist's verdict uses (:func:`within_noise`).

    >>> print(ranking_table([LeverImpact("max_num_seqs", 1.1, "8 -> 64"), LeverImpact("quantization", None, "-")]))
    | measured rank | lever | settings compared | output tok/s factor | size | module's place |
    |---|---|---|---|---|---|
    | 1 | max_num_seqs | 8 -> 64 | 1.10x | 1.10x (within the noise) | 2 |
    | - | quantization | - | not measured | - | 3 |
    """
    lines = ["| measured rank | lever | settings compared | output tok/s factor | size | module's place |",
             "|---|---|---|---|---|---|"]
    ranked = rank(impacts)
    for n, i in enumerate(ranked, 1):
        quiet = " (within the noise)" if within_noise(i.factor, noise, i.overlapping) else ""
        lines.append(f"| {n} | {i.lever} | {i.settings} | {i.factor:.2f}x | {i.size:.2f}x{quiet} | "
                     f"{_place(i.lever)} |")
    for i in impacts:
        if i.size is None:
            lines.append(f"| - | {i.lever} | {i.settings} | not measured | - | {_place(i.lever)} |")
    return "\n".join(lines)


def _place(lever: str) -> str:
    return str(MODULE_ORDER.index(lever) + 1) if lever in MODULE_ORDER else "-"


def measured_order(impacts: Sequence[LeverImpact], noise: float = NOISE) -> str:
    """The measured levers, largest first, each with its size: ">" between two levers apart by more than the noise,
    "≈" between two within it (:func:`judge_order`'s "too close"), so the line never claims an order the run cannot tell.

    >>> print(measured_order([LeverImpact("kv pool", 1.05, ""), LeverImpact("prefix caching", 4.5, ""),
    ...                       LeverImpact("max_num_seqs", 0.94, ""), LeverImpact("quantization", None, "")]))
    prefix caching 4.50x > max_num_seqs 1.06x ≈ kv pool 1.05x
    """
    noise = validate.non_negative_number(noise, "noise", hint="It is a fraction, e.g. 0.25 for 25%.")
    ranked = rank(impacts)
    return " ".join(f"{'' if n == 0 else '≈ ' if within_noise(ranked[n - 1].size / i.size, noise) else '> '}"
                    f"{i.lever} {i.size:.2f}x" for n, i in enumerate(ranked))


def compare_prediction(prediction: Any, impacts: Sequence[LeverImpact], noise: float = NOISE) -> str:
    """The learner's predicted order (a list of lever names, largest first) against the measured one, in words.
    Measured levers whose sizes are within the noise of each other (:func:`judge_order`'s "too close") read
    "≈" and their pairs are not scored.

    >>> impacts = [LeverImpact("kv pool", 2.0, ""), LeverImpact("prefix caching", 4.5, "")]
    >>> print(compare_prediction(["kv pool", "prefix caching"], impacts))
    You predicted kv pool > prefix caching; measured prefix caching 4.50x > kv pool 2.00x: 0 of 1 pairs in the measured order.
    >>> print(compare_prediction(["kv pool", "max_num_seqs"], [LeverImpact("kv pool", 1.05, ""),
    ...                                                        LeverImpact("max_num_seqs", 1.06, "")]))
    You predicted kv pool > max_num_seqs; measured max_num_seqs 1.06x ≈ kv pool 1.05x: no pair apart by more than the noise to score (1 too close to call: max_num_seqs and kv pool).
    >>> print(compare_prediction(None, impacts))
    No prediction recorded (order_prediction is None): measured prefix caching 4.50x > kv pool 2.00x.
    """
    noise = validate.non_negative_number(noise, "noise", hint="It is a fraction, e.g. 0.25 for 25%.")
    sizes = {i.lever: i.size for i in rank(impacts)}
    measured = list(sizes)
    shown = measured_order(impacts, noise)
    if prediction is None:
        return f"No prediction recorded (order_prediction is None): measured {shown}."
    if isinstance(prediction, str) or not all(isinstance(p, str) for p in prediction):
        return f"order_prediction should be a list of lever names, e.g. {list(MODULE_ORDER)}; measured {shown}."
    named = [p.strip().lower() for p in prediction]
    kept = [p for p in named if p in measured]
    pairs = [(a, b) for n, a in enumerate(measured) for b in measured[n + 1:] if a in kept and b in kept]
    close = [(a, b) for a, b in pairs if _verdict(sizes[a] / sizes[b], noise) == "too close"]
    scored = [pair for pair in pairs if pair not in close]
    agree = sum(kept.index(a) < kept.index(b) for a, b in scored)
    missing = [m for m in measured if m not in kept]
    left_out = f" (not in your list: {', '.join(missing)})" if missing else ""
    verdict = (f"{agree} of {len(scored)} pairs in the measured order" if scored or not close else
               "no pair apart by more than the noise to score")
    if close:
        verdict += f" ({len(close)} too close to call: {'; '.join(f'{a} and {b}' for a, b in close)})"
    return f"You predicted {' > '.join(named)}; measured {shown}: {verdict}{left_out}."
