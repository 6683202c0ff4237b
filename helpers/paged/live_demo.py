"""The live KV-cache demo's requests: prompts of token ids, each an exact length (pure).

The PagedAttention notebook watches the real server's KV blocks while a few requests of
known lengths run. :func:`token_workload` turns their prompts (token ids, e.g. from
:func:`helpers.load.workload.token_prompt`) and output lengths into a :class:`TokenWorkload`,
which :func:`helpers.load.run.run_load_test` sends through the course's one client
(``/v1/completions``, so no chat template changes a prompt's length; ``ignore_eos``, so each
generates exactly its ``max_tokens``). Sending and polling ``/metrics`` happen in the
notebook, with ``await watch(run_load_test(server, workload, progress=False), server)``.

Example::

    >>> from helpers.load.workload import token_prompt
    >>> workload = token_workload([token_prompt(512, seed=0), token_prompt(16, seed=1)], [16, 64])
    >>> [(r.index, r.prompt_tokens, r.max_tokens, r.stream) for r in workload.requests]
    [(0, 512, 16, False), (1, 16, 64, False)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from helpers.errors import InvalidArgumentError
from helpers.load.client import RequestSpec


@dataclass(frozen=True)
class TokenWorkload:
    """Requests with token-id prompts, all sent at once: what :func:`run_load_test` needs."""

    requests: tuple[RequestSpec, ...]

    def settings(self) -> dict[str, Any]:
        """What a run records about its workload."""
        return {"num_requests": len(self.requests), "prompt_lens": [r.prompt_tokens for r in self.requests],
                "output_lens": [r.max_tokens for r in self.requests],
                "stream": all(r.stream for r in self.requests)}


def token_workload(prompts: Sequence[Sequence[int]], max_tokens: Sequence[int], stream: bool = False) -> TokenWorkload:
    """One request per prompt (token ids), request i generating exactly ``max_tokens[i]`` tokens.

    ``stream=False`` (the default) asks for one reply at the end: the demo needs when each
    request finished, not its token times, and fewer network reads leave more CPU to the engine.
    """
    if len(prompts) != len(max_tokens):
        raise InvalidArgumentError(
            f"give one max_tokens per prompt: got {len(prompts)} prompts and {len(max_tokens)} max_tokens.")
    if not prompts:
        raise InvalidArgumentError("give at least one prompt (a sequence of token ids).")
    return TokenWorkload(tuple(
        RequestSpec(index=i, prompt=tuple(prompt), prompt_tokens=len(prompt), max_tokens=m, stream=stream)
        for i, (prompt, m) in enumerate(zip(prompts, max_tokens))
    ))
