"""The globals a checkpoint may name, each mapped to serve's own safe implementation; everything else is refused.

This is the whole attack surface of loading a pickle: a name found here is the only way a checkpoint can make
the loader call anything. The table holds what a state_dict (or a training checkpoint around one) needs:
OrderedDict, the tensor and parameter rebuild functions, storage classes, dtypes, torch.Size, torch.device and
the few builtins pickle protocol 2 uses for bytes and sets. Each callable is a small function of ours that checks
its arguments, not the real class: `bytearray(10**12)` or `_codecs.encode(s, "zlib")` cannot be reached.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

from serve.backend import device
from serve.errors import CheckpointError
from serve.nn.parameter import Parameter
from serve.serialization import storage as st
from serve.serialization.limits import check_key
from serve.serialization.unpickler import SafeCall
from serve.tensor.tensor import Size, Tensor

_REFUSAL = (
    "refused to load global '{name}': the safe loader builds only tensors, state_dicts and plain Python "
    "containers, and never runs code or rebuilds other objects from a checkpoint. Whole pickled modules "
    "(torch.save(model)) are not supported: save the state_dict instead (torch.save(model.state_dict(), path))."
)
_UNSUPPORTED_DTYPE = re.compile(r"^(u?int\d+|float8_\w+|bits\w+|q(u?int)\w+|complex32|chalf|\w+Storage)$")
_HINTS = {
    "torch._utils._rebuild_sparse_tensor": "sparse tensors are not supported; save t.to_dense()",
    "torch._utils._rebuild_qtensor": "quantized tensors are not supported; save t.dequantize()",
    "torch._utils._rebuild_nested_tensor": "nested tensors are not supported",
    "torch._utils._rebuild_meta_tensor_no_storage": "meta tensors hold no data to load",
    "torch._utils._rebuild_wrapper_subclass": "tensor subclasses (DTensor, FakeTensor) are not supported",
}


def _ordered_dict(*args: Any) -> OrderedDict:
    if args:  # pickle always builds an OrderedDict empty, then fills it with SETITEMS
        raise TypeError("OrderedDict is only rebuilt empty")
    return OrderedDict()


def _set(items: Any = ()) -> set:
    if type(items) not in (list, tuple):
        raise TypeError(f"set() of {type(items).__name__}")
    return set(map(check_key, items))


def _bytearray(data: Any = b"") -> bytearray:
    if type(data) is not bytes:
        raise TypeError(f"bytearray() of {type(data).__name__}")
    return bytearray(data)


def _bytes() -> bytes:
    return b""  # protocol 2 writes b"" as bytes(); non-empty bytes come through _codecs.encode


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        raise TypeError("only _codecs.encode(str, 'latin1') (how protocol 2 stores bytes) is allowed")
    return text.encode("latin-1")


def _complex(real: Any = 0.0, imag: Any = 0.0) -> complex:
    if type(real) not in (int, float) or type(imag) not in (int, float):
        raise TypeError("complex() of non-numbers")
    return complex(real, imag)


def _size(dims: Any = ()) -> Size:
    if type(dims) not in (tuple, list) or not all(type(d) is int for d in dims):
        raise TypeError(f"torch.Size of {dims!r:.60}")
    return Size(dims)


def _device(kind: Any, index: Any = None) -> device:
    if type(kind) is not str or (index is not None and type(index) is not int):
        raise TypeError("torch.device(str, int)")
    return device(kind, index)


def _tensor_type(*args: Any) -> Any:
    raise TypeError("the tensor classes are only accepted as the new_type of _rebuild_from_type_v2")


_TENSOR = SafeCall("torch.Tensor", _tensor_type)
_PARAMETER = SafeCall("torch.nn.parameter.Parameter", _tensor_type)
_REBUILDS = {st.rebuild_tensor, st.rebuild_tensor_v2, st.rebuild_tensor_v3, st.rebuild_parameter,
             st.rebuild_parameter_with_state}  # fmt: skip


def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any) -> Tensor:
    """A tensor subclass or a tensor with Python attributes: rebuilt as Tensor or Parameter, attributes dropped."""
    known_type = new_type is _TENSOR or new_type is _PARAMETER
    if type(func) is not SafeCall or func.fn not in _REBUILDS or not known_type:
        raise CheckpointError(f"_rebuild_from_type_v2 of {new_type!r:.60} is not supported: only Tensor and Parameter")
    if type(args) is not tuple:
        raise TypeError("arguments must be a tuple")
    out = func.fn(*args)
    if new_type is _PARAMETER and not isinstance(out, Parameter):
        out = Parameter(out, out.requires_grad)
    return out


def _table() -> dict[str, Any]:
    calls = {
        "collections.OrderedDict": _ordered_dict,
        "torch._utils._rebuild_tensor": st.rebuild_tensor,
        "torch._utils._rebuild_tensor_v2": st.rebuild_tensor_v2,
        "torch._utils._rebuild_tensor_v3": st.rebuild_tensor_v3,
        "torch._utils._rebuild_parameter": st.rebuild_parameter,
        "torch._utils._rebuild_parameter_with_state": st.rebuild_parameter_with_state,
        "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
        "torch.Size": _size,
        "torch.device": _device,
        "_codecs.encode": _encode,
        "builtins.set": _set,
        "builtins.bytearray": _bytearray,
        "builtins.bytes": _bytes,
        "builtins.complex": _complex,
    }
    table: dict[str, Any] = {name: SafeCall(name, fn) for name, fn in calls.items()}  # type: ignore[arg-type]
    table["torch.Tensor"] = _TENSOR
    table["torch.nn.parameter.Parameter"] = _PARAMETER
    table |= {f"torch.{name}": dt for name, dt in st.TORCH_DTYPES.items()}
    for name in st.STORAGE_DTYPES:
        table[f"torch.{name}"] = table[f"torch.cuda.{name}"] = st.StorageType(name)
    return table


ALLOWED = _table()


def find_global(module: str, name: str) -> Any:
    """The object standing for `module.name` in a checkpoint, or a CheckpointError naming what was refused."""
    full = f"{module}.{name}"
    found = ALLOWED.get(full)
    if found is not None:
        return found
    hint = _HINTS.get(full)
    if hint is None and module in ("torch", "torch.cuda") and _UNSUPPORTED_DTYPE.match(name):
        hint = f"torch.{name} is a dtype or storage type that serve does not support"
    raise CheckpointError(_REFUSAL.format(name=full) + (f" ({hint})" if hint else ""))
