"""Where a router sent a load: each replica's share of the requests and its prefix-cache hit rate.

A router does not say which replica served a request, but each replica's ``/metrics`` does:
scrape every replica before and after a load (:func:`scrape_replicas`, through the course's one
poller :func:`helpers.load.poller.scrape`), and :func:`replica_shares` turns the two scrapes into
one :class:`ReplicaShare` a replica: the requests it finished, the prompt tokens it looked up
in its prefix cache and how many it found there. Round robin splits requests evenly and
computes a shared system prompt once *per replica*; a cache-aware router sends a shared
prefix to the replica that already holds it, so the hit rate rises where the prefix lives.

Leaves out: requests that failed on a replica (vLLM counts only finished ones in
``vllm:request_success``), and anything the router itself measured (its own Prometheus page).

Example::

    >>> before = [MetricsSample.from_text(_page(0, 0, 0)), MetricsSample.from_text(_page(0, 0, 0))]
    >>> after = [MetricsSample.from_text(_page(6, 3072, 2688)), MetricsSample.from_text(_page(2, 1024, 512))]
    >>> print(describe_shares(replica_shares(["http://127.0.0.1:8000", "http://127.0.0.1:8001"], before, after)))
    http://127.0.0.1:8000: 6 requests (75%), prefix cache 2,688 of 3,072 prompt tokens (88%)
    http://127.0.0.1:8001: 2 requests (25%), prefix cache 512 of 1,024 prompt tokens (50%)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from helpers.load.poller import scrape
from helpers.load.prometheus import MetricsSample


@dataclass(frozen=True)
class ReplicaShare:
    """What one replica did between two scrapes (counter deltas)."""

    url: str
    num_requests: int  # requests it finished (vllm:request_success)
    prompt_tokens: int  # prompt tokens it computed
    generation_tokens: int  # output tokens it generated
    prefix_cache_queries: int  # prompt tokens it looked up in its prefix cache
    prefix_cache_hits: int  # of those, tokens found there (not computed again)

    @property
    def hit_rate(self) -> float | None:
        """Hits over queries (0-1); None when it was asked nothing."""
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else None


def scrape_replicas(replicas: Sequence[Any], timeout: float = 5.0) -> list[MetricsSample]:
    """One ``/metrics`` sample of each replica now (servers or root URLs); raises OSError if one does not answer."""
    return [scrape(replica, timeout=timeout) for replica in replicas]


def replica_shares(urls: Sequence[str], before: Sequence[MetricsSample],
                   after: Sequence[MetricsSample]) -> list[ReplicaShare]:
    """Each replica's :class:`ReplicaShare` from a scrape before and one after (a pure function)."""
    if not len(urls) == len(before) == len(after):
        raise ValueError(f"one scrape before and one after per replica: got {len(urls)} URLs, "
                         f"{len(before)} before and {len(after)} after.")

    def delta(a: MetricsSample, b: MetricsSample, name: str) -> int:
        return round(b.values.get(name, 0.0) - a.values.get(name, 0.0))

    return [ReplicaShare(url, delta(a, b, "request_success"), delta(a, b, "prompt_tokens"),
                         delta(a, b, "generation_tokens"), delta(a, b, "prefix_cache_queries"),
                         delta(a, b, "prefix_cache_hits"))
            for url, a, b in zip(urls, before, after)]


def describe_shares(shares: Sequence[ReplicaShare]) -> str:
    """One line a replica: its requests (and share of all) and its prefix-cache hits."""
    total = sum(share.num_requests for share in shares) or 1
    lines = []
    for share in shares:
        rate = f" ({share.hit_rate:.0%})" if share.hit_rate is not None else ""
        requests = "request" if share.num_requests == 1 else "requests"
        lines.append(f"{share.url}: {share.num_requests} {requests} ({share.num_requests / total:.0%}), prefix cache "
                     f"{share.prefix_cache_hits:,} of {share.prefix_cache_queries:,} prompt tokens{rate}")
    return "\n".join(lines)


def _page(requests: int, queries: int, hits: int) -> str:
    """A minimal vLLM ``/metrics`` page with these counters (for the example above and the tests)."""
    return "\n".join([
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{finished_reason="length",model_name="smollm2"}} {requests}',
        "# TYPE vllm:prefix_cache_queries_total counter",
        f'vllm:prefix_cache_queries_total{{model_name="smollm2"}} {queries}',
        "# TYPE vllm:prefix_cache_hits_total counter",
        f'vllm:prefix_cache_hits_total{{model_name="smollm2"}} {hits}', ""])
