"""One point of a request-rate sweep, and what a sweep's points say: saturation and the best rate under an SLO.

A :class:`RatePoint` is one (setting, offered rate) of open-loop traffic (:mod:`helpers.load.arrivals`):
what was offered, what the server achieved, p50/p95 latencies, the engine's queue and prefill means
(:mod:`helpers.load.ttft_split`), goodput (:mod:`helpers.load.slo`) and a ``status``: ``"ok"``,
``"not run: <reason>"`` or ``"failed: <reason>"``. It keeps each request's (TTFT, end-to-end,
output tokens), so any other SLO can be asked of it later (:func:`slo_table`).

**Keeping up.** Past saturation requests arrive faster than they finish, so each waits longer than the
one before: TTFT grows with the time a request was sent, by x - 1 seconds per second of arrivals when the
rate is x times what the server can serve (the criterion notebook 04's simulator applies to its queue,
:func:`helpers.traffic.saturation_model.queue_growth`). A point's *TTFT growth* is that slope, measured as
the median of the slopes between every two requests (Theil and Sen's estimator, :func:`helpers.traffic.backlog.ttft_growth`): a
burst of arrivals or one slow request tilts a few of those slopes, not their median. A point keeps up
while its growth is at most :data:`GROWTH_LIMIT` and no request failed. Why not compare rates: a point's
*completion rate* (1 / the slope of its sorted completion times against their rank, :func:`~helpers.traffic.backlog.pace`) and its
*arrival rate* (the same of its send times) are plotted, but over the 10-30 requests of a CPU point a
backlog that grows still lets completions keep pace for a while (2026-12-02: sent 1.56 req/s, completed
1.46, its last requests waited 8 s, its first 2.4 s). "Completed / wall time" (``vllm bench serve``'s) is
worse: the wall time includes the last request's latency. vLLM's own queue time misses it on a GPU with a large
``--max-num-seqs``, whose batch absorbs the load until every slot is taken. No criterion tells apart a machine
slowed by other programs (a shared CPU: slow tokens, nothing queued, a high ``load_avg_1m``).
:func:`measured_saturation` brackets the rate where keeping up stops and estimates what the server serves
as the overloaded points' completion rate (on a GPU whose front end is the limit it serves less the further it is
overloaded: SmolLM2 on an H200, 2026-12-07, completed 26.5 req/s at a rate it kept up with, 20 past it).

**Meeting an SLO.** A point meets an SLO when at least :data:`SLO_SHARE` (95%) of its requests
were good (succeeded within every limit), i.e. the p95 of each limited latency is within its limit;
:func:`best_rate_under_slo` gives each setting's highest such offered rate. Saving and loading a
sweep: :func:`save_rate_sweep`, :func:`load_rate_sweep`. Taught in ``labs/02_serving_real_traffic.ipynb``.

    >>> def at(rate, served):  # 20 requests; past `served` each waits (rate / served - 1) s per s sent longer
    ...     sent = [i / rate for i in range(20)]
    ...     lat = [(0.3 + max(rate / served - 1, 0) * s, 2.0, 16) for s in sent]
    ...     return RatePoint("seqs=4", rate, 1.0, 20, num_ok=20, achieved_rate=min(rate, served), sent_s=sent,
    ...                      latencies=lat)
    >>> pts = [at(0.5, 1.35), at(1.0, 1.35), at(2.0, 1.3), at(4.0, 1.4)]
    >>> [p.keeps_up for p in pts], round(pts[2].ttft_growth, 3)
    ([True, True, False, False], 0.538)
    >>> measured_saturation(pts)["seqs=4"]
    MeasuredSaturation(setting='seqs=4', last_kept_up=1.0, first_not=2.0, estimate=1.35)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from helpers.errors import ResultsFileError
from helpers.files import read_json, write_atomically
from helpers.load.slo import SLO, tpot_ms
from helpers.load.summary import percentile
from helpers.load.ttft_split import ttft_split
from helpers.traffic.backlog import pace, ttft_growth

FORMAT = "vllm-course/rate-sweep/1"
GROWTH_LIMIT = 0.2  # s of TTFT gained per s of arrivals: above it, the queue grows (the point is past saturation)
OVERLOAD_LOSS = 1.1  # a kept-up rate that completed more than this times the overloaded estimate: said so
SLO_SHARE = 0.95  # share of requests that must be good for a point to meet an SLO (a p95 within limits)
OK = "ok"


@dataclass(frozen=True)
class RatePoint:
    """One (setting, offered rate): rates in requests/s, latencies in s (``_s``) or ms (``_ms``); None where
    not measured. ``latencies``: per request (TTFT s, end-to-end s, output tokens), None times for a failure."""

    setting: str  # e.g. "max_num_seqs=4"
    offered_rate: float  # requests per second asked for (arrival_times' rate)
    burstiness: float
    num_requests: int
    status: str = OK  # "ok", "not run: <reason>" or "failed: <reason>"
    num_ok: int = 0
    wall_s: float | None = None  # first send -> last request returned, client clock
    arrival_rate: float | None = None  # requests per second as sent (see the module docstring)
    achieved_rate: float | None = None  # completions per second (see the module docstring)
    output_tok_per_s: float | None = None
    total_tok_per_s: float | None = None  # prompt (chat template included) + output tokens per second
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    e2e_p50_s: float | None = None
    e2e_p95_s: float | None = None
    queue_mean_s: float | None = None  # vLLM's request_queue_time_seconds, mean over the point's requests
    prefill_mean_s: float | None = None  # vLLM's request_prefill_time_seconds, likewise
    slo: str | None = None  # the SLO goodput was measured against, in vLLM's spelling ("ttft:500 tpot:50")
    goodput_per_s: float | None = None  # good requests per second of wall time (vLLM's request goodput)
    slo_fraction: float | None = None  # good requests / requests sent
    latencies: tuple[tuple[float | None, float | None, int], ...] = ()
    sent_s: tuple[float, ...] = ()  # per request, seconds from the run's start: with latencies, the pace again
    load_avg_1m: float | None = None  # the machine's load at the start: other programs slow a point down too

    @property
    def ran(self) -> bool:
        return self.status == OK

    @cached_property  # a median over every pair of requests: computed once, however often it is asked
    def ttft_growth(self) -> float | None:
        """Seconds of TTFT gained per second of arrivals (:func:`ttft_growth`); None for fewer than 3 TTFTs
        with their send times (a file saved without ``sent_s`` has none)."""
        pairs = [(sent, ttft) for sent, (ttft, _, _) in zip(self.sent_s, self.latencies) if ttft is not None]
        return ttft_growth([sent for sent, _ in pairs], [ttft for _, ttft in pairs])

    @property
    def keeps_up(self) -> bool | None:
        """TTFT did not grow past :data:`GROWTH_LIMIT` over the point and nothing failed; None for a point
        not measured or with fewer than 3 TTFTs."""
        growth = self.ttft_growth if self.ran else None
        if growth is None:
            return None
        return self.num_ok == self.num_requests and growth <= GROWTH_LIMIT

    def share_good(self, slo: SLO) -> float:
        """Requests sent that succeeded within every limit of ``slo``, as a fraction."""
        good = sum(_met(slo, ttft, e2e, tokens) for ttft, e2e, tokens in self.latencies)
        return good / self.num_requests if self.num_requests else math.nan

    def meets(self, slo: SLO) -> bool:
        """At least :data:`SLO_SHARE` of the requests were good (a measured point only)."""
        return self.ran and self.share_good(slo) >= SLO_SHARE

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["latencies"] = [[_round(t), _round(e), n] for t, e, n in self.latencies]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RatePoint:
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["latencies"] = tuple((t, e, int(n)) for t, e, n in data.get("latencies") or ())
        values["sent_s"] = tuple(data.get("sent_s") or ())
        return cls(**values)


def not_run(setting: str, rate: float, burstiness: float, num_requests: int, reason: str) -> RatePoint:
    """A planned point that was not measured, and why (``"time bound"``, ``"server died: exit code -9"``)."""
    return RatePoint(setting, float(rate), float(burstiness), num_requests, status=f"not run: {reason}")


def rate_point(run: Any, before: Any, after: Any, *, setting: str, offered_rate: float, burstiness: float,
               slo: SLO | None = None) -> RatePoint:
    """The point a :class:`~helpers.load.run.LoadTestRun` measured, with two ``/metrics`` scrapes
    (MetricsSample or dicts) taken before and after it for the engine's queue and prefill times."""
    records = run.records
    ok = [r for r in records if r.ok]
    s = run.summary
    tpots = [tpot_ms(r.e2e_s, r.ttft_s, r.output_tokens) for r in ok
             if r.output_tokens and r.output_tokens > 1 and r.e2e_s is not None and r.ttft_s is not None]
    try:
        split = ttft_split(before, after, [r.ttft_s for r in ok])
        queue, prefill = split.queue_s, split.prefill_s
    except ValueError:  # no request finished between the scrapes
        queue = prefill = None
    total_tokens = s.prompt_tokens_total + s.output_tokens_total
    good = sum(slo.met_by(r) for r in records) if slo is not None else None
    return RatePoint(
        setting=setting, offered_rate=float(offered_rate), burstiness=float(burstiness), num_requests=len(records),
        num_ok=s.num_ok, wall_s=s.wall_s, arrival_rate=pace([r.send_s for r in records]),
        achieved_rate=pace([r.done_s for r in ok if r.done_s is not None]),
        output_tok_per_s=s.output_tok_per_s, total_tok_per_s=total_tokens / s.wall_s if s.wall_s > 0 else None,
        ttft_p50_s=s.ttft_p50_s, ttft_p95_s=s.ttft_p95_s, tpot_p50_ms=percentile(tpots, 50),
        tpot_p95_ms=percentile(tpots, 95), itl_p50_ms=s.itl_p50_ms, itl_p95_ms=s.itl_p95_ms,
        e2e_p50_s=s.e2e_p50_s, e2e_p95_s=s.e2e_p95_s, queue_mean_s=queue, prefill_mean_s=prefill,
        slo=" ".join(slo.vllm_args()[1:]) if slo is not None else None,
        goodput_per_s=good / s.wall_s if good is not None and s.wall_s > 0 else None,
        slo_fraction=good / len(records) if good is not None and records else None,
        # to 10 microseconds, as the file keeps them: a point reloads equal to itself
        latencies=tuple((_round(r.ttft_s), _round(r.e2e_s), r.output_tokens or 0) if r.ok else (None, None, 0)
                        for r in records), sent_s=tuple(_round(r.send_s) for r in records),
        load_avg_1m=run.settings.get("load_avg_1m_at_start"))


@dataclass(frozen=True)
class MeasuredSaturation:
    """Where a setting stopped keeping up: the last offered rate it kept up with, the first it did not
    (None: not reached, or not below the lowest rate measured), and ``estimate``, the median completion
    rate of the overloaded points (None when none was overloaded); requests per second. ``kept_completed``: what
    the last rate kept up with completed, where measured."""

    setting: str
    last_kept_up: float | None
    first_not: float | None
    estimate: float | None
    kept_completed: float | None = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        if self.first_not is None:
            return f"{self.setting}: kept up at every rate measured (up to {self.last_kept_up:g} req/s)"
        kept = f"kept up at {self.last_kept_up:g} req/s, " if self.last_kept_up is not None else ""
        text = (f"{self.setting}: {kept}not at {self.first_not:g} req/s; it serves about "
                f"{self.estimate:.2f} req/s when overloaded")
        if self.last_kept_up is not None and self.last_kept_up >= self.estimate:  # a short run at the knee itself
            text += (f" ({self.last_kept_up:g} req/s is no less: that rate sat at the knee or past it, where over a "
                     "run this short the queue had not yet grown past the keep-up limit)")
        if self.kept_completed is not None and self.kept_completed > OVERLOAD_LOSS * self.estimate:
            text += (f"; at {self.last_kept_up:g} req/s it completed {self.kept_completed:.2f} req/s, more than when "
                     "overloaded: this server served less the further past its knee it was driven")
        return text


def measured_saturation(points: Sequence[RatePoint]) -> dict[str, MeasuredSaturation]:
    """Per setting, the bracket of offered rates where the server stops keeping up (module docstring);
    points not run, failed or without rates are left out; settings with none measured are absent."""
    found = {}
    for setting, measured in _by_setting(points).items():
        judged = [(p.offered_rate, p.keeps_up, p.achieved_rate) for p in measured if p.keeps_up is not None]
        if not judged:
            continue
        overloaded = [(rate, achieved) for rate, kept, achieved in judged if not kept]
        first_not = min((rate for rate, _ in overloaded), default=None)
        kept_rates = [rate for rate, kept, _ in judged if kept and (first_not is None or rate < first_not)]
        estimate = float(np.median([achieved for _, achieved in overloaded])) if overloaded else None
        last = max(kept_rates, default=None)
        completed = next((achieved for rate, _, achieved in judged if rate == last), None)
        found[setting] = MeasuredSaturation(setting, last, first_not, None if estimate is None else round(estimate, 9),
                                            kept_completed=completed)
    return found


def slo_table(points: Sequence[RatePoint], slo: SLO) -> list[dict[str, Any]]:
    """One row per measured point: setting, offered rate, share of requests good, goodput, meets.

    >>> p = RatePoint("s", 1.0, 1.0, 2, num_ok=2, wall_s=4.0, latencies=((0.2, 1.0, 16), (0.9, 2.0, 16)))
    >>> slo_table([p], SLO(ttft_ms=500))
    [{'setting': 's', 'offered_rate': 1.0, 'share_good': 0.5, 'goodput_per_s': 0.25, 'meets': False}]
    """
    rows = []
    for p in points:
        if not p.ran:
            continue
        share = p.share_good(slo)
        rows.append({"setting": p.setting, "offered_rate": p.offered_rate, "share_good": share,
                     "goodput_per_s": share * p.num_requests / p.wall_s if p.wall_s else None,
                     "meets": share >= SLO_SHARE})
    return rows


def best_rate_under_slo(points: Sequence[RatePoint], slo: SLO) -> dict[str, float | None]:
    """Per setting, the highest offered rate whose point meets ``slo`` (:meth:`RatePoint.meets`);
    None for a setting none of whose measured points meets it."""
    return {setting: max((p.offered_rate for p in measured if p.meets(slo)), default=None)
            for setting, measured in _by_setting(points).items()}


def save_rate_sweep(points: Sequence[RatePoint], path: Path | str, **about: Any) -> Path:
    """Write ``points`` (any status) and ``about`` (JSON-ready facts: server, workload) to ``path``,
    whole or not at all (:func:`helpers.files.write_atomically`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": FORMAT, "about": about, "points": [p.to_dict() for p in points]}
    return write_atomically(path, json.dumps(data, indent=1, allow_nan=True) + "\n")


def load_rate_sweep(path: Path | str) -> tuple[list[RatePoint], dict[str, Any]]:
    """The points and facts a :func:`save_rate_sweep` file holds; a file that is not one raises
    :class:`~helpers.errors.ResultsFileError` naming it."""
    remedy = "Run the sweep again (or delete the file)."
    data = read_json(path, remedy=remedy)
    if not (isinstance(data, dict) and data.get("format") == FORMAT):
        raise ResultsFileError(f"{path} is not a rate-sweep file (expected format {FORMAT!r}). {remedy}")
    try:
        return [RatePoint.from_dict(p) for p in data["points"]], dict(data.get("about") or {})
    except (KeyError, TypeError, ValueError) as error:
        raise ResultsFileError(f"{path} is a damaged rate-sweep file ({type(error).__name__}: {error}). "
                               f"{remedy}") from error


def _met(slo: SLO, ttft_s: float | None, e2e_s: float | None, tokens: int) -> bool:
    # a kept latency triple read as the record SLO.met_by judges: one definition of "good"
    return slo.met_by(SimpleNamespace(ok=e2e_s is not None, ttft_s=ttft_s, e2e_s=e2e_s, output_tokens=tokens))


def _by_setting(points: Sequence[RatePoint]) -> dict[str, list[RatePoint]]:
    grouped: dict[str, list[RatePoint]] = {}
    for p in sorted(points, key=lambda p: p.offered_rate):
        grouped.setdefault(p.setting, []).append(p)
    return grouped


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 5)
