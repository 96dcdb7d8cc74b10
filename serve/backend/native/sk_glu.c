/* The decoder block's elementwise kernels beside its products (serve/zoo/decoders, bound by
 * serve/backend/cpu_decode.py):
 * - the gated MLP's act(gate) * up from the fused gate/up product (Llama's SwiGLU: silu; Gemma's GeGLU: gelu_tanh),
 *   one pass instead of numpy's four temporaries of (T, intermediate);
 * - rotary embeddings applied in place to the heads of q and k where the QKV product wrote them (transformers'
 *   rotate_half layout: dim i paired with dim i + rot/2 of each head), instead of numpy's slices, products and
 *   concatenate per call.
 * Rows are independent, so `rows [r0, r1)` lets lanes split the work, as the other kernels do. Built once per ISA
 * into the same library as serve_kernels.c (setup.py); the vector names come from sk_isa.h. */
#include "sk_isa.h"

enum { GLU_GELU_TANH = 4, GLU_SILU = 5 }; /* the indices of cpu_native.ACTIVATIONS */

static inline V glu_act(V v, int act) {
    if (act == GLU_SILU)
        return vdiv(v, vadd(vset1(1.0f), v_exp(vsub(vzero(), v))));
    /* 0.5 v (1 + tanh(u)), u = sqrt(2/pi) (v + 0.044715 v^3); tanh(u) = 1 - 2 / (exp(2u) + 1) */
    V u = vmul(vset1(0.7978845608028654f), vfma(vmul(vmul(v, v), v), vset1(0.044715f), v));
    V t = vsub(vset1(1.0f), vdiv(vset1(2.0f), vadd(v_exp(vadd(u, u)), vset1(1.0f))));
    return vmul(vmul(vset1(0.5f), v), vadd(vset1(1.0f), t));
}

/* out[r][j] = act(gu[r][j]) * gu[r][half + j] for j < half; gu rows ldg floats apart, out rows ldo apart.
 * Returns -1 for an unknown activation. */
int SK_EXPORT(glu)(const float *gu, long long ldg, long long half, float *out, long long ldo, int act, long long r0,
                   long long r1) {
    if (act != GLU_SILU && act != GLU_GELU_TANH)
        return -1;
    for (long long r = r0; r < r1; r++) {
        const float *g = gu + r * ldg, *u = g + half;
        float *o = out + r * ldo;
        for (long long j = 0; j < half; j += VL) {
            VMask m = vmask((int)(half - j < VL ? half - j : VL));
            vstore_m(o + j, m, vmul(glu_act(vload_m(g + j, m), act), vload_m(u + j, m)));
        }
    }
    return 0;
}

/* In place, for rows r0..r1-1 of x (rows ldx floats apart) and heads 0..heads-1 of head_dim floats each from the
 * row's start: (x1, x2) = (x[i], x[i + rot/2]) for i < rot/2 becomes (x1 cos - x2 sin, x2 cos + x1 sin), with
 * cos[r][i], sin[r][i] (rows ldc floats apart); dims rot..head_dim-1 are left as they are. */
int SK_EXPORT(rope)(float *x, long long ldx, long long heads, long long head_dim, long long rot, const float *cos,
                    const float *sin, long long ldc, long long r0, long long r1) {
    long long half = rot / 2;
    if (rot < 0 || rot > head_dim || rot % 2)
        return -1;
    for (long long r = r0; r < r1; r++) {
        const float *cr = cos + r * ldc, *sr = sin + r * ldc;
        for (long long h = 0; h < heads; h++) {
            float *p = x + r * ldx + h * head_dim;
            for (long long i = 0; i < half; i += VL) {
                VMask m = vmask((int)(half - i < VL ? half - i : VL));
                V c = vload_m(cr + i, m), s = vload_m(sr + i, m);
                V x1 = vload_m(p + i, m), x2 = vload_m(p + half + i, m);
                vstore_m(p + i, m, vsub(vmul(x1, c), vmul(x2, s)));
                vstore_m(p + half + i, m, vfma(x1, s, vmul(x2, c)));
            }
        }
    }
    return 0;
}
