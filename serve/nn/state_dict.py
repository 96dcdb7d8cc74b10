"""`Module.state_dict` and `Module.load_state_dict`, with PyTorch's keys, metadata and hooks.

Loading collects every problem (missing keys, unexpected keys, shape mismatches, values that are not
tensors) and raises once listing them all; with `strict=False` only the shape problems raise and the
missing/unexpected keys are returned.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from serve.nn.parameter import Parameter
from serve.tensor.grad_mode import no_grad
from serve.tensor.tensor import Tensor

if TYPE_CHECKING:
    from serve.nn.module import Module


class IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What `load_state_dict` returns: the keys the model wanted but did not get, and the keys it did not know."""

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def state_dict(module: Module, destination: Any, prefix: str, keep_vars: bool) -> Any:
    if destination is None:
        destination = OrderedDict()
        destination._metadata = OrderedDict()  # type: ignore[attr-defined]
    local_metadata = {"version": module._version}
    if hasattr(destination, "_metadata"):
        destination._metadata[prefix[:-1]] = local_metadata
    module._save_to_state_dict(destination, prefix, keep_vars)
    for name, child in module._modules.items():
        if child is not None:
            child.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
    for hook in module._state_dict_hooks.values():
        result = hook(module, destination, prefix, local_metadata)
        if result is not None:
            destination = result
    return destination


def save_own_state(module: Module, destination: dict, prefix: str, keep_vars: bool) -> None:
    for name, param in module._parameters.items():
        if param is not None:
            destination[prefix + name] = param if keep_vars else param.detach()
    for name, buf in module._buffers.items():
        if buf is not None and name not in module._non_persistent_buffers_set:
            destination[prefix + name] = buf if keep_vars else buf.detach()


class StateDictMismatchError(RuntimeError):
    """The state_dict does not fit the module (missing or unexpected keys, shapes that differ): PyTorch's
    RuntimeError, as a class of its own so that a server can tell a checkpoint that does not fit its model file
    (the archive's fault) from a failure of the code."""


def load_state_dict(module: Module, sd: Any, strict: bool, assign: bool) -> IncompatibleKeys:
    if not isinstance(sd, Mapping):
        raise TypeError(
            f"Expected state_dict to be dict-like, got {type(sd).__name__}. If the checkpoint holds more than the "
            "weights, pick them with serve.serialization.find_state_dict(checkpoint)."
        )
    missing: list[str] = []
    unexpected: list[str] = []
    errors: list[str] = []
    metadata = getattr(sd, "_metadata", None)

    def load(mod: Module, local_sd: dict, prefix: str) -> None:
        local_metadata = dict(metadata.get(prefix[:-1], {})) if metadata is not None else {}
        if assign:
            local_metadata["assign_to_params_buffers"] = True
        mod._load_from_state_dict(local_sd, prefix, local_metadata, True, missing, unexpected, errors)
        for name, child in mod._modules.items():
            if child is not None:
                child_prefix = prefix + name + "."
                load(child, {k: v for k, v in local_sd.items() if k.startswith(child_prefix)}, child_prefix)
        keys = IncompatibleKeys(missing, unexpected)
        for hook in mod._load_state_dict_post_hooks.values():
            hook(mod, keys)

    load(module, dict(sd), "")
    if strict:
        if unexpected:
            errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in unexpected)))
        if missing:
            errors.insert(0, "Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing)))
    if errors:
        hint = (
            "Check that the model definition matches the checkpoint (a 'module.' prefix from DataParallel is "
            "removed by serve.nn.utils.consume_prefix_in_state_dict_if_present); strict=False loads the matching "
            "keys and returns the missing and unexpected ones."
        )
        raise StateDictMismatchError(
            "Error(s) in loading state_dict for {}:\n\t{}\n{}".format(type(module).__name__, "\n\t".join(errors), hint)
        )
    return IncompatibleKeys(missing, unexpected)


def load_own_state(module: Module, sd: dict, prefix: str, local_metadata: dict, strict: bool,
                   missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]) -> None:  # fmt: skip
    """Copy this module's own parameters and persistent buffers from `sd` (PyTorch's `_load_from_state_dict`)."""
    for hook in module._load_state_dict_pre_hooks.values():
        hook(sd, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
    buffers = {k: v for k, v in module._buffers.items() if k not in module._non_persistent_buffers_set}
    local_state = {k: v for k, v in [*module._parameters.items(), *buffers.items()] if v is not None}
    assign = local_metadata.get("assign_to_params_buffers", False)
    for name, param in local_state.items():
        key = prefix + name
        if key not in sd:
            if strict:
                missing_keys.append(key)
            continue
        value = sd[key]
        if not isinstance(value, Tensor):
            error_msgs.append(
                f'While copying the parameter named "{key}", expected a Tensor from the checkpoint but received '
                f"{type(value).__name__}"
            )
        elif value.shape != param.shape:
            error_msgs.append(f"size mismatch for {key}: checkpoint {tuple(value.shape)} vs model {tuple(param.shape)}")
        else:
            _copy_into(module, name, param, value, assign, key, error_msgs)
    if strict:
        for key in sd:
            if key.startswith(prefix):
                first = key[len(prefix) :].split(".", 1)[0]
                if first not in module._modules and first not in local_state:
                    unexpected_keys.append(key)


def _copy_into(module: Module, name: str, param: Tensor, value: Tensor, assign: bool, key: str,
               error_msgs: list[str]) -> None:  # fmt: skip
    try:
        with no_grad():
            if not assign:
                param.copy_(value)
            elif isinstance(param, Parameter):
                module._parameters[name] = Parameter(value.to(param._device), requires_grad=param._requires_grad)
            else:
                module._buffers[name] = value.to(param._device)
    except Exception as ex:
        error_msgs.append(
            f'While copying the parameter named "{key}", whose dimensions in the model are {tuple(param.shape)} and '
            f"whose dimensions in the checkpoint are {tuple(value.shape)}, an exception occurred: {ex}."
        )
