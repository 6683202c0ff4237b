"""What a GPU server's start-up buys: compiled (vLLM's default) against ``--enforce-eager``.

By default vLLM's GPU engine compiles the model with torch.compile and captures CUDA graphs
while it starts: a slower start for cheaper steps afterwards. ``--enforce-eager`` skips both.
Notebook 05 starts one eager server beside its compiled baseline and measures both, on the
learner's GPU: :func:`compare_startup` turns the two measurements into a
:class:`StartupComparison`, which says when the slower start pays for itself.
vLLM's CPU build captures no CUDA graphs, so on a CPU the notebook shows the comparison
recorded on the course's reference GPU (:func:`recorded_startup`, ``results/gpu/startup.json``).

    >>> c = StartupComparison(machine="GPU", vllm_version="0.26.0", model="m", load="64 requests",
    ...                       compiled_start_s=100.0, eager_start_s=50.0,
    ...                       compiled_tok_per_s=9000.0, eager_tok_per_s=3000.0, measured_at="2026-12-01")
    >>> round(c.break_even_tokens)
    225000
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from helpers.files import write_atomically
from helpers.paths import COURSE_ROOT, build_dir

RECORDED = COURSE_ROOT / "results" / "gpu" / "startup.json"


@dataclass(frozen=True)
class StartupComparison:
    """Start times and output tokens/s of one load, on a compiled and an eager server."""

    machine: str
    vllm_version: str | None
    model: str
    load: str  # the load both served, in words
    compiled_start_s: float
    eager_start_s: float
    compiled_tok_per_s: float
    eager_tok_per_s: float
    measured_at: str  # ISO date of the compiled run

    @property
    def extra_start_s(self) -> float:
        return self.compiled_start_s - self.eager_start_s

    @property
    def break_even_tokens(self) -> float | None:
        """Output tokens after which the compiled server, started at the same moment as the eager
        one, has caught up (both serving at full load); None when it is not faster."""
        saved_per_token = 1 / self.eager_tok_per_s - 1 / self.compiled_tok_per_s
        if saved_per_token <= 0:
            return None
        return max(self.extra_start_s, 0.0) / saved_per_token

    def describe(self) -> str:
        speedup = self.compiled_tok_per_s / self.eager_tok_per_s
        text = (f"Compiled (the default): ready in {self.compiled_start_s:.0f} s, {self.compiled_tok_per_s:,.0f} output tok/s. "
                f"Eager (--enforce-eager): ready in {self.eager_start_s:.0f} s, {self.eager_tok_per_s:,.0f} output tok/s. "
                f"Compiling cost {self.extra_start_s:+.0f} s of start-up and made the load {speedup:.2f}x as fast")
        tokens = self.break_even_tokens
        if tokens is None:
            return text + ": here it bought nothing."
        busy_s = tokens / self.compiled_tok_per_s
        return (text + f"; it pays for itself after about {tokens:,.0f} output tokens at this load "
                f"({busy_s:.0f} s of busy serving).")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_startup(compiled: Any, compiled_start_s: float, eager: Any, eager_start_s: float) -> StartupComparison:
    """The comparison of two :class:`~helpers.tuning.measurement.Measurement` of the same load."""
    run = compiled.run
    cap = getattr(compiled, "max_num_seqs", None) or run.server.max_num_seqs  # the notebook sets the cap it read
    load = (f"{len(run.records)} requests at once, {run.settings.get('output_tokens', '?')} output tokens each, "
            + (f"max_num_seqs={cap}" if cap is not None else "max_num_seqs: vLLM's default"))
    return StartupComparison(
        machine=run.hardware, vllm_version=run.server.vllm_version, model=run.server.model, load=load,
        compiled_start_s=round(compiled_start_s, 1), eager_start_s=round(eager_start_s, 1),
        compiled_tok_per_s=round(compiled.summary.output_tok_per_s, 1),
        eager_tok_per_s=round(eager.summary.output_tok_per_s, 1),
        measured_at=run.started_at[:10])


def save_startup(comparison: StartupComparison) -> Path:
    """Write it to ``build/tuning/startup.json`` (the GPU reference run copies that file to
    ``results/gpu/startup.json``); return the path."""
    path = build_dir("tuning") / "startup.json"
    write_atomically(path, json.dumps(comparison.to_dict(), indent=2) + "\n")
    return path


def recorded_startup(path: Path = RECORDED) -> StartupComparison | None:
    """The comparison recorded on the course's reference GPU; None when there is none."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    known = {f.name for f in fields(StartupComparison)}
    return StartupComparison(**{key: value for key, value in data.items() if key in known})
