"""Numbers written for people: a value's digits are those its error supports."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow._text import format_with_error


@pytest.mark.parametrize(
    ("value", "error", "text"),
    [
        (0.16284, 3.9e-4, ("0.1628", "0.0004")),
        (14.13, 0.05, ("14.13", "0.05")),
        (2.5137, 0.043, ("2.51", "0.04")),
        (0.2878, 0.0013, ("0.2878", "0.0013")),  # a leading 1 or 2: two digits
        (5.6, 2.7, ("5.6", "2.7")),
        (1234.5, 40.0, ("1230", "40")),
        (-0.05, 0.3, ("-0.1", "0.3")),
        (3e-5, 2e-6, ("3.00e-05", "2.0e-06")),
        (0.5, None, ("0.5", "—")),
        (0.5, math.nan, ("0.5", "NaN")),
        (0.5, 0.0, ("0.5", "0")),
    ],
)
def test_digits_follow_the_error(value, error, text):
    assert format_with_error(value, error) == text


@given(st.floats(1e-2, 1e4), st.floats(1e-7, 0.09))
@settings(max_examples=200, deadline=None)
def test_value_and_error_are_rounded_at_the_same_decimal_place(value, error):
    v, e = format_with_error(value, error)
    places = len(e.split(".")[1])
    assert len(v.split(".")[1]) == places  # the same decimal place
    unit = 10.0**-places
    assert abs(float(v) - value) <= 0.5 * unit * (1 + 1e-6)
    assert abs(float(e) - error) <= 0.5 * unit * (1 + 1e-6) or float(e) == pytest.approx(unit)
    assert 1 <= len(e.split(".")[1].lstrip("0")) <= 2  # one or two significant digits
