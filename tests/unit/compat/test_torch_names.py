"""The thin `torch` names (serve.compat.torch) on the `torch` alias, each checked against PyTorch's behaviour where
torch is installed (same result, same exception type) and against its documented contract otherwise."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import serve
from serve.compat.torch import hub, jit
from serve.compat.torch.utils import data
from serve.worker.torch_compat import torch_compat
from tests.helpers import needs_torch, torch


def alias():
    with torch_compat():
        import torch as t
    return t


def test_the_names_are_on_the_torch_alias():
    t = alias()
    assert t._C._log_api_usage_once("torchvision.models.resnet") is None
    assert t.jit.is_scripting() is False and t.jit.is_tracing() is False
    assert t.fx.wrap("len") == "len" and t.utils.checkpoint.checkpoint(lambda a, b: a + b, 1, 2) == 3
    assert t.hub.get_dir().endswith("hub") and t.utils.data.DataLoader is data.DataLoader


@needs_torch
@pytest.mark.parametrize("condition", [True, False, 1, 0])
def test_assert_matches_torch(condition):
    outcomes = []
    for fn in (torch._assert, alias()._assert):
        try:
            fn(condition, "bad shape")
            outcomes.append(None)
        except AssertionError as e:
            outcomes.append(str(e))
    assert outcomes[0] == outcomes[1] and outcomes[0] == (None if condition else "bad shape")


def test_assert_on_a_tensor_condition():
    alias()._assert(serve.tensor(True), "never")
    with pytest.raises(AssertionError, match="x must be positive"):
        alias()._assert(serve.tensor(-1.0) > 0, "x must be positive")


def test_jit_decorators_keep_the_function():
    def f(x):
        return x + 1

    assert jit.unused(f) is f and jit.export(f) is f and jit.ignore(f) is f and jit.ignore(drop=True)(f) is f


def test_jit_script_and_trace_return_the_module_and_warn_once(monkeypatch):
    monkeypatch.setattr(jit, "_warned", [])
    model = serve.nn.Linear(2, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jit.script(model) is model and jit.trace(model, serve.ones(1, 2)) is model
    assert len(caught) == 1 and "runs eagerly" in str(caught[0].message)


def test_jit_load_and_fx_trace_refuse_clearly():
    with pytest.raises(NotImplementedError, match=r"TorchScript models are not supported.*state_dict"):
        jit.load("model.pt")
    with pytest.raises(NotImplementedError, match=r"symbolic_trace is not available.*register_forward_hook"):
        alias().fx.symbolic_trace(serve.nn.Linear(1, 1))


def test_fx_wrap_as_decorator():
    t = alias()

    @t.fx.wrap
    def g(x):
        return 2 * x

    assert g(3) == 6


def test_checkpoint_runs_the_function_with_gradients():
    from serve.compat.torch.utils.checkpoint import checkpoint, checkpoint_sequential

    x = serve.tensor([1.0, 2.0], requires_grad=True)
    y = checkpoint(lambda a: (a * a).sum(), x, use_reentrant=False, preserve_rng_state=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])
    seq = serve.nn.Sequential(serve.nn.ReLU(), serve.nn.Identity())
    assert checkpoint_sequential(seq, 2, serve.tensor([-1.0, 1.0])).tolist() == [0.0, 1.0]


@needs_torch
@pytest.mark.parametrize(
    ("n", "batch_size", "drop_last"), [(10, 3, False), (10, 3, True), (4, 4, False), (5, None, False)]
)
def test_dataloader_batches_like_torch(n, batch_size, drop_last):
    xs = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    ys = np.arange(n)
    ours = data.DataLoader(data.TensorDataset(serve.from_numpy(xs), serve.from_numpy(ys)), batch_size=batch_size,
                           drop_last=drop_last)  # fmt: skip
    theirs = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(xs), torch.from_numpy(ys)),
                                         batch_size=batch_size, drop_last=drop_last)  # fmt: skip
    assert len(ours) == len(theirs)
    got, want = list(ours), list(theirs)
    assert len(got) == len(want)
    for (ox, oy), (tx, ty) in zip(got, want, strict=True):
        np.testing.assert_array_equal(ox.numpy(), tx.numpy())
        np.testing.assert_array_equal(oy.numpy(), ty.numpy())


@needs_torch
def test_dataloader_collates_dicts_numbers_and_custom_datasets_like_torch():
    class Items(data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": serve.ones(2) * i, "label": i, "name": f"n{i}"}

    class TorchItems(torch.utils.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": torch.ones(2) * i, "label": i, "name": f"n{i}"}

    for ours, theirs in zip(data.DataLoader(Items(), batch_size=2), torch.utils.data.DataLoader(TorchItems(), 2)):
        np.testing.assert_array_equal(ours["x"].numpy(), theirs["x"].numpy())
        assert ours["label"].tolist() == theirs["label"].tolist() and ours["name"] == theirs["name"]


def test_dataloader_shuffle_is_a_seeded_permutation_and_workers_are_refused():
    ds = data.TensorDataset(serve.arange(10))
    serve.manual_seed(0)
    first = [b[0].tolist() for b in data.DataLoader(ds, batch_size=4, shuffle=True)]
    serve.manual_seed(0)
    assert first == [b[0].tolist() for b in data.DataLoader(ds, batch_size=4, shuffle=True)]
    assert sorted(i for batch in first for i in batch) == list(range(10))
    with pytest.raises(ValueError, match="num_workers"):
        data.DataLoader(ds, num_workers=2)
    with pytest.raises(ValueError, match="same first dimension"):
        data.TensorDataset(serve.ones(2), serve.ones(3))


def test_hub_reads_only_the_local_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    monkeypatch.setattr(hub, "_override", [])
    assert hub.get_dir() == str(tmp_path / "th" / "hub")
    url = "https://download.pytorch.org/models/resnet18-f37072fd.pth"
    expected = tmp_path / "th" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    with pytest.raises(FileNotFoundError, match=f"never downloads; put the file at {expected}"):
        hub.load_state_dict_from_url(url)
    expected.parent.mkdir(parents=True)
    serve.save({"w": serve.ones(2)}, expected)
    assert hub.load_state_dict_from_url(url, map_location="cpu", progress=False)["w"].tolist() == [1.0, 1.0]
    serve.save({"w": serve.zeros(1)}, tmp_path / "mine.pt")
    got = hub.load_state_dict_from_url(url, model_dir=str(tmp_path), file_name="mine.pt")
    assert got["w"].tolist() == [0.0]
    with pytest.raises(ValueError, match="check_hash"):
        hub.load_state_dict_from_url(url, check_hash=True)
    with pytest.raises(NotImplementedError, match="never downloads"):
        hub.download_url_to_file(url, "x.pth")


def test_hub_default_dir_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(hub, "_override", [])
    assert hub.get_dir() == str(tmp_path / "torch" / "hub")
    hub.set_dir(tmp_path / "elsewhere")
    assert hub.get_dir() == str(tmp_path / "elsewhere")


@needs_torch
def test_hub_dir_matches_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(hub, "_override", [])
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    assert hub.get_dir() == torch.hub.get_dir() and hub._get_torch_home() == torch.hub._get_torch_home()


@needs_torch
def test_constants_overloads_and_model_zoo_match_torch():
    t = alias()
    assert (t.pi, t.e, t.inf) == (torch.pi, torch.e, torch.inf) and t.nan != t.nan

    def f(x):
        return x

    assert jit._overload_method(f) is f and jit._overload(f) is f
    assert t.utils.model_zoo.load_url is hub.load_state_dict_from_url


def test_the_names_transformers_touches_exist_under_the_alias():
    """transformers 5.x's import-time and build-time names (issue 26 item 2), through the hook as a model file sees
    them; the numerical ones are tested against torch in tests/unit/tensor/test_transformers_ops.py."""
    import importlib.util

    from serve.worker.torch_compat import torch_compat

    with torch_compat():
        import torch
        import torch.nn as nn
        from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
        from torch.nn.attention.flex_attention import BlockMask, flex_attention
        from torch.utils._pytree import tree_flatten, tree_unflatten

        assert importlib.util.find_spec("torch").name == "torch" and torch.__version__ == "2.13.0"
        assert importlib.util.find_spec("torchaudio") is None
        assert torch.LongTensor([1, 2]).dtype is torch.int64 and isinstance(torch.zeros(1), torch.FloatTensor)
        assert not isinstance(torch.zeros(1, dtype=torch.int64), torch.FloatTensor)
        assert torch.BoolTensor(2, 3).shape == (2, 3)
        assert torch.finfo(torch.float8_e4m3fn).max == 448.0 and torch.uint16.itemsize == 2
        assert not torch.compiler.is_compiling() and torch.compiler.disable(len) is len
        assert not torch.distributed.is_available() and torch.version.cuda is None
        assert not torch.backends.mps.is_available() and not torch.accelerator.is_available()
        assert not torch.cuda.is_current_stream_capturing() and torch.get_default_device() == torch.device("cpu")
        with TransformGetItemToIndex(), torch.profiler.record_function("step"), torch.autograd.graph.save_on_cpu():
            pass
        leaves, spec = tree_flatten({"a": [1, (2, 3)], "b": 4})
        assert leaves == [1, 2, 3, 4] and tree_unflatten([5, 6, 7, 8], spec) == {"a": [5, (6, 7)], "b": 8}
        with pytest.raises(NotImplementedError, match="attn_implementation"):
            flex_attention(None, None, None)
        assert BlockMask is not None
        op = torch.library.custom_op("serve_test::twice", mutates_args=())(lambda x: x * 2)
        op.register_fake(lambda x: x)
        assert op(3) == 6
        weight = nn.init.sparse_(torch.empty(10, 4), sparsity=0.3)
        assert [int((weight[:, c] == 0).sum()) for c in range(4)] == [3, 3, 3, 3]
        with pytest.raises(NotImplementedError, match="3-D convolution"):
            nn.Conv3d(1, 1, 3)
        assert nn.modules.module._EXTRA_STATE_KEY_SUFFIX == "_extra_state"


@needs_torch
def test_the_names_transformers_4_and_captum_touch_exist_under_the_alias(caplog):
    """What TorchServe's Hugging Face example needs beyond transformers 5.x's names (issue 26 item 3): transformers
    4.51's imports and loading, captum 0.9's imports, and torch.compile as its handler calls it."""
    with torch_compat():
        import torch
        import torch.distributed.tensor
        import torch.multiprocessing
        import torch.nn as nn
        from torch.distributions.categorical import Categorical
        from torch.futures import Future
        from torch.nn import CosineSimilarity
        from torch.nn.parallel.scatter_gather import scatter

        torch.fx._pytree.register_pytree_flatten_spec(dict, lambda d, spec: list(d.values()))
        assert not isinstance(torch.zeros(1), (torch.fx.Proxy, torch.distributed.tensor.DTensor, Future))
        assert not hasattr(nn.utils.parametrizations, "weight_norm")  # transformers then keeps weight_g/weight_v
        assert torch.utils.hooks.RemovableHandle is not None and torch.multiprocessing.get_context is not None
        assert tuple(torch.empty(size=(2, 3), device="meta").shape) == (2, 3) == tuple(torch.zeros(size=[2, 3]).shape)
        with pytest.warns(FutureWarning, match="nn.init.uniform_"):
            w = nn.init.uniform(torch.empty(4, 5), -0.1, 0.1)
        assert float(w.abs().max()) <= 0.1
        model = nn.Linear(2, 3)
        with caplog.at_level("WARNING"):
            assert torch.compile(model, backend="inductor", mode="reduce-overhead") is model
            assert torch.compile(backend="eager")(len) is len
        assert "returns Linear unchanged" in caplog.text
        for make in (lambda: nn.MaxPool3d(2), lambda: nn.DataParallel(model), lambda: scatter(1, [0]),
                     lambda: Categorical(probs=torch.ones(2))):  # fmt: skip
            with pytest.raises(NotImplementedError):
                make()
        x, y = torch.tensor([[1.0, 2.0, 0.0], [3.0, -1.0, 2.0]]), torch.tensor([[2.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
        got = CosineSimilarity(dim=1)(x, y).numpy()
    import torch as real

    want = real.nn.CosineSimilarity(dim=1)(real.from_numpy(x.numpy()), real.from_numpy(y.numpy())).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
