"""Pictures of batching: batch slots over time, static next to continuous.

Pure drawing functions take a `SimResult` (from `helpers.batching.sim`) and a matplotlib
Axes or Figure; `animate_scheduler` is a thin ipywidgets shell that maps a step index to the
same drawing (`draw_scheduler_frame`). `compare_figure` is the static fallback wherever
widgets do not render.

Taught in the continuous-batching notebook.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import ipywidgets as widgets
import matplotlib
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from helpers.batching.sim import simulate_continuous, simulate_static
from helpers.batching.sim_records import BatchingSummary, SimResult, StepRecord
from helpers.batching.step_time import StepTimeModel
from helpers.batching.trace import BATCHING_TRACE_KINDS, make_batching_trace
from helpers.drawing import figure_png

IDLE_COLOR = "0.85"  # light grey, hatched: a slot nobody uses during a step
PREFILL_ALPHA = 0.6  # prefill segments: the request's colour, lighter and dotted
PREFILL_HATCH = "..."
WAIT_EDGE_WIDTH = 1.2  # in its slot but computing nothing: white, outlined in the request's colour
MAX_CACHED_FRAMES = 400  # PNGs kept per run (about 30-100 kB each), so replaying a run does not redraw it
# tab20 with its light/dark pairs split up, so neighbouring requests differ in hue.
_PALETTE = [matplotlib.colormaps["tab20"](i) for i in (*range(0, 20, 2), *range(1, 20, 2))]


def request_colors(result: SimResult) -> dict[str, tuple[float, float, float, float]]:
    """One colour per request, by trace order, so a request has the same colour in every panel."""
    return {r.request_id: _PALETTE[i % len(_PALETTE)] for i, r in enumerate(result.requests)}


def running_counters(steps: Sequence[StepRecord], max_num_seqs: int) -> tuple[int, float, float, float]:
    """(tokens produced, elapsed s, output tok/s, slot utilization 0-1) over `steps` so far.

    Elapsed time runs from 0 (the trace's clock) to the end of the last step.

    >>> from helpers.batching.sim_records import StepRecord
    >>> s = [StepRecord(0, 0.0, 2.0, ("a", None), frozenset(), frozenset({"a"}), 0, 1, 1, 0, None)]
    >>> running_counters(s, max_num_seqs=2)
    (1, 2.0, 0.5, 0.5)
    """
    if not steps:
        return 0, 0.0, 0.0, 0.0
    tokens = sum(s.num_tokens_produced for s in steps)
    elapsed = steps[-1].end_s
    busy = sum(s.duration_s * s.num_busy_slots for s in steps)
    util = busy / (max_num_seqs * sum(s.duration_s for s in steps))
    return tokens, elapsed, tokens / elapsed if elapsed > 0 else 0.0, util


def draw_slots(ax: Axes, result: SimResult, upto_step: int | None = None, xmax_s: float | None = None) -> None:
    """A Gantt chart of batch slots: one lane per slot, time (s) across.

    Each step paints every lane: the colour of the request in that slot (lighter and
    dotted while it is prefilling), white outlined in its colour when it holds the slot but
    computes nothing (a static batch's member waiting for the batch's prefills), or grey
    hatching when the slot is idle. Only computing slots count as utilized. Blank time
    means no step ran (the engine waited for arrivals). Only the first `upto_step` steps
    are drawn (None: all), with running counters of throughput and utilization above the
    plot, so the same function draws an animation frame and the finished picture.
    Leaves out: which tokens each step computed (see `result.steps`).

    >>> from matplotlib.figure import Figure
    >>> from helpers.batching.sim import simulate_static
    >>> from helpers.batching.trace import lab_trace
    >>> ax = Figure().subplots()
    >>> draw_slots(ax, simulate_static(lab_trace(4), 2), upto_step=3)
    >>> ax.get_xlabel(), ax.get_ylabel()
    ('time (s)', 'batch slot')
    """
    steps = result.steps if upto_step is None else result.steps[:upto_step]
    colors = request_colors(result)
    for lane in range(result.max_num_seqs):
        runs = _lane_runs(steps, lane)
        for state in ("decode", "prefill", "wait"):
            mine = [(key[0], t0, t1) for key, t0, t1 in runs if key is not None and key[1] == state]
            if not mine:
                continue
            own = [colors[rid] for rid, _, _ in mine]
            bars = [(t0, t1 - t0) for _, t0, t1 in mine]
            if state == "wait":
                ax.broken_barh(bars, (lane - 0.35, 0.7), facecolors="white", edgecolors=own,
                               linewidth=WAIT_EDGE_WIDTH)
            else:
                faces = [to_rgba(c, PREFILL_ALPHA if state == "prefill" else 1.0) for c in own]
                ax.broken_barh(bars, (lane - 0.4, 0.8), facecolors=faces, edgecolor="white",
                               hatch=PREFILL_HATCH if state == "prefill" else None, linewidth=0.3)
        idle = [(t0, t1 - t0) for key, t0, t1 in runs if key is None]
        if idle:
            ax.broken_barh(idle, (lane - 0.4, 0.8), facecolors=IDLE_COLOR, edgecolor="0.6", hatch="///",
                           linewidth=0.3)
    end = result.steps[-1].end_s if result.steps else 1.0
    ax.set_xlim(0, xmax_s if xmax_s is not None else end)
    ax.set_ylim(result.max_num_seqs - 0.5, -0.5)  # slot 0 on top
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=min(result.max_num_seqs, 10)))
    ax.set_xlabel("time (s)")
    ax.set_ylabel("batch slot")
    ax.set_title(f"{result.policy} batching, max_num_seqs={result.max_num_seqs}", loc="left", fontsize=10)
    tokens, elapsed, tok_s, util = running_counters(steps, result.max_num_seqs)
    ax.text(1.0, 1.01, f"{len(steps)} steps, {tokens} tokens in {elapsed:.1f} s: "
            f"{tok_s:.0f} tok/s, slot utilization {util:.0%}",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=9)


def _lane_runs(steps: Sequence[StepRecord], lane: int) -> list[tuple[tuple[str, str] | None, float, float]]:
    """A lane's steps merged into runs of (occupant, start_s, end_s); occupant is
    (request_id, "prefill" / "decode" / "wait") or None when idle. Merging keeps the drawing fast."""
    runs: list[tuple[tuple[str, str] | None, float, float]] = []
    for s in steps:
        rid = s.slots[lane]
        state = "prefill" if rid in s.prefill_ids else "decode" if rid in s.decode_ids else "wait"
        key = None if rid is None else (rid, state)
        if runs and runs[-1][0] == key and abs(runs[-1][2] - s.start_s) < 1e-9:
            runs[-1] = (key, runs[-1][1], s.end_s)
        else:
            runs.append((key, s.start_s, s.end_s))
    return runs


def slot_legend_handles() -> list[Patch]:
    """Legend entries for `draw_slots` (requests have one colour each, so no per-request legend)."""
    return [
        Patch(facecolor=_PALETTE[0], label="request decoding (one colour each)"),
        Patch(facecolor=to_rgba(_PALETTE[0], PREFILL_ALPHA), edgecolor="white", hatch=PREFILL_HATCH,
              label="request prefilling"),
        Patch(facecolor="white", edgecolor=_PALETTE[0], linewidth=WAIT_EDGE_WIDTH,
              label="in its slot, waiting for a prefill (not computed)"),
        Patch(facecolor=IDLE_COLOR, edgecolor="0.6", hatch="///", label="idle slot"),
    ]


def finding(static: BatchingSummary, continuous: BatchingSummary) -> str:
    """The comparison in one sentence, computed from the numbers.

    >>> from helpers.batching.sim_records import BatchingSummary
    >>> s = BatchingSummary(4, 100, 10, 0, 10.0, 10.0, 0.58, 5.0, 9.0, 1.0, 2.0)
    >>> c = BatchingSummary(4, 100, 6, 0, 6.0, 17.0, 0.93, 3.0, 5.5, 1.0, 1.5)
    >>> finding(s, c)
    'Continuous batching: 1.7x the throughput, 93% slot utilization vs 58%, p95 latency 5.5 s vs 9.0 s'
    """
    ratio = continuous.output_tok_s / static.output_tok_s
    return (
        f"Continuous batching: {ratio:.1f}x the throughput, "
        f"{continuous.slot_utilization:.0%} slot utilization vs {static.slot_utilization:.0%}, "
        f"p95 latency {continuous.e2e_p95_s:.1f} s vs {static.e2e_p95_s:.1f} s"
    )


def draw_summary_bars(ax_throughput: Axes, ax_latency: Axes, results: Sequence[SimResult]) -> None:
    """Bar charts: output tok/s per result, and TTFT / end-to-end latency p50 and p95 (s)."""
    labels = [f"{r.policy}\n(max_num_seqs={r.max_num_seqs})" for r in results]
    colors = ["tab:gray", "tab:blue", "tab:orange", "tab:green"]
    bars = ax_throughput.bar(labels, [r.summary.output_tok_s for r in results], color=colors[: len(results)])
    ax_throughput.bar_label(bars, fmt="%.0f")
    ax_throughput.set_ylabel("output tokens/s")
    ax_throughput.set_title("Throughput (higher is better)", fontsize=10)
    metrics = [("TTFT p50", "ttft_p50_s"), ("TTFT p95", "ttft_p95_s"),
               ("e2e p50", "e2e_p50_s"), ("e2e p95", "e2e_p95_s")]
    width = 0.8 / len(results)
    for i, r in enumerate(results):
        xs = [m + (i - (len(results) - 1) / 2) * width for m in range(len(metrics))]
        ax_latency.bar(xs, [getattr(r.summary, f) for _, f in metrics], width, label=r.policy, color=colors[i])
    ax_latency.set_xticks(range(len(metrics)), [name for name, _ in metrics])
    ax_latency.set_ylabel("seconds after arrival")
    ax_latency.set_title("Latency (lower is better)", fontsize=10)
    ax_latency.legend(fontsize=8)


def compare_figure(static: SimResult, continuous: SimResult) -> Figure:
    """Static and continuous batching on the same trace, one above the other on the same
    time axis, with throughput and latency bars below; the title states the finding.

    >>> from helpers.batching.sim import simulate_static, simulate_continuous
    >>> from helpers.batching.trace import mixed_length_trace
    >>> t = mixed_length_trace(16)
    >>> fig = compare_figure(simulate_static(t, 4), simulate_continuous(t, 4))
    >>> fig.get_suptitle().startswith("Continuous batching: ")
    True
    """
    fig = Figure(figsize=(12, 9), layout="constrained")
    grid = fig.add_gridspec(3, 2, height_ratios=[2, 2, 1.4])
    xmax = max(r.steps[-1].end_s for r in (static, continuous))
    for row, result in enumerate((static, continuous)):
        ax = fig.add_subplot(grid[row, :])
        draw_slots(ax, result, xmax_s=xmax)
    fig.legend(handles=slot_legend_handles(), loc="outside lower center", ncols=4, fontsize=8)
    draw_summary_bars(fig.add_subplot(grid[2, 0]), fig.add_subplot(grid[2, 1]), [static, continuous])
    fig.suptitle(finding(static.summary, continuous.summary), fontsize=12)
    return fig


def draw_scheduler_frame(fig: Figure, static: SimResult, continuous: SimResult, step: int) -> None:
    """One animation frame: both policies' first `step` steps, on one time axis."""
    fig.clear()
    top, bottom = fig.subplots(2, 1, sharex=True)
    xmax = max(r.steps[-1].end_s for r in (static, continuous))
    draw_slots(top, static, step, xmax)
    draw_slots(bottom, continuous, step, xmax)
    top.set_xlabel("")
    fig.legend(handles=slot_legend_handles(), loc="outside lower center", ncols=4, fontsize=8)
    fig.suptitle(f"engine step {step} of {max(len(static.steps), len(continuous.steps))}", fontsize=11)


def animate_scheduler(
    kind: str = "mixed",
    num_requests: int = 24,
    max_num_seqs: int = 8,
    spread: float = 0.5,
    model: StepTimeModel | None = None,
    seed: int = 0,
) -> widgets.VBox:
    """An ipywidgets player: static vs continuous batching, one engine step at a time.

    Play (with its pause button) drives the step slider; the buttons step once; "ms/step"
    sets the speed, never below the slowest frame drawn so far (a faster Play would queue
    frames the kernel draws late, after a pause). Changing the trace kind, max_num_seqs or
    the length spread (on release) re-runs both simulations. Frames are matplotlib PNGs in
    an `ipywidgets.Image`, kept per step, so any front end that renders widgets shows them
    (no ipympl) and a replay costs nothing. Where widgets do not render, show
    `compare_figure` instead. Leaves out memory limits (see `simulate_continuous`).

    >>> box = animate_scheduler(num_requests=8)  # in a notebook, the last line of a cell shows it
    >>> type(box).__name__
    'VBox'
    """
    model = model or StepTimeModel()
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    play = widgets.Play(interval=150, min=0, max=1, description="play")
    slider = widgets.IntSlider(min=0, max=1, description="step", continuous_update=True)
    back = widgets.Button(description="◀ step", layout=widgets.Layout(width="80px"))
    forward = widgets.Button(description="step ▶", layout=widgets.Layout(width="80px"))
    speed = widgets.IntSlider(value=150, min=20, max=1000, step=10, description="ms/step")
    kind_box = widgets.Dropdown(options=BATCHING_TRACE_KINDS, value=kind, description="trace")
    wide = {"description_width": "initial"}  # show the whole label
    # Each value re-runs both simulations: only on release, not for every value dragged over.
    seqs_box = widgets.IntSlider(value=max_num_seqs, min=1, max=64, description="max_num_seqs", style=wide,
                                 continuous_update=False)
    spread_box = widgets.FloatSlider(value=spread, min=0.0, max=1.0, step=0.05, description="length spread",
                                     style=wide, continuous_update=False)
    image = widgets.Image(format="png")
    caption = widgets.HTML()
    widgets.link((play, "value"), (slider, "value"))
    widgets.link((speed, "value"), (play, "interval"))
    state: dict[str, SimResult] = {}
    frames: dict[int, bytes] = {}  # this run's PNGs by step

    def redraw(_change: object = None) -> None:
        step = slider.value
        if step not in frames:
            start = time.perf_counter()
            draw_scheduler_frame(fig, state["static"], state["continuous"], step)
            if len(frames) >= MAX_CACHED_FRAMES:
                frames.pop(next(iter(frames)))
            frames[step] = figure_png(fig)
            floor = 10 * math.ceil((time.perf_counter() - start) * 125)  # ms, 1/4 to spare to send the PNG
            if floor > speed.min:
                speed.max = max(speed.max, floor)
                speed.value = max(speed.value, floor)
                speed.min = floor
        image.value = frames[step]

    def rerun(_change: object = None) -> None:
        trace = make_batching_trace(kind_box.value, num_requests, spread_box.value, seed)
        state["static"] = simulate_static(trace, seqs_box.value, model)
        state["continuous"] = simulate_continuous(trace, seqs_box.value, model)
        frames.clear()
        num_steps = max(len(r.steps) for r in state.values())
        with slider.hold_trait_notifications():
            play.max = slider.max = num_steps
            slider.value = min(slider.value, num_steps)
        caption.value = f"<b>{finding(state['static'].summary, state['continuous'].summary)}</b>"
        redraw()

    back.on_click(lambda _b: setattr(slider, "value", max(slider.min, slider.value - 1)))
    forward.on_click(lambda _b: setattr(slider, "value", min(slider.max, slider.value + 1)))
    slider.observe(redraw, names="value")
    for box in (kind_box, seqs_box, spread_box):
        box.observe(rerun, names="value")
    rerun()
    return widgets.VBox([
        widgets.HBox([play, back, forward, slider, speed]),
        widgets.HBox([kind_box, seqs_box, spread_box]),
        image,
        caption,
    ])
