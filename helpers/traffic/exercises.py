"""Lab 2's graded question on what a slot of the larger batch bought, or why this run cannot check it.

The answer divides each setting's measured saturation rate (``MeasuredSaturation.estimate``, the completion
rate of its overloaded rates) by its slots. A setting that kept up at every rate offered has no such rate, and
a number checked against None would only say "Could not check this answer (TypeError ...)", which reads as
the learner's mistake; the verdict names the setting and the knob that would overload it instead.

``grade_slot_ratio`` is pure and returns a :class:`helpers.feedback.Feedback`; ``check_slot_ratio`` prints it.
Taught in ``labs/02_serving_real_traffic.ipynb``; worked solution in ``docs/solutions/02_serving_real_traffic.md``.

    >>> from helpers.traffic.rates import MeasuredSaturation
    >>> found = {"max_num_seqs=2": MeasuredSaturation("max_num_seqs=2", 0.857, 1.285, 0.78),
    ...          "max_num_seqs=8": MeasuredSaturation("max_num_seqs=8", 1.213, 1.819, 1.31)}
    >>> check_slot_ratio(0.42, found, (2, 8), name="a slot", rel_tol=0.02)
    ✅ a slot: correct (0.4199).
    >>> found["max_num_seqs=8"] = MeasuredSaturation("max_num_seqs=8", 2.64, None, None)
    >>> print(grade_slot_ratio(0.42, found, (2, 8), name="a slot").message)  # doctest: +ELLIPSIS
    a slot: this run cannot check it: max_num_seqs=8 kept up at every rate offered (up to 2.64 req/s), ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from helpers.feedback import Feedback, grade_number, graded, show

# Where the lab sets the rates it offers: the last fraction is the one meant to overload each setting
RATES_KNOB = "RATE_FRACTIONS"


def slot_ratio_unmeasured(found: Mapping[str, Any], settings: Sequence[int]) -> str | None:
    """Why the per-slot ratio of ``settings`` (low, high max_num_seqs) cannot be computed from ``found``
    (``helpers.traffic.rates.measured_saturation``), and what to do; None when it can."""
    reasons = []
    for seqs in settings:
        label = f"max_num_seqs={seqs}"
        seen = found.get(label)
        if seen is None:
            reasons.append(f"no rate of {label} was measured (every one failed or was not run: section 2 printed "
                           "why)")
        elif seen.estimate is None:
            upto = f" (up to {seen.last_kept_up:g} req/s)" if seen.last_kept_up is not None else ""
            reasons.append(f"{label} kept up at every rate offered{upto}, so it has no saturation rate to divide "
                           "by its slots")
    if not reasons:
        return None
    return ("; ".join(reasons) + f". Overload it: raise the last of {RATES_KNOB} in the settings cell (e.g. 3 "
            "instead of 1.5: the sweep adds a rate at twice the last where every rate kept up, unless its time bound "
            "left no room, so 1.5 went up to 3x the prediction and 3 goes up to 6x) and run the lab again from "
            "section 1. A clock timed while something else used the machine predicts too low a rate, and every rate "
            "offered is a fraction of it: each rate's load average in the run's sweep.json says whether that "
            "happened.")


def grade_slot_ratio(answer: object, found: Mapping[str, Any], settings: Sequence[int], *, name: str,
                     **options: Any) -> Feedback:
    """The answer against (larger setting's rate / its slots) / (smaller's / its slots), within ``options``
    (those of :func:`helpers.feedback.grade_number`); a verdict without a grade when this run cannot say."""
    low, high = min(settings), max(settings)
    if (why := slot_ratio_unmeasured(found, (high, low))) is not None:
        return Feedback(None, f"{name}: this run cannot check it: {why}")
    larger, smaller = (found[f"max_num_seqs={s}"].estimate for s in (high, low))
    # the likeliest slip is the two rates' ratio, undivided: the hint names the step it skips
    options.setdefault("hint", "divide each setting's estimate by its own max_num_seqs first, then larger over smaller")
    return graded(grade_number, answer, (larger / high) / (smaller / low), name=name, **options)


def check_slot_ratio(answer: object, found: Mapping[str, Any], settings: Sequence[int], **options: Any) -> None:
    """Grade (:func:`grade_slot_ratio`) and print the verdict."""
    show(grade_slot_ratio(answer, found, settings, **options))
