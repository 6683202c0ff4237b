"""Static figures of KV-allocator runs: two schemes side by side, memory over time, small multiples.

Taught in the PagedAttention notebook, where they stand in for the animation
(:mod:`helpers.paged.player`) in viewers that do not run widgets. Every figure is a pure
function of the `KVFrame`s of :mod:`helpers.paged.sim`, drawn with
:func:`helpers.paged.draw.draw_kv_frame`; :func:`helpers.drawing.figure_png` turns one into PNG bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from helpers.paged.draw import default_row_slots, draw_kv_frame
from helpers.paged.sim import KVFrame
from helpers.paged.sim_summary import KVRunSummary, summarize_kv_run

_SCHEME_COLOR = {"contiguous": "tab:red", "paged": "tab:blue", "paged + prefix caching": "tab:green"}


def at_step(frames: Sequence[KVFrame], index: int) -> KVFrame:
    """Frame `index` of a run, or its last one when this run already finished."""
    return frames[min(index, len(frames) - 1)]


def side_by_side(
    frames_a: Sequence[KVFrame],
    frames_b: Sequence[KVFrame],
    index: int,
    fig: Figure | None = None,
    max_table_rows: int = 10,
) -> Figure:
    """Two runs of one trace (say contiguous and paged) at the same step, one above the other.

    A run that finished earlier shows its last frame. The title compares how many
    requests each scheme runs at this step. Pass `fig` to redraw into an existing Figure.

    Example: `side_by_side(*compare_allocators(random_trace()), index=40)`.
    """
    fig = fig or Figure(figsize=(11, 8.5), layout="constrained")
    fig.clear()
    a, b = at_step(frames_a, index), at_step(frames_b, index)
    capacity = max(a.usage.capacity_slots, b.usage.capacity_slots)
    row_slots = default_row_slots(capacity, max(a.block_size, b.block_size, 16))
    ax_a, ax_b = fig.subplots(2, 1)
    draw_kv_frame(ax_a, a, row_slots=row_slots, max_table_rows=max_table_rows)
    draw_kv_frame(ax_b, b, row_slots=row_slots, max_table_rows=max_table_rows)
    status = f"{_status(frames_a, index)}; {_status(frames_b, index)}"
    fig.suptitle(f"Step {index} in the same {capacity}-slot pool: {status}", fontsize=10)
    return fig


def _status(frames: Sequence[KVFrame], index: int) -> str:
    if index >= len(frames):
        return f"{frames[-1].scheme} finished every request by step {frames[-1].step}"
    f = frames[index]
    return f"{f.scheme} runs {f.num_running} requests ({f.num_waiting} waiting)"


def _finding(summaries: Sequence[KVRunSummary]) -> str:
    """e.g. 'Paged: 90% of reserved KV slots hold tokens; contiguous: 26%', from the numbers."""
    first, *rest = summaries
    name = first.scheme[0].upper() + first.scheme[1:]
    head = f"{name}: {first.mean_utilization:.0%} of reserved KV slots hold tokens (time-averaged)"
    return "; ".join([head, *(f"{s.scheme}: {s.mean_utilization:.0%}" for s in rest)])


def plot_memory_over_time(*runs: Sequence[KVFrame], fig: Figure | None = None) -> Figure:
    """KV slots reserved vs holding tokens (top) and requests running (bottom), per step, per run.

    Typical call: `plot_memory_over_time(frames_naive, frames_paged)`. The title states
    each run's time-averaged share of reserved slots that hold tokens (`summarize_kv_run`), the
    PagedAttention paper's measure; the subtitle compares concurrency.
    Leaves out time per step: the x axis counts decode steps, not seconds.
    """
    if not runs:
        raise ValueError("give at least one run of frames")
    fig = fig or Figure(figsize=(10, 6.5), layout="constrained")
    fig.clear()
    ax_mem, ax_req = fig.subplots(2, 1)
    summaries = [summarize_kv_run(frames) for frames in runs]
    for frames, s in zip(runs, summaries):
        color = _SCHEME_COLOR.get(s.scheme, None)
        steps = [f.step for f in frames]
        ax_mem.plot(steps, [f.usage.reserved_slots for f in frames], "--", color=color, label=f"{s.scheme}: reserved")
        ax_mem.plot(steps, [f.usage.token_slots for f in frames], "-", color=color, label=f"{s.scheme}: holding tokens")
        ax_req.plot(steps, [f.num_running for f in frames], "-", color=color, label=f"{s.scheme}: running")
        ax_req.plot(steps, [f.num_waiting for f in frames], ":", color=color, label=f"{s.scheme}: waiting")
    ax_mem.axhline(summaries[0].capacity_slots, color="0.5", linewidth=0.8)
    ax_mem.text(0, summaries[0].capacity_slots, " pool capacity", va="bottom", fontsize=8, color="0.4")
    ax_mem.set_ylabel("KV slots (tokens)")
    ax_mem.set_xlabel("decode step")
    ax_mem.set_ylim(0, summaries[0].capacity_slots * 1.12)
    ax_mem.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax_req.set_ylabel("requests")
    ax_req.yaxis.set_major_locator(MaxNLocator(integer=True))  # no half requests
    ax_req.set_xlabel("decode step")
    ax_req.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax_mem.set_title(_finding(summaries), fontsize=11)
    concurrency = [
        f"{s.scheme}: {s.mean_running:.1f} running on average, done in {s.num_steps} steps"
        for s in summaries
    ]
    ax_req.set_title("; ".join(concurrency), fontsize=9)
    return fig


def small_multiples(frames: Sequence[KVFrame], steps: Sequence[int] | None = None, ncols: int = 4) -> Figure:
    """The pool of one run at a few steps (default: at 1/5 .. 4/5 of the run), without the tables.

    The title gives the run's peak reserved slots and its share of them holding tokens.
    Example: `small_multiples(frames_paged, steps=[0, 20, 40, 60])`.
    """
    steps = list(steps) if steps is not None else [round(i * (len(frames) - 1) / 5) for i in range(1, 5)]
    ncols = min(ncols, len(steps))
    nrows = math.ceil(len(steps) / ncols)
    fig = Figure(figsize=(3.2 * ncols, 3.0 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, step in zip(axes, steps):
        f = at_step(frames, step)
        draw_kv_frame(ax, f, show_tables=False, legend=False,
                   title=f"step {f.step}: {f.num_running} running, {f.usage.utilization:.0%} hold tokens")
    for ax in axes[len(steps) :]:
        ax.set_visible(False)
    s = summarize_kv_run(frames)
    fig.suptitle(
        f"{s.scheme}: at peak {s.peak_reserved_slots} of {s.capacity_slots} slots reserved; "
        f"{s.mean_utilization:.0%} of reserved slots hold tokens over the run",
        fontsize=10,
    )
    return fig


