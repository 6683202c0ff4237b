"""scripts/bench_lab_pairs.py without a server: its two servers start through start_together, and a failed
start leaves neither behind."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
from pathlib import Path

import pytest

from helpers.serve.server import VLLMServer

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bench_lab_pairs.py"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_both_servers_start_together_and_a_failed_start_stops_both(device, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_lab_pairs_under_test", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    started, stopped = [], []

    def failing_start(servers, *, labels=None, quiet=False):
        started.append((list(servers), labels))
        raise RuntimeError("the second server did not start")

    monkeypatch.setattr(bench, "start_together", failing_start)
    monkeypatch.setattr(bench, "detect_device", lambda: device)
    monkeypatch.setattr(VLLMServer, "stop", lambda self, timeout=15.0: stopped.append(self))
    args = argparse.Namespace(settings=(8, 64), output_tokens=16, kv_gib=2.0, pairs=2)
    with pytest.raises(RuntimeError, match="did not start"):
        asyncio.run(bench.main(args))
    [(servers, labels)] = started  # one call for both: at once on a CPU, one after the other on a GPU
    assert [s.config.max_num_seqs for s in servers] == [8, 64] and labels == ["max_num_seqs=8", "max_num_seqs=64"]
    assert stopped == servers
    share = round(bench.GPU_SHARE / 2, 2) if device == "cuda" else None
    assert all(s.config.gpu_memory_utilization == share and s.config.kv_cache_space_gib == 2.0 for s in servers)
