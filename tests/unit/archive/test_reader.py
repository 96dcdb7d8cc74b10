"""open_archive on every source kind: .mar, zip-store, .tar.gz (TorchServe's and hand-made), directories."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from serve.archive import open_archive, package
from serve.errors import ArchiveError
from tests.unit.archive.files import needs_model_archiver, sources, torch_archive, tree, unique_name


def _manifest(**model: object) -> bytes:
    return json.dumps({"runtime": "python", "model": {"modelName": "m", "handler": "tensor"} | model}).encode()


def _zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def _tgz(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


@needs_model_archiver
@pytest.mark.parametrize("fmt", ["default", "zip-store", "tgz", "no-archive"])
def test_torch_model_archiver_output_opens(tmp_path: Path, fmt: str) -> None:
    s = sources(tmp_path)
    name = unique_name()
    ref = torch_archive(tmp_path / "ref", model_name=name, version="3.1", model_file=s.model_file,
                        serialized_file=s.serialized_file, handler=s.handler, extra_files=str(s.index),
                        config_file=s.config_file, archive_format=fmt)  # fmt: skip
    with open_archive(ref) as a:
        assert (a.model_name, a.model_version, a.handler, a.runtime) == (name, "3.1", "my_handler.py", "python")
        assert a.model_file is not None and a.model_file.read_bytes() == s.model_file.read_bytes()
        assert a.model_config["handler"] == {"topk": 3}
        assert a.extracted is (fmt != "no-archive")


def test_missing_manifest_gives_torchserve_defaults(tmp_path: Path) -> None:
    for src in (
        _zip(tmp_path / "resnet-18.mar", {"x.txt": b"1"}),
        _tgz(tmp_path / "resnet-18.tar.gz", {"r/x.txt": b"1"}),
    ):
        with open_archive(src) as a:
            assert a.manifest["model"] == {"modelName": "resnet-18", "handler": "base_handler", "modelVersion": "1.0"}
            assert tree(a.model_dir) == {"x.txt": b"1"}


def test_manifest_defaults_and_unknown_keys(tmp_path: Path) -> None:
    raw = json.dumps({"model": {"modelName": "m", "modelVersion": 2, "envelope": "json", "custom": [1]},
                      "description": "kept"}).encode()  # fmt: skip
    with open_archive(_zip(tmp_path / "m.mar", {"MAR-INF/MANIFEST.json": raw})) as a:
        assert (a.runtime, a.model_version, a.handler) == ("python", "2", "base_handler")
        assert a.manifest["description"] == "kept" and a.manifest["model"]["custom"] == [1]


def test_tar_layouts(tmp_path: Path) -> None:
    files = {"MAR-INF/MANIFEST.json": _manifest(), "model.py": b"#"}
    variants = {
        "prefixed": {f"m/{k}": v for k, v in files.items()},  # torch-model-archiver's tgz
        "dot": {f"./{k}": v for k, v in files.items()},  # tar czf m.tar.gz -C dir .
        "flat": files,  # tar czf m.tar.gz MAR-INF model.py: TorchServe would lose MAR-INF/ here
    }
    for label, content in variants.items():
        with open_archive(_tgz(tmp_path / f"{label}.tar.gz", content)) as a:
            assert tree(a.model_dir) == files, label


def test_kind_is_sniffed_not_taken_from_the_name(tmp_path: Path) -> None:
    with open_archive(_tgz(tmp_path / "m.mar", {"m/MAR-INF/MANIFEST.json": _manifest()})) as a:
        assert a.model_name == "m"
    (tmp_path / "junk.mar").write_bytes(b"hello, not an archive")
    with pytest.raises(ArchiveError, match="not a model archive"):
        open_archive(tmp_path / "junk.mar")
    with pytest.raises(ArchiveError, match="does not exist"):
        open_archive(tmp_path / "absent.mar")


def test_directory_is_used_in_place(tmp_path: Path) -> None:
    out = package("m", "1", "tensor", export_path=tmp_path, archive_format="no-archive")
    with open_archive(out) as a:
        assert a.model_dir == out and not a.extracted
    assert out.is_dir()  # close() never removes a directory it did not create


def test_directory_with_one_subdirectory(tmp_path: Path) -> None:
    package("inner", "1", "tensor", export_path=tmp_path / "outer", archive_format="no-archive")
    with open_archive(tmp_path / "outer") as a:
        assert a.model_dir == tmp_path / "outer" / "inner" and a.model_name == "inner"
    only_manifest = tmp_path / "solo"
    (only_manifest / "MAR-INF").mkdir(parents=True)
    (only_manifest / "MAR-INF" / "MANIFEST.json").write_bytes(_manifest())
    with open_archive(only_manifest) as a:  # MAR-INF alone is not "the one sub-directory"
        assert a.model_dir == only_manifest and a.handler == "tensor"


def test_directory_with_internal_symlink_is_fine(tmp_path: Path) -> None:
    out = package("m", "1", "tensor", export_path=tmp_path, archive_format="no-archive")
    (out / "weights.pt").write_bytes(b"w")
    (out / "alias.pt").symlink_to("weights.pt")
    with open_archive(out) as a:
        assert (a.model_dir / "alias.pt").read_bytes() == b"w"


def test_dest_dir(tmp_path: Path) -> None:
    src = package("m", "1", "tensor", export_path=tmp_path)
    with open_archive(src, dest_dir=tmp_path / "new" / "x") as a:
        assert a.model_dir == tmp_path / "new" / "x" and (a.model_dir / "MAR-INF/MANIFEST.json").is_file()
    assert (tmp_path / "new" / "x").is_dir()  # the caller's directory stays
    (tmp_path / "empty").mkdir()
    open_archive(src, dest_dir=tmp_path / "empty").close()
    with pytest.raises(ArchiveError, match="must be a new or empty directory"):
        open_archive(src, dest_dir=tmp_path / "empty")


def test_temporary_extraction_is_removed_by_close(tmp_path: Path) -> None:
    a = open_archive(package("m", "1", "tensor", export_path=tmp_path))
    assert a.model_dir.is_dir() and a.extracted
    a.close()
    assert not a.model_dir.exists()


def test_torch_compat_from_manifest_or_model_config(tmp_path: Path) -> None:
    with open_archive(package("a", "1", "tensor", torch_compat=True, export_path=tmp_path)) as a:
        assert a.torch_compat
    cfg = tmp_path / "c.yaml"
    cfg.write_text("torchCompat: true\n")
    with open_archive(package("b", "1", "tensor", config_file=cfg, export_path=tmp_path)) as a:
        assert a.torch_compat
    with open_archive(package("c", "1", "tensor", export_path=tmp_path)) as a:
        assert not a.torch_compat and a.model_config == {}


@pytest.mark.parametrize(
    "handler, files",
    [
        ("h:handle", {"h.py": b""}),
        ("h.py:handle", {"h.py": b""}),
        ("pkg.h", {"pkg/h.py": b""}),
        ("pkg", {"pkg/__init__.py": b""}),
        ("image_classifier", {}),
    ],
)
def test_handler_references(tmp_path: Path, handler: str, files: dict[str, bytes]) -> None:
    src = _zip(tmp_path / "m.mar", {"MAR-INF/MANIFEST.json": _manifest(handler=handler)} | files)
    with open_archive(src) as a:
        assert a.handler == handler
