"""Is a queue growing? Two slopes of one rate's requests: TTFT against send time, and the pace of events.

Used by :mod:`helpers.traffic.rates` to judge a point of a request-rate sweep; pure (numpy only).
:func:`ttft_growth` is the criterion (why: the ``rates`` module's docstring), :func:`pace` the arrival and
completion rates the lab plots.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pace(times: Sequence[float]) -> float | None:
    """Events per second: 1 / the slope of Tukey's resistant line through the sorted times against their
    rank (the median of the last third minus that of the first, over their distance in rank); None for
    fewer than 3 times or no spread. A constant offset (every request's latency) leaves it unchanged, and
    a few slow requests at the end barely move it, where they would tilt a least-squares line.

    >>> pace([0.5, 1.0, 1.5, 2.0]), pace([3.5, 4.0, 4.5, 5.0]), pace([0, 1, 2, 3, 4, 5, 6, 7, 28])
    (2.0, 2.0, 1.0)
    """
    ordered = np.sort(np.asarray(times, dtype=float))
    n, third = len(ordered), len(ordered) // 3
    if n < 3:
        return None
    slope = float(np.median(ordered[-third:]) - np.median(ordered[:third])) / (n - third)
    return round(1.0 / slope, 9) if slope > 1e-9 else None  # no spread: all at one instant


def ttft_growth(sent_s: Sequence[float], ttft_s: Sequence[float], max_requests: int = 2000) -> float | None:
    """The median, over every two requests, of (difference of TTFT) / (difference of send time): how many
    seconds of TTFT each second of arrivals adds. Near 0 while the server keeps up; about rate / capacity - 1
    past saturation. None for fewer than 3 requests or no spread in send times. Past ``max_requests`` an
    evenly spaced subset is used (the pairs grow as the square).

    >>> ttft_growth([0, 1, 2, 3], [0.5] * 4), ttft_growth(range(6), [0.5, 1.0, 1.5, 2.0, 2.5, 12.0])  # one outlier
    (0.0, 0.5)
    """
    sent, ttft = np.asarray(sent_s, dtype=float), np.asarray(ttft_s, dtype=float)
    if len(sent) != len(ttft):
        raise ValueError(f"{len(sent)} send times for {len(ttft)} TTFTs")
    if len(sent) > max_requests:
        keep = np.linspace(0, len(sent) - 1, max_requests).round().astype(int)
        sent, ttft = sent[keep], ttft[keep]
    first, second = np.triu_indices(len(sent), k=1)
    apart = sent[second] - sent[first]
    spread = np.abs(apart) > 1e-6  # requests sent at one instant carry no slope
    if len(sent) < 3 or not spread.any():
        return None
    return round(float(np.median((ttft[second] - ttft[first])[spread] / apart[spread])), 6)
