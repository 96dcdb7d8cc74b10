"""Workflow archives: workflow-archiver writes torch-workflow-archiver's layout (files at the root under their base
names, WAR-INF/MANIFEST.json with its keys and createdOn format), refuses what it would silently get wrong, and the
server's reader refuses a hostile or incomplete .war before using it."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

from serve.archive.war import WAR_MANIFEST, open_workflow_archive, package_workflow
from serve.cli.workflow_archiver import main
from serve.errors import ArchiveError


@pytest.fixture
def files(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "wf.yaml").write_text("models: {}\ndag:\n  f: []\n")
    (src / "handler.py").write_text("def f(data, context):\n    return data\n")
    (src / "sub" / "labels.json").write_text("{}")
    return src


def test_layout_and_manifest_are_torch_workflow_archivers(files: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    out.mkdir()
    assert main(["--workflow-name", "wf", "--spec-file", str(files / "wf.yaml"), "--handler",
                 str(files / "handler.py"), "--extra-files", str(files / "sub" / "labels.json"),
                 "--export-path", str(out)]) == 0  # fmt: skip
    with zipfile.ZipFile(out / "wf.war") as zf:
        assert sorted(zf.namelist()) == ["WAR-INF/MANIFEST.json", "handler.py", "labels.json", "wf.yaml"]
        manifest = json.loads(zf.read(WAR_MANIFEST))
    assert set(manifest) == {"createdOn", "workflow", "archiverVersion"}
    assert manifest["workflow"] == {"workflowName": "wf", "specFile": "wf.yaml", "handler": "handler.py"}
    datetime.strptime(manifest["createdOn"], "%d/%m/%Y %H:%M:%S")  # torch-workflow-archiver's format
    with open_workflow_archive(out / "wf.war", tmp_path / "x") as war:
        assert war.workflow_name == "wf" and war.spec_file.read_text().startswith("models")
        assert war.handler_file == tmp_path / "x" / "handler.py" and (tmp_path / "x" / "labels.json").is_file()
    assert not (tmp_path / "x").exists()  # closing removes the extraction


def test_force_and_the_refusals(files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--workflow-name", "wf", "--spec-file", str(files / "wf.yaml"), "--export-path", str(tmp_path)]
    assert main(args) == 0
    assert main(args) == 1 and "Please specify --force/-f option" in capsys.readouterr().err
    assert main([*args, "-f"]) == 0
    assert main([*args[:1], "bad name!", *args[2:]]) == 1 and "special characters" in capsys.readouterr().err
    (files / "other").mkdir()
    (files / "other" / "wf.yaml").write_text("")
    assert main([*args, "-f", "--extra-files", str(files / "other" / "wf.yaml")]) == 1
    assert "two files are named wf.yaml" in capsys.readouterr().err
    assert main([*args, "-f", "--extra-files", str(files / "sub")]) == 1  # files only, as torch-workflow-archiver
    assert main([*args[:-1], str(tmp_path / "missing")]) == 1 and "not a directory" in capsys.readouterr().err
    assert not list(tmp_path.glob(".*partial"))


def test_module_entry_point(files: Path, tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "serve.cli.workflow_archiver", "--workflow-name", "m",
                          "--spec-file", str(files / "wf.yaml"), "--export-path", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0 and run.stdout == "" and (tmp_path / "m.war").is_file(), run.stderr


def _war(path: Path, entries: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in entries.items():
            zf.writestr(name, text)
    return path


MANIFEST = {"workflow": {"workflowName": "w", "specFile": "wf.yaml", "handler": "h.py"}}


@pytest.mark.parametrize(
    "entries,needle",
    [
        ({"../evil.py": "x", WAR_MANIFEST: json.dumps(MANIFEST)}, ".."),
        ({"wf.yaml": "x"}, "has no WAR-INF/MANIFEST.json"),
        ({"wf.yaml": "x", WAR_MANIFEST: "{"}, "is not JSON"),
        ({"wf.yaml": "x", WAR_MANIFEST: "{}"}, "Missing Workflow entry"),
        ({"wf.yaml": "x", WAR_MANIFEST: json.dumps(MANIFEST)}, "handler h.py is not a file"),
        ({"wf.yaml": "x", WAR_MANIFEST: json.dumps({"workflow": {**MANIFEST["workflow"], "specFile": "../../etc"}})},
         "specFile"),
    ],
)  # fmt: skip
def test_reader_refuses_bad_archives(tmp_path: Path, entries: dict[str, str], needle: str) -> None:
    with pytest.raises(ArchiveError) as raised:
        open_workflow_archive(_war(tmp_path / "w.war", entries), tmp_path / "out")
    assert needle in str(raised.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil.py").exists()


def test_reader_refuses_a_file_that_is_no_zip(tmp_path: Path) -> None:
    (tmp_path / "w.war").write_text("not a zip")
    with pytest.raises(ArchiveError, match=r"is not a \.war"):
        open_workflow_archive(tmp_path / "w.war", tmp_path / "out")


def test_package_workflow_returns_the_path(files: Path, tmp_path: Path) -> None:
    out = package_workflow("wf", files / "wf.yaml", handler=files / "handler.py", export_path=tmp_path)
    assert out == tmp_path / "wf.war"
