"""The tuning notebook's own load: many requests behind one long system prompt, the traffic
that prefix caching exists for (:func:`shared_prefix_workload`). Built from the load
tester's workloads (:func:`helpers.load.workload.build_workload`), so every prompt is real
text of an exact number of tokens. (The other loads of the notebook are the lab's mix.)

Example::

    >>> w = shared_prefix_workload(server, num_requests=12, system_tokens=512)   # doctest: +SKIP
    >>> len({spec.system for spec in w.requests}), w.requests[0].prompt_tokens   # doctest: +SKIP
    (1, 24)
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from helpers import validate
from helpers.load.workload import Workload, build_workload


def shared_prefix_workload(
    tokenizer: Any,
    num_requests: int = 12,
    system_tokens: int = 512,
    question_tokens: int = 24,
    output_tokens: int = 8,
    seed: int = 0,
    run_tag: str | None = None,
) -> Workload:
    """``num_requests`` chats that share one long system prompt and differ in the user message.

    The system prompt has exactly ``system_tokens`` tokens and opens with ``run_tag``
    (random by default): within a run every request shares it, but a second run gets a new
    one, so its first request must compute it again and a rerun cannot inherit the first
    run's cache. Each user message (``question_tokens`` tokens) opens with the tag and its own
    index, so no two requests share more than the system prompt and the chat template.
    ``tokenizer``: a :class:`~helpers.load.workload.Tokenizer` or a server (its own tokenizer).
    Counts must be positive integers (``system_tokens`` above 8: the system prompt's opening
    words take about that many), ``seed`` 0 or more, and system prompt + question + output
    must fit a server's ``max_model_len``; otherwise ``ValueError`` says what to pass.
    """
    num_requests = validate.positive_int(num_requests, "num_requests")
    system_tokens = validate.int_above(system_tokens, "system_tokens", 8,
                                       hint="The system prompt's opening words take about 8 tokens.")
    question_tokens = validate.positive_int(question_tokens, "question_tokens")
    output_tokens = validate.positive_int(output_tokens, "output_tokens")
    validate.fits_context(system_tokens + question_tokens + output_tokens, validate.context_length(tokenizer),
                          f"system_tokens={system_tokens} + question_tokens={question_tokens} + "
                          f"output_tokens={output_tokens}",
                          "Pass a shorter system prompt or fewer output tokens (the chat template adds about 30 "
                          "tokens more), or start the server with a larger max_model_len.")
    tag = run_tag if run_tag is not None else uuid.uuid4().hex[:4]  # build_workload checks seed and run_tag
    # The system prompt is the first (and only) prompt of a one-request workload: "(tag/0) " and real text.
    (system,) = build_workload(tokenizer, 1, (system_tokens,), output_tokens, seed, run_tag=tag).requests
    questions = build_workload(tokenizer, num_requests, (question_tokens,), output_tokens, seed, run_tag=tag)
    requests = tuple(replace(spec, system=system.prompt) for spec in questions.requests)
    return Workload(requests, (question_tokens,), output_tokens, seed, tag)
