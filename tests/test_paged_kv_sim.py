"""Traces and the step-by-step simulation of the KV-cache allocators."""

from __future__ import annotations

import statistics

import pytest

from helpers.paged.cache import PagedKVCache
from helpers.paged.contiguous import ContiguousKVCache
from helpers.paged.sim import compare_allocators, simulate_allocator
from helpers.paged.sim_summary import summarize_kv_run
from helpers.paged.trace import KVRequest, make_kv_trace, random_trace, shared_prefix_trace
from tests.test_paged_kv import free_runs


# -- traces --------------------------------------------------------------------------------
def test_the_same_seed_gives_the_same_trace():
    assert random_trace(seed=3) == random_trace(seed=3)
    assert random_trace(seed=3) != random_trace(seed=4)


def test_random_trace_fits_max_model_len_and_most_requests_stop_far_short_of_it():
    trace = random_trace(num_requests=200, seed=0, max_model_len=256)
    lengths = [len(r.prompt_token_ids) + r.output_len for r in trace]
    assert max(lengths) <= 256
    assert statistics.median(lengths) < 256 / 2
    assert [r.arrival_step for r in trace] == sorted(r.arrival_step for r in trace)


def test_client_max_tokens_caps_the_output():
    trace = random_trace(num_requests=50, seed=0, max_tokens=(8, 16))
    assert all(r.max_tokens in (8, 16) and r.output_len <= r.max_tokens for r in trace)


def test_shared_prefix_trace_starts_every_prompt_with_the_same_system_prompt():
    trace = shared_prefix_trace(num_requests=10, seed=0, system_prompt_len=64)
    assert len({r.prompt_token_ids[:64] for r in trace}) == 1
    assert len({r.prompt_token_ids for r in trace}) == 10


def test_unknown_trace_kind_is_refused():
    with pytest.raises(ValueError):
        make_kv_trace("bursty")


# -- simulation ----------------------------------------------------------------------------
def _two_requests_that_outgrow_four_blocks():
    return [KVRequest("r0", 0, (1, 2, 3, 4), output_len=8), KVRequest("r1", 0, (5, 6, 7, 8), output_len=8)]


def test_when_a_block_runs_out_the_most_recently_admitted_request_is_preempted_and_recomputed_later():
    # Block size 4, 4 blocks. Step 0: both prompts (4 tokens) + 1 token each -> 2 blocks each.
    # Step 4: r0 reaches 9 tokens and needs a 5th block: r1 (admitted last) is preempted.
    # r0 finishes in step 7; in step 8 r1 is readmitted with its 4 + 4 tokens.
    frames = simulate_allocator(_two_requests_that_outgrow_four_blocks(), PagedKVCache(num_blocks=4, block_size=4))
    by_step = {f.step: f for f in frames}
    assert by_step[4].preempted_now == ("r1",) and by_step[4].waiting == ("r1",)
    assert by_step[7].finished_now == ("r0",)
    assert by_step[8].admitted_now == ("r1",) and by_step[8].num_tokens == {"r1": 9}
    assert frames[-1].num_finished == 2 and frames[-1].num_preemptions == 1
    assert summarize_kv_run(frames).waiting_steps == 4  # steps 4, 5, 6, 7


def test_a_small_pool_makes_requests_wait_and_be_preempted():
    trace = random_trace(num_requests=30, seed=1, arrival_rate=2.0)
    frames = simulate_allocator(trace, PagedKVCache(num_blocks=24, block_size=16))
    assert max(f.num_waiting for f in frames) > 0
    assert frames[-1].num_preemptions > 0
    assert frames[-1].num_finished == 30


def test_the_simulation_is_deterministic():
    trace = shared_prefix_trace(seed=2)
    first = simulate_allocator(trace, PagedKVCache(num_blocks=40, block_size=16, enable_prefix_caching=True))
    second = simulate_allocator(trace, PagedKVCache(num_blocks=40, block_size=16, enable_prefix_caching=True))
    assert first == second


def test_every_request_finishes_and_the_pool_ends_empty():
    trace = random_trace(seed=0)
    for frames in compare_allocators(trace):
        assert frames[-1].num_finished == len(trace)
        assert frames[-1].usage.reserved_slots == 0 and frames[-1].num_running == 0


def test_a_finished_request_is_shown_in_its_last_step_and_freed_in_the_next():
    frames = simulate_allocator([KVRequest("a", 0, (1, 2, 3), output_len=2)], PagedKVCache(num_blocks=2, block_size=4))
    assert [f.finished_now for f in frames] == [(), ("a",), ()]
    assert frames[1].block_tables == {"a": (0, 1)} and frames[2].block_tables == {}


def test_utilization_on_a_tiny_hand_computed_trace():
    # prompt 3 tokens, 2 generated; block size 4; max_model_len 8.
    # paged:      step 0: 4 tokens in 1 block (4/4); step 1: 5 tokens in 2 blocks (5/8); step 2: empty.
    # contiguous: 8 slots reserved throughout: 4/8, then 5/8.
    trace = [KVRequest("a", 0, (1, 2, 3), output_len=2)]
    naive, paged = compare_allocators(trace, num_blocks=4, block_size=4, max_model_len=8)
    assert [f.usage.utilization for f in paged] == [1.0, 5 / 8, 0.0]
    assert summarize_kv_run(paged).mean_utilization == pytest.approx(9 / 12)
    assert summarize_kv_run(naive).mean_utilization == pytest.approx(9 / 16)
    assert summarize_kv_run(paged).peak_utilization == 1.0


def test_contiguous_cache_waits_where_paged_cache_runs_more_requests():
    naive, paged = compare_allocators(random_trace(seed=0), num_blocks=64, block_size=16, max_model_len=256)
    a, b = summarize_kv_run(naive), summarize_kv_run(paged)
    assert a.num_preemptions == 0  # it reserved the worst case, so it never runs out mid-request
    assert a.mean_utilization < 0.4 < 0.85 < b.mean_utilization
    assert b.peak_running > a.peak_running and b.waiting_steps < a.waiting_steps
    assert b.num_steps < a.num_steps


def test_prefix_caching_shares_the_system_prompt_blocks():
    trace = shared_prefix_trace(seed=0, system_prompt_len=64)
    _, plain = compare_allocators(trace, enable_prefix_caching=False)
    _, cached = compare_allocators(trace, enable_prefix_caching=True)
    assert max(f.usage.shared_blocks for f in plain) == 0
    assert max(f.usage.shared_blocks for f in cached) >= 4  # the 64-token system prompt: 4 blocks of 16
    assert summarize_kv_run(cached).sharing_saving > 0.2 and summarize_kv_run(plain).sharing_saving == 0.0
    assert summarize_kv_run(cached).peak_running > summarize_kv_run(plain).peak_running


def test_a_request_larger_than_the_pool_is_refused_instead_of_waiting_forever():
    trace = [KVRequest("big", 0, tuple(range(40)), output_len=1)]
    with pytest.raises(ValueError, match="whole pool"):
        simulate_allocator(trace, PagedKVCache(num_blocks=2, block_size=16))
    with pytest.raises(ValueError, match="whole pool"):
        simulate_allocator(trace, ContiguousKVCache(capacity_slots=64, max_model_len=32))


def test_a_request_that_outgrows_the_pool_alone_is_refused():
    trace = [KVRequest("long", 0, tuple(range(30)), output_len=10)]
    with pytest.raises(ValueError, match="alone"):
        simulate_allocator(trace, PagedKVCache(num_blocks=2, block_size=16))


def test_summary_describes_the_run_in_one_line():
    line = summarize_kv_run(simulate_allocator(random_trace(seed=0), PagedKVCache(64))).describe()
    assert line.startswith("paged: ") and "% of reserved KV slots hold tokens" in line


def test_summary_splits_reserved_slots_into_tokens_and_the_two_kinds_of_waste():
    # the tiny trace above: paged wastes 0 + 3 of 12 reserved slot-steps in its half-empty
    # second block; contiguous keeps 4 + 3 of 16 reserved for tokens not yet generated.
    trace = [KVRequest("a", 0, (1, 2, 3), output_len=2)]
    naive, paged = (summarize_kv_run(frames) for frames in compare_allocators(trace, num_blocks=4, block_size=4, max_model_len=8))
    assert paged.mean_internal_waste == pytest.approx(3 / 12) and paged.mean_reserved_unused == 0.0
    assert naive.mean_reserved_unused == pytest.approx(7 / 16) and naive.mean_internal_waste == 0.0
    # A larger run with shared blocks: the split recomputed from what each frame shows (block tables and token
    # counts), not from the allocator's own usage() report.
    naive_frames, paged_frames = compare_allocators(shared_prefix_trace(seed=0, system_prompt_len=64),
                                                    enable_prefix_caching=True)
    for frames, expected in ((naive_frames, _contiguous_split(naive_frames)), (paged_frames, _paged_split(paged_frames))):
        reserved, tokens, internal, unused = (sum(step) for step in zip(*expected))
        summary = summarize_kv_run(frames)
        assert (summary.mean_utilization, summary.mean_internal_waste, summary.mean_reserved_unused) == (
            pytest.approx(tokens / reserved), pytest.approx(internal / reserved), pytest.approx(unused / reserved))
        assert tokens + internal + unused == reserved
    assert summarize_kv_run(paged_frames).sharing_saving > 0  # shared blocks were there to count once


def _paged_split(frames) -> list[tuple[int, int, int, int]]:
    """Per frame: (reserved, token, internal-waste, reserved-unused) slots of a paged run. Block i of a request
    holding n tokens holds min(block_size, n - i*block_size) of them; a block in several tables counts once."""
    split = []
    for frame in frames:
        bs, held = frame.block_size, {}
        for rid, table in frame.block_tables.items():
            for i, block_id in enumerate(table):
                held[block_id] = min(bs, frame.num_tokens[rid] - i * bs)
        split.append((len(held) * bs, sum(held.values()), len(held) * bs - sum(held.values()), 0))
    return split


def _contiguous_split(frames) -> list[tuple[int, int, int, int]]:
    """The same for a contiguous run: a request's table is the run of slots it reserved up front."""
    split = []
    for frame in frames:
        reserved = sum(len(table) for table in frame.block_tables.values())
        tokens = sum(frame.num_tokens.values())
        split.append((reserved, tokens, 0, reserved - tokens))
    return split


def test_only_per_request_reservations_leave_external_fragments():
    naive_max, _ = compare_allocators(random_trace(seed=0))
    naive_capped, paged = compare_allocators(random_trace(seed=0, max_tokens=(32, 64, 128, 256)))
    for frames in (naive_max, naive_capped):  # fragments recomputed from the slots each frame's requests hold
        assert [f.usage.external_fragmentation_slots for f in frames] == [_short_holes(f) for f in frames]
    assert summarize_kv_run(naive_max).mean_external_fragmentation == 0.0  # equal runs always fit each other's holes
    assert summarize_kv_run(naive_capped).mean_external_fragmentation > 0.0
    assert summarize_kv_run(paged).mean_external_fragmentation == 0.0
    # What that 0 stands for: the paged pool's free blocks lie scattered between held ones, yet a request needing
    # every one of them gets them. The contiguous pool with the same holes refuses it.
    assert any(_free_runs(f) > 1 for f in paged)
    cache = PagedKVCache(num_blocks=6, block_size=4)
    for rid in "abcdef":
        cache.allocate(rid, [1, 2, 3, 4])
    for rid in "bdf":
        cache.free(rid)
    assert cache.can_allocate(list(range(12)))
    cache.allocate("big", list(range(12)))
    assert sorted(cache.block_table("big")) == [1, 3, 5] and cache.usage().external_fragmentation_slots == 0
    naive = ContiguousKVCache(capacity_slots=24, max_model_len=12)
    for rid in "abcdef":
        naive.allocate(rid, [1, 2, 3, 4], max_tokens=0)
    for rid in "bdf":
        naive.free(rid)
    assert not naive.can_allocate(list(range(12))) and naive.usage().external_fragmentation_slots == 12


def _holes(frame, num_slots: int) -> list[int]:
    """Lengths of the runs of slots (blocks, for a paged pool) that no request of the frame holds, in address order."""
    return free_runs({slot for table in frame.block_tables.values() for slot in table}, num_slots)


def _short_holes(frame) -> int:
    """A contiguous frame's free slots in holes too short for a max_model_len request."""
    return sum(n for n in _holes(frame, frame.usage.capacity_slots) if n < frame.max_model_len)


def _free_runs(frame) -> int:
    """How many separate runs the free blocks of a paged frame (no prefix caching) form."""
    return len(_holes(frame, len(frame.pool)))


def test_summary_gives_tokens_and_waste_per_live_request():
    # the tiny trace: 4 then 5 tokens held by one request; paged wastes 0 then 3 slots, contiguous 4 then 3.
    trace = [KVRequest("a", 0, (1, 2, 3), output_len=2)]
    naive, paged = (summarize_kv_run(frames) for frames in compare_allocators(trace, num_blocks=4, block_size=4, max_model_len=8))
    assert paged.mean_request_tokens == naive.mean_request_tokens == pytest.approx(4.5)
    assert paged.mean_request_waste == pytest.approx(1.5) and naive.mean_request_waste == pytest.approx(3.5)
