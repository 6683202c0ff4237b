"""Numbers and tables from the requests notebook 04 sends to the real server (pure: no I/O).

The records are the load tester's `helpers.load.client.RequestRecord`s (times in seconds on
the client's clock since the run began); `helpers.batching.measure` sends them. Here they
become a burst's duration, its median time to first token, the moments requests finished
at, a decode batch's output tok/s, and the server's own timing between two `/metrics`
readings; `StepFitData` holds the step-time measurements and prints them as a table, and
`model_table` compares fitted models.

Taught in `notebooks/04_continuous_batching.ipynb`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from helpers.batching.step_time import (
    StepMeasurement,
    StepTimeModel,
    fit_step_time_model,
)
from helpers.load.client import RequestRecord
from helpers.load.summary import describe_failures


def burst_seconds(records: Sequence[RequestRecord]) -> float | None:
    """How long a replayed burst took: the first request sent -> the last token any request received.

    Used by notebook 04's live burst cell (``burst_s = burst_seconds(records)``) and the
    replay check after it. A failed request has no last token (None): it is left out of the
    end, never compared with a number; it still counts as sent. None when no request
    received a single token (then there is no duration to measure).

    >>> ok = RequestRecord(0, ok=True, output_tokens=3, send_s=0.5, ttft_s=0.5, e2e_s=3.5)
    >>> failed = RequestRecord(1, error="APIConnectionError: refused", send_s=0.0)
    >>> burst_seconds([ok, failed]), burst_seconds([failed])
    (4.0, None)
    """
    ends = [r.last_token_s for r in records if r.last_token_s is not None]
    if not ends:
        return None
    return max(ends) - min(r.send_s for r in records)


def median_ttft_s(records: Sequence[RequestRecord]) -> float | None:
    """Median time to first token of the requests that received one (the upper median for an
    even count, as ``sorted(ttfts)[len // 2]``); None when none did.

    Used by notebook 04's replay check (``measured_ttft_p50 = median_ttft_s(records)``):
    failed requests have no first token and are left out instead of breaking the sort.

    >>> rs = [RequestRecord(i, ok=True, ttft_s=t, e2e_s=t + 1) for i, t in enumerate((0.5, 1.5, 1.0))]
    >>> median_ttft_s(rs + [RequestRecord(3, error="boom")])
    1.0
    """
    ttfts = sorted(r.ttft_s for r in records if r.ttft_s is not None)
    return ttfts[len(ttfts) // 2] if ttfts else None


def finish_moments(records: Sequence[RequestRecord], within_s: float = 0.05) -> list[float]:
    """The distinct times requests finished at; finishes within `within_s` of the previous count once.

    >>> rs = [RequestRecord(i, ok=True, ttft_s=t, e2e_s=t) for i, t in enumerate((1.0, 1.01, 2.0))]
    >>> finish_moments(rs)
    [1.0, 2.0]
    """
    ends = sorted(r.last_token_s for r in records if r.ok and r.last_token_s is not None)
    moments: list[float] = []
    for t in ends:
        if not moments or t - moments[-1] > within_s:
            moments.append(t)
    return moments


def decode_tok_s(records: Sequence[RequestRecord]) -> float:
    """Output tok/s of a batch decoding together: batch size x the median request's steps per second.

    >>> r = RequestRecord(0, ok=True, output_tokens=11, ttft_s=0.1, e2e_s=1.1)   # 10 steps in 1 s
    >>> decode_tok_s([r, r])
    20.0
    """
    rates = [r.decode_steps_per_s for r in records]
    if not rates or any(rate is None for rate in rates):
        why = describe_failures(records) or "no tokens came back (or too few to time)"
        raise RuntimeError(f"a decode measurement request failed, so the batch's rate cannot be measured: {why} "
                           "Run the cell again; if it keeps failing, check the server's log.")
    return len(records) * statistics.median(rates)


def server_mean_seconds(before: dict[str, float] | None, after: dict[str, float] | None, timer: str,
                        expected_count: int) -> float | None:
    """Mean of one server histogram over the requests observed between two readings, or None
    unless exactly `expected_count` requests were observed (someone else's traffic, or none).

    >>> before = {"request_decode_time_seconds_sum": 1.0, "request_decode_time_seconds_count": 2}
    >>> after = {"request_decode_time_seconds_sum": 2.0, "request_decode_time_seconds_count": 4}
    >>> server_mean_seconds(before, after, "request_decode_time_seconds", 2)
    0.5
    """
    if before is None or after is None:
        return None
    count = after[f"{timer}_count"] - before[f"{timer}_count"]
    total = after[f"{timer}_sum"] - before[f"{timer}_sum"]
    return total / count if count == expected_count and total > 0 else None


@dataclass(frozen=True)
class StepFitData:
    """The measurements made on one server, the raw records they came from, and what was lost.

    >>> data = StepFitData([StepMeasurement.decode(4, 50.0)], records={})
    >>> print(data.table())
    measurement             steps  prompt tok  decode seqs   seconds
    decode x4                   1           0            4    0.0800

    Timings not made (a failed request, or a server that died) are listed in ``lost``:

    >>> cut = StepFitData([StepMeasurement.decode(1, 30.0)], records={}, lost=("decode x4 (repeat 1)",),
    ...                   stopped="server died: exit code -9", planned=2, requests_not_sent=4)
    >>> print(cut.describe_losses())
    Measuring stopped early (server died: exit code -9): 1 of 2 timings lost (decode x4 (repeat 1)); 0 requests failed, 4 never sent. What was measured is kept.
    >>> cut.fit()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: too few points to fit: 1 measurement for the 2 parameters ... Measuring stopped early (server died: ...
    """

    measurements: list[StepMeasurement]  # one per setting: median over repeats
    records: dict[str, list[RequestRecord]] = field(repr=False)  # label -> every request sent for it
    seconds: float = 0.0  # wall time of all measuring
    clock: str = "client"  # whose clock timed the decode batches: "server" (/metrics) or "client"
    prefill_clock: str = "client"  # whose clock timed the prefills (a GPU's group of prompts: the client's)
    lost: tuple[str, ...] = ()  # timings planned and not made, e.g. "decode x8 (repeat 2)"
    stopped: str | None = None  # why measuring stopped early, e.g. "server died: exit code -9"
    planned: int = 0  # timings planned: rounds x (batch sizes + 2 prefills, short and long); 0 where unknown
    requests_not_sent: int = 0  # requests of the lost timings that were never sent
    max_num_batched_tokens: int = StepTimeModel.max_num_batched_tokens  # the measured server's step budget
    # label -> every timing made: a decode batch's output tok/s, a prefill's seconds (the short and the long
    # prompt apart, before their medians' difference became one measurement)
    timings: dict[str, tuple[float, ...]] = field(default_factory=dict, repr=False)

    @property
    def requests_failed(self) -> int:
        """Requests sent for a timing that failed (kept in ``records``, with their errors)."""
        return sum(not r.ok for batch in self.records.values() for r in batch)

    def describe_losses(self) -> str | None:
        """How many timings and requests were lost, and why, in words; None when none were."""
        if not self.lost and self.stopped is None:
            return None
        head = f"Measuring stopped early ({self.stopped})" if self.stopped else "Some timings failed"
        of = f" of {self.planned}" if self.planned else ""
        which = ", ".join(self.lost[:6]) + (", ..." if len(self.lost) > 6 else "")
        failed = self.requests_failed
        return (f"{head}: {len(self.lost)}{of} timing{'s' * ((self.planned or len(self.lost)) != 1)} lost ({which}); {failed} "
                f"request{'s' * (failed != 1)} failed, {self.requests_not_sent} never sent. What was measured is kept.")

    def fit(self, base: StepTimeModel | None = None) -> StepTimeModel:
        """:func:`fit_step_time_model` on the measurements made, for the measured server's step
        budget (``base`` defaults to the default model with that budget); a ``ValueError`` that
        says so when too few were made to fit (and, if timings were lost, how and why)."""
        base = base or StepTimeModel(max_num_batched_tokens=self.max_num_batched_tokens)
        try:
            return fit_step_time_model(self.measurements, base)
        except ValueError as error:
            losses = self.describe_losses()
            if losses is None:
                raise
            raise ValueError(f"{error} {losses}") from None

    def table(self) -> str:
        """The measurements as an aligned text table."""
        lines = [f"{'measurement':<22}{'steps':>7}{'prompt tok':>12}{'decode seqs':>13}{'seconds':>10}"]
        for m in self.measurements:
            lines.append(f"{m.label:<22}{m.num_steps:>7}{m.num_prefill_tokens:>12}{m.num_decode_seqs:>13}"
                         f"{m.seconds:>10.4f}")
        return "\n".join(lines)


def ms_text(seconds: float, digits: int = 5) -> str:
    """``seconds`` in milliseconds, to three decimals or more: as many as ``digits`` significant figures need.

    A GPU's decode cost is about 0.01 ms a sequence; three decimals would print it as 0.012, and
    notebook 04's exercise (4 x overhead / decode cost) from that would be about 2% off. Five figures
    keep that quotient within 0.01% of the model's own.

    >>> ms_text(0.0317), ms_text(0.00332), ms_text(0.0000117834), ms_text(0.0)
    ('31.700', '3.3200', '0.011783', '0.000')
    """
    ms = 1000 * seconds
    if ms == 0 or not math.isfinite(ms):
        return f"{ms:.3f}"
    return f"{ms:.{max(3, digits - 1 - math.floor(math.log10(abs(ms))))}f}"


def model_table(models: dict[str, StepTimeModel]) -> str:
    """Parameters of several step-time models side by side, in milliseconds, and their step budgets.

    >>> print(model_table({"a": StepTimeModel(0.03, 0.001, 0.002)}))
    parameter                             a
    overhead (ms/step)               30.000
    prefill (ms/prompt token)        1.0000
    decode (ms/sequence)             2.0000
    1 request alone (tok/s)          31.250
    step budget (tokens)              2,048

    The three costs are printed by :func:`ms_text`, to five significant figures: on a GPU they are
    hundredths of a millisecond, and notebook 04's exercise computes from them. The front end's two
    rows appear where a model has them (``helpers.batching.front_end``).
    """
    rows = [
        ("overhead (ms/step)", lambda m: ms_text(m.overhead_s), ""),
        ("prefill (ms/prompt token)", lambda m: ms_text(m.prefill_token_s), ""),
        ("decode (ms/sequence)", lambda m: ms_text(m.decode_seq_s), ""),
        ("1 request alone (tok/s)", lambda m: m.decode_tok_s(1), ".3f"),
        ("step budget (tokens)", lambda m: m.max_num_batched_tokens, ","),
    ]
    if any(m.stream_token_s or m.admit_request_s for m in models.values()):  # measured on a GPU only
        rows += [("front end (us/token)", lambda m: 1e6 * m.stream_token_s, ".1f"),
                 ("front end (ms/request)", lambda m: 1000 * m.admit_request_s, ".3f")]
    width = max(12, *(len(k) + 2 for k in models))
    lines = [f"{'parameter':<27}" + "".join(f"{k:>{width}}" for k in models)]
    for name, get, form in rows:
        lines.append(f"{name:<27}" + "".join(f"{get(m):>{width}{form}}" for m in models.values()))
    return "\n".join(lines)
