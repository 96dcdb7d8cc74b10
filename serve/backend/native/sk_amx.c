/* The bf16 products on AMX tiles (SK_AMX=1, the _sk_amx build: the AVX512-BF16 flags plus -mamx-tile -mamx-bf16):
 * sk_gemm_bf16, sk_conv2d_bf16 and sk_attention_bf16 with the signatures, the packed weight and the fp32 epilogue of
 * serve_kernels.c's vdpbf16ps path, which this build keeps as sk_gemm_bf16_dp / sk_conv2d_bf16_dp /
 * sk_attention_bf16_dp (the fallback and the reference of the self-check). Decisions, and why:
 *
 * - The packed weight is already the B-tile layout: a panel of NR = 32 columns stores pairs (k, k + 1) of each
 *   column side by side, packed[panel][k / 2][j][k % 2], so 16 pairs x 16 columns is a 16-row x 64-byte tile at a
 *   row stride of 128 bytes (columns 16..31 start 64 bytes in), K = 32 per tile. No new packing.
 * - 2x2 blocking: tmm4-5 hold two A tiles (32 rows x 32 bf16), tmm6-7 the panel's two B tiles, tmm0-3 the four
 *   16x16 fp32 accumulators of a 32-row x 32-column output block; each K step is 4 loads and 4 TDPBF16PS (each
 *   16x16x32: 16 K cycles of the engine), so the loads (2 KB each from L1/L2) stay behind the products. A block of
 *   at most 16 rows uses one A tile and two accumulators.
 * - One tile shape for all eight tiles (16 rows x 64 bytes), configured once per call (palette 1) and released at
 *   the end: tails never reconfigure. Rows of A are rounded to bf16 into a contiguous buffer whose K is padded with
 *   zeros to a multiple of 32 and whose rows are padded with zero rows to a multiple of 16; a K tail that is not a
 *   whole B tile (pairs % 16) is copied per panel into a zero-padded 16 x 128-byte scratch tile, since reading the
 *   panel past its end would multiply the next panel's (or unmapped) bytes by the zeros of A (0 x Inf = NaN). N is
 *   padded to the panel at packing; the accumulators go through a 32 x 32 fp32 scratch to serve_kernels.c's
 *   epilogue, which writes only the live rows and columns (bias, residual, activation as the fp32 kernels do).
 * - Convolution is implicit GEMM: a block of pixels gathers its taps (tap-major, channels padded to even: the
 *   packed weight's K order) as bf16 rows once, and every weight panel reuses them. The 1x1 stride-1 unpadded case
 *   is a GEMM on the input rows themselves.
 * - The attention's two products (sk_attention_bf16) are two of these GEMMs per (batch, head) pair around the fp32
 *   softmax: k^T and v packed per pair in the weight's pairs layout by serve_kernels.c (sk_attention_bf16_pack),
 *   the (L, S) scores of the pair whole in an fp32 block (64 KiB at L = S = 128: L2), unlike the vector kernel's
 *   MR rows in L1, since a tile wants whole 16-row blocks.
 * - Fewer than SK_AMX_MIN_ROWS rows (a decode step's 1..7) stay on vdpbf16ps: a tile product always costs 16 rows,
 *   so at m rows it does 16 / m times the needed work (8x at 2 rows), while either path then streams the same
 *   weight bytes, which set the time of such a product; the vector path also skips the tile configuration and the
 *   accumulators' round trip through memory. From 8 rows the engine's 1024 bf16 FLOP/cycle, half wasted, still
 *   beat the vector units' 64-128.
 * - Nothing runs on tiles until Python has turned it on (sk_amx_enable) after sk_amx_request (Linux's
 *   arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) and sk_amx_selfcheck (sk_amx_check.c: a fork()ed child
 *   compares the tiles with the vdpbf16ps path) passed, so a fault, a hang or a wrong answer leaves the tiles off.
 * - sk_amx_i8.c (#included below) puts sk_i8.c's int8 GEMM on TDPBUSD tiles the same way (-mamx-int8).
 * - -DSK_AMX_EMULATE replaces the tile instructions by a software tile file that checks what the hardware would
 *   fault on or silently mis-compute (tests/unit/backend/amx_emulator/sk_amx_emu.h), for machines without AMX;
 *   SK_AMX_REGION tells it which memory each load and store may touch. */
#define _GNU_SOURCE /* syscall under -std=c11 */
#if SK_AMX
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sk_isa.h"

#ifdef SK_AMX_EMULATE
#include "sk_amx_emu.h"
#else
#define SK_AMX_REGION(slot, ptr, bytes) ((void)0)
#endif

#define NR 32       /* the packed panel's columns (serve_kernels.c's NR at SK_ISA=512) */
#define TROWS 16    /* rows of every tile */
#define TK 32       /* bf16 per A-tile row: K per tile step */
#define BTILE 1024  /* bf16 in one K step of a panel: 16 pairs x 32 columns x 2 */
#ifndef SK_AMX_MIN_ROWS
#define SK_AMX_MIN_ROWS 8
#endif
#define A_BLOCK_BYTES (256 * 1024) /* bf16 rows of A converted at once */
#define B_GROUP_BYTES (1024 * 1024) /* panels of weight kept in L2 while the rows run over them */

typedef uint16_t bf16;

int sk_gemm_bf16_dp(const float *a, long long lda, long long k, const bf16 *wp, long long n, const float *bias,
                    const float *res, long long ldr, float *out, long long ldo, int act, long long r0, long long r1);
int sk_conv2d_bf16_dp(const float *x, long long nb, long long h, long long w, long long c, const bf16 *wp,
                      long long oc, long long kh, long long kw, long long sh, long long sw, long long pt, long long pl,
                      long long dh, long long dw, long long oh, long long ow, const float *bias, const float *res,
                      float *out, int act, long long p0, long long p1);
void sk_bf16_epilogue(const float *tile, int mr, int ncols, const float *bias, const float *res, long long ldr,
                      float *out, long long ldo, int act);
int sk_attention_bf16_dp(const float *q, const float *k, const float *v, float *out, const float *mask,
                         const long long *st, long long nh, long long L, long long S, long long E, long long Ev,
                         float scale, int safe, long long i0, long long i1);
void sk_attention_bf16_pack(const float *kb, const float *vb, const long long *st, long long S, long long E,
                            long long Ev, bf16 *kp, bf16 *vp, bf16 *row);
void sk_attention_softmax_row(float *p, long long n, float scale, const float *mask, long long ms, int safe);

static int amx_on = 0;                           /* set by sk_amx_enable once the self-check passed */
static long long amx_min_rows = SK_AMX_MIN_ROWS; /* fewer rows per call stay on vdpbf16ps */

/* ---------------------------------------------------------------- tile configuration */

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) TileConfig;

static void tiles_configure(void) {
    TileConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = TROWS;
        cfg.colsb[t] = 64;
    }
#ifdef SK_AMX_EMULATE
    _tile_loadconfig(&cfg);
#else
    /* the whole 64-byte struct as the operand: gcc 12's _tile_loadconfig declares only 8 bytes read */
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
#endif
}

/* ---------------------------------------------------------------- A rows as bf16 */

/* dst[i] = bf16(src[i]) (nearest even, as serve_kernels.c's to_bf16) for i < n, zeros for n <= i < npad. */
static void round_row(const float *src, long long n, bf16 *dst, long long npad) {
    long long i = 0;
    for (; i + 32 <= n; i += 32)
        _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16),
                                                                  _mm512_loadu_ps(src + i)));
    for (; i < n; i += 16) {
        __mmask16 m = vmask((int)(n - i));
        _mm256_mask_storeu_epi16(dst + i, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i)));
    }
    if (npad > n)
        memset(dst + n, 0, sizeof(bf16) * (size_t)(npad - n));
}

/* ---------------------------------------------------------------- the tile kernel */

/* Shared by one call's blocks: the bf16 A rows (kt * TK per row), the weight, and the per-panel K-tail tiles. */
typedef struct {
    long long kp, kfull, kt, n, npanels, ldr, ldo;
    const bf16 *wp, *btail;
    const float *bias;
    int act;
} Plan;

/* One 32 x 32 output block (rows r .. r + mr - 1 of abuf, panel p): C += A . B over all K steps, then the epilogue
 * writes the live mr rows and ncols columns. */
static void tile_block(const Plan *pl, const bf16 *abuf, long long p, int mr, const float *res, float *out) {
    const long long lda = pl->kt * TK * (long long)sizeof(bf16);
    const bf16 *b = pl->wp + p * pl->kp * 2 * NR;
    float acc[2 * TROWS * NR] __attribute__((aligned(64)));
    SK_AMX_REGION(3, acc, sizeof(acc));
    /* gcc's tileloadd asm declares no memory read: the A rows and tail tiles written in C must be stored first */
    __asm__ volatile("" ::: "memory");
    _tile_zero(0);
    _tile_zero(1);
    if (mr > TROWS) {
        _tile_zero(2);
        _tile_zero(3);
        for (long long t = 0; t < pl->kt; t++) {
            const bf16 *bt = t < pl->kfull ? b + t * BTILE : pl->btail + p * BTILE;
            _tile_loadd(4, abuf + t * TK, lda);
            _tile_loadd(5, abuf + TROWS * pl->kt * TK + t * TK, lda);
            _tile_loadd(6, bt, 2 * NR * sizeof(bf16));
            _tile_loadd(7, bt + NR, 2 * NR * sizeof(bf16));
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(2, acc + TROWS * NR, NR * sizeof(float));
        _tile_stored(3, acc + TROWS * NR + TROWS, NR * sizeof(float));
    } else {
        for (long long t = 0; t < pl->kt; t++) {
            const bf16 *bt = t < pl->kfull ? b + t * BTILE : pl->btail + p * BTILE;
            _tile_loadd(4, abuf + t * TK, lda);
            _tile_loadd(6, bt, 2 * NR * sizeof(bf16));
            _tile_loadd(7, bt + NR, 2 * NR * sizeof(bf16));
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
        }
    }
    _tile_stored(0, acc, NR * sizeof(float));
    _tile_stored(1, acc + TROWS, NR * sizeof(float));
    long long ncols = pl->n - p * NR < NR ? pl->n - p * NR : NR;
    sk_bf16_epilogue(acc, mr, (int)ncols, pl->bias ? pl->bias + p * NR : NULL, res ? res + p * NR : NULL, pl->ldr,
                     out + p * NR, pl->ldo, pl->act);
}

/* All panels over `rows` rows of abuf (row r writes out + r * ldo, reads res + r * ldr): panel groups that stay
 * in L2 while every 32-row block runs over them. */
static void tile_rows(const Plan *pl, const bf16 *abuf, long long rows, const float *res, float *out) {
    long long group = B_GROUP_BYTES / (pl->kp * 2 * NR * (long long)sizeof(bf16));
    group = group < 1 ? 1 : group > pl->npanels ? pl->npanels : group;
    for (long long p0 = 0; p0 < pl->npanels; p0 += group) {
        long long p1 = p0 + group < pl->npanels ? p0 + group : pl->npanels;
        for (long long r = 0; r < rows; r += 2 * TROWS) {
            int mr = (int)(rows - r < 2 * TROWS ? rows - r : 2 * TROWS);
            for (long long p = p0; p < p1; p++)
                tile_block(pl, abuf + r * pl->kt * TK, p, mr, res ? res + r * pl->ldr : NULL, out + r * pl->ldo);
        }
    }
}

/* The call's plan, its K-tail tiles (NULL when K is whole tiles) and an A buffer of *mb rows (a multiple of 32);
 * returns NULL when out of memory. */
static bf16 *plan_call(Plan *pl, long long kp, const bf16 *wp, long long n, const float *bias, long long ldr,
                       long long ldo, int act, long long rows, long long *mb) {
    pl->kp = kp, pl->kfull = kp / TROWS, pl->kt = (kp + TROWS - 1) / TROWS, pl->n = n;
    pl->npanels = (n + NR - 1) / NR, pl->ldr = ldr, pl->ldo = ldo, pl->wp = wp, pl->bias = bias, pl->act = act;
    pl->btail = NULL;
    long long row_bytes = pl->kt * TK * (long long)sizeof(bf16), want = A_BLOCK_BYTES / row_bytes / 32 * 32;
    long long need = (rows + 31) / 32 * 32;
    *mb = want < 32 ? 32 : want > need ? need : want;
    long long tail = kp % TROWS, tail_elems = tail ? pl->npanels * BTILE : 0;
    size_t bytes = (size_t)(*mb * row_bytes + tail_elems * (long long)sizeof(bf16));
    bf16 *buf = aligned_alloc(64, (bytes + 63) / 64 * 64); /* C11: a multiple of the alignment */
    if (!buf)
        return NULL;
    SK_AMX_REGION(0, buf, bytes);
    SK_AMX_REGION(1, wp, (size_t)(pl->npanels * kp * 2 * NR * (long long)sizeof(bf16)));
    if (tail) {
        bf16 *bt = buf + *mb * pl->kt * TK;
        memset(bt, 0, sizeof(bf16) * (size_t)tail_elems);
        for (long long p = 0; p < pl->npanels; p++)
            memcpy(bt + p * BTILE, wp + (p * kp + pl->kfull * TROWS) * 2 * NR, sizeof(bf16) * (size_t)(tail * 2 * NR));
        pl->btail = bt;
    }
    return buf;
}

static int tile_gemm(const float *a, long long lda, long long k, const bf16 *wp, long long n, const float *bias,
                     const float *res, long long ldr, float *out, long long ldo, int act, long long r0, long long r1) {
    Plan pl;
    long long mb, kpad = k + (k & 1);
    bf16 *abuf = plan_call(&pl, kpad / 2, wp, n, bias, ldr, ldo, act, r1 - r0, &mb);
    if (!abuf)
        return -1;
    long long width = pl.kt * TK;
    tiles_configure();
    for (long long m0 = r0; m0 < r1; m0 += mb) {
        long long rows = r1 - m0 < mb ? r1 - m0 : mb, padded = (rows + TROWS - 1) / TROWS * TROWS;
        for (long long i = 0; i < rows; i++)
            round_row(a + (m0 + i) * lda, k, abuf + i * width, width);
        memset(abuf + rows * width, 0, sizeof(bf16) * (size_t)((padded - rows) * width));
        tile_rows(&pl, abuf, rows, res ? res + m0 * ldr : NULL, out + m0 * ldo);
    }
    _tile_release();
    free(abuf);
    return 0;
}

static int tile_conv(const float *x, long long h, long long w, long long c, const bf16 *wp, long long oc,
                     long long kh, long long kw, long long sh, long long sw, long long pt, long long pl_,
                     long long dh, long long dw, long long oh, long long ow, const float *bias, const float *res,
                     float *out, int act, long long p0, long long p1) {
    Plan pl;
    long long mb, cp = c + (c & 1), ntaps = kh * kw;
    bf16 *abuf = plan_call(&pl, ntaps * cp / 2, wp, oc, bias, oc, oc, act, p1 - p0, &mb);
    if (!abuf)
        return -1;
    long long width = pl.kt * TK;
    tiles_configure();
    for (long long m0 = p0; m0 < p1; m0 += mb) {
        long long rows = p1 - m0 < mb ? p1 - m0 : mb, padded = (rows + TROWS - 1) / TROWS * TROWS;
        for (long long i = 0; i < rows; i++) { /* pixel m0 + i: its taps, tap-major, each cp wide */
            long long pix = m0 + i, ox = pix % ow, oy = (pix / ow) % oh, b = pix / (ow * oh);
            bf16 *dst = abuf + i * width;
            for (long long ky = 0; ky < kh; ky++) {
                long long iy = oy * sh - pt + ky * dh;
                for (long long kx = 0; kx < kw; kx++, dst += cp) {
                    long long ix = ox * sw - pl_ + kx * dw;
                    if (iy >= 0 && iy < h && ix >= 0 && ix < w)
                        round_row(x + ((b * h + iy) * w + ix) * c, c, dst, cp);
                    else
                        memset(dst, 0, sizeof(bf16) * (size_t)cp);
                }
            }
            memset(dst, 0, sizeof(bf16) * (size_t)(width - ntaps * cp));
        }
        memset(abuf + rows * width, 0, sizeof(bf16) * (size_t)((padded - rows) * width));
        tile_rows(&pl, abuf, rows, res ? res + m0 * oc : NULL, out + m0 * oc);
    }
    _tile_release();
    free(abuf);
    return 0;
}

/* ---------------------------------------------------------------- exported entry points */

int sk_gemm_bf16(const float *a, long long lda, long long k, const bf16 *wp, long long n, const float *bias,
                 const float *res, long long ldr, float *out, long long ldo, int act, long long r0, long long r1) {
    if (!amx_on || r1 - r0 < amx_min_rows)
        return sk_gemm_bf16_dp(a, lda, k, wp, n, bias, res, ldr, out, ldo, act, r0, r1);
    return tile_gemm(a, lda, k, wp, n, bias, res, ldr, out, ldo, act, r0, r1);
}

int sk_conv2d_bf16(const float *x, long long nb, long long h, long long w, long long c, const bf16 *wp, long long oc,
                   long long kh, long long kw, long long sh, long long sw, long long pt, long long pl, long long dh,
                   long long dw, long long oh, long long ow, const float *bias, const float *res, float *out, int act,
                   long long p0, long long p1) {
    if (!amx_on || p1 - p0 < amx_min_rows)
        return sk_conv2d_bf16_dp(x, nb, h, w, c, wp, oc, kh, kw, sh, sw, pt, pl, dh, dw, oh, ow, bias, res, out, act,
                                 p0, p1);
    if (kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && oh == h && ow == w)
        return tile_gemm(x, c, c, wp, oc, bias, res, oc, out, oc, act, p0, p1);
    return tile_conv(x, h, w, c, wp, oc, kh, kw, sh, sw, pt, pl, dh, dw, oh, ow, bias, res, out, act, p0, p1);
}

/* The attention's two products on tiles (serve_kernels.c's sk_attention_bf16 arguments and roundings): per pair,
 * k^T and v packed in the weights' pairs layout (sk_attention_bf16_pack), scores = bf16(q) k^T for all L rows as one
 * tile GEMM into an (L, S) fp32 block (L2-sized at L = S = 128: the tiles want whole 16-row blocks, not MR rows),
 * the fp32 softmax per row, then out = bf16(p) v as a second tile GEMM, whose epilogue writes out's rows in place.
 * Fewer than amx_min_rows query rows stay on vdpbf16ps, as the GEMM does. */
int sk_attention_bf16(const float *q, const float *k, const float *v, float *out, const float *mask,
                      const long long *st, long long nh, long long L, long long S, long long E, long long Ev,
                      float scale, int safe, long long i0, long long i1) {
    if (!amx_on || L < amx_min_rows)
        return sk_attention_bf16_dp(q, k, v, out, mask, st, nh, L, S, E, Ev, scale, safe, i0, i1);
    long long ep = E + (E & 1), spd = S + (S & 1), sp = (S + NR - 1) / NR * NR, evp = (Ev + NR - 1) / NR;
    long long rowlen = S * ep; /* sk_attention_bf16_pack's k rows as bf16 */
    bf16 *kp = malloc(sizeof(bf16) * (size_t)(sp * ep)), *vp = malloc(sizeof(bf16) * (size_t)(evp * NR * spd));
    bf16 *row = malloc(sizeof(bf16) * (size_t)(rowlen + 32));
    float *sc = malloc(sizeof(float) * (size_t)(L * sp));
    int rc = !kp || !vp || !row || !sc ? -1 : 0;
    for (long long i = i0; i < i1 && rc == 0; i++) {
        long long b = i / nh, h = i % nh;
        const float *mb = mask ? mask + b * st[12] + h * st[13] : NULL;
        sk_attention_bf16_pack(k + b * st[3] + h * st[4], v + b * st[6] + h * st[7], st, S, E, Ev, kp, vp, row);
        rc = tile_gemm(q + b * st[0] + h * st[1], st[2], E, kp, S, NULL, NULL, 0, sc, sp, 0, 0, L); /* (L, S) */
        for (long long r = 0; r < L && rc == 0; r++)
            sk_attention_softmax_row(sc + r * sp, S, scale, mb ? mb + r * st[14] : NULL, st[15], safe);
        if (rc == 0) /* (L, S) @ (S, Ev) -> out's rows */
            rc = tile_gemm(sc, sp, S, vp, Ev, NULL, NULL, 0, out + b * st[9] + h * st[10], st[11], 0, 0, L);
    }
    free(kp), free(vp), free(row), free(sc);
    return rc;
}

/* 0 when this process may use the tile registers (Linux granted XTILEDATA), else -1. */
int sk_amx_request(void) {
#ifdef SK_AMX_EMULATE
    return 0;
#else
    unsigned long long bits = 0;
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0)
        return -1;
    if (syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &bits) != 0 || !(bits & (1ull << 18)))
        return -1;
    return 0;
#endif
}

/* Turns the tile path on (1) or off (0); returns the previous state. min_rows > 0 also sets the smallest call (rows
 * or pixels) that uses tiles (tests force 1 to run every tail on tiles). */
int sk_amx_enable(int on, long long min_rows) {
    int previous = amx_on;
    amx_on = on;
    if (min_rows > 0)
        amx_min_rows = min_rows;
    return previous;
}

/* The engine's bf16 peak for bench/amx_gemm.py: iters x 4 TDPBF16PS (16 x 16 x 32 each) on tiles already loaded,
 * no memory traffic; the caller times it. */
int sk_amx_peak(long long iters) {
    tiles_configure();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (long long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_release();
    return 0;
}

/* The int8 GEMM on TDPBUSD tiles (sk_gemm_i8): this translation unit's tiles, switch and emulator */
#include "sk_amx_i8.c"

#ifdef SK_AMX_EMULATE
void *PyInit__sk_amx_emu(void) { return 0; }
#else
/* A trivial module init, so setuptools can build this file as an extension; Python never imports it. */
void *PyInit__sk_amx(void) { return 0; }
#endif
#endif /* SK_AMX */
