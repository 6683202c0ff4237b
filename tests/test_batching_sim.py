"""Static vs continuous batching simulator: hand-checked traces and properties over random ones."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.batching.sim import simulate_batching, simulate_continuous, simulate_static
from helpers.batching.step_time import StepTimeModel
from helpers.batching.trace import BatchRequest, lab_trace, mixed_length_trace

# Every step takes exactly one second: times and throughputs become step counts.
ONE_SECOND_STEPS = StepTimeModel(overhead_s=1.0, prefill_token_s=0.0, decode_seq_s=0.0)


def tiny_trace() -> list[BatchRequest]:
    """a: 1 output token, b: 3, c: 2; all with 4-token prompts, all at t=0."""
    return [BatchRequest("a", 0.0, 4, 1), BatchRequest("b", 0.0, 4, 3), BatchRequest("c", 0.0, 4, 2)]


@st.composite
def traces(draw):
    n = draw(st.integers(1, 10))
    reqs = [
        BatchRequest(
            f"r{i:02d}",
            draw(st.sampled_from([0.0, 0.0, 0.05, 0.3, 1.0, 2.5])),
            draw(st.integers(1, 700)),
            draw(st.integers(1, 40)),
        )
        for i in range(n)
    ]
    return sorted(reqs, key=lambda r: r.arrival_s)


def step_time_models(budgets: list[int]):
    return st.builds(
        StepTimeModel,
        overhead_s=st.floats(0.001, 0.05),
        prefill_token_s=st.floats(0.0, 0.001),
        decode_seq_s=st.floats(0.0, 0.01),
        max_num_batched_tokens=st.sampled_from(budgets),
    )


models = step_time_models([256, 2048])
# A budget above any trace's total prompt tokens (10 x 700): prefill is never chunked.
unchunked_models = step_time_models([8192])


def test_equal_outputs_arriving_together_give_equal_throughput_for_static_and_continuous():
    trace = [BatchRequest(f"r{i}", 0.0, 16, 8) for i in range(8)]
    static = simulate_static(trace, 4)
    continuous = simulate_continuous(trace, 4)
    assert len(static.steps) == len(continuous.steps) == 16  # two waves of 1 prefill + 7 decodes
    assert static.summary.output_tok_s == pytest.approx(continuous.summary.output_tok_s)


def test_static_utilization_of_a_tiny_trace_matches_hand_computation():
    r = simulate_static(tiny_trace(), 2, ONE_SECOND_STEPS)
    # batch 1 = a, b: a is done after prefill, b needs 2 more steps; batch 2 = c alone.
    assert [s.slots for s in r.steps] == [("a", "b"), (None, "b"), (None, "b"), ("c", None), ("c", None)]
    assert r.summary.slot_utilization == pytest.approx(6 / 10)  # 6 busy slot-steps of 2 x 5
    assert r.summary.output_tok_s == pytest.approx(6 / 5)  # 6 tokens in 5 one-second steps


def test_continuous_fills_a_freed_slot_at_the_next_step():
    r = simulate_continuous(tiny_trace(), 2, ONE_SECOND_STEPS)
    assert [s.slots for s in r.steps] == [("a", "b"), ("c", "b"), ("c", "b")]
    assert r.summary.slot_utilization == pytest.approx(1.0)
    assert r.summary.output_tok_s == pytest.approx(6 / 3)


def test_static_batch_finishes_only_when_its_longest_member_does():
    trace = [BatchRequest("short", 0.0, 4, 2), BatchRequest("long", 0.0, 4, 10), BatchRequest("next", 0.0, 4, 2)]
    r = {x.request_id: x for x in simulate_static(trace, 2, ONE_SECOND_STEPS).requests}
    assert r["short"].finish_s == 2.0
    assert r["next"].admitted_s == r["long"].finish_s == 10.0  # waited for the whole batch


def test_request_records_add_up():
    # Each record's times recomputed from the steps it was in: admitted at the start of its first step, first
    # token at the end of its last prefill step, finished at the end of its last step; arrivals from the trace.
    trace = mixed_length_trace(12, rate_per_s=2.0)
    r = simulate_continuous(trace, 4)
    arrival = {x.request_id: x.arrival_s for x in trace}
    for x in r.requests:
        steps = [s for s in r.steps if x.request_id in s.slots]
        admitted, finish = steps[0].start_s, steps[-1].end_s
        first_token = max(s.end_s for s in r.steps if x.request_id in s.prefill_ids)
        assert x.num_preemptions == 0 and [s.index for s in steps] == list(range(steps[0].index, steps[-1].index + 1))
        assert (x.arrival_s, x.admitted_s, x.finish_s) == pytest.approx((arrival[x.request_id], admitted, finish))
        assert (x.queue_wait_s, x.ttft_s, x.e2e_s) == pytest.approx(
            (admitted - arrival[x.request_id], first_token - arrival[x.request_id], finish - arrival[x.request_id]))
        assert 0 <= x.queue_wait_s < x.ttft_s <= x.e2e_s
    assert max(x.queue_wait_s for x in r.requests) > 0  # some waited for a slot: the wait is not 0 by construction


def test_steps_follow_each_other_without_overlap():
    r = simulate_static(mixed_length_trace(12, rate_per_s=0.5), 4)
    for a, b in zip(r.steps, r.steps[1:]):
        assert b.start_s >= a.end_s - 1e-12


def test_simulation_is_deterministic():
    trace = mixed_length_trace(20, rate_per_s=3.0, seed=7)
    assert simulate_continuous(trace, 4, num_kv_blocks=60) == simulate_continuous(trace, 4, num_kv_blocks=60)


@settings(max_examples=150, deadline=None)
@given(trace=traces(), max_num_seqs=st.integers(1, 6), model=unchunked_models)
def test_continuous_never_has_lower_throughput_than_static_when_prefill_is_not_chunked(trace, max_num_seqs, model):
    static = simulate_static(trace, max_num_seqs, model).summary.output_tok_s
    continuous = simulate_continuous(trace, max_num_seqs, model).summary.output_tok_s
    assert continuous >= static * (1 - 1e-9)


def test_with_chunked_prefill_decodes_can_delay_a_long_prompt_by_one_step():
    # The one exception hypothesis found: a 256-token budget. Continuous batching lets b
    # decode during c's prefill, which takes a token of c's budget per step; c's prompt
    # then needs a fourth step. Static batching prefills everything first: 5 steps, not 6.
    trace = [BatchRequest("a", 0.0, 1, 1), BatchRequest("b", 0.0, 66, 3), BatchRequest("c", 0.0, 700, 3)]
    model = StepTimeModel(overhead_s=1.0, prefill_token_s=0.0, decode_seq_s=0.0, max_num_batched_tokens=256)
    assert len(simulate_static(trace, 3, model).steps) == 5
    assert len(simulate_continuous(trace, 3, model).steps) == 6


@settings(max_examples=150, deadline=None)
@given(trace=traces(), max_num_seqs=st.integers(1, 6), model=models, blocks=st.sampled_from([None, 47, 80]))
def test_every_output_token_is_produced_once_and_running_never_exceeds_max_num_seqs(
    trace, max_num_seqs, model, blocks
):
    for policy in ("static", "continuous"):
        r = simulate_batching(trace, policy, max_num_seqs, model, num_kv_blocks=blocks)
        assert sum(s.num_tokens_produced for s in r.steps) == sum(x.output_len for x in trace)
        assert all(len(s.slots) - s.num_idle_slots <= max_num_seqs for s in r.steps)
        running = [[x for x in s.slots if x is not None] for s in r.steps]
        assert all(len(ids) == len(set(ids)) for ids in running)  # one slot per request
        for s, ids in zip(r.steps, running):  # a request computes in a step only from a slot, and one way
            assert s.prefill_ids | s.decode_ids <= set(ids) and not s.prefill_ids & s.decode_ids
            assert policy == "static" or len(s.decode_ids) == s.num_decode_seqs



def test_small_kv_pool_makes_requests_wait_for_memory():
    trace = lab_trace(16)  # prompts up to 512 tokens = 32 blocks of 16
    free = simulate_continuous(trace, 16)
    tight = simulate_continuous(trace, 16, num_kv_blocks=100)
    assert all(x.queue_wait_s == 0 for x in free.requests[:9])  # the first step's budget admits nine
    assert max(x.queue_wait_s for x in tight.requests) > max(x.queue_wait_s for x in free.requests)
    # Slots stand empty while requests wait: memory, not max_num_seqs, is the limit.
    assert any(s.num_idle_slots > 0 and s.num_waiting > 0 for s in tight.steps)
    assert tight.summary.output_tok_s < free.summary.output_tok_s


def test_tiny_kv_pool_preempts_the_newest_request_and_it_still_finishes():
    # Two 16-token prompts (one block each) in a pool of three blocks: a's 17th token takes
    # the last free block, so b, the newest, is preempted when it needs one too.
    trace = [BatchRequest("a", 0.0, 16, 20), BatchRequest("b", 0.0, 16, 20)]
    r = simulate_continuous(trace, 2, ONE_SECOND_STEPS, num_kv_blocks=3, block_size=16)
    rec = {x.request_id: x for x in r.requests}
    assert rec["a"].num_preemptions == 0 and rec["b"].num_preemptions >= 1
    assert r.steps[1].slots == ("a", None)
    assert sum(s.num_tokens_produced for s in r.steps) == 40
    # The recompute prefills b's prompt again, plus the token it had already produced.
    assert sum(s.num_prefill_tokens for s in r.steps) == 16 + 16 + 17


def test_a_request_larger_than_the_whole_pool_is_refused():
    with pytest.raises(ValueError, match="KV blocks"):
        simulate_continuous([BatchRequest("big", 0.0, 100, 10)], 1, num_kv_blocks=2, block_size=16)


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="policy"):
        simulate_batching(tiny_trace(), "dynamic", 2)


@pytest.mark.parametrize("trace, max_num_seqs, match", [
    ([], 2, "the trace is empty"),
    ([BatchRequest("a", 0.0, 4, 1)], 0, "max_num_seqs must be a positive integer"),
])
def test_bad_inputs_are_refused_with_a_value_error_that_says_what_to_pass(trace, max_num_seqs, match):
    for simulate in (simulate_static, simulate_continuous):
        with pytest.raises(ValueError, match=match):
            simulate(trace, max_num_seqs)


# ----- a slot held while computing nothing (static batching's prefill phase) -----------------------
def prefill_queue_trace() -> list[BatchRequest]:
    """Three 256-token prompts and a 256-token step budget: one prompt per step."""
    return [BatchRequest(name, 0.0, 256, 2) for name in "abc"]


ONE_PROMPT_A_STEP = StepTimeModel(overhead_s=1.0, prefill_token_s=0.0, decode_seq_s=0.0, max_num_batched_tokens=256)


def test_static_members_waiting_for_the_batchs_prefills_are_recorded_as_neither_prefilling_nor_decoding():
    r = simulate_static(prefill_queue_trace(), 3, ONE_PROMPT_A_STEP)
    assert [s.slots for s in r.steps] == [("a", "b", "c")] * 4
    assert [sorted(s.prefill_ids) for s in r.steps] == [["a"], ["b"], ["c"], []]
    assert [sorted(s.decode_ids) for s in r.steps] == [[], [], [], ["a", "b", "c"]]
    assert [s.num_busy_slots for s in r.steps] == [1, 1, 1, 3]


def test_static_utilization_counts_only_slots_that_compute():
    # 6 computing slot-steps of 3 x 4; counting every held slot (as before) gave 12 of 12
    r = simulate_static(prefill_queue_trace(), 3, ONE_PROMPT_A_STEP)
    assert r.summary.slot_utilization == pytest.approx(6 / 12)


def test_continuous_admits_a_request_only_with_budget_so_every_held_slot_computes():
    r = simulate_continuous(prefill_queue_trace(), 3, ONE_PROMPT_A_STEP)
    first = r.steps[0]
    assert first.slots == ("a", None, None) and first.prefill_ids == {"a"} and first.decode_ids == frozenset()
    # step 2: a decodes (1 token) and b's prompt takes the other 255; c waits outside the batch, not in a slot
    assert r.steps[1].slots == ("a", "b", None) and r.steps[1].decode_ids == {"a"} and r.steps[1].prefill_ids == {"b"}
    assert all(s.num_busy_slots == len(s.slots) - s.num_idle_slots for s in r.steps)
