"""The mutable state of one request inside a batching simulation, and one step's token bookkeeping.

`helpers.batching.sim`'s schedulers keep one `SeqState` per request (vLLM calls this a
Request): its status, how many tokens it has computed and generated, its batch slot and
KV tokens. `execute_step` applies what one engine step computed and samples output tokens.
A `SeqState` turns into an immutable `BatchRequestRecord` when the simulation ends.

Taught in the continuous-batching notebook.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from enum import Enum

from helpers.batching.sim_records import BatchRequestRecord
from helpers.batching.trace import BatchRequest


class RequestStatus(Enum):
    WAITING = "waiting"  # arrived, not admitted yet (or preempted)
    RUNNING = "running"  # holds a batch slot (and KV blocks)
    FINISHED = "finished"


@dataclass(eq=False)  # compared and hashed by identity: one object per request
class SeqState:
    """Mutable state of one request inside a simulation (vLLM calls this a Request)."""

    req: BatchRequest
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose KV has been computed
    num_output_tokens: int = 0
    num_kv_tokens: int = 0  # tokens with a KV slot allocated
    slot: int | None = None
    admitted_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    num_preemptions: int = 0

    @property
    def request_id(self) -> str:
        return self.req.request_id

    @property
    def num_tokens(self) -> int:  # prompt + output so far: what a recompute must prefill
        return self.req.prompt_len + self.num_output_tokens

    @property
    def is_decoding(self) -> bool:  # one known token left to compute, and it is an output
        return self.num_output_tokens > 0 and self.num_tokens - self.num_computed_tokens == 1

    def token_ids(self) -> list[int]:
        # Synthetic ids, distinct per request (crc32 is stable across runs, unlike hash()),
        # so a prefix cache finds nothing to share.
        base = zlib.crc32(self.request_id.encode()) * 100_000
        return [base + i for i in range(self.num_tokens)]

    def record(self) -> BatchRequestRecord:
        r = self.req
        assert self.admitted_s is not None and self.first_token_s is not None and self.finish_s is not None
        return BatchRequestRecord(
            request_id=r.request_id, arrival_s=r.arrival_s, prompt_len=r.prompt_len, output_len=r.output_len,
            admitted_s=self.admitted_s, queue_wait_s=self.admitted_s - r.arrival_s,
            ttft_s=self.first_token_s - r.arrival_s, finish_s=self.finish_s, e2e_s=self.finish_s - r.arrival_s,
            num_preemptions=self.num_preemptions,
        )


def execute_step(scheduled: dict[SeqState, int], end_s: float) -> list[SeqState]:
    """Apply one step's computed tokens. Every request that has now computed all its known
    tokens samples one output token at end_s. Returns the requests that sampled one."""
    sampled = []
    for seq, n in scheduled.items():
        seq.num_computed_tokens += n
        assert seq.num_computed_tokens <= seq.num_tokens
        if seq.num_computed_tokens == seq.num_tokens:  # caught up: sample the next token
            seq.num_output_tokens += 1  # num_tokens grows by one: that token is computed next
            seq.first_token_s = end_s if seq.first_token_s is None else seq.first_token_s
            if seq.num_output_tokens == seq.req.output_len:
                seq.status, seq.finish_s = RequestStatus.FINISHED, end_s
            sampled.append(seq)
    return sampled
