"""The drawings and the animation widget, on real simulations (Agg backend, no display)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from helpers.drawing import figure_png
from helpers.paged.draw import RESERVED_ALPHA, default_row_slots, draw_kv_frame, request_color  # noqa: E402
from helpers.paged.figures import plot_memory_over_time, side_by_side, small_multiples  # noqa: E402
from helpers.paged.player import animate_allocator  # noqa: E402
from helpers.paged.sim import compare_allocators  # noqa: E402
from helpers.paged.sim_summary import summarize_kv_run  # noqa: E402
from helpers.paged.trace import random_trace, shared_prefix_trace  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    return compare_allocators(random_trace(seed=0), num_blocks=64, block_size=16, max_model_len=256)


def _labelled(ax) -> bool:
    return bool(ax.get_xlabel()) and bool(ax.get_ylabel()) and bool(ax.get_title())


def test_draw_frame_labels_its_axes_for_both_schemes(runs):
    for frames in runs:
        ax = draw_kv_frame(Figure(), frames[len(frames) // 3])
        assert _labelled(ax)
        assert "% of" in ax.get_title()
        assert ax.patches  # the pool was drawn


def test_draw_frame_marks_shared_blocks_with_their_reference_count():
    _, frames = compare_allocators(shared_prefix_trace(seed=0), enable_prefix_caching=True)
    busiest = max(frames, key=lambda f: f.usage.shared_blocks)
    ax = draw_kv_frame(Figure(), busiest)
    assert any(t.get_text().startswith("×") for t in ax.texts)


def test_both_schemes_are_drawn_on_the_same_grid_for_the_same_pool():
    assert default_row_slots(1024, 16) == 128 and default_row_slots(1024, 32) % 32 == 0


def test_side_by_side_titles_state_what_each_scheme_runs(runs):
    fig = side_by_side(*runs, index=30)
    assert fig.get_suptitle().startswith("Step 30")
    assert len(fig.axes) == 2 and all(_labelled(ax) for ax in fig.axes)
    late = side_by_side(*runs, index=len(runs[1]) + 5)  # the paged run is over by then
    assert "finished every request" in late.get_suptitle()


def test_memory_over_time_title_is_computed_from_the_runs(runs):
    fig = plot_memory_over_time(*runs)
    naive, paged = (summarize_kv_run(frames) for frames in runs)
    top = fig.axes[0]
    assert f"{naive.mean_utilization:.0%}" in top.get_title() and f"{paged.mean_utilization:.0%}" in top.get_title()
    assert all(_labelled(ax) for ax in fig.axes)
    assert top.get_legend() is not None


def test_small_multiples_draws_one_panel_per_step(runs):
    fig = small_multiples(runs[1], steps=[0, 10, 20])
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 3 and all(_labelled(ax) for ax in visible)
    assert fig.get_suptitle()


def test_widget_slider_spans_every_frame_and_step_changes_the_image(runs):
    player = animate_allocator(runs[1])
    assert player.slider.max == len(runs[1]) - 1 == player.play.max
    before = player.image.value
    assert before[:4] == b"\x89PNG"
    player.step_forward.click()
    assert player.slider.value == 1 and player.image.value != before
    player.step_back.click()
    player.step_back.click()  # stops at step 0
    assert player.slider.value == 0


def test_widget_reruns_the_simulation_when_a_control_changes():
    player = animate_allocator(seed=0)
    assert player.slider.max == max(len(r) for r in player.runs) - 1
    first = player.runs
    player.block_size.value = 32
    assert player.runs != first and player.runs[1][0].block_size == 32
    assert player.slider.value == 0 and player.slider.max == max(len(r) for r in player.runs) - 1


def test_widget_speed_control_sets_the_play_interval_but_never_below_a_frames_drawing_time(runs):
    player = animate_allocator(runs, interval_ms=400)
    assert player.draw_ms > 0  # measured on the first frame
    player.speed.value = 800
    assert player.play.interval == max(800, player.draw_ms)
    player.speed.value = 100  # "fast": faster than this machine draws frames?
    assert player.play.interval == max(100, player.draw_ms)


def test_play_slows_down_to_the_slowest_frame_drawn(runs, monkeypatch):
    import helpers.paged.player as player_module

    def slow_side_by_side(*args, **kwargs):  # a frame that takes 0.5 s to draw
        clock[0] += 0.5
        return side_by_side(*args, **kwargs)

    clock = [0.0]
    monkeypatch.setattr(player_module, "side_by_side", slow_side_by_side)
    monkeypatch.setattr(player_module.time, "perf_counter", lambda: clock[0])
    player = animate_allocator(runs, interval_ms=400)
    assert player.draw_ms == 630 and player.play.interval == 630  # 0.5 s and a quarter to send it
    player.speed.value = 800
    assert player.play.interval == 800


def test_a_frame_already_drawn_is_not_drawn_again(runs, monkeypatch):
    import helpers.paged.player as player_module

    calls = []
    monkeypatch.setattr(player_module, "side_by_side",
                        lambda *args, **kwargs: calls.append(args[2]) or side_by_side(*args, **kwargs))
    player = animate_allocator(runs)
    first = player.image.value
    player.step_forward.click()
    player.step_back.click()
    assert player.image.value == first
    player.step_forward.click()
    assert calls == [0, 1]
    player.show(*runs)  # new runs: their frames are drawn anew
    assert calls == [0, 1, 0]


# ----- readable frames ---------------------------------------------------------------------------
def _composite_on_white(color, alpha):
    return tuple(alpha * c + (1 - alpha) for c in color[:3])


def test_no_request_colour_looks_like_another_requests_reserved_empty_slots():
    # tab20's pale hues (r09-r17 before) drawn solid were within 0.09 of a saturated hue at RESERVED_ALPHA
    solid = {request_color(f"r{i:02d}")[:3] for i in range(40)}
    pale = {_composite_on_white(c, RESERVED_ALPHA) for c in solid}
    closest = min(sum((a - b) ** 2 for a, b in zip(s, p)) ** 0.5 for s in solid for p in pale)
    assert closest > 0.25, closest


def test_block_tables_are_drawn_at_least_10_pixels_high_in_the_player(runs):
    player = animate_allocator(runs)
    png = player.image.value
    width_px = int.from_bytes(png[16:20], "big")  # PNG's IHDR
    px_per_pt = width_px / (player._figure.get_figwidth() * 72)
    table = next(t for ax in player._figure.axes for t in ax.texts if t.get_text().startswith("block tables"))
    assert table.get_fontsize() * px_per_pt >= 10
    assert width_px <= 1200  # scaled down by a narrower output area, the text shrinks with it


def test_requests_over_time_count_whole_requests():
    few = compare_allocators(random_trace(seed=0)[:3], num_blocks=64, block_size=16, max_model_len=256)
    ticks = plot_memory_over_time(*few).axes[1].get_yticks()  # 0-3 requests: before, ticks every 0.5
    assert all(float(t).is_integer() for t in ticks), ticks


def test_figure_png_returns_png_bytes(runs):
    assert figure_png(side_by_side(*runs, index=0)).startswith(b"\x89PNG")
