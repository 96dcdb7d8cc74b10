// 2-d pooling over NCHW planes, one thread per output element, with PyTorch's window arithmetic.
// Index space: planes * OH * OW (32-bit magic division when it fits, 64-bit otherwise); each plane H * W < 2^31.

// max: padding never wins (only taps inside the input are read); a NaN in the window wins and stays (PyTorch
// updates on `v > best || isnan(v)`); idx is the flat h * W + w of the winner, starting at the first tap inside.
template <class I, class D>
__device__ __forceinline__ void max_pool_loop(const T* x, T* y, long long* idx, I total, D ow_d, D oh_d, int H, int W,
                                              int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
    for (I i = (I)global_thread(); i < total; i += (I)grid_threads()) {
        I q = ow_d.div(i), plane = oh_d.div(q);
        int ow = (int)(i - q * (I)ow_d.d), oh = (int)(q - plane * (I)oh_d.d);
        int hstart = oh * sh - ph, wstart = ow * sw - pw;
        int hend = min(hstart + (kh - 1) * dh + 1, H), wend = min(wstart + (kw - 1) * dw + 1, W);
        while (hstart < 0) hstart += dh;
        while (wstart < 0) wstart += dw;
        const T* xp = x + (long long)plane * H * W;
        float best = -SERVE_INF;
        int at = hstart * W + wstart;
        for (int h = hstart; h < hend; h += dh) {
            for (int w = wstart; w < wend; w += dw) {
                float v = load_f32(xp + h * W + w);
                if (v > best || v != v) {
                    best = v;
                    at = h * W + w;
                }
            }
        }
        store_f32(y + i, best);
        if (idx) idx[i] = at;
    }
}

// idx may be NULL (no indices). (ow_*), (oh_*): divisors OW and OH with their magic numbers (see serve_div).
extern "C" __global__ void max_pool2d(const T* x, T* y, long long* idx, long long total, unsigned int ow_dv,
                                      unsigned int ow_m, unsigned int ow_s, unsigned int oh_dv, unsigned int oh_m,
                                      unsigned int oh_s, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw,
                                      int dh, int dw) {
    if (total <= 0x7fffffffLL) {
        max_pool_loop<unsigned int, serve_div>(x, y, idx, (unsigned int)total, make_div(ow_dv, ow_m, ow_s),
                                               make_div(oh_dv, oh_m, oh_s), H, W, kh, kw, sh, sw, ph, pw, dh, dw);
    } else {
        serve_div64 ow_d = {(long long)ow_dv}, oh_d = {(long long)oh_dv};
        max_pool_loop<long long, serve_div64>(x, y, idx, total, ow_d, oh_d, H, W, kh, kw, sh, sw, ph, pw, dh, dw);
    }
}

// average: a window stops at the padding's far edge (ceil_mode windows may run past it); the divisor is
// divisor_override when nonzero, else the window size counting padding (count_include_pad) or not.
template <class I, class D>
__device__ __forceinline__ void avg_pool_loop(const T* x, T* y, I total, D ow_d, D oh_d, int H, int W, int kh, int kw,
                                              int sh, int sw, int ph, int pw, int include_pad, int divisor_override) {
    for (I i = (I)global_thread(); i < total; i += (I)grid_threads()) {
        I q = ow_d.div(i), plane = oh_d.div(q);
        int ow = (int)(i - q * (I)ow_d.d), oh = (int)(q - plane * (I)oh_d.d);
        int hstart = oh * sh - ph, wstart = ow * sw - pw;
        int hend = min(hstart + kh, H + ph), wend = min(wstart + kw, W + pw);
        int pool = (hend - hstart) * (wend - wstart);
        hstart = max(hstart, 0);
        wstart = max(wstart, 0);
        hend = min(hend, H);
        wend = min(wend, W);
        if (hstart >= hend || wstart >= wend) {
            store_f32(y + i, 0.f);
            continue;
        }
        const T* xp = x + (long long)plane * H * W;
        float sum = 0.f;
        for (int h = hstart; h < hend; ++h)
            for (int w = wstart; w < wend; ++w) sum += load_f32(xp + h * W + w);
        int divisor = divisor_override ? divisor_override : (include_pad ? pool : (hend - hstart) * (wend - wstart));
        store_f32(y + i, sum / (float)divisor);
    }
}

extern "C" __global__ void avg_pool2d(const T* x, T* y, long long total, unsigned int ow_dv, unsigned int ow_m,
                                      unsigned int ow_s, unsigned int oh_dv, unsigned int oh_m, unsigned int oh_s,
                                      int H, int W, int kh, int kw, int sh, int sw, int ph, int pw, int include_pad,
                                      int divisor_override) {
    if (total <= 0x7fffffffLL) {
        avg_pool_loop<unsigned int, serve_div>(x, y, (unsigned int)total, make_div(ow_dv, ow_m, ow_s),
                                               make_div(oh_dv, oh_m, oh_s), H, W, kh, kw, sh, sw, ph, pw,
                                               include_pad, divisor_override);
    } else {
        serve_div64 ow_d = {(long long)ow_dv}, oh_d = {(long long)oh_dv};
        avg_pool_loop<long long, serve_div64>(x, y, total, ow_d, oh_d, H, W, kh, kw, sh, sw, ph, pw, include_pad,
                                              divisor_override);
    }
}

// adaptive average: output i of OH averages rows floor(i * H / OH) .. ceil((i + 1) * H / OH) - 1 (same for W).
template <class I, class D>
__device__ __forceinline__ void adaptive_loop(const T* x, T* y, I total, D ow_d, D oh_d, int H, int W) {
    long long OH = (long long)oh_d.d, OW = (long long)ow_d.d;
    for (I i = (I)global_thread(); i < total; i += (I)grid_threads()) {
        I q = ow_d.div(i), plane = oh_d.div(q);
        long long ow = (long long)(i - q * (I)ow_d.d), oh = (long long)(q - plane * (I)oh_d.d);
        int hs = (int)(oh * H / OH), he = (int)(((oh + 1) * H + OH - 1) / OH);
        int ws = (int)(ow * W / OW), we = (int)(((ow + 1) * W + OW - 1) / OW);
        const T* xp = x + (long long)plane * H * W;
        float sum = 0.f;
        for (int h = hs; h < he; ++h)
            for (int w = ws; w < we; ++w) sum += load_f32(xp + h * W + w);
        store_f32(y + i, sum / (float)((he - hs) * (we - ws)));
    }
}

extern "C" __global__ void adaptive_avg_pool2d(const T* x, T* y, long long total, unsigned int ow_dv,
                                               unsigned int ow_m, unsigned int ow_s, unsigned int oh_dv,
                                               unsigned int oh_m, unsigned int oh_s, int H, int W) {
    if (total <= 0x7fffffffLL) {
        adaptive_loop<unsigned int, serve_div>(x, y, (unsigned int)total, make_div(ow_dv, ow_m, ow_s),
                                               make_div(oh_dv, oh_m, oh_s), H, W);
    } else {
        serve_div64 ow_d = {(long long)ow_dv}, oh_d = {(long long)oh_dv};
        adaptive_loop<long long, serve_div64>(x, y, total, ow_d, oh_d, H, W);
    }
}
