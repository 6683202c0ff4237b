"""What a router's policy does with requests that share a system prompt: on paper, then measured.

A router picks a replica for every request. Two of vllm-router's policies, side by side:

- **round robin** sends request *i* to replica *i mod N*: perfectly even, blind to content. A
  group of requests sharing a system prompt lands on every replica, and each replica computes
  the prompt once before its prefix cache can serve it;
- **cache aware** remembers (in a tree of prompt text) which replica saw which prompts, and
  sends a request to the replica holding the longest match, unless the replicas' loads are too
  uneven; a prompt without a match above its threshold goes to the replica with the fewest requests
  in flight (the first on a tie), as vllm-router 0.1.17's ``cache_aware.rs`` does. It renders each
  prompt through the replicas' render endpoints, which vLLM 0.32 serves only with ``--enable-scale-out``
  (:func:`helpers.route.replicas.with_render_endpoints`; ``scripts/probe_router_affinity.py`` measures both).

:func:`prefix_finders` counts, on paper, the requests that find their group's prompt already in
their replica's cache when the requests go one at a time, group by group (as
:func:`helpers.route.prefix_workload.grouped_prefix_workload` orders them): round robin's placement
exactly, cache-aware's as intended (each group kept on one replica). :func:`measure_policy` runs
the real thing: a router with the policy in front of running replicas, the workload sent one
request at a time through the course's load tester, and each replica's share of requests and
prefix-cache hits from its ``/metrics`` (:mod:`helpers.route.spread`). What the router really
does can differ from the paper version; the notebook shows both.

Example::

    >>> groups = [0, 0, 0, 1, 1, 1]
    >>> round_robin_placement(len(groups), 2), prefix_finders(groups, round_robin_placement(6, 2))
    ([0, 1, 0, 1, 0, 1], 2)
    >>> prefix_finders(groups, grouped_placement(groups, 2))
    4
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from helpers import validate
from helpers.load.run import LoadTestRun, run_load_test
from helpers.route.router import start_router
from helpers.route.spread import ReplicaShare, replica_shares, scrape_replicas

COMPARED = ("round_robin", "cache_aware")  # the two policies the notebook measures


def round_robin_placement(num_requests: int, num_replicas: int) -> list[int]:
    """The replica of each request under round robin: 0, 1, ..., N-1, 0, 1, ..."""
    return [index % num_replicas for index in range(num_requests)]


def grouped_placement(groups: Sequence[int], num_replicas: int) -> list[int]:
    """Cache-aware routing as intended: a new group goes to the replica with the fewest groups, its later
    requests follow it.

    >>> grouped_placement([0, 0, 1, 1, 2], 2)
    [0, 0, 1, 1, 0]
    """
    home: dict[int, int] = {}
    for group in groups:
        if group not in home:
            loads = [list(home.values()).count(replica) for replica in range(num_replicas)]
            home[group] = loads.index(min(loads))
    return [home[group] for group in groups]


def prefix_finders(groups: Sequence[int], placement: Sequence[int]) -> int:
    """Requests that find their group's prompt cached on their replica (an earlier one of the group went there)."""
    seen: set[tuple[int, int]] = set()
    found = 0
    for group, replica in zip(groups, placement):
        found += (group, replica) in seen
        seen.add((group, replica))
    return found


@dataclass
class PolicyResult:
    """One policy measured: the load test's run and where its requests went."""

    policy: str
    run: LoadTestRun
    shares: list[ReplicaShare]

    @property
    def hit_rate(self) -> float | None:
        """Prompt tokens served from the replicas' prefix caches / prompt tokens looked up, all replicas."""
        queries = sum(share.prefix_cache_queries for share in self.shares)
        return sum(share.prefix_cache_hits for share in self.shares) / queries if queries else None

    @property
    def requests_per_replica(self) -> list[int]:
        return [share.num_requests for share in self.shares]

    def describe(self) -> str:
        summary = self.run.summary
        rate = f"{self.hit_rate:.0%}" if self.hit_rate is not None else "n/a"
        ttft = f"{summary.ttft_p50_s:.2f} s" if summary.ttft_p50_s is not None else "n/a"
        e2e = f"{summary.e2e_p50_s:.2f} s" if summary.e2e_p50_s is not None else "n/a"
        return (f"{self.policy}: requests per replica {self.requests_per_replica}, prompt tokens from the prefix "
                f"cache {rate}, TTFT p50 {ttft}, end-to-end p50 {e2e}, {summary.num_ok} of {summary.num_requests} "
                f"ok in {self.run.wall_s:.1f} s")

    def to_dict(self) -> dict[str, Any]:
        summary = self.run.summary
        return {"policy": self.policy, "requests_per_replica": self.requests_per_replica, "hit_rate": self.hit_rate,
                "ttft_p50_s": summary.ttft_p50_s, "e2e_p50_s": summary.e2e_p50_s, "num_ok": summary.num_ok, "wall_s": round(self.run.wall_s, 2),
                "output_tok_per_s": summary.output_tok_per_s,
                "shares": [vars(share) for share in self.shares]}


async def measure_policy(replicas: Any, policy: str, workload: Any, *, concurrency: int = 1,
                         timeout_s: float = 120.0) -> PolicyResult:
    """Start a router with ``policy`` in front of ``replicas``, send ``workload`` one request at a time (or
    ``concurrency`` at a time: the router then sees replicas with requests in flight), stop the router; each replica
    scraped before and after. The replicas keep running."""
    concurrency = validate.positive_int(concurrency, "concurrency", hint="It is how many requests are in flight.")
    label = policy if concurrency == 1 else f"{policy}, {concurrency} at a time"
    with start_router(replicas, policy, quiet=True) as router:
        before = scrape_replicas(replicas)
        run = await run_load_test(router, workload, concurrency=concurrency, timeout_s=timeout_s, label=label)
        after = scrape_replicas(replicas)
    return PolicyResult(label, run, replica_shares(replicas.urls, before, after))
