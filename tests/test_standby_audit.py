"""The check after a notebook's last cell that no server started ahead stands by unclaimed (tests/standby_audit.py).

nbval runs small notebooks in a real kernel, as make test runs the course's: one ends with a server standing by, the
others with none (taken over, or never any). The standing-by server is an idle stand-in: the audit asks only what
stands by, never the server itself, and the course's own notebooks run it against real servers in make test.
"""

import os
import subprocess
import sys
from pathlib import Path

import nbformat

from helpers.paths import course_pythonpath
from helpers.serve import standby
from helpers.serve.config import ServerConfig

ROOT = Path(__file__).resolve().parent.parent

STAND_BY = """from helpers.serve.config import ServerConfig
from helpers.serve.standby import STANDING_BY

class Idle:  # a server started ahead, as the audit sees one
    base_url = "http://127.0.0.1:8999"
    def is_running(self): return True
    def stop(self): pass

STANDING_BY[ServerConfig(max_num_seqs=8, api_key="a-secret-key-1")] = Idle()"""
TAKE_OVER = "STANDING_BY.clear()  # what start_server does with the entry of its settings"


def run_nbval(tmp_path: Path, name: str, *cells: str) -> subprocess.CompletedProcess:
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.standby_audit",
                           "--nbval-lax", "--rootdir", str(tmp_path), str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": course_pythonpath(os.environ)},
                          check=False)


def test_a_notebook_that_ends_with_a_server_standing_by_fails_on_its_last_cell(tmp_path):
    run = run_nbval(tmp_path, "left", STAND_BY, "print('the last cell')")
    assert run.returncode == 1, run.stdout[-2000:]
    assert "left.ipynb ended with 1 server(s) started ahead that no cell took over" in run.stdout
    assert "max_num_seqs=8, api_key set at http://127.0.0.1:8999" in run.stdout
    assert "a-secret-key-1" not in run.stdout + run.stderr
    assert "2 passed, 1 error" in run.stdout  # both cells ran and passed; the error is the last one's teardown


def test_a_server_taken_over_or_none_at_all_passes(tmp_path):
    for name, cells in (("taken", (STAND_BY, TAKE_OVER)), ("none", ("print('no server here')",))):
        run = run_nbval(tmp_path, name, *cells)
        assert run.returncode == 0, run.stdout[-2000:]
        assert "started ahead" not in run.stdout


def test_a_notebook_with_a_failed_cell_gets_that_failure_and_no_second_error(tmp_path):
    # the failed cell may be the one that was to take the server over: its own error says more than the audit's
    run = run_nbval(tmp_path, "failed", STAND_BY, "raise ValueError('this cell fails')", "print('the last cell')")
    assert run.returncode == 1, run.stdout[-2000:]
    assert "this cell fails" in run.stdout and "started ahead" not in run.stdout
    assert "1 failed, 2 passed" in run.stdout


def test_a_kernel_that_cannot_answer_is_a_warning_and_the_notebook_still_tears_down(tmp_path):
    broken = STAND_BY + "\nimport helpers.serve.standby as standby\nstandby.unclaimed = lambda: 1 / 0"
    run = run_nbval(tmp_path, "mute", broken, "print('the last cell')")
    assert run.returncode == 0, run.stdout[-2000:]
    assert "could not ask its kernel what stands by (RuntimeError: ZeroDivisionError" in run.stdout
    assert "2 passed, 1 warning" in run.stdout


def test_make_test_loads_the_audit(request):
    assert request.config.pluginmanager.has_plugin("tests.standby_audit")


def test_what_stands_by_is_told_by_its_settings_never_its_key(monkeypatch):
    class Idle:
        base_url = "http://127.0.0.1:8001"

        def __init__(self, running: bool):
            self.running, self.stopped = running, False

        def is_running(self):
            return self.running

        def stop(self):
            self.stopped = True

    alive, dead = Idle(True), Idle(False)
    monkeypatch.setattr(standby, "STANDING_BY", {ServerConfig(kv_cache_space_gib=0.5, api_key="a-secret-key-1"): alive,
                                                 ServerConfig(max_num_seqs=8): dead})
    assert standby.unclaimed() == ["kv_cache_space_gib=0.5, api_key set at http://127.0.0.1:8001"]
    assert dead.stopped and not alive.stopped  # a server that died is stopped and dropped, not reported
