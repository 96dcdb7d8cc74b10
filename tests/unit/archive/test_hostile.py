"""Hostile archives, each built here byte by byte: every one is refused with an ArchiveError that names the problem,
and the whole tmp tree is unchanged afterwards (the extraction directory, a temporary one, is gone too).
"""

from __future__ import annotations

import io
import json
import os
import stat
import struct
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from serve.archive import DEFAULT_LIMITS, Limits, open_archive
from serve.archive.safety import Meter
from serve.errors import ArchiveError
from tests.unit.archive.files import tree

MANIFEST = json.dumps({"runtime": "python", "model": {"modelName": "m", "handler": "tensor"}}).encode()


def _zip(path: Path, entries: list[tuple[str | zipfile.ZipInfo, bytes]], method: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in entries:
            z.writestr(name, data)
    return path


def _symlink_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            t.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def _lying_zip(path: Path) -> Path:
    """A zip whose headers declare 10 bytes for an entry that inflates to 100,000."""
    _zip(path, [("w.pt", b"\0" * 100_000)])
    with zipfile.ZipFile(path) as z:
        local = z.getinfo("w.pt").header_offset
    raw = bytearray(path.read_bytes())
    central = raw.rfind(b"PK\x01\x02")
    raw[local + 22 : local + 26] = struct.pack("<I", 10)  # the local header's uncompressed size
    raw[central + 24 : central + 28] = struct.pack("<I", 10)  # the central directory's
    path.write_bytes(bytes(raw))
    return path


def _encrypted_zip(path: Path) -> Path:
    """A zip whose one entry is flagged encrypted (general purpose bit 0; zipfile cannot write such a file)."""
    _zip(path, [("secret.bin", b"x")])
    raw = bytearray(path.read_bytes())
    central = raw.rfind(b"PK\x01\x02")
    raw[6] |= 0x1  # the local header's flags
    raw[central + 8] |= 0x1  # the central directory's
    path.write_bytes(bytes(raw))
    return path


ZIP_CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "zip slip": (lambda p: _zip(p, [("../evil.py", b"x")]), r"'../evil.py' would be written outside"),
    "deep slip": (lambda p: _zip(p, [("a/../../evil.py", b"x")]), "would be written outside"),
    "absolute": (lambda p: _zip(p, [("/tmp/evil.py", b"x")]), "is an absolute path"),
    "drive letter": (lambda p: _zip(p, [("C:/evil.py", b"x")]), "is an absolute path"),
    "backslash": (lambda p: _zip(p, [("..\\evil.py", b"x")]), "contains a backslash"),
    "symlink entry": (lambda p: _zip(p, [(_symlink_info("link"), b"/etc/passwd")]), "is a symbolic link"),
    "duplicate": (lambda p: _zip(p, [("a.py", b"1"), ("./a.py", b"2")]), "two entries named 'a.py'"),
    "file and dir": (lambda p: _zip(p, [("a", b"1"), ("a/b", b"2")]), "both a file and a directory"),
    "deflate bomb": (lambda p: _zip(p, [("w.pt", b"\0" * (4 << 20))]), "possible zip bomb"),
    "lying header": (_lying_zip, "w.pt"),
    # no entry is over the 1 MiB ratio floor, but together they inflate ~1000x (issue 17: 4,000 of them were 4.2 GB)
    "many small bombs": (lambda p: _zip(p, [(f"z{i}", b"\0" * (1 << 20)) for i in range(3)]), "the archive 'm.mar'"),
    "encrypted": (_encrypted_zip, "is encrypted"),
    "bad manifest json": (lambda p: _zip(p, [("MAR-INF/MANIFEST.json", b"{nope")]), "is not valid JSON"),
    "manifest not object": (lambda p: _zip(p, [("MAR-INF/MANIFEST.json", b"[1]")]), "must hold a JSON object"),
    "manifest no model": (lambda p: _zip(p, [("MAR-INF/MANIFEST.json", b'{"runtime": "python"}')]), "no 'model'"),
    "manifest is a dir": (lambda p: _zip(p, [("MAR-INF/MANIFEST.json/", b"")]), "is not a regular file"),
    "huge manifest": (
        lambda p: _zip(p, [("MAR-INF/MANIFEST.json", b" " * (2 << 20))], zipfile.ZIP_STORED),
        "a small JSON object",
    ),
    "no manifest, bad name": (lambda p: _zip(p.with_name("bad name.mar"), [("x", b"")]), "special characters"),
}


def _manifest_zip(model: dict, files: dict[str, bytes] | None = None, **top: object) -> Callable[[Path], Path]:
    raw = json.dumps({"runtime": "python", **top, "model": {"modelName": "m", "handler": "tensor"} | model})
    return lambda p: _zip(p, [("MAR-INF/MANIFEST.json", raw.encode()), *(files or {}).items()])


def _torchscript(*names: str) -> bytes:
    """A zip laid out as torch.jit.save lays one out (entry contents do not matter to the check)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name in ("m/data.pkl", "m/version", *names):
            z.writestr(name, b"\x80\x02N.")
    return out.getvalue()


TORCHSCRIPT = _torchscript("m/constants.pkl", "m/code/__torch__/m.py")


MANIFEST_CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "name type": (_manifest_zip({"modelName": 7}), "model.modelName must be a string"),
    "name chars": (_manifest_zip({"modelName": "a/b"}), "special characters"),
    "version slash": (_manifest_zip({"modelVersion": "1/../2"}), "URL path"),
    "runtime": (_manifest_zip({}, runtime="java"), "runtime 'java'"),
    "torchCompat type": (_manifest_zip({"torchCompat": "yes"}), "torchCompat must be true or false"),
    "weights outside": (_manifest_zip({"serializedFile": "../w.pt"}), r"serializedFile '../w.pt' would be written"),
    "weights absolute": (_manifest_zip({"serializedFile": "/etc/passwd"}), "is an absolute path"),
    "weights missing": (_manifest_zip({"serializedFile": "w.pt"}), "names 'w.pt', which the archive does not hold"),
    "model file missing": (_manifest_zip({"modelFile": "model.py"}), "modelFile names 'model.py'"),
    "config is a dir": (_manifest_zip({"configFile": "cfg"}, {"cfg/x": b""}), "configFile names 'cfg'"),
    "extra outside": (_manifest_zip({"extraFiles": ["../x"]}), "extraFiles '../x' would be written"),
    "handler missing": (_manifest_zip({"handler": "h:handle"}), r"neither a built-in handler .* \(h.py is missing\)"),
    "handler outside": (_manifest_zip({"handler": "../h.py"}), "handler '../h.py' would be written"),
    "bad config": (_manifest_zip({"configFile": "c.yaml"}, {"c.yaml": b"a: [1, 2\n"}), "unterminated flow"),
    "torchscript weights": (
        _manifest_zip({"serializedFile": "w.pt"}, {"w.pt": TORCHSCRIPT}),
        r"'w.pt': this is a TorchScript archive .* not supported by serve\. Save the weights instead",
    ),
    "torchscript code only": (
        _manifest_zip({"serializedFile": "w.pt", "handler": "image_classifier"}, {"w.pt": _torchscript("m/code/a.py")}),
        "TorchScript is not supported",
    ),
    "deep manifest": (
        lambda p: _zip(p, [("MAR-INF/MANIFEST.json", MANIFEST[:-2] + b', "x": ' + b"[" * 9000 + b"]" * 9000 + b"}}")]),
        r"MANIFEST.json nests lists or mappings more than 64 levels",
    ),
    "manifest at 65 levels": (_manifest_zip({"x": json.loads("[" * 63 + "]" * 63)}), "more than 64 levels"),
    "deep config": (_manifest_zip({"configFile": "c.yaml"}, {"c.yaml": b"a: " + b"[" * 50_000}), "than 64 levels"),
    "deep block config": (
        _manifest_zip({"configFile": "c.yaml"}, {"c.yaml": "".join(" " * i + "k:\n" for i in range(1000)).encode()}),
        "more than 64 levels",
    ),
}

TAR_CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "tar symlink": (lambda p: _tar(p, [(_member("m/x", tarfile.SYMTYPE, "/etc/passwd"), b"")]), "symbolic link"),
    "tar hardlink": (lambda p: _tar(p, [(_member("m/x", tarfile.LNKTYPE, "/etc/passwd"), b"")]), "hard link"),
    "tar device": (lambda p: _tar(p, [(_member("m/x", tarfile.CHRTYPE), b"")]), "a device file"),
    "tar fifo": (lambda p: _tar(p, [(_member("m/x", tarfile.FIFOTYPE), b"")]), "a fifo"),
    "tar slip": (lambda p: _tar(p, [(_member("m/../../evil.py"), b"x")]), "would be written outside"),
    "tar absolute": (lambda p: _tar(p, [(_member("/etc/evil"), b"x")]), "is an absolute path"),
    "tar duplicate": (lambda p: _tar(p, [(_member("m/a"), b"1"), (_member("m/a"), b"2")]), "two entries named 'a'"),
    "tar bomb": (lambda p: _tar(p, [(_member("m/w.pt"), b"\0" * (4 << 20))]), "possible zip bomb"),
}


def _refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build: Callable[[Path], Path], message: str,
             limits: Limits = DEFAULT_LIMITS, dest: bool = False) -> None:  # fmt: skip
    (tmp_path / "in").mkdir(parents=True)
    (tmp_path / "systmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "systmp"))
    src = build(tmp_path / "in" / "m.mar")
    before = tree(tmp_path)
    with pytest.raises(ArchiveError, match=message):
        open_archive(src, dest_dir=tmp_path / "dest" / "x" if dest else None, limits=limits)
    assert tree(tmp_path) == before
    assert list((tmp_path / "systmp").iterdir()) == []
    assert not (tmp_path / "dest" / "x").exists()


@pytest.mark.parametrize("case", list(ZIP_CASES) + list(MANIFEST_CASES) + list(TAR_CASES))
def test_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    build, message = (ZIP_CASES | MANIFEST_CASES | TAR_CASES)[case]
    _refused(tmp_path, monkeypatch, build, message)


@pytest.mark.parametrize("case", ["zip slip", "symlink entry", "tar slip", "weights outside", "lying header"])
def test_refused_into_a_dest_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    build, message = (ZIP_CASES | MANIFEST_CASES | TAR_CASES)[case]
    _refused(tmp_path, monkeypatch, build, message, dest=True)


def test_entry_count_and_total_size_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    many = [(f"f{i}", b"") for i in range(6)]
    _refused(tmp_path / "a", monkeypatch, lambda p: _zip(p, many), "more than 5 entries", Limits(max_entries=5))
    big = [("a", b"1" * 600), ("b", b"2" * 600)]
    _refused(tmp_path / "b", monkeypatch, lambda p: _zip(p, big), "more than 1000 bytes", Limits(max_total_bytes=1000))
    tar_big = [(_member("m/a"), b"1" * 600), (_member("m/b"), b"2" * 600)]
    _refused(tmp_path / "c", monkeypatch, lambda p: _tar(p, tar_big), "more than 1000 bytes",
             Limits(max_total_bytes=1000))  # fmt: skip


def test_default_entry_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    many = [(f"f{i}", b"") for i in range(10_001)]
    _refused(tmp_path, monkeypatch, lambda p: _zip(p, many, zipfile.ZIP_STORED), "more than 10000 entries")


def test_compressible_but_genuine_archive_passes_with_raised_ratio(tmp_path: Path) -> None:
    src = _zip(tmp_path / "m.mar", [("MAR-INF/MANIFEST.json", MANIFEST), ("w.pt", b"\0" * (4 << 20))])
    with open_archive(src, limits=Limits(max_ratio=2000)) as a:
        assert (a.model_dir / "w.pt").stat().st_size == 4 << 20


def test_meter_counts_real_bytes() -> None:
    spent = [0]
    meter = Meter("w.pt", 10, Limits(), spent)
    meter.add(8)
    with pytest.raises(ArchiveError, match="unpacks to more than the 10 bytes its header declares"):
        meter.add(8)
    short = Meter("v.pt", 10, Limits(), [0])
    short.add(4)
    with pytest.raises(ArchiveError, match="unpacks to 4 bytes but its header declares 10"):
        short.finish()


def test_meter_holds_the_whole_archive_to_the_ratio() -> None:
    """Bytes really produced count against the archive's size too, whatever sizes the headers declared."""
    spent = [0]
    meter = Meter("a", 3 << 20, Limits(), spent, packed=10_000)
    meter.add(1 << 20)  # at the ratio floor: not yet judged
    with pytest.raises(ArchiveError, match=r"the archive \(at entry 'b'\) unpacks from 10000 to"):
        Meter("b", 3 << 20, Limits(), spent, packed=10_000).add(1 << 20)


def test_whole_archive_ratio_counts_in_tar_and_zip_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zeros = [(_member(f"m/z{i}"), b"\0" * (1 << 20)) for i in range(3)]
    _refused(tmp_path / "t", monkeypatch, lambda p: _tar(p, zeros), "possible zip bomb")
    many = [(f"z{i}", b"\0" * (1 << 20)) for i in range(3)]
    src = _zip(tmp_path / "m.mar", [("MAR-INF/MANIFEST.json", MANIFEST), *many])
    with open_archive(src, limits=Limits(max_ratio=2000)) as a:  # raising the ratio lets a genuine one through
        assert (a.model_dir / "z2").stat().st_size == 1 << 20


def test_torchscript_weights_are_left_to_a_custom_handler(tmp_path: Path) -> None:
    """A handler of the archive's own may load TorchScript its own way; only built-in handlers are judged early."""
    src = _manifest_zip({"serializedFile": "w.pt", "handler": "h.py"}, {"w.pt": TORCHSCRIPT, "h.py": b""})
    with open_archive(src(tmp_path / "m.mar")) as a:
        assert (a.model_dir / "w.pt").read_bytes() == TORCHSCRIPT
    plain = _manifest_zip({"serializedFile": "w.pt"}, {"w.pt": _torchscript("m/data/0")})  # a torch.save zip
    with open_archive(plain(tmp_path / "p.mar")) as a:
        assert (a.model_dir / "w.pt").exists()


def test_nesting_within_the_limit_is_accepted(tmp_path: Path) -> None:
    deep = json.loads("[" * 62 + "]" * 62)  # the manifest, "model", then 62 lists: 64 levels
    config = b"a: " + b"[" * 63 + b"]" * 63 + b"\n"
    src = _manifest_zip({"x": deep, "configFile": "c.yaml"}, {"c.yaml": config})(tmp_path / "m.mar")
    with open_archive(src) as a:
        assert (a.model_dir / "c.yaml").exists()


def test_directory_symlink_escapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s")
    model = tmp_path / "model"
    (model / "MAR-INF").mkdir(parents=True)
    (model / "MAR-INF" / "MANIFEST.json").write_bytes(MANIFEST)
    (model / "w.pt").symlink_to(secret)
    with pytest.raises(ArchiveError, match=r"'w.pt' in the model directory is a symlink to .*secret.txt"):
        open_archive(model)
    (model / "w.pt").unlink()
    (model / "sub").mkdir()
    (model / "sub" / "up").symlink_to(tmp_path)
    with pytest.raises(ArchiveError, match="is a symlink to"):
        open_archive(model)
    (model / "sub" / "up").unlink()
    os.mkfifo(model / "pipe")
    with pytest.raises(ArchiveError, match="'pipe' in the model directory is not a regular file"):
        open_archive(model)


def test_directory_single_subdir_symlink_escape(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "only").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ArchiveError, match="leads outside the model directory"):
        open_archive(tmp_path / "store")
