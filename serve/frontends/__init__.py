"""serve.frontends: one protocol-free DataPlane, the exception -> status table, and the protocol adapters (http/)."""

from serve.frontends.dataplane import DataPlane
from serve.frontends.errors import ErrorInfo, error_info

__all__ = ["DataPlane", "ErrorInfo", "error_info"]
