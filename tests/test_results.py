"""helpers.lab.results: a run survives the trip through JSON, and many runs make one table."""

import json

import pytest

from helpers.lab.results import load_reference_runs, load_run, load_runs, save_run
from helpers.lab.table import format_table, group_by_setting, random_weights_note, runs_table
from helpers.load.client import RequestRecord
from helpers.load.run import LoadTestRun, ServerFacts


def make_run(seqs=8, tag="abcd", started="2026-11-29T08:00:00+00:00", scale=1.0):
    records = [RequestRecord(i, ok=True, prompt_len=16, prompt_tokens=46, output_tokens=64, send_s=0.0,
                             ttft_s=scale * (1.0 + i), e2e_s=scale * (5.0 + i), done_s=scale * (5.0 + i) + 0.001,
                             itl_s=[0.0612345678] * 63) for i in range(4)]
    records.append(RequestRecord(4, ok=False, error="timeout: no complete answer within 10 s", send_s=0.0,
                                 done_s=scale * 10.0))
    server = ServerFacts(url="http://127.0.0.1:8000", model="smollm2", vllm_version="0.32.0", max_num_seqs=seqs,
                         max_model_len=2048, device="cpu",
                         kv_cache={"num_tokens": 93184, "num_blocks": 728, "block_size": 128})
    settings = {"num_requests": 5, "run_tag": tag, "output_tokens": 64, "concurrency": 5}
    return LoadTestRun(f"max_num_seqs={seqs}", settings, server, "CPU: 2 cores, AMD EPYC", started, scale * 10.0,
                       records, cpu_cores=2)


def test_a_saved_run_loads_back_with_its_records_settings_and_server(tmp_path):
    run = make_run()
    path = save_run(run, tmp_path)
    assert path.parent == tmp_path and "seqs8" in path.name and path.name.endswith("abcd.json")
    back = load_run(path)
    assert back.server == run.server and back.settings == run.settings and back.hardware == run.hardware
    assert back.started_at == run.started_at and back.max_num_seqs == 8 and back.cpu_cores == 2
    assert [r.ok for r in back.records] == [r.ok for r in run.records]
    assert back.records[4].error == run.records[4].error
    assert back.records[0].itl_s[0] == pytest.approx(0.06123, abs=1e-5)  # rounded to 10 microseconds
    assert back.summary.e2e_p95_s == pytest.approx(run.summary.e2e_p95_s)


def test_the_file_is_plain_json_with_a_summary_for_human_readers(tmp_path):
    data = json.loads(save_run(make_run(), tmp_path).read_text())
    assert data["format"].startswith("vllm-course/loadtest-run/")
    assert data["summary"]["num_errors"] == 1 and len(data["records"]) == 5
    assert data["server"]["vllm_version"] == "0.32.0" and data["cpu_cores"] == 2


def test_a_file_from_before_cpu_cores_gets_them_from_its_hardware_line(tmp_path):
    path = save_run(make_run(), tmp_path)
    data = json.loads(path.read_text())
    del data["cpu_cores"]
    path.write_text(json.dumps(data))
    assert load_run(path).cpu_cores == 2
    data["hardware"] = "1 x NVIDIA H200 (139 GiB)"
    path.write_text(json.dumps(data))
    assert load_run(path).cpu_cores is None


def test_load_runs_reads_a_folder_oldest_first_and_skips_other_json(tmp_path):
    save_run(make_run(64, "late", "2026-11-29T09:00:00+00:00"), tmp_path)
    save_run(make_run(8, "early", "2026-11-29T08:00:00+00:00"), tmp_path)
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    runs = load_runs(tmp_path)
    assert [r.settings["run_tag"] for r in runs] == ["early", "late"]
    assert list(group_by_setting(runs)) == [8, 64]


def test_loading_something_else_says_what_is_wrong(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a load-test run file"):
        load_run(path)


def test_table_rows_per_run_and_pooled_per_setting():
    runs = [make_run(8, "a"), make_run(8, "b", scale=2.0), make_run(64, "c")]
    rows = runs_table(runs)
    assert [(r.max_num_seqs, r.run) for r in rows] == [(8, "a"), (8, "b"), (64, "c")]
    assert rows[1].summary is runs[1].summary
    pooled = runs_table(runs, pooled=True)
    assert [r.max_num_seqs for r in pooled] == [8, 64]
    assert pooled[0].summary.num_runs == 2 and pooled[0].summary.num_errors == 2
    assert [r.run for r in pooled] == ["2 runs", "1 run"]
    low, high = runs[0].summary.output_tok_per_s, runs[1].summary.output_tok_per_s  # run b took twice as long
    assert pooled[0].summary.output_tok_per_s == pytest.approx((low + high) / 2)
    assert pooled[0].summary.range_of("output_tok_per_s") == pytest.approx((high, low))
    table = format_table(pooled)
    assert table.splitlines()[0].startswith("| max_num_seqs | run | wall_s |") and len(table.splitlines()) == 4
    ranges = format_table(pooled, ("max_num_seqs", "output_tok_per_s_min", "output_tok_per_s_max"))
    assert ranges.splitlines()[2:] == [f"| 8 | {high:.3g} | {low:.3g} |", f"| 64 | {low:.3g} | {low:.3g} |"]


def test_committed_reference_runs_are_found_per_device_and_model():
    cpu = load_reference_runs("cpu", "smollm2")
    assert cpu and {run.server.device for run in cpu} == {"cpu"}
    assert {run.cpu_cores for run in cpu} == {2}  # from "CPU: 2 cores" in files written before cpu_cores
    gpu = load_reference_runs("cuda", "smollm2")  # results/gpu/ (lab and sweep), measured on an H200
    assert {run.max_num_seqs for run in gpu} == {1, 2, 4, 8, 16, 32, 64}
    assert {run.server.model for run in gpu} == {"smollm2"} and {run.server.device for run in gpu} == {"cuda"}
    dummy = load_reference_runs("cuda", "dummy-llama-3.1-8b")
    assert {run.max_num_seqs for run in dummy} == {1, 2, 4, 8, 16, 32, 64}
    assert all(run.server.model_source == "dummy" for run in dummy)
    assert all(run.settings["output_tokens"] == 256 for run in gpu + dummy)  # the lab's GPU setting
    assert load_reference_runs("cpu", "some-other-model") == []


def test_runs_on_random_weights_are_marked_in_notes_plots_and_explanations():
    import matplotlib

    matplotlib.use("Agg")
    from helpers.lab.explain import explain_runs
    from helpers.lab.plots import plot_throughput

    dummy = load_reference_runs("cuda", "dummy-llama-3.1-8b")
    note = random_weights_note(dummy)
    assert note and "dummy-llama-3.1-8b" in note and "random weights" in note
    assert random_weights_note(load_reference_runs("cuda", "smollm2")) is None
    fig = plot_throughput(group_by_setting(dummy))
    assert any("random weights" in text.get_text() for text in fig.texts)
    assert explain_runs(dummy).findings[0].effect == "the model"
    assert explain_runs(load_reference_runs("cuda", "smollm2")).findings[0].effect != "the model"
