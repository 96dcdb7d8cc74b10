"""install_py_dep_per_model on a real `serve` process: archives built by model-archiver's `--requirements-file`,
registered over the management API. A requirement pip cannot satisfy is a 400 carrying pip's message; a good one is
installed (from a wheel written by the test: no network) and imported by the handler; the server's log holds pip's
output under the model's name."""

from __future__ import annotations

import httpx

from serve.archive import package
from tests.integration.server import ServerProcess
from tests.unit.management.test_requirements import HANDLER, write_wheel

TIMEOUT = 120


def _archive(tmp_path, name: str, requirement: str) -> None:
    src = tmp_path / f"src_{name}"
    src.mkdir()
    (src / "handler.py").write_text(HANDLER)
    wheels = write_wheel(tmp_path / "wheels").parent
    (src / "requirements.txt").write_text(f"--no-index\n--find-links {wheels}\n{requirement}\n")
    package(name, "1.0", f"{src / 'handler.py'}:handle", requirements_file=src / "requirements.txt",
            export_path=tmp_path / "store", progress=False)  # fmt: skip


def test_management_api_registration_installs_or_refuses_the_requirements(tmp_path):
    _archive(tmp_path, "good", "tinydep==0.1")
    _archive(tmp_path, "bad", "tinydep==9.9")
    server = ServerProcess(tmp_path / "run", tmp_path / "store", "--ncs", "--disable-token-auth", "--enable-model-api",
                           install_py_dep_per_model="true").start()  # fmt: skip
    try:
        bad = httpx.post(f"{server.management}/models", params={"url": "bad.mar", "initial_workers": 1},
                         timeout=TIMEOUT)  # fmt: skip
        good = httpx.post(f"{server.management}/models", params={"url": "good.mar", "initial_workers": 1,
                                                                  "synchronous": "true"}, timeout=TIMEOUT)  # fmt: skip
        answer = httpx.post(f"{server.inference}/predictions/good", content=b"x", timeout=TIMEOUT)
        models = httpx.get(f"{server.management}/models", timeout=TIMEOUT).json()
    finally:
        server.stop()
    assert bad.status_code == 400, bad.text
    assert "Custom pip package installation failed for model bad version 1.0" in bad.json()["message"]
    assert "No matching distribution found for tinydep==9.9" in bad.json()["message"]
    assert good.status_code == 200, good.text
    assert answer.status_code == 200 and answer.json()["value"] == 42, answer.text
    assert [m["modelName"] for m in models["models"]] == ["good"]
    assert "[good 1.0 pip] Successfully installed tinydep-0.1" in server.log(tail=1 << 20)
