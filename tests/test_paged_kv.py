"""The KV-cache allocators: hand-checkable cases, then random operation sequences (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers.paged.cache import PagedKVCache, hash_block_tokens
from helpers.paged.contiguous import ContiguousKVCache
from helpers.paged.usage import BlockStatus

SYSTEM = list(range(100, 132))  # 32 tokens: two full blocks of 16


# -- paged: on-demand allocation ----------------------------------------------------------
def test_37_tokens_at_block_size_16_take_3_blocks():
    cache = PagedKVCache(num_blocks=8, block_size=16)
    cache.allocate("r1", list(range(37)))
    assert len(cache.block_table("r1")) == 3
    assert (cache.num_used_blocks, cache.num_free_blocks) == (3, 5)
    assert cache.num_tokens("r1") == 37


def test_append_takes_a_new_block_only_when_crossing_a_block_boundary():
    cache = PagedKVCache(num_blocks=8, block_size=16)
    cache.allocate("r1", list(range(16)))  # exactly one full block
    assert cache.num_used_blocks == 1
    cache.append("r1", 99)  # token 17 starts block 2
    assert cache.num_used_blocks == 2
    for t in range(15):  # tokens 18..32 fill block 2
        cache.append("r1", t)
    assert cache.num_used_blocks == 2
    cache.append("r1", 0)  # token 33 starts block 3
    assert cache.num_used_blocks == 3 and cache.num_tokens("r1") == 33


def test_usage_counts_the_empty_tail_of_the_last_block_as_internal_waste():
    cache = PagedKVCache(num_blocks=4, block_size=16)
    cache.allocate("r1", list(range(37)))
    u = cache.usage()
    assert (u.reserved_slots, u.token_slots, u.internal_waste_slots, u.free_slots) == (48, 37, 11, 16)
    assert u.utilization == pytest.approx(37 / 48)
    assert u.reserved_unused_slots == u.external_fragmentation_slots == 0


def test_freeing_last_reference_returns_block_to_free_list():
    cache = PagedKVCache(num_blocks=4, block_size=16)
    cache.allocate("r1", list(range(20)))
    cache.free("r1")
    assert (cache.num_free_blocks, cache.num_used_blocks, cache.num_cached_blocks) == (4, 0, 0)
    assert all(cell.status is BlockStatus.FREE for cell in cache.pool_state())


def test_can_allocate_is_false_instead_of_raising_when_the_pool_is_full():
    cache = PagedKVCache(num_blocks=2, block_size=16)
    cache.allocate("r1", list(range(32)))
    assert not cache.can_allocate([1])
    assert not cache.can_append("r1")
    with pytest.raises(RuntimeError):
        cache.allocate("r2", [1])
    with pytest.raises(RuntimeError):
        cache.append("r1", 1)


def test_allocating_a_live_request_id_twice_is_a_programmer_error():
    cache = PagedKVCache(num_blocks=4, block_size=16)
    cache.allocate("r1", [1, 2])
    with pytest.raises(ValueError):
        cache.allocate("r1", [3])


def test_can_append_is_true_while_the_last_block_has_room_even_with_no_free_blocks():
    cache = PagedKVCache(num_blocks=1, block_size=16)
    cache.allocate("r1", list(range(15)))
    assert cache.num_free_blocks == 0 and cache.can_append("r1")
    cache.append("r1", 0)
    assert not cache.can_append("r1")


# -- paged: prefix sharing ----------------------------------------------------------------
def test_prefix_caching_off_means_no_sharing():
    cache = PagedKVCache(num_blocks=8, block_size=16, enable_prefix_caching=False)
    cache.allocate("r1", SYSTEM + [1])
    cache.allocate("r2", SYSTEM + [2])
    assert cache.num_used_blocks == 6
    assert not set(cache.block_table("r1")) & set(cache.block_table("r2"))
    cache.free("r1")
    assert cache.num_cached_blocks == 0  # nothing is kept for later either


def test_matching_full_blocks_are_shared_by_reference_count():
    cache = PagedKVCache(num_blocks=8, block_size=16, enable_prefix_caching=True)
    cache.allocate("r1", SYSTEM + [1, 2])
    cache.allocate("r2", SYSTEM + [3])
    t1, t2 = cache.block_table("r1"), cache.block_table("r2")
    assert t1[:2] == t2[:2] and t1[2] != t2[2]  # the two system blocks are shared, the tails are not
    assert cache.num_used_blocks == 4  # 2 shared + 1 tail each
    u = cache.usage()
    assert (u.shared_blocks, u.token_slots, u.logical_tokens) == (2, 32 + 2 + 1, 34 + 33)
    owners = {cell.block_id: cell.owners for cell in cache.pool_state()}
    assert owners[t1[0]] == ("r1", "r2")


def test_partial_last_blocks_are_never_shared():
    cache = PagedKVCache(num_blocks=8, block_size=16, enable_prefix_caching=True)
    cache.allocate("r1", SYSTEM[:20])
    cache.allocate("r2", SYSTEM[:20])  # same 20 tokens: block 0 shared, the 4-token tails not
    assert cache.block_table("r1")[0] == cache.block_table("r2")[0]
    assert cache.block_table("r1")[1] != cache.block_table("r2")[1]


def test_a_shared_block_stays_in_use_until_its_last_user_frees_it():
    cache = PagedKVCache(num_blocks=8, block_size=16, enable_prefix_caching=True)
    cache.allocate("r1", SYSTEM)
    cache.allocate("r2", SYSTEM)
    assert cache.num_used_blocks == 2
    cache.free("r1")
    assert cache.num_used_blocks == 2 and cache.block_table("r2") == [0, 1]
    cache.free("r2")
    assert (cache.num_used_blocks, cache.num_cached_blocks) == (0, 2)


def test_can_allocate_counts_blocks_the_prompt_could_share():
    shared = PagedKVCache(num_blocks=3, block_size=16, enable_prefix_caching=True)
    shared.allocate("r1", SYSTEM)  # 2 of 3 blocks used
    assert shared.can_allocate(SYSTEM + [7])  # needs 3 blocks, 2 of them shared: 1 new
    plain = PagedKVCache(num_blocks=3, block_size=16)
    plain.allocate("r1", SYSTEM)
    assert not plain.can_allocate(SYSTEM + [7])  # needs 3 new blocks, 1 free


def test_freed_full_blocks_stay_cached_and_a_matching_prompt_revives_them():
    cache = PagedKVCache(num_blocks=4, block_size=16, enable_prefix_caching=True)
    cache.allocate("r1", SYSTEM + [1])
    old_table = cache.block_table("r1")
    cache.free("r1")
    assert (cache.num_cached_blocks, cache.num_free_blocks) == (2, 2)  # the partial tail block is not kept
    cache.allocate("r2", SYSTEM + [2, 3])
    assert cache.block_table("r2")[:2] == old_table[:2]  # revived: no recompute, no new memory
    assert cache.num_cached_blocks == 0 and cache.num_used_blocks == 3


def test_cached_blocks_are_evicted_least_recently_used_first_when_fresh_blocks_run_out():
    cache = PagedKVCache(num_blocks=3, block_size=4, enable_prefix_caching=True)
    cache.allocate("a", [1, 1, 1, 1])  # block 0
    cache.allocate("b", [2, 2, 2, 2])  # block 1
    cache.allocate("c", [3, 3, 3, 3])  # block 2
    cache.free("b")
    cache.free("a")
    cache.free("c")  # cached, least recently freed first: 1, 0, 2
    cache.allocate("d", [9, 9, 9, 9, 9])  # needs two fresh blocks: evicts 1, then 0
    assert cache.block_table("d") == [1, 0]
    assert cache.can_allocate([3, 3, 3, 3])  # c's block survived ...
    cache.allocate("e", [3, 3, 3, 3])
    assert cache.block_table("e") == [2]  # ... and is revived
    assert not cache.can_allocate([1, 1, 1, 1])  # a's block is gone, and no room for a new one


def test_a_block_filled_by_decoding_becomes_shareable():
    cache = PagedKVCache(num_blocks=4, block_size=4, enable_prefix_caching=True)
    cache.allocate("r1", [5, 6, 7])
    cache.append("r1", 8)  # now [5, 6, 7, 8] is a full block
    cache.allocate("r2", [5, 6, 7, 8, 9])
    assert cache.block_table("r2")[0] == cache.block_table("r1")[0]


def test_block_hash_depends_on_everything_before_the_block():
    assert hash_block_tokens(None, [1, 2]) == hash_block_tokens(None, [1, 2])
    after_12, after_99 = hash_block_tokens(None, [1, 2]), hash_block_tokens(None, [9, 9])
    assert hash_block_tokens(after_12, [3]) != hash_block_tokens(after_99, [3])


# -- contiguous -----------------------------------------------------------------------------
def test_contiguous_cache_reserves_max_model_len_up_front():
    cache = ContiguousKVCache(capacity_slots=32, max_model_len=8)
    cache.allocate("a", [1, 2, 3])
    u = cache.usage()
    assert cache.block_table("a") == list(range(8))
    assert (u.reserved_slots, u.token_slots, u.reserved_unused_slots, u.free_slots) == (8, 3, 5, 24)
    assert u.utilization == pytest.approx(3 / 8)


def test_contiguous_cache_reports_external_fragmentation():
    # 10 slots, runs of 3 + 4 + 3; free the outer two: 6 slots free, but in two holes of 3.
    cache = ContiguousKVCache(capacity_slots=10, max_model_len=4)
    cache.allocate("a", [1], max_tokens=2)  # slots 0-2
    cache.allocate("b", [1], max_tokens=3)  # slots 3-6
    cache.allocate("c", [1], max_tokens=2)  # slots 7-9
    cache.free("a")
    cache.free("c")
    u = cache.usage()
    assert u.free_slots == 6 and u.external_fragmentation_slots == 6
    assert not cache.can_allocate([1])  # a max_model_len request needs 4 contiguous slots
    assert cache.can_allocate([1], max_tokens=2)  # a 3-slot one still fits
    assert cache.free_runs() == [(0, 3), (7, 3)]


def test_contiguous_cache_fills_the_first_hole_that_fits():
    cache = ContiguousKVCache(capacity_slots=12, max_model_len=4)
    for rid in "abc":
        cache.allocate(rid, [1])
    cache.free("a")
    cache.allocate("d", [1], max_tokens=1)  # 2 slots, first fit: the hole at 0
    assert cache.block_table("d") == [0, 1]


def test_contiguous_request_cannot_grow_past_its_reservation():
    cache = ContiguousKVCache(capacity_slots=8, max_model_len=4)
    cache.allocate("a", [1, 2, 3])
    cache.append("a", 4)
    assert not cache.can_append("a")


# -- property-based: random operation sequences ---------------------------------------------
_ops = st.lists(
    st.tuples(
        st.sampled_from(["allocate", "append", "free"]),
        st.integers(0, 5),  # which request
        st.lists(st.integers(0, 1), min_size=0, max_size=14),  # prompt from a 2-token vocabulary: lots of sharing
    ),
    max_size=60,
)


def _replay(cache, ops):
    """Apply the legal ones of `ops`; return the model: request id -> its tokens."""
    model: dict[str, list[int]] = {}
    for op, i, tokens in ops:
        rid = f"r{i}"
        if op == "allocate" and rid not in model and cache.can_allocate(tokens):
            cache.allocate(rid, tokens)
            model[rid] = list(tokens)
        elif op == "append" and rid in model and cache.can_append(rid):
            cache.append(rid, i % 2)
            model[rid].append(i % 2)
        elif op == "free" and rid in model:
            cache.free(rid)
            del model[rid]
        _check_paged(cache, model)
    return model


def _check_paged(cache: PagedKVCache, model: dict[str, list[int]]) -> None:
    bs = cache.block_size
    holders: dict[int, list[tuple[str, int]]] = {}
    for rid, tokens in model.items():
        table = cache.block_table(rid)
        assert cache.num_tokens(rid) == len(tokens) and len(table) == -(-len(tokens) // bs)
        for i, block_id in enumerate(table):
            holders.setdefault(block_id, []).append((rid, i))
    statuses = {}
    for cell in cache.pool_state():
        found = holders.get(cell.block_id, [])
        statuses[cell.block_id] = cell.status
        # reference count (the allocator's own counter, not the block tables it is kept from) == tables holding it
        assert cache._blocks[cell.block_id].ref_count == len(found) == len(cell.owners)
        assert (cell.status is BlockStatus.USED) == bool(found)
        if len(found) > 1:  # shared: a full block, same tokens at the same position in every holder
            contents = {tuple(model[rid][i * bs : (i + 1) * bs]) for rid, i in found}
            assert len(contents) == 1 and len(next(iter(contents))) == bs
            assert len({i for _, i in found}) == 1
    # Tokens a physical block holds, from the model's own lengths: block i of a request of n tokens holds
    # min(bs, n - i*bs); a shared block counts once (every holder agrees, checked above).
    tokens_in = {block_id: min(bs, len(model[rid]) - i * bs) for block_id, ((rid, i), *_) in holders.items()}
    free = sum(status is BlockStatus.FREE for status in statuses.values())
    cached = sum(status is BlockStatus.CACHED for status in statuses.values())
    assert (cache.num_used_blocks, cache.num_free_blocks, cache.num_cached_blocks) == (len(holders), free, cached)
    assert len(statuses) == cache.num_blocks and (cache.enable_prefix_caching or cached == 0)
    u = cache.usage()
    assert (u.reserved_slots, u.token_slots, u.internal_waste_slots) == (
        len(holders) * bs, sum(tokens_in.values()), len(holders) * bs - sum(tokens_in.values()))
    assert (u.free_slots, u.cached_slots, u.cached_blocks) == (free * bs, cached * bs, cached)
    assert (u.logical_tokens, u.num_requests) == (sum(map(len, model.values())), len(model))
    assert u.shared_blocks == sum(len(found) > 1 for found in holders.values())
    assert u.capacity_slots == cache.num_blocks * bs and u.reserved_unused_slots == u.external_fragmentation_slots == 0


@settings(max_examples=150, deadline=None)
@given(ops=_ops, num_blocks=st.integers(1, 10), prefix_caching=st.booleans())
# Always tried: a shared full block, then a block left cached once its last holder is gone.
@example(ops=[("allocate", 0, [0, 0, 0, 0, 1]), ("allocate", 1, [0, 0, 0, 0]), ("free", 0, []), ("free", 1, [])],
         num_blocks=4, prefix_caching=True)
def test_random_operations_keep_every_block_in_exactly_one_place(ops, num_blocks, prefix_caching):
    cache = PagedKVCache(num_blocks=num_blocks, block_size=4, enable_prefix_caching=prefix_caching)
    model = _replay(cache, ops)
    for rid in list(model):
        cache.free(rid)
    assert cache.num_used_blocks == 0
    assert cache.num_free_blocks + cache.num_cached_blocks == num_blocks
    if not prefix_caching:
        assert cache.num_cached_blocks == 0


@settings(max_examples=150, deadline=None)
@given(ops=_ops, capacity=st.integers(4, 40))
# Always tried: a 2-slot hole left where a short request ended (too short for a max_model_len request), appends
# up to a full reservation.
@example(ops=[("allocate", 1, [0]), ("allocate", 0, [0]), ("append", 1, []), ("free", 1, []), ("append", 0, []),
              ("append", 0, []), ("append", 0, []), ("append", 0, [])], capacity=8)
def test_random_operations_never_overlap_contiguous_reservations(ops, capacity):
    cache = ContiguousKVCache(capacity_slots=capacity, max_model_len=4)
    live: dict[str, list[int]] = {}  # the model: request id -> [slots it reserved, tokens it holds]
    for op, i, tokens in ops:
        rid, prompt, cap = f"r{i}", tokens[:3] or [0], i % 3 or None
        if op == "allocate" and rid not in live and cache.can_allocate(prompt, max_tokens=cap):
            cache.allocate(rid, prompt, max_tokens=cap)
            live[rid] = [4 if cap is None else min(4, len(prompt) + cap), len(prompt)]  # up to max_model_len
        elif op == "append" and rid in live and cache.can_append(rid):
            assert live[rid][1] < live[rid][0]  # room left in its reservation
            cache.append(rid, 0)
            live[rid][1] += 1
        elif op == "free" and rid in live:
            cache.free(rid)
            del live[rid]
        slots = [s for rid in live for s in cache.block_table(rid)]
        assert len(slots) == len(set(slots)) and all(0 <= s < capacity for s in slots)
        assert [(len(cache.block_table(rid)), cache.num_tokens(rid)) for rid in live] == [tuple(v) for v in live.values()]
        assert all(not cache.can_append(rid) for rid, (reserved, held) in live.items() if held == reserved)
        # Holes, from the slots the model's requests hold: runs of free slots in address order.
        holes = free_runs(set(slots), capacity)
        reserved, held = sum(v[0] for v in live.values()), sum(v[1] for v in live.values())
        u = cache.usage()
        assert (u.reserved_slots, u.token_slots, u.reserved_unused_slots, u.free_slots) == (
            reserved, held, reserved - held, capacity - reserved)
        assert u.external_fragmentation_slots == sum(n for n in holes if n < 4) and sum(holes) == capacity - reserved
        assert (u.logical_tokens, u.num_requests, u.internal_waste_slots) == (held, len(live), 0)
    for rid in live:
        cache.free(rid)
    assert cache.num_free_blocks == capacity and cache.free_runs() == [(0, capacity)]


def free_runs(held: set[int], num_slots: int) -> list[int]:
    """Lengths of the runs of slots (blocks, for a paged pool) in ``range(num_slots)`` not in ``held``, in address
    order: the tests' own count of holes, independent of the caches' (also used by tests/test_paged_kv_sim.py)."""
    holes, run = [], 0
    for slot in range(num_slots + 1):
        if slot < num_slots and slot not in held:
            run += 1
        elif run:
            holes.append(run)
            run = 0
    return holes
