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

Decision: these are small shims, not implementations. Serving needs no graph capture, TorchScript or
checkpointed recomputation, so the decorators and checks keep a model file's eager code path, which is the one
serve runs; anything that would need the feature itself raises an error naming it and the alternative.
"""

from __future__ import annotations

import math

from serve.compat.torch import _C, fx, hub, jit, utils, version
from serve.compat.torch.asserts import _assert

pi, e, inf, nan = math.pi, math.e, math.inf, math.nan

__all__ = ["_C", "_assert", "e", "fx", "hub", "inf", "jit", "nan", "pi", "utils", "version"]
