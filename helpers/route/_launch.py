"""vllm-router's own launcher, run inside the router's process, with the classroom key's check added.

``python -m helpers.route._launch <vllm-router flags>`` parses the flags with vllm-router's own
parser (:func:`vllm_router.launch_router.parse_router_args`), so every flag means what
``vllm-router --help`` says, and starts its Rust router the way ``vllm-router`` does. One
addition: with the replicas' key in ``VLLM_COURSE_ROUTER_API_KEY`` (never on the command line), the
router sends it to the replicas and checks each client's bearer token against the replicas'
``/v1/models`` (vllm-router's ``api_key_validation_urls``, which its command line does not
expose); see :func:`helpers.route.command.build_router_launch` for why both.

It does not retitle the process (vllm-router's launcher calls it ``vllm::router``), so the
course's process bookkeeping (:func:`helpers.serve.group.name_of`) and its tests still find it
by its command line. Started by :mod:`helpers.route.router`; nothing else imports it.
"""

from __future__ import annotations

import os
import sys

from helpers.route.command import KEY_ENV


def run_router(argv: list[str]) -> int:
    from vllm_router.launch_router import parse_router_args
    from vllm_router.router import Router

    args = parse_router_args(argv)
    key = os.environ.pop(KEY_ENV, None)  # popped: nothing the router starts inherits it
    if key:
        args.api_key = key  # what vllm-router sends to the replicas
        # Each replica's /v1/models answers 200 only to the key (helpers.serve.key_guard); the router
        # tries them in turn, so one dead replica does not lock the class out.
        args.api_key_validation_urls = [f"{url.rstrip('/')}/v1/models" for url in args.worker_urls]
    args._validate_router_args()
    Router.from_args(args).start()  # blocks until SIGINT / SIGTERM
    return 0


if __name__ == "__main__":
    sys.exit(run_router(sys.argv[1:]))
