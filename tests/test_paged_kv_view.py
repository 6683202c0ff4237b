"""The drawings and the animation widget, on real simulations (Agg backend, no display)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from helpers.drawing import figure_png
from helpers.paged.draw import default_row_slots, draw_kv_frame  # noqa: E402
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


def test_widget_speed_control_sets_the_play_interval(runs):
    player = animate_allocator(runs, interval_ms=400)
    player.speed.value = 200
    assert player.play.interval == 200


def test_figure_png_returns_png_bytes(runs):
    assert figure_png(side_by_side(*runs, index=0)).startswith(b"\x89PNG")
