"""`serve.load`: read a checkpoint of any format PyTorch users bring, recognised by its first bytes.

The file name does not matter (TorchServe archives call the same zip `.pt`, `.pth`, `.bin` or `.ckpt`):
- a zip with `<root>/data.pkl`: PyTorch's format since 1.6 (torch_zip.py); a zip of `.npy` entries: `.npz`;
- a pickle of PyTorch's magic number: the legacy format (legacy.py);
- an 8-byte length and a JSON object: safetensors.
"""

from __future__ import annotations

import os
from typing import IO, Any

from serve.errors import CheckpointError
from serve.serialization.legacy import is_legacy, read_legacy
from serve.serialization.location import Placement, placement
from serve.serialization.npz import read_npz
from serve.serialization.safetensors_io import is_safetensors, read_safetensors
from serve.serialization.sources import MmapSource, Source, open_source
from serve.serialization.torch_zip import archive_root, read_torch_zip
from serve.serialization.zip_archive import Archive

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def load(f: str | os.PathLike | IO[bytes], map_location: Any = None, weights_only: bool | None = True,
         mmap: bool | None = False) -> Any:  # fmt: skip
    """Load what `torch.save` (or safetensors, or numpy.savez) wrote, without running any code from the file.

    map_location: None (each storage back on its saved device), "cpu", "cuda", "cuda:N", a serve.device, a dict
    {saved_location: new_location} or a callable(storage, location) returning a storage or None, as in torch.load.
    mmap: map the file copy-on-write and view tensors in it instead of reading them (needs a path).
    Raises CheckpointError for anything malformed or refused (a pickled class, code, inconsistent sizes), its
    message starting with the file's name when `f` is a path (the server answers it to whoever registered it).
    """
    if weights_only is False:
        raise ValueError(
            "serve.load only loads weights: weights_only=False (unpickling arbitrary objects, which can run code) "
            "is not offered. Save and load the model's state_dict instead."
        )
    place = placement(map_location)
    with open_source(f, bool(mmap)) as src:
        try:
            return _read(src, place)
        except CheckpointError as e:
            if not isinstance(f, (str, os.PathLike)):
                raise
            raise CheckpointError(f"{os.path.basename(os.fspath(f))}: {e}") from None


def _read(src: Source, place: Placement) -> Any:
    head = src.read(0, min(src.size, 512))
    if head[:4] in _ZIP_MAGIC:
        archive = Archive(src)
        root = archive_root(archive)
        if root is not None:
            return read_torch_zip(archive, root, place)
        if archive.entries and all(name.endswith(".npy") for name in archive.entries):
            return read_npz(archive, place)
        raise CheckpointError("a zip archive that is neither a PyTorch checkpoint (no <root>/data.pkl) nor an .npz")
    if is_legacy(head):
        if isinstance(src, MmapSource):
            raise RuntimeError(
                "mmap can only be used with files saved with `torch.save(_use_new_zipfile_serialization=True)`, "
                "please torch.save your checkpoint with this option in order to use mmap."
            )
        return read_legacy(src, place)
    if is_safetensors(head):
        return read_safetensors(src, place)
    if head[257:262] == b"ustar":
        raise CheckpointError(
            "this is PyTorch's pre-0.4 tar checkpoint format, which serve does not read (torch.load refuses it "
            "with weights_only=True too); re-save it with a current torch.save"
        )
    if not head:
        raise CheckpointError("the checkpoint file is empty")
    raise CheckpointError(
        f"not a checkpoint format serve reads (first bytes {head[:8]!r}): expected a PyTorch zip or legacy "
        "checkpoint (.pt/.pth/.bin/.ckpt), a .safetensors file or an .npz file"
    )
