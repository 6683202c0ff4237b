"""Pictures of the KV pool: one frame, two schemes side by side, memory over time, an animation.

Taught in the PagedAttention notebook. Every drawing is a pure function of `Frame`s from
`helpers.paged.sim` onto a matplotlib Axes or Figure; `animate` is a thin ipywidgets
shell that maps a slider's step to `side_by_side` and shows the result as a PNG in an
`ipywidgets.Image`, so it works in any front end that renders widgets (no
`%matplotlib widget` needed). The same functions make the static figures the notebook
shows for readers whose viewer does not run widgets.

How the pool is drawn: the whole pool is a grid of token slots, `row_slots` per row.
A request's colour marks its slots: solid where a slot holds a token, pale where it is
reserved but empty. Paged blocks have black borders; shared blocks are dark gold with
their reference count; cached blocks are grey and hatched; free slots are white; in the
contiguous pool, free holes too short for a new max_model_len request are hatched red.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence

import ipywidgets as widgets
import matplotlib
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from helpers.paged.cache import BlockStatus, PoolCell
from helpers.paged.sim import Frame, RunSummary, compare, summarize
from helpers.paged.trace import TRACE_KINDS, KVRequest, make_trace

# tab20's strong hues first, then the pale ones; its greys (14, 15) are left for cached blocks
_PALETTE = [matplotlib.colormaps["tab20"](i) for i in (*range(0, 20, 2), *range(1, 20, 2)) if i not in (14, 15)]
_SHARED = "#b8860b"  # dark gold: a block in several block tables
_CACHED = "#bdbdbd"
_FRAGMENT = "#d62728"
_SCHEME_COLOR = {"contiguous": "tab:red", "paged": "tab:blue", "paged + prefix caching": "tab:green"}


def request_color(request_id: str) -> tuple[float, float, float, float]:
    """A stable colour per request: its number picks one of 18 hues (r00 -> first hue).

    >>> request_color("r03") == request_color("r21")  # 18 hues, so they repeat
    True
    """
    digits = "".join(ch for ch in request_id if ch.isdigit())
    index = int(digits) if digits else sum(map(ord, request_id))
    return _PALETTE[index % len(_PALETTE)]


def default_row_slots(capacity_slots: int, block_size: int = 16) -> int:
    """Slots per drawn row: about sqrt(capacity / 16) rows, each a whole number of blocks.

    >>> default_row_slots(1024, 16)  # 8 rows of 8 blocks
    128
    """
    num_rows = max(1, round(math.sqrt(capacity_slots / 16)))
    return block_size * math.ceil(capacity_slots / num_rows / block_size)


def _segments(first: int, length: int, row_slots: int):
    """Split slots first .. first+length-1 at row ends: (row, column, width) pieces."""
    while length > 0:
        row, col = divmod(first, row_slots)
        width = min(length, row_slots - col)
        yield row, col, width
        first, length = first + width, length - width


def _draw_cell(ax: Axes, cell: PoolCell, frame: Frame, row_slots: int, row_h: float) -> None:
    """One block (paged) or run (contiguous): its face, the part holding tokens, outline, label."""
    pieces = list(_segments(cell.first_slot, cell.num_slots, row_slots))

    def boxes(parts, **style) -> None:
        for row, col, width in parts:
            ax.add_patch(Rectangle((col, -(row + 1) * row_h), width, row_h * 0.9, **style))

    if cell.status is BlockStatus.FREE:
        fragment = frame.max_model_len is not None and cell.num_slots < frame.max_model_len
        edge, hatch = (_FRAGMENT, "\\\\\\") if fragment else ("0.75", None)
        boxes(pieces, facecolor="white", edgecolor=edge, hatch=hatch, linewidth=0.5)
        return
    if cell.status is BlockStatus.CACHED:
        boxes(pieces, facecolor=_CACHED, edgecolor="0.5", hatch="///", linewidth=0.6)
        return
    shared = len(cell.owners) > 1  # only full blocks are shared, so all of it holds tokens
    color = _SHARED if shared else request_color(cell.owners[0])
    boxes(pieces, facecolor=to_rgba(color, 0.3), edgecolor="none")  # reserved
    boxes(_segments(cell.first_slot, cell.num_tokens, row_slots), facecolor=color, edgecolor="none")  # holds tokens
    boxes(pieces, facecolor="none", edgecolor="black", linewidth=0.6)
    row, col, width = pieces[0]
    if width >= 6:  # slots; narrower pieces have no room for a label
        label = f"×{len(cell.owners)}" if shared else cell.owners[0]
        ax.text(col + width / 2, -(row + 0.55) * row_h, label, ha="center", va="center", fontsize=6,
                color="white" if shared else "black")


def _table_lines(frame: Frame, max_rows: int) -> list[str]:
    """The block tables (or reserved runs) as text, one request per line."""
    lines = []
    ids = list(frame.block_tables)
    for rid in ids[:max_rows]:
        table, n = frame.block_tables[rid], frame.num_tokens[rid]
        done = " done" if rid in frame.finished_now else ""
        if frame.block_size == 1:  # contiguous: the table is one run of slots
            lines.append(f"{rid} slots {table[0]}-{table[-1]}: {n}/{len(table)} tok{done}")
        else:
            shown = " ".join(map(str, table[:8])) + (" …" if len(table) > 8 else "")
            lines.append(f"{rid} [{shown}] {n} tok{done}")
    if len(ids) > max_rows:
        lines.append(f"… and {len(ids) - max_rows} more")
    return lines


def _counter_lines(frame: Frame) -> list[str]:
    u = frame.usage
    if frame.block_size == 1:
        lines = [
            f"reserved {u.reserved_slots} of {u.capacity_slots} slots",
            f"  hold tokens  {u.token_slots}",
            f"  reserved, empty {u.reserved_unused_slots}",
            f"free {u.free_slots}, in short holes {u.external_fragmentation_slots}",
        ]
    else:
        bs = frame.block_size
        lines = [
            f"blocks: {u.reserved_slots // bs} used, {u.free_slots // bs} free, {u.cached_blocks} cached",
            f"  hold tokens  {u.token_slots} slots",
            f"  partial-block waste {u.internal_waste_slots} slots",
            f"shared blocks {u.shared_blocks}; tokens seen by requests {u.logical_tokens}",
        ]
    waiting = " ".join(frame.waiting[:6]) + (" …" if frame.num_waiting > 6 else "")
    lines.append(f"waiting {frame.num_waiting}: {waiting}" if frame.waiting else "waiting 0")
    lines.append(f"finished {frame.num_finished}, preemptions {frame.num_preemptions}")
    return lines


def _legend_handles(frame: Frame) -> list[Patch]:
    handles = [
        Patch(facecolor=request_color("r00"), label="slot holds a token"),
        Patch(facecolor=to_rgba(request_color("r00"), 0.3), label="reserved, no token yet"),
    ]
    if frame.block_size == 1:
        handles.append(Patch(facecolor="white", edgecolor=_FRAGMENT, hatch="\\\\\\", label="hole < max_model_len"))
    else:
        handles.append(Patch(facecolor=_SHARED, label="shared block (×refs)"))
        handles.append(Patch(facecolor=_CACHED, edgecolor="0.5", hatch="///", label="cached, evictable"))
    handles.append(Patch(facecolor="white", edgecolor="0.6", label="free"))
    return handles


def draw_frame(
    target: Axes | Figure,
    frame: Frame,
    row_slots: int | None = None,
    show_tables: bool = True,
    max_table_rows: int = 12,
    legend: bool = True,
    title: str | None = None,
) -> Axes:
    """Draw one `Frame`: the pool as a slot grid, and (right) block tables and counters.

    `target` is an Axes to draw into, or a Figure (cleared, one Axes added). `row_slots`
    sets slots per drawn row; give both schemes the same value to compare them. The
    default title states the step and the share of reserved slots that hold tokens.
    Leaves out per-layer detail: one slot stands for one token's keys and values.

    Example: a paged frame with one request of 37 tokens at block size 16 shows three
    bordered blocks, two solid and one 5/16 solid, and the line "r00 [0 1 2] 37 tok".
    """
    if isinstance(target, Figure):
        target.clear()
        ax = target.add_subplot()
    else:
        ax = target
    capacity = frame.usage.capacity_slots
    row_slots = row_slots or default_row_slots(capacity, max(frame.block_size, 16))
    num_rows = math.ceil(capacity / row_slots)
    row_h = row_slots / max(num_rows, 4) * 0.75  # rows a bit flatter than square
    for cell in frame.pool:
        _draw_cell(ax, cell, frame, row_slots, row_h)

    width = row_slots * (1.9 if show_tables else 1.0)
    ax.set_xlim(0, width)
    ax.set_ylim(-num_rows * row_h - row_h * 0.2, row_h * 0.1)
    ax.set_xticks([0, row_slots // 2, row_slots])
    ax.set_yticks([-(r + 0.55) * row_h for r in range(num_rows)][:: max(1, num_rows // 8)])
    ax.set_yticklabels([str(r * row_slots) for r in range(num_rows)][:: max(1, num_rows // 8)], fontsize=7)
    ax.tick_params(axis="x", labelsize=7)
    xlabel = "slot within row (1 slot = 1 token's keys and values)" if show_tables else "slot in row (tokens)"
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("first slot of row", fontsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    u = frame.usage
    ax.set_title(
        title
        or f"{frame.scheme}, step {frame.step}: {frame.num_running} running, "
        f"{u.utilization:.0%} of {u.reserved_slots} reserved slots hold tokens",
        fontsize=9,
    )
    if show_tables:
        header = "block tables" if frame.block_size > 1 else "reserved runs"
        text = "\n".join([header, *_table_lines(frame, max_table_rows), "", *_counter_lines(frame)])
        ax.text(row_slots * 1.04, row_h * 0.05, text, va="top", ha="left", fontsize=6.5, family="monospace")
    if legend:
        ax.legend(handles=_legend_handles(frame), loc="lower right", fontsize=6, frameon=False)
    return ax


def _at(frames: Sequence[Frame], index: int) -> Frame:
    """Frame `index`, or the last one when this run already finished."""
    return frames[min(index, len(frames) - 1)]


def side_by_side(
    frames_a: Sequence[Frame],
    frames_b: Sequence[Frame],
    index: int,
    fig: Figure | None = None,
    max_table_rows: int = 10,
) -> Figure:
    """Two runs of one trace (say contiguous and paged) at the same step, one above the other.

    A run that finished earlier shows its last frame. The title compares how many
    requests each scheme runs at this step. Pass `fig` to redraw into an existing Figure.

    Example: `side_by_side(*compare(random_trace()), index=40)`.
    """
    fig = fig or Figure(figsize=(11, 8.5), layout="constrained")
    fig.clear()
    a, b = _at(frames_a, index), _at(frames_b, index)
    capacity = max(a.usage.capacity_slots, b.usage.capacity_slots)
    row_slots = default_row_slots(capacity, max(a.block_size, b.block_size, 16))
    ax_a, ax_b = fig.subplots(2, 1)
    draw_frame(ax_a, a, row_slots=row_slots, max_table_rows=max_table_rows)
    draw_frame(ax_b, b, row_slots=row_slots, max_table_rows=max_table_rows)
    status = f"{_status(frames_a, index)}; {_status(frames_b, index)}"
    fig.suptitle(f"Step {index} in the same {capacity}-slot pool: {status}", fontsize=10)
    return fig


def _status(frames: Sequence[Frame], index: int) -> str:
    if index >= len(frames):
        return f"{frames[-1].scheme} finished every request by step {frames[-1].step}"
    f = frames[index]
    return f"{f.scheme} runs {f.num_running} requests ({f.num_waiting} waiting)"


def _finding(summaries: Sequence[RunSummary]) -> str:
    """e.g. 'Paged: 90% of reserved KV slots hold tokens; contiguous: 26%', from the numbers."""
    first, *rest = summaries
    name = first.scheme[0].upper() + first.scheme[1:]
    head = f"{name}: {first.mean_utilization:.0%} of reserved KV slots hold tokens (time-averaged)"
    return "; ".join([head, *(f"{s.scheme}: {s.mean_utilization:.0%}" for s in rest)])


def plot_memory_over_time(*runs: Sequence[Frame], fig: Figure | None = None) -> Figure:
    """KV slots reserved vs holding tokens (top) and requests running (bottom), per step, per run.

    Typical call: `plot_memory_over_time(frames_naive, frames_paged)`. The title states
    each run's time-averaged share of reserved slots that hold tokens (`summarize`), the
    PagedAttention paper's measure; the subtitle compares concurrency.
    Leaves out time per step: the x axis counts decode steps, not seconds.
    """
    if not runs:
        raise ValueError("give at least one run of frames")
    fig = fig or Figure(figsize=(10, 6.5), layout="constrained")
    fig.clear()
    ax_mem, ax_req = fig.subplots(2, 1)
    summaries = [summarize(frames) for frames in runs]
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
    ax_req.set_xlabel("decode step")
    ax_req.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax_mem.set_title(_finding(summaries), fontsize=11)
    concurrency = [
        f"{s.scheme}: {s.mean_running:.1f} running on average, done in {s.num_steps} steps"
        for s in summaries
    ]
    ax_req.set_title("; ".join(concurrency), fontsize=9)
    return fig


def small_multiples(frames: Sequence[Frame], steps: Sequence[int] | None = None, ncols: int = 4) -> Figure:
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
        f = _at(frames, step)
        draw_frame(ax, f, show_tables=False, legend=False,
                   title=f"step {f.step}: {f.num_running} running, {f.usage.utilization:.0%} hold tokens")
    for ax in axes[len(steps) :]:
        ax.set_visible(False)
    s = summarize(frames)
    fig.suptitle(
        f"{s.scheme}: at peak {s.peak_reserved_slots} of {s.capacity_slots} slots reserved; "
        f"{s.mean_utilization:.0%} of reserved slots hold tokens over the run",
        fontsize=10,
    )
    return fig


def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes (what the animation's Image widget shows)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


TraceFactory = Callable[[str, int, int], Sequence[KVRequest]]  # (kind, seed, max_model_len) -> trace


def _narrow() -> widgets.Layout:
    return widgets.Layout(width="160px")


def _dropdown(description: str, choices: Sequence[int], value: int) -> widgets.Dropdown:
    """A dropdown of `choices`, plus `value` if the caller picked something else."""
    return widgets.Dropdown(options=sorted({*choices, value}), value=value, description=description)


class PagedKVPlayer(widgets.VBox):
    """The widget `animate` returns. Its parts are attributes, so a test (or a curious
    learner) can drive it: `slider`, `play`, `step_back`, `step_forward`, `speed`, `image`,
    and `runs`, the frames on show. See `animate` for what it does."""

    def __init__(
        self,
        source: Sequence[Frame] | tuple[Sequence[Frame], Sequence[Frame]] | TraceFactory | None,
        *,
        trace_kind: str,
        seed: int,
        block_size: int,
        pool_slots: int,
        max_model_len: int,
        enable_prefix_caching: bool,
        interval_ms: int,
        dpi: int,
    ) -> None:
        self._figure = Figure(figsize=(11, 8.5), layout="constrained")
        self._dpi = dpi
        self.runs: tuple[list[Frame], ...] = ()
        self.play = widgets.Play(min=0, max=0, interval=interval_ms, description="play")
        self.slider = widgets.IntSlider(min=0, max=0, description="step", continuous_update=True)
        widgets.jslink((self.play, "value"), (self.slider, "value"))  # Play drives the slider in the browser
        self.step_back = widgets.Button(description="◀ step", layout=widgets.Layout(width="80px"))
        self.step_forward = widgets.Button(description="step ▶", layout=widgets.Layout(width="80px"))
        self.step_back.on_click(lambda _: self._move(-1))
        self.step_forward.on_click(lambda _: self._move(+1))
        speeds = [(f"{x}×", round(interval_ms / x)) for x in (0.5, 1, 2, 4)]  # label, ms per step
        self.speed = widgets.Dropdown(options=speeds, value=interval_ms, description="speed", layout=_narrow())
        self.speed.observe(lambda change: setattr(self.play, "interval", change["new"]), "value")
        self.image = widgets.Image(format="png")
        self.message = widgets.HTML()
        self.slider.observe(lambda _: self._redraw(), "value")
        rows: list[widgets.Widget] = [
            widgets.HBox([self.play, self.step_back, self.step_forward, self.slider, self.speed])
        ]

        if source is None or callable(source):
            self._factory: TraceFactory = source or (lambda kind, s, mml: make_trace(kind, seed=s, max_model_len=mml))
            self.trace_kind = widgets.Dropdown(options=list(TRACE_KINDS), value=trace_kind, description="trace")
            self.seed = widgets.BoundedIntText(value=seed, min=0, max=10_000, description="seed", layout=_narrow())
            self.block_size = _dropdown("block size", [8, 16, 32], block_size)
            self.pool_slots = _dropdown("pool slots", [512, 1024, 2048], pool_slots)
            self.max_model_len = _dropdown("max len", [128, 256, 512], max_model_len)
            self.prefix_caching = widgets.Checkbox(value=enable_prefix_caching, description="prefix caching")
            knobs = [self.trace_kind, self.seed, self.block_size]
            knobs += [self.pool_slots, self.max_model_len, self.prefix_caching]
            for knob in knobs:
                knob.observe(lambda _: self.rerun(), "value")
            rows.append(widgets.HBox(knobs[:3]))
            rows.append(widgets.HBox(knobs[3:]))
            super().__init__([*rows, self.message, self.image])
            self.rerun()
        else:
            runs = (source,) if isinstance(source[0], Frame) else tuple(source)
            super().__init__([*rows, self.message, self.image])
            self.show(*runs)

    def rerun(self) -> None:
        """Simulate the trace the controls describe, with both schemes, and show step 0."""
        trace = self._factory(self.trace_kind.value, self.seed.value, self.max_model_len.value)
        try:
            runs = compare(
                trace,
                num_blocks=self.pool_slots.value // self.block_size.value,
                block_size=self.block_size.value,
                max_model_len=self.max_model_len.value,
                enable_prefix_caching=self.prefix_caching.value,
            )
        except ValueError as error:  # e.g. a request longer than the pool: say so, keep the last run
            self.message.value = f"<b>Cannot simulate:</b> {error}"
            return
        self.message.value = ""
        self.show(*runs)

    def show(self, *runs: Sequence[Frame]) -> None:
        """Put these runs on the player (one, or two side by side) and draw step 0."""
        self.runs = tuple(list(r) for r in runs)
        last = max(len(r) for r in self.runs) - 1
        self.play.value = self.slider.value = 0
        self.play.max = self.slider.max = last
        self._redraw()

    def _move(self, delta: int) -> None:
        self.slider.value = min(max(self.slider.value + delta, 0), self.slider.max)

    def _redraw(self) -> None:
        if not self.runs:
            return
        index = self.slider.value
        if len(self.runs) == 1:
            draw_frame(self._figure, _at(self.runs[0], index))
        else:
            side_by_side(self.runs[0], self.runs[1], index, fig=self._figure)
        self.image.value = figure_png(self._figure, dpi=self._dpi)


def animate(
    source: Sequence[Frame] | tuple[Sequence[Frame], Sequence[Frame]] | TraceFactory | None = None,
    *,
    trace_kind: str = "random",
    seed: int = 0,
    block_size: int = 16,
    pool_slots: int = 1024,
    max_model_len: int = 256,
    enable_prefix_caching: bool = False,
    interval_ms: int = 400,
    dpi: int = 80,
) -> PagedKVPlayer:
    """An ipywidgets player for a run: Play/pause, a step slider, step buttons, speed.

    `source` is either frames to show (one run, or a (contiguous, paged) pair), or
    nothing / a trace factory `(kind, seed, max_model_len) -> trace`: then the widget
    simulates both schemes with `compare` and also shows controls for trace kind, seed,
    block size, pool size (slots, the same for both schemes), max model length and
    prefix caching; changing one re-runs the simulation. Each step is drawn with
    `side_by_side` (or `draw_frame`) into one Figure, shown as a PNG in an `Image`
    widget. Redrawing needs a live kernel; where widgets don't render, show the static
    figures (`plot_memory_over_time`, `small_multiples`) instead.

    Example: `animate()` in a notebook cell; `animate(compare(trace))` for a fixed run;
    `animate(frames_paged)` for one run.
    """
    return PagedKVPlayer(
        source,
        trace_kind=trace_kind,
        seed=seed,
        block_size=block_size,
        pool_slots=pool_slots,
        max_model_len=max_model_len,
        enable_prefix_caching=enable_prefix_caching,
        interval_ms=interval_ms,
        dpi=dpi,
    )
