"""`torch.utils._pytree`: flattening nested lists, tuples and dicts into leaves and back, with registration of
other containers (transformers registers its ModelOutput classes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

_NODES: dict[type, tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]] = {}


class TreeSpec(NamedTuple):
    kind: type | None  # None: a leaf
    context: Any
    children: list[TreeSpec]


LEAF = TreeSpec(None, None, [])


def register_pytree_node(cls: type, flatten_fn: Callable[[Any], Any], unflatten_fn: Callable[[Any, Any], Any],
                         **kwargs: Any) -> None:  # fmt: skip
    """`flatten_fn(obj) -> (children, context)`, `unflatten_fn(children, context) -> obj`."""
    _NODES[cls] = (flatten_fn, unflatten_fn)


_register_pytree_node = register_pytree_node


def _children(tree: Any) -> tuple[type, list[Any], Any] | None:
    kind = type(tree)
    if kind in _NODES:
        children, context = _NODES[kind][0](tree)
        return kind, list(children), context
    if isinstance(tree, (list, tuple)) and not hasattr(tree, "_fields"):
        return kind, list(tree), None
    if isinstance(tree, dict):
        return kind, list(tree.values()), list(tree)
    return None


def tree_flatten(tree: Any) -> tuple[list[Any], TreeSpec]:
    node = _children(tree)
    if node is None:
        return [tree], LEAF
    kind, children, context = node
    leaves: list[Any] = []
    specs = []
    for child in children:
        child_leaves, spec = tree_flatten(child)
        leaves += child_leaves
        specs.append(spec)
    return leaves, TreeSpec(kind, context, specs)


def tree_unflatten(leaves: list[Any], spec: TreeSpec) -> Any:
    it = iter(leaves)
    return _build(it, spec)


def _build(it: Any, spec: TreeSpec) -> Any:
    if spec.kind is None:
        return next(it)
    children = [_build(it, s) for s in spec.children]
    if spec.kind in _NODES:
        return _NODES[spec.kind][1](children, spec.context)
    kind: Any = spec.kind
    if issubclass(kind, dict):
        return kind(zip(spec.context, children, strict=True))
    return kind(children)


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([fn(x) for x in leaves], spec)


def tree_leaves(tree: Any) -> list[Any]:
    return tree_flatten(tree)[0]


Context = Any
SUPPORTED_NODES = _NODES


class SequenceKey(NamedTuple):
    idx: int


class MappingKey(NamedTuple):
    key: Any


def _dict_flatten(d: dict[Any, Any]) -> tuple[list[Any], list[Any]]:
    return list(d.values()), list(d)


def _dict_unflatten(values: list[Any], context: list[Any]) -> dict[Any, Any]:
    return dict(zip(context, values, strict=True))


def _dict_flatten_with_keys(d: dict[Any, Any]) -> tuple[list[tuple[MappingKey, Any]], list[Any]]:
    return [(MappingKey(k), v) for k, v in d.items()], list(d)


def tree_map_only(kind: Any, fn: Callable[[Any], Any], tree: Any) -> Any:
    return tree_map(lambda x: fn(x) if isinstance(x, kind) else x, tree)
