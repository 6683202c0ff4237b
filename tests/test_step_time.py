"""The step-time model, its fit to measurements, and the throughput it predicts."""

import numpy as np
import pytest

from helpers.batching.predict import lab_measurements, predict_throughput, run_measurement
from helpers.batching.sim import simulate_continuous
from helpers.batching.step_time import StepMeasurement, StepTimeModel, fit_step_time_model
from helpers.batching.trace import lab_trace, mixed_length_trace

KNOWN = StepTimeModel(overhead_s=0.02, prefill_token_s=0.0005, decode_seq_s=0.004)


def close(a: StepTimeModel, b: StepTimeModel, rel: float = 1e-6) -> bool:
    return all(
        getattr(a, f) == pytest.approx(getattr(b, f), rel=rel)
        for f in ("overhead_s", "prefill_token_s", "decode_seq_s")
    )


def test_step_seconds_is_overhead_plus_prefill_tokens_plus_decoding_sequences():
    assert KNOWN.step_seconds(num_prefill_tokens=1000, num_decode_seqs=10) == pytest.approx(0.02 + 0.5 + 0.04)


def test_decode_speed_grows_with_batch_size_but_less_than_linearly():
    assert KNOWN.decode_tok_s(1) == pytest.approx(1 / 0.024)
    assert KNOWN.decode_tok_s(1) < KNOWN.decode_tok_s(8) < 8 * KNOWN.decode_tok_s(1)


def test_a_prefill_measurement_counts_one_step_per_2048_prompt_tokens():
    m = StepMeasurement.prefill(prompt_len=5000, ttft_s=4.0)
    assert (m.num_steps, m.num_prefill_tokens, m.num_decode_seqs) == (3, 5000, 0)


def test_fit_recovers_known_parameters_from_synthetic_measurements():
    ms = [StepMeasurement.decode(b, KNOWN.decode_tok_s(b)) for b in (1, 4, 16, 64)]
    ms.append(StepMeasurement.prefill(2048, KNOWN.step_seconds(2048, 0)))
    assert close(fit_step_time_model(ms), KNOWN)


def test_fit_recovers_known_parameters_from_simulated_load_test_runs():
    # Load tests measured by their wall time only, as the lab measures them. One trace at
    # several max_num_seqs only varies the step count: vary the lengths too.
    runs = [
        simulate_continuous(lab_trace(), 8, KNOWN),
        simulate_continuous(lab_trace(), 64, KNOWN),
        simulate_continuous(lab_trace(output_len=128), 8, KNOWN),
        simulate_continuous(lab_trace(prompt_lens=(1024, 2000), output_len=4), 8, KNOWN),
    ]
    ms = [run_measurement(r, r.summary.makespan_s) for r in runs]
    assert close(fit_step_time_model(ms), KNOWN)


def test_one_trace_at_several_batch_sizes_cannot_separate_prefill_from_decode_cost():
    runs = [simulate_continuous(lab_trace(), n, KNOWN) for n in (4, 8, 64)]
    ms = [run_measurement(r, r.summary.makespan_s) for r in runs]
    with pytest.raises(ValueError, match="cannot separate"):
        fit_step_time_model(ms)


def test_fit_stays_close_when_measurements_are_noisy():
    rng = np.random.default_rng(0)
    ms = [StepMeasurement.decode(b, KNOWN.decode_tok_s(b) * rng.normal(1, 0.02)) for b in (1, 2, 4, 8, 16, 32, 64)]
    ms += [StepMeasurement.prefill(p, KNOWN.step_seconds(p, 0) * rng.normal(1, 0.02)) for p in (512, 1024, 2048)]
    assert close(fit_step_time_model(ms), KNOWN, rel=0.15)


def test_a_parameter_no_measurement_exercises_keeps_its_base_value():
    ms = [StepMeasurement.decode(b, KNOWN.decode_tok_s(b)) for b in (1, 8)]
    base = StepTimeModel(prefill_token_s=0.123)
    fit = fit_step_time_model(ms, base=base)
    assert fit.prefill_token_s == 0.123
    assert fit.overhead_s == pytest.approx(0.02) and fit.decode_seq_s == pytest.approx(0.004)


def test_fit_refuses_measurements_that_cannot_separate_overhead_from_decode_cost():
    with pytest.raises(ValueError, match="cannot separate"):
        fit_step_time_model([StepMeasurement.decode(1, 40.0), StepMeasurement.decode(1, 41.0)])


def test_a_parameter_the_data_would_make_negative_is_pinned_at_zero():
    # Batching makes decoding no faster per token (noise even makes it a bit slower): a
    # straight line through these step times would cross zero below the origin.
    ms = [StepMeasurement.decode(1, 100.0), StepMeasurement.decode(2, 99.0), StepMeasurement.decode(4, 99.0)]
    fit = fit_step_time_model(ms)
    assert fit.overhead_s == 0.0 and fit.decode_seq_s == pytest.approx(0.01, rel=0.02)


def test_the_default_model_is_the_fit_of_the_lab_measurements():
    fit = fit_step_time_model(lab_measurements())
    assert close(fit, StepTimeModel(), rel=0.01)
    assert fit.max_num_batched_tokens == 2048


def test_the_default_clock_still_reproduces_the_two_lab_figures_it_was_fitted_to():
    """A regression check, not a prediction: StepTimeModel's defaults were fitted to these two figures on this trace
    (helpers/batching/predict.py), so a change to the simulator or the defaults that moves them fails here."""
    trace = lab_trace()
    at_8, at_64 = predict_throughput(StepTimeModel(), trace, 8), predict_throughput(StepTimeModel(), trace, 64)
    assert at_8 == pytest.approx(100, rel=0.05) and at_64 == pytest.approx(160, rel=0.05)


def test_predicted_throughput_never_falls_as_max_num_seqs_grows_on_mixed_traffic():
    trace = mixed_length_trace(32)
    tput = [predict_throughput(StepTimeModel(), trace, n) for n in (1, 2, 4, 8, 16, 32)]
    assert tput == sorted(tput)



def test_a_negative_step_cost_is_refused_with_a_value_error():
    with pytest.raises(ValueError, match="decode_seq_s must be"):
        StepTimeModel(decode_seq_s=-0.001)
