"""The worker's GPU: making its assigned device current before the handler loads, and what a GPU error means.

A worker started with `--gpu N` (the server's round-robin over `number_of_gpu` / `deviceIds`) makes `cuda:N`
the current CuPy device, so everything the handler allocates lands there, and caps CuPy's memory pool at the
model-config's `gpuMemoryFraction` of that GPU when it is set (CuPy keeps freed blocks for reuse; by default
the pool grows until the GPU is full). `context.system_properties["gpu_id"]` is N either way, as TorchServe's.

When CUDA cannot be used (no CuPy, no driver, or N is not a device this process sees) the worker logs one
warning saying why and runs on the CPU, as TorchServe's worker does with a CPU-only torch: BaseHandler's
`select_device` asks `serve.cuda.is_available()` too.

Out of GPU memory: CuPy raises `OutOfMemoryError` (a MemoryError); cuBLAS and the CUDA runtime report an
allocation failure as an error whose text says so. Both answer the batch with 507 and the worker frees
CuPy's cached blocks and carries on. An error that leaves the CUDA context unusable (an illegal address, a
failed launch, a device-side assert) cannot be recovered from in the process: the worker answers the batch
with 500 and exits, and the server starts a fresh one.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Mapping
from typing import Any

import serve
from serve.backend import cuda_runtime

log = logging.getLogger("serve.worker")

# CUDA errors that make the context (so the process) unusable: every later call fails
STICKY_ERRORS = ("cudaErrorIllegalAddress", "cudaErrorLaunchFailure", "cudaErrorIllegalInstruction",
                 "cudaErrorMisalignedAddress", "cudaErrorHardwareStackError", "cudaErrorAssert",
                 "cudaErrorInvalidAddressSpace", "cudaErrorInvalidPc", "cudaErrorECCUncorrectable",
                 "cudaErrorLaunchTimeout", "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED",
                 "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_HARDWARE_STACK_ERROR",
                 "CUDA_ERROR_ASSERT", "CUDA_ERROR_ECC_UNCORRECTABLE")  # fmt: skip
# how the CUDA runtime and libraries word an allocation failure that is not CuPy's OutOfMemoryError
OOM_ERRORS = ("cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED", "CUFFT_ALLOC_FAILED",
              "CUDA_ERROR_OUT_OF_MEMORY", "CUSOLVER_STATUS_ALLOC_FAILED")  # fmt: skip


def use_gpu(gpu_id: int | None, model_config: Mapping[str, Any]) -> str | None:
    """Make `cuda:<gpu_id>` current and apply `gpuMemoryFraction`; the device name, or None to run on the CPU."""
    if gpu_id is None:
        return None
    if not serve.cuda.is_available():
        why = cuda_runtime.unavailable_reason() or "serve.cuda.is_available() is False"
        log.warning("GPU %d was assigned to this worker but CUDA is not usable here: %s; running the model on the CPU",
                    gpu_id, why)  # fmt: skip
        return None
    count = serve.cuda.device_count()
    if gpu_id >= count:
        log.warning("GPU %d was assigned to this worker but this process sees %d GPU(s) (CUDA_VISIBLE_DEVICES?); "
                    "running the model on the CPU", gpu_id, count)  # fmt: skip
        return None
    serve.cuda.set_device(gpu_id)
    fraction = model_config.get("gpuMemoryFraction")
    if isinstance(fraction, (int, float)) and not isinstance(fraction, bool) and 0 < fraction <= 1:
        serve.cuda.set_per_process_memory_fraction(float(fraction), gpu_id)
        log.info("cuda:%d: this worker's memory pool is capped at %g of the GPU's memory", gpu_id, fraction)
    return f"cuda:{gpu_id}"


def is_out_of_memory(e: BaseException) -> bool:
    """A MemoryError (CuPy's OutOfMemoryError is one), or a CUDA library error reporting a failed allocation."""
    return isinstance(e, MemoryError) or any(code in str(e) for code in OOM_ERRORS)


def is_fatal(e: BaseException) -> bool:
    """An error after which the process's CUDA context is unusable."""
    text = f"{type(e).__name__}: {e}"
    return any(code in text for code in STICKY_ERRORS)


def exhausted_device(e: BaseException, device: str | None) -> str | None:
    """Whose memory ran out: `device` for CuPy's and CUDA's allocation failures, None for the host's (a plain
    MemoryError, from numpy say, is the host's even on a GPU worker)."""
    if device is None or (isinstance(e, MemoryError) and not type(e).__module__.startswith("cupy")):
        return None
    return device


def out_of_memory_message(e: BaseException, device: str | None, batch: int) -> str:
    """The 507's message: which memory ran out, on what batch, and what to do."""
    detail = f"{type(e).__name__}: {e}".rstrip(": ")
    if device is None:
        return (f"Out of resources: out of host memory while running a batch of {batch} ({detail}); lower the "
                "model's batchSize, or give the server more memory")  # fmt: skip
    return (f"Out of resources: out of GPU memory on {device} while running a batch of {batch} ({detail}); lower "
            "the model's batchSize, raise its gpuMemoryFraction, or give the model a GPU of its own (deviceIds in "
            "the model-config). The worker freed its cached GPU memory and keeps serving")  # fmt: skip


def release_memory(device: str | None) -> None:
    """After an out-of-memory batch: drop what the failed batch left behind and, on a GPU, CuPy's cached blocks."""
    gc.collect()  # the traceback's frames held the batch's arrays in reference cycles
    if device is not None:
        serve.cuda.empty_cache()
