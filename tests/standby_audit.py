"""A pytest plugin for nbval's notebooks: after a notebook's last cell, an error on that cell where a server started
ahead (``helpers.serve.ahead.start_ahead``) still stands by, taken over by no cell.

``helpers.serve.standby.check_none_passed_over`` catches an entry that drifted from its cell's settings when that
cell starts afresh; this catches the rest: an entry no cell asks for at all (its cell removed, or a server put back
for a later cell that never comes). Either way the notebook paid a start it did not need and held its memory.

It asks the notebook's own kernel, before nbval stops it (nbval kills the kernel, so nothing at its exit could
tell), through an execute request's ``user_expressions``: the kernel prints nothing and counts no cell. A kernel
that never imported ``helpers.serve.standby`` has nothing to say. ``tests/conftest.py`` loads it as a plugin, so that
it sees every item (a conftest's own hooks reach only the items of its folder); elsewhere ``-p tests.standby_audit``.
"""

from __future__ import annotations

import ast
import time
import warnings
from typing import Any

import pytest

ANSWER_S = 60.0  # a kernel that has just run the notebook's last cell answers within this
EXPRESSION = ("(lambda standby: standby.unclaimed() if standby else [])"
              "(__import__('sys').modules.get('helpers.serve.standby'))")


def unclaimed_in(kernel: Any) -> list[str]:
    """What ``helpers.serve.standby.unclaimed()`` says in nbval's ``kernel`` (a ``RunningKernel``); raises
    ``queue.Empty`` or ``TimeoutError`` when the kernel does not answer within ``ANSWER_S``, ``RuntimeError``
    when its answer is not a list."""
    client = kernel.kc
    msg_id = client.execute("", silent=True, store_history=False, user_expressions={"unclaimed": EXPRESSION})
    deadline = time.monotonic() + ANSWER_S
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer within {ANSWER_S:.0f} s")
        reply = client.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    result = reply["content"].get("user_expressions", {}).get("unclaimed", {})
    if result.get("status") != "ok":
        what = result.get("ename", reply["content"].get("status", "no answer"))
        raise RuntimeError(f"{what}: {result.get('evalue', '')}")
    return ast.literal_eval(result["data"]["text/plain"])


def message(where: str, found: list[str]) -> str:
    """The error for ``found`` (``unclaimed_in``'s lines) after the notebook ``where``.

    >>> print(message("notebooks/05.ipynb", ["max_num_seqs=8 at http://127.0.0.1:8001"]))
    notebooks/05.ipynb ended with 1 server(s) started ahead that no cell took over:
      max_num_seqs=8 at http://127.0.0.1:8001
    Make each start_ahead entry equal the settings of a later cell's start; remove one no cell asks for.
    """
    return (f"{where} ended with {len(found)} server(s) started ahead that no cell took over:\n"
            + "\n".join(f"  {line}" for line in found)
            + "\nMake each start_ahead entry equal the settings of a later cell's start; remove one no cell asks for.")


FAILED: set[str] = set()  # notebooks with a failed cell, whose failure may be why a server stands by unclaimed


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        FAILED.add(report.nodeid.split("::", 1)[0])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """After the last cell of a notebook nbval runs, while its kernel still lives: an error on that cell where
    servers started ahead still stand by. Not asked where a cell of the notebook failed (the cell that was to take
    the server over may be that one, and its own error says more); a kernel that cannot answer is a warning."""
    notebook = item.parent
    kernel = getattr(notebook, "kernel", None)  # nbval's RunningKernel; other items have none
    last = nextitem is None or nextitem.parent is not notebook
    found: list[str] = []
    if last and kernel is not None and kernel.is_alive() and notebook.nodeid not in FAILED:
        try:  # raising here, before the yield, would skip the notebook's teardown and leave its kernel running
            found = unclaimed_in(kernel)
        except Exception as error:
            warnings.warn(f"{notebook.nodeid}: could not ask its kernel what stands by ({type(error).__name__}: "
                          f"{error}); the check after its last cell did not run.", stacklevel=1)
    try:
        return (yield)
    finally:
        if found:
            raise AssertionError(message(notebook.nodeid, found))
