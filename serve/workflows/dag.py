"""The workflow DAG: nodes, their successors and predecessors, checked once at registration.

    dag = Dag.build(spec, handler_functions(handler_source))
    dag.start, dag.order, dag.predecessors["aggregate_func"]

Rules (TorchServe's Dag.java and WorkFlow.java): every node named in `dag:` (as a key or a successor) is a node;
a node is a model when `models:` has it, else a function of the workflow's handler file. Exactly one node has no
predecessor (TorchServe: "DAG should have only one start node"), no node is its own successor, and every node is
reachable in a topological order (no cycle). Leaves (no successors) are the workflow's outputs.

Decision: the handler file's functions are found by reading it with `ast` (top-level `def`s), never by importing it:
the server process runs no user code; the functions run in their node's worker process (runner.py). A node that
is neither a model nor such a function is refused at registration, naming the node (TorchServe fails the
function node's worker at load).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from serve.errors import InvalidInput
from serve.workflows.spec import WorkflowSpec


def handler_functions(source: str, file_name: str = "handler") -> set[str]:
    """The names of the top-level functions of a handler file's `source` (InvalidInput if it does not parse)."""
    try:
        tree = ast.parse(source, filename=file_name)
    except SyntaxError as e:
        raise InvalidInput(f"Invalid workflow handler {file_name}: line {e.lineno}: {e.msg}") from None
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


@dataclass
class Dag:
    successors: dict[str, list[str]] = field(default_factory=dict)
    predecessors: dict[str, list[str]] = field(default_factory=dict)
    functions: set[str] = field(default_factory=set)  # the nodes that are handler functions; the rest are models
    order: list[str] = field(default_factory=list)  # a topological order, the start node first

    @property
    def start(self) -> str:
        return self.order[0]

    @property
    def leaves(self) -> list[str]:
        return [node for node in self.order if not self.successors[node]]

    @classmethod
    def build(cls, spec: WorkflowSpec, functions: set[str], handler_name: str = "the handler file") -> Dag:
        dag = cls()
        for node, after in spec.dag.items():
            dag._add(node)
            for successor in after:
                if successor == node:
                    raise InvalidInput(f"Invalid workflow DAG: node {node} lists itself as its successor")
                dag._add(successor)
                if successor not in dag.successors[node]:
                    dag.successors[node].append(successor)
                    dag.predecessors[successor].append(node)
        for node in dag.successors:
            if node in spec.models:
                continue
            if node not in functions:
                raise InvalidInput(f"Invalid workflow DAG: node {node} is neither a model of 'models:' nor a function "
                                   f"of {handler_name}")  # fmt: skip
            dag.functions.add(node)
        dag.order = dag._topological_order()
        return dag

    def _add(self, node: str) -> None:
        self.successors.setdefault(node, [])
        self.predecessors.setdefault(node, [])

    def _topological_order(self) -> list[str]:
        starts = [node for node, before in self.predecessors.items() if not before]
        if len(starts) != 1:
            raise InvalidInput(f"Invalid workflow DAG: it must have exactly one start node (a node no other node "
                               f"lists), found {len(starts)}: {starts}. Add a function node that feeds them "
                               "all")  # fmt: skip
        waiting = {node: len(before) for node, before in self.predecessors.items()}
        order, ready = [], list(starts)
        while ready:
            node = ready.pop(0)
            order.append(node)
            for successor in self.successors[node]:
                waiting[successor] -= 1
                if waiting[successor] == 0:
                    ready.append(successor)
        if len(order) != len(self.successors):
            cycle = sorted(node for node, count in waiting.items() if count > 0)
            raise InvalidInput(f"Invalid workflow DAG: it has a cycle through {cycle}")
        return order
