"""serve's AMX kernels (serve/backend/native/sk_amx.c, its self-check sk_amx_check.c) checked on CPUs without AMX: the
real source compiled with -DSK_AMX_EMULATE against a software tile file (amx_emulator/sk_amx_emu.h, which also checks
tile shapes, the configuration and every load's and store's bounds), loaded with ctypes, and compared with float64
references on the bf16-rounded operands over tails in M, N and K, each epilogue, convolutions (1x1, 3x3, strides,
padding, dilation) and row spans as the lanes call them; plus the fork()ed self-check, and mutated copies (a wrong
stride, a wrong tile shape) that the check and the self-check must catch.

Build artefacts go to a cache under the system temp dir keyed by the sources' content hash (never the repo). Skips
without gcc, or on a CPU without AVX-512 and AVX512-BF16 (the code around the tiles is AVX-512). On an AMX CPU the
real build is checked by test_cpu_native_bf16.py once cpu_native selected it."""

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

from serve.backend import cpu_libraries
from serve.backend import cpu_native as cn

from .test_cpu_native import CONV_CASES, REF_ACT, ref_conv

ROOT = Path(__file__).resolve().parents[3]
NATIVE = ROOT / "serve" / "backend" / "native"
EMULATOR = Path(__file__).resolve().parent / "amx_emulator"
FLAGS = ["-O2", "-std=c11", "-ffp-contract=fast", "-fno-math-errno", "-Wno-unused-function", "-shared", "-fPIC",
         "-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mfma", "-mavx512bf16", "-DSK_ISA=512", "-DSK_BF16=1",
         "-DSK_AMX=1", "-DSK_AMX_EMULATE"]  # fmt: skip
_NEEDED = {"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_bf16", "fma"}

pytestmark = [
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to compile the AMX kernels with the emulator"),
    pytest.mark.skipif(
        not cpu_libraries.cpu_flags() >= _NEEDED, reason="the code around the tiles needs AVX-512 + AVX512-BF16"
    ),
]
I64, PTR, INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
GEMM_ARGS = [PTR, I64, I64, PTR, I64, PTR, PTR, I64, PTR, I64, INT, I64, I64]
CONV_ARGS = [PTR] + [I64] * 4 + [PTR] + [I64] * 11 + [PTR, PTR, PTR, INT, I64, I64]
ACTS = list(REF_ACT)


def _compile(amx_source: Path, check_source: Path = NATIVE / "sk_amx_check.c") -> ctypes.CDLL:
    """serve_kernels.c + amx_source + check_source with the emulator, cached by content hash under the temp dir."""
    sources = [NATIVE / "serve_kernels.c", amx_source, check_source]
    digest = hashlib.sha256(" ".join(FLAGS).encode())
    for path in [*sources, NATIVE / "sk_isa.h", EMULATOR / "sk_amx_emu.h"]:
        digest.update(path.read_bytes())
    cache = Path(tempfile.gettempdir()) / "serve-amx-emu"
    cache.mkdir(exist_ok=True)
    lib = cache / f"{digest.hexdigest()[:24]}.so"
    if not lib.exists():
        tmp = cache / f"{lib.stem}.{os.getpid()}.tmp.so"
        cmd = ["gcc", *FLAGS, f"-I{EMULATOR}", f"-I{NATIVE}", "-o", str(tmp), *map(str, sources)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        os.replace(tmp, lib)
    dll = ctypes.CDLL(str(lib))
    for name in ("sk_gemm_bf16", "sk_gemm_bf16_dp"):
        getattr(dll, name).argtypes = GEMM_ARGS
    for name in ("sk_conv2d_bf16", "sk_conv2d_bf16_dp"):
        getattr(dll, name).argtypes = CONV_ARGS
    dll.sk_amx_enable.argtypes = [INT, I64]
    dll.sk_amx_selfcheck.argtypes = [INT]
    dll.sk_amx_emu_errors.restype = dll.sk_amx_emu_ops.restype = ctypes.c_longlong
    dll.sk_amx_emu_message.restype = ctypes.c_char_p
    return dll


@pytest.fixture(scope="module")
def emu():
    dll = _compile(NATIVE / "sk_amx.c")
    dll.sk_amx_enable(1, 1)  # tiles on, for every row count (the tails below are the point)
    return dll


def _ptr(a):
    return None if a is None else a.ctypes.data


def _bf16_bits(a):
    return cn._bf16_bits(np.ascontiguousarray(a, np.float32))


def _pack(w_tcn):
    """(taps, C, N) -> the bf16 panel layout (panels, taps * cp / 2, 32, 2), each tap's C padded to even."""
    taps, c, n = w_tcn.shape
    panels, cp = -(-n // 32), c + c % 2
    padded = np.zeros((taps, cp, panels * 32), np.float32)
    padded[:, :c, :n] = w_tcn
    return np.ascontiguousarray(_bf16_bits(padded).reshape(taps * cp // 2, 2, panels, 32).transpose(2, 0, 3, 1))


def _check_clean(dll, before_ops):
    errors = dll.sk_amx_emu_errors()
    message = dll.sk_amx_emu_message().decode()
    dll.sk_amx_emu_reset()
    assert errors == 0, f"{errors} tile faults, first: {message}"
    assert dll.sk_amx_emu_ops() > before_ops, "the tile path did not run"


def _gemm(dll, a, wp, n, bias, res, act, span=None, out=None, fn="sk_gemm_bf16"):
    m, k = a.shape
    out = np.full((m, n), np.nan, np.float32) if out is None else out
    r0, r1 = span or (0, m)
    rc = getattr(dll, fn)(_ptr(a), k, k, _ptr(wp), n, _ptr(bias), _ptr(res), n, _ptr(out), n, ACTS.index(act), r0, r1)
    assert rc == 0
    return out


def _reference(a, w, bias, res, act):
    acc = cn.round_bf16(a).astype(np.float64) @ cn.round_bf16(w).astype(np.float64)  # (M, K) @ (K, N)
    acc = acc + (0 if bias is None else bias) + (0 if res is None else res)
    return REF_ACT[act](acc)


def assert_close(out, ref, rtol=2e-5):
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(out.astype(np.float64) - ref).max())
    assert err <= rtol * scale, f"max error {err:.3g} vs scale {scale:.3g}"


# (M, K, N): M around 16 / 32 and the A buffer's blocks, K around 32 (one tile step) and odd, N around 32 (a panel)
GEMM_SHAPES = [(1, 1, 1), (15, 31, 31), (16, 32, 32), (17, 33, 33), (31, 64, 45), (32, 2, 64), (33, 70, 96),
               (50, 160, 17), (70, 3000, 200)]  # fmt: skip


@pytest.mark.parametrize(("m", "k", "n"), GEMM_SHAPES)
def test_tile_gemm_matches_float64(emu, m, k, n):
    rng = np.random.default_rng(m * 1000 + k + n)
    a, w = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    bias, res = rng.standard_normal(n, np.float32), rng.standard_normal((m, n), np.float32)
    ops = emu.sk_amx_emu_ops()
    out = _gemm(emu, a, _pack(w[None]), n, bias, res, "none")
    _check_clean(emu, ops)
    assert_close(out, _reference(a, w, bias, res, "none"))
    vector = _gemm(emu, a, _pack(w[None]), n, bias, res, "none", fn="sk_gemm_bf16_dp")
    assert_close(out, vector.astype(np.float64))


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("epilogue", ["bias", "residual", "both", "neither"])
def test_tile_gemm_epilogues(emu, act, epilogue):
    rng = np.random.default_rng(ACTS.index(act))
    m, k, n = 21, 40, 50
    a, w = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    bias = rng.standard_normal(n, np.float32) if epilogue in ("bias", "both") else None
    res = rng.standard_normal((m, n), np.float32) if epilogue in ("residual", "both") else None
    ops = emu.sk_amx_emu_ops()
    out = _gemm(emu, a, _pack(w[None]), n, bias, res, act)
    _check_clean(emu, ops)
    assert_close(out, _reference(a, w, bias, res, act))


def test_tile_gemm_row_spans_write_exactly_the_whole(emu):
    """Spans as lanes call them (mid-block, one row, to the end) write exactly what one call writes."""
    rng = np.random.default_rng(7)
    m, k, n = 70, 90, 40
    a, w = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    wp, bias, res = _pack(w[None]), rng.standard_normal(n, np.float32), rng.standard_normal((m, n), np.float32)
    whole = _gemm(emu, a, wp, n, bias, res, "gelu")
    pieces = np.full_like(whole, np.nan)
    for span in [(0, 5), (5, 38), (38, 39), (39, 70)]:
        _gemm(emu, a, wp, n, bias, res, "gelu", span=span, out=pieces)
    np.testing.assert_array_equal(pieces, whole)
    assert emu.sk_amx_emu_errors() == 0, emu.sk_amx_emu_message()


def _conv(dll, x, wp, oc, case, bias, res, act, span=None, out=None, fn="sk_conv2d_bf16"):
    nb, h, w, c, _, (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw) = case
    oh, ow = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.full((nb, oh, ow, oc), np.nan, np.float32) if out is None else out
    p0, p1 = span or (0, nb * oh * ow)
    rc = getattr(dll, fn)(_ptr(x), nb, h, w, c, _ptr(wp), oc, kh, kw, sh, sw, pt, pl, dh, dw, oh, ow, _ptr(bias),
                          _ptr(res), _ptr(out), ACTS.index(act), p0, p1)  # fmt: skip
    assert rc == 0
    return out


@pytest.mark.parametrize("case", CONV_CASES)
def test_tile_conv2d_matches_float64(emu, case):
    nb, h, w, c, oc, (kh, kw), stride, padding, dilation = case
    rng = np.random.default_rng(nb * h * w + c + oc)
    x, wt = rng.standard_normal((nb, h, w, c), np.float32), rng.standard_normal((oc, c, kh, kw), np.float32)
    wp = _pack(wt.transpose(2, 3, 1, 0).reshape(kh * kw, c, oc))  # (taps, IC, OC)
    ref = ref_conv(cn.round_bf16(x), cn.round_bf16(wt), stride, padding, dilation)
    bias, res = rng.standard_normal(oc, np.float32), rng.standard_normal(ref.shape, np.float32)
    ops = emu.sk_amx_emu_ops()
    out = _conv(emu, x, wp, oc, case, bias, res, "relu")
    _check_clean(emu, ops)
    assert_close(out, REF_ACT["relu"](ref + bias + res))
    pixels = out.shape[0] * out.shape[1] * out.shape[2]
    pieces = np.full_like(out, np.nan)
    for span in [(0, pixels // 3), (pixels // 3, pixels // 3 + 1), (pixels // 3 + 1, pixels)]:
        _conv(emu, x, wp, oc, case, bias, res, "relu", span=span, out=pieces)
    np.testing.assert_array_equal(pieces, out)
    assert emu.sk_amx_emu_errors() == 0, emu.sk_amx_emu_message()


def test_packing_here_is_cpu_natives(emu):
    if not cn.bf16_available():
        pytest.skip("cpu_native has no bf16 build loaded")
    w = np.random.default_rng(3).standard_normal((37, 5, 3, 3), np.float32)  # (OC, IC, KH, KW)
    np.testing.assert_array_equal(cn.pack_conv_weight(w, dtype="bfloat16").data,
                                  _pack(w.transpose(2, 3, 1, 0).reshape(9, 5, 37)))  # fmt: skip


def test_small_calls_stay_on_the_vector_path(emu):
    """Below the row threshold (8 by default) nothing runs on tiles."""
    emu.sk_amx_enable(1, 8)
    try:
        rng = np.random.default_rng(5)
        a, w = rng.standard_normal((7, 40), np.float32), rng.standard_normal((40, 33), np.float32)
        ops = emu.sk_amx_emu_ops()
        out = _gemm(emu, a, _pack(w[None]), 33, None, None, "none")
        assert emu.sk_amx_emu_ops() == ops
        assert_close(out, _reference(a, w, None, None, "none"))
    finally:
        emu.sk_amx_enable(1, 1)


def test_selfcheck_passes_on_the_emulated_tiles(emu):
    assert emu.sk_amx_selfcheck(60000) == 0


# (pattern, replacement): a B-tile stride of one pair row instead of two; B tiles configured 8 rows (a K step that
# disagrees with A's 64 bytes). The check must catch both, and so must the self-check that guards the real build.
MUTATIONS = [
    (r"_tile_loadd\(6, bt, 2 \* NR \* sizeof\(bf16\)\)", "_tile_loadd(6, bt, NR * sizeof(bf16))"),
    (r"cfg\.rows\[t\] = TROWS;", "cfg.rows[t] = t >= 6 ? 8 : TROWS;"),
]


@pytest.mark.parametrize(("pattern", "new"), MUTATIONS)
def test_the_emulated_check_fails_on_broken_kernels(tmp_path, pattern, new):
    text = (NATIVE / "sk_amx.c").read_text()
    mutated, count = re.subn(pattern, new, text)
    assert count, f"sk_amx.c no longer contains {pattern!r}: update MUTATIONS to a bug the check must catch"
    (tmp_path / "sk_amx.c").write_text(mutated)
    broken = _compile(tmp_path / "sk_amx.c")
    broken.sk_amx_enable(1, 1)
    rng = np.random.default_rng(11)
    a, w = rng.standard_normal((33, 70), np.float32), rng.standard_normal((70, 45), np.float32)
    out = _gemm(broken, a, _pack(w[None]), 45, None, None, "none")
    faults = broken.sk_amx_emu_errors()
    broken.sk_amx_emu_reset()
    wrong = not np.allclose(out, _reference(a, w, None, None, "none"), rtol=1e-3, atol=1e-3)
    assert faults or wrong, "the mutated kernel passed the emulated check"
    assert broken.sk_amx_selfcheck(60000) != 0, "the self-check passed a mutated kernel"


def _library_file(dll) -> Path:
    return Path(dll._name)


def test_cpu_libraries_turns_on_a_build_whose_selfcheck_passes(monkeypatch, tmp_path):
    """The whole selection on the emulated build: flags with AMX, the tiles granted, the self-check passed -> on, and
    the library's products then run on tiles; a mutated copy stays off, saying why."""
    from serve.backend import cpu_libraries

    monkeypatch.setattr(cpu_libraries, "_status", cpu_libraries.amx_status())
    fresh = tmp_path / "good.so"  # a copy: its own tile switch, not the module fixture's
    shutil.copy(_library_file(_compile(NATIVE / "sk_amx.c")), fresh)
    flags = {"avx512_bf16", "amx_tile", "amx_bf16"}
    assert cpu_libraries.choose_amx(fresh, flags, {}), cpu_libraries.amx_status()
    assert cpu_libraries.amx_status() == "on"
    dll = ctypes.CDLL(str(fresh))
    dll.sk_gemm_bf16.argtypes = GEMM_ARGS
    dll.sk_amx_emu_ops.restype = ctypes.c_longlong
    rng = np.random.default_rng(2)
    a, w = rng.standard_normal((40, 64), np.float32), rng.standard_normal((64, 32), np.float32)
    ops = dll.sk_amx_emu_ops()
    assert_close(_gemm(dll, a, _pack(w[None]), 32, None, None, "none"), _reference(a, w, None, None, "none"))
    assert dll.sk_amx_emu_ops() > ops

    pattern, new = MUTATIONS[0]
    (tmp_path / "sk_amx.c").write_text(re.sub(pattern, new, (NATIVE / "sk_amx.c").read_text()))
    broken = tmp_path / "broken.so"
    shutil.copy(_library_file(_compile(tmp_path / "sk_amx.c")), broken)
    assert not cpu_libraries.choose_amx(broken, flags, {})
    assert cpu_libraries.amx_status() == "the self-check failed: its results differ from the vdpbf16ps path"


def test_tiles_stay_off_until_enabled(tmp_path):
    """A freshly loaded library runs its bf16 products on vdpbf16ps: only sk_amx_enable (after the self-check)
    turns the tiles on."""
    fresh = tmp_path / "fresh.so"
    shutil.copy(_library_file(_compile(NATIVE / "sk_amx.c")), fresh)
    dll = ctypes.CDLL(str(fresh))
    dll.sk_gemm_bf16.argtypes = GEMM_ARGS
    dll.sk_amx_emu_ops.restype = ctypes.c_longlong
    rng = np.random.default_rng(4)
    a, w = rng.standard_normal((64, 64), np.float32), rng.standard_normal((64, 64), np.float32)
    out = _gemm(dll, a, _pack(w[None]), 64, None, None, "relu")
    assert dll.sk_amx_emu_ops() == 0
    assert_close(out, _reference(a, w, None, None, "relu"))


@pytest.mark.parametrize(("child", "reason"), [
    ("for (;;) {}", "did not finish within"),  # a hang: killed at the deadline
    ("raise(SIGSEGV);", "died of signal 11"),  # a fault in the child, never in the caller
])  # fmt: skip
def test_a_selfcheck_that_hangs_or_crashes_leaves_amx_off(monkeypatch, tmp_path, child, reason):
    from serve.backend import cpu_libraries

    monkeypatch.setattr(cpu_libraries, "_status", cpu_libraries.amx_status())
    monkeypatch.setattr(cpu_libraries, "SELFCHECK_MS", 300)
    text, count = re.subn(r"_exit\(run_checks\(\)\);", child, (NATIVE / "sk_amx_check.c").read_text())
    assert count == 1, "sk_amx_check.c's self-check child changed: update this test"
    (tmp_path / "sk_amx_check.c").write_text(text)
    broken = _compile(NATIVE / "sk_amx.c", tmp_path / "sk_amx_check.c")
    assert not cpu_libraries.choose_amx(_library_file(broken), {"amx_tile", "amx_bf16"}, {})
    assert reason in cpu_libraries.amx_status()
