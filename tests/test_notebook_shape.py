"""Every notebook and lab has the course's shape: badge, Colab cell, sections, no outputs."""

from pathlib import Path

import nbformat
import pytest

from helpers.colab import SETUP_CELL, badge_markdown

ROOT = Path(__file__).resolve().parent.parent
LABS = sorted((ROOT / "labs").glob("*.ipynb"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + LABS + sorted((ROOT / "labs" / "learner").glob("*.ipynb"))
SECTIONS = ("Goal", "Summary", "Exercises")


def test_the_course_has_its_first_two_notebooks():
    names = {path.name for path in NOTEBOOKS}
    assert {"01_start_server.ipynb", "02_openai_client.ipynb"} <= names


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.name)
def test_each_lab_has_a_learner_version_in_step_with_it_and_without_the_instructor_cells(path):
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from make_learner_lab import INSTRUCTOR_TAG, learner_path, learner_version

    lab = nbformat.read(path, as_version=4)
    assert any(INSTRUCTOR_TAG in cell.metadata.get("tags", []) for cell in lab.cells), "no instructor cells to leave out"
    committed = nbformat.read(learner_path(path), as_version=4)
    expected = learner_version(lab, path.name)
    assert [c.source for c in committed.cells[2:]] == [c.source for c in expected.cells[2:]], (
        f"{learner_path(path).relative_to(ROOT)} is out of date: run `.venv/bin/python scripts/make_learner_lab.py`")
    assert not any(INSTRUCTOR_TAG in cell.metadata.get("tags", []) for cell in committed.cells)
    assert "learner version" in committed.cells[0].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_opens_with_its_colab_badge_and_setup_cell(path):
    cells = nbformat.read(path, as_version=4).cells
    assert cells[0].source.splitlines()[0] == badge_markdown(path.relative_to(ROOT).as_posix())
    assert cells[1].cell_type == "code" and cells[1].source == SETUP_CELL.rstrip()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_only_checked_cells_carry_outputs_and_those_have_reference_text(path):
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        if cell.source.lstrip().startswith("# NBVAL_CHECK_OUTPUT"):
            # nbval compares a checked cell with these stored outputs (none stored: nothing checked),
            # and only when the reference has an execution count
            assert cell.outputs and cell.execution_count, f"checked cell has no reference: {cell.source[:60]!r}"
            assert not any(key.startswith("image/") for out in cell.outputs for key in out.get("data", {}))
        else:
            assert cell.outputs == [] and cell.execution_count is None, f"unchecked cell has outputs: {cell.source[:60]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_the_course_sections(path):
    headings = [line for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"
                for line in cell.source.splitlines() if line.startswith("## ")]
    for section in SECTIONS:
        assert any(section in heading for heading in headings), f"{path.name} lacks a '## {section}' section"



# Stored outputs below a notebook's first exercise that answer none of its exercises: a line of the cell, and why.
SHOWS_NO_ANSWER = {
    "03_paged_attention.ipynb": {
        "print(waste_table(summaries))": "naive against paged waste; the block-size exercise asks about sizes it does not show",
        "print(paper_table(summaries))": "the same runs beside the paper; no exercise asks for them",
    },
    "04_continuous_batching.ipynb": {
        "for num_kv_blocks in (None, 400, 120, 60, 40):": "the pool's effect on the lab's trace; no exercise asks it",
    },
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stored_output_below_an_exercise_gives_an_answer_away(path):
    """A stored output is on screen as soon as the notebook opens, before any cell runs: below an exercise it
    can show what the exercise asks the learner to predict (notebook 03's block table and notebook 04's table of
    the four traces once did). Each one there is listed above with the reason it answers nothing."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from fill_learner_lab import ANSWER_CELL  # what an exercise's answer cell is, as the filled labs find it

    cells = nbformat.read(path, as_version=4).cells
    first = next((i for i, cell in enumerate(cells) if cell.cell_type == "code" and ANSWER_CELL.search(cell.source)),
                 len(cells))
    allowed = SHOWS_NO_ANSWER.get(path.name, {})
    shown = [i for i, cell in enumerate(cells[first:], first) if cell.cell_type == "code" and cell.outputs
             and not any(line in cell.source.splitlines() for line in allowed)]
    assert not shown, (f"{path.name}: code cells {shown} store outputs below the first exercise (cell {first}), "
                       "visible before the learner answers; store none there (or list the cell in SHOWS_NO_ANSWER "
                       "with the reason it gives no answer away)")
