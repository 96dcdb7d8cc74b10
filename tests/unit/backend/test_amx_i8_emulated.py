"""The dynamic int8 GEMM on AMX-INT8 tiles (serve/backend/native/sk_amx_i8.c, #included by sk_amx.c) checked on CPUs
without AMX: sk_amx.c + sk_i8.c + the self-check compiled with -mavx512vnni and -DSK_AMX_EMULATE against the software
tile file (amx_emulator/sk_amx_emu.h, whose TDPBUSD also checks tile shapes and every load's and store's bounds).

The reference is exact: TDPBUSD and vpdpbusd sum the same u8 x s8 products in int32 and both paths share sk_i8.c's
epilogue, so the tile path (sk_gemm_i8) must equal the VNNI path (sk_gemm_i8_dp) bit for bit, over tails in M
(16-row tiles, 32-row blocks, the A buffer's blocks), K (64 per tile step, a partial last step, K not a multiple
of 4) and N (32-column panels), each epilogue, row spans and strided operands; and both stay within float32
rounding of cpu_i8.reference (numpy's arithmetic). Plus the row threshold, the fork()ed self-check, and mutated
copies of sk_amx_i8.c (a wrong B stride, a swapped B tile, a short K-tail copy) that the check and the self-check
must catch. Skips as test_amx_emulated does, and on a CPU without AVX512-VNNI."""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from serve.backend import cpu_i8, cpu_libraries

from .test_amx_emulated import EMULATOR, FLAGS, NATIVE
from .test_amx_emulated import pytestmark as _amx_skips

pytestmark = [
    *_amx_skips,  # the same skips
    pytest.mark.skipif("avx512_vnni" not in cpu_libraries.cpu_flags(), reason="sk_i8.c's vector path needs VNNI"),
]
ACTS = {"none": 0, **{name: i for name, i in cpu_i8._ACTS.items() if i}}
TIGHT = 1e-5  # test_cpu_i8's bound against the numpy arithmetic (the epilogue's float32 rounding)


def _compile(amx_source: Path) -> ctypes.CDLL:
    """serve_kernels.c + sk_i8.c + amx_source (which #includes the sk_amx_i8.c beside it) + the self-check, with the
    emulator and VNNI, cached by content hash under the temp dir."""
    flags = [*FLAGS, "-mavx512vnni"]
    sources = [NATIVE / "serve_kernels.c", NATIVE / "sk_i8.c", amx_source, NATIVE / "sk_amx_check.c"]
    digest = hashlib.sha256(" ".join(flags).encode())
    for path in [*sources, amx_source.parent / "sk_amx_i8.c", NATIVE / "sk_isa.h", EMULATOR / "sk_amx_emu.h"]:
        digest.update(path.read_bytes())
    cache = Path(tempfile.gettempdir()) / "serve-amx-emu"
    cache.mkdir(exist_ok=True)
    lib = cache / f"i8-{digest.hexdigest()[:24]}.so"
    if not lib.exists():
        tmp = cache / f"{lib.stem}.{os.getpid()}.tmp.so"
        cmd = ["gcc", *flags, f"-I{EMULATOR}", f"-I{NATIVE}", "-o", str(tmp), *map(str, sources)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        os.replace(tmp, lib)
    dll = ctypes.CDLL(str(lib))
    for name in ("sk_gemm_i8", "sk_gemm_i8_dp"):
        getattr(dll, name).argtypes, getattr(dll, name).restype = cpu_i8._GEMM, ctypes.c_int
    dll.sk_amx_enable.argtypes = [ctypes.c_int, ctypes.c_int64]
    dll.sk_amx_selfcheck.argtypes = [ctypes.c_int]
    dll.sk_amx_emu_errors.restype = dll.sk_amx_emu_ops.restype = ctypes.c_longlong
    dll.sk_amx_emu_message.restype = ctypes.c_char_p
    return dll


@pytest.fixture(scope="module")
def emu():
    dll = _compile(NATIVE / "sk_amx.c")
    dll.sk_amx_enable(1, 1)  # tiles on for every row count: the tails are the point
    return dll


def _gemm(dll, fn, a, qw, bias=None, res=None, act="none", out=None, rows=None):
    """getattr(dll, fn) on a (M, K) with lda = a's row stride, into out (NaN-filled (M, N) unless given)."""
    m, n = a.shape[0], qw.n
    out = np.full((m, n), np.nan, np.float32) if out is None else out
    r0, r1 = rows or (0, m)
    ptr = lambda v: None if v is None else v.ctypes.data  # noqa: E731
    rc = getattr(dll, fn)(ptr(a), a.strides[0] // 4, qw.k, ptr(qw.data), n, ptr(qw.scale), ptr(qw.colsum), ptr(bias),
                          ptr(res), 0 if res is None else res.strides[0] // 4, ptr(out), out.strides[0] // 4,
                          ACTS[act], r0, r1)  # fmt: skip
    assert rc == 0
    return out


def _check_clean(dll, before_ops):
    errors, message = dll.sk_amx_emu_errors(), dll.sk_amx_emu_message().decode()
    dll.sk_amx_emu_reset()
    assert errors == 0, f"{errors} tile faults, first: {message}"
    assert dll.sk_amx_emu_ops() > before_ops, "the tile path did not run"


def _err(got, want):
    return float(np.abs(got.astype(np.float64) - want).max()) / max(1e-30, float(np.abs(want).max()))


def _inputs(seed, m, k, n):
    rng = np.random.default_rng(seed)
    a, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    bias, res = rng.standard_normal(n).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
    return a, cpu_i8.pack(w * np.float32(0.1)), bias, res


# (M, K, N): M around 16 / 32 (a tile, a block) and the A buffer's 256 KiB blocks (K 3000: 64 rows), K around 64 (a
# tile step: 16 quads) and not a multiple of 4, N around 32 (a panel)
SHAPES = [(1, 1, 1), (15, 63, 31), (16, 64, 32), (17, 65, 33), (31, 128, 45), (32, 4, 64), (33, 300, 96),
          (50, 130, 17), (70, 768, 70), (130, 3000, 40)]  # fmt: skip


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_tiles_equal_the_vnni_path_bit_for_bit(emu, m, k, n):
    a, qw, bias, res = _inputs(m * 1000 + k + n, m, k, n)
    before = emu.sk_amx_emu_ops()
    tiles = _gemm(emu, "sk_gemm_i8", a, qw, bias, res)
    _check_clean(emu, before)
    vnni = _gemm(emu, "sk_gemm_i8_dp", a, qw, bias, res)
    assert np.array_equal(tiles.view(np.int32), vnni.view(np.int32))
    assert _err(tiles, cpu_i8.reference(a, qw, bias, res)) <= TIGHT


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("epilogue", ["plain", "bias", "residual", "both"])
def test_tile_epilogues(emu, act, epilogue):
    a, qw, bias, res = _inputs(ACTS[act] * 10 + len(epilogue), 37, 200, 45)
    bias = bias if epilogue in ("bias", "both") else None
    res = res if epilogue in ("residual", "both") else None
    before = emu.sk_amx_emu_ops()
    tiles = _gemm(emu, "sk_gemm_i8", a, qw, bias, res, act)
    _check_clean(emu, before)
    assert np.array_equal(tiles.view(np.int32), _gemm(emu, "sk_gemm_i8_dp", a, qw, bias, res, act).view(np.int32))
    assert _err(tiles, cpu_i8.reference(a, qw, bias, res, act)) <= TIGHT


def test_row_spans_of_strided_operands_write_exactly_their_rows(emu):
    """Lanes pass row spans; a, the residual and out may be column slices of wider arrays."""
    rng = np.random.default_rng(5)
    wide_a = rng.standard_normal((90, 150)).astype(np.float32)
    a, qw = wide_a[:, 7:137], cpu_i8.pack(rng.standard_normal((130, 70)).astype(np.float32))
    wide_res = rng.standard_normal((90, 100)).astype(np.float32)
    wide_out = np.full((90, 110), 7.0, np.float32)
    bias = rng.standard_normal(70).astype(np.float32)
    before = emu.sk_amx_emu_ops()
    for span in ((0, 17), (17, 18), (18, 50), (50, 90)):
        _gemm(emu, "sk_gemm_i8", a, qw, bias, wide_res[:, 20:90], "gelu", wide_out[:, 30:100], span)
    _check_clean(emu, before)
    whole = _gemm(emu, "sk_gemm_i8_dp", np.ascontiguousarray(a), qw, bias, np.ascontiguousarray(wide_res[:, 20:90]),
                  "gelu")  # fmt: skip
    assert np.array_equal(wide_out[:, 30:100].view(np.int32), whole.view(np.int32))
    assert np.all(wide_out[:, :30] == 7) and np.all(wide_out[:, 100:] == 7)


def test_fewer_rows_than_the_threshold_stay_on_vpdpbusd(emu):
    a, qw, bias, res = _inputs(3, 8, 100, 40)
    try:
        emu.sk_amx_enable(1, 8)  # sk_amx.c's SK_AMX_MIN_ROWS, the bf16 tiles' threshold
        before = emu.sk_amx_emu_ops()
        _gemm(emu, "sk_gemm_i8", a[:7], qw, bias, res[:7])
        assert emu.sk_amx_emu_ops() == before, "7 rows ran on tiles"
        _gemm(emu, "sk_gemm_i8", a, qw, bias, res)
        _check_clean(emu, before)
    finally:
        emu.sk_amx_enable(1, 1)


def test_selfcheck_covers_and_passes_the_int8_tiles(emu):
    assert emu.sk_amx_selfcheck(60000) == 0


# (pattern, replacement) in sk_amx_i8.c: the B tiles read at a 64-byte stride (16 columns' quads of alternating
# k groups); the second A tile multiplied by the first panel half twice; the K-tail tile copied one quad row short.
MUTATIONS = [
    (r"_tile_loadd\(6, bt, 4 \* I8_PANEL\)", "_tile_loadd(6, bt, 2 * I8_PANEL)"),
    (r"_tile_dpbusd\(3, 5, 7\)", "_tile_dpbusd(3, 5, 6)"),
    (r"\(size_t\)\(tail \* 4 \* I8_PANEL\)", "(size_t)((tail - 1) * 4 * I8_PANEL)"),
]


@pytest.mark.parametrize(("pattern", "new"), MUTATIONS)
def test_the_emulated_check_and_the_selfcheck_catch_broken_int8_tiles(tmp_path, pattern, new):
    text = (NATIVE / "sk_amx_i8.c").read_text()
    mutated, count = re.subn(pattern, new, text)
    assert count, f"sk_amx_i8.c no longer contains {pattern!r}: update MUTATIONS to a bug the check must catch"
    (tmp_path / "sk_amx_i8.c").write_text(mutated)
    shutil.copy(NATIVE / "sk_amx.c", tmp_path / "sk_amx.c")  # its #include "sk_amx_i8.c" finds the mutated copy
    broken = _compile(tmp_path / "sk_amx.c")
    broken.sk_amx_enable(1, 1)
    a, qw, bias, res = _inputs(11, 33, 300, 45)
    out = _gemm(broken, "sk_gemm_i8", a, qw, bias, res)
    faults = broken.sk_amx_emu_errors()
    broken.sk_amx_emu_reset()
    wrong = not np.array_equal(out.view(np.int32), _gemm(broken, "sk_gemm_i8_dp", a, qw, bias, res).view(np.int32))
    assert faults or wrong, "the mutated kernel passed the emulated check"
    assert broken.sk_amx_selfcheck(60000) != 0, "the self-check passed a mutated kernel"
