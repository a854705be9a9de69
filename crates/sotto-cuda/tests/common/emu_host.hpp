// Host emulation of the CUDA C that sotto's kernels use, so that their logic (indexing,
// block layouts, reductions, barriers) is tested against the CPU reference on machines
// without a GPU. Compiled by the tests with the host C++ compiler, before the kernel text.
//
// A launch runs its blocks one after another on the calling thread. The threads of a block
// are ucontext fibers: each runs until it reaches __syncthreads (or a warp shuffle, which
// is built on it) or returns, so a block's barrier phases run in order and the result does
// not depend on scheduling. A thread that returns early leaves the barrier count, as on
// Volta and later. Warp shuffles exchange through a block-wide table, so every thread of
// the block must reach them (the kernels' shuffles sit in uniform control flow). Dynamic
// shared memory starts as 0xff bytes (f32 NaN), so reading it before writing shows up.
// What this cannot catch: races between warps that a GPU would expose, PTX-level issues,
// and speed. Those wait for a GPU (scripts/gpu-check.sh).
#include <ucontext.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
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
    unsigned int shuffles;  // how many warp shuffles this thread has made
};
static Fiber* current = nullptr;
static void (*body)(void**) = nullptr;
static void** args = nullptr;
static unsigned char* dynamic_shared = nullptr;
// Two exchange tables, used in turn by successive shuffles: a thread writes table k only
// after the barrier of the shuffle before, by when every thread has read table k.
static unsigned int exchange[2][1024];
// Set while the blocks after the first run as plain calls (their kernel never synchronised
// in block 0); a barrier reached then is reported as an error instead of being skipped.
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

inline void barrier() {
    if (direct) {
        barrier_in_direct_mode = true;
        return;
    }
    yield();
}

inline unsigned int linear_tid() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

template <class T>
inline T shuffle(T v, unsigned int src_lane) {
    static_assert(sizeof(T) == 4, "32-bit shuffles only");
    unsigned int t = linear_tid();
    unsigned int* table = exchange[current->shuffles++ & 1u];
    std::memcpy(&table[t], &v, 4);
    barrier();
    T r;
    std::memcpy(&r, &table[(t & ~31u) | (src_lane & 31u)], 4);
    return r;
}
}  // namespace emu

inline void __syncthreads() { emu::barrier(); }
inline void __syncwarp(unsigned int = 0xffffffffu) { emu::barrier(); }

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
// Four signed byte products added to c.
inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; ++k) c += (int)(signed char)(a >> (8 * k)) * (int)(signed char)(b >> (8 * k));
    return c;
}

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

// Runs one launch. Returns 0, or: 1 unknown kernel, 2 bad block size, 3 too much shared
// memory, 4 a barrier in a block run directly (see emu::direct).
static int emu_launch(const EmuKernel& k, const unsigned int grid[3], const unsigned int block[3],
                      unsigned int shared_bytes, void** args) {
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
    std::vector<unsigned char> shared(shared_bytes + 16);
    emu::body = k.run;
    emu::args = args;
    emu::direct = false;
    emu::barrier_in_direct_mode = false;
    bool synchronised = false;
    bool first = true;
    for (unsigned int bz = 0; bz < grid[2]; ++bz)
        for (unsigned int by = 0; by < grid[1]; ++by)
            for (unsigned int bx = 0; bx < grid[0]; ++bx) {
                blockIdx = dim3{bx, by, bz};
                std::memset(shared.data(), 0xff, shared.size());
                emu::dynamic_shared = shared.data();
                if (!first && !synchronised) {
                    // Block 0 never reached a barrier: run the threads as plain calls.
                    emu::direct = true;
                    for (std::size_t t = 0; t < n; ++t) {
                        threadIdx = fibers[t].tid;
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
                }
                for (bool live = true; live;) {
                    live = false;
                    for (auto& f : fibers) {
                        if (f.done) continue;
                        emu::current = &f;
                        threadIdx = f.tid;
                        emu::resume(f);
                        if (!f.done) live = synchronised = true;
                    }
                }
                first = false;
            }
    return 0;
}
