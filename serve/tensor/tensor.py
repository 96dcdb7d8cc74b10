"""`serve.Tensor`: an n-dimensional array on a device, with PyTorch's attributes and autograd state.

A Tensor holds a backend array (`_data`: numpy on CPU, CuPy on CUDA), its serve `dtype`, its device and
the backend module (`_ops`) that implements primitives for that device. Operations live in the other
modules of this package and are bound as methods by `methods.py`; this file keeps only what a tensor is.
"""

from __future__ import annotations

import builtins
import copy as _copy
from typing import TYPE_CHECKING, Any

from serve.backend import CPU, as_device, device, placed
from serve.tensor import dtypes
from serve.tensor.dtypes import dtype

_new = object.__new__


class Size(tuple):
    """A tensor's shape: a tuple of ints that prints like `serve.Size([2, 3])` (`torch.Size`)."""

    __slots__ = ()

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self) -> str:
        return f"serve.Size({list(self)})"

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        out = tuple.__getitem__(self, key)
        return Size(out) if isinstance(key, slice) else out


def _make(data: Any, dt: dtype, dev: device, ops: Any) -> Tensor:
    """Wrap a backend array as a Tensor that records no graph (the hot path of every operation)."""
    if type(data) is not ops.ndarray:
        data = ops.asarray(data)
    t = _new(Tensor)
    t._data = data
    t._dtype = dt
    t._device = dev
    t._ops = ops
    t._requires_grad = False
    t._grad_fn = None
    t._grad = None
    t._output_nr = 0
    return t


# what a tensor is, copied slot by slot when a subclass instance (a Parameter) is made from a tensor
_STATE_SLOTS = ("_data", "_device", "_dtype", "_grad", "_grad_fn", "_ops", "_output_nr", "_requires_grad", "_view")


class Tensor:
    """A multi-dimensional array with PyTorch's interface. Build one with `serve.tensor(...)` and friends."""

    # `_view` (unset on most tensors): (base, index) when this tensor is `base[index]` with a basic index, so
    # that an in-place change of the view can be recorded on the base's graph too (PyTorch's CopySlices)
    # `__dict__` (made only when used): attributes a library sets on a tensor, as torch allows (transformers marks
    # loaded weights with `_is_hf_initialized`)
    __slots__ = ("__dict__", "__weakref__", *_STATE_SLOTS)
    _data: Any
    _dtype: dtype
    _device: device
    _ops: Any
    _requires_grad: builtins.bool
    _grad: Tensor | None
    _grad_fn: Any
    _output_nr: builtins.int
    _view: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> Tensor:
        # `Tensor(data)` builds a float tensor and `Tensor(2, 3)` an uninitialised one, like torch.Tensor
        from serve.tensor.creation import empty, tensor

        if len(args) == 1 and not isinstance(args[0], int):
            src = tensor(args[0], dtype=dtypes.get_default_dtype())
        else:
            src = empty(*args, **kwargs)
        if cls is Tensor:
            return src
        t = _new(cls)
        for slot in _STATE_SLOTS:
            if hasattr(src, slot):
                setattr(t, slot, getattr(src, slot))
        return t

    # -- what a tensor is ----------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    def size(self, dim: int | None = None) -> Any:
        if dim is None:
            return Size(self._data.shape)
        return self._data.shape[wrap_dim(dim, self._data.ndim)]

    def dim(self) -> builtins.int:
        return self._data.ndim

    @property
    def ndim(self) -> builtins.int:
        return self._data.ndim

    ndimension = dim

    def numel(self) -> builtins.int:
        return int(self._data.size)

    nelement = numel

    def element_size(self) -> builtins.int:
        return self._dtype.itemsize

    @property
    def dtype(self) -> dtype:
        return self._dtype

    @property
    def device(self) -> device:
        return self._device

    @property
    def is_cuda(self) -> builtins.bool:
        return self._device.type == "cuda"

    @property
    def is_cpu(self) -> builtins.bool:
        return self._device.type == "cpu"

    @property
    def is_meta(self) -> builtins.bool:
        return self._device.type == "meta"

    def is_floating_point(self) -> builtins.bool:
        return self._dtype.is_floating_point

    def is_complex(self) -> builtins.bool:
        return self._dtype.is_complex

    def stride(self, dim: int | None = None) -> Any:
        s = self._ops.strides(self._data)
        return s if dim is None else s[wrap_dim(dim, self._data.ndim)]

    def is_contiguous(self, memory_format: Any = None) -> builtins.bool:
        return self._ops.is_contiguous(self._data)

    def data_ptr(self) -> builtins.int:
        return int(self._data.__array_interface__["data"][0]) if self.is_cpu else int(self._data.data.ptr)

    # -- autograd state ------------------------------------------------------------------------------
    @property
    def requires_grad(self) -> builtins.bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if self._grad_fn is not None:
            if not requires_grad:
                raise RuntimeError(
                    "you can only change requires_grad flags of leaf variables. If you want to use a computed "
                    "variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach()."
                )
            return self
        if requires_grad and not (self._dtype.is_floating_point or self._dtype.is_complex):
            raise RuntimeError(
                f"only Tensors of floating point and complex dtype can require gradients, got {self._dtype!r}"
            )
        self._requires_grad = bool(requires_grad)
        return self

    @property
    def grad(self) -> Tensor | None:
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got {type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(
                    f"assigned grad has data of a different size: {list(value.shape)} vs {list(self.shape)}"
                )
        self._grad = value

    @property
    def grad_fn(self) -> Any:
        return self._grad_fn

    @property
    def is_leaf(self) -> builtins.bool:
        return self._grad_fn is None

    @property
    def output_nr(self) -> builtins.int:
        return self._output_nr

    def retain_grad(self) -> None:
        if self._grad_fn is None:
            if not self._requires_grad:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
            return
        self._grad_fn.register_retained(self._output_nr, self)

    @property
    def retains_grad(self) -> builtins.bool:
        fn = self._grad_fn
        return bool(fn is not None and fn._retained and self._output_nr in fn._retained)

    def detach(self) -> Tensor:
        """A tensor sharing this one's data, cut from the graph."""
        return _make(self._data, self._dtype, self._device, self._ops)

    def detach_(self) -> Tensor:
        self._grad_fn, self._requires_grad, self._output_nr = None, False, 0
        return self

    @property
    def data(self) -> Tensor:
        return self.detach()

    @data.setter
    def data(self, value: Tensor) -> None:
        self._data, self._dtype, self._device, self._ops = value._data, value._dtype, value._device, value._ops

    def backward(
        self, gradient: Tensor | None = None, retain_graph: bool | None = None, create_graph: bool = False,
        inputs: Any = None,
    ) -> None:  # fmt: skip
        """Accumulate the gradient of this tensor into the `.grad` of the leaves it depends on."""
        from serve.tensor.autograd import backward

        backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    # -- conversion ----------------------------------------------------------------------------------
    def item(self) -> Any:
        if self._data.size != 1:
            raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be converted to Scalar")
        return self._host().reshape(()).item() if self._dtype is not dtypes.bfloat16 else float(self._host().item())

    def tolist(self) -> Any:
        host = self._host()
        if self._dtype is dtypes.bfloat16:
            host = host.astype("float32")
        return host.tolist()

    def numpy(self, *, force: bool = False) -> Any:
        """The numpy array behind a CPU tensor (sharing its memory, like PyTorch)."""
        if self._device.type != "cpu":
            if not force:
                raise TypeError(
                    f"can't convert {self._device} device type tensor to numpy. "
                    "Use Tensor.cpu() to copy the tensor to host memory first."
                )
            return self._host()
        if self._requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return self._data

    def _host(self) -> Any:
        return self._ops.to_numpy(self._data)

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        host = self._host()
        return host if dtype is None else host.astype(dtype)

    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """`to(dtype)`, `to(device)`, `to(device, dtype)`, `to(other)`; returns self when nothing changes."""
        dev, dt = None, None
        for a in args:
            if isinstance(a, dtype):
                dt = a
            elif isinstance(a, Tensor):
                dev, dt = a._device, a._dtype
            elif a is not None:
                dev = as_device(a)
        dt = kwargs.get("dtype", dt)
        if kwargs.get("device") is not None:
            dev = as_device(kwargs["device"])
        if dev is not None and dev.index is None and dev.type != "cpu":
            dev = placed(dev)[0]  # "cuda" means the current device: a tensor already there is not copied
        copy = kwargs.get("copy", False)
        out = self
        if dt is not None and dt is not self._dtype:
            from serve.tensor.function import Cast

            out = Cast.apply(out, dtype=dt)
        if dev is not None and dev != self._device:
            from serve.tensor.function import ToDevice

            out = ToDevice.apply(out, device=dev)
        if copy and out is self:
            out = self.clone()
        return out

    def cpu(self) -> Tensor:
        return self.to(CPU)

    def cuda(self, device: Any = None, non_blocking: bool = False) -> Tensor:
        """A copy on CUDA device `device` (an index, "cuda:N" or None for the current device); self when there."""
        return self.to(as_device("cuda" if device is None else device))

    def type(self, dtype: Any = None) -> Any:
        if dtype is None:
            return f"serve.{_TYPE_NAMES.get(self._dtype.name, self._dtype.name)}"
        return self.to(dtypes.from_name(dtype.split(".")[-1]) if isinstance(dtype, str) else dtype)

    def type_as(self, other: Tensor) -> Tensor:
        return self.to(other._dtype)

    def float(self) -> Tensor:
        return self.to(dtypes.float32)

    def double(self) -> Tensor:
        return self.to(dtypes.float64)

    def half(self) -> Tensor:
        return self.to(dtypes.float16)

    def bfloat16(self) -> Tensor:
        return self.to(dtypes.bfloat16)

    def long(self) -> Tensor:
        return self.to(dtypes.int64)

    def int(self) -> Tensor:
        return self.to(dtypes.int32)

    def short(self) -> Tensor:
        return self.to(dtypes.int16)

    def char(self) -> Tensor:
        return self.to(dtypes.int8)

    def byte(self) -> Tensor:
        return self.to(dtypes.uint8)

    def bool(self) -> Tensor:
        return self.to(dtypes.bool)

    # -- Python protocol -----------------------------------------------------------------------------
    def __len__(self) -> builtins.int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self) -> Any:
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def __bool__(self) -> builtins.bool:
        if self._data.size != 1:
            raise RuntimeError(
                f"Boolean value of Tensor with more than one value is ambiguous (it has {self._data.size} values); "
                "use .any() or .all()"
            )
        return bool(self.item())

    def __float__(self) -> builtins.float:
        return float(self.item())

    def __int__(self) -> builtins.int:
        return int(self.item())

    def __index__(self) -> builtins.int:
        if self._dtype.is_floating_point or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __format__(self, spec: str) -> str:
        if self._data.ndim == 0:
            return format(self.item(), spec)
        return format(repr(self), spec)

    __hash__ = object.__hash__

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        from serve.tensor.printing import tensor_repr

        return tensor_repr(self)

    __str__ = __repr__

    def __deepcopy__(self, memo: dict) -> Tensor:
        if self._grad_fn is not None:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at the "
                "moment."
            )
        new = _make(self._data.copy(), self._dtype, self._device, self._ops)
        if type(self) is not Tensor:
            inner = new
            new = _new(type(self))
            for slot in _STATE_SLOTS:
                if hasattr(inner, slot):
                    setattr(new, slot, getattr(inner, slot))
            for k, v in getattr(self, "__dict__", {}).items():
                new.__dict__[k] = _copy.deepcopy(v, memo)
        new._requires_grad = self._requires_grad
        if self._grad is not None:
            new._grad = _copy.deepcopy(self._grad, memo)
        memo[id(self)] = new
        return new

    def __reduce_ex__(self, protocol: Any) -> Any:
        from serve.tensor.creation import _rebuild

        return (_rebuild, (self._host(), self._dtype.name, str(self._device), self._requires_grad))

    if TYPE_CHECKING:  # methods and operators that methods.py binds at import, declared for type checkers

        def __getattr__(self, name: str) -> Any: ...

        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __iadd__(self, other: Any) -> Tensor: ...

        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __isub__(self, other: Any) -> Tensor: ...

        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __imul__(self, other: Any) -> Tensor: ...

        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __itruediv__(self, other: Any) -> Tensor: ...

        def __floordiv__(self, other: Any) -> Tensor: ...
        def __rfloordiv__(self, other: Any) -> Tensor: ...
        def __ifloordiv__(self, other: Any) -> Tensor: ...

        def __mod__(self, other: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __imod__(self, other: Any) -> Tensor: ...

        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __ipow__(self, other: Any) -> Tensor: ...

        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __imatmul__(self, other: Any) -> Tensor: ...

        def __and__(self, other: Any) -> Tensor: ...
        def __rand__(self, other: Any) -> Tensor: ...
        def __iand__(self, other: Any) -> Tensor: ...

        def __or__(self, other: Any) -> Tensor: ...
        def __ror__(self, other: Any) -> Tensor: ...
        def __ior__(self, other: Any) -> Tensor: ...

        def __xor__(self, other: Any) -> Tensor: ...
        def __rxor__(self, other: Any) -> Tensor: ...
        def __ixor__(self, other: Any) -> Tensor: ...

        def __neg__(self) -> Tensor: ...
        def __pos__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __invert__(self) -> Tensor: ...

        def __getitem__(self, index: Any) -> Tensor: ...

        def __setitem__(self, index: Any, value: Any) -> None: ...

        def __eq__(self, other: Any) -> Tensor: ...  # type: ignore[override]

        def __ne__(self, other: Any) -> Tensor: ...  # type: ignore[override]

        def __lt__(self, other: Any) -> Tensor: ...

        def __le__(self, other: Any) -> Tensor: ...

        def __gt__(self, other: Any) -> Tensor: ...

        def __ge__(self, other: Any) -> Tensor: ...


_TYPE_NAMES = {
    "float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor", "bfloat16": "BFloat16Tensor",
    "int64": "LongTensor", "int32": "IntTensor", "int16": "ShortTensor", "int8": "CharTensor",
    "uint8": "ByteTensor", "bool": "BoolTensor",
}  # fmt: skip


def wrap_dim(dim: Any, ndim: int) -> int:
    """`dim` as a non-negative axis of an `ndim`-dimensional tensor, IndexError in PyTorch's words when out of range."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim + n if dim < 0 else dim
