"""helpers.tuning.roofline: the memory-bandwidth bound of a decode step, and the bandwidth it is drawn with."""

import pytest

from helpers.errors import InvalidArgumentError
from helpers.tuning.roofline import decode_roofline, measure_copy_bandwidth, spec_bandwidth

SMOLLM2_BF16 = dict(weight_bytes=134_515_008 * 2, kv_bytes_per_token=23_040)  # 135M parameters; 30 layers x 3 KV heads x 64 x 2 x 2 B


def test_one_request_reads_the_weights_and_its_own_kv_cache():
    bound = decode_roofline(**SMOLLM2_BF16, context_tokens=[1000], bandwidth_bytes_per_s=100e9)
    assert bound.bytes_per_step == 134_515_008 * 2 + 23_040 * 1000
    assert bound.step_s == pytest.approx(bound.bytes_per_step / 100e9)
    assert bound.tok_per_s == pytest.approx(1 / bound.step_s)


def test_a_bigger_batch_shares_the_weights_so_its_bound_grows_almost_linearly_until_kv_dominates():
    one = decode_roofline(**SMOLLM2_BF16, context_tokens=[100], bandwidth_bytes_per_s=20e9)
    many = decode_roofline(**SMOLLM2_BF16, context_tokens=[100] * 64, bandwidth_bytes_per_s=20e9)
    assert 40 < many.tok_per_s / one.tok_per_s < 64  # 269 MB of weights shared; 64 requests' KV (147 MB) not
    long = decode_roofline(**SMOLLM2_BF16, context_tokens=[8000] * 64, bandwidth_bytes_per_s=20e9)
    assert long.tok_per_s < many.tok_per_s / 3  # long contexts: the KV cache, not the weights, is what is read


def test_efficiency_is_the_bound_over_the_measured_step():
    bound = decode_roofline(**SMOLLM2_BF16, context_tokens=[100] * 4, bandwidth_bytes_per_s=10e9)
    assert bound.efficiency(bound.step_s * 4) == pytest.approx(0.25)
    with pytest.raises(InvalidArgumentError, match="measured_step_s must be"):
        bound.efficiency(0)


@pytest.mark.parametrize("change, name", [(dict(weight_bytes=0), "weight_bytes"),
                                          (dict(kv_bytes_per_token=-1), "kv_bytes_per_token"),
                                          (dict(bandwidth_bytes_per_s=0), "bandwidth_bytes_per_s"),
                                          (dict(context_tokens=[0]), "context_tokens")])
def test_bad_input_is_refused_in_words(change, name):
    args = dict(**SMOLLM2_BF16, context_tokens=[10], bandwidth_bytes_per_s=1e9) | change
    with pytest.raises(InvalidArgumentError, match=name):
        decode_roofline(**args)
    with pytest.raises(InvalidArgumentError, match="at least one request"):
        decode_roofline(**SMOLLM2_BF16, context_tokens=[], bandwidth_bytes_per_s=1e9)


@pytest.mark.parametrize("name, expected", [("NVIDIA H200", 4.8e12), ("Tesla T4", 320e9), ("NVIDIA L40S", 864e9),
                                            ("NVIDIA L4", 300e9), ("NVIDIA A100-SXM4-80GB", 2.039e12),
                                            ("NVIDIA A10G", 600e9), ("NVIDIA H100 PCIe", 2.0e12),
                                            ("NVIDIA GeForce RTX 4090", None)])
def test_datasheet_bandwidth_is_found_by_the_most_specific_name(name, expected):
    assert spec_bandwidth(name) == expected


def test_a_cpu_copy_measures_a_plausible_bandwidth():
    bandwidth = measure_copy_bandwidth("cpu", size_mib=64, repeats=3)
    assert 5e8 < bandwidth < 2e12  # from a slow laptop's 0.5 GB/s to beyond any CPU's memory
