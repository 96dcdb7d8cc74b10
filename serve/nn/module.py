"""`Module`: the base class of every layer and model, with PyTorch's contract.

State lives in three registries routed by `__setattr__`: `_parameters`, `_buffers` and `_modules`. Traversal
(`named_parameters`, `named_modules`, ...) recurses with `prefix + name + "."`, so keys are exactly PyTorch's
(`layer1.0.bn1.running_mean`). `state_dict`/`load_state_dict` live in `state_dict.py`; this file keeps the
registries, the traversal, mode and device/dtype moves, calling with hooks, and `repr`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from serve.backend.device import device as as_device
from serve.nn import state_dict as _sd
from serve.nn.hooks import RemovableHandle, add_hook
from serve.nn.parameter import Buffer, Parameter
from serve.tensor import dtypes
from serve.tensor.grad_mode import no_grad
from serve.tensor.tensor import Tensor

__all__ = ["Module", "RemovableHandle"]


def _addindent(s: str, num_spaces: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * num_spaces + line for line in lines[1:])


class Module:
    """Base class for all neural network modules; subclass it and define `forward`, as in PyTorch."""

    training: bool
    _version: int = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments {args} {kwargs}")
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", {})
        setattr_(self, "_buffers", {})
        setattr_(self, "_non_persistent_buffers_set", set())
        setattr_(self, "_modules", {})
        setattr_(self, "_forward_pre_hooks", OrderedDict())
        setattr_(self, "_forward_pre_hooks_with_kwargs", OrderedDict())
        setattr_(self, "_forward_hooks", OrderedDict())
        setattr_(self, "_forward_hooks_with_kwargs", OrderedDict())
        setattr_(self, "_forward_hooks_always_called", OrderedDict())
        setattr_(self, "_state_dict_hooks", OrderedDict())
        setattr_(self, "_load_state_dict_pre_hooks", OrderedDict())
        setattr_(self, "_load_state_dict_post_hooks", OrderedDict())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    # -- registration --------------------------------------------------------------------------------------
    def _check_name(self, name: Any, kind: str) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
        if name == "" or "." in name:
            raise KeyError(f'{kind} name can\'t be empty or contain ".", got: "{name}"')

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or None: a declared but absent parameter, skipped by state_dict)."""
        self._check_name(name, "parameter")
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                "(serve.nn.Parameter or None required)"
            )
        if param is not None and param._grad_fn is not None:
            raise ValueError(
                f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be created "
                "explicitly. To express it as a function of another Tensor, compute the value in forward()."
            )
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a buffer: state that is not a parameter (running_mean); non-persistent ones stay out of state_dict."""
        self._check_name(name, "buffer")
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' (Tensor or None required)"
            )
        if isinstance(tensor, Buffer):
            tensor = tensor.detach().requires_grad_(tensor._requires_grad)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a child module, reachable as an attribute and under `name.` in state_dict keys."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_name(name, "module")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails: parameters, buffers and children live in the registries
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            values = d.get(registry)
            if values is not None and name in values:
                return values[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._forget(name, keep="_parameters")
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as parameter '{name}' (serve.nn.Parameter or None "
                    "expected)"
                )
            params[name] = None
        elif isinstance(value, Module):
            if params is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._forget(name, keep="_modules")
            self._modules[name] = value
        elif params is not None and name in d["_modules"]:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' (Module or None)")
            d["_modules"][name] = None
        elif isinstance(value, Buffer) or (params is not None and name in d["_buffers"]):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' (Tensor or None expected)")
            if isinstance(value, Buffer):
                self._forget(name, keep="_buffers")
                persistent = value.persistent
            else:
                persistent = name not in self._non_persistent_buffers_set
            self.register_buffer(name, value, persistent)
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: str) -> None:
        """Remove `name` from the instance dict and the other registries; `keep` keeps its place in its own."""
        d = self.__dict__
        d.pop(name, None)
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry != keep:
                d[registry].pop(name, None)
        if keep != "_buffers":
            d["_non_persistent_buffers_set"].discard(name)

    def __delattr__(self, name: str) -> None:
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if name in d.get(registry, ()):
                del d[registry][name]
                d["_non_persistent_buffers_set"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        extra = [*self._parameters, *self._buffers, *self._modules]
        return sorted(set(super().__dir__()) | set(extra))

    def get_submodule(self, target: str) -> Module:
        """The module at dotted path `target` ("" is self), AttributeError naming the missing part."""
        mod: Module = self
        for item in target.split(".") if target else []:
            if item not in mod._modules:
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = mod._modules[item]  # type: ignore[assignment]
        return mod

    def get_parameter(self, target: str) -> Parameter:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return mod._parameters[name]  # type: ignore[return-value]

    def get_buffer(self, target: str) -> Tensor:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return mod._buffers[name]  # type: ignore[return-value]

    # -- traversal -----------------------------------------------------------------------------------------
    def named_modules(self, memo: set[int] | None = None, prefix: str = "", remove_duplicate: bool = True
                      ) -> Iterator[tuple[str, Module]]:  # fmt: skip
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, registry: str, prefix: str, recurse: bool, remove_duplicate: bool
                       ) -> Iterator[tuple[str, Any]]:  # fmt: skip
        seen: set[int] = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mod_prefix, mod in mods:
            for name, value in getattr(mod, registry).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield mod_prefix + ("." if mod_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
                         ) -> Iterator[tuple[str, Parameter]]:  # fmt: skip
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
                      ) -> Iterator[tuple[str, Tensor]]:  # fmt: skip
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # -- state_dict (the logic is in state_dict.py) ----------------------------------------------------------
    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        """An OrderedDict of every parameter and persistent buffer, keyed exactly as PyTorch keys them."""
        if args:  # PyTorch's deprecated positional form: (destination, prefix, keep_vars)
            destination, prefix, keep_vars = (list(args) + [destination, prefix, keep_vars][len(args) :])[:3]
        return _sd.state_dict(self, destination, prefix, keep_vars)

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        _sd.save_own_state(self, destination, prefix, keep_vars)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """Copy a state_dict in; every missing/unexpected key and shape mismatch is reported in one error.

        Returns `(missing_keys, unexpected_keys)` (a named tuple, as PyTorch's `_IncompatibleKeys`).
        """
        return _sd.load_state_dict(self, state_dict, strict, assign)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]
                              ) -> None:  # fmt: skip
        _sd.load_own_state(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                           error_msgs)  # fmt: skip

    def _register_state_dict_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        return add_hook(self._state_dict_hooks, hook, False)

    register_state_dict_post_hook = _register_state_dict_hook

    def _register_load_state_dict_pre_hook(self, hook: Callable[..., Any], with_module: bool = False
                                           ) -> RemovableHandle:  # fmt: skip
        fn = (lambda *a, **k: hook(self, *a, **k)) if with_module else hook
        return add_hook(self._load_state_dict_pre_hooks, fn, False)

    register_load_state_dict_pre_hook = _register_load_state_dict_pre_hook

    def register_load_state_dict_post_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        return add_hook(self._load_state_dict_post_hooks, hook, False)

    # -- modes and gradients ---------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if p._grad is None:
                continue
            if set_to_none:
                p._grad = None
            else:
                p._grad = p._grad.detach().zero_()

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call `fn` on every submodule (children first) and then on self, as PyTorch does."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # -- devices and dtypes ----------------------------------------------------------------------------------
    def _apply(self, fn: Callable[[Tensor], Tensor]) -> Module:
        """Replace every parameter's and buffer's data by `fn(tensor)`, keeping the Parameter objects."""
        with no_grad():
            for module in self.modules():
                for param in module._parameters.values():
                    if param is None:
                        continue
                    param.data = fn(param)
                    if param._grad is not None:
                        param._grad = fn(param._grad)
                for key, buf in module._buffers.items():
                    if buf is not None:
                        module._buffers[key] = fn(buf)
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """`to(device)`, `to(dtype)`, `to(device, dtype)`, `to(tensor)`; dtype changes only floating-point state."""
        dev, dt = None, kwargs.get("dtype")
        for a in args:
            if isinstance(a, dtypes.dtype):
                dt = a
            elif isinstance(a, Tensor):
                dev, dt = a._device, a._dtype
            elif a is not None:
                dev = as_device(a)
        if kwargs.get("device") is not None:
            dev = as_device(kwargs["device"])
        if dt is not None and not (dt.is_floating_point or dt.is_complex):
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired dtype={dt}")

        def convert(t: Tensor) -> Tensor:
            target = dt if dt is not None and (t._dtype.is_floating_point or t._dtype.is_complex) else None
            return t.to(device=dev, dtype=target)

        return self._apply(convert)

    def cpu(self) -> Module:
        return self.to("cpu")

    def cuda(self, device: Any = None) -> Module:
        return self.to(as_device(f"cuda:{device}" if isinstance(device, int) else device or "cuda"))

    def _cast_floating(self, dt: dtypes.dtype) -> Module:
        return self._apply(lambda t: t.to(dt) if t._dtype.is_floating_point else t)

    def float(self) -> Module:
        return self._cast_floating(dtypes.float32)

    def double(self) -> Module:
        return self._cast_floating(dtypes.float64)

    def half(self) -> Module:
        return self._cast_floating(dtypes.float16)

    def bfloat16(self) -> Module:
        return self._cast_floating(dtypes.bfloat16)

    # -- calling, with hooks -----------------------------------------------------------------------------------
    def _call_impl(self, *args: Any, **kwargs: Any) -> Any:
        d = self.__dict__
        if not (d["_forward_hooks"] or d["_forward_pre_hooks"]):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    __call__ = _call_impl

    def _call_with_hooks(self, args: tuple, kwargs: dict) -> Any:
        for hook_id, hook in list(self._forward_pre_hooks.items()):
            if hook_id in self._forward_pre_hooks_with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(
                            f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got {result}."
                        )
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        try:
            output = self.forward(*args, **kwargs)
        except Exception:
            for hook_id, hook in self._forward_hooks.items():
                if hook_id in self._forward_hooks_always_called:
                    self._run_forward_hook(hook_id, hook, args, kwargs, None)
            raise
        for hook_id, hook in list(self._forward_hooks.items()):
            result = self._run_forward_hook(hook_id, hook, args, kwargs, output)
            if result is not None:
                output = result
        return output

    def _run_forward_hook(self, hook_id: int, hook: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        if hook_id in self._forward_hooks_with_kwargs:
            return hook(self, args, kwargs, output)
        return hook(self, args, output)

    def register_forward_pre_hook(self, hook: Callable[..., Any], *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:  # fmt: skip
        """`hook(module, args)` (or `(module, args, kwargs)`) runs before forward and may replace its inputs."""
        handle = add_hook(self._forward_pre_hooks, hook, prepend, self._forward_pre_hooks_with_kwargs)
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        return handle

    def register_forward_hook(self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:  # fmt: skip
        """`hook(module, args, output)` runs after forward (to read intermediate outputs) and may replace output."""
        handle = add_hook(self._forward_hooks, hook, prepend, self._forward_hooks_with_kwargs,
                          self._forward_hooks_always_called)  # fmt: skip
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        return handle

    # -- printing ----------------------------------------------------------------------------------------------
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """The module's own settings for its repr (layers override it: `in_features=3, out_features=4`)."""
        return ""

    def __repr__(self) -> str:
        extra_lines = self.extra_repr().split("\n") if self.extra_repr() else []
        child_lines = [f"({key}): {_addindent(repr(module), 2)}" for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
