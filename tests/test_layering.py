"""The import layering of ARCHITECTURE.md, read from every module's imports with `ast`.

An import may only point down the table (errors, config, metrics, backend, tensor, nn, serialization, inference,
zoo, generation, archive, batching, worker, compat, management, workflows, frontends, server/cli); the runtime stack
never imports the serving stack; device-independent runtime code never imports numpy (it goes through a backend), and
nothing imports cupy outside the CUDA backend (`backend/ops_cuda.py` and its `backend/cuda_*.py` helpers).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "serve"
LAYERS = ["errors", "config", "metrics", "backend", "tensor", "nn", "serialization", "inference", "zoo",
          "generation", "archive", "batching", "worker", "compat", "management", "workflows", "frontends", "server",
          "cli"]  # fmt: skip
RUNTIME = {"backend", "tensor", "nn", "serialization", "inference", "zoo"}
# the public namespaces (`serve`, `serve.autograd`, `serve.cuda`) re-export the runtime stack
NAMESPACE_RANK = LAYERS.index("zoo")
NUMPY_FREE = {"tensor", "nn"}


def _layer(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.stem in LAYERS else "__namespace__"


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
    return out


MODULES = sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path) -> None:
    layer = _layer(path)
    rank = NAMESPACE_RANK if layer == "__namespace__" else LAYERS.index(layer)
    for name, line in _imports(path):
        parts = name.split(".")
        if parts[0] in ("cupy", "cupyx", "cupy_backends"):
            cuda_backend = layer == "backend" and (path.name == "ops_cuda.py" or path.name.startswith("cuda_"))
            assert cuda_backend, f"{path}:{line} imports cupy outside the CUDA backend"
        # dtypes.py maps serve dtypes to numpy dtype objects, which CuPy shares; no array code there
        if parts[0] == "numpy" and layer in NUMPY_FREE and path.name != "dtypes.py":
            pytest.fail(f"{path}:{line}: {layer}/ must reach arrays through a backend module, not numpy")
        if parts[0] != "serve" or len(parts) < 2:
            continue
        target = parts[1]
        if target not in LAYERS:
            target_rank = NAMESPACE_RANK  # serve.autograd / serve.cuda: the runtime namespace
        else:
            target_rank = LAYERS.index(target)
        assert target_rank <= rank, f"{path}:{line}: {layer} may not import serve.{target} (it sits above)"
        if layer in RUNTIME:
            assert target in RUNTIME or target == "errors", f"{path}:{line}: runtime code imports the serving stack"


def test_every_package_is_known() -> None:
    for p in ROOT.iterdir():
        if p.is_dir() and (p / "__init__.py").exists():
            assert p.name in LAYERS, f"serve/{p.name} is not in ARCHITECTURE.md's layer table"
