/* serve's native LayerNorm over the last dimension, with the residual add before it fused:
 *   out[r] = (s - mean(s)) / sqrt(var(s) + eps) * gamma + beta,   s = x[r] + res[r]  (res NULL: s = x[r])
 * PyTorch's semantics: biased variance, eps inside the square root, gamma / beta optional (elementwise_affine off,
 * or bias=False). Two passes over each row for the statistics (mean, then the squared deviations: no cancellation
 * as in E[s^2] - mean^2), one to write; a row of a transformer (384-1024 floats) stays in L1 across them.
 *
 * Rows are independent, so `rows [r0, r1)` lets lanes (serve.backend.cpu_threads) split the work, as the other
 * kernels do. `out` may be `x` or `res` (in place): each row is read before it is written, element by element.
 * Built once per ISA with serve_kernels.c into the same library (setup.py); the vector names come from sk_isa.h. */
#include <math.h>

#include "sk_isa.h"

/* s = x + res written to dst (res NULL: dst is x, nothing written); returns sum(s). */
static float add_and_sum(const float *x, const float *res, float *dst, long long n) {
    V acc = vzero();
    long long j = 0;
    float tail = 0.0f;
    if (res) {
        for (; j + VL <= n; j += VL) {
            V s = vadd(vload(x + j), vload(res + j));
            vstore(dst + j, s);
            acc = vadd(acc, s);
        }
        for (; j < n; j++) {
            dst[j] = x[j] + res[j];
            tail += dst[j];
        }
    } else {
        for (; j + VL <= n; j += VL)
            acc = vadd(acc, vload(x + j));
        for (; j < n; j++)
            tail += x[j];
    }
    return hsum(acc) + tail;
}

static float squared_deviations(const float *s, long long n, float mean) {
    V acc = vzero(), m = vset1(mean);
    long long j = 0;
    for (; j + VL <= n; j += VL) {
        V d = vsub(vload(s + j), m);
        acc = vfma(d, d, acc);
    }
    float tail = 0.0f;
    for (; j < n; j++)
        tail += (s[j] - mean) * (s[j] - mean);
    return hsum(acc) + tail;
}

static void normalize(const float *s, float *out, long long n, float mean, float rstd, const float *gamma,
                      const float *beta) {
    V m = vset1(mean), r = vset1(rstd);
    long long j = 0;
    for (; j + VL <= n; j += VL) {
        V y = vmul(vsub(vload(s + j), m), r);
        if (gamma)
            y = beta ? vfma(y, vload(gamma + j), vload(beta + j)) : vmul(y, vload(gamma + j));
        else if (beta)
            y = vadd(y, vload(beta + j));
        vstore(out + j, y);
    }
    for (; j < n; j++) {
        float y = (s[j] - mean) * rstd;
        if (gamma)
            y *= gamma[j];
        if (beta)
            y += beta[j];
        out[j] = y;
    }
}

int SK_EXPORT(layernorm)(const float *x, const float *res, float *out, long long n, const float *gamma,
                         const float *beta, float eps, long long r0, long long r1) {
    if (n <= 0)
        return 0;
    for (long long r = r0; r < r1; r++) {
        const float *xr = x + r * n, *rr = res ? res + r * n : 0;
        float *orow = out + r * n;
        const float *s = rr ? orow : xr; /* the sum lands in out, then is normalized there */
        float mean = add_and_sum(xr, rr, orow, n) / (float)n;
        float var = squared_deviations(s, n, mean) / (float)n;
        normalize(s, orow, n, mean, 1.0f / sqrtf(var + eps), gamma, beta);
    }
    return 0;
}

/* RMSNorm (transformers' LlamaRMSNorm, in float32), with the residual add before it fused and both results kept:
 *   s = x[r] + res[r] (res NULL: s = x[r]);  sum_out[r] = s when sum_out is given;
 *   out[r] = s / sqrt(mean(s^2) + eps) * gamma   (gamma NULL: no scale)
 * Rows are `ldx`, `ldr`, `lds`, `ldo` floats apart (column slices of wider arrays). One pass for the sum of squares
 * (writing s), one to write out. `out` may be x, res or sum_out (each element is read before it is written). */
int SK_EXPORT(rmsnorm)(const float *x, long long ldx, const float *res, long long ldr, float *sum_out, long long lds,
                       float *out, long long ldo, long long n, const float *gamma, float eps, long long r0,
                       long long r1) {
    if (n <= 0)
        return 0;
    for (long long r = r0; r < r1; r++) {
        const float *xr = x + r * ldx, *rr = res ? res + r * ldr : 0;
        float *orow = out + r * ldo, *srow = sum_out ? sum_out + r * lds : (rr ? orow : 0);
        V acc = vzero();
        float tail = 0.0f;
        long long j = 0;
        for (; j + VL <= n; j += VL) {
            V s = vload(xr + j);
            if (rr) {
                s = vadd(s, vload(rr + j));
                vstore(srow + j, s);
            } else if (srow) {
                vstore(srow + j, s);
            }
            acc = vfma(s, s, acc);
        }
        for (; j < n; j++) {
            float s = xr[j] + (rr ? rr[j] : 0.0f);
            if (srow)
                srow[j] = s;
            tail += s * s;
        }
        const float *s = srow ? srow : xr;
        float rstd = 1.0f / sqrtf((hsum(acc) + tail) / (float)n + eps);
        V rv = vset1(rstd);
        for (j = 0; j + VL <= n; j += VL) {
            V y = vmul(vload(s + j), rv);
            vstore(orow + j, gamma ? vmul(y, vload(gamma + j)) : y);
        }
        for (; j < n; j++)
            orow[j] = s[j] * rstd * (gamma ? gamma[j] : 1.0f);
    }
    return 0;
}
