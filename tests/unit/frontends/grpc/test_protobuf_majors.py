"""The gRPC frontends on both protobuf majors pyproject.toml allows (issue 19 item 4), in every `make test`.

The venv holds one protobuf (whichever the test extra resolves to). `make test` also installs, beside the venv and
outside its site-packages, the oldest protobuf 6 we allow with the grpc health and reflection packages of that
generation (their own stubs are protobuf 6 gencode), and the newest protobuf 7 with theirs. Here the gRPC unit tests
run again in a child Python with each of those first on its path, so a stub or a servicer that only works on one
major fails CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
LEGS = {"protobuf6": "6.", "protobuf7": "7."}


@pytest.mark.parametrize("leg", sorted(LEGS))
def test_grpc_unit_tests_pass_on_protobuf(leg: str) -> None:
    side = Path(sys.prefix) / leg
    if not side.is_dir():
        pytest.skip(f"{side} is missing: `make test` installs it (see the Makefile's .test target)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(side), str(ROOT)])}
    version = subprocess.run([sys.executable, "-c", "import google.protobuf as p; print(p.__version__)"], env=env,
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip()  # fmt: skip
    assert version.startswith(LEGS[leg]), f"{side} gives protobuf {version}"
    tests = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--ignore={__file__}"]
    run = subprocess.run(tests + [str(ROOT / "tests/unit/frontends/grpc")], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, f"gRPC unit tests on protobuf {version}:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
