"""Measure the real server to fit the simulator's step-time model, and replay traces against it.

`helpers.batching.step_time.StepTimeModel` says how long one engine step takes:
overhead + per-prompt-token cost + per-decoding-sequence cost. Small, bounded loads on a
running server give it numbers (`measure_step_times`):

- decode: `batch_size` requests sent together, each generating `output_len` tokens after a
  256-token prompt; a request's steps per second (first to last token, so its prefill is
  left out) times the batch size is the batch's output tok/s (`StepMeasurement.decode`).
  Batch size 1 is the single-request speed.
- prefill: a short and a long prompt, each alone, one output token each; the long one's
  prefill time minus the short one's is the cost of the extra prompt tokens
  (`StepMeasurement.prefill_difference`). What every prefill pays whatever its length (the
  step's overhead, sampling the first token, and on the client's clock HTTP and the API
  server) cancels, so it is not charged to every prompt token of the load predicted.

Both are read on the server's own clock where it publishes one: the growth of vLLM's
histograms `vllm:request_decode_time_seconds` (first token to last, per request) and
`vllm:request_prefill_time_seconds` (scheduled to first token, per request) across the
measurement, from `/metrics`. The client's clock (time to first token) is the fallback.
Why: when the client's process is starved of CPU for a moment (the server's threads hold
every core), streamed tokens queue up and arrive in one clump, and a rate timed from the
client can come out a hundred times too fast.

`send_trace` replays a `helpers.batching.trace` trace against the server (request i is sent
at its `arrival_s`), so the same trace can be simulated and measured.

Every request goes through the course's one client (`helpers.load.run.run_load_test`): random token
ids of exactly the length asked for (`helpers.load.workload.token_prompt`: no chat template, no
prefix-cache hit), exactly `max_tokens` output tokens (`ignore_eos`), the load tester's timeout, to the
server given (127.0.0.1 in the course), in small counts. Records (`helpers.load.client.RequestRecord`)
never raise; the numbers made from them: `helpers.batching.measure_stats`.

Taught in `notebooks/04_continuous_batching.ipynb`.

Example (in a notebook cell, against a running server)::

    >>> data = await measure_step_times(server, batch_sizes=(1, 4, 8))   # doctest: +SKIP
    >>> data.fit()                                                       # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from helpers import validate
from helpers.batching.measure_stats import StepFitData, decode_tok_s, server_mean_seconds
from helpers.batching.step_time import StepMeasurement
from helpers.batching.trace import BatchRequest
from helpers.load.client import RequestRecord, RequestSpec
from helpers.load.poller import scrape
from helpers.load.run import run_load_test
from helpers.load.summary import describe_failures
from helpers.load.workload import Workload, token_prompt
from helpers.serve.budget import budget_of
from helpers.serve.process import death_of


async def _send(server: Any, specs: Sequence[RequestSpec], label: str, seed: int = 0) -> list[RequestRecord]:
    """Send these requests through the one load tester (each at its arrival_s); their records, in order."""
    workload = Workload(requests=tuple(specs), prompt_lens=tuple(sorted({s.prompt_tokens for s in specs})),
                        output_tokens=max(s.max_tokens for s in specs), seed=seed, run_tag=label)
    run = await run_load_test(server, workload, label=label, progress=False)  # the load tester's per-request timeout
    return run.records


def _specs(prompt_lens: Sequence[int], max_tokens: Sequence[int], rng: np.random.Generator,
           arrivals: Sequence[float] | None = None) -> list[RequestSpec]:
    """One token-id request per prompt length, asking for its max_tokens, sent at its arrival (default 0)."""
    arrivals = arrivals if arrivals is not None else [0.0] * len(prompt_lens)
    return [RequestSpec(index=i, prompt=token_prompt(p, rng), prompt_tokens=p, max_tokens=m, arrival_s=a)
            for i, (p, m, a) in enumerate(zip(prompt_lens, max_tokens, arrivals))]


async def send_trace(server: Any, trace: Sequence[BatchRequest], seed: int = 0,
                     quiet: bool = False) -> list[RequestRecord]:
    """Replay a trace: request i is sent `arrival_s` seconds after the start, with a random
    prompt of `prompt_len` tokens, asking for `output_len` tokens. Returns records in trace
    order (record i, whose `index` is i, is `trace[i]`).

    Every request of the trace is sent (keep traces small: this is a bounded load). When some
    fail, it prints how many and why (e.g. "2 of 20 requests failed: APIConnectionError: ...")
    unless `quiet`; failed records keep None for the times they never reached. A server that
    dies during the replay ends it at once (requests not yet answered fail fast; those not yet
    due fail at their arrival time): the records of what finished before are kept, and the
    message says the server died.
    """
    if not trace:
        raise validate.InvalidArgumentError("the trace is empty: pass at least one BatchRequest.")
    rng = np.random.default_rng(seed)
    specs = _specs([r.prompt_len for r in trace], [r.output_len for r in trace], rng, [r.arrival_s for r in trace])
    records = await _send(server, specs, "trace replay", seed)
    failures = describe_failures(records)
    if failures and not quiet:
        death = death_of(server)
        finished = sum(r.ok for r in records)
        print(failures if death is None else
              f"{death} during the replay: {finished} of {len(records)} requests finished before it (kept). {failures}")
    return records


_SERVER_TIMERS = ("request_decode_time_seconds", "request_prefill_time_seconds")
PREFILL_PAIRS = 3  # the fewest short-and-long prefill pairs measure_step_times times


async def _server_timer_totals(server: Any) -> dict[str, float] | None:
    """Sums and counts of the server's per-request decode-time and prefill-time histograms, or None
    where there is no `/metrics` to read (a server object without a URL, a failed scrape)."""
    if not hasattr(server, "url"):
        return None
    try:
        values = (await asyncio.to_thread(scrape, server)).values
    except OSError:
        return None
    return {f"{t}_{part}": values.get(f"{t}_{part}", 0.0) for t in _SERVER_TIMERS for part in ("sum", "count")}


async def measure_step_times(
    server: Any,
    batch_sizes: Sequence[int] = (1, 4, 8),
    output_len: int = 64,
    prompt_len: int = 256,
    prefill_len: int = 512,
    repeats: int = 2,
    seed: int = 0,
    max_num_batched_tokens: int | None = None,
    short_prefill_len: int | None = None,
    more_repeats_within_s: float = 15.0,
    long_group: int = 1,
) -> StepFitData:
    """Decode at each batch size, and prefill a short and a long prompt, `repeats` rounds or more.

    The prefill row is the long prompt's time minus the short one's
    (`StepMeasurement.prefill_difference`): `prefill_len` tokens against `short_prefill_len`
    (default: a sixteenth of it, 32 for 512). One prompt's time divided by its length would
    charge every prompt token a share of what a prefill costs whatever its length; on an
    H200 that made a 512-token prompt cost 0.043 ms a token, 10 or more times its compute.

    `long_group`: long prompts sent at once (``helpers.batching.fit_plan.PrefillPair``: on a GPU, enough to fill
    the step budget). With more than one, both prefills are timed on the client's clock, to the group's last first token:
    the engine may split a group over two steps, and vLLM's per-request time would give each its own step's.

    `max_num_batched_tokens`: the server's step budget, which decides how many steps the
    prefill takes and goes with the data into its fit; default: read from the server's log
    (`helpers.serve.budget.budget_of`), else vLLM's default of 2,048.

    Each setting's timings are reduced to their median (other users of the machine make single timings noisy).
    After `repeats` rounds, more follow (at most three times as many in all) while they fit within
    `more_repeats_within_s` seconds of measuring: a fast machine (an H200 round takes about 3 s) gets more
    timings for its medians, a slow one (a round takes about 18 s on the course's CPU) exactly `repeats`; 0 turns
    this off. The prefill pair is timed at least three times (after the rounds, on its own where they were
    fewer): one step's time is easily stretched by other work on the machine, and a median of three leaves one
    such timing out. A short warm-up request goes first and is not counted. Bounded: a round is sum(batch_sizes)
    requests of `output_len` tokens plus 1 + `long_group` prefills of one token. Batch sizes (or a group) above
    the server's max_num_seqs would queue and measure nothing useful.
    Which batch sizes to time for a prediction of the lab, and on which server: ``helpers.batching.fit_plan``.

    A timing with a failed request is left out and counted as lost (`StepFitData.lost`). When
    the server dies, measuring stops at once: what was measured before is returned, every
    timing not made is listed as lost with the reason (`StepFitData.stopped`, e.g. "server
    died: exit code -9"), and a line says how many timings and requests were lost. The fit
    then uses what is there, or says there are too few points (`StepFitData.fit`).

    Attention makes a long context cost more, and the step-time model has no term for context length, so
    measure at contexts like the load you want to predict: decode prompts default to 256 tokens (the lab averages
    212-token prompts, plus the answer so far; on the course's CPU machine 8 sequences decoded about 35% slower
    after 512-token prompts than after 16-token ones), and the long prefill prompt to 512, the lab's longest.

    Leaves out: what a prefill costs whatever its length (it cancels in the difference; the
    step's overhead comes from the decode batches), and the steps at either end of a decode
    batch where its requests, admitted as they arrive, decode with fewer partners than the
    batch size (where admitting them takes longer than a step, as a 2 ms step on a GPU).
    """
    batch_sizes = validate.positive_ints(batch_sizes, "batch_sizes", hint="They are how many requests decode together.")
    output_len = validate.int_above(output_len, "output_len", 1, hint="Timing a decode needs at least 2 tokens.")
    prompt_len = validate.positive_int(prompt_len, "prompt_len")
    prefill_len = validate.int_above(prefill_len, "prefill_len", 1, hint="It is the long prompt of the prefill pair.")
    short_len = validate.positive_int(short_prefill_len or max(1, prefill_len // 16), "short_prefill_len")
    if short_len >= prefill_len:
        raise validate.InvalidArgumentError(f"short_prefill_len={short_len} is not shorter than prefill_len="
                                            f"{prefill_len}: the prefill cost per token is their difference.")
    repeats = validate.positive_int(repeats, "repeats")
    long_group = validate.positive_int(long_group, "long_group", hint="It is how many long prompts go at once.")
    more_s = validate.non_negative_number(more_repeats_within_s, "more_repeats_within_s", unit="seconds")
    budget = validate.positive_int(max_num_batched_tokens or budget_of(server), "max_num_batched_tokens")
    cap = getattr(getattr(server, "config", None), "max_num_seqs", None)
    if cap is not None and max(batch_sizes) > cap:
        raise validate.InvalidArgumentError(f"batch size {max(batch_sizes)} exceeds the server's max_num_seqs={cap}; "
                                            f"pass batch sizes of at most {cap}.")
    if cap is not None and long_group > cap:
        raise validate.InvalidArgumentError(f"long_group={long_group} exceeds the server's max_num_seqs={cap}: the "
                                            f"rest would wait, and the wait is not prefill; pass at most {cap}.")
    rng = np.random.default_rng(seed)
    began = time.monotonic()
    records: dict[str, list[RequestRecord]] = {}
    settings: list[int | str] = [*batch_sizes, "short", "long"]  # a batch size, or a prefill prompt
    lengths = {"short": short_len, "long": prefill_len}
    timings: dict[int | str, list[float]] = {k: [] for k in settings}
    label_of = {k: f"decode x{k}" if isinstance(k, int) else f"prefill {lengths[k]} tokens" for k in settings}
    if long_group > 1:
        label_of["long"] = f"prefill {long_group} x {prefill_len} tokens"
    lost: list[str] = []
    not_sent = 0
    warm_up = await _send(server, _specs([prompt_len], [4], rng), "warm-up")
    stopped = None if all(r.ok for r in warm_up) else death_of(server)
    server_timed = {"decode": True, "prefill": long_group == 1}  # a group's prefill: the client's clock
    planned = 0
    size_of = {k: k if isinstance(k, int) else long_group if k == "long" else 1 for k in settings}  # requests a timing

    async def run_round(kinds: Sequence[int | str], repeat: int) -> None:
        nonlocal stopped, not_sent, planned
        planned += len(kinds)
        for k in kinds:
            label = label_of[k]
            if stopped is not None:
                lost.append(f"{label} (repeat {repeat})")
                not_sent += size_of[k]
                continue
            specs = _specs([prompt_len if isinstance(k, int) else lengths[k]] * size_of[k],
                           [output_len if isinstance(k, int) else 1] * size_of[k], rng)
            batch, value, by_server = await _timed(server, specs, label, output_len,
                                                   client_clock=not isinstance(k, int) and long_group > 1)
            records.setdefault(label, []).extend(batch)
            if value is None:
                lost.append(f"{label} (repeat {repeat})")
                stopped = death_of(server)
                continue
            kind = "decode" if isinstance(k, int) else "prefill"
            server_timed[kind] = server_timed[kind] and by_server
            timings[k].append(value)

    rounds, rounds_began = 0, time.monotonic()
    while rounds < repeats or (rounds < 3 * repeats and stopped is None and
                               (time.monotonic() - rounds_began) * (rounds + 1) / rounds <= more_s):
        rounds += 1
        await run_round(settings, rounds)
    # A prefill is one step, which other work on the machine can stretch many times over (a decode batch's time
    # averages hundreds of steps): three pairs at least, so that their median leaves one such timing out
    for repeat in range(rounds + 1, PREFILL_PAIRS + 1):
        await run_round(["short", "long"], repeat)
    median = {k: statistics.median(v) for k, v in timings.items() if v}
    measurements = [StepMeasurement.decode(b, median[b]) for b in batch_sizes if b in median]
    if "short" in median and "long" in median:
        measurements.append(StepMeasurement.prefill_difference(short_len, median["short"], long_group * prefill_len,
                                                               median["long"], budget))
    clock = {kind: "server" if timed and measurements else "client" for kind, timed in server_timed.items()}
    data = StepFitData(measurements, records, time.monotonic() - began, clock["decode"],
                       prefill_clock=clock["prefill"], lost=tuple(lost), stopped=stopped,
                       planned=planned, requests_not_sent=not_sent,
                       max_num_batched_tokens=budget, timings={label_of[k]: tuple(v) for k, v in timings.items()})
    if (losses := data.describe_losses()) is not None:
        print(losses)
    return data


async def send_on_server_clock(server: Any, specs: Sequence[RequestSpec], label: str,
                               timer: str) -> tuple[list[RequestRecord], float | None]:
    """Send these requests: their records, and the mean of the server's histogram `timer` (one of
    ``request_decode_time_seconds``, ``request_prefill_time_seconds``) over them, read from `/metrics`
    before and after; None where a request failed or the server published no such time for exactly them."""
    before = await _server_timer_totals(server)
    batch = await _send(server, specs, label)
    if not all(r.ok for r in batch):
        return batch, None
    return batch, server_mean_seconds(before, await _server_timer_totals(server), timer, len(batch))


async def _timed(server: Any, specs: list[RequestSpec], label: str, output_len: int,
                 client_clock: bool = False) -> tuple[list[RequestRecord], float | None, bool]:
    """Send one timing's requests: their records, the timing (a decode batch's output tok/s, or a
    prefill's seconds; None when a request failed or could not be timed) and whether the
    server's clock timed it (else the client's).

    A prefill is timed from the engine scheduling the request to its first token (vLLM's
    `request_prefill_time_seconds`), which leaves out HTTP, tokenizing and any wait for a
    step; where the server publishes no such time, by the client's time to first token,
    which holds them: the prefill pair's difference cancels what both prompts pay alike. With
    ``client_clock`` (a group of prompts sent at once), a prefill is timed on the client's clock to
    the group's last first token."""
    timer = "request_prefill_time_seconds" if label.startswith("prefill") else "request_decode_time_seconds"
    batch, server_s = await send_on_server_clock(server, specs, label, timer)
    if not all(r.ok for r in batch):
        return batch, None, False
    if timer == "request_prefill_time_seconds":
        client_s = max(r.ttft_s for r in batch)
        if client_clock or server_s is None:
            return batch, client_s, False
        return batch, server_s, True
    if server_s is not None:
        return batch, len(batch) * (output_len - 1) / server_s, True
    try:
        return batch, decode_tok_s(batch), False
    except RuntimeError:  # too few tokens to time on the client's clock
        return batch, None, False
