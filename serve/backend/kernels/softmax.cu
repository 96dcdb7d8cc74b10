// Softmax over the last axis of contiguous rows: one pass keeps the running max m and the sum s of exp(x - m)
// (online softmax), a second pass (re-reading the row, mostly from L2) writes exp(x - m) / s or x - m - log(s).
// A warp per row for rows of up to 1024 elements (the *_warp kernels), a block per row beyond.
// Rows of -inf give NaN (exp(-inf - -inf)), as PyTorch's softmax; NaN anywhere in a row makes the row NaN.

struct stat_ms {
    float m, s;  // running max (never NaN) and sum of exp(x - m) (carries NaN)
};

__device__ __forceinline__ stat_ms stat_empty() {
    stat_ms r;
    r.m = -SERVE_INF;
    r.s = 0.f;
    return r;
}

// exp(x - m), except that x = -inf contributes 0 even when m = -inf (no NaN from -inf - -inf): a row of -inf
// keeps s = 0, so its outputs are 0 * (1 / 0) = NaN, PyTorch's answer. x = m = +inf gives NaN, as PyTorch.
__device__ __forceinline__ float exp_rel(float x, float m) { return x == -SERVE_INF ? 0.f : expf(x - m); }

__device__ __forceinline__ void stat_push(stat_ms& st, float x) {
    if (x > st.m) {
        st.s = st.s * exp_rel(st.m, x) + (1.f + (x - x));  // exp(x - x): 1, or NaN for +inf
        st.m = x;
    } else {
        st.s += exp_rel(x, st.m);
    }
}

__device__ __forceinline__ void stat_push_vec(stat_ms& st, const float* v) {
    float cmax = -SERVE_INF;
#pragma unroll
    for (int i = 0; i < VEC; ++i) cmax = fmaxf(cmax, v[i]);  // fmaxf skips NaN: NaN only reaches s
    float m = fmaxf(st.m, cmax);
    float s = st.s * exp_rel(st.m, m);
#pragma unroll
    for (int i = 0; i < VEC; ++i) s += exp_rel(v[i], m);
    st.m = m;
    st.s = s;
}

__device__ __forceinline__ void stat_merge(stat_ms& a, float m2, float s2) {
    float m = fmaxf(a.m, m2);
    a.s = a.s * exp_rel(a.m, m) + s2 * exp_rel(m2, m);
    a.m = m;
}

__device__ __forceinline__ stat_ms warp_merge(stat_ms st) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, st.m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, st.s, o);
        stat_merge(st, m2, s2);
    }
    // lanes merged in different orders may differ in the last bit: every lane takes lane 0's result
    st.m = __shfl_sync(0xffffffffu, st.m, 0);
    st.s = __shfl_sync(0xffffffffu, st.s, 0);
    return st;
}

// Every thread of the block gets the merged statistics (each warp merges the per-warp results itself).
__device__ __forceinline__ stat_ms block_merge(stat_ms st) {
    __shared__ float sm_m[32], sm_s[32];
    st = warp_merge(st);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sm_m[warp] = st.m;
        sm_s[warp] = st.s;
    }
    __syncthreads();
    stat_ms t = stat_empty();
    if (lane < (int)(blockDim.x >> 5)) {
        t.m = sm_m[lane];
        t.s = sm_s[lane];
    }
    t = warp_merge(t);
    __syncthreads();  // the shared slots are reused by the block's next row
    return t;
}

__device__ __forceinline__ float softmax_out(float x, float m, float inv_s, float log_s, int log) {
    return log ? (x - m) - log_s : exp_rel(x, m) * inv_s;
}

// Thread `t` of `threads` working on one row of n elements; vec: rows and pointers allow 16-byte accesses.
__device__ __forceinline__ stat_ms row_stats(const T* xr, int n, int t, int threads, int vec) {
    stat_ms st = stat_empty();
    if (vec) {
#pragma unroll 4
        for (int j = t * VEC; j < n; j += threads * VEC) {
            float v[VEC];
            load_vec(xr + j, v);
            stat_push_vec(st, v);
        }
    } else {
        for (int j = t; j < n; j += threads) stat_push(st, load_f32(xr + j));
    }
    return st;
}

__device__ __forceinline__ void row_write(const T* xr, T* yr, int n, int t, int threads, int vec, stat_ms st,
                                          int log) {
    float inv_s = 1.f / st.s, log_s = logf(st.s);
    if (vec) {
#pragma unroll 4
        for (int j = t * VEC; j < n; j += threads * VEC) {
            float v[VEC];
            load_vec(xr + j, v);
#pragma unroll
            for (int i = 0; i < VEC; ++i) v[i] = softmax_out(v[i], st.m, inv_s, log_s, log);
            store_vec(yr + j, v);
        }
    } else {
        for (int j = t; j < n; j += threads) store_f32(yr + j, softmax_out(load_f32(xr + j), st.m, inv_s, log_s, log));
    }
}

// A warp per row: blockDim.x = 32 * rows per block.
extern "C" __global__ void softmax_rows_warp(const T* x, T* y, long long rows, int n, int log, int vec) {
    int lane = threadIdx.x & 31;
    long long warps = blockDim.x >> 5;
    for (long long r = blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += gridDim.x * warps) {
        const T* xr = x + r * n;
        stat_ms st = warp_merge(row_stats(xr, n, lane, 32, vec));
        row_write(xr, y + r * n, n, lane, 32, vec, st, log);
    }
}

// A block per row (blockDim.x a multiple of 32, at most 1024).
extern "C" __global__ void softmax_rows_block(const T* x, T* y, long long rows, int n, int log, int vec) {
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * n;
        stat_ms st = block_merge(row_stats(xr, n, threadIdx.x, blockDim.x, vec));
        row_write(xr, y + r * n, n, threadIdx.x, blockDim.x, vec, st, log);
    }
}

// ---- attention: softmax(scores * scale + mask) over keys, scores (B, H, Lq, Lk) contiguous --------------------
// mask_kind: 0 none, 1 additive float32, 2 additive T, 3 bool (uint8, nonzero = keep); the mask is read at
// b * mb + h * mh + q * mq + k * mk (element strides, 0 on broadcast dims). causal masks k > q. safe: a row
// with no unmasked key gives 0 (PyTorch's scaled_dot_product_attention) instead of NaN.
struct mask_view {
    const void* p;
    int kind, causal;
    long long mk;
};

__device__ __forceinline__ float masked_score(const T* sr, const mask_view& mv, long long base, long long q, int k,
                                              float scale) {
    float v = load_f32(sr + k) * scale;
    if (mv.causal && k > q) return -SERVE_INF;
    long long at = base + k * mv.mk;
    if (mv.kind == 1) v += static_cast<const float*>(mv.p)[at];
    else if (mv.kind == 2) v += load_f32(static_cast<const T*>(mv.p) + at);
    else if (mv.kind == 3 && !static_cast<const unsigned char*>(mv.p)[at]) v = -SERVE_INF;
    return v;
}

__device__ __forceinline__ void masked_row(const T* s, T* y, long long r, int n, int t, int threads, bool block,
                                           float scale, const mask_view& mv, long long H, long long Lq,
                                           long long mb, long long mh, long long mq, int safe) {
    long long q = r % Lq, bh = r / Lq;
    long long base = (bh / H) * mb + (bh % H) * mh + q * mq;
    const T* sr = s + r * n;
    T* yr = y + r * n;
    stat_ms st = stat_empty();
    for (int k = t; k < n; k += threads) stat_push(st, masked_score(sr, mv, base, q, k, scale));
    st = block ? block_merge(st) : warp_merge(st);
    if (safe && st.m == -SERVE_INF && st.s == st.s) {  // every key masked (and no NaN): zeros
        for (int k = t; k < n; k += threads) store_f32(yr + k, 0.f);
        return;
    }
    float inv_s = 1.f / st.s;
    for (int k = t; k < n; k += threads)
        store_f32(yr + k, exp_rel(masked_score(sr, mv, base, q, k, scale), st.m) * inv_s);
}

extern "C" __global__ void masked_softmax_warp(const T* s, T* y, long long rows, int n, float scale,
                                               const void* mask, int mask_kind, long long H, long long Lq,
                                               long long mb, long long mh, long long mq, long long mk, int causal,
                                               int safe) {
    mask_view mv = {mask, mask_kind, causal, mk};
    long long warps = blockDim.x >> 5;
    for (long long r = blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += gridDim.x * warps)
        masked_row(s, y, r, n, threadIdx.x & 31, 32, false, scale, mv, H, Lq, mb, mh, mq, safe);
}

extern "C" __global__ void masked_softmax_block(const T* s, T* y, long long rows, int n, float scale,
                                                const void* mask, int mask_kind, long long H, long long Lq,
                                                long long mb, long long mh, long long mq, long long mk, int causal,
                                                int safe) {
    mask_view mv = {mask, mask_kind, causal, mk};
    for (long long r = blockIdx.x; r < rows; r += gridDim.x)
        masked_row(s, y, r, n, threadIdx.x, blockDim.x, true, scale, mv, H, Lq, mb, mh, mq, safe);
}
