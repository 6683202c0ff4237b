"""Automatic feedback for exercise cells: print a verdict, never raise.

An exercise cell starts with ``answer = None``; the check after it prints "not answered yet"
until the learner fills it in, so the notebook still runs top to bottom unanswered (and in CI).

Example::

    >>> check_number(None, 3, name="blocks")
    blocks: not answered yet (set `answer` above and run both cells again).
    False
    >>> check_number(3, 3, name="blocks")
    blocks: correct (3).
    True
"""

from __future__ import annotations

import math


def check_number(answer: object, expected: float, *, name: str, rel_tol: float = 0.0,
                 abs_tol: float = 0.0, hint: str = "") -> bool:
    """Compare a numeric answer with the expected value; print feedback and return whether it matched."""
    if answer is None:
        print(f"{name}: not answered yet (set `answer` above and run both cells again).")
        return False
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        print(f"{name}: expected a number, got {type(answer).__name__} {answer!r}.")
        return False
    if math.isclose(float(answer), float(expected), rel_tol=rel_tol, abs_tol=abs_tol):
        print(f"{name}: correct ({_format(expected)}).")
        return True
    direction = "high" if answer > expected else "low"
    print(f"{name}: not quite: {_format(answer)} is too {direction}." + (f" Hint: {hint}" if hint else ""))
    return False


def check_choice(answer: object, expected: str, *, name: str, options: tuple[str, ...], why: str = "") -> bool:
    """Compare a multiple-choice answer (one of ``options``); print feedback with the reason."""
    if answer is None:
        print(f"{name}: not answered yet (pick one of {', '.join(map(repr, options))}).")
        return False
    if answer not in options:
        print(f"{name}: {answer!r} is not one of {', '.join(map(repr, options))}.")
        return False
    if answer == expected:
        print(f"{name}: correct." + (f" {why}" if why else ""))
        return True
    print(f"{name}: not this one. Look again at the numbers above.")
    return False


def _format(value: float) -> str:
    return f"{value:,}" if float(value).is_integer() else f"{value:,.4g}"
