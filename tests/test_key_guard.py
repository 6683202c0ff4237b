"""The classroom key guards every route of a keyed vLLM 0.32 server but the documented read-only
ones: the test walks every route the server lists in its /openapi.json (and the routes that
list does not show), with and without the key, on 127.0.0.1."""

import asyncio
import json
import re
import urllib.error
import urllib.request

import pytest

from helpers.serve.key_guard import KEY_ENV, OPEN_ROUTES, RequireKeyEverywhere
from helpers.serve.server import start_server
from tests.real_server import QUICK_START

KEY = "guard-test-key-5f1c"


def recording_guard():
    """The guard in front of an app that records the paths it reaches, and a send that records what goes out."""
    sent, reached = [], []

    async def app(scope, receive, send):
        reached.append(scope["path"])

    async def send(message):
        sent.append(message)

    return RequireKeyEverywhere(app), send, sent, reached
UNLISTED = {"/openapi.json": ["get"], "/docs": ["get"], "/redoc": ["get"]}  # FastAPI's own pages


def _call(url: str, method: str, key: str | None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = b"{}" if method in ("POST", "PUT", "PATCH") else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture(scope="module")
def keyed_server():  # a real server: each test that takes it is marked server
    with start_server(max_num_seqs=2, api_key=KEY, quiet=True, **QUICK_START) as server:
        yield server


@pytest.mark.server
def test_every_route_but_the_read_only_ones_needs_the_key(keyed_server):
    routes = json.loads(keyed_server.get("/openapi.json"))["paths"]  # the helper's GET sends the key
    assert "/invocations" in routes and "/v1/chat/completions" in routes  # the routes of the report
    checked, refused_without_key = [], []
    for path, operations in sorted({**routes, **UNLISTED}.items()):
        concrete = re.sub(r"\{[^}]+\}", "no-such-id", path)
        for method in (m.upper() for m in operations if m in ("get", "post", "put", "delete", "patch")):
            status_without, body = _call(keyed_server.url + concrete, method, key=None)
            status_with, _ = _call(keyed_server.url + concrete, method, key=KEY)
            checked.append(f"{method} {path}")
            assert status_with != 401, f"{method} {path} refused the right key"
            if method == "GET" and path in OPEN_ROUTES:
                assert status_without != 401, f"{method} {path} should answer without the key"
            else:
                assert status_without == 401, f"{method} {path} answered without the key: {status_without} {body[:200]!r}"
                refused_without_key.append(f"{method} {path}")
    assert len(checked) >= 20 and "POST /invocations" in refused_without_key
    open_ones = {c for c in checked if c not in refused_without_key}
    assert open_ones == {"GET /health", "GET /ping", "GET /version", "GET /metrics"}  # what docs/instructor.md lists


@pytest.mark.server
def test_a_wrong_key_and_a_post_to_an_open_route_are_refused(keyed_server):
    assert _call(keyed_server.url + "/invocations", "POST", key="not-the-key")[0] == 401
    assert _call(keyed_server.url + "/health", "POST", key=None)[0] == 401
    status, body = _call(keyed_server.url + "/v1/completions", "POST", key=None)
    assert status == 401 and KEY.encode() not in body and b"Authorization: Bearer" in body


@pytest.mark.server
def test_the_key_never_reaches_argv_and_the_log_never_shows_it(keyed_server):
    assert KEY not in " ".join(keyed_server.launch.argv) and KEY not in repr(keyed_server.launch)
    assert "helpers.serve.key_guard.RequireKeyEverywhere" in keyed_server.launch.argv
    assert KEY not in keyed_server.log_text()


def test_without_a_key_the_middleware_lets_everything_through(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    reached = []

    async def app(scope, receive, send):
        reached.append(scope["path"])

    guard = RequireKeyEverywhere(app)
    asyncio.run(guard({"type": "http", "path": "/invocations", "method": "POST", "headers": []}, None, None))
    assert reached == ["/invocations"]


def test_a_websocket_without_the_key_is_closed_before_it_opens(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    guard, send, sent, reached = recording_guard()
    asyncio.run(guard({"type": "websocket", "path": "/v1/realtime", "headers": []}, None, send))
    assert reached == [] and sent == [{"type": "websocket.close", "code": 1008}]
    headers = [(b"authorization", f"Bearer {KEY}".encode())]
    asyncio.run(guard({"type": "websocket", "path": "/v1/realtime", "headers": headers}, None, send))
    assert reached == ["/v1/realtime"]


def test_the_guard_alone_checks_v1_with_the_key_from_the_course_variable(monkeypatch):
    # vLLM gets no key of its own (no VLLM_API_KEY: vLLM 0.26 writes it into its compile cache), so /v1
    # rests on this middleware; the key comes from KEY_ENV, a name vLLM does not read.
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv("VLLM_API_KEY", "not-the-key-either")  # not where the guard looks
    guard, send, sent, reached = recording_guard()
    for key in (None, "not-the-key-either", KEY + "x"):
        headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
        scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": headers}
        asyncio.run(guard(scope, None, send))
    assert reached == [] and [m["status"] for m in sent if "status" in m] == [401, 401, 401]
    assert all(KEY.encode() not in m.get("body", b"") for m in sent)
    for path in ("/v1/chat/completions", "/v1/models"):
        scope = {"type": "http", "path": path, "method": "GET", "headers": [(b"authorization", f"Bearer {KEY}".encode())]}
        asyncio.run(guard(scope, None, send))
    assert reached == ["/v1/chat/completions", "/v1/models"]
