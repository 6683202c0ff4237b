from helpers.units import duration, factor, share


def test_a_gpu_steps_microseconds_are_not_printed_as_zero_milliseconds():
    # notebook 04 on the H200 printed "0.0 ms a sequence" and "0 s of prefill" with fixed formats
    assert duration(0.000026) == "26.0 µs" and duration(0.34) == "340 ms" and duration(0.0) == "0 s"


def test_a_cpu_steps_milliseconds_keep_three_digits():
    assert [duration(s) for s in (0.0325, 0.00163, 0.00307, 14.8)] == ["32.5 ms", "1.63 ms", "3.07 ms", "14.8 s"]


def test_rounding_up_moves_to_the_next_unit():
    assert duration(0.99996) == "1.00 s" and duration(0.00099996) == "1.00 ms"


def test_a_tiny_share_of_a_gpus_pool_keeps_two_digits():
    assert share(85 / 372_682) == "0.023%" and share(0.014) == "1.4%" and share(0.26) == "26%" and share(0.0) == "0%"


def test_a_factor_keeps_two_significant_digits_in_any_range():
    assert [factor(r) for r in (1.627, 1.04, 0.934, 9.96, 123.0)] == ["1.6x", "1.0x", "0.93x", "10x", "over 100x"]
