"""The token-budget comparison (helpers.traffic.token_budget): bad input refused before any server starts, and
its table. A real comparison starts a server per budget (20-60 s each on a 2-core CPU) and is left to the lab.
"""

from __future__ import annotations

import asyncio

import pytest

from helpers.errors import InvalidArgumentError
from helpers.traffic.rates import RatePoint, not_run
from helpers.traffic.token_budget import compare_token_budgets, describe_budgets, judge_budget_guess


@pytest.mark.parametrize("budgets, kwargs, match", [
    ((64, 4), {}, r"budgets \[4\] are below max_num_seqs=8"),
    ((64, 0), {}, r"budgets\[1\] must be a positive integer"),
    ((), {}, "budgets must be a non-empty sequence"),
    ((64,), {"rate": 0}, "rate must be a positive"),
    ((64,), {"num_requests": 2}, "num_requests must be an integer above 2"),
    ((64,), {"time_limit_s": -1}, "time_limit_s must be a positive"),
])
def test_bad_budgets_or_load_are_refused_before_any_server_starts(budgets, kwargs, match):
    args = {"rate": 1.0, "num_requests": 8, **kwargs}
    with pytest.raises(InvalidArgumentError, match=match):
        asyncio.run(compare_token_budgets(budgets, **args))


def test_a_budget_with_no_time_left_is_marked_not_run_without_starting_a_server():
    points = asyncio.run(compare_token_budgets((64, 256), rate=1.0, num_requests=8, time_limit_s=10, quiet=True))
    assert [(p.setting, p.status) for p in points] == [("max_num_batched_tokens=64", "not run: time bound"),
                                                       ("max_num_batched_tokens=256", "not run: time bound")]


def test_the_table_shows_each_budgets_ttft_and_itl_or_why_it_was_not_measured():
    measured = RatePoint("max_num_batched_tokens=64", 1.0, 1.0, 8, ttft_p50_s=1.25, ttft_p95_s=4.0,
                         itl_p50_ms=45.0, itl_p95_ms=80.5)
    table = describe_budgets([measured, not_run("max_num_batched_tokens=2048", 1.0, 1.0, 8, "time bound")])
    assert "1.25 /  4.00" in table and "45.0 /   80.5" in table
    assert table.splitlines()[-1].split() == ["max_num_batched_tokens=2048", "not", "run:", "time", "bound"]


def test_a_budget_prediction_is_set_beside_the_measured_direction_and_never_graded():
    small = RatePoint("max_num_batched_tokens=64", 1.0, 1.0, 8, ttft_p95_s=0.9)
    default = RatePoint("max_num_batched_tokens=2048 (default)", 1.0, 1.0, 8, ttft_p95_s=1.5)
    assert judge_budget_guess(" Down", [small, default]).startswith("You predicted down; measured: down (TTFT p95 1.50 s")
    other = judge_budget_guess("up", [small, default])
    assert "the other way" in other and not other.startswith(("✅", "❌", "✏️"))  # a prediction: no grade
    assert judge_budget_guess(None, [small, default]).startswith("✏️ You made no prediction")
    assert judge_budget_guess("higher", [small, default]).startswith('✏️ `my_budget_guess` should be "up" or "down"')
    unmeasured = not_run("max_num_batched_tokens=64", 1.0, 1.0, 8, "time bound")
    assert "cannot be judged on this run" in judge_budget_guess("up", [unmeasured, default])
