"""serve.load on the committed fixtures written by torch 2.13 equals torch.load's result (no torch needed).

Each fixture's `describe(torch.load(...))` is in expected.json: dtypes, shapes, strides, storage offsets, which
tensors share a storage, Parameters, requires_grad and values. Read from a path, a mapped path and a buffer.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

import serve
from serve.serialization import find_state_dict
from tests.unit.serialization.files import describe

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checkpoints"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


@pytest.mark.parametrize("how", ["path", "mmap", "buffer"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_matches_torch(name: str, how: str) -> None:
    path = FIXTURES / name
    if how == "mmap" and name == "legacy.pth":
        with pytest.raises(RuntimeError, match="mmap can only be used"):
            serve.load(path, mmap=True)
        return
    obj = serve.load(io.BytesIO(path.read_bytes())) if how == "buffer" else serve.load(path, mmap=how == "mmap")
    assert describe(obj) == EXPECTED[name]


def test_tied_weights_stay_one_array() -> None:
    sd = serve.load(FIXTURES / "state_dict.pt")
    emb, head = sd["emb.weight"], sd["head.weight"]
    assert np.shares_memory(emb.numpy(), head.numpy())
    emb.add_(1.0)  # a write through one is seen through the other, as with torch's shared storage
    assert serve.equal(emb, head)


def test_mmap_views_the_file_copy_on_write() -> None:
    path = FIXTURES / "tensors.pt"
    before = path.read_bytes()
    sd = serve.load(path, mmap=True)
    base = sd["base"].numpy()
    assert not base.flags.owndata and base.flags.writeable
    sd["base"].add_(100.0)  # private pages: the file itself never changes
    assert path.read_bytes() == before
    assert serve.load(path)["base"][0, 0].item() == 0.0


def test_nested_checkpoint_and_dataparallel_prefix() -> None:
    ckpt = serve.load(FIXTURES / "checkpoint.ckpt")
    assert ckpt["epoch"] == 3 and ckpt["note"] == "tiny" and ckpt["flags"] == (True, None)
    assert ckpt["optimizer_state_dict"]["param_groups"][0]["lr"] == 1e-3
    plain = find_state_dict(ckpt)
    wrapped = find_state_dict(serve.load(FIXTURES / "dataparallel.bin"))
    assert list(plain) == list(wrapped) == list(serve.load(FIXTURES / "state_dict.pt"))
    assert wrapped._metadata[""] == {"version": 1} and "module" not in wrapped._metadata
    for key in plain:
        assert serve.equal(plain[key], wrapped[key])
