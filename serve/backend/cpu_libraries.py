"""Whether the AMX build of the native kernels (`_sk_amx`, serve/backend/native/sk_amx.c) runs the bf16 products
here; cpu_native asks once at import and otherwise loads the AVX512-BF16 build as before.

Decisions, and why:
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

__all__ = ["AMX_FLAGS", "SELFCHECK_MS", "amx_status", "choose_amx"]

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
