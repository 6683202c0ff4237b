"""Pictures of notebook 04's live measurements: a replayed burst, request by request, and the fit.

`plot_request_timeline` draws the records `helpers.batching.measure.send_trace` returns (the
load tester's `RequestRecord`s); `plot_fit_and_prediction` draws fitted step-time models
against the measured decode speeds, and what each predicts for the lab
(`helpers.batching.predict`). Both return a matplotlib `Figure`.

Taught in `notebooks/04_continuous_batching.ipynb`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from helpers.batching.measure_stats import finish_moments
from helpers.batching.predict import predict_throughput
from helpers.batching.step_time import StepMeasurement, StepTimeModel
from helpers.batching.trace import BatchRequest, lab_trace
from helpers.load.client import RequestRecord
from helpers.load.summary import describe_failures


def plot_request_timeline(records: Sequence[RequestRecord], trace: Sequence[BatchRequest] | None = None,
                          title: str | None = None) -> Figure:
    """One lane per request, in the order sent: waiting for its first token (light), then
    generating (dark), on the client's clock. Failed requests are drawn in red.

    Lanes are labelled with the trace's request ids when `trace` (the trace `send_trace`
    replayed, so record i is `trace[i]`) is given, else with the records' indexes.

    The default title counts how many distinct moments requests finished at (finishes
    within 50 ms of each other count as one): with continuous batching they leave one at a
    time, not batch by batch. Failed requests are counted there too, with their errors.

    >>> r = [RequestRecord(0, ok=True, output_tokens=3, ttft_s=0.5, e2e_s=1.0),
    ...      RequestRecord(1, ok=True, output_tokens=5, ttft_s=0.5, e2e_s=2.0)]
    >>> plot_request_timeline(r).axes[0].get_xlabel()
    'time since the burst was sent (s)'
    """
    labels = [str(r.index) if trace is None else trace[r.index].request_id for r in records]
    fig = Figure(figsize=(10, 0.28 * len(records) + 1.6), layout="constrained")
    ax = fig.subplots()
    for lane, r in enumerate(records):
        if r.first_token_s is None or r.last_token_s is None:
            ax.broken_barh([(r.send_s, 0.05)], (lane - 0.4, 0.8), facecolors="tab:red")
            continue
        ax.broken_barh([(r.send_s, r.first_token_s - r.send_s)], (lane - 0.4, 0.8), facecolors="0.8")
        ax.broken_barh([(r.first_token_s, r.last_token_s - r.first_token_s)], (lane - 0.4, 0.8),
                       facecolors="tab:blue")
        ax.text(r.last_token_s, lane, f" {r.output_tokens}", va="center", fontsize=7)
    ax.set_yticks(range(len(records)), labels, fontsize=7)
    ax.set_ylim(len(records) - 0.5, -0.5)
    ax.set_xlabel("time since the burst was sent (s)")
    ax.set_ylabel("request")
    ax.legend(handles=[Patch(facecolor="0.8", label="sent, no token yet (queued or prefilling)"),
                       Patch(facecolor="tab:blue", label="generating (label: output tokens)")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if title is None:
        moments = finish_moments(records)
        finished = sum(r.ok and r.last_token_s is not None for r in records)
        who = f"{len(records)} requests" if finished == len(records) else f"{finished} of {len(records)} requests"
        title = (f"{who} finished at {len(moments)} distinct moments "
                 f"between {min(moments):.1f} s and {max(moments):.1f} s" if moments else "no request finished")
        failures = describe_failures(records)
        if failures:
            title += "\n" + (failures if len(failures) <= 150 else failures[:149] + "…")
    ax.set_title(title, fontsize=11)
    return fig


def plot_fit_and_prediction(
    models: dict[str, StepTimeModel],
    measurements: Sequence[StepMeasurement] = (),
    settings: Sequence[int] = (8, 64),
    trace: Sequence[BatchRequest] | None = None,
    clocks: Mapping[str, Mapping[int, StepTimeModel]] | None = None,
) -> Figure:
    """Left: decode tok/s against batch size for each model, with the measured decode points
    and each model's ceiling (1 / decode_seq_s). Right: each model's predicted output tok/s
    for `trace` (default: the lab's) at each max_num_seqs. The title states the first model's
    predicted ratio.

    `clocks`: by model name, the clock that predicts each setting where it is not the model
    itself (on a GPU each server's own, with the front end, as the saved prediction has them);
    the left panel still draws the model, the engine's clock the measured points were fitted to.

    >>> fig = plot_fit_and_prediction({"defaults": StepTimeModel()})
    >>> fig.get_suptitle()
    'defaults: max_num_seqs=64 predicted at 160 output tok/s, 1.60x the 100 tok/s of max_num_seqs=8'
    >>> plot_fit_and_prediction({"defaults": StepTimeModel()}, trace=lab_trace(output_len=32)).get_suptitle()
    'defaults: max_num_seqs=64 predicted at 117 output tok/s, 1.43x the 82 tok/s of max_num_seqs=8'
    """
    trace = list(trace) if trace is not None else lab_trace()
    clocks = clocks or {}
    fig = Figure(figsize=(12, 4.6), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1.3, 1])
    sizes = np.arange(1, max(settings) + 1)
    colors = ["tab:blue", "tab:gray", "tab:orange", "tab:green"]
    for (name, model), color in zip(models.items(), colors):
        left.plot(sizes, [model.decode_tok_s(int(b)) for b in sizes], color=color, label=f"{name}: model")
        ceiling = 1 / model.decode_seq_s if model.decode_seq_s > 0 else None
        if ceiling is not None:
            left.axhline(ceiling, color=color, linestyle=":", linewidth=1,
                         label=f"{name}: ceiling 1/decode_seq_s = {ceiling:.0f} tok/s")
    decodes = [m for m in measurements if m.num_prefill_tokens == 0 and m.num_steps == 1]
    if decodes:
        left.plot([m.num_decode_seqs for m in decodes], [m.num_decode_seqs / m.seconds for m in decodes], "o",
                  color="black", label="measured (decode batches)")
    for i, n in enumerate(settings):
        left.axvline(n, color="0.7", linewidth=0.8, label="the lab's max_num_seqs settings" if i == 0 else None)
    left.set_xlabel("requests decoding together (batch size)")
    left.set_ylabel("output tokens/s while decoding")
    left.set_title("Decode speed grows with the batch, towards a ceiling", fontsize=10)
    left.set_ylim(bottom=0)
    left.legend(fontsize=7, loc="lower right")
    predictions = {name: [predict_throughput(clocks.get(name, {}).get(n, m), trace, n) for n in settings]
                   for name, m in models.items()}
    width = 0.8 / len(models)
    for i, ((name, tok_s), color) in enumerate(zip(predictions.items(), colors)):
        xs = [k + (i - (len(models) - 1) / 2) * width for k in range(len(settings))]
        bars = right.bar(xs, tok_s, width, color=color, label=f"{name} ({tok_s[-1] / tok_s[0]:.2f}x)")
        right.bar_label(bars, fmt="%.0f", fontsize=8)
    right.set_xticks(range(len(settings)), [f"max_num_seqs={n}" for n in settings])
    right.set_ylabel("predicted output tokens/s")
    right.set_title(f"The lab's load ({len(trace)} requests at once), simulated", fontsize=10)
    right.legend(fontsize=8, title=f"ratio {settings[-1]} vs {settings[0]}", title_fontsize=8)
    name, tok_s = next(iter(predictions.items()))
    fig.suptitle(f"{name}: max_num_seqs={settings[-1]} predicted at {tok_s[-1]:.0f} output tok/s, "
                 f"{tok_s[-1] / tok_s[0]:.2f}x the {tok_s[0]:.0f} tok/s of max_num_seqs={settings[0]}", fontsize=11)
    return fig
