"""The lab's load tester: a seeded workload of real-text prompts and a lean asyncio client.

Two halves, after vLLM's own serve benchmark (``vllm bench serve``):

- :func:`build_workload` makes N requests (default 50) whose prompts cycle through
  16 / 64 / 256 / 512 tokens (:data:`LAB_PROMPT_LENS`, the same mix as
  ``helpers.batching.trace.lab_trace``), cut from real English text (the Python language
  reference that ships with every Python, ``pydoc_data``) and sized with the *server's own*
  tokenizer, so "a 256-token prompt" is 256 tokens for the model. Each prompt starts with a
  run tag, random per call, so a rerun never hits vLLM's prefix cache; ``seed`` fixes
  which text each request gets.
- :func:`run_load_test` sends them as streamed chat completions, at most ``concurrency``
  at a time (default: all at once), with a fixed output length (``max_tokens`` plus
  ``ignore_eos``) and temperature 0. :func:`send_request` never raises: every request
  becomes a :class:`RequestRecord` with ``ok`` / ``error``, the token counts from the
  server's usage report, and client-clock times (send, first token, last token, the gaps
  between tokens).

Metrics are computed elsewhere, from the raw records: :mod:`helpers.load.summary`.
Saving and loading runs: :mod:`helpers.lab.results`. Taught in ``labs/01_concurrency_lab.ipynb``.

What it leaves out: arrival processes other than "all at once" (a semaphore caps how many
are in flight), multi-turn chats, sampling (temperature 0 only), retries (a failed request
is a counted error, not retried).

Why the hot loop only appends timestamps: on a 2-core CPU the client shares the cores with
the model worker, and every microsecond it spends per streamed token is taken from the
engine. The client reads the stream as raw bytes and records ``time.perf_counter()`` per
network read; the server-sent events are parsed once the stream has ended.

Example::

    >>> workload = build_workload(server, num_requests=50)        # doctest: +SKIP
    >>> run = await run_load_test(server, workload)               # doctest: +SKIP
    >>> sum(r.ok for r in run.records)                            # doctest: +SKIP
    50
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Protocol

from helpers import validate

LAB_PROMPT_LENS = (16, 64, 256, 512)  # tokens of message text, cycled over the requests
DEFAULT_NUM_REQUESTS = 50
DEFAULT_OUTPUT_TOKENS = 64  # CPU: 64 keeps the whole 8-vs-64 lab within a few minutes
DEFAULT_TIMEOUT_S = 600.0  # per request, from the moment it is sent
POOL_HEADROOM = 4  # connections above the in-flight cap (the openai client's pool must not be the limit)
CONNECT_TIMEOUT_S = 10.0


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
        body = {"model": self.model, "messages": [{"role": "user", "content": content}], "add_generation_prompt": True}
        return int(self._post("/tokenize", body)["count"])

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.loads(response.read())


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
class RequestSpec:
    """One request to send: the message text and how many tokens to generate."""

    index: int  # position in the workload: 0 .. N-1
    prompt: str  # the user message
    prompt_tokens: int  # tokens of `prompt` alone (the chat template adds ~30 more on SmolLM2)
    max_tokens: int  # output tokens; exact, because ignore_eos is sent
    system: str | None = None  # a system message sent before the user message (None: none)

    def __post_init__(self) -> None:
        validate.non_negative_int(self.index, "index")
        validate.non_negative_int(self.prompt_tokens, "prompt_tokens")
        validate.positive_int(self.max_tokens, "max_tokens", hint="It is the number of tokens to generate.")


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


# ----- one request -------------------------------------------------------------------------------
@dataclass
class RequestRecord:
    """What happened to one request. Times are seconds on the client's clock.

    ``send_s`` and ``done_s`` count from the start of the run; ``ttft_s`` and ``e2e_s``
    from this request's send. A failed request keeps whatever was measured before it failed.
    """

    index: int
    ok: bool = False
    error: str | None = None  # None when ok; else the exception or HTTP error, one line
    prompt_len: int = 0  # tokens of the message text the workload asked for
    prompt_tokens: int | None = None  # usage.prompt_tokens (chat template included)
    output_tokens: int | None = None  # usage.completion_tokens
    send_s: float = 0.0  # run start -> request sent (after waiting for the semaphore)
    ttft_s: float | None = None  # send -> first generated token arrived
    e2e_s: float | None = None  # send -> last generated token arrived
    done_s: float | None = None  # run start -> the request function returned (ok or not)
    itl_s: list[float] = field(default_factory=list)  # gaps between successive token chunks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})


async def send_request(client: Any, model: str, spec: RequestSpec, run_start: float,
                       timeout_s: float = DEFAULT_TIMEOUT_S) -> RequestRecord:
    """Send one streamed chat completion; return its record. Never raises (except on cancel).

    ``client`` is an ``openai.AsyncOpenAI``; ``run_start`` a ``time.perf_counter()`` value.
    A ``timeout_s`` that is not a positive, finite number of seconds is refused (``ValueError``)
    before anything is sent.
    """
    timeout_s = validate.positive_number(timeout_s, "timeout_s", unit="seconds")
    record = RequestRecord(index=spec.index, prompt_len=spec.prompt_tokens)
    arrivals: list[float] = []  # perf_counter() at each network read
    chunks: list[bytes] = []
    sent = time.perf_counter()
    record.send_s = sent - run_start
    try:
        await asyncio.wait_for(_stream(client, model, spec, arrivals, chunks), timeout_s)
    except asyncio.TimeoutError:
        record.error = f"timeout: no complete answer within {timeout_s:g} s"
    except Exception as error:  # noqa: BLE001 - the point: any failure becomes a record
        record.error = _one_line(error)
    _fill_from_stream(record, sent, arrivals, chunks)
    record.done_s = time.perf_counter() - run_start
    return record


async def _stream(client: Any, model: str, spec: RequestSpec, arrivals: list[float], chunks: list[bytes]) -> None:
    # with_streaming_response: the raw HTTP stream, without building a typed object per chunk.
    async with client.chat.completions.with_streaming_response.create(
        model=model,
        messages=_messages(spec),
        max_tokens=spec.max_tokens,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},  # vLLM-specific: always generate max_tokens tokens
    ) as response:
        async for chunk in response.iter_bytes():
            arrivals.append(time.perf_counter())  # the hot loop: a timestamp and a reference, nothing else
            chunks.append(chunk)


def _messages(spec: RequestSpec) -> list[dict[str, str]]:
    user = {"role": "user", "content": spec.prompt}
    return [{"role": "system", "content": spec.system}, user] if spec.system is not None else [user]


def _fill_from_stream(record: RequestRecord, sent: float, arrivals: list[float], chunks: list[bytes]) -> None:
    """Parse the server-sent events after the fact and set times, usage and ok."""
    token_times: list[float] = []
    finished = False
    buffer = b""
    for arrived, chunk in zip(arrivals, chunks):
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            payload = b"".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
            if not payload:
                continue
            if payload == b"[DONE]":
                finished = True
                continue
            try:
                data = json.loads(payload)
            except ValueError:
                record.error = record.error or f"unreadable event: {payload[:80]!r}"
                continue
            if data.get("error"):
                record.error = record.error or f"server error: {_one_line(data['error'])}"
            for choice in data.get("choices") or ():
                delta = choice.get("delta") or {}
                if delta.get("content") or choice.get("finish_reason"):
                    token_times.append(arrived)
                    break
            usage = data.get("usage")
            if usage:
                record.prompt_tokens = usage.get("prompt_tokens")
                record.output_tokens = usage.get("completion_tokens")
    if token_times:
        record.ttft_s = token_times[0] - sent
        record.e2e_s = token_times[-1] - sent
        record.itl_s = [later - earlier for earlier, later in zip(token_times, token_times[1:])]
    if record.error is None and not (finished and record.output_tokens):
        record.error = "stream ended before the server finished the answer"
    record.ok = record.error is None


def _one_line(error: object) -> str:
    if isinstance(error, BaseException):
        status = getattr(error, "status_code", None)
        message = getattr(error, "message", None) or str(error) or repr(error)
        text = f"{type(error).__name__}{f' {status}' if status else ''}: {message}"
        cause = error.__cause__ or error.__context__
        if cause is not None and str(cause) and str(cause) not in text:  # e.g. why "Connection error."
            text += f" ({type(cause).__name__}: {cause})"
    else:
        text = str(error)
    return " ".join(text.split())[:500]


# ----- a run -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Endpoint:
    """Where to send requests, when there is no VLLMServer object (e.g. a shared server)."""

    url: str  # root URL, e.g. http://127.0.0.1:8000
    model_name: str
    api_key: str = field(default="not-needed", repr=False)  # a shared server's key must not show in a notebook

    @property
    def base_url(self) -> str:
        return f"{self.url.rstrip('/')}/v1"


@dataclass
class LoadTestRun:
    """One load test: its settings, where it ran, and the raw records (one per request)."""

    label: str
    settings: dict[str, Any]  # workload + client settings (concurrency, timeout, ...)
    server: dict[str, Any]  # model, url, vLLM version, max_num_seqs, device, KV cache
    hardware: str  # helpers.hardware.describe_machine()
    started_at: str  # ISO 8601, UTC
    wall_s: float  # run start -> last request returned, client clock
    records: list[RequestRecord]

    @property
    def max_num_seqs(self) -> int | None:
        return self.server.get("max_num_seqs")

    def summary(self) -> dict[str, Any]:
        from helpers.load.summary import summarize

        return summarize(self.records)


def make_client(target: Any, max_connections: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """An AsyncOpenAI client with an explicit connection pool and timeouts, and no retries.

    No retries: a failed request must show up as an error, not as a slow success.
    """
    max_connections = validate.positive_int(max_connections, "max_connections")
    timeout_s = validate.positive_number(timeout_s, "timeout_s", unit="seconds")
    import openai

    # The Limits class of whichever HTTP library this openai version is built on (httpx or httpx2).
    limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
        max_connections=max_connections, max_keepalive_connections=max_connections)
    return openai.AsyncOpenAI(
        base_url=target.base_url, api_key=getattr(target, "api_key", "not-needed"),
        http_client=openai.DefaultAsyncHttpxClient(limits=limits),
        timeout=openai.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S), max_retries=0,
    )


async def run_load_test(
    target: Any,
    workload: Workload,
    *,
    concurrency: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    label: str | None = None,
    progress: bool = True,
) -> LoadTestRun:
    """Send every request of ``workload`` to ``target``; return the run with one record each.

    ``target``: a VLLMServer or an :class:`Endpoint`. ``concurrency``: most requests in
    flight at once, a positive integer (None, the default: all of them, i.e. all sent at
    t=0; 0 is an error, not "all"). Bounded in time: each request gives up after
    ``timeout_s`` (a positive, finite number of seconds). A request too long for the
    server's ``max_model_len`` (where the target knows it) is refused before anything is
    sent. In a notebook: ``run = await run_load_test(...)``; in a script:
    ``asyncio.run(run_load_test(...))``. When requests fail, it prints how many and why.
    """
    from tqdm.auto import tqdm

    from helpers.hardware import describe_machine
    from helpers.load.summary import describe_failures

    concurrency = validate.optional_positive_int(concurrency, "concurrency", none_means="every request at once")
    timeout_s = validate.positive_number(timeout_s, "timeout_s", unit="seconds",
                                         hint="It is how long each request may take before it counts as failed.")
    if not getattr(workload, "requests", None):
        raise validate.InvalidArgumentError(
            f"the workload has no requests (got {workload!r:.80}); make one with "
            "build_workload(server, num_requests=...).")
    longest = max(workload.requests, key=lambda spec: spec.prompt_tokens + spec.max_tokens)
    validate.fits_context(longest.prompt_tokens + longest.max_tokens, validate.context_length(target),
                          f"request {longest.index} ({longest.prompt_tokens} prompt + {longest.max_tokens} "
                          "output tokens)", "Build the workload with fewer output_tokens or shorter prompts.")
    in_flight = min(concurrency or len(workload.requests), len(workload.requests))
    assert in_flight >= 1  # the checks above guarantee it
    max_connections = in_flight + POOL_HEADROOM
    assert in_flight < max_connections  # the client's pool never limits the load (GPU doc, pitfall 6)
    server = server_facts(target)
    label = label or f"max_num_seqs={server.get('max_num_seqs')}"
    client = make_client(target, max_connections, timeout_s)
    semaphore = asyncio.Semaphore(in_flight)
    bar = tqdm(total=len(workload.requests), desc=label, unit="req", disable=not progress, leave=True)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")

    async def limited(spec: RequestSpec) -> RequestRecord:
        async with semaphore:
            record = await send_request(client, target.model_name, spec, run_start, timeout_s)
        bar.update(1)
        return record

    load_at_start = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    run_start = time.perf_counter()
    try:
        records = await asyncio.gather(*(limited(spec) for spec in workload.requests))
    finally:
        wall_s = time.perf_counter() - run_start
        bar.close()
        await client.close()
    failures = describe_failures(records)
    if failures and progress:
        print(f"{label}: {failures}")
    settings = {**workload.settings(), "concurrency": in_flight, "max_connections": max_connections,
                "timeout_s": timeout_s, "temperature": 0.0, "ignore_eos": True, "stream": True,
                # other programs on the machine distort timings; keep a trace of how busy it was
                "load_avg_1m_at_start": load_at_start}
    return LoadTestRun(label, settings, server, describe_machine(), started_at, wall_s, list(records))


def server_facts(target: Any) -> dict[str, Any]:
    """What the results need to know about the server; never raises (None where unknown)."""
    facts: dict[str, Any] = {"url": getattr(target, "url", None), "model": target.model_name}
    # "dummy": random weights (helpers.serve.dummy_model), whose text means nothing; tables say so
    facts["model_source"] = getattr(target, "model_source", None)
    try:
        with urllib.request.urlopen(f"{target.url}/version", timeout=5) as response:
            facts["vllm_version"] = json.loads(response.read()).get("version")
    except (OSError, ValueError, AttributeError):
        facts["vllm_version"] = None
    config = getattr(target, "config", None)
    facts["max_num_seqs"] = getattr(config, "max_num_seqs", None)
    facts["max_model_len"] = getattr(config, "max_model_len", None)
    facts["device"] = getattr(target, "device", None)
    kv = getattr(target, "kv_cache", None)
    facts["kv_cache"] = asdict(kv) if kv is not None else None
    return facts
