"""An untimed burst before a timed load on a GPU server, whose first load pays one-time costs.

Measured on the H200 (vLLM 0.26, SmolLM2, compiled, 2026-12-01): the lab's first load at 64
slots on a freshly started server ran at 9,464 output tok/s and its second at 14,246; notebook
05, which measured each server once, saw a server whose 3.2-million-token KV pool cannot have been
the limit serve 23% less than the warmed baseline. Whatever the first load pays for (kernels
tuned and compiled for the batch's shapes, memory pools grown), :func:`warm_up` pays it with a
short burst of the same shape: the same number of requests and prompt lengths, a few output
tokens each, fresh prompts (its own run tag, so the timed run finds nothing of it in the prefix
cache), nothing recorded.

On vLLM's CPU build the course compiles nothing (``-O0``) and such a burst would cost seconds
of the notebooks' time budget for prefill alone, so only GPU servers are warmed
(:func:`needs_warm_up`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

WARM_UP_OUTPUT_TOKENS = 16  # enough decode steps to run every batch size the burst reaches


def needs_warm_up(target: Any) -> bool:
    """True for a GPU server (``target.device == "cuda"``); a CPU server or an endpoint is left alone."""
    return getattr(target, "device", None) == "cuda"


def fresh_copy(workload: Any, output_tokens: int = WARM_UP_OUTPUT_TOKENS) -> Any:
    """``workload`` with another run tag in every prompt (and system prompt), ``output_tokens`` each, all at t=0:
    the same shape, and nothing the timed run could find in the prefix cache.

    Only the marker that opens a text (``"(tag/0) "``, or ``"(tagg1/0) "`` for a group's system prompt)
    changes, once: the tag's letters elsewhere in the text are the prompt's own.
    """
    while (tag := uuid.uuid4().hex[:len(workload.run_tag)]) == workload.run_tag:
        continue  # a short tag can come out the same: the timed run would find the warm-up's prefixes cached
    return _retagged(workload, workload.run_tag, tag, output_tokens)


def _retagged(workload: Any, old: str, tag: str, output_tokens: int) -> Any:
    """``workload`` with the marker ``"(" + old`` opening each text made ``"(" + tag``; see :func:`fresh_copy`.

    >>> from helpers.load.client import RequestSpec
    >>> from helpers.load.workload import Workload
    >>> spec = RequestSpec(0, "(a/0) a cat sat", 5, 64, system="(ag1/0) a rule")
    >>> copy = _retagged(Workload((spec,), (5,), 64, 0, "a"), "a", "3", 16).requests[0]
    >>> copy.prompt, copy.system
    ('(3/0) a cat sat', '(3g1/0) a rule')
    """
    marker = "(" + old

    def retag(text: Any) -> Any:
        return "(" + tag + text[len(marker):] if isinstance(text, str) and text.startswith(marker) else text

    requests = tuple(replace(spec, prompt=retag(spec.prompt), system=retag(spec.system), arrival_s=0.0,
                             max_tokens=min(spec.max_tokens, output_tokens)) for spec in workload.requests)
    return replace(workload, requests=requests, output_tokens=min(workload.output_tokens, output_tokens), run_tag=tag)


async def warm_up(target: Any, workload: Any, *, force: bool = False) -> float | None:
    """Send a :func:`fresh_copy` of ``workload`` at once, untimed; return its seconds, or None when
    ``target`` needs no warm-up (and ``force`` is False). Its failures are not reported: the timed
    run that follows reports its own. Prompts of token ids are sent as they are (no tag to change):
    use it before a run of text prompts."""
    from helpers.load.run import run_load_test

    if not (force or needs_warm_up(target)):
        return None
    began = time.perf_counter()
    await run_load_test(target, fresh_copy(workload), label="warm-up", progress=False)
    return time.perf_counter() - began
