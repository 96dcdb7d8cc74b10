"""Reading `.npz` files (numpy.savez / savez_compressed): a zip of `.npy` entries, loaded as a dict of tensors.

numpy's own reader would allocate whatever shape a header names before reading a byte, and unpickles object
arrays when allowed to; here each `.npy` header is parsed with numpy's header parser (a literal, never
evaluated), its shape checked against the entry's real size, and only serve's dtypes are accepted. Stored
entries are read like any other storage (a view under mmap=True); compressed ones are decompressed once.
"""

from __future__ import annotations

import io
import sys

import numpy as np

from serve.errors import CheckpointError
from serve.serialization.location import Placement
from serve.serialization.storage import finish_tensor, make_storage
from serve.serialization.zip_archive import Archive
from serve.tensor import dtypes
from serve.tensor.tensor import Tensor

_MAX_HEADER = 65536


def read_npz(archive: Archive, place: Placement) -> dict[str, Tensor]:
    out = {}
    for name, info in archive.entries.items():
        if not name.endswith(".npy"):
            raise CheckpointError(f"unexpected entry {name!r} in an .npz file (expected only .npy arrays)")
        stored = info.compress_type == 0
        head = archive.src.read(archive.data_range(name)[0], min(info.file_size, _MAX_HEADER)) if stored else (
            archive.open_read(info, min(info.file_size, _MAX_HEADER)))  # fmt: skip
        shape, fortran, dt, byteorder, start = _npy_header(name, head)
        nbytes = dt.itemsize
        for d in shape:
            nbytes *= d
        if start + nbytes != info.file_size:
            raise CheckpointError(
                f"{name!r}: its header declares {list(shape)} {dt.name} ({nbytes} bytes) but the entry holds "
                f"{info.file_size - start} bytes of data"
            )
        if stored:
            raw = archive.src.array(archive.data_range(name)[0] + start, nbytes)
        else:
            raw = np.frombuffer(bytearray(archive.open_read(info, info.file_size)[start:]), dtype=np.uint8)
        storage = make_storage(name, dt, raw, byteorder, "cpu", place)
        out[name[: -len(".npy")]] = finish_tensor(storage.array.reshape(shape, order="F" if fortran else "C"), storage)
    return out


def _npy_header(name: str, head: bytes) -> tuple[tuple[int, ...], bool, dtypes.dtype, str, int]:
    fp = io.BytesIO(head)
    try:
        major, _ = np.lib.format.read_magic(fp)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, fortran, np_dtype = read(fp, max_header_size=_MAX_HEADER)
    except Exception as e:  # numpy parses the header text as a Python literal; any failure means a bad file
        raise CheckpointError(f"{name!r} is not a valid .npy array: {e}") from None
    if np_dtype.hasobject or np_dtype.fields is not None:
        raise CheckpointError(f"{name!r} holds a {np_dtype} array; only numeric arrays are loaded (never pickles)")
    try:
        dt = dtypes.from_numpy_dtype(np_dtype.newbyteorder("="))
    except TypeError:
        raise CheckpointError(f"{name!r} has dtype {np_dtype}, which serve does not support") from None
    order = {"<": "little", ">": "big"}.get(np_dtype.byteorder, sys.byteorder)
    return tuple(shape), fortran, dt, order, fp.tell()
