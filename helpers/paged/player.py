"""The KV-allocator animation: an ipywidgets player over a run's frames (drawing).

Taught in the PagedAttention notebook. :func:`animate_allocator` returns a
:class:`PagedKVPlayer`, a thin ipywidgets shell that maps a slider's step to
:func:`helpers.paged.figures.side_by_side` (or :func:`helpers.paged.draw.draw_kv_frame`) and
shows the result as a PNG in an ``ipywidgets.Image``, so it works in any front end that
renders widgets (no ``%matplotlib widget`` needed). Where widgets don't render, the notebook
shows the static figures of :mod:`helpers.paged.figures` instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import ipywidgets as widgets
from matplotlib.figure import Figure

from helpers.drawing import figure_png
from helpers.paged.draw import draw_kv_frame
from helpers.paged.figures import at_step, side_by_side
from helpers.paged.sim import KVFrame, compare_allocators
from helpers.paged.trace import KV_TRACE_KINDS, KVRequest, make_kv_trace

TraceFactory = Callable[[str, int, int], Sequence[KVRequest]]  # (kind, seed, max_model_len) -> trace
MAX_CACHED_FRAMES = 400  # PNGs kept per run (about 60-150 kB each), so replaying a run does not redraw it


def _narrow() -> widgets.Layout:
    return widgets.Layout(width="160px")


def _dropdown(description: str, choices: Sequence[int], value: int) -> widgets.Dropdown:
    """A dropdown of `choices`, plus `value` if the caller picked something else."""
    return widgets.Dropdown(options=sorted({*choices, value}), value=value, description=description)


class PagedKVPlayer(widgets.VBox):
    """The widget `animate_allocator` returns. Its parts are attributes, so a test (or a curious
    learner) can drive it: `slider`, `play`, `step_back`, `step_forward`, `speed`, `image`,
    `runs`, the frames on show, and `draw_ms`, the shortest Play interval the frames drawn so
    far allow. See `animate_allocator` for what it does."""

    def __init__(
        self,
        source: Sequence[KVFrame] | tuple[Sequence[KVFrame], Sequence[KVFrame]] | TraceFactory | None,
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
        self.runs: tuple[list[KVFrame], ...] = ()
        self._frames: dict[int, bytes] = {}  # this run's PNGs by step
        self.draw_ms = 0
        self.play = widgets.Play(min=0, max=0, interval=interval_ms, description="play")
        self.slider = widgets.IntSlider(min=0, max=0, description="step", continuous_update=True)
        widgets.jslink((self.play, "value"), (self.slider, "value"))  # Play drives the slider in the browser
        self.step_back = widgets.Button(description="◀ step", layout=widgets.Layout(width="80px"))
        self.step_forward = widgets.Button(description="step ▶", layout=widgets.Layout(width="80px"))
        self.step_back.on_click(lambda _: self._move(-1))
        self.step_forward.on_click(lambda _: self._move(+1))
        # ms per step; Play never goes faster than frames are drawn, so "fast" may be no faster than "normal"
        speeds = [("slow", 2 * interval_ms), ("normal", interval_ms), ("fast", max(1, interval_ms // 4))]
        self.speed = widgets.Dropdown(options=speeds, value=interval_ms, description="speed", layout=_narrow())
        self.speed.observe(lambda _: self._pace(), "value")
        self.image = widgets.Image(format="png")
        self.message = widgets.HTML()
        self.slider.observe(lambda _: self._redraw(), "value")
        rows: list[widgets.Widget] = [
            widgets.HBox([self.play, self.step_back, self.step_forward, self.slider, self.speed])
        ]

        if source is None or callable(source):
            self._factory: TraceFactory = source or (
                lambda kind, s, mml: make_kv_trace(kind, seed=s, max_model_len=mml))
            self.trace_kind = widgets.Dropdown(options=list(KV_TRACE_KINDS), value=trace_kind, description="trace")
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
            runs = (source,) if isinstance(source[0], KVFrame) else tuple(source)
            super().__init__([*rows, self.message, self.image])
            self.show(*runs)

    def rerun(self) -> None:
        """Simulate the trace the controls describe, with both schemes, and show step 0."""
        trace = self._factory(self.trace_kind.value, self.seed.value, self.max_model_len.value)
        try:
            runs = compare_allocators(
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

    def show(self, *runs: Sequence[KVFrame]) -> None:
        """Put these runs on the player (one, or two side by side) and draw step 0."""
        self.runs = tuple(list(r) for r in runs)
        self._frames.clear()
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
        if index not in self._frames:
            start = time.perf_counter()
            if len(self.runs) == 1:
                draw_kv_frame(self._figure, at_step(self.runs[0], index))
            else:
                side_by_side(self.runs[0], self.runs[1], index, fig=self._figure)
            if len(self._frames) >= MAX_CACHED_FRAMES:
                self._frames.pop(next(iter(self._frames)))
            self._frames[index] = figure_png(self._figure, dpi=self._dpi)
            # A Play faster than this queues ticks the kernel draws late, even after a pause.
            self.draw_ms = max(self.draw_ms, 10 * math.ceil((time.perf_counter() - start) * 125))  # 1/4 spare
            self._pace()
        self.image.value = self._frames[index]

    def _pace(self) -> None:
        self.play.interval = max(self.speed.value, self.draw_ms)


def animate_allocator(
    source: Sequence[KVFrame] | tuple[Sequence[KVFrame], Sequence[KVFrame]] | TraceFactory | None = None,
    *,
    trace_kind: str = "random",
    seed: int = 0,
    block_size: int = 16,
    pool_slots: int = 1024,
    max_model_len: int = 256,
    enable_prefix_caching: bool = False,
    interval_ms: int = 400,
    dpi: int = 100,
) -> PagedKVPlayer:
    """An ipywidgets player for a run: Play/pause, a step slider, step buttons, speed
    (`interval_ms` per step at "normal"; never faster than the slowest frame drawn so far).

    `source` is either frames to show (one run, or a (contiguous, paged) pair), or
    nothing / a trace factory `(kind, seed, max_model_len) -> trace`: then the widget
    simulates both schemes with `compare_allocators` and also shows controls for trace
    kind, seed, block size, pool size (slots, the same for both schemes), max model length
    and prefix caching; changing one re-runs the simulation. Each step is drawn with
    `side_by_side` (or `draw_kv_frame`) into one Figure, shown as a PNG in an `Image`
    widget, kept per step so a replay costs nothing. Redrawing needs a live kernel; where
    widgets don't render, show the static figures (`plot_memory_over_time`, `small_multiples`) instead.

    Example: `animate_allocator()` in a notebook cell; `animate_allocator(compare_allocators(trace))`
    for a fixed run; `animate_allocator(frames_paged)` for one run.
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
