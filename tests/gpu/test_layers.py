"""Every serve.nn layer the zoo uses, on CUDA, against the same layer on serve's CPU backend and against PyTorch on
the same GPU, with the same weights and inputs: float32 within 1e-4 and float16/bfloat16 within 1e-2, relative to
the largest |value| of the reference (outputs cross zero, so not elementwise). Convolutions run in strict fp32 on
both sides here (TF32 off), matrix products are strict fp32 by default on both.

The helpers (`pair`, `on_devices`, `check`) are also used by tests/gpu/test_zoo.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import serve
import serve.backends
import serve.nn.functional as SF
from serve import nn

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("PyTorch sees no CUDA device", allow_module_level=True)
from tests.unit.zoo.parity import copy_weights  # noqa: E402

TF = torch.nn.functional
DTYPES = ["float32", "float16", "bfloat16"]
HALF = ["float16", "bfloat16"]
TOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
SERVE_DT = {"float32": serve.float32, "float16": serve.float16, "bfloat16": serve.bfloat16}
TORCH_DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.fixture(autouse=True)
def _strict_fp32():
    """No TF32 anywhere, on both sides, restored afterwards."""
    saved = (serve.backends.cudnn.allow_tf32, serve.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)  # fmt: skip
    serve.backends.cudnn.allow_tf32 = serve.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    with serve.no_grad(), torch.no_grad():
        yield
    (serve.backends.cudnn.allow_tf32, serve.backends.cuda.matmul.allow_tf32,
     torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) = saved  # fmt: skip


# ---- helpers -------------------------------------------------------------------------------------------------
def to_np(t: Any) -> np.ndarray:
    """A serve or torch tensor on any device, as float64 (integers and bools kept as they are)."""
    t = t.detach()
    if isinstance(t, torch.Tensor):
        t = t.cpu()
        return t.float().numpy().astype(np.float64) if t.is_floating_point() else t.numpy()
    t = t.cpu()
    return t.float().numpy().astype(np.float64) if t.is_floating_point() else t.numpy()


def rel_err(ours: Any, ref: Any) -> float:
    """max |ours - ref| / max |ref| over the positions where neither is NaN; NaNs must sit at the same places."""
    a, b = to_np(ours), to_np(ref)
    assert a.shape == b.shape, f"shape {a.shape} != reference {b.shape}"
    if a.dtype.kind in "biu":
        return 0.0 if np.array_equal(a, b) else float("inf")
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    assert np.array_equal(nan_a, nan_b), f"NaN at {np.argwhere(nan_a != nan_b)[:5].tolist()} on one side only"
    a, b = a[~nan_a], b[~nan_b]
    if b.size == 0:
        return 0.0
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    assert np.array_equal(inf_a, inf_b) and np.array_equal(a[inf_a], b[inf_b]), "infinities differ"
    a, b = a[~inf_a], b[~inf_b]
    if b.size == 0:
        return 0.0
    return float(np.abs(a - b).max()) / (float(np.abs(b).max()) or 1.0)


def dtype_name(t: Any) -> str:
    return str(t.dtype).split(".")[-1]


def _flat(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [] if out is None else [out]


def check(gpu: Any, cpu: Any, theirs: Any, dtype: str, tol: float | None = None) -> None:
    """serve on CUDA against serve on CPU and against torch on CUDA (None: torch cannot do this case)."""
    tol = TOL[dtype] if tol is None else tol
    outs, cpus = _flat(gpu), _flat(cpu)
    refs = _flat(theirs) if theirs is not None else [None] * len(outs)
    assert len(outs) == len(cpus) == len(refs), f"{len(outs)} outputs, {len(cpus)} on CPU, {len(refs)} from torch"
    for i, (o, c, r) in enumerate(zip(outs, cpus, refs)):
        assert o.device.type == "cuda", f"output {i} is on {o.device}"
        assert dtype_name(o) == dtype_name(c), f"output {i}: {o.dtype} on CUDA, {c.dtype} on CPU"
        err = rel_err(o, c)
        assert err <= tol, f"output {i}: CUDA vs CPU max relative error {err:.3g} > {tol}"
        if r is not None:
            assert dtype_name(o) == dtype_name(r), f"output {i}: {o.dtype} vs torch {r.dtype}"
            err = rel_err(o, r)
            assert err <= tol, f"output {i}: serve vs torch max relative error {err:.3g} > {tol}"


def on_devices(arrays: Sequence[np.ndarray | None], dtype: str) -> tuple[list[Any], list[Any], list[Any]]:
    """The arrays as serve CPU, serve CUDA and torch CUDA tensors; floating arrays in `dtype`."""
    cpu, gpu, tch = [], [], []
    for a in arrays:
        if a is None:
            cpu.append(None)
            gpu.append(None)
            tch.append(None)
            continue
        s = serve.from_numpy(np.ascontiguousarray(a))
        t = torch.from_numpy(np.ascontiguousarray(a).copy())
        if a.dtype.kind == "f":
            s, t = s.to(SERVE_DT[dtype]), t.to(TORCH_DT[dtype])
        cpu.append(s)
        gpu.append(s.to("cuda"))
        tch.append(t.to("cuda"))
    return cpu, gpu, tch


def randomize(model: Any, seed: int = 0) -> None:
    """Non-trivial affine parameters and running statistics for the torch model's norm layers."""
    g = torch.Generator().manual_seed(seed)
    norms = (torch.nn.BatchNorm2d, torch.nn.LayerNorm, torch.nn.GroupNorm)
    for m in model.modules():
        if not isinstance(m, norms):
            continue
        if getattr(m, "weight", None) is not None:
            m.weight.data.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
        if getattr(m, "bias", None) is not None:
            m.bias.data.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)


def pair(make_torch: Callable[[], Any], make_serve: Callable[[], Any], dtype: str) -> tuple[Any, Any, Any]:
    """(serve on CPU, serve on CUDA, torch on CUDA) in eval mode and `dtype`, all with the torch model's weights."""
    torch.manual_seed(0)
    theirs = make_torch()
    randomize(theirs)
    cpu, gpu = make_serve(), make_serve()
    copy_weights(theirs, cpu)
    copy_weights(theirs, gpu)
    cpu.eval().to(dtype=SERVE_DT[dtype])
    gpu.eval().to(device="cuda", dtype=SERVE_DT[dtype])
    theirs.eval().to(device="cuda", dtype=TORCH_DT[dtype])
    return cpu, gpu, theirs


def torch_or_none(fn: Callable[[], Any], dtype: str) -> Any:
    """torch's result, or None where torch's CUDA backend has no kernel for a half dtype (compare with CPU only)."""
    try:
        return fn()
    except (RuntimeError, NotImplementedError):
        if dtype == "float32":
            raise
        return None


def run_layer(make_torch: Callable[[], Any], make_serve: Callable[[], Any], arrays: Sequence[np.ndarray | None],
              dtype: str, call: Callable[..., Any] | None = None, tol: float | None = None) -> None:  # fmt: skip
    call = call or (lambda m, *xs: m(*xs))
    cpu, gpu, theirs = pair(make_torch, make_serve, dtype)
    xc, xg, xt = on_devices(arrays, dtype)
    check(call(gpu, *xg), call(cpu, *xc), torch_or_none(lambda: call(theirs, *xt), dtype), dtype, tol)


def run_fn(fn: Callable[..., Any], arrays: Sequence[np.ndarray | None], dtype: str, tol: float | None = None) -> None:
    """fn(F, *tensors) with F = serve.nn.functional or torch.nn.functional."""
    xc, xg, xt = on_devices(arrays, dtype)
    check(fn(SF, *xg), fn(SF, *xc), torch_or_none(lambda: fn(TF, *xt), dtype), dtype, tol)


def randn(*shape: int, seed: int = 0, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale + offset).astype(np.float32)


# ---- Linear, activations -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "out", "bias"), [((4, 7, 33), 65, True), ((5, 384), 1536, True),
                                                    ((33,), 17, False), ((2, 3, 1, 64), 8, True)])  # fmt: skip
def test_linear(dtype, shape, out, bias):
    run_layer(lambda: torch.nn.Linear(shape[-1], out, bias=bias), lambda: nn.Linear(shape[-1], out, bias=bias),
              [randn(*shape)], dtype)  # fmt: skip


ACTIVATIONS = {
    "relu": (torch.nn.ReLU, nn.ReLU),
    "relu6": (torch.nn.ReLU6, nn.ReLU6),
    "gelu": (torch.nn.GELU, nn.GELU),
    "gelu_tanh": (lambda: torch.nn.GELU(approximate="tanh"), lambda: nn.GELU(approximate="tanh")),
    "silu": (torch.nn.SiLU, nn.SiLU),
    "tanh": (torch.nn.Tanh, nn.Tanh),
    "sigmoid": (torch.nn.Sigmoid, nn.Sigmoid),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation(dtype, name):
    make_torch, make_serve = ACTIVATIONS[name]
    run_layer(make_torch, make_serve, [randn(3, 5, 1031, scale=3.0)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_then_gelu_like_bert_intermediate(dtype):
    def make(lib):
        return lambda: lib.nn.Sequential(lib.nn.Linear(384, 1536), lib.nn.GELU())

    run_layer(make(torch), make(serve), [randn(2, 9, 384)], dtype)


# ---- convolutions, batch norm --------------------------------------------------------------------------------
CONVS = {  # (in, out, kernel, stride, padding, dilation, groups, bias)
    "3x3": (3, 8, 3, 1, 1, 1, 1, True),
    "3x3 stride 2": (8, 16, 3, 2, 1, 1, 1, False),
    "depthwise": (16, 16, 3, 1, 1, 1, 16, False),
    "depthwise stride 2": (24, 24, 3, 2, 1, 1, 24, False),
    "groups dilation": (8, 12, 3, 1, 2, 2, 4, True),
    "1x1": (8, 16, 1, 1, 0, 1, 1, False),
    "1x1 stride 2": (8, 16, 1, 2, 0, 1, 1, False),
    "resnet stem 7x7": (3, 16, 7, 2, 3, 1, 1, False),
    "vit patches": (3, 32, 8, 8, 0, 1, 1, True),
    "5x5 no padding": (1, 6, 5, 1, 0, 1, 1, True),
    "asymmetric": (4, 6, (3, 5), (2, 1), (1, 2), (1, 2), 2, True),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CONVS))
def test_conv2d(dtype, name):
    cin, cout, k, s, p, d, g, b = CONVS[name]
    args = {"kernel_size": k, "stride": s, "padding": p, "dilation": d, "groups": g, "bias": b}
    run_layer(lambda: torch.nn.Conv2d(cin, cout, **args), lambda: nn.Conv2d(cin, cout, **args),
              [randn(2, cin, 17, 19)], dtype)  # fmt: skip


def test_conv2d_batch_of_one_and_large_channels():
    args = {"kernel_size": 3, "padding": 1, "bias": False}
    run_layer(lambda: torch.nn.Conv2d(256, 256, **args), lambda: nn.Conv2d(256, 256, **args),
              [randn(1, 256, 14, 14)], "float32")  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv2d_tf32_default_is_close(dtype):
    """With PyTorch's defaults (convolutions may use TF32) serve stays within TF32's precision of torch."""
    serve.backends.cudnn.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    run_layer(lambda: torch.nn.Conv2d(64, 64, 3, padding=1), lambda: nn.Conv2d(64, 64, 3, padding=1),
              [randn(2, 64, 16, 16)], dtype, tol=1e-2)  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_eval(dtype):
    run_layer(lambda: torch.nn.BatchNorm2d(12), lambda: nn.BatchNorm2d(12), [randn(3, 12, 9, 11, offset=0.5)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_bn_relu_block(dtype):
    def make(lib):
        return lambda: lib.nn.Sequential(lib.nn.Conv2d(8, 16, 3, padding=1, bias=False), lib.nn.BatchNorm2d(16),
                                         lib.nn.ReLU(inplace=True))  # fmt: skip

    run_layer(make(torch), make(serve), [randn(2, 8, 13, 13)], dtype)


# ---- norms, embedding ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "normalized", "eps", "offset"), [
    ((2, 9, 384), 384, 1e-12, 0.0), ((4, 33), 33, 1e-5, 0.0), ((3, 4, 5), (4, 5), 1e-6, 0.0),
    ((2, 7, 4097), 4097, 1e-5, 0.0), ((6, 768), 768, 1e-5, 100.0),
])  # fmt: skip
def test_layer_norm(dtype, shape, normalized, eps, offset):
    run_layer(lambda: torch.nn.LayerNorm(normalized, eps=eps), lambda: nn.LayerNorm(normalized, eps=eps),
              [randn(*shape, offset=offset)], dtype)  # fmt: skip


def test_layer_norm_rows_with_a_large_mean():
    run_layer(lambda: torch.nn.LayerNorm(1000), lambda: nn.LayerNorm(1000), [randn(8, 1000, offset=1e3)], "float32",
              tol=1e-4)  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("groups", "channels"), [(4, 16), (1, 8), (8, 8)])
def test_group_norm(dtype, groups, channels):
    run_layer(lambda: torch.nn.GroupNorm(groups, channels), lambda: nn.GroupNorm(groups, channels),
              [randn(2, channels, 5, 7, offset=1.0)], dtype)  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("id_dtype", [np.int64, np.int32])
def test_embedding(dtype, id_dtype):
    ids = np.random.default_rng(0).integers(0, 100, (3, 7)).astype(id_dtype)
    ids[0, :2] = 0  # the padding row
    run_layer(lambda: torch.nn.Embedding(100, 32, padding_idx=0), lambda: nn.Embedding(100, 32, padding_idx=0),
              [ids], dtype)  # fmt: skip


def test_embedding_id_out_of_range_raises_index_error_and_the_device_keeps_working():
    emb = nn.Embedding(10, 4).to("cuda")
    with pytest.raises(IndexError):
        emb(serve.tensor([[1, 10]], device="cuda"))
    with pytest.raises(IndexError):
        emb(serve.tensor([-1], device="cuda"))
    assert emb(serve.tensor([3], device="cuda")).shape == (1, 4)  # the context was not poisoned


# ---- attention -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("masks", ["none", "key_padding", "causal_bool", "float"])
def test_multihead_attention(dtype, need_weights, masks):
    b, length, e = 3, 10, 64
    x = randn(b, length, e)
    kpm = attn = None
    if masks == "key_padding":
        kpm = np.zeros((b, length), dtype=bool)
        kpm[1, 7:] = True  # True = padding, PyTorch's convention for key_padding_mask
        kpm[2, 3:] = True
    elif masks == "causal_bool":
        attn = np.triu(np.ones((length, length), dtype=bool), 1)  # True = not allowed
    elif masks == "float":
        attn = randn(length, length, seed=3)

    def call(m, x, kpm, attn):
        return m(x, x, x, key_padding_mask=kpm, need_weights=need_weights, attn_mask=attn)

    run_layer(lambda: torch.nn.MultiheadAttention(e, 4, batch_first=True),
              lambda: nn.MultiheadAttention(e, 4, batch_first=True), [x, kpm, attn], dtype, call)  # fmt: skip


SDPA_MASKS = ["none", "bool_broadcast", "float", "float_batch_heads"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", SDPA_MASKS)
def test_scaled_dot_product_attention(dtype, mask):
    q, k, v = randn(2, 4, 9, 16, seed=1), randn(2, 4, 11, 16, seed=2), randn(2, 4, 11, 24, seed=3)
    m = None
    if mask == "bool_broadcast":
        m = np.random.default_rng(4).random((1, 1, 9, 11)) > 0.4
        m[..., 0] = True  # every query keeps a key
    elif mask == "float":
        m = randn(9, 11, seed=5)
    elif mask == "float_batch_heads":
        m = randn(2, 1, 9, 11, seed=6)
    run_fn(lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), [q, k, v, m], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("lq", "lk"), [(9, 9), (5, 9), (1, 1), (64, 64)])
def test_scaled_dot_product_attention_causal_and_scale(dtype, lq, lk):
    q, k, v = randn(2, 3, lq, 8, seed=1), randn(2, 3, lk, 8, seed=2), randn(2, 3, lk, 8, seed=3)
    run_fn(lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3), [q, k, v], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scaled_dot_product_attention_fully_masked_row_gives_zeros(dtype):
    q, k, v = randn(1, 2, 4, 8, seed=1), randn(1, 2, 6, 8, seed=2), randn(1, 2, 6, 8, seed=3)
    m = np.ones((1, 1, 4, 6), dtype=bool)
    m[..., 2, :] = False  # query 2 may attend to nothing
    xc, xg, _ = on_devices([q, k, v, m], dtype)
    out = SF.scaled_dot_product_attention(*xg[:3], attn_mask=xg[3])
    check(out, SF.scaled_dot_product_attention(*xc[:3], attn_mask=xc[3]), None, dtype)
    assert not np.isnan(to_np(out)).any()
    assert (to_np(out)[:, :, 2] == 0).all()


# ---- softmax -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize(("shape", "dim"), [((4, 6, 37), -1), ((4, 6, 37), 1), ((5, 3), 0), ((2, 3000), -1),
                                            ((3, 1), -1), ((2, 2, 2, 1025), 3)])  # fmt: skip
def test_softmax(dtype, fn, shape, dim):
    run_fn(lambda F, x: getattr(F, fn)(x, dim=dim), [randn(*shape, scale=4.0)], dtype)


def test_softmax_of_a_row_of_minus_infinity_is_nan_like_torch():
    x = randn(3, 8)
    x[1] = -np.inf
    x[2, :4] = -np.inf
    run_fn(lambda F, x: F.softmax(x, dim=-1), [x], "float32")


# ---- pooling -------------------------------------------------------------------------------------------------
MAX_POOLS = {  # kernel, stride, padding, dilation, ceil_mode
    "resnet 3/2/1": (3, 2, 1, 1, False),
    "lenet 2": (2, 2, 0, 1, False),
    "ceil": (3, 2, 0, 1, True),
    "dilation": (3, 1, 1, 2, False),
    "rect": ((2, 3), (1, 2), (1, 1), 1, True),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MAX_POOLS))
def test_max_pool2d(dtype, name):
    k, s, p, d, ceil = MAX_POOLS[name]
    run_fn(lambda F, x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil), [randn(2, 3, 11, 14)], dtype)


@pytest.mark.parametrize("name", list(MAX_POOLS))
def test_max_pool2d_indices_are_torch_s(name):
    k, s, p, d, ceil = MAX_POOLS[name]
    run_fn(lambda F, x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True), [randn(2, 3, 11, 14)],
           "float32")  # fmt: skip


def test_max_pool2d_propagates_nan():
    x = randn(1, 2, 6, 6)
    x[0, 1, 2, 3] = np.nan
    run_fn(lambda F, x: F.max_pool2d(x, 3, 2, 1), [x], "float32")


AVG_POOLS = {  # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    "3/2/1": (3, 2, 1, False, True, None),
    "exclude pad": (3, 2, 1, False, False, None),
    "ceil exclude pad": (3, 2, 1, True, False, None),
    "ceil include pad": (3, 2, 1, True, True, None),
    "divisor": (2, 2, 0, False, True, 3),
    "rect": ((2, 3), (2, 1), (1, 0), True, True, None),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(AVG_POOLS))
def test_avg_pool2d(dtype, name):
    k, s, p, ceil, include, div = AVG_POOLS[name]
    run_fn(lambda F, x: F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=include, divisor_override=div),
           [randn(2, 3, 10, 13)], dtype)  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", [(1, 1), (3, 5), (7, 9), (4, 4)])
def test_adaptive_avg_pool2d(dtype, size):
    run_layer(lambda: torch.nn.AdaptiveAvgPool2d(size), lambda: nn.AdaptiveAvgPool2d(size), [randn(2, 5, 7, 9)], dtype)


# ---- recurrent -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("layers", "bidirectional"), [(1, False), (2, True)])
def test_lstm(dtype, layers, bidirectional):
    args = {"num_layers": layers, "bidirectional": bidirectional, "batch_first": True}
    run_layer(lambda: torch.nn.LSTM(16, 24, **args), lambda: nn.LSTM(16, 24, **args), [randn(3, 7, 16)], dtype)


# ---- devices -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_module_to_cuda_and_back_is_exact(dtype):
    m = nn.Linear(5, 3).to(SERVE_DT[dtype])
    before = {k: to_np(v) for k, v in m.state_dict().items()}
    m.to("cuda")
    assert all(str(p.device) == "cuda:0" and dtype_name(p) == dtype for p in m.parameters())
    m.cpu()
    assert all(np.array_equal(before[k], to_np(v)) for k, v in m.state_dict().items())
