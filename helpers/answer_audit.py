"""The course's check on itself: no exercise's numeric answer is printed by a cell above the exercise.

Off unless ``VLLM_COURSE_AUDIT_ANSWERS=1`` is in the kernel's environment (``tests/conftest.py`` sets it, so
every notebook nbval runs in ``make test``, and the lab copies ``tests/test_filled_learner_lab.py`` runs,
are audited). On, :func:`install` records every text a cell shows (its prints, its ``display`` of text,
Markdown, HTML or a table, its result) with the cell's place in the run, and :func:`expect`, which every
grader calls with the answer it expects, raises :class:`AnswerShownAbove` when an earlier cell showed that
number. "Earlier" leaves out the grading cell and the cell just before it (the learner's answer cell, which
may compute and print the answer once the learner has written it), and every cell that ran before the measurement
the answer is computed from: a load test's records, and a step-time model fitted to measurements, remember the cell
that made them (:func:`note_made`, which :func:`helpers.load.run.run_load_test` and
:func:`helpers.batching.step_time.fit_step_time_model` call), and a grader that passes them
(``expect(..., since=made_in(records))``) is audited from that cell on. A number printed before the run existed cannot
show what the run measured; it can only equal it by chance (lab 1's client check and generate() loop print dozens of
latencies and rates of their own runs before the lab's experiment; on 2026-12-05 "149" in notebook 04's list of output
lengths, printed before the fit, "showed" the fit's 80% batch of 148.96 and failed a CI run).

What counts as "that number": a number shown with at least three significant digits that rounds to the answer
at the precision it was shown (``33.5`` shows 33.47; ``45.2%`` shows 0.4523). Shorter numbers are left out: they
appear everywhere, and matched by chance (on 2026-12-02, "47" in a list of output lengths "showed" a batch size of
47, and "83%" of another trace a utilization of 0.833; a one-digit count matches "2.0x"). So are
multiple-choice answers (a letter or a setting's name) and plots (text inside a figure is not read).
Nor are the lines a server prints while it starts (``[  21.0 s] engine process started``, ``ready in 33.2 s``:
:func:`helpers.serve.server.start_server`'s progress, stamped with the seconds since the start began): a dozen
numbers in seconds each start, and no exercise asks how long a start took (on 2026-12-03 the stamp "21.0" "showed"
lab 1's p95 end-to-end latency of 20.9998 s, and failed a CI run by chance).
An exercise may ask for more digits (``expect(..., digits=4)``): a ratio of two measured numbers, which no cell
prints, can still equal one of the hundreds of three-digit numbers a measured run prints (on 2026-12-02 an offered
rate of "1.85" req/s "showed" lab 2's TPOT ratio of 1.853, and failed a CI run by chance; on 2026-12-04 a TPOT p95 of
"1.48" s "showed" lab 1's speed-up of 1.478). A number written as a ratio ("1.48x", "1.48×", "1.48 times"), the way
the course would leak one, still counts with three.
A whole-number answer (an ``int``: a count of requests, blocks or tokens) is shown only by a number written whole or
as a ratio: "22.0" is a measurement to a tenth, and equals a count only by chance (on 2026-12-07 a generate() loop's
"22.0 output tok/s" "showed" lab 1's 22 requests at max_model_len in a CI machine's pool, and failed a CI run).

Example::

    >>> shown_as(33.47, "the clock: 33.5 ms a step")
    '33.5'
    >>> shown_as(0.4523, "hit rate 45.2%"), shown_as(47, "lengths [45, 47]"), shown_as(1200, "1,200 tokens")
    ('45.2%', None, '1,200')
"""

from __future__ import annotations

import math
import os
import re
import sys
import weakref
from collections.abc import Iterable
from typing import Any

from helpers.errors import CourseError

AUDIT_ENV = "VLLM_COURSE_AUDIT_ANSWERS"
# A number on its own, not part of a name ("H200", "AVX-512", "SmolLM2-135M", "v0.26") or of a range's far end.
NUMBER = re.compile(r"(?<![\w.])(?<!\w-)-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?")
# a line of a server's start-up progress (helpers.serve.server): left out, see the module's docstring
PROGRESS_LINE = re.compile(r"^\[\s*\d+\.\d s\] [^\n]*", re.MULTILINE)
TEXT_TYPES = ("text/plain", "text/markdown", "text/html")
SIGNIFICANT_DIGITS = 3  # the fewest a shown number needs to count as showing an answer
WRITTEN_AS_RATIO = re.compile(r"\s?(?:x|×|times)(?!\w)")  # right after a number: "1.48x", "1.48 ×", "1.48 times"

_shown: list[tuple[int, str]] = []  # (cell, text) of everything cells showed, in order
_cells = [0]  # cells run since install, 0 before (not IPython's count: nbval runs cells outside the history)
_made: dict[int, tuple[weakref.ref, int]] = {}  # id(record) -> (the record, the cell that made it): note_made


class AnswerShownAbove(CourseError, AssertionError):
    """An exercise whose answer an earlier cell already printed (raised only while auditing)."""


def enabled() -> bool:
    return os.environ.get(AUDIT_ENV) == "1"


def install() -> None:
    """Start recording what cells show (once per kernel; nothing outside IPython or with auditing off)."""
    shell = _shell()
    if _cells[0] or shell is None or not enabled():
        return

    # IPython 9 wraps each stream's write in one of its own for the length of a cell, and puts the
    # original back after it: so the recorder wraps whatever write a cell starts with, cell by cell.
    def next_cell(*_: Any) -> None:
        _cells[0] += 1
        for stream in (sys.stdout, sys.stderr):
            if not getattr(stream.write, "records_for_audit", False):  # older IPython leaves ours in place
                stream.write = _recording(stream.write)

    next_cell()
    shell.events.register("pre_run_cell", next_cell)
    publish = shell.display_pub.publish

    def publish_and_record(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        _record(" ".join(str(data[kind]) for kind in TEXT_TYPES if kind in data))
        return publish(data, *args, **kwargs)

    shell.display_pub.publish = publish_and_record
    write_result = shell.displayhook.write_format_data

    def write_result_and_record(format_dict: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        _record(str(format_dict.get("text/plain", "")))
        return write_result(format_dict, *args, **kwargs)

    shell.displayhook.write_format_data = write_result_and_record


def expect(name: str, *answers: float, digits: int = SIGNIFICANT_DIGITS, since: int = 0) -> None:
    """Raise :class:`AnswerShownAbove` if a cell above the exercise ``name`` showed one of its ``answers``
    with at least ``digits`` significant digits; ``since``: the first cell that counts (:func:`made_in`)."""
    if not _cells[0]:  # not installed: not auditing
        return
    earlier = "".join(text for cell, text in _shown if since <= cell < _cells[0] - 1)
    for answer in answers:
        match = _showing(answer, earlier, digits)
        if match is not None:
            context = " ".join(earlier[max(0, match.start() - 80):match.end() + 40].split())
            raise AnswerShownAbove(f"exercise {name!r}: its answer {answer:g} is shown above the exercise, as "
                                   f"{match.group()!r} in: ...{context}... Move that output below the check, or ask "
                                   "for a prediction before it.")


def note_made(records: Iterable[Any]) -> None:
    """Remember that the current cell made ``records`` (objects a grader will compute an answer from)."""
    if not _cells[0]:
        return
    for record in records:
        key = id(record)
        _made[key] = (weakref.ref(record, lambda ref, key=key: _forget(key, ref)), _cells[0])


def made_in(records: Iterable[Any]) -> int:
    """The first cell that made any of ``records`` (:func:`note_made`); 0, every cell, where one is not known
    (records loaded from a file, or made while not auditing)."""
    cells = []
    for record in records:
        ref, cell = _made.get(id(record), (None, 0))
        if ref is None or ref() is not record:
            return 0
        cells.append(cell)
    return min(cells, default=0)


def _forget(key: int, ref: weakref.ref) -> None:
    if _made.get(key, (None,))[0] is ref:  # not a newer object that has since taken the same id
        del _made[key]


def shown_as(answer: float, text: str, digits: int = SIGNIFICANT_DIGITS) -> str | None:
    """The first number in ``text`` that shows ``answer`` (see the module's docstring), or None.

    >>> shown_as(1.853, "max_num_seqs=8, 1.85 req/s"), shown_as(1.853, "max_num_seqs=8, 1.85 req/s", digits=4)
    ('1.85', None)
    >>> shown_as(1.853, "the larger batch ran 1.85x as fast", digits=4)
    '1.85'
    """
    match = _showing(answer, text, digits)
    return None if match is None else match.group()


def _showing(answer: float, text: str, digits: int = SIGNIFICANT_DIGITS) -> re.Match[str] | None:
    if isinstance(answer, bool) or not isinstance(answer, (int, float)) or not math.isfinite(answer):
        return None
    text = PROGRESS_LINE.sub(lambda line: " " * len(line.group()), text)
    for match in NUMBER.finditer(text):
        token = match.group()
        written = token.rstrip("%").replace(",", "").lstrip("-")
        as_ratio = WRITTEN_AS_RATIO.match(text, match.end()) is not None
        if isinstance(answer, int) and "." in written and not as_ratio:  # a count is written whole: see the docstring
            continue
        if len(written.replace(".", "").lstrip("0")) < (min(digits, SIGNIFICANT_DIGITS) if as_ratio else digits):
            continue
        value = float(written) * (-1 if token.startswith("-") else 1)
        half_unit = 0.5 * 10 ** -(len(written.split(".")[1]) if "." in written else 0)
        readings = [(value, half_unit)] + ([(value / 100, half_unit / 100)] if token.endswith("%") else [])
        if any(abs(shown - answer) <= unit * (1 + 1e-9) for shown, unit in readings):
            return match
    return None


def _shell() -> Any:
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _recording(write: Any) -> Any:
    def write_and_record(text: str) -> Any:
        _record(text)
        return write(text)

    write_and_record.records_for_audit = True
    return write_and_record


def _record(text: str) -> None:
    if text:
        _shown.append((_cells[0], text))
