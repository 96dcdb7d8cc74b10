"""Where a checkpoint's bytes come from: a file read with `readinto`, a copy-on-write mmap, or a file-like object.

Every reader (PyTorch zip, legacy, safetensors, npz) asks its source for byte ranges. The source checks each range
against the real size of the file before it allocates anything, so a header that lies about sizes can never make
the loader allocate more than the file holds or read past its end.
"""

from __future__ import annotations

import io
import mmap as _mmap
import os
from typing import IO, Any

import numpy as np

from serve.errors import CheckpointError


class Source:
    """A checkpoint's bytes. `read` copies small records out; `array` gives a writable uint8 array of a range."""

    size: int
    zero_copy = False  # True when `array` views the file's pages instead of copying them

    def read(self, offset: int, n: int) -> bytes:
        raise NotImplementedError

    def array(self, offset: int, n: int) -> np.ndarray:
        raise NotImplementedError

    def read_into(self, offset: int, out: np.ndarray) -> None:
        """Fill the contiguous array `out` with the bytes at `offset`."""
        out.reshape(-1).view(np.uint8)[:] = self.array(offset, out.nbytes)

    def fileobj(self) -> IO[bytes]:
        """A seekable binary file over the same bytes (what `zipfile` reads the central directory from)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the file handle; arrays already handed out stay valid."""

    def check_range(self, offset: int, n: int, what: str) -> None:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise CheckpointError(
                f"{what} needs bytes {offset}..{offset + n} but the file has only {self.size} bytes "
                "(truncated or corrupt checkpoint)"
            )

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class FileSource(Source):
    """A file on disk, read with one `readinto` per range straight into the array that keeps the data."""

    def __init__(self, path: str | os.PathLike) -> None:
        self._f = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by close())
        self.size = os.fstat(self._f.fileno()).st_size

    def read(self, offset: int, n: int) -> bytes:
        return bytes(self.array(offset, n))

    def array(self, offset: int, n: int) -> np.ndarray:
        out = np.empty(n, dtype=np.uint8)
        self.read_into(offset, out)
        return out

    def read_into(self, offset: int, out: np.ndarray) -> None:
        n = out.nbytes
        self.check_range(offset, n, "a record")
        view = memoryview(out).cast("B")  # type: ignore[arg-type]
        self._f.seek(offset)
        done = 0
        while done < n:  # a single read(2) returns at most ~2 GiB on Linux
            got = self._f.readinto(view[done:])
            if not got:
                raise CheckpointError(f"the file shrank while it was being read (at byte {offset + done})")
            done += got

    def fileobj(self) -> IO[bytes]:
        return self._f

    def close(self) -> None:
        self._f.close()


class MmapSource(FileSource):
    """A file mapped copy-on-write (like torch's mmap=True): arrays view its pages, writes stay private."""

    zero_copy = True

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__(path)
        if self.size == 0:
            self.close()
            raise CheckpointError("the checkpoint file is empty")
        self._map = _mmap.mmap(self._f.fileno(), 0, access=_mmap.ACCESS_COPY)

    def read(self, offset: int, n: int) -> bytes:
        self.check_range(offset, n, "a record")
        return self._map[offset : offset + n]

    def array(self, offset: int, n: int) -> np.ndarray:
        self.check_range(offset, n, "a record")
        return np.frombuffer(self._map, dtype=np.uint8, count=n, offset=offset)


class BufferSource(Source):
    """The rest of a file-like object, read once into a private buffer that the arrays then view."""

    zero_copy = True

    def __init__(self, f: Any) -> None:
        self._buf = _read_all(f)
        self._view = memoryview(self._buf)
        self.size = len(self._buf)

    def read(self, offset: int, n: int) -> bytes:
        self.check_range(offset, n, "a record")
        return bytes(self._view[offset : offset + n])

    def array(self, offset: int, n: int) -> np.ndarray:
        self.check_range(offset, n, "a record")
        # a memoryview slice as the base keeps each array its own root, so serve.save writes only its range
        return np.frombuffer(self._view[offset : offset + n], dtype=np.uint8)

    def fileobj(self) -> IO[bytes]:
        return _ViewFile(self._view)  # type: ignore[return-value]


def _read_all(f: Any) -> bytearray:
    seekable = getattr(f, "seekable", None)
    if seekable is not None and seekable() and hasattr(f, "readinto"):
        start = f.tell()
        end = f.seek(0, io.SEEK_END)
        f.seek(start)
        buf = bytearray(max(end - start, 0))
        view, done = memoryview(buf), 0
        while done < len(buf):
            got = f.readinto(view[done:])
            if not got:
                raise CheckpointError(f"the stream ended after {done} of {len(buf)} bytes")
            done += got
        return buf
    data = f.read()
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"serve.load expects a path or a binary file object; read() returned {type(data).__name__}")
    return bytearray(data)


class _ViewFile(io.RawIOBase):
    """A read-only seekable file over a memoryview, so zipfile can parse an in-memory archive without a copy."""

    def __init__(self, view: memoryview) -> None:
        self._view, self._pos = view, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(base + offset, 0)
        return self._pos

    def readinto(self, b: Any) -> int:
        chunk = self._view[self._pos : self._pos + len(b)]
        n = len(chunk)
        memoryview(b).cast("B")[:n] = chunk
        self._pos += n
        return n


def open_source(f: Any, mmap: bool) -> Source:
    """A Source for a path (optionally memory-mapped) or for a binary file-like object."""
    if isinstance(f, (str, os.PathLike)):
        return MmapSource(f) if mmap else FileSource(f)
    if mmap:
        raise ValueError("f must be a file path in order to use the mmap argument")
    if not hasattr(f, "read"):
        raise TypeError(f"serve.load expects a path or a binary file object, got {type(f).__name__}")
    return BufferSource(f)
