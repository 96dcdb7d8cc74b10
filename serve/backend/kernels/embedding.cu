// Embedding lookup: out[r, :] = weight[ids[r], :] for weight (V, D) contiguous and ids int32 or int64.
// The wrapper checks 0 <= id < V before launching (PyTorch raises); an id outside still never reads out of
// bounds here: its row is written NaN. Rows are copied as raw bits (16 bytes at a time when aligned).
// blockDim = (threads over D, rows per block).

template <class I>
__device__ __forceinline__ void gather_rows(const T* w, const I* ids, T* out, long long count, long long V,
                                            long long D, int vec) {
    long long rows_per_block = blockDim.y;
    for (long long r = blockIdx.x * rows_per_block + threadIdx.y; r < count; r += gridDim.x * rows_per_block) {
        long long id = (long long)ids[r];
        T* o = out + r * D;
        if (id < 0 || id >= V) {
            for (long long j = threadIdx.x; j < D; j += blockDim.x) store_f32(o + j, SERVE_NAN);
            continue;
        }
        const T* src = w + id * D;
        if (vec) {
            for (long long j = (long long)threadIdx.x * VEC; j < D; j += (long long)blockDim.x * VEC)
                *reinterpret_cast<serve_u4*>(o + j) = *reinterpret_cast<const serve_u4*>(src + j);
        } else {
            for (long long j = threadIdx.x; j < D; j += blockDim.x) o[j] = src[j];
        }
    }
}

extern "C" __global__ void embedding_i32(const T* w, const int* ids, T* out, long long count, long long V,
                                         long long D, int vec) {
    gather_rows<int>(w, ids, out, count, V, D, vec);
}

extern "C" __global__ void embedding_i64(const T* w, const long long* ids, T* out, long long count, long long V,
                                         long long D, int vec) {
    gather_rows<long long>(w, ids, out, count, V, D, vec);
}
