"""The course runs on two vLLM versions: 0.32.0 (the CPU build, CI) and 0.26.0 (the GPU build run on
an H200, pinned for Colab). Every flag the server helper can emit and every metric the course reads
must exist in both. The help texts and /metrics texts in tests/data/ were captured from real servers:
vllm-0.32.0-cpu here, vllm-0.26.0-gpu on the H200 (scripts/gpu_reference_run.sh's machine)."""

from pathlib import Path

import pytest

from helpers.load.prometheus import COURSE_METRICS, parse_metrics
from helpers.serve.config import ServerConfig, build_launch

DATA = Path(__file__).parent / "data"
VERSIONS = ("vllm-0.32.0-cpu", "vllm-0.26.0-gpu")
METRICS = {"vllm-0.32.0-cpu": "vllm-0.32-cpu-busy-max_num_seqs-4.txt", "vllm-0.26.0-gpu": "vllm-0.26.0-gpu.txt"}


def every_flag_the_helper_emits(device):
    config = ServerConfig(port=8000, max_num_seqs=8, gpu_memory_utilization=0.5, kv_cache_space_gib=1,
                          enable_prefix_caching=False, dtype="half", quantization="fp8", api_key="k")
    flags = set()
    for cfg in (config, ServerConfig(port=8000, enable_prefix_caching=True)):
        launch = build_launch(cfg, device=device, model="/m", served_name="m", load_format="dummy")
        flags |= {word for word in launch.argv[3:] if word.startswith("-")}
    return flags


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_flag_exists_in_both_versions(version, device):
    help_text = (DATA / "vllm_help" / f"{version}.txt").read_text()
    flags = every_flag_the_helper_emits(device)
    assert "--max-num-seqs" in flags and "--load-format" in flags
    missing = [flag for flag in sorted(flags) if f" {flag}" not in help_text and f"[{flag}" not in help_text]
    assert missing == [], f"{version} does not know {missing}"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_metric_the_course_reads_exists_in_both_versions(version):
    found = parse_metrics((DATA / "metrics" / METRICS[version]).read_text())
    missing = [name for name in COURSE_METRICS if name not in found]
    assert missing == [], f"{version}'s /metrics lacks {missing}"


@pytest.mark.parametrize(("version", "block_size"), [("vllm-0.32.0-cpu", "128"), ("vllm-0.26.0-gpu", "16")])
def test_both_versions_publish_the_engines_cache_settings(version, block_size):
    from helpers.load.prometheus import cache_config_labels

    labels = cache_config_labels((DATA / "metrics" / METRICS[version]).read_text())
    assert labels["block_size"] == block_size and labels["enable_prefix_caching"] == "True"
    assert int(labels["num_gpu_blocks"]) > 0
