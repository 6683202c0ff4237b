"""helpers.validate: every bad caller input is a ValueError that says what was given and what to pass."""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import validate
from helpers.errors import CourseError, InvalidArgumentError

ROOT = Path(__file__).resolve().parent.parent
BAD_COUNTS = [0, -3, 2.5, 2.0, True, False, math.nan, math.inf, -math.inf, "5", None]


@pytest.mark.parametrize("value", BAD_COUNTS, ids=repr)
def test_a_count_must_be_a_positive_integer_and_the_message_quotes_what_was_given(value):
    with pytest.raises(ValueError) as caught:
        validate.positive_int(value, "output_tokens")
    message = str(caught.value)
    assert message.startswith("output_tokens must be a positive integer, got ")
    assert repr(value) in message


def test_the_message_says_what_was_given_and_what_to_pass():
    with pytest.raises(InvalidArgumentError, match=r"^output_tokens must be a positive integer, got 0\.$"):
        validate.positive_int(0, "output_tokens")
    with pytest.raises(InvalidArgumentError, match=r"got True \(a bool\)"):
        validate.positive_int(True, "num_requests")
    with pytest.raises(InvalidArgumentError, match=r"got 2\.0 \(a float\)"):
        validate.positive_int(2.0, "num_requests")


def test_the_error_is_a_value_error_and_a_course_error():
    with pytest.raises(InvalidArgumentError) as caught:
        validate.positive_int(0, "n")
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, CourseError)


def test_good_counts_come_back_as_plain_ints():
    assert validate.positive_int(np.int64(3), "n") == 3 and type(validate.positive_int(np.int64(3), "n")) is int
    assert validate.non_negative_int(0, "seed") == 0
    assert validate.positive_ints([16, np.int32(64)], "prompt_lens") == (16, 64)


@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf, True, "1", None], ids=repr)
def test_seconds_must_be_positive_and_finite(value):
    with pytest.raises(InvalidArgumentError, match=r"timeout_s must be a positive, finite number of seconds, got"):
        validate.positive_number(value, "timeout_s", unit="seconds")


def test_a_fraction_may_be_zero_but_not_negative_or_nan():
    assert validate.non_negative_number(0, "noise") == 0.0
    for bad in (-0.1, math.nan, math.inf):
        with pytest.raises(InvalidArgumentError, match="noise must be a finite number of 0 or more"):
            validate.non_negative_number(bad, "noise")


def test_none_keeps_its_documented_meaning_and_zero_is_refused():
    assert validate.optional_positive_int(None, "concurrency", none_means="every request at once") is None
    with pytest.raises(InvalidArgumentError, match="or None for every request at once, got 0"):
        validate.optional_positive_int(0, "concurrency", none_means="every request at once")


@pytest.mark.parametrize("values", [(), "16", 16, (16, 0), (16, 2.5), (16, None)], ids=repr)
def test_a_list_of_lengths_must_be_non_empty_positive_integers(values):
    with pytest.raises(InvalidArgumentError, match=r"prompt_lens(\[\d\])? must be"):
        validate.positive_ints(values, "prompt_lens")


def test_a_request_longer_than_the_context_is_refused_and_an_unknown_context_checks_nothing():
    validate.fits_context(10**9, None, "anything", "")
    validate.fits_context(2048, 2048, "a full context", "")
    with pytest.raises(InvalidArgumentError, match=r"2,049 tokens, more than the model's context \(max_model_len=2,048\)"):
        validate.fits_context(2049, 2048, "the request", "Pass fewer tokens.")


def test_the_checks_still_run_under_python_dash_o():
    """asserts vanish under -O; the load tester's argument checks must not (old code: an empty workload)."""
    code = ("from helpers.load.workload import build_workload\n"
            "from tests.test_loadtest import WordTokenizer\n"
            "try:\n"
            "    build_workload(WordTokenizer(), num_requests=0)\n"
            "except ValueError as error:\n"
            "    print('ValueError:', error)\n"
            "else:\n"
            "    print('no error')\n")
    done = subprocess.run([sys.executable, "-O", "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ValueError: num_requests must be a positive integer, got 0." in done.stdout


@pytest.mark.parametrize("value", [0, -0.5, 1.01, math.nan, math.inf, "0.9", True, None], ids=repr)
def test_a_fraction_is_a_number_above_zero_and_at_most_one(value):
    with pytest.raises(InvalidArgumentError, match=r"^share must be a fraction of memory in \(0, 1\], got "):
        validate.fraction(value, "share", of="memory")


def test_a_fraction_of_exactly_one_comes_back_as_a_float():
    assert validate.fraction(1, "share") == 1.0 and type(validate.fraction(1, "share")) is float


@pytest.mark.parametrize("value", ["False", "no", 0, 1], ids=repr)
def test_a_switch_must_be_a_real_bool_not_something_truthy(value):
    with pytest.raises(InvalidArgumentError, match=r"^eager must be True or False, got "):
        validate.boolean(value, "eager")


def test_none_is_a_switch_only_where_its_meaning_is_stated():
    assert validate.boolean(None, "caching", none_means="the default") is None
    assert validate.boolean(False, "caching", none_means="the default") is False
    with pytest.raises(InvalidArgumentError, match=r"^eager must be True or False, got None \(a NoneType\)\.$"):
        validate.boolean(None, "eager")


def test_one_of_refuses_an_unhashable_value_and_says_what_else_to_pass():
    with pytest.raises(InvalidArgumentError, match=r"^dtype must be one of 'half', 'float', got \['half'\] \(a list\)\. "
                                                   r"Or None\.$"):
        validate.one_of(["half"], "dtype", {"half": 1, "float": 2}, hint="Or None.")


def test_the_message_names_the_type_with_its_article():
    assert validate.given(Ellipsis) == "Ellipsis (an ellipsis)"
    assert validate.given(8) == "8" and validate.given(8, typed=True) == "8 (an int)"
