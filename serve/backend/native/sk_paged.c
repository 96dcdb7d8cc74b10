/* serve's decode attention over a paged KV cache (serve/zoo/decoders/step.py's KVCache): one new query row per
 * sequence, every sequence of the step in one call, reading each sequence's keys and values where they lie in the
 * cache's blocks (its block table) instead of gathering them into new arrays first.
 *
 *   out[s, h] = sum_j p[j] v[s, j, g],  p = softmax(cap(q[s, h] . k[s, j, g] * scale)) over lo_s <= j < ctx_s
 *
 * for query head h of KV head g = h / G (G = heads / kv_heads, transformers' repeat_kv order), key j of sequence s
 * at cache[table[s][j / bs]][j % bs][g]; lo_s = max(0, ctx_s - window) with a sliding window, else 0; cap(x) =
 * softcap * tanh(x / softcap) when softcap > 0 (Gemma 2), else x.
 *
 * Work goes by (sequence, KV head) pairs [i0, i1), so lanes split a step's pairs; a pair's G query heads share
 * each key row and value row they read (GQA reads K/V once per group). Scores are kept per pair (G * ctx floats),
 * the softmax normalised once at the end (out = sum_j e^(x_j - max) v_j / sum_j e^(x_j - max)).
 * Built once per ISA with serve_kernels.c into the same library (setup.py); the vector names come from sk_isa.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sk_isa.h"

/* The sum of v's lanes by halving (order fixed per build). */
static inline float vsum(V v) {
#if SK_ISA == 512
    return _mm512_reduce_add_ps(v);
#else
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
#endif
}

/* v where the mask is set, 0 elsewhere */
static inline V vkeep(V v, VMask m) {
#if SK_ISA == 512
    return _mm512_maskz_mov_ps(m, v);
#else
    return _mm256_and_ps(v, _mm256_castsi256_ps(m));
#endif
}

static inline float dot(const float *a, const float *b, long long d) {
    V acc = vzero();
    long long c = 0;
    for (; c + VL <= d; c += VL)
        acc = vfma(vload(a + c), vload(b + c), acc);
    if (c < d) {
        VMask m = vmask((int)(d - c));
        acc = vfma(vload_m(a + c, m), vload_m(b + c, m), acc);
    }
    return vsum(acc);
}

/* x[j] = cap(x[j] * scale) for j < n, then x[j] = exp(x[j] - max); returns the sum of the exps. */
static float softmax_unnormalised(float *x, long long n, float scale, float softcap) {
    float mx = -__builtin_inff();
    for (long long j = 0; j < n; j++) {
        float v = x[j] * scale;
        if (softcap > 0.0f) {
            V u = vset1(2.0f * v / softcap); /* tanh(t) = 1 - 2 / (exp(2 t) + 1) */
            float e[VL];
            vstore(e, v_exp(u));
            v = softcap * (1.0f - 2.0f / (e[0] + 1.0f));
        }
        x[j] = v;
        mx = v > mx ? v : mx;
    }
    V vm = vset1(mx), acc = vzero();
    long long j = 0;
    for (; j + VL <= n; j += VL) {
        V e = v_exp(vsub(vload(x + j), vm));
        vstore(x + j, e);
        acc = vadd(acc, e);
    }
    if (j < n) {
        VMask m = vmask((int)(n - j));
        V e = v_exp(vsub(vload_m(x + j, m), vm));
        vstore_m(x + j, m, e);
        acc = vadd(acc, vkeep(e, m));
    }
    return vsum(acc);
}

int SK_EXPORT(paged_decode)(const float *q, const float *kc, const float *vc, const int32_t *tables,
                            long long max_blocks, const int64_t *ctx_lens, float *out, long long heads,
                            long long kvh, long long d, long long bs, float scale, float softcap, long long window,
                            long long i0, long long i1) {
    const long long G = heads / kvh;
    long long longest = 0;
    for (long long i = i0; i < i1; i++)
        longest = ctx_lens[i / kvh] > longest ? ctx_lens[i / kvh] : longest;
    float *scores = malloc(sizeof(float) * (size_t)(G * (longest > 0 ? longest : 1) + G)), *sums = scores;
    if (!scores)
        return -1;
    sums = scores + G * (longest > 0 ? longest : 1);
    for (long long i = i0; i < i1; i++) {
        const long long s = i / kvh, g = i % kvh, ctx = ctx_lens[s];
        const long long lo = window > 0 && ctx > window ? ctx - window : 0, n = ctx - lo;
        const int32_t *table = tables + s * max_blocks;
        const float *qs = q + (s * heads + g * G) * d; /* the group's G query rows, (G, d) */
        float *os = out + (s * heads + g * G) * d;
        memset(os, 0, sizeof(float) * (size_t)(G * d));
        if (n <= 0)
            continue;
        for (long long j = lo; j < ctx; j++) {
            const float *krow = kc + (((long long)table[j / bs] * bs + j % bs) * kvh + g) * d;
            for (long long h = 0; h < G; h++)
                scores[h * n + j - lo] = dot(qs + h * d, krow, d);
        }
        for (long long h = 0; h < G; h++)
            sums[h] = softmax_unnormalised(scores + h * n, n, scale, softcap);
        for (long long j = lo; j < ctx; j++) {
            const float *vrow = vc + (((long long)table[j / bs] * bs + j % bs) * kvh + g) * d;
            for (long long h = 0; h < G; h++) {
                V p = vset1(scores[h * n + j - lo]);
                float *o = os + h * d;
                long long c = 0;
                for (; c + VL <= d; c += VL)
                    vstore(o + c, vfma(p, vload(vrow + c), vload(o + c)));
                if (c < d) {
                    VMask m = vmask((int)(d - c));
                    vstore_m(o + c, m, vfma(p, vload_m(vrow + c, m), vload_m(o + c, m)));
                }
            }
        }
        for (long long h = 0; h < G; h++) {
            float r = 1.0f / sums[h];
            V vr = vset1(r);
            float *o = os + h * d;
            long long c = 0;
            for (; c + VL <= d; c += VL)
                vstore(o + c, vmul(vload(o + c), vr));
            for (; c < d; c++)
                o[c] *= r;
        }
    }
    free(scores);
    return 0;
}
