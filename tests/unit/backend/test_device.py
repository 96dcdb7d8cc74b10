"""The device registry: parsing device strings like torch.device, and backends loaded on demand."""

from __future__ import annotations

import importlib.util
import sys

import pytest

import serve
from serve import backend
from serve.backend import ops_cpu


@pytest.mark.parametrize(
    ("spec", "type_", "index", "text"),
    [
        ("cpu", "cpu", None, "cpu"),
        ("cuda", "cuda", None, "cuda"),
        ("cuda:1", "cuda", 1, "cuda:1"),
        (2, "cuda", 2, "cuda:2"),
    ],
)
def test_device_parsing(spec, type_, index, text):
    d = serve.device(spec)
    assert (d.type, d.index, str(d)) == (type_, index, text)
    assert d == serve.device(text) and hash(d) == hash(serve.device(text))


def test_device_with_separate_index_and_repr():
    assert serve.device("cuda", 0) == serve.device("cuda:0")
    assert repr(serve.device("cpu")) == "device(type='cpu')"
    assert repr(serve.device("cuda:1")) == "device(type='cuda', index=1)"


@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "cuda:-1", "gpu:0"])
def test_bad_device_strings_raise(bad):
    with pytest.raises(RuntimeError):
        serve.device(bad)


def test_cpu_backend_is_numpy_module():
    assert backend.get_ops(serve.device("cpu")) is ops_cpu
    assert backend.is_available("cpu")


def test_cuda_unavailable_says_so_and_never_imports_cupy():
    if serve.cuda.is_available():
        pytest.skip("a GPU is present")
    assert serve.cuda.device_count() == 0
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        serve.ones(2).cuda()
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        serve.zeros(2, device="cuda")
    if importlib.util.find_spec("cupy") is None:  # with CuPy installed (and no GPU), asking imports it
        assert "cupy" not in sys.modules


def test_register_a_backend_module_by_name():
    saved_name, saved_module = backend._MODULES["cuda"], backend._loaded.get("cuda")
    backend.register("cuda", "serve.backend.ops_cpu")  # stands in for the CUDA module
    try:
        assert backend.get_ops(serve.device("cuda:0")) is ops_cpu
    finally:
        backend.register("cuda", saved_name)
        if saved_module is not None:
            backend._loaded["cuda"] = saved_module
    assert backend._MODULES["cuda"] == "serve.backend.ops_cuda"
    assert backend.is_available("cuda") == serve.cuda.is_available()
