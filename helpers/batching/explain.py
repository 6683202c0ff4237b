"""Notebook 04's findings in sentences, each built from the numbers of the run (pure).

The notebook computes; these functions say what its numbers mean, and the wording follows the
numbers: a gain near 1 reads differently from a large one, a burst whose queue the polls caught
differently from one they did not, a close replay differently from a poor one. Nothing is canned.

- :func:`explain_simulation`: continuous against static batching on the four simulated traces.
- :func:`explain_live_engine`: what ``/metrics`` showed of the real scheduler during the burst.
- :func:`explain_fit`: the fitted step-time model beside the defaults, and its replay check.
- :func:`explain_prediction`: the lab's predicted 8-vs-64 throughput, and why it is not 8x.
- :func:`summarize_batching_run`: the four as the notebook's Markdown summary.
- :func:`describe_fit_source`: how the model was measured, in one line saved with the prediction.

Taught in ``notebooks/04_continuous_batching.ipynb``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from helpers.batching.measure_stats import burst_seconds, finish_moments
from helpers.batching.sim_records import BatchingSummary
from helpers.batching.step_time import StepMeasurement, StepTimeModel
from helpers.batching.trace import BatchRequest
from helpers.load.client import RequestRecord
from helpers.units import duration, share


def decode_batch_sizes(measurements: Sequence[StepMeasurement]) -> list[int]:
    """The decode batch sizes among the fit's measurements, in order (prefill rows left out).

    >>> decode_batch_sizes([StepMeasurement.decode(1, 30.0), StepMeasurement.decode(8, 150.0),
    ...                     StepMeasurement.prefill_difference(32, 0.1, 512, 0.5)])
    [1, 8]
    """
    return [m.num_decode_seqs for m in measurements if m.num_prefill_tokens == 0 and m.num_decode_seqs > 0]


def explain_simulation(sim_rows: Mapping[str, tuple[BatchingSummary, BatchingSummary]]) -> str:
    """Which simulated trace gained most from continuous batching, and what the lab's trace gained.

    ``sim_rows``: trace kind -> (static summary, continuous summary); it must hold ``"lab"``."""
    gains = {kind: c.output_tok_s / s.output_tok_s for kind, (s, c) in sim_rows.items()}
    best = max(gains, key=gains.get)
    static, continuous = sim_rows[best]
    lab = gains["lab"]
    why_lab = ("there is nothing to reclaim when every request is as long as the longest."
               if abs(lab - 1) < 0.05 else "a difference that comes from prefill scheduling, not from idle slots.")
    return (f"With 8 slots, continuous batching gave {gains[best]:.2f}x the throughput of static batching on the "
            f"`{best}` trace (slot utilization {continuous.slot_utilization:.0%} against "
            f"{static.slot_utilization:.0%}), and {lab:.2f}x on the lab's equal-length trace: {why_lab}")


def explain_live_engine(live: Any, records: Sequence[RequestRecord], max_num_seqs: int, kv_gib: float) -> str:
    """What the polled burst showed: running pinned at the cap while requests waited, finishes one by
    one, KV use and preemptions; or, where the polls caught no queue behind a full batch, only what they
    did catch. ``live``: a ``helpers.load.prometheus.MetricsSummary`` of the burst.

    The polls read the gauges every ``poll_interval_p50_s``: a queue that forms and empties between two
    polls (a GPU's burst can) leaves no trace in them, so that case names no cause."""
    if not (live.peak_running >= max_num_seqs and live.seconds_with_queue > 0):
        return _queue_not_caught(live, records, max_num_seqs, kv_gib)
    moments = finish_moments(records)
    waves = -(-len(records) // max_num_seqs)
    how = ("one by one, not in batches." if len(moments) >= 0.75 * len(records) else
           f"not in {waves} waves: some ended in the same step because they were admitted together and had "
           "similar lengths.")
    return (f"For the {live.seconds_with_queue:.1f} s that requests waited (up to {live.peak_waiting}), "
            f"`num_requests_running` averaged {live.mean_running_while_queued:.1f} of the cap of {max_num_seqs}. "
            f"The {len(records)} requests finished at {len(moments)} distinct moments (finishes within 50 ms count as "
            f"one): {how} {_kv_sentence(live, kv_gib)}")


def _kv_sentence(live: Any, kv_gib: float) -> str:
    return (f"KV usage peaked at {share(live.peak_kv_cache_usage)} of a {kv_gib:.2f} GiB pool; "
            f"{live.num_preemptions} preemptions.")


def _queue_not_caught(live: Any, records: Sequence[RequestRecord], max_num_seqs: int, kv_gib: float) -> str:
    """The burst as the polls saw it when they timed no queue behind a full batch."""
    poll = getattr(live, "poll_interval_p50_s", None)
    polls = f"The polls (one every {duration(poll)})" if poll else "The polls"
    if live.peak_running >= max_num_seqs and live.peak_waiting:
        # seconds_with_queue adds the gaps after polls that saw a queue: 0 means only the last poll did
        seen = (f"{polls} saw running reach the cap of {max_num_seqs}, and {live.peak_waiting} requests waiting "
                "in the last poll only, so they timed no wait")
    elif live.peak_running >= max_num_seqs:
        seen = (f"{polls} saw running reach the cap of {max_num_seqs} but no request waiting: any queue behind the "
                "full batch formed and emptied between polls")
    elif len(records) < max_num_seqs:
        seen = (f"{polls} saw running peak at {live.peak_running}: the burst sent only {len(records)}, fewer than "
                f"the cap of {max_num_seqs}, so it cannot fill the batch")
    else:
        waited = f"while up to {live.peak_waiting} requests waited" if live.peak_waiting else "and no request waiting"
        seen = (f"{polls} saw running peak at {live.peak_running} of the cap of {max_num_seqs}, {waited}: "
                "they never caught the batch full")
    burst_s = burst_seconds(records)
    lasted = f" The burst lasted {duration(burst_s)}." if burst_s else ""
    return f"{seen}.{lasted} {_kv_sentence(live, kv_gib)}"


def explain_fit(fitted: StepTimeModel, reference: StepTimeModel, batch_sizes: Sequence[int],
                replay_error: float | None, prefill_tokens: int | None = None) -> str:
    """The fitted clock in words, its single-request speed against the defaults' (which their fit implies:
    it was never measured), and how well it replayed the burst (``replay_error``: simulated / measured duration - 1; None: not checked).

    ``prefill_tokens``: how many prompt tokens apart the timed prefill pair's two sides were (None: no pair timed).
    """
    speed = fitted.decode_tok_s(1) / reference.decode_tok_s(1)
    implied = f"the defaults' {reference.decode_tok_s(1):.0f} (implied by their fit, not measured)."
    against = f"{speed:.1f}x {implied}" if abs(speed - 1) > 0.15 else f"close to {implied}"
    if replay_error is None:
        check = " The burst was not replayed, so nothing checks the fit on other data."
    elif abs(replay_error) <= 0.25:
        check = f" Replaying the burst with it predicted its duration within {abs(replay_error):.0%}."
    else:
        check = f" Replaying the burst with it was off by {replay_error:+.0%}: read the prediction below as rough."
    pair = f"two prefills {prefill_tokens:,} prompt tokens apart" if prefill_tokens else "no prefill pair"
    return (f"From decode batches of {'/'.join(map(str, batch_sizes))} and {pair}: overhead "
            f"{duration(fitted.overhead_s)} a step, {duration(fitted.prefill_token_s)} a prompt token, "
            f"{duration(fitted.decode_seq_s)} a decoding sequence, within a step budget of "
            f"{fitted.max_num_batched_tokens:,} tokens; one request alone decodes at {fitted.decode_tok_s(1):,.0f} "
            f"tok/s, {against}{check}")


def explain_prediction(fitted: StepTimeModel, prediction: Mapping[str, Any], reference_ratio: float,
                       lab: Sequence[BatchRequest], clocks: Mapping[int, StepTimeModel] | None = None) -> str:
    """The predicted lab throughput at its two settings and, from the fitted clock, why the ratio is what it is.

    ``prediction``: a ``helpers.batching.prediction.prediction_record`` for ``lab``. ``clocks``: the
    clock of each setting where they differ (a GPU: each server's own, with the front end), else ``fitted`` for both."""
    low, high = prediction["max_num_seqs"][0], prediction["max_num_seqs"][-1]
    clock_low, clock_high = (clocks or {}).get(low, fitted), (clocks or {}).get(high, fitted)
    tok_s_low, tok_s_high = prediction["predicted_output_tok_s"][0], prediction["predicted_output_tok_s"][-1]
    ratio = tok_s_high / tok_s_low
    running = min(high, len(lab))
    cap = running / low  # the lab's requests let at most `running` run at once
    head = (f"{tok_s_low:,.0f} output tok/s at `--max-num-seqs {low}` and {tok_s_high:,.0f} at {high}: **{ratio:.2f}x** "
            f"for {high / low:g}x the slots. The lab's {len(lab)} requests let at most {running} run at once, so "
            f"{cap:.2f}x is the most more slots could give: {ratio / cap:.0%} of it (the reference defaults predict "
            f"{reference_ratio:.2f}x). ")
    front = _front_end_sentence(clock_low, clock_high, low, high, running)
    free = fitted.decode_seq_s <= 0  # the fit pins a negative decode slope at 0: no per-sequence cost measured
    if ratio >= 0.9 * cap:
        adds = ("the fit measured no cost per sequence" if free else
                f"the {duration(fitted.overhead_s)} fixed cost of a step dominates the "
                f"{duration(fitted.decode_seq_s)} each sequence adds")
        why = f"Close to that cap: on this hardware {adds}, so a bigger batch is nearly free. "
    else:
        step_low, step_high = clock_low.step_seconds(0, low), clock_high.step_seconds(0, running)
        streaming = (f"the front end, at {duration(clock_high.stream_token_s)} a token, caps streaming at "
                     f"{1 / clock_high.stream_token_s:,.0f} tok/s" if clock_high.stream_token_s > fitted.decode_seq_s
                     else "")
        steps = (f"decoding {low} requests takes {duration(step_low)} a step ({low / step_low:,.0f} tok/s) and "
                 f"{running} take {duration(step_high)} ({running / step_high:,.0f} tok/s)")
        prompt_tokens = sum(r.prompt_len for r in lab)
        output_tokens = sum(r.output_len for r in lab)
        prefill = (f"the lab's {prompt_tokens:,} prompt tokens (their text: the simulation leaves out the chat "
                   f"template) cost about {duration(prompt_tokens * fitted.prefill_token_s)} of prefill at either "
                   f"setting, against a predicted {duration(output_tokens / tok_s_high)} for the whole run at {high}. ")
        if free:
            capped = f"; only {streaming}" if streaming else ""
            why = (f"Below the cap, though the fit measured no cost per sequence (it pins a negative decode slope "
                   f"at 0): {steps}, so the engine's decoding alone has no ceiling{capped}. The gap comes from "
                   f"{'the front end, ' if streaming else ''}prefill and the {duration(fitted.overhead_s)} overhead "
                   f"of the steps that do not decode a full batch: {prefill}")
        else:
            ceiling = f"{1 / fitted.decode_seq_s:,.0f} tok/s" + (f" in the engine, and {streaming}" if streaming else "")
            why = (f"Below the cap, for two reasons the fit makes concrete. D{steps[1:]}: more slots spread the "
                   f"{duration(fitted.overhead_s)} overhead thinner, but each sequence still costs "
                   f"{duration(fitted.decode_seq_s)}, so decoding never beats {ceiling}. And {prefill}")
    return head + why + front + "The lab measures both settings: compare."


def _front_end_sentence(clock_low: StepTimeModel, clock_high: StepTimeModel, low: int, high: int,
                        running: int) -> str:
    """Where the prediction used each server's own clock, or the front end as a stage: what that did; else ''.

    >>> from dataclasses import replace
    >>> eng = StepTimeModel(overhead_s=0.0025, prefill_token_s=0.0, decode_seq_s=0.00001)
    >>> print(_front_end_sentence(replace(eng, overhead_s=0.0018), replace(eng, stream_token_s=0.00007,
    ...                           admit_request_s=0.002), 8, 64, 50))
    Each setting has its own server's clock: a step of 8 costs 1.88 ms on the 8-slot server, 2.58 ms on the 64-slot one. At 50 the front end is the slower stage: streaming a step's 50 tokens takes 3.50 ms of its CPU time, the engine's step 3.00 ms; and admitting the 50 requests one after another takes 100 ms before the last reaches the engine. 
    """
    parts = []
    if (clock_low.overhead_s, clock_low.decode_seq_s) != (clock_high.overhead_s, clock_high.decode_seq_s):
        parts.append(f"Each setting has its own server's clock: a step of {low} costs "
                     f"{duration(clock_low.step_seconds(0, low))} on the {low}-slot server, "
                     f"{duration(clock_high.step_seconds(0, low))} on the {high}-slot one.")
    if clock_high.stream_token_s or clock_high.admit_request_s:
        engine = clock_high.engine_seconds(0, running)
        stream = clock_high.stream_token_s * running
        stage = "the front end is the slower stage" if stream > engine else "the engine is still the slower stage"
        parts.append(f"At {running} {stage}: streaming a step's {running} tokens takes {duration(stream)} of its CPU "
                     f"time, the engine's step {duration(engine)}; and admitting the {running} requests one after "
                     f"another takes {duration(running * clock_high.admit_request_s)} before the last reaches the engine.")
    return " ".join(parts) + (" " if parts else "")


def summarize_batching_run(sim_rows: Mapping[str, tuple[BatchingSummary, BatchingSummary]], *, live: Any,
                           records: Sequence[RequestRecord], max_num_seqs: int, kv_gib: float,
                           fitted: StepTimeModel, reference: StepTimeModel, batch_sizes: Sequence[int],
                           replay_error: float | None, prediction: Mapping[str, Any], reference_ratio: float,
                           lab: Sequence[BatchRequest], clocks: Mapping[int, StepTimeModel] | None = None) -> str:
    """The notebook's summary as Markdown bullets: simulation, live engine, fit, prediction."""
    parts = {
        "Simulation": explain_simulation(sim_rows),
        "Live engine": explain_live_engine(live, records, max_num_seqs, kv_gib),
        "Fit": explain_fit(fitted, reference, batch_sizes, replay_error, _prefill_pair_tokens(prediction)),
        "Prediction for the lab": explain_prediction(fitted, prediction, reference_ratio, lab, clocks),
    }
    return "\n".join(f"- **{name}.** {text}" for name, text in parts.items())


def _prefill_pair_tokens(prediction: Mapping[str, Any]) -> int | None:
    """The prompt tokens of the prefill row the prediction's (high setting's) clock was fitted to: the last
    such row, since on a GPU the low setting's server is timed first and its rows come first."""
    rows = [row["num_prefill_tokens"] for row in prediction.get("measurements", ())
            if row["num_prefill_tokens"] and not row["num_decode_seqs"]]
    return rows[-1] if rows else None


def describe_fit_source(device: str, batch_sizes: Sequence[int], *, prompt_len: int, output_len: int,
                        prefill_lens: tuple[int, int], repeats: int, max_num_seqs: int,
                        low_batch_sizes: Sequence[int] = (), front_end: Any = None, long_group: int = 1) -> str:
    """How the step-time model was measured, saved with the prediction (``fitted_from``).

    >>> describe_fit_source("cuda", [1, 8, 32, 64], prompt_len=256, output_len=256, prefill_lens=(32, 512),
    ...                     repeats=3, max_num_seqs=64)
    'notebook 04 on cuda: decode batches of 1, 8, 32, 64 requests (256-token prompts, 256 output tokens) and the prefill of a 512- against a 32-token prompt, median of 3 runs or more each, max_num_seqs=64'
    >>> from helpers.batching.front_end import FrontEndCost
    >>> describe_fit_source("cuda", [1, 8, 32, 64], prompt_len=256, output_len=256, prefill_lens=(256, 1024),
    ...                     repeats=3, max_num_seqs=64, low_batch_sizes=(1, 4, 8),
    ...                     front_end=FrontEndCost(0.002, 5e-05, 0.001, 2e-05, 50, 128))[-146:]
    '; the low setting from batches of 1, 4, 8 on a server at max_num_seqs=8; the front end 50.0 us a token, 2.000 ms a request (CPU time, 50 requests)'
    >>> describe_fit_source("cuda", [1, 64], prompt_len=256, output_len=256, prefill_lens=(256, 1024), repeats=3,
    ...                     max_num_seqs=64, long_group=8)[97:177]
    'the prefill of 8 x 1024-token prompts at once against a 256-token prompt, median'
    """
    short, long = prefill_lens
    prefill = (f"the prefill of {long_group} x {long}-token prompts at once against a {short}-token prompt"
               if long_group > 1 else f"the prefill of a {long}- against a {short}-token prompt")
    text = (f"notebook 04 on {device}: decode batches of {', '.join(map(str, batch_sizes))} requests "
            f"({prompt_len}-token prompts, {output_len} output tokens) and {prefill}, median of {repeats} runs or "
            f"more each, max_num_seqs={max_num_seqs}")
    if low_batch_sizes:
        text += (f"; the low setting from batches of {', '.join(map(str, low_batch_sizes))} on a server at "
                 f"max_num_seqs={max(low_batch_sizes)}")
    if front_end is not None:
        text += (f"; the front end {1e6 * front_end.stream_token_s:.1f} us a token, "
                 f"{1000 * front_end.admit_request_s:.3f} ms a request (CPU time, {front_end.num_requests} requests)")
    return text
