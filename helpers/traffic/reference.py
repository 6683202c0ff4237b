"""Lab 2's sweep beside a recorded one: the H200's, kept in ``results/gpu/lab2/<model>/sweep.json``.

The lab's rates are fractions of each machine's own predicted saturation, so two machines' sweeps offer
different rates; what compares is the shape: where each setting saturated against its prediction, what
the larger batch bought over the smaller, and how fast a request went at light load. :func:`beside_reference`
puts those side by side in one Markdown table, computed from the two sweep files (a rate-sweep file of
:mod:`helpers.traffic.rates` whose ``about`` names the machine, the model and the predictions, as the lab
saves it). :func:`recorded_sweep` finds the recorded one for the served model, None where there is none.

    >>> from helpers.traffic.rates import RatePoint
    >>> def at(setting, rate, served, ttft, tpot):
    ...     sent = [i / rate for i in range(20)]
    ...     lat = [(ttft + max(rate / served - 1, 0) * s, 2.0, 16) for s in sent]
    ...     return RatePoint(setting, rate, 1.0, 20, num_ok=20, achieved_rate=min(rate, served), sent_s=sent,
    ...                      latencies=lat, ttft_p50_s=ttft, tpot_p50_ms=tpot)
    >>> mine = [at("max_num_seqs=2", r, 0.8, 0.3, 80.0) for r in (0.5, 1.2)]
    >>> mine += [at("max_num_seqs=8", r, 1.3, 1.0, 200.0) for r in (0.7, 1.9)]
    >>> theirs = [at("max_num_seqs=8", r, 15.6, 0.02, 4.0) for r in (13.0, 21.8)]
    >>> theirs += [at("max_num_seqs=64", r, 71.2, 0.05, 5.0) for r in (44.0, 109.0)]
    >>> about = {"machine": "CPU: 2 cores", "predicted": {"max_num_seqs=2": 0.86, "max_num_seqs=8": 1.21}}
    >>> print(ratio_sentence(mine, about, theirs, {"machine": "GPU: H200"}))  # doctest: +NORMALIZE_WHITESPACE
    Here, 4x the slots served 1.6x the requests (0.8 -> 1.3 req/s); on GPU: H200, 8x the slots served 4.6x
    the requests (15.6 -> 71.2 req/s).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from helpers.paths import COURSE_ROOT
from helpers.traffic.rates import RatePoint, load_rate_sweep, measured_saturation

RECORDED = COURSE_ROOT / "results" / "gpu" / "lab2"


def recorded_sweep(model: str, folder: Path = RECORDED) -> tuple[list[RatePoint], dict[str, Any]] | None:
    """The recorded sweep of ``model`` (the served model name, e.g. ``"smollm2"``) and its facts, or None."""
    path = Path(folder) / model / "sweep.json"
    return load_rate_sweep(path) if path.is_file() else None


def beside_reference(points: Sequence[RatePoint], about: Mapping[str, Any],
                     reference: tuple[Sequence[RatePoint], Mapping[str, Any]] | None) -> str:
    """A Markdown table, one row per (run, setting): saturation measured and predicted, TTFT p50 at the
    lightest rate; then :func:`ratio_sentence`. Without a reference, says so (nothing is invented). No TPOT
    column: which setting decodes faster at light load is the lab's question 2, asked after this table."""
    if reference is None:
        return "No recorded sweep for this model in `results/gpu/lab2/`: only your run to show."
    ref_points, ref_about = reference
    header = ("| run | setting | saturation measured (req/s) | predicted (req/s) | TTFT p50 at the lightest rate |"
              "\n|---|---|---|---|---|\n")
    rows = _rows("yours", points, about) + _rows(_recorded_label(ref_about), ref_points, ref_about)
    return header + "\n".join(rows) + "\n\n" + ratio_sentence(points, about, ref_points, ref_about)


def ratio_sentence(points: Sequence[RatePoint], about: Mapping[str, Any], ref_points: Sequence[RatePoint],
                   ref_about: Mapping[str, Any]) -> str:
    """What the larger setting bought over the smaller, here and on the recorded machine, as measured."""
    parts = []
    for where, run in (("Here", points), (f"on {ref_about.get('machine', 'the recorded machine')}", ref_points)):
        gain = _gain(run)
        if gain is None:
            parts.append(f"{where}, a setting never saturated, so there is no ratio to compare")
            continue
        (small, low), (large, high) = gain
        parts.append(f"{where}, {large // small}x the slots served {high / low:.1f}x the requests "
                     f"({low:.3g} -> {high:.3g} req/s)")
    return parts[0] + "; " + parts[1] + "."


def _gain(points: Sequence[RatePoint]) -> tuple[tuple[int, float], tuple[int, float]] | None:
    found = {_slots(label): seen.estimate for label, seen in measured_saturation(points).items()}
    if len(found) < 2 or any(rate is None for rate in found.values()):
        return None
    small, large = min(found), max(found)
    return (small, found[small]), (large, found[large])


def _rows(run: str, points: Sequence[RatePoint], about: Mapping[str, Any]) -> list[str]:
    predicted = about.get("predicted") or {}
    rows = []
    for label, seen in sorted(measured_saturation(points).items(), key=lambda item: _slots(item[0])):
        lightest = min((p for p in points if p.ran and p.setting == label), key=lambda p: p.offered_rate)
        measured = f"{seen.estimate:.3g}" if seen.estimate is not None else f"above {seen.last_kept_up:g}"
        guess = f"{predicted[label]:.3g}" if label in predicted else "not recorded"
        rows.append(f"| {run} | {label} | {measured} | {guess} | {_fmt(lightest.ttft_p50_s, 's')} |")
    return rows


def _recorded_label(about: Mapping[str, Any]) -> str:
    facts = [about.get("machine", "recorded"), about.get("vllm") and f"vLLM {about['vllm']}", about.get("date")]
    return "recorded: " + ", ".join(str(fact) for fact in facts if fact)


def _slots(label: str) -> int:
    return int(label.rsplit("=", 1)[-1])


def _fmt(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.3g} {unit}"
