"""json_values.dumps: standard JSON out (NaN and Infinity as null), and `indent=2` text identical to json.dumps'
whether the value takes the flat-array fast path or not."""

from __future__ import annotations

import json
import math
import random
import sys

import numpy as np
import pytest

from serve.batching import json_values


def _values() -> list:
    rng = random.Random(0)
    floats = [rng.uniform(-1e6, 1e6) for _ in range(10)] + [1e-7, 5e-324, 1.7976931348623157e308, -0.0, 0.0, 1e16]
    return [
        [], [0.5], floats, [1, 2, 3], [True, False, None, 1, 2.5], [-(10**30), 10**30],
        np.float32(np.linspace(-3, 3, 7)).tolist(), np.arange(5, dtype=np.float64),  # a 1-D array, via `default`
        [[1.0, 2.0], [3.0]], [1.0, [2.0]], ["a,b", 1.0], [1.0, "x"], [{"a": 1}], {"a": [1.0, 2.0]}, "text", 3.5,
        [np.float64(1.5), 2.0],  # a numpy scalar is a float subclass: written by `default`'s rules as before
    ]  # fmt: skip


def _default(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(type(value).__name__)


@pytest.mark.parametrize("value", _values(), ids=lambda v: type(v).__name__)
def test_indented_text_is_json_dumps_own(value):
    assert json_values.dumps(value, default=_default, indent=2) == json.dumps(value, default=_default, indent=2)


def test_non_finite_floats_are_null_on_every_path():
    assert json_values.dumps([1.0, math.nan, -math.inf], indent=2) == "[\n  1.0,\n  null,\n  null\n]"
    assert json_values.dumps({"x": math.inf}) == '{"x": null}'


def test_a_flat_array_is_not_written_by_the_python_encoder():
    calls: list[str] = []

    def count(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith("json/encoder.py"):
            calls.append(frame.f_code.co_name)

    sys.setprofile(count)
    try:
        text = json_values.dumps([0.25] * 10, default=_default, indent=2)
    finally:
        sys.setprofile(None)
    assert text == json.dumps([0.25] * 10, indent=2)
    assert "_iterencode_list" not in calls
