"""Workflow archives (`.war`): what `workflow-archiver` writes and what the server opens, as torch-workflow-archiver.

    package_workflow("dog_breed_wf", "workflow.yaml", handler="workflow_handler.py", export_path="wf_store")
    with open_workflow_archive("wf_store/dog_breed_wf.war") as war:
        war.directory, war.workflow_name, war.spec_file, war.handler_file

Layout (torch-workflow-archiver's): a zip (deflated) with the spec YAML, the handler file and every extra file at
its root, under their base names, and `WAR-INF/MANIFEST.json`:
`{"createdOn": "dd/mm/YYYY HH:MM:SS", "workflow": {"workflowName", "specFile", "handler"}, "archiverVersion"}`.

Decisions: the workflow name follows the model name rule (TorchServe's regex); two files with the same base name
are refused (torch-workflow-archiver silently keeps the last one); `--extra-files` takes files only, as it does. As
model-archiver, everything is checked before anything is written and the archive is built under a temporary name,
then renamed into place, so `-f` never leaves a half-written file. The server extracts a .war with the .mar's safe
extractor (extract.py: no links, no names outside the directory, bounded sizes) and reads the manifest as data.
"""

from __future__ import annotations

import json
import os
import uuid
import zipfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from serve import __version__
from serve.archive.extract import extract_zip, remove_tree
from serve.archive.manifest import CREATED_ON_FORMAT, check_model_name, shown
from serve.archive.safety import DEFAULT_LIMITS, Limits
from serve.errors import ArchiveError

WAR_MANIFEST = "WAR-INF/MANIFEST.json"
_MAX_MANIFEST = 1 << 20


def package_workflow(workflow_name: str, spec_file: str | Path, *, handler: str | Path | None = None,
                     extra_files: str | list[str | Path] | None = None, export_path: str | Path | None = None,
                     force: bool = False) -> Path:  # fmt: skip
    """Write `<export_path>/<workflow_name>.war` and return its path (ArchiveError says what was wrong)."""
    check_model_name(workflow_name)
    export = Path.cwd() if export_path is None else Path(export_path)
    if not export.is_dir():
        raise ArchiveError(f"Given export-path {export} is not a directory. Point to a valid export-path directory.")
    output = export / f"{workflow_name}.war"
    if output.exists() and not force:
        raise ArchiveError(f"{output} already exists.\nPlease specify --force/-f option to overwrite the workflow "
                           "archive output file.\nSee -h/--help for more details.")  # fmt: skip
    files = _files(spec_file, handler, extra_files)
    manifest = {"createdOn": datetime.now().strftime(CREATED_ON_FORMAT),
                "workflow": {"workflowName": workflow_name, "specFile": Path(spec_file).name,
                             **({"handler": Path(handler).name} if handler else {})},
                "archiverVersion": __version__}  # fmt: skip
    tmp = output.with_name(f".{output.name}.{uuid.uuid4().hex[:12]}.partial")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for source in files:
                zf.write(source, source.name)
            zf.writestr(WAR_MANIFEST, json.dumps(manifest, indent=2))
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    return output


def _files(spec_file: str | Path, handler: str | Path | None, extra: str | list[str | Path] | None) -> list[Path]:
    named = [Path(spec_file)] + ([Path(handler)] if handler else [])
    if isinstance(extra, str):
        named += [Path(p.strip()) for p in extra.split(",") if p.strip()]
    elif extra:
        named += [Path(p) for p in extra]
    seen: dict[str, Path] = {}
    for path in named:
        if not path.is_file():
            raise ArchiveError(f"{path} does not exist or is not a file; the spec file, the handler and "
                               "--extra-files must be files")  # fmt: skip
        if path.name in seen or path.name == "WAR-INF":
            raise ArchiveError(f"two files are named {path.name} ({seen.get(path.name)} and {path}): a .war holds "
                               "its files under their base names; rename one")  # fmt: skip
        seen[path.name] = path
    return named


@dataclass
class WorkflowArchive:
    """An opened .war: the directory its files were extracted to and its manifest."""

    directory: Path
    manifest: dict[str, Any]
    source: Path

    @property
    def workflow_name(self) -> str:
        return self.manifest["workflow"]["workflowName"]

    @property
    def spec_file(self) -> Path:
        return self.directory / self.manifest["workflow"]["specFile"]

    @property
    def handler_file(self) -> Path | None:
        name = self.manifest["workflow"].get("handler")
        return self.directory / name if name else None

    def close(self) -> None:
        remove_tree(self.directory)

    def __enter__(self) -> WorkflowArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_workflow_archive(path: str | Path, dest_dir: str | Path, limits: Limits = DEFAULT_LIMITS) -> WorkflowArchive:
    """Extract the .war at `path` into `dest_dir` (created; must not exist) and read its manifest."""
    src, dest = Path(path), Path(dest_dir)
    if not zipfile.is_zipfile(src):
        raise ArchiveError(f"workflow archive {src.name} is not a .war (zip) file")
    dest.mkdir(parents=True)
    try:
        extract_zip(src, dest, limits)
        manifest = _manifest(dest, src.name)
    except BaseException:
        remove_tree(dest)
        raise
    return WorkflowArchive(dest, manifest, src)


def _manifest(directory: Path, source: str) -> dict[str, Any]:
    path = directory / WAR_MANIFEST
    if not path.is_file() or path.stat().st_size > _MAX_MANIFEST:
        raise ArchiveError(f"workflow archive {source} has no {WAR_MANIFEST} (build it with workflow-archiver)")
    try:
        manifest = json.loads(path.read_bytes())
    except ValueError as e:
        raise ArchiveError(f"workflow archive {source}: {WAR_MANIFEST} is not JSON: {e}") from None
    workflow = manifest.get("workflow") if isinstance(manifest, dict) else None
    if not isinstance(workflow, dict) or not isinstance(workflow.get("workflowName"), str):
        raise ArchiveError(f"workflow archive {source}: Missing Workflow entry in manifest file.")
    for key in ("specFile", "handler"):
        name = workflow.get(key)
        if key == "handler" and name is None:
            continue  # a workflow of model nodes only
        if not isinstance(name, str) or "/" in name or "\\" in name or not (directory / name).is_file():
            raise ArchiveError(f"workflow archive {source}: its manifest's {key} {shown(name)} is not a file at "
                               "the archive's root")  # fmt: skip
    return manifest
