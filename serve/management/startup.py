"""Which models the server registers at startup: a config snapshot's, or else `load_models`.

    jobs = snapshot_models(snapshot) if snapshot else load_models(settings)
    # each job: {"url", "model_name"} plus, from a snapshot, the version's settings and (min, max) workers

`load_models=all` takes every non-hidden `.mar`, `.model`, `.tar.gz` or `.tgz` file and every directory of the
model store, sorted by name (TorchServe's rule); `name=archive` entries name the model. A snapshot (TorchServe's
`model_snapshot` structure) replaces load_models, as in TorchServe, and restores each version's settings, its
worker counts and the default versions.

Decision (TorchServe refuses too): a snapshot naming a local archive that is gone stops the start with a
ConfigError listing every missing one (`check_snapshot_archives`), instead of starting without those models and
writing a new snapshot that forgets them. `http(s)` archives are fetched when registered, as any registration.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from serve.config import Settings, split_model_entry
from serve.errors import ConfigError, ModelNotFound
from serve.management.urls import resolve_url

log = logging.getLogger(__name__)
ARCHIVE_SUFFIXES = (".mar", ".model", ".tar.gz", ".tgz")


def load_models(settings: Settings) -> list[dict[str, Any]]:
    """One registration job ({url, model_name}) per `load_models` entry."""
    entries = list(settings.load_models)
    if entries == ["all"]:
        entries = store_archives(settings)
    return [{"url": url, "model_name": name} for name, url in map(split_model_entry, entries)]


def store_archives(settings: Settings) -> list[str]:
    """The names of the archives and model directories in the model store."""
    store = settings.model_store
    if store is None or not store.is_dir():
        log.warning("load_models=all but model_store %s is not a directory; no model loaded", store)
        return []
    return sorted(p.name for p in store.iterdir()
                  if not p.name.startswith(".") and (p.is_dir() or p.name.endswith(ARCHIVE_SUFFIXES)))  # fmt: skip


def snapshot_models(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """One registration job per snapshot entry, with its settings and (min, max) workers."""
    jobs = []
    for name, versions in (snapshot.get("models") or {}).items():
        for entry in versions.values():
            jobs.append({
                "url": entry["marName"], "model_name": name, "batch_size": entry.get("batchSize"),
                "max_batch_delay": entry.get("maxBatchDelay"), "response_timeout": entry.get("responseTimeout"),
                "startup_timeout": entry.get("startupTimeout"),
                "workers": (entry.get("minWorkers"), entry.get("maxWorkers")),
            })  # fmt: skip
    return jobs


def snapshot_defaults(snapshot: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(name, version) of each default version the snapshot names."""
    models = (snapshot or {}).get("models") or {}
    return [(n, v) for n, versions in models.items() for v, e in versions.items() if e.get("defaultVersion")]


async def check_snapshot_archives(jobs: list[dict[str, Any]], settings: Settings) -> None:
    """ConfigError naming every snapshot model whose local archive is gone (see the module docstring)."""
    missing = []
    for job in jobs:
        if urlsplit(job["url"]).scheme.lower() in ("http", "https"):
            continue
        try:
            await resolve_url(job["url"], settings)
        except ModelNotFound as e:
            missing.append(f"{job['model_name']} ({e})")
    if missing:
        raise ConfigError(
            f"the config snapshot in {settings.snapshot_dir} registers model(s) whose archive is gone: "
            f"{'; '.join(missing)}. Put the archive(s) back in {settings.model_store}, start with --ncs to ignore "
            "snapshots, or remove the snapshot files"
        )
