"""One blocking HTTP request to a course server, whose failures are all OSError; and loopback kept off proxies.

urllib raises OSError (URLError, ConnectionError, a timeout) when a server cannot be reached,
but a server that dies *while* it answers cuts the body short, and http.client says so with
an HTTPException (IncompleteRead), which is not an OSError. Every caller in the course treats
"the server did not answer" as one case (a failed scrape, a server that stopped answering), so
:func:`read_body` raises that too as an OSError (ConnectionError).
"""

from __future__ import annotations

import http.client
import os
import urllib.request
from collections.abc import MutableMapping

LOOPBACK_NAMES = ("127.0.0.1", "localhost")


def read_body(request: urllib.request.Request | str, timeout: float) -> bytes:
    """The response body of ``request``; OSError if it fails, a body cut short included."""
    url = request.full_url if isinstance(request, urllib.request.Request) else request
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()
    except http.client.HTTPException as cut:
        raise ConnectionError(f"{url} answered only in part: {cut!r}") from cut


def bypass_proxy_for_loopback(environ: MutableMapping[str, str] = os.environ) -> None:
    """Add 127.0.0.1 and localhost to ``no_proxy`` and ``NO_PROXY``, keeping what they already list.

    Every course server, router and metrics page is on loopback, but urllib, httpx (so the openai
    client), the router and ``vllm bench serve`` all send through ``http_proxy`` when it is set and
    ``no_proxy`` does not name the host: a proxy that cannot reach this machine's loopback, and sees the
    Authorization header of a keyed server, or a start-up check that waits its whole timeout.

    >>> env = {"http_proxy": "http://proxy:3128", "no_proxy": ".internal"}
    >>> bypass_proxy_for_loopback(env)
    >>> env["no_proxy"], env["NO_PROXY"]
    ('.internal,127.0.0.1,localhost', '127.0.0.1,localhost')
    """
    for name in ("no_proxy", "NO_PROXY"):
        listed = [entry for entry in environ.get(name, "").split(",") if entry.strip()]
        if "*" in listed:
            continue  # already bypasses every host
        missing = [host for host in LOOPBACK_NAMES if host not in {entry.strip() for entry in listed}]
        if missing:
            environ[name] = ",".join(listed + missing)
