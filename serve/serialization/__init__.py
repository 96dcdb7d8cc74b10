"""serve.serialization: `serve.load` and `serve.save`, checkpoints in PyTorch's formats, loaded without PyTorch.

load.py recognises the format; torch_zip.py, legacy.py, safetensors_io.py and npz.py read one each (over
sources.py's byte ranges and zip_archive.py's entries); unpickler.py, opcodes.py, limits.py and allowlist.py
are the security boundary (no code from a checkpoint ever runs); storage.py rebuilds tensors as views of their
storages, location.py places them (map_location); save.py writes the zip format torch.load reads;
state_dict.py finds a model's state_dict inside a training checkpoint.
"""

from serve.errors import CheckpointError
from serve.serialization.load import load
from serve.serialization.save import save
from serve.serialization.state_dict import find_state_dict, strip_prefix

__all__ = ["CheckpointError", "find_state_dict", "load", "save", "strip_prefix"]
