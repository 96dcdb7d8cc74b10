// im2col for convolution as a matrix product: x (N, C, H, W) -> cols (N, C*kh*kw, OH*OW), zero padding, row
// c*kh*kw + i*kw + j (the order of an OIHW weight reshaped to (O, C*kh*kw)). One thread per column element,
// writes coalesced along OH*OW. 32-bit magic division when the index space fits, 64-bit otherwise.

template <class I, class D>
__device__ __forceinline__ void im2col_loop(const T* x, T* cols, I total, D l_d, D kw_d, D kh_d, D ow_d, int H, int W,
                                            int sh, int sw, int ph, int pw, int dh, int dw) {
    for (I i = (I)global_thread(); i < total; i += (I)grid_threads()) {
        I t = l_d.div(i);
        int l = (int)(i - t * (I)l_d.d);
        I t2 = kw_d.div(t);
        int j = (int)(t - t2 * (I)kw_d.d);
        I nc = kh_d.div(t2);  // n * C + c
        int ki = (int)(t2 - nc * (I)kh_d.d);
        int oh = (int)ow_d.div((I)l);
        int ow = l - oh * (int)ow_d.d;
        int h = oh * sh - ph + ki * dh, w = ow * sw - pw + j * dw;
        if (h >= 0 && h < H && w >= 0 && w < W) cols[i] = x[(long long)nc * H * W + (long long)h * W + w];
        else store_f32(cols + i, 0.f);
    }
}

// (l_*): OH*OW, (kw_*): kw, (kh_*): kh, (ow_*): OW, each a divisor with its magic numbers (see serve_div).
extern "C" __global__ void im2col(const T* x, T* cols, long long total, unsigned int l_dv, unsigned int l_m,
                                  unsigned int l_s, unsigned int kw_dv, unsigned int kw_m, unsigned int kw_s,
                                  unsigned int kh_dv, unsigned int kh_m, unsigned int kh_s, unsigned int ow_dv,
                                  unsigned int ow_m, unsigned int ow_s, int H, int W, int sh, int sw, int ph, int pw,
                                  int dh, int dw) {
    if (total <= 0x7fffffffLL) {
        im2col_loop<unsigned int, serve_div>(x, cols, (unsigned int)total, make_div(l_dv, l_m, l_s),
                                             make_div(kw_dv, kw_m, kw_s), make_div(kh_dv, kh_m, kh_s),
                                             make_div(ow_dv, ow_m, ow_s), H, W, sh, sw, ph, pw, dh, dw);
    } else {
        serve_div64 l_d = {(long long)l_dv}, kw_d = {(long long)kw_dv}, kh_d = {(long long)kh_dv},
                    ow_d = {(long long)ow_dv};
        im2col_loop<long long, serve_div64>(x, cols, total, l_d, kw_d, kh_d, ow_d, H, W, sh, sw, ph, pw, dh, dw);
    }
}
