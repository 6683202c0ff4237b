"""Notebook 04's loop exercise: the learner turns the static-batching loop into continuous batching.

The notebook gives ``static_batching(trace, max_num_seqs)``: a loop over batches, each run until its longest
member is done. The learner writes ``continuous_batching`` with the same signature and the same result: the
schedule, one ``(step, slots)`` pair per engine step that ran, ``slots`` holding the request ids in the batch
(``None`` for an idle slot). Every step takes 1 s (``UNIT_STEPS``), so ``arrival_s`` counts steps.

Why this direction and not the reverse: continuous batching is the mechanism the module teaches, and the
change is structural. A loop over batches becomes a loop over steps that decides the batch again every time;
the reverse is one added condition. The mistakes it invites (a slot refilled in the step its request
finished, more requests than slots, a queue served out of order) are the ones vLLM's scheduler avoids.

:func:`grade_loop` runs a loop on seeded traces (the notebook's five-request example first, then random ones
with bursts and idle gaps) and compares its schedule with ``simulate_continuous`` (or ``simulate_static``)
step by step: which requests run in each step, and when. It reports the first step that differs, and why.
A solution: ``docs/solutions/continuous_loop.py``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from helpers.batching.exercises import UNIT_STEPS
from helpers.batching.sim import simulate_continuous, simulate_static
from helpers.batching.trace import BatchRequest
from helpers.feedback import Feedback, Hints, graded, show

Schedule = list[tuple[int, frozenset[str]]]  # (step it starts at, requests in its batch), one per step
EXAMPLE = [("A", 3), ("B", 1), ("C", 4), ("D", 2), ("E", 2)]  # notebook 04's first example: output tokens


def loop_traces() -> list[tuple[str, list[BatchRequest], int]]:
    """(name, trace, max_num_seqs) for each trace the check runs: the notebook's example, then seeded ones."""
    traces = [("the example above (5 requests at t = 0, 2 slots)",
               [BatchRequest(rid, 0.0, 4, n) for rid, n in EXAMPLE], 2)]
    for seed in range(5):
        rng = random.Random(seed)
        slots, t, trace = rng.choice((2, 3, 4)), 0, []
        for i in range(rng.randint(6, 12)):
            t += rng.choice((0, 0, 0, 1, 2, 3, 9))  # bursts, and now and then a gap the engine idles through
            trace.append(BatchRequest(f"r{i}", float(t), rng.randint(2, 32), rng.randint(1, 9)))
        traces.append((f"random trace {seed} ({len(trace)} requests, {slots} slots)", trace, slots))
    return traces


def expected_schedule(trace: Sequence[BatchRequest], max_num_seqs: int, policy: str) -> Schedule:
    """The simulator's schedule for `trace`, every step 1 s."""
    simulate = simulate_continuous if policy == "continuous" else simulate_static
    result = simulate(list(trace), max_num_seqs, UNIT_STEPS)
    return [(round(s.start_s), frozenset(r for r in s.slots if r is not None)) for s in result.steps]


def _schedule(returned: Any) -> Schedule:
    """A loop's result as a Schedule; ValueError in words when it has another shape."""
    if returned is None:
        raise ValueError("the loop returned None: return the schedule, a list of (step, slots) pairs")
    out = []
    for entry in returned:
        step, slots = entry
        out.append((int(step), frozenset(r for r in slots if r is not None)))
    return out


def _ids(ids: frozenset[str]) -> str:
    return ", ".join(sorted(ids, key=lambda r: (len(r), r))) or "nothing"


def _why(trace: Sequence[BatchRequest], max_num_seqs: int, expected: Schedule, k: int, mine: Schedule) -> str:
    """Why step k of the simulator's schedule is what it is, where the learner's differs."""
    t, right = expected[k]
    theirs = mine[k][1] if k < len(mine) else frozenset()
    arrival = {r.request_id: round(r.arrival_s) for r in trace}
    last = {}  # request -> the step it last runs in, in the simulator
    for step, ids in expected:
        for rid in ids:
            last[rid] = step
    if len(theirs) > max_num_seqs:
        return f"That is {len(theirs)} requests in {max_num_seqs} slots: admit only while a slot is free."
    for rid in sorted(theirs - right):
        if arrival[rid] > t:
            return f"{rid} arrives only at t = {arrival[rid]}."
        if last[rid] < t:
            return (f"{rid} produced its last token in the step at t = {last[rid]} and left at its end "
                    "(the first token comes out of the step that admits it).")
        return (f"{rid} is still waiting in the simulator: the free slots went to requests that arrived before it "
                "(first come, first served), or no slot was free.")
    for rid in sorted(right - theirs):
        if any(rid in ids for _, ids in mine[:k]):
            return f"{rid} has not produced all its tokens yet: it runs until the step at t = {last[rid]}."
        return (f"{rid} has waited since t = {arrival[rid]}, and a slot was free at the start of this step: at every "
                "step, waiting requests take the free slots, not only when the whole batch is done.")
    if k < len(mine) and mine[k][0] != t:
        return ("That is the same batch at another time: when nothing runs and nothing waits, the engine idles "
                "until the next arrival.")
    return ""


def grade_loop(loop: Callable[[list[BatchRequest], int], Any], policy: str = "continuous") -> Feedback:
    """Run `loop` on every check trace and compare its schedule with the simulator's `policy`, step by step."""
    other = "static" if policy == "continuous" else "continuous"
    name = getattr(loop, "__name__", "your loop")
    same_as_other, steps = True, {policy: 0, other: 0}
    for label, trace, max_num_seqs in loop_traces():
        try:
            mine = _schedule(loop(list(trace), max_num_seqs))
        except NotImplementedError:
            return Feedback(None, f"Not yet: {name} still raises NotImplementedError. Write it, starting from a "
                                  "copy of static_batching, and run the cell again.")
        except Exception as error:  # noqa: BLE001 (the learner's code may raise anything; say where)
            return Feedback(False, f"On {label}, {name} raised {type(error).__name__}: {error}.")
        expected = expected_schedule(trace, max_num_seqs, policy)
        steps[policy] += len(expected)
        steps[other] += len(expected_schedule(trace, max_num_seqs, other))
        same_as_other &= mine == expected_schedule(trace, max_num_seqs, other)
        if mine == expected:
            continue
        if same_as_other and policy == "continuous":
            return Feedback(False, f"On {label}, {name} schedules exactly like static batching. Continuous "
                                   "batching decides the batch again at every step: a request that finishes "
                                   "frees its slot for the next waiting request at once.")
        k = next((i for i, (a, b) in enumerate(zip(mine, expected)) if a != b), min(len(mine), len(expected)))
        if k == len(expected):
            return Feedback(False, f"On {label}, your schedule has {len(mine)} steps, the simulator's "
                                   f"{len(expected)}: after the last request finishes, nothing is left to run.")
        t, right = expected[k]
        got = f"your loop runs {_ids(mine[k][1])} at t = {mine[k][0]}" if k < len(mine) else "your schedule has ended"
        return Feedback(False, f"On {label}, step {k + 1}: {got}; simulate_{policy} runs {_ids(right)} at t = {t}. "
                               + _why(trace, max_num_seqs, expected, k, mine))
    return Feedback(True, f"{name} schedules like simulate_{policy}, step for step, on all {len(loop_traces())} "
                          f"traces: {steps[policy]} steps in all, where {other} batching takes {steps[other]}.")


def check_loop(loop: Callable[[list[BatchRequest], int], Any], policy: str = "continuous") -> None:
    """Grade a batching loop against the simulator and print the verdict (never raises)."""
    show(graded(grade_loop, loop, policy))


LOOP_HINTS = Hints([
    ("Make one loop out of the two: each pass of the while loop is one engine step. A batch no longer has a "
     "beginning and an end; each step runs whatever fills the slots then."),
    ("Keep one list of slots for the whole run, slots = [None] * max_num_seqs, and the tokens each request still "
     "has to produce. At the start of every step, waiting requests take the free slots, oldest first."),
    ("At the end of a step, a request that has just produced its last token leaves: its slot becomes None, and "
     "the next step refills it. Run while anything is pending, waiting or in a slot."),
    ("Record a step only when a slot is busy, and move the step counter on in every pass, even an idle one: "
     "that is how the loop waits for the next arrival, as static_batching does."),
], solution="docs/solutions/continuous_loop.py")
