"""Reading PyTorch's zip checkpoint format (`torch.save` since 1.6).

The archive holds `<root>/data.pkl` (the pickled object, tensors as persistent ids naming storages), one
`<root>/data/<key>` entry per storage (raw bytes, 64-byte aligned), `byteorder`, `version`, `.format_version` and
`.storage_alignment`. The root is the file's stem when torch wrote a file ("archive" for a buffer); any name is
accepted. Each storage is read once, straight into its array (or mapped, with mmap=True), when the pickle first
names it; later tensors on the same storage view the same array.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from serve.errors import CheckpointError
from serve.serialization.allowlist import find_global
from serve.serialization.location import Placement
from serve.serialization.storage import Storage, StorageType, ascii_str, make_storage
from serve.serialization.unpickler import Unpickler
from serve.serialization.zip_archive import Archive

TORCHSCRIPT = (
    "this is a TorchScript archive (torch.jit.save), which holds code: TorchScript is not supported by serve. "
    "Save the weights instead, torch.save(model.state_dict(), 'model.pt'), and archive them with the Module's "
    "class (model-archiver --model-file model.py --serialized-file model.pt)"
)
MAX_FORMAT_VERSION = 10  # torch's kMaxSupportedFileFormatVersion
_MAX_PICKLE = 1 << 30


def archive_root(archive: Archive) -> str | None:
    """'<root>/' for a PyTorch checkpoint (the directory holding data.pkl), None for other zip files."""
    roots = [name[:-8] for name in archive.entries if name.count("/") == 1 and name.endswith("/data.pkl")]
    if not roots:
        return None
    if len(roots) > 1:
        raise CheckpointError(f"the zip archive holds several checkpoints ({', '.join(roots)}); expected one")
    return roots[0]


def read_torch_zip(archive: Archive, root: str, place: Placement) -> Any:
    """The object `torch.save` wrote into `archive`, with tensors rebuilt on the devices `place` picks."""
    outside = next((name for name in archive.entries if not name.startswith(root)), None)
    if outside is not None:
        raise CheckpointError(f"zip entry {outside!r} lies outside the checkpoint's root {root!r}")
    if is_torchscript(archive.entries):
        raise CheckpointError(TORCHSCRIPT)
    _check_version(archive, root)
    byteorder = _byteorder(archive, root)
    storages: dict[str, Storage] = {}

    def persistent_load(pid: Any) -> Storage:
        stype, key, location, numel = _storage_id(pid)
        found = storages.get(key)
        if found is not None:
            if found.dtype is not stype.dtype:
                raise CheckpointError(f"storage {key!r} is named with two dtypes ({found.dtype.name}, {stype.name})")
            return found
        raw = archive.array(f"{root}data/{key}", numel * stype.dtype.itemsize)
        found = storages[key] = make_storage(key, stype.dtype, raw, byteorder, location, place)
        return found

    data = archive.read(root + "data.pkl", _MAX_PICKLE)
    return Unpickler(data, find_global, persistent_load).load()[0]


def is_torchscript(names: Iterable[str]) -> bool:
    """Whether zip entry names are a TorchScript archive's (torch.jit.save): constants.pkl or code/ under the root."""
    parts = (n.split("/") for n in names)
    return any((len(p) == 2 and p[1] == "constants.pkl") or (len(p) > 2 and p[1] == "code") for p in parts)


def _storage_id(pid: Any) -> tuple[StorageType, str, str, int]:
    if type(pid) is not tuple or len(pid) != 5 or ascii_str(pid[0]) != "storage":
        raise CheckpointError(f"unexpected persistent id {pid!r:.100}: only storages may be referenced")
    _, stype, key, location, numel = pid
    if type(stype) is not StorageType:
        raise CheckpointError(f"persistent id names {stype!r:.60} where a storage type belongs")
    if type(numel) is not int or numel < 0 or not isinstance(key, (str, bytes)):
        raise CheckpointError(f"invalid storage record {pid!r:.100}")
    key = ascii_str(key)
    if not key.isdigit() and not key.isidentifier():
        raise CheckpointError(f"invalid storage key {key!r:.60}")
    return stype, key, ascii_str(location), numel


def _check_version(archive: Archive, root: str) -> None:
    for name in (root + ".data/version", root + "version"):
        if name in archive:
            text = archive.read(name, 64).strip()
            if not text.isdigit() or not 1 <= int(text) <= MAX_FORMAT_VERSION:
                raise CheckpointError(
                    f"unsupported checkpoint format version {text[:20]!r} (serve reads versions 1 to "
                    f"{MAX_FORMAT_VERSION}, as torch 2.x does)"
                )
            return


def _byteorder(archive: Archive, root: str) -> str:
    name = root + "byteorder"
    if name not in archive:
        return "little"  # torch's default for checkpoints written before the record existed
    value = archive.read(name, 16)
    if value not in (b"little", b"big"):
        raise CheckpointError(f"unknown byteorder record {value!r:.30}; expected 'little' or 'big'")
    return value.decode()
