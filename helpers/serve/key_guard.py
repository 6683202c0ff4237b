"""The classroom key on every route: an ASGI middleware that vLLM loads with ``--middleware``.

vLLM's own ``--api-key`` (or ``VLLM_API_KEY``) guards only the paths under ``/v1``. Version 0.32
also serves ``/invocations`` (chat and completions for SageMaker), ``/generative_scoring``,
``/tokenize``, ``/scale_elastic_ep`` and more beside ``/v1``, and answers them without a key.
:class:`RequireKeyEverywhere` runs inside the server process, outermost, and refuses every
request without the key except a short list of read-only routes:

- ``GET /health`` and ``GET /ping``: whether the server is up (load balancers ask without a key);
- ``GET /version``: which vLLM answers;
- ``GET /metrics``: Prometheus counters (the course's monitors and an instructor's dashboard).

Everything else, the documentation routes (``/openapi.json``, ``/docs``) included, needs
``Authorization: Bearer <key>``, the ``/v1`` routes vLLM's own check would cover included: this
middleware is the server's only key check. The key is read from :data:`KEY_ENV` in the server's
environment (the helper never puts it on the command line); without one the middleware lets
everything through, as vLLM itself does. Not ``VLLM_API_KEY``: vLLM 0.26 (the GPU pin) hashes
every variable it registers, that one included, into its torch.compile cache key and writes them
in plain text to ``~/.cache/vllm/torch_compile_cache/.../cache_key_factors.json`` (0.32 leaves the
key out); a name outside vLLM's ``VLLM_`` namespace is one it never reads, stores or warns about.
Only the standard library is used here: the module runs inside vLLM, and what it needs from
Starlette is the ASGI protocol, nothing more.

Added by :func:`helpers.serve.config.build_launch` whenever a server has a key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

OPEN_ROUTES = frozenset({"/health", "/ping", "/version", "/metrics", "/metrics/"})
OPEN_METHODS = frozenset({"GET", "HEAD"})
KEY_ENV = "COURSE_SERVER_KEY"  # set by helpers.serve.config.build_launch; vLLM never reads it

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]


def is_open(method: str, path: str) -> bool:
    """Whether a request may go through without the key.

    >>> is_open("GET", "/metrics"), is_open("POST", "/health"), is_open("POST", "/invocations")
    (True, False, False)
    """
    return method.upper() in OPEN_METHODS and path in OPEN_ROUTES


def bearer_matches(authorization: str | None, key_digest: bytes) -> bool:
    """Whether an ``Authorization`` header carries the key (compared in constant time).

    >>> digest = hashlib.sha256(b"s3cret").digest()
    >>> bearer_matches("Bearer s3cret", digest), bearer_matches("Bearer nope", digest), bearer_matches(None, digest)
    (True, False, False)
    """
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(hashlib.sha256(token.strip().encode()).digest(), key_digest)


class RequireKeyEverywhere:
    """Pure ASGI middleware: 401 for every request without the key, except :data:`OPEN_ROUTES`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        key = os.environ.get(KEY_ENV)
        # Only a digest stays in memory: nothing here can print the key back.
        self._digest = hashlib.sha256(key.encode()).digest() if key else None

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if self._digest is None or scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        path = scope["path"].removeprefix(scope.get("root_path", "")) or "/"
        method = scope.get("method", "GET") if scope["type"] == "http" else "WEBSOCKET"
        if is_open(method, path) or bearer_matches(_header(scope, b"authorization"), self._digest):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # policy violation, before accept
            return None
        body = json.dumps({"error": {"message": "This server needs its API key on every route but "
                                                "/health, /ping, /version and /metrics: send "
                                                "'Authorization: Bearer <key>'.",
                                     "type": "Unauthorized", "code": 401}}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None
