// Row normalization: LayerNorm (with optional weight / bias), the (x - mean) / sqrt(var + eps) core of GroupNorm
// and InstanceNorm, and per-row moments. Statistics are float32 and stay accurate for rows with a large mean:
// everything is computed relative to the row's first element k0 (x - k0 is exact or nearly for x near k0), each
// thread sums d = (x - k0) - k around its own first element k, turns that into (count, mean, M2), and threads
// merge with Chan's parallel formula. The variance is the population one (divided by n), as PyTorch's.
// A warp per row for rows of up to 1024 elements (the *_warp kernels), a block per row beyond.

struct stat_w {
    float n, mean, m2;  // count, mean, sum of squared deviations
};

__device__ __forceinline__ void stat_merge(stat_w& a, float nb, float mb, float m2b) {
    float n = a.n + nb;
    if (nb == 0.f) return;
    if (a.n == 0.f) {
        a.n = nb;
        a.mean = mb;
        a.m2 = m2b;
        return;
    }
    float delta = mb - a.mean, fb = nb / n;
    a.mean += delta * fb;
    a.m2 += m2b + delta * delta * a.n * fb;
    a.n = n;
}

__device__ __forceinline__ stat_w warp_merge(stat_w st) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float nb = __shfl_xor_sync(0xffffffffu, st.n, o);
        float mb = __shfl_xor_sync(0xffffffffu, st.mean, o);
        float m2b = __shfl_xor_sync(0xffffffffu, st.m2, o);
        stat_merge(st, nb, mb, m2b);
    }
    // lanes merged in different orders may differ in the last bit: every lane takes lane 0's result
    st.n = __shfl_sync(0xffffffffu, st.n, 0);
    st.mean = __shfl_sync(0xffffffffu, st.mean, 0);
    st.m2 = __shfl_sync(0xffffffffu, st.m2, 0);
    return st;
}

__device__ __forceinline__ stat_w block_merge(stat_w st) {
    __shared__ float sm_n[32], sm_mean[32], sm_m2[32];
    st = warp_merge(st);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sm_n[warp] = st.n;
        sm_mean[warp] = st.mean;
        sm_m2[warp] = st.m2;
    }
    __syncthreads();
    stat_w t = {0.f, 0.f, 0.f};
    if (lane < (int)(blockDim.x >> 5)) {
        t.n = sm_n[lane];
        t.mean = sm_mean[lane];
        t.m2 = sm_m2[lane];
    }
    t = warp_merge(t);
    __syncthreads();  // the shared slots are reused by the block's next row
    return t;
}

// This thread's (count, mean - k0, M2) over elements t, t + threads, ... (in VEC-wide chunks when vec).
__device__ __forceinline__ stat_w thread_stats(const T* xr, long long n, int t, int threads, int vec, float k0) {
    float k = 0.f, s1 = 0.f, s2 = 0.f, c = 0.f;
    if (vec) {
        long long j = (long long)t * VEC;
        if (j < n) k = load_f32(xr + j) - k0;
#pragma unroll 4
        for (; j < n; j += (long long)threads * VEC) {
            float v[VEC];
            load_vec(xr + j, v);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                float d = (v[i] - k0) - k;
                s1 += d;
                s2 += d * d;
            }
            c += VEC;
        }
    } else {
        long long j = t;
        if (j < n) k = load_f32(xr + j) - k0;
        for (; j < n; j += threads) {
            float d = (load_f32(xr + j) - k0) - k;
            s1 += d;
            s2 += d * d;
            c += 1.f;
        }
    }
    stat_w st = {c, 0.f, 0.f};
    if (c > 0.f) {
        float dm = s1 / c;
        st.mean = k + dm;
        st.m2 = s2 - s1 * dm;
        if (st.m2 < 0.f) st.m2 = 0.f;  // rounding; NaN stays NaN
    }
    return st;
}

// y = ((x - k0) - mean) * rstd * w + b (mean relative to k0), w / b by kind (0 absent, 1 float32, 2 T).
__device__ __forceinline__ void row_normalize(const T* xr, T* yr, long long n, int t, int threads, int vec,
                                              float k0, float mean, float rstd, const void* w, int wk,
                                              const void* b, int bk) {
    if (vec) {
#pragma unroll 4
        for (long long j = (long long)t * VEC; j < n; j += (long long)threads * VEC) {
            float v[VEC];
            load_vec(xr + j, v);
#pragma unroll
            for (int i = 0; i < VEC; ++i)
                v[i] = ((v[i] - k0) - mean) * rstd * load_param(w, wk, j + i, 1.f) + load_param(b, bk, j + i, 0.f);
            store_vec(yr + j, v);
        }
    } else {
        for (long long j = t; j < n; j += threads) {
            float v = ((load_f32(xr + j) - k0) - mean) * rstd;
            store_f32(yr + j, v * load_param(w, wk, j, 1.f) + load_param(b, bk, j, 0.f));
        }
    }
}

__device__ __forceinline__ float inv_std(const stat_w& st, float eps) {
    return 1.f / sqrtf(st.m2 / st.n + eps);
}

extern "C" __global__ void layer_norm_warp(const T* x, T* y, const void* w, int wk, const void* b, int bk,
                                           long long rows, long long n, float eps, int vec) {
    int lane = threadIdx.x & 31;
    long long warps = blockDim.x >> 5;
    for (long long r = blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += gridDim.x * warps) {
        const T* xr = x + r * n;
        float k0 = load_f32(xr);
        stat_w st = warp_merge(thread_stats(xr, n, lane, 32, vec, k0));
        row_normalize(xr, y + r * n, n, lane, 32, vec, k0, st.mean, inv_std(st, eps), w, wk, b, bk);
    }
}

extern "C" __global__ void layer_norm_block(const T* x, T* y, const void* w, int wk, const void* b, int bk,
                                            long long rows, long long n, float eps, int vec) {
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * n;
        float k0 = load_f32(xr);
        stat_w st = block_merge(thread_stats(xr, n, threadIdx.x, blockDim.x, vec, k0));
        row_normalize(xr, y + r * n, n, threadIdx.x, blockDim.x, vec, k0, st.mean, inv_std(st, eps), w, wk, b, bk);
    }
}

// mean[r], var[r] (float32, population variance) of each row.
extern "C" __global__ void row_moments_warp(const T* x, float* mean, float* var, long long rows, long long n,
                                            int vec) {
    int lane = threadIdx.x & 31;
    long long warps = blockDim.x >> 5;
    for (long long r = blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += gridDim.x * warps) {
        float k0 = load_f32(x + r * n);
        stat_w st = warp_merge(thread_stats(x + r * n, n, lane, 32, vec, k0));
        if (lane == 0) {
            mean[r] = k0 + st.mean;
            var[r] = st.m2 / st.n;
        }
    }
}

extern "C" __global__ void row_moments_block(const T* x, float* mean, float* var, long long rows, long long n,
                                             int vec) {
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        float k0 = load_f32(x + r * n);
        stat_w st = block_merge(thread_stats(x + r * n, n, threadIdx.x, blockDim.x, vec, k0));
        if (threadIdx.x == 0) {
            mean[r] = k0 + st.mean;
            var[r] = st.m2 / st.n;
        }
    }
}
