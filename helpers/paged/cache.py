"""vLLM's paged KV-cache allocator in miniature: fixed-size blocks, a free list, block tables.

Taught in the PagedAttention notebook; replayed step by step by `helpers.paged.sim` and
drawn by `helpers.paged.draw`. The naive scheme it replaced is
`helpers.paged.contiguous.ContiguousKVCache`.

Both classes answer the same verbs a scheduler uses (`can_allocate` / `allocate` /
`can_append` / `append` / `free`) and report the same `KVUsage` snapshot, so one
simulation can run either. They manage *slots* only: one slot holds the keys and values
of one token (for every layer and head). No tensors are stored, no attention is computed.

What they leave out: copy-on-write (only full blocks are ever shared, and nobody writes
into a full block, so no copy is ever needed), beam search, swapping to CPU memory,
watermarks, and multi-modal hashes. Block hashes use Python's `hash` (deterministic for
tuples of ints); vLLM can use sha256 to make collisions practically impossible.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from helpers import validate
from helpers.paged.kv_math import blocks_for
from helpers.paged.usage import BlockStatus, KVUsage, PoolCell

_NO_PARENT_HASH = 0  # chain seed for a prompt's first block (hash(None) varies per process)


def hash_block_tokens(parent_hash: int | None, token_ids: Sequence[int]) -> int:
    """Identity of a full block: its tokens chained with the previous block's hash.

    Chaining makes a block's hash stand for the whole prefix up to its end, so two prompts
    share block i only if they agree on every token before it, as in vLLM.

    >>> hash_block_tokens(None, [1, 2]) == hash_block_tokens(None, (1, 2))
    True
    >>> hash_block_tokens(hash_block_tokens(None, [1, 2]), [3, 4]) == hash_block_tokens(None, [3, 4])
    False
    """
    seed = _NO_PARENT_HASH if parent_hash is None else parent_hash
    return hash((seed, *token_ids))


@dataclass
class _Block:
    block_id: int
    status: BlockStatus = BlockStatus.FREE
    ref_count: int = 0  # block tables that hold this block
    num_tokens: int = 0  # slots filled, 0..block_size
    block_hash: int | None = None  # set once full, and only with prefix caching on


@dataclass
class _Sequence:
    token_ids: list[int]  # prompt, then generated tokens
    block_table: list[int]  # logical block i -> physical block id


class PagedKVCache:
    """vLLM's block manager in miniature: fixed-size blocks, a free list, block tables.

    A request's tokens live in blocks of `block_size` slots anywhere in the pool; its block
    table maps logical block i (tokens i*block_size ..) to a physical block. Blocks are
    taken when needed (the prompt's at `allocate`, then one more each time `append` crosses
    a block boundary) and given back at `free`.

    With `enable_prefix_caching=True`, full blocks are identified by `hash_block_tokens`:
    a new prompt whose leading full blocks match live or cached blocks shares them
    (reference counted, no new memory). A block whose last user frees it becomes CACHED:
    a later matching prompt revives it; otherwise it is evicted, least recently used
    first, when a fresh block is needed and no FREE block is left. Partly filled blocks
    are never shared.

    Leaves out: copy-on-write, swapping, watermarks, per-layer tensors.

    >>> cache = PagedKVCache(num_blocks=4, block_size=16)
    >>> cache.allocate("r1", list(range(37)))  # 37 tokens -> 3 blocks (16 + 16 + 5)
    >>> cache.block_table("r1"), cache.num_free_blocks
    ([0, 1, 2], 1)
    """

    def __init__(self, num_blocks: int, block_size: int = 16, enable_prefix_caching: bool = False) -> None:
        num_blocks = validate.positive_int(num_blocks, "num_blocks", hint="It is the pool's size in blocks.")
        self._block_size = validate.positive_int(block_size, "block_size", hint="It is tokens per block, e.g. 16.")
        self.enable_prefix_caching = enable_prefix_caching
        self._blocks = [_Block(i) for i in range(num_blocks)]
        self._free_ids: deque[int] = deque(range(num_blocks))  # FREE blocks, handed out from the left
        self._cached_ids: OrderedDict[int, None] = OrderedDict()  # CACHED blocks, least recently freed first
        self._hash_to_block: dict[int, int] = {}  # full-block hash -> the USED or CACHED block holding it
        self._seqs: dict[str, _Sequence] = {}  # live requests, in admission order

    # -- sizes ---------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self._blocks)

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_free_blocks(self) -> int:
        """FREE blocks only; CACHED ones are reclaimable too (see `num_cached_blocks`)."""
        return len(self._free_ids)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached_ids)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks - self.num_cached_blocks

    def block_table(self, request_id: str) -> list[int]:
        return list(self._seqs[request_id].block_table)

    def num_tokens(self, request_id: str) -> int:
        return len(self._seqs[request_id].token_ids)

    # -- the scheduler's verbs -------------------------------------------------------------
    def can_allocate(self, token_ids: Sequence[int]) -> bool:
        """True when the prompt's blocks fit, counting blocks it can share and cached ones it can evict."""
        hits = self._prefix_hits(self._full_block_hashes(token_ids))
        num_new = blocks_for(len(token_ids), self._block_size) - len(hits)
        num_revived = sum(self._blocks[b].status is BlockStatus.CACHED for b in hits)  # no longer evictable
        return num_new <= self.num_free_blocks + self.num_cached_blocks - num_revived

    def allocate(self, request_id: str, token_ids: Sequence[int]) -> None:
        """Give a new request the blocks for its prompt. Check `can_allocate` first."""
        if request_id in self._seqs:
            raise ValueError(f"request {request_id!r} is already live")
        if not self.can_allocate(token_ids):
            raise RuntimeError(f"no room for {request_id!r}: call can_allocate() before allocate()")
        bs = self._block_size
        hashes = self._full_block_hashes(token_ids)
        table = self._prefix_hits(hashes)
        for block_id in table:  # shared: take a reference, use no new memory
            self._take(block_id)
        for i in range(len(table), blocks_for(len(token_ids), self._block_size)):
            block = self._fresh_block()
            block.num_tokens = len(token_ids[i * bs : (i + 1) * bs])
            if i < len(hashes):
                self._register(block, hashes[i])
            table.append(block.block_id)
        self._seqs[request_id] = _Sequence(list(token_ids), table)
        self.check_invariants()

    def can_append(self, request_id: str) -> bool:
        """True when one more token fits: room in the last block, or a block to take."""
        if len(self._seqs[request_id].token_ids) % self._block_size:
            return True
        return self.num_free_blocks + self.num_cached_blocks > 0

    def append(self, request_id: str, token_id: int) -> None:
        """Add one decoded token; takes a new block only when the last one is full."""
        seq = self._seqs[request_id]
        if len(seq.token_ids) % self._block_size == 0:  # crossing a block boundary
            if not self.can_append(request_id):
                raise RuntimeError(f"no free block for {request_id!r}: call can_append() first")
            seq.block_table.append(self._fresh_block().block_id)
        block = self._blocks[seq.block_table[-1]]
        assert block.ref_count == 1 and block.num_tokens < self._block_size, "writing into a shared or full block"
        block.num_tokens += 1
        seq.token_ids.append(token_id)
        if block.num_tokens == self._block_size and self.enable_prefix_caching:
            parent = self._blocks[seq.block_table[-2]].block_hash if len(seq.block_table) > 1 else None
            self._register(block, hash_block_tokens(parent, seq.token_ids[-self._block_size :]))

    def free(self, request_id: str) -> None:
        """Drop a finished or preempted request's references; blocks nobody holds any more are released."""
        seq = self._seqs.pop(request_id)
        for block_id in reversed(seq.block_table):  # tail first, so prompt heads stay cached longest
            block = self._blocks[block_id]
            assert block.status is BlockStatus.USED and block.ref_count > 0
            block.ref_count -= 1
            if block.ref_count == 0:
                self._release(block)
        self.check_invariants()

    # -- reports ---------------------------------------------------------------------------
    def usage(self) -> KVUsage:
        used = [b for b in self._blocks if b.status is BlockStatus.USED]
        token_slots = sum(b.num_tokens for b in used)
        reserved = len(used) * self._block_size
        return KVUsage(
            capacity_slots=self.num_blocks * self._block_size,
            reserved_slots=reserved,
            token_slots=token_slots,
            internal_waste_slots=reserved - token_slots,
            reserved_unused_slots=0,  # nothing is reserved ahead of need
            external_fragmentation_slots=0,  # any free block serves any request
            free_slots=self.num_free_blocks * self._block_size,
            cached_slots=self.num_cached_blocks * self._block_size,
            logical_tokens=sum(len(s.token_ids) for s in self._seqs.values()),
            num_requests=len(self._seqs),
            shared_blocks=sum(b.ref_count > 1 for b in used),
            cached_blocks=self.num_cached_blocks,
        )

    def pool_state(self) -> tuple[PoolCell, ...]:
        """One `PoolCell` per physical block, in block-id order (for drawing)."""
        owners: dict[int, list[str]] = {}
        for request_id, seq in self._seqs.items():
            for block_id in seq.block_table:
                owners.setdefault(block_id, []).append(request_id)
        bs = self._block_size
        return tuple(
            PoolCell(b.block_id * bs, bs, b.status, tuple(owners.get(b.block_id, ())), b.num_tokens, b.block_id)
            for b in self._blocks
        )

    def check_invariants(self) -> None:
        """Assert the bookkeeping is consistent; a teaching allocator should crash, not drift."""
        refs = Counter(b for seq in self._seqs.values() for b in seq.block_table)
        free_set = set(self._free_ids)
        assert len(free_set) == len(self._free_ids), "a block is on the free list twice"
        for b in self._blocks:
            places = [
                s
                for s, here in (
                    (BlockStatus.FREE, b.block_id in free_set),
                    (BlockStatus.CACHED, b.block_id in self._cached_ids),
                    (BlockStatus.USED, refs[b.block_id] > 0),
                )
                if here
            ]
            assert places == [b.status], f"block {b.block_id} is {b.status} but found in {places}"
            assert b.ref_count == refs[b.block_id], f"block {b.block_id}: ref_count {b.ref_count} != {refs[b.block_id]}"
            if b.status is BlockStatus.FREE:
                assert b.num_tokens == 0 and b.block_hash is None
            if b.status is BlockStatus.CACHED:
                assert b.block_hash is not None and self._hash_to_block[b.block_hash] == b.block_id
        for h, block_id in self._hash_to_block.items():
            assert self._blocks[block_id].block_hash == h and self._blocks[block_id].status is not BlockStatus.FREE
        for seq in self._seqs.values():
            n, bs = len(seq.token_ids), self._block_size
            assert len(seq.block_table) == blocks_for(n, self._block_size)
            for i, block_id in enumerate(seq.block_table):
                assert self._blocks[block_id].num_tokens == min(bs, n - i * bs)
            if n % bs:  # a partly filled last block belongs to this request alone
                assert self._blocks[seq.block_table[-1]].ref_count == 1
        assert self.num_used_blocks == len(refs)  # used + free + cached == num_blocks

    # -- internals -------------------------------------------------------------------------
    def _full_block_hashes(self, token_ids: Sequence[int]) -> list[int]:
        """Chained hashes of the prompt's full blocks; [] when prefix caching is off."""
        if not self.enable_prefix_caching:
            return []
        hashes: list[int] = []
        bs = self._block_size
        for i in range(len(token_ids) // bs):
            hashes.append(hash_block_tokens(hashes[-1] if hashes else None, token_ids[i * bs : (i + 1) * bs]))
        return hashes

    def _prefix_hits(self, hashes: list[int]) -> list[int]:
        """Blocks already holding the leading full blocks; stops at the first miss."""
        hits: list[int] = []
        for h in hashes:
            if h not in self._hash_to_block:
                break
            hits.append(self._hash_to_block[h])
        return hits

    def _take(self, block_id: int) -> None:
        block = self._blocks[block_id]
        if block.status is BlockStatus.CACHED:  # revive: cached -> used, no longer evictable
            del self._cached_ids[block_id]
            block.status = BlockStatus.USED
        block.ref_count += 1

    def _fresh_block(self) -> _Block:
        """An empty block for one owner: a FREE one if any, else evict the least recently used CACHED one."""
        if self._free_ids:
            block = self._blocks[self._free_ids.popleft()]
        else:
            assert self._cached_ids, "out of blocks: callers must check can_allocate/can_append"
            block = self._blocks[self._cached_ids.popitem(last=False)[0]]
            assert block.block_hash is not None
            del self._hash_to_block[block.block_hash]  # its tokens are gone now
            block.block_hash, block.num_tokens = None, 0
        block.status, block.ref_count = BlockStatus.USED, 1
        return block

    def _register(self, block: _Block, block_hash: int) -> None:
        """Record a newly full block's identity; a duplicate of an existing block stays unshared."""
        block.block_hash = block_hash
        self._hash_to_block.setdefault(block_hash, block.block_id)

    def _release(self, block: _Block) -> None:
        if block.block_hash is not None and self._hash_to_block.get(block.block_hash) == block.block_id:
            block.status = BlockStatus.CACHED  # keep its tokens for a later prompt with this prefix
            self._cached_ids[block.block_id] = None
        else:
            block.status, block.num_tokens, block.block_hash = BlockStatus.FREE, 0, None
            self._free_ids.append(block.block_id)
