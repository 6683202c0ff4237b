"""helpers.tuning.command: the module's tuning command beside vLLM's defaults, read from a server's labels and log."""

from __future__ import annotations

import pytest

from helpers.tuning.command import (
    GIB,
    MODULE_COMMAND,
    batch_cap,
    differences,
    engine_settings,
    settings_table,
    vllm_default_max_num_seqs,
)

# The lines of a real vLLM 0.32 CPU server's log that matter here (build/server-logs, 2026-12-02)
DEFAULTS_LOG = ("(APIServer pid=4420) INFO 12-02 12:24:50 [api_utils.py:286] non-default args: {'host': '127.0.0.1', "
                "'model': '/m', 'dtype': 'bfloat16', 'max_model_len': 1024, 'served_model_name': ['smollm2'], "
                "'kv_cache_memory_bytes': 2147483648, 'optimization_level': '0'}")
COMMAND_LOG = DEFAULTS_LOG.replace("'optimization_level': '0'}",
                                   "'optimization_level': '0', 'max_num_seqs': 256, 'gpu_memory_utilization': 0.9, "
                                   "'enable_prefix_caching': True}")


def test_the_modules_command_as_server_settings():
    assert MODULE_COMMAND == {"gpu_memory_utilization": 0.9, "max_num_seqs": 256, "enable_prefix_caching": True}


def test_a_cap_passed_on_the_command_line_is_read_from_the_log():
    assert batch_cap(COMMAND_LOG, device="cpu") == (256, "passed on the command line")


def test_without_one_the_cap_is_vllms_default_for_the_device_and_says_it_is_not_logged():
    cap, source = batch_cap(DEFAULTS_LOG, device="cpu")
    assert cap == 128 and "default on a CPU" in source and "not logged" in source
    assert batch_cap(DEFAULTS_LOG, device="cuda", memory_gib=139.8, name="NVIDIA H200")[0] == 1024
    assert batch_cap(DEFAULTS_LOG, device="cuda", memory_gib=79.2, name="NVIDIA A100 80GB")[0] == 256


def test_the_default_table_matches_vllms_own_function_on_this_machine():
    pytest.importorskip("vllm")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    _, seqs = EngineArgs.get_batch_defaults(world_size=1)
    device = "cpu" if current_platform.is_cpu() else "cuda"
    memory_gib = None if device == "cpu" else current_platform.get_device_total_memory() / GIB
    name = "" if device == "cpu" else current_platform.get_device_name()
    assert vllm_default_max_num_seqs(device, memory_gib, name) == seqs[UsageContext.OPENAI_API_SERVER]


def test_the_settings_come_from_the_labels_the_log_and_the_kv_report():
    info = {"enable_prefix_caching": "True", "gpu_memory_utilization": "0.9", "kv_cache_memory_bytes": "2147483648"}
    s = engine_settings("module's command", info, COMMAND_LOG, {"num_tokens": 93184}, device="cpu")
    assert (s.max_num_seqs, s.kv_pool_bytes, s.kv_tokens, s.prefix_caching, s.gpu_memory_utilization) == (
        256, 2 * GIB, 93184, "True", "0.9")


def test_a_gpu_pool_without_the_bytes_label_takes_the_logs_bytes():
    s = engine_settings("defaults", {"kv_cache_memory_bytes": "None"}, DEFAULTS_LOG,
                        {"num_tokens": 10, "memory_bytes": 5 * GIB}, device="cuda", memory_gib=139.8, name="H200")
    assert s.kv_pool_bytes == 5 * GIB and s.max_num_seqs == 1024


def test_on_a_cpu_the_modules_command_differs_from_the_defaults_only_in_the_cap_and_the_unused_fraction():
    info = {"enable_prefix_caching": "True", "kv_cache_memory_bytes": "2147483648"}
    defaults = engine_settings("defaults", {**info, "gpu_memory_utilization": "0.92"}, DEFAULTS_LOG,
                               {"num_tokens": 93184}, device="cpu")
    command = engine_settings("module's command", {**info, "gpu_memory_utilization": "0.9"}, COMMAND_LOG,
                              {"num_tokens": 93184}, device="cpu")
    assert differences(defaults, command) == ["max_num_seqs 128 -> 256", "gpu_memory_utilization 0.92 -> 0.9"]
    table = settings_table([defaults, command])
    assert "| prefix caching | True | True |" in table
    assert "| KV pool | 2.000 GiB, 93,184 token slots | 2.000 GiB, 93,184 token slots |" in table
