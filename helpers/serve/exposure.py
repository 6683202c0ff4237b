"""Who can reach a server: the host it binds, and the key it then needs.

A server on loopback (the default, 127.0.0.1) answers this machine only and needs no key. Any other
host is a shared classroom server, and needs an ``api_key`` of at least :data:`MIN_KEY_LENGTH`
characters (``scripts/classroom_server.py`` asks the same of the instructor's key). IPv6 hosts are
refused: the helpers probe ports and build URLs over IPv4 only (:func:`helpers.serve.preflight.port_free`).
Used by :class:`helpers.serve.config.ServerConfig`. The key's value never appears in a message.

>>> check_host_and_key("0.0.0.0", "short")
Traceback (most recent call last):
...
helpers.errors.ConfigError: host='0.0.0.0' exposes the server beyond this machine, and its api_key has only 5 characters (spaces at its ends not counted); use at least 12: a guessable key protects nothing on a shared network. Create one with secrets.token_urlsafe(16).
"""

from __future__ import annotations

import ipaddress

from helpers.errors import ConfigError
from helpers.validate import given

LOOPBACK = "127.0.0.1"
MIN_KEY_LENGTH = 12  # characters of a key that guards a server beyond loopback
IPV6_REFUSED = ("IPv6 addresses are not supported by the course's helpers; use 127.0.0.1 "
                "(or 0.0.0.0 with an api_key for a classroom).")


def check_host_and_key(host: object, api_key: object) -> None:
    """Refuse a host the helpers cannot serve on, a key that is not text, and beyond loopback a missing
    or guessable key."""
    if api_key is not None and not isinstance(api_key, str):
        raise ConfigError(f"api_key must be a string (the key students send), or None for no key; got a value of "
                          f"type {type(api_key).__name__}. Pass it as text, e.g. os.environ['VLLM_COURSE_API_KEY'].")
    if not isinstance(host, str) or not host.strip():
        raise ConfigError(f"host must be an IPv4 address or a host name such as {LOOPBACK!r} or '0.0.0.0', "
                          f"got {given(host, typed=True)}.")
    if is_ipv6(host):
        raise ConfigError(f"host={host!r}: {IPV6_REFUSED}")
    if is_loopback(host):
        return
    if not api_key:
        raise ConfigError(
            f"host={host!r} would expose the server beyond this machine. A shared "
            "classroom server needs an API key: pass api_key=... (students send it as their "
            "OpenAI api_key), or keep the default host 127.0.0.1."
        )
    length = len(api_key.strip())  # a key of spaces is no key
    if length < MIN_KEY_LENGTH:
        raise ConfigError(
            f"host={host!r} exposes the server beyond this machine, and its api_key has only {length} "
            f"character{'' if length == 1 else 's'} (spaces at its ends not counted); use at least {MIN_KEY_LENGTH}: "
            "a guessable key protects nothing on a shared network. Create one with secrets.token_urlsafe(16)."
        )


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only.

    >>> is_loopback("localhost"), is_loopback("127.0.0.2"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_ipv6(host: str) -> bool:
    """Whether ``host`` is an IPv6 address, bracketed as in a URL or not.

    >>> is_ipv6("::1"), is_ipv6("[::]"), is_ipv6("127.0.0.1"), is_ipv6("localhost")
    (True, True, False, False)
    """
    try:
        return ipaddress.ip_address(host.strip("[]")).version == 6
    except ValueError:
        return False
