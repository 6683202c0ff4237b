"""How many requests fit in a KV pool at once, on paper (pure arithmetic).

Taught in the PagedAttention notebook (``notebooks/03_paged_attention.ipynb``). Given a
server's :class:`~helpers.serve.log.KVCacheReport` and a length mix (the lab's: prompts of
:data:`helpers.load.workload.LAB_PROMPT_LENS` tokens of text, 64 output tokens, 50 requests; :func:`chat_mix`
counts each prompt inside the chat template, as the server does), how
many requests hold their KV memory at once when each reserves ``max_model_len`` contiguous
slots (the naive scheme), exactly its own prompt + max_tokens (the best a contiguous scheme
can do), or whole blocks of ``block_size`` tokens (paged). A request is counted at its
longest (prompt plus every output token), so "fits" means it never has to wait or be
preempted for memory; the engine's ``max_num_seqs`` cap is a separate limit. The drawings
are in :mod:`helpers.paged.capacity_plots`.

Leaves out: chunked prefill and admission order inside the engine, and memory the engine
keeps besides the KV pool (weights, activations).

Example (the CPU server's default pool: 93,184 token slots, 728 blocks of 128)::

    >>> from helpers.serve.log import KVCacheReport
    >>> report = KVCacheReport(num_tokens=93_184, num_blocks=728, block_size=128,
    ...                        max_model_len=2048, max_concurrency=45.5)
    >>> [(c.scheme, c.num_fit, c.max_requests) for c in lab_capacity(report)][::2]
    [('naive: max_model_len each', 45, 45), ('paged: blocks of 128', 50, 291)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import cycle, islice
from typing import Any

from helpers.errors import InvalidArgumentError
from helpers.load.workload import (
    DEFAULT_NUM_REQUESTS,
    DEFAULT_OUTPUT_TOKENS,
    LAB_PROMPT_LENS,
    build_workload,
)
from helpers.paged.kv_math import blocks_for
from helpers.serve.log import KVCacheReport


@dataclass(frozen=True)
class LengthMix:
    """A workload's request lengths: prompts cycle through `prompt_lens`, each generates `output_len`.

    >>> LengthMix(prompt_lens=(16, 512), output_len=64, num_requests=3).final_lengths()
    [80, 576, 80]
    """

    prompt_lens: tuple[int, ...] = LAB_PROMPT_LENS  # tokens
    output_len: int = DEFAULT_OUTPUT_TOKENS  # tokens each request generates (ignore_eos: exactly this)
    num_requests: int = DEFAULT_NUM_REQUESTS

    def final_lengths(self, num_requests: int | None = None) -> list[int]:
        """Prompt + output tokens of each request, in arrival order."""
        n = self.num_requests if num_requests is None else num_requests
        return [p + self.output_len for p in islice(cycle(self.prompt_lens), n)]


LAB_MIX = LengthMix()  # the lab's 50 concurrent chats, their text's tokens only (chat_mix adds the template's)


def chat_mix(tokenizer: Any, output_len: int, mix: LengthMix = LAB_MIX) -> LengthMix:
    """``mix`` with each prompt counted as the server counts it: a prompt of ``prompt_lens[i]`` tokens of text,
    made as the lab makes its prompts, inside the chat template (``usage.prompt_tokens``: 30 tokens more for
    SmolLM2's template, 16 -> 46). A block's empty tail depends on these lengths, not on the text's.

    ``tokenizer``: a :class:`helpers.load.workload.ServerTokenizer` (``ServerTokenizer.of(server)``), or anything
    with its ``encode``, ``decode`` and ``count_chat``."""
    prompts = build_workload(tokenizer, num_requests=len(mix.prompt_lens), prompt_lens=mix.prompt_lens,
                             output_tokens=output_len).requests
    return LengthMix(tuple(tokenizer.count_chat(r.prompt) for r in prompts), output_len, mix.num_requests)


@dataclass(frozen=True)
class Capacity:
    """How one allocation scheme fits a length mix into one pool.

    `num_fit`: of the mix's requests, in order, how many hold memory at once before the
    next one does not fit. `max_requests`: the same for an endless stream of this mix, i.e.
    how many would fit if there were that many. `token_share`: tokens over slots held,
    with every request at its longest.
    """

    scheme: str
    pool_slots: int  # token slots in the pool
    unit_slots: int  # allocation unit: max_model_len, 1 (exact contiguous) or block_size
    slots_per_request: float  # mean slots held per request of the mix, at its longest
    num_fit: int
    num_requests: int  # requests in the mix (the most num_fit can be)
    max_requests: int
    token_share: float

    @property
    def all_fit(self) -> bool:
        return self.num_fit == self.num_requests


def _count_fitting(sizes: Sequence[int] | Callable[[int], int], budget: int, limit: int) -> int:
    """How many leading items have sizes that add up to at most `budget` (looking at `limit` at most)."""
    total = 0
    for i in range(limit):
        total += sizes[i] if isinstance(sizes, Sequence) else sizes(i)
        if total > budget:
            return i
    return limit


def fit(
    mix: LengthMix,
    pool_slots: int,
    *,
    scheme: str,
    max_model_len: int | None = None,
    block_size: int | None = None,
) -> Capacity:
    """Fit `mix` into a pool of `pool_slots` token slots under one scheme.

    `scheme` is "naive" (each request reserves `max_model_len` contiguous slots),
    "exact" (contiguous, each reserves prompt + output, as a client's max_tokens allows)
    or "paged" (whole blocks of `block_size`; the pool has pool_slots // block_size blocks).

    >>> fit(LengthMix((16, 512), 64, 4), pool_slots=1024, scheme="paged", block_size=128).num_fit
    3
    """
    lengths = mix.final_lengths()
    if scheme == "naive":
        if not max_model_len:
            raise InvalidArgumentError("the naive scheme needs max_model_len: pass max_model_len=2048, say.")
        if max(lengths) > max_model_len:
            raise InvalidArgumentError(f"a request of {max(lengths)} tokens exceeds max_model_len={max_model_len}; "
                                       "pass a larger max_model_len or a shorter mix.")
        unit, name = max_model_len, "naive: max_model_len each"
        held = [max_model_len] * len(lengths)
    elif scheme == "exact":
        unit, name, held = 1, "contiguous: prompt + max_tokens", list(lengths)
    elif scheme == "paged":
        if not block_size:
            raise InvalidArgumentError("the paged scheme needs block_size: pass block_size=16, say.")
        unit, name = block_size, f"paged: blocks of {block_size}"
        held = [blocks_for(n, block_size) * block_size for n in lengths]
        pool_slots = pool_slots // block_size * block_size  # whole blocks only
    else:
        raise InvalidArgumentError(f"scheme must be 'naive', 'exact' or 'paged', got {scheme!r}")
    period = len(mix.prompt_lens)
    smallest = min(held[:period])
    endless = _count_fitting(lambda i: held[i % period], pool_slots, limit=pool_slots // smallest + 1)
    return Capacity(
        scheme=name,
        pool_slots=pool_slots,
        unit_slots=unit,
        slots_per_request=sum(held) / len(held),
        num_fit=_count_fitting(held, pool_slots, limit=len(held)),
        num_requests=len(held),
        max_requests=endless,
        token_share=sum(lengths) / sum(held),
    )


def lab_capacity(
    report: KVCacheReport,
    mix: LengthMix = LAB_MIX,
    block_sizes: Sequence[int] | None = None,
) -> list[Capacity]:
    """Naive, exact-contiguous and paged capacity for `mix` in the pool a server reported.

    `block_sizes` defaults to the server's own block size (128 on vLLM's CPU build, 16 on
    GPU); the pool is the same number of token slots for every scheme. The naive row is
    what vLLM's own "maximum concurrency" log line assumes: every request max_model_len long.
    """
    if report.max_model_len is None:
        raise InvalidArgumentError("the report has no max_model_len: pass the KVCacheReport of a started server "
                                   "(server.kv_cache).")
    sizes = list(block_sizes) if block_sizes else [report.block_size or 16]
    pool = report.num_tokens
    rows = [
        fit(mix, pool, scheme="naive", max_model_len=report.max_model_len),
        fit(mix, pool, scheme="exact"),
    ]
    rows += [fit(mix, pool, scheme="paged", block_size=bs) for bs in sizes]
    return rows


def capacity_table(rows: Sequence[Capacity]) -> str:
    """The rows as a fixed-width text table (for printing in a notebook)."""
    fit_label = f"fit of {rows[0].num_requests}"
    head = f"{'scheme':<34}{'slots/request':>15}{fit_label:>11}{'max of mix':>12}{'tokens/held':>13}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.scheme:<34}{r.slots_per_request:>15,.0f}{r.num_fit:>11}{r.max_requests:>12,}{r.token_share:>13.0%}"
        )
    return "\n".join(lines)
