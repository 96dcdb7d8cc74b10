modes = []


def setMathMode(handle, mode):
    modes.append(mode)
