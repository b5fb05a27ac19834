// The host shim of xform's generated CUDA kernels: with it, g++ compiles a
// kernel's source unchanged as host C++, and the emulated launch of
// `cuda_host/runner.cpp` runs it (see `xform_kernels::cuda_host`).
//
// It stands in for the CUDA built-ins the kernels use, with the device's
// semantics: the launch indices (set per thread by the emulated launch),
// block barriers and warp shuffles (the threads of a block run as fibers
// that switch only there), the atomics, the bit casts, `__half` and
// `__nv_bfloat16` with the device's round-to-nearest-even conversions
// (NaN becomes the canonical 0x7fff, as on the device), and `erfinv`,
// which the host's libm lacks. Every other math function is the host's
// libm: glibc's are within 1 ulp, CUDA's within the bounds of the CUDA
// Programming Guide (2 to 4 ulp for most float functions, 1 to 2 for
// double; erfinvf 2, lgammaf 6), so results of transcendental functions
// may differ from a device's in the last bits and are compared with
// tolerances.
//
// Half-precision arithmetic is deleted: the kernels widen to float
// (`__half2float`) and round back, and a kernel computing on `__half`
// directly (which a device does in half precision) does not compile here.
#ifndef XF_HOST_SHIM_H
#define XF_HOST_SHIM_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// Shared memory: one instance per kernel function; the blocks of a launch
// run one after another.
#define __shared__ static

struct xf_dim3 {
    unsigned x, y, z;
};
// The launch indices of the running thread (set by the emulated launch).
extern xf_dim3 threadIdx, blockIdx, blockDim, gridDim;

// Block cooperation, provided by the emulated launch (runner.cpp): a
// barrier of the block's threads, and the exchange of a warp shuffle (the
// bits of lane + delta's value, or the caller's past the warp's end).
void xf_emu_sync_block();
uint64_t xf_emu_shfl_down(unsigned mask, uint64_t bits, unsigned delta);

static inline void __syncthreads() { xf_emu_sync_block(); }

template <class T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta) {
    static_assert(sizeof(T) <= 8, "a shuffled value fits 64 bits");
    uint64_t bits = 0;
    memcpy(&bits, &var, sizeof var);
    bits = xf_emu_shfl_down(mask, bits, delta);
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}

// Atomics: the emulated threads switch only at barriers, so a plain
// read-modify-write is atomic; integers wrap as on the device.
static inline float atomicAdd(float* p, float v) { const float o = *p; *p = o + v; return o; }
static inline double atomicAdd(double* p, double v) { const double o = *p; *p = o + v; return o; }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { const unsigned o = *p; *p = o + v; return o; }
static inline int atomicAdd(int* p, int v) { const int o = *p; *p = (int)((unsigned)o + (unsigned)v); return o; }
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    const unsigned long long o = *p;
    *p = o + v;
    return o;
}
static inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
    const unsigned long long o = *p;
    if (v < o) *p = v;
    return o;
}

static inline float __int_as_float(int v) { float f; memcpy(&f, &v, sizeof f); return f; }
static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, sizeof d); return d; }

// ---- __half and __nv_bfloat16 ------------------------------------------------

// The bits of `v` rounded to nearest-even in a binary format of `ebits`
// exponent and `mant` fraction bits (overflow to infinity, subnormals,
// NaN as 0x7fff), directly from the double: no double rounding.
static inline uint16_t xf_round_bits(double v, int ebits, int mant) {
    const int bias = (1 << (ebits - 1)) - 1;
    const uint16_t sign = signbit(v) ? (uint16_t)(1u << (ebits + mant)) : 0;
    const uint16_t inf = (uint16_t)(((1u << ebits) - 1u) << mant);
    if (isnan(v)) return 0x7fff;
    const double a = fabs(v);
    if (isinf(a)) return sign | inf;
    if (a == 0.0) return sign;
    int e;
    frexp(a, &e);
    int q = e - 1 < 1 - bias ? 1 - bias : e - 1;  // the exponent of the result's ulp + mant
    double r = nearbyint(ldexp(a, mant - q));      // exact scaling, then the one rounding
    if (r >= ldexp(1.0, mant + 1)) {
        r *= 0.5;
        q += 1;
    }
    if (r < ldexp(1.0, mant)) return sign | (uint16_t)r;  // subnormal (q is the least exponent)
    const int biased = q + bias;
    if (biased >= (1 << ebits) - 1) return sign | inf;
    return sign | (uint16_t)(biased << mant) | (uint16_t)((uint32_t)r - (1u << mant));
}

// The value of bits `h` of that format (exact in float).
static inline float xf_bits_value(uint16_t h, int ebits, int mant) {
    const int bias = (1 << (ebits - 1)) - 1;
    const float s = (h >> (ebits + mant)) ? -1.0f : 1.0f;
    const int biased = (h >> mant) & ((1 << ebits) - 1);
    const uint32_t frac = h & ((1u << mant) - 1u);
    if (biased == (1 << ebits) - 1) return frac ? NAN : s * INFINITY;
    if (biased == 0) return s * ldexpf((float)frac, 1 - bias - mant);
    return s * ldexpf((float)(frac | (1u << mant)), biased - bias - mant);
}

struct __half;
struct __nv_bfloat16;
static inline __half __float2half_rn(float v);
static inline __half __double2half(double v);
static inline float __half2float(__half h);
static inline __nv_bfloat16 __float2bfloat16_rn(float v);
static inline __nv_bfloat16 __double2bfloat16(double v);
static inline float __bfloat162float(__nv_bfloat16 h);

// The conversions CUDA's types have implicitly; arithmetic and comparisons
// on them are deleted (see the top).
#define XF_HALF_TYPE(T, FROM_F, FROM_D, TO_F)                                  \
    struct T {                                                                 \
        uint16_t bits;                                                         \
        T() = default;                                                         \
        T(float v) : bits(FROM_F(v).bits) {}                                   \
        T(double v) : bits(FROM_D(v).bits) {}                                  \
        operator float() const { return TO_F(*this); }                         \
    };                                                                         \
    T operator+(T, T) = delete;                                                \
    T operator-(T, T) = delete;                                                \
    T operator*(T, T) = delete;                                                \
    T operator/(T, T) = delete;                                                \
    T operator-(T) = delete;                                                   \
    bool operator==(T, T) = delete;                                            \
    bool operator!=(T, T) = delete;                                            \
    bool operator<(T, T) = delete;                                             \
    bool operator<=(T, T) = delete;                                            \
    bool operator>(T, T) = delete;                                             \
    bool operator>=(T, T) = delete;
XF_HALF_TYPE(__half, __float2half_rn, __double2half, __half2float)
XF_HALF_TYPE(__nv_bfloat16, __float2bfloat16_rn, __double2bfloat16, __bfloat162float)
#undef XF_HALF_TYPE

static inline __half xf_half_of(uint16_t b) { __half h; h.bits = b; return h; }
static inline __nv_bfloat16 xf_bf16_of(uint16_t b) { __nv_bfloat16 h; h.bits = b; return h; }
static inline __half __float2half_rn(float v) { return xf_half_of(xf_round_bits(v, 5, 10)); }
static inline __half __double2half(double v) { return xf_half_of(xf_round_bits(v, 5, 10)); }
static inline float __half2float(__half h) { return xf_bits_value(h.bits, 5, 10); }
static inline __nv_bfloat16 __float2bfloat16_rn(float v) { return xf_bf16_of(xf_round_bits(v, 8, 7)); }
static inline __nv_bfloat16 __double2bfloat16(double v) { return xf_bf16_of(xf_round_bits(v, 8, 7)); }
static inline float __bfloat162float(__nv_bfloat16 h) { return xf_bits_value(h.bits, 8, 7); }

// ---- math the host's libm lacks -----------------------------------------------

// The inverse error function in double: Giles' single-precision
// approximation, then four Newton steps, on erf(y) - |x| below 0.5 and on
// log(erfc(y)) - log(1 - |x|) above (where 1 - |x| is exact and the
// tail's steep slope would slow plain Newton steps), to within a few ulp.
static inline double erfinv(double x) {
    if (isnan(x) || x < -1.0 || x > 1.0) return NAN;
    if (x == 1.0) return INFINITY;
    if (x == -1.0) return -INFINITY;
    if (x == 0.0) return x;
    const double a = fabs(x);
    double w = -log((1.0 - a) * (1.0 + a)), p;
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    double y = p * a;
    const double k = 1.1283791670955126;  // 2 / sqrt(pi), erf's slope at 0
    for (int i = 0; i < 4; ++i) {
        if (a < 0.5) {
            y -= (erf(y) - a) / (k * exp(-y * y));
        } else {
            const double e = erfc(y);
            y += (log(e) - log(1.0 - a)) * e / (k * exp(-y * y));
        }
    }
    return x < 0.0 ? -y : y;
}
static inline float erfinvf(float x) { return (float)erfinv((double)x); }

#endif
