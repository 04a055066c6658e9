/* Elementwise kernels: unary ops, cast and copy, binary ops, comparisons and
 * where.
 *
 * Every op goes through the strided iterator of cpu_iter.h: the output is
 * usually fresh and contiguous, inputs are broadcast views with any strides;
 * dims contiguous in every operand are merged and each inner run goes to a
 * 1-D driver here. A driver calls one loop per (op, dtype) written over
 * contiguous arrays, or one array and one scalar (the broadcast operand), in
 * the plain form GCC -O2 vectorizes. Inputs with other strides are first
 * gathered into stack blocks of EW_BLOCK elements; f16 and bf16 inputs are
 * widened block by block to f32, computed by the f32 loop and rounded back
 * (f16 <-> f32 with F16C instructions where the CPU has them). An output
 * view that is not contiguous is written through a block too. The output
 * must not overlap the inputs.
 *
 * Semantics follow PyTorch unless said otherwise:
 * - bool tensors hold 0/1: add and maximum are "or", mul and minimum "and";
 * - integer arithmetic wraps (computed in the unsigned type, so it is never
 *   undefined); integer x % 0 gives 0 where torch raises, and x % -1 is 0;
 * - integer pow by squaring; a negative exponent gives 0 except for bases 1
 *   and -1; integer floor, ceil and round are the identity;
 * - integer clamp keeps the integers within [lo, hi] (ceil(lo), floor(hi)),
 *   saturated to the type; bool clamp is that, then "!= 0";
 * - maximum and minimum propagate NaN; sign(NaN) is NaN (torch gives 0);
 * - f32 (and f16, bf16) exp, log, tanh, sigmoid, silu, softplus, gelu,
 *   erf, erfc,
 *   sin, cos and pow are the shared vector math of hd_vmath.h
 *   (branch-free, vectorized by GCC, within 0.5 to 4 ulp, docs/vmath.md;
 *   the llvm compiler emits the same operations, so compiled code gives
 *   the same bits); f64 ones and fmod are libm;
 * - casts from float to an integer truncate toward zero, saturate at the
 *   type's limits and send NaN to 0 (hd_dtype_store's rule); casts between
 *   integers wrap; any cast to bool is "!= 0". */
#include "cpu_iter.h"
#include "hd_special.h"
#include "hd_vmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EW_BLOCK 256 /* elements per stack block for strided and f16/bf16 inputs */

typedef struct {
    double lo, hi; /* clamp bounds; NaN: no bound */
} ew_par;

/* Loops over contiguous arrays: o[i] = f(a[i]) and o[i] = f(a[i], b[i]);
 * the sv / vs forms read a (resp. b) as one scalar. */
typedef void (*ew_un_fn)(void *restrict o, const void *restrict a, int64_t n, const ew_par *p);
typedef void (*ew_bin_fn)(void *restrict o, const void *restrict a, const void *restrict b,
                          int64_t n);
typedef struct {
    ew_bin_fn vv, sv, vs;
} ew_bin3;
typedef void (*ew_where_fn)(void *restrict o, const uint8_t *restrict c, const void *restrict a,
                            const void *restrict b, int64_t n);

typedef union {
    double d[EW_BLOCK];
    int64_t l[EW_BLOCK];
    char c[EW_BLOCK * 8];
} ew_buf;

/* ---- conversions ---- */

static inline float ew_f32_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t ew_bits_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* f16 -> f32 without branches, so that loops over it vectorize (the method
 * of Maratyszcza's FP16 library). Equal to hd_f16_to_f32, except that a
 * signalling NaN comes back quiet. */
static inline float ew_h2f(uint16_t h) {
    uint32_t w = (uint32_t)h << 16;
    uint32_t sign = w & 0x80000000u, two_w = w + w;
    uint32_t norm = ew_bits_f32(ew_f32_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f);
    uint32_t denorm = ew_bits_f32(ew_f32_bits((two_w >> 17) | (126u << 23)) - 0.5f);
    uint32_t m = 0u - (uint32_t)(two_w < (1u << 27)); /* a mask, not ?:, keeps it branch-free */
    return ew_f32_bits(sign | (denorm & m) | (norm & ~m));
}

/* f32 -> f16, round to nearest even, branch-free; bit for bit
 * hd_f32_to_f16 (NaN keeps its sign and payload, made quiet). The scaling
 * lets the FPU do the rounding; it needs IEEE arithmetic (no fast-math). */
static inline uint16_t ew_f2h(float f) {
    float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    uint32_t w = ew_bits_f32(f);
    uint32_t shl1_w = w + w, sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    bias = bias < 0x71000000u ? 0x71000000u : bias;
    base = ew_f32_bits((bias >> 1) + 0x07800000u) + base;
    uint32_t bits = ew_bits_f32(base);
    uint32_t nonsign = ((bits >> 13) & 0x7C00u) + (bits & 0x0FFFu);
    uint32_t nan = 0x7E00u | ((w >> 13) & 0x3FFu);
    uint32_t m = 0u - (uint32_t)(shl1_w > 0xFF000000u);
    return (uint16_t)((sign >> 16) | (nan & m) | (nonsign & ~m));
}

static inline float ew_bf2f(uint16_t h) {
    return ew_f32_bits((uint32_t)h << 16);
}

/* hd_f32_to_bf16 written as a select so that it vectorizes. */
static inline uint16_t ew_f2bf(float f) {
    uint32_t x = ew_bits_f32(f);
    uint32_t r = (x + 0x7FFFu + ((x >> 16) & 1)) >> 16;
    return (uint16_t)((x & 0x7FFFFFFFu) > 0x7F800000u ? (x >> 16) | 0x40u : r);
}

/* Float to integer that is defined everywhere: NaN -> 0, saturate at
 * [lo, hi], else truncate toward zero. */
static inline int64_t ew_sat(double v, int64_t lo, int64_t hi) {
    if (v != v) return 0;
    if (v <= (double)lo) return lo;
    if (v >= (double)hi) return hi; /* (double)INT64_MAX is 2^63: caught here */
    return (int64_t)v;
}

/* An integer clamp bound: the integers x with x >= lo are those with
 * x >= ceil(lo) (and floor for hi); NaN means no bound. */
static inline int64_t ew_bound(double v, int is_lo, int64_t tmin, int64_t tmax) {
    if (v != v) return is_lo ? tmin : tmax;
    return ew_sat(is_lo ? ceil(v) : floor(v), tmin, tmax);
}

/* ---- loop templates ---- */

/* for i in [0, n): BODY, split so that the first loop's trip count is a
 * multiple of EW_LOOP_MASK + 1, the lanes to fill (8, or 16 where the
 * loops are compiled for AVX-512): GCC's -O2 vectorizer (cost model "very
 * cheap") only takes loops it can vectorize without a scalar epilogue. */
#define EW_LOOP_MASK 7
#define EW_LOOP(i, n, ...)                                                                         \
    do {                                                                                           \
        int64_t n8_ = (n) & ~(int64_t)EW_LOOP_MASK, i;                                             \
        for (i = 0; i < n8_; i++) __VA_ARGS__;                                                     \
        for (; i < (n); i++) __VA_ARGS__;                                                          \
    } while (0)

#define EW_UN(name, T, TO, EXPR) EW_UN_A(name, T, TO, EXPR, )
#define EW_UN_A(name, T, TO, EXPR, ATTR)                                                           \
    ATTR static void name(void *restrict o_, const void *restrict a_, int64_t n,                   \
                          const ew_par *p) {                                                       \
        TO *restrict o = o_;                                                                       \
        const T *restrict a = a_;                                                                  \
        (void)p;                                                                                   \
        EW_LOOP(i, n, {                                                                            \
            T x = a[i];                                                                            \
            o[i] = (TO)(EXPR);                                                                     \
        });                                                                                        \
    }

#define EW_BIN(name, T, TO, F) EW_BIN_A(name, T, TO, F, )
#define EW_BIN_A(name, T, TO, F, ATTR)                                                             \
    ATTR static void name##_vv(void *restrict o_, const void *restrict a_,                         \
                               const void *restrict b_, int64_t n) {                               \
        TO *restrict o = o_;                                                                       \
        const T *restrict a = a_, *restrict b = b_;                                                \
        EW_LOOP(i, n, o[i] = F(a[i], b[i]));                                                       \
    }                                                                                              \
    ATTR static void name##_sv(void *restrict o_, const void *restrict a_,                         \
                               const void *restrict b_, int64_t n) {                               \
        TO *restrict o = o_;                                                                       \
        const T x = *(const T *)a_, *restrict b = b_;                                              \
        EW_LOOP(i, n, o[i] = F(x, b[i]));                                                          \
    }                                                                                              \
    ATTR static void name##_vs(void *restrict o_, const void *restrict a_,                         \
                               const void *restrict b_, int64_t n) {                               \
        TO *restrict o = o_;                                                                       \
        const T y = *(const T *)b_, *restrict a = a_;                                              \
        EW_LOOP(i, n, o[i] = F(a[i], y));                                                          \
    }

#define EW_T_f32 float
#define EW_T_f64 double
#define EW_T_i8  int8_t
#define EW_T_u8  uint8_t
#define EW_T_i32 int32_t
#define EW_T_i64 int64_t
#define EW_T_b   uint8_t

#define EW_ARITH(op, s) EW_BIN(k_##op##_##s, EW_T_##s, EW_T_##s, op##_##s)
#define EW_CMP(op, s)   EW_BIN(k_##op##_##s, EW_T_##s, uint8_t, op##_##s)
#define EW_CMPS(X, s)   X(eq, s) X(ne, s) X(lt, s) X(le, s) X(gt, s) X(ge, s)
#define EW_ARITH_I(X, s)                                                                           \
    X(add, s) X(sub, s) X(mul, s) X(mod, s) X(pow, s) X(max, s) X(min, s) EW_CMPS(EW_CMP, s)
#define EW_ARITH_F(X, s) EW_ARITH_I(X, s) X(div, s) X(atan2, s)

/* ---- scalar ops ---- */

#define EW_CMP_OPS(s, T)                                                                           \
    static inline uint8_t eq_##s(T a, T b) {                                                       \
        return a == b;                                                                             \
    }                                                                                              \
    static inline uint8_t ne_##s(T a, T b) {                                                       \
        return a != b;                                                                             \
    }                                                                                              \
    static inline uint8_t lt_##s(T a, T b) {                                                       \
        return a < b;                                                                              \
    }                                                                                              \
    static inline uint8_t le_##s(T a, T b) {                                                       \
        return a <= b;                                                                             \
    }                                                                                              \
    static inline uint8_t gt_##s(T a, T b) {                                                       \
        return a > b;                                                                              \
    }                                                                                              \
    static inline uint8_t ge_##s(T a, T b) {                                                       \
        return a >= b;                                                                             \
    }

/* f32 pow: the shared vector math (hd_vmath.h); f64: libm. */
#define EW_POW_f32(a, b) hd_vm_powf(a, b)
#define EW_POW_f64(a, b) pow(a, b)

/* Float ops; M is the libm suffix (f for float, empty for double).
 * mod is torch.remainder: fmod, then moved into the divisor's sign. */
#define EW_FLOAT_OPS(s, T, M)                                                                      \
    static inline T add_##s(T a, T b) {                                                            \
        return a + b;                                                                              \
    }                                                                                              \
    static inline T sub_##s(T a, T b) {                                                            \
        return a - b;                                                                              \
    }                                                                                              \
    static inline T mul_##s(T a, T b) {                                                            \
        return a * b;                                                                              \
    }                                                                                              \
    static inline T div_##s(T a, T b) {                                                            \
        return a / b;                                                                              \
    }                                                                                              \
    static inline T atan2_##s(T a, T b) {                                                          \
        return atan2##M(a, b);                                                                     \
    }                                                                                              \
    static inline T mod_##s(T a, T b) {                                                            \
        T m = fmod##M(a, b);                                                                       \
        return m != 0 && ((b < 0) != (m < 0)) ? m + b : m;                                         \
    }                                                                                              \
    HD_VM_INLINE T pow_##s(T a, T b) { /* always inlined: a call does not vectorize */             \
        return EW_POW_##s(a, b);                                                                   \
    }                                                                                              \
    static inline T max_##s(T a, T b) {                                                            \
        return a != a || a > b ? a : b;                                                            \
    }                                                                                              \
    static inline T min_##s(T a, T b) {                                                            \
        return a != a || a < b ? a : b;                                                            \
    }                                                                                              \
    EW_CMP_OPS(s, T)

/* Integer ops computed in the unsigned type U so that overflow wraps. */
#define EW_INT_OPS(s, T, U)                                                                        \
    static inline T add_##s(T a, T b) {                                                            \
        return (T)((U)a + (U)b);                                                                   \
    }                                                                                              \
    static inline T sub_##s(T a, T b) {                                                            \
        return (T)((U)a - (U)b);                                                                   \
    }                                                                                              \
    static inline T mul_##s(T a, T b) {                                                            \
        return (T)((U)a * (U)b);                                                                   \
    }                                                                                              \
    static inline T max_##s(T a, T b) {                                                            \
        return a > b ? a : b;                                                                      \
    }                                                                                              \
    static inline T min_##s(T a, T b) {                                                            \
        return a < b ? a : b;                                                                      \
    }                                                                                              \
    EW_CMP_OPS(s, T)

/* Signed mod has the divisor's sign (Python, torch.remainder). x % 0 is 0
 * (the CPU would trap; torch raises) and x % -1 is 0, which also keeps
 * INT_MIN % -1 from trapping. pow: by squaring in U, wrapping; a negative
 * exponent gives 0 but for bases 1 and -1. */
#define EW_SIGNED_OPS(s, T, U)                                                                     \
    static inline T mod_##s(T a, T b) {                                                            \
        if (b == 0 || b == -1) return 0;                                                           \
        T r = (T)(a % b);                                                                          \
        return r != 0 && ((r < 0) != (b < 0)) ? (T)(r + b) : r;                                    \
    }                                                                                              \
    static inline T pow_##s(T a, T b) {                                                            \
        if (b < 0) return (T)(a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0);                      \
        U r = 1, x = (U)a;                                                                         \
        for (; b; b >>= 1) {                                                                       \
            if (b & 1) r = (U)(r * x);                                                             \
            x = (U)(x * x);                                                                        \
        }                                                                                          \
        return (T)r;                                                                               \
    }

EW_FLOAT_OPS(f32, float, f)
EW_FLOAT_OPS(f64, double, )
EW_INT_OPS(i8, int8_t, uint8_t)
EW_INT_OPS(u8, uint8_t, uint8_t)
EW_INT_OPS(i32, int32_t, uint32_t)
EW_INT_OPS(i64, int64_t, uint64_t)
EW_SIGNED_OPS(i8, int8_t, uint8_t)
EW_SIGNED_OPS(i32, int32_t, uint32_t)
EW_SIGNED_OPS(i64, int64_t, uint64_t)

static inline uint8_t mod_u8(uint8_t a, uint8_t b) {
    return b ? (uint8_t)(a % b) : 0;
}

static inline uint8_t pow_u8(uint8_t a, uint8_t b) {
    unsigned r = 1, x = a;
    for (; b; b >>= 1) {
        if (b & 1) r *= x;
        x *= x;
    }
    return (uint8_t)r;
}

/* bool: any nonzero byte is true; results are 0/1. */
#define EW_TRUE(v) ((v) != 0)
static inline uint8_t or_b(uint8_t a, uint8_t b) {
    return (a | b) != 0;
}
static inline uint8_t and_b(uint8_t a, uint8_t b) {
    return EW_TRUE(a) & EW_TRUE(b);
}
static inline uint8_t eq_b(uint8_t a, uint8_t b) {
    return EW_TRUE(a) == EW_TRUE(b);
}
static inline uint8_t ne_b(uint8_t a, uint8_t b) {
    return EW_TRUE(a) != EW_TRUE(b);
}
static inline uint8_t lt_b(uint8_t a, uint8_t b) {
    return EW_TRUE(a) < EW_TRUE(b);
}
static inline uint8_t le_b(uint8_t a, uint8_t b) {
    return EW_TRUE(a) <= EW_TRUE(b);
}
static inline uint8_t gt_b(uint8_t a, uint8_t b) {
    return EW_TRUE(a) > EW_TRUE(b);
}
static inline uint8_t ge_b(uint8_t a, uint8_t b) {
    return EW_TRUE(a) >= EW_TRUE(b);
}

/* ---- binary and compare loops ---- */

EW_ARITH_F(EW_ARITH, f32)
EW_ARITH_F(EW_ARITH, f64)
EW_ARITH_I(EW_ARITH, i8)
EW_ARITH_I(EW_ARITH, u8)
EW_ARITH_I(EW_ARITH, i32)
EW_ARITH_I(EW_ARITH, i64)
EW_BIN(k_or_b, uint8_t, uint8_t, or_b)
EW_BIN(k_and_b, uint8_t, uint8_t, and_b)
EW_CMPS(EW_CMP, b)

/* ---- unary loops ---- */

#define EW_CLAMP_F(s, T)                                                                           \
    static void k_clamp_##s(void *restrict o_, const void *restrict a_, int64_t n,                 \
                            const ew_par *p) {                                                     \
        T *restrict o = o_;                                                                        \
        const T *restrict a = a_;                                                                  \
        const T lo = p->lo != p->lo ? (T)-INFINITY : (T)p->lo;                                     \
        const T hi = p->hi != p->hi ? (T)INFINITY : (T)p->hi;                                      \
        EW_LOOP(i, n, {                                                                            \
            T y = a[i] < lo ? lo : a[i]; /* NaN stays NaN */                                       \
            o[i] = y > hi ? hi : y;                                                                \
        });                                                                                        \
    }

#define EW_CLAMP_I(s, T, TMIN, TMAX)                                                               \
    static void k_clamp_##s(void *restrict o_, const void *restrict a_, int64_t n,                 \
                            const ew_par *p) {                                                     \
        T *restrict o = o_;                                                                        \
        const T *restrict a = a_;                                                                  \
        const T lo = (T)ew_bound(p->lo, 1, TMIN, TMAX), hi = (T)ew_bound(p->hi, 0, TMIN, TMAX);    \
        EW_LOOP(i, n, {                                                                            \
            T y = a[i] < lo ? lo : a[i];                                                           \
            o[i] = y > hi ? hi : y;                                                                \
        });                                                                                        \
    }

/* f32: the shared vector math (hd_vmath.h); f64: libm. gelu is torch's
 * exact form 0.5 x (1 + erf(x / sqrt 2)), written with erfc so that it
 * keeps its accuracy for negative x; softplus: beta 1, threshold 20. */
#define EW_EXP_f32(x)      hd_vm_expf(x)
#define EW_EXP_f64(x)      exp(x)
#define EW_LOG_f32(x)      hd_vm_logf(x)
#define EW_LOG_f64(x)      log(x)
#define EW_TANH_f32(x)     hd_vm_tanhf(x)
#define EW_TANH_f64(x)     tanh(x)
#define EW_SIGMOID_f32(x)  hd_vm_sigmoidf(x)
#define EW_SIGMOID_f64(x)  (1 / (1 + exp(-(x))))
#define EW_SILU_f32(x)     hd_vm_siluf(x)
#define EW_SILU_f64(x)     ((x) / (1 + exp(-(x))))
#define EW_SOFTPLUS_f32(x) hd_vm_softplusf(x)
#define EW_SOFTPLUS_f64(x) ((x) > 20 ? (x) : log1p(exp(x)))
#define EW_GELU_f32(x)     hd_vm_geluf(x)
#define EW_GELU_f64(x)     (0.5 * (x)*erfc(-(x)*M_SQRT1_2))
#define EW_ERF_f32(x)      hd_vm_erff(x)
#define EW_ERF_f64(x)      erf(x)
#define EW_ERFC_f32(x)     hd_vm_erfcf(x)
#define EW_ERFC_f64(x)     erfc(x)

/* f32 sin and cos: hd_vm_sincosf_small vectorized over the run (exact
 * where |x| < 2^25), then hd_vm_sincosf, which reads its table, on the few
 * larger |x| (GCC does not vectorize loops over table lookups on every
 * CPU); the same bits as hd_vm_sinf / hd_vm_cosf everywhere. */
#define EW_SINCOS_F32(name, q, ATTR)                                                               \
    ATTR static void name(void *restrict o_, const void *restrict a_, int64_t n,                   \
                          const ew_par *p) {                                                       \
        float *restrict o = o_;                                                                    \
        const float *restrict a = a_;                                                              \
        uint32_t big = 0;                                                                          \
        (void)p;                                                                                   \
        EW_LOOP(i, n, {                                                                            \
            float x = a[i];                                                                        \
            o[i] = hd_vm_sincosf_small(x, q);                                                      \
            big |= (ew_bits_f32(x) & 0x7FFFFFFFu) >= HD_VM_SINCOS_BIG << 23;                       \
        });                                                                                        \
        if (big)                                                                                   \
            for (int64_t i = 0; i < n; i++)                                                        \
                if ((ew_bits_f32(a[i]) & 0x7FFFFFFFu) >= HD_VM_SINCOS_BIG << 23)                   \
                    o[i] = hd_vm_sincosf(a[i], q);                                                 \
    }
EW_SINCOS_F32(k_sin_f32, 0, )
EW_SINCOS_F32(k_cos_f32, 1, )
EW_UN(k_sin_f64, double, double, sin(x))
EW_UN(k_cos_f64, double, double, cos(x))

/* round: half to even. */
/* sign of a float: selects of values, then + 0 for all (-0 to 0, NaN
 * quiet; NaN stays NaN, torch gives 0). GCC if-converts the selects into
 * vector blends only where an ordered compare may not trap (the file is
 * built with -fno-trapping-math, CMakeLists.txt); otherwise it branches on
 * the sign of each element, which random data mispredicts half the time:
 * sign was 45x slower than neg. floor and ceil vectorize on the same
 * condition, sqrt where it need not set errno (-fno-math-errno). */
#define EW_SIGN(T, x) (((x) > 0 ? (T)1 : (x) < 0 ? (T)-1 : (x)) + (T)0)
#define EW_FLOAT_UNARY(s, T, M)                                                                    \
    EW_UN(k_neg_##s, T, T, -x)                                                                     \
    EW_UN(k_abs_##s, T, T, fabs##M(x))                                                             \
    EW_UN(k_exp_##s, T, T, EW_EXP_##s(x))                                                          \
    EW_UN(k_log_##s, T, T, EW_LOG_##s(x))                                                          \
    EW_UN(k_sqrt_##s, T, T, sqrt##M(x))                                                            \
    EW_UN(k_rsqrt_##s, T, T, (T)1 / sqrt##M(x))                                                    \
    EW_UN(k_tanh_##s, T, T, EW_TANH_##s(x))                                                        \
    EW_UN(k_sigmoid_##s, T, T, EW_SIGMOID_##s(x))                                                  \
    EW_UN(k_relu_##s, T, T, x <= 0 ? (T)0 : x)                                                     \
    EW_UN(k_gelu_##s, T, T, EW_GELU_##s(x))                                                        \
    EW_UN(k_silu_##s, T, T, EW_SILU_##s(x))                                                        \
    EW_UN(k_softplus_##s, T, T, EW_SOFTPLUS_##s(x))                                                \
    EW_UN(k_erf_##s, T, T, EW_ERF_##s(x))                                                          \
    EW_UN(k_erfc_##s, T, T, EW_ERFC_##s(x))                                                        \
    EW_UN(k_lgamma_##s, T, T, hd_lgamma##M(x))                                                     \
    EW_UN(k_polygamma_##s, T, T, hd_polygamma##M((T)p->lo, x))                                     \
    EW_UN(k_sign_##s, T, T, EW_SIGN(T, x))                                                         \
    EW_UN(k_floor_##s, T, T, floor##M(x))                                                          \
    EW_UN(k_ceil_##s, T, T, ceil##M(x))                                                            \
    EW_UN(k_round_##s, T, T, nearbyint##M(x))                                                      \
    EW_CLAMP_F(s, T)

/* Signed integers; negation in U so that -INT_MIN wraps to INT_MIN. */
#define EW_SIGNED_UNARY(s, T, U, TMIN, TMAX)                                                       \
    EW_UN(k_neg_##s, T, T, (U)0 - (U)x)                                                            \
    EW_UN(k_abs_##s, T, T, x < 0 ? (T)((U)0 - (U)x) : x)                                           \
    EW_UN(k_relu_##s, T, T, x > 0 ? x : 0)                                                         \
    EW_UN(k_sign_##s, T, T, (x > 0) - (x < 0))                                                     \
    EW_CLAMP_I(s, T, TMIN, TMAX)

EW_FLOAT_UNARY(f32, float, f)
EW_FLOAT_UNARY(f64, double, )
EW_SIGNED_UNARY(i8, int8_t, uint8_t, INT8_MIN, INT8_MAX)
EW_SIGNED_UNARY(i32, int32_t, uint32_t, INT32_MIN, INT32_MAX)
EW_SIGNED_UNARY(i64, int64_t, uint64_t, INT64_MIN, INT64_MAX)
EW_UN(k_neg_u8, uint8_t, uint8_t, 0u - x)
EW_UN(k_sign_u8, uint8_t, uint8_t, x > 0)
EW_CLAMP_I(u8, uint8_t, 0, UINT8_MAX)

/* bool clamp: clamp 0/1 in the integers, then "!= 0" as a cast to bool. */
static void k_clamp_b(void *restrict o_, const void *restrict a_, int64_t n, const ew_par *p) {
    uint8_t *restrict o = o_;
    const uint8_t *restrict a = a_;
    const int64_t lo = ew_bound(p->lo, 1, INT64_MIN, INT64_MAX);
    const int64_t hi = ew_bound(p->hi, 0, INT64_MIN, INT64_MAX);
    EW_LOOP(i, n, {
        int64_t y = a[i] != 0;
        y = y < lo ? lo : y;
        o[i] = (y > hi ? hi : y) != 0;
    });
}
EW_UN(k_not_b, uint8_t, uint8_t, x == 0)

/* Marks ops that are a plain copy for a dtype (integer floor, abs of bool,
 * clone, ...): the driver copies without a loop of its own. Never called. */
static void ew_copy_mark(void *restrict o, const void *restrict a, int64_t n, const ew_par *p) {
    HD_UNUSED(o);
    HD_UNUSED(a);
    HD_UNUSED(n);
    HD_UNUSED(p);
}

/* ---- casts: one loop per (from, to) pair ---- */

#define EW_DTYPES(X)                                                                               \
    X(f16, uint16_t)                                                                               \
    X(bf16, uint16_t)                                                                              \
    X(f32, float)                                                                                  \
    X(f64, double)                                                                                 \
    X(i8, int8_t)                                                                                  \
    X(u8, uint8_t)                                                                                 \
    X(i32, int32_t)                                                                                \
    X(i64, int64_t)                                                                                \
    X(b, uint8_t)

_Static_assert(HD_F16 == 0 && HD_BF16 == 1 && HD_F32 == 2 && HD_F64 == 3 && HD_I8 == 4 &&
                   HD_U8 == 5 && HD_I32 == 6 && HD_I64 == 7 && HD_BOOL == 8,
               "EW_DTYPES follows hd_dtype's order");

/* Load: the value in its compute type (f16/bf16 widen to float). */
#define EW_LD_f16(v)  ew_h2f(v)
#define EW_LD_bf16(v) ew_bf2f(v)
#define EW_LD_f32(v)  (v)
#define EW_LD_f64(v)  (v)
#define EW_LD_i8(v)   (v)
#define EW_LD_u8(v)   (v)
#define EW_LD_i32(v)  (v)
#define EW_LD_i64(v)  (v)
#define EW_LD_b(v)    ((uint8_t)((v) != 0))

/* Convert a loaded value to the output type. To an integer: float sources
 * saturate (NaN -> 0), integer sources wrap modulo 2^bits as C's
 * conversion does on every target GCC supports (and as torch). */
// clang-format off
#define EW_CV_INT(T, v, lo, hi)                                                                    \
    _Generic((v), float: (T)ew_sat((double)(v), lo, hi),                                          \
                  double: (T)ew_sat((double)(v), lo, hi),                                         \
                  default: (T)(v))
// clang-format on
#define EW_CV_f16(v)  ew_f2h((float)(v))
#define EW_CV_bf16(v) ew_f2bf((float)(v))
#define EW_CV_f32(v)  ((float)(v))
#define EW_CV_f64(v)  ((double)(v))
#define EW_CV_i8(v)   EW_CV_INT(int8_t, v, INT8_MIN, INT8_MAX)
#define EW_CV_u8(v)   EW_CV_INT(uint8_t, v, 0, UINT8_MAX)
#define EW_CV_i32(v)  EW_CV_INT(int32_t, v, INT32_MIN, INT32_MAX)
#define EW_CV_i64(v)  EW_CV_INT(int64_t, v, INT64_MIN, INT64_MAX)
#define EW_CV_b(v)    ((uint8_t)((v) != 0))

#define EW_CAST_FN(si, TI, so, TO) EW_UN(k_cast_##si##_##so, TI, TO, EW_CV_##so(EW_LD_##si(x)))
#define EW_CAST_FROM(si, TI)                                                                       \
    EW_CAST_FN(si, TI, f16, uint16_t)                                                              \
    EW_CAST_FN(si, TI, bf16, uint16_t)                                                             \
    EW_CAST_FN(si, TI, f32, float)                                                                 \
    EW_CAST_FN(si, TI, f64, double)                                                                \
    EW_CAST_FN(si, TI, i8, int8_t)                                                                 \
    EW_CAST_FN(si, TI, u8, uint8_t)                                                                \
    EW_CAST_FN(si, TI, i32, int32_t)                                                               \
    EW_CAST_FN(si, TI, i64, int64_t)                                                               \
    EW_CAST_FN(si, TI, b, uint8_t)
EW_DTYPES(EW_CAST_FROM)

#define EW_CAST_ROW(si, TI)                                                                        \
    {                                                                                              \
        k_cast_##si##_f16, k_cast_##si##_bf16, k_cast_##si##_f32,                                  \
        k_cast_##si##_f64, k_cast_##si##_i8,   k_cast_##si##_u8,                                   \
        k_cast_##si##_i32, k_cast_##si##_i64,  k_cast_##si##_b},
/* cast_table[from][to]; the diagonal is never used (a same-dtype cast copies). */
static const ew_un_fn cast_table[HD_DTYPE_COUNT][HD_DTYPE_COUNT] = {EW_DTYPES(EW_CAST_ROW)};

/* ---- where: one loop per dtype ---- */

#define EW_WHERE_FN(s, T)                                                                          \
    static void k_where_##s(void *restrict o_, const uint8_t *restrict c, const void *restrict a_, \
                            const void *restrict b_, int64_t n) {                                  \
        T *restrict o = o_;                                                                        \
        const T *restrict a = a_, *restrict b = b_;                                                \
        EW_LOOP(i, n, {                                                                            \
            T x = a[i], y = b[i]; /* both loaded: GCC will not vectorize a conditional load */     \
            o[i] = c[i] ? x : y;                                                                   \
        });                                                                                        \
    }
EW_DTYPES(EW_WHERE_FN)
#define EW_WHERE_ENTRY(s, T) k_where_##s,
static const ew_where_fn where_table[HD_DTYPE_COUNT] = {EW_DTYPES(EW_WHERE_ENTRY)};

/* ---- the vector math's loops for the CPU at hand ---- */

/* hd_vmath.h's fused multiply-adds are fmaf: one instruction where the
 * build targets FMA (the -march=native default), a libm call each
 * elsewhere (HODU_NATIVE=OFF), the same bits. And the build leaves AVX-512
 * out (valgrind cannot run it), so these loops run 8 lanes wide where the
 * CPU has 16. So the f32 vector math loops are compiled twice more, for
 * AVX2 + FMA and for AVX-512 (16 lanes: their main loops take multiples of
 * 16, as GCC's -O2 vectoriser wants no remainder), and the CPU picks at
 * the first call. Every lane computes the same operations in the same
 * order, so the bits do not change with the choice (test_vmath); under
 * valgrind, whose CPU has no AVX-512, the AVX2 loops run. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define EW_VM_DISPATCH 1
#define EW_FMA_TARGET  __attribute__((target("avx2,fma")))
#define EW_512_TARGET  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
#define EW_VM_LOOPS(sfx, ATTR)                                                                     \
    EW_UN_A(k_exp_f32##sfx, float, float, hd_vm_expf(x), ATTR)                                     \
    EW_UN_A(k_log_f32##sfx, float, float, hd_vm_logf(x), ATTR)                                     \
    EW_UN_A(k_tanh_f32##sfx, float, float, hd_vm_tanhf(x), ATTR)                                   \
    EW_UN_A(k_sigmoid_f32##sfx, float, float, hd_vm_sigmoidf(x), ATTR)                             \
    EW_UN_A(k_silu_f32##sfx, float, float, hd_vm_siluf(x), ATTR)                                   \
    EW_UN_A(k_softplus_f32##sfx, float, float, hd_vm_softplusf(x), ATTR)                           \
    EW_UN_A(k_gelu_f32##sfx, float, float, hd_vm_geluf(x), ATTR)                                   \
    EW_UN_A(k_erf_f32##sfx, float, float, hd_vm_erff(x), ATTR)                                     \
    EW_UN_A(k_erfc_f32##sfx, float, float, hd_vm_erfcf(x), ATTR)                                   \
    EW_SINCOS_F32(k_sin_f32##sfx, 0, ATTR)                                                         \
    EW_SINCOS_F32(k_cos_f32##sfx, 1, ATTR)                                                         \
    EW_BIN_A(k_pow_f32##sfx, float, float, hd_vm_powf, ATTR)
EW_VM_LOOPS(_fma, EW_FMA_TARGET)
#undef EW_LOOP_MASK
#define EW_LOOP_MASK 15
EW_VM_LOOPS(_512, EW_512_TARGET)
#undef EW_LOOP_MASK
#define EW_LOOP_MASK 7

/* The loops the CPU runs, capped by HODU_VMATH ("base", "avx2"; the
 * tests run both on every machine): 2 AVX-512, 1 AVX2 and FMA, 0 the
 * build's own. */
static int ew_vm_level_of_cpu(void) {
    const char *cap = getenv("HODU_VMATH");
    int max = cap && !strcmp(cap, "base") ? 0 : cap && !strcmp(cap, "avx2") ? 1 : 2;
    if (max >= 2 && hd_cpu_avx512()) return 2;
    return max >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int ew_vm_level(void) {
    static int level = -1; /* a benign race: every thread stores the same */
    if (level < 0) level = ew_vm_level_of_cpu();
    return level;
}

#define EW_VM_PICK_UN(k)                                                                           \
    static void k##_pick(void *restrict o, const void *restrict a, int64_t n, const ew_par *p) {   \
        int l = ew_vm_level();                                                                     \
        (l == 2 ? k##_512 : l == 1 ? k##_fma : k)(o, a, n, p);                                     \
    }
#define EW_VM_PICK_BIN1(k, f)                                                                      \
    static void k##_pick##f(void *restrict o, const void *restrict a, const void *restrict b,      \
                            int64_t n) {                                                           \
        int l = ew_vm_level();                                                                     \
        (l == 2 ? k##_512##f : l == 1 ? k##_fma##f : k##f)(o, a, b, n);                            \
    }
EW_VM_PICK_UN(k_exp_f32)
EW_VM_PICK_UN(k_log_f32)
EW_VM_PICK_UN(k_tanh_f32)
EW_VM_PICK_UN(k_sigmoid_f32)
EW_VM_PICK_UN(k_silu_f32)
EW_VM_PICK_UN(k_softplus_f32)
EW_VM_PICK_UN(k_gelu_f32)
EW_VM_PICK_UN(k_erf_f32)
EW_VM_PICK_UN(k_erfc_f32)
EW_VM_PICK_UN(k_sin_f32)
EW_VM_PICK_UN(k_cos_f32)
EW_VM_PICK_BIN1(k_pow_f32, _vv)
EW_VM_PICK_BIN1(k_pow_f32, _sv)
EW_VM_PICK_BIN1(k_pow_f32, _vs)
#define EW_VMK(k) k##_f32_pick
#else
#define EW_VM_DISPATCH 0
#define EW_VMK(k)      k##_f32
#endif

/* x ** 2, the exponent a scalar: the multiply hd_vm_powf makes of y = 2
 * (the same bits) without the rest of pow, 45 times faster. */
static void k_pow_f32_vs_sq(void *restrict o, const void *restrict a, const void *restrict b,
                            int64_t n) {
    if (*(const float *)b == 2.0f)
        k_mul_f32_vv(o, a, a, n);
    else
#if EW_VM_DISPATCH
        k_pow_f32_pick_vs(o, a, b, n);
#else
        k_pow_f32_vs(o, a, b, n);
#endif
}
#if EW_VM_DISPATCH
#define EW_POW_F32                                                                                 \
    { k_pow_f32_pick_vv, k_pow_f32_pick_sv, k_pow_f32_vs_sq }
#else
#define EW_POW_F32                                                                                 \
    { k_pow_f32_vv, k_pow_f32_sv, k_pow_f32_vs_sq }
#endif

/* ---- op tables: NULL where an op is not defined for a dtype ---- */

/* f16 and bf16 rows name the f32 loop: the drivers widen them. */
#define EW_FLOATS(k) [HD_F16] = k##_f32, [HD_BF16] = k##_f32, [HD_F32] = k##_f32, [HD_F64] = k##_f64
#define EW_FLOATS_VM(k)                                                                            \
    [HD_F16] = EW_VMK(k), [HD_BF16] = EW_VMK(k), [HD_F32] = EW_VMK(k), [HD_F64] = k##_f64
#define EW_SIGNED(k) [HD_I8] = k##_i8, [HD_I32] = k##_i32, [HD_I64] = k##_i64
#define EW_INTS(k)   EW_SIGNED(k), [HD_U8] = k##_u8
#define EW_COPY_INTS                                                                               \
    [HD_I8] = ew_copy_mark, [HD_U8] = ew_copy_mark, [HD_I32] = ew_copy_mark,                       \
    [HD_I64] = ew_copy_mark, [HD_BOOL] = ew_copy_mark
#define EW_COPY_ALL                                                                                \
    [HD_F16] = ew_copy_mark, [HD_BF16] = ew_copy_mark, [HD_F32] = ew_copy_mark,                    \
    [HD_F64] = ew_copy_mark, EW_COPY_INTS

static const ew_un_fn un_table[HD_OP_COUNT][HD_DTYPE_COUNT] = {
    [HD_OP_NEG] = {EW_FLOATS(k_neg), EW_INTS(k_neg)},
    [HD_OP_ABS] = {EW_FLOATS(k_abs),
                   EW_SIGNED(k_abs), [HD_U8] = ew_copy_mark, [HD_BOOL] = ew_copy_mark},
    [HD_OP_EXP] = {EW_FLOATS_VM(k_exp)},
    [HD_OP_LOG] = {EW_FLOATS_VM(k_log)},
    [HD_OP_SQRT] = {EW_FLOATS(k_sqrt)},
    [HD_OP_RSQRT] = {EW_FLOATS(k_rsqrt)},
    [HD_OP_SIN] = {EW_FLOATS_VM(k_sin)},
    [HD_OP_COS] = {EW_FLOATS_VM(k_cos)},
    [HD_OP_TANH] = {EW_FLOATS_VM(k_tanh)},
    [HD_OP_SIGMOID] = {EW_FLOATS_VM(k_sigmoid)},
    [HD_OP_RELU] = {EW_FLOATS(k_relu), EW_SIGNED(k_relu), [HD_U8] = ew_copy_mark},
    [HD_OP_GELU] = {EW_FLOATS_VM(k_gelu)},
    [HD_OP_SILU] = {EW_FLOATS_VM(k_silu)},
    [HD_OP_SOFTPLUS] = {EW_FLOATS_VM(k_softplus)},
    [HD_OP_ERF] = {EW_FLOATS_VM(k_erf)},
    [HD_OP_ERFC] = {EW_FLOATS_VM(k_erfc)},
    [HD_OP_LGAMMA] = {EW_FLOATS(k_lgamma)},
    [HD_OP_POLYGAMMA] = {EW_FLOATS(k_polygamma)},
    [HD_OP_SIGN] = {EW_FLOATS(k_sign), EW_INTS(k_sign)},
    [HD_OP_FLOOR] = {EW_FLOATS(k_floor), EW_COPY_INTS},
    [HD_OP_CEIL] = {EW_FLOATS(k_ceil), EW_COPY_INTS},
    [HD_OP_ROUND] = {EW_FLOATS(k_round), EW_COPY_INTS},
    [HD_OP_CLAMP] = {EW_FLOATS(k_clamp), EW_INTS(k_clamp), [HD_BOOL] = k_clamp_b},
    [HD_OP_NOT] = {[HD_BOOL] = k_not_b},
    [HD_OP_COPY] = {EW_COPY_ALL},
};

#define EW_B3(k)                                                                                   \
    { k##_vv, k##_sv, k##_vs }
#define EW_BFLOATS(op)                                                                             \
    [HD_F16] = EW_B3(k_##op##_f32), [HD_BF16] = EW_B3(k_##op##_f32),                               \
    [HD_F32] = EW_B3(k_##op##_f32), [HD_F64] = EW_B3(k_##op##_f64)
#define EW_BINTS(op)                                                                               \
    [HD_I8] = EW_B3(k_##op##_i8), [HD_U8] = EW_B3(k_##op##_u8), [HD_I32] = EW_B3(k_##op##_i32),    \
    [HD_I64] = EW_B3(k_##op##_i64)
#define EW_BALL(op) EW_BFLOATS(op), EW_BINTS(op)
#define EW_BCMP(op)                                                                                \
    { EW_BALL(op), [HD_BOOL] = EW_B3(k_##op##_b) }

static const ew_bin3 bin_table[HD_OP_COUNT][HD_DTYPE_COUNT] = {
    [HD_OP_ADD] = {EW_BALL(add), [HD_BOOL] = EW_B3(k_or_b)},
    [HD_OP_SUB] = {EW_BALL(sub)},
    [HD_OP_MUL] = {EW_BALL(mul), [HD_BOOL] = EW_B3(k_and_b)},
    [HD_OP_DIV] = {EW_BFLOATS(div)},
    [HD_OP_ATAN2] = {EW_BFLOATS(atan2)},
    [HD_OP_MOD] = {EW_BALL(mod)},
    [HD_OP_POW] = {[HD_F16] = EW_POW_F32,
                   [HD_BF16] = EW_POW_F32,
                   [HD_F32] = EW_POW_F32,
                   [HD_F64] = EW_B3(k_pow_f64),
                   EW_BINTS(pow)},
    [HD_OP_MAXIMUM] = {EW_BALL(max), [HD_BOOL] = EW_B3(k_or_b)},
    [HD_OP_MINIMUM] = {EW_BALL(min), [HD_BOOL] = EW_B3(k_and_b)},
    [HD_OP_EQ] = EW_BCMP(eq),
    [HD_OP_NE] = EW_BCMP(ne),
    [HD_OP_LT] = EW_BCMP(lt),
    [HD_OP_LE] = EW_BCMP(le),
    [HD_OP_GT] = EW_BCMP(gt),
    [HD_OP_GE] = EW_BCMP(ge),
};

/* ---- block helpers ---- */

/* dst[i] = src[i * st] for n elements of es bytes (st in elements; 0
 * repeats one element). memcpy keeps the copies free of type punning. */
static void ew_gather(void *restrict dst, const char *restrict src, int64_t st, int64_t n, int es) {
    char *d = dst;
    if (st == 1) {
        memcpy(d, src, (size_t)(n * es));
        return;
    }
    switch (es) {
    case 1: EW_LOOP(i, n, d[i] = src[i * st]); break;
    case 2: EW_LOOP(i, n, memcpy(d + 2 * i, src + 2 * i * st, 2)); break;
    case 4: EW_LOOP(i, n, memcpy(d + 4 * i, src + 4 * i * st, 4)); break;
    default: EW_LOOP(i, n, memcpy(d + 8 * i, src + 8 * i * st, 8)); break;
    }
}

/* Contiguous conversions, each a function of its own: GCC vectorizes these
 * loops only when they are not merged with the strided ones. On x86 CPUs
 * with F16C the f16 ones use its instructions (8 values each, exact, the
 * same bits as the portable code; the tests compare them exhaustively). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define EW_F16C 1

__attribute__((target("avx,f16c"))) static void ew_h2f_f16c(float *restrict d,
                                                            const uint16_t *restrict s, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++) d[i] = ew_h2f(s[i]);
}

__attribute__((target("avx,f16c"))) static void ew_f2h_f16c(uint16_t *restrict d,
                                                            const float *restrict s, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = ew_f2h(s[i]);
}

/* Reads libgcc's CPU table, filled once at startup: cheap per block. */
static inline int ew_have_f16c(void) {
#if defined(__F16C__)
    return 1; /* the build targets F16C already */
#elif defined(__clang__)
    return 0; /* clang 14 does not know "f16c" in __builtin_cpu_supports */
#else
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#endif
}
#else
#define EW_F16C 0
#endif

static void ew_h2f_n(float *restrict d, const uint16_t *restrict s, int64_t n) {
#if EW_F16C
    if (n >= 8 && ew_have_f16c()) {
        ew_h2f_f16c(d, s, n);
        return;
    }
#endif
    EW_LOOP(i, n, d[i] = ew_h2f(s[i]));
}

static void ew_f2h_n(uint16_t *restrict d, const float *restrict s, int64_t n) {
#if EW_F16C
    if (n >= 8 && ew_have_f16c()) {
        ew_f2h_f16c(d, s, n);
        return;
    }
#endif
    EW_LOOP(i, n, d[i] = ew_f2h(s[i]));
}

static void ew_bf2f_n(float *restrict d, const uint16_t *restrict s, int64_t n) {
    EW_LOOP(i, n, d[i] = ew_bf2f(s[i]));
}

static void ew_f2bf_n(uint16_t *restrict d, const float *restrict s, int64_t n) {
    EW_LOOP(i, n, d[i] = ew_f2bf(s[i]));
}

/* dst[i * st] = src[i] for n elements of es bytes (st in elements). */
static void ew_scatter(char *restrict dst, const char *restrict src, int64_t st, int64_t n,
                       int es) {
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * st * es, src + i * es, (size_t)es);
}

/* f16/bf16 (dt) at src with stride st (0 repeats one) -> n floats. */
static void ew_widen(float *restrict d, const char *src, int64_t st, int64_t n, hd_dtype dt) {
    const uint16_t *s = (const uint16_t *)src;
    if (st == 1) {
        (dt == HD_F16 ? ew_h2f_n : ew_bf2f_n)(d, s, n);
    } else if (dt == HD_F16) {
        EW_LOOP(i, n, d[i] = ew_h2f(s[i * st]));
    } else {
        EW_LOOP(i, n, d[i] = ew_bf2f(s[i * st]));
    }
}

/* n floats -> contiguous f16/bf16 (dt) at dst. */
static void ew_narrow(char *dst, const float *s, int64_t n, hd_dtype dt) {
    (dt == HD_F16 ? ew_f2h_n : ew_f2bf_n)((uint16_t *)dst, s, n);
}

/* Casts between f16 and f32 go through the fast conversions above. */
static void k_cast_h2f(void *restrict o, const void *restrict a, int64_t n, const ew_par *p) {
    HD_UNUSED(p);
    ew_h2f_n(o, a, n);
}

static void k_cast_f2h(void *restrict o, const void *restrict a, int64_t n, const ew_par *p) {
    HD_UNUSED(p);
    ew_f2h_n(o, a, n);
}

static ew_un_fn ew_cast_fn(hd_dtype from, hd_dtype to) {
    if (from == to) return ew_copy_mark;
    if (from == HD_F16 && to == HD_F32) return k_cast_h2f;
    if (from == HD_F32 && to == HD_F16) return k_cast_f2h;
    return cast_table[from][to];
}

/* ---- drivers: one inner run of the iterator each ---- */

typedef struct {
    int es_in, es_out; /* bytes per element of the inputs and of the output */
    hd_dtype half;     /* HD_F16/HD_BF16: inputs widened to f32; HD_DTYPE_COUNT: not */
    int half_out;      /* the loop writes f32 that is rounded to `half` */
    ew_un_fn un;
    ew_bin3 bin;
    ew_where_fn where;
    ew_par par;
    hd_cpu_iter_fn inner;           /* for a strided output: the driver it wraps */
    int es_op[HD_CPU_ITER_MAX_OPS]; /* bytes per element of each operand */
} ew_job;

static void ew_run_copy(char *const *p, const int64_t *s, int64_t n, void *ud) {
    const ew_job *j = ud;
    ew_gather(p[0], p[1], s[1], n, j->es_in);
}

static void ew_run_unary(char *const *p, const int64_t *s, int64_t n, void *ud) {
    const ew_job *j = ud;
    if (j->half != HD_DTYPE_COUNT) {
        float a[EW_BLOCK], o[EW_BLOCK];
        for (int64_t i = 0; i < n; i += EW_BLOCK) {
            int64_t m = HD_MIN(EW_BLOCK, n - i);
            ew_widen(a, p[1] + i * s[1] * 2, s[1], m, j->half);
            j->un(o, a, m, &j->par);
            ew_narrow(p[0] + i * 2, o, m, j->half);
        }
    } else if (s[1] == 1) {
        j->un(p[0], p[1], n, &j->par);
    } else {
        ew_buf a;
        for (int64_t i = 0; i < n; i += EW_BLOCK) {
            int64_t m = HD_MIN(EW_BLOCK, n - i);
            ew_gather(a.c, p[1] + i * s[1] * j->es_in, s[1], m, j->es_in);
            j->un(p[0] + i * j->es_out, a.c, m, &j->par);
        }
    }
}

/* Run the loop for strides sa, sb in {0, 1}, not both 0. */
static inline void ew_bin_call(const ew_job *j, void *o, const void *a, int64_t sa, const void *b,
                               int64_t sb, int64_t n) {
    if (sa == 0)
        j->bin.sv(o, a, b, n);
    else if (sb == 0)
        j->bin.vs(o, a, b, n);
    else
        j->bin.vv(o, a, b, n);
}

static void ew_run_binary_half(const ew_job *j, char *const *p, const int64_t *s, int64_t n) {
    float a[EW_BLOCK], b[EW_BLOCK], o[EW_BLOCK];
    int64_t sa = s[1] ? 1 : 0, sb = s[2] || !sa ? 1 : 0;
    for (int64_t i = 0; i < n; i += EW_BLOCK) {
        int64_t m = HD_MIN(EW_BLOCK, n - i);
        ew_widen(a, p[1] + i * s[1] * 2, s[1], sa ? m : 1, j->half);
        ew_widen(b, p[2] + i * s[2] * 2, s[2], sb ? m : 1, j->half);
        if (j->half_out) {
            ew_bin_call(j, o, a, sa, b, sb, m);
            ew_narrow(p[0] + i * 2, o, m, j->half);
        } else {
            ew_bin_call(j, p[0] + i * j->es_out, a, sa, b, sb, m);
        }
    }
}

static void ew_run_binary(char *const *p, const int64_t *s, int64_t n, void *ud) {
    const ew_job *j = ud;
    if (j->half != HD_DTYPE_COUNT) {
        ew_run_binary_half(j, p, s, n);
        return;
    }
    int64_t sa = s[1], sb = s[2];
    if ((sa == 1 && (sb == 0 || sb == 1)) || (sa == 0 && sb == 1)) {
        ew_bin_call(j, p[0], p[1], sa, p[2], sb, n);
        return;
    }
    ew_buf ba, bb;
    int es = j->es_in;
    for (int64_t i = 0; i < n; i += EW_BLOCK) {
        int64_t m = HD_MIN(EW_BLOCK, n - i), ta = sa, tb = sb;
        const char *a = p[1] + i * sa * es, *b = p[2] + i * sb * es;
        if (ta != 0 && ta != 1) {
            ew_gather(ba.c, a, ta, m, es);
            a = ba.c;
            ta = 1;
        }
        if (tb != 1 && !(tb == 0 && ta == 1)) {
            ew_gather(bb.c, b, tb, m, es);
            b = bb.c;
            tb = 1;
        }
        ew_bin_call(j, p[0] + i * j->es_out, a, ta, b, tb, m);
    }
}

static void ew_run_where(char *const *p, const int64_t *s, int64_t n, void *ud) {
    const ew_job *j = ud;
    if (s[1] == 1 && s[2] == 1 && s[3] == 1) {
        j->where(p[0], (const uint8_t *)p[1], p[2], p[3], n);
        return;
    }
    uint8_t c[EW_BLOCK];
    ew_buf ba, bb;
    int es = j->es_in;
    for (int64_t i = 0; i < n; i += EW_BLOCK) {
        int64_t m = HD_MIN(EW_BLOCK, n - i);
        const char *cp = p[1] + i * s[1], *a = p[2] + i * s[2] * es, *b = p[3] + i * s[3] * es;
        if (s[1] != 1) ew_gather(c, cp, s[1], m, 1), cp = (const char *)c;
        if (s[2] != 1) ew_gather(ba.c, a, s[2], m, es), a = ba.c;
        if (s[3] != 1) ew_gather(bb.c, b, s[3], m, es), b = bb.c;
        j->where(p[0] + i * es, (const uint8_t *)cp, a, b, m);
    }
}

/* An output that is not contiguous (a view written in place): run the
 * wrapped driver into a stack block, then scatter the block. */
static void ew_run_strided_out(char *const *p, const int64_t *s, int64_t n, void *ud) {
    const ew_job *j = ud;
    if (s[0] == 1) {
        j->inner(p, s, n, ud);
        return;
    }
    ew_buf o;
    char *q[HD_CPU_ITER_MAX_OPS];
    int64_t t[HD_CPU_ITER_MAX_OPS];
    memcpy(t, s, sizeof t);
    t[0] = 1;
    q[0] = o.c;
    for (int64_t i = 0; i < n; i += EW_BLOCK) {
        int64_t m = HD_MIN(EW_BLOCK, n - i);
        for (int k = 1; k < HD_CPU_ITER_MAX_OPS && j->es_op[k]; k++)
            q[k] = p[k] + i * s[k] * j->es_op[k];
        j->inner(q, t, m, ud);
        ew_scatter(p[0] + i * s[0] * j->es_op[0], o.c, s[0], m, j->es_op[0]);
    }
}

/* ---- entry ---- */

static hd_status ew_bad_dtypes(hd_ctx *ctx, hd_op op, const hd_tensor *out, hd_tensor *const *in,
                               int nin) {
    return hd_error(ctx, HD_ERR_RUNTIME, "%s is not supported on cpu for %s%s%s%s%s inputs -> %s",
                    hd_op_name(op), hd_dtype_name(in[0]->dtype), nin > 1 ? ", " : "",
                    nin > 1 ? hd_dtype_name(in[1]->dtype) : "", nin > 2 ? ", " : "",
                    nin > 2 ? hd_dtype_name(in[2]->dtype) : "", hd_dtype_name(out->dtype));
}

/* Pick the driver and loop for op on these dtypes. The shape rule has
 * already cast the inputs; a mismatch here is an error, not a crash. */
static hd_status ew_job_init(hd_ctx *ctx, hd_op op, const hd_tensor *out, hd_tensor *const *in,
                             int nin, const hd_attrs *attrs, ew_job *j, hd_cpu_iter_fn *fn) {
    hd_dtype dt = in[0]->dtype, od = out->dtype;
    int is_half = dt == HD_F16 || dt == HD_BF16;
    memset(j, 0, sizeof *j);
    j->half = HD_DTYPE_COUNT;
    j->es_in = hd_dtype_size(dt);
    j->es_out = hd_dtype_size(od);
    switch (hd_op_infos[op].kind) {
    case HD_KIND_UNARY:
        if (op == HD_OP_CAST) {
            j->un = ew_cast_fn(dt, od);
        } else {
            if (od != dt || !un_table[op][dt]) return ew_bad_dtypes(ctx, op, out, in, nin);
            j->un = un_table[op][dt];
            if (is_half && j->un != ew_copy_mark) j->half = dt;
            j->par.lo = attrs->scalar[0];
            j->par.hi = attrs->scalar[1];
        }
        *fn = j->un == ew_copy_mark ? ew_run_copy : ew_run_unary;
        return HD_OK;
    case HD_KIND_BINARY:
    case HD_KIND_COMPARE: {
        int cmp = hd_op_infos[op].kind == HD_KIND_COMPARE;
        if (in[1]->dtype != dt || od != (cmp ? HD_BOOL : dt) || !bin_table[op][dt].vv)
            return ew_bad_dtypes(ctx, op, out, in, nin);
        j->bin = bin_table[op][dt];
        if (is_half) j->half = dt;
        j->half_out = !cmp;
        *fn = ew_run_binary;
        return HD_OK;
    }
    case HD_KIND_TERNARY:
        if (op != HD_OP_WHERE || dt != HD_BOOL || in[1]->dtype != od || in[2]->dtype != od)
            return ew_bad_dtypes(ctx, op, out, in, nin);
        j->es_in = j->es_out;
        j->where = where_table[od];
        *fn = ew_run_where;
        return HD_OK;
    default: return hd_error(ctx, HD_ERR_RUNTIME, "%s is not an elementwise op", hd_op_name(op));
    }
}

hd_status hd_cpu_elementwise(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                             const hd_attrs *attrs) {
    static const hd_attrs no_attrs;
    if ((unsigned)op >= HD_OP_COUNT || nin != hd_op_infos[op].arity || nin < 1 ||
        nin >= HD_CPU_ITER_MAX_OPS)
        return hd_error(ctx, HD_ERR_RUNTIME, "elementwise kernel: bad op or input count %d", nin);
    int bad = hd_cpu_iter_mismatch(out, in, nin);
    if (bad >= 0) {
        char so[128], si[128];
        return hd_error(ctx, HD_ERR_RUNTIME, "%s: input %d of shape %s does not broadcast to %s",
                        hd_op_name(op), bad,
                        hd_shape_str(in[bad]->shape, in[bad]->ndim, si, sizeof si),
                        hd_shape_str(out->shape, out->ndim, so, sizeof so));
    }
    for (int d = 0; d < out->ndim; d++)
        if (out->strides[d] == 0 && out->shape[d] > 1)
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "%s: the output overlaps itself (a broadcast view)", hd_op_name(op));
    ew_job job;
    hd_cpu_iter_fn fn = NULL;
    if (ew_job_init(ctx, op, out, in, nin, attrs ? attrs : &no_attrs, &job, &fn))
        return ctx->status;
    hd_cpu_iter it;
    hd_cpu_iter_init(&it, out, in, nin);
    for (int k = 0; k < HD_CPU_ITER_MAX_OPS; k++) job.es_op[k] = k < it.nop ? it.elsize[k] : 0;
    if (!hd_tensor_is_contiguous(out)) {
        job.inner = fn;
        fn = ew_run_strided_out;
    }
    hd_cpu_iter_run(&it, ctx->nthreads, fn, &job);
    return HD_OK;
}

int hd_cpu_elementwise_supports(hd_op op, hd_dtype dt) {
    if ((unsigned)op >= HD_OP_COUNT || (unsigned)dt >= HD_DTYPE_COUNT) return 0;
    switch (hd_op_infos[op].kind) {
    case HD_KIND_UNARY: return op == HD_OP_CAST || un_table[op][dt] != NULL;
    case HD_KIND_BINARY:
    case HD_KIND_COMPARE: return bin_table[op][dt].vv != NULL;
    case HD_KIND_TERNARY: return op == HD_OP_WHERE && dt == HD_BOOL;
    default: return 0;
    }
}
