"""Drawings and the widget shell for the batching notebook (Agg backend, no front end)."""

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets
import pytest
from matplotlib.figure import Figure

from helpers.batching.sim import simulate_continuous, simulate_static
from helpers.batching.step_time import StepTimeModel
from helpers.batching.trace import BatchRequest, make_batching_trace, mixed_length_trace
from helpers.batching.view import animate_scheduler, compare_figure, draw_slots, finding, running_counters


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
