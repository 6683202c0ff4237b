"""Seeded request traces for the KV-cache allocator demo (the PagedAttention notebook).

A trace is a list of `KVRequest` records sorted by arrival step. Unlike the batching
traces, these carry real token ids, because prefix sharing compares tokens.

What a trace leaves out: wall-clock time (time is counted in decode steps), sampling and
stop conditions (a request generates exactly `output_len` tokens). `max_tokens` is what
the client asked for as an upper bound; the naive contiguous cache reserves by it, the
paged cache ignores it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helpers import validate
from helpers.errors import InvalidArgumentError

VOCAB_SIZE = 32_000  # token ids are drawn from 0 .. VOCAB_SIZE - 1
KV_TRACE_KINDS = ("random", "shared_prefix")  # what make_kv_trace builds


@dataclass(frozen=True)
class KVRequest:
    """One request: arrives at `arrival_step`, brings a prompt, generates `output_len` tokens.

    >>> r = KVRequest("r00", arrival_step=3, prompt_token_ids=(5, 6, 7), output_len=4)
    >>> len(r.prompt_token_ids) + r.output_len  # tokens in its KV cache when it finishes
    7
    """

    request_id: str
    arrival_step: int  # decode step at which it reaches the server
    prompt_token_ids: tuple[int, ...]
    output_len: int  # tokens it will generate before finishing
    max_tokens: int | None = None  # the client's cap on output_len; None: up to max_model_len

    def __post_init__(self) -> None:
        validate.non_negative_int(self.arrival_step, "arrival_step", hint="It is the decode step it arrives at.")
        validate.positive_int(self.output_len, "output_len", hint="It is how many tokens the request generates.")
        if len(self.prompt_token_ids) < 1:
            raise InvalidArgumentError(f"request {self.request_id!r} has an empty prompt; give at least one token id.")
        if self.max_tokens is not None and self.output_len > self.max_tokens:
            raise InvalidArgumentError(
                f"request {self.request_id!r} generates output_len={self.output_len} tokens, more than its "
                f"max_tokens={self.max_tokens}; pass an output_len of at most max_tokens (or max_tokens=None).")


def _skewed_lengths(rng: np.random.Generator, n: int, lo: int, hi: int) -> np.ndarray:
    """Lengths in lo..hi, most of them short and a few long (log-uniform).

    Real chat outputs look like this: a median far below the cap, a long tail.
    """
    if not 1 <= lo <= hi:
        raise InvalidArgumentError(f"a (min, max) length range needs 1 <= min <= max, got ({lo}, {hi}).")
    return np.floor(np.exp(rng.uniform(np.log(lo), np.log(hi + 1), size=n))).astype(int).clip(lo, hi)


def _arrivals(rng: np.random.Generator, n: int, arrival_rate: float) -> np.ndarray:
    """Poisson arrivals: `arrival_rate` requests per step on average, the first at step 0."""
    gaps = rng.exponential(1.0 / arrival_rate, size=n)
    gaps[0] = 0.0
    return np.floor(np.cumsum(gaps)).astype(int)


def _build(
    rng: np.random.Generator,
    prompts: list[tuple[int, ...]],
    output_len: tuple[int, int],
    max_model_len: int,
    arrival_rate: float,
    max_tokens: tuple[int, ...] | None,
) -> list[KVRequest]:
    n = len(prompts)
    arrivals = _arrivals(rng, n, arrival_rate)
    outputs = _skewed_lengths(rng, n, *output_len)
    caps = rng.choice(max_tokens, size=n) if max_tokens else [None] * n
    width = max(2, len(str(n - 1)))
    requests = []
    for i, (prompt, arrival, out, cap) in enumerate(zip(prompts, arrivals, outputs, caps)):
        if len(prompt) >= max_model_len:
            raise InvalidArgumentError(f"a prompt of {len(prompt)} tokens leaves no room under "
                                       f"max_model_len={max_model_len}; pass a larger max_model_len.")
        cap = None if cap is None else int(cap)
        limit = max_model_len - len(prompt) if cap is None else min(cap, max_model_len - len(prompt))
        requests.append(KVRequest(f"r{i:0{width}d}", int(arrival), prompt, int(min(out, limit)), cap))
    return sorted(requests, key=lambda r: (r.arrival_step, r.request_id))


def random_trace(
    num_requests: int = 24,
    seed: int = 0,
    prompt_len: tuple[int, int] = (8, 96),
    output_len: tuple[int, int] = (4, 240),
    max_model_len: int = 256,
    arrival_rate: float = 1.0,
    max_tokens: tuple[int, ...] | None = None,
) -> list[KVRequest]:
    """Independent requests with random prompts: the allocator's everyday load.

    Prompt and output lengths are log-uniform over their (min, max) ranges, so most
    requests stop far short of `max_model_len` and a few run long; outputs are clipped so
    prompt + output <= max_model_len (and prompts to at most max_model_len // 2).
    `max_tokens`, when given, is a set of caps clients choose from (one drawn per
    request); None means every client leaves it open, so the contiguous cache reserves
    max_model_len for each.

    >>> trace = random_trace(num_requests=3, seed=1)
    >>> [r.request_id for r in trace], trace[0].arrival_step
    (['r00', 'r01', 'r02'], 0)
    """
    rng = np.random.default_rng(seed)
    hi = min(prompt_len[1], max_model_len // 2)  # leave room to generate under a small max_model_len
    lens = _skewed_lengths(rng, num_requests, min(prompt_len[0], hi), hi)
    prompts = [tuple(int(t) for t in rng.integers(0, VOCAB_SIZE, size=n)) for n in lens]
    return _build(rng, prompts, output_len, max_model_len, arrival_rate, max_tokens)


def shared_prefix_trace(
    num_requests: int = 24,
    seed: int = 0,
    system_prompt_len: int = 64,
    user_prompt_len: tuple[int, int] = (4, 48),
    output_len: tuple[int, int] = (4, 160),
    max_model_len: int = 256,
    arrival_rate: float = 1.0,
    max_tokens: tuple[int, ...] | None = None,
) -> list[KVRequest]:
    """Requests that all start with the same system prompt, then a user message of their own.

    With block size 16, the default 64-token system prompt fills 4 blocks that every
    request can share under prefix caching. Otherwise like `random_trace`.

    >>> a, b = shared_prefix_trace(num_requests=2, seed=0)[:2]
    >>> a.prompt_token_ids[:64] == b.prompt_token_ids[:64]
    True
    """
    rng = np.random.default_rng(seed)
    system = tuple(int(t) for t in rng.integers(0, VOCAB_SIZE, size=system_prompt_len))
    lens = _skewed_lengths(rng, num_requests, *user_prompt_len)
    prompts = [system + tuple(int(t) for t in rng.integers(0, VOCAB_SIZE, size=n)) for n in lens]
    return _build(rng, prompts, output_len, max_model_len, arrival_rate, max_tokens)


def make_kv_trace(kind: str, seed: int = 0, max_model_len: int = 256, **kwargs) -> list[KVRequest]:
    """`random_trace` or `shared_prefix_trace` by name (one of KV_TRACE_KINDS); for widgets.

    >>> len(make_kv_trace("shared_prefix", seed=0, num_requests=5))
    5
    """
    if kind == "random":
        return random_trace(seed=seed, max_model_len=max_model_len, **kwargs)
    if kind == "shared_prefix":
        return shared_prefix_trace(seed=seed, max_model_len=max_model_len, **kwargs)
    raise InvalidArgumentError(f"unknown trace kind {kind!r}; choose one of {KV_TRACE_KINDS}")
