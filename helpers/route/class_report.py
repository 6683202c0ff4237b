"""What each student of a simulated class saw: their own p95 latency against a target, and the file it is kept in.

A server's p95 over all requests hides who waited: one student whose three requests all landed in
a queue can have a miserable session while the class's p95 looks fine. :func:`class_report`
groups a :class:`~helpers.route.class_sim.ClassRun`'s records by student and gives each a
:class:`StudentView`: requests sent and answered, the p95 of their end-to-end latencies
(request sent -> last token, client clock; ``numpy.percentile``'s linear interpolation, so over
three requests it lies between the two slowest), and whether every request was answered within
``target_s``-or-better at the p95. :func:`save_class_sim` writes the reports with the machine
that produced them (:func:`run_path`, under ``build/``; the course's references in ``results/cpu/route/`` and
``results/gpu/route/`` are copies of such runs);
:func:`load_class_sim` reads them back as plain data.

Example::

    >>> from helpers.load.client import RequestRecord
    >>> records = [RequestRecord(i, ok=True, e2e_s=s) for i, s in enumerate([1.0, 2.0, 6.0, 1.5])]
    >>> views = student_views(records, students=(0, 0, 1, 1), target_s=5.0)
    >>> [(v.student, round(v.p95_e2e_s, 2), v.within_target) for v in views]
    [(0, 1.95, True), (1, 5.77, False)]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from helpers import validate
from helpers.files import read_json, write_atomically
from helpers.load.summary import percentile
from helpers.paths import build_dir

RESULTS_NAME = "class_sim.json"


@dataclass(frozen=True)
class StudentView:
    """One student's session: their requests and the p95 of their end-to-end latency (seconds)."""

    student: int
    num_requests: int
    num_ok: int
    p95_e2e_s: float | None  # over their answered requests; None when none was answered
    within_target: bool  # every request answered, and the p95 at or under the target


def student_views(records: Sequence[Any], students: Sequence[int], target_s: float) -> list[StudentView]:
    """One :class:`StudentView` a student, in student order; ``students[i]`` sent ``records[i]``."""
    target_s = validate.positive_number(target_s, "target_s", unit="seconds", hint="It is the latency promised.")
    if len(records) != len(students):
        raise validate.InvalidArgumentError(f"{len(records)} records for {len(students)} students' requests.")
    views = []
    for student in sorted(set(students)):
        mine = [record for record, who in zip(records, students) if who == student]
        latencies = [record.e2e_s for record in mine if record.ok and record.e2e_s is not None]
        p95 = percentile(latencies, 95) if latencies else None
        within = len(latencies) == len(mine) and p95 is not None and p95 <= target_s
        views.append(StudentView(student, len(mine), len(latencies), p95, within))
    return views


@dataclass(frozen=True)
class ClassReport:
    """A class against one setup (one server, or replicas behind a router), judged per student."""

    label: str
    num_replicas: int
    target_s: float
    plan: str  # ClassPlan.describe()
    views: tuple[StudentView, ...]
    num_ok: int
    num_requests: int
    wall_s: float
    ttft_p50_s: float | None
    started_at: str
    peak_in_flight: int | None = None  # most requests sent and not yet answered at one moment; None in older files

    @property
    def num_within(self) -> int:
        return sum(view.within_target for view in self.views)

    @property
    def p95s(self) -> list[float]:
        return [view.p95_e2e_s for view in self.views if view.p95_e2e_s is not None]

    def describe(self) -> str:
        """One line: how many students got their promise, and the spread of their p95s."""
        spread = (f"each student's p95 {min(self.p95s):.1f}-{max(self.p95s):.1f} s, median "
                  f"{percentile(self.p95s, 50):.1f} s" if self.p95s else "no student got an answer")
        ttft = f", TTFT p50 {self.ttft_p50_s:.2f} s" if self.ttft_p50_s is not None else ""
        return (f"{self.label}: {self.num_within} of {len(self.views)} students within {self.target_s:g} s at their "
                f"p95 ({spread}); {self.num_ok} of {self.num_requests} requests answered{ttft}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClassReport:
        views = tuple(StudentView(**view) for view in data["views"])
        return cls(**{**data, "views": views})


def class_report(lesson: Any, target_s: float) -> ClassReport:
    """The report of a :class:`~helpers.route.class_sim.ClassRun` against ``target_s`` seconds."""
    records = sorted(lesson.run.records, key=lambda record: record.index)
    views = student_views(records, lesson.plan.students, target_s)
    summary = lesson.run.summary
    return ClassReport(lesson.label, lesson.num_replicas, float(target_s), lesson.plan.describe(), tuple(views),
                       summary.num_ok, len(records), round(lesson.run.wall_s, 2), summary.ttft_p50_s,
                       lesson.run.started_at, summary.peak_in_flight)


def slot_line(report: ClassReport, slots: int | None) -> str:
    """Whether a one-server run ever had more requests open (sent, not yet answered) than the server has slots.

    Open requests include those still in the HTTP front end, so within the slots (``max_num_seqs``) none had to wait
    for one, and more replicas had no queue to take off that server, only a share of the batch it runs. Past them, at
    that moment some were not running: in vLLM's queue or in its front end.

    >>> run = ClassReport("1 replica", 1, 5.0, "", (), 3, 3, 9.0, 0.2, "", peak_in_flight=28)
    >>> print(slot_line(run, 64))  # doctest: +NORMALIZE_WHITESPACE
    1 replica: at most 28 requests open at once (sent, not yet answered) for 64 slots (max_num_seqs): none had to
    wait for a slot, so more replicas had no queue to take off it, only a share of the batch.
    >>> print(slot_line(run, 8))  # doctest: +NORMALIZE_WHITESPACE
    1 replica: at most 28 requests open at once (sent, not yet answered) for 8 slots (max_num_seqs): at that moment
    at least 20 of them were not running, waiting in vLLM's queue or in its HTTP front end.
    """
    if report.peak_in_flight is None:
        return f"{report.label}: the run did not record how many requests were open at once."
    head = f"{report.label}: at most {report.peak_in_flight} requests open at once (sent, not yet answered)"
    if slots is None:  # started without max_num_seqs: vLLM chose it (helpers.tuning.command.vllm_default_max_num_seqs)
        return f"{head}, for vLLM's default max_num_seqs (set max_num_seqs in REPLICA_SETTINGS to compare them)."
    if report.peak_in_flight <= slots:
        return (f"{head} for {slots} slots (max_num_seqs): none had to wait for a slot, so more replicas had no "
                "queue to take off it, only a share of the batch.")
    return (f"{head} for {slots} slots (max_num_seqs): at that moment at least {report.peak_in_flight - slots} of "
            "them were not running, waiting in vLLM's queue or in its HTTP front end.")

def replicas_needed(reports: Sequence[ClassReport]) -> int | None:
    """The fewest replicas whose report kept every student within target; None if none did.

    >>> ok = ClassReport("1", 1, 5.0, "", (StudentView(0, 3, 3, 1.0, True),), 3, 3, 9.0, 0.2, "")
    >>> replicas_needed([ok]), replicas_needed([])
    (1, None)
    """
    good = [report.num_replicas for report in reports if report.views and report.num_within == len(report.views)]
    return min(good) if good else None


def run_path() -> Path:
    """build/route/class_sim.json: where a run of notebook 06 keeps its numbers. The course's references,
    ``results/cpu/route/`` and ``results/gpu/route/``, are copies of such a run, made by hand: a learner's run
    never changes a file the repository tracks."""
    return build_dir("route") / RESULTS_NAME


def save_class_sim(path: Path | str, reports: Sequence[ClassReport], **about: Any) -> Path:
    """Write the reports and ``about`` (machine, vLLM version, what else ran, the routing comparison...) as JSON."""
    data = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), **about,
            "reports": [report.to_dict() for report in reports]}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(path, json.dumps(data, indent=1) + "\n")


def load_class_sim(path: Path | str) -> tuple[list[ClassReport], dict[str, Any]]:
    """The reports and everything else the file says about the run."""
    data = read_json(path, remedy="Run notebooks/06_beyond_one_server.ipynb to write it.")
    reports = [ClassReport.from_dict(report) for report in data.pop("reports", [])]
    return reports, data
