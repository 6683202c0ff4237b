"""When requests arrive: open-loop traffic at a request rate, in ``vllm bench serve``'s sense.

A closed burst sends every request at once; real traffic arrives over time, whether or not the
server keeps up. :func:`arrival_times` draws the gaps between arrivals from a gamma distribution
with shape ``burstiness`` and mean ``1 / rate``, as ``vllm bench serve --request-rate R
--burstiness B`` does: ``burstiness=1`` is a Poisson process (exponential gaps), below 1 the
arrivals bunch into bursts, above 1 they even out, and ``inf`` spaces them exactly ``1 / rate``
apart. Like vLLM's tool (0.26 and 0.32), the gaps are then scaled so that the last request
arrives at ``num_requests / rate``: every seed offers the same average rate. ``rate=inf`` sends
everything at t=0 (a closed burst). Seeded, with the draws ``vllm bench serve --seed S`` makes
(NumPy's legacy generator seeded with S, one gamma draw per request): the course's tester and
vLLM's tool, given the same seed, send at the same moments, so a comparison of the two measures
the tools and the server, not two samples of random traffic (tests/test_open_loop.py checks this
against the send times in real result files of both versions).
:func:`with_arrivals` puts the times on a workload's requests; ``run_load_test`` waits for them.

    >>> arrival_times(4, rate=2.0, burstiness=float("inf"))
    (0.5, 1.0, 1.5, 2.0)
    >>> times = arrival_times(1000, rate=10.0, seed=1)
    >>> round(times[-1], 6), round(offered_rate(times), 1)
    (100.0, 10.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from helpers import validate

POISSON = 1.0  # the burstiness of a Poisson process


def arrival_times(num_requests: int, rate: float, burstiness: float = POISSON, seed: int = 0) -> tuple[float, ...]:
    """Seconds after the start at which each of ``num_requests`` requests arrives (non-decreasing).

    ``rate``: requests per second on average, positive (``inf``: all at once);
    ``burstiness``: the gamma shape, positive (``inf``: evenly spaced).
    """
    import numpy as np

    num_requests = validate.positive_int(num_requests, "num_requests")
    rate = _positive_or_inf(rate, "rate", "requests per second, e.g. 4.0 (inf: every request at once)")
    burstiness = _positive_or_inf(burstiness, "burstiness", "the gaps' gamma shape: 1.0 a Poisson process, below 1 "
                                  "burstier, above 1 more even (inf: evenly spaced)")
    if math.isinf(rate):
        return (0.0,) * num_requests
    if math.isinf(burstiness):
        gaps = np.full(num_requests, 1.0 / rate)
    else:
        # vLLM's tool: np.random.seed(seed) at its start, then np.random.gamma once per request
        gaps = np.random.RandomState(seed).gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=num_requests)
    times = np.cumsum(gaps)
    times *= (num_requests / rate) / times[-1]  # the last arrival at N / rate, whatever the draw
    return tuple(float(t) for t in times)


def offered_rate(times: Sequence[float]) -> float:
    """The average request rate that arrival times offer: requests per second up to the last arrival."""
    if not times or times[-1] <= 0:
        return math.inf
    return len(times) / times[-1]


def with_arrivals(workload: Any, times: Sequence[float]) -> Any:
    """A copy of ``workload`` whose i-th request arrives at ``times[i]`` seconds after the run starts."""
    if len(times) != len(workload.requests):
        raise validate.InvalidArgumentError(
            f"{len(times)} arrival times for {len(workload.requests)} requests; draw them with "
            f"arrival_times({len(workload.requests)}, rate=...).")
    requests = tuple(replace(spec, arrival_s=float(t)) for spec, t in zip(workload.requests, times))
    return replace(workload, requests=requests)


def _positive_or_inf(value: Any, name: str, hint: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == math.inf:
        return math.inf
    return validate.positive_number(value, name, hint=f"It is {hint}.")
