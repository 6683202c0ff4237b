"""Start one vLLM server for a whole class, protected by an API key; stop it with Ctrl-C.

The instructor runs, on the machine that serves (a GPU machine for a class of any size)::

    export VLLM_COURSE_API_KEY=$(python -c "import secrets; print(secrets.token_urlsafe(16))")
    echo "$VLLM_COURSE_API_KEY"          # tell the class, e.g. on the board
    .venv/bin/python scripts/classroom_server.py --host 0.0.0.0 --port 8000

and each student, with the same key in their own ``VLLM_COURSE_API_KEY``::

    from helpers.serve.classroom import connect
    server = connect("http://<instructor's address>:8000")

For a larger class on a machine that holds several servers, ``--replicas N`` starts N servers on
127.0.0.1 and vLLM's router (``vllm-router``, cache-aware policy unless ``--policy`` names another) in
front of them on ``--host`` and ``--port``: students connect to the router exactly as to one server, with
the same key, and only the router faces the network (see ``helpers.route``).

The server (or the router) binds 127.0.0.1 unless ``--host`` names another interface. An API key is always
required; it is read from an environment variable (``--api-key-env``, default
VLLM_COURSE_API_KEY), passed to the server through its environment (not its command line, which
``ps`` shows to every user) to the course's key guard (``helpers.serve.key_guard``), and never printed or
written in full: this script shows its last two characters only. Server options are those of ``helpers.serve.server.start_server``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the helpers package, from any folder

from helpers.serve.classroom import API_KEY_ENV, mask_key  # noqa: E402
from helpers.errors import CourseError  # noqa: E402
from helpers.route.command import POLICIES  # noqa: E402
from helpers.serve.config import LOOPBACK, ServerConfig  # noqa: E402
from helpers.serve.exposure import MIN_KEY_LENGTH  # noqa: E402  (the helpers ask the same of any shared server)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=LOOPBACK,
                        help="interface to bind: 0.0.0.0 for every interface, or one address of this machine "
                             "(default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=None, help="default: the first free port from 8000")
    parser.add_argument("--api-key-env", default=API_KEY_ENV, metavar="NAME",
                        help=f"environment variable holding the API key (default {API_KEY_ENV})")
    parser.add_argument("--model", default=None, help="default: $VLLM_COURSE_MODEL, else the embedded SmolLM2")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--max-num-seqs", type=int, default=None, help="requests in one batch (vLLM's default if unset)")
    parser.add_argument("--kv-cache-space-gib", type=float, default=None, help="KV pool size (CPU default 2 GiB)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=None)
    parser.add_argument("--dtype", default=None, help="e.g. half on a T4, which has no bf16")
    parser.add_argument("--replicas", type=int, default=1, metavar="N",
                        help="N servers on 127.0.0.1 behind vllm-router (its policy: --policy) on --host/--port "
                             "(default 1: one server, no router)")
    parser.add_argument("--policy", default="cache_aware", choices=POLICIES,
                        help="the router's policy with --replicas (default cache_aware; round_robin when one replica "
                             "gets all the work: see the instructor guide, How many replicas a class needs)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    key = os.environ.get(args.api_key_env, "")
    if not key:
        print(f"error: a classroom server needs an API key, and ${args.api_key_env} is empty. Create one with\n"
              f'  export {args.api_key_env}=$(python -c "import secrets; print(secrets.token_urlsafe(16))")\n'
              "and give it to the class.", file=sys.stderr)
        return 2
    if len(key) < MIN_KEY_LENGTH:
        print(f"error: ${args.api_key_env} has only {len(key)} characters; use at least {MIN_KEY_LENGTH} "
              "(a guessable key protects nothing on a shared network).", file=sys.stderr)
        return 2
    try:
        config = ServerConfig(
            model=args.model, host=args.host, port=args.port, api_key=key, max_model_len=args.max_model_len,
            max_num_seqs=args.max_num_seqs, kv_cache_space_gib=args.kv_cache_space_gib,
            gpu_memory_utilization=args.gpu_memory_utilization, dtype=args.dtype,
        )
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    if args.replicas < 1:
        print(f"error: --replicas is a number of servers, 1 or more; got {args.replicas}.", file=sys.stderr)
        return 2
    # SIGTERM (e.g. from a process manager) stops the server as cleanly as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    stopped = "classroom server stopped" + (" (router and replicas)" if args.replicas > 1 else "")
    try:
        return serve_replicas(args, config, key) if args.replicas > 1 else serve_one(args, config, key)
    except KeyboardInterrupt:
        print(f"\n{stopped}", flush=True)
        return 0
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def serve_one(args: argparse.Namespace, config: ServerConfig, key: str) -> int:
    """One keyed server on ``--host``/``--port``, until Ctrl-C (raised to :func:`main`) or its own exit (1)."""
    from helpers.serve.server import start_server

    with start_server(config) as server:
        urls = announce(args.host, server.port, server.model_name)
        print(f"API key: from ${args.api_key_env}, {mask_key(key)}")
        print(f"server log: {server.log_path}")
        print(student_instructions(urls[0], "Ctrl-C stops the server."), flush=True)
        while server.is_running():
            time.sleep(1.0)
        print(f"error: the server exited on its own (code {server.process.returncode}); see {server.log_path}",
              file=sys.stderr)
        return 1


def announce(host: str, port: int, model_name: str) -> list[str]:
    """Print where the class reaches the server; return those URLs (the first is the one to hand out)."""
    urls = student_urls(host, port)
    print(f"\nclassroom server ready: {urls[0]} serves {model_name!r}", flush=True)
    for other in urls[1:]:
        print(f"  also reachable at {other}")
    return urls


def student_instructions(url: str, how_to_stop: str) -> str:
    return ("\nStudents, in the shell that starts Jupyter:  export VLLM_COURSE_API_KEY=<the key>\n"
            "then in a notebook:\n"
            "    from helpers.serve.classroom import connect\n"
            f'    server = connect("{url}")\n'
            f"\n{how_to_stop}")


def serve_replicas(args: argparse.Namespace, config: ServerConfig, key: str) -> int:
    """``--replicas N``: N keyed servers on 127.0.0.1, the router on ``--host``/``--port`` with the same key,
    until Ctrl-C (raised to :func:`main`) or one of them exits (1)."""
    from dataclasses import replace

    from helpers.route.replicas import start_replicas
    from helpers.route.router import choose_router_port, start_router

    # Checked before the replicas' minutes of start-up, and kept from them: they take free ports from 8000, and
    # one on 127.0.0.1:8000 would leave a router on 0.0.0.0:8000 "already in use".
    port = choose_router_port(args.host, args.port)
    with start_replicas(args.replicas, replace(config, host=LOOPBACK, port=None), avoid_ports={port}) as replicas, \
            start_router(replicas, policy=args.policy, host=args.host, port=port) as router:
        urls = announce(args.host, router.port, router.model_name)
        print(f"vllm-router ({router.policy}) in front of {len(replicas)} replicas: {', '.join(replicas.urls)}")
        print(f"API key: from ${args.api_key_env}, {mask_key(key)}")
        print(f"router log: {router.log_path}")
        for server in replicas:
            print(f"replica log: {server.log_path}")
        print(student_instructions(urls[0], "Ctrl-C stops the router and every replica."), flush=True)
        while router.is_running() and all(replicas.is_running()):
            time.sleep(1.0)
        down = [server.url for server in replicas if not server.is_running()]
        what = f"replica(s) {', '.join(down)} stopped" if down else f"the router exited (code {router.process.returncode})"
        print(f"error: {what} on its own; see the logs above. Everything else is stopped now.", file=sys.stderr)
        return 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def student_urls(host: str, port: int) -> list[str]:
    """The URLs students can use: the bound address, or for a wildcard bind every IPv4 address of this machine."""
    if host not in ("0.0.0.0", "::"):
        return [f"http://{host}:{port}"]
    import ipaddress
    import socket

    import psutil

    found = [addr.address for addrs in psutil.net_if_addrs().values() for addr in addrs
             if addr.family == socket.AF_INET and not ipaddress.ip_address(addr.address).is_loopback]
    return [f"http://{address}:{port}" for address in found] or [f"http://127.0.0.1:{port}"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
