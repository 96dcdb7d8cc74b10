"""The conv1d pass (serve/inference/lookalikes.py): a module that is a linear layer in all but name (transformers'
GPT-2 `Conv1D`: weight (in, out), `addmm(bias, x, weight)`) is planned as a linear layer on every kernel, its GELU
written as formulas (transformers' `gelu_new`) fused into its epilogue and its residual add into the next product's,
without copying or changing the model's weight; modules that share those names but compute something else are not
captured, and every plan equals eager. The same modules from the real transformers: tests/unit/compat/
test_transformers_plan.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import serve
from serve import nn
from serve.inference import kernels, optimize
from serve.inference.planned import PlannedLinear, Skip
from tests.unit.zoo.parity import assert_rel_close

RNG = np.random.default_rng(0)


class Conv1D(nn.Module):
    """A linear layer with its weight stored (in, out), as transformers' GPT-2 writes it."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(serve.from_numpy(RNG.standard_normal((nx, nf)).astype(np.float32) * 0.2))
        self.bias = nn.Parameter(serve.from_numpy(RNG.standard_normal(nf).astype(np.float32) * 0.1))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        return serve.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)  # (..., nf)


class NewGELU(nn.Module):
    """GELU's tanh approximation written as formulas (transformers' gelu_new)."""

    def forward(self, x):
        return 0.5 * x * (1.0 + serve.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * serve.pow(x, 3.0))))


class ScaledConv1D(Conv1D):
    def forward(self, x):  # the same parameters, another product: twice it
        return serve.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(x.size()[:-1] + (self.nf,)) * 2.0


class TransposedConv1D(Conv1D):
    def forward(self, x):  # a square weight read the other way: x @ weight.T
        return serve.addmm(self.bias, x.view(-1, x.size(-1)), self.weight.t()).view(x.size()[:-1] + (self.nf,))


class BranchingConv1D(Conv1D):
    def forward(self, x):  # the product on the example (8 rows), something else on a big batch
        if x.size(0) > 64:
            return serve.zeros(x.size()[:-1] + (self.nf,))
        return serve.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(x.size()[:-1] + (self.nf,))


class QuickGELU(nn.Module):
    def forward(self, x):  # x * sigmoid(1.702 x): no epilogue activation computes it
        return x * serve.sigmoid(1.702 * x)


class Block(nn.Module):
    """GPT-2's pre-LN block without attention: x + c_proj(act(c_fc(ln(x))))."""

    def __init__(self, d: int = 32, fc: type = Conv1D, act: type = NewGELU) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.c_fc, self.act, self.c_proj = fc(4 * d, d), act(), Conv1D(d, 4 * d)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return x + self.dropout(self.c_proj(self.act(self.c_fc(self.ln(x)))))


class Model(nn.Module):
    def __init__(self, **kw) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(**kw), Block(**kw)])
        self.ln_f, self.head = nn.LayerNorm(32), nn.Linear(32, 10)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _x(*shape):
    return serve.from_numpy(RNG.standard_normal(shape).astype(np.float32))


def _plan(model, x, **kw):
    model.eval()
    with serve.no_grad():
        want = model(x)
        opt = optimize(model, (x,), **kw)
        assert opt.optimized, opt.reason
        got = opt(x)
    return opt, got, want


@pytest.mark.parametrize("kernel", ["blas", "native", "native_bf16"])
def test_conv1d_is_planned_as_a_linear_layer_on_each_kernel(kernel):
    if (kernel != "blas" and kernels.native() is None) or (kernel.endswith("bf16") and not kernels.bf16_products()):
        pytest.skip(f"this CPU has no {kernel} kernel")
    model, x = Model(), _x(2, 8, 32)
    dtype = "bfloat16" if kernel.endswith("bf16") else "float32"
    opt, got, want = _plan(model, x, kernels=(kernel,), tune=False, dtype=dtype)
    info = opt.describe()
    assert info["passes"]["conv1d"] == 4 and info["passes"]["linear"] == 5
    assert info["passes"]["act_fused"] == 2  # the formula GELU after each c_fc, as gelu_tanh
    names = {e["layer"]: e["kernel"] for e in info["precision"]}
    assert {n for n in names if ".c_" in n} == {f"blocks.{i}.{c}" for i in (0, 1) for c in ("c_fc", "c_proj")}
    first_or_last = {"blocks.0.c_fc", "head"}  # mixed precision keeps them float32: the reference kernel
    assert all(k == (kernel if n not in first_or_last or dtype == "float32" else "blas") for n, k in names.items())
    block = opt.plan.blocks[0]
    assert isinstance(block.c_fc, PlannedLinear) and block.c_fc.act == "gelu_tanh" and isinstance(block.act, Skip)
    assert_rel_close(got, want, 1e-2 if dtype == "bfloat16" else 1e-4)


def test_the_residual_add_and_layer_norm_fuse_after_a_conv1d():
    if kernels.native() is None:
        pytest.skip("the fused add runs on the native GEMM")
    opt, got, want = _plan(Model(), _x(2, 8, 32), kernels=("native",), tune=False)
    passes = opt.describe()["passes"]
    assert passes["residual_fused"] == 2 and passes["add_norm"] == 2  # each c_proj's `x + ...`, read by the next norm
    assert_rel_close(got, want, 1e-4)


def test_the_model_weight_is_the_products_operand_not_a_copy():
    model = Model()
    before = model.blocks[0].c_fc.weight._data.copy()
    opt, _, _ = _plan(model, _x(2, 8, 32), kernels=("blas",), tune=False)
    planned, original = opt.plan.blocks[0].c_fc, model.blocks[0].c_fc
    kn = planned.weight_kn()  # (in, out): the BLAS reads the model's own array, and the native kernels pack it
    assert kn.shape == (32, 128) and kn.flags.c_contiguous and np.shares_memory(kn, original.weight._data)
    assert planned.weight.shape == (128, 32) and np.shares_memory(planned.weight, original.weight._data)
    np.testing.assert_array_equal(original.weight._data, before)
    assert isinstance(model.blocks[0].c_fc, Conv1D)  # the model's tree is untouched


@pytest.mark.parametrize("fc", [ScaledConv1D, TransposedConv1D, BranchingConv1D])
def test_a_module_that_only_looks_like_conv1d_is_not_captured(fc):
    model, x = Model(fc=fc), _x(2, 4, 32)
    if fc is TransposedConv1D:  # a square weight, so both readings run
        for block in model.blocks:
            block.c_fc = TransposedConv1D(32, 32)
            block.c_proj = Conv1D(32, 32)
    opt, got, want = _plan(model, x)
    assert opt.describe()["passes"]["conv1d"] == 2  # only the two true c_proj layers
    assert type(opt.plan.blocks[0].c_fc) is fc
    assert_rel_close(got, want, 1e-4)
    if fc is BranchingConv1D:  # what a plan of it would get wrong
        with serve.no_grad():
            big = _x(80, 4, 32)
            assert_rel_close(opt(big), model(big), 1e-4)


def test_an_activation_is_fused_for_what_it_computes_not_its_name():
    class NewGELUActivation(nn.Module):  # transformers' name, exact GELU's values: fused as gelu
        def forward(self, x):
            return 0.5 * x * (1.0 + serve.erf(x / math.sqrt(2.0)))

    opt, got, want = _plan(Model(act=NewGELUActivation), _x(2, 8, 32))
    assert opt.plan.blocks[0].c_fc.act == "gelu"
    assert_rel_close(got, want, 1e-4)
    opt, got, want = _plan(Model(act=QuickGELU), _x(2, 8, 32))  # no epilogue computes it: runs as written
    assert opt.describe()["passes"]["act_fused"] == 0 and type(opt.plan.blocks[0].act) is QuickGELU
    assert_rel_close(got, want, 1e-4)
