"""Classroom mode on 127.0.0.1: scripts/classroom_server.py started as an instructor would,
helpers.serve.classroom.connect used as a student would. One real server for the whole module."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from helpers.serve.classroom import API_KEY_ENV, SharedServerError, connect, mask_key
from helpers.load.workload import build_workload
from helpers.load.run import run_load_test
from helpers.paths import COURSE_ROOT
from tests.conftest import wait_until_gone

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("no_server_left_behind")]

KEY = "class-" + secrets.token_urlsafe(16)
SCRIPT = [sys.executable, str(COURSE_ROOT / "scripts" / "classroom_server.py")]
READY = re.compile(r"classroom server ready: (http://\S+) serves '([^']+)'")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
    return {**env, **extra}


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """The instructor's command, on loopback, with a small KV pool; stopped at the end."""
    output = tmp_path_factory.mktemp("classroom") / "classroom_server.out"
    with open(output, "wb") as sink:
        process = subprocess.Popen(
            [*SCRIPT, "--host", "127.0.0.1", "--max-num-seqs", "4", "--kv-cache-space-gib", "0.5"],
            env=_env(**{API_KEY_ENV: KEY}), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 420
    found = None
    while time.monotonic() < deadline and found is None:
        assert process.poll() is None, f"classroom_server.py exited early:\n{output.read_text()}"
        found = READY.search(output.read_text())
        time.sleep(0.5)
    assert found, f"classroom_server.py was not ready in time:\n{output.read_text()}"
    yield SimpleNamespace(url=found.group(1), model=found.group(2), process=process, output=output)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_request_without_the_key_is_refused(classroom):
    body = json.dumps({"model": classroom.model, "messages": [{"role": "user", "content": "Hi"}],
                       "max_tokens": 2}).encode()
    request = urllib.request.Request(f"{classroom.url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401
    # Only /v1 is guarded (docs/instructor.md says so): the metrics answer anyone who reaches the port.
    with urllib.request.urlopen(f"{classroom.url}/metrics", timeout=30) as metrics:
        assert metrics.status == 200


def test_a_request_with_the_key_succeeds(classroom, monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, KEY)  # how a student passes it: in the environment, not in a cell
    server = connect(classroom.url)
    assert server.model_name == classroom.model
    reply = server.client().chat.completions.create(
        model=server.model_name, messages=[{"role": "user", "content": "Say hello."}], max_tokens=4)
    assert reply.usage.completion_tokens >= 1


def test_connect_names_a_wrong_key_and_an_unreachable_server(classroom):
    with pytest.raises(SharedServerError, match="refused the API key"):
        connect(classroom.url, api_key="not-the-key")
    with pytest.raises(SharedServerError, match="Cannot reach"):
        connect("http://127.0.0.1:9", api_key=KEY, timeout_s=2)


def test_the_load_tester_runs_through_a_student_connection(classroom):
    server = connect(classroom.url + "/v1", api_key=KEY)  # the base URL works as well as the root
    workload = build_workload(server, num_requests=4, prompt_lens=(16, 64), output_tokens=8)
    run = asyncio.run(run_load_test(server, workload, label="classroom", progress=False, timeout_s=120))
    assert [r.ok for r in run.records] == [True] * 4, [r.error for r in run.records]
    assert {r.output_tokens for r in run.records} == {8}
    assert run.server.url == classroom.url and run.server.vllm_version


def test_the_key_is_never_shown_in_full(classroom):
    server = connect(classroom.url, api_key=KEY)
    printed = classroom.output.read_text()
    log_path = re.search(r"server log: (\S+)", printed).group(1)
    assert KEY not in printed and mask_key(KEY) in printed
    assert KEY not in Path(log_path).read_text(errors="replace")
    assert KEY not in repr(server) and KEY not in str(server)


def test_sigterm_stops_the_classroom_server_and_everything_it_started(classroom):
    family = [p.pid for p in psutil.Process(classroom.process.pid).children(recursive=True)]
    assert len(family) >= 2, "the classroom server's processes were not found"  # api_server, engine core, ...
    classroom.process.send_signal(signal.SIGTERM)
    assert classroom.process.wait(timeout=60) == 0
    assert "classroom server stopped" in classroom.output.read_text()
    assert wait_until_gone(family, timeout=20) == []
