"""A shared classroom server: the instructor starts one, students point the course's client at it.

The instructor starts one server for the class with ``scripts/classroom_server.py`` (which uses
:func:`helpers.serve.server.start_server` with a host and an API key). Each student then writes::

    >>> from helpers.serve.classroom import connect
    >>> server = connect("http://10.0.0.5:8000")   # doctest: +SKIP
    >>> reply = server.client().chat.completions.create(model=server.model_name, ...)   # doctest: +SKIP
    >>> workload = build_workload(server, num_requests=10)   # doctest: +SKIP
    >>> run = await run_load_test(server, workload)          # doctest: +SKIP

(``connect`` reads the key from ``$VLLM_COURSE_API_KEY``; ``build_workload`` and
``run_load_test`` are the load tester's, in :mod:`helpers.load.workload` and :mod:`helpers.load.run`.)

:func:`connect` checks the URL and the key once (``GET /v1/models``), finds the model name, and
returns a :class:`SharedServer`: a :class:`helpers.load.client.Endpoint` (what the load tester
accepts) with the ``client()`` / ``async_client()`` / ``get()`` of :class:`helpers.serve.access.ServerAccess`,
as a :class:`~helpers.serve.server.VLLMServer` has. The key never appears in its repr, so printing
it in a notebook does not leak it.

What the key protects: every route but ``GET /health``, ``GET /ping``, ``GET /version`` and
``GET /metrics``. The course's :mod:`helpers.serve.key_guard` (vLLM's ``--middleware``) checks it on
every route, ``/v1`` included, and ``/invocations``, ``/tokenize``, ``/scale_elastic_ep`` and the rest,
which vLLM's own key would leave open; vLLM itself is given no key (vLLM 0.26 would write
``VLLM_API_KEY`` into its compile cache). Anyone who can reach the port can still read
the server's metrics: bind a classroom network only.

Why a class should not load-test one server together: every student's requests share the same
batch, KV cache and CPU/GPU, so each one measures the sum of everybody's load. See
``docs/instructor.md`` ("Running the lab in a class").
"""

from __future__ import annotations

import json
import os
import urllib.error
from dataclasses import dataclass

from helpers.errors import CourseError
from helpers.load.client import Endpoint
from helpers.serve.access import ServerAccess

API_KEY_ENV = "VLLM_COURSE_API_KEY"  # where connect() and scripts/classroom_server.py read the key


class SharedServerError(CourseError):
    """The shared server cannot be used: unreachable, wrong key, or no such model."""


@dataclass(frozen=True)
class SharedServer(Endpoint, ServerAccess):
    """A server someone else started, reached by URL and key. Build it with :func:`connect`."""

    def __repr__(self) -> str:
        return f"<SharedServer {self.model_name!r} on {self.url}, key {mask_key(self.api_key)}>"


def connect(url: str, api_key: str | None = None, *, model: str | None = None, timeout_s: float = 10.0) -> SharedServer:
    """Check that ``url`` answers with ``api_key`` and return the shared server.

    ``url`` is the root the instructor gives, e.g. ``http://10.0.0.5:8000`` (a trailing ``/v1``
    is accepted). ``api_key`` defaults to ``$VLLM_COURSE_API_KEY``: set it in the shell that
    starts Jupyter, so it is never typed into a cell that gets saved. ``model`` is needed only
    when the server serves several models.

    >>> connect("http://127.0.0.1:8000", "wrong-key")   # doctest: +SKIP
    SharedServerError: http://127.0.0.1:8000 refused the API key (HTTP 401) ...
    """
    root = url.strip().rstrip("/").removesuffix("/v1")
    if not root.startswith(("http://", "https://")):
        raise SharedServerError(f"{url!r} is not a URL; expected something like http://10.0.0.5:8000.")
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    if not key:
        raise SharedServerError(
            f"No API key: pass api_key=..., or set {API_KEY_ENV} in the shell before starting Jupyter.")
    probe = SharedServer(root, model_name=model or "?", api_key=key)
    try:
        listed = json.loads(probe.get("/v1/models", timeout=timeout_s))
    except urllib.error.HTTPError as error:
        if error.code == 401:
            raise SharedServerError(
                f"{root} refused the API key (HTTP 401): the key sent, {mask_key(key)}, is not the server's. "
                "Check the key the instructor gave.") from None
        raise SharedServerError(f"{root}/v1/models answered HTTP {error.code}: is this a vLLM server?") from None
    except (OSError, ValueError) as error:
        raise SharedServerError(
            f"Cannot reach {root} ({error}). Check the address and port, that the server is running, "
            "and that this machine can reach it (same network, no firewall in between).") from None
    names = [entry.get("id") for entry in listed.get("data", [])]
    if model is None:
        if len(names) != 1:
            raise SharedServerError(f"{root} serves {names}; pass model= to choose one.")
        model = names[0]
    elif model not in names:
        raise SharedServerError(f"{root} does not serve {model!r}; it serves {names}.")
    return SharedServer(root, model_name=model, api_key=key)


def mask_key(key: str | None) -> str:
    """A key as it may be shown: its length and last two characters only.

    >>> mask_key("s3cret-classroom-key")
    '…ey (20 characters)'
    """
    if not key:
        return "(none)"
    return f"…{key[-2:]} ({len(key)} characters)" if len(key) >= 8 else f"({len(key)} characters)"
