"""serve: a model server on its own tensor runtime. `import serve` reads like `import torch`.

x = serve.tensor([[1., 2.]]); y = serve.from_numpy(arr)
with serve.no_grad(): out = model(x)
"""

import builtins as _builtins
import typing as _typing

from serve import autograd
from serve import tensor as _tensor_pkg  # binds Tensor's methods first
from serve.backend import device
from serve.backend.cpu_threads import get_num_threads, set_num_threads
from serve.tensor import return_types
from serve.tensor.composite_ops import diff, log2, log10, meshgrid, tile
from serve.tensor.creation import (
    arange,
    as_tensor,
    asarray,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    tensor,
    zeros,
    zeros_like,
)
from serve.tensor.dtypes import (
    bfloat16,
    bool,
    cdouble,
    cfloat,
    complex64,
    complex128,
    double,
    dtype,
    finfo,
    float,
    float16,
    float32,
    float64,
    get_default_dtype,
    half,
    iinfo,
    int,
    int8,
    int16,
    int32,
    int64,
    long,
    promote_types,
    set_default_dtype,
    short,
    uint8,
)
from serve.tensor.grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from serve.tensor.indexing import argwhere, gather, index_select, masked_fill, masked_select, nonzero, take
from serve.tensor.linalg import bmm, dot, einsum, ger, inner, matmul, mm, mv, outer
from serve.tensor.math_ops import (
    abs,
    absolute,
    add,
    allclose,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    broadcast_shapes,
    ceil,
    clamp,
    clip,
    cos,
    div,
    divide,
    eq,
    equal,
    erf,
    exp,
    floor,
    floor_divide,
    ge,
    greater,
    greater_equal,
    gt,
    isclose,
    isfinite,
    isinf,
    isnan,
    le,
    lerp,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    lt,
    maximum,
    minimum,
    mul,
    multiply,
    ne,
    neg,
    negative,
    not_equal,
    pow,
    reciprocal,
    relu,
    remainder,
    round,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sqrt,
    square,
    sub,
    subtract,
    tanh,
    true_divide,
    trunc,
    where,
)
from serve.tensor.membership import isin
from serve.tensor.random import (
    Generator,
    bernoulli,
    default_generator,
    initial_seed,
    manual_seed,
    normal,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    seed,
)
from serve.tensor.reduce_ops import (
    all,
    amax,
    amin,
    any,
    argmax,
    argmin,
    count_nonzero,
    cumsum,
    log_softmax,
    max,
    mean,
    min,
    nansum,
    norm,
    prod,
    softmax,
    std,
    std_mean,
    sum,
    var,
    var_mean,
)
from serve.tensor.repeat_gather import repeat_interleave, take_along_dim
from serve.tensor.sampling import multinomial
from serve.tensor.scaled_products import addmm, baddbmm
from serve.tensor.shape_ops import (
    broadcast_tensors,
    broadcast_to,
    cat,
    chunk,
    clone,
    concat,
    concatenate,
    flatten,
    flip,
    fliplr,
    flipud,
    hstack,
    movedim,
    narrow,
    permute,
    reshape,
    roll,
    split,
    squeeze,
    stack,
    swapaxes,
    swapdims,
    t,
    tensor_split,
    transpose,
    tril,
    triu,
    unbind,
    unflatten,
    unsqueeze,
    vstack,
)
from serve.tensor.sorting import argsort, kthvalue, msort, sort, topk
from serve.tensor.tensor import Size, Tensor

__version__ = "0.1.0"


def is_tensor(obj: object) -> _builtins.bool:
    return isinstance(obj, Tensor)


def is_floating_point(input: Tensor) -> _builtins.bool:
    return input.is_floating_point()


def numel(input: Tensor) -> _builtins.int:
    return input.numel()


from serve import backends, cuda, nn
from serve.serialization import load, save


def compile(model: nn.Module, example_inputs: _typing.Any = None, **options: _typing.Any) -> _typing.Any:
    """PyTorch's name for serve's inference plan: `serve.inference.optimize(model, example_inputs, **options)`.
    Like torch.compile, it returns the model's callable at once and plans at the first call (or now, with
    example inputs). Options: tune (time each layer's kernels, default True), check (compare with eager)."""
    from serve.inference import optimize

    return optimize(model, example_inputs, **options)
