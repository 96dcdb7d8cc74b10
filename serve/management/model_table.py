"""`ModelTable`: the registered model versions by name and each name's default version, and what is read off them.

    table.add(mv, snapshot=True, listed=True)     # the first version of a name becomes its default
    mv = table.version("digits", None)            # the default version; ModelNotFound (404) otherwise
    table.page(limit=10, next_page_token=0)       # GET /models
    healthy, details = table.health()             # /ping's per-version part

No I/O and no awaits: the registry (registry.py) decides when versions come and go, under its lock; this is the
state it keeps and the answers read from it. Decisions:
- A name or version a client sent is echoed back in a 404 only as `serve.archive.shown` bounds and escapes it.
- The list's nextPageToken is given only when another page exists (TorchServe also gives it when the page ended
  exactly at the last model, pointing at an empty page); a token past the last model is an empty page, as a client
  paging while models are removed expects.
- Models the server made itself (a workflow's nodes) may be left out of the list (`listed=False`, not from a url)
  and out of snapshots (`snapshot=False`); a name's flags go with its last version.
- `health()` checks every version, not only default ones: unhealthy when a version that should have workers has
  none left that is ready or (re)starting within its retry window (pain point 4), and, for a startup model
  version, as long as none of its workers is READY (a handler that crash-loops never makes the server healthy).
"""

from __future__ import annotations

from typing import Any

from serve.archive import shown
from serve.errors import ModelNotFound
from serve.management.model_version import ModelVersion


class ModelTable:
    """Model versions by name and version, the default version of each name."""

    def __init__(self) -> None:
        self._models: dict[str, dict[str, ModelVersion]] = {}
        self._defaults: dict[str, str] = {}
        self._unsaved: set[str] = set()  # models left out of snapshots (a workflow's nodes: serve/workflows)
        self._unlisted: set[str] = set()  # models made by the server, not from a url: not in GET /models

    def add(self, mv: ModelVersion, *, snapshot: bool = True, listed: bool = True) -> None:
        self._models.setdefault(mv.name, {})[mv.version] = mv
        self._defaults.setdefault(mv.name, mv.version)
        if not snapshot:
            self._unsaved.add(mv.name)
        if not listed:
            self._unlisted.add(mv.name)

    def pop(self, name: str, version: str) -> ModelVersion:
        """Take the version out; its name goes with its last version."""
        versions = self._models[name]
        mv = versions.pop(version)
        if not versions:
            del self._models[name]
            del self._defaults[name]
            self._unsaved.discard(name)
            self._unlisted.discard(name)
        return mv

    def clear(self) -> None:
        self._models.clear()
        self._defaults.clear()
        self._unsaved.clear()
        self._unlisted.clear()

    def has(self, name: str, version: str) -> bool:
        return version in self._models.get(name, {})

    def all(self) -> list[ModelVersion]:
        return [mv for versions in self._models.values() for mv in versions.values()]

    def versions(self, name: str) -> dict[str, ModelVersion]:
        versions = self._models.get(name)
        if not versions:
            raise ModelNotFound(f"Model not found: {shown(name)}")
        return versions

    def version(self, name: str, version: str | None) -> ModelVersion:
        """`version` of `name`, its default version when None."""
        versions = self.versions(name)
        mv = versions.get(self._defaults[name] if version is None else version)
        if mv is None:
            raise ModelNotFound(f"Model version: {shown(version)} does not exist for model: {name}")
        return mv

    def default(self, name: str) -> str:
        return self._defaults[name]

    def set_default(self, name: str, version: str) -> None:
        self._defaults[name] = version

    def workers_except(self, skip: ModelVersion | None) -> int:
        """The running and (re)starting workers of every registered version but `skip`."""
        return sum(mv.pool.active for mv in self.all() if mv is not skip)

    def page(self, limit: int, next_page_token: int) -> dict[str, Any]:
        """One page of GET /models: the default versions' urls, by name (limit 100 when out of 0..100)."""
        limit = 100 if limit > 100 or limit < 0 else limit
        start = max(next_page_token, 0)
        names = sorted(n for n in self._models if n not in self._unlisted)
        out: dict[str, Any] = {}
        if start + limit < len(names):
            out["nextPageToken"] = str(start + limit)
        out["models"] = [{"modelName": n, "modelUrl": self._models[n][self._defaults[n]].url}
                         for n in names[start : start + limit]]  # fmt: skip
        return out

    def snapshot(self) -> dict[str, Any]:
        """TorchServe's snapshot `models` structure: {name: {version: {defaultVersion, marName, ...}}}."""
        return {name: {v: mv.snapshot_entry(v == self._defaults.get(name)) for v, mv in versions.items()}
                for name, versions in self._models.items() if name not in self._unsaved}  # fmt: skip

    def health(self) -> tuple[bool, dict[str, Any]]:
        """(healthy, per model and version: status, live and minimum workers, the load error when unhealthy)."""
        details: dict[str, Any] = {}
        healthy = True
        for name, versions in self._models.items():
            for version, mv in versions.items():
                pool = mv.pool
                ok = pool.healthy() and (not mv.loaded_at_startup or pool.min_workers == 0 or pool.live > 0)
                healthy = healthy and ok
                entry: dict[str, Any] = {
                    "status": "Healthy" if ok else "Unhealthy", "liveWorkers": pool.live,
                    "minWorkers": mv.config.min_workers,
                }  # fmt: skip
                details.setdefault(name, {})[version] = entry
                if not ok and pool.load_error():
                    entry["lastError"] = pool.load_error()
        return healthy, details
