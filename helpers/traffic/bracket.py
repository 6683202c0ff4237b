"""Bracketing a rate sweep's knee: the one rate a sweep adds when its planned rates missed it.

A sweep planned from a prediction can miss the knee three ways, each seen on a real machine:
every rate kept up (a CPU slower than its clock), none did (lab 2 on an H100, whose front end the clock cannot
see, served 0.56x the predicted rate), or the lightest rate "kept up" only because it sat at the knee itself:
its requests waited in vLLM's queue for most of their time, but no longer at the end than at the start (lab 2
on an H100 at 64 slots, 2026-12-07: 98.8 req/s, TTFT p50 2.21 s of an end-to-end 2.90 s, 1.79 s of it queued).
A light-load baseline taken there is not light, and lab 2's default SLO, built from it, came out loose
(TTFT 5.4 s). :func:`bracketing_rate` gives the one rate that closes the gap: twice the highest planned rate,
or half the lowest. It is one rate, not two: where every rate kept up it goes up even if the lightest was
queueing, since without an overloaded rate there is no saturation to measure. Used by
:func:`helpers.traffic.sweep.sweep_rates` with ``bracket=True``.
"""

from __future__ import annotations

from collections.abc import Sequence

from helpers.traffic.rates import RatePoint

BRACKET_STEP = 2.0  # the extra rate: this times the highest planned rate, or the lowest over it
QUEUED_SHARE = 0.5  # a lightest rate whose requests spent more than this share of their time queued is no baseline


def mostly_queued(point: RatePoint) -> bool:
    """Its requests spent more than :data:`QUEUED_SHARE` of their end-to-end time (p50) in vLLM's waiting queue
    (its ``request_queue_time_seconds``, mean over the point): the server was the limit, whether or not the
    queue grew. False where either figure was not measured.

    >>> at = lambda queued, e2e: RatePoint("s", 1.0, 1.0, 4, queue_mean_s=queued, e2e_p50_s=e2e)
    >>> mostly_queued(at(1.79, 2.90)), mostly_queued(at(0.04, 0.30)), mostly_queued(at(None, 2.0))
    (True, False, False)
    """
    queued, e2e = point.queue_mean_s, point.e2e_p50_s
    return queued is not None and bool(e2e) and queued > QUEUED_SHARE * e2e


def bracketing_rate(points: Sequence[RatePoint]) -> float | None:
    """The rate that brackets a sweep's knee: ``BRACKET_STEP`` times the highest rate when every rate judged
    (:attr:`RatePoint.keeps_up`) kept up; the lowest over ``BRACKET_STEP`` when none did, or when some did not
    and the lowest kept up but was :func:`mostly_queued`; otherwise None, and None when the end rate it would go
    past was not judged (not run, failed, or too few answers: what it would have shown is unknown, and the extra
    rate could repeat a planned one).

    >>> def point(rate, kept, queued=0.0):  # four requests sent 1 s apart whose TTFT grows 0 or 1 s a second
    ...     return RatePoint("s", rate, 1.0, 4, num_ok=4, sent_s=(0, 1, 2, 3), queue_mean_s=queued, e2e_p50_s=1.0,
    ...                      latencies=tuple((0.1 + (0 if kept else s), 1.0, 16) for s in range(4)))
    >>> bracketing_rate([point(1, True), point(2, True)]), bracketing_rate([point(1, False), point(2, False)])
    (4.0, 0.5)
    >>> bracketing_rate([point(1, True), point(2, False)]) is None  # bracketed
    True
    >>> bracketing_rate([point(1, True, queued=0.8), point(2, False)])  # the lightest sat at the knee
    0.5
    """
    judged = [p for p in points if p.keeps_up is not None]
    if not judged:
        return None
    rates = [p.offered_rate for p in points]
    lowest = min(judged, key=lambda p: p.offered_rate)
    if all(p.keeps_up for p in judged):  # first find the knee: the one extra rate goes up, queued lowest or not
        top = max(p.offered_rate for p in judged)
        return round(top * BRACKET_STEP, 3) if top == max(rates) else None
    if lowest.keeps_up and not mostly_queued(lowest):
        return None  # one rate kept up below one that did not: bracketed
    return round(lowest.offered_rate / BRACKET_STEP, 3) if lowest.offered_rate == min(rates) else None


def why_bracketed(points: Sequence[RatePoint], extra: float) -> str:
    """Why the sweep of ``points`` adds the rate ``extra`` (:func:`bracketing_rate`'s answer), in words.

    >>> pts = [RatePoint("s", 2.0, 1.0, 4, num_ok=4, sent_s=(0, 1, 2, 3), latencies=((0.1, 1.0, 16),) * 4,
    ...                  queue_mean_s=0.9, e2e_p50_s=1.2)]
    >>> why_bracketed(pts, 1.0)
    'its lightest rate, 2 req/s, queued its requests for 0.9 s of 1.2 s end to end; one more at 1 req/s, for light load'
    """
    lowest = min((p for p in points if p.keeps_up is not None), key=lambda p: p.offered_rate)
    if extra > lowest.offered_rate:
        return f"every rate kept up; one more at {extra:g} req/s, to bracket where it stops keeping up"
    if lowest.keeps_up:
        return (f"its lightest rate, {lowest.offered_rate:g} req/s, queued its requests for "
                f"{lowest.queue_mean_s:.2g} s of {lowest.e2e_p50_s:.2g} s end to end; one more at {extra:g} req/s, "
                "for light load")
    return f"no rate kept up; one more at {extra:g} req/s, to bracket where it stops keeping up"
