"""Which builds of the native kernels (serve/backend/native) load here: the fp32 one this CPU runs (AVX-512F+BW+DQ+VL,
else AVX2+FMA, else none; `SERVE_NATIVE=0` turns them off for A/B benchmarks), and beside it a bf16-capable one
(AVX512-BF16, or the AMX build where it proved itself). Each `Library` binds its functions' argtypes once; cpu_native
holds the loaded ones and wraps their calls.

Decisions about AMX, and why:
- The tile path is code that only an AMX CPU can run, so it must prove itself on the CPU before any product uses it:
  AMX is on only when /proc/cpuinfo has amx_tile and amx_bf16, `SERVE_AMX` is not "0", the build is installed,
  Linux grants this process the tile state (sk_amx_request: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA),
  refused by kernels before 5.16), and the self-check passes: sk_amx_selfcheck fork()s, the child runs small GEMMs
  and a convolution on tiles single-threaded and compares them with the vdpbf16ps path of the same library, and
  the parent waits at most SELFCHECK_MS. So a fault (SIGILL, SIGSEGV), a hang or a wrong answer costs the child,
  never the server, and leaves AMX off; then the library's products stay on vdpbf16ps (its tile path is off until
  sk_amx_enable), and cpu_native loads the AVX512-BF16 build instead.
- Why AMX is off is logged once per process (a warning where the CPU has AMX, since that is a lost 4-8x; debug
  where it simply has none) and kept for `amx_status()`.
- The checks are functions of their inputs (flags, environment, library path) so that tests drive each refusal on
  any machine, and the emulated build (tests/unit/backend/amx_emulator) drives the whole path to "on".
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["AMX", "AMX_FLAGS", "BF16", "FP32_BUILDS", "SELFCHECK_MS", "Library", "amx_status", "bf16_library",
           "choose_amx", "cpu_flags", "cpu_model", "first_library", "library_path", "load",
           "supported_isas"]  # fmt: skip

AMX_FLAGS = frozenset({"amx_tile", "amx_bf16"})
SELFCHECK_MS = 30_000  # generous: the child needs milliseconds, but a machine at load 10 may not schedule it soon
_SELFCHECK_VERDICTS = {1: "its results differ from the vdpbf16ps path", 2: "the child was refused the tiles or memory",
                       3: f"it did not finish within {SELFCHECK_MS} ms", 4: "fork() failed"}  # fmt: skip
_log = logging.getLogger("serve.backend.cpu_native")
_status = "not checked"


def amx_status() -> str:
    """Either "on" or why the AMX build is not used here (for describe() and logs)."""
    return _status


def _why_not(code: int) -> str:
    if code >= 128:
        return f"it died of signal {code - 128}"
    return _SELFCHECK_VERDICTS.get(code, f"exit status {code}")


def choose_amx(path: Path | None, flags: set[str], env: Mapping[str, str] | None = None) -> bool:
    """True when the AMX build at `path` may run the bf16 products on this CPU (its tile path then enabled); else
    False, with the reason in amx_status() and logged once. `flags` are /proc/cpuinfo's."""
    global _status
    env = os.environ if env is None else env
    has_amx = flags >= AMX_FLAGS
    if env.get("SERVE_AMX", "1").strip() == "0":
        reason = "SERVE_AMX=0"
    elif not has_amx:
        reason = "this CPU has no AMX (amx_tile, amx_bf16)"
    elif path is None:
        reason = "the _sk_amx build is not installed (the compiler lacked -mamx-tile / -mamx-bf16?)"
    else:
        reason = _try(path)
    _status = reason or "on"
    if reason:
        _log.log(logging.WARNING if has_amx else logging.DEBUG, "AMX bf16 kernels off: %s", reason)
    return not reason


def _try(path: Path) -> str:
    """'' when the library at path passed, else why not."""
    try:
        dll = ctypes.CDLL(str(path))
        dll.sk_amx_selfcheck.argtypes = [ctypes.c_int]
        dll.sk_amx_enable.argtypes = [ctypes.c_int, ctypes.c_int64]
    except (OSError, AttributeError) as exc:
        return f"the _sk_amx build does not load ({exc})"
    if dll.sk_amx_request() != 0:
        return "Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM; needs kernel 5.16+)"
    code = dll.sk_amx_selfcheck(SELFCHECK_MS)
    if code != 0:
        return f"the self-check failed: {_why_not(code)}"
    dll.sk_amx_enable(1, 0)
    return ""


FP32_BUILDS = {"avx512": "_sk_avx512", "avx2": "_sk_avx2"}
BF16, AMX = "avx512bf16", "amx"
_FILES = {**FP32_BUILDS, BF16: "_sk_avx512bf16", AMX: "_sk_amx"}
_I64, _PTR, _INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
_SIGNATURES = {
    "sk_gemm": [_PTR, _I64, _I64, _PTR, _I64, _PTR, _PTR, _I64, _PTR, _I64, _INT, _I64, _I64],
    "sk_conv2d": [_PTR] + [_I64] * 4 + [_PTR] + [_I64] * 11 + [_PTR, _PTR, _PTR, _INT, _I64, _I64],
    "sk_depthwise": [_PTR] + [_I64] * 4 + [_PTR] + [_I64] * 10 + [_PTR, _PTR, _PTR, _INT, _I64, _I64],
    "sk_maxpool": [_PTR] + [_I64] * 12 + [_PTR, _I64, _I64],
    "sk_winograd": [_PTR] + [_I64] * 4 + [_PTR] + [_I64] * 5 + [_PTR, _PTR, _PTR, _INT, _I64, _I64, _INT],
    "sk_attention": [_PTR] * 6 + [_I64] * 5 + [ctypes.c_float, _INT, _I64, _I64],
    "sk_layernorm": [_PTR] * 3 + [_I64] + [_PTR] * 2 + [ctypes.c_float, _I64, _I64],
    "sk_paged_decode": [_PTR] * 4 + [_I64, _PTR, _PTR] + [_I64] * 4 + [ctypes.c_float] * 2 + [_I64] * 3,
}
_BF16_SIGNATURES = {"sk_gemm_bf16": _SIGNATURES["sk_gemm"], "sk_conv2d_bf16": _SIGNATURES["sk_conv2d"],
                    "sk_attention_bf16": _SIGNATURES["sk_attention"]}  # fmt: skip


class Library:
    """One loaded kernel library: its functions with argtypes set, and its panel width (fp32, and bf16 for the
    bf16 build)."""

    def __init__(self, name: str, path: Path) -> None:
        self.name, self.path = name, path
        self.dll = ctypes.CDLL(str(path))
        signatures = {**_SIGNATURES, **(_BF16_SIGNATURES if name in (BF16, AMX) else {})}
        for fn_name, argtypes in signatures.items():
            fn = getattr(self.dll, fn_name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        self.gemm, self.conv2d, self.depthwise = self.dll.sk_gemm, self.dll.sk_conv2d, self.dll.sk_depthwise
        self.maxpool, self.attention, self.winograd = self.dll.sk_maxpool, self.dll.sk_attention, self.dll.sk_winograd
        self.layernorm, self.paged_decode = self.dll.sk_layernorm, self.dll.sk_paged_decode
        self.nr: int = self.dll.sk_nr()
        if name in (BF16, AMX):
            self.gemm_bf16, self.conv2d_bf16 = self.dll.sk_gemm_bf16, self.dll.sk_conv2d_bf16
            self.attention_bf16 = self.dll.sk_attention_bf16
            self.bf16_nr: int = self.dll.sk_bf16_nr()


def cpu_flags() -> set[str]:
    """/proc/cpuinfo's flags (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def supported_isas() -> list[str]:
    """The kernel builds this CPU runs, best first."""
    flags = cpu_flags()
    found = []
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl", "fma"} <= flags:
        found.append("avx512")
    if {"avx2", "fma"} <= flags:
        found.append("avx2")
    return found


def library_path(name: str) -> Path | None:
    """The installed file of build `name` (a key of FP32_BUILDS, BF16 or AMX), or None."""
    here = Path(__file__).parent / "native"
    matches = sorted(here.glob(_FILES[name] + ".*so")) if here.is_dir() else []
    return matches[0] if matches else None


def load(name: str) -> Library | None:
    """Fp32 build `name` loaded, or None where this CPU cannot run it or it is not installed."""
    path = library_path(name)
    if path is None or name not in supported_isas():
        return None
    try:
        return Library(name, path)
    except (OSError, AttributeError):
        return None


def first_library() -> Library | None:
    """The best fp32 build this CPU runs, or None (none installed, or SERVE_NATIVE=0)."""
    if os.environ.get("SERVE_NATIVE", "1").strip() == "0":
        return None
    for name in supported_isas():
        lib = load(name)
        if lib is not None:
            return lib
    return None


def bf16_library() -> Library | None:
    """The bf16 build, when native kernels are on, the CPU has avx512_bf16 and the build is installed: the AMX one
    where choose_amx says it proved itself here, else AVX512-BF16."""
    if os.environ.get("SERVE_NATIVE", "1").strip() == "0" or "avx512" not in supported_isas():
        return None
    if "avx512_bf16" not in cpu_flags():
        return None
    amx = library_path(AMX)
    if choose_amx(amx, cpu_flags()) and amx is not None:
        try:
            return Library(AMX, amx)
        except (OSError, AttributeError):
            pass
    path = library_path(BF16)
    if path is None:
        return None
    try:
        return Library(BF16, path)
    except (OSError, AttributeError):
        return None


def cpu_model() -> str:
    """The CPU's model name, for caches of choices made by timing kernels."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"
