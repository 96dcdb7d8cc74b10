"""The real ops transformers 5.x needs from serve's runtime (issue 26 item 2), each against torch: isin,
Tensor.__contains__, addmm / baddbmm (forward and gradient), view(dtype) across element sizes (safetensors' path),
copy_ into an expand()ed buffer, attributes set on a tensor, and the meta device (a CPU tensor under torch's name,
the `with device(...)` context)."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from tests.helpers import assert_close, check_op, needs_torch, torch


@needs_torch
@pytest.mark.parametrize("invert", [False, True])
def test_isin_matches_torch(invert):
    elements = np.array([[5, 1, 7], [2, 9, 5]], np.int64)
    tests = np.array([5, 9, 11], np.int64)
    ours = serve.isin(serve.from_numpy(elements), serve.from_numpy(tests), invert=invert)
    ref = torch.isin(torch.from_numpy(elements), torch.from_numpy(tests), invert=invert)
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    assert ours.dtype is serve.bool
    np.testing.assert_array_equal(serve.isin(serve.from_numpy(elements), 5).numpy(), elements == 5)


def test_contains_is_any_equal():
    t = serve.tensor([[1, 2], [3, 4]])
    assert 3 in t and 7 not in t
    assert serve.tensor(4) in t
    with pytest.raises(RuntimeError, match="only supports Tensor or scalar"):
        _ = "a" in t


def test_addmm_and_baddbmm_match_torch_with_gradients():
    check_op([(3, 5), (3, 4), (4, 5)], lambda lib, b, x, w: lib.addmm(b, x, w))
    check_op([(5,), (3, 4), (4, 5)], lambda lib, b, x, w: lib.addmm(b, x, w, beta=0.5, alpha=2.0))
    check_op([(2, 3, 5), (2, 3, 4), (2, 4, 5)], lambda lib, b, x, w: lib.baddbmm(b, x, w, alpha=0.25))
    check_op([(3, 5), (3, 4), (4, 5)], lambda lib, b, x, w: b.addmm(x, w))


def test_addmm_with_beta_zero_ignores_nans_in_input():
    out = serve.addmm(serve.full((2, 2), float("nan")), serve.ones(2, 3), serve.ones(3, 2), beta=0)
    np.testing.assert_array_equal(out.numpy(), np.full((2, 2), 3.0, np.float32))


@needs_torch
@pytest.mark.parametrize(("src", "dst"), [("uint8", "float32"), ("uint8", "bfloat16"), ("float32", "uint8"),
                                          ("float32", "int32"), ("int64", "float16")])  # fmt: skip
def test_view_dtype_matches_torch(src, dst):
    data = np.arange(48, dtype=np.uint8).reshape(2, 24).view(src)  # 24 bytes a row: whole elements of any size
    ours = serve.from_numpy(data.copy()).view(getattr(serve, dst))
    ref = torch.from_numpy(data.copy()).view(getattr(torch, dst))
    assert tuple(ours.shape) == tuple(ref.shape)
    assert_close(ours, ref, atol=0, rtol=0)
    assert tuple(serve.from_numpy(data.copy()).view(dtype=getattr(serve, dst)).shape) == tuple(ref.shape)


def test_view_dtype_refuses_a_last_dimension_that_does_not_divide():
    with pytest.raises(RuntimeError, match="whole number"):
        serve.zeros(2, 3, dtype=serve.uint8).view(serve.float32)


@needs_torch
def test_copy_into_an_expanded_buffer_like_torch():
    ours, ref = serve.arange(6).expand((1, -1)), torch.arange(6).expand((1, -1))
    ours.copy_(serve.arange(6) * 2)
    ref.copy_(torch.arange(6) * 2)
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    repeated = serve.arange(3).expand((2, -1))  # two rows share each element: torch refuses the write too
    with pytest.raises(RuntimeError, match="more than one element"):
        repeated.copy_(serve.zeros(2, 3, dtype=serve.int64))


def test_attributes_can_be_set_on_a_tensor_and_a_parameter():
    t, p = serve.zeros(2), serve.nn.Parameter(serve.zeros(2))
    t._is_hf_initialized = True
    p._is_hf_initialized = True
    assert t._is_hf_initialized and p._is_hf_initialized
    assert not hasattr(serve.zeros(2), "_is_hf_initialized")


def test_the_meta_device_is_a_cpu_tensor_under_that_name():
    with serve.device("meta"):
        t = serve.zeros(2, 3)
        layer = serve.nn.Linear(3, 2)
    assert t.device == serve.device("meta") and t.is_meta and layer.weight.is_meta
    assert serve.zeros(1).device == serve.device("cpu")  # the context is over
    out = serve.empty(4, device="meta")
    assert out.device.type == "meta" and tuple(out.shape) == (4,)
    assert (t + 1).sum().item() == 6.0  # it computes on the CPU
    with pytest.raises(RuntimeError, match="build the model on the CPU"), serve.device("cuda"):
        pass


@pytest.mark.parametrize(
    "fn",
    [lambda lib, x: lib.repeat_interleave(x, 2, dim=0), lambda lib, x: x.repeat_interleave(3, dim=-1),
     lambda lib, x: lib.repeat_interleave(x, 2), lambda lib, x: lib.repeat_interleave(x, lib.tensor(2), dim=1)],
)  # fmt: skip
def test_repeat_interleave_matches_torch(fn):
    check_op([(2, 3)], fn)


@needs_torch
def test_repeat_interleave_with_counts_matches_torch():
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    counts = np.array([2, 0, 1], np.int64)
    ours = serve.repeat_interleave(serve.from_numpy(x), serve.from_numpy(counts), dim=0)
    ref = torch.repeat_interleave(torch.from_numpy(x), torch.from_numpy(counts), dim=0)
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    np.testing.assert_array_equal(serve.repeat_interleave(serve.from_numpy(counts)).numpy(),
                                  torch.repeat_interleave(torch.from_numpy(counts)).numpy())  # fmt: skip


@needs_torch
def test_take_along_dim_matches_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    idx = rng.integers(0, 5, (4, 2)).astype(np.int64)
    col = rng.integers(0, 4, (1, 5)).astype(np.int64)  # broadcast along dim 0's partner
    for i, dim in ((idx, 1), (col, 0), (idx, None)):
        ours = serve.take_along_dim(serve.from_numpy(x), serve.from_numpy(i), dim)
        ref = torch.take_along_dim(torch.from_numpy(x), torch.from_numpy(i), dim)
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    check_op([(4, 5)], lambda lib, t: lib.take_along_dim(t, lib.from_numpy(idx), 1))  # the gradient too


@needs_torch
def test_all_and_any_take_numpys_axis_and_keepdims_like_torch():
    x = np.array([[True, False, True], [True, True, True]])
    for op in ("all", "any"):
        ours = getattr(serve, op)(serve.from_numpy(x), axis=-1, keepdims=True)
        ref = getattr(torch, op)(torch.from_numpy(x), axis=-1, keepdims=True)
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
