"""The verdict of scripts/bench_vs_vllm.py: each tool's timed runs, pooled and compared against the targets.
Pure functions, tested in tests/test_bench_vs_vllm.py. The result files themselves are read by
:mod:`helpers.traffic.bench_file` (vLLM 0.26 and 0.32), imported from here as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from helpers.load.summary import percentile, summarize
from helpers.traffic.bench_file import BenchRead, read_bench_result  # noqa: F401 - used here and re-exported

OURS, THEIRS = "course client", "vllm bench serve"
TARGETS = {"output_tok_per_s": 0.02, "ttft_p50_ms": 0.05}  # |ours / vLLM's - 1| at most this
MIN_PAIRS = 4


@dataclass
class TimedRun:
    """One timed run of one tool; milliseconds for TTFT, seconds for wall and e2e; None where unknown."""

    tool: str
    pair: int
    first: bool  # it went first in its pair
    wall_s: float | None
    output_tokens: int | None
    output_tok_per_s: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None = None
    e2e_p50_s: float | None = None
    tpot_mean_ms: float | None = None
    errors: int | None = None
    ttfts_ms: list[float] = field(default_factory=list, repr=False)  # every successful request's, for pooling
    sources: dict[str, str] = field(default_factory=dict)
    vllm_reported: dict[str, Any] | None = None
    load_avg_1m: float | None = None
    other_vllm_servers: int = 0
    goodput_per_s: float | None = None  # under the run's SLO (--goodput), counted by the course's code


def with_goodput(run: TimedRun, records: Sequence[Any], slo: Any) -> TimedRun:
    """``run`` with its goodput under ``slo`` (a helpers.load.slo.SLO; None: left as it is), from its records."""
    from helpers.load.slo import goodput

    if slo is not None and records and run.wall_s:
        run.goodput_per_s = goodput(records, slo, run.wall_s).per_s
    return run


def run_from_records(tool: str, pair: int, first: bool, records: Sequence[Any],
                     sources: Mapping[str, str] | None = None) -> TimedRun:
    """A run's numbers from per-request records (the course client's, or vLLM's read by :func:`read_bench_result`)."""
    s = summarize(records)
    ms = lambda seconds: None if seconds is None else 1000 * seconds
    return TimedRun(tool, pair, first, s.wall_s, s.output_tokens_total, s.output_tok_per_s, ms(s.ttft_p50_s),
                    ms(s.ttft_p95_s), s.e2e_p50_s, s.tpot_mean_ms, s.num_errors,
                    [1000 * r.ttft_s for r in records if r.ok and r.ttft_s is not None], dict(sources or {}))


def run_from_bench(pair: int, first: bool, result: Mapping[str, Any]) -> TimedRun:
    """A `vllm bench serve` run's numbers: its records summarized by the course's code, else its own aggregates."""
    read = read_bench_result(result)
    if read.records is not None:
        run = run_from_records(THEIRS, pair, first, read.records, {"layout": read.layout, **read.sources})
    else:
        r = read.reported
        e2e = None if r["median_e2el_ms"] is None else r["median_e2el_ms"] / 1000
        run = TimedRun(THEIRS, pair, first, r["duration"], r["total_output_tokens"], r["output_throughput"],
                       r["median_ttft_ms"], r["p95_ttft_ms"], e2e, r["mean_tpot_ms"], r["failed"],
                       sources={"layout": read.layout, **read.sources})
    run.vllm_reported = read.reported
    return run


def check_pairs(pairs: int) -> int:
    """``pairs`` if it is an even number of at least :data:`MIN_PAIRS`, else ValueError saying why.

    >>> check_pairs(4)
    4
    """
    if isinstance(pairs, int) and pairs > 0 and pairs % 2:
        raise ValueError(f"--pairs must be even, got {pairs}: the tools take turns going first, and with an odd "
                         f"number one tool goes first once more. The first run of a pair was the slow one on the H200 "
                         f"(about 12,000 against 14,000-15,500 tok/s), so that tool would lose. "
                         f"Use {max(MIN_PAIRS, pairs + 1)}.")
    if not isinstance(pairs, int) or pairs < MIN_PAIRS:
        raise ValueError(f"--pairs must be at least {MIN_PAIRS}, got {pairs!r}: fewer alternating pairs leave the "
                         "comparison to the noise of one or two runs.")
    return pairs


def pair_order(pair: int) -> tuple[str, str]:
    """Which tool goes first in pair ``pair`` (0-based): the course client in even pairs, vLLM's in odd ones.

    >>> pair_order(0), pair_order(1)
    (('course client', 'vllm bench serve'), ('vllm bench serve', 'course client'))
    """
    return (OURS, THEIRS) if pair % 2 == 0 else (THEIRS, OURS)


def pooled(runs: Sequence[TimedRun]) -> dict[str, Any]:
    """One tool's runs together: all its output tokens over all its seconds, the p50 of every request's TTFT
    (the mean of the runs' p50s where a run kept no per-request TTFTs), and each number's min-max over the runs.

    >>> a = TimedRun(OURS, 0, True, 10.0, 1000, 100.0, 40.0, ttfts_ms=[30.0, 40.0, 50.0])
    >>> b = TimedRun(OURS, 1, False, 10.0, 1200, 120.0, 60.0, ttfts_ms=[60.0])
    >>> p = pooled([a, b])
    >>> p["output_tok_per_s"], p["output_tok_per_s_range"], p["ttft_p50_ms"], p["ttft_p50_ms_range"]
    (110.0, [100.0, 120.0], 45.0, [40.0, 60.0])
    """
    tokens = [r.output_tokens for r in runs]
    walls = [r.wall_s for r in runs]
    rates = [r.output_tok_per_s for r in runs if r.output_tok_per_s is not None]
    p50s = [r.ttft_p50_ms for r in runs if r.ttft_p50_ms is not None]
    if runs and all(r.ttfts_ms for r in runs):
        ttft, how = percentile([t for r in runs for t in r.ttfts_ms], 50), "p50 of every request's TTFT"
    else:
        ttft, how = (sum(p50s) / len(p50s) if p50s else None), "mean of the runs' TTFT p50s"
    known = None not in tokens and None not in walls and sum(walls) > 0
    return {"runs": len(runs), "output_tok_per_s": sum(tokens) / sum(walls) if known else None,
            "output_tok_per_s_range": _range(rates), "ttft_p50_ms": ttft, "ttft_p50_ms_range": _range(p50s),
            "ttft_pooled_as": how, "errors": sum(r.errors or 0 for r in runs)}



def compare(runs: Sequence[TimedRun]) -> dict[str, Any]:
    """Both tools pooled, ours / vLLM's per metric (pooled and per pair), the verdict against :data:`TARGETS`, and
    how much faster the second run of a pair was than the first (both tools together: 1.0 means order did not matter).
    """
    by_tool = {tool: pooled([r for r in runs if r.tool == tool]) for tool in (OURS, THEIRS)}
    pairs = sorted({r.pair for r in runs})
    verdicts = {}
    for metric, target in TARGETS.items():
        ours, theirs = by_tool[OURS][metric], by_tool[THEIRS][metric]
        ratio = ours / theirs if ours is not None and theirs else None
        per_pair = [_pair_ratio(runs, pair, metric) for pair in pairs]
        per_pair = [x for x in per_pair if x is not None]
        within = ratio is not None and abs(ratio - 1) <= target
        spread = _range(per_pair)
        verdicts[metric] = {"ratio": ratio, "target": target, "within": within, "pair_ratios": per_pair,
                            "pairs_disagree": spread is not None and spread[1] - spread[0] > 2 * target}
    first = pooled([r for r in runs if r.first])["output_tok_per_s"]
    second = pooled([r for r in runs if not r.first])["output_tok_per_s"]
    return {"pooled": by_tool, "verdicts": verdicts,
            "second_over_first": second / first if first and second is not None else None}


def verdict_lines(comparison: Mapping[str, Any]) -> list[str]:
    """The verdict in words, one line a metric, e.g. "output tok/s: ours / vLLM's 1.004 (pairs 0.99-1.01):
    within the 2% target"."""
    names = {"output_tok_per_s": "output tok/s", "ttft_p50_ms": "TTFT p50"}
    lines = []
    for metric, v in comparison["verdicts"].items():
        if v["ratio"] is None:
            lines.append(f"{names[metric]}: no ratio (a tool had no successful request): FAIL")
            continue
        pairs = f" (pairs {min(v['pair_ratios']):.3f}-{max(v['pair_ratios']):.3f})" if v["pair_ratios"] else ""
        word = "within" if v["within"] else "outside"
        line = f"{names[metric]}: ours / vLLM's {v['ratio']:.3f}{pairs}: {word} the {v['target']:.0%} target"
        line += ": PASS" if v["within"] else ": FAIL"
        if v["pairs_disagree"]:
            line += "; the pairs disagree by more than the target, so the machine was noisy: more pairs would tell"
        lines.append(line)
    return lines


def report_text(runs: Sequence[TimedRun], comparison: Mapping[str, Any], settings: Mapping[str, Any],
                context: Mapping[str, Any]) -> str:
    """The short text report: what ran where, every run, both tools pooled, the verdict, and where vLLM's numbers
    came from. ``context`` has ``machine``, ``server`` (helpers.load.run.ServerFacts as a dict) and ``wall_s``."""
    from helpers.lab.table import markdown_table

    server = context["server"]
    columns = ("pair", "order", "tool", "wall_s", "output_tok_per_s", "ttft_p50_ms", "ttft_p95_ms", "e2e_p50_s",
               "tpot_mean_ms", "errors", "goodput_per_s", "vllm_own_tok_per_s", "vllm_own_ttft_p50_ms",
               "vllm_own_goodput", "load_avg_1m")
    rows = [[r.pair + 1, "first" if r.first else "second", r.tool, r.wall_s, r.output_tok_per_s, r.ttft_p50_ms,
             r.ttft_p95_ms, r.e2e_p50_s, r.tpot_mean_ms, r.errors, r.goodput_per_s,
             (r.vllm_reported or {}).get("output_throughput"), (r.vllm_reported or {}).get("median_ttft_ms"),
             (r.vllm_reported or {}).get("request_goodput"), r.load_avg_1m] for r in runs]
    number = lambda x: f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
    span = lambda pair: "-" if pair is None else f"{number(pair[0])}-{number(pair[1])}"
    pooled_rows = [[tool, p["runs"], p["output_tok_per_s"], span(p["output_tok_per_s_range"]), p["ttft_p50_ms"],
                    span(p["ttft_p50_ms_range"]), p["errors"]]
                   for tool, p in ((tool, comparison["pooled"][tool]) for tool in (OURS, THEIRS))]
    order = comparison["second_over_first"]
    sources = sorted({f"{k}: {v}" for r in runs if r.tool == THEIRS for k, v in r.sources.items()})
    arrivals = ("all at once" if settings.get("request_rate", float("inf")) == float("inf") else
                f"at {settings['request_rate']:g} req/s, burstiness {settings.get('burstiness', 1.0):g}"
                + (f", SLO {settings['goodput']}" if settings.get("goodput") else ""))
    return "\n".join([
        (f"bench_vs_vllm: {context['machine']}; vLLM {server.get('vllm_version')} ({server.get('device')}), "
        f"model {server.get('model')}, max_num_seqs {settings['max_num_seqs']}; {settings['pairs']} pairs of "
        f"{settings['requests']} requests x {settings['output_tokens']} output tokens sent {arrivals}, a warm-up "
        f"burst of {settings['warm_requests']} x {settings['warm_output_tokens']} before each pair; "
        f"{context['wall_s']:.0f} s in all"), "",
        markdown_table(columns, rows), "",
        markdown_table(("tool", "runs", "pooled output tok/s", "min-max", "pooled TTFT p50 ms", "min-max", "errors"),
                       pooled_rows), "",
        *verdict_lines(comparison),
        "order: the second run of a pair / the first, output tok/s of both tools: "
        + ("-" if order is None else f"{order:.3f}"),
        "vllm bench serve's numbers came from: " + "; ".join(sources)])


def _pair_ratio(runs: Sequence[TimedRun], pair: int, metric: str) -> float | None:
    values = {r.tool: getattr(r, metric) for r in runs if r.pair == pair}
    ours, theirs = values.get(OURS), values.get(THEIRS)
    return ours / theirs if ours is not None and theirs else None


def _range(values: Sequence[float]) -> list[float] | None:
    return [min(values), max(values)] if values else None
