"""`torch.multiprocessing`: Python's multiprocessing under torch's name (captum's TCAV imports it); serve tensors are
numpy-backed, so they pickle across processes as numpy arrays do, with no shared-memory transport of torch's."""

from __future__ import annotations

from multiprocessing import *  # noqa: F403
from multiprocessing import get_context, get_start_method, set_start_method  # noqa: F401
