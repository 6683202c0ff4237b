"""What a GPU server's start-up buys: compiled (vLLM's default) against ``--enforce-eager``.

By default vLLM's GPU engine compiles the model with torch.compile and captures CUDA graphs
while it starts: a slower start for cheaper steps afterwards. ``--enforce-eager`` skips both.
Notebook 05 starts one eager server beside its compiled baseline and measures both, on the
learner's GPU: :func:`compare_startup` turns the two measurements into a
:class:`StartupComparison`, which says when the slower start pays for itself: only where the
compiled server started later and served faster by more than the noise
(:func:`~helpers.tuning.comparison.within_noise`); its sentence says which other case it met.
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
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from helpers.files import write_atomically
from helpers.paths import COURSE_ROOT, build_dir
from helpers.tuning.comparison import NOISE, describe_noise, within_noise
from helpers.units import duration

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
        one, has caught up (both serving at full load); None when it is not faster, or a speed was
        not measured (0 tok/s: its load produced nothing). The arithmetic only: :meth:`describe`
        quotes it only where the speed-up is larger than the noise."""
        if not (_measured(self.compiled_tok_per_s) and _measured(self.eager_tok_per_s)):
            return None
        saved_per_token = 1 / self.eager_tok_per_s - 1 / self.compiled_tok_per_s
        if saved_per_token <= 0:
            return None
        return max(self.extra_start_s, 0.0) / saved_per_token

    def describe(self, noise: float = NOISE) -> str:
        """Both servers' numbers, then what compiling cost and bought, in the case the numbers fall in.

        >>> c = StartupComparison("GPU", None, "m", "load", 40.0, 55.0, 9000.0, 3000.0, "2026-12-01")
        >>> print(c.describe())
        Compiled (the default): ready in 40.0 s, 9,000 output tok/s. Eager (--enforce-eager): ready in 55.0 s, 3,000 output tok/s. Compiling cost no start-up time (the compiled server was ready 15.0 s sooner) and made the load 3.00x as fast: nothing to pay back.
        """
        text = (f"Compiled (the default): {_numbers(self.compiled_start_s, self.compiled_tok_per_s)}. "
                f"Eager (--enforce-eager): {_numbers(self.eager_start_s, self.eager_tok_per_s)}. ")
        missing = [f"the {name} server's {what}"
                   for name, start_s, tok_s in (("compiled", self.compiled_start_s, self.compiled_tok_per_s),
                                                ("eager", self.eager_start_s, self.eager_tok_per_s))
                   for what, value in (("start time", start_s), ("output tok/s", tok_s)) if not _measured(value)]
        if missing:
            return text + (f"Not measured: {' and '.join(missing)} (a load that made no output tokens, or a server "
                           "that never started), so there is nothing to compare.")
        extra, speedup = self.extra_start_s, self.compiled_tok_per_s / self.eager_tok_per_s
        same_speed = within_noise(speedup, noise)
        if same_speed:
            made = f"left the load's speed within the noise ({speedup:.2f}x; {describe_noise(noise)})"
        else:
            made = f"made the load {speedup:.2f}x as fast" + (", slower" if speedup < 1 else "")
        if extra <= 0:  # both starts are rounded to 0.1 s, so equal starts compare equal
            when = f"both were ready in {self.eager_start_s:.1f} s" if extra == 0 else f"the compiled server was ready {-extra:.1f} s sooner"
            bought = "nothing to pay back" if speedup > 1 or same_speed else "here it bought no speed"
            return text + f"Compiling cost no start-up time ({when}) and {made}: {bought}."
        text += f"Compiling cost {extra:.1f} s of start-up and {made}"
        if same_speed or speedup < 1:
            return text + ", so no measured speed-up pays that start back."
        tokens = self.break_even_tokens
        return (text + f"; it pays for itself after about {tokens:,.0f} output tokens at this load "
                f"({duration(tokens / self.compiled_tok_per_s)} of busy serving).")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _measured(value: Any) -> bool:
    """A start time or speed that was measured: a positive finite number (0 tok/s: the load made nothing)."""
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _numbers(start_s: Any, tok_s: Any) -> str:
    ready = f"ready in {start_s:.1f} s" if _measured(start_s) else "start time not measured"
    speed = f"{tok_s:,.0f} output tok/s" if _measured(tok_s) else "no output tok/s measured"
    return f"{ready}, {speed}"


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
