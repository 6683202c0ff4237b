"""The traces notebook 03's allocator check replays (:mod:`helpers.paged.allocator_exercise`): two short ones made
by hand, then seeded random ones whose pools run out, drawn so that only requests the course's allocator admitted
get appends and frees.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from helpers.paged.cache import PagedKVCache

VOCAB = 32_000


@dataclass(frozen=True)
class Op:
    """One step of a trace: ``allocate`` (tokens: the prompt), ``append`` (tokens: the one new token) or ``free``."""

    kind: str
    request_id: str
    tokens: tuple[int, ...] = ()

    def __str__(self) -> str:
        if self.kind == "allocate":
            return f"allocate {self.request_id!r} ({len(self.tokens)} tokens)"
        return f"append to {self.request_id!r}" if self.kind == "append" else f"free {self.request_id!r}"


@dataclass(frozen=True)
class AllocatorTrace:
    name: str
    block_size: int
    num_blocks: int
    ops: tuple[Op, ...]


def story_trace() -> AllocatorTrace:
    """The check's first trace, short enough to follow by hand: blocks of 4, a pool of 8.

    'a', 'b' and 'c' share a two-block system prompt ('b' and 'c' are the same prompt, but their partly filled
    last blocks are their own); 'd' is that prompt exactly, so its first append needs a block; 'e' takes the whole
    pool, so 'f' is refused and 'e''s third append finds no block.
    """
    system = tuple(range(100, 108))
    ops = [Op("allocate", "a", system + (1, 2, 3)), Op("allocate", "b", system + (4, 5)),
           Op("allocate", "c", system + (4, 5)), Op("append", "a", (6,)), Op("append", "a", (7,)), Op("free", "a"),
           Op("allocate", "d", system), Op("append", "d", (8,)), Op("free", "b"), Op("free", "c"), Op("free", "d"),
           Op("allocate", "e", tuple(range(200, 230))), Op("allocate", "f", (9, 9, 9)), Op("append", "e", (10,)),
           Op("append", "e", (11,)), Op("append", "e", (12,))]
    return AllocatorTrace("the first trace", 4, 8, tuple(ops))


def same_block_trace() -> AllocatorTrace:
    """Blocks of 4, a pool of 10: block B comes after A in 'x' and 'w', after C in 'y', first in 'v'. Only 'w' shares
    (with 'x'); random traces never repeat a block's tokens after another prefix, so they cannot tell a key made of the
    whole prefix from one made of the block's own tokens."""
    a, b, c = (1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11, 12)
    ops = [Op("allocate", "x", a + b + (13,)), Op("allocate", "y", c + b + (14,)), Op("allocate", "w", a + b + (15,)),
           Op("allocate", "v", b + (16,))]
    return AllocatorTrace("the second trace", 4, 10, tuple(ops))


def random_allocator_trace(seed: int, block_size: int = 4, num_blocks: int = 10, num_ops: int = 60) -> AllocatorTrace:
    """Seeded ops: new requests (a third start with a system prompt of 1-3 whole blocks), appends, frees.

    The course's allocator decides, as the trace is drawn, which requests are live: only those get appends and frees.
    """
    rng = random.Random(seed)
    systems = [tuple(rng.randrange(VOCAB) for _ in range(block_size * k)) for k in (1, 2, 3)]
    cache = PagedKVCache(num_blocks, block_size, enable_prefix_caching=True)
    live: list[str] = []
    ops: list[Op] = []
    for _ in range(num_ops):
        roll = rng.random()
        if not live or roll < 0.3:
            rid = _name(sum(op.kind == "allocate" for op in ops))
            system = rng.choice(systems) if rng.random() < 0.6 else ()
            own = tuple(rng.randrange(VOCAB) for _ in range(rng.randint(0 if system else 1, 2 * block_size)))
            ops.append(Op("allocate", rid, system + own))
            if cache.can_allocate(system + own):
                cache.allocate(rid, system + own)
                live.append(rid)
        elif roll < 0.85:
            rid, token = rng.choice(live), rng.randrange(VOCAB)
            ops.append(Op("append", rid, (token,)))
            if cache.can_append(rid):
                cache.append(rid, token)
        else:
            rid = rng.choice(live)
            ops.append(Op("free", rid))
            cache.free(rid)
            live.remove(rid)
    return AllocatorTrace(f"random trace {seed} (blocks of {block_size}, a pool of {num_blocks})",
                          block_size, num_blocks, tuple(ops))


def check_traces() -> list[AllocatorTrace]:
    """The traces the check replays, in order."""
    sizes = ((4, 10), (4, 6), (2, 12), (16, 8), (4, 10), (8, 7))
    return [story_trace(), same_block_trace()] + [random_allocator_trace(seed, bs, n) for seed, (bs, n) in enumerate(sizes)]


def _name(i: int) -> str:
    return chr(ord("a") + i) if i < 26 else f"r{i}"
