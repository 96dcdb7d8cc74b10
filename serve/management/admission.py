"""What a registration must pass before its version is admitted, besides the worker caps (limits.py).

`check_handler`: a `handler` given at registration (REST or gRPC) must be a built-in handler or a file of the
archive, as a manifest's handler must; checked before any worker is forked, so `handler=os:system` is a 400 that
says why, not a load failure in every worker answered 500.

`max_extracted_bytes_total`: the bytes that archives of all registered model versions may unpack to, together.

Each archive is already held to its own limits while it is extracted (serve/archive/safety.py: 4 GiB, entry count,
compression ratio), but nothing bounded the sum: two registrations of one 4 GB archive under two names wrote 8 GB.
`ExtractionBudget.open` extracts with the per-archive total lowered to what is left of the budget, so an archive
that does not fit stops being written at the budget, not after it; the refusal is a 507 that names the key. A
model directory registered in place is not extracted and costs nothing. Extractions take turns (one lock), so two
registrations at once cannot both spend the same remainder; `release` returns a version's bytes on unregister.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

from serve.archive import DEFAULT_LIMITS, ModelArchive, open_archive, shown
from serve.archive.reader import check_references
from serve.errors import ArchiveError, InvalidInput

INSUFFICIENT_STORAGE = 507


def check_handler(archive: ModelArchive, handler: str) -> None:
    """InvalidInput unless `handler` is a built-in or names a file of `archive` (the manifest's rule)."""
    manifest = {**archive.manifest, "model": {**archive.manifest["model"], "handler": handler}}
    try:
        check_references(manifest, archive.model_dir, archive.source.name)
    except ArchiveError as e:
        raise InvalidInput(f"Invalid handler {shown(handler)}: {e}") from None


class ExtractionBudget:
    def __init__(self, total: int) -> None:
        self.total = total
        self._used: dict[Path, int] = {}  # model_dir of an extracted archive -> bytes it holds
        self._lock = asyncio.Lock()

    @property
    def used(self) -> int:
        return sum(self._used.values())

    async def open(self, path: Path) -> ModelArchive:
        """`open_archive(path)` within what is left of the budget (an ArchiveError with code 507 past it)."""
        if path.is_dir():
            return await asyncio.to_thread(open_archive, path)
        async with self._lock:
            left = self.total - self.used
            if left <= 0:
                raise self._over(path, "nothing is left")
            capped = left < DEFAULT_LIMITS.max_total_bytes
            limits = dataclasses.replace(DEFAULT_LIMITS, max_total_bytes=min(left, DEFAULT_LIMITS.max_total_bytes))
            try:
                archive = await asyncio.to_thread(open_archive, path, None, limits)
            except ArchiveError as e:
                if capped and "unpacks to more than" in str(e):
                    raise self._over(path, f"{left} bytes are left") from None
                raise
            if archive.extracted:
                self._used[archive.model_dir] = await asyncio.to_thread(_size, archive.model_dir)
            return archive

    def release(self, archive: ModelArchive) -> None:
        self._used.pop(archive.model_dir, None)

    def _over(self, path: Path, left: str) -> ArchiveError:
        error = ArchiveError(
            f"{path.name} does not fit in max_extracted_bytes_total ({self.total} bytes for the archives of all "
            f"registered models; {self.used} in use, {left}): unregister a model, or raise max_extracted_bytes_total "
            "in config.properties"
        )
        error.code = INSUFFICIENT_STORAGE  # type: ignore[attr-defined]
        return error


def _size(root: Path) -> int:
    return sum(os.lstat(Path(d) / f).st_size for d, _, files in os.walk(root) for f in files)
