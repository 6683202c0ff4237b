"""The front end's share of serving, measured as CPU time: the API server's and the client's.

vLLM's engine computes the steps, but two other processes handle every request and every token:
the API server (one Python process: it admits each request, with its chat template and
tokenizing, and streams each token back as a server-sent event) and the client (this kernel,
which reads every event). They work while the engine computes, so the three are the stages of a
pipeline, and a pipeline runs at the pace of its slowest stage. On a CPU the engine is by far the
slowest: a step of 8 sequences takes tens of milliseconds. On a GPU a small model's step of 64
sequences takes about 3 ms, and the front end can be the slower stage.

:func:`measure_front_end` sends the lab's kind of requests (chat, the lab's prompt mix) twice,
with one output token and with ``output_len``, and reads both processes' CPU time around each
load. The difference between the two is the streaming of ``output_len - 1`` tokens a request;
what the one-token load costs beyond its one token is admitting the requests. CPU time, not wall
time: it is the work each process does, whatever waits on what, and the API server runs it one
piece at a time (Python's interpreter lock), so its CPU seconds are its busy seconds.
:meth:`FrontEndCost.applied_to` puts the result into the simulator's clock
(``helpers.batching.step_time.StepTimeModel``: ``stream_token_s`` and ``admit_request_s``).

Leaves out: the kernel's other threads (counted with the client), and on a CPU the front end
taking cores from the engine, which the fitted overhead already holds.

Taught in ``notebooks/04_continuous_batching.ipynb``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

import psutil

from helpers import validate
from helpers.batching.step_time import StepTimeModel
from helpers.load.run import run_load_test
from helpers.load.workload import LAB_PROMPT_LENS, build_workload


@dataclass(frozen=True)
class FrontEndCost:
    """CPU seconds per request admitted and per token streamed, of the API server and of the client."""

    api_request_s: float
    api_token_s: float
    client_request_s: float
    client_token_s: float
    num_requests: int  # requests in each timed load
    output_len: int  # output tokens a request in the longer load

    @property
    def stream_token_s(self) -> float:
        """The slower stage's time per streamed token: a floor under every step's time per sequence."""
        return max(self.api_token_s, self.client_token_s)

    @property
    def admit_request_s(self) -> float:
        """The slower stage's time to admit one request."""
        return max(self.api_request_s, self.client_request_s)

    def applied_to(self, model: StepTimeModel) -> StepTimeModel:
        """``model`` with this front end as its floor per token and its admission per request.

        >>> cost = FrontEndCost(0.002, 0.00005, 0.001, 0.00002, 50, 64)
        >>> clock = cost.applied_to(StepTimeModel(overhead_s=0.0025, decode_seq_s=0.00001))
        >>> round(clock.step_seconds(0, 8), 6), round(clock.step_seconds(0, 64), 6)  # engine, then front end
        (0.00258, 0.0032)
        """
        return replace(model, stream_token_s=self.stream_token_s, admit_request_s=self.admit_request_s)

    def describe(self, engine: StepTimeModel | None = None, batch: int = 64) -> str:
        """What was measured, and which stage is the slowest at ``batch`` sequences a step.

        >>> print(FrontEndCost(0.002, 0.00005, 0.001, 0.00002, 50, 64).describe(StepTimeModel(0.0025, 0.0, 0.00001)))
        API server: 2.000 ms a request, 50.0 us a token; client: 1.000 ms a request, 20.0 us a token (CPU time, 50 requests of 1 and 64 output tokens)
        a step of 64 sequences: engine 3.14 ms, front end 3.20 ms to stream its tokens: the front end is the slower stage
        """
        head = (f"API server: {1000 * self.api_request_s:.3f} ms a request, {1e6 * self.api_token_s:.1f} us a token; "
                f"client: {1000 * self.client_request_s:.3f} ms a request, {1e6 * self.client_token_s:.1f} us a token "
                f"(CPU time, {self.num_requests} requests of 1 and {self.output_len} output tokens)")
        if engine is None:
            return head
        engine_s = engine.engine_seconds(0, batch)
        front_s = self.stream_token_s * batch
        slower = "the front end" if front_s > engine_s else "the engine"
        return (f"{head}\na step of {batch} sequences: engine {1000 * engine_s:.2f} ms, front end "
                f"{1000 * front_s:.2f} ms to stream its tokens: {slower} is the slower stage")


def solve_front_end(one_token: tuple[float, float], longer: tuple[float, float], num_requests: int,
                    output_len: int) -> FrontEndCost:
    """Per-request and per-token costs from the CPU seconds (API server, client) of two loads of
    ``num_requests`` requests: one output token each, and ``output_len`` each. A cost the timings
    make negative (noise) is kept as 0.

    >>> cost = solve_front_end((0.105, 0.052), (0.42, 0.178), num_requests=50, output_len=64)
    >>> round(cost.api_token_s * 1e6), round(cost.api_request_s * 1e3, 2), round(cost.client_token_s * 1e6)
    (100, 2.0, 40)
    """
    num_requests = validate.positive_int(num_requests, "num_requests")
    output_len = validate.int_above(output_len, "output_len", 1, hint="The longer load must stream more than 1 token.")
    token = [max(0.0, (b - a) / (num_requests * (output_len - 1))) for a, b in zip(one_token, longer)]
    request = [max(0.0, a / num_requests - t) for a, t in zip(one_token, token)]
    return FrontEndCost(request[0], token[0], request[1], token[1], num_requests, output_len)


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


async def _cpu_of_load(server: Any, api: psutil.Process, client: psutil.Process, workload: Any) -> tuple[float, float]:
    """CPU seconds of the API server and of this process while one load runs; raises if a request failed."""
    api_before, client_before = _cpu_seconds(api), _cpu_seconds(client)
    run = await run_load_test(server, workload, label="front end", progress=False)
    spent = (_cpu_seconds(api) - api_before, _cpu_seconds(client) - client_before)
    failed = [r for r in run.records if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(run.records)} requests of the front-end measurement failed "
                           f"({failed[0].error}); is the server healthy? Run the cell again.")
    return spent


async def measure_front_end(server: Any, *, num_requests: int = 50, output_len: int = 64, repeats: int = 3,
                            seed: int = 0) -> FrontEndCost:
    """Time the front end on a running server: ``repeats`` pairs of loads (1 and ``output_len``
    output tokens, ``num_requests`` chat requests of the lab's prompt mix, all sent at once), the
    median CPU seconds of each kind kept. Bounded: 2 x ``repeats`` loads, to the server given
    (127.0.0.1 in the course), each request with the load tester's timeout. Fresh prompts for every
    load, so the prefix cache never answers for the engine.
    """
    num_requests = validate.positive_int(num_requests, "num_requests")
    output_len = validate.int_above(output_len, "output_len", 1, hint="The longer load must stream more than 1 token.")
    repeats = validate.positive_int(repeats, "repeats")
    if getattr(server, "process", None) is None:
        raise validate.InvalidArgumentError("measure_front_end needs a server this kernel started (it reads the API "
                                            "server's CPU time): pass the VLLMServer from start_server().")
    api, client = psutil.Process(server.process.pid), psutil.Process()
    samples: dict[int, list[tuple[float, float]]] = {1: [], output_len: []}
    for repeat in range(repeats):
        for tokens, timings in samples.items():  # built before timing: building asks the server's tokenizer
            workload = build_workload(server, num_requests=num_requests, prompt_lens=LAB_PROMPT_LENS,
                                      output_tokens=tokens, seed=seed + repeat)
            timings.append(await _cpu_of_load(server, api, client, workload))
    median = {k: tuple(statistics.median(s[i] for s in v) for i in range(2)) for k, v in samples.items()}
    return solve_front_end(median[1], median[output_len], num_requests, output_len)
