"""A fake `nvidia-smi` for tests: a shell script written into a folder that the test puts first on PATH.

    bin_dir = fake_nvidia_smi(tmp_path, GPUS)              # `nvidia-smi -L` and the --query-gpu sample
    bin_dir = fake_nvidia_smi(tmp_path, fail=True)         # exits 9 like a machine whose driver is missing

Each call of the script appends its arguments to `calls.txt` beside it, so a test can count the runs.
"""

from __future__ import annotations

from pathlib import Path

# two H100s, the second split into two MIG instances (that GPU reports no utilization)
LIST = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaaaaaa-0000-0000-0000-000000000000)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbbbbbb-1111-1111-1111-111111111111)
  MIG 3g.40gb     Device  0: (UUID: MIG-cccccccc-2222-2222-2222-222222222222)
  MIG 3g.40gb     Device  1: (UUID: MIG-dddddddd-3333-3333-3333-333333333333)
"""
SAMPLE = """GPU-aaaaaaaa-0000-0000-0000-000000000000, 37, 20480, 81559
GPU-bbbbbbbb-1111-1111-1111-111111111111, [N/A], 1024, 81559
"""
UUIDS = ("GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-1111-1111-1111-111111111111")

SCRIPT = """#!/bin/sh
echo "$@" >> "{calls}"
case "$1" in
  -L) cat <<'EOF'
{list}EOF
  ;;
  --query-gpu=*) cat <<'EOF'
{sample}EOF
  ;;
  *) echo "unexpected arguments: $@" >&2; exit 2 ;;
esac
"""
FAILING = """#!/bin/sh
echo "$@" >> "{calls}"
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
exit 9
"""


def fake_nvidia_smi(root: Path, gpu_list: str = LIST, sample: str = SAMPLE, fail: bool = False) -> Path:
    """A folder holding an executable `nvidia-smi` that prints these outputs (or fails); put it first on PATH."""
    bin_dir = root / "fake-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    calls = bin_dir / "calls.txt"
    text = FAILING if fail else SCRIPT
    script.write_text(text.format(calls=calls, list=gpu_list, sample=sample))
    script.chmod(0o755)
    return bin_dir


def calls(bin_dir: Path) -> list[str]:
    """The argument lines of every run of the fake so far."""
    file = bin_dir / "calls.txt"
    return file.read_text().splitlines() if file.exists() else []
