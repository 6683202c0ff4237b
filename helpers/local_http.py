"""One blocking HTTP request to a course server, whose failures are all OSError.

urllib raises OSError (URLError, ConnectionError, a timeout) when a server cannot be reached,
but a server that dies *while* it answers cuts the body short, and http.client says so with
an HTTPException (IncompleteRead), which is not an OSError. Every caller in the course treats
"the server did not answer" as one case (a failed scrape, a server that stopped answering), so
:func:`read_body` raises that too as an OSError (ConnectionError).
"""

from __future__ import annotations

import http.client
import urllib.request


def read_body(request: urllib.request.Request | str, timeout: float) -> bytes:
    """The response body of ``request``; OSError if it fails, a body cut short included."""
    url = request.full_url if isinstance(request, urllib.request.Request) else request
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()
    except http.client.HTTPException as cut:
        raise ConnectionError(f"{url} answered only in part: {cut!r}") from cut
