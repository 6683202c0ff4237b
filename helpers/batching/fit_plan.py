"""Which decode batches and which prefill pair notebook 04 times for its step-time fit, on which server, and why.

The fit predicts the lab at ``--max-num-seqs`` 8 and 64. Its per-sequence cost is the slope of
step time over batch size, and a slope timed at 1-8 sequences and extrapolated to 64 is only as
good as those few points. On an H200 it was noise: steps of 1, 4 and 8 sequences cost about the
same, the slope came out near zero, and notebook 04 predicted the lab's 8-vs-64 speed-up at 6.71x
where the lab measured 4.86x; lab 2's clock, timed at 1, 32 and 64 sequences, gave 4.1 ms a step at
64 against the 4.0 ms the lab's run implies (``results/gpu/README.md``, 2026-12-02).

So :func:`plan_step_fit` makes the timed batches reach the lab's high setting wherever that is
cheap (a GPU: a decode batch of 64 x 256 tokens takes about a second there), on a server of its
own started like the lab's (the burst demonstration's server has 8 slots and a small KV pool,
which 64 sequences of 256-token prompts would overflow), decoding the lab's own output length,
so that contexts are as long as the lab's. On a CPU it keeps the demonstration's server and
batches up to its cap: one batch of 64 costs tens of seconds a round there (estimated from the
reference clock at this machine's measured pace), with a second server start on top, beyond the
notebook's time budget; the plan says so in :attr:`FitPlan.reason`.

The prefill pair (:func:`choose_prefill_pair`): the fit charges a prompt token the difference
between a long and a short prompt's prefill, divided by their difference in length. On a GPU both
prompts must be above the largest step the server runs as a CUDA graph
(``helpers.serve.cuda_graphs``), or the difference is mostly graph against no graph: on the H200's
64-slot server a 32-token step ran in a graph and a 512-token one did not, 14.7 ms apart, which
charged a prompt token 0.030 ms where the 8-slot server (no graph for either) measured
0.001-0.007 (``results/gpu/README.md``, 2026-12-04).

Two more things on a GPU, both measured on the H200 (``results/gpu/README.md``, 2026-12-04). The same
step can cost servers of different ``max_num_seqs`` different times: 8 sequences took 1.95 ms a step on
an 8-slot server and 2.38 ms on a 64-slot one there (on an H100 on 2026-12-06 the other way round, 2.7
and 2.1 ms), so a clock timed on the 64-slot server alone predicted the lab at 8 about 24% low;
the plan therefore times the low setting's batches on the demonstration's 8-slot server too
(:attr:`FitPlan.low_batch_sizes`). And at 64 slots the engine's step (about 3 ms) is short enough that
the API server and the client, streaming 50 answers, can be the slower stage
(``helpers.batching.front_end``; :attr:`FitPlan.front_end`). On a CPU neither is timed: the
demonstration's server is the only one, and a step of tens of milliseconds leaves the front end far behind.

Everything here is pure except :func:`prefill_pair_for`, which reads a running server's log.

Taught in ``notebooks/04_continuous_batching.ipynb``; measured by
``helpers.batching.measure.measure_step_times``.

>>> gpu = plan_step_fit("cuda", demo_max_num_seqs=8, demo_output_len=384, lab_output_len=256)
>>> gpu.batch_sizes, gpu.low_batch_sizes, gpu.front_end
((1, 8, 32, 64), (1, 4, 8), True)
>>> plan_step_fit("cpu", demo_max_num_seqs=8, demo_output_len=48, lab_output_len=64).batch_sizes
(1, 4, 8)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from helpers import validate
from helpers.batching.sim import simulate_continuous
from helpers.batching.step_time import StepTimeModel
from helpers.batching.trace import BatchRequest
from helpers.serve.budget import budget_of
from helpers.serve.cuda_graphs import cuda_graph_tokens

FIT_PROMPT_LEN = 256  # tokens before each decoding sequence: about the lab's mean prompt (212) and its answer


@dataclass(frozen=True)
class FitPlan:
    """What to time for the step-time fit: decode batch sizes, their output length, and the server."""

    batch_sizes: tuple[int, ...]  # requests decoding together, one timing each
    output_len: int  # tokens each decoding request generates
    own_server: bool  # True: start a server at max_num_seqs for the fit; False: the demonstration's server
    max_num_seqs: int  # the fit server's cap (the demonstration's when own_server is False)
    reason: str  # one sentence, from the numbers: why these batches
    # Timed first on the demonstration's server, whose cap is the lab's low setting, for a clock of its own
    # (a GPU: a 64-slot server's step of 8 sequences was about 20% slower than an 8-slot server's); () elsewhere
    low_batch_sizes: tuple[int, ...] = ()
    front_end: bool = False  # time the API server's and the client's CPU per request and token (a GPU)

    def describe(self) -> str:
        """What will be timed, and why, for the notebook to print."""
        sizes = ", ".join(map(str, self.batch_sizes))
        where = (f"on a server of its own at max_num_seqs={self.max_num_seqs}" if self.own_server else
                 f"on the demonstration's server (max_num_seqs={self.max_num_seqs})")
        text = f"decode batches of {sizes} requests x {self.output_len} output tokens, {where}: {self.reason}"
        if self.low_batch_sizes:
            text += (f".\nFirst, batches of {', '.join(map(str, self.low_batch_sizes))} on the demonstration's server "
                     f"(max_num_seqs={max(self.low_batch_sizes)}), for the low setting's own clock: on a GPU the same "
                     "step can cost servers of different max_num_seqs different times, so each setting is "
                     "predicted with its own server's clock")
        if self.front_end:
            text += (".\nThen the front end: the API server's and this kernel's CPU time per request and per token "
                     "(on a GPU the engine's step can be shorter than streaming its tokens)")
        return text


def decode_batch_seconds(batch_size: int, output_len: int, model: StepTimeModel,
                         prompt_len: int = FIT_PROMPT_LEN) -> float:
    """Seconds one timed decode batch takes under ``model``: its prompts' prefill, then its decode steps.

    >>> round(decode_batch_seconds(1, 2, StepTimeModel(overhead_s=1.0, prefill_token_s=0.0, decode_seq_s=0.0)), 1)
    2.0
    """
    batch = [BatchRequest(f"b{i}", 0.0, prompt_len, output_len) for i in range(batch_size)]
    return simulate_continuous(batch, batch_size, model).summary.makespan_s


def plan_step_fit(device: str, *, demo_max_num_seqs: int, demo_output_len: int, lab_output_len: int,
                  lab_settings: Sequence[int] = (8, 64), pace_speed: float = 1.0,
                  reference: StepTimeModel | None = None) -> FitPlan:
    """The fit's batches for this device: up to the lab's high setting on a GPU, the demonstration's cap on a CPU.

    ``pace_speed``: this machine's pace over the reference CPU machine's
    (``helpers.load.pace.Pace.speed``); with ``reference`` (default: the reference machine's
    ``StepTimeModel``) it estimates what a batch at the lab's high setting would cost a CPU.

    >>> print(plan_step_fit("cpu", demo_max_num_seqs=8, demo_output_len=48, lab_output_len=64).reason)
    on a CPU one decode batch of 64 would take about 24 s a round here (the reference clock at this machine's pace), and a second server start on top, beyond this notebook's time budget: the fit times batches up to 8 on the demonstration's server and extrapolates to 64
    """
    validate.positive_int(demo_max_num_seqs, "demo_max_num_seqs")
    validate.int_above(demo_output_len, "demo_output_len", 1, hint="Timing a decode needs at least 2 tokens.")
    validate.int_above(lab_output_len, "lab_output_len", 1, hint="Timing a decode needs at least 2 tokens.")
    settings = validate.positive_ints(lab_settings, "lab_settings", hint="They are the lab's max_num_seqs, e.g. (8, 64).")
    low, high = min(settings), max(settings)
    if device == "cuda":
        sizes = tuple(sorted({1, low, high // 2, high}))
        reason = (f"on a GPU a step of 1-{low} sequences costs about the same, so a slope timed there and extrapolated "
                  f"to {high} is noise; timing up to {high} measures it, with the lab's {lab_output_len} output "
                  f"tokens a request")
        own = high > demo_max_num_seqs
        low_sizes = tuple(sorted({1, max(1, low // 2), low})) if own and demo_max_num_seqs == low else ()
        return FitPlan(sizes, lab_output_len, own_server=own, max_num_seqs=max(high, demo_max_num_seqs),
                       reason=reason, low_batch_sizes=low_sizes, front_end=True)
    speed = validate.positive_number(pace_speed, "pace_speed")
    sizes = tuple(sorted({1, max(1, demo_max_num_seqs // 2), demo_max_num_seqs}))
    if high <= demo_max_num_seqs:
        return FitPlan(sizes, demo_output_len, own_server=False, max_num_seqs=demo_max_num_seqs,
                       reason=f"the demonstration's server already reaches the lab's high setting ({high})")
    seconds = decode_batch_seconds(high, demo_output_len, reference or StepTimeModel()) / speed
    reason = (f"on a CPU one decode batch of {high} would take about {seconds:.0f} s a round here (the reference "
              f"clock at this machine's pace), and a second server start on top, beyond this notebook's time budget: "
              f"the fit times batches up to {demo_max_num_seqs} on the demonstration's server and extrapolates to {high}")
    return FitPlan(sizes, demo_output_len, own_server=False, max_num_seqs=demo_max_num_seqs, reason=reason)


DEFAULT_PREFILL_PAIR = (32, 512)  # the lab's longest prompt against a sixteenth of it


@dataclass(frozen=True)
class PrefillPair:
    """The two prefills whose times are subtracted, and why these: a short prompt alone against ``long_group``
    prompts of ``long`` tokens sent at once."""

    short: int  # tokens
    long: int  # tokens
    reason: str  # one sentence, from the server's numbers
    long_group: int = 1  # prompts of `long` tokens sent at once (a GPU: together they fill the step budget)

    @property
    def lens(self) -> tuple[int, int]:
        """(short, long), in tokens."""
        return self.short, self.long

    def describe(self) -> str:
        """What the prefill row will time, for the notebook to print."""
        if self.long_group > 1:
            return (f"prefill of {self.long_group} x {self.long}-token prompts at once "
                    f"({self.long_group * self.long:,} tokens) against a {self.short}-token prompt alone: {self.reason}")
        return f"prefill of a {self.long}- against a {self.short}-token prompt: {self.reason}"


def choose_prefill_pair(graph_tokens: int | None, *, step_budget_tokens: int,
                        max_model_len: int | None = None, on_gpu: bool = False,
                        max_num_seqs: int | None = None) -> PrefillPair:
    """32 against 512 tokens, unless the server runs the short one in a CUDA graph: then both above its graphs.

    ``graph_tokens``: the largest step the server captured a CUDA graph for (0 or None: none).
    Above it, the short prompt is the next power of two and the long one four times that, within
    the step budget (a prefill longer than it takes two steps) and ``max_model_len`` (room for one
    output token).

    ``on_gpu``: the long side becomes as many long prompts sent at once as fill the step budget (at most
    ``max_num_seqs``). On the H200 a lone prompt of 256 to 1,536 tokens took 31-38 ms whatever its length (vLLM's clock), on
    SmolLM2 as on an 8B model, a floor one prompt's arithmetic does not reach; the lab's burst fills whole steps,
    where it does (``results/gpu/README.md``, 2026-12-05).

    >>> choose_prefill_pair(128, step_budget_tokens=8192, max_model_len=8192).lens
    (256, 1024)
    >>> choose_prefill_pair(16, step_budget_tokens=8192).lens  # an 8-slot server: 32 is already outside
    (32, 512)
    >>> print(choose_prefill_pair(0, step_budget_tokens=2048).reason)
    no step runs in a CUDA graph on this server, so every prefill step pays the same launch costs
    >>> gpu = choose_prefill_pair(128, step_budget_tokens=8192, max_model_len=2048, on_gpu=True, max_num_seqs=64)
    >>> gpu.lens, gpu.long_group
    ((256, 1024), 8)
    >>> choose_prefill_pair(16, step_budget_tokens=8192, on_gpu=True, max_num_seqs=4).long_group  # the cap
    4
    """
    budget = validate.positive_int(step_budget_tokens, "step_budget_tokens")
    pair = _pair_above_graphs(graph_tokens, budget, max_model_len)
    if not on_gpu:
        return pair
    group = budget // pair.long
    if max_num_seqs is not None:  # a group never waits for a slot
        group = min(group, validate.positive_int(max_num_seqs, "max_num_seqs"))
    if group <= 1:
        return pair
    return PrefillPair(pair.short, pair.long, f"{pair.reason}; on a GPU one prompt alone sits under a fixed floor "
                                              f"(31-38 ms on vLLM's clock for 256-1,536 tokens on an H200), so the long side is "
                                              f"{group} prompts at once, {group * pair.long:,} tokens of the "
                                              f"{budget:,}-token step budget, as the lab's burst fills its steps, "
                                              f"timed to the last one's first token", long_group=group)


def _pair_above_graphs(graph_tokens: int | None, budget: int, max_model_len: int | None) -> PrefillPair:
    short, long = DEFAULT_PREFILL_PAIR
    if not graph_tokens:
        return PrefillPair(short, long, "no step runs in a CUDA graph on this server, so every prefill step pays "
                                        "the same launch costs")
    if graph_tokens < short:
        return PrefillPair(short, long, f"both above the largest step this server runs as a CUDA graph "
                                        f"({graph_tokens} tokens)")
    above = 1 << graph_tokens.bit_length()
    longest = min([4 * above, budget] + ([max_model_len - 1] if max_model_len else []))  # one token left to answer
    if longest < 2 * above:
        return PrefillPair(short, long, f"the server runs steps of up to {graph_tokens} tokens as CUDA graphs, and "
                                        f"a pair above that does not fit its step budget ({budget:,} tokens) and "
                                        f"max_model_len; the {short}-token step runs in a graph, so the difference "
                                        f"also holds what the graph saves")
    return PrefillPair(above, longest, f"this server runs steps of up to {graph_tokens} tokens as CUDA graphs, which "
                                       f"skip most of the work of launching kernels; with both prompts above that, "
                                       f"their difference is only what the extra tokens cost")


def prefill_pair_for(server: Any) -> PrefillPair:
    """:func:`choose_prefill_pair` for a running server, from its log (graphs, step budget), KV report, device
    and cap."""
    kv = getattr(server, "kv_cache", None)
    return choose_prefill_pair(cuda_graph_tokens(server.log_text()), step_budget_tokens=budget_of(server),
                               max_model_len=getattr(kv, "max_model_len", None),
                               on_gpu=getattr(server, "device", None) == "cuda",
                               max_num_seqs=getattr(getattr(server, "config", None), "max_num_seqs", None))
