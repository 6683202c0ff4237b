"""The connection pool the load tester sends through: OpenAI-API requests over aiohttp.

The requests are the OpenAI API's, byte for byte, but on a GPU the client must keep up with
about 20,000 streamed tokens a second. Through ``openai.AsyncOpenAI`` (httpx) the course's
client measured 0.947x the output tokens/s of vLLM's own ``vllm bench serve`` and a 16 % longer
TTFT p50 on the H200 (SmolLM2, 640 requests at 64 slots, 2026-12-01; ``results/gpu/bench_vs_vllm/``):
httpx's connection pool scans every connection whenever a request starts or ends, which stalls
hundreds of open streams. vLLM's tool uses aiohttp; so does this module, so that a difference
between the two is the server's. With it, the same protocol the same evening measured 1.207x
vLLM's tool's output tokens/s and 0.908x its TTFT p50, with vLLM's tool the unstable one (13,153 to
20,058 tok/s over its four runs). Notebook 02 teaches the openai client, the right tool for one
request at a time; an error here is named as the openai client names it (``NotFoundError 404``).
"""

from __future__ import annotations

import json
from typing import Any

from helpers import validate

DEFAULT_TIMEOUT_S = 600.0  # per request, from the moment it is sent
CONNECT_TIMEOUT_S = 10.0


# The openai client's exception names for these statuses, so an error reads the same whichever client met it.
_STATUS_NAMES = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
                 404: "NotFoundError", 409: "ConflictError", 422: "UnprocessableEntityError", 429: "RateLimitError"}


class ServerRefusedError(Exception):
    """The server answered with an HTTP error status; the message is the server's own, ``kind``
    the openai client's name for that status."""

    def __init__(self, status: int, message: str) -> None:
        self.status_code, self.message = status, message
        self.kind = _STATUS_NAMES.get(status, "InternalServerError" if status >= 500 else "APIStatusError")
        super().__init__(message)


async def raise_for_status(response: Any) -> None:
    if response.status < 400:
        return
    text = await response.text()
    try:
        body = json.loads(text)
        error = body.get("error") if isinstance(body, dict) else None
        message = (error.get("message") if isinstance(error, dict) else error) or body.get("message") or body.get("detail")
    except (ValueError, AttributeError):
        message = None
    raise ServerRefusedError(response.status, str(message or text or response.reason))



class LoadClient:
    """One connection pool to one server: POSTs to its OpenAI-compatible API.

    Made by :func:`make_client`; closed with ``await client.close()``. The API key travels in a
    header and never appears in ``repr``.
    """

    def __init__(self, base_url: str, api_key: str, max_connections: int) -> None:
        self.base_url, self.max_connections = base_url.rstrip("/"), max_connections
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._session: Any = None  # made on first use: an aiohttp session belongs to a running event loop

    def __repr__(self) -> str:
        return f"LoadClient({self.base_url!r}, max_connections={self.max_connections})"

    def post(self, path: str, payload: dict[str, Any]) -> Any:
        """The response to ``payload`` POSTed to ``path`` (e.g. ``/chat/completions``), as an ``async with`` context."""
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_connections),
                # Only connecting has its own limit: the caller bounds each whole request (send_request's timeout_s).
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
                headers=self._headers)
        return self._session.post(self.base_url + path, json=payload)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def make_client(target: Any, max_connections: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> LoadClient:
    """A :class:`LoadClient` for ``target`` (a VLLMServer or an :class:`Endpoint`) with a pool of
    ``max_connections``. No retries: a failed request must show up as an error, not as a slow success.
    ``timeout_s`` is checked here so that a bad one is refused before a run starts.
    """
    validate.positive_int(max_connections, "max_connections")
    validate.positive_number(timeout_s, "timeout_s", unit="seconds")
    return LoadClient(target.base_url, getattr(target, "api_key", "not-needed"), max_connections)
