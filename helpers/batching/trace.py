"""Request traces for the batching simulator: who arrives when, with how many tokens.

A trace is a plain list of `BatchRequest` records sorted by arrival time. Every generator is
seeded, so the same call gives the same trace in every kernel and in CI.

Taught in the continuous-batching notebook; simulated by `helpers.batching.sim`.

What a trace leaves out: the token ids themselves (only lengths matter for scheduling),
sampling parameters, and stop conditions (every request generates exactly `output_len`
tokens, like the lab's `ignore_eos=True`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from helpers import validate
from helpers.load.workload import (
    LAB_PROMPT_LENS,  # the lab's prompt lengths (tokens), cycled over its requests
)

BATCHING_TRACE_KINDS = ("steady", "bursty", "mixed", "lab")


@dataclass(frozen=True)
class BatchRequest:
    """One request of a trace. Lengths are positive integers; ``arrival_s`` is 0 or more.

    >>> BatchRequest("r00", arrival_s=0.5, prompt_len=16, output_len=64)
    BatchRequest(request_id='r00', arrival_s=0.5, prompt_len=16, output_len=64)
    """

    request_id: str
    arrival_s: float  # seconds since the start of the trace
    prompt_len: int  # tokens in the prompt (computed by prefill)
    output_len: int  # tokens generated before the request finishes

    def __post_init__(self) -> None:
        validate.non_negative_number(self.arrival_s, "arrival_s", unit="seconds")
        validate.positive_int(self.prompt_len, "prompt_len", hint="It is the prompt's length in tokens.")
        validate.positive_int(self.output_len, "output_len", hint="It is how many tokens the request generates.")


def _ids(n: int) -> list[str]:
    """Zero-padded ids, so sorting by id sorts by creation order: r00 .. r49."""
    width = max(2, len(str(n - 1)))
    return [f"r{i:0{width}d}" for i in range(n)]


def _output_lens(rng: np.random.Generator, n: int, mean: int, spread: float) -> np.ndarray:
    """Integers spread uniformly over mean*(1-spread) .. mean*(1+spread), at least 1.

    spread=0 gives equal lengths: the case where static batching wastes nothing.
    """
    if not 0.0 <= spread <= 1.0:
        raise validate.InvalidArgumentError(f"the output length spread must be between 0 and 1, got {spread!r}.")
    lo = max(1, round(mean * (1 - spread)))
    hi = max(lo, round(mean * (1 + spread)))
    return rng.integers(lo, hi + 1, size=n)


def _poisson_arrivals(rng: np.random.Generator, n: int, rate_per_s: float) -> np.ndarray:
    """Arrival times of a Poisson process at `rate_per_s`: exponential gaps, the first at t=0."""
    validate.positive_number(rate_per_s, "rate_per_s", hint="It is the mean number of arrivals per second.")
    gaps = rng.exponential(1.0 / rate_per_s, size=n)
    return np.concatenate([[0.0], np.cumsum(gaps[1:])])


def _build(arrivals: Sequence[float], prompts: Sequence[int], outputs: Sequence[int]) -> list[BatchRequest]:
    ids = _ids(len(arrivals))
    reqs = [BatchRequest(i, float(a), int(p), int(o)) for i, a, p, o in zip(ids, arrivals, prompts, outputs)]
    return sorted(reqs, key=lambda r: (r.arrival_s, r.request_id))


def steady_trace(
    num_requests: int = 32,
    rate_per_s: float = 4.0,
    prompt_lens: Sequence[int] = LAB_PROMPT_LENS,
    mean_output_len: int = 64,
    output_spread: float = 0.5,
    seed: int = 0,
) -> list[BatchRequest]:
    """Steady traffic: Poisson arrivals at `rate_per_s`, prompts drawn from `prompt_lens`.

    Gaps between arrivals are exponential with mean 1/rate_per_s seconds; the first request
    arrives at t=0. Output lengths spread uniformly around `mean_output_len`.
    Leaves out daily cycles and client retries.

    >>> [r.arrival_s for r in steady_trace(3, rate_per_s=1e9, seed=1)][0]
    0.0
    """
    rng = np.random.default_rng(seed)
    arrivals = _poisson_arrivals(rng, num_requests, rate_per_s)
    prompts = rng.choice(np.asarray(prompt_lens), size=num_requests)
    return _build(arrivals, prompts, _output_lens(rng, num_requests, mean_output_len, output_spread))


def bursty_trace(
    num_requests: int = 32,
    burst_size: int | None = None,
    burst_interval_s: float = 5.0,
    prompt_lens: Sequence[int] = LAB_PROMPT_LENS,
    mean_output_len: int = 64,
    output_spread: float = 0.5,
    seed: int = 0,
) -> list[BatchRequest]:
    """Bursty traffic: groups of `burst_size` requests arrive at the same instant.

    Burst k arrives at k * burst_interval_s seconds. `burst_size=None` sends everything at
    t=0 (one burst), like a load test that fires all its requests concurrently.

    >>> sorted({r.arrival_s for r in bursty_trace(6, burst_size=2, burst_interval_s=1.0)})
    [0.0, 1.0, 2.0]
    """
    size = num_requests if burst_size is None else burst_size
    rng = np.random.default_rng(seed)
    arrivals = [(i // size) * burst_interval_s for i in range(num_requests)]
    prompts = rng.choice(np.asarray(prompt_lens), size=num_requests)
    return _build(arrivals, prompts, _output_lens(rng, num_requests, mean_output_len, output_spread))


def mixed_length_trace(
    num_requests: int = 32,
    long_fraction: float = 0.125,
    short_output_len: int = 16,
    long_output_len: int = 256,
    prompt_lens: Sequence[int] = LAB_PROMPT_LENS,
    rate_per_s: float | None = None,
    seed: int = 0,
) -> list[BatchRequest]:
    """A few long answers among many short ones: where continuous batching gains most.

    Exactly round(num_requests * long_fraction) requests (at least one) get
    `long_output_len` tokens, placed at random; the rest get `short_output_len`.
    Arrivals: all at t=0 when `rate_per_s` is None, else Poisson at that rate.
    Under static batching each long request holds its whole batch hostage.

    >>> sorted({r.output_len for r in mixed_length_trace(8, long_fraction=0.25)})
    [16, 256]
    """
    rng = np.random.default_rng(seed)
    num_long = max(1, round(num_requests * long_fraction))
    outputs = np.full(num_requests, short_output_len)
    outputs[rng.choice(num_requests, size=num_long, replace=False)] = long_output_len
    if rate_per_s is None:
        arrivals = np.zeros(num_requests)
    else:
        arrivals = _poisson_arrivals(rng, num_requests, rate_per_s)
    prompts = rng.choice(np.asarray(prompt_lens), size=num_requests)
    return _build(arrivals, prompts, outputs)


def lab_trace(
    num_requests: int = 50,
    prompt_lens: Sequence[int] = LAB_PROMPT_LENS,
    output_len: int = 64,
) -> list[BatchRequest]:
    """The course lab's load: all requests at t=0, prompts cycling 16/64/256/512 tokens,
    a fixed 64 output tokens each (the lab sends `ignore_eos`). Not random, so no seed.

    Leaves out the chat template's extra tokens around each prompt.

    >>> [r.prompt_len for r in lab_trace(5)]
    [16, 64, 256, 512, 16]
    """
    prompts = [prompt_lens[i % len(prompt_lens)] for i in range(num_requests)]
    return _build([0.0] * num_requests, prompts, [output_len] * num_requests)


def make_batching_trace(kind: str, num_requests: int = 32, spread: float = 0.5, seed: int = 0) -> list[BatchRequest]:
    """One trace by name, for widgets and short notebook cells.

    kind: "steady" (Poisson, 4 requests/s), "bursty" (bursts of 8 every 5 s), "mixed"
    (all at t=0; 1 in 8 requests long) or "lab" (see `lab_trace`; spread and seed unused).
    spread in [0, 1] sets how unequal the output lengths are: for steady and bursty the
    uniform spread around 64 tokens; for mixed the long answers get 16 * (1 + 15 * spread)
    tokens, so spread=0 makes every answer 16 tokens and spread=1 makes long ones 256.

    >>> len(make_batching_trace("bursty", 10)), make_batching_trace("mixed", 8, spread=0.0)[0].output_len
    (10, 16)
    """
    if kind == "steady":
        return steady_trace(num_requests, output_spread=spread, seed=seed)
    if kind == "bursty":
        return bursty_trace(num_requests, burst_size=8, output_spread=spread, seed=seed)
    if kind == "mixed":
        long_len = round(16 * (1 + 15 * spread))
        return mixed_length_trace(num_requests, long_output_len=long_len, seed=seed)
    if kind == "lab":
        return lab_trace(num_requests)
    raise validate.InvalidArgumentError(f"unknown trace kind {kind!r}; choose one of {BATCHING_TRACE_KINDS}.")
