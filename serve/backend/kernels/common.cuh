// serve's CUDA kernels: what every family shares. Prepended to each .cu file by serve/backend/kernel_sources.py
// and compiled once per storage type with -DSERVE_T=float|serve_half|serve_bf16.
//
// No #include anywhere: NVRTC compiles these with no include path. Storage types are converted to float32 on
// load and back on store; every kernel computes in float32.

// ---- storage types ------------------------------------------------------------------------------------------
struct serve_half { unsigned short x; };  // IEEE binary16, as numpy's float16
struct serve_bf16 { unsigned short x; };  // bfloat16, as ml_dtypes.bfloat16

__device__ __forceinline__ float load_f32(const float* p) { return *p; }
__device__ __forceinline__ void store_f32(float* p, float v) { *p = v; }

__device__ __forceinline__ float load_f32(const serve_half* p) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p->x));
    return f;
}
__device__ __forceinline__ void store_f32(serve_half* p, float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    p->x = h;
}

__device__ __forceinline__ float load_f32(const serve_bf16* p) {
    return __uint_as_float(((unsigned int)p->x) << 16);
}
__device__ __forceinline__ void store_f32(serve_bf16* p, float v) {
    unsigned int u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a (quiet) NaN: rounding could carry it into inf
        p->x = (unsigned short)((u >> 16) | 0x0040u);
        return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    p->x = (unsigned short)(u >> 16);
}

#ifndef SERVE_T
#define SERVE_T float
#endif
typedef SERVE_T T;

// ---- constants (no math.h: INFINITY and NAN are not defined under NVRTC) --------------------------------------
#define SERVE_INF __int_as_float(0x7f800000)
#define SERVE_NAN __int_as_float(0x7fffffff)

// ---- 128-bit vector access: VEC elements of T per load/store ---------------------------------------------------
struct alignas(16) serve_u4 { unsigned int a, b, c, d; };
#define VEC ((int)(16 / sizeof(T)))

// v[0..VEC) <- p[0..VEC); p must be 16-byte aligned
__device__ __forceinline__ void load_vec(const T* p, float* v) {
    serve_u4 raw = *reinterpret_cast<const serve_u4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = load_f32(e + i);
}
__device__ __forceinline__ void store_vec(T* p, const float* v) {
    serve_u4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) store_f32(e + i, v[i]);
    *reinterpret_cast<serve_u4*>(p) = raw;
}

// ---- optional per-channel parameters: kind 0 = absent, 1 = float32 array, 2 = array of T -------------------------
__device__ __forceinline__ float load_param(const void* p, int kind, long long i, float absent) {
    if (kind == 1) return static_cast<const float*>(p)[i];
    if (kind == 2) return load_f32(static_cast<const T*>(p) + i);
    return absent;
}

// ---- integer division by a runtime constant (Granlund-Montgomery, as PyTorch's IntDivider) ----------------------
// The host passes (magic, shift) for divisor d; valid for 0 <= n <= 2^31 - 1.
struct serve_div {
    unsigned int d, magic, shift;
    __device__ __forceinline__ unsigned int div(unsigned int n) const { return (__umulhi(n, magic) + n) >> shift; }
};
__device__ __forceinline__ serve_div make_div(unsigned int d, unsigned int magic, unsigned int shift) {
    serve_div r;
    r.d = d;
    r.magic = magic;
    r.shift = shift;
    return r;
}

// The same interface with plain 64-bit division, for index spaces past 2^31 elements.
struct serve_div64 {
    long long d;
    __device__ __forceinline__ long long div(long long n) const { return n / d; }
};

// ---- reductions -------------------------------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Grid-stride helpers: 64-bit, so arrays past 2^31 elements are fine.
__device__ __forceinline__ long long global_thread() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ long long grid_threads() { return (long long)gridDim.x * blockDim.x; }
