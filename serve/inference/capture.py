"""Capture: which leaf module fed which, seen by running the forward once on example inputs.

The plan rewrites at module granularity (a Conv2d with the BatchNorm2d and the activation after it become one
fused layer), so what the passes need is the dataflow between leaf modules, not a full graph of every primitive:
serve's no_grad fast paths call the backend directly, and code between modules (a residual `out += identity`,
a reshape) stays the module's own Python, run as written. A forward hook on every leaf records, in execution
order, each call's module, its first input tensor and its output tensor, with the storage version of each (so an
in-place write between two modules, such as ResNet's `out += identity` before the last ReLU, breaks the edge).
Adds of one tensor to another, in place (`out += identity`) and out of place (`x + out`, `Tensor.__add__`, which
`t + u` calls for any two tensors), are recorded too, for the residual passes. An `nn.MultiheadAttention` is
hooked as if it were a leaf (its projections are computed from weights, not called), its output being the attention
output, the first of the pair it returns.

An edge "B consumed A's output" is kept only when it held at every call of both modules: a module called from
two places (ResNet's one `self.relu`) fuses at no call site unless every one of them qualifies. What capture
cannot see (another use of A's output by code between modules) is caught by the plan's check against eager.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from serve import nn
from serve.nn.module import Module
from serve.tensor import versions
from serve.tensor.tensor import Tensor

__all__ = ["Call", "Trace", "trace"]


@dataclass(eq=False)  # compared by identity: its fields hold tensors
class Call:
    """One call of a leaf module."""

    module: Module
    name: str  # its qualified name in the model ("layer1.0.conv1")
    input: Tensor | None  # the first positional argument, when a tensor
    input_version: int
    output: Tensor | None
    output_version: int
    extra_inputs: int  # positional tensors beyond the first, and keyword tensors
    index: int = -1  # its place in the trace


@dataclass
class Trace:
    calls: list[Call] = field(default_factory=list)
    # every `t += other` of a tensor other: (t, its storage version before the add); held, so ids stay unique
    iadds: list[tuple[Tensor, int]] = field(default_factory=list)
    # every out-of-place `a + b` of two tensors of one shape: (a, b, the sum, and the version of each); held too
    adds: list[tuple[Tensor, int, Tensor, int, Tensor, int]] = field(default_factory=list)

    def added_to(self, t: Tensor | None, version: int) -> bool:
        """Whether `t += tensor` ran on t while its storage was at `version` (the first write after it)."""
        return t is not None and any(target is t and v == version for target, v in self.iadds)

    def adds_of(self, t: Tensor | None, version: int) -> list[tuple[Tensor, Tensor]]:
        """(the other operand, the sum) of each out-of-place `t + other` / `other + t` while t was at `version`."""
        found = []
        for a, va, b, vb, out, _ in self.adds:
            if a is t and va == version:
                found.append((b, out))
            elif b is t and vb == version:
                found.append((a, out))
        return found

    def calls_of(self, module: Module) -> list[Call]:
        return [c for c in self.calls if c.module is module]

    def producer_of(self, call: Call) -> Call | None:
        """The call whose output `call` consumed unchanged (same tensor object, same storage version), if any."""
        if call.input is None:
            return None
        for earlier in reversed(self.calls[: call.index]):
            if earlier.output is call.input:
                return earlier if earlier.output_version == call.input_version else None
        return None

    def consumers_of_tensor(self, t: Tensor | None, version: int) -> list[Call]:
        """Leaf calls that took t, at `version`, as their first input."""
        return [c for c in self.calls if t is not None and c.input is t and c.input_version == version]

    def consumers_of(self, call: Call) -> list[Call]:
        """Leaf calls that took `call`'s output as their first input before anything wrote to it in place (a
        consumer after an in-place write, such as the next layer after an in-place ReLU, took the new value)."""
        if call.output is None:
            return []
        later = self.calls[call.index + 1 :]
        return [c for c in later if c.input is call.output and c.input_version == call.output_version]


def _leaves(model: Module) -> list[tuple[str, Module]]:
    """The leaf modules, and the multi-head attentions as if they were leaves (their output projection is computed
    from its weights, never called: serve.inference.attention plans the attention whole); nothing inside one."""
    attentions = [name for name, m in model.named_modules() if type(m) is nn.MultiheadAttention]
    inside = tuple(f"{name}." for name in attentions if name)
    leaves = [
        (name, m)
        for name, m in model.named_modules()
        if (name in attentions or not any(True for _ in m.children())) and not name.startswith(inside)
    ]
    return leaves if "" not in attentions else [("", model)]


def trace(model: Module, args: tuple, kwargs: dict[str, Any]) -> tuple[Trace, Any]:
    """Run `model(*args, **kwargs)` once with a hook on every leaf; the trace and the model's output."""
    result = Trace()
    pending: list[Call] = []  # leaf calls do not nest: the pre-hook opens a call, the hook closes it
    handles = []

    def before(mod: Module, inputs: tuple, name: str) -> None:
        first = inputs[0] if inputs and isinstance(inputs[0], Tensor) else None
        extra = sum(isinstance(a, Tensor) for a in inputs[1:])
        version = versions.version(first._data) if first is not None else 0
        pending.append(Call(mod, name, first, version, None, 0, extra))

    def after(mod: Module, inputs: tuple, output: Any) -> None:
        call = pending.pop()
        call.index = len(result.calls)
        if isinstance(output, tuple) and output and type(mod) is nn.MultiheadAttention:
            output = output[0]  # (attention output, weights or None)
        if isinstance(output, Tensor):
            call.output, call.output_version = output, versions.version(output._data)
        result.calls.append(call)

    for name, module in _leaves(model):
        handles.append(module.register_forward_pre_hook(lambda mod, inputs, name=name: before(mod, inputs, name)))
        handles.append(module.register_forward_hook(after))
    iadd = Tensor.__iadd__

    def recording_iadd(self: Tensor, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            result.iadds.append((self, versions.version(self._data)))
        return iadd(self, other)

    add = Tensor.__add__

    def recording_add(self: Tensor, other: Any) -> Tensor:
        out = add(self, other)
        if isinstance(other, Tensor) and other is not self and other.shape == self.shape:
            result.adds.append((self, versions.version(self._data), other, versions.version(other._data), out,
                                versions.version(out._data)))  # fmt: skip
        return out

    Tensor.__iadd__ = recording_iadd  # type: ignore[method-assign]
    Tensor.__add__ = recording_add  # type: ignore[method-assign]
    try:
        output = model(*args, **kwargs)
    finally:
        Tensor.__iadd__ = iadd  # type: ignore[method-assign]
        Tensor.__add__ = add  # type: ignore[method-assign]
        for h in handles:
            h.remove()
    return result, output
