"""`torch._C`: the few names of torch's C extension module that model code calls directly.

Only `_log_api_usage_once` (torchvision's constructors report their use through it): a no-op, serve collects no
usage data.
"""

from __future__ import annotations


def _log_api_usage_once(event: str) -> None:
    """Do nothing: torch records API usage for telemetry; serve does not."""
