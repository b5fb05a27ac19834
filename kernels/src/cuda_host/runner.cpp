// The runner of the host emulation: reads the jobs (plans with their
// buffers) that `xform_kernels::cuda_host` wrote, runs each plan's launches
// on the host, and writes the results back.
//
// A launch runs its grid's blocks one after another. The threads of a
// block run one after another too, each through the kernel to its end,
// unless the kernel cooperates (`__syncthreads`, warp shuffles): then each
// thread is a fiber (a stack of its own) and the fibers switch only at the barriers,
// round-robin, so every thread of the block (warp) reaches a barrier
// before any leaves it, as on the device. A launch is checked against the
// device's limits (1024 threads per block, grid sizes), and a kernel whose
// threads wait at different barriers, or end while others wait, is
// reported (on a device it would hang or be undefined).
//
// Protocol (native-endian u64 words; byte blocks padded to 8): the job
// file is "XFJOBS01", the job count, then per job its buffers (size in
// bytes, kind: 0 data follows, 1 uninitialized (filled with 0xff bytes),
// 2 a flag of one u64::MAX), its steps (0: a launch: kernel id, grid[3],
// block[3], argument count, then per argument 0 + buffer + byte offset or
// 1 + size + bytes; 1: an index check: flag buffer, indices buffer, axis
// size) and the buffers to return. The result file holds per job a status
// (0: then each returned buffer as size + bytes; 1: an index out of range:
// the index and the axis size), flushed after each job.
#include "launch.h"
#include "shim.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define XF_ASAN 1
#else
#define XF_ASAN 0
#endif

xf_dim3 threadIdx, blockIdx, blockDim, gridDim;

extern const XfEmuKernel* const xf_emu_kernels[];
extern const unsigned xf_emu_kernel_count;

static std::string g_where = "(no job yet)";

[[noreturn]] static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "xform host emulation, %s: ", g_where.c_str());
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    exit(3);
}

void xf_emu_bad_arg(unsigned given, unsigned expected) {
    fail("an argument of %u bytes for a parameter of %u bytes", given, expected);
}

// ---- fibers ------------------------------------------------------------------

static const size_t STACK = 256 * 1024;

// A fiber's saved context. On x86-64 a switch is a few instructions
// (`xf_switch` pushes the callee-saved registers, swaps the stack
// pointers, pops them): a block's threads switch at every barrier and warp
// shuffle, so this is most of the emulation's time; elsewhere ucontext.
#if defined(__x86_64__)
extern "C" void xf_switch(void** save, void* load);
asm(R"(
    .text
    .globl xf_switch
    .type xf_switch, @function
xf_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size xf_switch, .-xf_switch
)");

struct Context {
    void* sp = nullptr;
};

// A context that starts `entry` (which never returns) on `stack`: the
// registers xf_switch pops (zeros), then `entry` as its return address, at
// a 16-byte aligned slot, so `entry` starts as if called.
static void context_start(Context& c, void* stack, size_t size, void (*entry)()) {
    const uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
    void** sp = (void**)(top - 64);
    for (int i = 0; i < 6; ++i) sp[i] = nullptr;
    sp[6] = (void*)entry;
    sp[7] = nullptr;
    c.sp = sp;
}

static void context_switch(Context& save, Context& load) { xf_switch(&save.sp, load.sp); }
#else
struct Context {
    ucontext_t uc;
};

static void context_start(Context& c, void* stack, size_t size, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}

static void context_switch(Context& save, Context& load) { swapcontext(&save.uc, &load.uc); }
#endif

struct Fiber {
    Context ctx;
    void* stack = nullptr;
    bool done = false;
    void* fake_stack = nullptr;
};

struct Barrier {
    unsigned size = 0;
    unsigned arrived = 0;
    unsigned long long gen = 0;
};

static std::vector<Fiber> g_fibers;
static Context g_sched;
static unsigned g_cur;
static bool g_in_fiber = false;
static unsigned long long g_progress = 0;
static Barrier g_block;
static std::vector<Barrier> g_warps;
// a warp shuffle's exchange: one slot per thread, in two sets used by
// alternate shuffles (so one barrier per shuffle suffices: a lane writes
// a set again only after every lane passed the shuffle in between)
static uint64_t g_slots[2][1024];
static const XfEmuKernel* g_kernel;
static const XfEmuArg* g_args;
static const void* g_sched_bottom = nullptr;
static size_t g_sched_size = 0;

static void to_scheduler() {
#if XF_ASAN
    __sanitizer_start_switch_fiber(&g_fibers[g_cur].fake_stack, g_sched_bottom, g_sched_size);
#endif
    context_switch(g_fibers[g_cur].ctx, g_sched);
#if XF_ASAN
    __sanitizer_finish_switch_fiber(g_fibers[g_cur].fake_stack, &g_sched_bottom, &g_sched_size);
#endif
}

static void fiber_main() {
#if XF_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g_sched_bottom, &g_sched_size);
#endif
    g_kernel->call(g_args);
    g_fibers[g_cur].done = true;
    ++g_progress;
#if XF_ASAN
    __sanitizer_start_switch_fiber(nullptr, g_sched_bottom, g_sched_size);
#endif
    context_switch(g_fibers[g_cur].ctx, g_sched);
    fail("a finished fiber was resumed");
}

static void wait_at(Barrier& b, const char* what) {
    if (!g_in_fiber) fail("%s reached %s but was not run as cooperating threads", g_kernel->name, what);
    const unsigned long long gen = b.gen;
    ++g_progress;
    if (++b.arrived == b.size) {
        b.arrived = 0;
        ++b.gen;
        return;
    }
    while (b.gen == gen) to_scheduler();
}

static unsigned linear_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

void xf_emu_sync_block() { wait_at(g_block, "__syncthreads"); }

uint64_t xf_emu_shfl_down(unsigned mask, uint64_t bits, unsigned delta) {
    if (!g_in_fiber) fail("%s reached a warp shuffle but was not run as cooperating threads", g_kernel->name);
    if (mask != 0xffffffffu) fail("%s: a warp shuffle with mask %#x (the kernels use full warps)", g_kernel->name, mask);
    const unsigned tid = linear_tid();
    Barrier& w = g_warps[tid / 32];
    if (w.size != 32) fail("%s: a full-mask warp shuffle in a warp of %u threads", g_kernel->name, w.size);
    uint64_t* slots = g_slots[w.gen & 1];
    slots[tid] = bits;
    wait_at(w, "a warp shuffle");
    return (tid & 31u) + delta < 32u ? slots[tid + delta] : bits;
}

static void set_thread(unsigned t) {
    threadIdx.x = t % blockDim.x;
    threadIdx.y = (t / blockDim.x) % blockDim.y;
    threadIdx.z = t / (blockDim.x * blockDim.y);
}

// Runs the current block's threads as fibers until all have ended.
static void run_block_cooperatively(unsigned n) {
    if (g_fibers.size() < n) g_fibers.resize(n);
    g_block = Barrier{n, 0, 0};
    g_warps.assign((n + 31) / 32, Barrier{});
    for (unsigned w = 0; w < g_warps.size(); ++w) g_warps[w].size = n - 32 * w < 32 ? n - 32 * w : 32;
    for (unsigned t = 0; t < n; ++t) {
        Fiber& f = g_fibers[t];
        if (!f.stack) {
            f.stack = mmap(nullptr, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (f.stack == MAP_FAILED) fail("no memory for %u fiber stacks", n);
        }
#if XF_ASAN
        __asan_unpoison_memory_region(f.stack, STACK);
#endif
        context_start(f.ctx, f.stack, STACK, fiber_main);
        f.done = false;
        f.fake_stack = nullptr;
    }
    g_in_fiber = true;
    for (;;) {
        bool any = false;
        const unsigned long long before = g_progress;
        for (unsigned t = 0; t < n; ++t) {
            if (g_fibers[t].done) continue;
            any = true;
            g_cur = t;
            set_thread(t);
            void* fake = nullptr;
#if XF_ASAN
            __sanitizer_start_switch_fiber(&fake, g_fibers[t].stack, STACK);
#endif
            context_switch(g_sched, g_fibers[t].ctx);
#if XF_ASAN
            __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
        }
        if (!any) break;
        if (g_progress == before) {
            unsigned ended = 0;
            for (unsigned t = 0; t < n; ++t) ended += g_fibers[t].done;
            fail("%s, block (%u, %u, %u): the threads wait at different barriers (%u of %u ended)", g_kernel->name,
                 blockIdx.x, blockIdx.y, blockIdx.z, ended, n);
        }
    }
    g_in_fiber = false;
}

// ---- the job file ------------------------------------------------------------

struct Reader {
    FILE* f;
    uint64_t word() {
        uint64_t v;
        if (fread(&v, 8, 1, f) != 1) fail("the job file ends early");
        return v;
    }
    void bytes(void* dst, uint64_t n) {
        if (n && fread(dst, 1, n, f) != n) fail("the job file ends early");
        uint64_t pad = (8 - n % 8) % 8;
        char skip[8];
        if (pad && fread(skip, 1, pad, f) != pad) fail("the job file ends early");
    }
};

static void put_word(FILE* o, uint64_t v) { fwrite(&v, 8, 1, o); }

static void put_bytes(FILE* o, const void* p, uint64_t n) {
    put_word(o, n);
    if (n) fwrite(p, 1, n, o);
    static const char zeros[8] = {0};
    fwrite(zeros, 1, (8 - n % 8) % 8, o);
}

struct Buffer {
    unsigned char* p;
    uint64_t bytes;
};

static Buffer& buffer(std::vector<Buffer>& bufs, uint64_t b) {
    if (b >= bufs.size()) fail("buffer %llu of %zu", (unsigned long long)b, bufs.size());
    return bufs[b];
}

// Reads a launch and, if `execute`, runs it.
static void launch(std::vector<Buffer>& bufs, Reader& r, bool execute) {
    const uint64_t id = r.word();
    if (id >= xf_emu_kernel_count) fail("kernel %llu of %u", (unsigned long long)id, xf_emu_kernel_count);
    g_kernel = xf_emu_kernels[id];
    unsigned grid[3], block[3];
    for (unsigned& g : grid) g = (unsigned)r.word();
    for (unsigned& b : block) b = (unsigned)r.word();
    const uint64_t nargs = r.word();
    std::vector<std::vector<unsigned char>> storage(nargs);
    std::vector<XfEmuArg> args(nargs);
    for (uint64_t a = 0; a < nargs; ++a) {
        if (r.word() == 0) {
            Buffer& b = buffer(bufs, r.word());
            const uint64_t off = r.word();
            if (off > b.bytes) fail("%s: argument %llu points past its buffer", g_kernel->name, (unsigned long long)a);
            unsigned char* p = b.p + off;
            storage[a].resize(sizeof p);
            memcpy(storage[a].data(), &p, sizeof p);
        } else {
            storage[a].resize(r.word());
            r.bytes(storage[a].data(), storage[a].size());
        }
        args[a] = XfEmuArg{storage[a].data(), (unsigned)storage[a].size()};
    }
    if (nargs != g_kernel->nargs) {
        fail("%s takes %u arguments, the plan passes %llu", g_kernel->name, g_kernel->nargs, (unsigned long long)nargs);
    }
    const unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    if (threads == 0 || threads > 1024 || block[2] > 64 || grid[0] == 0 || grid[1] == 0 || grid[2] == 0 ||
        grid[0] > 2147483647u || grid[1] > 65535 || grid[2] > 65535) {
        fail("%s: a launch of (%u, %u, %u) blocks of (%u, %u, %u) threads, past the device's limits", g_kernel->name,
             grid[0], grid[1], grid[2], block[0], block[1], block[2]);
    }
    if (!execute) return;
    g_args = args.data();
    gridDim = xf_dim3{grid[0], grid[1], grid[2]};
    blockDim = xf_dim3{block[0], block[1], block[2]};
    for (unsigned z = 0; z < grid[2]; ++z)
        for (unsigned y = 0; y < grid[1]; ++y)
            for (unsigned x = 0; x < grid[0]; ++x) {
                blockIdx = xf_dim3{x, y, z};
                if (g_kernel->cooperative) {
                    run_block_cooperatively((unsigned)threads);
                } else {
                    for (unsigned t = 0; t < threads; ++t) {
                        set_thread(t);
                        g_kernel->call(g_args);
                    }
                }
            }
}

int main(int argc, char** argv) {
    if (argc != 3) fail("usage: runner JOBS RESULTS");
    Reader r{fopen(argv[1], "rb")};
    FILE* out = fopen(argv[2], "wb");
    if (!r.f || !out) fail("cannot open %s or %s", argv[1], argv[2]);
    char magic[8];
    r.bytes(magic, 8);
    if (memcmp(magic, "XFJOBS01", 8) != 0) fail("not a job file");
    const uint64_t njobs = r.word();
    // XFORM_CUDA_HOST_TIMES=1: each job's time on stderr
    const bool times = getenv("XFORM_CUDA_HOST_TIMES") != nullptr;
    for (uint64_t j = 0; j < njobs; ++j) {
        g_where = "job " + std::to_string(j);
        timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        std::vector<Buffer> bufs(r.word());
        for (Buffer& b : bufs) {
            b.bytes = r.word();
            const uint64_t kind = r.word();
            // each buffer its own allocation, so that the address sanitizer
            // sees an access past its end
            b.p = (unsigned char*)malloc(b.bytes ? b.bytes : 1);
            if (!b.p) fail("no memory for a buffer of %llu bytes", (unsigned long long)b.bytes);
            if (kind == 0) {
                r.bytes(b.p, b.bytes);
            } else if (kind == 1) {
                memset(b.p, 0xff, b.bytes);
            } else {
                if (b.bytes != 8) fail("a flag of %llu bytes", (unsigned long long)b.bytes);
                memset(b.p, 0xff, 8);
            }
        }
        bool index_error = false;
        int64_t bad_index = 0;
        uint64_t bad_size = 0;
        const uint64_t nsteps = r.word();
        for (uint64_t s = 0; s < nsteps; ++s) {
            g_where = "job " + std::to_string(j) + ", step " + std::to_string(s);
            const uint64_t kind = r.word();
            if (kind == 0) {
                // a failed index check ends the plan on the device
                launch(bufs, r, !index_error);
            } else {
                Buffer& flag = buffer(bufs, r.word());
                Buffer& idx = buffer(bufs, r.word());
                const uint64_t size = r.word();
                uint64_t pos;
                memcpy(&pos, flag.p, 8);
                if (pos != ~0ull && !index_error) {
                    if ((pos + 1) * 8 > idx.bytes) fail("the index check flags position %llu", (unsigned long long)pos);
                    memcpy(&bad_index, idx.p + pos * 8, 8);
                    bad_size = size;
                    index_error = true;
                }
            }
        }
        const uint64_t nout = r.word();
        std::vector<uint64_t> outs(nout);
        for (uint64_t& o : outs) o = r.word();
        if (index_error) {
            put_word(out, 1);
            put_word(out, (uint64_t)bad_index);
            put_word(out, bad_size);
        } else {
            put_word(out, 0);
            for (uint64_t o : outs) put_bytes(out, buffer(bufs, o).p, buffer(bufs, o).bytes);
        }
        fflush(out);
        for (Buffer& b : bufs) free(b.p);
        if (times) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            fprintf(stderr, "job %llu: %.3f ms (last kernel %s)\n", (unsigned long long)j,
                    (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6, g_kernel ? g_kernel->name : "none");
        }
    }
    fclose(out);
    return 0;
}
