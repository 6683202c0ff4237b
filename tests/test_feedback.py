"""Every exercise answers through helpers.feedback: a verdict, printed, never raised."""
from helpers.feedback import Feedback, check_choice, check_number, grade_choice, grade_number, graded, not_answered


def test_numbers_within_tolerance_pass_and_misses_say_which_way():
    assert grade_number(100.4, 100, name="x", rel_tol=0.01)
    miss = grade_number(150, 100, name="x", hint="look at the units")
    assert miss.ok is False and "too high" in miss.message and "look at the units" in miss.message
    assert "too low" in grade_number(50, 100, name="x").message


def test_unanswered_is_neither_right_nor_wrong():
    for feedback in (grade_number(None, 1, name="q1"), grade_choice(None, "a", name="q2", options=("a", "b")),
                     not_answered("a number")):
        assert feedback.ok is None and not feedback
        assert str(feedback).startswith("✏️")


def test_odd_answers_are_refused_in_words():
    assert "finite number" in grade_number("12", 12, name="x").message
    assert "finite number" in grade_number(float("nan"), 12, name="x").message
    assert grade_number(True, 1, name="x").ok is False  # a bool is not a count
    assert "not one of" in grade_choice("c", "a", name="q", options=("a", "b")).message


def test_a_grader_that_fails_gives_a_verdict_not_a_traceback():
    def grade(answer):
        return Feedback(True, str(len(answer)))

    assert graded(grade, 3).ok is False and "TypeError" in graded(grade, 3).message


def test_checks_print_one_marked_line(capsys):
    assert check_number(3, 3, name="blocks") is None
    check_choice("b", "b", name="q", options=("a", "b"), why="because")
    assert capsys.readouterr().out.splitlines() == ["✅ blocks: correct (3).", "✅ q: correct. because"]


def test_numpy_numbers_are_numbers_and_numpy_bools_are_not():
    import numpy as np

    pages = np.array([100, 300])
    assert grade_number(((pages + 127) // 128).sum(), 4, name="blocks").ok is True  # np.int64, as a notebook sums it
    assert grade_number(np.int32(4), 4, name="blocks").ok is True
    assert grade_number(np.float32(4.0), 4, name="blocks").ok is True
    assert "too high" in grade_number(np.int64(5), 4, name="blocks").message
    assert "finite number" in grade_number(np.float32("nan"), 4, name="blocks").message
    for yes in (np.bool_(True), True):
        assert grade_number(yes, 1, name="blocks").ok is False


def test_a_choice_is_graded_whatever_its_case_and_spacing():
    assert grade_choice(" No", "no", name="q", options=("yes", "no")).ok is True
    assert grade_choice("YES", "no", name="q", options=("yes", "no")).ok is False  # read as "yes": wrong, not odd
    assert "is not one of" in grade_choice("nope", "no", name="q", options=("yes", "no")).message
