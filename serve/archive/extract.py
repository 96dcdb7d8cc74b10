"""Safe extraction of `.mar` (zip, deflated or stored) and `.tar.gz` archives into a fresh directory.

Two passes. The first reads every header and refuses the archive before a byte is written: unsafe names
(safety.entry_parts), symlinks, hard links, devices, fifos, sparse or encrypted entries, duplicates, more entries
or more declared bytes than `Limits` allow, implausible compression ratios (of each large entry, and of the whole
archive: many small entries of zeros add up to a bomb no single entry reveals). The second streams each entry into a
file created exclusively (O_EXCL, O_NOFOLLOW) and counts the bytes really produced, since headers can lie. Files
are written 0644 whatever the archive says: no setuid bits, no ownership, no timestamps are restored.

TorchServe drops the first path component of every tar entry (torch-model-archiver's tgz prefixes them with
`<model-name>/`). We drop it only when all entries share it, so a tarball packed from inside the model directory
(`tar czf m.tar.gz -C dir .` or without a prefix at all) keeps its layout instead of losing `MAR-INF/`.
"""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import IO

from serve.archive.safety import Budget, Limits, Meter, check_ratio, check_unique, entry_parts
from serve.errors import ArchiveError

_CHUNK = 1 << 20
_BAD_ZIP_TYPES = {stat.S_IFLNK: "a symbolic link", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
                  stat.S_IFIFO: "a fifo", stat.S_IFSOCK: "a socket"}  # fmt: skip
# (parts, is_dir, declared size, opener of the entry's data stream)
Planned = tuple[tuple[str, ...], bool, int, Callable[[], IO[bytes]]]


def extract_zip(path: Path, dest: Path, limits: Limits) -> None:
    """Every entry of the zip at `path` written under `dest`, after all of them were checked."""
    try:
        with zipfile.ZipFile(path) as zf:
            size = path.stat().st_size
            plan = _plan_zip(zf, size, limits)
            check_ratio(f"the archive {path.name!r}", sum(p[2] for p in plan), size, limits)
            _write(plan, dest, limits, size)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError) as e:
        raise ArchiveError(f"{path.name}: not a readable zip archive (truncated or corrupt?): {e}") from None


def _plan_zip(zf: zipfile.ZipFile, archive_size: int, limits: Limits) -> list[Planned]:
    budget = Budget(limits)
    plan: list[Planned] = []
    for info in zf.infolist():
        name = info.filename
        parts = entry_parts(name, "archive entry")
        kind = _BAD_ZIP_TYPES.get(stat.S_IFMT(info.external_attr >> 16))
        if kind:
            raise ArchiveError(f"archive entry {name!r} is {kind}; model archives may hold only files and directories")
        if info.flag_bits & 0x1:
            raise ArchiveError(f"archive entry {name!r} is encrypted; model archives cannot be encrypted")
        if info.compress_size > archive_size:
            raise ArchiveError(f"archive entry {name!r} declares more packed bytes than the archive holds (crafted)")
        is_dir = info.is_dir()
        budget.declare(name, 0 if is_dir else info.file_size, None if is_dir else info.compress_size)
        plan.append((parts, is_dir, info.file_size, partial(zf.open, info)))
    return plan


def extract_tar(path: Path, dest: Path, limits: Limits) -> None:
    """Every entry of the (gzipped) tar at `path` written under `dest`, after all of them were checked."""
    try:
        with tarfile.open(path, "r:*") as tf:
            plan = _plan_tar(tf, limits)
            size = path.stat().st_size
            check_ratio(f"the archive {path.name!r}", sum(p[2] for p in plan), size, limits)
            _write(_strip_root(plan), dest, limits, size)
    except (tarfile.TarError, gzip.BadGzipFile, zlib.error, EOFError) as e:
        raise ArchiveError(f"{path.name}: not a readable tar archive (truncated or corrupt?): {e}") from None


def _plan_tar(tf: tarfile.TarFile, limits: Limits) -> list[Planned]:
    budget = Budget(limits)
    plan: list[Planned] = []
    while (member := tf.next()) is not None:
        name = member.name
        parts = entry_parts(name, "archive entry")
        if not (member.isreg() or member.isdir()) or member.issparse():
            raise ArchiveError(
                f"archive entry {name!r} is {_tar_kind(member)}; model archives may hold only files and directories"
            )
        size = member.size if member.isreg() else 0
        budget.declare(name, size, None)
        plan.append((parts, member.isdir(), size, partial(_tar_stream, tf, member)))
    return plan


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link (to {member.linkname!r})"
    if member.islnk():
        return f"a hard link (to {member.linkname!r})"
    if member.ischr() or member.isblk():
        return "a device file"
    if member.isfifo():
        return "a fifo"
    if member.issparse():
        return "a sparse file"
    return f"of an unsupported type ({member.type!r})"


def _tar_stream(tf: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    stream = tf.extractfile(member)
    if stream is None:  # isreg() was checked, so this means a corrupt header
        raise ArchiveError(f"archive entry {member.name!r} has no data")
    return stream


def _strip_root(plan: list[Planned]) -> list[Planned]:
    """Drop the first path component when every entry shares it (TorchServe's tar rule, see the module doc)."""
    roots = {parts[0] for parts, *_ in plan}
    if len(roots) != 1 or any(len(parts) == 1 and not is_dir for parts, is_dir, *_ in plan):
        return plan
    return [(parts[1:], is_dir, size, opener) for parts, is_dir, size, opener in plan if len(parts) > 1]


def _write(plan: list[Planned], dest: Path, limits: Limits, packed: int) -> None:
    check_unique([(parts, is_dir) for parts, is_dir, *_ in plan])
    spent = [0]
    for parts, is_dir, size, opener in plan:
        target = dest.joinpath(*parts)
        if is_dir:
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        meter = Meter("/".join(parts), size, limits, spent, packed)
        with opener() as src, _create(target) as out:
            while chunk := src.read(_CHUNK):
                meter.add(len(chunk))
                out.write(chunk)
        meter.finish()


def _create(target: Path) -> IO[bytes]:
    """A new file opened for writing that refuses to follow a symlink or replace anything already there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(target, flags, 0o644)
    except FileExistsError:
        raise ArchiveError(f"archive entry {target.name!r} is written twice; refusing the archive") from None
    return os.fdopen(fd, "wb")


def remove_tree(path: Path) -> None:
    """Remove an extraction directory this module filled (ignores what is already gone)."""
    shutil.rmtree(path, ignore_errors=True)
