"""Drawings and the widget shell for the batching notebook (Agg backend, no front end)."""

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets
import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from helpers.batching.sim import simulate_continuous, simulate_static
from helpers.batching.step_time import StepTimeModel
from helpers.batching.trace import BatchRequest, make_batching_trace, mixed_length_trace
from helpers.batching.view import (
    animate_scheduler,
    compare_figure,
    draw_slots,
    finding,
    request_colors,
    running_counters,
    slot_legend_handles,
)


@pytest.fixture(scope="module")
def pair():
    trace = mixed_length_trace(12)
    return simulate_static(trace, 4), simulate_continuous(trace, 4)


def all_widgets(box):
    yield box
    for child in getattr(box, "children", ()):
        yield from all_widgets(child)


def find(box, cls, description):
    return next(w for w in all_widgets(box) if isinstance(w, cls) and w.description == description)



def test_slot_chart_has_labelled_axes_a_title_and_one_lane_per_slot(pair):
    ax = Figure().subplots()
    draw_slots(ax, pair[0])
    assert ax.get_xlabel() == "time (s)" and ax.get_ylabel() == "batch slot"
    assert ax.get_title(loc="left")
    assert ax.get_ylim() == (3.5, -0.5)


def test_an_idle_slot_is_drawn_hatched_grey():
    trace = [BatchRequest("a", 0.0, 4, 1), BatchRequest("b", 0.0, 4, 3)]
    ax = Figure().subplots()
    draw_slots(ax, simulate_static(trace, 2, StepTimeModel(overhead_s=1.0, prefill_token_s=0, decode_seq_s=0)))
    hatched = [c for c in ax.collections if c.get_hatch() == "///"]
    assert len(hatched) == 1  # lane 0 after a finished, one merged run
    assert hatched[0].get_paths()[0].get_extents().x0 == pytest.approx(1.0)


def test_drawing_fewer_steps_draws_less(pair):
    full, partial = Figure().subplots(), Figure().subplots()
    draw_slots(full, pair[1])
    draw_slots(partial, pair[1], upto_step=3)
    count = lambda ax: sum(len(c.get_paths()) for c in ax.collections)  # noqa: E731
    assert count(partial) < count(full)


def test_running_counters_on_the_whole_run_agree_with_the_summary(pair):
    for r in pair:
        tokens, elapsed, tok_s, util = running_counters(r.steps, r.max_num_seqs)
        assert tokens == r.summary.num_output_tokens
        assert util == pytest.approx(r.summary.slot_utilization)
        assert tok_s == pytest.approx(r.summary.output_tok_s)  # the trace starts at t=0


def test_compare_figure_states_the_finding_and_labels_every_axis(pair):
    fig = compare_figure(*pair)
    assert fig.get_suptitle() == finding(pair[0].summary, pair[1].summary)
    assert "x the throughput" in fig.get_suptitle()
    for ax in fig.axes:
        assert ax.get_ylabel(), ax
        assert ax.get_title() or ax.get_title(loc="left"), ax
    assert fig.legends  # the slot colours are explained
    fig.savefig(__import__("io").BytesIO(), format="png")


def test_finding_reports_the_throughput_ratio_and_utilizations(pair):
    s, c = pair[0].summary, pair[1].summary
    text = finding(s, c)
    assert f"{c.output_tok_s / s.output_tok_s:.1f}x" in text
    assert f"{c.slot_utilization:.0%}" in text and f"{s.slot_utilization:.0%}" in text


def test_the_widget_builds_with_a_slider_over_every_step():
    box = animate_scheduler(kind="mixed", num_requests=8, max_num_seqs=4)
    assert isinstance(box, widgets.VBox)
    trace = make_batching_trace("mixed", 8, spread=0.5)  # the widget's defaults
    expected = max(len(simulate_static(trace, 4).steps), len(simulate_continuous(trace, 4).steps))
    assert find(box, widgets.IntSlider, "step").max == expected
    assert find(box, widgets.Play, "play").max == expected


def test_pressing_step_changes_the_image():
    box = animate_scheduler(num_requests=8, max_num_seqs=4)
    image = next(w for w in all_widgets(box) if isinstance(w, widgets.Image))
    before = image.value
    find(box, widgets.Button, "step ▶").click()
    assert find(box, widgets.IntSlider, "step").value == 1
    assert image.value != before and image.value[:8] == b"\x89PNG\r\n\x1a\n"
    find(box, widgets.Button, "◀ step").click()
    assert image.value == before


def test_changing_max_num_seqs_reruns_the_simulation():
    box = animate_scheduler(num_requests=8, max_num_seqs=1)
    slider = find(box, widgets.IntSlider, "step")
    steps_at_1 = slider.max
    find(box, widgets.IntSlider, "max_num_seqs").value = 8
    assert slider.max < steps_at_1  # bigger batches: fewer steps for the same trace


# ----- a member holding its slot while the batch's prompts are prefilled -----------------------------
ONE_PROMPT_A_STEP = StepTimeModel(overhead_s=1.0, prefill_token_s=0.0, decode_seq_s=0.0, max_num_batched_tokens=256)


def test_a_member_waiting_for_a_prefill_is_drawn_white_outlined_in_its_colour_not_as_decoding():
    trace = [BatchRequest(name, 0.0, 256, 2) for name in "abc"]  # one prompt per step
    result = simulate_static(trace, 3, ONE_PROMPT_A_STEP)
    ax = Figure().subplots()
    draw_slots(ax, result)
    color = to_rgba(request_colors(result)["c"])
    lane_2 = [c for c in ax.collections if c.get_paths()[0].get_extents().y0 == pytest.approx(1.6, abs=0.1)]
    waiting = [c for c in lane_2 if tuple(c.get_facecolor()[0]) == to_rgba("white")]
    assert len(waiting) == 1 and tuple(waiting[0].get_edgecolor()[0]) == pytest.approx(color)
    assert waiting[0].get_paths()[0].get_extents().x0 == pytest.approx(0.0)  # steps 1-2: a's and b's prefills
    assert waiting[0].get_paths()[0].get_extents().x1 == pytest.approx(2.0)
    solid = [c for c in lane_2 if tuple(c.get_facecolor()[0]) == pytest.approx(color)]
    assert [c.get_paths()[0].get_extents().x0 for c in solid] == [pytest.approx(3.0)]  # decoding: the last step only
    labels = [h.get_label() for h in slot_legend_handles()]
    assert any("waiting for a prefill" in label for label in labels)


def test_running_counters_leave_out_slots_that_compute_nothing():
    trace = [BatchRequest(name, 0.0, 256, 2) for name in "abc"]
    tokens, elapsed, _, util = running_counters(simulate_static(trace, 3, ONE_PROMPT_A_STEP).steps, 3)
    assert (tokens, elapsed, util) == (6, 4.0, pytest.approx(6 / 12))


# ----- the widget keeps up with its own Play -------------------------------------------------------
def test_the_sliders_that_rerun_the_simulations_wait_for_release():
    box = animate_scheduler(num_requests=8, max_num_seqs=4)
    assert find(box, widgets.IntSlider, "max_num_seqs").continuous_update is False
    assert find(box, widgets.FloatSlider, "length spread").continuous_update is False


def test_play_is_never_faster_than_a_frame_is_drawn(monkeypatch):
    from helpers.batching import view

    def slow_frame(*args):  # a frame that takes 0.3 s to draw
        draw(*args)
        clock[0] += 0.3

    draw, clock = view.draw_scheduler_frame, [0.0]
    monkeypatch.setattr(view, "draw_scheduler_frame", slow_frame)
    monkeypatch.setattr(view.time, "perf_counter", lambda: clock[0])
    box = animate_scheduler(num_requests=8, max_num_seqs=4)
    speed, play = find(box, widgets.IntSlider, "ms/step"), find(box, widgets.Play, "play")
    assert speed.min == 380 and play.interval == speed.value >= 380  # 0.3 s and a quarter to send it
    speed.value = speed.min
    assert play.interval == 380


def test_a_frame_already_drawn_is_not_drawn_again(monkeypatch):
    from helpers.batching import view

    calls = []
    draw = view.draw_scheduler_frame
    monkeypatch.setattr(view, "draw_scheduler_frame", lambda *args: calls.append(args[-1]) or draw(*args))
    box = animate_scheduler(num_requests=8, max_num_seqs=4)
    image = next(w for w in all_widgets(box) if isinstance(w, widgets.Image))
    first = image.value
    forward, back = find(box, widgets.Button, "step ▶"), find(box, widgets.Button, "◀ step")
    forward.click()
    back.click()
    assert image.value == first
    forward.click()
    assert calls == [0, 1]
    find(box, widgets.IntSlider, "max_num_seqs").value = 2  # a new run: its step 1 is drawn anew
    assert calls == [0, 1, 1]
