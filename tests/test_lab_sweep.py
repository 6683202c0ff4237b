"""scripts/lab_sweep.py refuses settings that cannot make a sweep, before any server starts.

No test here starts a vLLM server: start_server is replaced by a stand-in that fails the
test if the script gets that far.
"""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def sweep(monkeypatch):
    spec = importlib.util.spec_from_file_location("lab_sweep_under_test", ROOT / "scripts" / "lab_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    started = []

    def no_server(**kwargs):
        started.append(kwargs)
        raise AssertionError(f"the sweep tried to start a server with {kwargs}")

    monkeypatch.setattr(module, "start_server", no_server)
    module.started = started
    return module


@pytest.mark.parametrize("args, message", [
    (["--repetitions", "0"], "argument --repetitions: must be a positive integer, got '0'"),
    (["--num-requests", "-3"], "argument --num-requests: must be a positive integer, got '-3'"),
    (["--output-tokens", "2.5"], "argument --output-tokens: must be a positive integer, got '2.5'"),
    (["--settings", "8", "0"], "argument --settings: must be a positive integer, got '0'"),
    (["--output-tokens", "4000"], "the lab's longest prompt (512 tokens) plus output_tokens=4000 is 4,512 tokens, "
                                  "more than the model's context (max_model_len=2,048)"),
])
def test_impossible_options_stop_the_script_with_a_message_before_any_server(sweep, tmp_path, capsys, args, message):
    # before: 0 repetitions or requests went on to start servers (then an AssertionError, or an empty table)
    with pytest.raises(SystemExit) as stopped:
        sweep.main([*args, "--out", str(tmp_path)])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
    assert sweep.started == []


@pytest.mark.parametrize("kwargs, message", [
    ({"max_num_seqs": 0}, r"^each max_num_seqs setting must be a positive integer, got 0\."),
    ({"repetitions": 0}, r"^repetitions must be a positive integer, got 0\."),
    ({"num_requests": 2.5}, r"^num_requests must be a positive integer, got 2\.5\."),
    ({"output_tokens": float("nan")}, r"^output_tokens must be a positive integer, got nan\."),
    ({"attempts": 0}, r"^attempts must be a positive integer, got 0\."),
])
def test_measure_refuses_bad_arguments_before_starting_a_server(sweep, tmp_path, kwargs, message):
    arguments = {"max_num_seqs": 8, "repetitions": 1, "num_requests": 4, "output_tokens": 4, "out": tmp_path,
                 **kwargs}
    with pytest.raises(ValueError, match=message):
        sweep.measure(**arguments)
    assert sweep.started == []


def test_check_settings_accepts_the_defaults_and_refuses_an_empty_sweep(sweep):
    sweep.check_settings(list(sweep.SETTINGS), 2, 50, 64, max_model_len=2048)
    with pytest.raises(ValueError, match="at least one max_num_seqs value"):
        sweep.check_settings([], 2, 50, 64)
