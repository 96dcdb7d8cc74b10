/* A software AMX tile file for testing serve/backend/native/sk_amx.c on CPUs without AMX (included by it under
 * -DSK_AMX_EMULATE in place of the tile instructions; everything else stays AVX-512). It executes what the kernel
 * asks, as the hardware would (palette 1: 8 tiles of at most 16 rows x 64 bytes; bytes beyond a tile's configured
 * shape read as zero; TDPBF16PS accumulates each pair's two products into fp32 in K order, products exact;
 * TDPBUSD / TDPBSSD add each quad's four byte products to the int32 accumulator, wrapping as the hardware does), and
 * CHECKS what the hardware would fault on or silently mis-compute:
 *   - a tile instruction before LDTILECFG or after TILERELEASE, or on a tile the configuration left empty;
 *   - a configuration with a palette other than 1, rows > 16, colsb > 64 or not a multiple of 4, nonzero reserved
 *     bytes, or a tile with only one of rows / colsb set;
 *   - a dot product whose shapes disagree: C rows = A rows, A colsb = 4 x B rows, C colsb = B colsb;
 *   - a load or store that touches memory outside the regions the kernel declared (SK_AMX_REGION: its A buffer,
 *     the packed weight, the scratch tiles), i.e. a wrong stride, base or tile shape reading past its operand.
 * A violation is counted and its first message kept (sk_amx_emu_errors / sk_amx_emu_message), and the instruction
 * is skipped: a test reads the count after each call instead of crashing its process. State is per thread. */
#ifndef SK_AMX_EMU_H
#define SK_AMX_EMU_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#undef _tile_loadd
#undef _tile_stream_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#undef _tile_dpbssd
#undef _tile_dpbusd
#define _tile_loadconfig(cfg) emu_loadconfig(cfg)
#define _tile_release() emu_release()
#define _tile_loadd(t, base, stride) emu_loadd((t), (base), (long long)(stride), "tileloadd")
#define _tile_stream_loadd(t, base, stride) emu_loadd((t), (base), (long long)(stride), "tileloaddt1")
#define _tile_stored(t, base, stride) emu_stored((t), (base), (long long)(stride))
#define _tile_zero(t) emu_zero(t)
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps((c), (a), (b))
#define _tile_dpbssd(c, a, b) emu_dpbssd((c), (a), (b))
#define _tile_dpbusd(c, a, b) emu_dpbusd((c), (a), (b))
#define SK_AMX_REGION(slot, ptr, bytes) emu_region((slot), (const void *)(ptr), (size_t)(bytes))

#define EMU_REGIONS 8
typedef struct {
    int configured;
    uint8_t rows[8];
    uint16_t colsb[8];
    uint8_t data[8][16][64];
    const char *lo[EMU_REGIONS], *hi[EMU_REGIONS];
} EmuTiles;

static __thread EmuTiles emu;
static long long emu_errors;
static char emu_message[256];

static void emu_fail(const char *fmt, int a, long long b, long long c) {
    if (emu_errors++ == 0)
        snprintf(emu_message, sizeof(emu_message), fmt, a, b, c);
}

long long sk_amx_emu_errors(void) { return emu_errors; }
const char *sk_amx_emu_message(void) { return emu_message; }
void sk_amx_emu_reset(void) {
    emu_errors = 0;
    emu_message[0] = 0;
}
/* tile operations executed (loads, stores, products), so a test can tell the tile path ran */
static long long emu_ops;
long long sk_amx_emu_ops(void) { return emu_ops; }

static void emu_region(int slot, const void *ptr, size_t bytes) {
    emu.lo[slot] = (const char *)ptr;
    emu.hi[slot] = (const char *)ptr + bytes;
}

static int emu_inside(const char *lo, const char *hi) {
    for (int i = 0; i < EMU_REGIONS; i++)
        if (emu.lo[i] && lo >= emu.lo[i] && hi <= emu.hi[i])
            return 1;
    return 0;
}

static void emu_loadconfig(const void *cfg) {
    const uint8_t *c = (const uint8_t *)cfg;
    emu.configured = 0;
    if (c[0] != 1) {
        emu_fail("ldtilecfg: palette %d (only 1 exists)", c[0], 0, 0);
        return;
    }
    for (int i = 1; i < 16; i++)
        if (c[i]) {
            emu_fail("ldtilecfg: reserved/start_row byte %d is %lld (must be 0)", i, c[i], 0);
            return;
        }
    for (int t = 0; t < 16; t++) {
        uint16_t colsb;
        memcpy(&colsb, c + 16 + 2 * t, 2);
        uint8_t rows = c[48 + t];
        if (t >= 8 && (colsb || rows)) {
            emu_fail("ldtilecfg: tile %d configured (palette 1 has 8 tiles): rows %lld colsb %lld", t, rows, colsb);
            return;
        }
        if (rows > 16 || colsb > 64 || colsb % 4 || (!rows) != (!colsb)) {
            emu_fail("ldtilecfg: tile %d shape rows %lld colsb %lld (at most 16 x 64, colsb % 4 == 0)", t, rows,
                     colsb);
            return;
        }
        if (t < 8)
            emu.rows[t] = rows, emu.colsb[t] = colsb;
    }
    memset(emu.data, 0, sizeof(emu.data)); /* ldtilecfg zeroes the tiles */
    emu.configured = 1;
}

static void emu_release(void) {
    emu.configured = 0;
    memset(emu.data, 0, sizeof(emu.data));
}

static int emu_usable(int t, const char *op) {
    if (!emu.configured) {
        emu_fail("%s tmm%d: tiles not configured (no ldtilecfg, or after tilerelease)%lld%lld", t, 0, 0);
        (void)op;
        return 0;
    }
    if (t < 0 || t > 7 || !emu.rows[t]) {
        emu_fail("tile %d used but not configured (rows 0)%lld%lld", t, 0, 0);
        return 0;
    }
    return 1;
}

static void emu_loadd(int t, const void *base, long long stride, const char *op) {
    if (!emu_usable(t, op))
        return;
    const char *p = (const char *)base;
    int rows = emu.rows[t], colsb = emu.colsb[t];
    for (int r = 0; r < rows; r++)
        if (!emu_inside(p + r * stride, p + r * stride + colsb)) {
            emu_fail("tileloadd tmm%d: row %lld (stride %lld) outside every declared buffer", t, r, stride);
            return;
        }
    emu_ops++;
    memset(emu.data[t], 0, sizeof(emu.data[t]));
    for (int r = 0; r < rows; r++)
        memcpy(emu.data[t][r], p + r * stride, (size_t)colsb);
}

static void emu_stored(int t, void *base, long long stride) {
    if (!emu_usable(t, "tilestored"))
        return;
    char *p = (char *)base;
    int rows = emu.rows[t], colsb = emu.colsb[t];
    for (int r = 0; r < rows; r++)
        if (!emu_inside(p + r * stride, p + r * stride + colsb)) {
            emu_fail("tilestored tmm%d: row %lld (stride %lld) outside every declared buffer", t, r, stride);
            return;
        }
    emu_ops++;
    for (int r = 0; r < rows; r++)
        memcpy(p + r * stride, emu.data[t][r], (size_t)colsb);
}

static void emu_zero(int t) {
    if (emu_usable(t, "tilezero"))
        memset(emu.data[t], 0, sizeof(emu.data[t]));
}

static int emu_dot_shapes(int c, int a, int b, const char *op) {
    if (!emu_usable(c, op) || !emu_usable(a, op) || !emu_usable(b, op))
        return 0;
    if (c == a || c == b || a == b) {
        emu_fail("dot product tmm%d += tmm%lld . tmm%lld: operands must be three different tiles", c, a, b);
        return 0;
    }
    if (emu.rows[c] != emu.rows[a]) {
        emu_fail("dot product into tmm%d: C rows %lld != A rows %lld", c, emu.rows[c], emu.rows[a]);
        return 0;
    }
    if (emu.colsb[a] != 4 * emu.rows[b]) {
        emu_fail("dot product into tmm%d: A colsb %lld != 4 x B rows %lld", c, emu.colsb[a], emu.rows[b]);
        return 0;
    }
    if (emu.colsb[c] != emu.colsb[b]) {
        emu_fail("dot product into tmm%d: C colsb %lld != B colsb %lld", c, emu.colsb[c], emu.colsb[b]);
        return 0;
    }
    return 1;
}

static float emu_bf16(const uint8_t *p) {
    uint32_t u = (uint32_t)(p[0] | (p[1] << 8)) << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* C[m][n] += sum over pairs k of A[m][2k] B[k][n][0] + A[m][2k+1] B[k][n][1] (fp32, K in order). */
static void emu_dpbf16ps(int c, int a, int b) {
    if (!emu_dot_shapes(c, a, b, "tdpbf16ps"))
        return;
    emu_ops++;
    int m_rows = emu.rows[c], n_cols = emu.colsb[c] / 4, k_pairs = emu.rows[b];
    for (int m = 0; m < m_rows; m++)
        for (int n = 0; n < n_cols; n++) {
            float acc;
            memcpy(&acc, emu.data[c][m] + 4 * n, 4);
            for (int k = 0; k < k_pairs; k++) {
                acc += emu_bf16(emu.data[a][m] + 4 * k) * emu_bf16(emu.data[b][k] + 4 * n);
                acc += emu_bf16(emu.data[a][m] + 4 * k + 2) * emu_bf16(emu.data[b][k] + 4 * n + 2);
            }
            memcpy(emu.data[c][m] + 4 * n, &acc, 4);
        }
}

/* C[m][n] += sum over k of the four products of A's signed bytes m, 4k..4k+3 and B's signed bytes k, 4n..4n+3. */
static void emu_dpbssd(int c, int a, int b) {
    if (!emu_dot_shapes(c, a, b, "tdpbssd"))
        return;
    emu_ops++;
    int m_rows = emu.rows[c], n_cols = emu.colsb[c] / 4, k_quads = emu.rows[b];
    for (int m = 0; m < m_rows; m++)
        for (int n = 0; n < n_cols; n++) {
            int32_t acc;
            memcpy(&acc, emu.data[c][m] + 4 * n, 4);
            for (int k = 0; k < k_quads; k++)
                for (int e = 0; e < 4; e++)
                    acc += (int8_t)emu.data[a][m][4 * k + e] * (int8_t)emu.data[b][k][4 * n + e];
            memcpy(emu.data[c][m] + 4 * n, &acc, 4);
        }
}

/* C[m][n] += sum over k of the four products of A's unsigned bytes m, 4k..4k+3 and B's signed bytes k, 4n..4n+3
 * (sk_i8.c's vpdpbusd arithmetic: u8 activations, s8 weights); int32 wraps (computed in uint32, as the hardware's
 * accumulation does not saturate). */
static void emu_dpbusd(int c, int a, int b) {
    if (!emu_dot_shapes(c, a, b, "tdpbusd"))
        return;
    emu_ops++;
    int m_rows = emu.rows[c], n_cols = emu.colsb[c] / 4, k_quads = emu.rows[b];
    for (int m = 0; m < m_rows; m++)
        for (int n = 0; n < n_cols; n++) {
            uint32_t acc;
            memcpy(&acc, emu.data[c][m] + 4 * n, 4);
            for (int k = 0; k < k_quads; k++)
                for (int e = 0; e < 4; e++)
                    acc += (uint32_t)((int32_t)emu.data[a][m][4 * k + e] * (int8_t)emu.data[b][k][4 * n + e]);
            memcpy(emu.data[c][m] + 4 * n, &acc, 4);
        }
}

#endif /* SK_AMX_EMU_H */
