"""package() in every format against torch-model-archiver 0.12 on the same inputs, and its copy rules and errors."""

from __future__ import annotations

import json
import tarfile
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

import serve
from serve.archive import open_archive, package, packager
from serve.archive.manifest import CREATED_ON_FORMAT
from serve.errors import ArchiveError
from tests.unit.archive.files import CONFIG_YAML, needs_model_archiver, sources, torch_archive, tree, unique_name

FORMATS = ["default", "zip-store", "tgz", "no-archive"]


def _args(tmp_path: Path, name: str) -> dict:
    s = sources(tmp_path)
    return dict(
        model_name=name,
        version="1.0",
        model_file=s.model_file,
        serialized_file=s.serialized_file,
        handler=f"{s.handler.with_suffix('')}:handle",
        extra_files=f"{s.extra_dir},{s.index}",
        requirements_file=s.requirements_file,
        config_file=s.config_file,
    )


def _expected_files(s_dir: Path) -> dict[str, bytes]:
    names = {"model.py": "model.py", "weights.pt": "weights.pt", "my_handler.py": "my_handler.py",
             "vocab.txt": "extra/vocab.txt", "sub/labels.txt": "extra/sub/labels.txt",
             ".hidden_file": "extra/.hidden_file", "index_to_name.json": "index_to_name.json",
             "requirements.txt": "requirements.txt", "model-config.yaml": "model-config.yaml"}  # fmt: skip
    return {arc: (s_dir / src).read_bytes() for arc, src in names.items()}


def _payload(model_dir: Path) -> dict[str, bytes]:
    files = tree(model_dir)
    files.pop("MAR-INF/MANIFEST.json")
    return files


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip(tmp_path: Path, fmt: str) -> None:
    args = _args(tmp_path, "digits")
    out = package(**args, export_path=tmp_path / "store", archive_format=fmt)
    assert out.name == {"default": "digits.mar", "zip-store": "digits.mar", "tgz": "digits.tar.gz"}.get(fmt, "digits")
    with open_archive(out) as archive:
        assert _payload(archive.model_dir) == _expected_files(tmp_path / "src")
        assert archive.model_name == "digits" and archive.model_version == "1.0"
        assert archive.handler == "my_handler:handle"
        assert archive.serialized_file == archive.model_dir / "weights.pt"
        assert archive.model_config == {"minWorkers": 1, "batchSize": 4, "handler": {"topk": 3}}
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [out.name]  # no temporary left behind
    plain = tmp_path / "plain"
    plain.write_text("")  # the permissions any new file gets here (umask), as torch-model-archiver's output has
    assert out.stat().st_mode & 0o666 == plain.stat().st_mode & 0o666


@pytest.mark.parametrize("fmt", FORMATS)
def test_failed_write_keeps_the_old_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    s = sources(tmp_path)
    first = package("m", "1", "tensor", serialized_file=s.serialized_file, export_path=tmp_path / "out",
                    archive_format=fmt)  # fmt: skip
    before = tree(tmp_path / "out")

    def broken_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(packager, "_copy", broken_disk)
    monkeypatch.setattr(tarfile.TarFile, "addfile", broken_disk)
    with pytest.raises(OSError, match="No space left"):
        package("m", "2", "tensor", serialized_file=s.serialized_file, export_path=tmp_path / "out",
                archive_format=fmt, force=True)  # fmt: skip
    assert tree(tmp_path / "out") == before and [p.name for p in (tmp_path / "out").iterdir()] == [first.name]


def _compare_manifests(ours: dict, ref: dict) -> None:
    assert list(ours) == list(ref)
    assert list(ours["model"]) == list(ref["model"])
    for key in ("runtime",):
        assert ours[key] == ref[key]
    for key, value in ref["model"].items():
        assert ours["model"][key] == value, key
    for m in (ours, ref):
        datetime.strptime(m["createdOn"], CREATED_ON_FORMAT)
    assert ours["archiverVersion"] == serve.__version__ and ref["archiverVersion"] == "0.12.0"


@needs_model_archiver
@pytest.mark.parametrize("fmt", FORMATS)
def test_same_archive_as_torch_model_archiver(tmp_path: Path, fmt: str) -> None:
    name = unique_name()
    args = _args(tmp_path, name)
    ours = package(**args, export_path=tmp_path / "ours", archive_format=fmt)
    ref = torch_archive(tmp_path / "ref", archive_format=fmt, **args)
    with open_archive(ours) as a, open_archive(ref) as b:
        _compare_manifests(a.manifest, b.manifest)
        assert _payload(a.model_dir) == _payload(b.model_dir)
    if fmt == "tgz":
        with tarfile.open(ours) as t1, tarfile.open(ref) as t2:
            assert sorted(t1.getnames()) == sorted(t2.getnames())
            assert all(n.startswith(f"{name}/") for n in t1.getnames())
    elif fmt != "no-archive":
        with zipfile.ZipFile(ours) as z1, zipfile.ZipFile(ref) as z2:
            assert sorted(z1.namelist()) == sorted(z2.namelist())
            assert z1.namelist()[-1] == z2.namelist()[-1] == "MAR-INF/MANIFEST.json"  # written last
            assert {i.compress_type for i in z1.infolist()} == {i.compress_type for i in z2.infolist()}


@needs_model_archiver
@pytest.mark.parametrize(
    "handler, extra",
    [("image_classifier", {}), ("base_handler", {"runtime": "python3"}), ("text_classifier", {"version": "2.5-beta"})],
)
def test_minimal_manifests_match(tmp_path: Path, handler: str, extra: dict) -> None:
    name = unique_name()
    args = dict(model_name=name, version="1.0", handler=handler) | extra
    ours, ref = package(**args, export_path=tmp_path / "ours"), torch_archive(tmp_path / "ref", **args)
    with open_archive(ours) as a, open_archive(ref) as b:
        _compare_manifests(a.manifest, b.manifest)
        assert _payload(a.model_dir) == _payload(b.model_dir) == {}  # a built-in handler is not copied


@needs_model_archiver
def test_manifest_text_is_formatted_like_torch_model_archiver(tmp_path: Path) -> None:
    name = unique_name()
    ours = package(name, "1.0", "image_classifier", export_path=tmp_path / "ours", archive_format="no-archive")
    ref = torch_archive(tmp_path / "ref", model_name=name, version="1.0", handler="image_classifier",
                        archive_format="no-archive")  # fmt: skip
    text = (ours / "MAR-INF/MANIFEST.json").read_text()
    ref_text = (ref / "MAR-INF/MANIFEST.json").read_text()
    strip = [line for line in text.splitlines() if "createdOn" not in line and "archiverVersion" not in line]
    ref_strip = [line for line in ref_text.splitlines() if "createdOn" not in line and "archiverVersion" not in line]
    assert strip == ref_strip


def test_torch_compat_flag_in_manifest(tmp_path: Path) -> None:
    out = package("m", "1.0", "tensor", torch_compat=True, export_path=tmp_path)
    with zipfile.ZipFile(out) as z:
        model = json.loads(z.read("MAR-INF/MANIFEST.json"))["model"]
    assert list(model) == ["modelName", "handler", "modelVersion", "torchCompat"] and model["torchCompat"] is True


def test_handler_forms_copy_the_module_file(tmp_path: Path) -> None:
    (tmp_path / "h.py").write_text("def fn(d, c): return d\n")
    for i, handler in enumerate(["h", "h.py", "h:fn", "h.py:fn"]):
        out = package(f"m{i}", "1", str(tmp_path / handler), export_path=tmp_path / "out", archive_format="no-archive")
        assert tree(out).keys() == {"h.py", "MAR-INF/MANIFEST.json"}
        assert json.loads((out / "MAR-INF/MANIFEST.json").read_text())["model"]["handler"] == handler


def test_globs_and_same_file_twice(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = sources(tmp_path)
    out = package("m", "1", str(s.handler), extra_files=f"{s.dir}/*.json,{s.handler},{s.dir}/*.nothing",
                  export_path=tmp_path / "out", archive_format="no-archive")  # fmt: skip
    assert sorted(tree(out)) == ["MAR-INF/MANIFEST.json", "index_to_name.json", "my_handler.py"]
    assert "did not match any file" in caplog.text


def test_two_files_with_one_name_are_refused(tmp_path: Path) -> None:
    s = sources(tmp_path)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "model.py").write_text("different")
    with pytest.raises(ArchiveError, match=r"two different files would be stored as 'model\.py'"):
        package("m", "1", "tensor", model_file=s.model_file, extra_files=str(tmp_path / "other"),
                export_path=tmp_path / "out")  # fmt: skip
    assert not (tmp_path / "out" / "m.mar").exists()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"model_name": "bad name"}, "contains special characters"),
        ({"model_name": "-x"}, "contains special characters"),
        ({"version": "1/2"}, "URL path"),
        ({"model_file": "nope.py"}, "--model-file: file does not exist"),
        ({"serialized_file": "nope.pt"}, "--serialized-file: file does not exist"),
        ({"handler": "nope_handler"}, "neither a built-in handler"),
        ({"extra_files": "nope.txt"}, "File does not exist: nope.txt"),
        ({"archive_format": "rar"}, "archive format 'rar'"),
        ({"runtime": "java"}, "runtime 'java'"),
    ],
)
def test_bad_arguments_write_nothing(tmp_path: Path, kwargs: dict, message: str) -> None:
    args = dict(model_name="m", version="1", handler="tensor", export_path=tmp_path / "out") | kwargs
    with pytest.raises(ArchiveError, match=message):
        package(**args)
    assert list(tmp_path.iterdir()) == []  # not even the export directory


def test_bad_config_file_is_refused_before_writing(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("batchSize: 4\nhandler: &anchor\n  x: 1\n")
    with pytest.raises(ArchiveError, match="line 2: anchors"):
        package("m", "1", "tensor", config_file=cfg, export_path=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", FORMATS)
def test_existing_output_needs_force(tmp_path: Path, fmt: str) -> None:
    first = package("m", "1", "tensor", export_path=tmp_path, archive_format=fmt)
    with pytest.raises(ArchiveError, match=r"already exists\.\nPlease specify --force/-f option"):
        package("m", "2", "tensor", export_path=tmp_path, archive_format=fmt)
    second = package("m", "2", "tensor", export_path=tmp_path, archive_format=fmt, force=True)
    assert second == first
    with open_archive(second) as a:
        assert a.model_version == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]


def test_export_path_is_created_but_not_over_a_file(tmp_path: Path) -> None:
    assert package("m", "1", "tensor", export_path=tmp_path / "a" / "b").parent == tmp_path / "a" / "b"
    (tmp_path / "f").write_text("")
    with pytest.raises(ArchiveError, match="is not a directory"):
        package("m", "1", "tensor", export_path=tmp_path / "f")


def test_progress_bar_for_large_files_when_forced(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    big = tmp_path / "big.pt"
    big.write_bytes(b"\0" * (11 << 20))
    package("m", "1", "tensor", serialized_file=big, export_path=tmp_path / "a", archive_format="zip-store",
            progress=True)  # fmt: skip
    err = capsys.readouterr().err
    assert "big.pt [" in err and "100%" in err and err.endswith("\n")
    package("m", "1", "tensor", serialized_file=big, export_path=tmp_path / "b", archive_format="zip-store")
    assert capsys.readouterr().err == ""  # not a terminal
    (tmp_path / "small.pt").write_bytes(b"\0" * 100)
    package("m", "1", "tensor", serialized_file=tmp_path / "small.pt", export_path=tmp_path / "c", progress=True)
    assert capsys.readouterr().err == ""  # small files never show a bar


def test_config_yaml_is_packed_verbatim(tmp_path: Path) -> None:
    s = sources(tmp_path)
    out = package("m", "1", "tensor", config_file=s.config_file, export_path=tmp_path, archive_format="tgz")
    with tarfile.open(out) as t:
        assert t.extractfile("m/model-config.yaml").read().decode() == CONFIG_YAML  # type: ignore[union-attr]
