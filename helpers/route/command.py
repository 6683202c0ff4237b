r"""The settings of one ``vllm-router`` in front of the course's replicas, checked, and the command they become.

vLLM's router (PyPI ``vllm-router``, a Rust HTTP proxy with a Python launcher) takes the
replicas' URLs and a load-balancing policy, and sends each request to one replica. The course
runs it through its own launcher, :mod:`helpers.route._launch`, which is vllm-router's own
plus one thing its command line lacks: the classroom key's check (see :func:`build_router_launch`).

What is checked here, before anything starts: the policy is one vllm-router knows and that
works with plain vLLM servers, the replica list is not empty and holds ``http://`` URLs, and a
router reachable beyond this machine has a key. Nothing here touches the machine; the
process is :mod:`helpers.route.router`'s.

Example::

    >>> launch = build_router_launch(["http://127.0.0.1:8000", "http://127.0.0.1:8001"], "round_robin",
    ...                              host="127.0.0.1", port=30000, metrics_port=30001)
    >>> print(" ".join(launch.display_command()))  # doctest: +NORMALIZE_WHITESPACE
    python -m helpers.route._launch --worker-urls http://127.0.0.1:8000 http://127.0.0.1:8001
      --policy round_robin --host 127.0.0.1 --port 30000 --prometheus-host 127.0.0.1
      --prometheus-port 30001 --worker-startup-timeout-secs 30 --worker-startup-check-interval 1
      --health-check-interval-secs 2 --log-level info
"""

from __future__ import annotations

import secrets
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from helpers.errors import ConfigError
from helpers.serve.config import Launch
from helpers.serve.exposure import IPV6_REFUSED, LOOPBACK, check_host_and_key, is_ipv6, is_loopback

# The policies of vllm-router 0.1.17 (its --policy choices) that work in front of plain vLLM
# servers, named as vllm-router names them, each with what it does.
POLICIES = {
    "round_robin": "each request to the next replica in turn",
    "random": "each request to a replica drawn at random",
    "cache_aware": "to the replica whose past prompts share the longest prefix with this one (the router's own "
                   "approximate tree of prompt text), unless the replicas' loads differ too much",
    "power_of_two": "to the less loaded of two replicas drawn at random",
    "consistent_hash": "the same session or user (a header or field) always to the same replica",
}
# vllm-router's other choices, and why the course does not offer them
NOT_OFFERED = {
    "kv_aware": "it reads the replicas' KV-cache events over ZMQ (vLLM's --kv-events-config), "
                "which the course's servers do not publish",
    "sticky_least_loaded": "it is meant for prefill/decode disaggregation",
}
KEY_ENV = "VLLM_COURSE_ROUTER_API_KEY"  # the replicas' key, for the launcher; never on the command line
HEALTH_CHECK_INTERVAL_S = 2  # vllm-router's default is 60 s: a dead replica would get requests for a minute
WORKER_STARTUP_TIMEOUT_S = 30  # the replicas are already running: waiting 600 s (the default) hides a wrong URL


def check_policy(policy: str) -> str:
    """``policy`` if the course offers it, else a :class:`ConfigError` listing what it offers.

    >>> check_policy("round_robin")
    'round_robin'
    >>> check_policy("round-robin")
    Traceback (most recent call last):
    ...
    helpers.errors.ConfigError: policy='round-robin' is not a vllm-router policy the course offers; choose one of round_robin, random, cache_aware, power_of_two, consistent_hash (vllm-router's own names, with underscores).
    """
    if policy in POLICIES:
        return policy
    why = f" (vllm-router has it, but {NOT_OFFERED[policy]})" if policy in NOT_OFFERED else ""
    raise ConfigError(f"policy={policy!r} is not a vllm-router policy the course offers{why}; choose one of "
                      f"{', '.join(POLICIES)} (vllm-router's own names, with underscores).")


def check_replica_urls(urls: Sequence[str]) -> list[str]:
    """The replicas' root URLs without a trailing slash or ``/v1``; refuses an empty list or a non-URL.

    >>> check_replica_urls(["http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/"])
    ['http://127.0.0.1:8000', 'http://127.0.0.1:8001']
    >>> check_replica_urls([])
    Traceback (most recent call last):
    ...
    helpers.errors.ConfigError: The router needs at least one replica to send requests to, got an empty list. Start them first, e.g. replicas = start_replicas(2), then start_router(replicas).
    """
    if isinstance(urls, str):
        raise ConfigError(f"replicas is a list of servers or URLs, got the single string {urls!r}; "
                          f"pass [{urls!r}].")
    if not urls:
        raise ConfigError("The router needs at least one replica to send requests to, got an empty list. "
                          "Start them first, e.g. replicas = start_replicas(2), then start_router(replicas).")
    clean = []
    for url in urls:
        root = str(url).strip().rstrip("/").removesuffix("/v1")
        if not root.startswith("http://"):
            raise ConfigError(f"{url!r} is not a replica URL the router can reach; expected something like "
                              "http://127.0.0.1:8000 (a running server's .url).")
        clean.append(root)
    if len(set(clean)) < len(clean):
        raise ConfigError(f"The same replica is listed twice in {clean}: each replica once.")
    return clean


def check_router_host(host: str, api_key: str | None) -> None:
    """A router bound beyond loopback must check a key of classroom strength, as a classroom server must."""
    if isinstance(host, str) and is_ipv6(host):
        raise ConfigError(f"host={host!r}: {IPV6_REFUSED}")
    if isinstance(host, str) and is_loopback(host):
        return
    if not api_key:
        raise ConfigError(f"host={host!r} would expose the router beyond this machine, with no key. Give the "
                          f"replicas an API key (students send it as their OpenAI api_key), or keep host={LOOPBACK!r}.")
    check_host_and_key(host, api_key)  # IPv6 refused, a guessable key refused


def replica_key(replica: Any) -> str | None:
    """A replica's API key (a VLLMServer's ``config.api_key``, a shared server's ``api_key``); None for a URL or none."""
    if isinstance(replica, str):
        return None
    key = getattr(getattr(replica, "config", None), "api_key", None) or getattr(replica, "api_key", None)
    return key if key and key != "not-needed" else None  # "not-needed": what a keyless VLLMServer answers


def check_replicas_demand_key(host: str, api_key: str | None, replicas: Sequence[Any]) -> None:
    """A router beyond loopback admits every client key a replica accepts (its check asks the replicas'
    ``/v1/models``), so each replica must demand the router's own key: a keyless one lets any key in.
    Replicas given as URLs are asked with a random key, which must be refused (HTTP 401 or 403); one
    that cannot be asked stops the start too, since it could come up keyless behind the router."""
    if is_loopback(host):
        return
    for replica in replicas:
        url = getattr(replica, "url", replica)
        if isinstance(replica, str):
            if _accepts(f"{url.rstrip('/')}/v1/models", "wrong-" + secrets.token_urlsafe(12)):
                problem = "accepts any key"
            else:
                continue
        elif (key := replica_key(replica)) == api_key:
            continue
        else:
            problem = "has no API key" if key is None else "has a different API key"
        raise ConfigError(f"host={host!r}: the router checks a student's key by asking the replicas, and the replica "
                          f"at {url} {problem}, so any key would be let in. Start every replica with the router's "
                          f"key (start_replicas(..., api_key=...)), or keep host={LOOPBACK!r}.")


def _accepts(url: str, key: str, timeout: float = 5.0) -> bool:
    """Whether ``url`` answers ``key`` (True) or refuses it with HTTP 401 or 403 (False).

    Any other answer proves nothing: a replica that cannot be reached now may come up keyless
    later, behind a router that already admits everyone, so that raises :class:`ConfigError`."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return True
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            return False
        reason = f"HTTP {error.code}"
    except OSError as error:  # refused, timed out, no such host
        reason = str(getattr(error, "reason", error))
    raise ConfigError(f"cannot reach replica {url} to check that it demands the key ({reason}): start it "
                      f"first, then the router.")


def build_router_launch(urls: Sequence[str], policy: str, *, host: str, port: int, metrics_port: int,
                        api_key: str | None = None, replicas_timeout_s: int = WORKER_STARTUP_TIMEOUT_S) -> Launch:
    """The router's command line and environment; the replicas' ``api_key``, if any, in the environment only.

    vllm-router 0.1.17 takes a key in two places, neither of them safe or whole on its own:

    - ``--api-key``, the key it sends *to* the workers, is a command-line flag (``ps`` shows it to
      every user), and it checks nothing a client sends;
    - ``api_key_validation_urls`` (not on its launcher's command line) makes it check every
      client's bearer token by asking those URLs (HTTP 200: valid) and remembering the answer.

    So the course's launcher (:mod:`helpers.route._launch`) reads the key from the environment, as
    the course's key guard reads ``COURSE_SERVER_KEY``, sets it as the key sent to the replicas (vllm-router forwards a
    client's ``Authorization`` on chat and completions, not on the other routes it proxies, such
    as ``/tokenize``), and points the check at every replica's ``/v1/models``, which answers 200 to
    the key only (:mod:`helpers.serve.key_guard`). The launch's repr hides the key:

    >>> build_router_launch(["http://127.0.0.1:8000"], "cache_aware", host="0.0.0.0", port=30000,
    ...                     metrics_port=30001, api_key="s3cret")
    Launch(argv=[...], env={'VLLM_COURSE_ROUTER_API_KEY': '<hidden>'})
    """
    argv = [sys.executable, "-m", "helpers.route._launch",
            "--worker-urls", *check_replica_urls(urls),
            "--policy", check_policy(policy),
            "--host", host, "--port", str(port),
            # vllm-router's metrics listen on a port of their own (default 29000: two routers would collide)
            "--prometheus-host", LOOPBACK, "--prometheus-port", str(metrics_port),
            # how long it waits for every replica's /health before it gives up and exits
            "--worker-startup-timeout-secs", str(replicas_timeout_s), "--worker-startup-check-interval", "1",
            "--health-check-interval-secs", str(HEALTH_CHECK_INTERVAL_S),
            "--log-level", "info"]
    return Launch(argv, {KEY_ENV: api_key} if api_key else {})
