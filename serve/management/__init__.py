"""serve.management: the model registry (register, versions, default version, scaling, unregister), the worker
processes of each model version with their batch loops and restarts, and config snapshots.

Files: registry.py (ModelRegistry: what the frontends call), model_table.py (the registered versions, their
lookups, list pages, snapshot and health), registration.py (Registrar: a url made into a version),
model_version.py (one version: settings, queue, pool, describe), workers.py (WorkerPool: scaling, starting and
restarting its slots), worker_slot.py (WorkerSlot, PoolSettings), batch_loop.py (what a READY worker does),
worker_describe.py (describe's worker objects), worker_process.py (WorkerProcess: the server's side of one
worker), dispatch.py (running one batch and answering its jobs), urls.py (where a registration's url points),
startup.py (the models registered at start), snapshot.py (config snapshots on disk).
"""

from serve.management.model_version import ModelVersion, VersionConfig
from serve.management.registry import ModelRegistry
from serve.management.worker_process import WorkerProcess, WorkerSpec
from serve.management.workers import WorkerPool

__all__ = ["ModelRegistry", "ModelVersion", "VersionConfig", "WorkerPool", "WorkerProcess", "WorkerSpec"]
