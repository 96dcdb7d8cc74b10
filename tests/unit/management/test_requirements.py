"""install_py_dep_per_model (serve/management/requirements.py): an archive's requirementsFile is pip-installed for
its workers only, from a wheel built here (no network: the requirements file carries `--no-index --find-links`,
pip options in the file as TorchServe's examples put them); a bad requirement refuses the registration with pip's
message; with the key off the file is only logged about."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import logging
import re
import tempfile
import zipfile
from pathlib import Path

import pytest

from serve.config import load_settings
from serve.errors import InvalidInput
from tests.unit.management.models import model_dir, request, run, running

HANDLER = """
def handle(data, context):
    if data is None:
        return None
    try:
        import tinydep
    except ImportError as e:
        return [{"missing": str(e)} for _ in data]
    return [{"value": tinydep.VALUE, "file": tinydep.__file__} for _ in data]
"""


def write_wheel(folder: Path, name: str = "tinydep", version: str = "0.1") -> Path:
    """A pure-Python wheel holding `name/__init__.py` (VALUE = 42), written as the wheel spec lays it out."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in files.items()]
    files[f"{name}-{version}.dist-info/RECORD"] = (
        "\n".join([*record, f"{name}-{version}.dist-info/RECORD,,"]) + "\n"
    ).encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def model_with_requirements(store: Path, name: str, requirement: str) -> Path:
    """A model directory whose manifest names requirements.txt: pip options, then `requirement`."""
    wheels = write_wheel(store.parent / "wheels").parent
    path = model_dir(store, name, HANDLER)
    (path / "requirements.txt").write_text(f"--no-index\n--find-links {wheels}\n{requirement}\n")
    manifest_file = path / "MAR-INF" / "MANIFEST.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["model"]["requirementsFile"] = "requirements.txt"
    manifest_file.write_text(json.dumps(manifest))
    return path


def test_requirements_are_installed_for_the_models_workers_only(tmp_path, caplog):
    store = tmp_path / "store"
    model_with_requirements(store, "dep", "tinydep==0.1")

    async def scenario():
        async with running(store, install_py_dep_per_model=True) as reg:
            with caplog.at_level(logging.INFO):
                await reg.register("dep-1.0")
            answer = json.loads((await reg.submit("dep", None, request("x"))).body)
            deps = reg._table.version("dep", None).deps_dir
            assert deps is not None and deps.is_dir()
            assert await reg.unregister("dep") == 'Model "dep" unregistered'
            return answer, deps

    answer, deps = run(scenario())
    assert answer["value"] == 42  # the worker imported the package installed for it
    assert Path(answer["file"]).is_relative_to(deps)
    assert not deps.exists()  # removed with the model version
    assert importlib.util.find_spec("tinydep") is None  # the server's environment was not touched
    pip_lines = [r.getMessage() for r in caplog.records if r.name == "MODEL_LOG"]
    assert any(line.startswith("[dep 1.0 pip]") and "Successfully installed tinydep-0.1" in line for line in pip_lines)


def test_a_failing_install_refuses_the_registration_with_pips_message(tmp_path, monkeypatch):
    store = tmp_path / "store"
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the deps directory would be made
    model_with_requirements(store, "bad", "tinydep==9.9")

    async def scenario():
        async with running(store, install_py_dep_per_model=True) as reg:
            with pytest.raises(InvalidInput) as e:
                await reg.register("bad-1.0")
            assert reg.list_models() == {"models": []}
            return e.value

    error = run(scenario())
    assert getattr(error, "code", 400) == 400
    assert "Custom pip package installation failed for model bad version 1.0" in str(error)
    assert re.search(r"No matching distribution found for tinydep==9\.9", str(error))  # pip's own words
    assert not list((tmp_path / "tmp").glob("serve-deps-bad-*"))  # removed after the failure


def test_off_by_default_the_file_is_logged_not_installed(tmp_path, caplog):
    store = tmp_path / "store"
    model_with_requirements(store, "off", "tinydep==0.1")

    async def scenario():
        async with running(store) as reg:
            with caplog.at_level(logging.INFO):
                await reg.register("off-1.0")
            return json.loads((await reg.submit("off", None, request("x"))).body)

    assert "missing" in run(scenario())
    messages = [r.getMessage() for r in caplog.records]
    assert any("requirements file requirements.txt was not installed" in m and "install_py_dep_per_model=true" in m
               for m in messages)  # fmt: skip


def test_the_key_is_read_from_config_properties(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.properties").write_text("install_py_dep_per_model=true\n")
    assert load_settings({"ts_config": str(tmp_path / "config.properties")}, {}).install_py_dep_per_model is True
    (tmp_path / "config.properties").unlink()
    assert load_settings({}, {}).install_py_dep_per_model is False  # TorchServe's default
