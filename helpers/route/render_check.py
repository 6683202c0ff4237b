"""Whether every replica renders prompts for vllm-router's cache-aware policy, asked before the router starts.

vllm-router 0.1.17's ``cache_aware`` policy turns each prompt into tokens through a replica's
``/v1/chat/completions/render`` (``/v1/completions/render`` for completions) and matches those
tokens against what it sent each replica before. A replica that refuses the call leaves the router
nothing to match: it places every request by load and still calls itself cache-aware, and the
measurements made through it say nothing about cache-aware routing. vLLM 0.32 refuses with
HTTP 403 unless the server was started with ``--enable-scale-out`` (vLLM 0.26 always serves it;
``scripts/probe_router_affinity.py`` measured the difference). ``start_replicas`` adds the flag
where it is needed (:func:`helpers.route.replicas.with_render_endpoints`); servers started another
way are checked here, with one small render request each (milliseconds, no token generated).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from helpers.errors import ConfigError
from helpers.route.command import replica_key
from helpers.route.replicas import RENDER_FLAG

RENDER_PATH = "/v1/chat/completions/render"
NO_ROUTE = 0  # render_status's answer for a 404 of the web framework itself: this vLLM has no such endpoint
REFUSING = (403, NO_ROUTE)  # 403: vLLM 0.32 without RENDER_FLAG


def render_status(url: str, model_name: str, api_key: str | None, *, path: str = RENDER_PATH,
                  timeout: float = 10.0) -> int | None:
    """The HTTP status of one render request to the replica at ``url``; :data:`NO_ROUTE` for a 404 that is
    the web framework's (no such endpoint), not vLLM's (no such model); None where the replica cannot be
    reached (the router's own start then says which replica does not answer)."""
    body = json.dumps({"model": model_name, "messages": [{"role": "user", "content": "hi"}]}).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url.rstrip("/") + path, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        if error.code == 404 and error.read().replace(b" ", b"") == b'{"detail":"NotFound"}':
            return NO_ROUTE
        return error.code
    except OSError:
        return None


def check_replicas_render(policy: str, replicas: Sequence[Any], model_name: str, api_key: str | None) -> None:
    """For ``cache_aware``: a :class:`ConfigError` naming the first replica that refuses to render prompts,
    and what to do. The other policies read no prompt, so they are not checked."""
    if policy != "cache_aware":
        return
    for replica in replicas:
        url = getattr(replica, "url", replica)
        key = api_key if isinstance(replica, str) else replica_key(replica)
        status = render_status(url, model_name, key)
        if status in REFUSING:
            raise ConfigError(
                f"The replica at {url} refuses {RENDER_PATH} (HTTP {status or 404}), which the cache-aware router "
                "calls to read each prompt's tokens: it would match no prompt and send every request to the least busy "
                f"replica. vLLM 0.32 serves that endpoint only when started with {RENDER_FLAG}: start the "
                "replicas with start_replicas(...), which adds it, or each server with "
                f"extra_args=({RENDER_FLAG!r},); or choose another policy, such as 'round_robin'.")
