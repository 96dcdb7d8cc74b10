"""The `model-archiver` command line: torch-model-archiver's flags, and clear errors with exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from serve.archive import open_archive
from serve.cli.model_archiver import main
from tests.unit.archive.files import needs_model_archiver, sources, torch_archive, tree, unique_name


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    captured = capsys.readouterr()
    assert captured.out == ""
    return rc, captured.err


def test_full_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    s = sources(tmp_path)
    rc, err = _run(
        capsys,
        "--model-name", "digits", "-v", "2.0", "--model-file", str(s.model_file),
        "--serialized-file", str(s.serialized_file), "--handler", f"{s.handler}:handle",
        "--extra-files", f"{s.index},{s.extra_dir}", "-r", str(s.requirements_file), "-c", str(s.config_file),
        "--export-path", str(tmp_path / "store"), "--torch-compat",
    )  # fmt: skip
    assert (rc, err) == (0, "")  # quiet on success, as torch-model-archiver
    with open_archive(tmp_path / "store" / "digits.mar") as a:
        assert a.manifest["model"] == {
            "modelName": "digits", "serializedFile": "weights.pt", "handler": "my_handler.py:handle",
            "modelFile": "model.py", "modelVersion": "2.0", "requirementsFile": "requirements.txt",
            "configFile": "model-config.yaml", "torchCompat": True,
        }  # fmt: skip
        assert a.torch_compat and a.model_config["batchSize"] == 4


@needs_model_archiver
@pytest.mark.parametrize("fmt", ["default", "tgz", "no-archive", "zip-store"])
def test_same_files_as_torch_model_archiver_cli(tmp_path: Path, capsys: pytest.CaptureFixture, fmt: str) -> None:
    s = sources(tmp_path)
    name = unique_name()
    rc, _ = _run(capsys, "--model-name", name, "--version", "1.0", "--handler", "image_classifier", "--extra-files",
                 str(s.extra_dir), "--archive-format", fmt, "--export-path", str(tmp_path / "ours"))  # fmt: skip
    assert rc == 0
    ref = torch_archive(tmp_path / "ref", model_name=name, version="1.0", handler="image_classifier",
                        extra_files=str(s.extra_dir), archive_format=fmt)  # fmt: skip
    ours = next((tmp_path / "ours").iterdir())
    assert ours.name == ref.name
    with open_archive(ours) as a, open_archive(ref) as b:
        assert tree(a.model_dir).keys() == tree(b.model_dir).keys()


def test_default_export_path_is_the_current_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert _run(capsys, "--model-name", "m", "-v", "1", "--handler", "tensor")[0] == 0
    with zipfile.ZipFile(tmp_path / "m.mar") as z:
        assert z.namelist() == ["MAR-INF/MANIFEST.json"]
        assert json.loads(z.read("MAR-INF/MANIFEST.json"))["runtime"] == "python"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model-name", "my model"], "Model name 'my model' contains special characters"),
        (["--model-name", "m/../x"], "contains special characters"),
        (["--serialized-file", "missing.pt"], "--serialized-file: file does not exist: 'missing.pt'"),
        (["--model-file", "missing.py"], "--model-file: file does not exist"),
        (["--handler", "missing_handler.py"], "neither a built-in handler"),
        (["--extra-files", "a.txt,missing.txt"], "File does not exist: missing.txt"),
        (["-c", "missing.yaml"], "--config-file: file does not exist"),
    ],
)
def test_errors_are_one_line_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("a")
    base = {"--model-name": "m", "-v": "1", "--handler": "tensor"}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    rc, err = _run(capsys, *[x for kv in base.items() for x in kv])
    assert rc == 1
    assert err.startswith("model-archiver: error: ") and message in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_existing_archive_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = ["--model-name", "m", "-v", "1", "--handler", "tensor", "--export-path", str(tmp_path)]
    assert _run(capsys, *args)[0] == 0
    rc, err = _run(capsys, *args)
    assert rc == 1 and f"{tmp_path / 'm.mar'} already exists." in err and "--force/-f" in err
    assert _run(capsys, *args, "-f")[0] == 0


def test_bad_command_line_exits_2(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--model-name", "m", "--handler", "tensor"])  # no --version
    assert exc.value.code == 2 and "-v/--version" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["--model-name", "m", "-v", "1", "--handler", "tensor", "--archive-format", "rar"])
    assert exc.value.code == 2


def test_progress_flags(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    big = tmp_path / "big.pt"
    big.write_bytes(b"\0" * (11 << 20))
    base = ["--model-name", "m", "-v", "1", "--handler", "tensor", "--serialized-file", str(big), "-f",
            "--archive-format", "zip-store", "--export-path", str(tmp_path)]  # fmt: skip
    assert "100%" in _run(capsys, *base, "--progress")[1]
    assert _run(capsys, *base, "--no-progress")[1] == ""


def test_as_a_process_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "serve.cli.model_archiver", "--model-name", "m", "-v", "1", "--handler", "tensor",
         "--serialized-file", str(tmp_path / "nope.pt"), "--export-path", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("model-archiver: error: --serialized-file: file does not exist")
    assert "Traceback" not in proc.stderr
