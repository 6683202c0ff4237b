"""The 8B-shaped model with random weights, and the GPU-only choices around it (dtype on a T4)."""

import json
import os
import shutil

import pytest

from helpers.serve.dummy_model import ARCHITECTURES, parse_dummy_name, prepare_dummy_model
from helpers.errors import ModelNotAvailableError, NoGPUError
from helpers.hardware import GPUInfo
from helpers.paged.kv_math import kv_bytes_per_token, load_config
from helpers.serve.model import prepare_embedded_model, resolve_model
from helpers.serve.config import ServerConfig, build_launch
from helpers.serve.gpu import gpu_dtype


@pytest.fixture(scope="module")
def embedded_dir():
    return prepare_embedded_model()  # converted by `make setup`


def test_names_are_recognised_case_insensitively_and_nothing_else_is():
    assert parse_dummy_name(" Dummy:Llama-3.1-8B ") == "llama-3.1-8b"
    assert parse_dummy_name("meta-llama/Meta-Llama-3.1-8B-Instruct") is None
    assert parse_dummy_name("embedded") is None


def test_the_folder_has_llama_3_1_8b_shapes_and_the_embedded_tokenizer(embedded_dir, tmp_path):
    folder = prepare_dummy_model("llama-3.1-8b", embedded_dir, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]) == (32, 4096, 14336)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (32, 8)
    assert config["vocab_size"] == json.loads((embedded_dir / "config.json").read_text())["vocab_size"]
    assert not list(folder.glob("*.safetensors"))  # no weights: vLLM makes random ones
    assert (folder / "tokenizer.json").read_bytes() == (embedded_dir / "tokenizer.json").read_bytes()
    # what the KV-cache lessons compute for it: 32 layers x 8 heads x 128 dims x K,V x 2 bytes
    assert kv_bytes_per_token(load_config(folder)) == 131_072


def test_the_config_loads_in_transformers_with_llama3_rope(embedded_dir, tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    folder = prepare_dummy_model("llama-3.1-8b", embedded_dir, tmp_path)
    config = AutoConfig.from_pretrained(folder)
    rope = getattr(config, "rope_parameters", None) or config.rope_scaling
    assert rope["rope_type"] == "llama3" and rope["factor"] == 8.0
    assert AutoTokenizer.from_pretrained(folder).chat_template


def test_prepared_once_then_reused(embedded_dir, tmp_path):
    first = prepare_dummy_model("llama-3.1-8b", embedded_dir, tmp_path)
    stamp = os.stat(first / "config.json").st_mtime_ns
    assert prepare_dummy_model("llama-3.1-8b", embedded_dir, tmp_path) == first
    assert os.stat(first / "config.json").st_mtime_ns == stamp


def test_an_unknown_architecture_lists_the_known_ones(embedded_dir, tmp_path):
    with pytest.raises(ModelNotAvailableError, match="dummy:llama-3.1-8b"):
        prepare_dummy_model("gpt-5", embedded_dir, tmp_path)
    assert list(ARCHITECTURES) == ["llama-3.1-8b"]


def test_resolve_model_serves_it_with_the_dummy_load_format(monkeypatch, tmp_path, embedded_dir):
    shutil.copytree(embedded_dir, tmp_path / embedded_dir.name)  # a cache with the embedded model ready
    monkeypatch.setenv("VLLM_COURSE_MODEL", "dummy:llama-3.1-8b")
    choice = resolve_model(cache_dir=tmp_path)
    assert (choice.served_name, choice.source, choice.load_format) == ("dummy-llama-3.1-8b", "dummy", "dummy")
    launch = build_launch(ServerConfig(port=8000), device="cuda", model=choice.model,
                          served_name=choice.served_name, load_format=choice.load_format)
    assert launch.argv[launch.argv.index("--load-format") + 1] == "dummy"
    assert resolve_model("embedded", cache_dir=tmp_path).load_format is None


def test_starting_it_on_a_cpu_is_refused_before_anything_launches(monkeypatch):
    from helpers.serve.preflight import gpu_build_installed
    from helpers.serve.server import VLLMServer

    monkeypatch.setenv("VLLM_COURSE_FORCE_CPU", "1")
    server = VLLMServer(model="dummy:llama-3.1-8b")
    # With vLLM's GPU build (make test-gpu) a machine without a GPU is refused one check earlier,
    # for any model: that build cannot serve on a CPU at all.
    refusal = "vLLM's GPU build, but no NVIDIA GPU" if gpu_build_installed() else "needs a GPU|GPU throughput labs"
    with pytest.raises(NoGPUError, match=refusal):
        server.start(quiet=True)
    assert server.process is None


def test_a_t4_gets_float16_and_ampere_or_newer_keeps_bf16():
    t4 = GPUInfo("Tesla T4", 15360, (7, 5))
    a100 = GPUInfo("NVIDIA A100-SXM4-40GB", 40960, (8, 0))
    assert gpu_dtype([t4]) == "half"
    assert gpu_dtype([a100]) is None and gpu_dtype([]) is None
    assert gpu_dtype([a100, t4]) == "half"  # the weakest GPU decides


def test_its_weights_are_13_8_gib_as_the_h200_log_says():
    """tests/data/server_logs/ready_gpu_dummy_8b.log: "Model loading took 13.8 GiB" (SmolLM2's vocabulary, not Llama's)."""
    from helpers.tuning.arithmetic import LLAMA_31_8B, count_parameters

    from helpers.serve.dummy_model import weight_gib

    shape = {**ARCHITECTURES["llama-3.1-8b"], "vocab_size": 49152}
    assert count_parameters(shape) == 7_382_241_280
    assert weight_gib(shape) == count_parameters(shape) * 2 / 2**30  # the serve room's count agrees with tuning's
    assert round(weight_gib(shape), 1) == 13.8
    assert round(weight_gib({**ARCHITECTURES["llama-3.1-8b"], "vocab_size": 128256}), 1) == 15.0  # the real model
    assert count_parameters(LLAMA_31_8B) == 8_030_261_248


@pytest.mark.parametrize(("gpu", "utilization", "refused"), [
    (GPUInfo("Tesla T4", 15360, (7, 5)), None, True),
    (GPUInfo("NVIDIA L4", 23034, (8, 9)), None, False),
    (GPUInfo("NVIDIA H100", 81559, (9, 0)), 0.15, True),
    (GPUInfo("NVIDIA H100", 81559, (9, 0)), None, False),
], ids=["t4", "l4", "h100-at-0.15", "h100"])
def test_a_gpu_share_too_small_for_its_weights_is_refused_before_launch(gpu, utilization, refused):
    from helpers.serve.preflight import dummy_gpu_refusal

    shape = {**ARCHITECTURES["llama-3.1-8b"], "vocab_size": 49152}
    why = dummy_gpu_refusal("dummy-llama-3.1-8b", shape, [gpu], utilization)
    assert (why is not None) is refused
    if refused:
        assert "13.8 GiB for its bf16 weights" in why and gpu.name in why and "gpu_memory_utilization" in why


@pytest.fixture(scope="module")
def course_cache(tmp_path_factory, embedded_dir):
    """A model cache with the embedded model ready, where resolve_model writes the dummy folder (SmolLM2's vocabulary)."""
    cache = tmp_path_factory.mktemp("course-cache")
    shutil.copytree(embedded_dir, cache / embedded_dir.name)
    return cache


T4 = GPUInfo("Tesla T4", 15360, (7, 5))
H100 = GPUInfo("NVIDIA H100 80GB HBM3", 81559, (9, 0))


@pytest.mark.parametrize(("gpu", "utilization", "refused"), [(T4, None, True), (H100, 0.15, True), (H100, None, False)],
                         ids=["t4", "h100-at-0.15", "h100"])
def test_the_refusal_comes_from_start_on_a_small_gpu(monkeypatch, course_cache, gpu, utilization, refused):
    """The checks a start makes (check_before_launch) refuse it, with the server's own gpu_memory_utilization."""
    from helpers.errors import NotEnoughMemoryError
    from helpers.serve import gpu as gpu_module
    from helpers.serve import preflight, process
    from helpers.serve.server import VLLMServer

    def no_launch(*args, **kwargs):
        raise AssertionError("a vLLM process was launched by the checks before launch")

    monkeypatch.setenv("VLLM_COURSE_CACHE", str(course_cache))
    monkeypatch.delenv("VLLM_COURSE_MODEL", raising=False)
    # This machine seen as one with that GPU: choose_device picks it ("auto"), the stack probe is skipped.
    monkeypatch.setattr(preflight, "detect_device", lambda: "cuda")
    monkeypatch.setattr(preflight, "detect_gpus", lambda: [gpu])
    monkeypatch.setattr(gpu_module, "checked_stack", lambda: None)
    monkeypatch.setattr(process, "spawn_server", no_launch)
    server = VLLMServer(model="dummy:llama-3.1-8b", gpu_memory_utilization=utilization)
    if refused:
        share = f"{utilization or preflight.VLLM_GPU_MEMORY_UTILIZATION:g} x"
        with pytest.raises(NotEnoughMemoryError, match=f"13.8 GiB for its bf16 weights.*{share}.*{gpu.name}"):
            server.check_before_launch(lambda text: None)
    else:
        server.check_before_launch(lambda text: None)  # 0.92 x 79.6 GiB holds it
        assert server.model_name == "dummy-llama-3.1-8b" and server.model_source == "dummy"
    assert server.device == "cuda" and server.process is None
