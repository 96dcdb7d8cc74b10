"""SamplingParams: OpenAI's ranges refused with the field's name and range, and generation_config defaults under the
request's own fields."""

from __future__ import annotations

import pytest

from serve.generation import SamplingParams


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"temperature": 2.5}, r"temperature must be in \[0, 2\], got 2.5"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\], got 0.0"),
        ({"top_p": 1.5}, "top_p"),
        ({"presence_penalty": 2.1}, r"presence_penalty must be in \[-2, 2\]"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"n": 0}, "n must be >= 1, got 0"),
        ({"max_tokens": 0}, "max_tokens must be >= 1, got 0"),
        ({"logprobs": 21}, r"logprobs must be in \[0, 20\], got 21"),
        ({"top_k": -2}, "top_k must be >= -1"),
        ({"min_p": 1.2}, "min_p"),
        ({"repetition_penalty": 0.0}, "repetition_penalty must be > 0"),
        ({"min_tokens": 5, "max_tokens": 3}, r"min_tokens \(5\) must be at most max_tokens \(3\)"),
        ({"stop": [""]}, "stop must be non-empty strings"),
        ({"stop_token_ids": [-1]}, "stop_token_ids must be >= 0"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"max_tokens": "16"}, "max_tokens must be an integer"),
        ({"temperature": True}, "temperature must be a number"),
        ({"best_of": 2}, "unknown sampling field 'best_of'"),
    ],
)
def test_out_of_range_fields_are_refused_naming_the_field(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingParams.from_request(fields)


def test_the_models_defaults_apply_under_the_requests_fields() -> None:
    defaults = {"temperature": 0.6, "top_p": 0.9, "top_k": 50, "repetition_penalty": 1.1, "max_new_tokens": 64,
                "do_sample": True}  # fmt: skip
    params = SamplingParams.from_request({"temperature": 0.2, "stop": "\n", "seed": None}, defaults)
    assert (params.temperature, params.top_p, params.top_k, params.repetition_penalty) == (0.2, 0.9, 50, 1.1)
    assert params.max_tokens == 64 and params.stop == ("\n",) and params.seed is None

    class Defaults:  # an object with attributes works too (serve/zoo/decoders' GenerationDefaults)
        temperature = 0.0
        top_p = None

    params = SamplingParams.from_request({}, Defaults())
    assert params.greedy and params.top_p == 1.0 and params.max_tokens == 16
    # serve/zoo/decoders' GenerationDefaults.sampling_defaults() speaks our names
    assert SamplingParams.from_request({}, {"max_tokens": 7, "top_k": 3}).max_tokens == 7


def test_edges_inside_the_ranges_are_accepted() -> None:
    for fields in ({"temperature": 0}, {"temperature": 2}, {"top_p": 1}, {"top_k": -1}, {"logprobs": 0},
                   {"presence_penalty": -2}, {"max_tokens": None}, {"seed": -5}):  # fmt: skip
        SamplingParams.from_request(fields)
