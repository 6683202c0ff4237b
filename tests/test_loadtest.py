"""helpers.load: the workload is sized right, and the client records everything and never raises.

Most tests use a tiny fake OpenAI-compatible server (a thread on 127.0.0.1 that streams
server-sent events, or misbehaves on purpose), so they run in seconds without vLLM. The
tests marked `server` check the same things against the real vLLM server.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from helpers.hardware import detect_cpu
from helpers.load.workload import LAB_PROMPT_LENS, ServerTokenizer, Workload, build_workload, token_prompt
from helpers.load.client import Endpoint, RequestSpec
from helpers.load.http import make_client
from helpers.load.run import run_load_test
from helpers.load.summary import summarize
from tests.real_server import QUICK_START, server_fixture
from tests.conftest import finished_requests


# ----- a toy tokenizer and a fake server --------------------------------------------------------
class WordTokenizer:
    """One token per space-separated word, except words longer than 7 characters, which are two
    tokens: enough to make decode -> encode change counts at the seams, like a real BPE."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.words: list[str] = []

    def _id(self, piece: str) -> int:
        if piece not in self.vocab:
            self.vocab[piece] = len(self.words)
            self.words.append(piece)
        return self.vocab[piece]

    def encode(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            ids += [self._id(word[:7]), self._id("##" + word[7:])] if len(word) > 7 else [self._id(word)]
        return ids

    def decode(self, ids) -> str:
        out = ""
        for i in ids:
            piece = self.words[i]
            out += piece[2:] if piece.startswith("##") else (" " + piece)
        return out.strip()


class FakeServer:
    """An HTTP server in its own thread that answers chat completions by the requested model name:

    - "ok": streams `max_tokens` tokens, `gap_s` apart, after `ttft_s`, then usage and [DONE];
    - "missing": HTTP 404 with vLLM's error body;
    - "die": two tokens, then the connection is cut mid-stream;
    - "stall": headers, then nothing (a hung server).
    It counts how many requests were in flight at once.
    """

    def __init__(self, ttft_s: float = 0.05, gap_s: float = 0.01) -> None:
        self.ttft_s, self.gap_s = ttft_s, gap_s
        self.in_flight = self.peak_in_flight = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        assert self.ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def endpoint(self, model: str) -> Endpoint:
        return Endpoint(self.url, model)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()
        server.close()
        pending = asyncio.all_tasks(self.loop)  # handlers still streaming or stalled: end them cleanly
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: several requests per connection
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE).group(1)) if b"ength" in head else 0
                body = json.loads(await reader.readexactly(length)) if length else {}
                if head.startswith(b"GET"):
                    await self._send_json(writer, 404, {"detail": "Not Found"})
                    continue
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                try:
                    keep = await self._answer(body, writer)
                finally:
                    self.in_flight -= 1
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _send_json(self, writer, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        writer.write(f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
                     .encode() + data)
        await writer.drain()

    async def _answer(self, body: dict, writer) -> bool:
        model = body.get("model")
        if model == "missing":
            await self._send_json(writer, 404, {"error": {"message": "The model `missing` does not exist.",
                                                          "type": "NotFoundError", "code": 404}})
            return True
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        await writer.drain()
        if model == "stall":
            await asyncio.sleep(3600)
        await asyncio.sleep(self.ttft_s)
        tokens = 2 if model == "die" else body["max_tokens"]
        for i in range(tokens):
            await self._event(writer, {"choices": [{"index": 0, "delta": {"content": f" t{i}"},
                                                    "finish_reason": "length" if i == tokens - 1 else None}]})
            await asyncio.sleep(self.gap_s)
        if model == "die":
            return False  # cut the connection without ending the chunked body
        prompt_tokens = len(body["messages"][0]["content"].split()) + 30
        await self._event(writer, {"choices": [], "usage": {"prompt_tokens": prompt_tokens,
                                                             "completion_tokens": tokens}})
        await self._chunk(writer, b"data: [DONE]\n\n")
        await self._chunk(writer, b"")
        return True

    async def _event(self, writer, payload: dict) -> None:
        await self._chunk(writer, b"data: " + json.dumps(payload).encode() + b"\n\n")

    async def _chunk(self, writer, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()


def toy_workload(num_requests: int = 6, max_tokens: int = 5) -> Workload:
    specs = tuple(RequestSpec(i, f"prompt number {i}", 3, max_tokens) for i in range(num_requests))
    return Workload(specs, (3,), max_tokens, 0, "toy")


def run(coro, limit_s: float = 60):
    return asyncio.run(asyncio.wait_for(coro, limit_s))


# ----- the workload ------------------------------------------------------------------------------
def test_workload_cycles_the_documented_prompt_lengths_exactly():
    workload = build_workload(WordTokenizer(), num_requests=10)
    tokenizer = WordTokenizer()
    assert [r.prompt_tokens for r in workload.requests] == [LAB_PROMPT_LENS[i % 4] for i in range(10)]
    for spec in workload.requests:
        assert len(tokenizer.encode(spec.prompt)) == spec.prompt_tokens
        assert spec.max_tokens == 64


def test_every_prompt_opens_with_the_run_tag_and_its_index():
    workload = build_workload(WordTokenizer(), num_requests=5, run_tag="abcd")
    assert [r.prompt.split()[0] for r in workload.requests] == [f"(abcd/{i})" for i in range(5)]


def test_two_workloads_never_share_a_prompt_prefix_so_the_prefix_cache_cannot_help():
    first = build_workload(WordTokenizer(), num_requests=8)
    second = build_workload(WordTokenizer(), num_requests=8)
    assert first.run_tag != second.run_tag
    assert not {r.prompt[:12] for r in first.requests} & {r.prompt[:12] for r in second.requests}


def test_the_same_seed_and_tag_give_the_same_prompts_and_another_seed_other_text():
    same = [build_workload(WordTokenizer(), num_requests=4, seed=1, run_tag="t") for _ in range(2)]
    other = build_workload(WordTokenizer(), num_requests=4, seed=2, run_tag="t")
    assert same[0].requests == same[1].requests
    assert [r.prompt for r in other.requests] != [r.prompt for r in same[0].requests]


def test_prompts_are_real_text_not_random_tokens():
    words = build_workload(WordTokenizer(), num_requests=4, seed=0).requests[3].prompt.split()
    common = {"the", "a", "of", "to", "is", "and", "in"}
    assert sum(w.lower() in common for w in words) > len(words) / 20


class ServerLikeTokenizer(WordTokenizer):
    """A tokenizer that knows its server's context length, as a VLLMServer does (config.max_model_len)."""

    def __init__(self, max_model_len: int) -> None:
        super().__init__()
        self.config = SimpleNamespace(max_model_len=max_model_len)


BAD_COUNTS = [0, -3, 2.5, True, math.nan, math.inf, "5"]


@pytest.mark.parametrize("name", ["num_requests", "output_tokens"])
@pytest.mark.parametrize("value", BAD_COUNTS, ids=repr)
def test_workload_counts_must_be_positive_integers_and_the_error_says_which(name, value):
    # before: 0 -> AssertionError: (4, 0), gone under python -O; 2.5 or inf -> TypeError deep in range()
    with pytest.raises(ValueError, match=rf"^{name} must be a positive integer, got {re.escape(repr(value))}"):
        build_workload(WordTokenizer(), **{name: value})


@pytest.mark.parametrize("prompt_lens", [(), (16, 0), (16, -4), (16, 2.5), (16, math.nan), "16"], ids=repr)
def test_prompt_lengths_must_be_positive_integers(prompt_lens):
    # before: 2.5 was silently cut to 2, "16" read as lengths 1 and 6, 0 ended in an AssertionError
    with pytest.raises(ValueError, match=r"prompt_lens(\[\d\])? must be"):
        build_workload(WordTokenizer(), num_requests=2, prompt_lens=prompt_lens)


@pytest.mark.parametrize("seed", [-1, 1.5, True, math.nan], ids=repr)
def test_the_seed_must_be_a_non_negative_integer(seed):
    with pytest.raises(ValueError, match=r"^seed must be an integer of 0 or more"):
        build_workload(WordTokenizer(), num_requests=2, seed=seed)


def test_a_workload_too_long_for_the_servers_context_is_refused_before_any_prompt_is_made():
    with pytest.raises(ValueError, match=r"longest prompt \(512 tokens\) plus output_tokens=2000 is 2,512 tokens, "
                                         r"more than the model's context \(max_model_len=2,048\)"):
        build_workload(ServerLikeTokenizer(2048), num_requests=4, output_tokens=2000)
    assert len(build_workload(ServerLikeTokenizer(2048), num_requests=4, output_tokens=64).requests) == 4


def test_a_prompt_longer_than_the_courses_text_is_a_value_error_not_an_assertion():
    with pytest.raises(ValueError, match=r"a prompt of 200,000 tokens is too long for the course's text"):
        build_workload(WordTokenizer(), num_requests=1, prompt_lens=(200_000,))


def test_a_prompt_shorter_than_its_opening_tag_says_how_long_it_must_be():
    with pytest.raises(ValueError, match=r"a 2-token prompt cannot hold its 3-token opening .*at least 3"):
        build_workload(WordTokenizer(), num_requests=1, prompt_lens=(2,), run_tag="a b c")


@pytest.mark.parametrize("run_tag", ["", "  ", 7], ids=repr)
def test_the_run_tag_must_be_a_non_empty_string(run_tag):
    with pytest.raises(ValueError, match="run_tag must be a non-empty string"):
        build_workload(WordTokenizer(), num_requests=1, run_tag=run_tag)


def test_a_system_message_goes_before_the_user_message():
    from helpers.load.client import _request_args, chat_messages

    spec = RequestSpec(0, "question", 1, 4, system="rules")
    assert _request_args("m", spec)["messages"] == chat_messages(spec) == [
        {"role": "system", "content": "rules"}, {"role": "user", "content": "question"}]
    assert _request_args("m", RequestSpec(0, "question", 1, 4))["messages"] == [{"role": "user", "content": "question"}]
    assert _request_args("m", RequestSpec(0, (5, 6), 2, 4))["prompt"] == [5, 6]  # token ids: no chat template


def test_a_system_message_with_token_ids_is_refused_in_words():
    with pytest.raises(ValueError, match="system message needs a text prompt"):
        RequestSpec(0, (1, 2, 3), 3, 2, system="be brief")


@pytest.mark.parametrize("field, value", [("max_tokens", 0), ("max_tokens", 2.5), ("prompt_tokens", -1),
                                          ("index", -1)])
def test_a_hand_made_request_spec_is_checked_too(field, value):
    fields = {"index": 0, "prompt": "hello", "prompt_tokens": 1, "max_tokens": 4, field: value}
    with pytest.raises(ValueError, match=rf"^{field} must be"):
        RequestSpec(**fields)


def test_the_tokenizer_and_the_client_refuse_a_timeout_that_is_not_a_positive_number():
    for bad in (0, -1, math.nan, math.inf):
        with pytest.raises(ValueError, match="timeout_s must be a positive, finite number of seconds"):
            ServerTokenizer("http://127.0.0.1:9", "m", timeout_s=bad)
        with pytest.raises(ValueError, match="timeout_s must be a positive, finite number of seconds"):
            make_client(Endpoint("http://127.0.0.1:9", "m"), 4, timeout_s=bad)
    with pytest.raises(ValueError, match="max_connections must be a positive integer, got 0"):
        make_client(Endpoint("http://127.0.0.1:9", "m"), 0)


# ----- one request and a run, against the fake server --------------------------------------------
def test_a_streamed_request_records_usage_ttft_and_gaps_between_tokens():
    with FakeServer(ttft_s=0.2, gap_s=0.02) as fake:
        result = run(run_load_test(fake.endpoint("ok"), toy_workload(1, max_tokens=5), progress=False))
    (record,) = result.records
    assert record.ok and record.error is None
    assert record.output_tokens == 5 and record.prompt_tokens == 3 + 30
    assert 0.2 <= record.ttft_s < 1.0
    assert len(record.itl_s) == 4 and all(0.015 <= gap < 0.5 for gap in record.itl_s)
    assert record.e2e_s == pytest.approx(record.ttft_s + sum(record.itl_s))
    assert record.done_s >= record.send_s + record.e2e_s


def test_a_wrong_model_name_gives_one_error_record_per_request_and_no_exception():
    with FakeServer() as fake:
        result = run(run_load_test(fake.endpoint("missing"), toy_workload(6), progress=False))
    assert len(result.records) == 6
    assert all(not r.ok and "NotFoundError 404" in r.error and "does not exist" in r.error for r in result.records)
    summary = summarize(result.records)
    assert summary.num_errors == 6 and summary.num_ok == 0 and summary.e2e_p95_s is None


def test_a_connection_cut_mid_stream_is_an_error_that_keeps_what_was_measured():
    with FakeServer() as fake:
        result = run(run_load_test(fake.endpoint("die"), toy_workload(3), progress=False))
    for record in result.records:
        assert not record.ok and record.error
        assert record.ttft_s is not None  # the first tokens did arrive
        assert record.output_tokens is None


def test_a_hung_server_ends_in_timeout_errors_within_the_timeout():
    with FakeServer() as fake:
        began = time.monotonic()
        result = run(run_load_test(fake.endpoint("stall"), toy_workload(3), timeout_s=1.0, progress=False))
    assert time.monotonic() - began < 10
    assert all(not r.ok and r.error.startswith("timeout") for r in result.records)


def test_no_server_listening_gives_connection_errors_fast():
    with socket.socket() as probe:  # a free port, closed again: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run(run_load_test(Endpoint(f"http://127.0.0.1:{port}", "x"), toy_workload(4), progress=False), 30)
    assert all(not r.ok and "Connection" in r.error for r in result.records)


def test_concurrency_caps_requests_in_flight_and_the_pool_is_larger_than_the_cap():
    with FakeServer(ttft_s=0.1) as fake:
        result = run(run_load_test(fake.endpoint("ok"), toy_workload(12), concurrency=3, progress=False))
    assert fake.peak_in_flight == 3
    assert result.settings["concurrency"] == 3 and result.settings["max_connections"] > 3
    assert summarize(result.records).num_ok == 12


def test_default_concurrency_sends_every_request_at_once():
    with FakeServer(ttft_s=0.3) as fake:
        result = run(run_load_test(fake.endpoint("ok"), toy_workload(10), progress=False))
    assert fake.peak_in_flight == 10
    assert max(r.send_s for r in result.records) < 0.25


@pytest.mark.parametrize("concurrency", [0, -3, 2.5, True, math.nan, "4"], ids=repr)
def test_concurrency_zero_or_negative_or_fractional_is_an_error_not_all_at_once(concurrency):
    # before: 0 meant "all at once", -3 an AssertionError that vanishes under python -O
    with FakeServer() as fake:
        with pytest.raises(ValueError, match=r"^concurrency must be a positive integer, or None for every request "
                                             rf"at once, got {re.escape(repr(concurrency))}"):
            run(run_load_test(fake.endpoint("ok"), toy_workload(3), concurrency=concurrency, progress=False))
    assert fake.peak_in_flight == 0  # refused before anything was sent


@pytest.mark.parametrize("timeout_s", [0, -1.0, math.nan, math.inf, True], ids=repr)
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused_before_sending(timeout_s):
    with FakeServer() as fake:
        with pytest.raises(ValueError, match=r"^timeout_s must be a positive, finite number of seconds"):
            run(run_load_test(fake.endpoint("ok"), toy_workload(3), timeout_s=timeout_s, progress=False))
    assert fake.peak_in_flight == 0


def test_an_empty_workload_is_refused_with_a_hint():
    with pytest.raises(ValueError, match=r"the workload has no requests.*build_workload"):
        run(run_load_test(Endpoint("http://127.0.0.1:9", "x"), Workload((), (3,), 5, 0, "empty"), progress=False))


def test_requests_too_long_for_the_servers_context_are_refused_before_sending():
    with FakeServer() as fake:
        target = SimpleNamespace(url=fake.url, base_url=f"{fake.url}/v1", model_name="ok",
                                 config=SimpleNamespace(max_model_len=6))
        with pytest.raises(ValueError, match=r"request 0 \(3 prompt \+ 5 output tokens\) is 8 tokens, more than "
                                             r"the model's context \(max_model_len=6\)"):
            run(run_load_test(target, toy_workload(2, max_tokens=5), progress=False))
    assert fake.peak_in_flight == 0


def test_failed_requests_are_reported_in_words_with_their_count_and_error(capsys):
    with FakeServer() as fake:
        run(run_load_test(fake.endpoint("missing"), toy_workload(6), label="demo"))
    printed = capsys.readouterr().out
    assert "demo: 6 of 6 requests failed: NotFoundError 404" in printed and "does not exist" in printed
    assert "(6)." in printed  # identical errors counted together


# ----- against the real vLLM server ------------------------------------------------------------------
server = server_fixture(max_num_seqs=4)


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
class TestAgainstVLLM:
    def test_workload_prompt_token_counts_match_the_servers_tokenizer(self, server):
        tokenizer = ServerTokenizer.of(server)
        workload = build_workload(server, num_requests=8, output_tokens=4)
        assert [len(tokenizer.encode(r.prompt)) for r in workload.requests] == [r.prompt_tokens for r in workload.requests]
        result = run(run_load_test(server, workload, progress=False), 300)
        for spec, record in zip(workload.requests, result.records):
            assert record.ok, record.error
            assert record.prompt_tokens == tokenizer.count_chat(spec.prompt)  # usage agrees with /tokenize
            assert record.output_tokens == 4  # ignore_eos: exactly max_tokens

    def test_a_wrong_model_name_is_counted_as_errors_with_the_servers_message(self, server):
        workload = build_workload(server, num_requests=5, output_tokens=4)
        result = run(run_load_test(Endpoint(server.url, "gpt-4o"), workload, progress=False), 120)
        assert summarize(result.records).num_errors == 5
        assert all("does not exist" in r.error for r in result.records)

    def test_run_knows_its_server(self, server):
        result = run(run_load_test(server, build_workload(server, num_requests=2, output_tokens=2), progress=False), 120)
        assert result.server.max_num_seqs == 4 and result.server.vllm_version
        assert result.server.kv_cache["num_tokens"] > 0
        assert result.summary is result.summary  # computed once
        assert result.summary.num_ok == 2 and result.cpu_cores == detect_cpu().cores

    def test_token_id_prompts_streamed_or_not_get_their_exact_lengths(self, server):
        specs = tuple(RequestSpec(i, token_prompt(length, seed=i), length, 3, stream=stream)
                      for i, (length, stream) in enumerate([(17, True), (40, False), (129, True)]))
        result = run(run_load_test(server, Workload(specs, (17, 40, 129), 3, 0, "tokens"), progress=False), 120)
        for spec, record in zip(specs, result.records):
            assert record.ok, record.error
            assert record.prompt_tokens == spec.prompt_tokens  # no chat template around token ids
            assert record.output_tokens == 3
            assert (record.ttft_s is None) == (not spec.stream) and record.e2e_s > 0

    def test_requests_leave_at_their_arrival_times(self, server):
        specs = tuple(RequestSpec(i, token_prompt(16, seed=i), 16, 2, arrival_s=0.6 * i) for i in range(3))
        result = run(run_load_test(server, Workload(specs, (16,), 2, 0, "arrivals"), progress=False), 120)
        sends = [record.send_s for record in result.records]
        assert all(record.ok for record in result.records)
        assert sends == sorted(sends) and sends[2] - sends[0] >= 1.2 - 0.05


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_a_server_killed_mid_run_gives_counted_errors_and_a_partial_result_not_a_hang():
    from helpers.serve.server import start_server

    server = start_server(max_num_seqs=4, quiet=True, **QUICK_START)
    try:
        workload = build_workload(server, num_requests=16, output_tokens=64)

        async def load_then_kill():
            task = asyncio.create_task(run_load_test(server, workload, timeout_s=120, progress=False))
            deadline = time.monotonic() + 180
            while finished_requests(server) < 2 and time.monotonic() < deadline:  # bounded
                await asyncio.sleep(0.2)
            os.killpg(server.process.pid, signal.SIGKILL)
            killed[0] = time.monotonic()
            return await task

        killed = [0.0]
        result = run(load_then_kill(), 300)
        # the load test notices the dead server through its connections, not through its 120 s request timeout
        assert time.monotonic() - killed[0] < 30, "the load test hung on after its server was killed"
    finally:
        server.stop()
    summary = summarize(result.records)
    assert len(result.records) == 16
    assert summary.num_ok >= 2 and summary.num_errors >= 1
    assert summary.num_ok + summary.num_errors == 16
    assert all(r.error for r in result.records if not r.ok)
