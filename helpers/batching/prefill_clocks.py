"""Lone prompts' prefill timed on two clocks at once: the server's and the client's.

Notebook 04 times its prefill pair (a long and a short prompt, each alone) on the server's clock,
vLLM's ``request_prefill_time_seconds`` (from the engine scheduling the request to its first token),
because on a 2-core CPU the client can be starved of CPU and see tokens late. On the H200 (vLLM 0.26,
2026-12-05) that clock read almost no difference between the two prompts: 0.8 ms for the 768 extra
tokens of a 1,024- against a 256-token prompt on Llama-3.1-8B's shape, where about 15 GFLOP a token
makes at least 12 ms at the GPU's dense bf16 peak, and nothing at all on 8-slot servers
(``results/gpu/README.md``). :func:`time_lone_prompts` sends lone prompts of several lengths and reads
both clocks around each one, so the two can be compared on any machine: the client's time to first
token holds the server's prefill and adds what every request pays alike (HTTP, the API server, the
queue), so the slope between lengths should agree where both clocks are right.

Used by ``scripts/bench_prefill_clocks.py``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helpers import validate
from helpers.batching.measure import _send, _specs, send_on_server_clock

CLOCKS = ("server", "client")


@dataclass
class PrefillClocks:
    """Seconds to each lone prompt's first token, per prompt length, on each clock (None: the server
    published no timing for that request)."""

    server: dict[int, list[float | None]] = field(default_factory=dict)
    client: dict[int, list[float]] = field(default_factory=dict)
    failed: int = 0  # requests that failed (left out)

    def median_s(self, clock: str, length: int) -> float | None:
        """The median of one clock's timings of one length, or None where it has none.

        >>> PrefillClocks(server={32: [0.1, 0.3, None]}).median_s("server", 32)
        0.2
        """
        values = [v for v in getattr(self, clock).get(length, []) if v is not None]
        return statistics.median(values) if values else None

    def slope_s(self, clock: str) -> float | None:
        """Seconds a prompt token on this clock: the longest prompt's median minus the shortest's, over
        the tokens between them (what both pay alike cancels); None without both medians.

        >>> clocks = PrefillClocks(server={32: [0.010], 512: [0.010]}, client={32: [0.020], 512: [0.068]})
        >>> clocks.slope_s("server"), round(clocks.slope_s("client") * 1e6)
        (0.0, 100)
        """
        lengths = sorted(getattr(self, clock))
        if len(lengths) < 2:
            return None
        short, long = self.median_s(clock, lengths[0]), self.median_s(clock, lengths[-1])
        return None if short is None or long is None else (long - short) / (lengths[-1] - lengths[0])

    def table(self) -> str:
        """Each length's median on both clocks in ms, and each clock's slope in microseconds a token.

        >>> print(PrefillClocks(server={32: [0.010], 512: [0.010]}, client={32: [0.020], 512: [0.068]}).table())
        prompt tokens         server ms    client ms
        32                       10.000       20.000
        512                      10.000       68.000
        slope (us a token)        0.000      100.000
        """
        def row(label: object, values: Sequence[float | None], scale: float) -> str:
            return f"{label!s:<18}" + "".join(f"{'-':>13}" if v is None else f"{scale * v:>13.3f}" for v in values)

        rows = [f"{'prompt tokens':<18}{'server ms':>13}{'client ms':>13}"]
        for length in sorted(set(self.server) | set(self.client)):
            rows.append(row(length, [self.median_s(clock, length) for clock in CLOCKS], 1e3))
        rows.append(row("slope (us a token)", [self.slope_s(clock) for clock in CLOCKS], 1e6))
        return "\n".join(rows)


async def time_lone_prompts(server: Any, lengths: Sequence[int] = (256, 1024), repeats: int = 3,
                            seed: int = 0) -> PrefillClocks:
    """Send each prompt length alone, one output token, ``repeats`` times (the order of lengths flipped every
    repeat, so a slow spell lands on all of them), and time each on the server's and the client's clock.

    A short warm-up request goes first and is not counted. Bounded: ``len(lengths) * repeats + 1`` requests, one
    at a time, to the server given (127.0.0.1 in the course). Prompts are random token ids: the prefix cache has
    never seen them."""
    lengths = validate.positive_ints(lengths, "lengths", hint="They are prompt lengths in tokens, e.g. (256, 1024).")
    repeats = validate.positive_int(repeats, "repeats")
    rng = np.random.default_rng(seed)
    await _send(server, _specs([16], [2], rng), "warm-up")
    clocks = PrefillClocks()
    for repeat in range(repeats):
        for length in (lengths if repeat % 2 == 0 else list(reversed(lengths))):
            (record,), server_s = await send_on_server_clock(server, _specs([length], [1], rng),
                                                              f"prefill {length} tokens", "request_prefill_time_seconds")
            if not record.ok or record.ttft_s is None:
                clocks.failed += 1
                continue
            clocks.server.setdefault(length, []).append(server_s)
            clocks.client.setdefault(length, []).append(record.ttft_s)
    return clocks
