import pytest

from helpers.load.pace import LAB_OUTPUT_FLOOR, LAB_OUTPUT_TOKENS, Pace, lab_output_tokens


@pytest.mark.parametrize("tok_s, expected", [(31.0, 0.5), (62.0, 1.0), (400.0, 1.0), (6.2, 0.1)])
def test_factor_is_the_share_of_the_reference_pace_capped_at_one(tok_s, expected):
    assert Pace(tok_s, reference_tok_s=62.0).factor == expected


@pytest.mark.parametrize("tok_s", [1.0, 20.0, 31.0, 61.0, 62.0, 1e6])
@pytest.mark.parametrize("amount, minimum", [(64, 32), (48, 24), (3, 2), (2, 1), (16, 32)])
def test_scaling_never_grows_a_workload_nor_cuts_below_its_floor(tok_s, amount, minimum):
    used = Pace(tok_s, reference_tok_s=62.0).scaled(amount, minimum=minimum)
    assert min(minimum, amount) <= used <= amount


def test_a_machine_half_as_fast_runs_half_the_work_above_the_floor():
    assert Pace(31.0, reference_tok_s=62.0).scaled(64, minimum=24) == 32


def test_the_lab_keeps_its_planned_length_on_a_gpu_and_shortens_only_on_a_slow_cpu():
    slow, fast = Pace(10.0, reference_tok_s=62.0), Pace(200.0, reference_tok_s=62.0)
    assert lab_output_tokens(fast, "cpu") == LAB_OUTPUT_TOKENS["cpu"]
    assert lab_output_tokens(slow, "cpu") == LAB_OUTPUT_FLOOR
    assert lab_output_tokens(slow, "cuda") == LAB_OUTPUT_TOKENS["cuda"]


def test_the_description_names_what_was_scaled_and_what_was_not():
    text = Pace(31.0, reference_tok_s=62.0).describe({"output tokens": (64, 32), "repetitions": (2, 2)})
    assert "0.50x the reference machine" in text and "output tokens 64 -> 32" in text
    assert "repetitions" not in text


def test_a_faster_machine_gets_longer_demonstrations_up_to_a_cap():
    assert Pace(62.0).speed == 1.0 and Pace(1240.0).speed == 20.0  # not capped, unlike factor
    assert [Pace(t).length_scale(8) for t in (20.0, 62.0, 130.0, 1240.0)] == [1, 1, 2, 8]


@pytest.mark.parametrize("probe", ["measure_pace", "one_request_decode_tok_s"])
def test_a_failed_probe_says_where_to_look_and_what_to_run_again(probe, monkeypatch):
    import asyncio
    from types import SimpleNamespace

    from helpers.load import pace
    from helpers.load.client import RequestRecord

    async def refused(server, workload, **kwargs):
        return SimpleNamespace(records=[RequestRecord(0, ok=False, error="APIConnectionError: Connection error.")])

    monkeypatch.setattr(pace, "build_workload", lambda server, **kwargs: None)
    monkeypatch.setattr(pace, "run_load_test", refused)
    ours = SimpleNamespace(url="http://127.0.0.1:8000", log_tail=lambda lines=25: "")
    with pytest.raises(RuntimeError, match=r"probe failed \(APIConnectionError.*print\(server\.log_tail\(\)\).*run "
                                           r"the cell that starts it again"):
        asyncio.run(getattr(pace, probe)(ours))
    with pytest.raises(RuntimeError, match=r"server at http://127.0.0.1:9000 answers .*run this cell again"):
        asyncio.run(getattr(pace, probe)(SimpleNamespace(url="http://127.0.0.1:9000")))
