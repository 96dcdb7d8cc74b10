"""A stand-in for CuPy on numpy whose RawModule runs serve's real kernel sources on the host (see ../check_kernels.py).

Only what serve/backend/cuda_kernels.py uses: arrays are numpy arrays (a subclass with `.data.ptr` and `.get()`),
`empty`/`empty_like` return memory filled with 0xFF bytes (NaN for every float storage type, -1 for ints), so an
element a kernel forgets to write shows. `RawModule(code=..., options=...)` compiles the CUDA C text with g++ (its
-std= and -D options) after ../shim.h (each CUDA thread a fiber) into a shared library cached under the system temp
dir by content hash. Each kernel launch goes through ctypes after checking every argument against the kernel's C
signature: the count, scalars of exactly the C type (np.int32 for int, np.int64 for long long, ...), pointers to
arrays of the pointee's dtype (T = the -DSERVE_T storage type). Every C-contiguous array argument is copied into a
buffer with 0xFF guard bytes around it (same 16-byte alignment) and the guards are checked after the launch, so a
write out of bounds fails the launch. Each launch runs once per thread schedule of SCHEDULES, on fresh copies of
its arguments, and the written arrays must come out bit-identical (a difference is a race). `launches` records
(kernel, SERVE_T, grid, block) of every run.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from . import cuda

__all__ = ["RawModule", "cuda", "launches", "ndarray"]

SHIM = Path(__file__).resolve().parent.parent / "shim.h"
CXX = os.environ.get("SERVE_KERNEL_EMU_CXX", "g++")
# plus the module's own -std= (NVRTC's, -std=c++17) and -D options; no FMA contraction, no fast math
CXXFLAGS = ("-O1", "-fno-strict-aliasing", "-fno-fast-math", "-ffp-contract=off", "-shared", "-fPIC", "-w")
CACHE = Path(
    os.environ.get("SERVE_KERNEL_EMU_CACHE") or Path(tempfile.gettempdir()) / f"serve-kernel-emu-{os.getuid()}"
)
GUARD = 64  # 0xFF bytes on each side of every array argument
# thread schedules every launch runs under (see emu_schedule in shim.h): round robin, lowest first, highest first
SCHEDULES = tuple(int(p) for p in os.environ.get("SERVE_KERNEL_EMU_SCHEDULES", "0,1,2").split(","))
launches: list[tuple[str, str, tuple[int, ...], tuple[int, ...]]] = []

bool_ = np.bool_


# ---- arrays ---------------------------------------------------------------------------------------------------
class _Ptr:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class ndarray(np.ndarray):
    @property
    def data(self) -> _Ptr:  # type: ignore[override]
        return _Ptr(self.__array_interface__["data"][0])

    def get(self) -> np.ndarray:
        return np.array(self).view(np.ndarray).copy()


def _w(a: Any) -> Any:
    return a.view(ndarray) if isinstance(a, np.ndarray) else a


def asarray(a: Any, dtype: Any = None) -> ndarray:
    return _w(np.array(a, dtype=dtype, copy=True))


def asnumpy(a: Any) -> np.ndarray:
    return np.array(a).view(np.ndarray).copy()


def ascontiguousarray(a: Any) -> ndarray:
    return _w(np.ascontiguousarray(a))


def empty(shape: Any, dtype: Any = np.float32) -> ndarray:
    out = np.empty(shape, dtype)
    if out.size:
        out.reshape(-1).view(np.uint8).fill(0xFF)
    return _w(out)


def empty_like(a: Any, dtype: Any = None) -> ndarray:
    return empty(np.shape(a), a.dtype if dtype is None else dtype)


def stack(xs: Any) -> ndarray:
    return _w(np.stack([np.asarray(x) for x in xs]))


def broadcast_to(a: Any, shape: Any) -> ndarray:
    return _w(np.broadcast_to(a, shape))


def __getattr__(name: str) -> Any:
    f = getattr(np, name)
    if callable(f) and not isinstance(f, type):
        return lambda *a, **k: _w(f(*a, **k))
    return f


# ---- kernels ------------------------------------------------------------------------------------------------------
_SIG = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)')
_H2F = re.compile(r'asm\s*\(\s*"cvt\.f32\.f16 %0, %1;"\s*:\s*"=f"\((\w+)\)\s*:\s*"h"\(([^()]*)\)\s*\)')
_F2H = re.compile(r'asm\s*\(\s*"cvt\.rn\.f16\.f32 %0, %1;"\s*:\s*"=h"\((\w+)\)\s*:\s*"f"\(([^()]*)\)\s*\)')
_SCALARS = {"int": np.int32, "unsigned int": np.uint32, "unsigned": np.uint32, "long long": np.int64,
            "unsigned long long": np.uint64, "float": np.float32, "double": np.float64}  # fmt: skip
_CTYPES = {np.int32: ctypes.c_int32, np.uint32: ctypes.c_uint32, np.int64: ctypes.c_int64,
           np.uint64: ctypes.c_uint64, np.float32: ctypes.c_float, np.float64: ctypes.c_double}  # fmt: skip
_STORAGE = {"float": np.dtype(np.float32), "serve_half": np.dtype(np.float16),
            "serve_bf16": np.dtype(ml_dtypes.bfloat16)}  # fmt: skip
_POINTEES = {"float": (np.float32,), "int": (np.int32,), "long long": (np.int64,),
             "unsigned char": (np.uint8, np.bool_), "bool": (np.bool_,)}  # fmt: skip


def _param(text: str) -> tuple[str, str, str, bool]:
    """(kind "ptr"/"scalar", C type without const and *, name, const) of one parameter declaration."""
    text = " ".join(text.replace("*", " * ").split())
    name = text.rsplit(" ", 1)[1]
    words = [w for w in text.rsplit(" ", 1)[0].split() if w not in ("const", "__restrict__")]
    if "*" in words:
        return "ptr", " ".join(w for w in words if w != "*"), name, "const" in text.split()[:2]
    return "scalar", " ".join(words), name, False


def emulated_source(code: str) -> str:
    """The kernel text as g++ compiles it: the fp16 conversions' inline PTX replaced by host conversions."""
    src = _H2F.sub(r"\1 = emu_h2f(\2)", code)
    src = _F2H.sub(r"\1 = emu_f2h(\2)", src)
    if re.search(r"\basm\b", src):
        raise RuntimeError("kernel emulator: inline PTX it does not know in the kernel source: "
                           + src[re.search(r"\basm\b", src).start():][:120])  # type: ignore[union-attr]  # fmt: skip
    return src


class RawModule:
    def __init__(self, code: str, options: tuple[str, ...] = (), **_: Any) -> None:
        self.code, self.options = code, tuple(options)
        self.sigs = {m.group(1): [_param(p) for p in m.group(2).split(",")] for m in _SIG.finditer(code)}
        defines = dict(o[2:].split("=", 1) for o in self.options if o.startswith("-D") and "=" in o)
        self.storage = defines.get("SERVE_T", "float")
        self._lib: Any = None

    def _library_text(self) -> str:
        launchers = []
        for name, params in self.sigs.items():
            decl = ", ".join(f"{'const ' if const else ''}{ctype}{' *' if kind == 'ptr' else ''} {pname}"
                             for kind, ctype, pname, const in params)  # fmt: skip
            args = ", ".join(p[2] for p in params)
            launchers.append(f'extern "C" void emu_launch_{name}(unsigned gx, unsigned bx, unsigned by, int policy, '
                             f"{decl}) {{ emu_run(gx, bx, by, policy, [=]() {{ {name}({args}); }}); }}")  # fmt: skip
        return f"{emulated_source(self.code)}\n// ---- launchers\n" + "\n".join(launchers) + "\n"

    def build(self) -> Any:
        """Compile (or find in the cache) and load the library; returns the ctypes handle."""
        if self._lib is not None:
            return self._lib
        if shutil.which(CXX) is None:
            raise RuntimeError(f"kernel emulator: no C++ compiler {CXX!r} on PATH")
        text = self._library_text()
        defines = [o for o in self.options if o.startswith(("-D", "-std="))]
        defines += [] if any(o.startswith("-std=") for o in defines) else ["-std=c++17"]
        key = hashlib.sha256("\0".join([SHIM.read_text(), text, *defines, *CXXFLAGS, CXX]).encode()).hexdigest()[:24]
        so = CACHE / f"{key}.so"
        if not so.exists():
            CACHE.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
                cpp = Path(tmp) / "kernels.cpp"
                cpp.write_text(f'#include "{SHIM}"\n{text}')
                out = subprocess.run([CXX, *CXXFLAGS, *defines, "-o", str(Path(tmp) / "k.so"), str(cpp)],
                                     capture_output=True, text=True)  # fmt: skip
                if out.returncode:
                    raise RuntimeError(f"kernel emulator: {CXX} failed on {defines}:\n{out.stderr[-4000:]}")
                os.replace(Path(tmp) / "k.so", so)  # atomic: concurrent runs never load a half-written file
        self._lib = ctypes.CDLL(str(so))
        return self._lib

    def get_function(self, name: str) -> _Function:
        if name not in self.sigs:
            raise KeyError(f"kernel {name!r} is not defined in the module (defines {sorted(self.sigs)})")
        return _Function(self, name)


class _Guarded:
    """An array argument copied into a buffer with 0xFF guards (same address modulo 16), checked after the launch."""

    def __init__(self, a: np.ndarray) -> None:
        self.a, self.n = a, a.nbytes
        self.buf = np.full(self.n + 2 * GUARD + 16, 0xFF, np.uint8)
        base = self.buf.ctypes.data
        self.off = GUARD + (a.ctypes.data - (base + GUARD)) % 16
        self.buf[self.off : self.off + self.n] = np.frombuffer(a.reshape(-1).view(np.uint8), np.uint8)
        self.ptr = base + self.off

    def body(self) -> np.ndarray:
        return self.buf[self.off : self.off + self.n]

    def check(self, kernel: str, what: str) -> None:
        if not (self.buf[: self.off] == 0xFF).all() or not (self.buf[self.off + self.n :] == 0xFF).all():
            raise AssertionError(f"{kernel}: wrote out of the bounds of argument {what} "
                                 f"({self.a.dtype} {self.a.shape})")  # fmt: skip


class _Function:
    def __init__(self, module: RawModule, name: str) -> None:
        self.module, self.name = module, name

    def _check_pointer(self, a: Any, ctype: str, pname: str) -> None:
        if a is None:
            return
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{self.name}: argument {pname} ({ctype}*) got {type(a).__name__}, not an array")
        if ctype == "void":
            return
        allowed = (_STORAGE[self.module.storage],) if ctype == "T" else _POINTEES.get(ctype)
        if allowed is None:
            raise TypeError(f"{self.name}: the emulator does not know pointers to {ctype!r} ({pname})")
        if a.dtype not in [np.dtype(t) for t in allowed]:
            raise TypeError(f"{self.name}: argument {pname} ({ctype}*) got a {a.dtype} array")
        if not a.flags.c_contiguous:
            raise TypeError(f"{self.name}: argument {pname} ({ctype}*) got a non-contiguous array {a.strides}")

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0, stream: Any = None) -> None:
        params = self.module.sigs[self.name]
        if len(args) != len(params):
            raise TypeError(f"{self.name}: {len(args)} arguments for {len(params)} parameters")
        grid, block = tuple(grid) + (1, 1), tuple(block) + (1, 1)
        if not all(isinstance(v, (int, np.integer)) and v >= 1 for v in grid[:3] + block[:3]):
            raise ValueError(f"{self.name}: bad launch configuration grid={grid[:3]} block={block[:3]}")
        if grid[1:3] != (1, 1) or block[2] != 1 or block[0] * block[1] > 1024 or shared_mem:
            raise ValueError(f"{self.name}: the emulator runs 1-d grids of blocks of at most 1024 threads in 2-d, "
                             f"without dynamic shared memory; got grid={grid[:3]} block={block[:3]}")  # fmt: skip
        scalars: dict[int, Any] = {}
        arrays: dict[int, tuple[tuple[int, int], str, bool]] = {}  # position -> (memory span, name, written)
        for i, (a, (kind, ctype, pname, const)) in enumerate(zip(args, params, strict=True)):
            if kind == "ptr":
                self._check_pointer(a, ctype, pname)
                if a is None:
                    scalars[i] = ctypes.c_void_p(None)
                elif a.flags.c_contiguous and a.nbytes:
                    arrays[i] = ((a.ctypes.data, a.nbytes), pname, not const)
                else:  # a broadcast view (0 strides): read in place
                    scalars[i] = ctypes.c_void_p(a.ctypes.data)
            else:
                want = _SCALARS.get(ctype)
                if want is None:
                    raise TypeError(f"{self.name}: the emulator does not know the scalar type {ctype!r} ({pname})")
                if type(a) is not want:
                    raise TypeError(f"{self.name}: argument {pname} ({ctype}) got {type(a).__name__} {a!r}, "
                                    f"expected {want.__name__}")  # fmt: skip
                scalars[i] = _CTYPES[want](a.item())
        spans = sorted({span for span, _, _ in arrays.values()})
        if any(s1 < e0 for (_, e0), (s1, _) in itertools.pairwise(spans)):
            raise ValueError(f"{self.name}: partially overlapping array arguments are not emulated")
        written = {span for span, _, w in arrays.values() if w}
        fn = getattr(self.module.build(), f"emu_launch_{self.name}")
        results: list[dict[tuple[int, int], _Guarded]] = []
        for policy in SCHEDULES:  # every schedule on fresh copies of the arguments: the results must not differ
            guarded: dict[tuple[int, int], _Guarded] = {}
            for i, (span, _, _) in arrays.items():
                guarded.setdefault(span, _Guarded(args[i]))
            cargs = [scalars[i] if i in scalars else ctypes.c_void_p(guarded[arrays[i][0]].ptr)
                     for i in range(len(args))]  # fmt: skip
            launches.append((self.name, self.module.storage, grid[:3], block[:3]))
            fn(ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), ctypes.c_uint(block[1]), ctypes.c_int(policy), *cargs)
            for span, pname, _ in arrays.values():
                guarded[span].check(self.name, pname)
            results.append(guarded)
        for span, pname, _ in arrays.values():
            for policy, other in zip(SCHEDULES[1:], results[1:], strict=True):
                if span in written and not np.array_equal(results[0][span].body(), other[span].body()):
                    raise AssertionError(f"{self.name}: argument {pname} differs between the runs under schedules "
                                         f"{SCHEDULES[0]} and {policy}: a race, or a read outside the "
                                         "arguments")  # fmt: skip
        for span in written:
            g = results[0][span]
            g.a.reshape(-1).view(np.uint8)[:] = g.body()
