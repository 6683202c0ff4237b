"""The private JupyterLab of the browser tests gets its token through the environment, never argv
(/proc/<pid>/cmdline, and so `ps`, shows argv to every user); nothing here starts JupyterLab."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import jupyterlab_browser
from tests.jupyterlab_browser import JupyterLab, lab_command

TOKEN = "0123456789abcdef0123456789abcdef"
DIRS = {name: Path("/tmp/lab") / name for name in ("config", "runtime", "data", "settings", "workspaces", "ipython")}


def test_the_token_is_in_the_environment_not_on_the_command_line():
    argv, env = lab_command(8888, TOKEN, Path("/tmp/root"), DIRS, base_env={"JUPYTER_TOKEN_FILE": "/elsewhere"})
    assert not any(TOKEN in word for word in argv) and not any("token" in word.lower() for word in argv)
    assert env["JUPYTER_TOKEN"] == TOKEN and "JUPYTER_TOKEN_FILE" not in env
    assert "--ServerApp.port=8888" in argv and env["JUPYTER_RUNTIME_DIR"] == "/tmp/lab/runtime"


def test_jupyter_server_takes_its_token_from_that_variable(monkeypatch):
    identity = pytest.importorskip("jupyter_server.auth.identity")
    _, env = lab_command(8888, TOKEN, Path("/tmp/root"), DIRS, base_env={})
    monkeypatch.setenv("JUPYTER_TOKEN", env["JUPYTER_TOKEN"])
    provider = identity.IdentityProvider()
    assert provider.token == TOKEN and not provider.token_generated  # so its log shows '...', not the token


def test_start_hands_the_token_to_jupyterlab_in_its_environment_only(monkeypatch, tmp_path):
    # What start() itself gives Popen, which lab_command's test cannot see: Popen records it and raises, so nothing starts.
    launched = []

    class Refused(Exception):
        pass

    def record(argv, *, env, **kwargs):
        launched.append((list(argv), dict(env)))
        raise Refused

    monkeypatch.setattr(jupyterlab_browser.subprocess, "Popen", record)
    lab = JupyterLab(tmp_path / "root", tmp_path / "home", tmp_path / "lab.log")
    with pytest.raises(Refused):
        lab.start(timeout_s=1)
    assert lab.process is None and len(launched) == 1
    argv, env = launched[0]
    assert not [word for word in argv if lab.token in word]
    assert env["JUPYTER_TOKEN"] == lab.token
