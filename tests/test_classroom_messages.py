"""helpers.serve.classroom's messages, without a server: a refused key is shown masked, never in part."""

from __future__ import annotations

import io
import urllib.error

import pytest

from helpers.serve.classroom import SharedServer, SharedServerError, connect, mask_key


def _refuse_with_401(monkeypatch):
    def get(self, path, timeout=5.0):
        raise urllib.error.HTTPError(self.url + path, 401, "Unauthorized", {}, io.BytesIO(b""))

    monkeypatch.setattr(SharedServer, "get", get)


@pytest.mark.parametrize("key", ["zq7x", "k1", "short7x"])
def test_a_refused_short_key_shows_its_length_only(monkeypatch, key):
    _refuse_with_401(monkeypatch)
    with pytest.raises(SharedServerError, match=r"refused the API key \(HTTP 401\)") as caught:
        connect("http://127.0.0.1:9", api_key=key)
    message = str(caught.value)
    assert key[-2:] not in message  # a short key's last characters are a large part of it
    assert f"the key sent, {mask_key(key)}, is not the server's" in message


def test_a_refused_long_key_shows_its_masked_form_only(monkeypatch):
    key = "class-0123456789-Zy"
    _refuse_with_401(monkeypatch)
    with pytest.raises(SharedServerError) as caught:
        connect("http://127.0.0.1:9", api_key=key)
    assert key not in str(caught.value) and "…Zy (19 characters)" in str(caught.value)
