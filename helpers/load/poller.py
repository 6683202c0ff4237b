"""The course's one ``/metrics`` poller: sample a running server while a load runs.

- :func:`scrape`: one :class:`~helpers.load.prometheus.MetricsSample` now (a blocking GET);
- :func:`watch`: run a load (a coroutine) while polling several times a second from the
  notebook's event loop, and keep polling ``settle_s`` after it ends so the last gauge
  updates (blocks freed) are seen. Notebooks 03, 04 and 05 all watch through it.

A failed scrape is skipped, never raised: a monitor must not break the experiment it watches.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
import warnings
from collections.abc import Awaitable
from typing import Any, TypeVar

from helpers.load.prometheus import MetricsSample, cache_config_labels
from helpers.local_http import read_body

T = TypeVar("T")


def _metrics_url(server: Any) -> str:
    """Accept a VLLMServer (anything with ``.url``) or a root URL like ``http://127.0.0.1:8000``."""
    url = server if isinstance(server, str) else server.url
    return url.rstrip("/") + "/metrics"


def _headers(server: Any) -> dict[str, str]:
    """The server's API key as a bearer token, when it has one (a shared classroom server)."""
    key = getattr(server, "api_key", None)
    return {"Authorization": f"Bearer {key}"} if key else {}


def metrics_text(server: Any, timeout: float) -> str:
    """The server's ``/metrics`` page, with a blocking GET (raises OSError if it fails, a page cut short included)."""
    request = urllib.request.Request(_metrics_url(server), headers=_headers(server))
    return read_body(request, timeout).decode()


def scrape(server: Any, timeout: float = 5.0) -> MetricsSample:
    """One sample now, with a blocking GET (for cells outside any load; ``t_s`` is 0).

    >>> scrape(server).num_requests_running  # doctest: +SKIP
    0
    """
    return MetricsSample.from_text(metrics_text(server, timeout))


def cache_config_info(server: Any, timeout: float = 10.0) -> dict[str, str]:
    """:func:`cache_config_labels` of a running server, with a blocking GET (raises OSError if it fails)."""
    return cache_config_labels(metrics_text(server, timeout))


async def poll_metrics(
    server: Any,
    stop: asyncio.Event,
    interval_s: float = 0.2,
    max_duration_s: float | None = None,
) -> list[MetricsSample]:
    """Scrape every ``interval_s`` seconds until ``stop`` is set (or ``max_duration_s``, if given).

    Runs on the caller's event loop with an async HTTP client, so the load it watches keeps
    running between scrapes. Scrapes that fail (server busy, timed out) are skipped, not
    raised: a monitor must not break the experiment it watches. One last sample is taken
    after ``stop``, so the final state is always in the list. Times are seconds since the
    poller started, on the client's monotonic clock.

    A cap that ends the polling before ``stop`` warns: counter deltas taken from the first and
    last samples would then miss whatever the load did after it.
    """
    import httpx

    url = _metrics_url(server)
    samples: list[MetricsSample] = []
    began = time.monotonic()
    async with httpx.AsyncClient(timeout=max(1.0, 5 * interval_s), headers=_headers(server)) as client:

        async def one() -> None:
            t = time.monotonic() - began
            try:
                response = await client.get(url)
                response.raise_for_status()
            except httpx.HTTPError:
                return
            samples.append(MetricsSample.from_text(response.text, t_s=t))

        while not stop.is_set():
            if max_duration_s is not None and time.monotonic() - began >= max_duration_s:
                warnings.warn(f"poll_metrics stopped at its cap of {max_duration_s:g} s before the load ended: "
                              f"the samples (and counter deltas from them) miss the rest of the load. Pass a "
                              f"larger max_duration_s, or None to poll until stop is set.", RuntimeWarning,
                              stacklevel=2)
                break
            tick = time.monotonic()
            await one()
            wait = interval_s - (time.monotonic() - tick)
            try:  # sleep until the next tick, but wake at once when the load ends
                await asyncio.wait_for(stop.wait(), timeout=max(wait, 0.0))
            except asyncio.TimeoutError:
                pass
        await one()
    return samples


async def watch(load: Awaitable[T], server: Any, interval_s: float = 0.2,
                settle_s: float = 0.0) -> tuple[T, list[MetricsSample]]:
    """Run ``load`` (a coroutine) while polling ``/metrics``; return its result and the samples.

    In a notebook cell::

        run, samples = await watch(run_load_test(server, workload), server)   # doctest: +SKIP

    The poller starts before the load and has no time limit of its own: it goes on for
    ``settle_s`` seconds after the load ends, however long the load took (gauges change once
    more when the last blocks are freed), then takes one last sample.
    """
    stop = asyncio.Event()
    poller = asyncio.ensure_future(poll_metrics(server, stop, interval_s))
    await asyncio.sleep(0)  # let the poller take its first sample before the load starts
    try:
        result = await load
        if settle_s > 0:
            await asyncio.sleep(settle_s)
    finally:
        stop.set()
        samples = await poller
    return result, samples

