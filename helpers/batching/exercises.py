"""Automatic checks for the continuous-batching notebook's exercises.

Each exercise has a pure `grade_*` function (answer -> `helpers.feedback.Feedback`) and a
`check_*` wrapper that prints the feedback and never raises (`helpers.feedback.graded`), so
a notebook with unanswered exercises (`answer = None`) still runs top to bottom in CI. The
right answers are computed from the simulator and the step-time model, not typed in, so they
stay right if those change.

Solutions, with the reasoning: docs/solutions/04_continuous_batching.md.
Taught in notebooks/04_continuous_batching.ipynb.

>>> grade_static_utilization(None).ok is None   # not answered yet
True
>>> grade_static_utilization(20 / 28).ok
True
"""

from __future__ import annotations

import math
from typing import Any

from helpers import answer_audit, validate
from helpers.batching.measure_stats import ms_text
from helpers.batching.sim import simulate_continuous, simulate_static
from helpers.batching.step_time import StepTimeModel
from helpers.batching.trace import (
    BATCHING_TRACE_KINDS,
    BatchRequest,
    make_batching_trace,
)
from helpers.feedback import Feedback, graded, show


# The verdict's first words, as the notebook has always printed them after the mark.
def _right(message: str) -> Feedback:
    return Feedback(True, f"Correct. {message}")


def _wrong(message: str) -> Feedback:
    return Feedback(False, f"Not yet. {message}")


def _unanswered(message: str) -> Feedback:
    return Feedback(None, f"Not answered yet. {message}")


def _number(answer: Any) -> float:
    value = float(answer)
    if not math.isfinite(value):
        raise ValueError("the answer is not a finite number")
    return value


# ----- exercise 1: static batching's slot utilization by hand ---------------------------------
#: Four requests arriving together, two batch slots, every step 1 s whatever it holds.
TINY_TRACE = (
    BatchRequest("r0", 0.0, 4, 2),
    BatchRequest("r1", 0.0, 4, 8),
    BatchRequest("r2", 0.0, 4, 4),
    BatchRequest("r3", 0.0, 4, 6),
)
TINY_MAX_NUM_SEQS = 2
UNIT_STEPS = StepTimeModel(overhead_s=1.0, prefill_token_s=0.0, decode_seq_s=0.0)  # every step 1 s


def describe_tiny_trace() -> str:
    """The exercise's trace as text, for the notebook."""
    lines = [f"max_num_seqs = {TINY_MAX_NUM_SEQS}; every engine step takes 1 s; all requests arrive at t = 0",
             "request  output tokens"]
    lines += [f"{r.request_id:>7}  {r.output_len:>13}" for r in TINY_TRACE]
    return "\n".join(lines)


def _utilization(answer: Any, policy: str) -> Feedback:
    simulate = simulate_static if policy == "static" else simulate_continuous
    result = simulate(list(TINY_TRACE), TINY_MAX_NUM_SEQS, UNIT_STEPS)
    right = result.summary.slot_utilization
    answer_audit.expect(f"{policy} utilization", right)
    if answer is None:
        return _unanswered("Set `answer` to a fraction between 0 and 1, e.g. 0.5.")
    value = _number(answer)
    note = ""
    if 1 < value <= 100:
        value, note = value / 100, f"(read {answer} as {value / 100:.3f}, a percentage) "
    busy = round(right * TINY_MAX_NUM_SEQS * result.summary.num_steps)
    if abs(value - right) <= 0.01:
        return _right(f"{note}{policy.capitalize()} batching keeps {busy} of "
                              f"{TINY_MAX_NUM_SEQS} x {result.summary.num_steps} slot-steps busy: {right:.3f}.")
    hint = ("Count steps batch by batch: a batch lasts as many steps as its longest member has output "
            "tokens (the first token comes out of the prefill step); a slot is busy while its request "
            "still has tokens to produce." if policy == "static" else
            "A freed slot is taken by the next waiting request at the very next step.")
    return _wrong(f"{note}{value:.3f} is not it. {hint}")


def grade_static_utilization(answer: Any) -> Feedback:
    """Exercise 1: busy slot-steps / (max_num_seqs x steps) for TINY_TRACE under static batching."""
    return _utilization(answer, "static")


def grade_continuous_utilization(answer: Any) -> Feedback:
    """Exercise 1, second part: the same for continuous batching."""
    return _utilization(answer, "continuous")


def check_static_utilization(answer: Any) -> None:
    show(graded(grade_static_utilization, answer))


def check_continuous_utilization(answer: Any) -> None:
    show(graded(grade_continuous_utilization, answer))


# ----- exercise 2: which trace gains most from continuous batching, and why -------------------
GAIN_MAX_NUM_SEQS = 8
GAIN_REASONS = {
    "a": "Its requests all arrive at the same moment, so the batch fills at once.",
    "b": "Its output lengths are the most unequal, so static batches idle longest while their "
         "longest member finishes.",
    "c": "Its prompts are the longest, so prefill dominates and continuous batching skips it.",
    "d": "It has the most requests, so the queue is longest.",
}
RIGHT_REASON = "b"


def throughput_ratios(max_num_seqs: int = GAIN_MAX_NUM_SEQS, model: StepTimeModel | None = None) -> dict[str, float]:
    """Continuous / static output tok/s for each trace kind (32 requests, spread 0.5, seed 0).

    >>> ratios = throughput_ratios()
    >>> max(ratios, key=ratios.get)
    'mixed'
    """
    ratios = {}
    for kind in BATCHING_TRACE_KINDS:
        trace = make_batching_trace(kind, 32, spread=0.5, seed=0)
        static = simulate_static(trace, max_num_seqs, model).summary.output_tok_s
        ratios[kind] = simulate_continuous(trace, max_num_seqs, model).summary.output_tok_s / static
    return ratios


def grade_biggest_gain(kind: Any, reason: Any = None) -> Feedback:
    """Exercise 2: the trace kind with the largest continuous/static throughput ratio, and why."""
    if kind is None:
        return _unanswered(f"Set `answer` to one of {BATCHING_TRACE_KINDS} and `reason` to a letter.")
    kind = str(kind).strip().lower()
    if kind not in BATCHING_TRACE_KINDS:
        return _wrong(f"{kind!r} is not a trace kind; choose one of {BATCHING_TRACE_KINDS}.")
    ratios = throughput_ratios()
    best = max(ratios, key=ratios.get)
    table = ", ".join(f"{k} {v:.2f}x" for k, v in sorted(ratios.items(), key=lambda kv: -kv[1]))
    if kind != best:
        return _wrong(f"{kind!r} gains {ratios[kind]:.2f}x. Simulate each kind at "
                               f"max_num_seqs={GAIN_MAX_NUM_SEQS} and compare the ratios.")
    if reason is None:
        return _unanswered(f"{kind!r} is right ({table}). Now set `reason` to a letter of GAIN_REASONS.")
    letter = str(reason).strip().lower()
    if letter != RIGHT_REASON:
        return _wrong(f"{kind!r} is right ({table}), but reason {letter!r} is not why: "
                               "compare the output lengths of the four traces.")
    return _right(f"{table}. {GAIN_REASONS[RIGHT_REASON]} With equal lengths (the lab trace) "
                          "there is nothing to gain.")


def check_biggest_gain(kind: Any, reason: Any = None) -> None:
    show(graded(grade_biggest_gain, kind, reason))


# ----- exercise 3: how big a batch decoding needs -------------------------------------------
CEILING_FRACTION = 0.8


def decode_ceiling_tok_s(model: StepTimeModel) -> float:
    """The limit of model.decode_tok_s(b) = b / (overhead + b * decode_seq) as b grows.

    >>> round(decode_ceiling_tok_s(StepTimeModel(overhead_s=0.03, decode_seq_s=0.004)))
    250
    """
    return 1.0 / model.decode_seq_s if model.decode_seq_s > 0 else math.inf


def batch_for_fraction_of_ceiling(model: StepTimeModel, fraction: float = CEILING_FRACTION) -> float:
    """The batch size b at which decoding reaches `fraction` of its ceiling, as a real number.

    b / (o + b d) = f / d  gives  b = f / (1 - f) * o / d: for f = 0.8, four times overhead / decode_seq.

    >>> round(batch_for_fraction_of_ceiling(StepTimeModel(overhead_s=0.03, decode_seq_s=0.004)), 6)
    30.0
    """
    if not 0 < fraction < 1:
        raise validate.InvalidArgumentError(f"fraction must be between 0 and 1 (exclusive), got {fraction!r}.")
    if model.decode_seq_s <= 0:
        return math.inf
    return fraction / (1 - fraction) * model.overhead_s / model.decode_seq_s


def grade_batch_for_80_percent(answer: Any, model: StepTimeModel | None = None) -> Feedback:
    """Exercise 3: the smallest batch size whose decode speed reaches 80% of the ceiling, for `model`.

    Accepts that whole number (the exact real value rounded up) and the exact real value itself
    (to 0.1%, or to 0.05 for one rounded to a decimal); every whole number below it falls short
    of 80%, however close, and is refused.

    >>> model = StepTimeModel(overhead_s=0.03, decode_seq_s=0.004)   # exactly 30
    >>> [grade_batch_for_80_percent(b, model).ok for b in (29, 30, 31, 30.0)]
    [False, True, False, True]
    """
    model = model or StepTimeModel()
    exact = batch_for_fraction_of_ceiling(model)
    if math.isinf(exact):  # the fit pinned decode_seq_s at 0: every sequence rides free, there is no ceiling
        return Feedback(None, "This fit has no decode ceiling to reach 80% of: its decode_seq_s is 0 (the fit pins a "
                              "negative slope at 0), so b / (overhead_s + b * decode_seq_s) grows without limit. Fit "
                              "again (run the measuring cell again; a busy machine can flatten the slope), or pass "
                              "the defaults: check_batch_for_80_percent(answer, StepTimeModel()).")
    needed = math.ceil(exact - 1e-9)
    # a fitted model is audited from the cell that fitted it: a number printed before the fit cannot show it
    answer_audit.expect("batch for 80% of the ceiling", exact, needed, since=answer_audit.made_in([model]))
    if answer is None:
        return _unanswered("Set `answer` to a batch size (a number of requests).")
    value = _number(answer)
    ceiling = decode_ceiling_tok_s(model)
    whole = value == round(value)
    # a whole number must be the smallest one that gets there; any other number, the formula's own value
    tolerance = max(0.05, 0.001 * exact)
    if (value == needed) if whole else abs(value - exact) <= tolerance:
        # the costs as model_table prints them, so that the quotient can be redone from the page
        return _right(f"b = 4 x overhead_s / decode_seq_s = 4 x {ms_text(model.overhead_s)} ms / "
                              f"{ms_text(model.decode_seq_s)} ms = {exact:.1f}, so {needed} requests: "
                              f"{model.decode_tok_s(needed):.0f} of at most {ceiling:.0f} tok/s. Beyond that, "
                              f"a bigger max_num_seqs buys little decode speed. {_lab_settings_against(needed)}")
    hint = ("Set b / (overhead_s + b * decode_seq_s) equal to 0.8 / decode_seq_s and solve for b; "
            "model.decode_tok_s(b) lets you check a guess.")
    if math.isclose(value, ceiling, rel_tol=0.03):
        hint = "That is the ceiling in tok/s, not a batch size. " + hint
    elif value < exact:
        # cut, not rounded, to two decimals: 79.97% printed as "80%" would read as reaching it
        reached = math.floor(10000 * model.decode_tok_s(max(1.0, value)) / ceiling) / 100
        hint = f"At {value:g} requests decoding reaches only {reached:.2f}% of the ceiling, short of 80%. " + hint
        if whole and exact - value <= tolerance:  # rounded costs can put the quotient just below a whole number
            hint += (" A table's costs are rounded: the formula on the model's own overhead_s and decode_seq_s "
                     "may land just above your number.")
    elif whole:
        hint = (f"{value:g} requests reach 80%, but so do fewer: the question asks for the smallest batch that "
                f"does. " + hint)
    return _wrong(f"{value:g} is not it. {hint}")


def _lab_settings_against(needed: int, low: int = 8, high: int = 64) -> str:
    """Where the lab's two settings fall against the batch that reaches 80% of the decode ceiling.

    >>> print(_lab_settings_against(39))
    The lab's 8 is below it and its 64 above it: 64 slots decode near the ceiling, 8 well short of it.
    """
    if needed > high:
        return (f"The lab's {low} and {high} are both below it: on this machine more slots still speed decoding up, "
                f"even at {high}.")
    if needed > low:
        return (f"The lab's {low} is below it and its {high} above it: {high} slots decode near the ceiling, "
                f"{low} well short of it.")
    return f"The lab's {low} and {high} are both above it: here even {low} slots decode near the ceiling."


def check_batch_for_80_percent(answer: Any, model: StepTimeModel | None = None) -> None:
    show(graded(grade_batch_for_80_percent, answer, model))
