"""The warm-up's fresh copy changes a workload's run marker only, never the prompt text that happens to hold the tag."""

from __future__ import annotations

from helpers.load.client import RequestSpec
from helpers.load.warmup import fresh_copy
from helpers.load.workload import Workload


def test_only_the_marker_that_opens_each_text_gets_the_new_tag():
    specs = (RequestSpec(0, "(a/0) a cat sat on a mat", 7, 64, system="(a/0) always answer a"),
             RequestSpec(1, "(ag1/1) a dog", 4, 64, system="(ag1/0) a group's rules"),  # grouped_prefix_workload's
             RequestSpec(2, "no marker: a text", 4, 64))
    copy = fresh_copy(Workload(specs, (4, 7), 64, 0, "a"))
    tag = copy.run_tag
    assert tag != "a" and len(tag) == 1
    prompts = [(spec.prompt, spec.system) for spec in copy.requests]
    assert prompts == [(f"({tag}/0) a cat sat on a mat", f"({tag}/0) always answer a"),
                       (f"({tag}g1/1) a dog", f"({tag}g1/0) a group's rules"),
                       ("no marker: a text", None)]


def test_a_long_tag_that_recurs_in_the_text_is_replaced_once():
    specs = (RequestSpec(0, "(beef/0) beef stew, beef", 6, 64),)
    copy = fresh_copy(Workload(specs, (6,), 64, 0, "beef"))
    assert copy.requests[0].prompt == f"({copy.run_tag}/0) beef stew, beef"
