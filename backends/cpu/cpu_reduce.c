/* Reductions (kind REDUCE): sum mean max min prod var std argmax argmin
 * logsumexp over attrs->axes (none: all), keepdim already in the output shape.
 *
 * The input's dims split into "outer" dims (kept, in output order) and
 * "inner" dims (reduced). Each output element reduces its inner block, walked
 * as runs along the last inner dim; a run goes to a kernel that updates an
 * accumulator (red_acc). Kernels have contiguous fast paths and a strided path
 * that gathers a chunk into a small buffer first. Size-1 dims are dropped and
 * neighbouring dims merged; for order-free reductions the inner dims are
 * sorted by stride so that the contiguous one is walked last.
 *
 * Threads: over output elements when there are at least as many as threads;
 * otherwise each output's inner elements are split across threads and the
 * partial accumulators merged in order. Sum, mean, max, min, var, std and
 * logsumexp whose last output dim is the contiguous one (sum over axis 0 of
 * a row-major matrix) take a "vertical" path that folds whole rows into a
 * tile of accumulators (var, std and logsumexp: a tile per pass).
 *
 * Numerics: float sums add blocks of 256 elements in 16 lanes (f32 lanes for
 * f16/bf16/f32, f64 lanes for f64) and accumulate the block sums in f64;
 * var/std are two-pass (mean, then squared deviations) in f64; logsumexp
 * subtracts the max first; max/min propagate NaN; argmax/argmin give the first
 * occurrence, NaN counting as the extreme, as PyTorch. */
#include "cpu_kernels.h"
#include "hd_vmath.h"

#include <math.h>
#include <omp.h>
#include <string.h>

enum { RED_BLOCK = 256, RED_LANES = 16, RED_CHUNK = 1024, RED_TILE = 2048, RED_MAX_THREADS = 64 };

typedef struct {
    int ndim;
    int64_t shape[HD_MAX_DIMS];
    int64_t stride[HD_MAX_DIMS];
} red_geom;

/* One pass over the inner elements of an output. */
typedef enum {
    RK_NONE,
    RK_SUMF,   /* float sum (f64 result) */
    RK_SUMI,   /* i64 sum, wrapping */
    RK_PRODF,  /* float product */
    RK_PRODI,  /* i64 product, wrapping */
    RK_MAX,    /* float or integer max */
    RK_MIN,    /* float or integer min */
    RK_ARGMAX, /* first index of the max */
    RK_ARGMIN, /* first index of the min */
    RK_SQDEV,  /* sum of (x - param)^2 */
    RK_SUMEXP  /* sum of exp(x - param) */
} red_kind;

typedef struct {
    double f;    /* float sum, product, extreme; arg ops: the float value */
    int64_t v;   /* integer extreme; arg ops: the integer value */
    uint64_t u;  /* integer sum or product (wraps like torch) */
    int64_t idx; /* arg ops: index of the best element, -1 for none yet */
    int nan;     /* arg ops: the best element is a NaN */
} red_acc;

typedef struct {
    hd_op op;
    hd_dtype dt; /* input dtype (after the plan's cast) */
    int esize;
    int isfloat;
    const char *data; /* input element 0 */
    red_geom outer, inner;
    int64_t count; /* inner elements per output */
    red_kind pass1, pass2;
    double correction;   /* var/std */
    const hd_stop *stop; /* the context's interrupt flag */
} red_job;

/* Long runs look at the interrupt flag once per HD_INTERRUPT_CHUNK elements
 * and stop early (the op then fails, so the partial result is never seen);
 * the order of operations is the same as without the looks. */
#define RED_STOPPED(stop) hd_stop_now(stop)

/* ---- gathering a strided run into a buffer ---- */

/* n elements at p (stride s elements) of a float dtype, as f32. */
static void gather_f32(hd_dtype dt, const char *p, int64_t s, int64_t n, float *buf) {
    const uint16_t *h = (const uint16_t *)p;
    const float *f = (const float *)p;
    switch (dt) {
    case HD_F16:
        for (int64_t i = 0; i < n; i++) buf[i] = hd_f16_to_f32(h[i * s]);
        break;
    case HD_BF16:
        for (int64_t i = 0; i < n; i++) buf[i] = hd_bf16_to_f32(h[i * s]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) buf[i] = f[i * s];
        break;
    }
}

/* n elements at p (stride s) of a float dtype, as f64. */
static void gather_f64(hd_dtype dt, const char *p, int64_t s, int64_t n, double *buf) {
    if (dt == HD_F64) {
        for (int64_t i = 0; i < n; i++) buf[i] = ((const double *)p)[i * s];
        return;
    }
    float tmp[RED_CHUNK];
    gather_f32(dt, p, s, n, tmp);
    for (int64_t i = 0; i < n; i++) buf[i] = tmp[i];
}

/* n elements at p (stride s) of an integer or bool dtype, as i64. */
static void gather_i64(hd_dtype dt, const char *p, int64_t s, int64_t n, int64_t *buf) {
    switch (dt) {
    case HD_I8:
        for (int64_t i = 0; i < n; i++) buf[i] = ((const int8_t *)p)[i * s];
        break;
    case HD_U8:
        for (int64_t i = 0; i < n; i++) buf[i] = ((const uint8_t *)p)[i * s];
        break;
    case HD_I32:
        for (int64_t i = 0; i < n; i++) buf[i] = ((const int32_t *)p)[i * s];
        break;
    case HD_I64:
        for (int64_t i = 0; i < n; i++) buf[i] = ((const int64_t *)p)[i * s];
        break;
    default: /* bool */
        for (int64_t i = 0; i < n; i++) buf[i] = ((const uint8_t *)p)[i * s] != 0;
        break;
    }
}

/* ---- sums ---- */

/* Blocked sum: 256-element blocks in 16 f32 lanes, block sums in f64. The
 * lanes make the loop vectorise without reassociating one accumulator. (c is
 * unused: the signature is shared with the other float kernels.) */
static double sum_f32(const float *x, int64_t n, double c) {
    double total = 0;
    int64_t i = 0;
    HD_UNUSED(c);
    for (; i + RED_BLOCK <= n; i += RED_BLOCK) {
        float acc[RED_LANES] = {0};
        for (int b = 0; b < RED_BLOCK; b += RED_LANES)
            for (int l = 0; l < RED_LANES; l++) acc[l] += x[i + b + l];
        double bs = 0;
        for (int l = 0; l < RED_LANES; l++) bs += acc[l];
        total += bs;
    }
    for (; i < n; i++) total += x[i];
    return total;
}

static double sum_f64(const double *x, int64_t n, double c) {
    double total = 0;
    int64_t i = 0;
    HD_UNUSED(c);
    for (; i + RED_BLOCK <= n; i += RED_BLOCK) {
        double acc[RED_LANES] = {0};
        for (int b = 0; b < RED_BLOCK; b += RED_LANES)
            for (int l = 0; l < RED_LANES; l++) acc[l] += x[i + b + l];
        double bs = 0;
        for (int l = 0; l < RED_LANES; l++) bs += acc[l];
        total += bs;
    }
    for (; i < n; i++) total += x[i];
    return total;
}

/* Sum of (x - c)^2 in 8 f64 lanes. */
static double sqdev_f32(const float *x, int64_t n, double c) {
    double acc[8] = {0}, total = 0;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) {
            double d = (double)x[k + l] - c;
            acc[l] += d * d;
        }
    for (; k < n; k++) total += ((double)x[k] - c) * ((double)x[k] - c);
    for (int l = 0; l < 8; l++) total += acc[l];
    return total;
}

static double sqdev_f64(const double *x, int64_t n, double c) {
    double acc[8] = {0}, total = 0;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) {
            double d = x[k + l] - c;
            acc[l] += d * d;
        }
    for (; k < n; k++) total += (x[k] - c) * (x[k] - c);
    for (int l = 0; l < 8; l++) total += acc[l];
    return total;
}

/* Sum of exp(x - c); f32 inputs use the vector math's exp (c is one of
 * them, the max, so x - c <= 0 loses nothing that matters at f32
 * precision), summed in 16 f64 lanes: the loop vectorises (libm's expf, a
 * call per element, did not). */
static double sumexp_f32(const float *x, int64_t n, double c) {
    double acc[RED_LANES] = {0}, total = 0;
    float fc = (float)c;
    int64_t k = 0;
    for (; k + RED_LANES <= n; k += RED_LANES)
        for (int l = 0; l < RED_LANES; l++) acc[l] += (double)hd_vm_expf(x[k + l] - fc);
    for (; k < n; k++) total += (double)hd_vm_expf(x[k] - fc);
    for (int l = 0; l < RED_LANES; l++) total += acc[l];
    return total;
}

static double sumexp_f64(const double *x, int64_t n, double c) {
    double total = 0;
    for (int64_t k = 0; k < n; k++) total += exp(x[k] - c);
    return total;
}

typedef double (*red_f32_fn)(const float *, int64_t, double);
typedef double (*red_f64_fn)(const double *, int64_t, double);

/* The sum of a float kernel over a run: contiguous f32/f64 runs are read in
 * place, others gathered in chunks (f16/bf16 as f32, f64 as f64). */
static double run_floats(const hd_stop *stop, hd_dtype dt, int es, const char *p, int64_t s,
                         int64_t n, double c, red_f32_fn k32, red_f64_fn k64) {
    if (s == 1 && dt == HD_F32) return k32((const float *)p, n, c);
    if (s == 1 && dt == HD_F64) return k64((const double *)p, n, c);
    double total = 0;
    for (int64_t i = 0; i < n; i += RED_CHUNK) {
        if (!(i % HD_INTERRUPT_CHUNK) && RED_STOPPED(stop)) break;
        int64_t m = HD_MIN(RED_CHUNK, n - i);
        const char *q = p + i * s * es;
        if (dt == HD_F64) {
            double buf[RED_CHUNK];
            gather_f64(dt, q, s, m, buf);
            total += k64(buf, m, c);
        } else {
            float buf[RED_CHUNK];
            gather_f32(dt, q, s, m, buf);
            total += k32(buf, m, c);
        }
    }
    return total;
}

/* i64 sum with wraparound (unsigned arithmetic: no undefined overflow). */
static uint64_t run_sumi(const hd_stop *stop, const char *p, int64_t s, int64_t n) {
    const int64_t *x = (const int64_t *)p;
    uint64_t acc[RED_LANES] = {0}, total = 0;
    int64_t i = 0;
    if (s == 1)
        for (; i + RED_LANES <= n; i += RED_LANES)
            for (int l = 0; l < RED_LANES; l++) acc[l] += (uint64_t)x[i + l];
    while (i < n && !RED_STOPPED(stop))
        for (int64_t e = HD_MIN(n, i + HD_INTERRUPT_CHUNK); i < e; i++) total += (uint64_t)x[i * s];
    for (int l = 0; l < RED_LANES; l++) total += acc[l];
    return total;
}

static double run_prodf(const hd_stop *stop, hd_dtype dt, int es, const char *p, int64_t s,
                        int64_t n) {
    double r = 1, buf[RED_CHUNK];
    for (int64_t i = 0; i < n; i += RED_CHUNK) {
        if (!(i % HD_INTERRUPT_CHUNK) && RED_STOPPED(stop)) break;
        int64_t m = HD_MIN(RED_CHUNK, n - i);
        gather_f64(dt, p + i * s * es, s, m, buf);
        for (int64_t k = 0; k < m; k++) r *= buf[k];
    }
    return r;
}

static uint64_t run_prodi(const hd_stop *stop, const char *p, int64_t s, int64_t n) {
    const int64_t *x = (const int64_t *)p;
    uint64_t r = 1;
    for (int64_t i = 0; i < n && !RED_STOPPED(stop);)
        for (int64_t e = HD_MIN(n, i + HD_INTERRUPT_CHUNK); i < e; i++) r *= (uint64_t)x[i * s];
    return r;
}

/* ---- max and min ---- */

/* Float extremes in lanes. A NaN sticks once it is in a lane (x != x takes
 * it in; nothing compares greater than it), so NaN propagates. */
#define RED_EXT_FLOAT(NAME, T, CMP)                                                                \
    static T NAME(const T *x, int64_t n, T m) {                                                    \
        T lane[8];                                                                                 \
        int64_t i = 0;                                                                             \
        for (int l = 0; l < 8; l++) lane[l] = m;                                                   \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int l = 0; l < 8; l++) {                                                          \
                T v = x[i + l];                                                                    \
                lane[l] = (v CMP lane[l] || v != v) ? v : lane[l];                                 \
            }                                                                                      \
        for (; i < n; i++) m = (x[i] CMP m || x[i] != x[i]) ? x[i] : m;                            \
        for (int l = 0; l < 8; l++) m = (lane[l] CMP m || lane[l] != lane[l]) ? lane[l] : m;       \
        return m;                                                                                  \
    }

RED_EXT_FLOAT(max_f32, float, >)
RED_EXT_FLOAT(min_f32, float, <)
RED_EXT_FLOAT(max_f64, double, >)
RED_EXT_FLOAT(min_f64, double, <)

/* Integer extremes of n elements at p with stride s, from m0 (clamped to
 * T's range: accumulators start at the int64 extremes). */
#define RED_EXT_INT(NAME, T, TMIN, TMAX, CMP)                                                      \
    static int64_t NAME(const hd_stop *stop, const char *p, int64_t s, int64_t n, int64_t m0) {    \
        const T *x = (const T *)p;                                                                 \
        T m = (T)(m0 < TMIN ? TMIN : m0 > TMAX ? TMAX : m0);                                       \
        int64_t i = 0;                                                                             \
        if (s == 1) {                                                                              \
            T lane[16];                                                                            \
            for (int l = 0; l < 16; l++) lane[l] = m;                                              \
            for (; i + 16 <= n; i += 16)                                                           \
                for (int l = 0; l < 16; l++) lane[l] = x[i + l] CMP lane[l] ? x[i + l] : lane[l];  \
            for (int l = 0; l < 16; l++) m = lane[l] CMP m ? lane[l] : m;                          \
        }                                                                                          \
        while (i < n && !RED_STOPPED(stop))                                                        \
            for (int64_t e = HD_MIN(n, i + HD_INTERRUPT_CHUNK); i < e; i++)                        \
                m = x[i * s] CMP m ? x[i * s] : m;                                                 \
        return m;                                                                                  \
    }

RED_EXT_INT(max_i8, int8_t, INT8_MIN, INT8_MAX, >)
RED_EXT_INT(min_i8, int8_t, INT8_MIN, INT8_MAX, <)
RED_EXT_INT(max_u8, uint8_t, 0, UINT8_MAX, >)
RED_EXT_INT(min_u8, uint8_t, 0, UINT8_MAX, <)
RED_EXT_INT(max_i32, int32_t, INT32_MIN, INT32_MAX, >)
RED_EXT_INT(min_i32, int32_t, INT32_MIN, INT32_MAX, <)
RED_EXT_INT(max_i64, int64_t, INT64_MIN, INT64_MAX, >)
RED_EXT_INT(min_i64, int64_t, INT64_MIN, INT64_MAX, <)

static double run_extf(const hd_stop *stop, hd_dtype dt, int es, const char *p, int64_t s,
                       int64_t n, int ismax, double m) {
    if (dt == HD_F64) {
        if (s == 1)
            return ismax ? max_f64((const double *)p, n, m) : min_f64((const double *)p, n, m);
        double buf[RED_CHUNK];
        for (int64_t i = 0; i < n; i += RED_CHUNK) {
            if (!(i % HD_INTERRUPT_CHUNK) && RED_STOPPED(stop)) break;
            int64_t k = HD_MIN(RED_CHUNK, n - i);
            gather_f64(dt, p + i * s * es, s, k, buf);
            m = ismax ? max_f64(buf, k, m) : min_f64(buf, k, m);
        }
        return m;
    }
    float fm = (float)m; /* exact: m is -inf, +inf or a value of the input */
    if (dt == HD_F32 && s == 1)
        return ismax ? max_f32((const float *)p, n, fm) : min_f32((const float *)p, n, fm);
    float buf[RED_CHUNK];
    for (int64_t i = 0; i < n; i += RED_CHUNK) {
        if (!(i % HD_INTERRUPT_CHUNK) && RED_STOPPED(stop)) break;
        int64_t k = HD_MIN(RED_CHUNK, n - i);
        gather_f32(dt, p + i * s * es, s, k, buf);
        fm = ismax ? max_f32(buf, k, fm) : min_f32(buf, k, fm);
    }
    return fm;
}

static int64_t run_exti(const hd_stop *stop, hd_dtype dt, const char *p, int64_t s, int64_t n,
                        int ismax, int64_t m) {
    switch (dt) {
    case HD_I8: return ismax ? max_i8(stop, p, s, n, m) : min_i8(stop, p, s, n, m);
    case HD_I32: return ismax ? max_i32(stop, p, s, n, m) : min_i32(stop, p, s, n, m);
    case HD_I64: return ismax ? max_i64(stop, p, s, n, m) : min_i64(stop, p, s, n, m);
    case HD_BOOL: { /* any nonzero byte is true */
        int64_t r = m;
        for (int64_t i = 0; i < n && !RED_STOPPED(stop);)
            for (int64_t e = HD_MIN(n, i + HD_INTERRUPT_CHUNK); i < e; i++) {
                int64_t v = p[i * s] != 0;
                r = ismax ? HD_MAX(r, v) : HD_MIN(r, v);
            }
        return r;
    }
    default: return ismax ? max_u8(stop, p, s, n, m) : min_u8(stop, p, s, n, m);
    }
}

/* Index of the first element equal to v, or of the first NaN if v is NaN. */
#define RED_FIND(NAME, T)                                                                          \
    static int64_t NAME(const T *x, int64_t n, T v) {                                              \
        for (int64_t i = 0; i < n; i++)                                                            \
            if (x[i] == v || (v != v && x[i] != x[i])) return i;                                   \
        return 0;                                                                                  \
    }

RED_FIND(find_f32, float)
RED_FIND(find_f64, double)
RED_FIND(find_i64, int64_t)

/* First index of the extreme in a run whose first element has inner index
 * k, chunk by chunk: the chunk's extreme (vectorised), then, only if it beats
 * the best so far, where it first occurs. A NaN is the extreme and the first
 * one ends the search; ties keep the earlier index. */
static void run_arg(const red_job *j, const char *p, int64_t s, int64_t n, int64_t k, int ismax,
                    red_acc *a) {
    for (int64_t i = 0; i < n && !a->nan; i += RED_CHUNK) {
        if (!(i % HD_INTERRUPT_CHUNK) && RED_STOPPED(j->stop)) break;
        int64_t m = HD_MIN(RED_CHUNK, n - i);
        const char *q = p + i * s * j->esize;
        if (j->dt == HD_F64) {
            double buf[RED_CHUNK];
            const double *x = s == 1 ? (const double *)q : buf;
            if (s != 1) gather_f64(j->dt, q, s, m, buf);
            double e = ismax ? max_f64(x, m, -INFINITY) : min_f64(x, m, INFINITY);
            if (e != e || a->idx < 0 || (ismax ? e > a->f : e < a->f))
                a->f = e, a->nan = e != e, a->idx = k + i + find_f64(x, m, e);
        } else if (j->isfloat) {
            float buf[RED_CHUNK];
            const float *x = (s == 1 && j->dt == HD_F32) ? (const float *)q : buf;
            if (x == buf) gather_f32(j->dt, q, s, m, buf);
            float e = ismax ? max_f32(x, m, -INFINITY) : min_f32(x, m, INFINITY);
            if (e != e || a->idx < 0 || (ismax ? e > a->f : e < a->f))
                a->f = e, a->nan = e != e, a->idx = k + i + find_f32(x, m, e);
        } else {
            int64_t buf[RED_CHUNK];
            const int64_t *x = (s == 1 && j->dt == HD_I64) ? (const int64_t *)q : buf;
            if (x == buf) gather_i64(j->dt, q, s, m, buf);
            int64_t e = ismax ? max_i64(NULL, (const char *)x, 1, m, INT64_MIN)
                              : min_i64(NULL, (const char *)x, 1, m, INT64_MAX);
            if (a->idx < 0 || (ismax ? e > a->v : e < a->v))
                a->v = e, a->idx = k + i + find_i64(x, m, e);
        }
    }
}

/* ---- accumulators ---- */

static void acc_init(const red_job *j, red_kind kind, red_acc *a) {
    memset(a, 0, sizeof *a);
    a->idx = -1;
    switch (kind) {
    case RK_PRODF: a->f = 1; break;
    case RK_PRODI: a->u = 1; break;
    case RK_MAX:
        a->f = -INFINITY;
        a->v = INT64_MIN;
        break;
    case RK_MIN:
        a->f = INFINITY;
        a->v = INT64_MAX;
        break;
    default: break;
    }
    HD_UNUSED(j);
}

static void acc_run(const red_job *j, red_kind kind, const char *p, int64_t s, int64_t n, int64_t k,
                    double param, red_acc *a) {
    switch (kind) {
    case RK_SUMF: a->f += run_floats(j->stop, j->dt, j->esize, p, s, n, 0, sum_f32, sum_f64); break;
    case RK_SUMI: a->u += run_sumi(j->stop, p, s, n); break;
    case RK_PRODF: a->f *= run_prodf(j->stop, j->dt, j->esize, p, s, n); break;
    case RK_PRODI: a->u *= run_prodi(j->stop, p, s, n); break;
    case RK_MAX:
    case RK_MIN:
        if (j->isfloat)
            a->f = run_extf(j->stop, j->dt, j->esize, p, s, n, kind == RK_MAX, a->f);
        else
            a->v = run_exti(j->stop, j->dt, p, s, n, kind == RK_MAX, a->v);
        break;
    case RK_ARGMAX: run_arg(j, p, s, n, k, 1, a); break;
    case RK_ARGMIN: run_arg(j, p, s, n, k, 0, a); break;
    case RK_SQDEV:
        a->f += run_floats(j->stop, j->dt, j->esize, p, s, n, param, sqdev_f32, sqdev_f64);
        break;
    case RK_SUMEXP:
        a->f += run_floats(j->stop, j->dt, j->esize, p, s, n, param, sumexp_f32, sumexp_f64);
        break;
    case RK_NONE: break;
    }
}

/* Fold b (the partial result of a later inner range) into a. */
static void acc_merge(const red_job *j, red_kind kind, red_acc *a, const red_acc *b) {
    switch (kind) {
    case RK_SUMF:
    case RK_SQDEV:
    case RK_SUMEXP: a->f += b->f; break;
    case RK_SUMI: a->u += b->u; break;
    case RK_PRODF: a->f *= b->f; break;
    case RK_PRODI: a->u *= b->u; break;
    case RK_MAX:
        a->f = (b->f > a->f || b->f != b->f) ? b->f : a->f;
        a->v = HD_MAX(a->v, b->v);
        break;
    case RK_MIN:
        a->f = (b->f < a->f || b->f != b->f) ? b->f : a->f;
        a->v = HD_MIN(a->v, b->v);
        break;
    case RK_ARGMAX:
    case RK_ARGMIN: {
        if (a->nan || b->idx < 0) break;
        int ismax = kind == RK_ARGMAX, better;
        if (a->idx < 0 || b->nan)
            better = 1;
        else if (j->isfloat)
            better = ismax ? b->f > a->f : b->f < a->f;
        else
            better = ismax ? b->v > a->v : b->v < a->v;
        if (better) *a = *b;
        break;
    }
    case RK_NONE: break;
    }
}

/* ---- walking the inner block ---- */

/* Offset of flat position o in geometry g, its multi-index into idx. */
static int64_t geom_start(const red_geom *g, int64_t o, int64_t *idx) {
    int64_t off = 0;
    for (int d = g->ndim - 1; d >= 0; d--) {
        idx[d] = o % g->shape[d];
        o /= g->shape[d];
        off += idx[d] * g->stride[d];
    }
    return off;
}

/* Step idx (and *off) to the next position of g's first `nd` dims. */
static void geom_next(const red_geom *g, int nd, int64_t *idx, int64_t *off) {
    for (int d = nd - 1; d >= 0; d--) {
        *off += g->stride[d];
        if (++idx[d] < g->shape[d]) return;
        *off -= idx[d] * g->stride[d];
        idx[d] = 0;
    }
}

/* Run `kind` over inner elements [k0, k1) of the output whose block starts
 * at base, in row-major order of the inner dims. */
static void red_range(const red_job *j, red_kind kind, const char *base, int64_t k0, int64_t k1,
                      double param, red_acc *a) {
    const red_geom *g = &j->inner;
    int nd = g->ndim;
    int64_t len = g->shape[nd - 1], s = g->stride[nd - 1];
    if (k0 >= k1) return;
    int64_t idx[HD_MAX_DIMS];
    red_geom rows = *g;
    rows.ndim = nd - 1;
    int64_t off = geom_start(&rows, k0 / len, idx), pos = k0 % len, seen = 0;
    for (int64_t k = k0; k < k1;) {
        int64_t n = HD_MIN(len - pos, k1 - k);
        if ((seen += n) >= HD_INTERRUPT_CHUNK) {
            seen = 0;
            if (RED_STOPPED(j->stop)) return;
        }
        acc_run(j, kind, base + (off + pos * s) * j->esize, s, n, k, param, a);
        k += n;
        pos = 0;
        geom_next(g, nd - 1, idx, &off);
    }
}

/* The second pass's parameter (mean, max); 0 if the second pass is not needed. */
static int red_param(const red_job *j, const red_acc *a1, double *param) {
    if (j->pass2 == RK_SQDEV) {
        *param = j->count ? a1->f / (double)j->count : NAN;
        return j->count > 0;
    }
    if (j->pass2 == RK_SUMEXP) {
        *param = a1->f;
        return isfinite(a1->f);
    }
    return 0;
}

/* An integer result (its value fits the dtype); bool stores v != 0. */
static void red_store_int(hd_dtype dt, void *dst, int64_t o, int64_t v) {
    switch (dt) {
    case HD_I8: ((int8_t *)dst)[o] = (int8_t)v; break;
    case HD_U8: ((uint8_t *)dst)[o] = (uint8_t)v; break;
    case HD_BOOL: ((uint8_t *)dst)[o] = v != 0; break;
    case HD_I32: ((int32_t *)dst)[o] = (int32_t)v; break;
    default: ((int64_t *)dst)[o] = v; break;
    }
}

/* Write the result of one output element from its accumulators. */
static void red_store(const red_job *j, hd_tensor *out, int64_t o, const red_acc *a1,
                      const red_acc *a2) {
    void *dst = hd_tensor_data(out);
    hd_dtype odt = out->dtype;
    double n = (double)j->count, r = 0;
    switch (j->op) {
    case HD_OP_ARGMAX:
    case HD_OP_ARGMIN: ((int64_t *)dst)[o] = a1->idx < 0 ? 0 : a1->idx; return;
    case HD_OP_SUM:
    case HD_OP_PROD:
        if (!j->isfloat) {
            ((int64_t *)dst)[o] = (int64_t)a1->u;
            return;
        }
        r = a1->f;
        break;
    case HD_OP_MAX:
    case HD_OP_MIN:
        if (!j->isfloat) {
            red_store_int(odt, dst, o, a1->v);
            return;
        }
        r = a1->f;
        break;
    case HD_OP_MEAN: r = j->count ? a1->f / n : NAN; break;
    case HD_OP_VAR:
    case HD_OP_STD: {
        /* torch: divide by max(0, N - correction); 0 gives inf, or NaN for 0/0 */
        double div = HD_MAX(0.0, n - j->correction), m2 = a2->f;
        r = j->count == 0 ? NAN : div > 0 ? m2 / div : m2 > 0 ? INFINITY : NAN;
        if (j->op == HD_OP_STD) r = sqrt(r);
        break;
    }
    case HD_OP_LOGSUMEXP: r = isfinite(a1->f) ? a1->f + log(a2->f) : a1->f; break;
    default: break;
    }
    hd_dtype_store(odt, dst, o, r);
}

/* One output element, all passes on this thread. */
static void red_output(const red_job *j, hd_tensor *out, int64_t o, const char *base) {
    red_acc a1, a2;
    double param;
    acc_init(j, j->pass1, &a1);
    red_range(j, j->pass1, base, 0, j->count, 0, &a1);
    acc_init(j, j->pass2, &a2);
    if (j->pass2 != RK_NONE && red_param(j, &a1, &param))
        red_range(j, j->pass2, base, 0, j->count, param, &a2);
    red_store(j, out, o, &a1, &a2);
}

/* Outputs [o0, o1), walking the outer dims incrementally. */
static void red_outputs(const red_job *j, hd_tensor *out, int64_t o0, int64_t o1) {
    int64_t idx[HD_MAX_DIMS];
    int64_t off = geom_start(&j->outer, o0, idx);
    for (int64_t o = o0; o < o1; o++) {
        if (!(o % 4096) && RED_STOPPED(j->stop)) return;
        red_output(j, out, o, j->data + off * j->esize);
        geom_next(&j->outer, j->outer.ndim, idx, &off);
    }
}

/* Part t of m of [0, n): balanced, without overflow. */
static void red_part(int64_t n, int t, int m, int64_t *lo, int64_t *hi) {
    int64_t q = n / m, r = n % m;
    *lo = q * t + HD_MIN(t, r);
    *hi = *lo + q + (t < r);
}

static void red_over_outputs(const red_job *j, hd_tensor *out, int nt) {
    int64_t nout = out->numel;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        red_part(nout, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        red_outputs(j, out, lo, hi);
    }
}

/* One pass over one output's inner block, split across nt threads; the
 * partial accumulators are merged in index order. */
static void red_pass_split(const red_job *j, red_kind kind, const char *base, double param, int nt,
                           red_acc *res) {
    red_acc part[RED_MAX_THREADS];
    int used = 1;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), m = omp_get_num_threads();
        int64_t lo, hi;
        if (t == 0) used = m;
        red_part(j->count, t, m, &lo, &hi);
        acc_init(j, kind, &part[t]);
        red_range(j, kind, base, lo, hi, param, &part[t]);
    }
    *res = part[0];
    for (int t = 1; t < used; t++) acc_merge(j, kind, res, &part[t]);
}

/* Few outputs with long blocks: each output's block is split across threads. */
static void red_split(const red_job *j, hd_tensor *out, int nt) {
    int64_t idx[HD_MAX_DIMS];
    int64_t off = geom_start(&j->outer, 0, idx);
    for (int64_t o = 0; o < out->numel; o++) {
        const char *base = j->data + off * j->esize;
        red_acc a1, a2;
        double param;
        red_pass_split(j, j->pass1, base, 0, nt, &a1);
        acc_init(j, j->pass2, &a2);
        if (j->pass2 != RK_NONE && red_param(j, &a1, &param))
            red_pass_split(j, j->pass2, base, param, nt, &a2);
        red_store(j, out, o, &a1, &a2);
        geom_next(&j->outer, j->outer.ndim, idx, &off);
    }
}

/* ---- vertical reductions ---- */

/* STEP(acc[t], x[row + t], c) for t < tw, over the rows of every inner
 * element, c = PAR(t) (a second pass's parameter: the mean or the max of
 * element t; 0 for a first pass): the tile of accumulators stays in cache
 * while memory is read in order. Four rows per pass over the tile (same
 * order of operations as one by one) so that the accumulators are loaded
 * and stored a quarter as often. */
#define RED_VERT(NAME, T, ACC, LOAD, STEP, PAR)                                                    \
    static void NAME(const red_job *j, const char *base, int tw, void *accp, const double *par) {  \
        ACC *acc = accp;                                                                           \
        (void)par;                                                                                 \
        const red_geom *g = &j->inner;                                                             \
        int nd = g->ndim;                                                                          \
        int64_t len = g->shape[nd - 1], s = g->stride[nd - 1], idx[HD_MAX_DIMS] = {0}, off = 0;    \
        for (int64_t k = 0; k < j->count; k += len) {                                              \
            if (RED_STOPPED(j->stop)) break;                                                       \
            const T *x = (const T *)base + off;                                                    \
            int64_t r = 0;                                                                         \
            for (; r + 4 <= len; r += 4) {                                                         \
                if (!(r % HD_INTERRUPT_CHUNK) && r && RED_STOPPED(j->stop)) {                      \
                    r = len;                                                                       \
                    break;                                                                         \
                }                                                                                  \
                const T *x0 = x + r * s, *x1 = x0 + s, *x2 = x1 + s, *x3 = x2 + s;                 \
                _Pragma("omp simd") for (int t = 0; t < tw; t++) {                                 \
                    ACC a = acc[t];                                                                \
                    double c = PAR(t);                                                             \
                    STEP(a, LOAD(x0[t]), c);                                                       \
                    STEP(a, LOAD(x1[t]), c);                                                       \
                    STEP(a, LOAD(x2[t]), c);                                                       \
                    STEP(a, LOAD(x3[t]), c);                                                       \
                    acc[t] = a;                                                                    \
                }                                                                                  \
            }                                                                                      \
            for (; r < len; r++) {                                                                 \
                const T *x0 = x + r * s;                                                           \
                _Pragma("omp simd") for (int t = 0; t < tw; t++) {                                 \
                    double c = PAR(t);                                                             \
                    STEP(acc[t], LOAD(x0[t]), c);                                                  \
                }                                                                                  \
            }                                                                                      \
            geom_next(g, nd - 1, idx, &off);                                                       \
        }                                                                                          \
    }

#define RED_LOAD(v)           (v)
#define RED_LOAD_U64(v)       ((uint64_t)(v))
#define RED_PAR0(t)           0.0
#define RED_PAR(t)            par[t]
#define RED_STEP_ADD(a, v, c) ((void)(c), (a) += (v))
/* NaN-sticky, as the lanes of the float max/min kernels */
#define RED_STEP_MAX(a, v, c) ((void)(c), (a) = ((v) > (a) || (v) != (v)) ? (v) : (a))
#define RED_STEP_MIN(a, v, c) ((void)(c), (a) = ((v) < (a) || (v) != (v)) ? (v) : (a))
/* second passes: var's squared deviations, logsumexp's exponentials, each
 * element's term as sqdev_f32 / sumexp_f32 compute it */
#define RED_STEP_SQDEV(a, v, c) ((a) += ((double)(v) - (c)) * ((double)(v) - (c)))
#define RED_STEP_EXPF(a, v, c)  ((a) += (double)hd_vm_expf((v) - (float)(c)))
#define RED_STEP_EXP(a, v, c)   ((a) += exp((v) - (c)))

RED_VERT(vsum_f32, float, double, RED_LOAD, RED_STEP_ADD, RED_PAR0)
RED_VERT(vsum_f64, double, double, RED_LOAD, RED_STEP_ADD, RED_PAR0)
RED_VERT(vsum_f16, uint16_t, double, hd_f16_to_f32, RED_STEP_ADD, RED_PAR0)
RED_VERT(vsum_bf16, uint16_t, double, hd_bf16_to_f32, RED_STEP_ADD, RED_PAR0)
RED_VERT(vsum_i64, int64_t, uint64_t, RED_LOAD_U64, RED_STEP_ADD, RED_PAR0)
RED_VERT(vmax_f32, float, float, RED_LOAD, RED_STEP_MAX, RED_PAR0)
RED_VERT(vmax_f64, double, double, RED_LOAD, RED_STEP_MAX, RED_PAR0)
RED_VERT(vmax_f16, uint16_t, float, hd_f16_to_f32, RED_STEP_MAX, RED_PAR0)
RED_VERT(vmax_bf16, uint16_t, float, hd_bf16_to_f32, RED_STEP_MAX, RED_PAR0)
RED_VERT(vmax_i8, int8_t, int8_t, RED_LOAD, RED_STEP_MAX, RED_PAR0)
RED_VERT(vmax_u8, uint8_t, uint8_t, RED_LOAD, RED_STEP_MAX, RED_PAR0)
RED_VERT(vmax_i32, int32_t, int32_t, RED_LOAD, RED_STEP_MAX, RED_PAR0)
RED_VERT(vmax_i64, int64_t, int64_t, RED_LOAD, RED_STEP_MAX, RED_PAR0)
RED_VERT(vmin_f32, float, float, RED_LOAD, RED_STEP_MIN, RED_PAR0)
RED_VERT(vmin_f64, double, double, RED_LOAD, RED_STEP_MIN, RED_PAR0)
RED_VERT(vmin_f16, uint16_t, float, hd_f16_to_f32, RED_STEP_MIN, RED_PAR0)
RED_VERT(vmin_bf16, uint16_t, float, hd_bf16_to_f32, RED_STEP_MIN, RED_PAR0)
RED_VERT(vmin_i8, int8_t, int8_t, RED_LOAD, RED_STEP_MIN, RED_PAR0)
RED_VERT(vmin_u8, uint8_t, uint8_t, RED_LOAD, RED_STEP_MIN, RED_PAR0)
RED_VERT(vmin_i32, int32_t, int32_t, RED_LOAD, RED_STEP_MIN, RED_PAR0)
RED_VERT(vmin_i64, int64_t, int64_t, RED_LOAD, RED_STEP_MIN, RED_PAR0)
RED_VERT(vsqdev_f32, float, double, RED_LOAD, RED_STEP_SQDEV, RED_PAR)
RED_VERT(vsqdev_f64, double, double, RED_LOAD, RED_STEP_SQDEV, RED_PAR)
RED_VERT(vsqdev_f16, uint16_t, double, hd_f16_to_f32, RED_STEP_SQDEV, RED_PAR)
RED_VERT(vsqdev_bf16, uint16_t, double, hd_bf16_to_f32, RED_STEP_SQDEV, RED_PAR)
RED_VERT(vsumexp_f32, float, double, RED_LOAD, RED_STEP_EXPF, RED_PAR)
RED_VERT(vsumexp_f64, double, double, RED_LOAD, RED_STEP_EXP, RED_PAR)
RED_VERT(vsumexp_f16, uint16_t, double, hd_f16_to_f32, RED_STEP_EXPF, RED_PAR)
RED_VERT(vsumexp_bf16, uint16_t, double, hd_bf16_to_f32, RED_STEP_EXPF, RED_PAR)

typedef void (*red_vert_fn)(const red_job *, const char *, int, void *, const double *);

/* Accumulators are f64 for sums of floats, u64 for i64 sums, and the input's
 * own type (f32 for f16/bf16) for max/min; bool max/min work on the bytes. */
static const red_vert_fn red_vsum[HD_DTYPE_COUNT] = {
    [HD_F16] = vsum_f16, [HD_BF16] = vsum_bf16, [HD_F32] = vsum_f32,
    [HD_F64] = vsum_f64, [HD_I64] = vsum_i64,
};
static const red_vert_fn red_vmax[HD_DTYPE_COUNT] = {
    [HD_F16] = vmax_f16, [HD_BF16] = vmax_bf16, [HD_F32] = vmax_f32,
    [HD_F64] = vmax_f64, [HD_I8] = vmax_i8,     [HD_U8] = vmax_u8,
    [HD_I32] = vmax_i32, [HD_I64] = vmax_i64,   [HD_BOOL] = vmax_u8,
};
static const red_vert_fn red_vmin[HD_DTYPE_COUNT] = {
    [HD_F16] = vmin_f16, [HD_BF16] = vmin_bf16, [HD_F32] = vmin_f32,
    [HD_F64] = vmin_f64, [HD_I8] = vmin_i8,     [HD_U8] = vmin_u8,
    [HD_I32] = vmin_i32, [HD_I64] = vmin_i64,   [HD_BOOL] = vmin_u8,
};

static const red_vert_fn red_vsqdev[HD_DTYPE_COUNT] = {
    [HD_F16] = vsqdev_f16, [HD_BF16] = vsqdev_bf16, [HD_F32] = vsqdev_f32, [HD_F64] = vsqdev_f64};
static const red_vert_fn red_vsumexp[HD_DTYPE_COUNT] = {[HD_F16] = vsumexp_f16,
                                                        [HD_BF16] = vsumexp_bf16,
                                                        [HD_F32] = vsumexp_f32,
                                                        [HD_F64] = vsumexp_f64};

/* The kernel of the first pass (sums for var and std, maxima for
 * logsumexp); NULL where there is none. */
static red_vert_fn red_vert_kernel(hd_op op, hd_dtype dt) {
    switch (op) {
    case HD_OP_SUM:
    case HD_OP_MEAN:
    case HD_OP_VAR:
    case HD_OP_STD: return red_vsum[dt];
    case HD_OP_MAX:
    case HD_OP_LOGSUMEXP: return red_vmax[dt];
    case HD_OP_MIN: return red_vmin[dt];
    default: return NULL;
    }
}

/* The second pass's kernel; NULL for a one-pass reduction. */
static red_vert_fn red_vert_kernel2(hd_op op, hd_dtype dt) {
    switch (op) {
    case HD_OP_VAR:
    case HD_OP_STD: return red_vsqdev[dt];
    case HD_OP_LOGSUMEXP: return red_vsumexp[dt];
    default: return NULL;
    }
}

typedef union {
    double f64[RED_TILE];
    float f32[RED_TILE];
    uint64_t u64[RED_TILE];
    int64_t i64[RED_TILE];
    int32_t i32[RED_TILE];
    int8_t i8[RED_TILE];
    uint8_t u8[RED_TILE];
} red_tile;

/* Fill the first tw accumulators with the reduction's identity. */
static void red_tile_init(const red_job *j, red_tile *acc, int tw) {
    int ismax = j->op == HD_OP_MAX || j->op == HD_OP_LOGSUMEXP;
    if (j->pass1 == RK_SUMF || j->pass1 == RK_SUMI) {
        memset(acc, 0, (size_t)tw * 8);
        return;
    }
    for (int t = 0; t < tw; t++) switch (j->dt) {
        case HD_F64: acc->f64[t] = ismax ? -INFINITY : INFINITY; break;
        case HD_F32:
        case HD_F16:
        case HD_BF16: acc->f32[t] = ismax ? -INFINITY : INFINITY; break;
        case HD_I8: acc->i8[t] = ismax ? INT8_MIN : INT8_MAX; break;
        case HD_I32: acc->i32[t] = ismax ? INT32_MIN : INT32_MAX; break;
        case HD_I64: acc->i64[t] = ismax ? INT64_MIN : INT64_MAX; break;
        default: acc->u8[t] = ismax ? 0 : UINT8_MAX; break;
        }
}

/* Output element o + t from accumulator t. */
static void red_tile_store(const red_job *j, hd_tensor *out, int64_t o, const red_tile *acc,
                           int tw) {
    void *dst = hd_tensor_data(out);
    hd_dtype odt = out->dtype;
    int sum = j->op == HD_OP_SUM || j->op == HD_OP_MEAN;
    double scale = j->op == HD_OP_MEAN ? 1.0 / (double)j->count : 1.0;
    for (int t = 0; t < tw; t++) switch (j->dt) {
        case HD_F64:
            hd_dtype_store(odt, dst, o + t, sum ? acc->f64[t] * scale : acc->f64[t]);
            break;
        case HD_F32:
        case HD_F16:
        case HD_BF16:
            hd_dtype_store(odt, dst, o + t, sum ? acc->f64[t] * scale : acc->f32[t]);
            break;
        case HD_I8: red_store_int(odt, dst, o + t, acc->i8[t]); break;
        case HD_I32: red_store_int(odt, dst, o + t, acc->i32[t]); break;
        case HD_I64:
            red_store_int(odt, dst, o + t, sum ? (int64_t)acc->u64[t] : acc->i64[t]);
            break;
        default: red_store_int(odt, dst, o + t, acc->u8[t]); break;
        }
}

/* The second pass of var, std or logsumexp over a tile whose first pass
 * is in acc, and its outputs o .. o + tw - 1: each element's parameter and
 * result by the rules of the per-output walk (red_param, red_store). */
static void red_vertical_pass2(const red_job *j, const char *base, hd_tensor *out, int64_t o,
                               const red_tile *acc, int tw) {
    double par[RED_TILE], acc2[RED_TILE];
    red_acc a1, a2;
    memset(&a1, 0, sizeof a1);
    memset(&a2, 0, sizeof a2);
    int wide = j->dt == HD_F64 || j->pass1 == RK_SUMF; /* f64 accumulators */
    for (int t = 0; t < tw; t++) {
        a1.f = wide ? acc->f64[t] : (double)acc->f32[t];
        if (!red_param(j, &a1, &par[t])) par[t] = 0; /* its second pass is not used */
        acc2[t] = 0;
    }
    red_vert_kernel2(j->op, j->dt)(j, base, tw, acc2, par);
    for (int t = 0; t < tw; t++) {
        a1.f = wide ? acc->f64[t] : (double)acc->f32[t];
        a2.f = acc2[t];
        red_store(j, out, o + t, &a1, &a2);
    }
}

/* When the last outer dim is contiguous and the inner ones are not (sum
 * over axis 0 of a row-major matrix), whole rows are folded into tiles of
 * accumulators. Work items are (outer row, tile) pairs; tiles narrow when
 * there are fewer items than threads. */
static void red_vertical(const red_job *j, red_vert_fn f, hd_tensor *out, int nt) {
    const red_geom *g = &j->outer;
    int64_t w = g->shape[g->ndim - 1], rows = out->numel / w, tw = HD_MIN(w, RED_TILE);
    if (rows * ((w + tw - 1) / tw) < nt) tw = HD_MAX(64, (w + nt - 1) / nt);
    int64_t tiles = (w + tw - 1) / tw, items = rows * tiles;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t it = 0; it < items; it++) {
        int64_t row = it / tiles, t0 = (it % tiles) * tw, idx[HD_MAX_DIMS];
        int n = (int)HD_MIN(tw, w - t0);
        red_geom rg = *g;
        rg.ndim = g->ndim - 1;
        int64_t off = geom_start(&rg, row, idx) + t0;
        red_tile acc;
        red_tile_init(j, &acc, n);
        f(j, j->data + off * j->esize, n, &acc, NULL);
        if (j->pass2 == RK_NONE)
            red_tile_store(j, out, row * w + t0, &acc, n);
        else
            red_vertical_pass2(j, j->data + off * j->esize, out, row * w + t0, &acc, n);
    }
}

/* ---- setup ---- */

/* Merge neighbouring dims that are one contiguous run (keeps row-major order). */
static void geom_merge(red_geom *g) {
    int k = 0;
    for (int d = 0; d < g->ndim; d++) {
        if (k > 0 && g->stride[k - 1] == g->stride[d] * g->shape[d]) {
            g->shape[k - 1] *= g->shape[d];
            g->stride[k - 1] = g->stride[d];
            continue;
        }
        g->shape[k] = g->shape[d];
        g->stride[k] = g->stride[d];
        k++;
    }
    g->ndim = k;
}

/* Order-free reductions walk the inner dims by decreasing stride, broadcast
 * (stride 0) dims first, so that the smallest stride is the run. */
static void geom_sort(red_geom *g) {
    for (int a = 1; a < g->ndim; a++) {
        int64_t sh = g->shape[a], st = g->stride[a];
        uint64_t key = st == 0 ? UINT64_MAX : (uint64_t)st;
        int b = a;
        for (; b > 0; b--) {
            uint64_t kb = g->stride[b - 1] == 0 ? UINT64_MAX : (uint64_t)g->stride[b - 1];
            if (kb >= key) break;
            g->shape[b] = g->shape[b - 1];
            g->stride[b] = g->stride[b - 1];
        }
        g->shape[b] = sh;
        g->stride[b] = st;
    }
}

static void red_passes(hd_op op, int isfloat, red_kind *p1, red_kind *p2) {
    *p2 = RK_NONE;
    switch (op) {
    case HD_OP_SUM: *p1 = isfloat ? RK_SUMF : RK_SUMI; break;
    case HD_OP_MEAN: *p1 = RK_SUMF; break;
    case HD_OP_PROD: *p1 = isfloat ? RK_PRODF : RK_PRODI; break;
    case HD_OP_MAX: *p1 = RK_MAX; break;
    case HD_OP_MIN: *p1 = RK_MIN; break;
    case HD_OP_ARGMAX: *p1 = RK_ARGMAX; break;
    case HD_OP_ARGMIN: *p1 = RK_ARGMIN; break;
    case HD_OP_VAR:
    case HD_OP_STD:
        *p1 = RK_SUMF;
        *p2 = RK_SQDEV;
        break;
    case HD_OP_LOGSUMEXP:
        *p1 = RK_MAX;
        *p2 = RK_SUMEXP;
        break;
    default: *p1 = RK_NONE; break;
    }
}

static void red_setup(red_job *j, hd_op op, const hd_tensor *x, const hd_attrs *attrs) {
    unsigned mask = 0;
    if (attrs->naxes == 0) mask = (1u << x->ndim) - 1;
    for (int i = 0; i < attrs->naxes && x->ndim > 0; i++) {
        int64_t a = attrs->axes[i] < 0 ? attrs->axes[i] + x->ndim : attrs->axes[i];
        mask |= 1u << a; /* validated by the shape rule */
    }
    memset(j, 0, sizeof *j);
    j->op = op;
    j->dt = x->dtype;
    j->esize = hd_dtype_size(x->dtype);
    j->isfloat = hd_dtype_is_float(x->dtype);
    j->data = hd_tensor_data(x);
    j->correction = (double)attrs->ints[0];
    red_passes(op, j->isfloat, &j->pass1, &j->pass2);
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1) continue;
        red_geom *g = (mask & (1u << d)) ? &j->inner : &j->outer;
        g->shape[g->ndim] = x->shape[d];
        g->stride[g->ndim++] = x->strides[d];
    }
    if (op != HD_OP_ARGMAX && op != HD_OP_ARGMIN) geom_sort(&j->inner);
    geom_merge(&j->inner);
    geom_merge(&j->outer);
    if (j->inner.ndim == 0) {
        j->inner.ndim = 1;
        j->inner.shape[0] = 1;
    }
    j->count = hd_shape_numel(j->inner.shape, j->inner.ndim);
}

/* The vertical kernel for j, or NULL when the per-output walk is better. */
static red_vert_fn red_vertical_for(const red_job *j) {
    const red_geom *o = &j->outer, *in = &j->inner;
    if (o->ndim == 0 || o->stride[o->ndim - 1] != 1 || o->shape[o->ndim - 1] < 8 || j->count < 2 ||
        in->stride[in->ndim - 1] == 1)
        return NULL;
    if (j->pass2 != RK_NONE && !red_vert_kernel2(j->op, j->dt)) return NULL;
    return red_vert_kernel(j->op, j->dt);
}

hd_status hd_cpu_reduce(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                        const hd_attrs *attrs) {
    HD_UNUSED(nin);
    red_job j;
    red_setup(&j, op, in[0], attrs);
    if (j.pass1 == RK_NONE)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s is not a reduction", hd_op_name(op));
    double work = (double)out->numel * (double)j.count;
    int nt = HD_MIN(HD_MAX(ctx->nthreads, 1), RED_MAX_THREADS);
    if (work < CPU_PAR_MIN) nt = 1;
    j.stop = &ctx->stop;
    red_vert_fn vf = red_vertical_for(&j);
    if (vf)
        red_vertical(&j, vf, out, nt);
    else if (nt > 1 && out->numel < nt && j.count >= CPU_PAR_MIN)
        red_split(&j, out, nt);
    else
        red_over_outputs(&j, out, nt);
    if (hd_ctx_interrupted(ctx)) return hd_ctx_stop_error(ctx);
    return HD_OK;
}

int hd_cpu_reduce_supports(hd_op op, hd_dtype dt) {
    switch (op) {
    case HD_OP_SUM:
    case HD_OP_PROD: return hd_dtype_is_float(dt) || dt == HD_I64;
    case HD_OP_MEAN:
    case HD_OP_VAR:
    case HD_OP_STD:
    case HD_OP_LOGSUMEXP: return hd_dtype_is_float(dt);
    case HD_OP_MAX:
    case HD_OP_MIN:
    case HD_OP_ARGMAX:
    case HD_OP_ARGMIN: return (unsigned)dt < HD_DTYPE_COUNT;
    default: return 0;
    }
}
