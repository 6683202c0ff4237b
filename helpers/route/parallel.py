"""Where one GPU is not enough: tensor and data parallelism as arithmetic, from a model's config.

Two ways to put a model on several GPUs, in vLLM's words:

- **tensor parallelism** (``--tensor-parallel-size T``): every layer's weight matrices are cut
  into T slices, one a GPU; the GPUs compute each layer together, so each holds 1/T of the
  weights and of the KV heads, and after every layer's attention and again after its MLP they
  add their partial results together (an *all-reduce*: each GPU sends and receives a share of a
  ``hidden_size`` vector per token), once more after the embedding (its vocabulary is cut too), and
  the first GPU gathers the logits' slices to sample. One engine, one batch, T GPUs.
- **data parallelism** (``--data-parallel-size D``, or D replicas behind a router): D whole
  copies of the model, each on its own GPU(s), each with its own batch and KV pool. No traffic
  between them for a dense model; each must hold all the weights.

:func:`tensor_parallel_plan` works out, per GPU: weight bytes, KV heads and KV bytes per token,
the KV room a memory budget leaves, and the all-reduces a step needs; :func:`data_parallel_plan`
the same for D copies. vLLM cuts attention by heads, so ``num_attention_heads`` must divide by
T (SmolLM2's 9 heads do not split over 2 GPUs: the plan says so); KV heads fewer than T are
copied, not cut. Leaves out: activations and CUDA graphs (a fixed ``overhead_gib``), pipeline
parallelism, the vocabulary padding vLLM adds, the logits' gather (vocab/T values a token from each
GPU, to the first: ``vllm/model_executor/layers/logits_processor.py``), and the time an all-reduce takes (it depends on
the link, NVLink or PCIe, and is mostly latency at decode sizes). Taught in
``notebooks/06_beyond_one_server.ipynb``.

Example::

    >>> plan = tensor_parallel_plan(LLAMA_31_8B, 2, gpu_gib=24, utilization=0.92)
    >>> round(plan.weight_gib, 2), plan.kv_heads_per_gpu, plan.kv_bytes_per_token_per_gpu
    (7.48, 4, 65536)
    >>> plan.allreduces_per_step, plan.allreduce_bytes_per_token
    (65, 532480)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from helpers import validate
from helpers.paged.kv_math import kv_bytes_per_token
from helpers.tuning.arithmetic import GIB, LLAMA_31_8B, LLAMA_31_70B, count_parameters

__all__ = ["LLAMA_31_8B", "LLAMA_31_70B", "ParallelPlan", "data_parallel_plan", "describe_plan", "tensor_parallel_plan"]

ALLREDUCES_PER_LAYER = 2  # after attention's output projection, after the MLP's down projection
# and one a step outside the layers: VocabParallelEmbedding sums its vocabulary slices' rows (vLLM 0.26 and 0.32)
ALLREDUCES_OUTSIDE_LAYERS = 1


@dataclass(frozen=True)
class ParallelPlan:
    """One way of placing a model on ``num_gpus`` GPUs, per GPU (sizes in bytes unless named GiB)."""

    scheme: str  # "TP=2", "DP=4", "1 GPU"
    num_gpus: int
    weight_bytes_per_gpu: int
    kv_heads_per_gpu: int
    kv_bytes_per_token_per_gpu: int
    kv_room_gib_per_gpu: float  # budget - weights - overhead, 0 when the weights do not fit
    kv_tokens_per_engine: int  # tokens of context every engine's pool holds (TP: one engine of T GPUs)
    num_engines: int  # batches that run side by side: 1 for TP, D for DP
    allreduces_per_step: int  # all-reduces one engine step needs (0 without TP)
    allreduce_bytes_per_token: int  # bytes all-reduced per token per step (the vectors added up)
    problem: str | None = None  # why this plan cannot run, if it cannot

    @property
    def weight_gib(self) -> float:
        return self.weight_bytes_per_gpu / GIB

    @property
    def fits(self) -> bool:
        return self.problem is None and self.kv_room_gib_per_gpu > 0

    def allreduce_bytes_per_step(self, batch_tokens: int) -> int:
        """Bytes all-reduced in one step over ``batch_tokens`` tokens (one a running request when decoding).

        >>> tensor_parallel_plan(LLAMA_31_8B, 2).allreduce_bytes_per_step(64) / 2**20
        32.5
        """
        return self.allreduce_bytes_per_token * validate.positive_int(batch_tokens, "batch_tokens")

    def row(self) -> dict[str, Any]:
        """The plan as a table row (GiB rounded to 0.01); a plan that cannot run shows "-" for what it would have
        (its weights stay: they are why it does not fit) and says why under "problem".

        >>> row = tensor_parallel_plan(LLAMA_31_70B, 1, gpu_gib=141).row()
        >>> row["weights GiB/GPU"], row["tokens per engine"], row["problem"]
        (131.42, '-', 'does not fit: the weights leave nothing for the KV cache')
        """
        def unless_cut(value: Any) -> Any:  # a layout that cannot run has no such figure
            return "-" if self.problem else value

        problem = self.problem or ("" if self.fits else "does not fit: the weights leave nothing for the KV cache")
        return {"scheme": self.scheme, "GPUs": self.num_gpus,
                "weights GiB/GPU": unless_cut(round(self.weight_gib, 2)),
                "KV bytes/token/GPU": unless_cut(self.kv_bytes_per_token_per_gpu),
                "KV room GiB/GPU": unless_cut(round(self.kv_room_gib_per_gpu, 2)),
                "tokens per engine": "-" if problem else self.kv_tokens_per_engine, "engines": self.num_engines,
                "all-reduces/step": unless_cut(self.allreduces_per_step), "problem": problem}


def _shape(config: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    config = config.get("text_config") or config
    hidden, layers, heads = (int(config[key]) for key in ("hidden_size", "num_hidden_layers", "num_attention_heads"))
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    return hidden, layers, heads, kv_heads, head_dim


def tensor_parallel_plan(config: Mapping[str, Any], tp: int, *, gpu_gib: float = 80.0, utilization: float = 0.9,
                         dtype_bytes: int = 2, overhead_gib: float = 1.0) -> ParallelPlan:
    """The model cut over ``tp`` GPUs (``--tensor-parallel-size tp``), on GPUs of ``gpu_gib`` at ``utilization``.

    >>> tensor_parallel_plan(LLAMA_31_70B, 1, gpu_gib=141).fits, tensor_parallel_plan(LLAMA_31_70B, 2, gpu_gib=141).fits
    (False, True)
    >>> tensor_parallel_plan({"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
    ...                       "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152}, 2).problem
    '9 attention heads do not divide into 2 equal slices (vLLM cuts attention by heads)'
    """
    tp = validate.positive_int(tp, "tp", hint="It is --tensor-parallel-size, the GPUs one engine spans.")
    hidden, layers, heads, kv_heads, _ = _shape(config)
    problem = None
    if heads % tp:
        problem = f"{heads} attention heads do not divide into {tp} equal slices (vLLM cuts attention by heads)"
    # fewer KV heads than GPUs: each GPU keeps a copy of one KV head instead of a slice of it
    kv_heads_here = max(1, kv_heads // tp)
    weights = count_parameters(config) * dtype_bytes // tp  # norms (a few KiB) are copied, not cut: left out
    kv_per_token = kv_bytes_per_token({**(config.get("text_config") or config), "num_key_value_heads": kv_heads_here},
                                      dtype_bytes=dtype_bytes)
    room = max(0.0, gpu_gib * utilization - weights / GIB - overhead_gib)
    tokens = int(room * GIB // kv_per_token)
    allreduces = ALLREDUCES_PER_LAYER * layers + ALLREDUCES_OUTSIDE_LAYERS if tp > 1 else 0
    return ParallelPlan("1 GPU" if tp == 1 else f"TP={tp}", tp, weights, kv_heads_here, kv_per_token, room,
                        tokens if problem is None else 0, 1, allreduces, allreduces * hidden * dtype_bytes, problem)


def data_parallel_plan(config: Mapping[str, Any], dp: int, *, gpu_gib: float = 80.0, utilization: float = 0.9,
                       dtype_bytes: int = 2, overhead_gib: float = 1.0) -> ParallelPlan:
    """``dp`` whole copies of the model, one a GPU (``--data-parallel-size dp``, or replicas behind a router).

    >>> plan = data_parallel_plan(LLAMA_31_8B, 4, gpu_gib=24, utilization=0.92)
    >>> round(plan.weight_gib, 2), plan.num_engines, plan.allreduces_per_step
    (14.96, 4, 0)
    """
    dp = validate.positive_int(dp, "dp", hint="It is --data-parallel-size, the copies of the model.")
    one = tensor_parallel_plan(config, 1, gpu_gib=gpu_gib, utilization=utilization, dtype_bytes=dtype_bytes,
                               overhead_gib=overhead_gib)
    return ParallelPlan("1 GPU" if dp == 1 else f"DP={dp}", dp, one.weight_bytes_per_gpu, one.kv_heads_per_gpu,
                        one.kv_bytes_per_token_per_gpu, one.kv_room_gib_per_gpu, one.kv_tokens_per_engine, dp, 0, 0,
                        one.problem)


def describe_plan(plan: ParallelPlan, name: str) -> str:
    """One sentence a plan, with its numbers.

    >>> print(describe_plan(tensor_parallel_plan(LLAMA_31_8B, 2, gpu_gib=24, utilization=0.92), "8B"))
    ... # doctest: +NORMALIZE_WHITESPACE
    8B, TP=2: 7.48 GiB of weights and 4 KV heads (65,536 bytes a token) on each GPU, 13.60 GiB left for KV:
    one engine holding 222,842 tokens; 65 all-reduces a step, 532,480 bytes a token.
    """
    if plan.problem:
        return f"{name}, {plan.scheme}: cannot run: {plan.problem}."
    if not plan.fits:
        return (f"{name}, {plan.scheme}: {plan.weight_gib:.2f} GiB of weights on each GPU leave nothing for the KV "
                "cache: it does not fit.")
    engines = "one engine" if plan.num_engines == 1 else f"{plan.num_engines} engines, each"
    comms = (f"{plan.allreduces_per_step} all-reduces a step, {plan.allreduce_bytes_per_token:,} bytes a token"
             if plan.allreduces_per_step else "no traffic between GPUs")
    return (f"{name}, {plan.scheme}: {plan.weight_gib:.2f} GiB of weights and {plan.kv_heads_per_gpu} KV heads "
            f"({plan.kv_bytes_per_token_per_gpu:,} bytes a token) on each GPU, {plan.kv_room_gib_per_gpu:.2f} GiB left "
            f"for KV: {engines} holding {plan.kv_tokens_per_engine:,} tokens; {comms}.")
