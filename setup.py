"""Builds serve's native CPU kernels (serve/backend/native: serve_kernels.c, sk_norm.c and sk_paged.c, sharing
sk_isa.h) three times: AVX-512 and AVX2 shared libraries (the fp32 kernels), and AVX-512 with AVX512-BF16 (the same
plus the bfloat16 products), loaded with ctypes by serve/backend/cpu_native.py, which picks what the CPU runs at run
time. A compiler failure never fails the install: serve then runs its numpy kernels (or without the bf16 products,
for the third build). A fourth, `_sk_amx`, is the third plus AMX (sk_amx.c: the bf16 products on tiles), used only
where cpu_native's self-check passes on the CPU; a compiler without the AMX flags only loses that build."""

import os
import platform
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HEADER = "serve/backend/native/sk_isa.h"
SOURCES = [  # one library per ISA from all of them
    "serve/backend/native/serve_kernels.c",
    "serve/backend/native/sk_norm.c",
    "serve/backend/native/sk_paged.c",
    "serve/backend/native/sk_w8.c",
    "serve/backend/native/sk_i8.c",  # the int8 VNNI GEMM: empty unless SK_BF16 with -mavx512vnni
    "serve/backend/native/sk_glu.c",
]
COMMON = ["-O3", "-g0", "-std=c11", "-ffp-contract=fast", "-fno-math-errno", "-Wno-unused-function"]
AVX512 = ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mfma", "-DSK_ISA=512"]
AMX = ["-mamx-tile", "-mamx-bf16", "-mamx-int8", "-DSK_AMX=1"]
ISAS = {
    "_sk_avx512": AVX512,
    "_sk_avx2": ["-mavx2", "-mfma", "-DSK_ISA=256"],
    "_sk_avx512bf16": AVX512 + ["-mavx512bf16", "-mavx512vnni", "-DSK_BF16=1"],
    "_sk_amx": AVX512 + ["-mavx512bf16", "-mavx512vnni", "-DSK_BF16=1"] + AMX,
}
EXTRA_SOURCES = {"_sk_amx": ["serve/backend/native/sk_amx.c", "serve/backend/native/sk_amx_check.c"]}  # that build only


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when a kernel library cannot be compiled."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all
            print(f"warning: serve native kernels not built ({exc}); the numpy kernels will be used", file=sys.stderr)

    def build_extension(self, ext: Extension) -> None:
        build_temp = self.build_temp
        self.build_temp = os.path.join(build_temp, ext.name)  # the builds compile the same sources: own objects
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"warning: {ext.name} not built ({exc}); the numpy kernels will be used", file=sys.stderr)
        finally:
            self.build_temp = build_temp


extensions = [
    Extension(
        f"serve.backend.native.{name}",
        SOURCES + EXTRA_SOURCES.get(name, []),
        depends=[HEADER] + (["serve/backend/native/sk_amx_i8.c"] if name == "_sk_amx" else []),  # #included
        extra_compile_args=COMMON + flags,
        extra_link_args=["-s"],
    )
    for name, flags in ISAS.items()
]
if sys.platform == "win32" or platform.machine().lower() not in ("x86_64", "amd64"):
    extensions = []  # the kernels are x86-64 intrinsics built with GCC/Clang flags

setup(ext_modules=extensions, cmdclass={"build_ext": OptionalBuildExt})
