"""Notebook 06's sentence on the cores its CPU replicas left free, from the cores they really bound.

The cell used to divide ``os.cpu_count()`` (the host's count, even in a container limited to fewer) by the
replicas and call every core taken; start_replicas binds equal shares of this process's cores and leaves the
rest free (3 cores, 2 replicas: '0' and '1', core 2 free). The cell runs here as the notebook has it, on the shares
``helpers.route.replicas.replica_cores`` gives, with no server: it only reads each replica's ``config.cpu_cores``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.route.replicas import replica_cores

ROOT = Path(__file__).resolve().parent.parent


def explain_class_cell() -> str:
    cells = json.loads((ROOT / "notebooks" / "06_beyond_one_server.ipynb").read_text())["cells"]
    return "".join(next(c["source"] for c in cells if c.get("id") == "explain-class"))


def said(monkeypatch, capsys, usable: list[int], num_replicas: int, host_cores: int = 64) -> str:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(usable), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: host_cores)  # a container's host: more than this process may use
    replicas = [SimpleNamespace(config=SimpleNamespace(cpu_cores=share, max_num_seqs=8))
                for share in replica_cores(num_replicas, usable)]
    namespace = {"os": os, "ON_GPU": False, "NUM_REPLICAS": num_replicas, "replicas": replicas,
                 "reports": [SimpleNamespace(p95s=[], label="1 replica", peak_in_flight=12)]}
    exec(explain_class_cell(), namespace)  # noqa: S102 (the course's own cell)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("1 replica: at most 12 requests open at once (sent, not yet answered) for 8 slots")
    return lines[0]


@pytest.mark.parametrize(("cores", "replicas", "shares", "others", "free"), [
    (2, 2, "0, 1", 1, "no core was free"),
    (3, 2, "0, 1", 2, "1 core(s) stayed free"),
    (4, 2, "0-1, 2-3", 2, "no core was free"),
    (4, 3, "0, 1, 2", 3, "1 core(s) stayed free"),
])
def test_the_sentence_counts_the_cores_the_replicas_bound_and_those_left(monkeypatch, capsys, cores, replicas,
                                                                         shares, others, free):
    line = said(monkeypatch, capsys, list(range(cores)), replicas)
    assert line.startswith(f"This process may use {cores} cores, and the replicas' model workers bound cores {shares}:")
    assert f"the other {others} core(s) ran its API server" in line
    assert f"with {replicas} busy, {free} for the API servers, the router and the client." in line


def test_a_container_limited_to_some_of_the_hosts_cores_counts_only_those(monkeypatch, capsys):
    line = said(monkeypatch, capsys, [4, 5], 2, host_cores=64)
    assert "may use 2 cores" in line and "bound cores 4, 5" in line and "no core was free" in line
