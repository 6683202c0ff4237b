"""Several vLLM servers started at once: each checked and launched, then all watched until ready.

Where a lesson needs two servers up together (lab 1's two settings, notebook 06's replicas), a
CPU starts them at once. A start there is mostly one process at a time importing vLLM on one
core: the API server, then the engine process it spawns (vLLM's CPU build uses ``spawn``, so
the engine imports everything again), about 8 s each on a 2-core EPYC. Two starts launched
together keep both cores busy; ``scripts/bench_start_together.py`` measures what that saves.

On a GPU they start one after the other, as before: vLLM measures the GPU's free memory at
start-up and checks that its ``gpu_memory_utilization`` share is free, and this course has only
validated that with one server starting at a time.

Every check runs before the first launch, the memory check counting the servers before it; a
start that fails or is interrupted stops them all, so none is left behind (a second Ctrl-C during
that clean-up stops the rest at once: :func:`helpers.serve.process.stop_each`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from helpers.serve import preflight, process, standby
from helpers.serve.server import POLL_S, STARTING_GRACE_S, VLLMServer, progress_printer


def starts_at_once(servers: Sequence[VLLMServer]) -> bool:
    """Whether :func:`start_together` launches these servers at once (all on a CPU) or one after the other.
    Asked before launch too, where a server has not yet chosen its device: then it is chosen the same way."""
    return all((server.device or preflight.choose_device(server.config)) == "cpu" for server in servers)


def start_together(servers: Sequence[VLLMServer], *, labels: Sequence[str] | None = None,
                   quiet: bool = False, ahead: bool = False) -> list[VLLMServer]:
    """Start ``servers`` (created, not started) at once on a CPU, one after the other on a GPU;
    return them once all are ready. ``labels`` prefix each one's progress lines (default
    "server 1: ", ...). Raises as ``start()`` does; then none of them is left running.
    ``ahead``: they are started ahead (:func:`helpers.serve.ahead.start_ahead`), beside any standing by.

    >>> a, b = start_together([VLLMServer(max_num_seqs=8), VLLMServer(max_num_seqs=64)])   # doctest: +SKIP
    """
    servers = list(servers)
    labels = list(labels) if labels is not None else [f"server {i + 1}" for i in range(len(servers))]
    if len(labels) != len(servers):
        raise ValueError(f"one label per server: got {len(labels)} labels for {len(servers)} servers.")
    for server in servers:  # before the try: a server already running must not be stopped by this refusal
        server.check_not_started()
    if not ahead:
        standby.check_none_passed_over(servers)
    began = time.monotonic()
    says = [(lambda text: None) if quiet else progress_printer(began, f"{label}: ") for label in labels]
    try:
        with process.interruptible():  # Ctrl-C in a cell with ``await`` too
            pending = [(server, say) for server, say in zip(servers, says) if not standby.hand_over(server, say)]
            starting_with = 0.0
            for server, say in pending:
                server.check_before_launch(say, starting_with)
                if server.device == "cpu":
                    starting_with += preflight.cpu_memory_gib(server.config)
            waves = [pending] if starts_at_once(servers) else [[pair] for pair in pending]
            for wave in waves:
                for server, say in wave:
                    server.launch_on_free_port(say)
                while wave := [(server, say) for server, say in wave if not server.poll_start(say)]:
                    time.sleep(POLL_S)
    except BaseException:
        process.stop_each(servers, timeout=STARTING_GRACE_S)  # a second Ctrl-C leaves none running either
        raise
    return servers
