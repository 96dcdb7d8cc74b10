"""`package`: build a model archive in one of torch-model-archiver's four formats (the engine of `model-archiver`).

    package("digits", "1.0", "image_classifier", model_file="model.py", serialized_file="digits.pt",
            extra_files="index_to_name.json", export_path="model_store")   # -> model_store/digits.mar

Formats: `default` (.mar, zip deflated), `zip-store` (.mar, stored), `tgz` (.tar.gz, every entry under
`<model-name>/`), `no-archive` (the directory `<export-path>/<model-name>/`). The manifest is written last, as
`MAR-INF/MANIFEST.json`. Everything is checked before anything is written (name, version, files, the model-config
parses); the output is built under a temporary name beside it and renamed into place, so a failed or interrupted
run never leaves a half-written archive, and `--force` replaces an old one only once the new one is complete
(torch-model-archiver copies into a fixed `/tmp/<model-name>` and, for no-archive, over the old directory).
A missing export path is created. Large files show a progress bar (progress.py).
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import time
import uuid
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from serve.archive.manifest import (
    ARCHIVE_FORMATS,
    MANIFEST_PATH,
    RUNTIMES,
    build_manifest,
    check_model_name,
    check_version,
    manifest_json,
)
from serve.archive.model_config import load_model_config
from serve.archive.progress import Progress, ProgressReader
from serve.archive.sources import Entry, collect
from serve.errors import ArchiveError

_CHUNK = 1 << 20


def package(
    model_name: str,
    version: str,
    handler: str,
    *,
    serialized_file: str | Path | None = None,
    model_file: str | Path | None = None,
    extra_files: str | Sequence[str | Path] | None = None,
    requirements_file: str | Path | None = None,
    config_file: str | Path | None = None,
    export_path: str | Path | None = None,
    archive_format: str = "default",
    runtime: str = "python",
    force: bool = False,
    torch_compat: bool | None = None,
    progress: bool | None = None,
) -> Path:
    """Write the archive and return its path. `progress`: None shows bars on a terminal only, True/False forces."""
    _check_choices(model_name, version, archive_format, runtime)
    export = _export_dir(export_path)
    output = export / f"{model_name}{ARCHIVE_FORMATS[archive_format]}"
    if (output.exists() or output.is_symlink()) and not force:
        raise ArchiveError(
            f"{output} already exists.\nPlease specify --force/-f option to overwrite the model archive output "
            "file.\nSee -h/--help for more details."
        )
    entries = collect(model_file=model_file, serialized_file=serialized_file, handler=handler,
                      extra_files=extra_files, requirements_file=requirements_file, config_file=config_file,
                      runtime=runtime, exclude=output)  # fmt: skip
    if config_file:
        load_model_config(config_file)  # refuse a config the server could not read, before writing anything
    manifest = manifest_json(build_manifest(
        model_name, version, handler, runtime=runtime, serialized_file=str(serialized_file or ""),
        model_file=str(model_file or ""), requirements_file=str(requirements_file or ""),
        config_file=str(config_file or ""), torch_compat=torch_compat,
    ))  # fmt: skip
    _write(output, archive_format, model_name, entries, manifest, progress)
    return output


def _check_choices(model_name: str, version: str, archive_format: str, runtime: str) -> None:
    check_model_name(model_name)
    check_version(version)
    if archive_format not in ARCHIVE_FORMATS:
        raise ArchiveError(f"archive format {archive_format!r} is not one of {', '.join(ARCHIVE_FORMATS)}")
    if runtime not in RUNTIMES:
        raise ArchiveError(f"runtime {runtime!r} is not one of {', '.join(RUNTIMES)}")


def _export_dir(export_path: str | Path | None) -> Path:
    export = Path(export_path) if export_path is not None else Path.cwd()
    if export.exists() and not export.is_dir():
        raise ArchiveError(f"Given export-path {export} is not a directory. Point to a valid export-path directory.")
    return export


def _write(output: Path, fmt: str, model_name: str, entries: list[Entry], manifest: str, bar: bool | None) -> None:
    """Build beside `output` under a hidden temporary name, then move it into place."""
    output.parent.mkdir(parents=True, exist_ok=True)
    # created by the writers with the default mode (0666 or 0777 less the umask), as torch-model-archiver's files
    tmp = output.with_name(f".{output.name}.{uuid.uuid4().hex[:12]}.partial")
    try:
        if fmt == "no-archive":
            _write_directory(tmp, entries, manifest, bar)
        elif fmt == "tgz":
            _write_tgz(tmp, model_name, entries, manifest, bar)
        else:
            _write_zip(tmp, entries, manifest, zipfile.ZIP_STORED if fmt == "zip-store" else zipfile.ZIP_DEFLATED, bar)
        _replace(tmp, output)
    except BaseException:
        _remove(tmp)
        raise


def _replace(tmp: Path, output: Path) -> None:
    if output.is_dir() and not output.is_symlink():
        shutil.rmtree(output)
    elif tmp.is_dir() and (output.exists() or output.is_symlink()):
        output.unlink()
    os.replace(tmp, output)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _mode(source: Path) -> int:
    """0755 for executables, else 0644: the archive carries no other permission bits of the packer's machine."""
    return 0o755 if os.stat(source).st_mode & stat.S_IXUSR else 0o644


def _copy(src: IO[bytes], dst: IO[bytes], progress: Progress) -> None:
    while chunk := src.read(_CHUNK):
        dst.write(chunk)
        progress.update(len(chunk))


def _write_zip(tmp: Path, entries: list[Entry], manifest: str, compression: int, bar: bool | None) -> None:
    with zipfile.ZipFile(tmp, "w", compression, allowZip64=True) as zf:
        for entry in entries:
            info = zipfile.ZipInfo.from_file(entry.source, entry.arcname, strict_timestamps=False)
            info.compress_type = compression
            info.external_attr = (stat.S_IFREG | _mode(entry.source)) << 16
            with (
                Progress(entry.arcname, info.file_size, bar) as progress,
                open(entry.source, "rb") as src,
                zf.open(info, "w") as dst,
            ):
                _copy(src, dst, progress)
        zf.writestr(MANIFEST_PATH, manifest)


def _write_tgz(tmp: Path, model_name: str, entries: list[Entry], manifest: str, bar: bool | None) -> None:
    with tarfile.open(tmp, "w:gz") as tf:
        for entry in entries:
            st = entry.source.stat()
            info = tarfile.TarInfo(f"{model_name}/{entry.arcname}")
            info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), _mode(entry.source)
            with Progress(entry.arcname, st.st_size, bar) as progress, open(entry.source, "rb") as src:
                tf.addfile(info, ProgressReader(src, progress))  # type: ignore[arg-type]
        raw = manifest.encode("utf-8")
        info = tarfile.TarInfo(f"{model_name}/{MANIFEST_PATH}")
        info.size, info.mtime, info.mode = len(raw), int(time.time()), 0o644
        tf.addfile(info, io.BytesIO(raw))


def _write_directory(tmp: Path, entries: list[Entry], manifest: str, bar: bool | None) -> None:
    tmp.mkdir()
    for entry in entries:
        target = tmp / entry.arcname
        target.parent.mkdir(parents=True, exist_ok=True)
        with (
            Progress(entry.arcname, entry.source.stat().st_size, bar) as progress,
            open(entry.source, "rb") as src,
            open(target, "xb") as dst,
        ):
            _copy(src, dst, progress)
        target.chmod(_mode(entry.source))
    (tmp / MANIFEST_PATH).parent.mkdir(exist_ok=True)
    (tmp / MANIFEST_PATH).write_text(manifest, encoding="utf-8")
