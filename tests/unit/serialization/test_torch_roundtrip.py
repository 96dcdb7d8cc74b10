"""Live round trips with PyTorch: torch.save -> serve.load and serve.save -> torch.load(weights_only=True).

`describe` (files.py) gives the same plain description for torch and serve objects: dtypes, shapes, strides,
offsets, shared storages, Parameters, requires_grad and values; equal descriptions are equal loads.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

import serve
from serve.errors import CheckpointError
from serve.serialization import find_state_dict
from tests.helpers import needs_torch, torch
from tests.unit.serialization.files import describe, patch_pickle, to_big_endian

pytestmark = [needs_torch, pytest.mark.torch]

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
          "complex64", "complex128"]  # fmt: skip


def _random(dtype: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    dt = getattr(torch, dtype)
    if dt == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dt.is_complex or dt.is_floating_point:
        return (torch.randn(shape, generator=gen, dtype=torch.float64 if dt.is_floating_point else dt) * 4).to(dt)
    return torch.randint(0 if dt == torch.uint8 else -100, 100, shape, generator=gen).to(dt)


def _views(gen: torch.Generator, dtype: str) -> OrderedDict:
    """Random shapes, plus non-contiguous, offset, expanded and shared views of one storage."""
    shapes = [tuple(int(s) for s in torch.randint(0, 5, (int(torch.randint(0, 4, (1,), generator=gen)),),
                                                   generator=gen)) for _ in range(4)]  # fmt: skip
    out = OrderedDict((f"random{i}", _random(dtype, s, gen)) for i, s in enumerate(shapes))
    base = _random(dtype, (5, 6), gen)
    out |= {"base": base, "t": base.t(), "rows": base[2:4], "cols": base[:, 1::3], "elem": base[4, 5],
            "expanded": base[0:1].expand(3, 6), "scalar": _random(dtype, (), gen)}  # fmt: skip
    return out


def _torch_load(data: bytes, **kwargs: object) -> object:
    return torch.load(io.BytesIO(data), weights_only=True, **kwargs)


def _torch_save(obj: object, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, **kwargs)
    return buf.getvalue()


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_to_serve_random_shapes_and_views(dtype: str, tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(DTYPES.index(dtype))
    path = tmp_path / "views.pt"
    torch.save(_views(gen, dtype), path)
    expected = describe(torch.load(path, weights_only=True))
    assert describe(serve.load(path)) == expected
    assert describe(serve.load(path, mmap=True)) == expected


@pytest.mark.parametrize("dtype", DTYPES)
def test_serve_to_torch_is_bit_exact(dtype: str) -> None:
    gen = torch.Generator().manual_seed(100 + DTYPES.index(dtype))
    ours = serve.load(io.BytesIO(_torch_save(_views(gen, dtype))))
    buf = io.BytesIO()
    serve.save(ours, buf)
    for kwargs in ({}, {"mmap": False}):
        back = _torch_load(buf.getvalue(), **kwargs)
        assert describe(back) == describe(ours)  # values, strides, offsets and shared storages
        for key, t in back.items():
            raw = t.contiguous().view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8)
            ref = np.ascontiguousarray(ours[key].numpy()).reshape(-1).view(np.uint8)
            assert raw.numpy().tobytes() == ref.tobytes(), key


def test_serve_save_readable_by_torch_mmap(tmp_path: Path) -> None:
    sd = OrderedDict(w=serve.randn(64, 32), b=serve.zeros(32, dtype=serve.bfloat16), n=serve.tensor(3))
    serve.save(sd, tmp_path / "m.pt")
    back = torch.load(tmp_path / "m.pt", weights_only=True, mmap=True)
    assert describe(back) == describe(sd)


def test_parameters_and_requires_grad_both_ways() -> None:
    sd = {"p": torch.nn.Parameter(torch.randn(3)), "frozen": torch.nn.Parameter(torch.ones(2), requires_grad=False),
          "leaf": torch.randn(2).requires_grad_()}  # fmt: skip
    ours = serve.load(io.BytesIO(_torch_save(sd)))
    assert isinstance(ours["p"], serve.nn.Parameter) and ours["p"].requires_grad
    assert isinstance(ours["frozen"], serve.nn.Parameter) and not ours["frozen"].requires_grad
    assert not isinstance(ours["leaf"], serve.nn.Parameter) and ours["leaf"].requires_grad
    buf = io.BytesIO()
    serve.save(ours, buf)
    assert describe(_torch_load(buf.getvalue())) == describe(sd)


def test_nested_checkpoint_both_ways() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    ckpt = {"epoch": 3, "model_state_dict": model.state_dict(), "optimizer_state_dict": opt.state_dict(),
            "loss": torch.tensor(0.5), "meta": {"name": "m", "ids": {1, 2}, "shape": torch.Size([2, 3]),
            "dtype": torch.float16, "bytes": b"\x00\xff", "none": None, "pair": (1.5, -2)}}  # fmt: skip
    ours = serve.load(io.BytesIO(_torch_save(ckpt)))
    assert describe(ours) == describe(ckpt)
    assert ours["meta"]["shape"] == (2, 3) and ours["meta"]["dtype"] is serve.float16
    assert ours["model_state_dict"]._metadata == ckpt["model_state_dict"]._metadata
    buf = io.BytesIO()
    serve.save(ours, buf)
    back = _torch_load(buf.getvalue())
    assert describe(back) == describe(ckpt)
    assert back["meta"]["dtype"] is torch.float16 and back["meta"]["shape"] == torch.Size([2, 3])


@pytest.mark.parametrize("protocol", [1, 2, 3, 4, 5])
def test_pickle_protocols(protocol: int) -> None:
    obj = {"w": torch.randn(2, 3), "meta": OrderedDict(a=[1, 2**40, -(2**70)], b=(True, False), c="é")}
    assert describe(serve.load(io.BytesIO(_torch_save(obj, pickle_protocol=protocol)))) == describe(obj)


def test_legacy_format(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(7)
    obj = {"views": _views(gen, "float32"), "ints": _views(gen, "int64"), "n": 3}
    path = tmp_path / "legacy.pt"
    torch.save(obj, path, _use_new_zipfile_serialization=False)
    expected = describe(torch.load(path, weights_only=True))
    assert describe(serve.load(path)) == expected
    assert describe(serve.load(io.BytesIO(path.read_bytes()))) == expected


def test_big_endian_checkpoint() -> None:
    gen = torch.Generator().manual_seed(8)
    obj = {dt: _views(gen, dt) for dt in DTYPES}
    big = to_big_endian(_torch_save(obj))
    expected = describe(_torch_load(big))
    assert expected == describe(obj)
    assert describe(serve.load(io.BytesIO(big))) == expected


def test_dataparallel_checkpoint_loads_into_a_serve_model() -> None:
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)).eval()
    ref[1](torch.randn(16, 8))  # running statistics away from their defaults
    ckpt = {"epoch": 1, "state_dict": torch.nn.DataParallel(ref).state_dict()}
    ours = serve.nn.Sequential(serve.nn.Linear(4, 8), serve.nn.BatchNorm1d(8), serve.nn.Linear(8, 2)).eval()
    ours.load_state_dict(find_state_dict(serve.load(io.BytesIO(_torch_save(ckpt)))))
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    with torch.no_grad(), serve.no_grad():
        expected = ref(torch.from_numpy(x)).numpy()
        got = ours(serve.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_whole_pickled_module_is_refused_by_name() -> None:
    data = _torch_save(torch.nn.Linear(2, 2))
    with pytest.raises(CheckpointError, match=r"refused to load global 'torch\.nn\.modules\.linear\.Linear'"):
        serve.load(io.BytesIO(data))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torchscript_archive_is_refused(tmp_path: Path) -> None:
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), tmp_path / "m.pt")
    with pytest.raises(CheckpointError, match="TorchScript"):
        serve.load(tmp_path / "m.pt")


def test_storage_location_tags_follow_torch(tmp_path: Path) -> None:
    data = patch_pickle(_torch_save({"w": torch.ones(2)}), b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
    with pytest.raises(RuntimeError, match="CUDA"):
        _torch_load(data)
    with pytest.raises(RuntimeError, match=r"CUDA device but serve\.cuda\.is_available"):
        serve.load(io.BytesIO(data))
    assert serve.equal(serve.load(io.BytesIO(data), map_location="cpu")["w"], serve.ones(2))


def test_tensors_with_python_attributes() -> None:
    p = torch.nn.Parameter(torch.randn(2))
    p.hf_flag = True  # pickled through _rebuild_parameter_with_state
    t = torch.randn(3)
    t.note = "x"  # pickled through torch._tensor._rebuild_from_type_v2
    ours = serve.load(io.BytesIO(_torch_save({"p": p, "t": t})))
    assert isinstance(ours["p"], serve.nn.Parameter) and ours["p"].tolist() == p.tolist()
    assert type(ours["t"]) is serve.Tensor and ours["t"].tolist() == t.tolist()


def test_large_entries_use_zip64_and_stay_aligned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import zipfile

    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 1000)  # what a >2 GB storage does, with 4 KB ones
    sd = OrderedDict(a=serve.randn(1024), b=serve.randn(3), c=serve.randn(2048))
    serve.save(sd, tmp_path / "big.pt")
    monkeypatch.undo()
    with zipfile.ZipFile(tmp_path / "big.pt") as zf:
        for info in zf.infolist():
            if "/data/" in info.filename:
                with open(tmp_path / "big.pt", "rb") as f:
                    f.seek(info.header_offset + 26)
                    name_len, extra_len = np.frombuffer(f.read(4), "<u2")
                assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0
    for mmap in (False, True):
        assert describe(torch.load(tmp_path / "big.pt", weights_only=True, mmap=mmap)) == describe(sd)
        assert describe(serve.load(tmp_path / "big.pt", mmap=mmap)) == describe(sd)
