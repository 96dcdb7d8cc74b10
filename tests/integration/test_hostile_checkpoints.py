"""A hostile checkpoint inside an archive is the archive's fault: registering it is a 400 (issue 24 item 6).

Each archive holds a 4 -> 3 linear layer's model file and the tensor handler, with a serialized file crafted here
byte by byte: a pickle whose REDUCE calls a global outside the allowlist (os.system, with a canary that must not
appear), a zero-stride view claiming 3.6 TiB over an 8-byte storage, a view reaching past its storage, and
safetensors files whose tensors overlap or whose offsets run past the data, and a well-formed checkpoint whose
shapes do not fit the model file (the archive's fault too). Registering each one (synchronous,
one worker) must answer 400 InvalidModelException naming the file and the problem, leave the model unregistered,
and run nothing; a well-formed archive registers beside them.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import serve
from serve.archive import package
from tests.integration.server import LIN_MODEL, ServerProcess, _Lin
from tests.unit.serialization.files import safetensors_file, torch_zip

TIMEOUT = 120


def _string(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _ints(values: tuple[int, ...]) -> bytes:
    return b"(" + b"".join(b"J" + struct.pack("<i", v) for v in values) + b"t"


def _view(numel: int, size: tuple[int, ...], stride: tuple[int, ...], key: str) -> bytes:
    """Opcodes of torch's `_rebuild_tensor_v2` over float storage `key` of `numel` elements."""
    pid = b"(" + _string("storage") + b"ctorch\nFloatStorage\n" + _string(key) + _string("cpu")
    pid += b"\x8a\x08" + struct.pack("<q", numel) + b"tQ"
    args = b"(" + pid + b"J\x00\x00\x00\x00" + _ints(size) + _ints(stride) + b"\x89)t"
    return b"ctorch._utils\n_rebuild_tensor_v2\n" + args + b"R"


def _state_dict(weight: bytes) -> bytes:
    """data.pkl of {"fc.weight": <weight opcodes>, "fc.bias": a (3,) tensor on storage "1"}."""
    bias = _view(3, (3,), (1,), "1")
    return b"\x80\x02}(" + _string("fc.weight") + weight + _string("fc.bias") + bias + b"u."


def hostile_files(canary: Path) -> dict[str, tuple[str, bytes, str]]:
    """case -> (file name, bytes, what the 400 must say)."""
    bias = b"\x00" * 12
    reduce = b"cos\nsystem\n(" + _string(f"touch {canary}") + b"tR"
    overlap = {"fc.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]},
               "fc.bias": {"dtype": "F32", "shape": [3], "data_offsets": [40, 52]}}  # fmt: skip
    past_end = {"fc.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]},
                "fc.bias": {"dtype": "F32", "shape": [3], "data_offsets": [48, 60]}}  # fmt: skip
    storages = {"0": b"\x00" * 8, "1": bias}
    zero_stride = torch_zip(_state_dict(_view(2, (10**6, 10**6), (0, 0), "0")), storages)  # 3.6 TiB from 8 bytes
    past_storage = torch_zip(_state_dict(_view(2, (3, 4), (4, 1), "0")), storages)
    mismatch = torch_zip(_state_dict(_view(20, (5, 4), (4, 1), "0")), {"0": b"\x00" * 80, "1": bias})  # not (3, 4)
    return {
        "reduce": ("lin.pt", torch_zip(_state_dict(reduce), {"1": bias}), "refused to load global 'os.system'"),
        "zero_stride": ("lin.pt", zero_stride, "zero strides"),
        "past_storage": ("lin.pt", past_storage, "needs 12 elements but its storage '0' has only 2"),
        "overlap": ("lin.safetensors", safetensors_file(overlap, b"\x00" * 52), "would overlap"),
        "offset_out_of_range": ("lin.safetensors", safetensors_file(past_end, b"\x00" * 52), "safetensors"),
        "mismatch": ("lin.pt", mismatch, "size mismatch for fc.weight: checkpoint (5, 4) vs model (3, 4)"),
    }


def _archive(src: Path, store: Path, name: str, weights_name: str, weights: bytes) -> None:
    src.mkdir(parents=True)
    (src / "model.py").write_text(LIN_MODEL)
    (src / weights_name).write_bytes(weights)
    package(name, "1.0", "tensor", model_file=src / "model.py", serialized_file=src / weights_name,
            export_path=store, progress=False)  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("hostile_checkpoints")
    store = base / "store"
    store.mkdir()
    canary = base / "canary"
    for case, (file_name, data, _) in hostile_files(canary).items():
        _archive(base / "src" / case, store, case, file_name, data)
    good = base / "src" / "good"
    good.mkdir(parents=True)
    serve.save(_Lin().state_dict(), good / "lin.pt")
    _archive(base / "src" / "good_lin", store, "good_lin", "lin.pt", (good / "lin.pt").read_bytes())
    server = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--enable-model-api").start()
    try:
        yield {"server": server, "canary": canary}
    finally:
        server.stop()


@pytest.mark.parametrize("case", sorted(hostile_files(Path("canary"))))
def test_a_hostile_checkpoint_is_a_400_at_registration(world: dict, case: str) -> None:
    server = world["server"]
    file_name, _, problem = hostile_files(world["canary"])[case]
    r = httpx.post(f"{server.management}/models?url={case}.mar&initial_workers=1&synchronous=true", timeout=TIMEOUT)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["type"] == "InvalidModelException" and body["code"] == 400
    assert file_name in body["message"] and problem in body["message"], body["message"]
    assert "Traceback" not in body["message"]
    assert httpx.get(f"{server.management}/models/{case}", timeout=TIMEOUT).status_code == 404
    assert not world["canary"].exists(), "the checkpoint ran code"


def test_a_well_formed_archive_registers_beside_them(world: dict) -> None:
    server = world["server"]
    r = httpx.post(f"{server.management}/models?url=good_lin.mar&initial_workers=1&synchronous=true", timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    answer = httpx.post(f"{server.inference}/predictions/good_lin", content=json.dumps([1.0, 2.0, 3.0, 4.0]),
                        headers={"Content-Type": "application/json"}, timeout=TIMEOUT)  # fmt: skip
    assert answer.status_code == 200 and len(answer.json()) == 3
