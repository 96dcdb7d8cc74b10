"""The machine's NVIDIA GPUs, as `nvidia-smi` reports them: which ones CUDA will show, and how busy they are.

The frontend never imports CuPy (it is the serving stack's bottom half that needs no GPU libraries), so it asks
the driver's command-line tool instead, with a short timeout. No `nvidia-smi` on PATH, or one that fails (no
driver, a container without the utility capability), means no GPUs: never an error.

`CUDA_VISIBLE_DEVICES` is honoured the way CUDA reads it: a comma-separated list of indices, `GPU-<uuid>` (a
prefix is enough) or `MIG-<uuid>` entries, in the order CUDA numbers the devices; the list stops at the first
entry that names no device, and an empty value hides every GPU. A MIG instance is one CUDA device; its GPU is
the one its metrics are read from. Indices are nvidia-smi's (PCI order), which is CUDA's order too unless
`CUDA_DEVICE_ORDER` says otherwise on a machine with GPUs of different speeds.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

NVIDIA_SMI = "nvidia-smi"
TIMEOUT_S = 5.0
VISIBLE_DEVICES_VAR = "CUDA_VISIBLE_DEVICES"
_GPU_LINE = re.compile(r"^GPU (\d+): (.*?) \(UUID: (GPU-[^)]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: (MIG-[^)]+)\)\s*$")
SAMPLE_FIELDS = "uuid,utilization.gpu,memory.used,memory.total"


@dataclass(frozen=True)
class Gpu:
    """One physical GPU: nvidia-smi's index, its UUID and name, and the UUIDs of its MIG instances."""

    index: int
    uuid: str
    name: str
    migs: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuUsage:
    """One GPU's load: utilization in percent (None when the driver does not say, as with MIG), memory in MiB."""

    utilization: float | None
    memory_used_mib: float
    memory_total_mib: float

    @property
    def memory_percent(self) -> float:
        return 100.0 * self.memory_used_mib / self.memory_total_mib if self.memory_total_mib > 0 else 0.0


def run_nvidia_smi(args: list[str], search_path: str | None = None, timeout: float = TIMEOUT_S) -> str | None:
    """nvidia-smi's output, or None (logged) when it is missing, fails or takes longer than `timeout` s.

    `search_path` is the PATH to find it on (None: the process's)."""
    exe = shutil.which(NVIDIA_SMI, path=search_path)
    if exe is None:
        log.debug("%s is not on PATH: no NVIDIA GPUs", NVIDIA_SMI)
        return None
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        log.warning("%s %s took longer than %g s: treating the GPUs as unavailable", exe, " ".join(args), timeout)
        return None
    except OSError as e:
        log.warning("%s could not be run (%s): treating the GPUs as unavailable", exe, e)
        return None
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        log.warning("%s %s failed with exit code %d%s: treating the GPUs as unavailable", exe, " ".join(args),
                    done.returncode, f" ({said[0]})" if said else "")  # fmt: skip
        return None
    return done.stdout


def parse_list(text: str) -> list[Gpu]:
    """`nvidia-smi -L` lines -> the GPUs with their MIG instances."""
    gpus: list[Gpu] = []
    for line in text.splitlines():
        if match := _GPU_LINE.match(line):
            gpus.append(Gpu(int(match.group(1)), match.group(3), match.group(2)))
        elif (match := _MIG_LINE.match(line)) and gpus:
            last = gpus[-1]
            gpus[-1] = Gpu(last.index, last.uuid, last.name, (*last.migs, match.group(1)))
    return gpus


def list_gpus(search_path: str | None = None, timeout: float = TIMEOUT_S) -> list[Gpu] | None:
    """Every GPU of the machine (`nvidia-smi -L`); None when nvidia-smi cannot tell."""
    text = run_nvidia_smi(["-L"], search_path, timeout)
    return None if text is None else parse_list(text)


def visible(gpus: list[Gpu], cuda_visible_devices: str | None) -> list[Gpu]:
    """The GPU behind each CUDA device, in CUDA's numbering, given `CUDA_VISIBLE_DEVICES` (None: unset)."""
    if cuda_visible_devices is None:
        return list(gpus)
    out: list[Gpu] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        gpu = _find(gpus, entry)
        if gpu is None:
            break  # CUDA ignores the rest of the list after an entry that names no device
        out.append(gpu)
    return out


def _find(gpus: list[Gpu], entry: str) -> Gpu | None:
    if entry.isdigit():
        return next((g for g in gpus if g.index == int(entry)), None)
    if entry.startswith("GPU-") and len(entry) > 4:
        matches = [g for g in gpus if g.uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    if entry.startswith("MIG-"):
        return next((g for g in gpus if entry in g.migs), None)
    return None


def visible_gpus(environ: Mapping[str, str], timeout: float = TIMEOUT_S) -> list[Gpu] | None:
    """The GPUs CUDA will show a process started with `environ` (its PATH and CUDA_VISIBLE_DEVICES); None when
    nvidia-smi cannot tell."""
    gpus = list_gpus(environ.get("PATH"), timeout)
    return None if gpus is None else visible(gpus, environ.get(VISIBLE_DEVICES_VAR))


def parse_sample(text: str) -> dict[str, GpuUsage]:
    """`--query-gpu=uuid,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits` lines."""
    out: dict[str, GpuUsage] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not parts[0].startswith("GPU-"):
            continue
        used, total = _number(parts[2]), _number(parts[3])
        if used is None or total is None:
            continue
        out[parts[0]] = GpuUsage(_number(parts[1]), used, total)
    return out


def sample(timeout: float = TIMEOUT_S) -> dict[str, GpuUsage] | None:
    """Each GPU's current load by UUID; None when nvidia-smi cannot tell."""
    text = run_nvidia_smi([f"--query-gpu={SAMPLE_FIELDS}", "--format=csv,noheader,nounits"], timeout=timeout)
    return None if text is None else parse_sample(text)


def _number(text: str) -> float | None:
    """A number nvidia-smi printed; None for its "[N/A]" / "[Not Supported]"."""
    try:
        return float(text)
    except ValueError:
        return None
