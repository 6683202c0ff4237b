"""The front end as a stage of the pipeline: its costs solved from CPU time, and what they do to the clock and the prediction."""

import pytest

from helpers.batching.fit_plan import plan_step_fit
from helpers.batching.front_end import FrontEndCost, solve_front_end
from helpers.batching.predict import admitted, predict_throughput
from helpers.batching.prediction import prediction_record
from helpers.batching.step_time import StepTimeModel
from helpers.batching.trace import BatchRequest, lab_trace
from helpers.validate import InvalidArgumentError

ENGINE = StepTimeModel(overhead_s=0.0025, prefill_token_s=0.0, decode_seq_s=0.000007, max_num_batched_tokens=8192)


def test_the_per_token_cost_is_the_two_loads_difference_and_the_rest_is_admission():
    # API server: 50 requests x 2 ms, and 50 x 127 streamed tokens x 80 us more in the longer load
    api_short, api_long = 50 * 0.002 + 50 * 0.00008, 50 * 0.002 + 50 * 128 * 0.00008
    cost = solve_front_end((api_short, 0.01), (api_long, 0.01 + 50 * 127 * 0.00002), num_requests=50, output_len=128)
    assert cost.api_token_s == pytest.approx(0.00008) and cost.api_request_s == pytest.approx(0.002)
    assert cost.client_token_s == pytest.approx(0.00002) and cost.client_request_s == pytest.approx(0.0002 - 0.00002)
    assert cost.stream_token_s == cost.api_token_s and cost.admit_request_s == cost.api_request_s


def test_noise_that_would_make_a_cost_negative_keeps_it_at_zero():
    cost = solve_front_end((0.10, 0.05), (0.09, 0.04), num_requests=50, output_len=64)
    assert cost.api_token_s == 0 and cost.client_token_s == 0 and cost.api_request_s == pytest.approx(0.002)


@pytest.mark.parametrize("output_len", [1, 0])
def test_a_longer_load_of_one_token_cannot_separate_the_costs(output_len):
    with pytest.raises(InvalidArgumentError, match="more than 1 token"):
        solve_front_end((0.1, 0.1), (0.2, 0.2), num_requests=50, output_len=output_len)


def test_the_front_end_is_a_floor_under_each_step_not_a_cost_added_to_it():
    clock = FrontEndCost(0.002, 0.00007, 0.0, 0.0, 50, 128).applied_to(ENGINE)
    assert clock.step_seconds(0, 8) == pytest.approx(ENGINE.step_seconds(0, 8))  # the engine is slower at 8
    assert clock.step_seconds(0, 64) == pytest.approx(64 * 0.00007)  # the front end is slower at 64
    assert (clock.overhead_s, clock.decode_seq_s) == (ENGINE.overhead_s, ENGINE.decode_seq_s)


def test_admission_delays_each_request_behind_those_sent_before_it():
    trace = [BatchRequest("a", 0.0, 16, 4), BatchRequest("b", 0.0, 16, 4), BatchRequest("c", 1.0, 16, 4)]
    assert [r.arrival_s for r in admitted(trace, 0.5)] == [0.5, 1.0, 1.5]
    assert admitted(trace, 0.0) == trace


def test_admission_and_streaming_lower_the_high_setting_more_than_the_low_one():
    lab = lab_trace(output_len=256)
    front = FrontEndCost(0.002, 0.00007, 0.001, 0.00002, 50, 128)
    engine_only = [predict_throughput(ENGINE, lab, n) for n in (8, 64)]
    with_front = [predict_throughput(front.applied_to(ENGINE), lab, n) for n in (8, 64)]
    assert with_front[0] == pytest.approx(engine_only[0], rel=0.01)  # at 8 the engine is the slower stage
    assert with_front[1] < 0.8 * engine_only[1]
    # timed like a load test, from sending: 50 admissions of 2 ms come before the last request's 256 steps
    assert 12_800 / with_front[1] > 50 * 0.002 + 256 * ENGINE.step_seconds(0, 1)


def test_each_setting_is_predicted_with_its_own_servers_clock():
    lab = lab_trace(output_len=256)
    faster_at_8 = StepTimeModel(overhead_s=0.0018, prefill_token_s=0.0, decode_seq_s=0.000007)
    record = prediction_record({8: faster_at_8, 64: ENGINE}, trace=lab)
    assert record["predicted_output_tok_s"][0] == pytest.approx(predict_throughput(faster_at_8, lab, 8))
    assert record["predicted_output_tok_s"][1] == pytest.approx(predict_throughput(ENGINE, lab, 64))
    assert record["step_time_models"]["8"]["overhead_s"] == 0.0018 and record["step_time_model"] == record["step_time_models"]["64"]
    with pytest.raises(InvalidArgumentError, match="no clock for max_num_seqs"):
        prediction_record({8: ENGINE}, trace=lab)


def test_only_a_gpu_plan_times_the_low_settings_server_and_the_front_end():
    gpu = plan_step_fit("cuda", demo_max_num_seqs=8, demo_output_len=384, lab_output_len=256)
    cpu = plan_step_fit("cpu", demo_max_num_seqs=8, demo_output_len=48, lab_output_len=64)
    assert gpu.low_batch_sizes == (1, 4, 8) and gpu.front_end
    assert "own clock" in gpu.describe() and "front end" in gpu.describe()
    assert cpu.low_batch_sizes == () and not cpu.front_end and "front end" not in cpu.describe()
    # a demonstration server whose cap is not the low setting cannot give the low setting its clock
    assert plan_step_fit("cuda", demo_max_num_seqs=4, demo_output_len=384, lab_output_len=256).low_batch_sizes == ()
