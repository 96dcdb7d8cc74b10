"""Configuration: one typed `Settings`, loaded from defaults < config.properties < environment < CLI flags.

The only package of the serving stack that reads the environment (environment.py). gpus.py asks nvidia-smi which
GPUs CUDA will show (number_of_gpu's default, and the GPU gauges of /metrics) without importing CuPy.
"""

from serve.config.loader import load_settings
from serve.config.logs import configure_logging
from serve.config.settings import Settings
from serve.config.values import parse_address, split_model_entry

__all__ = ["Settings", "configure_logging", "load_settings", "parse_address", "split_model_entry"]
