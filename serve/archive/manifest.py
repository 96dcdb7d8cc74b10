"""`MAR-INF/MANIFEST.json`: TorchServe's schema, field names and key order; building one and validating one.

    {"createdOn": "dd/mm/YYYY HH:MM:SS", "runtime": "python",
     "model": {"modelName", "serializedFile", "handler", "modelFile", "modelVersion", "extensions",
               "requirementsFile", "configFile", "torchCompat"},
     "archiverVersion": "..."}

Optional keys are omitted when unset, as torch-model-archiver 0.12 does. `torchCompat` is ours (written by
`model-archiver --torch-compat` / `--no-torch-compat`; absent: on when the model or handler file imports torch):
TorchServe ignores unknown keys, so such an archive still loads there.
`archiverVersion` carries serve's version, since serve's archiver wrote the file (TorchServe only warns when the
key is missing). Validation accepts what TorchServe's server accepts (unknown keys kept, a missing
`modelVersion` is "1.0", a missing `runtime` is "python") and refuses wrong types with the offending key. We also
refuse a model name outside TorchServe's regex or over `MAX_NAME_LENGTH` (256) characters, and a version a URL
path cannot hold ('/', '?', '#', '%', blanks), which TorchServe's server accepts and then cannot route.
`shown(name)` is how a message may echo a name or version a client sent: whole when it is a valid name, else
escaped and cut to 64 characters, so no error message carries a megabyte or a terminal escape of the client's.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from serve import __version__ as SERVE_VERSION
from serve.archive.safety import check_nesting, too_deep
from serve.errors import ArchiveError

MAR_INF = "MAR-INF"
MANIFEST_NAME = "MANIFEST.json"
MANIFEST_PATH = f"{MAR_INF}/{MANIFEST_NAME}"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_\-.]*$"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-.]*")
MAX_NAME_LENGTH = 256
SHOWN_LENGTH = 64
RUNTIMES = ("python", "python3", "LSP")
PYTHON_RUNTIMES = ("python", "python3")
# the --archive-format choices and the suffix each gives the output (no-archive: a directory)
ARCHIVE_FORMATS = {"default": ".mar", "tgz": ".tar.gz", "no-archive": "", "zip-store": ".mar"}
BUILTIN_HANDLERS = (
    "base_handler",
    "image_classifier",
    "image_segmenter",
    "object_detector",
    "text_classifier",
    "text_embedding",
    "text_generation",
    "tensor",
)
# LSP (C++ backend) handlers that torch-model-archiver does not copy either
LSP_BUILTIN_HANDLERS = ("BaseHandler", "TorchScriptHandler")
DEFAULT_VERSION = "1.0"
DEFAULT_HANDLER = "base_handler"
CREATED_ON_FORMAT = "%d/%m/%Y %H:%M:%S"
# model keys that name a file in the archive (handler is checked on its own: it may be a built-in name)
FILE_KEYS = ("serializedFile", "modelFile", "requirementsFile", "configFile")
_STRING_KEYS = FILE_KEYS + ("modelName", "handler", "description", "envelope", "sourceVocab")
_URL_UNSAFE = re.compile(r"[\s/\\?#%\x00-\x1f\x7f]")


def valid_name(name: object) -> bool:
    return isinstance(name, str) and len(name) <= MAX_NAME_LENGTH and _NAME.fullmatch(name) is not None


def shown(value: object) -> str:
    """`value` as an error message may echo it: a valid name whole, anything else escaped and at most 64
    characters (with its length when cut)."""
    if valid_name(value):
        return str(value)
    text = value if isinstance(value, str) else str(value)
    cut = repr(text[:SHOWN_LENGTH])
    return cut if len(text) <= SHOWN_LENGTH else f"{cut}... ({len(text)} characters)"


def check_model_name(name: str) -> None:
    """Refuse a model name that a URL path cannot hold (TorchServe's regex and wording) or over 256 characters."""
    if valid_name(name):
        return
    if isinstance(name, str) and len(name) > MAX_NAME_LENGTH:
        problem = f"is longer than {MAX_NAME_LENGTH} characters ({len(name)})"
    else:
        problem = "contains special characters"
    raise ArchiveError(
        f"Model name {shown(name)} {problem}.\nA model name is at most {MAX_NAME_LENGTH} characters; the allowed "
        f"regular expression filter for model name is: {NAME_PATTERN}"
    )


def check_version(version: str) -> None:
    """Refuse a version that would break the URL paths it appears in (/models/{name}/{version})."""
    if not version or _URL_UNSAFE.search(version):
        raise ArchiveError(
            f"model version {version!r} is empty or holds a character a URL path cannot carry "
            "(whitespace, '/', '\\', '?', '#', '%'); use e.g. 1.0"
        )


def handler_module(handler: str) -> str:
    """The module part of a handler string: `path/to/h.py:fn` -> `path/to/h`."""
    module = handler.split(":", 1)[0]
    return module.removesuffix(".py")


def build_manifest(
    model_name: str,
    version: str,
    handler: str,
    *,
    runtime: str = "python",
    serialized_file: str | None = None,
    model_file: str | None = None,
    requirements_file: str | None = None,
    config_file: str | None = None,
    torch_compat: bool | None = None,
    created_on: datetime | None = None,
) -> dict[str, Any]:
    """The manifest torch-model-archiver writes for these arguments (file arguments reduced to basenames)."""
    model: dict[str, Any] = {"modelName": model_name}
    if serialized_file:
        model["serializedFile"] = _basename(serialized_file)
    model["handler"] = _basename(handler)
    if model_file:
        model["modelFile"] = _basename(model_file)
    if version:
        model["modelVersion"] = version
    if requirements_file:
        model["requirementsFile"] = _basename(requirements_file)
    if config_file:
        model["configFile"] = _basename(config_file)
    if torch_compat is not None:  # unset: the server decides from the files' imports
        model["torchCompat"] = torch_compat
    return {
        "createdOn": (created_on or datetime.now()).strftime(CREATED_ON_FORMAT),
        "runtime": runtime,
        "model": model,
        "archiverVersion": SERVE_VERSION,
    }


def _basename(path: str) -> str:
    # os.path.basename on every platform torch-model-archiver runs on; '\\' only splits on Windows there
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def manifest_json(manifest: dict[str, Any]) -> str:
    """The file's text, formatted as torch-model-archiver writes it (indent 2, no trailing newline)."""
    return json.dumps(manifest, indent=2)


def default_manifest(model_name: str) -> dict[str, Any]:
    """What the server assumes for an archive without a manifest (TorchServe's empty manifest)."""
    return {"runtime": "python", "model": {"modelName": model_name, "handler": DEFAULT_HANDLER,
                                           "modelVersion": DEFAULT_VERSION}}  # fmt: skip


def parse_manifest(raw: bytes, source: str) -> dict[str, Any]:
    """MANIFEST.json's bytes as a validated dict with TorchServe's defaults filled in."""
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ArchiveError(f"{source}: {MANIFEST_PATH} is not valid JSON ({e})") from None
    except RecursionError:
        raise ArchiveError(f"{source}: {too_deep(MANIFEST_PATH)}") from None
    check_nesting(manifest, f"{source}: {MANIFEST_PATH}")
    if not isinstance(manifest, dict):
        raise ArchiveError(f"{source}: {MANIFEST_PATH} must hold a JSON object, not {type(manifest).__name__}")
    model = manifest.get("model")
    if not isinstance(model, dict):
        raise ArchiveError(f"{source}: {MANIFEST_PATH} has no 'model' object (Missing Model entry in manifest file)")
    manifest.setdefault("runtime", "python")
    if manifest["runtime"] not in RUNTIMES:
        raise ArchiveError(f"{source}: manifest runtime {manifest['runtime']!r} is not one of {', '.join(RUNTIMES)}")
    _check_model(model, source)
    return manifest


def _check_model(model: dict[str, Any], source: str) -> None:
    for key in _STRING_KEYS:
        if key in model and not isinstance(model[key], str):
            raise ArchiveError(f"{source}: manifest model.{key} must be a string, not {model[key]!r}")
    if "modelName" not in model:
        raise ArchiveError(f"{source}: manifest model has no modelName (Model name is not defined)")
    check_model_name(model["modelName"])
    version = model.setdefault("modelVersion", DEFAULT_VERSION)
    if isinstance(version, (int, float)) and not isinstance(version, bool):
        version = model["modelVersion"] = str(version)  # TorchServe's JSON reader takes numbers for strings
    if not isinstance(version, str):
        raise ArchiveError(f"{source}: manifest model.modelVersion must be a string, not {version!r}")
    check_version(version)
    model.setdefault("handler", DEFAULT_HANDLER)
    if "torchCompat" in model and not isinstance(model["torchCompat"], bool):
        raise ArchiveError(f"{source}: manifest model.torchCompat must be true or false, not {model['torchCompat']!r}")
    extra = model.get("extraFiles")
    listed = isinstance(extra, list) and all(isinstance(x, str) for x in extra)
    if extra is not None and not isinstance(extra, str) and not listed:
        raise ArchiveError(f"{source}: manifest model.extraFiles must be a string or a list of strings")


def referenced_files(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(manifest key, archive path) for every file the manifest says the archive holds.

    The handler counts when it is not a built-in: `h`, `h.py`, `h:fn` and `h.py:fn` all need `h.py` (or the
    package `h/__init__.py`: the reader accepts both), a dotted module `pkg.h` needs `pkg/h.py`. LSP (C++)
    handlers are shared libraries the server does not run: not checked.
    """
    model = manifest["model"]
    refs = [(key, model[key]) for key in FILE_KEYS if model.get(key)]
    extra = model.get("extraFiles")
    if extra:
        names = extra.split(",") if isinstance(extra, str) else extra
        refs += [("extraFiles", name.strip()) for name in names if name.strip()]
    handler = model.get("handler", DEFAULT_HANDLER)
    if manifest.get("runtime", "python") in PYTHON_RUNTIMES and handler not in BUILTIN_HANDLERS:
        module = handler_module(handler)
        refs.append(("handler", (module if "/" in module else module.replace(".", "/")) + ".py"))
    return refs
