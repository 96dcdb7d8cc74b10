"""cupy.cuda as far as serve's kernel wrappers use it."""

from . import runtime

__all__ = ["runtime"]
