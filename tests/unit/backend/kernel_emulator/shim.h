// Host emulation of the CUDA subset serve's kernels use, for checking their logic with g++ (no GPU, no nvcc).
//
// Each CUDA thread of a block is a fiber (ucontext) on the calling OS thread; the blocks of a grid run one after
// another. A fiber runs until it reaches a barrier (__syncthreads, or the warp barrier of a shuffle / __syncwarp),
// then another ready fiber runs, by one of three deterministic schedules (round-robin sweeps, lowest thread first,
// highest thread first; see emu_schedule): a block of 1024 threads costs no OS threads, and a kernel whose result
// depends on the schedule has a race. threadIdx / blockIdx / emu_tid are set by the scheduler before each resume
// (globals with external linkage: a call to swapcontext may change them, so compiled code reloads them after a
// barrier). Warp shuffles exchange values through per-warp slots between two warp barriers (only full-warp masks
// are emulated); __shared__ variables are function statics (one copy: blocks never run concurrently). A block where
// every live thread waits and none can run (a barrier some thread skipped, or left the block before) aborts with a
// message. Only C headers: it compiles in well under a second.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#ifndef EMU_STACK
#define EMU_STACK (128 * 1024)
#endif

struct emu_dim3 {
    unsigned x, y, z;
};
emu_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
unsigned emu_tid;  // linear thread index in the block: x + y * blockDim.x

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static

// ---- fibers and barriers ----------------------------------------------------------------------------------------
enum { EMU_READY = 0, EMU_WAITING = 1, EMU_DONE = 2 };
enum { EMU_SYNCTHREADS = 1, EMU_WARP = 2 };
static const char* emu_tag_name(int tag) { return tag == EMU_SYNCTHREADS ? "__syncthreads" : "a warp op"; }

struct emu_fiber {
    ucontext_t ctx;
    int state, tag;
};
static emu_fiber* emu_fibers;
static ucontext_t emu_sched;
static unsigned emu_done, emu_lo, emu_hi;  // fibers finished; bounds of the ready ones (for emu_schedule)

struct emu_barrier {
    unsigned n, count;
    int tag;
    unsigned* waiters;  // n slots
};

static void emu_barrier_init(emu_barrier* b, unsigned n) {
    b->n = n;
    b->count = 0;
    b->tag = 0;
    b->waiters = new unsigned[n];
}

static void emu_wait(emu_barrier* b, int tag) {
    if (b->count == 0) {
        b->tag = tag;
    } else if (b->tag != tag) {
        fprintf(stderr, "kernel emulator: thread %u of block %u reached %s while others wait at %s (divergent "
                "barrier)\n", emu_tid, blockIdx.x, emu_tag_name(tag), emu_tag_name(b->tag));
        abort();
    }
    if (++b->count == b->n) {  // the last one releases the others and goes on
        for (unsigned i = 0; i + 1 < b->n; ++i) {
            unsigned w = b->waiters[i];
            emu_fibers[w].state = EMU_READY;
            emu_lo = w < emu_lo ? w : emu_lo;
            emu_hi = w > emu_hi ? w : emu_hi;
        }
        b->count = 0;
        return;
    }
    unsigned me = emu_tid;
    b->waiters[b->count - 1] = me;
    emu_fibers[me].state = EMU_WAITING;
    emu_fibers[me].tag = tag;
    swapcontext(&emu_fibers[me].ctx, &emu_sched);  // back here once released (the scheduler restored the ids)
}

struct emu_warp_state {
    unsigned long long slot[32];
    emu_barrier bar;
};
static emu_warp_state* emu_warps;
static emu_barrier emu_block_bar;

inline void __syncthreads() { emu_wait(&emu_block_bar, EMU_SYNCTHREADS); }
inline void __syncwarp(unsigned mask = 0xffffffffu);

// ---- warp shuffles ------------------------------------------------------------------------------------------
static void emu_full_mask(unsigned mask, const char* what) {
    if (mask != 0xffffffffu) {
        fprintf(stderr, "kernel emulator: %s with mask %#x: only full-warp masks are emulated\n", what, mask);
        abort();
    }
}

template <class V>
inline V emu_shfl(V v, unsigned src_lane) {
    static_assert(sizeof(V) <= sizeof(unsigned long long), "shuffle of a value wider than 8 bytes");
    emu_warp_state& w = emu_warps[emu_tid / 32];
    unsigned lane = emu_tid % 32, width = w.bar.n;
    memcpy(&w.slot[lane], &v, sizeof(V));
    emu_wait(&w.bar, EMU_WARP);
    V r;
    memcpy(&r, &w.slot[src_lane < width ? src_lane : lane], sizeof(V));
    emu_wait(&w.bar, EMU_WARP);
    return r;
}

inline void __syncwarp(unsigned mask) {
    emu_full_mask(mask, "__syncwarp");
    emu_wait(&emu_warps[emu_tid / 32].bar, EMU_WARP);
}

template <class V>
inline V __shfl_sync(unsigned mask, V v, int src, int width = 32) {
    emu_full_mask(mask, "__shfl_sync");
    unsigned lane = emu_tid % 32;
    return emu_shfl(v, (lane & ~(unsigned)(width - 1)) + ((unsigned)src & (unsigned)(width - 1)));
}
template <class V>
inline V __shfl_xor_sync(unsigned mask, V v, int o, int width = 32) {
    emu_full_mask(mask, "__shfl_xor_sync");
    unsigned lane = emu_tid % 32, src = lane ^ (unsigned)o;
    return emu_shfl(v, (src & ~(unsigned)(width - 1)) == (lane & ~(unsigned)(width - 1)) ? src : lane);
}
template <class V>
inline V __shfl_down_sync(unsigned mask, V v, unsigned d, int width = 32) {
    emu_full_mask(mask, "__shfl_down_sync");
    unsigned lane = emu_tid % 32, src = lane + d, end = (lane & ~(unsigned)(width - 1)) + (unsigned)width;
    return emu_shfl(v, src < end ? src : lane);
}

// ---- device intrinsics ------------------------------------------------------------------------------------------
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline float emu_h2f(unsigned short h) { _Float16 v; memcpy(&v, &h, 2); return (float)v; }  // cvt.f32.f16
inline unsigned short emu_f2h(float f) { _Float16 v = (_Float16)f; unsigned short h; memcpy(&h, &v, 2); return h; }

#define EMU_MINMAX(t)                                   \
    inline t min(t a, t b) { return b < a ? b : a; }    \
    inline t max(t a, t b) { return a < b ? b : a; }
EMU_MINMAX(int)
EMU_MINMAX(unsigned)
EMU_MINMAX(long long)
EMU_MINMAX(unsigned long long)
#undef EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }

// ---- launch -----------------------------------------------------------------------------------------------------
static void (*emu_body)(const void*);
static const void* emu_body_arg;

static void emu_entry() {
    emu_body(emu_body_arg);
    emu_fibers[emu_tid].state = EMU_DONE;
    ++emu_done;  // returns to uc_link: the scheduler
}

template <class F>
static void emu_call(const void* f) { (*static_cast<const F*>(f))(); }

static void emu_resume(unsigned t, unsigned bx) {
    emu_tid = t;
    threadIdx = {t % bx, t / bx, 0};
    swapcontext(&emu_sched, &emu_fibers[t].ctx);
}

// Runs the nt fibers of block b to completion. policy 0: sweeps in thread order, each ready fiber once per sweep;
// 1: always the lowest ready thread (a warp runs as far ahead as it can); 2: always the highest ready thread.
static void emu_schedule(unsigned b, unsigned nt, unsigned bx, int policy) {
    emu_done = 0;
    emu_lo = 0;
    emu_hi = nt - 1;
    while (emu_done < nt) {
        bool ran = false;
        if (policy == 0) {
            for (unsigned t = 0; t < nt; ++t)
                if (emu_fibers[t].state == EMU_READY) {
                    emu_resume(t, bx);
                    ran = true;
                }
        } else {  // every ready fiber lies in [emu_lo, emu_hi]
            for (unsigned i = emu_lo; i <= emu_hi && i < nt; ++i) {
                unsigned t = policy == 1 ? i : emu_hi - (i - emu_lo);
                if (emu_fibers[t].state == EMU_READY) {
                    (policy == 1 ? emu_lo : emu_hi) = t;
                    emu_resume(t, bx);
                    ran = true;
                    break;
                }
            }
        }
        if (!ran && emu_done < nt) {
            for (unsigned t = 0; t < nt; ++t)
                if (emu_fibers[t].state == EMU_WAITING) {
                    fprintf(stderr, "kernel emulator: deadlock in block %u: thread %u waits at %s, %u of %u "
                            "threads have left the block\n", b, t, emu_tag_name(emu_fibers[t].tag), emu_done, nt);
                    break;
                }
            abort();
        }
    }
}

// Runs f() as a grid of gx blocks of (bx, by) threads under schedule `policy` (see emu_schedule). Launches must not
// overlap (the caller serializes them).
template <class F>
static void emu_run(unsigned gx, unsigned bx, unsigned by, int policy, F f) {
    blockDim = {bx, by, 1};
    gridDim = {gx, 1, 1};
    unsigned nt = bx * by, nw = (nt + 31) / 32;
    emu_barrier_init(&emu_block_bar, nt);
    emu_warps = new emu_warp_state[nw];
    for (unsigned w = 0; w < nw; ++w) emu_barrier_init(&emu_warps[w].bar, nt - 32 * w < 32 ? nt - 32 * w : 32);
    emu_fibers = new emu_fiber[nt];
    char* stacks = static_cast<char*>(malloc((size_t)nt * EMU_STACK));
    if (!stacks) {
        fprintf(stderr, "kernel emulator: no memory for %u fiber stacks\n", nt);
        abort();
    }
    emu_body = emu_call<F>;
    emu_body_arg = &f;
    for (unsigned b = 0; b < gx; ++b) {
        blockIdx = {b, 0, 0};
        for (unsigned t = 0; t < nt; ++t) {
            emu_fiber& fb = emu_fibers[t];
            getcontext(&fb.ctx);
            fb.ctx.uc_stack.ss_sp = stacks + (size_t)t * EMU_STACK;
            fb.ctx.uc_stack.ss_size = EMU_STACK;
            fb.ctx.uc_link = &emu_sched;
            makecontext(&fb.ctx, emu_entry, 0);
            fb.state = EMU_READY;
        }
        emu_schedule(b, nt, bx, policy);
    }
    free(stacks);
    for (unsigned w = 0; w < nw; ++w) delete[] emu_warps[w].bar.waiters;
    delete[] emu_block_bar.waiters;
    delete[] emu_fibers;
    delete[] emu_warps;
    emu_warps = nullptr;
    emu_fibers = nullptr;
}
