"""Notebook 03's allocator exercise: the learner writes `allocate` / `append` / `free`; the check replays traces.

The learner's class (the notebook's ``MyAllocator`` scaffold) keeps plain state that the check reads:
``free_blocks`` (ids of free blocks), ``ref_count`` (block id -> block tables that hold it) and
``block_tables`` (request id -> block ids). Its verbs answer as a scheduler needs: ``allocate(request_id,
prompt_token_ids)`` and ``append(request_id, token_id)`` return True, or False when the pool is out of
blocks (changing nothing); ``free(request_id)`` gives the request's references back.

:func:`grade_allocator` replays the traces of :mod:`helpers.paged.allocator_traces` (two short hand-made ones,
then seeded random ones: interleaved allocations, appends and frees; prompts that share whole-block system
prompts; pools that run out) against the learner's class and against the course's
``PagedKVCache(enable_prefix_caching=True)``, comparing after every step what was admitted, blocks free, each
request's blocks, which of them are shared, and reference counts. It stops at the first difference and says it
in words. Block ids are not compared: any free block will do.

The course's allocator keeps a freed prefix block as *cached* (revived by a later matching prompt): cached
blocks count as free here. It also shares full blocks that decoding filled, which the traces never ask for.
A solution: ``docs/solutions/paged_allocator.py``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from helpers.feedback import Feedback, Hints, graded, show
from helpers.paged.allocator_traces import AllocatorTrace, Op, check_traces
from helpers.paged.cache import PagedKVCache
from helpers.paged.kv_math import blocks_for


# ----- what the two allocators hold, in comparable form ---------------------------------------------
def _shape(tables: dict[str, list[int]]) -> dict[str, tuple[tuple[str, int] | None, ...]]:
    """Per request, per block: the first (request, index) holding the same physical block, or None if this is it."""
    first: dict[int, tuple[str, int]] = {}
    shape = {}
    for rid, table in tables.items():
        row = []
        for i, block in enumerate(table):
            row.append(first.get(block))
            first.setdefault(block, (rid, i))
        shape[rid] = tuple(row)
    return shape


def _apply_course(cache: PagedKVCache, op: Op, live: list[str]) -> bool:
    if op.kind == "allocate":
        if not cache.can_allocate(op.tokens):
            return False
        cache.allocate(op.request_id, op.tokens)
        live.append(op.request_id)
    elif op.kind == "append":
        if not cache.can_append(op.request_id):
            return False
        cache.append(op.request_id, op.tokens[0])
    else:
        cache.free(op.request_id)
        live.remove(op.request_id)
    return True


def _why_allocate(op: Op, block_size: int, tokens: dict[str, list[int]], free: int) -> str:
    """Why the course's allocator admits or refuses `op`, from the pool as it was before it."""
    full = len(op.tokens) // block_size
    shared = max((_common_blocks(op.tokens, held, block_size, full) for held in tokens.values()), default=0)
    need = blocks_for(len(op.tokens), block_size)
    return (f"its {len(op.tokens)} tokens need {need} block{'s' * (need != 1)} of {block_size}, {shared} of them "
            f"shared with a live request's prompt (full blocks whose whole prefix matches), so {need - shared} new, "
            f"and {free} were free")


def _common_blocks(prompt: tuple[int, ...], held: list[int], block_size: int, full: int) -> int:
    n = 0
    while n < full and len(held) >= (n + 1) * block_size and \
            tuple(held[n * block_size:(n + 1) * block_size]) == prompt[n * block_size:(n + 1) * block_size]:
        n += 1
    return n


def _compare(mine: Any, cache: PagedKVCache, op: Op, answer: Any, expected: bool, live: list[str],
             why: str, num_blocks: int, tokens: dict[str, list[int]]) -> str | None:
    """The first way the learner's allocator differs from the course's after `op`, in words; None if none.

    `why` says why the course's allocator admitted or refused an allocation, from the pool before it; `tokens`: what
    each live request holds."""
    free, tables = cache.num_free_blocks + cache.num_cached_blocks, {rid: cache.block_table(rid) for rid in live}
    if op.kind != "free" and answer is not True and answer is not False:
        return f"{op.kind} returned {answer!r}: return True when it succeeds, False when the pool is out of blocks."
    if op.kind == "allocate" and answer != expected:
        did, does = ("admitted", "refuses") if answer else ("refused", "admits")
        return (f"your allocator {did} {op.request_id!r}, the course's {does} it: {why}. "
                + ("Refuse (return False, changing nothing) when fewer are free than needed." if answer else
                   "Count only the blocks not found through prefix_blocks."))
    if op.kind == "append" and answer != expected:
        n = cache.num_tokens(op.request_id)
        return (f"your append {'stored' if answer else 'refused'} the token, the course's "
                f"{'refuses' if answer else 'stores'} it: {op.request_id!r} holds {n} tokens"
                + (" and no block is free. A token needs a new block only when the last one is full; when none is "
                   "free, return False and change nothing." if answer else
                   ". A new block is needed only when the tokens stored are a multiple of block_size."))
    mine_tables = {rid: list(t) for rid, t in mine.block_tables.items()}
    if set(mine_tables) != set(tables):
        extra, missing = sorted(set(mine_tables) - set(tables)), sorted(set(tables) - set(mine_tables))
        return (f"block_tables holds {', '.join(map(repr, extra))}, which the course's has freed or never admitted."
                if extra else f"block_tables lacks {', '.join(map(repr, missing))}, which the course's holds.")
    free_list = list(mine.free_blocks)
    twice = [b for b, n in Counter(free_list).items() if n > 1]
    if twice:
        return f"block {twice[0]} is on your free list twice: give a block back only when its count falls to 0."
    held = {b: rid for rid, t in mine_tables.items() for b in t}
    both = [b for b in free_list if b in held]
    if both:
        return (f"block {both[0]} is on your free list while {held[both[0]]!r} holds it. " + (
            "The prompt found it through prefix_blocks, but it had been freed: when free gives a block back, its "
            "key must leave prefix_blocks." if op.kind == "allocate" else
            "A block goes back on the free list only when its count falls to 0: other requests may still hold it."))
    for rid, table in tables.items():
        if len(mine_tables[rid]) != len(table):
            return (f"{rid!r} holds {len(mine_tables[rid])} blocks in yours, {len(table)} in the course's, "
                    f"for {cache.num_tokens(rid)} tokens in blocks of {cache.block_size}. " + (
                        "A token needs a new block only when the last one is full." if op.kind == "append" else
                        "A prompt needs one block per block_size tokens, rounded up."))
    mine_shape, course_shape = _shape(mine_tables), _shape(tables)
    for rid in tables:
        for i, (a, b) in enumerate(zip(mine_shape[rid], course_shape[rid])):
            if a != b:
                def say(s):
                    return f"the same block as block {s[1]} of {s[0]!r}" if s else "a block of its own"
                bs, own = cache.block_size, tokens[rid]
                other = tokens[a[0]][:(a[1] + 1) * bs] if a else []
                if other[-bs:] == own[i * bs:(i + 1) * bs] and other != own[:(i + 1) * bs]:
                    return (f"block {i} of {rid!r} is {say(a)} in yours, {say(b)} in the course's: they hold the same "
                            "tokens, but after different ones. The key stands for the whole prefix, "
                            "tuple(tokens[:(i + 1) * block_size]), not for the block's own tokens.")
                return (f"block {i} of {rid!r} is {say(a)} in yours, {say(b)} in the course's. Only full prompt "
                        "blocks whose whole prefix matches are shared; a partly filled block never is.")
    counts = Counter(b for t in mine_tables.values() for b in t)
    for b in sorted(set(counts) | {b for b in range(num_blocks) if mine.ref_count[b]}):
        if mine.ref_count[b] != counts[b]:
            verb = {"free": "free must lower the count of every block in the request's table",
                    "allocate": "allocate must raise the count of every block it puts in a table, shared or new",
                    }.get(op.kind, "a new block starts with a count of 1")
            holders = f"{counts[b]} block table{'s' * (counts[b] != 1)} hold{'s' * (counts[b] == 1)}"
            return f"block {b} has ref_count {mine.ref_count[b]} but {holders} it: {verb}."
    if len(free_list) != free:
        leaked = num_blocks - len(free_list) - len(counts)
        why = "."
        if leaked and answer is False:
            why = f": {op.kind} returned False but kept {leaked} block(s). A refusal must change nothing."
        elif leaked:
            why = (f": {leaked} block(s) are in no table and not on the free list. Every block whose count falls "
                   "to 0 goes back on the free list.")
        return f"your allocator has {len(free_list)} free blocks, the course's has {free}{why}"
    return None


def _replay(cls: Any, trace: AllocatorTrace) -> Feedback | None:
    mine = cls(trace.num_blocks, trace.block_size)
    cache = PagedKVCache(trace.num_blocks, trace.block_size, enable_prefix_caching=True)
    live: list[str] = []
    tokens: dict[str, list[int]] = {}  # what each live request holds, for saying why an allocation fits
    for step, op in enumerate(trace.ops, 1):
        where = f"On {trace.name}, step {step} ({op})"
        try:
            method = getattr(mine, op.kind)
            answer = method(op.request_id, op.tokens) if op.kind == "allocate" else (
                method(op.request_id, op.tokens[0]) if op.kind == "append" else method(op.request_id))
        except NotImplementedError:
            return Feedback(None, f"Not yet: {op.kind} still raises NotImplementedError. Fill it in and run the "
                                  "cell again.")
        except Exception as error:  # noqa: BLE001 (the learner's code may raise anything; say where)
            return Feedback(False, f"{where}: your {op.kind} raised {type(error).__name__}: {error}.")
        if answer is None and step == 1 and not mine.block_tables:  # bodies still `...` or `pass`
            return Feedback(None, "Not yet: allocate does nothing so far (it returns None). Fill in the three "
                                  "methods and run the cell again.")
        why = _why_allocate(op, trace.block_size, tokens, cache.num_free_blocks + cache.num_cached_blocks) \
            if op.kind == "allocate" else ""
        expected = _apply_course(cache, op, live)
        if expected and op.kind != "free":
            tokens.setdefault(op.request_id, []).extend(op.tokens)
        elif op.kind == "free":
            del tokens[op.request_id]
        problem = _compare(mine, cache, op, answer, expected, live, why, trace.num_blocks, tokens)
        if problem:
            before = "; ".join(f"{i} {o}" for i, o in enumerate(trace.ops[max(0, step - 6):step - 1], max(1, step - 5)))
            return Feedback(False, f"{where}: {problem}" + (f"\n   The steps before: {before}." if before else ""))
    return None


def grade_allocator(cls: Any) -> Feedback:
    """Replay every check trace against ``cls`` and the course's allocator; the first difference, or a pass."""
    traces = check_traces()
    for trace in traces:
        verdict = _replay(cls, trace)
        if verdict is not None:
            return verdict
    steps = sum(len(t.ops) for t in traces)
    return Feedback(True, f"Your allocator agrees with the course's after every one of {steps} steps of "
                          f"{len(traces)} traces: admissions and refusals, free blocks, block tables, sharing and "
                          "reference counts.")


def check_allocator(cls: Any) -> None:
    """Grade the learner's allocator class and print the verdict (never raises)."""
    show(graded(grade_allocator, cls))


ALLOCATOR_HINTS = Hints([
    ("Change nothing before you know the answer. allocate first finds the prompt's full blocks already stored "
     "(stop at the first one missing), counts the new blocks it still needs, and returns False if fewer are free; "
     "only then does it take blocks."),
    ("Full block i of the prompt holds tokens[i * block_size:(i + 1) * block_size], for i < len(tokens) // "
     "block_size. A key for prefix_blocks that stands for the whole prefix up to its end: "
     "tuple(tokens[:(i + 1) * block_size]). A prompt needs -(-len(tokens) // block_size) blocks in all."),
    ("A shared block gets ref_count + 1; a new block comes off free_blocks with ref_count 1 and, if it is a full "
     "block, goes into prefix_blocks. append needs a new block only when num_tokens is a multiple of block_size."),
    ("free lowers the count of every block in the request's table; a block whose count reaches 0 goes back on "
     "free_blocks, and its key must leave prefix_blocks (keep a map from block id to key), or a later prompt "
     "would share a block someone else has taken."),
], solution="docs/solutions/paged_allocator.py")
