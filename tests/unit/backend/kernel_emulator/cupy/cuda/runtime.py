"""cupy.cuda.runtime as far as serve's kernel wrappers use it: a device with 2 SMs (small grid-stride grids)."""

cudaDevAttrMultiProcessorCount = 16


def getDevice() -> int:
    return 0


def deviceGetAttribute(attr: int, device: int) -> int:
    return 2
