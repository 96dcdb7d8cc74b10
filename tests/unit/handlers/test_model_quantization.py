"""The model-config `quantization: int8` (ours): BaseHandler reads it, the worker's optimize call gets it, and the
plan multiplies its linear layers in int8 (serve.inference.optimize(..., quantization="int8")); a bad value, or int8
beside a half dtype, fails the load with what to write instead."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from handlers.base_handler import model_quantization
from serve.inference import kernels
from serve.worker import load_handler
from serve.worker.optimizing import optimize_handler
from tests.unit.handlers.test_base_handler import context_for
from tests.unit.handlers.test_model_dtype import net_dir  # noqa: F401  (the fixture)


def test_the_model_config_value_is_checked():
    assert model_quantization({}) is None and model_quantization({"quantization": "int8"}) == "int8"
    assert model_quantization({"quantization": "int8", "dtype": "float32"}) == "int8"
    with pytest.raises(ValueError, match="quantization 'int4' is not valid: use int8"):
        model_quantization({"quantization": "int4"})
    with pytest.raises(ValueError, match="with dtype 'bfloat16': choose one"):
        model_quantization({"quantization": "int8", "dtype": "bfloat16"})


def test_quantization_int8_reaches_the_worker_s_plan(net_dir):  # noqa: F811
    yaml = {"quantization": "int8"}
    handler = load_handler(context_for(net_dir, **yaml))
    assert handler.product_quantization == "int8" and handler.dtype is serve.float32
    eager = handler.model
    optimize_handler(handler, yaml, 4, None)  # the base handler has no example input: planned at the first call
    opt = handler.model
    assert opt.products == ("int8" if kernels.int8_products() else "float32")
    x = serve.from_numpy(np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32))
    with serve.no_grad():
        got, want = opt(x).numpy(), eager(x).numpy()
    assert opt.optimized, opt.reason
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # its two linear layers, first and last: float32
    assert {e["dtype"] for e in opt.describe()["precision"]} == {"float32"}
    plain = load_handler(context_for(net_dir))
    assert plain.product_quantization is None


def test_a_bad_value_fails_the_load(net_dir):  # noqa: F811
    with pytest.raises(ValueError, match="use int8, or leave it out"):
        load_handler(context_for(net_dir, quantization="fp8"))
