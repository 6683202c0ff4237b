"""The course's one request client: one request in, one :class:`RequestRecord` out, never an exception.

Every chapter that talks to a server under load sends through :func:`send_request`: the lab
and notebook 05 (streamed chat completions of real text), notebook 04's step-time
measurements and notebook 03's KV-cache demo (prompts of token ids through
``/v1/completions``, optionally not streamed). Each request asks for an exact output length
(``max_tokens`` plus vLLM's ``ignore_eos``) at temperature 0. Times are client-clock seconds:
send, first token, last token, and the gaps between tokens.

Why the hot loop only appends timestamps: on a 2-core CPU the client shares the cores with
the model worker, and every microsecond it spends per streamed token is taken from the
engine. The client reads the stream as raw bytes and records ``time.perf_counter()`` per
network read; the server-sent events are parsed once the stream has ended.

It sends through :mod:`helpers.load.http` (aiohttp, as ``vllm bench serve`` does; that module says why).

No retries: a failed request must show up as an error, not as a slow success.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from helpers import validate
from helpers.load.http import DEFAULT_TIMEOUT_S, LoadClient, raise_for_status



@dataclass(frozen=True)
class RequestSpec:
    """One request to send: its prompt, how many tokens to generate, and when.

    ``prompt`` is a user message (text, sent as a chat completion) or a sequence of token ids
    (sent to ``/v1/completions`` as they are, so its length is exact and no chat template is
    added). ``arrival_s`` is when to send it, in seconds after the run starts (0: at once).
    """

    index: int  # position in the workload: 0 .. N-1
    prompt: str | tuple[int, ...]  # the user message, or token ids
    prompt_tokens: int  # tokens of `prompt` alone (a chat template adds ~30 more on SmolLM2)
    max_tokens: int  # output tokens; exact, because ignore_eos is sent
    system: str | None = None  # a system message sent before the user message (text prompts only)
    arrival_s: float = 0.0  # seconds after the run starts at which this request is sent
    stream: bool = True  # False: one reply at the end (no first-token time, no gaps)

    def __post_init__(self) -> None:
        validate.non_negative_int(self.index, "index")
        validate.non_negative_int(self.prompt_tokens, "prompt_tokens")
        validate.positive_int(self.max_tokens, "max_tokens", hint="It is the number of tokens to generate.")
        validate.non_negative_number(self.arrival_s, "arrival_s", unit="seconds")
        if not isinstance(self.prompt, str):
            object.__setattr__(self, "prompt", tuple(int(token) for token in self.prompt))
            if self.system is not None:
                raise validate.InvalidArgumentError(
                    "a system message needs a text prompt (token-id prompts go to /v1/completions, "
                    "which has no messages); put it in the prompt's tokens instead.")

    @property
    def is_tokens(self) -> bool:
        return not isinstance(self.prompt, str)


@dataclass
class RequestRecord:
    """What happened to one request. Times are seconds on the client's clock.

    ``send_s`` and ``done_s`` count from the start of the run; ``ttft_s`` and ``e2e_s``
    from this request's send. A failed request keeps whatever was measured before it failed.
    A request sent without streaming has no ``ttft_s`` and no ``itl_s``.
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

    @property
    def first_token_s(self) -> float | None:
        """Run start -> first token; None before it arrived."""
        return None if self.ttft_s is None else self.send_s + self.ttft_s

    @property
    def last_token_s(self) -> float | None:
        """Run start -> last token; None before it arrived."""
        return None if self.e2e_s is None else self.send_s + self.e2e_s

    @property
    def decode_steps_per_s(self) -> float | None:
        """Tokens after the first, per second between the first and the last token: the rate of
        the engine steps this request decoded in. None for a failed or one-token request.

        >>> RequestRecord(0, ok=True, output_tokens=11, ttft_s=1.0, e2e_s=3.0).decode_steps_per_s
        5.0
        """
        if not self.ok or self.ttft_s is None or self.e2e_s is None or not self.output_tokens:
            return None
        span = self.e2e_s - self.ttft_s
        return (self.output_tokens - 1) / span if self.output_tokens > 1 and span > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})


async def send_request(client: Any, model: str, spec: RequestSpec, run_start: float,
                       timeout_s: float = DEFAULT_TIMEOUT_S) -> RequestRecord:
    """Send one request; return its record. Never raises (except on cancel).

    ``client`` comes from :func:`make_client`; ``run_start`` a
    ``time.perf_counter()`` value. A ``timeout_s`` that is not a positive, finite number of
    seconds is refused (``ValueError``) before anything is sent. The request counts as
    failed unless the server generated exactly ``spec.max_tokens`` tokens.
    """
    timeout_s = validate.positive_number(timeout_s, "timeout_s", unit="seconds")
    record = RequestRecord(index=spec.index, prompt_len=spec.prompt_tokens)
    arrivals: list[float] = []  # perf_counter() at each network read
    chunks: list[bytes] = []
    sent = time.perf_counter()
    record.send_s = sent - run_start
    try:
        if spec.stream:
            await asyncio.wait_for(_stream(client, model, spec, arrivals, chunks), timeout_s)
        else:
            await asyncio.wait_for(_whole(client, model, spec, record), timeout_s)
            record.e2e_s = time.perf_counter() - sent
    except asyncio.TimeoutError:
        record.error = f"timeout: no complete answer within {timeout_s:g} s"
    except Exception as error:  # noqa: BLE001 - the point: any failure becomes a record
        record.error = _one_line(error)
    if spec.stream:
        _fill_from_stream(record, sent, arrivals, chunks)
    if record.error is None and record.output_tokens != spec.max_tokens:
        record.error = f"asked for {spec.max_tokens} tokens, got {record.output_tokens}"
    record.ok = record.error is None
    record.done_s = time.perf_counter() - run_start
    return record


def _request_args(model: str, spec: RequestSpec) -> dict[str, Any]:
    args: dict[str, Any] = {"model": model, "max_tokens": spec.max_tokens, "temperature": 0.0,
                            "ignore_eos": True}  # vLLM-specific: always generate max_tokens tokens
    if spec.stream:
        args.update(stream=True, stream_options={"include_usage": True})
    if spec.is_tokens:
        args["prompt"] = list(spec.prompt)
    else:
        args["messages"] = chat_messages(spec)
    return args


def chat_messages(spec: RequestSpec) -> list[dict[str, str]]:
    """The chat a text request sends: its system message, if any, then the user message.

    >>> chat_messages(RequestSpec(0, "question", 1, 4, system="rules"))
    [{'role': 'system', 'content': 'rules'}, {'role': 'user', 'content': 'question'}]
    """
    user = {"role": "user", "content": spec.prompt}
    return [{"role": "system", "content": spec.system}, user] if spec.system is not None else [user]


async def _stream(client: LoadClient, model: str, spec: RequestSpec, arrivals: list[float], chunks: list[bytes]) -> None:
    async with client.post(_path(spec), _request_args(model, spec)) as response:
        await raise_for_status(response)
        async for chunk in response.content.iter_any():
            arrivals.append(time.perf_counter())  # the hot loop: a timestamp and a reference, nothing else
            chunks.append(chunk)


async def _whole(client: LoadClient, model: str, spec: RequestSpec, record: RequestRecord) -> None:
    async with client.post(_path(spec), _request_args(model, spec)) as response:
        await raise_for_status(response)
        usage = (await response.json()).get("usage") or {}
    record.prompt_tokens = usage.get("prompt_tokens")
    record.output_tokens = usage.get("completion_tokens")


def _path(spec: RequestSpec) -> str:
    return "/completions" if spec.is_tokens else "/chat/completions"


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
                if delta.get("content") or choice.get("text") or choice.get("finish_reason"):
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


def _one_line(error: object) -> str:
    if isinstance(error, BaseException):
        status = getattr(error, "status_code", None)
        message = getattr(error, "message", None) or str(error) or repr(error)
        name = getattr(error, "kind", None) or type(error).__name__
        text = f"{name}{f' {status}' if status else ''}: {message}"
        cause = error.__cause__ or error.__context__
        if cause is not None and str(cause) and str(cause) not in text:  # e.g. why a connection failed
            text += f" ({type(cause).__name__}: {cause})"
    else:
        text = str(error)
    return " ".join(text.split())[:500]


@dataclass(frozen=True)
class Endpoint:
    """Where to send requests, when there is no VLLMServer object (e.g. a shared server)."""

    url: str  # root URL, e.g. http://127.0.0.1:8000
    model_name: str
    api_key: str = field(default="not-needed", repr=False)  # a shared server's key must not show in a notebook

    @property
    def base_url(self) -> str:
        return f"{self.url.rstrip('/')}/v1"
