"""Prefills timed on two clocks at once: the server's and the client's.

Notebook 04 times its prefill pair (a long and a short prompt, each alone) on the server's clock,
vLLM's ``request_prefill_time_seconds`` (from the engine scheduling the request to its first token),
because on a 2-core CPU the client can be starved of CPU and see tokens late. On the H200 (vLLM 0.26,
2026-12-05) that clock read 0.8 ms for the 768 extra tokens of a 1,024- against a 256-token prompt on
Llama-3.1-8B's shape, where about 16 GFLOP a token makes at least 12 ms at the GPU's dense bf16 peak.
:func:`time_prefills` reads both clocks around each prefill, so the two can be compared on any machine:
the client's time to first token holds the server's prefill and adds what every request pays alike
(HTTP, the API server, the queue), so the slope between lengths agrees where both clocks are right.

They agree, on the course's 2-core EPYC (2,824 against 2,828 us a prompt token) and on the H200 (the
same flat middle on both clocks: a lone prompt of 256-1,536 tokens takes 31-38 ms whatever its length on
vLLM's clock, 37-46 ms on the client's,
on SmolLM2 as on the 8B's shape). A lone prompt there is held to a fixed floor, not to the GPU's
arithmetic; ``groups`` sends several prompts at once, so that a prefill can fill the server's step budget
and be timed where the arithmetic is the limit.

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
    failed: int = 0  # sends (a prompt or a group) with a failed request (left out)

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


def prefill_shapes(lengths: Sequence[int], groups: Sequence[int]) -> list[tuple[int, int]]:
    """Every (length, group size) :func:`time_prefills` sends, checked before anything is: positive numbers, and no
    two shapes with the same prompt tokens (512 x 2 and 1,024 alone), whose timings would share a key.

    >>> prefill_shapes([256, 1024], [1, 8])
    [(256, 1), (1024, 1), (256, 8), (1024, 8)]
    """
    lengths = validate.positive_ints(lengths, "lengths", hint="They are prompt lengths in tokens, e.g. (256, 1024).")
    groups = validate.positive_ints(groups, "groups", hint="They are how many prompts go at once, e.g. (1, 8).")
    shapes = [(length, group) for group in groups for length in lengths]
    if len({length * group for length, group in shapes}) < len(shapes):
        raise validate.InvalidArgumentError(
            f"two shapes of lengths {list(lengths)} in groups {list(groups)} make the same number of prompt tokens: "
            "pick lengths and group sizes whose products differ.")
    return shapes


async def time_prefills(server: Any, lengths: Sequence[int] = (256, 1024), repeats: int = 3, seed: int = 0,
                        groups: Sequence[int] = (1,)) -> PrefillClocks:
    """Send each prompt length in each group size (1: alone; 8: eight prompts of that length at once), one output
    token each, ``repeats`` times (the order of shapes flipped every repeat, so a slow spell lands on all of them),
    and time each on the server's and the client's clock, keyed by the group's prompt tokens (length x group size).

    The client's time is the group's last first token after its send; the server's, the mean over the group's
    requests of vLLM's scheduled-to-first-token time (a group the engine splits over two steps reads less there than
    on the client's clock). A group that fills the server's step budget times the prefill where the GPU's arithmetic
    is the limit: on the H200 a lone prompt of 256-1,536 tokens is not (``results/gpu/README.md``, 2026-12-05).

    Every shape is sent once first, untimed (one-time costs of a new step size), after a short warm-up request.
    Bounded: ``len(lengths) * len(groups) * (repeats + 1) + 1`` sends, one at a time, of at most ``max(groups)``
    requests, to the server given (127.0.0.1 in the course). Prompts are random token ids: the prefix cache has never
    seen them. The shapes are checked first (:func:`prefill_shapes`)."""
    shapes = prefill_shapes(lengths, groups)
    repeats = validate.positive_int(repeats, "repeats")
    rng = np.random.default_rng(seed)
    await _send(server, _specs([16], [2], rng), "warm-up")
    for length, group in shapes:
        await _send(server, _specs([length] * group, [1] * group, rng), f"warm-up {group} x {length} tokens")
    clocks = PrefillClocks()
    for repeat in range(repeats):
        for length, group in (shapes if repeat % 2 == 0 else list(reversed(shapes))):
            batch, server_s = await send_on_server_clock(server, _specs([length] * group, [1] * group, rng),
                                                         f"prefill {group} x {length} tokens",
                                                         "request_prefill_time_seconds")
            if not all(record.ok and record.ttft_s is not None for record in batch):
                clocks.failed += 1
                continue
            clocks.server.setdefault(length * group, []).append(server_s)
            clocks.client.setdefault(length * group, []).append(max(record.ttft_s for record in batch))
    return clocks
