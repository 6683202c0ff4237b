"""Requests in groups, each group sharing a system prompt: what a prefix-cache-aware router is for.

:func:`grouped_prefix_workload` stacks ``groups`` of notebook 05's shared-prefix workload
(:func:`helpers.tuning.workloads.shared_prefix_workload`: one system prompt of ``system_tokens``
tokens, then ``per_group`` short user messages), each group with its own run tag, so no two
groups share more than the chat template. Requests are ordered group by group (all of group 0,
then all of group 1, ...): a round-robin router then spreads every group over every replica,
each replica computing the group's system prompt once, while a cache-aware router can keep a
group on the replica that already holds its prefix.

``tokenizer`` is a server or a tokenizer, as for the load tester's workloads. The result is a
:class:`~helpers.load.workload.Workload` that :func:`helpers.load.run.run_load_test` sends as it
sends any other.

Example::

    >>> w = grouped_prefix_workload(replicas[0], groups=2, per_group=3, system_tokens=512)  # doctest: +SKIP
    >>> [r.system == w.requests[0].system for r in w.requests]                               # doctest: +SKIP
    [True, True, True, False, False, False]
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from helpers import validate
from helpers.load.workload import Workload
from helpers.tuning.workloads import shared_prefix_workload


def grouped_prefix_workload(tokenizer: Any, *, groups: int = 2, per_group: int = 4, system_tokens: int = 512,
                            question_tokens: int = 24, output_tokens: int = 8, seed: int = 0,
                            run_tag: str | None = None) -> Workload:
    """``groups`` x ``per_group`` chat requests, group by group; the requests of a group share a system prompt."""
    groups = validate.positive_int(groups, "groups", hint="It is how many different system prompts to use.")
    tag = run_tag if run_tag is not None else uuid.uuid4().hex[:4]
    requests = []
    for group in range(groups):
        one = shared_prefix_workload(tokenizer, per_group, system_tokens, question_tokens, output_tokens,
                                     seed + group, run_tag=f"{tag}g{group}")
        requests += [replace(spec, index=len(requests) + i) for i, spec in enumerate(one.requests)]
    return Workload(tuple(requests), (question_tokens,), output_tokens, seed, tag)
