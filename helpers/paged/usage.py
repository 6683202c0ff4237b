"""What both KV-cache allocators report: where each slot of the pool went (pure data, no logic).

`BlockStatus` (free, used, cached), `PoolCell` (one drawable piece of the pool) and
`KVUsage` (a snapshot of slots reserved, holding tokens, wasted, free). Filled in by
`helpers.paged.cache.PagedKVCache` and `helpers.paged.contiguous.ContiguousKVCache`; read
by the simulator (`helpers.paged.sim`) and the drawings (`helpers.paged.draw`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class BlockStatus(enum.Enum):
    """Where a physical block is. Every block is in exactly one of these states."""

    FREE = "free"  # holds nothing; the next block handed out comes from here
    USED = "used"  # in at least one live request's block table (ref_count >= 1)
    CACHED = "cached"  # no live user, but keeps a full block's tokens for a later matching prompt


@dataclass(frozen=True)
class PoolCell:
    """One drawable piece of the KV pool: a block (paged) or a run of slots (contiguous).

    Slots `first_slot .. first_slot + num_slots - 1`; the first `num_tokens` hold tokens.
    `owners` lists the live requests that use it (more than one: shared). `block_id` is
    the physical block id for the paged cache and None for the contiguous one.

    >>> PoolCell(first_slot=32, num_slots=16, status=BlockStatus.USED, owners=("r1",), num_tokens=5, block_id=2)
    PoolCell(first_slot=32, num_slots=16, status=<BlockStatus.USED: 'used'>, owners=('r1',), num_tokens=5, block_id=2)
    """

    first_slot: int
    num_slots: int
    status: BlockStatus
    owners: tuple[str, ...]
    num_tokens: int
    block_id: int | None


@dataclass(frozen=True)
class KVUsage:
    """A snapshot of where the KV slots went; the same type for both allocators.

    Every slot of the pool is exactly one of: reserved for a live request, free, or held
    by a cached block, so `capacity_slots == reserved_slots + free_slots + cached_slots`.
    Reserved slots split into `token_slots + internal_waste_slots + reserved_unused_slots`.
    Shared blocks count once (physical slots), `logical_tokens` counts every request's tokens.

    >>> u = KVUsage(capacity_slots=64, reserved_slots=48, token_slots=37, internal_waste_slots=11,
    ...             reserved_unused_slots=0, external_fragmentation_slots=0, free_slots=16,
    ...             cached_slots=0, logical_tokens=37, num_requests=1, shared_blocks=0, cached_blocks=0)
    >>> round(u.utilization, 3)  # 37 tokens in 3 blocks of 16
    0.771
    """

    capacity_slots: int  # the whole pool, in token slots
    reserved_slots: int  # slots set aside for live requests
    token_slots: int  # of those, slots that hold a token's keys and values
    internal_waste_slots: int  # paged: empty tail of each partly filled last block
    reserved_unused_slots: int  # contiguous: reserved up front for tokens not (yet) generated
    external_fragmentation_slots: int  # contiguous: free slots in holes too short for a max_model_len request
    free_slots: int  # slots nobody holds
    cached_slots: int  # paged + prefix caching: slots in evictable cached blocks
    logical_tokens: int  # tokens summed over live requests (a shared prefix counts once per request)
    num_requests: int  # live requests
    shared_blocks: int  # blocks in more than one block table
    cached_blocks: int  # evictable blocks kept for prefix caching

    @property
    def utilization(self) -> float:
        """Fraction of reserved slots that hold a token (0.0 when nothing is reserved)."""
        return self.token_slots / self.reserved_slots if self.reserved_slots else 0.0
