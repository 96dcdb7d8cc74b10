"""Reverse-mode autograd: graph nodes, custom `Function`s, and the engine behind backward()/grad().

A recorded operation is a `Node` (PyTorch's `grad_fn`; for a custom Function it is also the `ctx`).
It keeps its edges to the nodes (or leaf tensors) that produced its inputs, captured when it ran, so an
in-place operation that later rebases a tensor cannot create a cycle. The engine walks the nodes in
topological order, adds up the gradients reaching each output with `+`, and calls `backward` once per
node. Backward formulas are written with Tensor operations, so `create_graph=True` records them and a
second derivative works.

Tensors saved for backward are checked against their storage's version counter (`versions.py`), so an
in-place change of a saved tensor raises PyTorch's error instead of giving a wrong gradient.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from serve.tensor import grad_mode, versions
from serve.tensor.grad_mode import set_grad_enabled, state

if TYPE_CHECKING:
    from serve.tensor.tensor import Tensor

_FREED = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they have "
    "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
    "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
    "if you need to access saved tensors after calling backward."
)


class Node:
    """One recorded operation (`tensor.grad_fn`); for custom Functions, the `ctx` passed to forward/backward."""

    def __init__(self, fn: type) -> None:
        self._fn = fn
        self._next: tuple[Any, ...] = ()
        self._inputs: tuple[Any, ...] = ()
        self._out_meta: tuple[Any, ...] = ()
        self._saved: tuple[Any, ...] = ()
        self._saved_versions: tuple[int, ...] = ()
        self._input_versions: tuple[int, ...] = ()
        self.input_shapes: tuple[tuple[int, ...], ...] = ()  # kept after release(), unlike the inputs
        self.input_dtypes: tuple[Any, ...] = ()
        self._out_version = 0
        self._out_data: Any = None
        self._released = False
        self._retained: dict[int, Any] | None = None
        self._non_differentiable: set[int] = set()
        self.needs_input_grad: tuple[bool, ...] = ()
        self.materialize_grads = True

    # -- the ctx API of torch.autograd.Function -----------------------------------------------------
    def save_for_backward(self, *tensors: Any) -> None:
        self._saved = tensors
        self._saved_versions = tuple(versions.version(t._data) if t is not None else 0 for t in tensors)

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        if self._released:
            raise RuntimeError(_FREED)
        versions.check(self._saved, self._saved_versions, self.name())
        return self._saved

    def mark_non_differentiable(self, *tensors: Any) -> None:
        self._non_differentiable.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors: Any) -> None:
        """Accepted for compatibility: outputs are always fresh tensors here."""

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value

    # -- what primitives' backward formulas read ----------------------------------------------------
    @property
    def inputs(self) -> tuple[Any, ...]:
        if self._released:
            raise RuntimeError(_FREED)
        versions.check(self._inputs, self._input_versions, self.name())
        return self._inputs

    def input(self, i: int) -> Any:
        """Input `i` alone (the others may have changed in place since without harm)."""
        if self._released:
            raise RuntimeError(_FREED)
        versions.check(self._inputs[i : i + 1], self._input_versions[i : i + 1], self.name())
        return self._inputs[i]

    @property
    def output(self) -> Tensor:
        """The (single) output, attached to this node so a second derivative can flow through it."""
        if self._released:
            raise RuntimeError(_FREED)
        from serve.tensor.tensor import _make

        _, dtype, device, ops = self._out_meta[0]
        t = _make(self._out_data, dtype, device, ops)
        t._grad_fn, t._requires_grad = self, True
        versions.check((t,), (self._out_version,), self.name())
        return t

    def name(self) -> str:
        return getattr(self._fn, "_node_name", None) or self._fn.__name__ + "Backward"

    @property
    def next_functions(self) -> tuple[tuple[Any, int], ...]:
        return tuple((e, 0) if not isinstance(e, tuple) else e for e in self._next)

    def register_retained(self, output_nr: int, tensor: Tensor) -> None:
        if self._retained is None:
            self._retained = {}
        self._retained[output_nr] = weakref.ref(tensor)

    def release(self) -> None:
        self._released = True
        self._saved = ()
        self._inputs = ()
        self._out_data = None

    def __repr__(self) -> str:
        return f"<{self.name()} object at {hex(id(self))}>"


def edge_of(t: Tensor) -> Any:
    """Where a gradient for `t` goes: (node, output_nr), the leaf tensor itself, or None."""
    if t._grad_fn is not None:
        return (t._grad_fn, t._output_nr)
    return t if t._requires_grad else None


def attach(node: Node, outputs: Sequence[Tensor], inputs: Sequence[Any]) -> None:
    """Make `node` the grad_fn of `outputs`, with edges to the producers of the tensor `inputs`."""
    from serve.tensor.tensor import Tensor

    node._next = tuple(edge_of(t) if isinstance(t, Tensor) else None for t in inputs)
    node._out_meta = tuple((t.shape, t._dtype, t._device, t._ops) for t in outputs)
    for i, t in enumerate(outputs):
        if id(t) in node._non_differentiable or not (t._dtype.is_floating_point or t._dtype.is_complex):
            continue  # integer and bool outputs (indices, masks) never require grad, as in PyTorch
        t._grad_fn, t._output_nr, t._requires_grad = node, i, True


# ---- custom functions -------------------------------------------------------------------------------
class Function:
    """PyTorch's `torch.autograd.Function`: subclass with staticmethods forward and backward, call `apply`.

    forward(ctx, *args) runs under no_grad; ctx.save_for_backward keeps tensors for backward, which
    returns one gradient (or None) per argument of forward. A `setup_context(ctx, inputs, output)`
    staticmethod may be defined instead of taking ctx in forward, as in PyTorch 2.
    """

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom autograd.Function to use it "
            "with backward mode AD."
        )

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        from serve.tensor.tensor import Tensor, _make

        ctx = Node(cls)
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
        record = state.enabled and any(ctx.needs_input_grad)
        separate_setup = cls.setup_context is not Function.setup_context
        with set_grad_enabled(False):
            out = cls.forward(*args, **kwargs) if separate_setup else cls.forward(ctx, *args, **kwargs)
            if separate_setup:
                cls.setup_context(ctx, args, out)
        if not record:
            return out
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        wrapped = []
        by_id: dict[int, Tensor] = {}
        for o in outs:
            if isinstance(o, Tensor):
                w = by_id[id(o)] = _make(o._data, o._dtype, o._device, o._ops)
                if id(o) in ctx._non_differentiable:
                    ctx._non_differentiable.add(id(w))
                wrapped.append(w)
            else:
                wrapped.append(o)
        attach(ctx, [w for w in wrapped if isinstance(w, Tensor)], args)
        if by_id and ctx._saved:
            # an output saved for backward is saved as the returned tensor, attached to the graph, so a
            # backward formula using it can itself be differentiated (create_graph)
            ctx._saved = tuple(by_id.get(id(t), t) if isinstance(t, Tensor) else t for t in ctx._saved)
        return wrapped[0] if single else tuple(wrapped)


class _DelayedError(Function):
    """The grad_fn of a once-differentiable backward's outputs under create_graph: differentiating fails."""

    _node_name = "Error"

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")


def once_differentiable(fn: Any) -> Any:
    """PyTorch's `@once_differentiable` for a Function's backward: it runs under no_grad, and with
    create_graph its results are marked so that differentiating them again raises."""
    import functools

    @functools.wraps(fn)
    def wrapper(ctx: Any, *args: Any) -> Any:
        from serve.tensor.tensor import Tensor

        with set_grad_enabled(False):
            outputs = fn(ctx, *args)
        if not state.enabled or not any(isinstance(a, Tensor) and a._requires_grad for a in args):
            return outputs
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        # as PyTorch does: each output becomes the alias of a fresh leaf that requires grad, behind the error node
        fakes = [o.detach().requires_grad_() if isinstance(o, Tensor) and o.is_floating_point() else o for o in outs]
        node = Node(_DelayedError)
        wrapped = [o.detach() if isinstance(o, Tensor) else o for o in fakes]
        attach(node, [w for w in wrapped if isinstance(w, Tensor)], [f for f in fakes if isinstance(f, Tensor)])
        return wrapped[0] if single else tuple(wrapped)

    return wrapper


# ---- the engine -------------------------------------------------------------------------------------
def _topological_order(roots: list[Node]) -> list[Node]:
    """Nodes reachable from `roots`, every node before the nodes that produced its inputs."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in roots:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, iter(root._next))]
        while stack:
            node, edges = stack[-1]
            for e in edges:
                if isinstance(e, tuple) and id(e[0]) not in seen:
                    seen.add(id(e[0]))
                    stack.append((e[0], iter(e[0]._next)))
                    break
            else:
                stack.pop()
                order.append(node)
    order.reverse()
    return order


def _check_grad(node: Node, i: int, g: Tensor, expected: Tensor) -> Tensor:
    if g.shape != expected.shape:
        if _broadcastable(expected.shape, g.shape):
            g = g.sum_to_size(expected.shape)
        else:
            raise RuntimeError(
                f"Function {node.name()} returned an invalid gradient at index {i} - got {list(g.shape)} "
                f"but expected shape compatible with {list(expected.shape)}"
            )
    if g._dtype is not expected._dtype:
        g = g.to(expected._dtype)
    return g


def _broadcastable(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(small[::-1], big[::-1]))


def _zeros_for(meta: tuple[Any, ...]) -> Tensor:
    from serve.tensor.tensor import _make

    shape, dtype, device, ops = meta
    return _make(ops.zeros(shape, dtype.np), dtype, device, ops)


def _accumulate_leaf(leaf: Tensor, g: Tensor, create_graph: bool) -> None:
    if leaf._grad is None:
        leaf._grad = g if create_graph else g.detach().clone()
    elif create_graph or leaf._grad._requires_grad:
        leaf._grad = leaf._grad + g
    else:
        leaf._grad._data += g._data


def run_backward(
    roots: Sequence[Tensor],
    grad_roots: Sequence[Tensor],
    retain_graph: bool,
    create_graph: bool,
    inputs: Sequence[Tensor] | None = None,
    accumulate: bool = True,
) -> list[Tensor | None]:
    """Propagate `grad_roots` from `roots`. With `inputs`, return their gradients; with `accumulate`,
    add gradients into the `.grad` of leaves (only those in `inputs`, when given)."""
    wanted_leaf = {id(t): i for i, t in enumerate(inputs or ()) if t._grad_fn is None}
    wanted_edge = {(id(t._grad_fn), t._output_nr): i for i, t in enumerate(inputs or ()) if t._grad_fn is not None}
    results: list[Tensor | None] = [None] * len(inputs or ())
    grads: dict[int, list[Any]] = {}
    root_nodes: list[Node] = []

    def deliver(edge: Any, g: Tensor) -> None:
        if isinstance(edge, tuple):
            node, nr = edge
            slots = grads.get(id(node))
            if slots is None:
                slots = grads[id(node)] = [None] * len(node._out_meta)
            slots[nr] = g if slots[nr] is None else slots[nr] + g
        else:  # a leaf
            k = wanted_leaf.get(id(edge))
            if k is not None:
                results[k] = g if results[k] is None else results[k] + g
            if accumulate and (inputs is None or k is not None):
                _accumulate_leaf(edge, g, create_graph)

    with set_grad_enabled(create_graph):
        for t, g in zip(roots, grad_roots):
            edge = edge_of(t)
            if edge is None:
                raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
            deliver(edge, g)
            if isinstance(edge, tuple):
                root_nodes.append(edge[0])
        order = _topological_order(root_nodes)
        needed = _needed(order, wanted_leaf, wanted_edge) if inputs is not None else None
        for node in order:
            slots = grads.pop(id(node), None)
            if slots is None:
                continue
            if needed is not None and id(node) not in needed:
                _collect(node, slots, wanted_edge, results)  # a wanted non-leaf with nothing wanted below it
                continue
            _run_node(node, slots, deliver, wanted_edge, results, retain_graph)
    if accumulate and inputs is not None:  # backward(inputs=[non-leaf]) fills the non-leaf's .grad
        for t in inputs:
            k = wanted_edge.get((id(t._grad_fn), t._output_nr)) if t._grad_fn is not None else None
            if k is not None and results[k] is not None:
                _accumulate_leaf(t, results[k], create_graph)  # type: ignore[arg-type]
    return results


def _needed(order: list[Node], wanted_leaf: dict, wanted_edge: dict) -> set[int]:
    """The ids of the nodes of `order` that lead to a wanted input: only those run (and are freed), as in PyTorch."""
    needed: set[int] = set()
    for node in reversed(order):  # producers before consumers
        for e in node._next:
            if isinstance(e, tuple):
                if id(e[0]) in needed or (id(e[0]), e[1]) in wanted_edge:
                    needed.add(id(node))
                    break
            elif e is not None and id(e) in wanted_leaf:
                needed.add(id(node))
                break
    return needed


def _collect(node: Node, slots: list[Any], wanted_edge: dict, results: list) -> None:
    """Record the gradients reaching `node`'s outputs that are among the wanted inputs."""
    for nr, g in enumerate(slots):
        k = wanted_edge.get((id(node), nr))
        if k is not None and g is not None:
            results[k] = g


def _run_node(node: Node, slots: list[Any], deliver: Any, wanted_edge: dict, results: list, retain: bool) -> None:
    # a node already run without retain_graph fails only if its backward reads what it saved, as in PyTorch
    _collect(node, slots, wanted_edge, results)
    for nr, g in enumerate(slots):
        if node._retained and nr in node._retained:
            t = node._retained[nr]()
            if t is not None and g is not None:
                g = g if state.enabled else g.detach()  # under create_graph the retained grad is differentiable
                t._grad = g if t._grad is None else t._grad + g
    if node.materialize_grads:
        slots = [g if g is not None else _zeros_for(node._out_meta[i]) for i, g in enumerate(slots)]
    input_grads = node._fn.backward(node, *slots)  # type: ignore[attr-defined]
    if not isinstance(input_grads, tuple):
        input_grads = (input_grads,)
    n_in = len(node._next)
    if len(input_grads) != n_in and not (len(input_grads) > n_in and all(g is None for g in input_grads[n_in:])):
        raise RuntimeError(
            f"function {node.name()} returned an incorrect number of gradients "
            f"(expected {n_in}, got {len(input_grads)})"
        )
    inputs = node._inputs
    metas = [getattr(t, "_dtype", None) for t in inputs] if inputs else None
    for i, (edge, g) in enumerate(zip(node._next, input_grads)):
        if edge is None or g is None:
            continue
        expected = inputs[i] if metas else _expected_from_edge(edge)
        deliver(edge, _check_grad(node, i, g, expected))
    if not retain:
        node.release()


def _expected_from_edge(edge: Any) -> Any:
    """A stand-in with the shape and dtype a gradient along `edge` must have."""
    if isinstance(edge, tuple):
        node, nr = edge
        shape, dtype, _, _ = node._out_meta[nr]

        class _Meta:
            pass

        m = _Meta()
        m.shape, m._dtype = shape, dtype  # type: ignore[attr-defined]
        return m
    return edge


def backward(
    tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None, create_graph: bool = False,
    inputs: Any = None,
) -> None:  # fmt: skip
    """`torch.autograd.backward`: accumulate gradients of `tensors` into the `.grad` of graph leaves."""
    from serve.tensor.tensor import Tensor

    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    grads = _grad_outputs(tensors, grad_tensors)
    if inputs is not None:
        inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    retain = create_graph if retain_graph is None else retain_graph
    run_backward(tensors, grads, retain, create_graph, inputs=inputs, accumulate=True)


def grad(
    outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
    create_graph: bool = False, allow_unused: bool | None = None, materialize_grads: bool = False,
) -> tuple[Any, ...]:  # fmt: skip
    """`torch.autograd.grad`: the gradients of `outputs` with respect to `inputs`, leaving `.grad` alone."""
    from serve.tensor.tensor import Tensor

    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for t in inputs:
        if not t._requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    grads = _grad_outputs(outputs, grad_outputs)
    retain = create_graph if retain_graph is None else retain_graph
    results = run_backward(outputs, grads, retain, create_graph, inputs=inputs, accumulate=False)
    for i, r in enumerate(results):
        if r is None:
            if materialize_grads:
                from serve.tensor.creation import zeros_like

                results[i] = zeros_like(inputs[i])
            elif not (allow_unused or materialize_grads):
                raise RuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                    "Set allow_unused=True if this is the desired behavior."
                )
    return tuple(results)


def _grad_outputs(outputs: list[Tensor], given: Any) -> list[Tensor]:
    from serve.tensor.creation import ones_like
    from serve.tensor.tensor import Tensor

    if given is None:
        given = [None] * len(outputs)
    elif isinstance(given, Tensor):
        given = [given]
    given = list(given)
    if len(given) != len(outputs):
        raise RuntimeError(f"grad_tensors has {len(given)} entries but there are {len(outputs)} outputs")
    out = []
    for i, (t, g) in enumerate(zip(outputs, given)):
        if not t._requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if t.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = ones_like(t)
        elif g.shape != t.shape:
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape} and output[{i}] has a shape of "
                f"{t.shape}."
            )
        out.append(g)
    return out


__all__ = ["Function", "Node", "backward", "grad", "grad_mode", "once_differentiable"]
