"""The naive KV-cache allocator vLLM replaced: one contiguous run of slots per request, reserved up front.

Taught in the PagedAttention notebook next to `helpers.paged.cache.PagedKVCache`; it answers
the same verbs and reports the same `helpers.paged.usage.KVUsage`, so `helpers.paged.sim`
can replay one trace against either. Slots only: no tensors are stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from helpers import validate
from helpers.paged.usage import BlockStatus, KVUsage, PoolCell


@dataclass
class _Reservation:
    first_slot: int
    num_slots: int  # reserved up front, never grows
    token_ids: list[int]


class ContiguousKVCache:
    """The naive scheme: each request reserves one contiguous run of slots up front.

    The run is `max_model_len` slots (or `len(prompt) + max_tokens`, capped at
    `max_model_len`, when the request says how many tokens it may generate), found
    first-fit in a pool of `capacity_slots`. Tokens then fill it left to right; the rest
    stays reserved until the request finishes. When runs of different sizes come and go,
    free slots can be scattered in holes too short for a new request: external
    fragmentation, reported by `usage()`.

    It answers the same verbs as `PagedKVCache`; a slot plays the part of a block
    (`block_size == 1`), so a block table is the run's slot ids. Leaves out compaction
    (moving runs to merge holes) and any sharing.

    >>> cache = ContiguousKVCache(capacity_slots=10, max_model_len=4)
    >>> cache.allocate("a", [7, 8])
    >>> cache.block_table("a"), cache.usage().reserved_unused_slots  # 4 reserved, 2 hold tokens
    ([0, 1, 2, 3], 2)
    """

    def __init__(self, capacity_slots: int, max_model_len: int) -> None:
        capacity_slots = validate.positive_int(capacity_slots, "capacity_slots", hint="It is the pool's size in slots.")
        max_model_len = validate.positive_int(max_model_len, "max_model_len")
        if max_model_len > capacity_slots:
            raise validate.InvalidArgumentError(
                f"max_model_len={max_model_len} is more than the whole pool ({capacity_slots} slots): no request "
                "could ever be admitted. Pass a smaller max_model_len or a larger capacity_slots.")
        self.capacity_slots = capacity_slots
        self.max_model_len = max_model_len
        self._runs: dict[str, _Reservation] = {}  # live requests, in admission order

    @property
    def num_blocks(self) -> int:
        return self.capacity_slots

    @property
    def block_size(self) -> int:
        return 1

    @property
    def num_used_blocks(self) -> int:
        return sum(r.num_slots for r in self._runs.values())

    @property
    def num_free_blocks(self) -> int:
        return self.capacity_slots - self.num_used_blocks

    def block_table(self, request_id: str) -> list[int]:
        run = self._runs[request_id]
        return list(range(run.first_slot, run.first_slot + run.num_slots))

    def num_tokens(self, request_id: str) -> int:
        return len(self._runs[request_id].token_ids)

    def reservation_slots(self, num_prompt_tokens: int, max_tokens: int | None = None) -> int:
        """Slots reserved for a request: its longest possible length, capped at max_model_len."""
        if max_tokens is None:
            return self.max_model_len
        return min(self.max_model_len, num_prompt_tokens + max_tokens)

    def free_runs(self) -> list[tuple[int, int]]:
        """Holes as (first_slot, num_slots), in address order."""
        holes, cursor = [], 0
        for run in sorted(self._runs.values(), key=lambda r: r.first_slot):
            if run.first_slot > cursor:
                holes.append((cursor, run.first_slot - cursor))
            cursor = run.first_slot + run.num_slots
        if cursor < self.capacity_slots:
            holes.append((cursor, self.capacity_slots - cursor))
        return holes

    def can_allocate(self, token_ids: Sequence[int], max_tokens: int | None = None) -> bool:
        """True when some single hole is long enough; total free slots are not enough."""
        need = self.reservation_slots(len(token_ids), max_tokens)
        return len(token_ids) <= need and any(n >= need for _, n in self.free_runs())

    def allocate(self, request_id: str, token_ids: Sequence[int], max_tokens: int | None = None) -> None:
        """Reserve the request's whole run in the first hole that fits. Check `can_allocate` first."""
        if request_id in self._runs:
            raise ValueError(f"request {request_id!r} is already live")
        if not self.can_allocate(token_ids, max_tokens):
            raise RuntimeError(f"no hole for {request_id!r}: call can_allocate() before allocate()")
        need = self.reservation_slots(len(token_ids), max_tokens)
        first = next(start for start, n in self.free_runs() if n >= need)
        self._runs[request_id] = _Reservation(first, need, list(token_ids))
        self.check_invariants()

    def can_append(self, request_id: str) -> bool:
        run = self._runs[request_id]
        return len(run.token_ids) < run.num_slots

    def append(self, request_id: str, token_id: int) -> None:
        if not self.can_append(request_id):
            raise RuntimeError(f"{request_id!r} has filled its reservation: call can_append() first")
        self._runs[request_id].token_ids.append(token_id)

    def free(self, request_id: str) -> None:
        del self._runs[request_id]

    def usage(self) -> KVUsage:
        reserved = self.num_used_blocks
        tokens = sum(len(r.token_ids) for r in self._runs.values())
        holes = self.free_runs()
        return KVUsage(
            capacity_slots=self.capacity_slots,
            reserved_slots=reserved,
            token_slots=tokens,
            internal_waste_slots=0,  # no blocks, so no partly filled last block
            reserved_unused_slots=reserved - tokens,
            external_fragmentation_slots=sum(n for _, n in holes if n < self.max_model_len),
            free_slots=self.capacity_slots - reserved,
            cached_slots=0,
            logical_tokens=tokens,
            num_requests=len(self._runs),
            shared_blocks=0,
            cached_blocks=0,
        )

    def pool_state(self) -> tuple[PoolCell, ...]:
        """Reserved runs and free holes as `PoolCell`s, in address order (for drawing)."""
        cells = [PoolCell(s, n, BlockStatus.FREE, (), 0, None) for s, n in self.free_runs()]
        cells += [
            PoolCell(r.first_slot, r.num_slots, BlockStatus.USED, (rid,), len(r.token_ids), None)
            for rid, r in self._runs.items()
        ]
        return tuple(sorted(cells, key=lambda c: c.first_slot))

    def check_invariants(self) -> None:
        cursor = 0
        for run in sorted(self._runs.values(), key=lambda r: r.first_slot):
            assert run.first_slot >= cursor, "two reservations overlap"
            assert len(run.token_ids) <= run.num_slots
            cursor = run.first_slot + run.num_slots
        assert cursor <= self.capacity_slots
