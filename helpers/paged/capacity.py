"""How many requests fit in a KV pool at once, on paper and on the live server.

Taught in the PagedAttention notebook (``notebooks/03_paged_attention.ipynb``). Three parts:

- Arithmetic: given a server's :class:`~helpers.serve.log.KVCacheReport` and a length mix
  (the lab's: prompts of 16/64/256/512 tokens, 64 output tokens, 50 requests), how many
  requests hold their KV memory at once when each reserves ``max_model_len`` contiguous
  slots (the naive scheme), exactly its own prompt + max_tokens (the best a contiguous
  scheme can do), or whole blocks of ``block_size`` tokens (paged). A request is counted
  at its longest (prompt plus every output token), so "fits" means it never has to wait or
  be preempted for memory; the engine's ``max_num_seqs`` cap is a separate limit.
- The live server: :func:`send_token_prompts` sends prompts given as token ids (so their
  lengths are exact) and never raises; :func:`sample_kv_metrics` polls ``/metrics``
  (through :mod:`helpers.load.poller`) while they run.
- Two drawings: :func:`plot_capacity` and :func:`plot_kv_usage`.

Leaves out: chunked prefill and admission order inside the engine, and memory the engine
keeps besides the KV pool (weights, activations).

Example (the CPU server's default pool: 93,184 token slots, 728 blocks of 128)::

    >>> from helpers.serve.log import KVCacheReport
    >>> report = KVCacheReport(num_tokens=93_184, num_blocks=728, block_size=128,
    ...                        max_model_len=2048, max_concurrency=45.5)
    >>> [(c.scheme, c.num_fit, c.max_requests) for c in lab_capacity(report)][::2]
    [('naive: max_model_len each', 45, 45), ('paged: blocks of 128', 50, 291)]
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import cycle, islice
from typing import Any, TypeVar

import numpy as np
from matplotlib.figure import Figure

from helpers.load.summary import describe_failures
from helpers.load.prometheus import MetricsSample
from helpers.load.poller import scrape
from helpers.paged.kv_math import blocks_for
from helpers.serve.log import KVCacheReport

T = TypeVar("T")


# ----- the arithmetic ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LengthMix:
    """A workload's request lengths: prompts cycle through `prompt_lens`, each generates `output_len`.

    >>> LengthMix(prompt_lens=(16, 512), output_len=64, num_requests=3).final_lengths()
    [80, 576, 80]
    """

    prompt_lens: tuple[int, ...] = (16, 64, 256, 512)  # tokens
    output_len: int = 64  # tokens each request generates (the lab sends ignore_eos, so exactly this)
    num_requests: int = 50

    def final_lengths(self, num_requests: int | None = None) -> list[int]:
        """Prompt + output tokens of each request, in arrival order."""
        n = self.num_requests if num_requests is None else num_requests
        return [p + self.output_len for p in islice(cycle(self.prompt_lens), n)]


LAB_MIX = LengthMix()  # the lab's 50 concurrent chats




@dataclass(frozen=True)
class Capacity:
    """How one allocation scheme fits a length mix into one pool.

    `num_fit`: of the mix's requests, in order, how many hold memory at once before the
    next one does not fit. `max_requests`: the same for an endless stream of this mix, i.e.
    how many would fit if there were that many. `token_share`: tokens over slots held,
    with every request at its longest.
    """

    scheme: str
    pool_slots: int  # token slots in the pool
    unit_slots: int  # allocation unit: max_model_len, 1 (exact contiguous) or block_size
    slots_per_request: float  # mean slots held per request of the mix, at its longest
    num_fit: int
    num_requests: int  # requests in the mix (the most num_fit can be)
    max_requests: int
    token_share: float

    @property
    def all_fit(self) -> bool:
        return self.num_fit == self.num_requests


def _count_fitting(sizes: Sequence[int] | Callable[[int], int], budget: int, limit: int) -> int:
    """How many leading items have sizes that add up to at most `budget` (looking at `limit` at most)."""
    total = 0
    for i in range(limit):
        total += sizes[i] if isinstance(sizes, Sequence) else sizes(i)
        if total > budget:
            return i
    return limit


def fit(
    mix: LengthMix,
    pool_slots: int,
    *,
    scheme: str,
    max_model_len: int | None = None,
    block_size: int | None = None,
) -> Capacity:
    """Fit `mix` into a pool of `pool_slots` token slots under one scheme.

    `scheme` is "naive" (each request reserves `max_model_len` contiguous slots),
    "exact" (contiguous, each reserves prompt + output, as a client's max_tokens allows)
    or "paged" (whole blocks of `block_size`; the pool has pool_slots // block_size blocks).

    >>> fit(LengthMix((16, 512), 64, 4), pool_slots=1024, scheme="paged", block_size=128).num_fit
    3
    """
    lengths = mix.final_lengths()
    if scheme == "naive":
        if not max_model_len:
            raise ValueError("the naive scheme needs max_model_len")
        if max(lengths) > max_model_len:
            raise ValueError(f"a request of {max(lengths)} tokens exceeds max_model_len={max_model_len}")
        unit, name = max_model_len, "naive: max_model_len each"
        held = [max_model_len] * len(lengths)
    elif scheme == "exact":
        unit, name, held = 1, "contiguous: prompt + max_tokens", list(lengths)
    elif scheme == "paged":
        if not block_size:
            raise ValueError("the paged scheme needs block_size")
        unit, name = block_size, f"paged: blocks of {block_size}"
        held = [blocks_for(n, block_size) * block_size for n in lengths]
        pool_slots = pool_slots // block_size * block_size  # whole blocks only
    else:
        raise ValueError(f"scheme must be 'naive', 'exact' or 'paged', got {scheme!r}")
    period = len(mix.prompt_lens)
    smallest = min(held[:period])
    endless = _count_fitting(lambda i: held[i % period], pool_slots, limit=pool_slots // smallest + 1)
    return Capacity(
        scheme=name,
        pool_slots=pool_slots,
        unit_slots=unit,
        slots_per_request=sum(held) / len(held),
        num_fit=_count_fitting(held, pool_slots, limit=len(held)),
        num_requests=len(held),
        max_requests=endless,
        token_share=sum(lengths) / sum(held),
    )


def lab_capacity(
    report: KVCacheReport,
    mix: LengthMix = LAB_MIX,
    block_sizes: Sequence[int] | None = None,
) -> list[Capacity]:
    """Naive, exact-contiguous and paged capacity for `mix` in the pool a server reported.

    `block_sizes` defaults to the server's own block size (128 on vLLM's CPU build, 16 on
    GPU); the pool is the same number of token slots for every scheme. The naive row is
    what vLLM's own "maximum concurrency" log line assumes: every request max_model_len long.
    """
    if report.max_model_len is None:
        raise ValueError("the report has no max_model_len")
    sizes = list(block_sizes) if block_sizes else [report.block_size or 16]
    pool = report.num_tokens
    rows = [
        fit(mix, pool, scheme="naive", max_model_len=report.max_model_len),
        fit(mix, pool, scheme="exact"),
    ]
    rows += [fit(mix, pool, scheme="paged", block_size=bs) for bs in sizes]
    return rows


def capacity_table(rows: Sequence[Capacity]) -> str:
    """The rows as a fixed-width text table (for printing in a notebook)."""
    fit_label = f"fit of {rows[0].num_requests}"
    head = f"{'scheme':<34}{'slots/request':>15}{fit_label:>11}{'max of mix':>12}{'tokens/held':>13}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.scheme:<34}{r.slots_per_request:>15,.0f}{r.num_fit:>11}{r.max_requests:>12,}{r.token_share:>13.0%}"
        )
    return "\n".join(lines)


# ----- the live server --------------------------------------------------------------------------
def sample_kv_metrics(
    server: Any, work: Callable[[], T], interval_s: float = 0.2, settle_s: float = 1.0
) -> tuple[T, list[MetricsSample]]:
    """Run `work()` while polling ``/metrics`` every `interval_s` seconds in a background thread.

    Returns work's result and the samples (``t_s``: seconds since the call); polling goes on
    for `settle_s` after work returns, so the gauges' last update (blocks freed) is seen.
    A failed scrape is skipped, not raised.
    """
    samples: list[MetricsSample] = []
    done = threading.Event()
    began = time.monotonic()

    def poll() -> None:
        while True:
            try:
                samples.append(replace(scrape(server), t_s=time.monotonic() - began))
            except Exception:  # noqa: BLE001  (a missed sample is not worth failing the demo)
                pass
            if done.wait(interval_s):
                return

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        result = work()
        time.sleep(settle_s)
    finally:
        done.set()
        poller.join()
    return result, samples


def token_prompt(num_tokens: int, seed: int, vocab: tuple[int, int] = (1_000, 30_000)) -> list[int]:
    """A prompt of exactly `num_tokens` token ids (random, so no two seeds share a block).

    >>> len(token_prompt(16, seed=0)), token_prompt(4, seed=1) == token_prompt(4, seed=1)
    (16, True)
    """
    return [int(t) for t in np.random.default_rng(seed).integers(*vocab, size=num_tokens)]


@dataclass(frozen=True)
class TokenRequestRecord:
    """What happened to one request sent by :func:`send_token_prompts`."""

    index: int
    ok: bool
    error: str | None
    prompt_tokens: int  # as the server counted them (sent length when it failed)
    completion_tokens: int
    started_s: float  # seconds since the batch began, client clock
    finished_s: float


def send_token_prompts(
    client: Any, model: str, prompts: Sequence[Sequence[int]], max_tokens: Sequence[int], origin: float | None = None
) -> list[TokenRequestRecord]:
    """Send every prompt at once (one thread each) to the completions endpoint; never raises.

    Prompts are token ids, so their lengths are exact; `ignore_eos` makes each generate
    exactly its `max_tokens`, greedily. Times are seconds since `origin`
    (``time.monotonic()``; default: now).
    """
    if len(prompts) != len(max_tokens):
        raise ValueError("give one max_tokens per prompt")
    origin = time.monotonic() if origin is None else origin

    def one(index: int) -> TokenRequestRecord:
        started = time.monotonic() - origin
        try:
            reply = client.completions.create(
                model=model, prompt=list(prompts[index]), max_tokens=max_tokens[index],
                temperature=0, extra_body={"ignore_eos": True},
            )
            usage = reply.usage
            return TokenRequestRecord(index, True, None, usage.prompt_tokens, usage.completion_tokens,
                                      started, time.monotonic() - origin)
        except Exception as error:  # noqa: BLE001  (a record, never an exception: the caller decides)
            return TokenRequestRecord(index, False, f"{type(error).__name__}: {error}", len(prompts[index]), 0,
                                      started, time.monotonic() - origin)

    with ThreadPoolExecutor(max_workers=max(1, len(prompts))) as pool:
        return list(pool.map(one, range(len(prompts))))


# ----- drawings ---------------------------------------------------------------------------------
_BAR_COLORS = ("tab:red", "tab:orange", "tab:blue", "tab:cyan", "tab:purple")


def plot_capacity(rows: Sequence[Capacity], max_num_seqs: int | None = None) -> Figure:
    """Bars: how many requests of the mix each scheme holds at once; a line at the mix's size.

    The title states the paged-vs-naive ratio computed from the rows (first naive row, first paged row).
    """
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.add_subplot()
    names = [r.scheme.replace(": ", ":\n") for r in rows]
    bars = ax.bar(names, [r.max_requests for r in rows], color=_BAR_COLORS[: len(rows)])
    ax.axhline(rows[0].num_requests, color="black", linestyle="--", linewidth=1,
               label=f"the lab's {rows[0].num_requests} requests")
    if max_num_seqs:
        ax.axhline(max_num_seqs, color="0.5", linestyle=":", linewidth=1, label=f"max_num_seqs = {max_num_seqs}")
    lines = [rows[0].num_requests, max_num_seqs or 0]
    top = max(r.max_requests for r in rows)
    for bar, r in zip(bars, rows):
        # above the bar, and above any reference line it is close to, so the label stays readable
        y = max([r.max_requests, *(v for v in lines if abs(v - r.max_requests) < 0.06 * top)]) + 0.01 * top
        ax.text(bar.get_x() + bar.get_width() / 2, y, f"{r.max_requests:,}\n({r.slots_per_request:,.0f} slots each)",
                ha="center", va="bottom", fontsize=8)
    ax.legend(fontsize=8, loc="upper left", frameon=False)
    ax.set_ylabel("requests of the mix held at once (at full length)")
    ax.set_xlabel(f"allocation scheme, same pool of {rows[0].pool_slots:,} token slots")
    ax.set_ylim(0, max(r.max_requests for r in rows) * 1.25)
    naive = next((r for r in rows if r.scheme.startswith("naive")), rows[0])
    paged = next((r for r in rows if r.scheme.startswith("paged")), rows[-1])
    ax.set_title(
        f"{paged.scheme.capitalize()} hold {paged.max_requests:,} requests of this mix at once, "
        f"{paged.max_requests / naive.max_requests:.1f}× the {naive.max_requests} of max_model_len reservation",
        fontsize=10,
    )
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig


def plot_kv_usage(
    samples: Sequence[MetricsSample],
    records: Sequence[TokenRequestRecord],
    num_blocks: int,
    block_size: int,
    max_model_len: int,
) -> Figure:
    """Blocks in use on the live server over time, against the paged prediction and naive reservation.

    The prediction is each request's blocks at its longest, summed over requests still
    running; the naive line is max_model_len slots per request, in blocks' worth. Failed
    requests hold nothing in the prediction; the title counts them, with their errors.
    """
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.add_subplot()
    times = [m.t_s for m in samples]
    used = [m.kv_cache_usage_perc * num_blocks for m in samples]
    ax.step(times, used, where="post", color="tab:blue", linewidth=2,
            label="blocks in use (vllm:kv_cache_usage_perc × blocks)")
    ok = [r for r in records if r.ok]
    need = [blocks_for(r.prompt_tokens + r.completion_tokens, block_size) for r in ok]
    predicted = [sum(n for n, r in zip(need, ok) if r.started_s <= t < r.finished_s) for t in times]
    ax.step(times, predicted, where="post", color="tab:blue", linestyle="--", linewidth=1,
            label="paged prediction: blocks at full length of requests not yet answered")
    naive = len(ok) * max_model_len / block_size
    ax.axhline(naive, color="tab:red", linestyle=":",
               label=f"naive: {len(ok)} × {max_model_len} slots = {naive:.0f} blocks' worth")
    for r in ok:
        ax.axvline(r.finished_s, color="0.7", linewidth=0.8)
    if ok:
        ax.text(ok[0].finished_s, naive * 0.5, " grey lines: a reply arrives", fontsize=8, color="0.4")
    ax.set_xlabel("seconds since the requests were sent (client clock)")
    ax.set_ylabel(f"KV blocks ({block_size} tokens each)")
    ax.set_ylim(0, max(naive, peak := max(used, default=0.0), 1.0) * 1.15)
    ax.legend(fontsize=8, loc="upper right")
    failures = describe_failures(records)
    ax.set_title(
        f"The engine held at most {peak:,.0f} of {num_blocks:,} blocks for {len(ok)} requests "
        f"(predicted {max(predicted, default=0):,}); naive reservation would hold {naive:,.0f}"
        + (f"\n{failures if len(failures) <= 150 else failures[:149] + '…'}" if failures else ""),
        fontsize=10,
    )
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig
