"""helpers.batching.loop_exercise: the learner's batching loop against the simulator, step by step."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from helpers.batching.loop_exercise import check_loop, expected_schedule, grade_loop, loop_traces

ROOT = Path(__file__).resolve().parent.parent
STATIC_CELL = "static-loop"  # the notebook cell that defines static_batching
SOLUTION = (ROOT / "docs" / "solutions" / "continuous_loop.py").read_text()


def solution(old: str = "", new: str = ""):
    """The solution, or a variant of it with one piece of its text replaced (a plausible mistake)."""
    assert old in SOLUTION
    namespace: dict = {}
    exec(SOLUTION.replace(old, new), namespace)  # noqa: S102 (our own solution file)
    return namespace["continuous_batching"]


def notebook_loop():
    """The static loop notebook 04 gives the learner, run from its cell."""
    cells = json.loads((ROOT / "notebooks" / "04_continuous_batching.ipynb").read_text())["cells"]
    source = "".join(next(cell["source"] for cell in cells if cell.get("id") == STATIC_CELL))
    namespace: dict = {}
    exec(source.split("\ncheck_loop(")[0], namespace)  # noqa: S102 (the course's own cell, without its check)
    return namespace["static_batching"]


static_batching = notebook_loop()


def running_list(trace, max_num_seqs, cap=True):
    """Continuous batching with a list of running requests instead of fixed slots; `cap=False` ignores max_num_seqs."""
    pending, waiting, running, left, schedule, step = sorted(trace, key=lambda r: r.arrival_s), [], [], {}, [], 0
    while pending or waiting or running:
        while pending and pending[0].arrival_s <= step:
            waiting.append(pending.pop(0))
        while waiting and (len(running) < max_num_seqs or not cap):
            request = waiting.pop(0)
            running.append(request.request_id)
            left[request.request_id] = request.output_len
        if running:
            schedule.append((step, tuple(running)))
            for request_id in list(running):
                left[request_id] -= 1
                if left[request_id] == 0:
                    running.remove(request_id)
        step += 1
    return schedule


def test_the_solution_schedules_like_the_simulator():
    verdict = grade_loop(solution())
    assert verdict.ok is True and "where static batching takes" in verdict.message, verdict.message


def test_a_running_list_without_fixed_slots_is_right_too():
    assert grade_loop(running_list).ok is True


def test_the_given_static_loop_matches_simulate_static_and_is_not_continuous():
    assert grade_loop(static_batching, "static").ok is True
    verdict = grade_loop(static_batching)
    assert verdict.ok is False and "exactly like static batching" in verdict.message


def test_the_unfilled_scaffold_is_not_yet_answered_and_prints_without_raising(capsys):
    def continuous_batching(trace, max_num_seqs):
        raise NotImplementedError

    assert grade_loop(continuous_batching).ok is None
    check_loop(continuous_batching)
    assert capsys.readouterr().out.startswith("✏️ Not yet: continuous_batching still raises NotImplementedError")


def test_admitting_past_the_cap_is_named():
    message = grade_loop(lambda trace, n: running_list(trace, n, cap=False)).message
    assert "step 1" in message and "5 requests in 2 slots" in message


def test_serving_the_newest_first_and_counting_one_token_too_many_are_named():
    lifo = grade_loop(solution("request = waiting.pop(0)", "request = waiting.pop()")).message
    assert "first come, first served" in lifo
    long = grade_loop(solution("request.request_id, request.output_len", "request.request_id, request.output_len + 1"))
    assert "step 2" in long.message and "B produced its last token in the step at t = 0" in long.message


def test_a_loop_that_does_not_idle_until_the_next_arrival_is_named():
    message = grade_loop(solution("        step += 1  # an idle pass", "        step += 1 if any(slots) or not waiting else 0  #")).message
    assert "idles until the next arrival" in message


def test_a_loop_that_raises_or_returns_nothing_gets_a_verdict():
    assert "ZeroDivisionError" in grade_loop(lambda trace, n: 1 / 0).message
    assert "returned None" in grade_loop(lambda trace, n: None).message


def test_the_traces_include_the_notebooks_example_and_an_idle_gap():
    traces = loop_traces()
    assert [(r.request_id, r.output_len) for r in traces[0][1]] == [("A", 3), ("B", 1), ("C", 4), ("D", 2), ("E", 2)]
    starts = [[step for step, _ in expected_schedule(trace, n, "continuous")] for _, trace, n in traces]
    assert starts[0] == list(range(7))
    assert any(later - earlier > 1 for steps in starts for earlier, later in itertools.pairwise(steps))
