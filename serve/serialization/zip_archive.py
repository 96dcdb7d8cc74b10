"""Zip archives as checkpoints hold them: a validated table of entries and the byte range of each stored entry.

`zipfile` parses the central directory; the data of a stored (uncompressed) entry is then located from its local
header and handed out by the Source as one array, with no zipfile copy in between (zero-copy under mmap). Entry
names are checked even though nothing is ever extracted to disk: `../`, absolute paths, backslashes, drive letters
and duplicates mark a crafted archive, and are refused.
"""

from __future__ import annotations

import struct
import zipfile
import zlib

import numpy as np

from serve.errors import CheckpointError
from serve.serialization.sources import Source

_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # a zip local file header, 30 bytes
_MAX_NAME = 4096
# a compressed record (a re-zipped data.pkl, an .npz array) may unpack to at most this many times its packed
# size, once over the floor: pickles and weights compress 2-10x, a bomb ~1000x (a 1 MB data.pkl was 2 GB of RSS)
MAX_INFLATE_RATIO = 32
INFLATE_FLOOR = 1 << 20


class Archive:
    """The entries of a zip checkpoint by name, and their data."""

    def __init__(self, src: Source) -> None:
        self.src = src
        try:
            with zipfile.ZipFile(src.fileobj()) as zf:
                infos = zf.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, struct.error,
                NotImplementedError) as e:  # fmt: skip
            raise CheckpointError(f"not a readable zip archive (truncated or corrupt checkpoint?): {e}") from None
        self.entries: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            _check_name(info.filename)
            if info.filename in self.entries:
                raise CheckpointError(f"the zip archive holds two entries named {info.filename!r}; refusing it")
            self.entries[info.filename] = info

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def data_range(self, name: str) -> tuple[int, int]:
        """(offset, size) of a stored entry's data in the file, checked against the file's size."""
        info = self._info(name)
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(f"zip entry {name!r} is compressed; PyTorch checkpoints store entries uncompressed")
        header = self.src.read(info.header_offset, _LOCAL.size) if info.header_offset >= 0 else b""
        if len(header) != _LOCAL.size or header[:4] != b"PK\x03\x04":
            raise CheckpointError(f"zip entry {name!r} has no valid local header (corrupt archive)")
        _, _, flags, _, _, _, _, _, _, name_len, extra_len = _LOCAL.unpack(header)
        if flags & 0x1:
            raise CheckpointError(f"zip entry {name!r} is encrypted")
        if info.compress_size != info.file_size:
            raise CheckpointError(f"zip entry {name!r} is stored but its sizes disagree (corrupt archive)")
        offset = info.header_offset + _LOCAL.size + name_len + extra_len
        self.src.check_range(offset, info.file_size, f"zip entry {name!r}")
        return offset, info.file_size

    def array(self, name: str, nbytes: int | None = None) -> np.ndarray:
        """A stored entry's bytes as a writable uint8 array; `nbytes`, when given, must be its exact size."""
        offset, size = self.data_range(name)
        if nbytes is not None and nbytes != size:
            raise CheckpointError(
                f"zip entry {name!r} holds {size} bytes but the checkpoint declares {nbytes} for it "
                "(corrupt or crafted checkpoint)"
            )
        return self.src.array(offset, size)

    def read(self, name: str, limit: int = 1 << 31) -> bytes:
        """A whole (small) entry, stored or deflated, reading at most `limit` bytes."""
        info = self._info(name)
        if info.compress_type == zipfile.ZIP_STORED:
            offset, size = self.data_range(name)
            if size > limit:
                raise CheckpointError(f"zip entry {name!r} is {size} bytes, more than the {limit} allowed")
            return self.src.read(offset, size)
        return self.open_read(info, min(info.file_size, limit))

    def open_read(self, info: zipfile.ZipInfo, n: int) -> bytes:
        """Up to n decompressed bytes of a compressed entry, whose size is bounded by its packed size.

        zipfile stops at the size the header declares, so the bound holds whatever the stream would inflate to.
        """
        if info.file_size > max(INFLATE_FLOOR, MAX_INFLATE_RATIO * info.compress_size):
            raise CheckpointError(
                f"zip entry {info.filename!r} is compressed and unpacks from {info.compress_size} to "
                f"{info.file_size} bytes (over {MAX_INFLATE_RATIO}x); refusing it as a possible zip bomb. "
                "torch.save stores every record uncompressed: load the file with torch and save it again"
            )
        try:
            with zipfile.ZipFile(self.src.fileobj()) as zf, zf.open(info) as f:
                return f.read(n)
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, RuntimeError, NotImplementedError) as e:
            raise CheckpointError(f"cannot read zip entry {info.filename!r}: {e}") from None

    def _info(self, name: str) -> zipfile.ZipInfo:
        info = self.entries.get(name)
        if info is None:
            raise CheckpointError(f"the checkpoint has no record {name!r} (truncated or not a PyTorch checkpoint?)")
        return info


def _check_name(name: str) -> None:
    parts = name.split("/")
    if (not name or len(name) > _MAX_NAME or name.startswith("/") or "\\" in name or ":" in name or "\x00" in name
            or ".." in parts):  # fmt: skip
        raise CheckpointError(
            f"unsafe zip entry name {name!r:.200}: absolute paths, '..', backslashes and drive letters are refused"
        )
