// Host emulation of the CUDA C that sotto's kernels use, so that their logic (indexing,
// block layouts, reductions, barriers) is tested against the CPU reference on machines
// without a GPU. Compiled by the tests with the host C++ compiler, before the kernel text.
//
// A launch runs its blocks one after another on the calling thread. The threads of a block
// are fibers, run warp by warp: each lane of a warp runs until it reaches __syncthreads, a
// warp shuffle or __syncwarp, or returns; the warp's lanes go on past their shuffles
// together until every one waits at the block barrier (or has returned); then the next
// warp runs, and once all have, the block passes its barrier. So a barrier orders the
// whole block and a shuffle only its warp, as on a GPU, and the result does not depend on
// the host's scheduling. A thread that returns early leaves the barrier count, as on Volta
// and later; a shuffle must be reached by every lane of its warp (the kernels' shuffles sit
// in warp-uniform control flow), else the launch fails. Dynamic shared memory starts as
// 0xff bytes (f32 NaN), so reading it before writing shows up.
// A launch may run in reverse (`reverse`): blocks last to first, and within each barrier
// phase the warps, and each warp's lanes, last to first. A kernel whose result changes with
// that order reads what another thread writes without a barrier (or, within a warp, a
// shuffle) between them, or what another block writes in the same launch: races a GPU's
// scheduling would expose (one order alone hides them, as each thread then sees either
// every such write or none).
// The tests build this with UBSan's alignment, bounds and shift checks where the compiler
// has them (tests/common/emu.rs): a misaligned access, an index past a static shared
// array, or a shift by the width or more stops the test with the line in the built source.
// A launch's dynamic shared memory ends right before an inaccessible page: an access past
// the size the launch gave (up to 15 bytes of alignment slack) stops the test (SIGSEGV).
// What this cannot catch: races that no sequential order shows (two writes of the same
// value, say), reads past a global buffer or before the dynamic shared memory, PTX-level
// issues, and speed. Those wait for a GPU (scripts/gpu-check.sh).
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
};
static dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
// Static shared arrays: one block runs at a time, so one copy serves every block.
#define __shared__ static

namespace emu {
struct Fiber {
#if defined(__x86_64__) && !defined(SOTTO_EMU_UCONTEXT)
    void* sp;  // saved stack pointer (see switch_to)
#else
    ucontext_t ctx;
#endif
    dim3 tid;
    bool done;
    // Where a suspended fiber waits: at the block's barrier, or at its warp's.
    enum Wait { RUNNING, BLOCK, WARP } wait;
    unsigned int shuffles;  // how many warp shuffles this thread has made
};
static Fiber* current = nullptr;
static void (*body)(void**) = nullptr;
static void** args = nullptr;
static unsigned char* dynamic_shared = nullptr;
// Two exchange tables, used in turn by successive shuffles: a lane writes table k only
// after the warp sync of the shuffle before, by when every lane has read table k.
static unsigned int exchange[2][1024];
// Set while the blocks after the first run as plain calls (their kernel never synchronised
// in the first block run); a barrier reached then is reported as an error instead of being skipped.
static bool direct = false;
static bool barrier_in_direct_mode = false;
static const std::size_t STACK_BYTES = 128 * 1024;

#if defined(__x86_64__) && !defined(SOTTO_EMU_UCONTEXT)
// A fiber switch that saves only the registers the SysV ABI asks a callee to keep (rbx,
// rbp, r12-r15) and the stack pointer: swapcontext also makes a sigprocmask system call
// per switch, which made it most of the emulation's time. The SSE and x87 control words
// are left alone (nothing here changes them; saving them cost half of each switch); the
// 8-byte slot they would take keeps the stack layout 16-byte aligned.
extern "C" void sotto_emu_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .p2align 4
    .globl sotto_emu_switch
    .hidden sotto_emu_switch
    .type sotto_emu_switch, @function
sotto_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size sotto_emu_switch, .-sotto_emu_switch
)");

static void* scheduler_sp = nullptr;

[[noreturn]] static void entry() {
    body(args);
    current->done = true;
    sotto_emu_switch(&current->sp, scheduler_sp);
    __builtin_unreachable();
}

// A fresh fiber's stack as sotto_emu_switch leaves a suspended one: the spare slot, six
// zeroed registers, then `entry` as the return address (16-byte aligned, as after a call).
inline void start(Fiber& f, char* stack, std::size_t t) {
    // Stack tops staggered by cache lines: at one power-of-two stride they would all fall
    // in the same cache sets and evict each other at every switch.
    uintptr_t top = ((uintptr_t)stack + STACK_BYTES - 64 * (t % 61)) & ~(uintptr_t)15;
    uint64_t* sp = (uint64_t*)top;
    *--sp = 0;                  // entry's own return address: never used
    *--sp = (uint64_t)&entry;   // where the first switch returns to
    for (int r = 0; r < 6; ++r) *--sp = 0;
    *--sp = 0;  // the spare slot
    f.sp = sp;
}
inline void resume(Fiber& f) { sotto_emu_switch(&scheduler_sp, f.sp); }
inline void yield() { sotto_emu_switch(&current->sp, scheduler_sp); }
#else
static ucontext_t scheduler;

static void entry() {
    body(args);
    current->done = true;  // returns to uc_link, the scheduler
}

inline void start(Fiber& f, char* stack, std::size_t) {
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stack;
    f.ctx.uc_stack.ss_size = STACK_BYTES;
    f.ctx.uc_link = &scheduler;
    makecontext(&f.ctx, entry, 0);
}
inline void resume(Fiber& f) { swapcontext(&scheduler, &f.ctx); }
inline void yield() { swapcontext(&current->ctx, &scheduler); }
#endif

inline void wait(Fiber::Wait w) {
    if (direct) {
        barrier_in_direct_mode = true;
        return;
    }
    current->wait = w;
    yield();
}
inline void barrier() { wait(Fiber::BLOCK); }
inline void warp_sync() { wait(Fiber::WARP); }

inline unsigned int linear_tid() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

template <class T>
inline T shuffle(T v, unsigned int src_lane) {
    static_assert(sizeof(T) == 4, "32-bit shuffles only");
    unsigned int t = linear_tid();
    unsigned int* table = exchange[current->shuffles++ & 1u];
    std::memcpy(&table[t], &v, 4);
    warp_sync();
    T r;
    std::memcpy(&r, &table[(t & ~31u) | (src_lane & 31u)], 4);
    return r;
}
}  // namespace emu

inline void __syncthreads() { emu::barrier(); }
inline void __syncwarp(unsigned int = 0xffffffffu) { emu::warp_sync(); }

template <class T>
inline T __shfl_xor_sync(unsigned int, T v, int mask, int = 32) {
    return emu::shuffle(v, (emu::linear_tid() & 31u) ^ (unsigned int)mask);
}
template <class T>
inline T __shfl_down_sync(unsigned int, T v, unsigned int delta, int = 32) {
    unsigned int lane = emu::linear_tid() & 31u;
    return emu::shuffle(v, lane + delta < 32 ? lane + delta : lane);
}
template <class T>
inline T __shfl_sync(unsigned int, T v, int src, int = 32) {
    return emu::shuffle(v, (unsigned int)src);
}

inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline int __float_as_int(float f) {
    int i;
    std::memcpy(&i, &f, 4);
    return i;
}
// CUDA's correctly rounded single operations (never contracted into a multiply-add): the
// host's own, built without FMA contraction (ISO C++ mode, baseline x86-64).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }

// Blocks run one at a time, so device-wide atomics and fences need nothing more; a load
// through L2 only is a load.
inline unsigned int atomicAdd(unsigned int* a, unsigned int v) {
    unsigned int old = *a;
    *a = old + v;
    return old;
}
inline void __threadfence() {}
template <class T>
inline T __ldcg(const T* p) {
    return *p;
}

// Four signed byte products added to c.
inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; ++k) c += (int)(signed char)(a >> (8 * k)) * (int)(signed char)(b >> (8 * k));
    return c;
}

// The device prelude's programmatic dependent launch: launches here run one after another.
inline void sotto_pdl_start() {}
// Its L2 prefetches, hints with no effect on values: nothing to do here.
inline void sotto_prefetch_line(const void*) {}
inline void sotto_prefetch_l2(const void*, size_t) {}

// The device prelude's f16 conversions, by bits: exact widening, and narrowing with
// rounding to nearest even as PTX cvt.rn.f16.f32 does.
inline float sotto_half_to_float(unsigned short h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f;  // m · 2^-24, exact
        std::memcpy(&x, &v, 4);
        x |= sign;
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

inline unsigned short sotto_float_to_half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (unsigned short)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // 65520 and up: inf
    if (ax < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
        float v;
        std::memcpy(&v, &ax, 4);
        return (unsigned short)(sign | (uint32_t)std::nearbyint(v * 16777216.0f));
    }
    uint32_t h = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return (unsigned short)(sign | h);
}

// The device prelude's tensor-core product (PTX mma.sync m16n8k16, f16 inputs, f32
// accumulators), as a warp collective like a shuffle: every lane leaves its A and B
// registers in the exchange table, the warp syncs, and each lane computes its own four
// outputs from the whole warp's fragments (the layout in sotto_cuda::kernels). The
// products of two f16 are exact in f32; the sum runs in k order, then adds onto d (the
// tensor cores' order differs, as cuBLAS's does).
namespace emu {
static unsigned int mma_exchange[2][1024][6];
}
#define SOTTO_MMA 1
inline void sotto_mma_16816(float* d, const unsigned int* a, const unsigned int* b) {
    unsigned int t = emu::linear_tid();
    auto& table = emu::mma_exchange[emu::current->shuffles++ & 1u];
    for (int i = 0; i < 4; ++i) table[t][i] = a[i];
    table[t][4] = b[0];
    table[t][5] = b[1];
    emu::warp_sync();
    unsigned int base = t & ~31u, lane = t & 31u, g = lane / 4, c = 2 * (lane % 4);
    // Element (lane l, register r, half k % 2) of the warp's fragments.
    auto at = [&](unsigned int l, unsigned int r, unsigned int k) {
        unsigned int w = table[base + l][r];
        return sotto_half_to_float((unsigned short)(k % 2 ? w >> 16 : w & 0xffffu));
    };
    for (unsigned int i = 0; i < 4; ++i) {
        unsigned int row = g + 8 * (i / 2), col = c + i % 2;
        float acc = 0.0f;
        for (unsigned int k = 0; k < 16; ++k) {
            float x = at((row % 8) * 4 + (k % 8) / 2, row / 8 + 2 * (k / 8), k);
            float y = at(col * 4 + (k % 8) / 2, 4 + k / 8, k);
            acc += x * y;
        }
        d[i] += acc;
    }
}

namespace emu {
// A launch's dynamic shared memory: its last byte right before a page that may not be read
// or written, so that an access past what the launch asked for (a kernel's layout and its
// host-side size disagreeing) stops the test with SIGSEGV instead of going unseen.
// 16-byte aligned, so the end may have up to 15 bytes of slack.
inline unsigned char* dynamic_shared_ending_at_guard(unsigned int bytes) {
    static unsigned char* guard = [] {
        const std::size_t page = (std::size_t)sysconf(_SC_PAGESIZE);
        const std::size_t room = (48 * 1024 + page - 1) / page * page;
        void* p = mmap(nullptr, room + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED) std::abort();
        unsigned char* g = static_cast<unsigned char*>(p) + room;
        if (mprotect(g, page, PROT_NONE) != 0) std::abort();
        return g;
    }();
    return guard - ((std::size_t)bytes + 15) / 16 * 16;
}
}  // namespace emu

// Calls kernel k with the arguments cuLaunchKernel-style: args[i] points at parameter i.
template <class... A, std::size_t... I>
void emu_call(void (*k)(A...), void** a, std::index_sequence<I...>) {
    k(*static_cast<A*>(a[I])...);
}
template <class... A>
void emu_invoke(void (*k)(A...), void** a) {
    emu_call(k, a, std::index_sequence_for<A...>{});
}

struct EmuKernel {
    const char* name;
    void (*run)(void**);
};

// Runs one launch, its blocks and each phase's warps and lanes in reverse order when
// `reverse`. Returns 0, or: 1 unknown kernel, 2 bad block size, 3 too much shared memory,
// 4 a barrier in a block run directly (see emu::direct), 5 a warp shuffle or __syncwarp
// that some lane of the warp did not reach.
static int emu_launch(const EmuKernel& k, const unsigned int grid[3], const unsigned int block[3],
                      unsigned int shared_bytes, void** args, bool reverse) {
    std::size_t n = (std::size_t)block[0] * block[1] * block[2];
    if (n == 0 || n > 1024) return 2;
    if (shared_bytes > 48 * 1024) return 3;
    blockDim = dim3{block[0], block[1], block[2]};
    gridDim = dim3{grid[0], grid[1], grid[2]};
    std::vector<emu::Fiber> fibers(n);
    // Fiber stacks, kept between launches and never cleared (a fresh zeroed 128 KiB per
    // thread per launch cost more than the kernels).
    static std::vector<char*> stacks;
    while (stacks.size() < n) stacks.push_back(new char[emu::STACK_BYTES]);
    unsigned char* shared = emu::dynamic_shared_ending_at_guard(shared_bytes);
    emu::body = k.run;
    emu::args = args;
    emu::direct = false;
    emu::barrier_in_direct_mode = false;
    bool synchronised = false;
    bool first = true;
    std::size_t blocks = (std::size_t)grid[0] * grid[1] * grid[2];
    auto order = [reverse](std::size_t i, std::size_t count) { return reverse ? count - 1 - i : i; };
    for (std::size_t i = 0; i < blocks; ++i) {
        std::size_t b = order(i, blocks);
        blockIdx = dim3{(unsigned int)(b % grid[0]), (unsigned int)(b / grid[0] % grid[1]),
                        (unsigned int)(b / ((std::size_t)grid[0] * grid[1]))};
        std::memset(shared, 0xff, shared_bytes);
        emu::dynamic_shared = shared;
        if (!first && !synchronised) {
            // The first block never reached a barrier: run the threads as plain calls.
            emu::direct = true;
            for (std::size_t t = 0; t < n; ++t) {
                threadIdx = fibers[order(t, n)].tid;
                emu::body(emu::args);
            }
            if (emu::barrier_in_direct_mode) return 4;
            continue;
        }
        for (std::size_t t = 0; t < n; ++t) {
            emu::Fiber& f = fibers[t];
            emu::start(f, stacks[t], t);
            f.shuffles = 0;
            f.tid = dim3{(unsigned int)(t % block[0]), (unsigned int)(t / block[0] % block[1]),
                         (unsigned int)(t / ((std::size_t)block[0] * block[1]))};
            f.done = false;
            f.wait = emu::Fiber::RUNNING;
        }
        std::size_t warps = (n + 31) / 32;
        for (bool live = true; live;) {  // one barrier phase of the block
            for (std::size_t wi = 0; wi < warps; ++wi) {
                std::size_t lo = 32 * order(wi, warps), lanes = std::min<std::size_t>(32, n - lo);
                for (bool at_warp_sync = true; at_warp_sync;) {  // one warp sync to the next
                    at_warp_sync = false;
                    bool left = false;  // some lane returned or waits at the block barrier
                    for (std::size_t l = 0; l < lanes; ++l) {
                        emu::Fiber& f = fibers[lo + order(l, lanes)];
                        if (f.done || f.wait == emu::Fiber::BLOCK) {
                            left = true;
                            continue;
                        }
                        emu::current = &f;
                        threadIdx = f.tid;
                        f.wait = emu::Fiber::RUNNING;
                        emu::resume(f);
                        if (f.done) {
                            left = true;
                        } else {
                            synchronised = true;
                            if (f.wait == emu::Fiber::WARP) at_warp_sync = true;
                            else left = true;
                        }
                    }
                    if (at_warp_sync && left) return 5;
                }
            }
            live = false;
            for (auto& f : fibers)
                if (!f.done) {
                    f.wait = emu::Fiber::RUNNING;
                    live = true;
                }
        }
        first = false;
    }
    return 0;
}
