// The interface between the generated units of the host emulation (each
// holds kernels and their table entries) and its runner (runner.cpp): an
// argument read as whatever the kernel's parameter is, and a kernel's
// entry (name, arity, whether its threads cooperate, a caller).
#ifndef XF_HOST_LAUNCH_H
#define XF_HOST_LAUNCH_H
#include <stddef.h>
#include <string.h>
#include <utility>

[[noreturn]] void xf_emu_bad_arg(unsigned given, unsigned expected);

// One argument's bytes, converted to the parameter's type by copying them
// (the plan's argument must have exactly that type's size).
struct XfEmuArg {
    const void* data;
    unsigned size;
    template <class T>
    operator T() const {
        if (size != sizeof(T)) xf_emu_bad_arg(size, (unsigned)sizeof(T));
        T v;
        memcpy((void*)&v, data, sizeof v);
        return v;
    }
};

typedef void (*XfEmuCall)(const XfEmuArg*);

struct XfEmuKernel {
    const char* name;
    unsigned nargs;
    int cooperative;  // uses __syncthreads or warp shuffles: run its threads as fibers
    XfEmuCall call;
};

template <class... P, size_t... I>
static inline void xf_emu_apply(void (*f)(P...), const XfEmuArg* a, std::index_sequence<I...>) {
    f(a[I]...);
}

template <class... P>
static inline void xf_emu_apply_all(void (*f)(P...), const XfEmuArg* a) {
    xf_emu_apply(f, a, std::index_sequence_for<P...>{});
}

// The caller of kernel f: its arguments converted to its parameters.
template <auto f>
static void xf_emu_call(const XfEmuArg* a) {
    xf_emu_apply_all(f, a);
}

template <class... P>
constexpr unsigned xf_emu_arity(void (*)(P...)) {
    return sizeof...(P);
}

#endif
