"""The audit that fails a notebook whose exercise answer is printed above the exercise (helpers.answer_audit).

tests/conftest.py switches it on for the whole session, so nbval's kernels and the lab copies inherit it;
these tests run it in a real kernel, through nbclient and through nbval (the two ways make test executes
notebooks), on small notebooks with the answer shown before or after its check.
"""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from helpers.answer_audit import AUDIT_ENV, shown_as
from helpers.paths import course_pythonpath

ROOT = Path(__file__).resolve().parent.parent

SETUP = "import helpers\nfrom helpers.feedback import check_number"
SHOW = "print('the clock: 33.5 ms a step')"
ANSWER = "answer = None"
CHECK = "check_number(answer, 33.47, name='step time', rel_tol=0.05)"


def notebook(*sources: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources])


def execute(nb: nbformat.NotebookNode) -> None:
    NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()


def test_the_session_audits_every_kernel_it_starts():
    assert os.environ[AUDIT_ENV] == "1"


def test_an_answer_printed_above_its_exercise_fails_the_notebook():
    with pytest.raises(CellExecutionError, match=r"AnswerShownAbove.*step time.*'33.5'"):
        execute(notebook(SETUP, SHOW, ANSWER, CHECK))


def test_an_answer_shown_by_a_markdown_display_or_a_cells_result_fails_too():
    markdown = "from IPython.display import Markdown, display\ndisplay(Markdown('**1,430** requests fit'))"
    with pytest.raises(CellExecutionError, match=r"requests.*'1,430'"):
        execute(notebook(SETUP, markdown, ANSWER, "check_number(answer, 1430, name='requests')"))
    with pytest.raises(CellExecutionError, match="AnswerShownAbove"):
        execute(notebook(SETUP, "33.47", ANSWER, CHECK))


def test_the_same_numbers_after_the_check_or_in_the_answer_cell_pass():
    nb = notebook(SETUP, ANSWER, CHECK, SHOW)
    execute(nb)
    assert "not answered yet" in nb.cells[2].outputs[0]["text"]
    execute(notebook(SETUP, "answer = 33.5\nprint(answer)", CHECK))   # the learner's own answer cell


def test_nbval_runs_fail_the_same_way(tmp_path):
    for name, cells, code in (("shown", (SETUP, SHOW, ANSWER, CHECK), 1), ("after", (SETUP, ANSWER, CHECK, SHOW), 0)):
        path = tmp_path / f"{name}.ipynb"
        nbformat.write(notebook(*cells), path)
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                              "--rootdir", str(tmp_path), str(path)], cwd=ROOT, capture_output=True, text=True,
                             timeout=120, env={**os.environ, "PYTHONPATH": course_pythonpath(os.environ)}, check=False)
        assert run.returncode == code, run.stdout[-2000:]
        assert ("AnswerShownAbove" in run.stdout) == (code == 1)


RECORDS = ("from helpers import answer_audit\nfrom helpers.load.client import RequestRecord\n"
           "records = [RequestRecord(i, ok=True, e2e_s=e2e) for i, e2e in enumerate((30.0, 33.47, 36.0))]\n"
           "answer_audit.note_made(records)  # as run_load_test does")
CHECK_RECORDS = "from helpers.lab.checks import check_e2e_percentile\ncheck_e2e_percentile(answer, records, 50)"
SHOW_ANOTHER_RUN = "print('an earlier run: p50 33.5 s')"


def test_a_number_shown_before_the_measurement_existed_is_not_its_answer():
    nb = notebook(SETUP, SHOW_ANOTHER_RUN, RECORDS, ANSWER, CHECK_RECORDS)
    execute(nb)
    assert "not answered yet" in nb.cells[4].outputs[0]["text"]
    with pytest.raises(CellExecutionError, match=r"AnswerShownAbove.*p50 end-to-end latency.*'33.5'"):
        execute(notebook(SETUP, RECORDS, SHOW_ANOTHER_RUN, ANSWER, CHECK_RECORDS))
    with pytest.raises(CellExecutionError, match=r"AnswerShownAbove"):  # the measuring cell itself counts
        execute(notebook(SETUP, RECORDS + "\n" + SHOW_ANOTHER_RUN, ANSWER, CHECK_RECORDS))


def test_records_the_audit_did_not_see_made_are_audited_against_every_cell(monkeypatch):
    import gc

    from helpers import answer_audit
    from helpers.load.client import RequestRecord

    monkeypatch.setattr(answer_audit, "_cells", [7])
    monkeypatch.setattr(answer_audit, "_made", {})
    made, loaded = [RequestRecord(0), RequestRecord(1)], [RequestRecord(2)]
    answer_audit.note_made(made)
    assert answer_audit.made_in(made) == 7 and answer_audit.made_in(loaded) == 0
    assert answer_audit.made_in([*made, *loaded]) == 0
    del made
    gc.collect()
    assert answer_audit._made == {}  # forgotten with the records, so a new object with the same id is not taken for them


def test_off_outside_the_audit(monkeypatch):
    monkeypatch.setenv(AUDIT_ENV, "0")
    execute(notebook(SETUP, SHOW, ANSWER, CHECK))


@pytest.mark.parametrize(("answer", "text", "token"), [
    (33.47, "33.5 ms", "33.5"), (33.47, "33.4 ms", None), (0.4523, "hit rate 45.2%", "45.2%"), (45.2, "45.2%", "45.2%"),
    (8192, "8,192 tokens", "8,192"), (7, "7 blocks", None), (3.04, "0.30 s and 3.04", "3.04"), (143, "H143, 1143", None),
    (2, "2.00x", "2.00"), (47, "[45, 47]", None), (22, "11.6 s (22.0 output tok/s)", None), (22.0, "22.0 tok/s", "22.0"),
    (1200, "1,200.0 tokens", None), (0.833, "83%", None),
    (20.9998, "log: x.log\n[  21.0 s] engine process started\n", None), (21.3, "[  33.2 s] ready in 21.3 s: url\n", None),
    (20.9998, "[  33.2 s] ready\np95 21.0 s", "21.0"),
    (512, "AVX-512", None), (135, "SmolLM2-135M-Instruct", None), (512, "blocks of 512 tokens", "512"), (-0.125, "a slope of -0.125", "-0.125"),
])
def test_a_number_shows_the_answer_when_it_rounds_to_it_with_three_digits_or_more(answer, text, token):
    assert shown_as(answer, text) == token


@pytest.mark.parametrize(("answer", "text", "token"), [
    (1.85317, "max_num_seqs=8, 1.85 req/s", None), (1.85317, "TPOT ratio 1.853", "1.853"), (0.36918, "0.3692x", "0.3692"),
    (1.47832, "| your client | 8 | 103 | 1.46 | 1.48 | 2.46 |", None),
    (1.47832, "64 slots: 1.48x the throughput", "1.48"), (1.47832, "1.48 × as fast", "1.48"), (1.47832, "1.48 times", "1.48"),
    (1.47832, "1.48 tok/s", None), (1.47832, "1.48 xfers", None),
])
def test_an_exercise_that_asks_for_four_digits_is_not_shown_by_a_three_digit_number(answer, text, token):
    assert shown_as(answer, text, digits=4) == token


FIT = ("from helpers import answer_audit\nfrom helpers.batching.step_time import StepTimeModel\n"
       "fitted = StepTimeModel(overhead_s=0.03724, decode_seq_s=0.001)  # 80% of the ceiling at b = 148.96\n"
       "answer_audit.note_made([fitted])  # as fit_step_time_model does")
CHECK_FIT = "from helpers.batching.exercises import check_batch_for_80_percent\ncheck_batch_for_80_percent(answer, fitted)"
SHOW_LENGTHS = "print('output tokens: [149, 133, 145]')"


def test_a_fitted_models_answer_is_audited_from_the_cell_that_fitted_it():
    nb = notebook(SETUP, SHOW_LENGTHS, FIT, ANSWER, CHECK_FIT)  # notebook 04's order on 2026-12-05's CI machine
    execute(nb)
    assert "not answered yet" in nb.cells[4].outputs[0]["text"].lower()
    with pytest.raises(CellExecutionError, match=r"AnswerShownAbove.*80% of the ceiling.*'149'"):
        execute(notebook(SETUP, FIT, SHOW_LENGTHS, ANSWER, CHECK_FIT))


def test_fitting_a_step_time_model_notes_the_cell_that_made_it(monkeypatch):
    from helpers import answer_audit
    from helpers.batching.step_time import StepMeasurement, StepTimeModel, fit_step_time_model

    monkeypatch.setattr(answer_audit, "_cells", [5])
    monkeypatch.setattr(answer_audit, "_made", {})
    true = StepTimeModel(overhead_s=0.02, decode_seq_s=0.004)
    fitted = fit_step_time_model([StepMeasurement.decode(b, true.decode_tok_s(b)) for b in (1, 8, 64)])
    assert answer_audit.made_in([fitted]) == 5 and answer_audit.made_in([true]) == 0


def test_the_cached_tokens_exercise_is_audited_from_the_run_that_measured_them(monkeypatch):
    from helpers import answer_audit
    from helpers.load.client import RequestRecord
    from helpers.load.prometheus import MetricsSample
    from helpers.load.run import LoadTestRun, ServerFacts
    from helpers.tuning.exercises import grade_hits_per_request
    from helpers.tuning.measurement import Measurement

    monkeypatch.setattr(answer_audit, "_made", {})
    records = [RequestRecord(i, ok=True) for i in range(4)]
    run = LoadTestRun("prefix caching: on", {}, ServerFacts("smollm2"), "CPU", "2026-01-01T00:00:00+00:00", 1.0, records)
    samples = [MetricsSample(0.0, 0, 0, 0.0, 0, 0, 0, 100, 40), MetricsSample(1.0, 0, 0, 0.0, 0, 0, 0, 500, 340)]
    on = Measurement("prefix caching", "on", run, samples)  # 300 hits over 4 requests: 75.0 a request
    monkeypatch.setattr(answer_audit, "_cells", [5])
    answer_audit.note_made(records)
    monkeypatch.setattr(answer_audit, "_cells", [9])
    monkeypatch.setattr(answer_audit, "_shown", [(3, "an earlier run: 75.0 tokens")])
    assert grade_hits_per_request(None, on).ok is None
    monkeypatch.setattr(answer_audit, "_shown", [(6, "this run: 75.0 tokens")])
    with pytest.raises(answer_audit.AnswerShownAbove, match="'75.0'"):
        grade_hits_per_request(None, on)
