"""The step token budget (``--max-num-batched-tokens``) against a mix of long prompts and short decodes.

I/O: it starts one vLLM server per budget and sends it open-loop traffic. vLLM fills each engine step
with at most ``max_num_batched_tokens`` tokens: every running request's next token first, then
prompt tokens, a long prompt cut into chunks across steps (chunked prefill). A small budget keeps
steps short, so the decodes running beside a long prompt keep their pace (ITL) while that prompt
waits longer for its first token (TTFT); a large one prefills it in one long step that stalls every
decode in the batch. :func:`compare_token_budgets` measures both sides: one rate of a mixed workload
(:data:`MIXED_PROMPT_LENS`: one long prompt among short ones) on a fresh server per budget, one
:class:`~helpers.traffic.rates.RatePoint` each (TTFT and ITL p50/p95), through
:func:`~helpers.traffic.sweep.sweep_rates`. The budget in force is read back from the server's
log (:mod:`helpers.serve.budget`). Taught in ``labs/02_serving_real_traffic.ipynb``.

Bounded like a sweep: a budget whose server could not start in the time left is ``"not run: time
bound"``; one that would not start is ``"not run: server did not start: ..."`` and the next is tried.

Example::

    >>> points = await compare_token_budgets([64, 256, 2048], rate=1.0, num_requests=16)   # doctest: +SKIP
    >>> print(describe_budgets(points))                                                      # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from helpers import validate
from helpers.errors import START_ERRORS
from helpers.feedback import as_option
from helpers.serve.server import start_server
from helpers.traffic.rates import RatePoint, not_run, save_rate_sweep
from helpers.traffic.sweep import MIN_DRAIN_S, sweep_rates

MIXED_PROMPT_LENS = (16, 16, 16, 1024)  # tokens: every fourth request brings a long prompt among short ones
START_ALLOWANCE_S = 90.0  # seconds a server start may take on a busy 2-core CPU (20-60 s measured)


async def compare_token_budgets(
    budgets: Sequence[int],
    *,
    rate: float,
    num_requests: int,
    max_num_seqs: int = 8,
    prompt_lens: Sequence[int] = MIXED_PROMPT_LENS,
    output_tokens: int = 32,
    burstiness: float = 1.0,
    seed: int = 0,
    time_limit_s: float = 600.0,
    out_path: Path | str | None = None,
    quiet: bool = False,
    settings: Mapping[str, Any] | None = None,
) -> list[RatePoint]:
    """One point per budget (in the order given), each on its own server started with
    ``max_num_seqs`` and ``--max-num-batched-tokens`` = the budget, all at the same ``rate``
    (requests/s) with the same prompts and arrivals; ``settings``: the servers' other settings (e.g. their KV
    pool, ``kv_cache_space_gib``). A budget below ``max_num_seqs`` is refused (vLLM would not start). In a
    notebook ``await compare_token_budgets(...)``."""
    budgets = validate.positive_ints(budgets, "budgets", hint="Each is a step's token budget, e.g. (64, 256, 2048).")
    max_num_seqs = validate.positive_int(max_num_seqs, "max_num_seqs")
    small = [budget for budget in budgets if budget < max_num_seqs]
    if small:
        raise validate.InvalidArgumentError(
            f"budgets {small} are below max_num_seqs={max_num_seqs}: a step must hold one token of every running "
            f"request, and vLLM refuses to start. Pass budgets of at least {max_num_seqs}.")
    time_limit_s = validate.positive_number(time_limit_s, "time_limit_s", unit="seconds")
    validate.positive_number(rate, "rate", unit="requests per second", hint="e.g. 1.0")
    num_requests = validate.int_above(num_requests, "num_requests", 2, hint="e.g. 16.")
    points: list[RatePoint] = []
    began = time.monotonic()
    for budget in budgets:
        label = f"max_num_batched_tokens={budget}"
        remaining = time_limit_s - (time.monotonic() - began)
        if START_ALLOWANCE_S + num_requests / rate + MIN_DRAIN_S > remaining:
            points.append(not_run(label, rate, burstiness, num_requests, "time bound"))
        else:
            points.append(await _one_budget(budget, label, rate=rate, num_requests=num_requests,
                                            max_num_seqs=max_num_seqs, prompt_lens=prompt_lens,
                                            output_tokens=output_tokens, burstiness=burstiness, seed=seed,
                                            time_limit_s=remaining - START_ALLOWANCE_S, quiet=quiet,
                                            settings=settings or {}))
        if not quiet and not points[-1].ran:
            print(f"  {label}: {points[-1].status}", flush=True)
        if out_path is not None:
            save_rate_sweep(points, out_path, rate=rate, max_num_seqs=max_num_seqs, prompt_lens=list(prompt_lens),
                            output_tokens=output_tokens, budgets=list(budgets))
    return points


def budget_server(budget: int, max_num_seqs: int, **settings: Any) -> dict[str, Any]:
    """The settings of the server :func:`compare_token_budgets` starts for ``budget`` (with its ``settings``), as
    ``start_server`` takes them: for :func:`helpers.serve.ahead.start_ahead`, which can start it before its cell.

    >>> budget_server(64, 8, kv_cache_space_gib=0.5)
    {'kv_cache_space_gib': 0.5, 'max_num_seqs': 8, 'extra_args': ('--max-num-batched-tokens', '64')}
    """
    return {**settings, "max_num_seqs": max_num_seqs, "extra_args": ("--max-num-batched-tokens", str(budget))}


async def _one_budget(budget: int, label: str, *, rate: float, num_requests: int, max_num_seqs: int,
                      prompt_lens: Sequence[int], output_tokens: int, burstiness: float, seed: int,
                      time_limit_s: float, quiet: bool, settings: Mapping[str, Any]) -> RatePoint:
    try:
        server = start_server(quiet=True, **budget_server(budget, max_num_seqs, **settings))
    except START_ERRORS as error:
        cause = getattr(error, "cause", None) or type(error).__name__
        return not_run(label, rate, burstiness, num_requests, f"server did not start: {cause}")
    with server:
        # the same seed on every server: the same prompts at the same times, only the budget differs
        (point,) = await sweep_rates(server, [rate], setting_label=label, num_requests=num_requests,
                                     burstiness=burstiness, seed=seed, time_limit_s=time_limit_s,
                                     prompt_lens=prompt_lens, output_tokens=output_tokens, quiet=quiet)
    return point


def describe_budgets(points: Sequence[RatePoint]) -> str:
    """A small table: per budget, TTFT and ITL p50 / p95 (or why it was not measured).

    >>> p = RatePoint("max_num_batched_tokens=64", 1.0, 1.0, 8, ttft_p50_s=0.5, ttft_p95_s=2.0,
    ...               itl_p50_ms=40.0, itl_p95_ms=60.0)
    >>> print(describe_budgets([p]))
    setting                        TTFT p50 / p95 s   ITL p50 / p95 ms
    max_num_batched_tokens=64          0.50 /  2.00      40.0 /   60.0
    """
    width = max([30, *(len(p.setting) + 2 for p in points)])  # "(default)" labels are longer
    lines = [f"{'setting':<{width}}{'TTFT p50 / p95 s':>17}{'ITL p50 / p95 ms':>19}"]
    for p in points:
        if p.ttft_p50_s is None or p.itl_p50_ms is None:
            lines.append(f"{p.setting:<{width}}   {p.status}")
        else:
            lines.append(f"{p.setting:<{width}}{p.ttft_p50_s:>9.2f} / {p.ttft_p95_s:>5.2f}"
                         f"{p.itl_p50_ms:>10.1f} / {p.itl_p95_ms:>6.1f}")
    return "\n".join(lines)


def judge_budget_guess(guess: object, points: Sequence[RatePoint]) -> str:
    """A prediction of which way the long prompts' TTFT p95 goes with the small budget (``"up"`` or ``"down"``),
    set beside the measurement: no grade (the answer depends on the machine), the direction and the two figures.
    ``points``: the small budget's first, the default's last (the lab's ``budget_points``).

    >>> small = RatePoint("max_num_batched_tokens=64", 1.0, 1.0, 8, ttft_p95_s=2.0)
    >>> default = RatePoint("max_num_batched_tokens=2048 (default)", 1.0, 1.0, 8, ttft_p95_s=1.5)
    >>> judge_budget_guess("Up", [small, default])
    'You predicted up; measured: up (TTFT p95 1.50 s at the default budget, 2.00 s at the small one): as you expected.'
    >>> judge_budget_guess(None, [small, default])  # doctest: +ELLIPSIS
    '✏️ You made no prediction: set `my_budget_guess` above ("up" or "down") before you look. Measured: up ...'
    """
    small, default = points[0], points[-1]
    if small.ttft_p95_s is None or default.ttft_p95_s is None:
        return "Your prediction cannot be judged on this run: a budget was not measured (the table says why)."
    went = "up" if small.ttft_p95_s > default.ttft_p95_s else "down"
    measured = (f"{went} (TTFT p95 {default.ttft_p95_s:.2f} s at the default budget, {small.ttft_p95_s:.2f} s at "
                "the small one)")
    if guess is None:
        return (f'✏️ You made no prediction: set `my_budget_guess` above ("up" or "down") before you look. '
                f"Measured: {measured}.")
    choice = as_option(guess, ("up", "down"))
    if choice not in ("up", "down"):
        return f'✏️ `my_budget_guess` should be "up" or "down"; got {guess!r}. Measured: {measured}.'
    return f"You predicted {choice}; measured: {measured}: " + ("as you expected." if choice == went else
                                                               "the other way from your prediction.")
