"""The lab's "your client" section: your client and the course's on one server, then a ``generate()`` loop.

Notebook glue (I/O). :func:`serve_small_loads` takes the server of the lab's high setting (started
ahead with the experiment's other one, :mod:`helpers.serve.ahead`, or started here) and sends three
small loads of the lab's prompt mix: the course's load tester, the learner's ``send_one``
(:mod:`helpers.lab.client_exercise`) on a load of the same shape with fresh prompts, and the
requests the naive loop will serve; the server then stands by for the experiment.
:func:`naive_against_vllm` then serves those requests one at a time through ``transformers``
(:mod:`helpers.lab.naive`) while the servers stand by, idle: an idle server costs the cores nothing
measurable (``results/cpu/start_together-2026-12-06.json``).

The loads are small so that the section costs under a minute on a 2-core CPU: the client check
needs every request accounted for and the two clients' numbers side by side, not a long run.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from typing import Any

from helpers.errors import START_ERRORS
from helpers.feedback import Hints
from helpers.lab.client_exercise import ClientCheck, LearnerRun, compare_clients, run_learner_client
from helpers.lab.naive import NaiveComparison, compare_naive, naive_run
from helpers.lab.table import format_table, runs_table
from helpers.load.run import LoadTestRun, run_load_test
from helpers.load.warmup import warm_up
from helpers.load.workload import Workload, build_workload

# (requests, output tokens): a few seconds of serving at the lab's high setting on each kind of device
CLIENT_LOAD = {"cpu": (8, 32), "cuda": (64, 128)}  # 64: what the lab's pool holds at once (lab_kv_gib)
NAIVE_LOAD = {"cpu": (8, 32), "cuda": (16, 128)}  # the loop serves these one by one: keep it short
NOT_WRITTEN = "raise NotImplementedError"


def written(send_one: Any) -> bool:
    """False while ``send_one`` is the scaffold: its body still raises NotImplementedError."""
    try:
        return NOT_WRITTEN not in inspect.getsource(send_one)
    except (OSError, TypeError):  # no source to read (built in a string): try it
        return True


@dataclass
class SmallLoads:
    """What :func:`serve_small_loads` measured on one server."""

    course: LoadTestRun  # the course's load tester
    learner: LearnerRun | None  # the learner's send_one on the same shape; None while it is not written
    naive_workload: Workload  # the requests the generate() loop will serve
    naive_vllm: LoadTestRun  # vLLM serving them, all at once
    dtype: str  # the server's, which the loop uses too
    random_weights: bool

    @property
    def check(self) -> ClientCheck | None:
        return None if self.learner is None else compare_clients(self.learner, self.course)

    def report(self) -> str:
        """The two clients side by side and the verdict, or what to do first."""
        runs, names = [self.course], ["the course's load tester"]
        if self.learner is not None:
            runs, names = [self.course, self.learner.run], [*names, "your client"]
        table = format_table([replace(row, run=name) for row, name in zip(runs_table(runs), names)], _COLUMNS)
        if self.learner is None:
            return ("✏️ Not yet: `send_one` still raises NotImplementedError. Write its body (the hints are above), "
                    "then run this cell again (the servers stand by: it starts none again). The course's tester, for now:\n\n" + table)
        return table + "\n\n" + self.check.describe()


_COLUMNS = ("run", "num_ok", "output_tok_per_s", "ttft_p50_s", "ttft_p95_s", "e2e_p50_s", "e2e_p95_s")


async def serve_small_loads(send_one: Any, settings: dict[str, Any], *, device: str) -> SmallLoads:
    """On the server of ``settings`` (standing by, or started here): the course's tester, the learner's client and
    the naive set; the server then stands by for a later cell (:func:`helpers.serve.standby.stand_by`)."""
    from helpers.serve.server import start_server
    from helpers.serve.standby import stand_by

    requests, tokens = CLIENT_LOAD[device]
    naive_requests, naive_tokens = NAIVE_LOAD[device]
    try:
        server, keep = start_server(**settings, quiet=True), True
    except START_ERRORS:
        if device != "cuda":
            raise
        # the experiment's share of the GPU may not hold this model: the check alone takes vLLM's default share
        server, keep = start_server(max_num_seqs=settings["max_num_seqs"], quiet=True), False
    try:
        course_load = build_workload(server, num_requests=requests, output_tokens=tokens)
        await warm_up(server, course_load, force=True)  # a fresh server's first load is slower, on a CPU too
        course = await run_load_test(server, course_load, label="course's load tester", progress=False)
        learner = None
        if written(send_one):
            learner = await run_learner_client(send_one, server, build_workload(server, num_requests=requests,
                                                                                output_tokens=tokens))
        naive_workload = build_workload(server, num_requests=naive_requests, output_tokens=naive_tokens)
        naive_vllm = await run_load_test(server, naive_workload, label="vLLM, all at once", progress=False)
        dtype = server.kv_cache.dtype if server.kv_cache else "float32"
    finally:
        if keep:
            stand_by(server)  # the experiment's server: it starts no second time
        else:
            server.stop()
    random_weights = course.server.model_source == "dummy"
    return SmallLoads(course, learner, naive_workload, naive_vllm, dtype, random_weights)


def naive_against_vllm(loads: SmallLoads, device: str) -> NaiveComparison | None:
    """The naive loop on the same requests vLLM served; None (and why) for a model with random weights."""
    from helpers.serve.model import resolve_model

    if loads.random_weights:
        print("This server has random weights (a dummy model): it has no checkpoint for transformers to load, "
              "so the generate() loop is measured on the embedded model only.")
        return None
    naive = naive_run(resolve_model().model, loads.naive_workload, dtype=loads.dtype, device=device)
    return compare_naive(naive, loads.naive_vllm)


CLIENT_HINTS = Hints([
    "The call: `stream = await client.chat.completions.create(model=model, messages=[{'role': 'user', 'content': "
    "prompt}], max_tokens=max_tokens, temperature=0, stream=True, stream_options={'include_usage': True}, "
    "extra_body={'ignore_eos': True})`; `ignore_eos` makes every answer exactly max_tokens long.",
    "The times: `async for chunk in stream:`; a chunk that carries text has `chunk.choices` and "
    "`chunk.choices[0].delta.content`; take `time.perf_counter()` there: the first time into `first_token`, "
    "every time into `end`.",
    "The tokens and the errors: the stream's last chunk has `chunk.usage.completion_tokens` (and no choices). Put "
    "the whole request in `try: ... except Exception as error:` and store `f'{type(error).__name__}: {error}'` in "
    "`record['error']`.",
], solution="docs/solutions/lab_client.py")


def judge_guess(guess: object, measured: float, *, what: str) -> str:
    """A prediction set beside the measurement: no grade, how far off and in which direction."""
    if guess is None:
        return f"✏️ You made no prediction: set `my_guess` above before you look. Measured: {what} {measured:.1f}x."
    try:
        guess = float(guess)
    except (TypeError, ValueError):
        return f"✏️ `my_guess` should be a number, e.g. 3; got {guess!r}. Measured: {what} {measured:.1f}x."
    if guess <= 0:
        return f"✏️ `my_guess` should be a positive ratio, e.g. 3; got {guess}. Measured: {what} {measured:.1f}x."
    off = measured / guess
    direction = "more" if off > 1 else "less"
    return (f"You predicted {guess:g}x; measured: {what} {measured:.1f}x, {max(off, 1 / off):.1f} times {direction} "
            "than you expected." if abs(off - 1) > 0.1 else
            f"You predicted {guess:g}x; measured: {what} {measured:.1f}x: within 10%.")
