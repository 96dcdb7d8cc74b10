"""`torch.vmap` on the alias (serve/compat/torch/func.py) against torch.vmap: transformers' mask expansion (four
nested vmaps, the broadcast way, counted), its watermark hash (in_dims=(None, 1), out_dims=1), and functions that are
not elementwise (the loop), tuple outputs and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve.compat.torch import func
from tests.helpers import needs_torch, torch

pytestmark = needs_torch
NESTED = [(None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)]


def expand(lib, mask_function):
    """transformers' _vmap_expansion_sdpa: one vmap per index, innermost first."""
    for dims in NESTED:
        mask_function = lib.vmap(mask_function, in_dims=dims, out_dims=0)
    return mask_function


def masks(lib, padding):
    """transformers' causal, padding and sliding-window mask functions, and their `and`, on library lib."""

    def causal(b, h, q, kv):
        return kv <= q

    def padded(b, h, q, kv):
        return padding[b, kv]

    def window(b, h, q, kv):
        return q - kv < 3

    def both(b, h, q, kv):
        result = q.new_ones((), dtype=lib.bool)
        for fn in (causal, padded, window):
            result = result & fn(b, h, q, kv).to(result.device)
        return result

    return {"causal": causal, "padding": padded, "and": both}


def as_numpy(t):
    return t.numpy() if isinstance(t, serve.Tensor) else t.detach().numpy()


@pytest.mark.parametrize("name", ["causal", "padding", "and"])
def test_the_mask_expansion_matches_torch_in_one_call(name):
    b, h, q, kv = 3, 2, 5, 7
    pad = np.ones((b, kv), dtype=bool)
    pad[0, 5:] = pad[2, 2:] = False
    calls = []
    fn = masks(serve, serve.from_numpy(pad))[name]

    def counted(*args):
        calls.append(args)
        return fn(*args)

    aranges = [np.arange(n) for n in (b, h, q, kv)]
    got = expand(func, counted)(*[serve.from_numpy(a) for a in aranges])
    want = expand(torch, masks(torch, torch.from_numpy(pad))[name])(*[torch.from_numpy(a) for a in aranges])
    assert got.shape == tuple(want.shape) == (b, h, q, kv)
    np.testing.assert_array_equal(as_numpy(got), as_numpy(want))
    assert len(calls) == 3  # one broadcast call and its two corner checks, not b * h * q * kv = 210


class Hash:
    """transformers' SynthIDTextWatermarkLogitsProcessor.accumulate_hash, and the two vmaps it is called under."""

    def __init__(self, lib):
        self.lib = lib

    def accumulate_hash(self, current, data, multiplier=6364136223846793005, increment=1):
        for i in range(data.shape[-1]):
            current = self.lib.add(current, data[..., i])
            current = self.lib.mul(current, multiplier)
            current = self.lib.add(current, increment)
        return current

    def keys(self, vmap, ngrams, keys):
        ones = self.lib.ones(ngrams.shape[0], dtype=self.lib.long)
        h = vmap(self.accumulate_hash, in_dims=(None, 1), out_dims=1)(ones, ngrams)
        return vmap(self.accumulate_hash, in_dims=(None, 2), out_dims=2)(h, keys[None, None, :, None])


def test_the_watermark_hash_matches_torch():
    rng = np.random.default_rng(0)
    ngrams, keys = rng.integers(0, 50000, (2, 6, 5)), rng.integers(0, 1 << 40, 4)
    got = Hash(serve).keys(func.vmap, serve.from_numpy(ngrams), serve.from_numpy(keys))
    want = Hash(torch).keys(torch.vmap, torch.from_numpy(ngrams), torch.from_numpy(keys))
    assert got.shape == tuple(want.shape) == (2, 6, 4)
    np.testing.assert_array_equal(as_numpy(got), as_numpy(want))


@pytest.mark.parametrize(
    ("fn", "in_dims", "out_dims"),
    [
        (lambda x, y: (x * y).sum(), 0, 0),  # a reduction: broadcasting would sum over the mapped index
        (lambda x, y: x @ y, (1, None), -1),  # a product per column
        (lambda x, y: (x + y, x.max()), (0, 0), (1, 0)),  # two outputs, each at its own dim
        (lambda x, y: x[0] * y, (0, None), 0),  # 0-d per example but not elementwise in y
    ],
)
def test_functions_that_are_not_elementwise_loop_as_torch_maps_them(fn, in_dims, out_dims):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)
    got = func.vmap(fn, in_dims=in_dims, out_dims=out_dims)(serve.from_numpy(x), serve.from_numpy(y))
    want = torch.vmap(fn, in_dims=in_dims, out_dims=out_dims)(torch.from_numpy(x), torch.from_numpy(y))
    for g, w in zip(*(o if isinstance(o, tuple) else (o,) for o in (got, want))):
        np.testing.assert_allclose(as_numpy(g), as_numpy(w), rtol=1e-6, atol=1e-6)


def test_a_1d_reduction_is_not_taken_for_elementwise():
    x = np.arange(5, dtype=np.float32)
    fn = func.vmap(func.vmap(lambda a, b: a - b.mean(), in_dims=(None, 0)), in_dims=(0, None))
    want = torch.vmap(torch.vmap(lambda a, b: a - b.mean(), in_dims=(None, 0)), in_dims=(0, None))
    np.testing.assert_allclose(as_numpy(fn(serve.from_numpy(x), serve.from_numpy(x))),
                               as_numpy(want(torch.from_numpy(x), torch.from_numpy(x))), rtol=1e-6)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "in_dims", "match"),
    [
        ((np.ones(3), np.ones(4)), 0, "different sizes"),
        ((np.ones(3), 2.0), (0, 0), "only tensors can be mapped"),
        ((np.ones(3),), (None,), "at least one input"),
        ((np.ones(0),), 0, "size 0"),
    ],
)
def test_errors_name_what_to_change(args, in_dims, match):
    args = tuple(serve.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args)
    with pytest.raises(ValueError, match=match):
        func.vmap(lambda *a: a[0], in_dims=in_dims)(*args)


def test_vmap_is_on_the_torch_alias():
    from serve.worker.torch_compat import torch_compat

    with torch_compat():
        import torch as alias
        import torch.func as alias_func
    assert alias.vmap is func.vmap and alias_func.vmap is func.vmap


ALIASED_MASK = r"""
import json, sys
import numpy as np
from serve.worker.torch_compat import install_torch_compat
install_torch_compat()
import torch
from transformers import masking_utils as mu
pad = torch.from_numpy(np.array(json.loads(sys.argv[1]), dtype=bool))
mask = mu.sdpa_mask(batch_size=2, q_length=6, kv_length=6, mask_function=mu.sliding_window_causal_mask_function(3),
                    attention_mask=pad, allow_is_causal_skip=False, use_vmap=True)
print(json.dumps(mask.numpy().tolist()))
"""


def test_transformers_sdpa_mask_with_vmap_on_the_alias_matches_torch():
    """transformers' own sdpa_mask(use_vmap=True) (a model's custom mask function takes that path) in a process
    with the alias installed as a torch-compat worker has it, against the same call on the real torch."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from tests.transformers_reference import reference_transformers

    transformers = reference_transformers()
    if transformers is None:
        pytest.skip("transformers is not installed")
    from transformers import masking_utils as mu

    pad = [[True] * 6, [False, False, True, True, True, True]]
    want = mu.sdpa_mask(batch_size=2, q_length=6, kv_length=6, mask_function=mu.sliding_window_causal_mask_function(3),
                        attention_mask=torch.tensor(pad), allow_is_causal_skip=False, use_vmap=True)  # fmt: skip
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", ALIASED_MASK, json.dumps(pad)], capture_output=True, text=True,
                          timeout=300, cwd=root)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = np.array(json.loads(done.stdout.strip().splitlines()[-1]))
    assert got.shape == tuple(want.shape) == (2, 1, 6, 6)
    np.testing.assert_array_equal(got, want.numpy())
    assert not got.all() and got.any()  # the window, the causal cut and the padding all show
