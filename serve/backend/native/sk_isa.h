/* The vector vocabulary shared by serve's native kernel sources: one set of names (V, VL, vload, vfma, ...) over
 * AVX-512 (SK_ISA=512) or AVX2 + FMA (SK_ISA=256), chosen by the build (setup.py compiles every source once per
 * ISA). MR is the GEMM microkernel's rows; SK_EXPORT names an exported function. */
#ifndef SK_ISA_H
#define SK_ISA_H

#include <immintrin.h>

#ifndef SK_ISA
#define SK_ISA 512
#endif
#ifndef SK_BF16
#define SK_BF16 0
#endif

#if SK_ISA == 512
typedef __m512 V;
typedef __mmask16 VMask;
#define VL 16
#define MR 12
#define vzero() _mm512_setzero_ps()
#define vset1(x) _mm512_set1_ps(x)
#define vload(p) _mm512_loadu_ps(p)
#define vstore(p, v) _mm512_storeu_ps((p), (v))
#define vfma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define vadd(a, b) _mm512_add_ps((a), (b))
#define vsub(a, b) _mm512_sub_ps((a), (b))
#define vmul(a, b) _mm512_mul_ps((a), (b))
#define vdiv(a, b) _mm512_div_ps((a), (b))
#define vmax(a, b) _mm512_max_ps((a), (b))
/* max(s, v) where a NaN in v or s wins (PyTorch's max pool propagates NaN; maxps alone returns its second operand) */
#define vmax_nan(s, v) _mm512_mask_mov_ps(_mm512_max_ps((v), (s)), _mm512_cmp_ps_mask((v), (v), _CMP_UNORD_Q), (v))
#define vmin(a, b) _mm512_min_ps((a), (b))
#define vround(a) _mm512_roundscale_ps((a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vpow2i(n) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
static inline VMask vmask(int n) { return n >= VL ? (VMask)0xFFFF : (VMask)((1u << n) - 1u); }
#define vload_m(p, m) _mm512_maskz_loadu_ps((m), (p))
#define vstore_m(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define SK_EXPORT(name) sk_##name
#elif SK_ISA == 256
typedef __m256 V;
typedef __m256i VMask;
#define VL 8
#define MR 6
#define vzero() _mm256_setzero_ps()
#define vset1(x) _mm256_set1_ps(x)
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps((p), (v))
#define vfma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define vadd(a, b) _mm256_add_ps((a), (b))
#define vsub(a, b) _mm256_sub_ps((a), (b))
#define vmul(a, b) _mm256_mul_ps((a), (b))
#define vdiv(a, b) _mm256_div_ps((a), (b))
#define vmax(a, b) _mm256_max_ps((a), (b))
#define vmax_nan(s, v) _mm256_blendv_ps(_mm256_max_ps((v), (s)), (v), _mm256_cmp_ps((v), (v), _CMP_UNORD_Q))
#define vmin(a, b) _mm256_min_ps((a), (b))
#define vround(a) _mm256_round_ps((a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vpow2i(n) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
static inline VMask vmask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#define vload_m(p, m) _mm256_maskload_ps((p), (m))
#define vstore_m(p, m, v) _mm256_maskstore_ps((p), (m), (v))
#define SK_EXPORT(name) sk_##name
#else
#error "SK_ISA must be 512 or 256"
#endif

/* The sum of a vector's lanes, in lane order (the kernels' reductions depend on that order being fixed). */
static inline float hsum(V v) {
    float buf[VL], t = 0.0f;
    vstore(buf, v);
    for (int i = 0; i < VL; i++)
        t += buf[i];
    return t;
}

/* exp(x) for x clamped to [-87.3, 88.3] (2^n stays a normal number): Cody-Waite reduction by ln 2 and the
 * Cephes expf polynomial, about 1 ulp. */
static inline V v_exp(V x) {
    x = vmin(vmax(x, vset1(-87.3f)), vset1(88.3f));
    V n = vround(vmul(x, vset1(1.44269504088896341f)));
    V r = vfma(n, vset1(-0.693359375f), x);
    r = vfma(n, vset1(2.12194440e-4f), r);
    V p = vset1(1.9875691500e-4f);
    p = vfma(p, r, vset1(1.3981999507e-3f));
    p = vfma(p, r, vset1(8.3334519073e-3f));
    p = vfma(p, r, vset1(4.1665795894e-2f));
    p = vfma(p, r, vset1(1.6666665459e-1f));
    p = vfma(p, r, vset1(5.0000001201e-1f));
    p = vfma(vmul(p, r), r, vadd(r, vset1(1.0f)));
    return vmul(p, vpow2i(n));
}

#endif /* SK_ISA_H */
