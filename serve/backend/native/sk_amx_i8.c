/* The dynamic int8 GEMM on AMX-INT8 tiles (TDPBUSD): sk_gemm_i8 of the AMX build, with sk_i8.c's signature,
 * arithmetic, packing and epilogue; sk_i8.c's vpdpbusd GEMM stays as sk_gemm_i8_dp (fewer rows, and the self-check's
 * reference). #included by sk_amx.c (one translation unit: its tile configuration, amx_on / amx_min_rows, NR, TROWS
 * and, under -DSK_AMX_EMULATE, its emulated tile file); not a source of its own. Decisions, and why:
 *
 * - TDPBUSD is vpdpbusd's arithmetic on tiles: each int32 of C gains four u8 (A) x s8 (B) products, exact. So the
 *   tile path equals the vector path bit for bit (the integer sums are the same integers; the fp32 epilogue is the
 *   same function, sk_i8_epilogue), not merely within a tolerance.
 * - sk_i8's packed weight is already the B-tile layout: a panel of IW = 32 columns stores 4 consecutive k of each
 *   column side by side, packed[panel][k / 4][j][k % 4], i.e. rows of 128 bytes; 16 quads x 16 columns is a 16-row x
 *   64-byte tile at a row stride of 128 (columns 16..31 start 64 bytes in), K = 64 per tile: the bf16 path's tile
 *   geometry with quads for pairs. No repacking; a K tail that is not a whole tile (quads % 16) is copied per panel
 *   into a zero-padded 16 x 128-byte scratch tile, as the bf16 path does, so no tile reads past the panel.
 * - A is sk_i8.c's own quantisation (sk_i8_quantize_rows, per row u8 with its scale and zero point) into a buffer
 *   whose rows are K padded with zeros to whole tiles (64 bytes) and whose blocks are padded with zero rows to 16.
 * - The same 2x2 blocking and panel groups as the bf16 tiles (32 rows x 32 columns per block: 4 TDPBUSD per K step,
 *   4 tile loads); the int32 accumulators go through a 32 x 32 scratch whose rows are IW apart, the layout
 *   sk_i8_epilogue reads.
 * - From SK_AMX_MIN_ROWS rows, the bf16 tiles' threshold for the same reason: a tile product always costs 16 rows. */
#if defined(__AVX512VNNI__)

#define I8_TK 64       /* u8 per A-tile row: K per tile step */
#define I8_BTILE 2048  /* bytes of one K step of a panel: 16 quads x 32 columns x 4 */
#define I8_PANEL 32    /* sk_i8.c's IW */

int sk_gemm_i8_dp(const float *x, long long lda, long long k, const int8_t *q, long long n, const float *scale,
                  const int32_t *colsum, const float *bias, const float *res, long long ldr, float *out,
                  long long ldo, int act, long long r0, long long r1);
int sk_i8_quantize_rows(const float *x, long long lda, long long k, uint8_t *u, long long kp, float *s, int32_t *z,
                        long long r0, long long r1);
void sk_i8_epilogue(const int32_t *acc, int rows, int ncols, const float *srow, const int32_t *zrow,
                    const float *scale, const int32_t *colsum, const float *bias, const float *res, long long ldr,
                    float *out, long long ldo, int act);

typedef struct {
    long long kp, kfull, kt, n;
    const int8_t *q, *btail;
    const float *scale, *bias;
    const int32_t *colsum;
    long long ldr, ldo;
    int act;
} I8Plan;

/* One block: rows r .. r + mr - 1 of u (their scales srow, zero points zrow) x panel p, then the epilogue. */
static void i8_tile_block(const I8Plan *pl, const uint8_t *u, const float *srow, const int32_t *zrow, long long p,
                          int mr, const float *res, float *out) {
    const long long lda = pl->kt * I8_TK;
    const int8_t *b = pl->q + p * pl->kp * I8_PANEL;
    int32_t acc[2 * TROWS * I8_PANEL] __attribute__((aligned(64)));
    SK_AMX_REGION(3, acc, sizeof(acc));
    __asm__ volatile("" ::: "memory"); /* the u8 rows and tail tiles written in C are stored before tileloadd */
    _tile_zero(0);
    _tile_zero(1);
    if (mr > TROWS) {
        _tile_zero(2);
        _tile_zero(3);
        for (long long t = 0; t < pl->kt; t++) {
            const int8_t *bt = t < pl->kfull ? b + t * I8_BTILE : pl->btail + p * I8_BTILE;
            _tile_loadd(4, u + t * I8_TK, lda);
            _tile_loadd(5, u + TROWS * lda + t * I8_TK, lda);
            _tile_loadd(6, bt, 4 * I8_PANEL);
            _tile_loadd(7, bt + 64, 4 * I8_PANEL);
            _tile_dpbusd(0, 4, 6);
            _tile_dpbusd(1, 4, 7);
            _tile_dpbusd(2, 5, 6);
            _tile_dpbusd(3, 5, 7);
        }
        _tile_stored(2, acc + TROWS * I8_PANEL, I8_PANEL * sizeof(int32_t));
        _tile_stored(3, acc + TROWS * I8_PANEL + TROWS, I8_PANEL * sizeof(int32_t));
    } else {
        for (long long t = 0; t < pl->kt; t++) {
            const int8_t *bt = t < pl->kfull ? b + t * I8_BTILE : pl->btail + p * I8_BTILE;
            _tile_loadd(4, u + t * I8_TK, lda);
            _tile_loadd(6, bt, 4 * I8_PANEL);
            _tile_loadd(7, bt + 64, 4 * I8_PANEL);
            _tile_dpbusd(0, 4, 6);
            _tile_dpbusd(1, 4, 7);
        }
    }
    _tile_stored(0, acc, I8_PANEL * sizeof(int32_t));
    _tile_stored(1, acc + TROWS, I8_PANEL * sizeof(int32_t));
    long long ncols = pl->n - p * I8_PANEL < I8_PANEL ? pl->n - p * I8_PANEL : I8_PANEL;
    sk_i8_epilogue(acc, mr, (int)ncols, srow, zrow, pl->scale + p * I8_PANEL, pl->colsum + p * I8_PANEL,
                   pl->bias ? pl->bias + p * I8_PANEL : NULL, res ? res + p * I8_PANEL : NULL, pl->ldr,
                   out + p * I8_PANEL, pl->ldo, pl->act);
}

static int i8_tile_gemm(const float *x, long long lda, long long k, const int8_t *q, long long n, const float *scale,
                        const int32_t *colsum, const float *bias, const float *res, long long ldr, float *out,
                        long long ldo, int act, long long r0, long long r1) {
    I8Plan pl = {.n = n, .q = q, .scale = scale, .bias = bias, .colsum = colsum, .ldr = ldr, .ldo = ldo, .act = act};
    long long quads = (k + 3) / 4, npanels = (n + I8_PANEL - 1) / I8_PANEL, tail = quads % TROWS;
    pl.kp = quads * 4, pl.kfull = quads / TROWS, pl.kt = (quads + TROWS - 1) / TROWS;
    long long width = pl.kt * I8_TK, want = A_BLOCK_BYTES / width / 32 * 32, need = (r1 - r0 + 31) / 32 * 32;
    long long mb = want < 32 ? 32 : want > need ? need : want, tail_bytes = tail ? npanels * I8_BTILE : 0;
    size_t bytes = (size_t)(mb * width + tail_bytes);
    uint8_t *buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
    float *srow = malloc(sizeof(float) * (size_t)mb);
    int32_t *zrow = malloc(sizeof(int32_t) * (size_t)mb);
    if (!buf || !srow || !zrow) {
        free(buf), free(srow), free(zrow);
        return -2;
    }
    SK_AMX_REGION(0, buf, bytes);
    SK_AMX_REGION(1, q, (size_t)(npanels * pl.kp * I8_PANEL));
    pl.btail = NULL;
    if (tail) {
        int8_t *bt = (int8_t *)buf + mb * width;
        memset(bt, 0, (size_t)tail_bytes);
        for (long long p = 0; p < npanels; p++)
            memcpy(bt + p * I8_BTILE, q + (p * pl.kp + pl.kfull * TROWS * 4) * I8_PANEL, (size_t)(tail * 4 * I8_PANEL));
        pl.btail = bt;
    }
    long long group = B_GROUP_BYTES / (pl.kp * I8_PANEL);
    group = group < 1 ? 1 : group > npanels ? npanels : group;
    tiles_configure();
    for (long long m0 = r0; m0 < r1; m0 += mb) {
        long long rows = r1 - m0 < mb ? r1 - m0 : mb, padded = (rows + TROWS - 1) / TROWS * TROWS;
        sk_i8_quantize_rows(x, lda, k, buf, width, srow, zrow, m0, m0 + rows); /* zeros past k, to width */
        memset(buf + rows * width, 0, (size_t)((padded - rows) * width));
        for (long long p0 = 0; p0 < npanels; p0 += group) {
            long long p1 = p0 + group < npanels ? p0 + group : npanels;
            for (long long r = 0; r < rows; r += 2 * TROWS) {
                int mr = (int)(rows - r < 2 * TROWS ? rows - r : 2 * TROWS);
                for (long long p = p0; p < p1; p++)
                    i8_tile_block(&pl, buf + r * width, srow + r, zrow + r, p, mr,
                                  res ? res + (m0 + r) * ldr : NULL, out + (m0 + r) * ldo);
            }
        }
    }
    _tile_release();
    free(buf), free(srow), free(zrow);
    return 0;
}

/* sk_i8.c's sk_gemm_i8 (its docstring has the arguments): on tiles once sk_amx_enable turned them on and the call
 * has amx_min_rows rows or more, else on vpdpbusd. */
int sk_gemm_i8(const float *x, long long lda, long long k, const int8_t *q, long long n, const float *scale,
               const int32_t *colsum, const float *bias, const float *res, long long ldr, float *out, long long ldo,
               int act, long long r0, long long r1) {
    if (!amx_on || r1 - r0 < amx_min_rows)
        return sk_gemm_i8_dp(x, lda, k, q, n, scale, colsum, bias, res, ldr, out, ldo, act, r0, r1);
    if (k <= 0 || n <= 0 || lda < k || ldo < n || r0 < 0 || r1 < r0 || act < 0)
        return -1;
    return i8_tile_gemm(x, lda, k, q, n, scale, colsum, bias, res, ldr, out, ldo, act, r0, r1);
}

#endif /* __AVX512VNNI__ */
