"""What every server object offers a notebook: OpenAI clients and a GET with the server's key.

:class:`ServerAccess` is mixed into :class:`helpers.serve.server.VLLMServer` (a server this
kernel started) and :class:`helpers.serve.classroom.SharedServer` (one the instructor started),
which provide ``url``, ``base_url`` and ``api_key``.
"""

from __future__ import annotations

import urllib.request
from typing import Any

from helpers.local_http import read_body


class ServerAccess:
    """``client()``, ``async_client()`` and ``get()`` for a class with ``url``, ``base_url`` and ``api_key``."""

    url: str
    base_url: str
    api_key: str

    def client(self, **kwargs: Any):  # -> openai.OpenAI
        """An OpenAI client pointed at this server; ``kwargs`` go to ``openai.OpenAI``."""
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)

    def async_client(self, **kwargs: Any):  # -> openai.AsyncOpenAI
        """An asynchronous OpenAI client pointed at this server."""
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)

    def get(self, path: str, timeout: float = 5.0) -> bytes:
        """GET a path of the server (``/metrics``, ``/v1/models``) with the key; return the body."""
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.api_key}"})
        return read_body(request, timeout)
