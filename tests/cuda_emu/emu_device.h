/* What a CUDA C module needs to compile as host C++ for the emulator
 * (tests/cuda_emu/emu_nvrtc.c): the fake NVRTC compiles every generated module
 * with the host's C++ compiler and this header force-included, then adds
 * two entry points per kernel (emu_sig, emu_run below).
 *
 * Threads of a block run as fibers, one at a time, switched only at
 * __syncthreads; so `__shared__` is a static (one copy, shared by the
 * block, as blocks run one after another) and atomics are plain
 * read-modify-writes. The driver writes the thread's coordinates into
 * hd_emu_state before it resumes a fiber. */
#ifndef HD_EMU_DEVICE_H
#define HD_EMU_DEVICE_H

#include "hd_dtype.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>
#include <utility>

struct hd_emu_dim3 {
    unsigned x, y, z;
};

extern "C" {
/* One per module; the driver finds it with dlsym. */
struct hd_emu_state_t {
    hd_emu_dim3 thread, block, block_dim, grid_dim;
    void (*sync)(void); /* __syncthreads: back to the scheduler */
};
hd_emu_state_t hd_emu_state;
}

#define threadIdx hd_emu_state.thread
#define blockIdx  hd_emu_state.block
#define blockDim  hd_emu_state.block_dim
#define gridDim   hd_emu_state.grid_dim

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__      static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

static inline void __syncthreads(void) {
    hd_emu_state.sync();
}
static inline void __threadfence(void) {}

template <class T, class U> static inline T hd_emu_bits(U u) {
    static_assert(sizeof(T) == sizeof(U), "same size");
    T t;
    memcpy(&t, &u, sizeof t);
    return t;
}
static inline float __int_as_float(int x) {
    return hd_emu_bits<float>(x);
}
static inline float __uint_as_float(unsigned x) {
    return hd_emu_bits<float>(x);
}
static inline int __float_as_int(float x) {
    return hd_emu_bits<int>(x);
}
static inline unsigned __float_as_uint(float x) {
    return hd_emu_bits<unsigned>(x);
}
static inline double __longlong_as_double(long long x) {
    return hd_emu_bits<double>(x);
}
static inline long long __double_as_longlong(double x) {
    return hd_emu_bits<long long>(x);
}
static inline float rsqrtf(float x) {
    return 1.0f / sqrtf(x);
}
static inline double rsqrt(double x) {
    return 1.0 / sqrt(x);
}
static inline float __fdividef(float a, float b) {
    return a / b;
}

template <class A, class B> static inline typename std::common_type<A, B>::type min(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    return (C)a < (C)b ? (C)a : (C)b;
}
template <class A, class B> static inline typename std::common_type<A, B>::type max(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    return (C)a > (C)b ? (C)a : (C)b;
}

/* Fibers switch only at __syncthreads: a read-modify-write is atomic. */
#define HD_EMU_ATOMIC(name, update)                                                                \
    template <class T, class U> static inline T name(T *p, U v) {                                  \
        T old = *p;                                                                                \
        *p = (update);                                                                             \
        return old;                                                                                \
    }
HD_EMU_ATOMIC(atomicAdd, (T)(old + (T)v))
HD_EMU_ATOMIC(atomicMax, old > (T)v ? old : (T)v)
HD_EMU_ATOMIC(atomicMin, old < (T)v ? old : (T)v)
HD_EMU_ATOMIC(atomicExch, (T)v)
HD_EMU_ATOMIC(atomicOr, (T)(old | (T)v))
template <class T, class U, class V> static inline T atomicCAS(T *p, U cmp, V v) {
    T old = *p;
    if (old == (T)cmp) *p = (T)v;
    return old;
}

/* f16 <-> f32 with round to nearest even (the prelude's host branch): the
 * cpu backend's conversions */
static inline float hd_host_ld_f16(unsigned short h) {
    return hd_f16_to_f32(h);
}
static inline unsigned short hd_host_st_f16(float f) {
    return hd_f32_to_f16(f);
}

/* The entry points the fake NVRTC appends for each kernel k:
 * k__emu_sig(sizes, nptr, cap) gives the parameters' count (-1: more
 * than cap), sizes (the driver copies arguments by value, as cuLaunchKernel
 * and graph capture do) and how many device pointers each holds (the
 * driver moves those to its read-write view of device memory): 1 for a
 * pointer, N for a struct whose first N fields are pointers and that says
 * so with a member `static const int emu_lead_ptrs = N;` (a table of
 * tensors passed by value; on a GPU the member changes nothing), else 0;
 * k__emu_run(args) runs k for the current thread. */
template <class T, class = void> struct hd_emu_nptr {
    static const int value = std::is_pointer<T>::value;
};
template <class T> struct hd_emu_nptr<T, decltype((void)T::emu_lead_ptrs)> {
    static_assert(T::emu_lead_ptrs * sizeof(void *) <= sizeof(T) && T::emu_lead_ptrs < 65536,
                  "emu_lead_ptrs: more pointers than the struct holds");
    static const int value = T::emu_lead_ptrs;
};
template <class... A>
static int hd_emu_sig(void (*)(A...), size_t *sizes, unsigned short *nptr, int cap) {
    size_t s[] = {sizeof(A)..., 0};
    unsigned short p[] = {(unsigned short)hd_emu_nptr<A>::value..., 0};
    if ((int)sizeof...(A) > cap) return -1;
    for (size_t i = 0; i < sizeof...(A); i++) sizes[i] = s[i], nptr[i] = p[i];
    return (int)sizeof...(A);
}
template <class... A, size_t... I>
static void hd_emu_call(void (*f)(A...), void **args, std::index_sequence<I...>) {
    f(*(typename std::remove_reference<A>::type *)args[I]...);
}
template <class... A> static void hd_emu_run(void (*f)(A...), void **args) {
    hd_emu_call(f, args, std::index_sequence_for<A...>{});
}

#endif
