/* The AMX build's self-check (sk_amx_selfcheck, used by serve/backend/cpu_libraries.py before it selects the
 * build): a fork()ed child runs small GEMMs and a 3x3 convolution with tails in M, N and K, the attention's two
 * products and (where the build has VNNI) the int8 GEMM on TDPBUSD, on the tile path and on the vector path
 * (vdpbf16ps, vpdpbusd) of the same library, and exits with its verdict; the parent waits a bounded time. So a
 * fault (SIGILL where the CPU or kernel lacks AMX after all, SIGSEGV), a hang or a wrong answer costs the child,
 * never the caller. The child resets the fatal signals to their defaults (an inherited handler such as Python's
 * faulthandler would report the fault as the caller's) and dumps no core. Only sk_amx.c's exported functions are used, so this file reads the kernel exactly as Python does. */
#define _GNU_SOURCE /* fork, kill, nanosleep under -std=c11 */
#if SK_AMX
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NR 32 /* the packed panel's columns */

typedef uint16_t bf16;

int sk_gemm_bf16(const float *a, long long lda, long long k, const bf16 *wp, long long n, const float *bias,
                 const float *res, long long ldr, float *out, long long ldo, int act, long long r0, long long r1);
int sk_gemm_bf16_dp(const float *a, long long lda, long long k, const bf16 *wp, long long n, const float *bias,
                    const float *res, long long ldr, float *out, long long ldo, int act, long long r0, long long r1);
int sk_conv2d_bf16(const float *x, long long nb, long long h, long long w, long long c, const bf16 *wp, long long oc,
                   long long kh, long long kw, long long sh, long long sw, long long pt, long long pl, long long dh,
                   long long dw, long long oh, long long ow, const float *bias, const float *res, float *out, int act,
                   long long p0, long long p1);
int sk_conv2d_bf16_dp(const float *x, long long nb, long long h, long long w, long long c, const bf16 *wp,
                      long long oc, long long kh, long long kw, long long sh, long long sw, long long pt, long long pl,
                      long long dh, long long dw, long long oh, long long ow, const float *bias, const float *res,
                      float *out, int act, long long p0, long long p1);
int sk_attention_bf16(const float *q, const float *k, const float *v, float *out, const float *mask,
                      const long long *st, long long nh, long long L, long long S, long long E, long long Ev,
                      float scale, int safe, long long i0, long long i1);
int sk_attention_bf16_dp(const float *q, const float *k, const float *v, float *out, const float *mask,
                         const long long *st, long long nh, long long L, long long S, long long E, long long Ev,
                         float scale, int safe, long long i0, long long i1);
#ifdef __AVX512VNNI__
int sk_gemm_i8(const float *x, long long lda, long long k, const int8_t *q, long long n, const float *scale,
               const int32_t *colsum, const float *bias, const float *res, long long ldr, float *out, long long ldo,
               int act, long long r0, long long r1);
int sk_gemm_i8_dp(const float *x, long long lda, long long k, const int8_t *q, long long n, const float *scale,
                  const int32_t *colsum, const float *bias, const float *res, long long ldr, float *out,
                  long long ldo, int act, long long r0, long long r1);
#endif
int sk_amx_request(void);
int sk_amx_enable(int on, long long min_rows);

static uint32_t lcg_state;
static float lcg(void) { /* uniform in [-1, 1) */
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (float)(lcg_state >> 8) / (float)(1u << 23) - 1.0f;
}
static bf16 lcg_bf16(void) {
    float f = lcg();
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return (bf16)(u >> 16);
}

static int close_enough(const float *got, const float *want, long long count) {
    for (long long i = 0; i < count; i++) {
        float d = got[i] - want[i], tol = 1e-3f * (1.0f + (want[i] < 0 ? -want[i] : want[i]));
        if (!(d <= tol && -d <= tol))
            return 0;
    }
    return 1;
}

/* One GEMM (m, k, n) and one convolution on tiles against vdpbf16ps; 0 when they agree, 1 when not, 2 no memory. */
static int check_one(long long m, long long k, long long n, int act, int conv) {
    long long nb = 1, h = 5, w = conv ? m / 5 : 1, kh = conv ? 3 : 1, taps = kh * kh, c = k;
    long long rows = conv ? nb * h * w : m, kp = conv ? taps * ((c + 1) / 2) : (k + 1) / 2, np = (n + NR - 1) / NR;
    float *a = malloc(sizeof(float) * (size_t)(rows * c)), *bias = malloc(sizeof(float) * (size_t)n);
    float *res = malloc(sizeof(float) * (size_t)(rows * n)), *o1 = malloc(sizeof(float) * (size_t)(rows * n));
    float *o2 = malloc(sizeof(float) * (size_t)(rows * n));
    bf16 *wp = malloc(sizeof(bf16) * (size_t)(np * kp * 2 * NR));
    int verdict = 2;
    if (a && bias && res && o1 && o2 && wp) {
        for (long long i = 0; i < rows * c; i++)
            a[i] = lcg();
        for (long long i = 0; i < rows * n; i++)
            res[i] = lcg();
        for (long long i = 0; i < n; i++)
            bias[i] = lcg();
        for (long long i = 0; i < np * kp * 2 * NR; i++)
            wp[i] = lcg_bf16();
        int e1, e2;
        if (conv) {
            e1 = sk_conv2d_bf16(a, nb, h, w, c, wp, n, kh, kh, 1, 1, 1, 1, 1, 1, h, w, bias, res, o1, act, 0, rows);
            e2 = sk_conv2d_bf16_dp(a, nb, h, w, c, wp, n, kh, kh, 1, 1, 1, 1, 1, 1, h, w, bias, res, o2, act, 0,
                                   rows);
        } else {
            e1 = sk_gemm_bf16(a, k, k, wp, n, bias, res, n, o1, n, act, 0, rows);
            e2 = sk_gemm_bf16_dp(a, k, k, wp, n, bias, res, n, o2, n, act, 0, rows);
        }
        verdict = e1 || e2 ? 2 : close_enough(o1, o2, rows * n) ? 0 : 1;
    }
    free(a), free(bias), free(res), free(o1), free(o2), free(wp);
    return verdict;
}

/* The attention's tile path (two tile GEMMs around the fp32 softmax) against its vdpbf16ps one: 2 heads, tails in
 * L, S and E, an additive mask broadcast over the heads; scale 1 / sqrt(E) keeps the probabilities spread (~1 / S),
 * so a probability that rounds to a neighbouring bf16 on one path moves an output by far less than the tolerance. */
static int check_attention(void) {
    const long long H = 2, L = 37, S = 45, E = 70, Ev = 33;
    float *q = malloc(sizeof(float) * (size_t)(H * L * E)), *k = malloc(sizeof(float) * (size_t)(H * S * E));
    float *v = malloc(sizeof(float) * (size_t)(H * S * Ev)), *mask = malloc(sizeof(float) * (size_t)(L * S));
    float *o1 = malloc(sizeof(float) * (size_t)(H * L * Ev)), *o2 = malloc(sizeof(float) * (size_t)(H * L * Ev));
    int verdict = 2;
    if (q && k && v && mask && o1 && o2) {
        for (long long i = 0; i < H * L * E; i++)
            q[i] = lcg();
        for (long long i = 0; i < H * S * E; i++)
            k[i] = lcg();
        for (long long i = 0; i < H * S * Ev; i++)
            v[i] = lcg();
        for (long long i = 0; i < L * S; i++)
            mask[i] = lcg();
        /* strides in floats: q, k, v, out (batch, head, row), mask (batch, head, row, col) */
        long long st[16] = {H * L * E, L * E, E, H * S * E, S * E, E, H * S * Ev, S * Ev, Ev, H * L * Ev, L * Ev, Ev,
                            0, 0, S, 1};
        float scale = 0.11952286f; /* 1 / sqrt(70) */
        int e1 = sk_attention_bf16(q, k, v, o1, mask, st, H, L, S, E, Ev, scale, 1, 0, H);
        int e2 = sk_attention_bf16_dp(q, k, v, o2, mask, st, H, L, S, E, Ev, scale, 1, 0, H);
        verdict = e1 || e2 ? 2 : close_enough(o1, o2, H * L * Ev) ? 0 : 1;
    }
    free(q), free(k), free(v), free(mask), free(o1), free(o2);
    return verdict;
}

#ifdef __AVX512VNNI__
/* The int8 GEMM on TDPBUSD tiles against vpdpbusd: exact integer sums and one shared epilogue, so the outputs must be
 * equal bit for bit (memcmp); K 300 leaves a partial tile (75 quads), M and N tails. 0 equal, 1 not, 2 no memory. */
static int check_i8(long long m, long long k, long long n, int act) {
    long long kp = (k + 3) / 4 * 4, np = (n + NR - 1) / NR * NR;
    float *x = malloc(sizeof(float) * (size_t)(m * k)), *scale = malloc(sizeof(float) * (size_t)np);
    float *bias = malloc(sizeof(float) * (size_t)n), *res = malloc(sizeof(float) * (size_t)(m * n));
    float *o1 = malloc(sizeof(float) * (size_t)(m * n)), *o2 = malloc(sizeof(float) * (size_t)(m * n));
    int8_t *q = malloc((size_t)(kp * np));
    int32_t *colsum = malloc(sizeof(int32_t) * (size_t)np);
    int verdict = 2;
    if (x && scale && bias && res && o1 && o2 && q && colsum) {
        for (long long i = 0; i < m * k; i++)
            x[i] = lcg();
        for (long long i = 0; i < m * n; i++)
            res[i] = lcg();
        for (long long i = 0; i < n; i++)
            bias[i] = lcg();
        memset(q, 0, (size_t)(kp * np));
        for (long long i = 0; i < np; i++) /* packed[p][g][j][e] = weight (4g + e, 32p + j), zero past k and n */
            for (long long kk = 0; kk < k && i < n; kk++)
                q[((i / NR * kp / 4 + kk / 4) * NR + i % NR) * 4 + kk % 4] = (int8_t)(lcg() * 127.0f);
        for (long long i = 0; i < np; i++) {
            scale[i] = i < n ? 0.01f * (1.5f + lcg()) : 0.0f;
            colsum[i] = 0;
            for (long long kk = 0; kk < kp; kk++)
                colsum[i] += q[((i / NR * kp / 4 + kk / 4) * NR + i % NR) * 4 + kk % 4];
        }
        int e1 = sk_gemm_i8(x, k, k, q, n, scale, colsum, bias, res, n, o1, n, act, 0, m);
        int e2 = sk_gemm_i8_dp(x, k, k, q, n, scale, colsum, bias, res, n, o2, n, act, 0, m);
        verdict = e1 || e2 ? 2 : memcmp(o1, o2, sizeof(float) * (size_t)(m * n)) ? 1 : 0;
    }
    free(x), free(scale), free(bias), free(res), free(o1), free(o2), free(q), free(colsum);
    return verdict;
}
#endif

static int run_checks(void) {
    static const long long shapes[][5] = {/* m, k, n, act, conv */
                                          {37, 70, 45, 1, 0}, {64, 64, 64, 0, 0}, {16, 33, 32, 3, 0},
                                          {9, 512, 96, 0, 0}, {40, 19, 40, 2, 1}};
    lcg_state = 12345u;
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        int v = check_one(shapes[i][0], shapes[i][1], shapes[i][2], (int)shapes[i][3], (int)shapes[i][4]);
        if (v)
            return v;
    }
#ifdef __AVX512VNNI__
    int v8 = check_i8(37, 300, 45, 1);
    v8 = v8 ? v8 : check_i8(64, 64, 64, 0);
    if (v8)
        return v8;
#endif
    return check_attention();
}

/* Runs the check in a fork()ed child, single-threaded, with the tiles on, waiting at most timeout_ms. Returns 0
 * when it passed; 1 a mismatch, 2 the child ran out of memory or was refused the tiles, 3 it did not finish in
 * time (killed), 4 fork failed, 128 + n it died of signal n (SIGILL: no AMX after all). */
int sk_amx_selfcheck(int timeout_ms) {
    pid_t pid = fork();
    if (pid < 0)
        return 4;
    if (pid == 0) {
        /* a fault here is a verdict: no inherited handler (Python's faulthandler) reports it, no core file */
        int fatal[] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE};
        for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
            signal(fatal[i], SIG_DFL);
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        if (sk_amx_request() != 0)
            _exit(2);
        sk_amx_enable(1, 1);
        _exit(run_checks());
    }
    struct timespec step = {0, 1000000};
    int status = 0;
    for (long long waited = 0;; waited++) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            break;
        if (got < 0)
            return 4;
        if (waited >= timeout_ms) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return 3;
        }
        nanosleep(&step, NULL);
    }
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 4;
}

#endif /* SK_AMX */
