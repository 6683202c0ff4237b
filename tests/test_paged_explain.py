"""Notebook 03's explainers: the sentences follow the numbers (pure, hand-checkable inputs)."""

from dataclasses import replace

from helpers.paged.cache import PagedKVCache
from helpers.paged.capacity import Capacity, LengthMix
from helpers.paged.explain import (
    describe_blocks,
    explain_capacity,
    explain_prefix_hits,
    explain_waste,
    paper_table,
    waste_table,
)
from helpers.paged.sim_summary import KVRunSummary


def run(scheme, utilization, **changes):
    base = KVRunSummary(scheme=scheme, capacity_slots=1024, num_steps=100, num_finished=24,
                        mean_utilization=utilization, peak_utilization=utilization, mean_reserved_fraction=0.8,
                        peak_reserved_slots=1024, peak_token_slots=900, mean_running=4.0, peak_running=8,
                        waiting_steps=50, num_preemptions=0, sharing_saving=0.0, mean_request_tokens=67.0,
                        mean_request_waste=7.5)
    return replace(base, **changes)


def summaries(naive=0.26, paged=0.90, cached=0.89, shared_paged=0.94):
    return {
        ("random", "naive"): run("naive", naive, mean_running=3.5, num_steps=240, waiting_steps=1800),
        ("random", "paged"): run("paged", paged, mean_running=7.0, num_steps=120, waiting_steps=10, num_preemptions=3),
        ("shared prefix", "naive"): run("naive", 0.46),
        ("shared prefix", "paged"): run("paged", shared_paged, mean_running=5.9, num_preemptions=12),
        ("shared prefix", "paged + prefix caching"): run("paged", cached, mean_running=7.3, sharing_saving=0.5),
        ("random, max_tokens", "naive"): run("naive", 0.44, mean_external_fragmentation=0.18),
        ("random, max_tokens", "paged"): run("paged", 0.90),
    }


def test_describe_blocks_counts_the_empty_slots_of_the_last_block():
    cache = PagedKVCache(num_blocks=8, block_size=16)
    cache.allocate("a", list(range(32)))
    assert describe_blocks(cache, "a") == "a: block table [0, 1], 32 tokens, 0 empty slots in its last block; free blocks: 6"
    cache.append("a", 99)
    assert "[0, 1, 2], 33 tokens, 15 empty slots" in describe_blocks(cache, "a")


def test_the_waste_table_has_a_row_per_run_and_the_paper_table_puts_ours_beside_the_papers():
    table = waste_table(summaries()).splitlines()
    assert len(table) == 2 + 7 and table[2].startswith("random") and "26%" in table[2]
    paper = paper_table(summaries()).splitlines()
    assert "20%-38%" in paper[1] and "96%" in paper[1] and paper[2].split()[-2:] == ["26%", "90%"]


def test_a_naive_share_inside_the_papers_range_says_inside_and_one_outside_says_why():
    assert "inside the paper's 20%-38%." in explain_waste(summaries(), max_model_len=256, block_size=16)
    low = explain_waste(summaries(naive=0.12), max_model_len=256, block_size=16)
    assert "below the paper's" in low and "shorter requests relative to max_model_len" in low
    high = explain_waste(summaries(naive=0.6), max_model_len=256, block_size=16)
    assert "above the paper's" in high and "longer requests" in high


def test_a_paged_share_below_the_papers_says_how_long_requests_would_have_to_be():
    text = explain_waste(summaries(), max_model_len=256, block_size=16)
    assert "about 180 tokens for the waste to be 4%; ours hold 67" in text  # 7.5 x 0.96 / 0.04
    assert "(block size - 1) / 2 = 7.5 expected" in text
    assert "That matches the paper's 96%." in explain_waste(summaries(paged=0.958), max_model_len=256, block_size=16)


def test_serving_effects_and_prefix_caching_follow_the_runs():
    text = explain_waste(summaries(), max_model_len=256, block_size=16)
    assert "7.0 requests at a time against 3.5 (2.0x)" in text and "120 steps instead of 240 (2.0x sooner)" in text
    assert "18% of the pool sat in holes" in text
    assert "served 1.78 request-tokens" in text and "Its tokens/reserved is lower (89% against 94%)" in text
    assert "Its tokens/reserved is lower" not in explain_waste(summaries(cached=0.95), max_model_len=256, block_size=16)


def capacity_rows(naive_fit, paged_fit, paged_max, exact_max, small_share=None):
    rows = [Capacity("naive", 93_184, 2048, 2048, naive_fit, 50, 45, 0.1),
            Capacity("exact", 93_184, 1, 277, 50, 50, exact_max, 1.0),
            Capacity("paged", 93_184, 128, 340, paged_fit, 50, paged_max, 0.81)]
    if small_share is not None:
        rows.append(Capacity("paged", 93_184, 16, 280, 50, 50, 330, small_share))
    return rows


def test_capacity_says_who_waits_under_naive_reservation_and_whether_paging_fits_them_all():
    mix = LengthMix(output_len=64)
    text = explain_capacity(capacity_rows(45, 50, 274, 336), mix, 2048)
    assert "45 of the lab's 50 requests hold memory at once; the other 5 wait" in text
    assert "all of them fit, together 18% of the pool" in text and "6.1x the naive 45" in text
    assert "fewer requests of this mix than the contiguous row" in text and "cost 63 slots per request" in text
    tight = explain_capacity(capacity_rows(50, 30, 30, 30), mix, 2048)
    assert "hold memory at once." in tight and "30 fit;" in tight and "as many requests of this mix as" in tight


def test_a_smaller_block_size_row_says_what_it_would_leave_empty():
    mix = LengthMix(output_len=64)
    assert "no empty tail at all" in explain_capacity(capacity_rows(45, 50, 274, 336, 1.0), mix, 2048)
    assert "2.5% of the held slots empty" in explain_capacity(capacity_rows(45, 50, 274, 336, 0.975), mix, 2048)


def test_prefix_hits_are_judged_against_the_shared_parts_full_blocks():
    exact = explain_prefix_hits((624, 0), (624, 592), shared_tokens=600, block_size=16)
    assert "exactly the 592 tokens" in exact and "37 blocks of 16" in exact
    assert "No hits: is prefix caching off" in explain_prefix_hits((624, 0), (624, 0), shared_tokens=600, block_size=16)
    other = explain_prefix_hits((624, 0), (624, 256), shared_tokens=600, block_size=128)
    assert "found 256 tokens in the cache; full blocks of the shared part hold 512" in other
