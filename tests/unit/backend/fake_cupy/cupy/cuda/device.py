def get_cublas_handle():
    return 0
