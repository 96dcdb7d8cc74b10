"""Hostile checkpoints, each written here by a helper (none is committed): every one is refused with a
CheckpointError that names the problem, and none runs code, imports a module or allocates more than the file.

Code-running payloads point at a shell command that would create a canary file, at `exec` of Python that would,
or at a function of `import_canary`, a module whose very import the tests would notice.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import struct
import sys
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

import serve
from serve.errors import CheckpointError
from serve.serialization import save
from tests.unit.serialization.files import records, safetensors_file, torch_zip

PLACEHOLDER = "EVILEVIL"


def _string(s: str) -> bytes:
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def call(module: str, name: str, *args: str) -> bytes:
    """Pickle opcodes that call module.name(*args) when unpickled by an unrestricted unpickler."""
    return f"c{module}\n{name}\n".encode() + b"(" + b"".join(_string(a) for a in args) + b"tR"


def valid_with(payload: bytes) -> bytes:
    """A valid serve-written state_dict whose 'evil' entry is replaced by `payload` opcodes."""
    buf = io.BytesIO()
    save({"w": serve.ones(2), "evil": PLACEHOLDER}, buf)
    root, recs = records(buf.getvalue())
    pkl = recs["data.pkl"].replace(_string(PLACEHOLDER), payload)
    return torch_zip(pkl, {"0": recs["data/0"]}, root.rstrip("/"))


def load_bytes(data: bytes, tmp_path: Path, name: str = "hostile.pt", **kwargs: object) -> object:
    path = tmp_path / name
    path.write_bytes(data)
    return serve.load(path, **kwargs)


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    path = tmp_path / "canary"
    yield path
    assert not path.exists(), "a hostile checkpoint ran code"
    assert "tests.unit.serialization.import_canary" not in sys.modules, "a hostile checkpoint imported a module"


CODE_PAYLOADS = {
    "os.system": lambda c: call("os", "system", f"touch {c}"),
    "posix.system": lambda c: call("posix", "system", f"touch {c}"),
    "builtins.exec": lambda c: call("builtins", "exec", f"open({str(c)!r}, 'w').close()"),
    "builtins.eval": lambda c: call("builtins", "eval", f"open({str(c)!r}, 'w').close()"),
    "subprocess.check_call": lambda c: b"csubprocess\ncheck_call\n((" + _string("touch") + _string(str(c)) + b"ltR",
    "builtins.getattr": lambda c: call("builtins", "getattr", "os", "system"),
    "import_canary.fire": lambda c: call("tests.unit.serialization.import_canary", "fire"),
    "a model class": lambda c: call("torch.nn.modules.linear", "Linear") + b"0" + call("os", "system", f"touch {c}"),
}


def test_the_canary_payloads_are_live(tmp_path: Path) -> None:
    # what the canary tests rely on: an unrestricted unpickler does run these payloads (a harmless `touch`)
    for name in ("os.system", "builtins.exec"):
        canary = tmp_path / name
        pickle.loads(b"\x80\x02" + CODE_PAYLOADS[name](canary) + b".")
        assert canary.exists()


@pytest.mark.parametrize("name", sorted(CODE_PAYLOADS))
def test_globals_outside_the_allowlist_are_refused(name: str, canary: Path, tmp_path: Path) -> None:
    payload = CODE_PAYLOADS[name](canary)
    with pytest.raises(CheckpointError, match=r"refused to load global '[\w.]+'.*save the state_dict instead"):
        load_bytes(valid_with(payload), tmp_path)


def test_refusal_names_the_global(canary: Path, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"'os\.system'"):
        load_bytes(valid_with(call("os", "system", f"touch {canary}")), tmp_path)


def test_malicious_object_nested_deep_inside_a_valid_state_dict(canary: Path, tmp_path: Path) -> None:
    nested = b"}(" + _string("inner") + b"](" + call("os", "system", f"touch {canary}") + b"eu"  # {'inner': [evil]}
    with pytest.raises(CheckpointError, match=r"os\.system"):
        load_bytes(valid_with(nested), tmp_path)


def test_plain_pickle_file_is_refused(canary: Path, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"posix\.system|os\.system"):
        load_bytes(b"\x80\x02" + call("os", "system", f"touch {canary}") + b".", tmp_path, "model.bin")


def test_legacy_format_with_a_malicious_global(canary: Path, tmp_path: Path) -> None:
    magic = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little") + b"."
    version = b"\x80\x02M\xe9\x03."
    data = magic + version + b"\x80\x02}." + b"\x80\x02" + call("os", "system", f"touch {canary}") + b"."
    with pytest.raises(CheckpointError, match=r"os\.system"):
        load_bytes(data, tmp_path, "legacy.pth")


def test_legacy_pickled_module_persistent_id(tmp_path: Path) -> None:
    magic = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little") + b"."
    pid = b"(" + _string("module") + b"NNNtQ"  # ('module', None, None, None)
    data = magic + b"\x80\x02M\xe9\x03." + b"\x80\x02}." + b"\x80\x02" + pid + b"."
    with pytest.raises(CheckpointError, match=r"whole nn\.Module"):
        load_bytes(data, tmp_path, "legacy.pth")


def test_build_cannot_set_attributes_on_a_tensor(tmp_path: Path) -> None:
    # BUILD({'_data': None}) on a rebuilt tensor: only a state_dict's OrderedDict metadata may be set
    pkl = _storage_pickle(2)[:-1] + b"}(" + _string("_data") + b"Nub."
    with pytest.raises(CheckpointError, match="refused BUILD of Tensor"):
        load_bytes(torch_zip(pkl, {"0": b"\x00" * 8}), tmp_path)


@pytest.mark.parametrize("opcode", [b"i", b"o", b"\x82", b"P", b"\x97"])
def test_code_running_opcodes_are_refused(opcode: bytes, tmp_path: Path) -> None:
    body = {b"i": b"(ios\nsystem\n", b"o": b"(No", b"\x82": b"\x82\x01", b"P": b"P0\n", b"\x97": b"\x97"}
    with pytest.raises(CheckpointError, match="not supported by the safe loader"):
        load_bytes(valid_with(body[opcode]), tmp_path)


def test_truncated_zip_at_many_points(tmp_path: Path) -> None:
    buf = io.BytesIO()
    save({"w": serve.arange(1000.0), "b": serve.zeros(3, dtype=serve.int64)}, buf)
    data = buf.getvalue()
    for cut in (0, 1, 4, 30, len(data) // 3, len(data) // 2, len(data) - 23, len(data) - 1):
        with pytest.raises(CheckpointError):
            load_bytes(data[:cut], tmp_path)


def test_zip_entry_with_dotdot_in_its_name(tmp_path: Path) -> None:
    buf = io.BytesIO()
    save({"w": serve.ones(2)}, buf)
    with zipfile.ZipFile(buf, "a") as zf:
        zf.writestr("archive/../../etc/evil", b"x")
    with pytest.raises(CheckpointError, match=r"unsafe zip entry name '.*\.\./"):
        load_bytes(buf.getvalue(), tmp_path)


def test_duplicate_and_outside_entries(tmp_path: Path) -> None:
    data = torch_zip(b"\x80\x02}.", extra={"other/file": b"x"})
    with pytest.raises(CheckpointError, match="outside the checkpoint's root"):
        load_bytes(data, tmp_path)
    with pytest.warns(UserWarning, match="Duplicate name"):
        data = torch_zip(b"\x80\x02}.", extra={"archive/version": b"3\n"})
    with pytest.raises(CheckpointError, match="two entries named"):
        load_bytes(data, tmp_path)


def _storage_pickle(numel: int, size: tuple[int, ...] = (2,), stride: tuple[int, ...] = (1,), offset: int = 0) -> bytes:
    def ints(values: tuple[int, ...]) -> bytes:
        return b"(" + b"".join(b"J" + struct.pack("<i", v) for v in values) + b"t"

    pid = b"(" + _string("storage") + b"ctorch\nFloatStorage\n" + _string("0") + _string("cpu")
    pid += b"\x8a\x08" + struct.pack("<q", numel) + b"tQ"
    args = b"(" + pid + b"J" + struct.pack("<i", offset) + ints(size) + ints(stride) + b"\x89)t"
    return b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n" + args + b"R."


def test_storage_size_that_would_allocate_terabytes(tmp_path: Path) -> None:
    data = torch_zip(_storage_pickle(10**12), {"0": b"\x00" * 8})
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=r"holds 8 bytes but the checkpoint declares 4000000000000"):
            load_bytes(data, tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_tensor_reaching_past_its_storage(tmp_path: Path) -> None:
    data = torch_zip(_storage_pickle(2, size=(2, 2), stride=(2, 1)), {"0": b"\x00" * 8})
    with pytest.raises(CheckpointError, match=r"needs 4 elements but its storage '0' has only 2"):
        load_bytes(data, tmp_path)
    data = torch_zip(_storage_pickle(2, size=(1,), stride=(1,), offset=-1), {"0": b"\x00" * 8})
    with pytest.raises(CheckpointError, match="invalid tensor geometry"):
        load_bytes(data, tmp_path)


def test_legacy_storage_larger_than_the_file(tmp_path: Path) -> None:
    magic = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little") + b"."
    pid = b"(" + _string("storage") + b"ctorch\nFloatStorage\n" + _string("0") + _string("cpu")
    pid += b"\x8a\x08" + struct.pack("<q", 10**12) + b"NtQ"
    data = magic + b"\x80\x02M\xe9\x03." + b"\x80\x02}." + b"\x80\x02" + pid + b"."
    with pytest.raises(CheckpointError, match=r"more than the \d+-byte file can hold"):
        load_bytes(data, tmp_path, "legacy.pth")


@pytest.mark.parametrize("shape", ["lists", "tuples"])
def test_pickle_that_nests_deeply(shape: str, tmp_path: Path) -> None:
    n = 100_000
    body = b"]" * n + b"a" * (n - 1) if shape == "lists" else b"N" + b"\x85" * n
    with pytest.raises(CheckpointError, match="nests containers more than 256 levels deep"):
        load_bytes(valid_with(body), tmp_path)


def test_memo_amplification_is_stopped(tmp_path: Path) -> None:
    # one 100 KB string, re-encoded 10,000 times through the memo: 1 GB from a 150 KB file
    pkl = b"\x80\x02c_codecs\nencode\nq\x00" + _string("a" * 100_000) + b"q\x01" + _string("latin1") + b"q\x02"
    pkl += b"(" + b"h\x00h\x01h\x02\x86R" * 10_000 + b"l."
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match="amplification"):
            load_bytes(torch_zip(pkl), tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


def test_codecs_encode_with_another_codec(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"invalid call to _codecs\.encode"):
        load_bytes(torch_zip(b"\x80\x02" + call("_codecs", "encode", "x", "zlib") + b"."), tmp_path)


SAFETENSORS = {
    "offsets past the end": ({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\x00" * 8),
    "size mismatch": ({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, b"\x00" * 16),
    "overlap": (
        {
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
        },
        b"\x00" * 16,
    ),
    "negative offset": ({"t": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}}, b"\x00"),
    "unknown dtype": ({"t": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}, b"\x00"),
}


@pytest.mark.parametrize("case", sorted(SAFETENSORS))
def test_safetensors_header_that_lies(case: str, tmp_path: Path) -> None:
    header, data = SAFETENSORS[case]
    with pytest.raises(CheckpointError, match="safetensors"):
        load_bytes(safetensors_file(header, data), tmp_path, "model.safetensors")


def test_safetensors_header_length_lies(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"header claims \d+ bytes"):
        load_bytes(safetensors_file({}, header_len=1 << 60), tmp_path, "model.safetensors")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_bytes(safetensors_file(b"{not json"), tmp_path, "model.safetensors")


def test_torchscript_without_constants_is_refused_by_name(tmp_path: Path) -> None:
    buf = io.BytesIO()
    save({"w": serve.ones(2)}, buf)
    root, recs = records(buf.getvalue())
    data = torch_zip(recs["data.pkl"], {"0": recs["data/0"]}, root.rstrip("/"), extra={f"{root}code/m.py": b"x"})
    with pytest.raises(CheckpointError, match=r"TorchScript is not supported by serve\. Save the weights instead"):
        load_bytes(data, tmp_path)


def _rezip(data: bytes, deflate: str, payload: bytes | None = None) -> bytes:
    """The zip `data` with its entry ending in `deflate` compressed (its bytes replaced by `payload` if given)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            if info.filename.endswith(deflate):
                raw = src.read(info) if payload is None else payload
                dst.writestr(info.filename, raw, compress_type=zipfile.ZIP_DEFLATED)
            else:
                dst.writestr(info.filename, src.read(info))
    return out.getvalue()


def test_compressed_data_pkl_bomb_is_refused_before_inflating(tmp_path: Path) -> None:
    buf = io.BytesIO()
    save({"w": serve.ones(2)}, buf)
    bomb = _rezip(buf.getvalue(), "/data.pkl", b"\x80\x02" + b"N" * (8 << 20) + b".")  # 8 MiB in ~8 KB
    assert len(bomb) < 64 << 10
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=r"data.pkl' is compressed and unpacks from \d+ to 8388611 bytes"):
            load_bytes(bomb, tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20


def test_compressed_data_pkl_within_the_ratio_loads(tmp_path: Path) -> None:
    buf = io.BytesIO()
    save({"w": serve.arange(4.0), "n": {"k": [1, 2.5, "s"]}}, buf)
    loaded = load_bytes(_rezip(buf.getvalue(), "/data.pkl"), tmp_path)
    assert loaded["n"] == {"k": [1, 2.5, "s"]}
    assert loaded["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_compressed_npz_array_bomb_is_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, a=np.zeros(4 << 20, np.uint8), b=np.arange(10, dtype=np.float32))
    assert len(buf.getvalue()) < 64 << 10
    with pytest.raises(CheckpointError, match=r"'a.npy' is compressed and unpacks from \d+ to \d+ bytes"):
        load_bytes(buf.getvalue(), tmp_path, "x.npz")
    small = io.BytesIO()
    np.savez_compressed(small, a=np.zeros(1000, np.uint8), b=np.arange(10, dtype=np.float32))
    loaded = load_bytes(small.getvalue(), tmp_path, "y.npz")
    assert loaded["b"].tolist() == list(range(10))


def _u8(begin: int, end: int) -> bytes:
    return f'{{"dtype": "U8", "shape": [{end - begin}], "data_offsets": [{begin}, {end}]}}'.encode()


# raw headers (json.dumps cannot write duplicate keys or deep nesting), each refused by the reference reader too
SAFETENSORS_RAW: dict[str, tuple[bytes, bytes, str]] = {
    "duplicate key": (b'{"a": ' + _u8(0, 1) + b', "a": ' + _u8(1, 2) + b"}", b"\0\0", "names 'a' twice"),
    "metadata int value": (b'{"__metadata__": {"k": 1}, "a": ' + _u8(0, 1) + b"}", b"\0", "strings to strings"),
    "metadata nested value": (
        b'{"__metadata__": {"k": {"x": "y"}}, "a": ' + _u8(0, 1) + b"}",
        b"\0",
        "strings to strings",
    ),
    "metadata not a map": (b'{"__metadata__": "x", "a": ' + _u8(0, 1) + b"}", b"\0", "strings to strings"),
    "gap between tensors": (b'{"a": ' + _u8(0, 1) + b', "b": ' + _u8(2, 3) + b"}", b"\0" * 3, "bytes 1..2 unused"),
    "gap before the first": (b'{"a": ' + _u8(1, 2) + b"}", b"\0\0", "bytes 0..1 unused"),
    "bytes after the last": (b'{"a": ' + _u8(0, 1) + b"}", b"\0\0", "not fully covered"),
    "overlap": (b'{"a": ' + _u8(0, 2) + b', "b": ' + _u8(1, 3) + b"}", b"\0" * 3, "would overlap 'a'"),
    "deep metadata": (b'{"__metadata__": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", b"", "nests JSON too deeply"),
    "deep shape": (
        b'{"a": {"dtype": "U8", "shape": ' + b"[" * 100_000 + b"]" * 100_000 + b', "data_offsets": [0, 0]}}',
        b"",
        "nests JSON too deeply",
    ),
}


@pytest.mark.parametrize("case", sorted(SAFETENSORS_RAW))
def test_safetensors_refused_as_the_reference_reader_refuses(case: str, tmp_path: Path) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    header, data, message = SAFETENSORS_RAW[case]
    raw = safetensors_file(header, data)
    with pytest.raises(Exception, match="Error while deserializing"):
        safetensors_numpy.load(raw)
    with pytest.raises(CheckpointError, match=message):
        load_bytes(raw, tmp_path, "model.safetensors")


def test_safetensors_duplicate_metadata_key(tmp_path: Path) -> None:
    """Stricter than the reference reader (which keeps the last value silently): which one was meant is unknown."""
    raw = safetensors_file(b'{"__metadata__": {"k": "1", "k": "2"}, "a": ' + _u8(0, 1) + b"}", b"\0")
    with pytest.raises(CheckpointError, match="names 'k' twice"):
        load_bytes(raw, tmp_path, "model.safetensors")


@pytest.mark.parametrize(
    "header",
    [
        b"{}",
        b'{"__metadata__": {"format": "pt"}, "a": '
        + _u8(0, 0)
        + b', "b": '
        + _u8(0, 2)
        + b', "c": '
        + _u8(2, 3)
        + b"}",
    ],
)
def test_safetensors_the_reference_reader_accepts_load(header: bytes, tmp_path: Path) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    raw = safetensors_file(header, b"\1\2\3" if header != b"{}" else b"")
    expected = safetensors_numpy.load(raw)
    loaded = load_bytes(raw, tmp_path, "model.safetensors")
    assert sorted(loaded) == sorted(expected)
    for name, arr in expected.items():
        np.testing.assert_array_equal(loaded[name].numpy(), arr)


def test_npz_with_object_array_or_lying_shape(tmp_path: Path) -> None:
    buf = io.BytesIO()
    np.savez(buf, a=np.array([os.system, 1], dtype=object))
    with pytest.raises(CheckpointError, match="only numeric arrays"):
        load_bytes(buf.getvalue(), tmp_path, "x.npz")
    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("a.npy", npy.getvalue() + b"\x00" * 16)
    with pytest.raises(CheckpointError, match=r"header declares \[1000000000000\] float32"):
        load_bytes(buf.getvalue(), tmp_path, "x.npz")


@pytest.mark.parametrize("data", [b"", b"\x00" * 100, b"GIF89a" + os.urandom(64), b"PK\x03\x04garbage"])
def test_wrong_magic_bytes(data: bytes, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        load_bytes(data, tmp_path)


def test_random_corruption_never_escapes_as_another_error(tmp_path: Path) -> None:
    buf = io.BytesIO()
    save({"w": serve.arange(12.0).reshape(3, 4), "n": {"k": [1, 2.5, "s"]}}, buf)
    data = bytearray(buf.getvalue())
    rng = np.random.default_rng(0)
    for _ in range(60):
        bad = bytearray(data)
        for i in rng.integers(0, len(bad), 3):
            bad[i] = int(rng.integers(0, 256))
        with contextlib.suppress(CheckpointError):  # refused or loaded, but never another exception
            load_bytes(bytes(bad), tmp_path)


def test_a_zero_stride_view_claiming_terabytes_is_refused(tmp_path: Path) -> None:
    data = torch_zip(_storage_pickle(2, size=(10**6, 10**6), stride=(0, 0)), {"0": b"\x00" * 8})
    with pytest.raises(CheckpointError, match=r"repeats 1 elements of its storage '0' \(zero strides\) into 4000000"):
        load_bytes(data, tmp_path)


def test_an_expanded_tensor_within_the_bound_still_loads(tmp_path: Path) -> None:
    # torch.save(torch.ones(2).expand(3, 2)): a view repeating its storage, as torch writes an expanded tensor
    loaded = load_bytes(
        torch_zip(_storage_pickle(2, size=(3, 2), stride=(0, 1)), {"0": b"\x00\x00\x80?" * 2}), tmp_path
    )
    np.testing.assert_array_equal(loaded.numpy(), np.ones((3, 2), np.float32))


def test_a_refusal_names_the_file_it_was_loaded_from(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"^weights\.bin: a tensor of size \[2, 2\]"):
        load_bytes(
            torch_zip(_storage_pickle(2, size=(2, 2), stride=(2, 1)), {"0": b"\x00" * 8}), tmp_path, "weights.bin"
        )
    with pytest.raises(CheckpointError, match=r"^the checkpoint file is empty"):  # a buffer has no name
        serve.load(io.BytesIO(b""))
