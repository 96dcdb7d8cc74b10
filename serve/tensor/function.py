"""The primitives: one small class per operation, with `forward` on device arrays and `backward` on Tensors.

`forward(ctx, ops, *arrays, **kw)` computes with the device's backend module `ops`; `ctx` is None when
nothing is recorded (under `no_grad`, or when no input requires grad), else the graph node, which also
holds the keyword arguments (`ctx.dim`, ...) and the input tensors (`ctx.inputs`). `backward(ctx, grad)`
returns one gradient per input, written with Tensor operations so that it can itself be differentiated.
Every other operation of the runtime is composed from these.
"""

from __future__ import annotations

import math
from typing import Any

from serve.tensor import dtypes, versions
from serve.tensor.autograd import Function, Node, attach
from serve.tensor.grad_mode import state
from serve.tensor.tensor import Tensor, _make

_DTYPE_OF = dtypes._BY_NUMPY.__getitem__


class Primitive(Function):
    """Base of the built-in operations (see the module docstring for the forward/backward contract)."""

    saves_output = False

    @classmethod
    def apply(cls, *inputs: Tensor, **kw: Any) -> Tensor:  # type: ignore[override]
        x = inputs[0]
        ops = x._ops
        arrays = [t._data for t in inputs]
        if state.enabled and any(t._requires_grad for t in inputs):
            node = Node(cls)
            node.__dict__.update(kw)
            node._inputs = inputs
            # shapes and dtypes outlive release(), so backward formulas that need only these (add, sum,
            # reshape, ...) can run a second time without retain_graph, as in PyTorch
            node.input_shapes = tuple(t._data.shape for t in inputs)
            node.input_dtypes = tuple(t._dtype for t in inputs)
            node._input_versions = tuple(versions.version(t._data) for t in inputs)
            node.needs_input_grad = tuple(t._requires_grad for t in inputs)
            out = cls.forward(node, ops, *arrays, **kw)
            t = _make(out, _DTYPE_OF(out.dtype), x._device, ops)
            if cls.saves_output:
                node._out_data = t._data
                node._out_version = versions.version(t._data)
            attach(node, (t,), inputs)
            return t
        out = cls.forward(None, ops, *arrays, **kw)
        return _make(out, _DTYPE_OF(out.dtype), x._device, ops)


def unbroadcast(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum `g` down to `shape` (the gradient of broadcasting)."""
    return g if g.shape == shape else g.sum_to_size(shape)


# ---- casts and copies --------------------------------------------------------------------------------
class Cast(Primitive):
    @classmethod
    def apply(cls, x: Tensor, dtype: Any) -> Tensor:  # type: ignore[override]
        # a cast to an integer or bool dtype is not differentiable: PyTorch's result does not require grad
        if not (dtype.is_floating_point or dtype.is_complex):
            return _make(x._ops.astype(x._data, dtype.np), dtype, x._device, x._ops)
        return super().apply(x, dtype=dtype)

    @staticmethod
    def forward(ctx, ops, a, dtype):
        return ops.astype(a, dtype.np)

    @staticmethod
    def backward(ctx, g):
        src = ctx.input_dtypes[0]
        return g.to(src) if (src.is_floating_point or src.is_complex) else None


class ToDevice(Primitive):
    @staticmethod
    def forward(ctx, ops, a, device):
        raise AssertionError("ToDevice.apply is overridden")

    @classmethod
    def apply(cls, x: Tensor, device: Any) -> Tensor:  # type: ignore[override]
        from serve.backend import get_ops

        target = get_ops(device)
        with target.on_device(device.index):  # "cuda:N" lands on device N
            data = target.from_numpy(x._ops.to_numpy(x._data))
        out = _make(data, x._dtype, device, target)
        if state.enabled and x._requires_grad:
            node = Node(cls)
            node._inputs = (x,)
            attach(node, (out,), (x,))
        return out

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.inputs[0]._device)


class Clone(Primitive):
    @staticmethod
    def forward(ctx, ops, a):
        return a.copy()

    @staticmethod
    def backward(ctx, g):
        return g


# ---- elementwise, one input --------------------------------------------------------------------------
class Neg(Primitive):
    @staticmethod
    def forward(ctx, ops, a):
        return ops.neg(a)

    @staticmethod
    def backward(ctx, g):
        return -g


class Abs(Primitive):
    @staticmethod
    def forward(ctx, ops, a):
        return ops.abs(a)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.inputs[0].sign()


class Exp(Primitive):
    saves_output = True

    @staticmethod
    def forward(ctx, ops, a):
        return ops.exp(a)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.output


class Log(Primitive):
    @staticmethod
    def forward(ctx, ops, a):
        return ops.log(a)

    @staticmethod
    def backward(ctx, g):
        return g / ctx.inputs[0]


class Sqrt(Primitive):
    saves_output = True

    @staticmethod
    def forward(ctx, ops, a):
        return ops.sqrt(a)

    @staticmethod
    def backward(ctx, g):
        return g / (2 * ctx.output)


class Rsqrt(Primitive):
    saves_output = True

    @staticmethod
    def forward(ctx, ops, a):
        return ops.rsqrt(a)

    @staticmethod
    def backward(ctx, g):
        return -0.5 * g * ctx.output**3


class Sin(Primitive):
    @staticmethod
    def forward(ctx, ops, a):
        return ops.sin(a)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.inputs[0].cos()


class Cos(Primitive):
    @staticmethod
    def forward(ctx, ops, a):
        return ops.cos(a)

    @staticmethod
    def backward(ctx, g):
        return -g * ctx.inputs[0].sin()


class Tanh(Primitive):
    saves_output = True

    @staticmethod
    def forward(ctx, ops, a):
        return ops.tanh(a)

    @staticmethod
    def backward(ctx, g):
        y = ctx.output
        return g * (1 - y * y)


class Sigmoid(Primitive):
    saves_output = True

    @staticmethod
    def forward(ctx, ops, a):
        return ops.sigmoid(a)

    @staticmethod
    def backward(ctx, g):
        y = ctx.output
        return g * y * (1 - y)


class Erf(Primitive):
    @staticmethod
    def forward(ctx, ops, a):
        return ops.erf(a)

    @staticmethod
    def backward(ctx, g):
        x = ctx.inputs[0]
        return g * (2.0 / math.sqrt(math.pi)) * (-(x * x)).exp()


class Relu(Primitive):
    saves_output = True

    @staticmethod
    def forward(ctx, ops, a):
        return ops.relu(a)

    @staticmethod
    def backward(ctx, g):
        return g * (ctx.output > 0)


class ZeroGrad(Primitive):
    """Piecewise-constant functions (floor, ceil, round, trunc, sign): the gradient is zero."""

    @staticmethod
    def forward(ctx, ops, a, fn):
        return getattr(ops, fn)(a)

    @staticmethod
    def backward(ctx, g):
        return g * 0


# ---- elementwise, two inputs (broadcasting) ----------------------------------------------------------
class Add(Primitive):
    @staticmethod
    def forward(ctx, ops, a, b):
        return ops.add(a, b)

    @staticmethod
    def backward(ctx, g):
        sa, sb = ctx.input_shapes
        return unbroadcast(g, sa), unbroadcast(g, sb)


class Sub(Primitive):
    @staticmethod
    def forward(ctx, ops, a, b):
        return ops.sub(a, b)

    @staticmethod
    def backward(ctx, g):
        sa, sb = ctx.input_shapes
        return unbroadcast(g, sa), unbroadcast(-g, sb)


class Mul(Primitive):
    @staticmethod
    def forward(ctx, ops, a, b):
        return ops.mul(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.inputs
        ga = unbroadcast(g * b, a.shape) if ctx.needs_input_grad[0] else None
        gb = unbroadcast(g * a, b.shape) if ctx.needs_input_grad[1] else None
        return ga, gb


class Div(Primitive):
    @staticmethod
    def forward(ctx, ops, a, b):
        return ops.div(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.inputs
        ga = unbroadcast(g / b, a.shape) if ctx.needs_input_grad[0] else None
        gb = unbroadcast(-g * a / (b * b), b.shape) if ctx.needs_input_grad[1] else None
        return ga, gb


class Pow(Primitive):
    @staticmethod
    def forward(ctx, ops, a, b):
        return ops.power(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.inputs
        ga = unbroadcast(g * b * a ** (b - 1), a.shape) if ctx.needs_input_grad[0] else None
        gb = None
        if ctx.needs_input_grad[1]:
            # PyTorch's convention: d(a**b)/db is 0 where a == 0 and b >= 0 (instead of nan)
            safe = (a == 0).logical_and(b >= 0)
            gb = unbroadcast((g * a**b * a.log()).masked_fill(safe, 0), b.shape)
        return ga, gb


class Remainder(Primitive):
    @staticmethod
    def forward(ctx, ops, a, b):
        return ops.remainder(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.inputs
        gb = unbroadcast(-g * (a / b).floor(), b.shape) if ctx.needs_input_grad[1] else None
        return unbroadcast(g, a.shape), gb


class Maximum(Primitive):
    @staticmethod
    def forward(ctx, ops, a, b):
        return ops.maximum(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.inputs
        share = (a > b).to(g.dtype) + (a == b).to(g.dtype) * 0.5  # ties split the gradient, like PyTorch
        return unbroadcast(g * share, a.shape), unbroadcast(g * (1 - share), b.shape)


class Minimum(Primitive):
    @staticmethod
    def forward(ctx, ops, a, b):
        return ops.minimum(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.inputs
        share = (a < b).to(g.dtype) + (a == b).to(g.dtype) * 0.5
        return unbroadcast(g * share, a.shape), unbroadcast(g * (1 - share), b.shape)


class Where(Primitive):
    """where(cond, a, b); `cond` is a bool tensor and gets no gradient."""

    @staticmethod
    def forward(ctx, ops, cond, a, b):
        return ops.where(cond, a, b)

    @staticmethod
    def backward(ctx, g):
        cond = ctx.input(0)  # only the condition's values are needed, as in PyTorch
        _, sa, sb = ctx.input_shapes
        zero = g.new_zeros(())
        ga = unbroadcast(Where.apply(cond, g, zero), sa) if ctx.needs_input_grad[1] else None
        gb = unbroadcast(Where.apply(cond, zero, g), sb) if ctx.needs_input_grad[2] else None
        return None, ga, gb


# ---- reductions --------------------------------------------------------------------------------------
class Sum(Primitive):
    @staticmethod
    def forward(ctx, ops, a, axis, keepdim, dtype):
        return ops.sum(a, axis, keepdim, dtype.np)

    @staticmethod
    def backward(ctx, g):
        shape = ctx.input_shapes[0]
        if not ctx.keepdim and ctx.axis is not None:
            g = g.reshape(_keepdim_shape(shape, ctx.axis))
        return g.expand(shape)


class Amax(Primitive):
    """max/min over dims without indices; ties share the gradient evenly (PyTorch's amax rule)."""

    @staticmethod
    def forward(ctx, ops, a, axis, keepdim, largest):
        return (ops.amax if largest else ops.amin)(a, axis, keepdim)

    @staticmethod
    def backward(ctx, g):
        x = ctx.inputs[0]
        y = Amax.apply(x.detach(), axis=ctx.axis, keepdim=True, largest=ctx.largest)
        if not ctx.keepdim and ctx.axis is not None:
            g = g.reshape(_keepdim_shape(x.shape, ctx.axis))
        mask = (x == y).to(g.dtype)
        return g * mask / mask.sum(dim=ctx.axis, keepdim=True)


class Prod(Primitive):
    @staticmethod
    def forward(ctx, ops, a, axis, keepdim):
        return ops.prod(a, axis, keepdim, a.dtype)

    @staticmethod
    def backward(ctx, g):
        x = ctx.inputs[0]
        if state.enabled:  # create_graph: the product of the others must itself be differentiable
            others = _differentiable_product_of_others(x, ctx.axis)
        else:
            others = _make(_product_of_others(x._ops, x._data, ctx.axis), x._dtype, x._device, x._ops)
        return (g if ctx.keepdim else g.unsqueeze(ctx.axis)) * others


def _differentiable_product_of_others(x: Tensor, axis: int) -> Tensor:
    """The product of the other elements along `axis`, recorded on the graph (exact with zeros)."""
    if not (x._data == 0).any():
        return x.prod(axis, keepdim=True) / x
    from serve.tensor.shape_ops import cat

    n = x.shape[axis]
    parts = [cat([x.narrow(axis, 0, i), x.narrow(axis, i + 1, n - i - 1)], axis) for i in range(n)]
    return cat([p.prod(axis, keepdim=True) for p in parts], axis)


def _product_of_others(ops, a, axis):
    """For each element, the product of the other elements along `axis` (exact with zeros)."""
    if a.shape[axis] == 0:  # nothing to multiply; the concatenation below would add a slot
        return ops.zeros(a.shape, a.dtype)
    moved = ops.moveaxis(a, axis, -1)
    ones = ops.ones(moved.shape[:-1] + (1,), a.dtype)
    left = ops.concatenate([ones, ops.cumprod(moved[..., :-1], -1, a.dtype)], -1)
    right = ops.concatenate([ops.cumprod(moved[..., :0:-1], -1, a.dtype)[..., ::-1], ones], -1)
    return ops.moveaxis(left * right, -1, axis)


class Norm2(Primitive):
    """The Euclidean norm over `axis`; its gradient is 0 where the norm is 0, as in PyTorch."""

    saves_output = True

    @staticmethod
    def forward(ctx, ops, a, axis, keepdim):
        return ops.sqrt(ops.sum(ops.mul(a, a), axis, keepdim, a.dtype))

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.inputs[0], ctx.output
        if not ctx.keepdim and ctx.axis is not None:
            shape = _keepdim_shape(x.shape, ctx.axis)
            g, y = g.reshape(shape), y.reshape(shape)
        return x * (g / y).masked_fill(y == 0, 0)


class Cumsum(Primitive):
    @staticmethod
    def forward(ctx, ops, a, axis, dtype):
        return ops.cumsum(a, axis, dtype.np)

    @staticmethod
    def backward(ctx, g):
        return g.flip(ctx.axis).cumsum(ctx.axis).flip(ctx.axis)


class Softmax(Primitive):
    saves_output = True

    @staticmethod
    def forward(ctx, ops, a, axis):
        return ops.softmax(a, axis)

    @staticmethod
    def backward(ctx, g):
        y = ctx.output
        return y * (g - (g * y).sum(ctx.axis, keepdim=True))


class LogSoftmax(Primitive):
    saves_output = True

    @staticmethod
    def forward(ctx, ops, a, axis):
        return ops.log_softmax(a, axis)

    @staticmethod
    def backward(ctx, g):
        return g - ctx.output.exp() * g.sum(ctx.axis, keepdim=True)


def _keepdim_shape(shape: tuple[int, ...], axis: Any) -> tuple[int, ...]:
    axes = {axis % len(shape)} if isinstance(axis, int) else {a % len(shape) for a in axis}
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


# ---- matrix products ---------------------------------------------------------------------------------
class Matmul(Primitive):
    @staticmethod
    def forward(ctx, ops, a, b):
        return ops.matmul(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.inputs
        if a.ndim == 1 and b.ndim == 1:  # a dot product: g is 0-d
            return (g * b if ctx.needs_input_grad[0] else None), (g * a if ctx.needs_input_grad[1] else None)
        a2 = a.unsqueeze(0) if a.ndim == 1 else a
        b2 = b.unsqueeze(-1) if b.ndim == 1 else b
        g2 = g
        if a.ndim == 1:
            g2 = g2.unsqueeze(-2)
        if b.ndim == 1:
            g2 = g2.unsqueeze(-1)
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = unbroadcast(g2 @ b2.mT, a2.shape).reshape(a.shape)
        if ctx.needs_input_grad[1]:
            gb = unbroadcast(a2.mT @ g2, b2.shape).reshape(b.shape)
        return ga, gb


class Einsum(Primitive):
    """einsum with explicit subscripts (ellipses expanded by the caller), each operand's letters distinct."""

    @staticmethod
    def forward(ctx, ops, *arrays, equation):
        return ops.einsum(equation, *arrays)

    @staticmethod
    def backward(ctx, g):
        from serve.tensor.linalg import einsum

        lhs, out = ctx.equation.split("->")
        subs = lhs.split(",")
        grads = []
        for i, x in enumerate(ctx.inputs):
            if not ctx.needs_input_grad[i]:
                grads.append(None)
                continue
            others = [(s, t) for j, (s, t) in enumerate(zip(subs, ctx.inputs)) if j != i]
            present = set(out).union(*[set(s) for s, _ in others])
            kept = "".join(c for c in subs[i] if c in present)
            eq = ",".join([out] + [s for s, _ in others]) + "->" + kept
            gi = einsum(eq, g, *[t for _, t in others])
            if kept != subs[i]:  # letters summed away only in this operand: broadcast back over them
                shape = [x.shape[k] if c in present else 1 for k, c in enumerate(subs[i])]
                gi = gi.reshape([s if c in present else 1 for c, s in zip(subs[i], shape)]).expand(x.shape)
            grads.append(unbroadcast(gi, x.shape))
        return tuple(grads)


# ---- movement ----------------------------------------------------------------------------------------
class Reshape(Primitive):
    @staticmethod
    def forward(ctx, ops, a, shape):
        out = ops.view(a, shape)
        return ops.reshape(a, shape) if out is None else out

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.input_shapes[0])


class View(Primitive):
    @staticmethod
    def forward(ctx, ops, a, shape):
        out = ops.view(a, shape)
        if out is None:
            raise RuntimeError(
                "view size is not compatible with input tensor's size and stride (at least one dimension spans "
                "across two contiguous subspaces). Use .reshape(...) instead."
            )
        return out

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.input_shapes[0])


class Expand(Primitive):
    @staticmethod
    def forward(ctx, ops, a, shape):
        return ops.broadcast_to(a, shape)

    @staticmethod
    def backward(ctx, g):
        return g.sum_to_size(ctx.input_shapes[0])


class Permute(Primitive):
    @staticmethod
    def forward(ctx, ops, a, dims):
        return ops.transpose(a, dims)

    @staticmethod
    def backward(ctx, g):
        inverse = [0] * len(ctx.dims)
        for i, d in enumerate(ctx.dims):
            inverse[d] = i
        return g.permute(inverse)


class Flip(Primitive):
    @staticmethod
    def forward(ctx, ops, a, dims):
        return ops.flip(a, dims)

    @staticmethod
    def backward(ctx, g):
        return g.flip(ctx.dims)


class Roll(Primitive):
    @staticmethod
    def forward(ctx, ops, a, shifts, dims):
        return ops.roll(a, shifts, dims)

    @staticmethod
    def backward(ctx, g):
        neg = tuple(-s for s in ctx.shifts) if isinstance(ctx.shifts, tuple) else -ctx.shifts
        return g.roll(neg, ctx.dims)


class Cat(Primitive):
    @staticmethod
    def forward(ctx, ops, *arrays, axis):
        return ops.concatenate(arrays, axis=axis)

    @staticmethod
    def backward(ctx, g):
        sizes = [shape[ctx.axis] for shape in ctx.input_shapes]
        return tuple(g.split(sizes, ctx.axis))


class Triangle(Primitive):
    """tril/triu: keep one triangle, zero the rest."""

    @staticmethod
    def forward(ctx, ops, a, diagonal, upper):
        return (ops.triu if upper else ops.tril)(a, diagonal)

    @staticmethod
    def backward(ctx, g):
        return Triangle.apply(g, diagonal=ctx.diagonal, upper=ctx.upper)


class Pad(Primitive):
    """Constant padding; `pad_width` is numpy's per-axis ((before, after), ...)."""

    @staticmethod
    def forward(ctx, ops, a, pad_width, value):
        return ops.pad(a, pad_width, constant_values=value)

    @staticmethod
    def backward(ctx, g):
        index = tuple(slice(b, g.shape[i] - e) for i, (b, e) in enumerate(ctx.pad_width))
        return g[index]


# ---- indexing ----------------------------------------------------------------------------------------
class Index(Primitive):
    """x[index] with a backend-ready index (ints, slices, None, Ellipsis, integer or bool arrays)."""

    @staticmethod
    def forward(ctx, ops, a, index):
        return a[index]

    @staticmethod
    def backward(ctx, g):
        return IndexBackward.apply(g, shape=ctx.input_shapes[0], index=ctx.index)


class IndexBackward(Primitive):
    @staticmethod
    def forward(ctx, ops, g, shape, index):
        out = ops.zeros(shape, g.dtype)
        if _is_basic(index):
            out[index] = g
        else:
            ops.index_add(out, index, g)
        return out

    @staticmethod
    def backward(ctx, gg):
        return Index.apply(gg, index=ctx.index)  # the index is already in backend form


def _is_basic(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, slice)) for i in items)


class IndexPut(Primitive):
    """out = x with out[index] = values (functional; in-place assignment is built on it)."""

    @staticmethod
    def forward(ctx, ops, a, values, index):
        out = a.copy()
        out[index] = values
        return out

    @staticmethod
    def backward(ctx, g):
        gx = IndexPut.apply(g, g.new_zeros(()), index=ctx.index) if ctx.needs_input_grad[0] else None
        gv = unbroadcast(Index.apply(g, index=ctx.index), ctx.input_shapes[1]) if ctx.needs_input_grad[1] else None
        return gx, gv


class Gather(Primitive):
    @staticmethod
    def forward(ctx, ops, a, index, axis):
        return ops.take_along_axis(a, index, axis)

    @staticmethod
    def backward(ctx, g):
        return ScatterAdd.apply(g, ctx.input(1), shape=ctx.input_shapes[0], axis=ctx.axis), None


class ScatterAdd(Primitive):
    """zeros(shape) with src added at `index` along `axis` (the backward of gather)."""

    @staticmethod
    def forward(ctx, ops, src, index, shape, axis):
        out = ops.zeros(shape, src.dtype)
        ops.scatter_add(out, axis, index, src)
        return out

    @staticmethod
    def backward(ctx, gg):
        return Gather.apply(gg, ctx.input(1), axis=ctx.axis), None


__all__ = [name for name, obj in list(globals().items()) if isinstance(obj, type) and issubclass(obj, Primitive)]


def node_names() -> None:
    """Name primitives' nodes like PyTorch's (`AddBackward0`), so `grad_fn` reads familiar."""
    for name in __all__:
        globals()[name]._node_name = name + "Backward0"


node_names()
