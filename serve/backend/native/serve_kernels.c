/* serve's native CPU kernels: implicit-GEMM convolution (NHWC), GEMM on packed weights and depthwise
 * convolution, each with a fused epilogue out = act(acc + bias + residual). Plain C plus intrinsics, no Python
 * API; serve/backend/cpu_native.py loads it with ctypes and picks the build that the CPU runs.
 *
 * Compiled three times from this one file: SK_ISA=512 (AVX-512F/DQ/BW/VL + FMA: 12x32 microkernel, 24 zmm
 * accumulators), SK_ISA=256 (AVX2 + FMA: 6x16 microkernel, 12 ymm accumulators), and SK_ISA=512 SK_BF16=1
 * (+ AVX512-BF16: everything of the 512 build, plus the bf16 GEMM / convolution at the end of the file); the AMX
 * build (SK_AMX=1, with sk_amx.c) is the last with its bf16 products renamed *_dp, sk_amx.c's tile path in front.
 *
 * Packed weight: column panels NR wide (2 vectors), K-major inside a panel, N zero-padded to a panel multiple:
 *   packed[panel][k][j] = w[k][panel * NR + j].
 * Convolution K is ordered (kh, kw, ic), so one tap's input channels are contiguous in an NHWC row, and a
 * block of MR output pixels reads its A operand through MR row pointers per tap: a tap in the padding points at
 * a zero row, so the inner loop has no bounds checks. GEMM is the same kernel with one tap.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sk_isa.h"

#define NR (2 * VL)
#define SUPER 8 /* microblocks of MR pixels sharing one set of tap pointers */

enum { ACT_NONE, ACT_RELU, ACT_RELU6, ACT_GELU, ACT_GELU_TANH, ACT_SILU, ACT_HARDSWISH, ACT_SIGMOID };

/* ---------------------------------------------------------------- vector math (float32, a few ulp) */

/* erf(x): odd rational x P(x^2) / Q(x^2) on [-4, 4] (|erf| rounds to 1 beyond), max error ~1e-7. */
static inline V v_erf(V x) {
    x = vmin(vmax(x, vset1(-4.0f)), vset1(4.0f));
    V x2 = vmul(x, x);
    V p = vset1(-2.72614225801306e-10f);
    p = vfma(p, x2, vset1(2.77068142495902e-08f));
    p = vfma(p, x2, vset1(-2.10102402082508e-06f));
    p = vfma(p, x2, vset1(-5.69250639462346e-05f));
    p = vfma(p, x2, vset1(-7.34990630326855e-04f));
    p = vfma(p, x2, vset1(-2.95459980854025e-03f));
    p = vfma(p, x2, vset1(-1.60960333262415e-02f));
    V q = vset1(-1.45660718464996e-05f);
    q = vfma(q, x2, vset1(-2.13374055278905e-04f));
    q = vfma(q, x2, vset1(-1.68282697438203e-03f));
    q = vfma(q, x2, vset1(-7.37332916720468e-03f));
    q = vfma(q, x2, vset1(-1.42647390514189e-02f));
    return vdiv(vmul(x, p), q);
}

static inline V v_act(V v, int act) {
    switch (act) {
    case ACT_RELU:
        return vmax(v, vzero());
    case ACT_RELU6:
        return vmin(vmax(v, vzero()), vset1(6.0f));
    case ACT_GELU:
        return vmul(vmul(vset1(0.5f), v), vadd(vset1(1.0f), v_erf(vmul(v, vset1(0.70710678118654752f)))));
    case ACT_GELU_TANH: {
        V u = vmul(vset1(0.7978845608028654f), vfma(vmul(vset1(0.044715f), vmul(v, v)), v, v));
        V t = vsub(vset1(1.0f), vdiv(vset1(2.0f), vadd(v_exp(vadd(u, u)), vset1(1.0f)))); /* tanh(u) */
        return vmul(vmul(vset1(0.5f), v), vadd(vset1(1.0f), t));
    }
    case ACT_SILU:
        return vdiv(v, vadd(vset1(1.0f), v_exp(vsub(vzero(), v))));
    case ACT_HARDSWISH:
        return vdiv(vmul(v, vmin(vmax(vadd(v, vset1(3.0f)), vzero()), vset1(6.0f))), vset1(6.0f));
    case ACT_SIGMOID:
        return vdiv(vset1(1.0f), vadd(vset1(1.0f), v_exp(vsub(vzero(), v))));
    default:
        return v;
    }
}

/* v_act for the other sources of this library (sk_i8.c's int8 GEMM epilogue): not exported from the library. */
__attribute__((visibility("hidden"))) V SK_EXPORT(act_vec)(V v, int act) { return v_act(v, act); }

/* out[j] = act(tile[j] + bias + res[j]) for the rows j < mr and the columns < ncols of one NR-wide tile. */
static void epilogue(const float *tile, int mr, int ncols, const float *bias, const float *res, long long ldr,
                     float *out, long long ldo, int act) {
    for (int h = 0; h < 2; h++) {
        int n = ncols - h * VL;
        if (n <= 0)
            break;
        VMask m = vmask(n);
        V b = bias ? vload_m(bias + h * VL, m) : vzero();
        for (int j = 0; j < mr; j++) {
            V v = vadd(vload(tile + j * NR + h * VL), b);
            if (res)
                v = vadd(v, vload_m(res + j * ldr + h * VL, m));
            v = v_act(v, act);
            if (n >= VL)
                vstore(out + j * ldo + h * VL, v);
            else
                vstore_m(out + j * ldo + h * VL, m, v);
        }
    }
}

/* ---------------------------------------------------------------- the microkernel */

/* The microkernels are written once for R rows, R a compile-time constant (1..MR) after inlining: each row's
 * statements sit behind `(j) < R`, so a block of fewer rows (a decode step's 1..16) costs its own rows' FMAs,
 * not MR rows' (the 12-row kernel on a one-row GEMV did 12x the arithmetic it needed). */
#define FMA_ROW(j) \
    if ((j) < R) { \
        c##j##0 = vfma(vset1(a##j[k]), b0, c##j##0); \
        c##j##1 = vfma(vset1(a##j[k]), b1, c##j##1); \
    }
#define DECL_ROW(j) V c##j##0 = vzero(), c##j##1 = vzero();
#define STORE_ROW(j) if ((j) < R) { vstore(tile + (j) * NR, c##j##0); vstore(tile + (j) * NR + VL, c##j##1); }
#if MR == 12
#define ALL_ROWS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
#else
#define ALL_ROWS(M) M(0) M(1) M(2) M(3) M(4) M(5)
#endif
#define PREFETCH_ROW(j) \
    if ((j) < mr) { \
        if (res) \
            _mm_prefetch((const char *)(res + (j) * ldr), _MM_HINT_T0); \
        _mm_prefetch((const char *)(out + (j) * ldo), _MM_HINT_T0); \
    }
#define EPILOGUE_ROW(j) if ((j) < R) { \
    V v0 = vadd(c##j##0, bb0), v1 = vadd(c##j##1, bb1); \
    if (res) { \
        v0 = vadd(v0, vload(res + (j) * ldr)); \
        v1 = vadd(v1, vload(res + (j) * ldr + VL)); \
    } \
    vstore(out + (j) * ldo, v_act(v0, act)); \
    vstore(out + (j) * ldo + VL, v_act(v1, act)); }
/* The tile's outputs: a whole tile takes its epilogue straight from the accumulators (no pass through memory,
 * which is most of the cost when K is small); an edge tile goes through `tile` and the masked epilogue. */
#define FINISH_TILE \
    if (ncols == NR) { \
        V bb0 = bias ? vload(bias) : vzero(), bb1 = bias ? vload(bias + VL) : vzero(); \
        ALL_ROWS(EPILOGUE_ROW) \
    } else { \
        float tile[MR * NR] __attribute__((aligned(64))); \
        ALL_ROWS(STORE_ROW) \
        epilogue(tile, mr, ncols, bias, res, ldr, out, ldo, act); \
    }

/* Where one MR x NR tile writes: rows j < mr, columns < ncols of out (row stride ldo), adding res (stride ldr).
 * pf, when set, is weight the tile prefetches into L2 as it goes, as many bytes per k step as it reads (the next
 * panel group's, so that a weight streamed from memory arrives while the last row block computes). */
typedef struct {
    int mr, ncols, act;
    const float *bias, *res;
    long long ldr, ldo;
    float *out;
    const void *pf;
} Tile;

/* Prefetch the NR * 4 bytes at pf into L2 (AVX-512: two lines, AVX2: one); -DSK_NO_PF builds without (A/B). */
#ifdef SK_NO_PF
#define PREFETCH_STEP(pf)
#else
#define PREFETCH_STEP(pf) \
    _mm_prefetch((pf), _MM_HINT_T1); \
    if (NR * 4 > 64) \
        _mm_prefetch((pf) + 64, _MM_HINT_T1); \
    (pf) += NR * 4;
#endif

/* out = act(sum over taps t and k < kc of ptrs[t][j][k] * b[t * kc + k][:] + bias + res) for one tile of R =
 * tl->mr rows. The tile's residual and output lines are prefetched first: they arrive while the products run. */
static inline __attribute__((always_inline)) void ukernel_rows(const int R, int ntaps, const float *const *ptrs,
                                                               long long kc, const float *b, const Tile *tl) {
    const int mr = R, ncols = tl->ncols, act = tl->act;
    const float *bias = tl->bias, *res = tl->res;
    const long long ldr = tl->ldr, ldo = tl->ldo;
    float *out = tl->out;
    const char *pf = tl->pf ? (const char *)tl->pf : (const char *)b;
    ALL_ROWS(PREFETCH_ROW)
    ALL_ROWS(DECL_ROW)
    for (int t = 0; t < ntaps; t++, ptrs += MR) {
        const float *a0 = ptrs[0], *a1 = ptrs[1], *a2 = ptrs[2], *a3 = ptrs[3], *a4 = ptrs[4], *a5 = ptrs[5];
#if MR == 12
        const float *a6 = ptrs[6], *a7 = ptrs[7], *a8 = ptrs[8], *a9 = ptrs[9], *a10 = ptrs[10], *a11 = ptrs[11];
#endif
        for (long long k = 0; k < kc; k++, b += NR) {
            PREFETCH_STEP(pf)
            V b0 = vload(b), b1 = vload(b + VL);
            ALL_ROWS(FMA_ROW)
        }
    }
    FINISH_TILE
}

/* ukernel_R for R = 1..MR, and `ukernel`, which runs the one for the tile's rows. */
typedef void (*UKernel)(int, const float *const *, long long, const float *, const Tile *);
#define DEF_UKERNEL(r) \
    static void ukernel_##r(int ntaps, const float *const *ptrs, long long kc, const float *b, const Tile *tl) { \
        ukernel_rows((r) + 1, ntaps, ptrs, kc, b, tl); \
    }
ALL_ROWS(DEF_UKERNEL)
#define UKERNEL_ENTRY(r) ukernel_##r,
static const UKernel UKERNELS[MR] = {ALL_ROWS(UKERNEL_ENTRY)};

static void ukernel(int ntaps, const float *const *ptrs, long long kc, const float *b, const Tile *tl) {
    UKERNELS[tl->mr - 1](ntaps, ptrs, kc, b, tl);
}

/* Panels of the packed weight taken together, so that their weights (ntaps * kc * NR floats each) stay in the
 * L2 cache while every row block of a super block runs over them: when the whole weight fits, each row block
 * sweeps all panels (its inputs stay in L1 and its output rows are written whole); a big weight goes one panel
 * at a time. */
#define PANEL_GROUP_BYTES (256 * 1024)
static long long panel_group(long long k, long long npanels) {
    long long g = PANEL_GROUP_BYTES / (k * NR * (long long)sizeof(float));
    return g < 1 ? 1 : g > npanels ? npanels : g;
}

/* Runs the panels over `nrows` rows in blocks of rb <= MR, whose tap pointers are in ptrs[block][tap][MR]; row r
 * of the block writes out + r * ldo (and reads res + r * ldr). */
static void run_rows_rb(long long nrows, long long rb, int ntaps, const float *const *ptrs, long long kc,
                        const float *wp, long long n, const float *bias, const float *res, long long ldr, float *out,
                        long long ldo, int act) {
    long long npanels = (n + NR - 1) / NR, k = (long long)ntaps * kc, group = panel_group(k, npanels);
    for (long long p0 = 0; p0 < npanels; p0 += group) {
        long long p1 = p0 + group < npanels ? p0 + group : npanels;
        for (long long r = 0; r < nrows; r += rb) {
            for (long long p = p0; p < p1; p++) {
                const float *next = r + rb >= nrows && p + group < npanels ? wp + (p + group) * k * NR : NULL;
                Tile tl = {(int)(nrows - r < rb ? nrows - r : rb), (int)(n - p * NR < NR ? n - p * NR : NR), act,
                           bias ? bias + p * NR : NULL, res ? res + r * ldr + p * NR : NULL, ldr, ldo,
                           out + r * ldo + p * NR, next};
                ukernel(ntaps, ptrs + (r / rb) * ntaps * MR, kc, wp + p * k * NR, &tl);
            }
        }
    }
}

static void run_rows(long long nrows, int ntaps, const float *const *ptrs, long long kc, const float *wp,
                     long long n, const float *bias, const float *res, float *out, int act) {
    run_rows_rb(nrows, MR, ntaps, ptrs, kc, wp, n, bias, res, n, out, n, act);
}

/* Rows per block for `rows` rows: as even as MR allows (16 rows are two blocks of 8, not 12 + 4), so every block
 * runs a kernel of about the same efficiency. */
static long long block_rows(long long rows) {
    long long blocks = (rows + MR - 1) / MR;
    return (rows + blocks - 1) / blocks;
}

static const float zero_row[4096];

/* ---------------------------------------------------------------- exported entry points */

int SK_EXPORT(mr)(void) { return MR; }
int SK_EXPORT(nr)(void) { return NR; }

/* out[r] = act(a[r] @ W + bias + res[r]) for r0 <= r < r1; a, res and out have row strides lda, ldr and ldo (so
 * that lanes splitting N write their columns of one output, reading their columns of one residual). */
int SK_EXPORT(gemm)(const float *a, long long lda, long long k, const float *wp, long long n, const float *bias,
                    const float *res, long long ldr, float *out, long long ldo, int act, long long r0, long long r1) {
    const float *ptrs[SUPER * MR];
    for (long long m0 = r0; m0 < r1; m0 += SUPER * MR) {
        long long rows = r1 - m0 < SUPER * MR ? r1 - m0 : SUPER * MR, rb = block_rows(rows);
        for (long long i = 0; i < SUPER * MR; i++) /* block i / MR holds rows (i / MR) * rb + i % MR, i % MR < rb */
            ptrs[i] = a + (m0 + ((i / MR) * rb + i % MR < rows && i % MR < rb ? (i / MR) * rb + i % MR : 0)) * lda;
        run_rows_rb(rows, rb, 1, ptrs, k, wp, n, bias, res ? res + m0 * ldr : NULL, ldr, out + m0 * ldo, ldo, act);
    }
    return 0;
}

/* NHWC convolution (groups = 1) of the output pixels p0 <= p < p1 of the flattened (nb, oh, ow). */
int SK_EXPORT(conv2d)(const float *x, long long nb, long long h, long long w, long long c, const float *wp,
                      long long oc, long long kh, long long kw, long long sh, long long sw, long long pt,
                      long long pl, long long dh, long long dw, long long oh, long long ow, const float *bias,
                      const float *res, float *out, int act, long long p0, long long p1) {
    (void)nb;
    int ntaps = (int)(kh * kw);
    const float *zeros = zero_row;
    float *zbuf = NULL;
    if (c > (long long)(sizeof(zero_row) / sizeof(float))) {
        zbuf = calloc((size_t)c, sizeof(float));
        if (!zbuf)
            return -1;
        zeros = zbuf;
    }
    const float **ptrs = malloc(sizeof(*ptrs) * (size_t)ntaps * SUPER * MR);
    if (!ptrs) {
        free(zbuf);
        return -1;
    }
    for (long long m0 = p0; m0 < p1; m0 += SUPER * MR) {
        long long rows = p1 - m0 < SUPER * MR ? p1 - m0 : SUPER * MR;
        long long padded = (rows + MR - 1) / MR * MR;
        for (long long i = 0; i < padded; i++) {
            long long pix = m0 + (i < rows ? i : i - i % MR);
            long long ox = pix % ow, oy = (pix / ow) % oh, b = pix / (ow * oh);
            const float **dst = ptrs + (i / MR) * ntaps * MR + i % MR;
            for (long long ky = 0; ky < kh; ky++) {
                long long iy = oy * sh - pt + ky * dh;
                for (long long kx = 0; kx < kw; kx++) {
                    long long ix = ox * sw - pl + kx * dw;
                    int inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
                    dst[(ky * kw + kx) * MR] = inside ? x + ((b * h + iy) * w + ix) * c : zeros;
                }
            }
        }
        run_rows(rows, ntaps, ptrs, c, wp, oc, bias, res ? res + m0 * oc : NULL, out + m0 * oc, act);
    }
    free(ptrs);
    free(zbuf);
    return 0;
}

/* Depthwise NHWC convolution (groups = channels, multiplier 1); wt is (kh * kw, c), tap-major. */
int SK_EXPORT(depthwise)(const float *x, long long nb, long long h, long long w, long long c, const float *wt,
                         long long kh, long long kw, long long sh, long long sw, long long pt, long long pl,
                         long long dh, long long dw, long long oh, long long ow, const float *bias,
                         const float *res, float *out, int act, long long p0, long long p1) {
    (void)nb;
    for (long long pix = p0; pix < p1; pix++) {
        long long ox = pix % ow, oy = (pix / ow) % oh, b = pix / (ow * oh);
        long long ky0 = 0, ky1 = kh, kx0 = 0, kx1 = kw;
        while (ky0 < kh && oy * sh - pt + ky0 * dh < 0) ky0++;
        while (ky1 > ky0 && oy * sh - pt + (ky1 - 1) * dh >= h) ky1--;
        while (kx0 < kw && ox * sw - pl + kx0 * dw < 0) kx0++;
        while (kx1 > kx0 && ox * sw - pl + (kx1 - 1) * dw >= w) kx1--;
        const float *xb = x + ((b * h + oy * sh - pt) * w + ox * sw - pl) * c;
        float *o = out + pix * c;
        const float *r = res ? res + pix * c : NULL;
        long long c0 = 0;
        for (; c0 + 4 * VL <= c; c0 += 4 * VL) {
            V s0 = vzero(), s1 = vzero(), s2 = vzero(), s3 = vzero();
            for (long long ky = ky0; ky < ky1; ky++)
                for (long long kx = kx0; kx < kx1; kx++) {
                    const float *xp = xb + (ky * dh * w + kx * dw) * c + c0, *wq = wt + (ky * kw + kx) * c + c0;
                    s0 = vfma(vload(xp), vload(wq), s0);
                    s1 = vfma(vload(xp + VL), vload(wq + VL), s1);
                    s2 = vfma(vload(xp + 2 * VL), vload(wq + 2 * VL), s2);
                    s3 = vfma(vload(xp + 3 * VL), vload(wq + 3 * VL), s3);
                }
            V s[4] = {s0, s1, s2, s3};
            for (int i = 0; i < 4; i++) {
                long long ci = c0 + i * VL;
                V v = s[i];
                if (bias)
                    v = vadd(v, vload(bias + ci));
                if (r)
                    v = vadd(v, vload(r + ci));
                vstore(o + ci, v_act(v, act));
            }
        }
        for (; c0 < c; c0 += VL) {
            VMask m = vmask((int)(c - c0));
            V s = vzero();
            for (long long ky = ky0; ky < ky1; ky++)
                for (long long kx = kx0; kx < kx1; kx++)
                    s = vfma(vload_m(xb + (ky * dh * w + kx * dw) * c + c0, m), vload_m(wt + (ky * kw + kx) * c + c0, m), s);
            if (bias)
                s = vadd(s, vload_m(bias + c0, m));
            if (r)
                s = vadd(s, vload_m(r + c0, m));
            vstore_m(o + c0, m, v_act(s, act));
        }
    }
    return 0;
}

/* Max pooling on NHWC (dilation 1, floor mode): the padding counts as -inf, so a window only takes the maximum
 * over its taps inside the image; a NaN in a window gives NaN, as in PyTorch; vectorized over the contiguous
 * channels, output pixels p0 <= p < p1. */
int SK_EXPORT(maxpool)(const float *x, long long nb, long long h, long long w, long long c, long long kh,
                       long long kw, long long sh, long long sw, long long pt, long long pl, long long oh,
                       long long ow, float *out, long long p0, long long p1) {
    (void)nb;
    const V ninf = vset1(-__builtin_inff());
    for (long long pix = p0; pix < p1; pix++) {
        long long ox = pix % ow, oy = (pix / ow) % oh, b = pix / (ow * oh);
        long long y0 = oy * sh - pt, x0 = ox * sw - pl;
        long long ky0 = y0 < 0 ? -y0 : 0, ky1 = y0 + kh > h ? h - y0 : kh;
        long long kx0 = x0 < 0 ? -x0 : 0, kx1 = x0 + kw > w ? w - x0 : kw;
        const float *xb = x + ((b * h + y0) * w + x0) * c;
        float *o = out + pix * c;
        long long c0 = 0;
        for (; c0 + 4 * VL <= c; c0 += 4 * VL) {
            V s0 = ninf, s1 = ninf, s2 = ninf, s3 = ninf;
            for (long long ky = ky0; ky < ky1; ky++)
                for (long long kx = kx0; kx < kx1; kx++) {
                    const float *xp = xb + (ky * w + kx) * c + c0;
                    s0 = vmax_nan(s0, vload(xp));
                    s1 = vmax_nan(s1, vload(xp + VL));
                    s2 = vmax_nan(s2, vload(xp + 2 * VL));
                    s3 = vmax_nan(s3, vload(xp + 3 * VL));
                }
            vstore(o + c0, s0);
            vstore(o + c0 + VL, s1);
            vstore(o + c0 + 2 * VL, s2);
            vstore(o + c0 + 3 * VL, s3);
        }
        for (; c0 < c; c0 += VL) {
            int n = (int)(c - c0 < VL ? c - c0 : VL);
            VMask m = vmask(n);
            V s = ninf;
            for (long long ky = ky0; ky < ky1; ky++)
                for (long long kx = kx0; kx < kx1; kx++)
                    s = vmax_nan(s, vload_m(xb + (ky * w + kx) * c + c0, m)); /* masked-off lanes: never stored */
            if (n == VL)
                vstore(o + c0, s);
            else
                vstore_m(o + c0, m, s);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- Winograd F(m x m, 3x3), m = 2 or 4 */

/* 3x3 stride-1 convolution by Winograd's minimal filtering (Lavin & Gray 2015): each m x m block of outputs
 * ("tile") reads an a x a input patch d (a = m + 2), transformed to V = B^T d B; the weight was transformed once to
 * U = G g G^T (a * a matrices C x OC, packed in panels like any weight); then M[xi] = V[xi] @ U[xi] for the a * a
 * positions xi, which is a^2 / (9 m^2) of the direct convolution's multiplications (0.44 for F(2x2, 3x3), 0.25 for
 * F(4x4, 3x3)), and the outputs are Y = A^T M A plus the epilogue. Work goes by chunks of `tb` tiles whose
 * transformed inputs and products (a^2 x tb x C and a^2 x tb x OC floats) stay in cache: the input transform of
 * the chunk, its a^2 products through run_rows, then its output transform.
 * The 1-D transforms below act on a column (stride s) of vectors, each vector a run of channels. */
static inline void bt_1d(int m, const V *d, int s, V *o, int os) {
    if (m == 2) {
        V d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s];
        o[0] = vsub(d0, d2), o[os] = vadd(d1, d2), o[2 * os] = vsub(d2, d1), o[3 * os] = vsub(d1, d3);
        return;
    }
    V d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s];
    o[0] = vfma(vset1(4.0f), d0, vfma(vset1(-5.0f), d2, d4));
    o[os] = vfma(vset1(-4.0f), vadd(d1, d2), vadd(d3, d4));
    o[2 * os] = vfma(vset1(4.0f), vsub(d1, d2), vsub(d4, d3));
    o[3 * os] = vfma(vset1(-2.0f), vsub(d1, d3), vsub(d4, d2));
    o[4 * os] = vfma(vset1(2.0f), vsub(d1, d3), vsub(d4, d2));
    o[5 * os] = vfma(vset1(4.0f), d1, vfma(vset1(-5.0f), d3, d5));
}

static inline void at_1d(int m, const V *g, int s, V *o, int os) {
    if (m == 2) {
        V g0 = g[0], g1 = g[s], g2 = g[2 * s], g3 = g[3 * s];
        o[0] = vadd(vadd(g0, g1), g2), o[os] = vsub(vsub(g1, g2), g3);
        return;
    }
    V a = vadd(g[s], g[2 * s]), b = vsub(g[s], g[2 * s]), c = vadd(g[3 * s], g[4 * s]), e = vsub(g[3 * s], g[4 * s]);
    o[0] = vadd(vadd(g[0], a), c);
    o[os] = vfma(vset1(2.0f), e, b);
    o[2 * os] = vfma(vset1(4.0f), c, a);
    o[3 * os] = vadd(vfma(vset1(8.0f), e, b), g[5 * s]);
}

static void wino_input(int m, const float *x, long long h, long long w, long long c, long long pt, long long pl,
                       long long th, long long tw, long long t0, long long nt, long long tb, float *vb) {
    const int al = m + 2;
    for (long long i = 0; i < nt; i++) {
        long long t = t0 + i, b = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
        long long y0 = ty * m - pt, x0 = tx * m - pl;
        const float *rows[36];
        for (int r = 0; r < al; r++)
            for (int q = 0; q < al; q++) {
                long long iy = y0 + r, ix = x0 + q;
                rows[r * al + q] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? x + ((b * h + iy) * w + ix) * c : NULL;
            }
        for (long long c0 = 0; c0 < c; c0 += VL) {
            VMask mk = vmask((int)(c - c0 < VL ? c - c0 : VL));
            V d[36], u[36], v[6];
            for (int k = 0; k < al * al; k++)
                d[k] = rows[k] ? vload_m(rows[k] + c0, mk) : vzero();
            for (int q = 0; q < al; q++) /* B^T d: down each column */
                bt_1d(m, d + q, al, u + q, al);
            for (int r = 0; r < al; r++) { /* (B^T d) B: along each row */
                bt_1d(m, u + r * al, 1, v, 1);
                for (int q = 0; q < al; q++)
                    vstore_m(vb + ((r * al + q) * tb + i) * c + c0, mk, v[q]);
            }
        }
    }
}

static void wino_output(int m, const float *mb, long long oc, long long oh, long long ow, long long th,
                        long long tw, long long t0, long long nt, long long tb, const float *bias, const float *res,
                        float *out, int act) {
    const int al = m + 2;
    for (long long i = 0; i < nt; i++) {
        long long t = t0 + i, b = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
        long long oy = ty * m, ox = tx * m;
        for (long long c0 = 0; c0 < oc; c0 += VL) {
            VMask mk = vmask((int)(oc - c0 < VL ? oc - c0 : VL));
            V g[36], hh[24], y[4];
            for (int k = 0; k < al * al; k++)
                g[k] = vload_m(mb + (k * tb + i) * oc + c0, mk);
            for (int q = 0; q < al; q++) /* A^T M: down each column */
                at_1d(m, g + q, al, hh + q, al);
            V bb = bias ? vload_m(bias + c0, mk) : vzero();
            for (int r = 0; r < m; r++) { /* (A^T M) A: along each row */
                at_1d(m, hh + r * al, 1, y, 1);
                if (oy + r >= oh)
                    continue;
                for (int q = 0; q < m && ox + q < ow; q++) {
                    long long at = ((b * oh + oy + r) * ow + ox + q) * oc + c0;
                    V v = vadd(y[q], bb);
                    if (res)
                        v = vadd(v, vload_m(res + at, mk));
                    vstore_m(out + at, mk, v_act(v, act));
                }
            }
        }
    }
}

/* The tiles t0 <= t < t1 of the flattened (nb, ceil(oh / m), ceil(ow / m)); ut holds the (m + 2)^2 packed
 * matrices of U, each (panels, c, NR). out and res are NHWC (nb, oh, ow, oc). */
int SK_EXPORT(winograd)(const float *x, long long nb, long long h, long long w, long long c, const float *ut,
                        long long oc, long long pt, long long pl, long long oh, long long ow, const float *bias,
                        const float *res, float *out, int act, long long t0, long long t1, int m) {
    (void)nb;
    if (m != 2 && m != 4)
        return -2;
    const int np = (m + 2) * (m + 2);
    long long th = (oh + m - 1) / m, tw = (ow + m - 1) / m, wide = c > oc ? c : oc;
    long long tb = (1 << 20) / (np * wide) / MR * MR; /* np x tb x wide floats: ~4 MiB of inputs, as much of products */
    tb = tb < MR ? MR : tb > 16 * MR ? 16 * MR : tb;
    long long npanels = (oc + NR - 1) / NR;
    float *vb = malloc(sizeof(float) * (size_t)(np * tb * c)), *mb = malloc(sizeof(float) * (size_t)(np * tb * oc));
    const float **ptrs = malloc(sizeof(*ptrs) * (size_t)tb);
    if (!vb || !mb || !ptrs) {
        free(vb), free(mb), free(ptrs);
        return -1;
    }
    for (long long c0 = t0; c0 < t1; c0 += tb) {
        long long nt = t1 - c0 < tb ? t1 - c0 : tb;
        wino_input(m, x, h, w, c, pt, pl, th, tw, c0, nt, tb, vb);
        for (int xi = 0; xi < np; xi++) {
            long long padded = (nt + MR - 1) / MR * MR;
            for (long long i = 0; i < padded; i++)
                ptrs[i] = vb + (xi * tb + (i < nt ? i : i - i % MR)) * c;
            run_rows(nt, 1, ptrs, c, ut + xi * npanels * c * NR, oc, NULL, NULL, mb + xi * tb * oc, ACT_NONE);
        }
        wino_output(m, mb, oc, oh, ow, th, tw, c0, nt, tb, bias, res, out, act);
    }
    free(vb), free(mb), free(ptrs);
    return 0;
}

/* ---------------------------------------------------------------- attention */

static inline float hmax(V v) {
    float buf[VL], m = -__builtin_inff();
    vstore(buf, v);
    for (int i = 0; i < VL; i++)
        m = buf[i] > m ? buf[i] : m;
    return m;
}


/* p[s] = exp(x[s] - max) / sum for s < n, where x[s] = p[s] * scale + mask[s * ms] (ms 0: one value for the row,
 * 1: a row of values; mask NULL: none). A row whose x are all -inf is zeros when `safe`, NaN otherwise (PyTorch's
 * safe and plain softmax). The last n % VL columns go one at a time through lane 0. */
static void softmax_row(float *p, long long n, float scale, const float *mask, long long ms, int safe) {
    const float ninf = -__builtin_inff();
    V vs = vset1(scale), vmx = vset1(ninf);
    long long s = 0;
    for (; s + VL <= n; s += VL) {
        V x = vmul(vload(p + s), vs);
        if (mask)
            x = vadd(x, ms ? vload(mask + s) : vset1(mask[0]));
        vstore(p + s, x);
        vmx = vmax(vmx, x);
    }
    float mx = hmax(vmx);
    for (; s < n; s++) {
        p[s] = p[s] * scale + (mask ? mask[ms ? s : 0] : 0.0f);
        mx = p[s] > mx ? p[s] : mx;
    }
    if (mx == ninf) {
        float fill = safe ? 0.0f : __builtin_nanf("");
        for (s = 0; s < n; s++)
            p[s] = fill;
        return;
    }
    V vm = vset1(mx), vsum = vzero();
    for (s = 0; s + VL <= n; s += VL) {
        V e = v_exp(vsub(vload(p + s), vm));
        vstore(p + s, e);
        vsum = vadd(vsum, e);
    }
    float sum = hsum(vsum), lane[VL];
    for (; s < n; s++) {
        vstore(lane, v_exp(vset1(p[s] - mx)));
        p[s] = lane[0];
        sum += lane[0];
    }
    V inv = vset1(1.0f / sum);
    for (s = 0; s + VL <= n; s += VL)
        vstore(p + s, vmul(vload(p + s), inv));
    for (; s < n; s++)
        p[s] *= 1.0f / sum;
}

/* out[b, h] = softmax(q[b, h] @ k[b, h]^T * scale + mask[b, h]) @ v[b, h] for the pairs i0 <= b * nh + h < i1.
 * Per pair q is (L, E), k (S, E), v (S, Ev) and out (L, Ev), each row contiguous; st holds the strides in floats:
 * st[0..2] q (batch, head, row), st[3..5] k, st[6..8] v, st[9..11] out, st[12..15] the additive float mask
 * (batch, head, row, col; 0 where broadcast, col stride 0 or 1). K^T and V are packed into panels once per pair;
 * MR query rows at a time go through the scores (one row block, in L1), their softmax, and the product with V,
 * written straight into out: the (L, S) scores never exist whole. */
int SK_EXPORT(attention)(const float *q, const float *k, const float *v, float *out, const float *mask,
                         const long long *st, long long nh, long long L, long long S, long long E, long long Ev,
                         float scale, int safe, long long i0, long long i1) {
    long long sp = (S + NR - 1) / NR * NR, evp = (Ev + NR - 1) / NR;
    float *kp = malloc(sizeof(float) * (size_t)(sp * E)), *vp = malloc(sizeof(float) * (size_t)(evp * NR * S));
    float *sc = malloc(sizeof(float) * (size_t)(MR * sp));
    if (!kp || !vp || !sc) {
        free(kp), free(vp), free(sc);
        return -1;
    }
    const float *ptrs[MR];
    for (long long i = i0; i < i1; i++) {
        long long b = i / nh, h = i % nh;
        const float *qb = q + b * st[0] + h * st[1], *kb = k + b * st[3] + h * st[4], *vb = v + b * st[6] + h * st[7];
        float *ob = out + b * st[9] + h * st[10];
        const float *mb = mask ? mask + b * st[12] + h * st[13] : NULL;
        memset(kp, 0, sizeof(float) * (size_t)(sp * E)); /* kp[panel][e][j] = k[panel * NR + j][e] */
        for (long long s = 0; s < S; s++)
            for (long long e = 0; e < E; e++)
                kp[(s / NR) * E * NR + e * NR + s % NR] = kb[s * st[5] + e];
        memset(vp, 0, sizeof(float) * (size_t)(evp * NR * S)); /* vp[panel][s][j] = v[s][panel * NR + j] */
        for (long long s = 0; s < S; s++)
            for (long long p = 0; p < evp; p++) {
                long long n = Ev - p * NR < NR ? Ev - p * NR : NR;
                memcpy(vp + (p * S + s) * NR, vb + s * st[8] + p * NR, sizeof(float) * (size_t)n);
            }
        for (long long r0 = 0; r0 < L; r0 += MR) {
            int mr = (int)(L - r0 < MR ? L - r0 : MR);
            for (int j = 0; j < MR; j++)
                ptrs[j] = qb + (r0 + (j < mr ? j : 0)) * st[2];
            for (long long p = 0; p < sp / NR; p++) {
                Tile tl = {mr, NR, ACT_NONE, NULL, NULL, 0, sp, sc + p * NR};
                ukernel(1, ptrs, E, kp + p * E * NR, &tl);
            }
            for (int j = 0; j < mr; j++)
                softmax_row(sc + j * sp, S, scale, mb ? mb + (r0 + j) * st[14] : NULL, st[15], safe);
            for (int j = 0; j < MR; j++)
                ptrs[j] = sc + (j < mr ? j : 0) * sp;
            for (long long p = 0; p < evp; p++) {
                Tile tl = {mr, (int)(Ev - p * NR < NR ? Ev - p * NR : NR), ACT_NONE, NULL, NULL, 0, st[11],
                           ob + r0 * st[11] + p * NR};
                ukernel(1, ptrs, S, vp + p * S * NR, &tl);
            }
        }
    }
    free(kp), free(vp), free(sc);
    return 0;
}

/* ---------------------------------------------------------------- bfloat16 products (SK_BF16, AVX512-BF16)
 *
 * Packed bf16 weight: column panels of NR = 32, K padded to even (per tap, for convolutions), pairs (k, k + 1) of
 * each column interleaved, as vdpbf16ps reads them:
 *   packed[panel][k / 2][j][k % 2] = bf16(w[k][panel * NR + j]).
 * The fp32 left operand is rounded to bf16 (nearest even) on the fly: per block of rows for GEMM; for convolution
 * into a per-call NHWC buffer (channels padded to even) of the input rows the call's pixels read, each block of
 * SUPER * MR pixels converting the rows it reads first, so each input row is converted once and still hot in
 * cache when the block multiplies it. Products
 * accumulate in fp32 (vdpbf16ps); the epilogue is the fp32 one. */
#if SK_BF16
#if SK_ISA != 512
#error "SK_BF16 needs SK_ISA=512"
#endif
typedef uint16_t bf16;

/* dst[i] = bf16(src[i]) for i < n, zeros for n <= i < npad. */
static void to_bf16(const float *src, long long n, bf16 *dst, long long npad) {
    long long i = 0;
    for (; i + 32 <= n; i += 32)
        _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(vload(src + i + 16), vload(src + i)));
    for (; i < n; i += 16) {
        VMask m = vmask((int)(n - i));
        _mm256_mask_storeu_epi16(dst + i, m, (__m256i)_mm512_cvtneps_pbh(vload_m(src + i, m)));
    }
    for (i = n; i < npad; i++)
        dst[i] = 0;
}

static inline __m512 bcast_pair(const bf16 *p) {
    int32_t v;
    memcpy(&v, p, sizeof(v));
    return _mm512_castsi512_ps(_mm512_set1_epi32(v));
}

#define DP_ROW(j) if ((j) < R) { \
    __m512bh aj = (__m512bh)bcast_pair(a##j + 2 * kp); \
    c##j##0 = _mm512_dpbf16_ps(c##j##0, aj, b0); \
    c##j##1 = _mm512_dpbf16_ps(c##j##1, aj, b1); }

/* out = act(sum over taps t and pairs kp < kcp of ptrs[t][j][2 kp : 2 kp + 2] . b[t * kcp + kp][:][:] + ...),
 * R = tl->mr rows as in ukernel_rows */
static inline __attribute__((always_inline)) void ukernel_bf16_rows(const int R, int ntaps, const bf16 *const *ptrs,
                                                                    long long kcp, const bf16 *b, const Tile *tl) {
    const int mr = R, ncols = tl->ncols, act = tl->act;
    const float *bias = tl->bias, *res = tl->res;
    const long long ldr = tl->ldr, ldo = tl->ldo;
    float *out = tl->out;
    const char *pf = tl->pf ? (const char *)tl->pf : (const char *)b;
    ALL_ROWS(PREFETCH_ROW)
    ALL_ROWS(DECL_ROW)
    for (int t = 0; t < ntaps; t++, ptrs += MR) {
        const bf16 *a0 = ptrs[0], *a1 = ptrs[1], *a2 = ptrs[2], *a3 = ptrs[3], *a4 = ptrs[4], *a5 = ptrs[5];
        const bf16 *a6 = ptrs[6], *a7 = ptrs[7], *a8 = ptrs[8], *a9 = ptrs[9], *a10 = ptrs[10], *a11 = ptrs[11];
        for (long long kp = 0; kp < kcp; kp++, b += 2 * NR) {
            PREFETCH_STEP(pf)
            __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + NR);
            DP_ROW(0) DP_ROW(1) DP_ROW(2) DP_ROW(3) DP_ROW(4) DP_ROW(5)
            DP_ROW(6) DP_ROW(7) DP_ROW(8) DP_ROW(9) DP_ROW(10) DP_ROW(11)
        }
    }
    FINISH_TILE
}

typedef void (*UKernelBf16)(int, const bf16 *const *, long long, const bf16 *, const Tile *);
#define DEF_UKERNEL_BF16(r) \
    static void ukernel_bf16_##r(int ntaps, const bf16 *const *ptrs, long long kcp, const bf16 *b, const Tile *tl) { \
        ukernel_bf16_rows((r) + 1, ntaps, ptrs, kcp, b, tl); \
    }
ALL_ROWS(DEF_UKERNEL_BF16)
#define UKERNEL_BF16_ENTRY(r) ukernel_bf16_##r,
static const UKernelBf16 UKERNELS_BF16[MR] = {ALL_ROWS(UKERNEL_BF16_ENTRY)};

static void ukernel_bf16(int ntaps, const bf16 *const *ptrs, long long kcp, const bf16 *b, const Tile *tl) {
    UKERNELS_BF16[tl->mr - 1](ntaps, ptrs, kcp, b, tl);
}

static void run_rows_bf16(long long nrows, long long rb, int ntaps, const bf16 *const *ptrs, long long kcp,
                          const bf16 *wp, long long n, const float *bias, const float *res, long long ldr, float *out,
                          long long ldo, int act) {
    long long npanels = (n + NR - 1) / NR, kp = (long long)ntaps * kcp, group = panel_group(kp, npanels);
    for (long long p0 = 0; p0 < npanels; p0 += group) {
        long long p1 = p0 + group < npanels ? p0 + group : npanels;
        for (long long r = 0; r < nrows; r += rb) {
            for (long long p = p0; p < p1; p++) {
                const bf16 *next = r + rb >= nrows && p + group < npanels ? wp + (p + group) * kp * 2 * NR : NULL;
                Tile tl = {(int)(nrows - r < rb ? nrows - r : rb), (int)(n - p * NR < NR ? n - p * NR : NR), act,
                           bias ? bias + p * NR : NULL, res ? res + r * ldr + p * NR : NULL, ldr, ldo,
                           out + r * ldo + p * NR, next};
                ukernel_bf16(ntaps, ptrs + (r / rb) * ntaps * MR, kcp, wp + p * kp * 2 * NR, &tl);
            }
        }
    }
}

int SK_EXPORT(bf16_nr)(void) { return NR; }

/* The AMX build (SK_AMX, sk_amx.c) exports the tile path under the names below and keeps these vdpbf16ps ones as
 * its fallback and self-check reference; it writes its accumulators through this file's epilogue. */
#if SK_AMX
#define SK_BF16_EXPORT(name) sk_##name##_dp
void sk_bf16_epilogue(const float *tile, int mr, int ncols, const float *bias, const float *res, long long ldr,
                      float *out, long long ldo, int act) {
    epilogue(tile, mr, ncols, bias, res, ldr, out, ldo, act);
}
#else
#define SK_BF16_EXPORT(name) SK_EXPORT(name)
#endif

/* gemm with a bf16-packed weight: rows of a are rounded to bf16 per block of SUPER * MR rows. */
int SK_BF16_EXPORT(gemm_bf16)(const float *a, long long lda, long long k, const bf16 *wp, long long n,
                              const float *bias, const float *res, long long ldr, float *out, long long ldo, int act,
                              long long r0, long long r1) {
    long long kpad = k + (k & 1);
    bf16 *buf = malloc(sizeof(bf16) * (size_t)(SUPER * MR * kpad));
    if (!buf)
        return -1;
    const bf16 *ptrs[SUPER * MR];
    for (long long m0 = r0; m0 < r1; m0 += SUPER * MR) {
        long long rows = r1 - m0 < SUPER * MR ? r1 - m0 : SUPER * MR;
        for (long long i = 0; i < rows; i++)
            to_bf16(a + (m0 + i) * lda, k, buf + i * kpad, kpad);
        long long rb = block_rows(rows);
        for (long long i = 0; i < SUPER * MR; i++) /* as in sk_gemm: block i / MR holds rb rows */
            ptrs[i] = buf + ((i / MR) * rb + i % MR < rows && i % MR < rb ? (i / MR) * rb + i % MR : 0) * kpad;
        run_rows_bf16(rows, rb, 1, ptrs, kpad / 2, wp, n, bias, res ? res + m0 * ldr : NULL, ldr, out + m0 * ldo,
                      ldo, act);
    }
    free(buf);
    return 0;
}

/* conv2d with a bf16-packed weight (channels padded to even per tap). */
int SK_BF16_EXPORT(conv2d_bf16)(const float *x, long long nb, long long h, long long w, long long c,
                                const bf16 *wp, long long oc, long long kh, long long kw, long long sh, long long sw,
                                long long pt, long long pl, long long dh, long long dw, long long oh, long long ow,
                                const float *bias, const float *res, float *out, int act, long long p0, long long p1) {
    (void)nb;
    int ntaps = (int)(kh * kw);
    long long cp = c + (c & 1);
    /* the flattened (n, h) input rows that pixels p0 .. p1 - 1 read */
    long long b0 = p0 / (oh * ow), oy0 = (p0 / ow) % oh, b1 = (p1 - 1) / (oh * ow), oy1 = ((p1 - 1) / ow) % oh;
    long long lo = oy0 * sh - pt, hi = oy1 * sh - pt + (kh - 1) * dh + 1;
    lo = b0 * h + (lo < 0 ? 0 : lo > h ? h : lo);
    hi = b1 * h + (hi < 0 ? 0 : hi > h ? h : hi);
    if (hi < lo)
        hi = lo;
    /* xb holds input rows lo .. hi - 1 (pixels of cp channels), then a zero pixel, then one fp32 row's bf16 */
    bf16 *xb = malloc(sizeof(bf16) * (size_t)((hi - lo) * w * cp + cp + w * c));
    const bf16 **ptrs = malloc(sizeof(*ptrs) * (size_t)ntaps * SUPER * MR);
    if (!xb || !ptrs) {
        free(xb);
        free(ptrs);
        return -1;
    }
    bf16 *zeros = xb + (hi - lo) * w * cp, *row = zeros + cp;
    memset(zeros, 0, sizeof(bf16) * (size_t)cp);
    long long done = lo; /* input rows lo .. done - 1 are converted: each block converts what it newly reads */
    for (long long m0 = p0; m0 < p1; m0 += SUPER * MR) {
        long long rows = p1 - m0 < SUPER * MR ? p1 - m0 : SUPER * MR;
        long long last = m0 + rows - 1, bl = last / (oh * ow), oyl = (last / ow) % oh;
        long long need = oyl * sh - pt + (kh - 1) * dh + 1;
        need = bl * h + (need < 0 ? 0 : need > h ? h : need);
        for (; done < need; done++) {
            bf16 *dst = xb + (done - lo) * w * cp;
            if (cp == c) {
                to_bf16(x + done * w * c, w * c, dst, w * c);
            } else {
                to_bf16(x + done * w * c, w * c, row, w * c);
                for (long long i = 0; i < w; i++, dst += cp) {
                    memcpy(dst, row + i * c, sizeof(bf16) * (size_t)c);
                    dst[c] = 0;
                }
            }
        }
        long long padded = (rows + MR - 1) / MR * MR;
        for (long long i = 0; i < padded; i++) {
            long long pix = m0 + (i < rows ? i : i - i % MR);
            long long ox = pix % ow, oy = (pix / ow) % oh, b = pix / (ow * oh);
            const bf16 **dst = ptrs + (i / MR) * ntaps * MR + i % MR;
            for (long long ky = 0; ky < kh; ky++) {
                long long iy = oy * sh - pt + ky * dh;
                for (long long kx = 0; kx < kw; kx++) {
                    long long ix = ox * sw - pl + kx * dw;
                    int inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
                    dst[(ky * kw + kx) * MR] = inside ? xb + ((b * h + iy - lo) * w + ix) * cp : zeros;
                }
            }
        }
        run_rows_bf16(rows, MR, ntaps, ptrs, cp / 2, wp, oc, bias, res ? res + m0 * oc : NULL, oc, out + m0 * oc, oc,
                      act);
    }
    free(ptrs);
    free(xb);
    return 0;
}

/* The attention's two products in bf16: sk_attention's arguments and loop, with q, k and v rounded to bf16 where
 * they enter the products and the softmax probabilities p rounded to bf16 before p v; fp32 accumulation, the scale,
 * mask and softmax in fp32 (softmax_row), fp32 out. Per pair, k^T and v are packed once in the weights' pairs layout
 * (kp[panel][e / 2][j][e % 2] = bf16(k[panel * NR + j][e]), vp[panel][s / 2][j][s % 2] = bf16(v[s][panel * NR + j]),
 * E and S padded to even with zeros), which is also the layout sk_amx.c's tiles read (sk_attention_bf16_pack). */
void SK_EXPORT(attention_bf16_pack)(const float *kb, const float *vb, const long long *st, long long S, long long E,
                                    long long Ev, bf16 *kp, bf16 *vp, bf16 *row) {
    long long ep = E + (E & 1), spd = S + (S & 1), sp = (S + NR - 1) / NR * NR, evp = (Ev + NR - 1) / NR;
    /* k: its rows as bf16 (row holds S x ep), then per panel and pair of e the 32 rows' (e, e + 1) as one int32
     * each, gathered into the panel's 128 contiguous bytes */
    for (long long s = 0; s < S; s++)
        to_bf16(kb + s * st[5], E, row + s * ep, ep);
    const int *pairs = (const int *)row;
    for (long long p = 0; p < sp / NR; p++)
        for (int half = 0; half < 2; half++) {
            long long s0 = p * NR + half * VL;
            __mmask16 live = vmask((int)(S - s0 < 0 ? 0 : S - s0));
            __m512i idx = _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32((int)s0),
                                                              _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                                                12, 13, 14, 15)),
                                             _mm512_set1_epi32((int)(ep / 2)));
            for (long long e2 = 0; e2 < ep / 2; e2++) {
                __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, pairs + e2, 4);
                _mm512_storeu_si512(kp + p * ep * NR + e2 * 2 * NR + half * 2 * VL, g);
            }
        }
    /* v: rows s and s + 1 rounded together (cvtne2ps: s's 16 values, then s + 1's) and interleaved into pairs */
    static const uint16_t order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i inter = _mm512_loadu_si512(order);
    for (long long s = 0; s < spd; s += 2) {
        const float *r0 = vb + s * st[8], *r1 = s + 1 < S ? vb + (s + 1) * st[8] : NULL;
        for (long long c = 0; c < evp * NR; c += VL) {
            VMask m = vmask((int)(Ev - c < 0 ? 0 : Ev - c));
            V a = vload_m(r0 + c, m), b = r1 ? vload_m(r1 + c, m) : vzero();
            __m512i both = (__m512i)_mm512_cvtne2ps_pbh(b, a);
            bf16 *dst = vp + (c / NR) * spd * NR + s * NR + (c % NR) * 2;
            _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(inter, both));
        }
    }
}

/* softmax_row for sk_amx.c's tile attention (not exported from the library) */
__attribute__((visibility("hidden"))) void SK_EXPORT(attention_softmax_row)(float *p, long long n, float scale,
                                                                         const float *mask, long long ms, int safe) {
    softmax_row(p, n, scale, mask, ms, safe);
}

int SK_BF16_EXPORT(attention_bf16)(const float *q, const float *k, const float *v, float *out, const float *mask,
                                   const long long *st, long long nh, long long L, long long S, long long E,
                                   long long Ev, float scale, int safe, long long i0, long long i1) {
    long long ep = E + (E & 1), spd = S + (S & 1), sp = (S + NR - 1) / NR * NR, evp = (Ev + NR - 1) / NR;
    long long rowlen = S * ep; /* sk_attention_bf16_pack's k rows as bf16 */
    bf16 *kp = malloc(sizeof(bf16) * (size_t)(sp * ep)), *vp = malloc(sizeof(bf16) * (size_t)(evp * NR * spd));
    bf16 *qb16 = malloc(sizeof(bf16) * (size_t)(MR * ep)), *pb = malloc(sizeof(bf16) * (size_t)(MR * spd));
    bf16 *row = malloc(sizeof(bf16) * (size_t)(rowlen + 32));
    float *sc = malloc(sizeof(float) * (size_t)(MR * sp));
    if (!kp || !vp || !qb16 || !pb || !row || !sc) {
        free(kp), free(vp), free(qb16), free(pb), free(row), free(sc);
        return -1;
    }
    const bf16 *ptrs[MR];
    for (long long i = i0; i < i1; i++) {
        long long b = i / nh, h = i % nh;
        const float *qb = q + b * st[0] + h * st[1];
        float *ob = out + b * st[9] + h * st[10];
        const float *mb = mask ? mask + b * st[12] + h * st[13] : NULL;
        SK_EXPORT(attention_bf16_pack)(k + b * st[3] + h * st[4], v + b * st[6] + h * st[7], st, S, E, Ev, kp, vp,
                                       row);
        for (long long r0 = 0; r0 < L; r0 += MR) {
            int mr = (int)(L - r0 < MR ? L - r0 : MR);
            for (int j = 0; j < mr; j++) /* q rows of this block as bf16, E padded to even */
                to_bf16(qb + (r0 + j) * st[2], E, qb16 + j * ep, ep);
            for (int j = 0; j < MR; j++)
                ptrs[j] = qb16 + (j < mr ? j : 0) * ep;
            for (long long p = 0; p < sp / NR; p++) {
                Tile tl = {mr, NR, ACT_NONE, NULL, NULL, 0, sp, sc + p * NR, NULL};
                ukernel_bf16(1, ptrs, ep / 2, kp + p * ep * NR, &tl);
            }
            for (int j = 0; j < mr; j++) {
                softmax_row(sc + j * sp, S, scale, mb ? mb + (r0 + j) * st[14] : NULL, st[15], safe);
                to_bf16(sc + j * sp, S, pb + j * spd, spd);
            }
            for (int j = 0; j < MR; j++)
                ptrs[j] = pb + (j < mr ? j : 0) * spd;
            for (long long p = 0; p < evp; p++) {
                Tile tl = {mr, (int)(Ev - p * NR < NR ? Ev - p * NR : NR), ACT_NONE, NULL, NULL, 0, st[11],
                           ob + r0 * st[11] + p * NR, NULL};
                ukernel_bf16(1, ptrs, spd / 2, vp + p * spd * NR, &tl);
            }
        }
    }
    free(kp), free(vp), free(qb16), free(pb), free(row), free(sc);
    return 0;
}
#endif /* SK_BF16 */

/* A trivial module init, so setuptools can build this file as an extension; Python never imports it. */
#if SK_AMX
/* sk_amx.c defines PyInit__sk_amx */
#elif SK_BF16
void *PyInit__sk_avx512bf16(void) { return 0; }
#elif SK_ISA == 512
void *PyInit__sk_avx512(void) { return 0; }
#else
void *PyInit__sk_avx2(void) { return 0; }
#endif
