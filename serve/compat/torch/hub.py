"""`torch.hub` on serve: checkpoints from the local hub cache only, never from the network.

`load_state_dict_from_url(url, ...)` reads `<model_dir>/<file name>` with serve.load, where model_dir defaults to
`get_dir()/checkpoints` and the file name is `file_name` or the URL's last path part, exactly where torch would
have cached the download. A missing file is an error naming the path to put it at (fetch it once elsewhere, e.g.
with `torch.hub.load_state_dict_from_url` on a machine with network, and copy it there). `get_dir()` is torch's:
`$TORCH_HOME/hub`, TORCH_HOME defaulting to `$XDG_CACHE_HOME/torch`, then `~/.cache/torch`; the environment is read
through serve.config.environment, the one module that reads it. `set_dir` overrides it for the process.
A serving worker must not download at request or load time: there is no network path here at all.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import serve
from serve.config import environment

_override: list[str] = []


def get_dir() -> str:
    """The hub cache directory: set_dir's, else $TORCH_HOME/hub (TORCH_HOME: $XDG_CACHE_HOME/torch, ~/.cache/torch)."""
    return _override[-1] if _override else os.path.join(_get_torch_home(), "hub")


def _get_torch_home() -> str:
    """$TORCH_HOME, else $XDG_CACHE_HOME/torch, else ~/.cache/torch (torch's private name; torchvision calls it)."""
    env = environment.current()
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.expanduser(env.get("TORCH_HOME") or os.path.join(cache, "torch"))


def set_dir(d: str | os.PathLike[str]) -> None:
    """Use `d` as the hub cache directory for the rest of the process."""
    _override.append(os.fspath(d))


def load_state_dict_from_url(url: str, model_dir: str | None = None, map_location: Any = None, progress: bool = True,
                             check_hash: bool = False, file_name: str | None = None,
                             weights_only: bool = True) -> Any:  # fmt: skip
    """The checkpoint torch would have cached for `url`, read from the local cache with serve.load (never downloaded).

    check_hash is not supported (refused when true) and progress is ignored."""
    name = file_name or os.path.basename(urlparse(url).path)
    if not name:
        raise ValueError(f"load_state_dict_from_url: no file name in {url!r}: pass file_name=")
    path = Path(model_dir or os.path.join(get_dir(), "checkpoints")) / name
    if not path.is_file():
        raise FileNotFoundError(
            f"torch.hub.load_state_dict_from_url({url!r}): serve never downloads; put the file at {path} (download "
            "it once on a machine with network access), or set TORCH_HOME / pass model_dir to where it is"
        )
    if check_hash:
        raise ValueError("load_state_dict_from_url(check_hash=True) is not supported on serve: pass check_hash=False")
    return serve.load(path, map_location=map_location, weights_only=weights_only)


def load(repo_or_dir: str, model: str, *args: Any, **kwargs: Any) -> Any:
    """Refused: hub entry points run code fetched from a repository."""
    raise NotImplementedError(
        f"torch.hub.load({repo_or_dir!r}, {model!r}) is not supported on serve: put the model's definition in the "
        "archive's model file and its weights in --serialized-file"
    )


def download_url_to_file(url: str, dst: str, *args: Any, **kwargs: Any) -> None:
    """Refused: serve never downloads."""
    raise NotImplementedError(f"torch.hub.download_url_to_file({url!r}): serve never downloads; copy the file to {dst}")
