"""CPU backend: matrix products split across serve's lanes (cpu_threads), numpy's BLAS running one thread in each.

A product big enough to pay for the hand-off (`_SPLIT_FLOPS`) is cut, when the right operand is a matrix, into its
column blocks (each lane then packs only its share of it for the BLAS: 10-20% faster than row blocks) or, when it is
narrow, into row blocks of the left operand (leading dims flattened); otherwise into blocks of the shared batch dims.
Each lane writes its block of one preallocated result. Products numpy would broadcast some other way, small ones, and
all of them where serve does not hold the BLAS's threads run as one `np.matmul`.
"""

from __future__ import annotations

import numpy as np

from serve.backend import cpu_threads

__all__ = ["matmul"]

_SPLIT_FLOPS = 1 << 24  # below ~16 MFLOP (~0.2 ms on one core) a second lane gains less than its ~70 us hand-off


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul(a, b), split across the lanes when that pays."""
    if a.ndim < 2 or b.ndim < 2 or 2 * a.size * b.shape[-1] < _SPLIT_FLOPS:  # the common small case first
        return np.matmul(a, b)
    if cpu_threads.get_num_threads() == 1 or not cpu_threads.blas_controlled():
        return np.matmul(a, b)
    if a.dtype.kind not in "fc" or b.dtype.kind not in "fc":
        return np.matmul(a, b)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if b.ndim == 2:
        a2 = a.reshape(-1, k)  # every row of every matrix of `a` times the one matrix `b`
        out = np.empty((a2.shape[0], n), np.result_type(a, b))
        if n < 64 * cpu_threads.get_num_threads():  # narrow: rows
            cpu_threads.parallel(lambda r0, r1: np.matmul(a2[r0:r1], b, out=out[r0:r1]), cpu_threads.spans(len(a2)))
        else:  # each lane packs only its columns of `b` for the BLAS, instead of all of it (10-20% faster)
            cpu_threads.parallel(lambda c0, c1: np.matmul(a2, b[:, c0:c1], out=out[:, c0:c1]),
                                 cpu_threads.spans(n, grain=16))  # fmt: skip
        return out.reshape(a.shape[:-1] + (n,))
    if a.shape[:-2] == b.shape[:-2]:
        a3, b3 = a.reshape(-1, m, k), b.reshape(-1, k, n)
        out = np.empty((len(a3), m, n), np.result_type(a, b))
        if len(a3) == 1:
            return matmul(a3[0], b3[0]).reshape(a.shape[:-1] + (n,))
        cpu_threads.parallel(lambda i0, i1: np.matmul(a3[i0:i1], b3[i0:i1], out=out[i0:i1]),
                             cpu_threads.spans(len(a3)))  # fmt: skip
        return out.reshape(a.shape[:-1] + (n,))
    return np.matmul(a, b)
