"""The lab's workload: N seeded prompts of real English text, each an exact number of tokens.

:func:`build_workload` makes N requests (default 50) whose prompts cycle through
16 / 64 / 256 / 512 tokens (:data:`LAB_PROMPT_LENS`, the one definition of the lab's prompt
mix, which notebooks 03 and 04 reuse), cut from real English text (the Python language
reference that ships with every Python, ``pydoc_data``) and sized with the *server's own*
tokenizer, so "a 256-token prompt" is 256 tokens for the model. Each prompt starts with a
run tag, random per call, so a rerun never hits vLLM's prefix cache; ``seed`` fixes which
text each request gets. :func:`token_prompt` makes prompts of random token ids instead, for
demos that need an exact length without a tokenizer round trip.

Sending them: :mod:`helpers.load.client` and :mod:`helpers.load.run`.
"""

from __future__ import annotations

import json
import random
import re
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from helpers import validate
from helpers.load.client import RequestSpec
from helpers.local_http import read_body

LAB_PROMPT_LENS = (16, 64, 256, 512)  # tokens of message text, cycled over the requests
TOKEN_ID_RANGE = (1_000, 30_000)  # random prompts: clear of SmolLM2's special tokens (0-16), inside its vocabulary
DEFAULT_NUM_REQUESTS = 50
DEFAULT_OUTPUT_TOKENS = 64  # CPU: 64 keeps the whole 8-vs-64 lab within a few minutes
GIVE_THE_OBJECT = "pass the server object (start_server(...) or connect(url)), not its URL"


# ----- tokenizers ------------------------------------------------------------------------------
class Tokenizer(Protocol):
    """What sizing prompts needs: text -> token ids -> text, without special tokens."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ServerTokenizer:
    """The tokenizer of a running vLLM server, through its ``/tokenize`` and ``/detokenize``.

    Counting with the server itself means the counts are the model's, whatever model it serves.

    >>> ServerTokenizer("http://127.0.0.1:8000", "smollm2").encode("Hello world")  # doctest: +SKIP
    [19556, 905]
    """

    def __init__(self, url: str, model: str, api_key: str = "not-needed", timeout_s: float = 30.0) -> None:
        timeout_s = validate.positive_number(timeout_s, "timeout_s", unit="seconds")
        self.url, self.model, self.api_key, self.timeout_s = url.rstrip("/"), model, api_key, timeout_s

    @classmethod
    def of(cls, server: Any) -> ServerTokenizer:
        """From anything with ``url``, ``model_name`` and ``api_key`` (a VLLMServer, an Endpoint)."""
        return cls(server.url, server.model_name, getattr(server, "api_key", "not-needed"))

    def encode(self, text: str) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return list(self._post("/tokenize", body)["tokens"])

    def decode(self, ids: Sequence[int]) -> str:
        return self._post("/detokenize", {"model": self.model, "tokens": list(ids)})["prompt"]

    def count_chat(self, content: str) -> int:
        """Tokens of one user message after the chat template: what usage.prompt_tokens reports."""
        return len(self.encode_chat([{"role": "user", "content": content}]))

    def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of a chat once the server's chat template is applied, ready for the answer."""
        body = {"model": self.model, "messages": list(messages), "add_generation_prompt": True}
        return list(self._post("/tokenize", body)["tokens"])

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"},
        )
        return json.loads(read_body(request, self.timeout_s))


# ----- the workload ------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def corpus_text() -> str:
    """Real English text that every Python ships: the language reference's help topics.

    Whitespace is collapsed to single spaces. About 460,000 characters on Python 3.11; the
    exact text differs a little between Python versions (prompt *lengths* do not).
    """
    from pydoc_data.topics import topics

    return re.sub(r"\s+", " ", " ".join(topics[key] for key in sorted(topics))).strip()




@dataclass(frozen=True)
class Workload:
    """The requests of one run, and how they were made."""

    requests: tuple[RequestSpec, ...]
    prompt_lens: tuple[int, ...]
    output_tokens: int
    seed: int
    run_tag: str  # starts every prompt; unique per run so the prefix cache cannot help a rerun

    def settings(self) -> dict[str, Any]:
        return {"num_requests": len(self.requests), "prompt_lens": list(self.prompt_lens),
                "output_tokens": self.output_tokens, "seed": self.seed, "run_tag": self.run_tag}


def build_workload(
    tokenizer: Tokenizer | Any,
    num_requests: int = DEFAULT_NUM_REQUESTS,
    prompt_lens: Sequence[int] = LAB_PROMPT_LENS,
    output_tokens: int = DEFAULT_OUTPUT_TOKENS,
    seed: int = 0,
    run_tag: str | None = None,
) -> Workload:
    """N prompts of real text, request i having exactly ``prompt_lens[i % len(prompt_lens)]`` tokens.

    ``tokenizer`` is a :class:`Tokenizer` or a server (then its own tokenizer is used, one
    HTTP round trip per call: about a second for 50 prompts). ``seed`` picks where in the
    text each prompt is cut from; ``run_tag`` (default: random) opens every prompt, e.g.
    ``"(3f9a/17) the object's ..."``, so two workloads never share a prefix.

    Every argument is checked before any text is tokenized: ``num_requests``,
    ``output_tokens`` and each prompt length must be positive integers, ``seed`` an integer of
    0 or more, and, when ``tokenizer`` is a server started with a ``max_model_len``, the
    longest prompt plus ``output_tokens`` must fit in it; otherwise ``ValueError``
    (:class:`helpers.errors.InvalidArgumentError`) says what to pass instead.

    >>> w = build_workload(server, num_requests=5, seed=0)         # doctest: +SKIP
    >>> [r.prompt_tokens for r in w.requests], w.requests[0].prompt[:22]  # doctest: +SKIP
    ([16, 64, 256, 512, 16], '(3f9a/0) in the form ')
    """
    num_requests = validate.positive_int(num_requests, "num_requests", hint="It is how many requests to send.")
    output_tokens = validate.positive_int(output_tokens, "output_tokens",
                                          hint="It is how many tokens each request generates.")
    lens = validate.positive_ints(prompt_lens, "prompt_lens", hint="Prompt lengths are in tokens.")
    seed = validate.non_negative_int(seed, "seed")
    tag = _check_run_tag(run_tag)
    check_server(tokenizer, "build_workload's first argument")
    validate.fits_context(max(lens) + output_tokens, validate.context_length(tokenizer),
                          f"the longest prompt ({max(lens)} tokens) plus output_tokens={output_tokens}",
                          "Pass fewer output_tokens or shorter prompt_lens (the chat template adds about 30 "
                          "tokens more), or start the server with a larger max_model_len.")
    if not hasattr(tokenizer, "encode"):
        tokenizer = ServerTokenizer.of(tokenizer)
    tag = tag if tag is not None else uuid.uuid4().hex[:4]
    corpus_ids = _corpus_ids(tokenizer, max(lens))
    rng = random.Random(seed)
    requests = []
    for index in range(num_requests):
        target = lens[index % len(lens)]
        start = rng.randrange(0, len(corpus_ids) - target)
        prompt = _prompt_of_exact_length(tokenizer, f"({tag}/{index}) ", corpus_ids, start, target)
        requests.append(RequestSpec(index, prompt, target, output_tokens))
    return Workload(tuple(requests), lens, output_tokens, seed, tag)


def check_server(target: Any, name: str = "server", *, if_none: str = "") -> Any:
    """``target``, after refusing what cannot be a server object: its URL as text, or None.

    A URL has ``.encode`` like a tokenizer, so unrefused it would be sent text to tokenize and fail far from
    the mistake. ``if_none``: what to do about a None (default: start a server or run the cell that does).

    >>> check_server("http://127.0.0.1:8000")
    Traceback (most recent call last):
    ...
    helpers.errors.InvalidArgumentError: server is the text 'http://127.0.0.1:8000': pass the server object \
(start_server(...) or connect(url)), not its URL.
    """
    if isinstance(target, (str, bytes)):
        raise validate.InvalidArgumentError(f"{name} is the text {target!r:.100}: {GIVE_THE_OBJECT}.")
    if target is None:
        raise validate.InvalidArgumentError(
            f"{name} is None, not a server: " + (if_none or "a cell that finished with it may have stopped it and "
                                                 "set it to None; run the cell that starts the server again, or "
                                                 "pass start_server(...) or connect(url)."))
    return target


def _check_run_tag(run_tag: Any) -> str | None:
    if run_tag is not None and (not isinstance(run_tag, str) or not run_tag.strip()):
        raise validate.InvalidArgumentError(
            f"run_tag must be a non-empty string, or None for a random one, got {run_tag!r}.")
    return run_tag


def _corpus_ids(tokenizer: Tokenizer, longest: int) -> list[int]:
    # Enough text for every prompt to start anywhere in it; 4 characters a token is generous.
    chars = max(60_000, 40 * longest)
    ids = tokenizer.encode(corpus_text()[:chars])
    if len(ids) <= 2 * longest:  # a prompt longer than the text can give (the caller's length, not a bug)
        raise validate.InvalidArgumentError(
            f"a prompt of {longest:,} tokens is too long for the course's text ({len(ids):,} tokens with this "
            f"tokenizer; prompts may be at most {max(1, (len(ids) - 1) // 2):,}). Pass shorter prompt lengths.")
    return ids


def _prompt_of_exact_length(tokenizer: Tokenizer, head: str, corpus_ids: list[int], start: int, target: int) -> str:
    """``head`` + decoded corpus tokens, adjusting the slice until the whole text has ``target`` tokens.

    Decoding a slice and encoding it again can merge or split tokens at the seams, so the
    count is checked with the tokenizer and the slice corrected; two rounds usually suffice.
    A ``target`` shorter than ``head`` itself cannot be met: ``ValueError``.
    """
    head_len = len(tokenizer.encode(head))
    if target < head_len:
        raise validate.InvalidArgumentError(
            f"a {target}-token prompt cannot hold its {head_len}-token opening {head.strip()!r} (the run tag and "
            f"the request's index); pass a length of at least {head_len}.")
    body_len = max(0, target - head_len)
    best: tuple[int, str] | None = None  # (tokens, text) of the longest text not over target
    for _ in range(12):
        text = head + tokenizer.decode(corpus_ids[start:start + body_len])
        count = len(tokenizer.encode(text))
        if count == target:
            return text
        if count < target and (best is None or count > best[0]):
            best = (count, text)
        body_len = max(0, body_len + (target - count))
    # Rare: the seam keeps flipping. Pad the best shorter text with single-token words.
    count, text = best if best is not None else (len(tokenizer.encode(head)), head)
    while count < target:
        text += " ."
        count = len(tokenizer.encode(text))
    assert count == target, f"could not make a {target}-token prompt (got {count})"
    return text


def token_prompt(num_tokens: int, seed: int | np.random.Generator) -> tuple[int, ...]:
    """A prompt of exactly ``num_tokens`` random token ids: no two seeds share a KV block, and
    the prefix cache has never seen it.

    >>> len(token_prompt(16, seed=0)), token_prompt(4, seed=1) == token_prompt(4, seed=1)
    (16, True)
    """
    num_tokens = validate.positive_int(num_tokens, "num_tokens", hint="It is the prompt's length in tokens.")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return tuple(int(token) for token in rng.integers(*TOKEN_ID_RANGE, size=num_tokens))
