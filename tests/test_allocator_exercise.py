"""helpers.paged.allocator_exercise: the learner's allocator replayed against the course's, step by step."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from helpers.paged.allocator_exercise import ALLOCATOR_HINTS, check_allocator, check_traces, grade_allocator

ROOT = Path(__file__).resolve().parent.parent


def solution():
    spec = importlib.util.spec_from_file_location("paged_allocator", ROOT / "docs" / "solutions" / "paged_allocator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MyAllocator


Solution = solution()


class Scaffold:
    """The notebook's cell as the learner finds it."""

    def __init__(self, num_blocks, block_size=16):
        self.block_size = block_size
        self.free_blocks = list(range(num_blocks))
        self.ref_count = [0] * num_blocks
        self.block_tables, self.num_tokens, self.prefix_blocks = {}, {}, {}

    def allocate(self, request_id, prompt_token_ids):
        raise NotImplementedError

    def append(self, request_id, token_id):
        raise NotImplementedError

    def free(self, request_id):
        raise NotImplementedError


class ForgetsToDecrement(Solution):
    """Gives a block back when it was held once, but never lowers a shared block's count."""

    def free(self, request_id):
        for block in self.block_tables.pop(request_id):
            if self.ref_count[block] == 1:
                self.ref_count[block] = 0
                self.free_blocks.append(block)
                self.prefix_blocks.pop(self.block_key.pop(block, None), None)
        del self.num_tokens[request_id]


class FreesSharedBlocks(Solution):
    """Gives every block back, whoever else holds it."""

    def free(self, request_id):
        for block in self.block_tables.pop(request_id):
            self.ref_count[block] = 0
            self.free_blocks.append(block)
            self.prefix_blocks.pop(self.block_key.pop(block, None), None)
        del self.num_tokens[request_id]


class KeepsStalePrefixes(Solution):
    """Frees blocks but leaves their keys in prefix_blocks."""

    def free(self, request_id):
        for block in self.block_tables.pop(request_id):
            self.ref_count[block] -= 1
            if self.ref_count[block] == 0:
                self.free_blocks.append(block)
        del self.num_tokens[request_id]


class NeverShares(Solution):
    def allocate(self, request_id, prompt_token_ids):
        self.prefix_blocks.clear()
        return super().allocate(request_id, prompt_token_ids)


class NewBlockEveryToken(Solution):
    def append(self, request_id, token_id):
        if not self.free_blocks:
            return False
        block = self.free_blocks.pop(0)
        self.ref_count[block] = 1
        self.block_tables[request_id].append(block)
        self.num_tokens[request_id] += 1
        return True


class AlwaysAdmits(Solution):
    def allocate(self, request_id, prompt_token_ids):
        try:
            super().allocate(request_id, prompt_token_ids)
        except IndexError:
            pass
        return True


class SharesPartBlocks(Solution):
    """Enters the partly filled last block in prefix_blocks too, so equal prompts share it."""

    def allocate(self, request_id, prompt_token_ids):
        tokens, bs = list(prompt_token_ids), self.block_size
        shared = self.prefix_blocks.get(tuple(tokens)) if len(tokens) % bs else None
        if shared is None or not super().allocate(request_id, tokens[: len(tokens) // bs * bs]):
            admitted = super().allocate(request_id, tokens)
            if admitted and len(tokens) % bs:
                self.prefix_blocks.setdefault(tuple(tokens), self.block_tables[request_id][-1])
            return admitted
        self.block_tables[request_id].append(shared)
        self.ref_count[shared] += 1
        self.num_tokens[request_id] = len(tokens)
        return True


class KeepsBlocksWhenRefused(Solution):
    def allocate(self, request_id, prompt_token_ids):
        admitted = super().allocate(request_id, prompt_token_ids)
        if not admitted and self.free_blocks:
            self.free_blocks.pop(0)  # taken before finding out the prompt does not fit
        return admitted


class KeysOnOwnTokens(Solution):
    """Keys a full block on its own tokens, not on the whole prefix up to its end."""

    def allocate(self, request_id, prompt_token_ids):
        bs, tokens = self.block_size, list(prompt_token_ids)
        keys = [tuple(tokens[i * bs:(i + 1) * bs]) for i in range(len(tokens) // bs)]
        shared = []
        for key in keys:
            if key not in self.prefix_blocks:
                break
            shared.append(self.prefix_blocks[key])
        if -(-len(tokens) // bs) - len(shared) > len(self.free_blocks):
            return False
        for block in shared:
            self.ref_count[block] += 1
        table = list(shared)
        for i in range(len(shared), -(-len(tokens) // bs)):
            block = self.free_blocks.pop(0)
            self.ref_count[block] = 1
            if i < len(keys):
                self.prefix_blocks[keys[i]] = block
                self.block_key[block] = keys[i]
            table.append(block)
        self.block_tables[request_id] = table
        self.num_tokens[request_id] = len(tokens)
        return True


def test_the_solution_agrees_with_the_course_on_every_trace():
    verdict = grade_allocator(Solution)
    assert verdict.ok is True, verdict.message


def test_the_unfilled_scaffold_is_not_yet_answered_and_prints_without_raising(capsys):
    assert grade_allocator(Scaffold).ok is None
    check_allocator(Scaffold)
    assert capsys.readouterr().out.startswith("✏️ Not yet: allocate still raises NotImplementedError")


def test_a_free_that_forgets_to_decrement_a_shared_block_is_named():
    verdict = grade_allocator(ForgetsToDecrement)
    assert verdict.ok is False and "step 6 (free 'a')" in verdict.message
    assert "ref_count 3 but 2 block tables hold it" in verdict.message


def test_freeing_a_block_another_request_holds_is_named():
    message = grade_allocator(FreesSharedBlocks).message
    assert "on your free list while 'c' holds it" in message and "count falls to 0" in message


def test_a_prefix_entry_left_behind_after_free_is_named():
    message = grade_allocator(KeepsStalePrefixes).message
    assert "found it through prefix_blocks, but it had been freed" in message


def test_no_sharing_and_too_many_blocks_and_admitting_past_the_pool_are_each_caught_where_they_first_show():
    assert "a block of its own in yours, the same block as block 0 of 'a'" in grade_allocator(NeverShares).message
    assert "step 4 (append to 'a')" in grade_allocator(NewBlockEveryToken).message
    message = grade_allocator(AlwaysAdmits).message
    assert "admitted 'f', the course's refuses it" in message and "0 were free" in message


def test_a_shared_partly_filled_block_and_a_refusal_that_keeps_blocks_are_named():
    message = grade_allocator(SharesPartBlocks).message
    assert "step 3 (allocate 'c'" in message and "block 2 of 'c' is the same block as block 2 of 'b'" in message
    assert "returned False but kept 1 block(s)" in grade_allocator(KeepsBlocksWhenRefused).message


def test_the_traces_exercise_sharing_refusals_and_frees():
    kinds = [op.kind for trace in check_traces() for op in trace.ops]
    assert {"allocate", "append", "free"} <= set(kinds) and len(kinds) > 300
    assert check_traces()[1].ops == check_traces()[1].ops  # seeded: the same every run


def test_hints_come_one_at_a_time_then_point_to_the_solution(capsys):
    for _ in range(5):
        ALLOCATOR_HINTS.next()
    lines = capsys.readouterr().out.splitlines()
    assert [line[:12] for line in lines[:4]] == [f"💡 Hint {i} of 4"[:12] for i in range(1, 5)]
    assert "docs/solutions/paged_allocator.py" in lines[4]


def test_a_key_made_of_the_blocks_own_tokens_is_caught_and_told_to_stand_for_the_whole_prefix():
    # x = A+B, y = C+B, w = A+B: w must share x's B; keyed on B alone it takes y's (the reviewer's [0, 4, 6])
    message = grade_allocator(KeysOnOwnTokens).message
    assert "On the second trace, step 3 (allocate 'w'" in message
    assert "block 1 of 'w' is the same block as block 1 of 'y' in yours" in message
    assert "the same block as block 1 of 'x' in the course's" in message
    assert "The key stands for the whole prefix" in message


def test_a_hand_trace_repeats_a_blocks_tokens_after_another_prefix():
    bs = 4
    for trace in check_traces()[:2]:
        assert trace.block_size == bs
    prompts = [op.tokens for op in check_traces()[1].ops if op.kind == "allocate"]
    blocks = [(p[:(i + 1) * bs], p[i * bs:(i + 1) * bs]) for p in prompts for i in range(len(p) // bs)]
    assert any(own == other_own and prefix != other_prefix
               for prefix, own in blocks for other_prefix, other_own in blocks)
