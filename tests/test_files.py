"""Results files are written whole or not at all, and a damaged one costs only itself.

The kill tests run the saving in a child process and stop it midway, the way a kernel
restart or Ctrl-C in a terminal would: one is killed by the kernel itself once the file it
writes passes 64 KiB (RLIMIT_FSIZE with SIGXFSZ's default action, so the kill lands inside
the write whatever the writer does), the other with SIGKILL while the saving is under way.
"""

import json
import os
import resource
import signal
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from helpers import files
from helpers.errors import ResultsFileError
from helpers.files import read_json, write_atomically
from helpers.lab.results import load_run, load_runs, save_run
from tests.test_results import make_run

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 64 * 1024  # bytes the child may write before the kernel kills it


def big_run(n_records: int = 3000):
    """A run whose file is far larger than LIMIT (about 1.5 MB)."""
    run = make_run(8, "bbbb", "2026-11-29T09:00:00+00:00")
    run.records = run.records[:4] * (n_records // 4)
    return run


def folder_with_two_good_runs(tmp_path: Path) -> tuple[Path, bytes]:
    save_run(make_run(8, "aaaa", "2026-11-29T08:00:00+00:00"), tmp_path, name="run-a.json")
    path = save_run(make_run(64, "bbbb", "2026-11-29T08:30:00+00:00"), tmp_path, name="run-b.json")
    return tmp_path, path.read_bytes()


def visible_json(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.json"))


# ----- the writer ------------------------------------------------------------------------------
def test_a_file_is_written_whole_with_ordinary_permissions_and_nothing_else_left(tmp_path):
    path = write_atomically(tmp_path / "out.json", '{"a": 1}\n')
    assert path == tmp_path / "out.json" and path.read_text() == '{"a": 1}\n'
    assert os.listdir(tmp_path) == ["out.json"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~files._umask()  # not the 0o600 of a temporary file
    write_atomically(path, b"bytes too")
    assert path.read_bytes() == b"bytes too" and os.listdir(tmp_path) == ["out.json"]


def test_a_write_that_fails_halfway_keeps_the_previous_file_and_removes_its_temporary(tmp_path, monkeypatch):
    path = write_atomically(tmp_path / "run.json", "previous")

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(path, "new " * 100_000)
    assert path.read_text() == "previous"
    assert os.listdir(tmp_path) == ["run.json"]


def test_save_run_that_hits_the_file_size_limit_midway_leaves_the_old_run_and_no_partial_json(tmp_path):
    # Python ignores SIGXFSZ, so past the limit write() fails with EFBIG: a real failure in the middle of the data.
    # Before: save_run wrote run-b.json in place, leaving its first 64 KiB, and load_runs raised JSONDecodeError.
    folder, previous = folder_with_two_good_runs(tmp_path)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, hard))
    try:
        with pytest.raises(OSError):
            save_run(big_run(), folder, name="run-b.json")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert (folder / "run-b.json").read_bytes() == previous
    assert sorted(os.listdir(folder)) == ["run-a.json", "run-b.json"]
    assert [r.settings["run_tag"] for r in load_runs(folder)] == ["aaaa", "bbbb"]


CHILD = textwrap.dedent("""
    import resource, signal, sys
    from helpers.lab.results import save_run
    from tests.test_files import LIMIT, big_run

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file from the kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # the kernel kills the process at the limit
    save_run(big_run(), sys.argv[1], name="run-b.json")
    print("the save finished: the kill did not happen")
""")


def test_a_process_killed_in_the_middle_of_save_run_leaves_every_run_loadable(tmp_path):
    folder, previous = folder_with_two_good_runs(tmp_path)
    child = subprocess.run([sys.executable, "-c", CHILD, str(folder)], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == -signal.SIGXFSZ, (child.returncode, child.stdout, child.stderr)
    assert (folder / "run-b.json").read_bytes() == previous  # the old version, whole
    assert visible_json(folder) == ["run-a.json", "run-b.json"]  # the partial file is hidden from loaders
    leftovers = [p for p in folder.iterdir() if p.name not in ("run-a.json", "run-b.json")]
    assert [p.name.startswith(".run-b.json.") and p.suffix == ".tmp" for p in leftovers] == [True]
    assert leftovers[0].stat().st_size == LIMIT  # killed in the middle of the data, not before or after it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no file is even skipped
        assert [r.settings["run_tag"] for r in load_runs(folder)] == ["aaaa", "bbbb"]


SIGKILLED_CHILD = textwrap.dedent("""
    import sys, time
    from helpers import files
    from helpers.lab.results import save_run
    from tests.test_files import big_run

    real_fsync = files.os.fsync

    def fsync_then_wait(fd):  # the data is written, not yet renamed: say so and wait for the kill
        real_fsync(fd)
        print("writing", flush=True)
        time.sleep(120)

    files.os.fsync = fsync_then_wait
    save_run(big_run(), sys.argv[1], name="run-b.json")
""")


def test_a_process_sigkilled_while_saving_leaves_the_previous_file(tmp_path):
    folder, previous = folder_with_two_good_runs(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", SIGKILLED_CHILD, str(folder)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing", child.stderr.read()
    finally:
        child.kill()  # SIGKILL: no handler, no cleanup
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    assert (folder / "run-b.json").read_bytes() == previous
    assert visible_json(folder) == ["run-a.json", "run-b.json"]
    assert len(load_runs(folder)) == 2


# ----- the readers -----------------------------------------------------------------------------
def test_a_folder_with_an_empty_and_a_truncated_run_loads_the_good_ones_and_names_the_bad(tmp_path):
    # before: json.JSONDecodeError for the whole folder: every good run lost
    folder, _ = folder_with_two_good_runs(tmp_path)
    (folder / "run-c.json").write_bytes(b"")  # a process killed as it opened the file
    text = (folder / "run-a.json").read_text()
    (folder / "sub").mkdir()
    (folder / "sub" / "run-d.json").write_text(text[: len(text) // 2])  # cut short
    with pytest.warns(UserWarning) as caught:
        runs = load_runs(folder)
    assert [r.settings["run_tag"] for r in runs] == ["aaaa", "bbbb"]
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert f"{folder / 'run-c.json'} is empty (0 bytes)" in messages[0]
    assert f"{folder / 'sub' / 'run-d.json'} is not readable JSON" in messages[1]
    assert all("Run the load test that made it again" in m for m in messages)


def test_a_damaged_file_among_a_list_of_files_is_skipped_with_a_warning(tmp_path):
    folder, _ = folder_with_two_good_runs(tmp_path)
    data = json.loads((folder / "run-a.json").read_text())
    del data["records"]
    (folder / "run-e.json").write_text(json.dumps(data))  # valid JSON, but not a whole run
    with pytest.warns(UserWarning, match=r"run-e\.json is a run file without the field 'records'"):
        runs = load_runs([folder / "run-a.json", folder / "run-e.json"])
    assert len(runs) == 1


@pytest.mark.parametrize("content", ["", "   \n", '{"format": "vllm-course/loadtest-run/1", "label": "x", "rec'])
def test_loading_one_damaged_run_file_raises_an_error_that_names_it_and_says_what_to_do(tmp_path, content):
    path = tmp_path / "run-b.json"
    path.write_text(content)
    for load in (load_run, load_runs):
        with pytest.raises(ResultsFileError) as caught:
            load(path)
        message = str(caught.value)
        assert str(path) in message and "Run the load test that made it again" in message
    assert isinstance(caught.value, ValueError)  # code that caught JSONDecodeError (a ValueError) still does


def test_read_json_names_the_file_and_the_remedy(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"a": ')
    with pytest.raises(ResultsFileError, match=r"x\.json is not readable JSON \(6 bytes; JSONDecodeError: .*\): it "
                                               r"was probably cut short while being written\. Rerun it\."):
        read_json(path, remedy="Rerun it")
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "absent.json", remedy="Rerun it")
