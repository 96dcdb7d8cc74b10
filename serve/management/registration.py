"""`Registrar`: a registration's url made into a `ModelVersion` in the table, with no workers yet.

    registrar = Registrar(settings, metrics, table)
    mv = await registrar.add(url, model_name, handler, params)   # ArchiveError, InvalidInput (400, 409), ...
    registrar.release(mv)                                         # on unregister: its extracted bytes

Order, each step undone when a later one fails (the archive closed, a downloaded file and installed requirements
removed, the extraction budget given back): resolve the url (urls.py; a model directory the server made is used
in place), open the archive within `max_extracted_bytes_total` (admission.py), check the model name and a
`handler` given at registration (a built-in or a file of the archive: a 400, not a load failure in every worker),
install the archive's requirements (requirements.py), then, under one lock so two registrations cannot both take
the same version or the same workers: 409 when that version is registered, resolve its settings
(model_version.py), check the worker caps (limits.py) before anything is forked, and add it to the table.
Worker ids count from 9000, as TorchServe's (they are ports there), across every version.
Statuses TorchServe uses and serve.errors has no class for (409 conflict, 403, 408) ride on the exception's `code`
attribute (`with_code`), which the frontends' error table honours.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

from serve.archive import check_model_name
from serve.config import Settings
from serve.errors import InvalidInput, ServeError
from serve.management.admission import ExtractionBudget, check_handler
from serve.management.limits import check_worker_counts
from serve.management.model_table import ModelTable
from serve.management.model_version import ModelVersion, resolve_config
from serve.management.requirements import install_requirements, remove_deps
from serve.management.urls import resolve_url
from serve.metrics import ServerMetrics

FIRST_WORKER_ID = 9000  # TorchServe's worker ids are ports from 9000


class Registrar:
    """Adds model versions to `table`: the archive opened and checked, its requirements installed, its settings
    resolved within the worker caps."""

    def __init__(self, settings: Settings, metrics: ServerMetrics, table: ModelTable) -> None:
        self.settings, self.metrics, self._table = settings, metrics, table
        self._budget = ExtractionBudget(settings.max_extracted_bytes_total)
        self._lock = asyncio.Lock()
        self._ids = itertools.count(FIRST_WORKER_ID)

    async def add(self, url: str, model_name: str | None, handler: str | None, params: dict[str, Any], *,
                  loaded_at_startup: bool = False, local_path: Path | None = None,
                  snapshot: bool = True) -> ModelVersion:  # fmt: skip
        """Open the archive and register its version (no workers yet); 409 when that version exists. A
        `local_path` is used as it is and the model is not listed; `snapshot=False` keeps it out of snapshots."""
        path, downloaded = (local_path, False) if local_path is not None else await resolve_url(url, self.settings)
        try:
            archive = await self._budget.open(path)
        except BaseException:
            if downloaded:
                path.unlink(missing_ok=True)
            raise
        deps: Path | None = None
        try:
            name = model_name or archive.model_name
            check_model_name(name)
            if handler is not None:
                check_handler(archive, handler)
            deps = await asyncio.to_thread(install_requirements, archive, name, self.settings)
            async with self._lock:
                if self._table.has(name, archive.model_version):
                    raise with_code(InvalidInput(f"Model version {archive.model_version} is already registered for "
                                                 f"model {name}"), 409)  # fmt: skip
                config = resolve_config(self.settings, name, archive.model_version, archive.model_config, params)
                low, high = worker_names(params)
                where = f"model {name} version {archive.model_version}"
                check_worker_counts(self.settings, where, (low, config.min_workers), (high, config.max_workers),
                                    current=0, others=self._table.workers_except(None))  # fmt: skip
                mv = ModelVersion(name, archive, url, config, self.settings, self.metrics, self._next_id,
                                  handler=handler, loaded_at_startup=loaded_at_startup,
                                  downloaded=path if downloaded else None,
                                  workers_running=lambda: self._table.workers_except(None), deps_dir=deps)  # fmt: skip
                self._table.add(mv, snapshot=snapshot, listed=local_path is None)
        except BaseException:
            self._budget.release(archive)
            await asyncio.to_thread(remove_deps, deps)
            await asyncio.to_thread(_discard, archive, path if downloaded else None)
            raise
        return mv

    def release(self, mv: ModelVersion) -> None:
        """Give back the bytes `mv`'s archive was extracted to (admission.py)."""
        self._budget.release(mv.archive)

    def _next_id(self) -> str:
        return str(next(self._ids))


def check_runtime(runtime: str | None) -> None:
    if runtime is None or runtime in ("python", "python3"):
        return
    if runtime == "LSP":
        raise InvalidInput("runtime LSP (TorchServe's C++ backend) is not supported by serve; use python")
    raise InvalidInput(f"Invalid RuntimeType value: {runtime}")


def worker_names(params: dict[str, Any]) -> tuple[str, str]:
    """What the caller called the min and max worker counts of a registration, for the caps' messages."""
    if params.get("initial_workers") is not None:
        return "initial_workers", "initial_workers"
    return "minWorkers", "maxWorkers"


def with_code(error: ServeError, code: int) -> ServeError:
    """`error` answered with HTTP status `code` (the frontends' error table reads the attribute)."""
    error.code = code  # type: ignore[attr-defined]
    return error


def _discard(archive: Any, downloaded: Path | None) -> None:
    archive.close()
    if downloaded is not None:
        downloaded.unlink(missing_ok=True)
