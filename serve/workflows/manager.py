"""`WorkflowManager`: the registered workflows, TorchServe's workflow management API and `/wfpredict` behind it.

    manager = WorkflowManager(registry, settings)
    await manager.register("dog_breed_wf.war")            # "Workflow dog_breed_wf has been registered and scaled ..."
    await manager.predict("dog_breed_wf", request)        # the leaf's answer (or {leaf: answer} for several leaves)
    await manager.unregister("dog_breed_wf")

Registering a workflow registers one model per DAG node with the model registry, named `{workflow}__{node}` as
TorchServe names them: a model node from its `url` (resolved like any registration: a file of the model store or an
allowed URL) with the spec's workers and batching; a function node as a model whose handler is `handler.py:function`
of the .war (a directory built beside the extracted .war, with the .war's other files), one worker, batch 1.

Decisions:
- Function nodes run in worker processes, as TorchServe runs them, never in the server: the server runs no user
  code, a function that crashes or hangs takes down its own worker (restarted like any model's) and fails only
  the requests it held, and the handler file is imported by the worker's loader (no pickled code anywhere).
- The .war comes from `workflow_store` (TorchServe's default: the model store) or an allowed URL, under the same
  rules as a .mar. All nodes are registered concurrently and synchronously; if one fails, those registered are
  unregistered again and the registration fails with the first failure's status and every node's message (a
  missing .mar is a 404; TorchServe answers 500 for any node that fails). A bad spec or DAG is a 400, as in
  TorchServe. A name already registered is 409 (TorchServe: 409 ConflictStatusException, 500 in its postman
  data).
- The nodes' models stay out of config snapshots (a restart does not bring back half a workflow; TorchServe keeps
  no workflows across restarts either) and out of GET /models' function nodes, as TorchServe's list skips models
  without a url. They can be described and scaled through /models like any model.
- The answer of a single leaf is its bytes as `application/json`, as TorchServe sends it; several leaves answer
  one JSON object {leaf: its answer} (parsed JSON when it is JSON, else the text).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from serve.archive import check_model_name, package, shown
from serve.archive.extract import remove_tree
from serve.archive.war import WorkflowArchive, open_workflow_archive
from serve.batching import InferenceRequest, InferenceResponse
from serve.config import Settings
from serve.errors import ArchiveError, InvalidInput, ModelNotFound, ServeError, WorkflowNotFound
from serve.management.urls import resolve_url
from serve.workflows.dag import Dag, handler_functions
from serve.workflows.runner import run_dag, with_message
from serve.workflows.spec import NodeSettings, WorkflowSpec, parse_spec

log = logging.getLogger(__name__)
MAX_LIST_LIMIT = 100
ModelSubmit = Callable[[str, str | None, InferenceRequest], Awaitable[InferenceResponse]]


class Registry(Protocol):
    """What the manager needs of serve.management.registry.ModelRegistry."""

    async def register(self, url: str, *, model_name: str | None = None, batch_size: int | None = None,
                       max_batch_delay: int | None = None, initial_workers: int | None = None,
                       synchronous: bool = True, response_timeout: int | None = None,
                       startup_timeout: int | None = None, local_path: Path | None = None,
                       snapshot: bool = True) -> str: ...  # fmt: skip
    async def unregister(self, name: str, version: str | None = None) -> str: ...
    async def scale(self, name: str, version: str | None, min_worker: int | None, max_worker: int | None,
                    synchronous: bool = False, timeout: float | None = None) -> str: ...  # fmt: skip
    async def submit(self, name: str, version: str | None, request: InferenceRequest) -> InferenceResponse: ...


@dataclass
class Workflow:
    name: str
    url: str
    spec: WorkflowSpec
    dag: Dag
    workdir: Path
    downloaded: Path | None

    def model_name(self, node: str) -> str:
        return f"{self.name}__{node}"

    def node_settings(self) -> dict[str, NodeSettings]:
        return {node: self.spec.models[node].settings if node in self.spec.models else self.spec.function_settings()
                for node in self.dag.order}  # fmt: skip


class WorkflowManager:
    """`submit(model, version, request)` runs a node's request: the dataplane's predict in the server (so each node's
    requests are counted in the metrics as the model's), the registry's submit by default."""

    def __init__(self, registry: Registry, settings: Settings, submit: ModelSubmit | None = None) -> None:
        self.registry, self.settings = registry, settings
        self._submit: ModelSubmit = submit or registry.submit
        self._workflows: dict[str, Workflow] = {}
        self._claimed: set[str] = set()  # names being registered: a second registration of one is a 409 at once
        self._root: Path | None = None

    # ---- management ------------------------------------------------------------------------------------------

    async def register(self, url: str | None, workflow_name: str | None = None, response_timeout: int | None = None,
                       startup_timeout: int | None = None) -> str:  # fmt: skip
        if not url:
            raise InvalidInput("Parameter url is required.")
        store = self.settings.workflow_store or self.settings.model_store
        try:
            path, downloaded = await resolve_url(url, dataclasses.replace(self.settings, model_store=store))
        except ModelNotFound as e:  # the model store's rules, said of the workflow store
            raise WorkflowNotFound(_of_workflows(str(e))) from None
        workdir = self._workdir()
        try:
            war = await asyncio.to_thread(open_workflow_archive, path, workdir / "war")
            name = workflow_name or war.workflow_name
            workflow = Workflow(name, url, *_read(war), workdir, path if downloaded else None)
            await self._claim(name)
        except BaseException:
            _discard(workdir, path if downloaded else None)
            raise
        try:
            await self._register_nodes(workflow, war, response_timeout, startup_timeout)
        except BaseException:
            self._claimed.discard(name)
            _discard(workdir, workflow.downloaded)
            raise
        self._workflows[name] = workflow
        self._claimed.discard(name)
        return f"Workflow {name} has been registered and scaled successfully."

    async def unregister(self, name: str) -> str:
        workflow = self._get(name)
        del self._workflows[name]
        failures = await self._unregister_nodes(workflow, workflow.dag.order)
        _discard(workflow.workdir, workflow.downloaded)
        if failures:
            raise ServeError(f"Error while unregistering the workflow {name}. Details: {failures}")
        return f'Workflow "{name}" unregistered'

    def list_workflows(self, limit: int = MAX_LIST_LIMIT, next_page_token: int = 0) -> dict[str, Any]:
        """A page of workflows by name; nextPageToken only when another page exists (as the model list)."""
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidInput(f"Invalid limit: {limit}; it must be an integer from 1 to {MAX_LIST_LIMIT}")
        if next_page_token < 0:
            raise InvalidInput(f"Invalid next_page_token: {next_page_token}; it must be an integer >= 0")
        names = sorted(self._workflows)
        out: dict[str, Any] = {}
        if next_page_token + limit < len(names):
            out["nextPageToken"] = str(next_page_token + limit)
        out["workflows"] = [{"workflowName": n, "workflowUrl": self._workflows[n].url}
                            for n in names[next_page_token : next_page_token + limit]]  # fmt: skip
        return out

    def describe(self, name: str) -> list[dict[str, Any]]:
        workflow = self._get(name)
        return [{"workflowName": name, "workflowUrl": workflow.url, **workflow.spec.defaults.describe(),
                 "workflowDag": workflow.spec.dag_text()}]  # fmt: skip

    async def shutdown(self) -> None:
        """Forget every workflow and remove their files (the registry stops the nodes' workers itself)."""
        for workflow in self._workflows.values():
            _discard(workflow.workdir, workflow.downloaded)
        self._workflows.clear()
        if self._root is not None:
            remove_tree(self._root)

    # ---- inference -------------------------------------------------------------------------------------------

    async def predict(self, name: str, request: InferenceRequest) -> InferenceResponse:
        workflow = self._get(name)

        async def submit(node: str, node_request: InferenceRequest) -> InferenceResponse:
            return await self._submit(workflow.model_name(node), None, node_request)

        answers = await run_dag(workflow.dag, workflow.node_settings(), submit, request)
        if len(answers) == 1:
            return InferenceResponse(body=next(iter(answers.values())), content_type="application/json")
        merged = {leaf: _json_or_text(body) for leaf, body in answers.items()}
        return InferenceResponse(body=(json.dumps(merged, indent=2) + "\n").encode(), content_type="application/json")

    # ---- internals -------------------------------------------------------------------------------------------

    def _get(self, name: str) -> Workflow:
        workflow = self._workflows.get(name)
        if workflow is None:
            raise WorkflowNotFound(f"Workflow not found: {shown(name)}")
        return workflow

    async def _claim(self, name: str) -> None:
        check_model_name(name)
        if name in self._workflows or name in self._claimed:
            error = InvalidInput(f"Workflow {name} is already registered.")
            error.code = 409  # type: ignore[attr-defined]  # TorchServe's ConflictStatusException
            raise error
        self._claimed.add(name)

    def _workdir(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="serve-workflows-"))
        return self._root / uuid.uuid4().hex

    async def _register_nodes(self, workflow: Workflow, war: WorkflowArchive, response_timeout: int | None,
                              startup_timeout: int | None) -> None:  # fmt: skip
        settings = workflow.node_settings()
        nodes = workflow.dag.order
        results = await asyncio.gather(
            *(self._register_node(workflow, war, node, settings[node], response_timeout, startup_timeout)
              for node in nodes), return_exceptions=True)  # fmt: skip
        failed = [(node, r) for node, r in zip(nodes, results, strict=True) if isinstance(r, BaseException)]
        if not failed:
            return
        registered = [node for node, r in zip(nodes, results, strict=True) if not isinstance(r, BaseException)]
        await self._unregister_nodes(workflow, registered)
        first = next((e for _, e in failed if isinstance(e, ServeError)), None)
        if first is None:
            raise failed[0][1]
        details = [f"Workflow Node {workflow.model_name(node)} failed to register. Details: {e}" for node, e in failed]
        error = with_message(first, f"Workflow {workflow.name} has failed to register. Failures: {details}")
        raise error from None

    async def _register_node(self, workflow: Workflow, war: WorkflowArchive, node: str, settings: NodeSettings,
                             response_timeout: int | None, startup_timeout: int | None) -> None:  # fmt: skip
        name = workflow.model_name(node)
        local = None
        if node in workflow.dag.functions:
            local = await asyncio.to_thread(_function_model, war, node, name, workflow.workdir / "nodes")
            url = f"{war.source.name}:{node}"
        else:
            url = workflow.spec.models[node].url
        await self.registry.register(url, model_name=name, batch_size=settings.batch_size,
                                     max_batch_delay=settings.max_batch_delay, initial_workers=settings.min_workers,
                                     response_timeout=response_timeout, startup_timeout=startup_timeout,
                                     local_path=local, snapshot=False)  # fmt: skip
        if settings.max_workers > settings.min_workers:
            await self.registry.scale(name, None, settings.min_workers, settings.max_workers, synchronous=True)

    async def _unregister_nodes(self, workflow: Workflow, nodes: list[str]) -> list[str]:
        results = await asyncio.gather(*(self.registry.unregister(workflow.model_name(n)) for n in nodes),
                                       return_exceptions=True)  # fmt: skip
        return [f"{workflow.model_name(n)}: {r}" for n, r in zip(nodes, results, strict=True)
                if isinstance(r, Exception) and not isinstance(r, ModelNotFound)]  # fmt: skip


def _read(war: WorkflowArchive) -> tuple[WorkflowSpec, Dag]:
    """The spec and DAG of an opened .war (InvalidInput naming what is wrong)."""
    spec = parse_spec(war.spec_file.read_text(encoding="utf-8", errors="replace"), war.spec_file.name)
    handler = war.handler_file
    functions = handler_functions(handler.read_text(encoding="utf-8"), handler.name) if handler else set()
    return spec, Dag.build(spec, functions, handler.name if handler else "the workflow (it has no handler file)")


def _function_model(war: WorkflowArchive, node: str, name: str, nodes_dir: Path) -> Path:
    """A model directory (no-archive format) whose handler is `<war handler>:<node>`, with the .war's other files."""
    handler = war.handler_file
    if handler is None:  # Dag.build found the function in the handler file
        raise ArchiveError(f"workflow {war.workflow_name} has no handler file for function node {node}")
    others = [p for p in war.directory.iterdir() if p.is_file() and p not in (handler, war.spec_file)]
    nodes_dir.mkdir(parents=True, exist_ok=True)
    return package(name, "1.0", f"{handler}:{node}", extra_files=others, export_path=nodes_dir,
                   archive_format="no-archive", progress=False)  # fmt: skip


def _of_workflows(message: str) -> str:
    """A model-store message of resolve_url said of the workflow store."""
    for model, workflow in (("Model not found", "Workflow archive not found"), ("model store", "workflow store"),
                            ("model_store", "workflow_store"), ("--model-store", "--workflow-store")):  # fmt: skip
        message = message.replace(model, workflow)
    return message


def _json_or_text(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")


def _discard(workdir: Path, downloaded: Path | None) -> None:
    if workdir.exists():
        remove_tree(workdir)
    if downloaded is not None:
        downloaded.unlink(missing_ok=True)
