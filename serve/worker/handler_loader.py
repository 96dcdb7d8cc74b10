"""Finding and starting a model's handler: TorchServe's entry point resolution (`ts/model_loader.py`).

The manifest's handler string is `module[:function]`; a `.py` suffix and any directories are dropped. The module
is `<model_dir>/<module>.py` when that file exists, else the built-in `handlers.<module>`. If the module has the
function (default `handle`) it is a function entry point, called once as `fn(None, context)` at load and as
`fn(data, context)` per batch; otherwise the module's one class is instantiated with no arguments and
`initialize(context)` is called.

Files from the model directory are imported under a unique module name (two models with a `model.py` each do
not collide in one process), with the model directory on `sys.path` during the import so `import helper` in
them works; modules imported from the model directory are then taken out of `sys.modules` and the directory
off `sys.path`, so the next model's `helper.py` is its own. Imports a handler runs later, at request time,
resolve against `sys.path` as it is then.

Where we differ from TorchServe: an ImportError raised inside the user's handler file is reported as such
(TorchServe swallows it and tries a built-in of the same name); a handler module that defines several
classes is accepted when exactly one of them has a `handle` method.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import keyword
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from serve import __version__
from serve.worker.context import Context
from serve.worker.torch_compat import torch_compat, torch_compat_enabled

if TYPE_CHECKING:
    from serve.archive import ModelArchive
    from serve.worker.metrics_cache import MetricsCache

BUILTIN_PACKAGE = "handlers"


class Handler(Protocol):
    def initialize(self, context: Context) -> None: ...

    def handle(self, data: list[Any], context: Context) -> list[Any]: ...


class FunctionHandler:
    """A function entry point `fn(data, context)` behind the class interface."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def initialize(self, context: Context) -> None:
        self.fn(None, context)  # TorchServe's convention: the first call, with no data, initialises

    def handle(self, data: list[Any], context: Context) -> list[Any]:
        return self.fn(data, context)


def load_handler(context: Context, handler: str | None = None) -> Handler:
    """The model's handler (`handler`, else the manifest's `model.handler`), resolved and initialised."""
    if handler is None:
        handler = ((context.manifest or {}).get("model") or {}).get("handler") or "base_handler"
    model_dir = Path(context.system_properties["model_dir"])
    compat = torch_compat_enabled(context.manifest, context.model_yaml_config, model_dir)
    entry = resolve_handler(handler, model_dir, torch_compat=compat)
    with _compat(compat):  # initialize imports too (transformers' modeling files, importlib.import_module)
        entry.initialize(context)
    return entry


def load_from_archive(archive: ModelArchive, gpu: int | None = None, batch_size: int = 1,
                      limit_max_image_pixels: bool | int = True,
                      metrics: MetricsCache | None = None) -> tuple[Handler, Context]:  # fmt: skip
    """The initialised handler of an opened archive, and the Context it was initialised with (its metrics cache
    `metrics`, holding the metrics_config's declared metrics, or a new one)."""
    context = Context(archive.model_name, str(archive.model_dir), archive.manifest, batch_size, gpu, __version__,
                      limit_max_image_pixels, metrics, model_yaml_config=archive.model_config)  # fmt: skip
    return load_handler(context), context


def resolve_handler(handler: str, model_dir: Path, torch_compat: bool = False) -> Handler:
    """The handler object for `module[:function]`, not yet initialised."""
    module_part, _, function_name = handler.partition(":")
    module_name = module_part.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py")
    if not module_name.isidentifier() or keyword.iskeyword(module_name):
        raise ValueError(f"handler {handler!r}: {module_name!r} is not a Python module name; use module[:function]")
    module = _handler_module(module_name, model_dir, torch_compat)
    function_name = function_name or "handle"
    if hasattr(module, function_name):
        return FunctionHandler(getattr(module, function_name))
    if ":" in handler:
        raise ValueError(f"handler {handler!r}: module {module_name!r} has no function {function_name!r}")
    return _class_entry_point(module, handler)()


def import_user_file(model_dir: str | Path, file_name: str, torch_compat: bool = False) -> ModuleType:
    """Import `<model_dir>/<file_name>` under a name unique to that directory, with the model dir importable."""
    model_dir = Path(model_dir).resolve()
    path = (model_dir / file_name).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{file_name!r} is not a file in the model directory {model_dir}")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    name = f"_serve_model_{digest}_{_identifier(path.stem)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered first: dataclasses and typing look their module up while it runs
    try:
        with _importable(model_dir), _compat(torch_compat):
            spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def classes_defined_in(module: ModuleType, base: type | None = None) -> list[type]:
    """Classes defined in `module` itself (not imported into it), optionally only subclasses of `base`."""
    return [
        obj
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if obj.__module__ == module.__name__ and (base is None or issubclass(obj, base))
    ]


def _handler_module(module_name: str, model_dir: Path, torch_compat: bool) -> ModuleType:
    if (model_dir / f"{module_name}.py").is_file():
        return import_user_file(model_dir, f"{module_name}.py", torch_compat=torch_compat)
    try:
        return importlib.import_module(f"{BUILTIN_PACKAGE}.{module_name}")
    except ModuleNotFoundError as e:
        if e.name not in (BUILTIN_PACKAGE, f"{BUILTIN_PACKAGE}.{module_name}"):
            raise
    raise ValueError(
        f"handler {module_name!r} is neither a file {module_name}.py in the model directory {model_dir} nor a "
        f"built-in handler ({', '.join(builtin_handlers())})"
    )


def _class_entry_point(module: ModuleType, handler: str) -> type:
    defined = classes_defined_in(module)
    with_handle = [c for c in defined if callable(getattr(c, "handle", None))]
    if len(defined) == 1 and not with_handle:
        raise ValueError(f"handler {handler!r}: class {defined[0].__name__} has no handle(data, context) method")
    if len(defined) != 1 and len(with_handle) != 1:
        names = ", ".join(f"{c.__name__}{'' if c in with_handle else ' (no handle)'}" for c in defined) or "none"
        raise ValueError(
            f"handler {handler!r} must define a handle(data, context) function or exactly one handler class, "
            f"found {len(defined)} classes: {names}"
        )
    return with_handle[0]


def builtin_handlers() -> list[str]:
    """The short names of the built-in handlers: modules of the `handlers` package that define one."""
    package = importlib.import_module(BUILTIN_PACKAGE)
    return list(getattr(package, "BUILTIN_HANDLERS", ()))


@contextmanager
def _importable(model_dir: Path) -> Iterator[None]:
    """`model_dir` first on sys.path while the block runs; modules imported from it are forgotten afterwards."""
    before = set(sys.modules)
    sys.path.insert(0, str(model_dir))
    try:
        yield
    finally:
        sys.path.remove(str(model_dir))
        for name in set(sys.modules) - before:
            if _is_inside(getattr(sys.modules[name], "__file__", None), model_dir):
                del sys.modules[name]


def _compat(enabled: bool) -> Any:
    return torch_compat() if enabled else nullcontext()


def _is_inside(file: str | None, directory: Path) -> bool:
    return file is not None and Path(file).resolve().is_relative_to(directory)


def _identifier(stem: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in stem)
