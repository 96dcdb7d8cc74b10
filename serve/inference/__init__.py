"""The inference plan made at load: capture a model's dataflow, fold and fuse, choose each layer's kernel by timing.

    from serve.inference import optimize
    fast = optimize(model.eval(), example_inputs=(x,))   # or serve.compile(model), planned at the first call
    fast(x)                                              # same results as model(x), within 1e-4

capture.py (which leaf module fed which), passes.py (fold batch norm, fuse activations, the rewritten tree),
planned.py (the fused layers), choosing.py (their per-shape kernel choice), kernels.py (the kernels they
choose among),
epilogue.py (bias and activations), optimized.py (`optimize`, the check against eager, the fallback).
"""

from serve.inference.optimized import OptimizedModule, optimize

__all__ = ["OptimizedModule", "optimize"]
