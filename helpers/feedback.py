"""The one way every exercise answers a learner: a :class:`Feedback`, printed, never raised.

An exercise cell starts with ``answer = None``. The check after it grades the answer into a
:class:`Feedback` (``ok`` is True, False, or None while nothing is answered yet) and prints
it, so the notebook still runs top to bottom unanswered (as it does in CI). A grader that
fails on an odd answer (a string where a number was asked, a wrong shape) says so in its
verdict instead of stopping the notebook: :func:`graded`.

``grade_*`` functions are pure (they return the verdict: what tests call); ``check_*``
functions grade and print (what notebook cells call). An exercise that asks for code has a
:class:`Hints` ladder beside its check: each call shows one more hint, so a learner takes
only as much help as they need.

Example::

    >>> print(grade_number(None, 3, name="blocks"))
    ✏️ blocks: not answered yet (set `answer` above and run the cell again).
    >>> check_number(3, 3, name="blocks")
    ✅ blocks: correct (3).
    >>> bool(grade_number(4, 3, name="blocks")), grade_number(4, 3, name="blocks").message
    (False, 'blocks: not quite: 4 is too high.')
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from helpers import answer_audit

MARKS = {True: "✅", False: "❌", None: "✏️"}


@dataclass(frozen=True)
class Feedback:
    """The verdict on one answer: ``ok`` is None while there is no answer yet."""

    ok: bool | None
    message: str

    def __str__(self) -> str:
        return f"{MARKS[self.ok]} {self.message}"

    def __bool__(self) -> bool:  # "correct?", so a checker's caller can branch on it
        return self.ok is True


def not_answered(what: str) -> Feedback:
    """The verdict while ``answer`` is still None; ``what`` says what to set it to."""
    return Feedback(None, f"No answer yet: set `answer` to {what} and run the cell again.")


def graded(grade: Callable[..., Feedback], *args: Any, **kwargs: Any) -> Feedback:
    """``grade(*args, **kwargs)``, or a verdict that says why the answer could not be checked.

    >>> print(graded(lambda answer: Feedback(True, "ok"), 1))
    ✅ ok
    >>> print(graded(lambda answer: Feedback(True, str(1 / answer)), 0))
    ❌ Could not check this answer (ZeroDivisionError: division by zero).
    """
    try:
        return grade(*args, **kwargs)
    except answer_audit.AnswerShownAbove:
        raise  # the course's own mistake, found while auditing: not the learner's
    except Exception as error:  # noqa: BLE001  (a learner's odd answer must not stop the notebook)
        return Feedback(False, f"Could not check this answer ({type(error).__name__}: {error}).")


def show(feedback: Feedback) -> None:
    """Print the verdict (one line, with its mark)."""
    print(feedback)


def grade_number(answer: object, expected: float, *, name: str, rel_tol: float = 0.0,
                 abs_tol: float = 0.0, hint: str = "", audit_digits: int = answer_audit.SIGNIFICANT_DIGITS,
                 audit_since: int = 0) -> Feedback:
    """A numeric answer against the expected value, within ``rel_tol`` / ``abs_tol``; ``audit_digits``: how many
    significant digits a number shown above needs to count as showing the answer, ``audit_since``: the first cell
    that could show it (:mod:`helpers.answer_audit`)."""
    answer_audit.expect(name, expected, digits=audit_digits, since=audit_since)
    if answer is None:
        return Feedback(None, f"{name}: not answered yet (set `answer` above and run the cell again).")
    # numbers.Real takes numpy's integers and floats (a sum over an array is np.int64) and leaves out numpy's
    # bool; Python's bool is an int, so it is refused by name: a yes/no is never a count
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real) or not math.isfinite(float(answer)):
        return Feedback(False, f"{name}: expected a finite number, got {type(answer).__name__} {answer!r}.")
    if isinstance(answer, numbers.Integral):
        answer = int(answer)
    if math.isclose(float(answer), float(expected), rel_tol=rel_tol, abs_tol=abs_tol):
        return Feedback(True, f"{name}: correct ({_format(expected)}).")
    direction = "high" if answer > expected else "low"
    return Feedback(False, f"{name}: not quite: {_format(answer)} is too {direction}."
                    + (f" Hint: {hint}" if hint else ""))


def _case_and_spaces(text: str) -> str:
    return text.strip().lower()


def as_option(answer: object, options: tuple[str, ...], spelled: Callable[[str], str] = _case_and_spaces) -> object:
    """The option a string ``answer`` names when both are read through ``spelled`` (by default: case and outer spaces
    left out); any other answer as it is.

    >>> as_option(" No", ("yes", "no")), as_option("maybe", ("yes", "no")), as_option(3, ("yes", "no"))
    ('no', 'maybe', 3)
    """
    if not isinstance(answer, str):
        return answer
    return next((o for o in options if isinstance(o, str) and spelled(o) == spelled(answer)), answer)


def grade_choice(answer: object, expected: str, *, name: str, options: tuple[str, ...], why: str = "",
                 hint: str = "Look again at the numbers above.") -> Feedback:
    """A multiple-choice answer (one of ``options``); the verdict gives the reason when right, ``hint`` when not
    (a question about no printed numbers passes one that leads without answering).

    >>> print(grade_choice("b", "a", name="q", options=("a", "b")))
    ❌ q: not this one. Look again at the numbers above.
    >>> print(grade_choice(" A", "a", name="q", options=("a", "b")))
    ✅ q: correct.
    """
    listed = ", ".join(map(repr, options))
    if answer is None:
        return Feedback(None, f"{name}: not answered yet (pick one of {listed}).")
    answer = as_option(answer, options)  # "No" or " no" means "no": the choice is graded, not its typing
    if answer not in options:
        return Feedback(False, f"{name}: {answer!r} is not one of {listed}.")
    if answer == expected:
        return Feedback(True, f"{name}: correct." + (f" {why}" if why else ""))
    return Feedback(False, f"{name}: not this one. {hint}")


class Hints:
    """An exercise's hints, each more explicit than the last, shown one a call.

    >>> hints = Hints(["Count blocks.", "Round up."], solution="docs/solutions/x.md")
    >>> hints.next()
    💡 Hint 1 of 2: Count blocks. (Run again for the next one.)
    >>> hints.next(); hints.next()
    💡 Hint 2 of 2: Round up.
    💡 No more hints: a worked solution is in docs/solutions/x.md.
    """

    def __init__(self, hints: list[str], *, solution: str) -> None:
        self._hints, self._solution, self._shown = list(hints), solution, 0

    def next(self) -> None:
        """Print the next hint (after the last one: where the solution is)."""
        if self._shown == len(self._hints):
            print(f"💡 No more hints: a worked solution is in {self._solution}.")
            return
        self._shown += 1
        more = " (Run again for the next one.)" if self._shown < len(self._hints) else ""
        print(f"💡 Hint {self._shown} of {len(self._hints)}: {self._hints[self._shown - 1]}{more}")


def check_number(answer: object, expected: float, **options: Any) -> None:
    """Grade a number (see :func:`grade_number`) and print the verdict."""
    show(graded(grade_number, answer, expected, **options))


def check_choice(answer: object, expected: str, **options: Any) -> None:
    """Grade a choice (see :func:`grade_choice`) and print the verdict."""
    show(graded(grade_choice, answer, expected, **options))


def _format(value: float) -> str:
    return f"{value:,}" if float(value).is_integer() else f"{value:,.4g}"
