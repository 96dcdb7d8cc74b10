"""A Hugging Face folder's weights as numpy arrays by name: model.safetensors, or the shards that
model.safetensors.index.json lists.

Decisions, and why:
- serve's own safetensors reader (serve.load), not the `safetensors` package's numpy API: it reads bfloat16 (most
  published checkpoints) into ml_dtypes arrays and checks the header as a security boundary, as every other
  checkpoint serve loads is checked.
- The families convert and transpose what they take (`Weights.take`), so a name is read once and the file's arrays
  can be dropped as the model is built; names left over at the end are reported (a checkpoint of another family
  or a config that does not fit its weights) instead of being silently ignored.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from serve.errors import CheckpointError
from serve.serialization import load
from serve.zoo.decoders.config import read_json

__all__ = ["Weights", "read_weights"]

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


def read_weights(folder: Path) -> Weights:
    """Every tensor of the folder's safetensors checkpoint (one file, or the index's shards)."""
    if (folder / INDEX).is_file():
        weight_map = read_json(folder / INDEX).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{INDEX}: the key 'weight_map' is missing or empty")
        shards = sorted(set(weight_map.values()))
        arrays: dict[str, np.ndarray] = {}
        for shard in shards:
            if not isinstance(shard, str) or Path(shard).name != shard:
                raise CheckpointError(f"{INDEX}: weight_map names '{shard}', not a file name in the folder")
            arrays.update(_read_file(folder / shard))
        missing = sorted(set(weight_map) - set(arrays))
        if missing:
            raise CheckpointError(f"{INDEX}: {len(missing)} tensors are not in their shards, e.g. {missing[:3]}")
        return Weights(arrays, INDEX)
    if (folder / SINGLE).is_file():
        return Weights(_read_file(folder / SINGLE), SINGLE)
    raise CheckpointError(
        f"{folder}: no {SINGLE} or {INDEX} (serve reads safetensors checkpoints; convert a pytorch_model.bin "
        "with transformers' save_pretrained(safe_serialization=True))"
    )


def _read_file(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise CheckpointError(f"{path.name}: listed by {INDEX} but not found in {path.parent}")
    tensors = load(path)
    if not isinstance(tensors, dict):
        raise CheckpointError(f"{path.name}: not a safetensors file of named tensors")
    return {name: t.numpy() for name, t in tensors.items()}


class Weights:
    """The checkpoint's arrays; `take` hands one out converted, and `finish` reports the names never taken."""

    def __init__(self, arrays: dict[str, np.ndarray], file: str) -> None:
        self.arrays, self.file = arrays, file

    def __contains__(self, name: str) -> bool:
        return name in self.arrays

    def take(self, name: str, shape: tuple[int, ...], dtype: np.dtype, transpose: bool = False) -> np.ndarray:
        """The tensor `name`, checked against `shape` (as stored), converted to `dtype`, transposed when asked
        (torch's Linear stores (out, in); `x @ W` wants (in, out), contiguous)."""
        if name not in self.arrays:
            raise CheckpointError(f"{self.file}: the tensor '{name}' is missing")
        array = self.arrays.pop(name)
        if tuple(array.shape) != shape:
            raise CheckpointError(f"{self.file}: '{name}' has shape {tuple(array.shape)}, config.json implies {shape}")
        array = array.astype(dtype, copy=False)
        return np.ascontiguousarray(array.T if transpose else array)

    def finish(self, ignore: tuple[str, ...] = ()) -> None:
        left = sorted(n for n in self.arrays if not n.endswith(ignore))
        if left:
            raise CheckpointError(
                f"{self.file}: {len(left)} tensors the model does not use, e.g. {left[:3]} "
                "(is config.json's model_type the checkpoint's?)"
            )
