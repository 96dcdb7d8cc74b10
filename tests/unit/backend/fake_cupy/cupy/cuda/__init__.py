from cupy import _Device as Device  # noqa: F401
from cupy.cuda import device, runtime  # noqa: F401


class _Stream:
    def synchronize(self):
        pass


def get_current_stream():
    return _Stream()
