"""`open_archive`: a model archive (`.mar`, `.tar.gz`, zip-store `.mar` or an unpacked directory) as a `ModelArchive`.

    with open_archive("model_store/digits.mar") as archive:
        archive.model_dir, archive.manifest, archive.handler, archive.model_config

The kind of a file is read from its first bytes, not its name (TorchServe unzips `.mar` and untars everything
else). A directory is used in place; as in TorchServe, a directory whose only entry is a sub-directory stands for
that sub-directory (a tarball unpacked by hand), except when that one entry is `MAR-INF` (an archive holding only
a manifest, e.g. with a built-in handler and no files). A symlink or special file in a directory that leads out of
it is refused, as is any manifest entry (`serializedFile`, `modelFile`, `handler`, `configFile`, `extraFiles`,
`requirementsFile`) that points outside the model directory or to a file it does not hold.
"""

from __future__ import annotations

import os
import stat
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serve.archive.extract import extract_tar, extract_zip, remove_tree
from serve.archive.manifest import (
    BUILTIN_HANDLERS,
    DEFAULT_HANDLER,
    MANIFEST_PATH,
    MAR_INF,
    check_model_name,
    default_manifest,
    parse_manifest,
    referenced_files,
)
from serve.archive.model_config import load_model_config
from serve.archive.safety import DEFAULT_LIMITS, Limits, entry_parts
from serve.archive.torch_imports import compat_enabled
from serve.errors import ArchiveError

_MAX_MANIFEST = 1 << 20
_TAR_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")  # gzip, bzip2, xz


@dataclass
class ModelArchive:
    """An opened model archive: where its files are, its manifest, and its parsed model-config."""

    model_dir: Path
    manifest: dict[str, Any]
    source: Path
    extracted: bool  # unpacked from a file (False: a directory used in place)
    model_config: dict[Any, Any] = field(default_factory=dict)
    _owned: bool = field(default=False, repr=False)  # model_dir is a temporary directory close() removes

    @property
    def model_name(self) -> str:
        return self.manifest["model"]["modelName"]

    @property
    def model_version(self) -> str:
        return self.manifest["model"]["modelVersion"]

    @property
    def handler(self) -> str:
        return self.manifest["model"]["handler"]

    @property
    def runtime(self) -> str:
        return self.manifest["runtime"]

    @property
    def serialized_file(self) -> Path | None:
        return self._path("serializedFile")

    @property
    def model_file(self) -> Path | None:
        return self._path("modelFile")

    @property
    def torch_compat(self) -> bool:
        """Explicit model-config `torchCompat` or manifest `torchCompat` (`--torch-compat`/`--no-torch-compat`)
        wins; otherwise True when the model file or handler file imports torch, torchvision or ts."""
        return compat_enabled(self.manifest, self.model_config, self.model_dir)

    def _path(self, key: str) -> Path | None:
        name = self.manifest["model"].get(key)
        return self.model_dir / name if name else None

    def close(self) -> None:
        """Remove the extraction directory when open_archive created it (a no-op for directories and dest_dir)."""
        if self._owned:
            remove_tree(self.model_dir)
            self._owned = False

    def __enter__(self) -> ModelArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_archive(path: str | Path, dest_dir: str | Path | None = None, limits: Limits = DEFAULT_LIMITS) -> ModelArchive:
    """Open a model archive, extracting a file into `dest_dir` (new or empty; a temporary directory by default)."""
    src = Path(path)
    if src.is_dir():
        root = _directory_root(src)
        check_directory(root)
        return _load(root, src, _default_name(src), extracted=False)
    if not src.is_file():
        raise ArchiveError(f"model archive {str(src)!r} does not exist (or is not a file or directory)")
    extract = _extractor(src)
    dest, created = _prepare(dest_dir)
    try:
        extract(src, dest, limits)
        archive = _load(dest, src, _default_name(src), extracted=True)
    except BaseException:
        _undo(dest, created)
        raise
    archive._owned = dest_dir is None
    return archive


def _extractor(src: Path) -> Callable[[Path, Path, Limits], None]:
    with open(src, "rb") as f:
        head = f.read(512)
    if head.startswith(_TAR_MAGIC) or head[257:262] == b"ustar":
        return extract_tar
    if zipfile.is_zipfile(src):
        return extract_zip
    raise ArchiveError(
        f"{src.name}: not a model archive: expected a .mar (zip), a .tar.gz or a model directory, "
        f"and the file starts with {head[:8]!r}"
    )


def _prepare(dest_dir: str | Path | None) -> tuple[Path, bool]:
    if dest_dir is None:
        return Path(tempfile.mkdtemp(prefix="serve-model-")), True
    dest = Path(dest_dir)
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise ArchiveError(f"extraction directory {str(dest)!r} must be a new or empty directory")
    created = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    return dest, created


def _undo(dest: Path, created: bool) -> None:
    """Remove everything a failed extraction wrote (and the directory itself when it made it)."""
    if created:
        remove_tree(dest)
        return
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            remove_tree(child)
        else:
            child.unlink(missing_ok=True)


def _default_name(src: Path) -> str:
    name = src.name
    for suffix in (".tar.gz", ".tgz", ".mar", ".zip", ".tar"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _directory_root(src: Path) -> Path:
    """TorchServe's rule: a directory holding exactly one sub-directory stands for it (MAR-INF excepted)."""
    entries = list(src.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and entries[0].name != MAR_INF:
        inner = entries[0]
        if not _inside(inner.resolve(), src.resolve()):
            raise ArchiveError(f"{str(inner)!r} is a symlink that leads outside the model directory {str(src)!r}")
        return inner
    return src


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_directory(root: Path) -> None:
    """Refuse a model directory holding a symlink that leads outside it, or a device, fifo or socket."""
    real_root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                target = Path(os.path.realpath(path))
                if not _inside(target, real_root):
                    rel = str(path.relative_to(root))
                    raise ArchiveError(f"{rel!r} in the model directory is a symlink to {str(target)!r}, outside it")
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise ArchiveError(f"{str(path.relative_to(root))!r} in the model directory is not a regular file")


def _load(model_dir: Path, src: Path, default_name: str, extracted: bool) -> ModelArchive:
    manifest_file = model_dir / MANIFEST_PATH
    if manifest_file.exists():
        manifest = parse_manifest(_read_manifest(manifest_file, src), src.name)
    else:
        check_model_name(default_name)
        manifest = default_manifest(default_name)
    check_references(manifest, model_dir, src.name)
    _check_not_torchscript(manifest, model_dir, src.name)
    config_name = manifest["model"].get("configFile")
    config = load_model_config(model_dir / config_name) if config_name else {}
    return ModelArchive(model_dir, manifest, src, extracted, config)


def _check_not_torchscript(manifest: dict[str, Any], model_dir: Path, source: str) -> None:
    """A built-in handler loads serializedFile with serve.load, which reads no TorchScript: say so at registration.

    Only the zip's central directory is read. A custom handler may load the file its own way: not checked.
    """
    from serve.serialization.torch_zip import TORCHSCRIPT, is_torchscript  # numpy and the runtime: load lazily

    model = manifest["model"]
    weights = model.get("serializedFile")
    if not weights or model.get("handler", DEFAULT_HANDLER) not in BUILTIN_HANDLERS:
        return
    try:
        with zipfile.ZipFile(model_dir / weights) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError):
        return  # not a zip (or unreadable): serve.load judges it when the model loads
    if is_torchscript(names):
        raise ArchiveError(f"{source}: manifest model.serializedFile {weights!r}: {TORCHSCRIPT}")


def _read_manifest(path: Path, src: Path) -> bytes:
    if not path.is_file():
        raise ArchiveError(f"{src.name}: {MANIFEST_PATH} is not a regular file")
    size = path.stat().st_size
    if size > _MAX_MANIFEST:
        raise ArchiveError(f"{src.name}: {MANIFEST_PATH} is {size} bytes; a manifest is a small JSON object")
    return path.read_bytes()


def check_references(manifest: dict[str, Any], model_dir: Path, source: str) -> None:
    """Every file the manifest names must be a regular file inside `model_dir`."""
    real_root = model_dir.resolve()
    for key, name in referenced_files(manifest):
        try:
            parts = entry_parts(name, f"manifest model.{key}")
        except ArchiveError as e:
            raise ArchiveError(f"{source}: {e}; it must name a file inside the archive") from None
        candidates = [model_dir.joinpath(*parts)]
        if key == "handler":  # a package: h/__init__.py
            candidates.append(model_dir.joinpath(*parts[:-1], parts[-1].removesuffix(".py"), "__init__.py"))
        found = next((p for p in candidates if p.is_file()), None)
        if found is None:
            raise ArchiveError(_missing(source, key, name, manifest))
        if not _inside(found.resolve(), real_root):
            raise ArchiveError(f"{source}: manifest model.{key} {name!r} leads outside the model directory")


def _missing(source: str, key: str, name: str, manifest: dict[str, Any]) -> str:
    if key == "handler":
        return (
            f"{source}: manifest model.handler {manifest['model']['handler']!r} is neither a built-in handler "
            f"({', '.join(BUILTIN_HANDLERS)}) nor a file in the archive ({name} is missing)"
        )
    return f"{source}: manifest model.{key} names {name!r}, which the archive does not hold"
