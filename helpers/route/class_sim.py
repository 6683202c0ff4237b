"""A class on one machine: N students, each running a small version of the lab at their own pace.

A classroom is open-loop traffic of a particular shape: every student starts when they get to the
cell (somewhere in the first ``start_within_s`` seconds), then sends ``requests_each`` requests,
one after the other, with think time between them (exponential gaps of mean ``gap_s``: a Poisson
process of their own, seeded per student), whether or not the server has answered the last
one. :func:`class_plan` draws those arrival times (pure, seeded: the same arguments give the same
class); :func:`class_workload` turns them into one :class:`~helpers.load.workload.Workload` of
the lab's prompts (each request remembers its student); :func:`run_class` sends it to a server
or a router with the course's load tester, :func:`run_class_pinned` to several servers without a
router (student *s* always to server *s mod N*, the split a router would make at best), and each
returns a :class:`ClassRun`, whose records :mod:`helpers.route.class_report` reads per student.

Leaves out: students reading answers before they send the next request (a closed loop), and
students who wait for a slow reply: here nobody slows down because the server did.

Example::

    >>> plan = class_plan(3, requests_each=2, gap_s=4.0, start_within_s=2.0, seed=0)
    >>> plan.num_requests, plan.students
    (6, (2, 1, 2, 0, 0, 1))
    >>> [round(t, 2) for t in plan.times]
    [0.08, 0.54, 0.79, 1.27, 3.99, 10.42]
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from helpers import validate
from helpers.load.arrivals import with_arrivals
from helpers.load.run import LoadTestRun, run_load_test
from helpers.load.workload import Workload, build_workload


@dataclass(frozen=True)
class ClassPlan:
    """When each request of a class arrives (seconds after the start) and whose it is, in arrival order."""

    num_students: int
    requests_each: int
    gap_s: float  # mean think time between one student's requests
    start_within_s: float  # students start at a uniform time in [0, start_within_s)
    seed: int
    times: tuple[float, ...]
    students: tuple[int, ...]  # students[i]: who sends the i-th request (0 .. num_students - 1)

    @property
    def num_requests(self) -> int:
        return len(self.times)

    @property
    def offered_rate(self) -> float:
        """Requests per second the whole class offers while it works (all requests / the last arrival)."""
        return self.num_requests / self.times[-1] if self.times[-1] > 0 else float("inf")

    def describe(self) -> str:
        return (f"{self.num_students} students x {self.requests_each} requests, {self.gap_s:g} s apart on average "
                f"(Poisson, seeded), starting within {self.start_within_s:g} s: {self.num_requests} requests over "
                f"{self.times[-1]:.0f} s, {self.offered_rate:.2f} requests/s for the class")


def class_plan(num_students: int, *, requests_each: int = 3, gap_s: float = 6.0, start_within_s: float = 5.0,
               seed: int = 0) -> ClassPlan:
    """The arrival times of a class, merged in time order (pure and seeded)."""
    import numpy as np

    num_students = validate.positive_int(num_students, "num_students", hint="It is how many students share the server.")
    requests_each = validate.positive_int(requests_each, "requests_each", hint="It is each student's requests.")
    gap_s = validate.positive_number(gap_s, "gap_s", unit="seconds", hint="It is a student's mean think time.")
    start_within_s = validate.non_negative_number(start_within_s, "start_within_s", unit="seconds")
    seed = validate.non_negative_int(seed, "seed")
    starts = np.random.default_rng(seed).uniform(0.0, start_within_s, size=num_students)
    arrivals = []
    for student, start in enumerate(starts):
        # a student's first request goes at their start; the later ones after Poisson think times
        gaps = np.random.default_rng([seed, student]).exponential(gap_s, size=requests_each - 1)
        offsets = np.concatenate(([0.0], np.cumsum(gaps)))
        arrivals += [(float(start + offset), student) for offset in offsets]
    arrivals.sort()
    return ClassPlan(num_students, requests_each, gap_s, start_within_s, seed,
                     tuple(t for t, _ in arrivals), tuple(s for _, s in arrivals))


@dataclass(frozen=True)
class ClassWorkload:
    """A class's requests, ready for the load tester, and the student of each (by request index)."""

    plan: ClassPlan
    workload: Workload


def class_workload(tokenizer: Any, plan: ClassPlan, *, prompt_lens: tuple[int, ...] = (16, 64, 256),
                   output_tokens: int = 16, seed: int = 0) -> ClassWorkload:
    """The lab's kind of prompts (real text of exact token lengths, a fresh run tag) at the plan's times.

    ``tokenizer``: a server, a router's replica or a tokenizer (as for ``build_workload``)."""
    workload = build_workload(tokenizer, num_requests=plan.num_requests, prompt_lens=prompt_lens,
                              output_tokens=output_tokens, seed=seed)
    return ClassWorkload(plan, with_arrivals(workload, plan.times))


@dataclass
class ClassRun:
    """One class sent to one target: the load test's run (every record) and who sent each request."""

    label: str  # e.g. "1 replica", "2 replicas + router"
    num_replicas: int
    plan: ClassPlan
    run: LoadTestRun


async def run_class(target: Any, lesson: ClassWorkload, *, label: str, num_replicas: int,
                    timeout_s: float = 120.0) -> ClassRun:
    """Send the class to ``target`` (a server or a router), open loop, each request at its time.

    Bounded: each request gives up after ``timeout_s``; a failed request is kept as a record with
    its error, and counts against its student."""
    run = await run_load_test(target, lesson.workload, timeout_s=timeout_s, label=label)
    return ClassRun(label, num_replicas, lesson.plan, run)


async def run_class_pinned(servers: Sequence[Any], lesson: ClassWorkload, *, label: str,
                           timeout_s: float = 120.0) -> ClassRun:
    """Send the class to ``servers`` without a router: student *s*'s requests all to ``servers[s % N]``, each
    server's share sent by its own load test, all at once (open loop, each request at its time).

    What it isolates: the same replicas, the same class, no router process in between. The records of all
    servers are kept together, as one run's."""
    servers = list(servers)
    parts = []
    for place, server in enumerate(servers):
        mine = tuple(spec for spec, student in zip(lesson.workload.requests, lesson.plan.students)
                     if student % len(servers) == place)
        if mine:
            parts.append((server, replace(lesson.workload, requests=mine)))
    runs = await asyncio.gather(*(run_load_test(server, part, timeout_s=timeout_s, label=f"{label}: {server.url}")
                                  for server, part in parts))
    first = runs[0]
    merged = LoadTestRun(label, {**first.settings, "pinned": "student s to server s mod N, no router"},
                         first.server, first.hardware, first.started_at, max(run.wall_s for run in runs),
                         [record for run in runs for record in run.records], first.cpu_cores)
    return ClassRun(label, len(servers), lesson.plan, merged)
