"""The routing notebook's predictions and exercises: each prediction set beside the run's measurement,
each exercise graded from the course's own arithmetic.

Taught in ``notebooks/06_beyond_one_server.ipynb``; worked solutions in
``docs/solutions/06_beyond_one_server.md``. ``judge_*`` compares a prediction (made before a
measurement, kept in a variable) with what the run measured, without a grade; ``grade_*`` is
pure and returns a :class:`helpers.feedback.Feedback`; ``check_*`` prints it. ``None`` (not
answered yet) never stops the notebook.

Example::

    >>> check_round_robin_finders(None)
    ✏️ requests that find their prompt cached: not answered yet (set `answer` above and run the cell again).
    >>> check_round_robin_finders(6)
    ✅ requests that find their prompt cached: correct (6).
    >>> check_tp_weight_bytes(4_015_130_624)
    ✅ weights per GPU at TP=4: correct (4,015,130,624).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helpers.feedback import Feedback, as_option, grade_choice, grade_number, graded, show
from helpers.route.parallel import LLAMA_31_8B, tensor_parallel_plan
from helpers.route.policies import COMPARED, prefix_finders, round_robin_placement

POLICY_GUESSES = (*COMPARED, "same")
CLASS_GUESSES = ("more", "same", "fewer")
SCHEMES = ("tensor parallel", "data parallel")


# ----- predictions: set beside the measurement, not graded ---------------------------------------------
def _option(guess: Any, options: tuple[str, ...], variable: str, measured: str) -> str | Feedback:
    """``guess`` as one of ``options`` ("Cache aware" reads as "cache_aware", as ``grade_choice`` reads
    a choice), or the Feedback that says there is no prediction to set beside ``measured``.

    >>> _option(" Cache-Aware", ("round_robin", "cache_aware"), "policy_guess", "m")
    'cache_aware'
    >>> print(_option("lru", ("round_robin", "cache_aware"), "policy_guess", "m"))
    ✏️ policy_guess is 'lru', not one of ('round_robin', 'cache_aware'). Measured: m.
    """
    if guess is None:
        return Feedback(None, f"You made no prediction ({variable} is None; one of {options}). Measured: {measured}.")
    option = as_option(guess, options, spelled=lambda text: text.strip().lower().replace(" ", "_").replace("-", "_"))
    if isinstance(option, str) and option in options:
        return option
    return Feedback(None, f"{variable} is {guess!r}, not one of {options}. Measured: {measured}.")


def judge_policy_guess(guess: Any, results: Sequence[Any]) -> Feedback:
    """Which policy served more prompt tokens from the prefix cache ("same": within 5 points)."""
    rates = {r.policy: r.hit_rate or 0.0 for r in results}
    measured = " and ".join(f"{policy} {rate:.0%}" for policy, rate in rates.items())
    best = max(rates, key=rates.get)
    winner = "same" if max(rates.values()) - min(rates.values()) < 0.05 else best
    guess = _option(guess, POLICY_GUESSES, "policy_guess", f"{measured} of prompt tokens from the prefix cache")
    if isinstance(guess, Feedback):
        return guess
    if guess == winner:
        return Feedback(True, f"You predicted {guess!r}, and so it was: {measured}.")
    return Feedback(False, f"You predicted {guess!r}; measured {measured}: {winner!r}. The cells below say why.")


def judge_class_guess(guess: Any, one: Any, several: Any) -> Feedback:
    """Did the replicas behind the router keep more, the same or fewer students within target than one server?"""
    measured = (f"{several.num_within} of {len(several.views)} within {several.target_s:g} s with {several.label}, "
                f"{one.num_within} of {len(one.views)} with {one.label}")
    diff = several.num_within - one.num_within
    actual = "more" if diff > 0 else "fewer" if diff < 0 else "same"
    guess = _option(guess, CLASS_GUESSES, "class_guess", measured)
    if isinstance(guess, Feedback):
        return guess
    verdict = "and so it was" if guess == actual else f"it was {actual!r}"
    return Feedback(guess == actual, f"You predicted {guess!r}; {verdict}: {measured}.")


# ----- exercises: graded ------------------------------------------------------------------------
def grade_round_robin_finders(answer: Any, groups: int = 3, per_group: int = 4, num_replicas: int = 2) -> Feedback:
    """Round robin, one request at a time, group by group: requests that find their group's prompt cached."""
    order = [group for group in range(groups) for _ in range(per_group)]
    expected = prefix_finders(order, round_robin_placement(len(order), num_replicas))
    return grade_number(answer, expected, name="requests that find their prompt cached",
                        hint="the first request of a group on each replica computes the prompt; the later ones find it.")


def grade_tp_weight_bytes(answer: Any, tp: int = 4) -> Feedback:
    """Bytes of bf16 weights on each GPU of Llama-3.1-8B's shapes at --tensor-parallel-size ``tp``.

    (In bytes, and at TP=4: the notebook prints TP=2's GiB above the exercise.)"""
    return grade_number(answer, tensor_parallel_plan(LLAMA_31_8B, tp).weight_bytes_per_gpu,
                        name=f"weights per GPU at TP={tp}", rel_tol=0.01,
                        hint=f"parameters x 2 bytes, cut in {tp}.")


def grade_tp_kv_bytes(answer: Any, tp: int = 8) -> Feedback:
    """KV bytes per token on each GPU of Llama-3.1-8B's shapes at --tensor-parallel-size ``tp``."""
    return grade_number(answer, tensor_parallel_plan(LLAMA_31_8B, tp).kv_bytes_per_token_per_gpu,
                        name=f"KV bytes per token per GPU at TP={tp}",
                        hint="2 (K and V) x layers x the KV heads each GPU keeps x head size x 2 bytes.")


def grade_scheme(answer: Any) -> Feedback:
    """A 3B model (6 GiB of weights in bf16) for more users on a machine with 2 GPUs of 80 GB (the notebook's table
    settles SmolLM2, the 8B and the 70B shapes; this case is the learner's to apply it to)."""
    return grade_choice(answer, "data parallel", name="two GPUs for a 3B model", options=SCHEMES,
                        why="6 GiB of weights leave each 80 GB GPU more than 60 GiB for its KV cache, so one copy per "
                            "GPU serves two batches with no traffic between them; tensor parallelism would make every "
                            "step of every request wait for both GPUs, to free memory nobody needs.")


def check_round_robin_finders(answer: Any) -> None:
    show(graded(grade_round_robin_finders, answer))


def check_tp_weight_bytes(answer: Any) -> None:
    show(graded(grade_tp_weight_bytes, answer))


def check_tp_kv_bytes(answer: Any) -> None:
    show(graded(grade_tp_kv_bytes, answer))


def check_scheme(answer: Any) -> None:
    show(graded(grade_scheme, answer))
