"""The capacity drawings of the PagedAttention notebook: on paper, and on the live server.

:func:`plot_capacity` draws the rows of :func:`helpers.paged.capacity.lab_capacity`;
:func:`plot_kv_usage` draws the live server's KV blocks in use (``/metrics`` samples)
against the paged prediction and the naive reservation for the requests that ran.
:func:`held_blocks` is the prediction's one number per request.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from helpers.load.client import RequestRecord
from helpers.load.prometheus import MetricsSample
from helpers.load.summary import describe_failures
from helpers.paged.capacity import Capacity
from helpers.paged.kv_math import blocks_for


def held_blocks(record: RequestRecord, block_size: int) -> int:
    """Blocks a request held at its longest: prompt plus generated tokens, in whole blocks.

    Uses the server's token counts; a failed request without them counts what it asked for.

    >>> held_blocks(RequestRecord(0, ok=True, prompt_len=512, prompt_tokens=512, output_tokens=16), 128)
    5
    """
    prompt = record.prompt_tokens if record.prompt_tokens is not None else record.prompt_len
    return blocks_for(prompt + (record.output_tokens or 0), block_size)


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
    records: Sequence[RequestRecord],
    num_blocks: int,
    block_size: int,
    max_model_len: int,
) -> Figure:
    """Blocks in use on the live server over time, against the paged prediction and naive reservation.

    The prediction is each request's blocks at its longest, summed over requests still
    running; the naive line is max_model_len slots per request, in blocks' worth. Failed
    requests hold nothing in the prediction; the title counts them, with their errors.
    `samples` come from :func:`helpers.load.poller.watch` and `records` from the
    :func:`helpers.load.run.run_load_test` it watched: both count seconds from the start of
    the watch (the records' clock starts a few milliseconds later, once the client is ready).
    """
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.add_subplot()
    times = [m.t_s for m in samples]
    used = [m.kv_cache_usage_perc * num_blocks for m in samples]
    ax.step(times, used, where="post", color="tab:blue", linewidth=2,
            label="blocks in use (vllm:kv_cache_usage_perc × blocks)")
    ok = [r for r in records if r.ok]
    need = [held_blocks(r, block_size) for r in ok]
    predicted = [sum(n for n, r in zip(need, ok) if r.send_s <= t < r.done_s) for t in times]
    ax.step(times, predicted, where="post", color="tab:blue", linestyle="--", linewidth=1,
            label="paged prediction: blocks at full length of requests not yet answered")
    naive = len(ok) * max_model_len / block_size
    ax.axhline(naive, color="tab:red", linestyle=":",
               label=f"naive: {len(ok)} × {max_model_len} slots = {naive:.0f} blocks' worth")
    for r in ok:
        ax.axvline(r.done_s, color="0.7", linewidth=0.8)
    if ok:
        ax.text(ok[0].done_s, naive * 0.5, " grey lines: a reply arrives", fontsize=8, color="0.4")
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
