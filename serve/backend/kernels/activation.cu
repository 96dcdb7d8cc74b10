// Elementwise activations, optionally fused with a per-channel affine: y = act(x * scale[c] + shift[c]).
// x is viewed as (outer, C, inner): linear's bias + activation (inner = 1), a convolution's bias (+ ReLU) and
// batch-norm inference with a fused ReLU (inner = H * W). y may alias x (in place).

#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_GELU 2
#define ACT_GELU_TANH 3
#define ACT_SILU 4

__device__ __forceinline__ float apply_act(float v, int act) {
    switch (act) {
        case ACT_RELU:
            return v > 0.f ? v : (v != v ? v : 0.f);  // NaN stays NaN, as torch.relu
        case ACT_GELU:
            return 0.5f * v * (1.f + erff(v * 0.7071067811865475f));
        case ACT_GELU_TANH: {
            const float k_beta = 0.7978845608028654f;  // sqrt(2 / pi)
            float inner = k_beta * (v + 0.044715f * v * v * v);
            return 0.5f * v * (1.f + tanhf(inner));
        }
        case ACT_SILU:
            return v / (1.f + expf(-v));
        default:
            return v;
    }
}

template <class I, class D>
__device__ __forceinline__ void affine_loop(const T* x, T* y, const void* scale, const void* shift, int scale_kind,
                                            int shift_kind, I total, D inner, D channels, int act) {
    for (I i = (I)global_thread(); i < total; i += (I)grid_threads()) {
        I q = inner.div(i);
        I c = q - channels.div(q) * (I)channels.d;
        float v = load_f32(x + i) * load_param(scale, scale_kind, c, 1.f) + load_param(shift, shift_kind, c, 0.f);
        store_f32(y + i, apply_act(v, act));
    }
}

// scale_kind / shift_kind: 0 = absent (1 / 0), 1 = float32 array, 2 = array of T (see load_param).
// (inner_d, inner_m, inner_s) and (c_d, c_m, c_s): divisors with their magic numbers (see serve_div).
extern "C" __global__ void bias_activation(const T* x, T* y, const void* scale, const void* shift, int scale_kind,
                                           int shift_kind, long long total, unsigned int inner_d,
                                           unsigned int inner_m, unsigned int inner_s, unsigned int c_d,
                                           unsigned int c_m, unsigned int c_s, int act) {
    if (scale_kind == 0 && shift_kind == 0) {
        for (long long i = global_thread(); i < total; i += grid_threads())
            store_f32(y + i, apply_act(load_f32(x + i), act));
        return;
    }
    if (total <= 0x7fffffffLL) {
        affine_loop<unsigned int, serve_div>(x, y, scale, shift, scale_kind, shift_kind, (unsigned int)total,
                                             make_div(inner_d, inner_m, inner_s), make_div(c_d, c_m, c_s), act);
    } else {
        serve_div64 inner = {(long long)inner_d}, channels = {(long long)c_d};
        affine_loop<long long, serve_div64>(x, y, scale, shift, scale_kind, shift_kind, total, inner, channels, act);
    }
}
