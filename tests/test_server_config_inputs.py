"""Bad server settings are refused before launch with a message that names the field, what was given and
what to pass; the server's key comes only from api_key=; the host is one the helpers can serve on."""

from __future__ import annotations

import importlib.util
import math
import os
import socket
import subprocess

import pytest

from helpers.errors import ConfigError
from helpers.paths import COURSE_ROOT
from helpers.serve import exposure, preflight, process
from helpers.serve.config import Launch, ServerConfig, build_launch

CLASS_KEY = "s3cret-class-key"  # 16 characters: long enough beyond loopback


# ----- types a notebook may pass by mistake ---------------------------------------------------------
@pytest.mark.parametrize(("settings", "message"), [
    ({"gpu_memory_utilization": "0.9"}, (r"gpu_memory_utilization must be a fraction of memory in \(0, 1\], "
                                         r"got '0\.9' \(a str\)")),
    ({"gpu_memory_utilization": True}, r"gpu_memory_utilization must be a fraction .* got True \(a bool\)"),
    ({"startup_timeout_s": "300"}, r"startup_timeout_s must be a positive, finite number of seconds, got '300' \(a str\)"),
    ({"startup_timeout_s": math.nan}, r"startup_timeout_s must be a positive, finite number of seconds, got nan"),
    ({"startup_timeout_s": math.inf}, r"startup_timeout_s must be a positive, finite number of seconds, got inf"),
    ({"dtype": ["half"]}, r"dtype must be one of 'auto', .* got \['half'\] \(a list\)\. Or None"),
    ({"enable_prefix_caching": "False"}, (r"enable_prefix_caching must be True or False, or None for vLLM's default "
                                          r"\(on\), got 'False' \(a str\)")),
    ({"eager": "no"}, r"eager must be True or False, got 'no' \(a str\)"),
    ({"eager": None}, r"eager must be True or False, got None \(a NoneType\)"),
    ({"extra_args": 5}, r"extra_args is a sequence of separate arguments, .* got 5 \(an int\)"),
    ({"quantization": 8}, r"quantization is the name of a method such as 'fp8', .* got 8 \(an int\)"),
    ({"port": True}, r"port must be an integer between 1 and 65535, got True \(a bool\)"),
    ({"host": 5}, r"host must be an IPv4 address or a host name .* got 5 \(an int\)"),
    ({"host": ""}, r"host must be an IPv4 address or a host name .* got '' \(a str\)"),
], ids=lambda value: repr(value)[:40])
def test_a_setting_of_the_wrong_type_is_refused_naming_the_field_and_the_type(settings, message):
    with pytest.raises(ConfigError, match=message):
        ServerConfig(**settings)


def test_an_api_key_that_is_not_text_is_refused_without_showing_it():
    with pytest.raises(ConfigError, match=r"api_key must be a string .* type int\. Pass it as text") as caught:
        ServerConfig(api_key=12345678)
    assert "12345678" not in str(caught.value)


def test_extra_args_of_none_means_no_arguments_and_a_list_becomes_a_tuple():
    assert ServerConfig(extra_args=None).extra_args == ()
    config = ServerConfig(port=8000, extra_args=["--seed", "0"])
    assert config.extra_args == ("--seed", "0") and hash(config)  # still a frozen, hashable config
    launch = build_launch(ServerConfig(port=8000, extra_args=None), device="cuda", model="/m", served_name="m",
                          machine_env={})
    assert launch.argv[-2:] == ["--max-model-len", "2048"]


# ----- beyond loopback: a key of classroom strength; IPv6 refused -------------------------------------
def test_a_server_beyond_loopback_needs_a_key_of_the_classroom_scripts_length():
    for key in ["x", "   ", " " * 20, "eleven-char", "  eleven-char  "]:  # spaces at the ends do not count
        with pytest.raises(ConfigError, match=rf"use at least {exposure.MIN_KEY_LENGTH}: a guessable key") as caught:
            ServerConfig(host="0.0.0.0", api_key=key)
        assert "eleven-char" not in str(caught.value)  # the key itself is never shown
    assert ServerConfig(host="0.0.0.0", api_key="x" * exposure.MIN_KEY_LENGTH).host == "0.0.0.0"
    assert ServerConfig(host="10.0.0.5", api_key=CLASS_KEY).api_key == CLASS_KEY
    assert ServerConfig(api_key="k").api_key == "k"  # this machine only: any key the notebook chooses
    spec = importlib.util.spec_from_file_location("classroom_server", COURSE_ROOT / "scripts" / "classroom_server.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.MIN_KEY_LENGTH == exposure.MIN_KEY_LENGTH == 12


@pytest.mark.parametrize("host", ["::1", "::", "[::1]", "fe80::1", "::ffff:127.0.0.1"])
def test_an_ipv6_host_is_refused_saying_what_to_use(host):
    with pytest.raises(ConfigError, match=r"IPv6 addresses are not supported by the course's helpers; use 127\.0\.0\.1 "
                                          r"\(or 0\.0\.0\.0 with an api_key for a classroom\)"):
        ServerConfig(host=host, api_key=CLASS_KEY)


def test_a_port_probe_on_a_host_this_machine_cannot_bind_says_so_instead_of_all_in_use():
    # the router probes its own host with port_free, without a ServerConfig to refuse it first
    for host, why in [("::1", "IPv6 addresses are not supported"), ("192.0.2.1", "is not an address of this machine")]:
        with pytest.raises(ConfigError, match=why):
            preflight.port_free(host, 8000, strict=True)
    with socket.socket() as taken:  # a port in use is still only "not free"
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert preflight.port_free("127.0.0.1", taken.getsockname()[1], strict=True) is False


# ----- the server's key comes only from api_key= -------------------------------------------------------
def test_an_inherited_vllm_api_key_reaches_no_server_and_api_key_sets_the_guards_key(tmp_path):
    inherited = {"VLLM_API_KEY": "stray-key-from-the-shell", "COURSE_SERVER_KEY": "stray-guard-key",
                 "PATH": "/usr/bin", "PYTHONPATH": "/elsewhere"}
    env = process.server_env(Launch(["python"], {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}), tmp_path, inherited)
    assert "VLLM_API_KEY" not in env and "COURSE_SERVER_KEY" not in env
    assert env["PATH"] == "/usr/bin" and env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert env["TMPDIR"] == str(tmp_path)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(COURSE_ROOT), "/elsewhere"]
    keyed = build_launch(ServerConfig(port=8000, api_key=CLASS_KEY), device="cuda", model="/m", served_name="m",
                         machine_env={})
    keyed_env = process.server_env(keyed, tmp_path, inherited)
    assert keyed_env["COURSE_SERVER_KEY"] == CLASS_KEY  # api_key= wins
    assert "VLLM_API_KEY" not in keyed_env  # vLLM 0.26 would write it into its compile cache's files


def test_no_variable_vllm_registers_carries_the_key(tmp_path):
    # vLLM 0.26 writes every variable it registers but an ignore list (VLLM_API_KEY not in it) to
    # torch_compile_cache/.../cache_key_factors.json: the key must sit in a variable vLLM does not know.
    envs = pytest.importorskip("vllm.envs")
    keyed = build_launch(ServerConfig(port=8000, host="0.0.0.0", api_key=CLASS_KEY), device="cuda", model="/m",
                         served_name="m", machine_env={})
    env = process.server_env(keyed, tmp_path, {"VLLM_API_KEY": "stray-key-from-the-shell"})
    holding = [name for name, value in env.items() if CLASS_KEY in value]
    assert holding == ["COURSE_SERVER_KEY"] and not set(holding) & set(envs.environment_variables)


def test_spawn_server_launches_without_the_kernels_stray_key(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "stray-key-from-the-shell")
    seen = {}

    def fake_popen(argv, *, env, **_):
        seen.update(env)
        return "started"

    monkeypatch.setattr(subprocess, "Popen", fake_popen)  # nothing is started
    launch = Launch(["python", "-c", "pass"], {})
    assert process.spawn_server(launch, tmp_path / "server.log", tmp_path) == "started"
    assert "VLLM_API_KEY" not in seen and seen["TMPDIR"] == str(tmp_path)


def test_the_start_timeout_is_set_by_device_unless_given():
    """A GPU start compiles, and a Colab T4 has 2 vCPUs: 600 s there, 300 s on a CPU; a given value holds on both."""
    from helpers.serve.config import ServerConfig

    assert (ServerConfig().startup_timeout("cpu"), ServerConfig().startup_timeout("cuda")) == (300.0, 600.0)
    assert ServerConfig(startup_timeout_s=42).startup_timeout("cuda") == 42
