"""Measure the real server to fit the simulator's step-time model, and replay traces against it.

`helpers.batching.step_time.StepTimeModel` says how long one engine step takes:
overhead + per-prompt-token cost + per-decoding-sequence cost. Three small, bounded loads
on a running server give it numbers:

- decode: `batch_size` requests sent together, each generating `output_len` tokens after a
  256-token prompt; a request's steps per second (first to last token, so its prefill is
  left out) times the batch size is the batch's output tok/s (`StepMeasurement.decode`).
  Batch size 1 is the single-request speed.
- prefill: one prompt of `prefill_len` tokens alone, one output token; its time to first
  token is one prefill step (`StepMeasurement.prefill`).

Both are read on the server's own clock where it publishes one: the growth of vLLM's
histograms `vllm:request_decode_time_seconds` (first token to last, per request) and
`vllm:time_to_first_token_seconds` across the measurement, from `/metrics`. The client's
clock is the fallback. Why: when the client's process is starved of CPU for a moment (the
server's threads hold every core), streamed tokens queue up and arrive in one clump, and
a rate timed from the client can come out a hundred times too fast.

Prompts are random token ids (sent as a list of ints to `/v1/completions`), so every
prompt has exactly the length asked for, no chat template adds to it, and no two requests
share a prefix-cache hit. Every request sets `ignore_eos`, so it generates exactly
`max_tokens` tokens. All traffic goes to the server it is given (127.0.0.1 in the course);
counts are small and every request has a timeout.

`send_trace` replays a `helpers.batching.trace` trace against the server (request i is sent
at its `arrival_s`), so the same trace can be simulated and measured.

The request function never raises: it returns a `TimedRequest` with `ok` / `error`.
Leaves out: sampling settings (greedy), stop strings, and chat (see the lab for chat load).

Taught in `notebooks/04_continuous_batching.ipynb`.

Example (in a notebook cell, against a running server)::

    >>> data = await measure_step_times(server, batch_sizes=(1, 4, 8))   # doctest: +SKIP
    >>> fit_step_time_model(data.measurements)                           # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from helpers.batching.trace import Request
from helpers.load.summary import describe_failures
from helpers.load.poller import scrape
from helpers.batching.step_time import StepMeasurement, StepTimeModel, fit_step_time_model

# Token ids for random prompts: clear of SmolLM2's special tokens (ids 0-16) and inside
# its 49,152-token vocabulary.
TOKEN_ID_RANGE = (1_000, 30_000)
REQUEST_TIMEOUT_S = 120.0  # no single measurement request may take longer


@dataclass(frozen=True)
class TimedRequest:
    """What one streamed completion did, on the client's clock (seconds since the run began)."""

    request_id: str
    prompt_len: int  # tokens sent
    max_tokens: int  # tokens asked for (ignore_eos: all of them are generated)
    sent_s: float
    first_token_s: float | None  # first streamed chunk with text; None if it failed before
    last_token_s: float | None  # last streamed chunk with text
    num_output_tokens: int  # from the server's usage report (0 if none came)
    num_chunks: int  # streamed chunks that carried text (usually one token each)
    ok: bool
    error: str | None = None

    @property
    def ttft_s(self) -> float | None:  # seconds: request sent -> first token received
        return None if self.first_token_s is None else self.first_token_s - self.sent_s

    @property
    def e2e_s(self) -> float | None:  # seconds: request sent -> last token received
        return None if self.last_token_s is None else self.last_token_s - self.sent_s

    @property
    def decode_steps_per_s(self) -> float | None:
        """Tokens after the first, per second between the first and last token: the rate of
        the engine steps this request decoded in."""
        if not self.ok or self.first_token_s is None or self.last_token_s is None or self.num_output_tokens < 2:
            return None
        span = self.last_token_s - self.first_token_s
        return (self.num_output_tokens - 1) / span if span > 0 else None


def random_prompt(prompt_len: int, rng: np.random.Generator) -> list[int]:
    """`prompt_len` random token ids: an exact-length prompt the prefix cache has never seen."""
    return [int(t) for t in rng.integers(*TOKEN_ID_RANGE, size=prompt_len)]


async def send_one(
    client: Any,
    model: str,
    prompt: list[int],
    max_tokens: int,
    request_id: str,
    began: float,
) -> TimedRequest:
    """One streamed `/v1/completions` request of exactly `max_tokens` output tokens. Never raises.

    `client` is an `openai.AsyncOpenAI`; `began` is the `time.monotonic()` the run started at.
    """
    now = lambda: time.monotonic() - began  # noqa: E731
    sent = now()
    first = last = None
    chunks = usage_tokens = 0
    try:
        stream = await client.completions.create(
            model=model, prompt=prompt, max_tokens=max_tokens, temperature=0.0, stream=True,
            stream_options={"include_usage": True}, timeout=REQUEST_TIMEOUT_S,
            extra_body={"ignore_eos": True},
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].text:
                last = now()
                first = last if first is None else first
                chunks += 1
            if chunk.usage is not None:
                usage_tokens = chunk.usage.completion_tokens
        ok = usage_tokens == max_tokens
        error = None if ok else f"asked for {max_tokens} tokens, got {usage_tokens}"
    except Exception as exc:  # noqa: BLE001  # a load tester records failures, it does not stop
        ok, error = False, f"{type(exc).__name__}: {exc}"
    return TimedRequest(request_id, len(prompt), max_tokens, sent, first, last, usage_tokens, chunks, ok, error)


def _client_and_model(server: Any) -> tuple[Any, str]:
    """(AsyncOpenAI client, model name) from a VLLMServer."""
    return server.async_client(max_retries=0), server.model_name


async def send_trace(server: Any, trace: Sequence[Request], seed: int = 0, quiet: bool = False) -> list[TimedRequest]:
    """Replay a trace: request i is sent `arrival_s` seconds after the start, with a random
    prompt of `prompt_len` tokens, asking for `output_len` tokens. Returns records in trace order.

    Every request of the trace is sent (keep traces small: this is a bounded load). When some
    fail, it prints how many and why (e.g. "2 of 20 requests failed: APIConnectionError: ...")
    unless `quiet`; failed records keep None for the times they never reached.
    """
    client, model = _client_and_model(server)
    rng = np.random.default_rng(seed)
    prompts = [random_prompt(r.prompt_len, rng) for r in trace]
    began = time.monotonic()

    async def at_arrival(request: Request, prompt: list[int]) -> TimedRequest:
        await asyncio.sleep(max(0.0, request.arrival_s - (time.monotonic() - began)))
        return await send_one(client, model, prompt, request.output_len, request.request_id, began)

    try:
        records = list(await asyncio.gather(*(at_arrival(r, p) for r, p in zip(trace, prompts))))
    finally:
        await client.close()
    failures = describe_failures(records)
    if failures and not quiet:
        print(failures)
    return records


def burst_seconds(records: Sequence[TimedRequest]) -> float | None:
    """How long a replayed burst took: the first request sent -> the last token any request received.

    Used by notebook 04's live burst cell (``burst_s = burst_seconds(records)``) and the
    replay check after it. A failed request has no last token (None): it is left out of the
    end, never compared with a number; it still counts as sent. None when no request
    received a single token (then there is no duration to measure).

    >>> ok = TimedRequest("a", 16, 3, 0.5, 1.0, 4.0, 3, 3, True)
    >>> failed = TimedRequest("b", 16, 3, 0.0, None, None, 0, 0, False, "APIConnectionError: refused")
    >>> burst_seconds([ok, failed]), burst_seconds([failed])
    (4.0, None)
    """
    ends = [r.last_token_s for r in records if r.last_token_s is not None]
    if not ends:
        return None
    return max(ends) - min(r.sent_s for r in records)


def median_ttft_s(records: Sequence[TimedRequest]) -> float | None:
    """Median time to first token of the requests that received one (the upper median for an
    even count, as ``sorted(ttfts)[len // 2]``); None when none did.

    Used by notebook 04's replay check (``measured_ttft_p50 = median_ttft_s(records)``):
    failed requests have no first token and are left out instead of breaking the sort.

    >>> rs = [TimedRequest(str(i), 16, 3, 0.0, t, t + 1, 3, 3, True) for i, t in enumerate((0.5, 1.5, 1.0))]
    >>> median_ttft_s(rs + [TimedRequest("x", 16, 3, 0.0, None, None, 0, 0, False, "boom")])
    1.0
    """
    ttfts = sorted(r.ttft_s for r in records if r.ttft_s is not None)
    return ttfts[len(ttfts) // 2] if ttfts else None


@dataclass(frozen=True)
class StepFitData:
    """The measurements made on one server, and the raw records they came from."""

    measurements: list[StepMeasurement]  # one per setting: median over repeats
    records: dict[str, list[TimedRequest]] = field(repr=False)  # label -> every request sent for it
    seconds: float = 0.0  # wall time of all measuring
    clock: str = "client"  # whose clock timed decode and prefill: "server" (/metrics) or "client"

    def fit(self, base: StepTimeModel | None = None) -> StepTimeModel:
        return fit_step_time_model(self.measurements, base)

    def table(self) -> str:
        """The measurements as an aligned text table."""
        lines = [f"{'measurement':<22}{'steps':>7}{'prompt tok':>12}{'decode seqs':>13}{'seconds':>10}"]
        for m in self.measurements:
            lines.append(f"{m.label:<22}{m.num_steps:>7}{m.num_prefill_tokens:>12}{m.num_decode_seqs:>13}"
                         f"{m.seconds:>10.4f}")
        return "\n".join(lines)


def decode_tok_s(records: Sequence[TimedRequest]) -> float:
    """Output tok/s of a batch decoding together: batch size x the median request's steps per second.

    >>> r = TimedRequest("a", 16, 11, 0.0, 0.1, 1.1, 11, 11, True)   # 10 steps in 1 s
    >>> decode_tok_s([r, r])
    20.0
    """
    rates = [r.decode_steps_per_s for r in records]
    if any(rate is None for rate in rates):
        why = describe_failures(records) or "no tokens came back (or too few to time)"
        raise RuntimeError(f"a decode measurement request failed, so the batch's rate cannot be measured: {why} "
                           "Run the cell again; if it keeps failing, check the server's log.")
    return len(records) * statistics.median(rates)


_SERVER_TIMERS = ("request_decode_time_seconds", "time_to_first_token_seconds")


async def _server_timer_totals(server: Any) -> dict[str, float] | None:
    """Sums and counts of the server's per-request decode-time and TTFT histograms, or None
    where there is no `/metrics` to read (a server object without a URL, a failed scrape)."""
    if not hasattr(server, "url"):
        return None
    try:
        values = (await asyncio.to_thread(scrape, server)).values
    except OSError:
        return None
    return {f"{t}_{part}": values.get(f"{t}_{part}", 0.0) for t in _SERVER_TIMERS for part in ("sum", "count")}


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


async def measure_step_times(
    server: Any,
    batch_sizes: Sequence[int] = (1, 4, 8),
    output_len: int = 64,
    prompt_len: int = 256,
    prefill_len: int = 512,
    repeats: int = 2,
    seed: int = 0,
) -> StepFitData:
    """Decode at each batch size and one prefill of `prefill_len` tokens, `repeats` times each.

    Each setting's repeats are reduced to their median (other users of the machine make
    single timings noisy). A short warm-up request goes first and is not counted. Bounded:
    sum(batch_sizes) * repeats requests of `output_len` tokens, plus `repeats` prefills.
    Batch sizes above the server's max_num_seqs would queue and measure nothing useful.

    Attention makes a long context cost more, and the step-time model has no term for context
    length, so measure at contexts like the load you want to predict: decode prompts default
    to 256 tokens (the lab averages 212-token prompts, plus the answer so far; on the course's
    CPU machine 8 sequences decoded about 35% slower after 512-token prompts than after
    16-token ones), and the prefill prompt to 512 tokens, the lab's longest.
    """
    cap = getattr(getattr(server, "config", None), "max_num_seqs", None)
    if cap is not None and max(batch_sizes) > cap:
        raise ValueError(f"batch size {max(batch_sizes)} exceeds the server's max_num_seqs={cap}")
    client, model = _client_and_model(server)
    rng = np.random.default_rng(seed)
    began = time.monotonic()
    records: dict[str, list[TimedRequest]] = {}
    decode_rates: dict[int, list[float]] = {b: [] for b in batch_sizes}
    ttfts: list[float] = []
    try:
        await send_one(client, model, random_prompt(prompt_len, rng), 4, "warm-up", began)
        server_timed = True
        for rep in range(repeats):
            for b in batch_sizes:
                before = await _server_timer_totals(server)
                batch = await asyncio.gather(*(
                    send_one(client, model, random_prompt(prompt_len, rng), output_len, f"decode{b}-{rep}-{i}", began)
                    for i in range(b)
                ))
                records.setdefault(f"decode x{b}", []).extend(batch)
                client_rate = decode_tok_s(batch)  # raises if a request failed
                decode_s = server_mean_seconds(before, await _server_timer_totals(server),
                                               "request_decode_time_seconds", b)
                server_timed &= decode_s is not None
                decode_rates[b].append(client_rate if decode_s is None else b * (output_len - 1) / decode_s)
            before = await _server_timer_totals(server)
            single = await send_one(client, model, random_prompt(prefill_len, rng), 1, f"prefill-{rep}", began)
            records.setdefault(f"prefill {prefill_len} tokens", []).append(single)
            if single.ttft_s is None:
                raise RuntimeError(f"the prefill measurement request failed: {single.error}")
            ttft_s = server_mean_seconds(before, await _server_timer_totals(server), "time_to_first_token_seconds", 1)
            server_timed &= ttft_s is not None
            ttfts.append(single.ttft_s if ttft_s is None else ttft_s)
    finally:
        await client.close()
    measurements = [StepMeasurement.decode(b, statistics.median(decode_rates[b])) for b in batch_sizes]
    measurements.append(StepMeasurement.prefill(prefill_len, statistics.median(ttfts)))
    return StepFitData(measurements, records, time.monotonic() - began, "server" if server_timed else "client")


def model_table(models: dict[str, StepTimeModel]) -> str:
    """Parameters of several step-time models side by side, in milliseconds.

    >>> print(model_table({"a": StepTimeModel(0.03, 0.001, 0.002)}))
    parameter                             a
    overhead (ms/step)               30.000
    prefill (ms/prompt token)         1.000
    decode (ms/sequence)              2.000
    1 request alone (tok/s)          31.250
    """
    rows = [
        ("overhead (ms/step)", lambda m: 1000 * m.overhead_s),
        ("prefill (ms/prompt token)", lambda m: 1000 * m.prefill_token_s),
        ("decode (ms/sequence)", lambda m: 1000 * m.decode_seq_s),
        ("1 request alone (tok/s)", lambda m: m.decode_tok_s(1)),
    ]
    width = max(12, *(len(k) + 2 for k in models))
    lines = [f"{'parameter':<27}" + "".join(f"{k:>{width}}" for k in models)]
    for name, get in rows:
        lines.append(f"{name:<27}" + "".join(f"{get(m):>{width}.3f}" for m in models.values()))
    return "\n".join(lines)


def plot_request_timeline(records: Sequence[TimedRequest], title: str | None = None) -> Figure:
    """One lane per request, in the order sent: waiting for its first token (light), then
    generating (dark), on the client's clock. Failed requests are drawn in red.

    The default title counts how many distinct moments requests finished at (finishes
    within 50 ms of each other count as one): with continuous batching they leave one at a
    time, not batch by batch. Failed requests are counted there too, with their errors.

    >>> r = [TimedRequest("a", 16, 3, 0.0, 0.5, 1.0, 3, 3, True), TimedRequest("b", 16, 5, 0.0, 0.5, 2.0, 5, 5, True)]
    >>> plot_request_timeline(r).axes[0].get_xlabel()
    'time since the burst was sent (s)'
    """
    fig = Figure(figsize=(10, 0.28 * len(records) + 1.6), layout="constrained")
    ax = fig.subplots()
    for lane, r in enumerate(records):
        if r.first_token_s is None or r.last_token_s is None:
            ax.broken_barh([(r.sent_s, 0.05)], (lane - 0.4, 0.8), facecolors="tab:red")
            continue
        ax.broken_barh([(r.sent_s, r.first_token_s - r.sent_s)], (lane - 0.4, 0.8), facecolors="0.8")
        ax.broken_barh([(r.first_token_s, r.last_token_s - r.first_token_s)], (lane - 0.4, 0.8),
                       facecolors="tab:blue")
        ax.text(r.last_token_s, lane, f" {r.num_output_tokens}", va="center", fontsize=7)
    ax.set_yticks(range(len(records)), [r.request_id for r in records], fontsize=7)
    ax.set_ylim(len(records) - 0.5, -0.5)
    ax.set_xlabel("time since the burst was sent (s)")
    ax.set_ylabel("request")
    ax.legend(handles=[Patch(facecolor="0.8", label="sent, no token yet (queued or prefilling)"),
                       Patch(facecolor="tab:blue", label="generating (label: output tokens)")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if title is None:
        moments = finish_moments(records)
        finished = sum(r.ok and r.last_token_s is not None for r in records)
        who = f"{len(records)} requests" if finished == len(records) else f"{finished} of {len(records)} requests"
        title = (f"{who} finished at {len(moments)} distinct moments "
                 f"between {min(moments):.1f} s and {max(moments):.1f} s" if moments else "no request finished")
        failures = describe_failures(records)
        if failures:
            title += "\n" + (failures if len(failures) <= 150 else failures[:149] + "…")
    ax.set_title(title, fontsize=11)
    return fig


def finish_moments(records: Sequence[TimedRequest], within_s: float = 0.05) -> list[float]:
    """The distinct times requests finished at; finishes within `within_s` of the previous count once.

    >>> finish_moments([TimedRequest(i, 1, 1, 0.0, t, t, 1, 1, True) for i, t in (("a", 1.0), ("b", 1.01), ("c", 2.0))])
    [1.0, 2.0]
    """
    ends = sorted(r.last_token_s for r in records if r.ok and r.last_token_s is not None)
    moments: list[float] = []
    for t in ends:
        if not moments or t - moments[-1] > within_s:
            moments.append(t)
    return moments














def plot_fit_and_prediction(
    models: dict[str, StepTimeModel],
    measurements: Sequence[StepMeasurement] = (),
    settings: Sequence[int] = (8, 64),
    trace: Sequence[Request] | None = None,
) -> Figure:
    """Left: decode tok/s against batch size for each model, with the measured decode points
    and each model's ceiling (1 / decode_seq_s). Right: each model's predicted output tok/s
    for `trace` (default: the lab's) at each max_num_seqs. The title states the first model's
    predicted ratio.

    >>> fig = plot_fit_and_prediction({"defaults": StepTimeModel()})
    >>> fig.get_suptitle()
    'defaults: max_num_seqs=64 predicted at 160 output tok/s, 1.60x the 100 tok/s of max_num_seqs=8'
    """
    from helpers.batching.trace import lab_trace
    from helpers.batching.step_time import predict_throughput

    trace = list(trace) if trace is not None else lab_trace()
    fig = Figure(figsize=(12, 4.6), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1.3, 1])
    sizes = np.arange(1, max(settings) + 1)
    colors = ["tab:blue", "tab:gray", "tab:orange", "tab:green"]
    for (name, model), color in zip(models.items(), colors):
        left.plot(sizes, [model.decode_tok_s(int(b)) for b in sizes], color=color, label=f"{name}: model")
        ceiling = 1 / model.decode_seq_s if model.decode_seq_s > 0 else None
        if ceiling is not None:
            left.axhline(ceiling, color=color, linestyle=":", linewidth=1,
                         label=f"{name}: ceiling 1/decode_seq_s = {ceiling:.0f} tok/s")
    decodes = [m for m in measurements if m.num_prefill_tokens == 0 and m.num_steps == 1]
    if decodes:
        left.plot([m.num_decode_seqs for m in decodes], [m.num_decode_seqs / m.seconds for m in decodes], "o",
                  color="black", label="measured (decode batches)")
    for i, n in enumerate(settings):
        left.axvline(n, color="0.7", linewidth=0.8, label="the lab's max_num_seqs settings" if i == 0 else None)
    left.set_xlabel("requests decoding together (batch size)")
    left.set_ylabel("output tokens/s while decoding")
    left.set_title("Decode speed grows with the batch, towards a ceiling", fontsize=10)
    left.set_ylim(bottom=0)
    left.legend(fontsize=7, loc="lower right")
    predictions = {name: [predict_throughput(m, trace, n) for n in settings] for name, m in models.items()}
    width = 0.8 / len(models)
    for i, ((name, tok_s), color) in enumerate(zip(predictions.items(), colors)):
        xs = [k + (i - (len(models) - 1) / 2) * width for k in range(len(settings))]
        bars = right.bar(xs, tok_s, width, color=color, label=f"{name} ({tok_s[-1] / tok_s[0]:.2f}x)")
        right.bar_label(bars, fmt="%.0f", fontsize=8)
    right.set_xticks(range(len(settings)), [f"max_num_seqs={n}" for n in settings])
    right.set_ylabel("predicted output tokens/s")
    right.set_title(f"The lab's load ({len(trace)} requests at once), simulated", fontsize=10)
    right.legend(fontsize=8, title=f"ratio {settings[-1]} vs {settings[0]}", title_fontsize=8)
    name, tok_s = next(iter(predictions.items()))
    fig.suptitle(f"{name}: max_num_seqs={settings[-1]} predicted at {tok_s[-1]:.0f} output tok/s, "
                 f"{tok_s[-1] / tok_s[0]:.2f}x the {tok_s[0]:.0f} tok/s of max_num_seqs={settings[0]}", fontsize=11)
    return fig
