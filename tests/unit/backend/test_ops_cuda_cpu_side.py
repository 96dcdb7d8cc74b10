"""What can be checked of the CUDA backend without a GPU (and without CuPy, as in CI).

- `ops_cuda` provides every public name of `ops_cpu` (read from its source and its helper modules' `__all__`).
- The CPU path never imports cupy: importing serve, the server and the worker, creating tensors, running a model
  with attention, loading a handler on the CPU (in a fresh interpreter, so nothing else imported it first).
- Without CUDA, `serve.cuda.is_available()` is False and `device_count()` 0; the rest raise RuntimeError saying
  why and what to do, and so do `.cuda()` and `device="cuda"`.
- The argument table the GPU parity test uses runs on the CPU backend (so a typo there shows up in CI).
- The backend hooks the tensor layer calls (`on_device`, `masked_softmax`) and `serve.backends` flags.
- ops_cuda's own logic, run on a numpy stand-in for CuPy (fake_cupy/): the parity table and zoo models on "cuda".
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import serve
from serve import backend
from serve.backend import flags, ops_cpu
from tests.gpu import ops_cases as C

ROOT = Path(__file__).resolve().parents[3]
BACKEND = ROOT / "serve" / "backend"


def _top_level_names(path: Path) -> set[str]:
    """Names a module defines at its top level: functions, classes, assignments, imports, and the `__all__` of the
    modules it star-imports from serve.backend."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if alias.name == "*":
                    names |= _all_of(ROOT / (node.module.replace(".", "/") + ".py"))
                else:
                    names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _all_of(path: Path) -> set[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{path} has no __all__")


def _cpu_public() -> set[str]:
    return {n for n in dir(ops_cpu) if not n.startswith("_") and not isinstance(getattr(ops_cpu, n), type(np))} - {
        "Any", "annotations"}  # fmt: skip


def test_ops_cuda_provides_every_cpu_primitive():
    cuda_names = _top_level_names(BACKEND / "ops_cuda.py")
    missing = sorted(_cpu_public() - cuda_names)
    assert not missing, f"ops_cuda lacks {missing}"


def test_cuda_helper_modules_define_what_they_export():
    for name in ("cuda_nn.py", "cuda_conv.py"):
        path = BACKEND / name
        defined = _top_level_names(path)
        assert _all_of(path) <= defined, f"{name}: __all__ names something it does not define"


def test_the_gpu_parity_table_covers_every_primitive_and_runs_on_the_cpu():
    assert set(C.CASES) | C.NOT_CALLED == _cpu_public()
    for name, makers in C.CASES.items():
        for make in makers:
            for dt in (C.F32,) if name in C.FIXED_DTYPE else C.FLOATS:
                args = []
                for a in make(dt):
                    if isinstance(a, str) and a == "gen":
                        a = ops_cpu.generator(0)
                    elif isinstance(a, tuple) and a and isinstance(a[0], str) and a[0] == "plan":
                        a = C.plan_for(ops_cpu, a, dt)
                    args.append(a)
                getattr(ops_cpu, name)(*args)  # raises on a malformed case


_CPU_ONLY_SCRIPT = """
import sys
import numpy as np
import serve
import serve.server, serve.worker.process, serve.worker.gpu
from handlers.base_handler import select_device
import serve.nn.functional as F
x = serve.randn(4, 8)
model = serve.nn.Sequential(serve.nn.Linear(8, 16), serve.nn.GELU(), serve.nn.LayerNorm(16))
with serve.no_grad():
    model(x).sum().item()
    q = serve.randn(2, 3, 5, 8)
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
    F.max_pool2d(F.relu(F.conv2d(serve.randn(1, 3, 8, 8), serve.randn(4, 3, 3, 3), padding=1)), 2)
model.to("cpu").half().float()
assert str(select_device(None)) == "cpu"
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("cupy", "cupyx", "cupy_backends"))
bad += sorted(m for m in sys.modules if m in ("serve.backend.ops_cuda", "serve.backend.cuda_kernels"))
print("IMPORTED:" + ",".join(bad))
"""


def test_the_cpu_path_never_imports_cupy():
    out = subprocess.run([sys.executable, "-c", _CPU_ONLY_SCRIPT], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "IMPORTED:", out.stdout


_NO_CUPY_SCRIPT = """
import sys
sys.modules["cupy"] = None  # `import cupy` raises ImportError, as where CuPy is not installed
import pytest
import serve
assert serve.cuda.is_available() is False and serve.cuda.device_count() == 0
for call in (serve.cuda.current_device, lambda: serve.cuda.set_device(0), serve.cuda.synchronize,
             serve.cuda.empty_cache, serve.cuda.memory_allocated, serve.cuda.memory_reserved, serve.cuda.mem_get_info,
             lambda: serve.cuda.get_device_name(0), lambda: serve.cuda.get_device_capability(0),
             lambda: serve.cuda.set_per_process_memory_fraction(0.5), lambda: serve.ones(2).cuda(),
             lambda: serve.zeros(2, device="cuda:0"), lambda: serve.nn.Linear(2, 2).cuda()):
    hint = r"CUDA is not available: CuPy is not installed .*pip install 'serve\\[gpu\\]'"
    with pytest.raises(RuntimeError, match=hint):
        call()
with pytest.raises(RuntimeError, match="CUDA is not available"):
    import serve.backend.ops_cuda
print("OK")
"""


def test_serve_cuda_without_cupy_says_what_to_install():
    out = subprocess.run([sys.executable, "-c", _NO_CUPY_SCRIPT], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr[-3000:]


def test_serve_cuda_on_this_machine_never_raises_from_is_available():
    assert isinstance(serve.cuda.is_available(), bool)
    if not serve.cuda.is_available():
        assert serve.cuda.device_count() == 0
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            serve.cuda.current_device()


def test_placed_gives_cpu_tensors_no_index_and_cpu_hooks_do_nothing():
    dev, ops = backend.placed("cpu")
    assert dev == serve.device("cpu") and ops is ops_cpu
    with ops_cpu.on_device(None), ops_cpu.on_device(3):
        assert serve.zeros(2).device == serve.device("cpu")


def test_cpu_masked_softmax_is_the_composed_softmax():
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    keep = rng.random((4, 5)) < 0.5
    keep[1] = False  # a row with every key masked
    safe = ops_cpu.masked_softmax(scores, keep, True, True)
    assert np.all(safe[:, :, 1] == 0)
    plain = ops_cpu.masked_softmax(scores, keep, True, False)
    assert np.all(np.isnan(plain[:, :, 1]))
    ref = ops_cpu.softmax(np.where(keep, scores, -np.inf), -1)
    np.testing.assert_array_equal(plain, ref)
    additive = np.where(keep, 0.0, -np.inf).astype(np.float32)
    np.testing.assert_array_equal(ops_cpu.masked_softmax(scores, additive, False, True), safe)
    np.testing.assert_array_equal(ops_cpu.masked_softmax(scores, None, False, True), ops_cpu.softmax(scores, -1))


def test_backends_flags_have_pytorch_names_and_defaults():
    assert serve.backends.cuda.matmul.allow_tf32 is False
    assert serve.backends.cudnn.allow_tf32 is True
    try:
        serve.backends.cuda.matmul.allow_tf32 = True
        serve.backends.cudnn.allow_tf32 = False
        assert flags.matmul_allow_tf32 is True and flags.conv_allow_tf32 is False
        x = serve.randn(3, 4)
        assert (x @ x.T).shape == (3, 3)  # the CPU ignores them
    finally:
        serve.backends.cuda.matmul.allow_tf32 = False
        serve.backends.cudnn.allow_tf32 = True


def test_ops_cuda_runs_the_parity_table_and_models_on_a_numpy_stand_in_for_cupy():
    """ops_cuda's own logic in CI: the GPU parity table and zoo models on "cuda", with CuPy and our kernels replaced
    by numpy (fake_cupy/). A fresh interpreter, so the stand-in never meets the rest of the test session."""
    fake = Path(__file__).parent / "fake_cupy"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(ROOT)])}
    out = subprocess.run([sys.executable, str(fake / "check_ops_cuda.py")], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("FAILURES 0"), out.stdout[-5000:]
