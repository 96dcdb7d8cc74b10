"""Which files go into an archive, and under which names: torch-model-archiver's copy rules.

Everything lands flat in the archive root under its basename, in this order: model file, serialized file,
handler, extra files, requirements file, config file. `--extra-files` is a comma list of files, directories
(their contents are copied, keeping sub-directories) and globs (`*`, `?`, `[...]`; a glob that matches nothing
is a warning, a plain path that does not exist an error). Directories named `__pycache__`, `__MACOSX` or starting
with a dot are skipped below a given directory. A built-in handler name copies nothing; a handler file is copied
as `<module>.py` (`path/h.py:fn`, `path/h:fn` and `path/h` all copy `path/h.py`; TorchServe 0.12 fails on the
first form). Symlinks are followed, as TorchServe's copies follow them (the packager trusts its user); a
directory reached a second time through a symlink (a cycle) is not walked again.

One deliberate difference: when two different files would be stored under one name (e.g. an extra file named
like the model file), TorchServe silently keeps the last one copied; we refuse with both paths. The same file
given twice (`--handler h.py --extra-files h.py`) is stored once.
"""

from __future__ import annotations

import glob
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from serve.archive.manifest import BUILTIN_HANDLERS, LSP_BUILTIN_HANDLERS, MANIFEST_PATH, PYTHON_RUNTIMES
from serve.errors import ArchiveError

log = logging.getLogger(__name__)
SKIPPED_DIRS = ("__pycache__", "__MACOSX")


@dataclass(frozen=True)
class Entry:
    arcname: str  # '/'-separated path inside the archive
    source: Path


def collect(
    *,
    model_file: str | Path | None,
    serialized_file: str | Path | None,
    handler: str,
    extra_files: str | Sequence[str | Path] | None,
    requirements_file: str | Path | None,
    config_file: str | Path | None,
    runtime: str,
    exclude: Path | None = None,
) -> list[Entry]:
    """The archive's entries in order, each name once; `exclude` (the output being written) is never packed."""
    found: list[Entry] = []
    if model_file:
        found.append(_file_entry(model_file, "--model-file"))
    if serialized_file:
        found.append(_file_entry(serialized_file, "--serialized-file"))
    handler_path = handler_file(handler, runtime)
    if handler_path is not None:
        found.append(Entry(handler_path.name, handler_path))
    if extra_files:
        found += extra_entries(extra_files)
    if requirements_file:
        found.append(_file_entry(requirements_file, "--requirements-file"))
    if config_file:
        found.append(_file_entry(config_file, "--config-file"))
    return _unique(found, exclude)


def _file_entry(path: str | Path, flag: str) -> Entry:
    p = Path(path)
    if not p.exists():
        raise ArchiveError(f"{flag}: file does not exist: {str(p)!r}")
    if not p.is_file():
        raise ArchiveError(f"{flag}: {str(p)!r} is not a file")
    return Entry(p.name, p)


def handler_file(handler: str, runtime: str) -> Path | None:
    """The file a --handler value makes the archiver copy, or None for a built-in handler name."""
    if not handler:
        raise ArchiveError("--handler is empty: give a built-in handler name or a handler file")
    module = handler.split(":", 1)[0]
    if runtime in PYTHON_RUNTIMES:
        if handler in BUILTIN_HANDLERS:
            return None
        name = module if module.endswith(".py") else module + ".py"
    else:
        if handler in LSP_BUILTIN_HANDLERS:
            return None
        name = module + (".dylib" if sys.platform == "darwin" else ".so")
    path = Path(name)
    if not path.is_file():
        raise ArchiveError(
            f"--handler {handler!r} is neither a built-in handler ({', '.join(BUILTIN_HANDLERS)}) "
            f"nor an existing file ({name} not found)"
        )
    return path


def extra_entries(spec: str | Sequence[str | Path]) -> list[Entry]:
    """The entries --extra-files adds: a comma-separated string or a list of paths and globs."""
    items = spec.split(",") if isinstance(spec, str) else [str(s) for s in spec]
    out: list[Entry] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        wildcard = "*" in item or "?" in item or ("[" in item and "]" in item)
        if not wildcard and not Path(item).exists():
            raise ArchiveError(f"--extra-files: File does not exist: {item}")
        matches = sorted(glob.glob(item))
        if wildcard and not matches:
            log.warning("Given wildcard pattern did not match any file: %s", item)
        for match in matches:
            path = Path(match)
            if path.is_file():
                out.append(Entry(path.name, path))
            elif path.is_dir():
                out += _directory_entries(path)
            else:
                raise ArchiveError(f"--extra-files: Invalid extra file given {match} (not a file or directory)")
    return out


def _directory_entries(root: Path) -> Iterator[Entry]:
    """The files below `root`, named relative to it, skipping unwanted directories and symlink cycles."""
    seen = {os.path.realpath(root)}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        keep = []
        for d in sorted(dirnames):
            real = os.path.realpath(os.path.join(dirpath, d))
            if d in SKIPPED_DIRS or d.startswith(".") or real in seen:
                continue
            seen.add(real)
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if not path.is_file():
                raise ArchiveError(f"--extra-files: {str(path)!r} is not a regular file (broken symlink, fifo?)")
            yield Entry(path.relative_to(root).as_posix(), path)


def _unique(entries: list[Entry], exclude: Path | None) -> list[Entry]:
    by_name: dict[str, Entry] = {}
    skip = os.path.realpath(exclude) if exclude is not None else None
    for entry in entries:
        if entry.arcname == MANIFEST_PATH:
            raise ArchiveError(f"{str(entry.source)!r} would be stored as {MANIFEST_PATH}, which the archiver writes")
        if skip is not None and os.path.realpath(entry.source) == skip:
            continue
        prior = by_name.get(entry.arcname)
        if prior is None:
            by_name[entry.arcname] = entry
        elif os.path.realpath(prior.source) != os.path.realpath(entry.source):
            raise ArchiveError(
                f"two different files would be stored as {entry.arcname!r} in the archive: "
                f"{str(prior.source)!r} and {str(entry.source)!r}; rename one of them"
            )
    return list(by_name.values())
