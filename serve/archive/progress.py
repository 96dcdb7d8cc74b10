"""A one-line progress bar on stderr while the archiver copies a large file (over 10 MiB by default).

Shown only when the stream is a terminal, or when forced (`model-archiver --progress`); `--no-progress` or a
pipe keeps the output clean for scripts and CI logs. Redrawn only when the percentage changes.
"""

from __future__ import annotations

import sys
from typing import IO, TextIO

THRESHOLD = 10 << 20
_WIDTH = 30
_MIB = float(1 << 20)


class Progress:
    """Counts bytes towards `total` and draws `label [#####.....]  45%  12.0/26.7 MiB` when enabled."""

    def __init__(self, label: str, total: int, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = _isatty(self.stream)
        self.enabled = enabled and total > THRESHOLD
        self.label, self.total, self.done, self._shown = label, total, 0, -1

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        pct = min(100, self.done * 100 // max(self.total, 1))
        if pct != self._shown:
            self._shown = pct
            filled = pct * _WIDTH // 100
            bar = "#" * filled + "." * (_WIDTH - filled)
            mib = f"{self.done / _MIB:.1f}/{self.total / _MIB:.1f} MiB"
            self.stream.write(f"\r{self.label} [{bar}] {pct:3d}%  {mib}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._shown >= 0:
            self.stream.write("\n")
            self.stream.flush()
        self.enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ProgressReader:
    """A read-only file wrapper that reports every read to a Progress (for tarfile.addfile)."""

    def __init__(self, raw: IO[bytes], progress: Progress) -> None:
        self.raw, self.progress = raw, progress

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.progress.update(len(data))
        return data


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False
