"""Whether torch compatibility is on for an archive (serve/worker/torch_compat.py, ModelArchive.torch_compat).

An explicit setting wins: model-config `torchCompat` (true/false), else manifest `model.torchCompat`
(`model-archiver --torch-compat` / `--no-torch-compat`). Otherwise it is on when the archive's model file or
handler file imports `torch`, `torchvision` or `ts`, so a TorchServe archive runs unchanged by default.

Decided with `ast`, never by importing: every `import X` / `from X import ...` anywhere in the file (top level,
inside functions, classes, `if`/`try` blocks) counts, since a handler that imports torch inside `initialize`
needs the compatibility as much as one that imports it at the top. Relative imports do not count. A file that
does not parse (or cannot be read) counts as not importing them: the import itself will then report the error.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TORCH_PACKAGES = frozenset({"torch", "torchvision", "ts"})


def compat_enabled(
    manifest: Mapping[str, Any] | None, model_config: Mapping[str, Any] | None, model_dir: str | Path | None
) -> bool:
    """The explicit setting (model-config first, then manifest) when there is one, else `imports_torch`."""
    model = (manifest or {}).get("model") or {}
    for value in ((model_config or {}).get("torchCompat"), model.get("torchCompat")):
        explicit = _bool(value)
        if explicit is not None:
            return explicit
    return model_dir is not None and imports_torch(Path(model_dir), model.get("modelFile"), model.get("handler"))


def imports_torch(model_dir: Path, model_file: str | None, handler: str | None) -> bool:
    """True when the model file or the handler's file (manifest `handler` is `path/module[.py][:function]`) in
    `model_dir` imports torch, torchvision or ts; a built-in handler name has no file here and does not count."""
    return any(file_imports_torch(path) for path in _files(model_dir, model_file, handler))


def file_imports_torch(path: Path) -> bool:
    """True when the Python source at `path` imports torch, torchvision or ts anywhere."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return False
    return any(name.split(".")[0] in TORCH_PACKAGES for name in _imported(tree))


def _imported(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _files(model_dir: Path, model_file: str | None, handler: str | None) -> list[Path]:
    files = []
    if model_file:
        files += [model_dir / model_file, model_dir / Path(model_file).name]
    if handler:
        module = Path(handler.split(":")[0]).name.removesuffix(".py")
        files.append(model_dir / f"{module}.py")
    return list(dict.fromkeys(f for f in files if f.is_file()))


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None
