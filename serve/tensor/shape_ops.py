"""Shape and movement: reshape/view, transpose/permute, squeeze/unsqueeze, expand/repeat, cat/stack/split.

Views share storage with their input (numpy or CuPy views), so writing through a view writes the
original, as in PyTorch. Under no_grad the backend call is made directly; otherwise through a primitive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from serve.tensor import dtypes
from serve.tensor import function as fn
from serve.tensor.grad_mode import state
from serve.tensor.tensor import Tensor, _make, wrap_dim


def _sizes(args: Sequence[Any]) -> tuple[int, ...]:
    """Sizes given as varargs (`view(2, 3)`) or as one sequence (`view((2, 3))`)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    try:
        return tuple(int(a) for a in args)
    except TypeError:
        raise TypeError(f"sizes must be ints or a tuple of ints, got {args!r}") from None


def infer_shape(shape: tuple[int, ...], numel: int) -> tuple[int, ...]:
    """Resolve one -1 in `shape` for `numel` elements; RuntimeError in PyTorch's words when impossible."""
    unknown = [i for i, s in enumerate(shape) if s == -1]
    if len(unknown) > 1:
        raise RuntimeError("only one dimension can be inferred")
    for s in shape:
        if s < -1:
            raise RuntimeError(f"invalid shape dimension {s}")
    known = math.prod(s for s in shape if s != -1)
    if unknown:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = shape[: unknown[0]] + (numel // known,) + shape[unknown[0] + 1 :]
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


def _movement(prim: Any, x: Tensor, raw: Any, **kw: Any) -> Tensor:
    if state.enabled and x._requires_grad:
        return prim.apply(x, **kw)
    return _make(raw, x._dtype, x._device, x._ops)


def reshape(input: Tensor, *shape: Any) -> Tensor:
    """A view when the strides allow it, else a copy (PyTorch's reshape)."""
    target: Any = shape
    if input._requires_grad and state.enabled:
        return fn.Reshape.apply(input, shape=infer_shape(_sizes(shape), input._data.size))
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        target = shape[0]
    try:  # numpy's reshape has PyTorch's semantics (view if possible, -1 inferred); its errors are reworded below
        out = input._data.reshape(target)
    except (ValueError, TypeError):
        out = input._data.reshape(infer_shape(_sizes(shape), input._data.size))
    return _make(out, input._dtype, input._device, input._ops)


def view(input: Tensor, *shape: Any, dtype: dtypes.dtype | None = None) -> Tensor:
    if dtype is not None and not shape:
        return _view_dtype(input, dtype)  # view(dtype=...): safetensors' slices call it so
    if len(shape) == 1 and isinstance(shape[0], dtypes.dtype):
        return _view_dtype(input, shape[0])
    shape_t = infer_shape(_sizes(shape), input._data.size)
    if state.enabled and input._requires_grad:
        return fn.View.apply(input, shape=shape_t)
    return _make(fn.View.forward(None, input._ops, input._data, shape_t), input._dtype, input._device, input._ops)


def _view_dtype(x: Tensor, dt: dtypes.dtype) -> Tensor:
    """The same bytes as `dt`; with a different element size the last dimension scales, as in torch (safetensors
    reads a checkpoint's bytes as uint8, then views them as the stored dtype)."""
    if dt.itemsize != x._dtype.itemsize:
        if x.ndim == 0 or (x._data.shape[-1] * x._dtype.itemsize) % dt.itemsize:
            raise RuntimeError(
                f"view(dtype): the last dimension of a {x._dtype} tensor of shape {list(x.shape)} does not hold a "
                f"whole number of {dt} elements"
            )
        if x._data.shape[-1] != 1 and x._data.strides[-1] != x._dtype.itemsize:
            raise RuntimeError("view(dtype): the last dimension must be contiguous to change the element size")
    return _make(x._data.view(dt.np), dt, x._device, x._ops)


def view_as(input: Tensor, other: Tensor) -> Tensor:
    return view(input, other.shape)


def reshape_as(input: Tensor, other: Tensor) -> Tensor:
    return reshape(input, other.shape)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if input.ndim == 0:
        return reshape(input, 1)
    s, e = wrap_dim(start_dim, input.ndim), wrap_dim(end_dim, input.ndim)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = input.shape
    return reshape(input, shape[:s] + (math.prod(shape[s : e + 1]),) + shape[e + 1 :])


def unflatten(input: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    d = wrap_dim(dim, input.ndim)
    shape = input.shape
    sizes = infer_shape(tuple(sizes), shape[d]) if -1 in sizes else tuple(sizes)
    if math.prod(sizes) != shape[d]:
        raise RuntimeError(
            f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim {dim} ({shape[d]}) "
            "in the input tensor"
        )
    return reshape(input, shape[:d] + sizes + shape[d + 1 :])


def permute(input: Tensor, *dims: Any) -> Tensor:
    dims_t = _sizes(dims)
    n = input.ndim
    if len(dims_t) != n:
        raise RuntimeError(
            f"permute(sparse_coo): number of dimensions in the tensor input does not match the length of the desired "
            f"ordering of dimensions i.e. input.dim() = {n} is not equal to len(dims) = {len(dims_t)}"
        )
    dims_t = tuple(wrap_dim(d, n) for d in dims_t)
    if len(set(dims_t)) != n:
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return _movement(fn.Permute, input, input._ops.transpose(input._data, dims_t), dims=dims_t)


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    n = input.ndim
    if n == 0:
        wrap_dim(dim0, 0), wrap_dim(dim1, 0)
        return input.detach() if not input._requires_grad else reshape(input, ())
    dims = list(range(n))
    a, b = wrap_dim(dim0, n), wrap_dim(dim1, n)
    dims[a], dims[b] = dims[b], dims[a]
    return permute(input, dims)


swapaxes = swapdims = transpose


def t(input: Tensor) -> Tensor:
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return transpose(input, 0, 1) if input.ndim == 2 else input.view(input.shape)


def movedim(input: Tensor, source: Any, destination: Any) -> Tensor:
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    n = input.ndim
    src, dst = [wrap_dim(s, n) for s in src], [wrap_dim(d, n) for d in dst]
    order = [d for d in range(n) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute(input, order)


def squeeze(input: Tensor, dim: Any = None) -> Tensor:
    shape = input.shape
    if dim is None:
        dims = {i for i, s in enumerate(shape) if s == 1}
    else:
        dims = {wrap_dim(d, input.ndim) for d in ((dim,) if isinstance(dim, int) else dim)}
        dims = {d for d in dims if input.ndim and shape[d] == 1}
    return reshape(input, tuple(s for i, s in enumerate(shape) if i not in dims))


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    d = wrap_dim(dim, input.ndim + 1)
    shape = input.shape
    return reshape(input, shape[:d] + (1,) + shape[d:])


def expand(input: Tensor, *sizes: Any) -> Tensor:
    target = list(_sizes(sizes))
    shape = input.shape
    if len(target) < len(shape):
        raise RuntimeError(
            f"expand(torch.FloatTensor{{{list(shape)}}}, size={target}): the number of sizes provided "
            f"({len(target)}) must be greater or equal to the number of dimensions in the tensor ({len(shape)})"
        )
    lead = len(target) - len(shape)
    for i, s in enumerate(shape):
        want = target[lead + i]
        if want == -1:
            target[lead + i] = s
        elif s != 1 and s != want:
            raise RuntimeError(
                f"The expanded size of the tensor ({want}) must match the existing size ({s}) at non-singleton "
                f"dimension {lead + i}.  Target sizes: {list(_sizes(sizes))}.  Tensor sizes: {list(shape)}"
            )
    if any(s < 0 for s in target[:lead]):
        raise RuntimeError(
            "The expanded size of the tensor (-1) isn't allowed in a leading, non-existing dimension "
            f"{target.index(-1)}"
        )
    tshape = tuple(target)
    if tshape == shape and not input._requires_grad:
        return _make(input._data, input._dtype, input._device, input._ops)
    return _movement(fn.Expand, input, input._ops.broadcast_to(input._data, tshape), shape=tshape)


def expand_as(input: Tensor, other: Tensor) -> Tensor:
    return expand(input, other.shape)


def broadcast_to(input: Tensor, size: Sequence[int]) -> Tensor:
    return expand(input, tuple(size))


def broadcast_tensors(*tensors: Tensor) -> tuple[Tensor, ...]:
    from serve.tensor.math_ops import broadcast_shapes

    shape = broadcast_shapes(*(t.shape for t in tensors))
    return tuple(expand(t, shape) for t in tensors)


def sum_to_size(input: Tensor, *size: Any) -> Tensor:
    """Sum `input` down to `size` (which `input` must be expandable from)."""
    shape = _sizes(size)
    lead = input.ndim - len(shape)
    if lead < 0 or any(s not in (1, n) for s, n in zip(shape, input.shape[lead:])):
        raise RuntimeError(f"size {list(shape)} is not expandable to size {list(input.shape)}.")
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and input.shape[lead + i] != 1)
    out = input.sum(dim=dims, keepdim=True) if dims else input
    return out.reshape(shape) if out.shape != shape else out


def repeat(input: Tensor, *sizes: Any) -> Tensor:
    reps = _sizes(sizes)
    if len(reps) < input.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    x = input.reshape((1,) * (len(reps) - input.ndim) + input.shape)
    # (s0, s1) -> (1, s0, 1, s1) -> expand (r0, s0, r1, s1) -> (r0*s0, r1*s1)
    inter = tuple(v for s in x.shape for v in (1, s))
    expanded = tuple(v for r, s in zip(reps, x.shape) for v in (r, s))
    return x.reshape(inter).expand(expanded).reshape(tuple(r * s for r, s in zip(reps, x.shape)))


def cat(tensors: Sequence[Tensor], dim: int = 0, *, out: Any = None) -> Tensor:
    fast = _cat_same_dtype_no_grad(tensors, dim)
    if fast is not None:
        return fast
    if isinstance(tensors, Tensor) or not len(tensors):
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    # PyTorch skips legacy empty 1-D tensors of shape (0,)
    parts = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or [tensors[0]]
    ref = parts[0]
    d = wrap_dim(dim, ref.ndim)
    for i, t in enumerate(parts):
        if t.ndim != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} and {t.ndim}")
        for k in range(ref.ndim):
            if k != d and t.shape[k] != ref.shape[k]:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size {ref.shape[k]} but got size "
                    f"{t.shape[k]} for tensor number {i} in the list."
                )
    dt = parts[0]._dtype
    for t in parts[1:]:
        dt = dtypes.promote_types(dt, t._dtype)
    parts = [t if t._dtype is dt else t.to(dt) for t in parts]
    if state.enabled and any(t._requires_grad for t in parts):
        return fn.Cat.apply(*parts, axis=d)
    return _make(ref._ops.concatenate([t._data for t in parts], axis=d), dt, ref._device, ref._ops)


concat = concatenate = cat


def _cat_same_dtype_no_grad(tensors: Any, dim: Any) -> Tensor | None:
    """The common case in one backend call; None sends anything unusual (and every error) to the full path."""
    if type(tensors) not in (list, tuple) or not tensors or type(dim) is not int:
        return None
    ref = tensors[0]
    dt = ref._dtype
    recording = state.enabled
    for t in tensors:
        if type(t) is not Tensor or t._dtype is not dt or (recording and t._requires_grad):
            return None
    try:
        data = ref._ops.concatenate([t._data for t in tensors], dim)
    except (ValueError, IndexError, TypeError):
        return None
    return _make(data, dt, ref._device, ref._ops)


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    if not len(tensors):
        raise RuntimeError("stack expects a non-empty TensorList")
    shape = tensors[0].shape
    for i, t in enumerate(tensors):
        if t.shape != shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(shape)} at entry 0 and "
                f"{list(t.shape)} at entry {i}"
            )
    d = wrap_dim(dim, len(shape) + 1)
    return cat([unsqueeze(t, d) for t in tensors], d)


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    return cat([t.reshape(1, -1) if t.ndim < 2 else t for t in tensors], 0)


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    d = wrap_dim(dim, input.ndim)
    size = input.shape[d]
    start = int(start)
    if start < 0:
        start += size
    if not 0 <= start <= size or length < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return input[(slice(None),) * d + (slice(start, start + length),)]


def split(tensor: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    d = wrap_dim(dim, tensor.ndim)
    size = tensor.shape[d]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0 and size:
            raise RuntimeError(f"split expects split_size be non-negative, but got split_size={step}")
        sections = [min(step, size - s) for s in range(0, size, step)] if size else [0]
    else:
        sections = [int(s) for s in split_size_or_sections]
        if sum(sections) != size:
            raise RuntimeError(
                f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's size at dimension "
                f"{d}), but got split_sizes={sections}"
            )
    out, start = [], 0
    for s in sections:
        out.append(narrow(tensor, d, start, s))
        start += s
    return tuple(out)


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    size = input.shape[wrap_dim(dim, input.ndim)]
    if size == 0:  # PyTorch gives `chunks` empty pieces rather than one
        return split(input, [0] * chunks, dim)
    return split(input, -(-size // chunks), dim)


def tensor_split(input: Tensor, sections: int, dim: int = 0) -> tuple[Tensor, ...]:
    size = input.shape[wrap_dim(dim, input.ndim)]
    base, extra = divmod(size, sections)
    return split(input, [base + (1 if i < extra else 0) for i in range(sections)], dim)


def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    d = wrap_dim(dim, input.ndim)
    return tuple(input[(slice(None),) * d + (i,)] for i in range(input.shape[d]))


def flip(input: Tensor, *dims: Any) -> Tensor:
    dims_t = tuple(wrap_dim(d, input.ndim) for d in _sizes(dims))
    return _movement(fn.Flip, input, input._ops.flip(input._data, dims_t), dims=dims_t)


def fliplr(input: Tensor) -> Tensor:
    return flip(input, 1)


def flipud(input: Tensor) -> Tensor:
    return flip(input, 0)


def roll(input: Tensor, shifts: Any, dims: Any = None) -> Tensor:
    if dims is None:
        return roll(input.flatten(), shifts, 0).view(input.shape)
    shifts_t = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims_t = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts_t) != len(dims_t):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts_t)}, dims:{len(dims_t)}")
    dims_t = tuple(wrap_dim(d, input.ndim) for d in dims_t)
    return _movement(fn.Roll, input, input._ops.roll(input._data, shifts_t, dims_t), shifts=shifts_t, dims=dims_t)


def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(input, diagonal, False)


def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(input, diagonal, True)


def _triangle(x: Tensor, diagonal: int, upper: bool) -> Tensor:
    if x.ndim < 2:
        raise RuntimeError(f"{'triu' if upper else 'tril'}: input tensor must have at least 2 dimensions")
    raw = (x._ops.triu if upper else x._ops.tril)(x._data, diagonal)
    return _movement(fn.Triangle, x, raw, diagonal=diagonal, upper=upper)


def contiguous(input: Tensor, memory_format: Any = None) -> Tensor:
    if input._ops.is_contiguous(input._data):
        return input
    return clone(input)


def clone(input: Tensor, *, memory_format: Any = None) -> Tensor:
    if state.enabled and input._requires_grad:
        return fn.Clone.apply(input)
    return _make(input._data.copy(), input._dtype, input._device, input._ops)
