"""serve's CUDA kernels checked on the CPU: the real .cu text compiled with g++ against a host emulator of the CUDA
subset they use, driven through cuda_kernels.py's wrappers on a numpy stand-in for CuPy, with the GPU test's own
cases and float64 references (see kernel_emulator/check_kernels.py for what is and is not checked).

The emulator runs in a fresh interpreter (kernel_emulator/ first on its path), so the stand-in `cupy` never meets
this test session. Build artefacts go to a cache under the system temp dir keyed by content hash (never the repo).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EMULATOR = Path(__file__).resolve().parent / "kernel_emulator"
KERNELS = ROOT / "serve" / "backend" / "kernels"

pytestmark = [
    pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the kernels for the host"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the emulator's fibers use glibc's ucontext"),
]


def _check(*only: str, kernels: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EMULATOR), str(ROOT)]), "PYTHONDONTWRITEBYTECODE": "1"}
    if kernels is not None:
        env["SERVE_KERNEL_EMU_KERNELS"] = str(kernels)
    return subprocess.run([sys.executable, str(EMULATOR / "check_kernels.py"), *only], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def test_cuda_kernels_match_numpy_on_the_host_emulator():
    out = _check()
    assert out.returncode == 0 and out.stdout.strip().endswith("FAILURES 0"), (
        f"exit status {out.returncode}\n{out.stdout[-6000:]}\n{out.stderr[-3000:]}"
    )


# (file, pattern, replacement): a missing barrier and an off-by-one bound; the check must catch both
MUTATIONS = [
    ("softmax.cu", r"__syncthreads\(\);", ""),
    ("im2col.cu", r"\bw < W\b", "w <= W"),
]


def test_the_emulated_check_fails_on_broken_kernels(tmp_path):
    """The check can fail: a copy of the kernels with a barrier removed and a bound off by one is caught."""
    broken = tmp_path / "kernels"
    shutil.copytree(KERNELS, broken)
    for name, pattern, new in MUTATIONS:
        text = (broken / name).read_text()
        mutated, count = re.subn(pattern, new, text)
        assert count, f"{name} no longer contains {pattern!r}: update MUTATIONS to a bug the check must catch"
        (broken / name).write_text(mutated)
    out = _check("test_softmax[", "test_im2col[", kernels=broken)
    failed = re.findall(r"^FAIL (\w+)\[", out.stdout, re.M)
    assert "test_softmax" in failed and "test_im2col" in failed, out.stdout[-4000:] + "\n" + out.stderr[-2000:]
