"""TorchServe's workflows: a DAG of models and python functions served as one endpoint.

    manager = WorkflowManager(registry, settings)     # the management routes and /wfpredict call it

Files: spec.py (the workflow spec YAML: models and their settings, the DAG as written), dag.py (the checked DAG:
one start node, no cycle, every node a model or a handler function), runner.py (one request through the DAG, each
node through its own model's queue and batching), manager.py (register/unregister/list/describe/predict). The
`.war` format and its packager are serve/archive/war.py; the routes are serve/frontends/http/routers/workflows.py.
"""

from serve.workflows.manager import WorkflowManager
from serve.workflows.spec import NodeSettings, WorkflowSpec, parse_spec

__all__ = ["NodeSettings", "WorkflowManager", "WorkflowSpec", "parse_spec"]
