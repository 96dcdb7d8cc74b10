"""The attention's two products on AMX tiles (sk_amx.c's sk_attention_bf16) on CPUs without AMX: test_amx_emulated's
harness (the real source compiled against the software tile file, which checks every configuration, dot shape and
load's bounds), compared with the float64 reference of the same roundings (test_cpu_attention_bf16) and with the
vdpbf16ps path of the same library (sk_attention_bf16_dp), over tails in L, S and E, E = 32 / 64 / 128, masks and
spans of (batch, head) pairs; below the row threshold the vector path runs; mutated copies of the tile attention are
caught by the check and by the fork()ed self-check, so a wrong tile attention on a real AMX CPU leaves AMX off."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from .test_amx_emulated import NATIVE, _compile, pytestmark  # noqa: F401  (the same skips)
from .test_cpu_attention import _inputs
from .test_cpu_attention_bf16 import _reference, assert_close

I64, PTR, INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
ATTENTION_ARGS = [PTR] * 6 + [I64] * 5 + [ctypes.c_float, INT, I64, I64]
# (B, H, L, S, E, Ev): tails around the 16-row tiles, the 32-column panels and the 32-wide K steps
SHAPES = [(1, 2, 17, 29, 33, 20), (2, 1, 40, 45, 31, 33), (1, 2, 128, 128, 64, 64), (1, 1, 16, 32, 32, 32),
          (1, 2, 24, 50, 128, 128), (1, 1, 8, 3, 7, 9)]  # fmt: skip


def _bind(dll: ctypes.CDLL) -> ctypes.CDLL:
    for name in ("sk_attention_bf16", "sk_attention_bf16_dp"):
        getattr(dll, name).argtypes = ATTENTION_ARGS
    return dll


@pytest.fixture(scope="module")
def emu():
    dll = _bind(_compile(NATIVE / "sk_amx.c"))
    dll.sk_amx_enable(1, 1)
    return dll


def _attention(dll, q, k, v, mask, scale, safe=True, span=None, out=None, fn="sk_attention_bf16"):
    """q, k, v, mask as (B, H, ., .) arrays (mask float32 additive, broadcast views allowed)."""
    b, h, length, e = q.shape
    s, ev = k.shape[2], v.shape[3]
    out = np.full((b, h, length, ev), np.nan, np.float32) if out is None else out
    m4 = None if mask is None else np.broadcast_to(mask, (b, h, length, s))
    strides = [x // 4 for a in (q, k, v, out) for x in a.strides[:3]]
    strides += [0, 0, 0, 0] if m4 is None else [x // 4 for x in m4.strides]
    st = np.asarray(strides, np.int64)
    i0, i1 = span or (0, b * h)
    rc = getattr(dll, fn)(q.ctypes.data, k.ctypes.data, v.ctypes.data, out.ctypes.data,
                          None if m4 is None else m4.ctypes.data, st.ctypes.data, h, length, s, e, ev, scale,
                          int(safe), i0, i1)  # fmt: skip
    assert rc == 0
    return out


def _clean(dll, before):
    errors, message = dll.sk_amx_emu_errors(), dll.sk_amx_emu_message().decode()
    dll.sk_amx_emu_reset()
    assert errors == 0, f"{errors} tile faults, first: {message}"
    assert dll.sk_amx_emu_ops() > before, "the tile path did not run"


def _float_mask(kind, shape, seed):
    _, _, _, mask = _inputs(shape, kind, seed)
    if mask is None or mask.dtype != bool:
        return mask
    return np.where(mask, np.float32(0.0), np.float32(-np.inf))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mask_kind", ["none", "float", "padding", "dead"])
def test_tile_attention_matches_float64_and_the_vector_path(emu, shape, mask_kind):
    q, k, v, _ = _inputs(shape, "none", seed=5)
    q = np.ascontiguousarray(q)
    mask = _float_mask(mask_kind, shape, 5)
    scale = 1.0 / np.sqrt(shape[4])
    ops = emu.sk_amx_emu_ops()
    out = _attention(emu, q, k, v, mask, scale)
    _clean(emu, ops)
    assert_close(out, _reference(q, k, v, mask, scale, True))
    vector = _attention(emu, q, k, v, mask, scale, fn="sk_attention_bf16_dp")
    assert_close(out, vector.astype(np.float64))


def test_tile_attention_spans_into_a_strided_out(emu):
    shape = (2, 3, 30, 41, 64, 48)
    q, k, v, _ = _inputs(shape, "none", seed=6)  # q strided: (B, L, H, E) transposed
    b, h, length, _, _, ev = shape
    merged = np.full((b, length, h * ev), np.nan, np.float32)
    view = merged.reshape(b, length, h, ev).transpose(0, 2, 1, 3)  # (B, H, L, Ev) in (B, L, H * Ev)
    for span in [(0, 1), (1, 4), (4, 6)]:
        _attention(emu, q, k, v, None, 0.125, span=span, out=view)
    assert emu.sk_amx_emu_errors() == 0, emu.sk_amx_emu_message()
    np.testing.assert_array_equal(view, _attention(emu, q, k, v, None, 0.125))
    assert_close(view, _reference(q, k, v, None, 0.125, True))


def test_few_query_rows_stay_on_the_vector_path(emu):
    emu.sk_amx_enable(1, 8)
    try:
        q, k, v, _ = _inputs((1, 2, 7, 20, 32, 32), "none", seed=7)
        ops = emu.sk_amx_emu_ops()
        out = _attention(emu, np.ascontiguousarray(q), k, v, None, 0.2)
        assert emu.sk_amx_emu_ops() == ops
        assert_close(out, _reference(q, k, v, None, 0.2, True))
    finally:
        emu.sk_amx_enable(1, 1)


# (pattern, replacement) in sk_amx.c's tile attention: the scores' weight one pair row off (reads the wrong k and past
# the pack); the softmax walking the scores at S floats per row instead of the block's padded stride.
MUTATIONS = [
    (r"E, kp, S, NULL, NULL, 0, sc, sp", "E, kp + 2 * NR, S, NULL, NULL, 0, sc, sp"),
    (r"sk_attention_softmax_row\(sc \+ r \* sp,", "sk_attention_softmax_row(sc + r * S,"),
]


@pytest.mark.parametrize(("pattern", "new"), MUTATIONS)
def test_the_checks_fail_on_a_broken_tile_attention(tmp_path, pattern, new):
    text = (NATIVE / "sk_amx.c").read_text()
    mutated, count = re.subn(pattern, new, text)
    assert count == 1, f"sk_amx.c no longer contains {pattern!r}: update MUTATIONS to a bug the check must catch"
    (tmp_path / "sk_amx.c").write_text(mutated)
    broken = _bind(_compile(tmp_path / "sk_amx.c"))
    broken.sk_amx_enable(1, 1)
    shape = (1, 2, 37, 45, 70, 33)
    q, k, v, _ = _inputs(shape, "none", seed=8)
    q = np.ascontiguousarray(q)
    out = _attention(broken, q, k, v, None, 0.12)
    faults = broken.sk_amx_emu_errors()
    broken.sk_amx_emu_reset()
    ref = _reference(q, k, v, None, 0.12, True)
    wrong = not np.allclose(np.nan_to_num(out), ref, rtol=1e-3, atol=1e-3)
    assert faults or wrong, "the mutated tile attention passed the emulated check"
    assert broken.sk_amx_selfcheck(60000) != 0, "the self-check passed a mutated tile attention"
