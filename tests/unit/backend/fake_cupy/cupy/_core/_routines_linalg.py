COMPUTE_TYPE_DEFAULT, COMPUTE_TYPE_TF32 = 1, 7
calls = []


def set_compute_type(dtype, compute_type):
    calls.append((str(dtype), compute_type))
