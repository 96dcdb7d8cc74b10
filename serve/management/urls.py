"""Where a registration's `url` points: a file in the model store, a path or file:// URL, or an http(s) URL.

    path, downloaded = await resolve_url("digits.mar", settings)

Rules (TorchServe's, spec section 2.1, with its messages):
- a plain name is a file or directory in `model_store`; sub-directories and `..` are refused;
- an absolute path or `file://` URL is allowed when it lies inside `model_store`, or when the URL (a path is
  checked as `file://<path>`) fully matches one of the `allowed_urls` regexes, case-insensitively;
- the store itself (`.`, its own path) or a directory that holds it is refused with 400: it is not a model;
- an `http(s)://` URL must match `allowed_urls`; it is downloaded into `model_store/<basename>` (never over an
  existing file) and the registry deletes it again on unregister, as TorchServe does.
Settings' default `allowed_urls` is empty, so out of the box only the model store can be registered from
(TorchServe's default allows any URL: CVE-2023-43654).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import urllib.request
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from serve.config import Settings
from serve.errors import InvalidInput, ModelNotFound

DOWNLOAD_TIMEOUT_S = 60


async def resolve_url(url: str, settings: Settings) -> tuple[Path, bool]:
    """The local path of `url`, and whether it was downloaded (the registry deletes downloads on unregister)."""
    if not url:
        raise ModelNotFound("empty url")
    if ".." in PurePosixPath(url.replace("\\", "/")).parts:
        raise ModelNotFound(f"Relative path is not allowed in url: {url}")
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        _check_allowed(url, url, settings)
        return await asyncio.to_thread(_download, url, settings), True
    if scheme == "file":
        path = Path(unquote(urlsplit(url).path))
        _check_local(url, path, settings)
    elif Path(url).is_absolute():
        path = Path(url)
        _check_local(url, path, settings)
    else:
        path = _in_store(url, settings)
    if not path.exists():
        raise ModelNotFound(f"Model not found at: {url}")
    _check_not_the_store(url, path, settings)
    return path, False


def _check_not_the_store(url: str, path: Path, settings: Settings) -> None:
    """The store itself (`url=.`, its own path) or a directory holding it is no model: 400, not a failed load."""
    store = settings.model_store
    if store is not None and store.resolve().is_relative_to(path.resolve()):
        raise InvalidInput(f"url {url!r} is the model store itself or a directory that holds it, not a model; give "
                           f"the name of a model archive or model directory inside {store}")  # fmt: skip


def _in_store(url: str, settings: Settings) -> Path:
    if settings.model_store is None:
        raise ModelNotFound(f"Model not found in model store: {url}; no model_store is configured "
                            "(start with --model-store DIR)")  # fmt: skip
    if "/" in url or "\\" in url:
        raise ModelNotFound(f"Model not found in model store: {url}; give the name of a file or directory in "
                            f"{settings.model_store}, or an absolute path or file:// URL")  # fmt: skip
    return settings.model_store / url


def _check_local(url: str, path: Path, settings: Settings) -> None:
    store = settings.model_store
    if store is not None and path.resolve().is_relative_to(store.resolve()):
        return
    _check_allowed(url, url if url.lower().startswith("file:") else f"file://{url}", settings)


def _check_allowed(url: str, candidate: str, settings: Settings) -> None:
    for pattern in settings.allowed_urls:
        try:
            if re.fullmatch(pattern, candidate, re.IGNORECASE):
                return
        except re.error:
            continue  # the config loader refuses bad patterns; an embedded Settings may still hold one
    raise ModelNotFound(f"Given URL {url} does not match any allowed URL(s)")


def _download(url: str, settings: Settings) -> Path:
    if settings.model_store is None:
        raise InvalidInput(f"Failed to download archive from: {url}; no model_store is configured to save it in")
    name = Path(unquote(urlsplit(url).path)).name
    if not name:
        raise InvalidInput(f"Failed to download archive from: {url}; the URL names no file")
    target = settings.model_store / name
    if target.exists():
        error = InvalidInput(f"Model file already exists {target}; register it by name, or remove it first")
        error.code = 409  # type: ignore[attr-defined]  # TorchServe: 500; it is a conflict, not a server fault
        raise error
    fd, tmp = tempfile.mkstemp(dir=settings.model_store, prefix=".download-")
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, open(fd, "wb") as out:
            shutil.copyfileobj(response, out)
        Path(tmp).rename(target)
    except OSError as e:
        raise InvalidInput(f"Failed to download archive from: {url} ({e})") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target
