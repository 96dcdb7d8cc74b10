"""The rules every archive entry name and every extraction obeys: names that stay inside, and limits on size.

A name is checked as written in the archive, before anything is written: `../`, absolute paths, drive letters,
backslashes and NUL bytes mark a crafted archive (zip slip) and are refused rather than "cleaned", since an
archive that carries them was not made by a packager. `Limits` caps what one archive may unpack to: entry count,
total bytes, and the compression ratio of large entries (zip bombs); the caps are checked against the sizes the
archive declares and again against the bytes actually produced while streaming, because headers can lie.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from serve.errors import ArchiveError

_DRIVE = re.compile(r"^[A-Za-z]:")
_MAX_NAME = 4096
MAX_NESTING = 64  # containers inside containers in a MANIFEST.json or model-config: real ones use 3 or 4


@dataclass(frozen=True)
class Limits:
    """What one archive may unpack to. Raise them for a model that needs more (e.g. a 10 GB checkpoint)."""

    max_entries: int = 10_000
    max_total_bytes: int = 4 << 30
    # a large entry (over `ratio_floor` bytes unpacked) may be at most this many times its packed size; deflate
    # cannot exceed ~1032x, real checkpoints stay far below 100x, a bomb is near the maximum
    max_ratio: float = 200.0
    ratio_floor: int = 1 << 20


DEFAULT_LIMITS = Limits()


def entry_parts(name: str, what: str = "entry") -> tuple[str, ...]:
    """The path components of an archive entry name, refusing any name that could land outside the target."""
    if not name or len(name) > _MAX_NAME:
        raise ArchiveError(f"{what} has an empty or overlong name ({len(name)} characters)")
    if "\x00" in name:
        raise ArchiveError(f"{what} {name!r} contains a NUL byte")
    if "\\" in name:
        raise ArchiveError(f"{what} {name!r} contains a backslash; archive names use '/' (crafted or Windows-made)")
    if name.startswith("/") or _DRIVE.match(name):
        raise ArchiveError(f"{what} {name!r} is an absolute path; it would be written outside the target directory")
    parts = tuple(p for p in PurePosixPath(name).parts if p != ".")
    if ".." in parts:
        raise ArchiveError(f"{what} {name!r} would be written outside the extraction directory ('..' in its path)")
    if not parts:
        raise ArchiveError(f"{what} {name!r} names no file")
    return parts


def check_unique(names: list[tuple[tuple[str, ...], bool]]) -> None:
    """Refuse two entries with one normalised name, and a file that is also used as a directory.

    `names` holds (parts, is_dir) for every entry; directory entries may repeat a directory implied by a file.
    """
    files: set[tuple[str, ...]] = set()
    dirs: set[tuple[str, ...]] = set()
    for parts, is_dir in names:
        if is_dir:
            dirs.add(parts)
            continue
        if parts in files:
            raise ArchiveError(f"the archive holds two entries named {'/'.join(parts)!r}; refusing it")
        files.add(parts)
        dirs.update(parts[:i] for i in range(1, len(parts)))
    clash = files & dirs
    if clash:
        name = "/".join(sorted(clash)[0])
        raise ArchiveError(f"archive entry {name!r} is both a file and a directory; refusing it")


class Budget:
    """Counts entries and unpacked bytes against `Limits`, first from declared sizes, then from real bytes."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.entries = 0
        self.total = 0

    def declare(self, name: str, size: int, packed: int | None) -> None:
        """One entry as its header describes it (`packed` is None where the format has no per-entry size)."""
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise ArchiveError(
                f"the archive holds more than {self.limits.max_entries} entries (at {name!r}); "
                "refusing it as a possible zip bomb (raise Limits.max_entries if it is genuine)"
            )
        self.total += size
        self._check_total(name)
        if packed is not None:
            check_ratio(f"archive entry {name!r}", size, packed, self.limits)

    def _check_total(self, name: str) -> None:
        if self.total > self.limits.max_total_bytes:
            raise ArchiveError(
                f"the archive unpacks to more than {self.limits.max_total_bytes} bytes (at entry {name!r}); "
                "refusing it as a possible zip bomb (raise Limits.max_total_bytes if it is genuine)"
            )


class Meter:
    """Counts the bytes one entry really produces while it streams, against its declared size and the limits.

    `packed`, when given, is the archive file's size: the bytes produced by the whole archive so far are held to
    the same ratio to it as the declared total was, whatever the headers said.
    """

    def __init__(self, name: str, declared: int, limits: Limits, spent: list[int], packed: int | None = None) -> None:
        self.name, self.declared, self.limits, self.packed = name, declared, limits, packed
        self.spent = spent  # [total bytes produced so far by the whole archive], shared across entries
        self.count = 0

    def add(self, n: int) -> None:
        self.count += n
        self.spent[0] += n
        if self.count > self.declared:
            raise ArchiveError(
                f"archive entry {self.name!r} unpacks to more than the {self.declared} bytes its header declares "
                "(crafted archive); refusing it"
            )
        if self.spent[0] > self.limits.max_total_bytes:
            raise ArchiveError(
                f"the archive unpacks to more than {self.limits.max_total_bytes} bytes (at entry {self.name!r}); "
                "refusing it as a possible zip bomb"
            )
        if self.packed is not None:
            check_ratio(f"the archive (at entry {self.name!r})", self.spent[0], self.packed, self.limits)

    def finish(self) -> None:
        if self.count != self.declared:
            raise ArchiveError(
                f"archive entry {self.name!r} unpacks to {self.count} bytes but its header declares "
                f"{self.declared} (truncated or crafted archive)"
            )


def check_ratio(what: str, size: int, packed: int, limits: Limits) -> None:
    """Refuse a large entry (or archive) whose unpacked size is an implausible multiple of its packed size."""
    if size > limits.ratio_floor and size > limits.max_ratio * max(packed, 1):
        raise ArchiveError(
            f"{what} unpacks from {packed} to {size} bytes (ratio over {limits.max_ratio:g}); "
            "refusing it as a possible zip bomb (raise Limits.max_ratio if it is genuine)"
        )


def check_nesting(value: Any, what: str, limit: int = MAX_NESTING) -> None:
    """Refuse a parsed JSON/YAML document whose lists and mappings nest more than `limit` levels deep."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            raise ArchiveError(too_deep(what, limit))
        stack.extend((child, depth + 1) for child in children)


def too_deep(what: str, limit: int = MAX_NESTING) -> str:
    return f"{what} nests lists or mappings more than {limit} levels deep; refusing it"
