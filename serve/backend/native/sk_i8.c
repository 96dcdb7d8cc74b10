/* serve's dynamically quantised int8 GEMM (AVX512-VNNI): out = act(dequant(u8(x) . q) + bias + residual), PyTorch's
 * `quantize_dynamic` arithmetic for a linear layer, on vpdpbusd.
 *
 * Why: an encoder at batch 8 x 128 is bound by its products' FLOPs, not its weights' bytes, so the weight-only
 * kernel (sk_w8.c, which widens int8 weights to fp32) buys nothing there. vpdpbusd multiplies 64 u8 x s8 pairs and
 * sums them four at a time into 16 int32 lanes: four times the multiply-adds of an fp32 FMA per instruction, two
 * times vdpbf16ps's (issue 27, item 3).
 *
 * The arithmetic (cpu_i8.py holds its numpy twin, the tests' reference):
 * - weight: symmetric int8 per output column (scale_n = max |w[:, n]| / 127, values in [-127, 127]), as cpu_int8;
 * - activations: each row quantised when the call runs (dynamic), asymmetric u8 over the row's range widened to hold
 *   0: s_r = (max(x_r, 0) - min(x_r, 0)) / 255 (1 for a row of zeros), z_r = rint(-min / s_r) in [0, 255],
 *   u = clamp(rint(x * (1 / s_r)) + z_r, 0, 255). Per row rather than PyTorch's per tensor: a row's scale does not
 *   depend on the other rows of its batch (a request's numbers stay the same whoever it is batched with), and the
 *   rows' ranges differ (a transformer's tokens);
 * - acc = sum_k u[k] q[k][n] in int32, exact (255 * 127 * 4 per vpdpbusd lane step; no intermediate saturation);
 * - out = float(acc - z_r * colsum_n) * (s_r * scale_n) + bias + residual, then the activation: the u8 zero point
 *   comes out as one integer product per output with the weight's column sums, computed once at packing.
 *
 * Layout (cpu_i8.pack): column panels of W = 32 columns; inside a panel K / 4 groups (K padded to 4 with zero
 * weights), each group 32 columns x 4 consecutive k, as vpdpbusd reads a 64-byte vector of 16 columns:
 *   packed[panel][k / 4][j][k % 4] = q[k][panel * 32 + j].
 * Per call, the rows r0..r1 (a lane's span) are quantised ISUPER rows at a time into a u8 buffer; then, as the fp32
 * GEMM does, a group of panels that fits in L2 is read from memory once while every block of MRI rows (24 int32
 * accumulators of the 32 registers) sweeps it, the block's u8 rows staying in L1 across the group (measured on the
 * loaded EPYC against per-panel sweeps of 96 rows: about the same at N 768, up to 1.2x at N 2304-3072; the 2-panel
 * x 6-row microkernel, half the broadcasts per vpdpbusd, measured no better). The fp32 epilogue's activations are
 * serve_kernels.c's (sk_act_vec, same library). vpdpbusd alone runs ~5 G/s on one Zen 4 core (630-700 GOP/s), the
 * GEMM 200-400 GOP/s: what is left is in feeding it (loads and broadcasts), not in the arithmetic.
 *
 * In the AMX build (SK_AMX) this GEMM is sk_gemm_i8_dp, and sk_amx_i8.c's sk_gemm_i8 puts calls of SK_AMX_MIN_ROWS
 * rows or more on TDPBUSD tiles: the same u8 x s8 products, this packing as its B tiles, this epilogue.
 * Compiled only into the AVX512-BF16 build with -mavx512vnni (SK_BF16 and __AVX512VNNI__); the other builds get an
 * empty translation unit, and cpu_i8 binds the kernel only where /proc/cpuinfo lists avx512_vnni. */
#if SK_BF16 && defined(__AVX512VNNI__)
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sk_isa.h"

V SK_EXPORT(act_vec)(V v, int act); /* serve_kernels.c's v_act */

#define IW 32     /* columns per panel: two vectors of 16 int32 accumulators */
#define MRI 12    /* rows per block */
#define ISUPER 512               /* rows quantised together (a lane's share of a batch of 8 x 128) */
#define IGROUP_BYTES (384 * 1024) /* panels taken together: every row block sweeps them while they sit in L2 */
#define I8_ROWS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)

/* u[0, kp) = the row x[0, k) quantised (module docstring), zeros past k; returns its scale, *zero its zero point. */
static float quantize_row(const float *x, long long k, uint8_t *u, long long kp, int32_t *zero) {
    V lo = vzero(), hi = vzero();
    long long i = 0;
    for (; i + VL <= k; i += VL) {
        V v = vload(x + i);
        lo = vmin(lo, v), hi = vmax(hi, v);
    }
    if (i < k) {
        V v = vload_m(x + i, vmask((int)(k - i))); /* masked lanes are 0, inside the widened range anyway */
        lo = vmin(lo, v), hi = vmax(hi, v);
    }
    float mn = _mm512_reduce_min_ps(lo), mx = _mm512_reduce_max_ps(hi);
    float s = (mx - mn) / 255.0f;
    if (!(s > 0.0f)) /* a row of zeros (or NaN: its products are garbage as eager's are NaN, and the check sees it) */
        s = 1.0f;
    float zf = nearbyintf(-mn / s);
    int32_t z = zf < 0.0f ? 0 : zf > 255.0f ? 255 : (int32_t)zf;
    V inv = vset1(1.0f / s);
    __m512i vz = _mm512_set1_epi32(z), v0 = _mm512_setzero_si512(), v255 = _mm512_set1_epi32(255);
    for (i = 0; i < k; i += VL) {
        int n = (int)(k - i < VL ? k - i : VL);
        __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(vmul(vload_m(x + i, vmask(n)), inv)), vz);
        q = _mm512_min_epi32(_mm512_max_epi32(q, v0), v255);
        _mm_mask_storeu_epi8(u + i, (__mmask16)vmask(n), _mm512_cvtepi32_epi8(q));
    }
    memset(u + k, 0, (size_t)(kp - k));
    *zero = z;
    return s;
}

#define I8_DECL(j) __m512i c##j##0 = _mm512_setzero_si512(), c##j##1 = _mm512_setzero_si512();
#define I8_DOT(j) \
    if ((j) < R) { \
        int32_t aw; \
        memcpy(&aw, u + (j) * kp + 4 * g, 4); \
        __m512i a = _mm512_set1_epi32(aw); \
        c##j##0 = _mm512_dpbusd_epi32(c##j##0, a, b0); \
        c##j##1 = _mm512_dpbusd_epi32(c##j##1, a, b1); \
    }
#define I8_STORE(j) if ((j) < R) { acc[j][0] = c##j##0; acc[j][1] = c##j##1; }

/* acc[j] = u[j] . panel for R (1..MRI, compile-time after inlining) rows of kp bytes. */
static inline __attribute__((always_inline)) void i8_rows(const int R, const uint8_t *u, long long kp,
                                                          const int8_t *panel, __m512i acc[MRI][2]) {
    I8_ROWS(I8_DECL)
    for (long long g = 0; g < kp / 4; g++) {
        __m512i b0 = _mm512_loadu_si512(panel + g * 4 * IW), b1 = _mm512_loadu_si512(panel + g * 4 * IW + 64);
        I8_ROWS(I8_DOT)
    }
    I8_ROWS(I8_STORE)
}

typedef void (*I8Rows)(const uint8_t *, long long, const int8_t *, __m512i (*)[2]);
#define I8_ENTRY(j) static void i8_rows_##j(const uint8_t *u, long long kp, const int8_t *panel, __m512i acc[MRI][2]) { \
        i8_rows((j) + 1, u, kp, panel, acc); }
I8_ROWS(I8_ENTRY)
#define I8_NAME(j) i8_rows_##j,
static const I8Rows I8_KERNELS[MRI] = {I8_ROWS(I8_NAME)};

/* The epilogue of one block of rows x one panel's columns [p0, p0 + ncols): acc holds row j's IW int32 sums at
 * acc + j * IW (the vector path's registers stored, or sk_amx_i8.c's accumulator tiles); exported for that file, so
 * both paths share one epilogue and give the same floats (sk_i8_epilogue, below: an exported name is not inlined
 * under -fPIC, so the vector path calls the static one). */
static void i8_epilogue(const int32_t *acc, int rows, int ncols, const float *srow, const int32_t *zrow,
                        const float *scale, const int32_t *colsum, const float *bias, const float *res, long long ldr,
                        float *out, long long ldo, int act) {
    for (int h = 0; h < 2; h++) {
        int nh = ncols - h * VL;
        if (nh <= 0)
            break;
        VMask mk = vmask(nh);
        V sc = vload(scale + h * VL), b = bias ? vload_m(bias + h * VL, mk) : vzero();
        __m512i cs = _mm512_loadu_si512(colsum + h * VL);
        for (int j = 0; j < rows; j++) {
            __m512i a = _mm512_loadu_si512(acc + j * IW + h * VL);
            __m512i t = _mm512_sub_epi32(a, _mm512_mullo_epi32(_mm512_set1_epi32(zrow[j]), cs));
            V v = vfma(_mm512_cvtepi32_ps(t), vmul(vset1(srow[j]), sc), b);
            if (res)
                v = vadd(v, vload_m(res + j * ldr + h * VL, mk));
            if (act)
                v = SK_EXPORT(act_vec)(v, act);
            vstore_m(out + j * ldo + h * VL, mk, v);
        }
    }
}

void sk_i8_epilogue(const int32_t *acc, int rows, int ncols, const float *srow, const int32_t *zrow,
                    const float *scale, const int32_t *colsum, const float *bias, const float *res, long long ldr,
                    float *out, long long ldo, int act) {
    i8_epilogue(acc, rows, ncols, srow, zrow, scale, colsum, bias, res, ldr, out, ldo, act);
}

/* Row i of the span r0..r1 of x (m, k), rows lda apart: u8 quantised (s[i], z[i]) into u (ISUPER rows of kp). */
int SK_EXPORT(i8_quantize_rows)(const float *x, long long lda, long long k, uint8_t *u, long long kp, float *s,
                                int32_t *z, long long r0, long long r1) {
    if (k <= 0 || kp < k || lda < k || r0 < 0 || r1 < r0)
        return -1;
    for (long long r = r0; r < r1; r++)
        s[r - r0] = quantize_row(x + r * lda, k, u + (r - r0) * kp, kp, z + (r - r0));
    return 0;
}

/* out[r] = act(dequant(u8(x[r]) . q) + bias + res[r]) for r0 <= r < r1. x rows lda apart (k floats each); q the
 * packed panels of n columns with kp = k rounded up to 4; scale, colsum padded to the panels; bias (n) or NULL;
 * res rows ldr apart or NULL; out rows ldo apart. Returns 0, -1 for bad arguments, -2 out of memory. */
#if SK_AMX /* sk_amx_i8.c's sk_gemm_i8 runs on tiles from SK_AMX_MIN_ROWS rows and calls this one below them */
#define I8_GEMM sk_gemm_i8_dp
#else
#define I8_GEMM SK_EXPORT(gemm_i8)
#endif
int I8_GEMM(const float *x, long long lda, long long k, const int8_t *q, long long n, const float *scale,
                       const int32_t *colsum, const float *bias, const float *res, long long ldr, float *out,
                       long long ldo, int act, long long r0, long long r1) {
    if (k <= 0 || n <= 0 || lda < k || ldo < n || r0 < 0 || r1 < r0 || act < 0)
        return -1;
    long long kp = (k + 3) / 4 * 4, npanels = (n + IW - 1) / IW;
    long long span = r1 - r0 < ISUPER ? r1 - r0 : ISUPER;
    uint8_t *u = aligned_alloc(64, (size_t)((span * kp + 63) / 64 * 64 + 64));
    float *srow = malloc(sizeof(float) * (size_t)(span + 1));
    int32_t *zrow = malloc(sizeof(int32_t) * (size_t)(span + 1));
    if (!u || !srow || !zrow) {
        free(u), free(srow), free(zrow);
        return -2;
    }
    long long group = IGROUP_BYTES / (kp * IW);
    group = group < 1 ? 1 : group;
    __m512i acc[MRI][2];
    for (long long m0 = r0; m0 < r1; m0 += ISUPER) {
        long long rows = r1 - m0 < ISUPER ? r1 - m0 : ISUPER;
        SK_EXPORT(i8_quantize_rows)(x, lda, k, u, kp, srow, zrow, m0, m0 + rows);
        long long blocks = (rows + MRI - 1) / MRI, rb = (rows + blocks - 1) / blocks; /* even blocks, as sk_gemm */
        /* a group of panels is read from memory once; each row block's u8 rows stay in L1 across its panels */
        for (long long p0 = 0; p0 < npanels; p0 += group) {
            long long p1 = p0 + group < npanels ? p0 + group : npanels;
            for (long long b = 0; b < rows; b += rb) {
                int mr = (int)(rows - b < rb ? rows - b : rb);
                for (long long p = p0; p < p1; p++) {
                    int ncols = (int)(n - p * IW < IW ? n - p * IW : IW);
                    I8_KERNELS[mr - 1](u + b * kp, kp, q + p * kp * IW, acc);
                    const float *rb_res = res ? res + (m0 + b) * ldr + p * IW : NULL;
                    i8_epilogue((const int32_t *)acc, mr, ncols, srow + b, zrow + b, scale + p * IW,
                                colsum + p * IW, bias ? bias + p * IW : NULL, rb_res, ldr,
                                out + (m0 + b) * ldo + p * IW, ldo, act);
                }
            }
        }
    }
    free(u), free(srow), free(zrow);
    return 0;
}

long long SK_EXPORT(i8_width)(void) { return IW; }
#endif /* SK_BF16 && __AVX512VNNI__ */
