"""The thin parts of the `torch` namespace that model files touch without computing, on serve.

The worker's import hook (serve/worker/torch_compat.py) puts every public name here on the `torch` alias (beside
serve's own runtime names) and maps `torch.X` imports to `serve.compat.torch.X`:

    torch._assert(cond, message)     AssertionError(message) when cond is false (torch's symbolic assert)
    torch.pi, torch.e, torch.inf, torch.nan   the Python floats
    torch._C._log_api_usage_once     a no-op (torchvision calls it in every constructor)
    torch.fx                         wrap (identity), symbolic_trace (NotImplementedError)
    torch.jit                        unused/ignore/export/_overload_method (identity), is_scripting/is_tracing (False),
                                     script/trace (the module itself, run eagerly, one warning), load (refused)
    torch.utils.checkpoint           checkpoint(fn, *args) runs fn (no activation recomputation: serve serves)
    torch.utils.data                 Dataset, TensorDataset, DataLoader (batching a sequence, no workers)
    torch.utils.model_zoo            load_url (torch.hub.load_state_dict_from_url's old name)
    torch.hub                        get_dir, load_state_dict_from_url (the local cache only, never the network)
    torch.version                    __version__ (also torch.__version__: the torch API followed), cuda/hip None

What Hugging Face transformers 5.x touches at import and build (tests/unit/compat/test_transformers_families.py):

    torch.LongTensor, FloatTensor, ...   tensor_types.py: isinstance by dtype, constructors from data or sizes
    torch.float8_e4m3fn, uint16, ...     tensor_types.py: dtypes for the tables libraries build
    torch.contiguous_format, get_default_device   tensor_types.py
    torch.UntypedStorage                 storage.py: safetensors' memory-mapped loading path
    torch.compiler, torch._dynamo        eager: never compiling, decorators return the function
    torch.compile                        compiler.py: the model unchanged, one warning (the worker plans it)
    torch.vmap, torch.func.vmap          func.py: a loop, or one broadcast call for transformers' mask expansion
    torch.autocast, torch.amp            never enabled: the model runs in its weights' dtype
    torch.library                        custom_op / register_fake / register_autograd: the Python function runs
    torch.utils._pytree, utils.hooks     flatten/unflatten with registered nodes; RemovableHandle
    torch.nn.attention(.flex_attention)  sdpa_kernel a no-op; flex attention importable, raises when called
    torch.distributed, accelerator, xpu, backends.mps   not available (is_available() False)
    torch.cuda.CUDAGraph, Stream, ...    cuda.py: never capturing; making one raises
    torch.autograd.graph.save_on_cpu, torch.profiler, torch.distributions.constraints, torch._subclasses
    torch.nn.init.sparse_, torch.nn.Conv3d (raises), torch.nn.modules.module

Decision: these are small shims, not implementations. Serving needs no graph capture, TorchScript or
checkpointed recomputation, so the decorators and checks keep a model file's eager code path, which is the one
serve runs; anything that would need the feature itself raises an error naming it and the alternative.
"""

from __future__ import annotations

import math

from serve.compat.torch import (
    _C,
    _dynamo,
    _subclasses,
    accelerator,
    amp,
    compiler,
    distributed,
    distributions,
    func,
    fx,
    hub,
    jit,
    library,
    profiler,
    utils,
    version,
    xpu,
)
from serve.compat.torch.amp import autocast, get_autocast_dtype, is_autocast_enabled
from serve.compat.torch.asserts import _assert
from serve.compat.torch.compiler import compile
from serve.compat.torch.func import vmap
from serve.compat.torch.storage import ByteStorage, TypedStorage, UntypedStorage
from serve.compat.torch.tensor_types import (
    BFloat16Tensor,
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
    channels_last,
    contiguous_format,
    float8_e4m3fn,
    float8_e5m2,
    get_default_device,
    memory_format,
    preserve_format,
    uint16,
    uint32,
    uint64,
)

pi, e, inf, nan = math.pi, math.e, math.inf, math.nan

__all__ = [
    "_C",
    "BFloat16Tensor",
    "BoolTensor",
    "ByteStorage",
    "ByteTensor",
    "CharTensor",
    "DoubleTensor",
    "FloatTensor",
    "HalfTensor",
    "IntTensor",
    "LongTensor",
    "ShortTensor",
    "TypedStorage",
    "UntypedStorage",
    "_assert",
    "_dynamo",
    "_subclasses",
    "accelerator",
    "amp",
    "autocast",
    "channels_last",
    "compile",
    "compiler",
    "contiguous_format",
    "distributed",
    "distributions",
    "e",
    "float8_e4m3fn",
    "float8_e5m2",
    "func",
    "fx",
    "get_autocast_dtype",
    "get_default_device",
    "hub",
    "inf",
    "is_autocast_enabled",
    "jit",
    "library",
    "memory_format",
    "nan",
    "pi",
    "preserve_format",
    "profiler",
    "uint16",
    "uint32",
    "uint64",
    "utils",
    "version",
    "vmap",
    "xpu",
]  # fmt: skip
