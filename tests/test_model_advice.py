"""A model that cannot be served is refused with advice that fits where it was asked for: the model= parameter
or VLLM_COURSE_MODEL. Nothing here reaches the network: the hub is faked as unreachable."""

import json

import pytest

from helpers.errors import ModelNotAvailableError, NoGPUError, NotEnoughMemoryError
from helpers.hardware import GPUInfo
from helpers.serve import model as model_module
from helpers.serve import preflight
from helpers.serve.dummy_model import ARCHITECTURES
from helpers.serve.model import MODEL_ENV, ModelChoice, resolve_model
from helpers.serve.preflight import check_model_device


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setattr(model_module, "_unreachable_reason", lambda endpoint: "Network is unreachable")


@pytest.mark.parametrize("name", ["smollm2", "SmolLM2"])
def test_the_embedded_models_served_name_is_not_taken_for_a_model_id(monkeypatch, offline, name):
    monkeypatch.delenv(MODEL_ENV, raising=False)
    with pytest.raises(ModelNotAvailableError) as refused:
        resolve_model(name)  # what notebook 01 prints as the served model, in any case
    message = str(refused.value)
    assert "served under" in message and "not a model id" in message and "passed as model=" in message
    assert "pass model=None" in message and MODEL_ENV not in message


def test_the_same_name_set_in_the_variable_says_to_unset_it(monkeypatch, offline):
    monkeypatch.setenv(MODEL_ENV, "smollm2")
    with pytest.raises(ModelNotAvailableError, match=f"set in {MODEL_ENV}.*unset {MODEL_ENV}"):
        resolve_model()


def test_a_missing_folder_passed_as_model_says_to_pass_model_none(monkeypatch, tmp_path):
    monkeypatch.delenv(MODEL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotAvailableError) as refused:
        resolve_model("./no-such-folder")
    message = str(refused.value)
    assert "does not exist" in message and "passed as model=" in message
    assert "pass model=None" in message and MODEL_ENV not in message


def test_an_unreachable_hub_advice_names_the_parameter_not_the_variable(monkeypatch, offline):
    monkeypatch.delenv(MODEL_ENV, raising=False)
    with pytest.raises(ModelNotAvailableError) as refused:
        resolve_model("some-org/not-in-any-cache")
    message = str(refused.value)
    assert "cannot be reached" in message and "passed as model=" in message
    assert "pass model=None to serve the embedded model" in message and f"unset {MODEL_ENV}" not in message


def test_with_the_variable_set_the_advice_is_model_embedded(monkeypatch, offline):
    monkeypatch.setenv(MODEL_ENV, "other-org/other-model")  # model=None would serve this one
    with pytest.raises(ModelNotAvailableError, match="pass model='embedded'"):
        resolve_model("some-org/not-in-any-cache")


def test_from_the_variable_the_advice_is_to_unset_it(monkeypatch, offline):
    monkeypatch.setenv(MODEL_ENV, "some-org/not-in-any-cache")
    with pytest.raises(ModelNotAvailableError, match=f"set in {MODEL_ENV}.*unset {MODEL_ENV} to serve the embedded"):
        resolve_model()


def test_the_dummy_model_on_a_cpu_gets_the_same_advice(monkeypatch):
    monkeypatch.delenv(MODEL_ENV, raising=False)
    choice = ModelChoice("/nowhere", "dummy-llama-3.1-8b", "dummy", origin="model=")
    with pytest.raises(NoGPUError) as refused:
        check_model_device(choice, "cpu")
    assert "pass model=None" in str(refused.value) and MODEL_ENV not in str(refused.value)


def test_the_dummy_model_on_a_small_gpu_gets_the_same_advice(monkeypatch, tmp_path):
    monkeypatch.delenv(MODEL_ENV, raising=False)
    (tmp_path / "config.json").write_text(json.dumps({**ARCHITECTURES["llama-3.1-8b"], "vocab_size": 49152}))
    monkeypatch.setattr(preflight, "detect_gpus", lambda: [GPUInfo("Tesla T4", 15360, (7, 5))])
    choice = ModelChoice(str(tmp_path), "dummy-llama-3.1-8b", "dummy", origin="model=")
    with pytest.raises(NotEnoughMemoryError) as refused:
        check_model_device(choice, "cuda")
    assert "pass model=None" in str(refused.value) and MODEL_ENV not in str(refused.value)
