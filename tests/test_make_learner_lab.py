"""scripts/make_learner_lab.py writes learner versions of the instructor labs only, and says why it will not.

A learner lab given back to it would gain a second "(learner version)" title, and a chapter notebook would become a
stray labs/learner/ file; a lab whose first cell has no '# ' title stops with what to fix, not a bare StopIteration.
Nothing here writes into labs/learner/: the writer is replaced or pointed at a temporary folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import make_learner_lab  # a script, not a package

LABS = sorted((ROOT / "labs").glob("*.ipynb"))


@pytest.mark.parametrize("path", [
    ROOT / "labs" / "learner" / "01_concurrency_lab.ipynb", ROOT / "notebooks" / "01_start_server.ipynb",
    ROOT / "labs" / "README.md", ROOT / "labs" / "03_no_such_lab.ipynb", Path("labs/learner/../learner/x.ipynb")],
    ids=["learner lab", "chapter notebook", "not a notebook", "missing lab", "relative learner path"])
def test_anything_but_an_instructor_lab_is_refused_naming_the_labs(path):
    with pytest.raises(SystemExit, match=r"is not an instructor lab: give a notebook of labs/ \(01_concurrency_lab"):
        make_learner_lab.instructor_lab(path)


def test_each_instructor_lab_is_accepted_however_it_is_spelled(monkeypatch):
    assert LABS, "no labs/*.ipynb"
    monkeypatch.chdir(ROOT / "notebooks")
    for lab in LABS:
        assert make_learner_lab.instructor_lab(Path("..") / "labs" / lab.name) == lab


def test_a_refused_path_stops_the_script_before_any_lab_is_written(monkeypatch, capsys):
    written = []
    monkeypatch.setattr(make_learner_lab, "write_learner_version", lambda lab: written.append(lab) or lab)
    monkeypatch.setattr(sys, "argv", ["make_learner_lab.py", str(LABS[0]),
                                      str(ROOT / "labs" / "learner" / LABS[0].name)])
    with pytest.raises(SystemExit, match="is not an instructor lab"):
        make_learner_lab.main()
    assert written == []


def test_a_lab_without_a_title_line_says_what_to_fix(tmp_path, monkeypatch):
    lab = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("**Lab 3.** No heading here."),
                                          nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(ValueError, match=r"^03_lab\.ipynb: its first cell has no title line starting with '# '"):
        make_learner_lab.learner_version(lab, "03_lab.ipynb")
    labs = tmp_path / "labs"
    labs.mkdir()
    nbformat.write(lab, labs / "03_lab.ipynb")
    monkeypatch.setattr(make_learner_lab, "ROOT", tmp_path)
    monkeypatch.setattr(make_learner_lab, "LEARNER_DIR", labs / "learner")
    monkeypatch.setattr(sys, "argv", ["make_learner_lab.py"])
    with pytest.raises(SystemExit, match="no title line starting with '# '"):
        make_learner_lab.main()
    assert not (labs / "learner" / "03_lab.ipynb").exists()


def _titles_main_writes(lab: Path, monkeypatch) -> tuple[str | None, list[str]]:
    """main() run on ``lab``: its refusal (None if none) and the title cell of each notebook it would write, captured
    where the writer hands it to nbformat: the real labs/learner/ is never touched."""
    written = []
    monkeypatch.setattr(make_learner_lab.nbformat, "write", lambda notebook, out: written.append(notebook))
    monkeypatch.setattr(make_learner_lab, "normalise", lambda out: None)
    monkeypatch.setattr(sys, "argv", ["make_learner_lab.py", str(lab)])
    try:
        make_learner_lab.main()
    except SystemExit as refusal:
        return str(refusal), [notebook.cells[0].source for notebook in written]
    return None, [notebook.cells[0].source for notebook in written]


def test_the_title_line_gains_the_learner_mark_once(monkeypatch):
    refusal, titles = _titles_main_writes(ROOT / "labs" / "01_concurrency_lab.ipynb", monkeypatch)
    assert refusal is None and len(titles) == 1 and titles[0].count("(learner version)") == 1
    learner_lab = ROOT / "labs" / "learner" / "01_concurrency_lab.ipynb"
    assert learner_lab.is_file()
    # Given back, the learner lab's title gained a second mark: "... (learner version) (learner version)".
    refusal, titles = _titles_main_writes(learner_lab, monkeypatch)
    assert not any(title.count("(learner version)") > 1 for title in titles), titles
    assert refusal is not None and "is not an instructor lab" in refusal
