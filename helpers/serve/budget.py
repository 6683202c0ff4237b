"""The engine's step token budget (``max_num_batched_tokens``), read from the server's log.

Each engine step computes at most this many tokens: one per decoding request plus chunks of
prompts (chunked prefill). vLLM picks it per device when nobody passes
``--max-num-batched-tokens``: in vLLM 0.26 on an H200 the server ran 8,192; vLLM 0.32's CPU
build runs 2,048. Neither version puts it on ``/metrics`` (``vllm:cache_config_info`` carries the
cache's settings only), so it is read from the log, in this order:

1. ``non-default args: {..., 'max_num_batched_tokens': N, ...}``: it was passed on the command line;
2. ``Chunked prefill is enabled with max_num_batched_tokens=N.``: what the engine settled on
   (vLLM 0.26 on the H200: 8192, ``tests/data/server_logs/ready_gpu.log``);
3. neither, with ``enable_chunked_prefill=True`` in the engine's config line: 2,048. vLLM logs that
   line once per process (``logger.info_once``), and while building its argument parser it creates
   a default scheduler config (budget 2,048) with logging suppressed, so a budget equal to that
   default is never printed (vLLM 0.32 on CPU: ``EngineArgs.create_engine_config`` gives 2,048 there,
   ``tests/test_step_budget.py``, and a server given 1,024 logs it, ``tests/test_step_fit.py``).

Taught in ``notebooks/04_continuous_batching.ipynb``; the step-time model
(:mod:`helpers.batching.step_time`) takes the number.

Example::

    >>> step_budget("INFO [scheduler.py:252] Chunked prefill is enabled with max_num_batched_tokens=8192.").tokens
    8192
    >>> print(step_budget("... with config: model='m', enable_chunked_prefill=True, ..."))
    2,048 tokens a step (vLLM's default, which it does not log)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS in vLLM 0.26 and 0.32: the budget of the
# scheduler config the argument parser builds with logging off.
VLLM_UNLOGGED_DEFAULT = 2048

_PASSED = re.compile(r"non-default args: \{.*?'max_num_batched_tokens': (\d+)")
_LOGGED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
_CHUNKED = re.compile(r"enable_chunked_prefill=True")


@dataclass(frozen=True)
class StepBudget:
    """Tokens one engine step may compute, and where that number came from (in words)."""

    tokens: int
    source: str  # "passed on the command line", "the server's log", "vLLM's default, which it does not log"

    def __str__(self) -> str:
        return f"{self.tokens:,} tokens a step ({self.source})"


def step_budget(log_text: str) -> StepBudget | None:
    """The budget of the server whose log this is; None where the log cannot tell (chunked
    prefill off, or the engine's config line not written yet)."""
    if passed := _PASSED.findall(log_text):
        return StepBudget(int(passed[-1]), "passed on the command line")
    if logged := _LOGGED.findall(log_text):
        return StepBudget(int(logged[-1]), "the server's log")
    if _CHUNKED.search(log_text):
        return StepBudget(VLLM_UNLOGGED_DEFAULT, "vLLM's default, which it does not log")
    return None


def budget_of(server: Any) -> int:
    """A running server's step budget from its log; vLLM's unlogged default where there is no log to read."""
    found = step_budget(server.log_text()) if hasattr(server, "log_text") else None
    return found.tokens if found is not None else VLLM_UNLOGGED_DEFAULT
