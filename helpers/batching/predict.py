"""Predictions made by simulating with the step-time clock: throughput, and load tests as measurements.

`helpers.batching.step_time` is the clock alone (pure arithmetic); this module runs the
simulator (`helpers.batching.sim`) with it:

- `predict_throughput`: the output tok/s a model predicts for a trace at a max_num_seqs;
- `run_measurement`: a whole load test, timed by its wall clock, as a `StepMeasurement`
  (the simulation of the same trace counts its steps and tokens);
- `lab_measurements`: the three numbers the default `StepTimeModel` is fitted to.

Pure and deterministic. Taught in the continuous-batching notebook; the saved prediction the
lab reads is `helpers.batching.prediction`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from helpers.batching.sim import simulate_continuous
from helpers.batching.sim_records import SimResult
from helpers.batching.step_time import StepMeasurement, StepTimeModel
from helpers.batching.trace import BatchRequest, lab_trace


def admitted(trace: Sequence[BatchRequest], admit_request_s: float) -> list[BatchRequest]:
    """The trace as the engine sees it when the front end admits one request after another,
    `admit_request_s` each: a request reaches the engine when it and every request sent before it
    have been admitted. 0 leaves the trace as it is.

    >>> [r.arrival_s for r in admitted(lab_trace(3), 0.002)]
    [0.002, 0.004, 0.006]
    """
    if admit_request_s <= 0:
        return list(trace)
    ready, out = 0.0, []
    for request in sorted(trace, key=lambda r: r.arrival_s):
        ready = max(ready, request.arrival_s) + admit_request_s
        out.append(replace(request, arrival_s=round(ready, 9)))
    return out


def predict_throughput(model: StepTimeModel, trace: Sequence[BatchRequest], max_num_seqs: int) -> float:
    """Output tokens per second the model predicts for `trace` under continuous batching,
    timed like a load test: from the first request's sending to the last token.

    Runs `helpers.batching.sim.simulate_continuous` with unlimited KV memory, so it can
    predict the lab's 8-vs-64 comparison before the lab runs it. The front end's admission
    (`StepTimeModel.admit_request_s`) delays when each request reaches the engine
    (:func:`admitted`).

    >>> predict_throughput(StepTimeModel(), lab_trace(), 64) > predict_throughput(StepTimeModel(), lab_trace(), 8)
    True
    >>> slow_front = replace(StepTimeModel(), admit_request_s=0.1)
    >>> predict_throughput(slow_front, lab_trace(), 64) < predict_throughput(StepTimeModel(), lab_trace(), 64)
    True
    """
    result = simulate_continuous(admitted(trace, model.admit_request_s), max_num_seqs, model)
    seconds = max(r.finish_s for r in result.requests) - min(r.arrival_s for r in trace)
    return result.summary.num_output_tokens / seconds if seconds > 0 else float("inf")


def run_measurement(result: SimResult, seconds: float, label: str = "") -> StepMeasurement:
    """A whole load-test run, measured at `seconds` from first send to last token.

    `result` is the simulation of the same trace and settings; only its step counts
    are used, so simulate with any model (all requests at t=0 make the schedule
    independent of the clock). This is how the lab's wall times become measurements.

    >>> m = run_measurement(simulate_continuous(lab_trace(4), 4), 2.0)
    >>> m.label, m.num_steps, m.num_prefill_tokens
    ('continuous run, max_num_seqs=4', 64, 848)
    """
    return StepMeasurement(
        seconds,
        len(result.steps),
        sum(s.num_prefill_tokens for s in result.steps),
        sum(s.num_decode_seqs for s in result.steps),
        label or f"{result.policy} run, max_num_seqs={result.max_num_seqs}",
    )


def lab_measurements() -> list[StepMeasurement]:
    """The three CPU-machine numbers the default StepTimeModel is fitted to: the lab at 100
    and 160 output tok/s (--max-num-seqs 8 and 64; 3,200 output tokens, so 32 s and 20 s)
    and one full 2,048-token prefill step at 1.5 s.

    >>> from helpers.batching.step_time import fit_step_time_model
    >>> fit = fit_step_time_model(lab_measurements())
    >>> abs(fit.overhead_s - StepTimeModel().overhead_s) < 1e-3
    True
    """
    trace = lab_trace()
    total = sum(r.output_len for r in trace)
    runs = [
        run_measurement(simulate_continuous(trace, n, StepTimeModel()), total / tok_s)
        for n, tok_s in ((8, 100.0), (64, 160.0))
    ]
    return [*runs, StepMeasurement.prefill(2048, 1.5)]
