/* The f32 vector math (hd_vmath_algo.h) as C functions for the eager
 * kernels: hd_vm_expf, hd_vm_logf, hd_vm_tanhf, hd_vm_sigmoidf,
 * hd_vm_siluf, hd_vm_softplusf, hd_vm_geluf, hd_vm_sinf, hd_vm_cosf,
 * hd_vm_powf.
 *
 * Branch-free, on float and uint32_t, with fmaf for the fused
 * multiply-adds: GCC vectorizes loops over them where the target has FMA
 * (an fmaf call elsewhere: slower, the same bits). The generated code of
 * the llvm compiler evaluates the same operations (jit/hd_llvm_ops.c), so
 * eager and compiled results are equal bit for bit. Nothing may be
 * contracted into an FMA behind the algorithm's back: GCC does not in ISO C
 * mode (-std=c11, -ffp-contract=off), clang is told below. */
#ifndef HD_VMATH_H
#define HD_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The functions are always inlined: a loop over a call does not vectorize. */
#if defined(__GNUC__)
#define HD_VM_INLINE static inline __attribute__((always_inline))
#else
#define HD_VM_INLINE static inline
#endif

static inline float hd_vm_flt(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t hd_vm_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* m is all ones or all zeros: a select written with bit operations, which
 * GCC vectorizes without ever branching around a computation. */
static inline float hd_vm_self(uint32_t m, float a, float b) {
    return hd_vm_flt((hd_vm_bits(a) & m) | (hd_vm_bits(b) & ~m));
}

/* sin and cos's reduction table (hd_vmath_tab.c) */
extern const double hd_vm_pio2_tab[512];

static inline uint32_t hd_vm_dlo(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return (uint32_t)u;
}

static inline double hd_vm_dfromhi(uint32_t u) {
    uint64_t b = (uint64_t)u << 32;
    double d;
    memcpy(&d, &b, 8);
    return d;
}

/* d held to [lo, hi], NaN kept; bit selects, as hd_vm_self (GCC turns
 * ?: on doubles here into branches, and the loop is not vectorized) */
static inline double hd_vm_dsel(uint64_t m, double a, double b) {
    uint64_t ua, ub, r;
    memcpy(&ua, &a, 8);
    memcpy(&ub, &b, 8);
    r = (ua & m) | (ub & ~m);
    memcpy(&a, &r, 8);
    return a;
}

static inline double hd_vm_dclamp(double d, double lo, double hi) {
    d = hd_vm_dsel(0 - (uint64_t)(d < lo), lo, d);
    return hd_vm_dsel(0 - (uint64_t)(d > hi), hi, d);
}

#define VM_F                          float
#define VM_U                          uint32_t
#define VM_M                          uint32_t
#define VM_FN1(name, a)               HD_VM_INLINE float name(float a)
#define VM_FN2(name, a, b)            HD_VM_INLINE float name(float a, float b)
#define VM_CALL1(name, a)             name(a)
#define VM_CALL2(name, a, b)          name(a, b)
#define VM_FNQ(name, a, q)            HD_VM_INLINE float name(float a, int q)
#define VM_CALLQ(name, a, q)          name(a, q)
#define VM_FNSC(name, x, gh, gl, q)   HD_VM_INLINE float name(float x, double gh, double gl, int q)
#define VM_CALLSC(name, x, gh, gl, q) name(x, gh, gl, q)
#define VM_CF(c)                      ((float)(c))
#define VM_CU(c)                      ((uint32_t)(c))
#define VM_ADD(a, b)                  ((a) + (b))
#define VM_SUB(a, b)                  ((a) - (b))
#define VM_MUL(a, b)                  ((a) * (b))
#define VM_DIV(a, b)                  ((a) / (b))
#define VM_FMA(a, b, c)               fmaf(a, b, c)
#define VM_NEG(a)                     (-(a))
#define VM_MASK(c)                    (0u - (uint32_t)(c))
#define VM_LT(a, b)                   VM_MASK((a) < (b))
#define VM_LE(a, b)                   VM_MASK((a) <= (b))
#define VM_GT(a, b)                   VM_MASK((a) > (b))
#define VM_GE(a, b)                   VM_MASK((a) >= (b))
#define VM_EQ(a, b)                   VM_MASK((a) == (b))
#define VM_ULT(a, b)                  VM_MASK((a) < (b))
#define VM_ILT(a, b)                  VM_MASK((int32_t)(a) < (int32_t)(b))
#define VM_MAND(m, n)                 ((m) & (n))
#define VM_MOR(m, n)                  ((m) | (n))
#define VM_MNOT(m)                    (~(m))
#define VM_SELF(m, a, b)              hd_vm_self(m, a, b)
#define VM_SELU(m, a, b)              (((a) & (m)) | ((b) & ~(m)))
#define VM_BITS(f)                    hd_vm_bits(f)
#define VM_FLT(u)                     hd_vm_flt(u)
#define VM_UADD(a, b)                 ((uint32_t)((a) + (b)))
#define VM_USUB(a, b)                 ((uint32_t)((a) - (b)))
#define VM_UMUL(a, b)                 ((uint32_t)((a) * (b)))
#define VM_UAND(a, b)                 ((a) & (b))
#define VM_UOR(a, b)                  ((a) | (b))
#define VM_UXOR(a, b)                 ((a) ^ (b))
#define VM_SHL(a, k)                  ((uint32_t)((a) << (k)))
#define VM_SHR(a, k)                  ((a) >> (k))
#define VM_SAR(a, k)                  ((uint32_t)((int32_t)(a) >> (k)))
#define VM_ITOF(a)                    ((float)(int32_t)(a))
#define VM_UEQ(a, b)                  VM_MASK((a) == (b))
#define VM_D                          double
#define VM_CD(c)                      ((double)(c))
#define VM_DADD(a, b)                 ((a) + (b))
#define VM_DSUB(a, b)                 ((a) - (b))
#define VM_DMUL(a, b)                 ((a) * (b))
#define VM_DFMA(a, b, c)              fma(a, b, c)
#define VM_DNEG(a)                    (-(a))
#define VM_ITOD(a)                    ((double)(int32_t)(a))
#define VM_DTOF(a)                    ((float)(a))
#define VM_DLO(a)                     hd_vm_dlo(a)
#define VM_TABD(i)                    hd_vm_pio2_tab[i]
#define VM_DDIV(a, b)                 ((a) / (b))
#define VM_FTOD(a)                    ((double)(a))
#define VM_DCLAMP(d, lo, hi)          hd_vm_dclamp(d, lo, hi)
#define VM_DFROMHI(u)                 hd_vm_dfromhi(u)
#define VM_FTOI(a)                    ((uint32_t)(int32_t)(a))

#include "hd_vmath_algo.h"

#undef VM_F
#undef VM_U
#undef VM_M
#undef VM_FN1
#undef VM_FN2
#undef VM_CALL1
#undef VM_CALL2
#undef VM_CF
#undef VM_CU
#undef VM_ADD
#undef VM_SUB
#undef VM_MUL
#undef VM_DIV
#undef VM_FMA
#undef VM_NEG
#undef VM_MASK
#undef VM_LT
#undef VM_LE
#undef VM_GT
#undef VM_GE
#undef VM_EQ
#undef VM_ULT
#undef VM_ILT
#undef VM_MAND
#undef VM_MOR
#undef VM_MNOT
#undef VM_SELF
#undef VM_SELU
#undef VM_BITS
#undef VM_FLT
#undef VM_UADD
#undef VM_USUB
#undef VM_UMUL
#undef VM_UAND
#undef VM_UOR
#undef VM_UXOR
#undef VM_SHL
#undef VM_SHR
#undef VM_SAR
#undef VM_ITOF
#undef VM_UEQ
#undef VM_FNQ
#undef VM_CALLQ
#undef VM_FNSC
#undef VM_CALLSC
#undef VM_D
#undef VM_CD
#undef VM_DADD
#undef VM_DSUB
#undef VM_DMUL
#undef VM_DFMA
#undef VM_DNEG
#undef VM_ITOD
#undef VM_DTOF
#undef VM_DLO
#undef VM_TABD
#undef VM_DDIV
#undef VM_FTOD
#undef VM_DCLAMP
#undef VM_DFROMHI
#undef VM_FTOI

/* 2 / pi = HD_VM_2OPI_HI + HD_VM_2OPI_LO (106 bits) */
#define HD_VM_2OPI_HI 0x1.45f306dc9c883p-1
#define HD_VM_2OPI_LO -0x1.6b01ec5417056p-55
/* The first table entry that is reduced modulo 4 (|x| >= 2^25). */
#define HD_VM_SINCOS_BIG 176u

/* hd_vm_sincosf for |x| < 2^25, without the table: its entries there are
 * 2 / pi's two doubles times 2^(max(E, 1) - 150), exactly, and are made so
 * here (loops over table lookups are not vectorized by GCC on every CPU).
 * The eager kernels run this, then hd_vm_sincosf on the rare larger |x|. */
HD_VM_INLINE float hd_vm_sincosf_small(float x, int q) {
    uint32_t e = (hd_vm_bits(x) & 0x7FFFFFFFu) >> 23;
    uint64_t k = (uint64_t)(e + (e == 0) + (1023 - 150)) << 52; /* 2^(max(e, 1) - 150) */
    double p;
    memcpy(&p, &k, 8);
    return hd_vm_sincos_core(x, HD_VM_2OPI_HI * p, HD_VM_2OPI_LO * p, q);
}

#endif /* HD_VMATH_H */
