"""Refusals that come before anything launches: a bad input to the naive loop, a missing model folder, the
classroom script's checks. Not marked server, since they start none (tests/conftest.py fails a test not marked
server that reaches a vLLM launch in this process; the classroom script's refusals count vLLM processes themselves)."""

from __future__ import annotations

import secrets
import subprocess
import time

import pytest

from helpers.errors import InvalidArgumentError, ModelNotAvailableError
from helpers.lab.naive import naive_run
from helpers.load.client import RequestSpec
from helpers.load.workload import Workload
from helpers.serve.classroom import API_KEY_ENV
from helpers.serve.server import start_server
from tests.conftest import vllm_processes
from tests.test_classroom import SCRIPT, _env
from tests.test_naive_baseline import text_workload

pytestmark = pytest.mark.usefixtures("no_server_left_behind")


def test_bad_input_is_refused_before_the_model_loads():
    with pytest.raises(InvalidArgumentError, match="dtype must be one of"):
        naive_run("/nonexistent", text_workload(1, 4), dtype="int8")
    tokens = Workload((RequestSpec(0, (1, 2, 3), 3, 4),), (3,), 4, 0, "t")
    with pytest.raises(InvalidArgumentError, match="text prompts"):
        naive_run("/nonexistent", tokens)


def test_missing_model_folder_fails_before_launch(tmp_path):
    with pytest.raises(ModelNotAvailableError, match="does not exist"):
        start_server(model=str(tmp_path / "missing-model"), quiet=True)


def test_the_script_refuses_another_interface_without_a_key():
    began = time.monotonic()
    before = len(vllm_processes())
    done = subprocess.run([*SCRIPT, "--host", "0.0.0.0"], env=_env(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert f"needs an API key, and ${API_KEY_ENV} is empty" in done.stderr
    assert len(vllm_processes()) == before and time.monotonic() - began < 30  # refused before any launch


def test_the_replicas_router_policy_is_a_flag_checked_before_any_launch():
    before = len(vllm_processes())
    env = {**_env(), API_KEY_ENV: secrets.token_urlsafe(16)}
    done = subprocess.run([*SCRIPT, "--replicas", "2", "--policy", "round-robin"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "invalid choice: 'round-robin'" in done.stderr and "'round_robin'" in done.stderr
    assert len(vllm_processes()) == before
    helped = subprocess.run([*SCRIPT, "--help"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert "--policy {round_robin,random,cache_aware,power_of_two,consistent_hash}" in helped.stdout
    assert "default cache_aware" in " ".join(helped.stdout.split())
