"""The exercise checks of the PagedAttention notebook: right answers pass, wrong ones get a hint, nothing raises."""

from __future__ import annotations

import pytest

from helpers.feedback import MARKS, Feedback
from helpers.paged.capacity import LAB_MIX, fit
from helpers.paged.exercises import (
    BLOCK_SIZE_CHOICES,
    GPU_BLOCK_SIZE,
    GPU_MAX_MODEL_LEN,
    GPU_POOL_SLOTS,
    blocks_after_tokens,
    check_best_block_size,
    check_blocks_after_tokens,
    check_lab_fit,
    check_shared_blocks,
    grade_best_block_size,
    grade_blocks_after_tokens,
    grade_lab_fit,
    grade_shared_blocks,
    lab_fit_on_gpu_pool,
    shared_blocks,
    utilization_by_block_size,
)

CHECKS = [check_blocks_after_tokens, check_shared_blocks, check_best_block_size, check_lab_fit]
GRADES = [grade_blocks_after_tokens, grade_shared_blocks, grade_best_block_size, grade_lab_fit]


def test_the_allocator_gives_the_hand_computed_block_count():
    assert blocks_after_tokens(37, 16) == (3, 11)  # 16 + 16 + 5 tokens; 11 empty slots in the last block
    assert blocks_after_tokens(32, 16) == (2, 0)


def test_a_64_token_system_prompt_shares_4_blocks_of_16_and_none_of_128():
    assert shared_blocks(16) == 4 and shared_blocks(128) == 0 and shared_blocks(32) == 2


def test_smaller_blocks_waste_less_on_the_random_trace():
    by_size = utilization_by_block_size()
    assert list(by_size) == list(BLOCK_SIZE_CHOICES)
    assert list(by_size.values()) == sorted(by_size.values(), reverse=True)


def test_lab_fit_on_the_gpu_pool_by_hand():
    # naive: 12,000 // 4,096 = 2. paged: 750 blocks of 16; a cycle of four needs 5 + 8 + 20 + 36 = 69 blocks;
    # 10 cycles = 690 blocks (40 requests), then 5, 8, 20 more = 723 blocks (43); the next needs 36 > 27 left.
    assert lab_fit_on_gpu_pool() == (2, 43)
    assert fit(LAB_MIX, GPU_POOL_SLOTS, scheme="naive", max_model_len=GPU_MAX_MODEL_LEN).max_requests == 2
    assert GPU_POOL_SLOTS // GPU_BLOCK_SIZE == 750


@pytest.mark.parametrize(
    ("grade", "right"),
    [(grade_blocks_after_tokens, (3, 11)), (grade_shared_blocks, (4, 0)), (grade_best_block_size, 8),
     (grade_lab_fit, (2, 43))],
)
def test_right_answers_pass_in_any_reasonable_form(grade, right):
    assert grade(right).ok is True
    if isinstance(right, tuple):
        assert grade(list(right)).ok is True
        assert grade(tuple(float(x) for x in right)).ok is True


@pytest.mark.parametrize(
    ("grade", "wrong"),
    [(grade_blocks_after_tokens, (2, 11)), (grade_blocks_after_tokens, (3, 5)), (grade_shared_blocks, (4, 1)),
     (grade_best_block_size, 64), (grade_best_block_size, 12), (grade_lab_fit, (2, 50)), (grade_lab_fit, (45, 43))],
)
def test_wrong_answers_fail_with_a_hint(grade, wrong):
    feedback = grade(wrong)
    assert feedback.ok is False and len(feedback.message) > 20


@pytest.mark.parametrize("grade", GRADES)
def test_no_answer_yet_is_neither_right_nor_wrong(grade):
    feedback = grade(None)
    assert isinstance(feedback, Feedback)  # the course's one feedback type
    assert feedback.ok is None and feedback.message.startswith("No answer yet")


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("answer", [None, "seven", object(), (1, 2, 3), -1, float("nan")])
def test_checks_print_feedback_and_never_raise(check, answer, capsys):
    assert check(answer) is None
    assert capsys.readouterr().out.startswith(tuple(MARKS.values()))  # one line with the course's mark
