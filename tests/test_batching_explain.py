"""Notebook 04's explainers and its fit plan: the sentences follow the numbers, the plan follows the device."""

from dataclasses import replace
from types import SimpleNamespace

import pytest

from helpers.batching.explain import (
    _prefill_pair_tokens,
    decode_batch_sizes,
    describe_fit_source,
    explain_fit,
    explain_live_engine,
    explain_prediction,
    explain_simulation,
    summarize_batching_run,
)
from helpers.batching.fit_plan import decode_batch_seconds, plan_step_fit
from helpers.batching.prediction import prediction_record
from helpers.batching.sim_records import BatchingSummary
from helpers.batching.step_time import StepMeasurement, StepTimeModel
from helpers.batching.trace import lab_trace
from helpers.errors import InvalidArgumentError
from helpers.load.client import RequestRecord


def summary(tok_s, utilization):
    return BatchingSummary(32, 1000, 100, 0, 1000 / tok_s, tok_s, utilization, 1.0, 2.0, 0.5, 1.0)


def sim_rows(lab_gain):
    return {"steady": (summary(100, 0.6), summary(130, 0.9)), "mixed": (summary(50, 0.3), summary(150, 0.95)),
            "lab": (summary(100, 0.9), summary(100 * lab_gain, 0.9))}


def live(**changes):
    base = SimpleNamespace(peak_running=8, peak_waiting=12, seconds_with_queue=4.2, mean_running_while_queued=7.9,
                           peak_kv_cache_usage=0.41, num_preemptions=0)
    return SimpleNamespace(**{**vars(base), **changes})


def finished_at(times):
    return [RequestRecord(i, ok=True, ttft_s=t / 2, e2e_s=t) for i, t in enumerate(times)]


# ----- the simulation --------------------------------------------------------------------------------
def test_simulation_names_the_trace_that_gained_most_with_its_utilizations():
    text = explain_simulation(sim_rows(1.0))
    assert "3.00x" in text and "`mixed`" in text and "95% against 30%" in text


def test_an_equal_length_lab_trace_with_no_gain_says_there_is_nothing_to_reclaim():
    assert "nothing to reclaim" in explain_simulation(sim_rows(1.01))
    assert "prefill scheduling" in explain_simulation(sim_rows(1.2))


# ----- the live engine -------------------------------------------------------------------------------
def test_finishes_spread_out_read_as_one_by_one():
    text = explain_live_engine(live(), finished_at([1.0 + 0.2 * i for i in range(20)]), 8, 0.25)
    assert "20 distinct moments" in text and "one by one" in text and "7.9 of the cap of 8" in text
    assert "41% of a 0.25 GiB pool" in text


def test_finishes_bunched_together_read_as_fewer_moments_than_requests_not_waves():
    text = explain_live_engine(live(), finished_at([1.0] * 10 + [2.0] * 10), 8, 0.5)
    assert "2 distinct moments" in text and "not in 3 waves" in text


def test_a_burst_the_polls_never_saw_fill_the_batch_says_what_they_saw_instead():
    text = explain_live_engine(live(peak_running=5, seconds_with_queue=0.0), finished_at([1.0] * 20), 8, 0.25)
    assert "never caught the batch full" in text and "peak at 5 of the cap of 8" in text


# ----- the fit ---------------------------------------------------------------------------------------
def test_the_fit_names_its_batches_and_compares_with_the_defaults():
    fast = StepTimeModel(overhead_s=0.002, prefill_token_s=1e-6, decode_seq_s=2.5e-5, max_num_batched_tokens=8192)
    text = explain_fit(fast, StepTimeModel(), [1, 8, 32, 64], replay_error=0.05)
    assert "decode batches of 1/8/32/64" in text and "8,192 tokens" in text
    assert "17.3x the defaults' 29 (implied by their fit, not measured)" in text and "within 5%" in text
    near = explain_fit(StepTimeModel(), StepTimeModel(), [1, 4, 8], replay_error=-0.4)
    assert "close to the defaults' 29" in near and "off by -40%" in near and "rough" in near


def test_a_fit_without_a_replay_says_nothing_checked_it():
    assert "not replayed" in explain_fit(StepTimeModel(), StepTimeModel(), [1, 8], replay_error=None)


def test_the_fit_names_the_prefill_pair_it_was_timed_on():
    assert "and two prefills 768 prompt tokens apart:" in explain_fit(StepTimeModel(), StepTimeModel(), [1, 8], None, 768)
    assert "and no prefill pair:" in explain_fit(StepTimeModel(), StepTimeModel(), [1, 8], replay_error=None)


# ----- the prediction --------------------------------------------------------------------------------
def test_a_sublinear_prediction_explains_the_overhead_and_the_per_sequence_ceiling():
    model = StepTimeModel()
    lab = lab_trace()
    text = explain_prediction(model, prediction_record(model, trace=lab), 1.6, lab)
    assert "Below the cap" in text and "50 take" in text and "10,256 prompt tokens" in text
    assert "at most 50 run at once, so 6.25x is the most more slots could give" in text
    assert f"{1 / model.decode_seq_s:,.0f} tok/s" in text


@pytest.mark.parametrize("clocks", [False, True])
def test_a_fit_with_no_per_sequence_cost_blames_prefill_and_overhead_not_a_decode_ceiling(clocks):
    """decode_seq_s pinned at 0 by the fit: no sentence about what each sequence 'still costs'."""
    model = StepTimeModel(overhead_s=0.03, prefill_token_s=0.002, decode_seq_s=0.0)
    lab = lab_trace()
    by_setting = {8: model, 64: replace(model, stream_token_s=0.001)} if clocks else None
    text = explain_prediction(model, prediction_record(by_setting or model, trace=lab), 1.6, lab, by_setting)
    assert "Below the cap" in text and "each sequence still costs" not in text and "never beats" not in text
    assert "the fit measured no cost per sequence" in text and "The gap comes from" in text
    assert "prefill and the 30.0 ms overhead" in text and "20.5 s of prefill" in text
    assert ("only the front end, at 1.00 ms a token, caps streaming at 1,000 tok/s" in text) is clocks
    flat = replace(model, prefill_token_s=1e-7)
    text = explain_prediction(flat, prediction_record(flat, trace=lab), 1.6, lab)
    assert "Close to that cap: on this hardware the fit measured no cost per sequence" in text and "0 s" not in text


def test_a_nearly_linear_prediction_says_the_overhead_dominates():
    model = StepTimeModel(overhead_s=0.01, prefill_token_s=1e-7, decode_seq_s=1e-6)
    lab = lab_trace()
    text = explain_prediction(model, prediction_record(model, trace=lab), 1.6, lab)
    assert "Close to that cap" in text and "Below the cap" not in text


def test_the_summary_has_its_four_bullets():
    model = StepTimeModel()
    lab = lab_trace()
    text = summarize_batching_run(sim_rows(1.0), live=live(), records=finished_at([1.0, 2.0]), max_num_seqs=8,
                                  kv_gib=0.25, fitted=model, reference=model, batch_sizes=[1, 4, 8],
                                  replay_error=0.1, prediction=prediction_record(model, trace=lab),
                                  reference_ratio=1.6, lab=lab)
    assert [line.split("**")[1] for line in text.splitlines()] == [
        "Simulation.", "Live engine.", "Fit.", "Prediction for the lab."]


def test_the_summary_names_the_prefill_pair_the_prediction_was_fitted_to():
    model = StepTimeModel()
    lab = lab_trace()
    rows = [StepMeasurement.decode(8, 400.0), StepMeasurement.prefill_difference(256, 0.01, 1024, 0.02, 8192)]
    text = summarize_batching_run(sim_rows(1.0), live=live(), records=finished_at([1.0, 2.0]), max_num_seqs=8,
                                  kv_gib=0.25, fitted=model, reference=model, batch_sizes=[8], replay_error=0.1,
                                  prediction=prediction_record(model, trace=lab, measurements=rows),
                                  reference_ratio=1.6, lab=lab)
    assert "decode batches of 8 and two prefills 768 prompt tokens apart:" in text


def test_the_fit_source_lists_the_decode_batches_measured_not_the_prefill_row():
    rows = [StepMeasurement.decode(1, 400.0), StepMeasurement.decode(64, 15000.0),
            StepMeasurement.prefill_difference(32, 0.01, 512, 0.02, 8192)]
    assert decode_batch_sizes(rows) == [1, 64]
    assert "decode batches of 1, 64 requests" in describe_fit_source(
        "cuda", decode_batch_sizes(rows), prompt_len=256, output_len=256, prefill_lens=(32, 512), repeats=3,
        max_num_seqs=64)


# ----- which batches the fit times -------------------------------------------------------------------
def test_on_a_gpu_the_fit_reaches_the_labs_high_setting_on_a_server_of_its_own_with_the_labs_output_length():
    plan = plan_step_fit("cuda", demo_max_num_seqs=8, demo_output_len=384, lab_output_len=256)
    assert plan.batch_sizes == (1, 8, 32, 64) and max(plan.batch_sizes) == 64
    assert plan.own_server and plan.max_num_seqs == 64 and plan.output_len == 256
    assert "server of its own at max_num_seqs=64" in plan.describe()


def test_on_a_gpu_the_batches_follow_the_labs_settings():
    plan = plan_step_fit("cuda", demo_max_num_seqs=8, demo_output_len=48, lab_output_len=128, lab_settings=(4, 32))
    assert plan.batch_sizes == (1, 4, 16, 32) and plan.max_num_seqs == 32 and plan.output_len == 128


def test_on_a_cpu_the_fit_keeps_the_demonstration_server_and_its_batches_and_says_why():
    plan = plan_step_fit("cpu", demo_max_num_seqs=8, demo_output_len=48, lab_output_len=64)
    assert plan.batch_sizes == (1, 4, 8) and not plan.own_server and plan.max_num_seqs == 8 and plan.output_len == 48
    assert "extrapolates to 64" in plan.reason and "beyond this notebook's time budget" in plan.reason


def test_on_a_slower_cpu_the_estimated_cost_of_a_batch_of_64_grows():
    at_reference = decode_batch_seconds(64, 48, StepTimeModel())
    plan = plan_step_fit("cpu", demo_max_num_seqs=8, demo_output_len=48, lab_output_len=64, pace_speed=0.5)
    assert f"about {2 * at_reference:.0f} s a round" in plan.reason


def test_a_cpu_demonstration_server_that_already_reaches_the_high_setting_needs_no_extrapolation():
    plan = plan_step_fit("cpu", demo_max_num_seqs=64, demo_output_len=48, lab_output_len=64)
    assert plan.batch_sizes == (1, 32, 64) and not plan.own_server and "already reaches" in plan.reason


def test_a_batch_of_64_costs_its_prefill_and_its_decode_steps():
    model = StepTimeModel(overhead_s=0.1, prefill_token_s=0.0, decode_seq_s=0.0, max_num_batched_tokens=2048)
    # 64 x 256 = 16,384 prompt tokens in steps of 2,048: after 7 steps 56 requests decode (56 of the next step's
    # budget), so the last 8 prompts take a 9th step; then 47 more decode steps
    assert decode_batch_seconds(64, 48, model) == pytest.approx(0.1 * (9 + 47))


@pytest.mark.parametrize("changes, message", [
    ({"demo_output_len": 1}, "demo_output_len"), ({"lab_output_len": 0}, "lab_output_len"),
    ({"lab_settings": ()}, "lab_settings"), ({"pace_speed": 0}, "pace_speed"),
])
def test_a_fit_plan_refuses_what_cannot_be_timed(changes, message):
    args = {"demo_max_num_seqs": 8, "demo_output_len": 48, "lab_output_len": 64, **changes}
    with pytest.raises(InvalidArgumentError, match=message):
        plan_step_fit("cpu", **args)


def test_with_the_low_settings_rows_first_the_summary_names_the_high_servers_pair():
    model = StepTimeModel()
    lab = lab_trace()
    rows = [StepMeasurement.decode(8, 4000.0), StepMeasurement.prefill_difference(32, 0.01, 512, 0.01, 8192),
            StepMeasurement.decode(64, 15000.0), StepMeasurement.prefill_difference(256, 0.01, 1024, 0.02, 8192)]
    text = explain_fit(model, model, [8, 64], None, _prefill_pair_tokens(prediction_record(model, trace=lab,
                                                                                            measurements=rows)))
    assert "two prefills 768 prompt tokens apart" in text


def test_a_front_end_slower_than_the_engines_per_sequence_cost_is_named_as_the_ceiling():
    engine = StepTimeModel(overhead_s=0.002, prefill_token_s=0.0, decode_seq_s=0.00002, max_num_batched_tokens=8192)
    clocks = {8: engine, 64: replace(engine, stream_token_s=0.00007, admit_request_s=0.002)}
    lab = lab_trace(output_len=256)
    text = explain_prediction(engine, prediction_record(clocks, trace=lab), 1.6, lab, clocks)
    assert "caps streaming at 14,286 tok/s" in text and "the front end is the slower stage" in text
