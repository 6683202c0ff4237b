"""Where time to first token goes: queued, prefilling, and the rest, from vLLM's own histograms.

The client measures TTFT from send to first token. The engine measures, per request, the time
it spent waiting for a place in the batch and the time from being scheduled to its first token,
and publishes both as histograms on ``/metrics``:

- ``vllm:request_queue_time_seconds``: waiting (queued, or preempted and back in the queue);
- ``vllm:request_prefill_time_seconds``: scheduled -> first token (the prompt's prefill, in
  one step or in chunks between other requests' decodes);
- ``vllm:time_to_first_token_seconds``: the server's TTFT, from the request's arrival.

A histogram's ``_sum`` and ``_count`` grow with every finished request, so two scrapes around a
run give the run's mean of each (:func:`ttft_split`). What the client sees beyond queue +
prefill is the rest: HTTP, tokenizing, the API server's work, and the network.

    >>> before = {"request_queue_time_seconds_sum": 1.0, "request_queue_time_seconds_count": 2,
    ...           "request_prefill_time_seconds_sum": 0.2, "request_prefill_time_seconds_count": 2}
    >>> after = {"request_queue_time_seconds_sum": 9.0, "request_queue_time_seconds_count": 6,
    ...          "request_prefill_time_seconds_sum": 1.0, "request_prefill_time_seconds_count": 6}
    >>> split = ttft_split(before, after, client_ttft_s=[2.5, 2.5, 2.5, 2.5])
    >>> split.queue_s, split.prefill_s, split.rest_s
    (2.0, 0.2, 0.3)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

QUEUE, PREFILL, SERVER_TTFT = "request_queue_time_seconds", "request_prefill_time_seconds", "time_to_first_token_seconds"


@dataclass(frozen=True)
class TTFTSplit:
    """Per-request means over one run, in seconds; ``requests``: how many the engine counted."""

    requests: int
    queue_s: float
    prefill_s: float
    server_ttft_s: float | None  # None where the server published no TTFT histogram
    client_ttft_s: float | None  # None where no request got a first token

    @property
    def rest_s(self) -> float | None:
        """Client TTFT not spent queued or prefilling: HTTP, tokenizing, the API server, the network."""
        if self.client_ttft_s is None:
            return None
        return round(self.client_ttft_s - self.queue_s - self.prefill_s, 9)

    def describe(self) -> str:
        if self.client_ttft_s is None or self.client_ttft_s <= 0:
            return f"queued {self.queue_s:.3f} s, prefilling {self.prefill_s:.3f} s on average ({self.requests} requests)"
        share = lambda part: f"{part:.3f} s ({part / self.client_ttft_s:.0%})"  # noqa: E731
        return (f"mean TTFT {self.client_ttft_s:.3f} s at the client = queued {share(self.queue_s)} + prefilling "
                f"{share(self.prefill_s)} + the rest {share(self.rest_s)} ({self.requests} requests)")


def ttft_split(before: Any, after: Any, client_ttft_s: Sequence[float] = ()) -> TTFTSplit:
    """The mean queue, prefill and server TTFT of the requests that finished between two scrapes.

    ``before`` and ``after``: MetricsSample objects or ``parse_metrics`` dicts; ``client_ttft_s``:
    the client's TTFTs of the same requests (e.g. ``[r.ttft_s for r in run.records if r.ok]``).
    """
    b, a = _values(before), _values(after)
    requests = int(round(a.get(f"{QUEUE}_count", 0.0) - b.get(f"{QUEUE}_count", 0.0)))
    if requests <= 0:
        raise ValueError("no request finished between the two /metrics scrapes: scrape before the run and after it.")
    mean = lambda name: _mean_between(b, a, name)  # noqa: E731
    ttfts = [t for t in client_ttft_s if t is not None]
    return TTFTSplit(requests=requests, queue_s=mean(QUEUE) or 0.0, prefill_s=mean(PREFILL) or 0.0,
                     server_ttft_s=mean(SERVER_TTFT), client_ttft_s=sum(ttfts) / len(ttfts) if ttfts else None)


def _values(sample: Any) -> Mapping[str, float]:
    return sample if isinstance(sample, Mapping) else sample.values


def _mean_between(before: Mapping[str, float], after: Mapping[str, float], name: str) -> float | None:
    count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
    if count <= 0:
        return None
    mean = (after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)) / count
    return mean if math.isfinite(mean) else None
