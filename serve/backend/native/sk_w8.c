/* serve's weight-only int8 GEMM: out = act(x @ (q * scale) + bias + residual), x fp32 (M, K), q int8 (K, N) with
 * one fp32 scale per output column (symmetric, per channel), fp32 accumulation and output.
 *
 * Why weight-only and dequantised in registers: a decode step reads every weight once per token, so its time is
 * the weights' bytes (issue 27, item 3); int8 weights are a quarter of fp32's and half of bf16's. The activations
 * stay fp32 (no per-token quantisation error, no calibration): each 16 (AVX2: 8) int8 weights are widened to
 * int32, converted to fp32 and multiplied by the broadcast activation, and the column scale is applied once per
 * output element at the end (sum_k x[k] * q[k][n]) * s[n], which is exact arithmetic on the quantised weight.
 * The widening costs two instructions per vector of weights, paid once for all the rows of a block, so a
 * one-row GEMV is bound by the int8 bytes it streams and a 16-row step by the FMAs.
 *
 * Layout (pack_weight_int8 in cpu_native.py): column panels of W8 = 2 * VL columns, each panel K rows of W8 int8
 * (K * W8 bytes, contiguous), the last panel zero-padded; scales padded with zeros to the panels' width.
 * Loop order: panel outer (its int8 read once from memory), row blocks inner (the activations are re-read from
 * cache). `cols [c0, c1)` of the output, on panel boundaries, lets lanes split N (serve.backend.cpu_threads).
 *
 * Past DEQUANT_ROWS rows (a prefill chunk, not a decode step) the widening per row block costs more than it saves
 * and the register kernel falls behind the fp32 one (~2.4x slower at 64 rows): there a group of panels is widened
 * once into an L2-sized fp32 buffer, scale folded in, in the fp32 kernel's panel layout, and serve_kernels.c's GEMM
 * (its blocking, its epilogue) multiplies every row by it. The widening is then K * N operations against M * K * N
 * FMAs. */
#include <stdint.h>
#include <stdlib.h>

#include "sk_isa.h"

/* serve_kernels.c's fp32 GEMM on packed panels (NR = 2 * VL columns, as W8 here), in the same library. */
int SK_EXPORT(gemm)(const float *a, long long lda, long long k, const float *wp, long long n, const float *bias,
                    const float *res, long long ldr, float *out, long long ldo, int act, long long r0, long long r1);

#define W8 (2 * VL)
/* rows per block: 2 * RB accumulators, 2 widened weights and the broadcast fit the 32 (AVX2: 16) registers */
#if SK_ISA == 512
#define RB 8
#define W8_ROWS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#else
#define RB 6
#define W8_ROWS(M) M(0) M(1) M(2) M(3) M(4) M(5)
#endif

#if SK_ISA == 512
static inline V widen(const int8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p))); }
#else
static inline V widen(const int8_t *p) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p))); }
#endif

enum { W8_NONE = 0, W8_RELU = 1, W8_GELU_TANH = 4, W8_SILU = 5 }; /* the indices of cpu_native.ACTIVATIONS */

static inline V w8_act(V v, int act) {
    switch (act) {
    case W8_RELU:
        return vmax(v, vzero());
    case W8_GELU_TANH: { /* 0.5 v (1 + tanh(u)), u = sqrt(2/pi) (v + 0.044715 v^3); tanh(u) = 1 - 2 / (exp(2u) + 1) */
        V u = vmul(vset1(0.7978845608028654f), vfma(vmul(vmul(v, v), v), vset1(0.044715f), v));
        V t = vsub(vset1(1.0f), vdiv(vset1(2.0f), vadd(v_exp(vadd(u, u)), vset1(1.0f))));
        return vmul(vmul(vset1(0.5f), v), vadd(vset1(1.0f), t));
    }
    case W8_SILU:
        return vdiv(v, vadd(vset1(1.0f), v_exp(vsub(vzero(), v))));
    default:
        return v;
    }
}

#define W8_DECL(j) V c##j##0 = vzero(), c##j##1 = vzero();
#define W8_FMA(j) \
    if ((j) < R) { \
        V a = vset1(x[(j) * ldx + k]); \
        c##j##0 = vfma(a, b0, c##j##0); \
        c##j##1 = vfma(a, b1, c##j##1); \
    }
#define W8_STORE(j) if ((j) < R) { acc[j][0] = c##j##0; acc[j][1] = c##j##1; }

/* acc[j] = x[j] @ panel for R (compile-time after inlining) rows: the panel's int8 widened once per k for all rows. */
static inline __attribute__((always_inline)) void w8_rows(const int R, const float *x, long long ldx, long long k0,
                                                          long long k1, const int8_t *panel, V acc[RB][2]) {
    W8_ROWS(W8_DECL)
    for (long long k = k0; k < k1; k++) {
        V b0 = widen(panel + k * W8), b1 = widen(panel + k * W8 + VL);
        W8_ROWS(W8_FMA)
    }
    W8_ROWS(W8_STORE)
}

typedef void (*W8Rows)(const float *, long long, long long, long long, const int8_t *, V (*)[2]);
#define W8_ENTRY(j) static void w8_rows_##j(const float *x, long long ldx, long long k0, long long k1, \
                                            const int8_t *panel, V acc[RB][2]) { w8_rows((j) + 1, x, ldx, k0, k1, panel, acc); }
W8_ROWS(W8_ENTRY)
#define W8_NAME(j) w8_rows_##j,
static const W8Rows W8_KERNELS[RB] = {W8_ROWS(W8_NAME)};

/* Returns 0, or -1 for arguments out of range. x (m, k) rows ldx apart; q the packed panels of n columns; scale
 * (n padded to panels); bias (n) or NULL; res rows ldr apart or NULL; out rows ldo apart; columns [c0, c1). */
#define DEQUANT_ROWS 16
#define DEQUANT_BYTES (256 * 1024) /* a group of panels widened at once: inside the L2 beside the activations */

/* The panels [p0, p0 + g * W8) widened to fp32 with their scales: buf (g, k, W8), the fp32 kernel's layout. */
static void widen_panels(const int8_t *q, const float *scale, long long k, long long p0, long long g, float *buf) {
    for (long long p = 0; p < g; p++) {
        const int8_t *panel = q + (p0 / W8 + p) * k * W8;
        V s0 = vload(scale + p0 + p * W8), s1 = vload(scale + p0 + p * W8 + VL);
        float *dst = buf + p * k * W8;
        for (long long kk = 0; kk < k; kk++) {
            vstore(dst + kk * W8, vmul(widen(panel + kk * W8), s0));
            vstore(dst + kk * W8 + VL, vmul(widen(panel + kk * W8 + VL), s1));
        }
    }
}

static int gemm_w8_widened(const float *x, long long m, long long k, long long ldx, const int8_t *q,
                           const float *scale, const float *bias, const float *res, long long ldr, float *out,
                           long long ldo, int act, long long c0, long long c1) {
    long long per = k * W8 * (long long)sizeof(float), g = DEQUANT_BYTES / per > 1 ? DEQUANT_BYTES / per : 1;
    float *buf = aligned_alloc(64, (size_t)(g * per + 63) / 64 * 64);
    if (!buf)
        return -1;
    int code = 0;
    for (long long p0 = c0; p0 < c1 && code == 0; p0 += g * W8) {
        long long cols = c1 - p0 < g * W8 ? c1 - p0 : g * W8, panels = (cols + W8 - 1) / W8;
        widen_panels(q, scale, k, p0, panels, buf);
        code = SK_EXPORT(gemm)(x, ldx, k, buf, cols, bias ? bias + p0 : NULL, res ? res + p0 : NULL, ldr, out + p0,
                               ldo, act, 0, m);
    }
    free(buf);
    return code;
}

int SK_EXPORT(gemm_w8)(const float *x, long long m, long long k, long long ldx, const int8_t *q, long long n,
                       const float *scale, const float *bias, const float *res, long long ldr, float *out,
                       long long ldo, int act, long long c0, long long c1) {
    if (m < 0 || k <= 0 || n <= 0 || c0 < 0 || c1 > n || c0 > c1 || c0 % W8 || ldx < k || ldo < n)
        return -1;
    if (act != W8_NONE && act != W8_RELU && act != W8_GELU_TANH && act != W8_SILU)
        return -1;
    if (m > DEQUANT_ROWS)
        return gemm_w8_widened(x, m, k, ldx, q, scale, bias, res, ldr, out, ldo, act, c0, c1);
    V acc[RB][2];
    for (long long p0 = c0; p0 < c1; p0 += W8) {
        const int8_t *panel = q + (p0 / W8) * k * W8;
        int ncols = (int)(c1 - p0 < W8 ? c1 - p0 : W8);
        V s[2] = {vload(scale + p0), vload(scale + p0 + VL)};
        for (long long r0 = 0; r0 < m; r0 += RB) {
            int rows = (int)(m - r0 < RB ? m - r0 : RB);
            W8_KERNELS[rows - 1](x + r0 * ldx, ldx, 0, k, panel, acc);
            for (int h = 0; h < 2; h++) {
                int nh = ncols - h * VL;
                if (nh <= 0)
                    break;
                VMask mk = vmask(nh);
                V b = bias ? vload_m(bias + p0 + h * VL, mk) : vzero();
                for (int j = 0; j < rows; j++) {
                    V v = vfma(acc[j][h], s[h], b);
                    if (res)
                        v = vadd(v, vload_m(res + (r0 + j) * ldr + p0 + h * VL, mk));
                    v = w8_act(v, act);
                    float *dst = out + (r0 + j) * ldo + p0 + h * VL;
                    if (nh >= VL)
                        vstore(dst, v);
                    else
                        vstore_m(dst, mk, v);
                }
            }
        }
    }
    return 0;
}

long long SK_EXPORT(w8_width)(void) { return W8; }

#if SK_BF16
/* The bf16 route (the AVX512-BF16 build only): the int8 panels widened, a group at a time, to bf16 in
 * serve_kernels.c's bf16 panel layout (pairs (k, k + 1) of each column interleaved, as vdpbf16ps reads them) and
 * multiplied by its bf16 GEMM, which rounds the activations to bf16 (nearest even) and accumulates in fp32; the
 * scale, bias, residual and activation are applied after, per output element. An int8 value is exact in bf16 (8
 * significant bits), so the weights lose nothing more: the cost is the activations' rounding, a relative 2^-9 per
 * element. Why: at 16 rows the register kernel is bound by its FMAs (16 lanes per instruction, fp32's speed), where
 * vdpbf16ps does 32 multiply-adds per instruction; the widening is K * N operations against M * K * N / 2. The
 * caller (cpu_int8.py) picks this route from a number of rows it measured; at one row the register kernel, which
 * streams only the int8 bytes, stays. */
int SK_EXPORT(gemm_bf16)(const float *a, long long lda, long long k, const uint16_t *wp, long long n,
                         const float *bias, const float *res, long long ldr, float *out, long long ldo, int act,
                         long long r0, long long r1);

/* Panels [p0, p0 + g * W8) of q as bf16, (g, k / 2 rounded up, W8, 2): exact, the bits of the fp32 integer. The
 * pair is one word blend: k's bf16 (its fp32's high word, shifted down) in the low words, k + 1's fp32 taken as
 * is into the high words (its low word, zero for an integer of 8 significant bits, is dropped): 6 instructions per
 * 32 weights where separate shifts and an or took 8 (bench/RESULTS.md, issue 25, "int8 at 16 rows"). */
static void widen_panels_bf16(const int8_t *q, long long k, long long p0, long long g, uint16_t *buf) {
    long long kp = (k + 1) / 2;
    __m512i zero = _mm512_setzero_si512();
    for (long long p = 0; p < g; p++) {
        const int8_t *panel = q + (p0 / W8 + p) * k * W8;
        uint16_t *dst = buf + p * kp * 2 * W8;
        for (long long kk = 0; kk < kp; kk++) {
            for (int h = 0; h < 2; h++) {
                const int8_t *row = panel + 2 * kk * W8 + h * VL;
                __m512i lo = _mm512_srli_epi32(_mm512_castps_si512(widen(row)), 16);
                __m512i hi = 2 * kk + 1 < k ? _mm512_castps_si512(widen(row + W8)) : zero;
                _mm512_storeu_si512(dst + kk * 2 * W8 + h * 2 * VL, _mm512_mask_blend_epi16(0xAAAAAAAAu, lo, hi));
            }
        }
    }
}

/* Each sk_gemm_bf16 call has a fixed cost (it rounds all the activations to bf16 again, sets up its row blocks)
 * that groups of 256 KiB (64 columns at K768) paid 18 times per K768 x N1152 product: 2 MiB groups (held per
 * lane only while a call runs), past a 1 MiB L2 but written and read back at once, took that product from 0.229
 * to 0.179 ms at 16 rows and 0.164 to 0.112 at 8 (bench/RESULTS.md, issue 25, "int8 at 16 rows"). */
#define DEQUANT_BF16_BYTES (2048 * 1024)

int SK_EXPORT(gemm_w8_bf16)(const float *x, long long m, long long k, long long ldx, const int8_t *q, long long n,
                            const float *scale, const float *bias, const float *res, long long ldr, float *out,
                            long long ldo, int act, long long c0, long long c1) {
    if (m < 0 || k <= 0 || n <= 0 || c0 < 0 || c1 > n || c0 > c1 || c0 % W8 || ldx < k || ldo < n)
        return -1;
    if (act != W8_NONE && act != W8_RELU && act != W8_GELU_TANH && act != W8_SILU)
        return -1;
    long long per = (k + 1) / 2 * 2 * W8 * (long long)sizeof(uint16_t);
    long long g = DEQUANT_BF16_BYTES / per > 1 ? DEQUANT_BF16_BYTES / per : 1;
    uint16_t *buf = aligned_alloc(64, (size_t)(g * per + 63) / 64 * 64);
    if (!buf)
        return -1;
    int code = 0;
    for (long long p0 = c0; p0 < c1 && code == 0; p0 += g * W8) {
        long long cols = c1 - p0 < g * W8 ? c1 - p0 : g * W8, panels = (cols + W8 - 1) / W8;
        widen_panels_bf16(q, k, p0, panels, buf);
        code = SK_EXPORT(gemm_bf16)(x, ldx, k, buf, cols, NULL, NULL, 0, out + p0, ldo, W8_NONE, 0, m);
        for (long long r = 0; r < m && code == 0; r++) { /* act(acc * scale + bias + res), in place */
            float *o = out + r * ldo + p0;
            const float *rr = res ? res + r * ldr + p0 : NULL;
            for (long long j = 0; j < cols; j += VL) {
                VMask mk = vmask((int)(cols - j < VL ? cols - j : VL));
                V v = vmul(vload_m(o + j, mk), vload_m(scale + p0 + j, mk));
                if (bias)
                    v = vadd(v, vload_m(bias + p0 + j, mk));
                if (rr)
                    v = vadd(v, vload_m(rr + j, mk));
                vstore_m(o + j, mk, w8_act(v, act));
            }
        }
    }
    free(buf);
    return code;
}
#endif
