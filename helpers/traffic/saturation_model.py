"""The request rate past which the queue grows without bound, predicted from the step-time model.

The second lab (``labs/02_serving_real_traffic.ipynb``) sends open-loop traffic at rising rates and
measures where the waiting queue starts to grow. This module predicts that rate from the clock of
notebook 04 (`helpers.batching.step_time.StepTimeModel`) in two ways, and says which term of the
clock would have to change to explain a measured rate:

- `saturation_capacity`: on paper, with the share of a step each term takes at saturation;
- `queue_growth` and `predict_saturation_rate`: by simulating seeded open-loop arrivals
  (`helpers.load.arrivals.arrival_times`) through `helpers.batching.sim.simulate_continuous`;
- `explain_saturation_gap`: "to match, decode_seq_s would have to be 1.3x, or overhead_s 1.6x".

A workload is a mix of prompt lengths and output lengths, each cycled over the requests (the lab's:
`helpers.load.workload.LAB_PROMPT_LENS`, 64 output tokens). Pure: no I/O; every run is seeded.

Where the two answers differ: the paper rate is the long-run limit of a batch that is always full.
A simulation starts empty (the ramp: its first max_num_seqs requests find free slots at any rate)
and needs an overload of about ``growth_threshold`` before it calls the queue growing, so with
evenly spaced arrivals (burstiness inf) it lands 1.8% above the paper rate. With Poisson arrivals
the queue comes and goes even below capacity, and near capacity a finite run's drift hides in a
random walk, so one seed's answer scatters around the paper rate: over eight seeds 0.79-1.05 of
it at 300 requests, 0.94-1.05 at 1,000, 0.98-1.04 at 3,000; at burstiness 0.5, 0.65-1.08 at
300. A lab measurement of one run per rate scatters alike: simulate a few seeds with the lab's
number of requests to see how far. The paper rate also approximates the steps a prompt's chunks
take (see `saturation_capacity`); the simulation counts them. The paper rate is also what an
overloaded engine completes per second, so it compares with a measured completion rate past
saturation as well as with the rate where the queue starts to grow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from helpers import units, validate
from helpers.batching.sim import simulate_continuous
from helpers.batching.step_time import StepTimeModel
from helpers.batching.trace import BatchRequest
from helpers.load.arrivals import POISSON, arrival_times
from helpers.load.workload import DEFAULT_OUTPUT_TOKENS, LAB_PROMPT_LENS

TERMS = ("overhead_s", "prefill_token_s", "decode_seq_s")  # the clock's three costs, as StepTimeModel names them


@dataclass(frozen=True)
class SaturationCapacity:
    """The highest request rate a workload can sustain, and how a step's time splits at that rate."""

    rate_per_s: float  # requests per second
    requests_per_step: float  # requests finished per engine step at saturation
    step_s: float  # the mean step's seconds at saturation
    overhead_share: float  # 0-1 of step_s: overhead_s
    prefill_share: float  # 0-1 of step_s: prefill_token_s x prompt tokens
    decode_share: float  # 0-1 of step_s: decode_seq_s x decoding sequences
    bound: str  # what runs out first: "max_num_seqs" (slots) or "max_num_batched_tokens" (budget)
    prefill_steps: float  # mean steps a prompt takes (its chunks)

    def describe(self) -> str:
        """One sentence for the lab: the rate, what bounds it, and each term's share of a step."""
        return (f"{self.rate_per_s:.3g} requests/s, bounded by {self.bound}; a step of {units.duration(self.step_s)} "
                f"is {units.share(self.overhead_share)} overhead, {units.share(self.prefill_share)} prefill and "
                f"{units.share(self.decode_share)} decode")


def saturation_capacity(model: StepTimeModel, max_num_seqs: int, prompt_lens: Sequence[int] = LAB_PROMPT_LENS,
                        output_lens: int | Sequence[int] = DEFAULT_OUTPUT_TOKENS) -> SaturationCapacity:
    """The highest sustainable request rate of a workload, on paper.

    At saturation the waiting queue never empties, so each step refills whatever the last one
    freed, and one of two things runs out first (N = max_num_seqs, B = max_num_batched_tokens,
    P and O a request's prompt and output tokens, a bar their mean over the mix):

    - slots: all N sequences run in every step. A request holds its slot for c prefill steps
      (its prompt's chunks; the last one also samples its first token) and then O - 1 decode
      steps of one token each, so N slots finish N / (c + O - 1) requests a step (c, O averaged).
    - the budget: a request needs P + O - 1 scheduled tokens in all (its prompt, one per decode
      step) and a step schedules at most B, so at most B / (P + O - 1) requests a step.

    Call the smaller r requests a step. The clock is linear in a step's work, so the mean step
    at saturation is overhead_s + prefill_token_s x r P + decode_seq_s x r (O - 1), and the rate
    is r / step. Put per request: each costs overhead_s / r (its share of every step's fixed
    cost) + prefill_token_s x P + decode_seq_s x (O - 1) seconds of engine time; the three
    parts are the shares of a step each term takes.

    Chunks: a prompt shares its step with up to N - 1 decoding sequences of one token each, so
    c = ceil(P / (B - N + 1)). This assumes one prompt at a time in a step; when several start in
    the same step they split the budget and take more steps, which only the simulation counts.

    With no prefill cost and a large budget, c = 1 and the rate is N / (O x overhead_s +
    N (O - 1) x decode_seq_s): N / (O x step_seconds(0, N)) but for one decode a request, since
    its first token comes out of its prefill step.

    >>> m = StepTimeModel(overhead_s=0.01, prefill_token_s=0.0, decode_seq_s=0.001)
    >>> round(saturation_capacity(m, 10, (16,), 11).rate_per_s, 3)  # 10 / (11 x 0.01 + 10 x 10 x 0.001)
    47.619
    >>> saturation_capacity(StepTimeModel(), 8).describe()
    '1.63 requests/s, bounded by max_num_seqs; a step of 76.8 ms is 41% overhead, 25% prefill and 34% decode'
    """
    model, max_num_seqs, prompts, outputs = _check_workload(model, max_num_seqs, prompt_lens, output_lens)
    budget = model.max_num_batched_tokens
    mean_prompt, mean_output = sum(prompts) / len(prompts), sum(outputs) / len(outputs)
    chunk = max(1, budget - (max_num_seqs - 1))  # prompt tokens left in a step once the decoders took theirs
    prefill_steps = sum(math.ceil(p / chunk) for p in prompts) / len(prompts)
    by_slots = max_num_seqs / (prefill_steps + mean_output - 1)
    by_budget = budget / (mean_prompt + mean_output - 1)
    per_step = min(by_slots, by_budget)
    parts = (model.overhead_s, model.prefill_token_s * per_step * mean_prompt,
             model.decode_seq_s * per_step * (mean_output - 1))
    step_s = sum(parts)
    if step_s <= 0:
        raise validate.InvalidArgumentError(
            "the model's steps take no time (overhead_s, prefill_token_s and decode_seq_s are all 0), so any rate is "
            "sustainable; pass a fitted StepTimeModel (helpers.batching.step_time.fit_step_time_model).")
    return SaturationCapacity(per_step / step_s, per_step, step_s, *(p / step_s for p in parts),
                              "max_num_seqs" if by_slots <= by_budget else "max_num_batched_tokens", prefill_steps)


@dataclass(frozen=True)
class QueueGrowth:
    """One simulated open-loop run: does the waiting queue grow?"""

    rate_per_s: float  # the offered rate, requests per second
    growth: float  # seconds of extra queue wait per second of arrivals, last third vs middle third
    grows: bool  # growth > the threshold it was judged with
    middle_wait_s: float  # mean queue wait of the middle third of requests (by arrival)
    last_wait_s: float  # mean queue wait of the last third
    num_requests: int


def queue_growth(model: StepTimeModel, max_num_seqs: int, rate_per_s: float,
                 prompt_lens: Sequence[int] = LAB_PROMPT_LENS, output_lens: int | Sequence[int] = DEFAULT_OUTPUT_TOKENS,
                 *, burstiness: float = POISSON, seed: int = 0, num_requests: int | None = None,
                 growth_threshold: float = 0.02) -> QueueGrowth:
    """Simulate ``num_requests`` open-loop arrivals at ``rate_per_s`` and judge whether the queue grows.

    The criterion: growth = (mean queue wait of the last third of requests - that of the middle
    third) / (the mean arrival time of the last third - that of the middle third). Overloaded by
    a factor x = rate / capacity, request k arrives at k / rate but starts at about k / capacity,
    so the wait grows by x - 1 seconds per second of arrivals (requests complete at rate / (1 +
    growth)); below capacity it stays put. The first third is left out: the engine starts empty,
    and its first max_num_seqs requests find free slots at any rate. The queue grows when growth
    > growth_threshold, so overloads below it (2% by default) go unseen.
    num_requests defaults to max(300, 10 x max_num_seqs), so the ramp ends before the middle third.

    >>> m = StepTimeModel(overhead_s=0.01, prefill_token_s=0.0, decode_seq_s=0.0)  # 80 requests/s
    >>> [queue_growth(m, 8, r, (16,), 10, burstiness=float("inf")).grows for r in (70.0, 90.0)]
    [False, True]
    """
    model, max_num_seqs, prompts, outputs = _check_workload(model, max_num_seqs, prompt_lens, output_lens)
    rate_per_s = validate.positive_number(rate_per_s, "rate_per_s", hint="It is requests per second, e.g. 2.0.")
    growth_threshold = validate.positive_number(growth_threshold, "growth_threshold",
                                                hint="It is seconds of wait gained per second of traffic, e.g. 0.02.")
    seed = validate.non_negative_int(seed, "seed")
    n = max(300, 10 * max_num_seqs) if num_requests is None else validate.int_above(
        num_requests, "num_requests", 8, hint="A third of them must show the queue; 300 or more give a steady answer.")
    times = arrival_times(n, rate_per_s, burstiness, seed)
    trace = [BatchRequest(f"r{i:05d}", t, prompts[i % len(prompts)], outputs[i % len(outputs)])
             for i, t in enumerate(times)]
    done = sorted(simulate_continuous(trace, max_num_seqs, model).requests, key=lambda r: (r.arrival_s, r.request_id))
    third = n // 3
    middle, last = done[third:2 * third], done[-third:]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    middle_wait, last_wait = mean([r.queue_wait_s for r in middle]), mean([r.queue_wait_s for r in last])
    span = mean([r.arrival_s for r in last]) - mean([r.arrival_s for r in middle])
    growth = (last_wait - middle_wait) / span
    return QueueGrowth(rate_per_s, growth, growth > growth_threshold, middle_wait, last_wait, n)


@dataclass(frozen=True)
class SimulatedSaturation:
    """Where the simulated queue starts to grow: between low_per_s (it does not) and high_per_s (it does)."""

    rate_per_s: float  # the geometric middle of the bracket
    low_per_s: float
    high_per_s: float
    num_simulations: int
    capacity: SaturationCapacity  # the paper answer, for comparison

    @property
    def vs_paper(self) -> float:
        """The simulated rate over the paper rate: 1.02 is 2% above it."""
        return self.rate_per_s / self.capacity.rate_per_s


def predict_saturation_rate(model: StepTimeModel, max_num_seqs: int, prompt_lens: Sequence[int] = LAB_PROMPT_LENS,
                            output_lens: int | Sequence[int] = DEFAULT_OUTPUT_TOKENS, *, burstiness: float = POISSON,
                            seed: int = 0, num_requests: int | None = None, growth_threshold: float = 0.02,
                            rel_tol: float = 0.01, max_simulations: int = 16) -> SimulatedSaturation:
    """The rate where `queue_growth` starts to say "grows", by bracketing and bisecting.

    Starts from 0.8x and 1.25x the paper rate, widens by 2x until the lower rate's queue is
    stable and the higher one's grows, then halves the bracket (geometrically) until it is
    within rel_tol or max_simulations runs are spent; every run uses the same seed, so each rate
    sees the same arrival pattern, stretched. A bracket not found within max_simulations is an
    error. Cost: max_simulations x num_requests simulated requests at most.

    >>> m = StepTimeModel(overhead_s=0.01, prefill_token_s=0.0, decode_seq_s=0.0)
    >>> s = predict_saturation_rate(m, 8, (16,), 10, burstiness=float("inf"))
    >>> s.capacity.rate_per_s, 1.0 < s.vs_paper < 1.03
    (80.0, True)
    """
    capacity = saturation_capacity(model, max_num_seqs, prompt_lens, output_lens)
    rel_tol = validate.positive_number(rel_tol, "rel_tol", hint="It is the bracket's relative width, e.g. 0.01.")
    max_simulations = validate.positive_int(max_simulations, "max_simulations", hint="e.g. 16.")
    runs = 0

    def grows(rate: float) -> bool:
        nonlocal runs
        if runs >= max_simulations:
            raise validate.InvalidArgumentError(
                f"no bracket around the saturation rate within max_simulations={max_simulations} simulations "
                f"(last tried {rate:.3g} requests/s); pass a larger max_simulations.")
        runs += 1
        return queue_growth(model, max_num_seqs, rate, prompt_lens, output_lens, burstiness=burstiness, seed=seed,
                            num_requests=num_requests, growth_threshold=growth_threshold).grows

    low, high = 0.8 * capacity.rate_per_s, 1.25 * capacity.rate_per_s
    while grows(low):
        low, high = low / 2, low
    while not grows(high):
        low, high = high, high * 2
    while high / low - 1 > rel_tol and runs < max_simulations:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if grows(middle) else (middle, high)
    return SimulatedSaturation(math.sqrt(low * high), low, high, runs, capacity)


@dataclass(frozen=True)
class SaturationGap:
    """How far a measured saturation rate is from the model's, and what each term would need to close it."""

    measured_per_s: float
    predicted_per_s: float
    factors: dict[str, float | None]  # term -> the factor that alone matches; None: no positive factor can
    sentence: str


def explain_saturation_gap(measured_rate_per_s: float, model: StepTimeModel, max_num_seqs: int,
                           prompt_lens: Sequence[int] = LAB_PROMPT_LENS,
                           output_lens: int | Sequence[int] = DEFAULT_OUTPUT_TOKENS) -> SaturationGap:
    """Which term of the clock, changed alone by how much, makes the paper rate the measured one.

    A request's engine time at saturation is the sum of its three terms (`saturation_capacity`),
    each linear in its coefficient, and the measured rate asks for 1 / measured seconds in all;
    so a term must become (its part + the difference) / its part. A term that is 0, or would
    have to turn negative, cannot explain the gap alone (None). Terms are named smallest change first.

    >>> m = StepTimeModel(overhead_s=0.01, prefill_token_s=0.0, decode_seq_s=0.001)
    >>> gap = explain_saturation_gap(40.0, m, 10, (16,), 11)  # paper: 47.6/s, 0.011 s overhead + 0.010 s decode
    >>> round(gap.factors["overhead_s"], 3), round(gap.factors["decode_seq_s"], 3), gap.factors["prefill_token_s"]
    (1.364, 1.4, None)
    >>> gap.sentence
    'measured 40 requests/s, 16% below the 47.6 the step clock gives on paper (its three terms summed); to match, overhead_s would have to be 1.4x (10.0 ms -> 13.6 ms), or decode_seq_s 1.4x (1.00 ms -> 1.40 ms); prefill_token_s cannot (it is 0 in the model)'
    """
    measured = validate.positive_number(measured_rate_per_s, "measured_rate_per_s",
                                        hint="It is the measured saturation rate in requests per second (e.g. "
                                             "the completion rate of the lab's overloaded points).")
    capacity = saturation_capacity(model, max_num_seqs, prompt_lens, output_lens)
    request_s = 1 / capacity.rate_per_s  # engine seconds a request, its three parts in the shares
    missing = 1 / measured - request_s
    factors: dict[str, float | None] = {}
    for term, share in zip(TERMS, (capacity.overhead_share, capacity.prefill_share, capacity.decode_share)):
        part = share * request_s
        factors[term] = (part + missing) / part if part > 0 and part + missing > 0 else None
    able = sorted((t for t in TERMS if factors[t] is not None), key=lambda t: abs(math.log(factors[t])))
    changes = [f"{t} {'would have to be ' * (i == 0)}{units.factor(factors[t])} "
               f"({units.duration(getattr(model, t))} -> {units.duration(getattr(model, t) * factors[t])})"
               for i, t in enumerate(able)]
    unable = [f"{t} cannot ({'it is 0 in the model' if getattr(model, t) == 0 else 'it would have to be negative'})"
              for t in TERMS if factors[t] is None]
    off = measured / capacity.rate_per_s - 1
    # the closed form, not the simulation the lab prints as its prediction: the two differ by a few percent
    sentence = (f"measured {measured:.3g} requests/s, {units.share(abs(off))} {'below' if off < 0 else 'above'} "
                f"the {capacity.rate_per_s:.3g} the step clock gives on paper (its three terms summed)")
    if changes:
        sentence += "; to match, " + ", or ".join(changes)
    if unable:
        sentence += "; " + "; ".join(unable)
    return SaturationGap(measured, capacity.rate_per_s, factors, sentence)


def _check_workload(model: StepTimeModel, max_num_seqs: int, prompt_lens: Sequence[int],
                    output_lens: int | Sequence[int]) -> tuple[StepTimeModel, int, tuple[int, ...], tuple[int, ...]]:
    if not isinstance(model, StepTimeModel):
        raise validate.InvalidArgumentError(
            f"model must be a StepTimeModel, got {type(model).__name__}; pass helpers.batching.step_time."
            "StepTimeModel() or the fit of notebook 04 (fit_step_time_model).")
    max_num_seqs = validate.positive_int(max_num_seqs, "max_num_seqs",
                                         hint="It is how many sequences a step can hold (vLLM's --max-num-seqs).")
    prompts = validate.positive_ints(prompt_lens, "prompt_lens", hint="Prompt lengths are in tokens.")
    outputs = validate.positive_ints((output_lens,) if isinstance(output_lens, int) else output_lens, "output_lens",
                                     hint="Output lengths are in tokens, e.g. 64 or (32, 64).")
    return model, max_num_seqs, prompts, outputs
