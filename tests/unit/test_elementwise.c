/* Elementwise ops on the CPU: every op in every dtype against reference
 * loops written here in double (or exact int64), through broadcasting,
 * transposed / stepped / expanded views, 0-d and zero-size tensors, the
 * threaded path, special values (NaN, inf, -0, integer limits), casts
 * (f16 conversions exhaustively), and the error cases. */
#include "hd_test.h"
#include "hd_op.h"
#include "hd_backend.h"
#include "cpu_kernels.h"

#include <float.h>
#include <limits.h>
#include <stdint.h>

static hd_ctx g_ctx;
#define CTX (&g_ctx)

static const hd_dtype all_dtypes[] = {HD_F16, HD_BF16, HD_F32, HD_F64, HD_I8,
                                      HD_U8,  HD_I32,  HD_I64, HD_BOOL};
#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

static int is_float(hd_dtype dt) {
    return hd_dtype_is_float(dt);
}

/* ---- making test tensors ---- */

/* Value domains for generated data. */
enum { DOM_ANY, DOM_POS, DOM_SMALL, DOM_WIDE, DOM_EXP };

static double gen_float(int dom, int64_t k) {
    switch (dom) {
    case DOM_POS: return 0.1 + (double)(k * 37 % 50) / 10.0; /* 0.1 .. 5.0 */
    case DOM_WIDE: return (double)(k * 37 % 101 - 50) / 2.0; /* -25 .. 25 */
    case DOM_EXP: return (double)(k * 37 % 61 - 30) / 10.0;  /* -3 .. 3 */
    case DOM_SMALL: return (double)(k * 7 % 21 - 10);        /* integers -10 .. 10 */
    default: return (double)(k * 37 % 101 - 50) / 10.0;      /* -5 .. 5, step 0.1 */
    }
}

/* Integers: DOM_ANY spans the dtype, limits included. */
static int64_t gen_int(hd_dtype dt, int dom, int64_t k) {
    if (dt == HD_BOOL) return k * 7 % 3 == 0;
    int u = dt == HD_U8;
    switch (dom) {
    case DOM_POS: return 1 + k * 7 % 9;
    case DOM_SMALL: return u ? k * 7 % 21 : k * 7 % 21 - 10;
    case DOM_EXP: return u ? k * 5 % 7 : k * 5 % 9 - 2; /* exponents, some negative */
    default: break;
    }
    switch (dt) {
    case HD_I8: return k * 73 % 256 - 128;
    case HD_U8: return k * 73 % 256;
    case HD_I32:
        if (k % 7 == 3) return k % 2 ? INT32_MAX - k : INT32_MIN + k;
        return k * 37 % 201 - 100;
    default:
        if (k % 7 == 3) return k % 2 ? INT64_MAX - k : INT64_MIN + k;
        if (k % 7 == 5) return (k * 1000003) << 20;
        return k * 37 % 201 - 100;
    }
}

/* Store an integer wrapped to dt (two's complement), as the kernels do. */
static void store_int(hd_dtype dt, void *p, int64_t i, int64_t v) {
    switch (dt) {
    case HD_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case HD_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case HD_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case HD_I64: ((int64_t *)p)[i] = v; break;
    case HD_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: hd_dtype_store(dt, p, i, (double)v); break;
    }
}

static hd_tensor *make_filled(hd_dtype dt, const int64_t *shape, int nd, int dom, int seed) {
    hd_tensor *t = hd_tensor_new(CTX, dt, shape, nd);
    if (!t) return NULL;
    void *p = t->storage->data;
    for (int64_t i = 0; i < t->numel; i++) {
        if (is_float(dt))
            hd_dtype_store(dt, p, i, gen_float(dom, i + seed));
        else
            store_int(dt, p, i, gen_int(dt, dom, i + seed));
    }
    return t;
}

static hd_tensor *view_op(hd_op op, hd_tensor *base, const hd_attrs *at) {
    hd_tensor *v = NULL;
    hd_status st = hd_op_run(CTX, op, &base, 1, at, &v);
    CHECK_MSG(st == HD_OK, "%s view: %s", hd_op_name(op), hd_error_message(CTX));
    hd_tensor_unref(base);
    return v;
}

/* Layouts of a test operand with a given logical shape. */
enum { LAY_CONTIG, LAY_TRANS, LAY_STEP, LAY_EXPAND, LAY_COUNT };
static const char *lay_name[LAY_COUNT] = {"contiguous", "transposed", "stepped", "expanded"};

/* A tensor of logical shape (shape, nd) laid out as `lay`: transposed
 * (2-d: permute of the swapped shape, with negative axes), stepped (the
 * last dim sliced with step 2 from offset 1) or expanded (2-d: dim 0
 * broadcast with stride 0). Other layouts fall back to contiguous. */
static hd_tensor *make(hd_dtype dt, const int64_t *shape, int nd, int lay, int dom, int seed) {
    if (lay == LAY_TRANS && nd == 2) {
        int64_t bs[2] = {shape[1], shape[0]};
        hd_attrs at = {0};
        at.nshape = 2;
        at.shape[0] = -1;
        at.shape[1] = -2;
        return view_op(HD_OP_PERMUTE, make_filled(dt, bs, 2, dom, seed), &at);
    }
    if (lay == LAY_STEP && nd >= 1) {
        int64_t bs[HD_MAX_DIMS];
        hd_attrs at = {0};
        for (int d = 0; d < nd; d++) {
            bs[d] = shape[d];
            at.start[d] = 0, at.step[d] = 1, at.len[d] = shape[d];
        }
        bs[nd - 1] = 2 * shape[nd - 1] + 1;
        at.start[nd - 1] = 1, at.step[nd - 1] = 2;
        return view_op(HD_OP_SLICE, make_filled(dt, bs, nd, dom, seed), &at);
    }
    if (lay == LAY_EXPAND && nd == 2) {
        int64_t bs[2] = {1, shape[1]};
        hd_attrs at = {0};
        at.nshape = 2;
        at.shape[0] = shape[0];
        at.shape[1] = -1;
        return view_op(HD_OP_EXPAND, make_filled(dt, bs, 2, dom, seed), &at);
    }
    return make_filled(dt, shape, nd, dom, seed);
}

static hd_tensor *from_doubles(hd_dtype dt, const double *v, int64_t n) {
    int64_t shape[1] = {n};
    hd_tensor *t = hd_tensor_new(CTX, dt, shape, 1);
    for (int64_t i = 0; t && i < n; i++) hd_dtype_store(dt, t->storage->data, i, v[i]);
    return t;
}

static hd_tensor *from_ints(hd_dtype dt, const int64_t *v, int64_t n) {
    int64_t shape[1] = {n};
    hd_tensor *t = hd_tensor_new(CTX, dt, shape, 1);
    for (int64_t i = 0; t && i < n; i++) store_int(dt, t->storage->data, i, v[i]);
    return t;
}

/* ---- reference semantics, written out independently of the kernels ---- */

static double tol_of(hd_dtype dt, int transcendental) {
    switch (dt) {
    case HD_F64: return 1e-12;
    case HD_F32: return transcendental ? 2e-6 : 1e-6;
    case HD_F16: return 1e-3;
    default: return 1e-2; /* bf16 */
    }
}

/* v rounded to a float dtype (through the core's conversion). */
static double round_to(hd_dtype dt, double v) {
    unsigned char buf[8];
    hd_dtype_store(dt, buf, 0, v);
    return hd_dtype_load(dt, buf, 0);
}

/* v wrapped to an integer dtype, two's complement. */
static int64_t wrap(hd_dtype dt, int64_t v) {
    switch (dt) {
    case HD_I8: return (int8_t)(uint8_t)v;
    case HD_U8: return (uint8_t)v;
    case HD_I32: return (int32_t)(uint32_t)v;
    case HD_BOOL: return v != 0;
    default: return v;
    }
}

static int64_t int_min(hd_dtype dt) {
    return dt == HD_I8 ? INT8_MIN : dt == HD_I32 ? INT32_MIN : dt == HD_I64 ? INT64_MIN : 0;
}
static int64_t int_max(hd_dtype dt) {
    return dt == HD_I8    ? INT8_MAX
           : dt == HD_U8  ? UINT8_MAX
           : dt == HD_I32 ? INT32_MAX
           : dt == HD_I64 ? INT64_MAX
                          : 1;
}

static int64_t sat_i64(double v) {
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

static double round_half_even(double x) {
    if (!isfinite(x)) return x;
    double r = floor(x), d = x - r;
    if (d > 0.5 || (d == 0.5 && fmod(r, 2) != 0)) r += 1;
    return r == 0 ? copysign(0.0, x) : r;
}

static int is_transcendental(hd_op op) {
    return (op >= HD_OP_EXP && op <= HD_OP_SOFTPLUS) || op == HD_OP_ERF || op == HD_OP_ERFC ||
           op == HD_OP_LGAMMA;
}

static int float_only(hd_op op) {
    return is_transcendental(op) && op != HD_OP_RELU;
}

static double ref_unary_f(hd_op op, double x, const hd_attrs *at) {
    switch (op) {
    case HD_OP_NEG: return -x;
    case HD_OP_ABS: return fabs(x);
    case HD_OP_EXP: return exp(x);
    case HD_OP_LOG: return log(x);
    case HD_OP_SQRT: return sqrt(x);
    case HD_OP_RSQRT: return 1.0 / sqrt(x);
    case HD_OP_SIN: return sin(x);
    case HD_OP_COS: return cos(x);
    case HD_OP_TANH: return tanh(x);
    case HD_OP_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case HD_OP_RELU: return isnan(x) ? x : x > 0 ? x : 0.0;
    case HD_OP_GELU:
        return 0.5 * x * erfc(-x / sqrt(2.0)); /* 1 + erf(x / sqrt 2), no cancellation */
    case HD_OP_SILU: return x / (1.0 + exp(-x));
    case HD_OP_SOFTPLUS: return x > 20 ? x : log1p(exp(x));
    case HD_OP_ERF: return erf(x);
    case HD_OP_ERFC: return erfc(x);
    case HD_OP_LGAMMA: /* another libm function than the kernel's lgamma_r */
        return x == floor(x) && x <= 0 ? INFINITY
               : fabs(x) < 170         ? log(fabs(tgamma(x)))
                                       : lgamma(x);
    case HD_OP_SIGN: return isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
    case HD_OP_FLOOR: return floor(x);
    case HD_OP_CEIL: return ceil(x);
    case HD_OP_ROUND: return round_half_even(x);
    case HD_OP_CLAMP: {
        double lo = at->scalar[0], hi = at->scalar[1];
        if (isnan(x)) return x;
        if (!isnan(lo) && x < lo) x = lo;
        if (!isnan(hi) && x > hi) x = hi;
        return x;
    }
    default: return NAN;
    }
}

/* Integer (and bool) unary ops, exact; results wrapped to dt. */
static int64_t ref_unary_i(hd_op op, int64_t x, hd_dtype dt, const hd_attrs *at) {
    switch (op) {
    case HD_OP_NEG: return wrap(dt, (int64_t)(0 - (uint64_t)x));
    case HD_OP_ABS: return x < 0 ? wrap(dt, (int64_t)(0 - (uint64_t)x)) : x;
    case HD_OP_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case HD_OP_RELU: return x > 0 ? x : 0;
    case HD_OP_CLAMP: { /* clamp in the integers, then saturate to dt (bool: != 0) */
        double lo = at->scalar[0], hi = at->scalar[1];
        int64_t r = x;
        if (!isnan(lo) && (double)r < lo) r = sat_i64(ceil(lo));
        if (!isnan(hi) && (double)r > hi) r = sat_i64(floor(hi));
        return dt == HD_BOOL ? r != 0 : HD_MAX(HD_MIN(r, int_max(dt)), int_min(dt));
    }
    default: return x; /* floor, ceil, round of integers */
    }
}

static double ref_binary_f(hd_op op, double a, double b) {
    switch (op) {
    case HD_OP_ADD: return a + b;
    case HD_OP_SUB: return a - b;
    case HD_OP_MUL: return a * b;
    case HD_OP_DIV: return a / b;
    case HD_OP_MOD: { /* torch.remainder: the result takes the divisor's sign */
        double r = fmod(a, b);
        if (r != 0 && (r < 0) != (b < 0)) r += b;
        return r;
    }
    case HD_OP_POW: return pow(a, b);
    case HD_OP_ATAN2: return atan2(a, b);
    case HD_OP_MAXIMUM: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case HD_OP_MINIMUM: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    default: return NAN;
    }
}

static int64_t ref_pow_i(int64_t a, int64_t b, hd_dtype dt) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)a;
    if (b <= 64) {
        for (int64_t i = 0; i < b; i++) r *= x;
    } else { /* modular exponentiation mod 2^64 */
        for (uint64_t e = (uint64_t)b; e; e >>= 1, x *= x)
            if (e & 1) r *= x;
    }
    return wrap(dt, (int64_t)r);
}

static int64_t ref_binary_i(hd_op op, int64_t a, int64_t b, hd_dtype dt) {
    if (dt == HD_BOOL) {
        int x = a != 0, y = b != 0;
        return op == HD_OP_ADD || op == HD_OP_MAXIMUM ? (x || y) : (x && y);
    }
    switch (op) {
    case HD_OP_ADD: return wrap(dt, (int64_t)((uint64_t)a + (uint64_t)b));
    case HD_OP_SUB: return wrap(dt, (int64_t)((uint64_t)a - (uint64_t)b));
    case HD_OP_MUL: return wrap(dt, (int64_t)((uint64_t)a * (uint64_t)b));
    case HD_OP_MOD: {
        if (b == 0 || b == -1) return 0; /* Hodu's rule for x % 0; x % -1 is 0 */
        int64_t r = a % b;
        if (r != 0 && (r < 0) != (b < 0)) r += b;
        return r;
    }
    case HD_OP_POW: return ref_pow_i(a, b, dt);
    case HD_OP_MAXIMUM: return a > b ? a : b;
    case HD_OP_MINIMUM: return a < b ? a : b;
    default: return 0;
    }
}

static int ref_compare(hd_op op, int c) { /* c: -1, 0, 1, or 2 for unordered (NaN) */
    switch (op) {
    case HD_OP_EQ: return c == 0;
    case HD_OP_NE: return c != 0;
    case HD_OP_LT: return c == -1;
    case HD_OP_LE: return c == -1 || c == 0;
    case HD_OP_GT: return c == 1;
    default: return c == 1 || c == 0; /* GE */
    }
}

/* Logical flat index into t of output position flat, t broadcast to
 * (shape, nd). */
static int64_t bidx(const hd_tensor *t, const int64_t *shape, int nd, int64_t flat) {
    int64_t idx = 0, mul = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t i = flat % shape[d];
        flat /= shape[d];
        int td = d - (nd - t->ndim);
        if (td < 0) continue;
        if (t->shape[td] != 1) idx += i * mul;
        mul *= t->shape[td];
    }
    return idx;
}

/* The broadcast shape, computed here for the checks. */
static int bshape(const hd_tensor *const *in, int n, int64_t *shape) {
    int nd = 0;
    for (int k = 0; k < n; k++) nd = HD_MAX(nd, in[k]->ndim);
    for (int d = 0; d < nd; d++) {
        shape[d] = 1;
        for (int k = 0; k < n; k++) {
            int td = d - (nd - in[k]->ndim);
            if (td >= 0 && in[k]->shape[td] != 1) shape[d] = in[k]->shape[td];
        }
    }
    return nd;
}

static int same_shape(const hd_tensor *t, const int64_t *shape, int nd) {
    if (t->ndim != nd) return 0;
    for (int d = 0; d < nd; d++)
        if (t->shape[d] != shape[d]) return 0;
    return 1;
}

/* ---- checkers ---- */

static int g_bad_report; /* print at most a few element mismatches per case */

static void report_elem(const char *what, int64_t i, double got, double want) {
    if (g_bad_report++ < 3)
        fprintf(stderr, "  %s: element %lld: got %.17g want %.17g\n", what, (long long)i, got,
                want);
}

/* Run a unary op and compare every element with the reference. */
static void check_unary(hd_op op, hd_tensor *x, const hd_attrs *at, hd_dtype want_dt,
                        const char *what) {
    hd_tensor *y = NULL;
    hd_status st = hd_op_run(CTX, op, &x, 1, at, &y);
    CHECK_MSG(st == HD_OK, "%s %s %s: %s", hd_op_name(op), hd_dtype_name(x->dtype), what,
              hd_error_message(CTX));
    if (st) return;
    CHECK_MSG(y->dtype == want_dt && same_shape(y, x->shape, x->ndim) && hd_tensor_is_contiguous(y),
              "%s %s %s: result %s", hd_op_name(op), hd_dtype_name(x->dtype), what,
              hd_dtype_name(y->dtype));
    int bad = 0;
    double tol = is_float(want_dt) ? tol_of(want_dt, is_transcendental(op)) : 0;
    for (int64_t i = 0; i < y->numel && y->dtype == want_dt; i++) {
        double got, want;
        int ok;
        if (op == HD_OP_NOT) {
            want = hd_tensor_get(x, i) != 0 ? 0 : 1;
            got = hd_tensor_get(y, i);
            ok = got == want;
        } else if (is_float(want_dt)) {
            want = round_to(want_dt, ref_unary_f(op, hd_tensor_get(x, i), at));
            got = hd_tensor_get(y, i);
            ok = hd_test_close(got, want, tol, tol);
        } else {
            int64_t w = ref_unary_i(op, hd_tensor_get_i64(x, i), x->dtype, at);
            int64_t g = hd_tensor_get_i64(y, i);
            ok = g == w;
            got = (double)g, want = (double)w;
        }
        if (!ok) {
            bad++;
            report_elem(what, i, got, want);
        }
    }
    CHECK_MSG(bad == 0, "%s %s %s: %d wrong elements", hd_op_name(op), hd_dtype_name(x->dtype),
              what, bad);
    hd_tensor_unref(y);
}

/* Run a binary or compare op on (a, b) and check every element. */
static void check_binary(hd_op op, hd_tensor *a, hd_tensor *b, hd_dtype want_dt, const char *what) {
    hd_tensor *y = NULL, *in[2] = {a, b};
    hd_status st = hd_op_run(CTX, op, in, 2, NULL, &y);
    CHECK_MSG(st == HD_OK, "%s %s,%s %s: %s", hd_op_name(op), hd_dtype_name(a->dtype),
              hd_dtype_name(b->dtype), what, hd_error_message(CTX));
    if (st) return;
    int64_t shape[HD_MAX_DIMS];
    int nd = bshape((const hd_tensor *const *)in, 2, shape);
    CHECK_MSG(y->dtype == want_dt && same_shape(y, shape, nd), "%s %s %s: result %s",
              hd_op_name(op), hd_dtype_name(a->dtype), what, hd_dtype_name(y->dtype));
    int cmp = hd_op_infos[op].kind == HD_KIND_COMPARE;
    int ints = !is_float(a->dtype) && !is_float(b->dtype);
    double tol = is_float(want_dt) ? tol_of(want_dt, op == HD_OP_POW) : 0;
    int bad = 0;
    for (int64_t i = 0; i < y->numel && y->dtype == want_dt && same_shape(y, shape, nd); i++) {
        int64_t ia = bidx(a, shape, nd, i), ib = bidx(b, shape, nd, i);
        double got = hd_tensor_get(y, i), want;
        int ok;
        if (cmp && ints) {
            int64_t x = hd_tensor_get_i64(a, ia), z = hd_tensor_get_i64(b, ib);
            want = ref_compare(op, (x > z) - (x < z));
            ok = got == want;
        } else if (cmp) {
            double x = hd_tensor_get(a, ia), z = hd_tensor_get(b, ib);
            want = ref_compare(op, isnan(x) || isnan(z) ? 2 : (x > z) - (x < z));
            ok = got == want;
        } else if (is_float(want_dt)) {
            double x = hd_tensor_get(a, ia), z = hd_tensor_get(b, ib);
            want = round_to(want_dt, ref_binary_f(op, x, z));
            ok = hd_test_close(got, want, tol, tol);
        } else {
            int64_t w =
                ref_binary_i(op, hd_tensor_get_i64(a, ia), hd_tensor_get_i64(b, ib), want_dt);
            int64_t g = hd_tensor_get_i64(y, i);
            ok = g == w;
            got = (double)g, want = (double)w;
        }
        if (!ok) {
            bad++;
            report_elem(what, i, got, want);
        }
    }
    CHECK_MSG(bad == 0, "%s %s,%s %s: %d wrong elements", hd_op_name(op), hd_dtype_name(a->dtype),
              hd_dtype_name(b->dtype), what, bad);
    hd_tensor_unref(y);
}

static void check_where(hd_tensor *c, hd_tensor *a, hd_tensor *b, hd_dtype want_dt,
                        const char *what) {
    hd_tensor *y = NULL, *in[3] = {c, a, b};
    hd_status st = hd_op_run(CTX, HD_OP_WHERE, in, 3, NULL, &y);
    CHECK_MSG(st == HD_OK, "where %s %s: %s", hd_dtype_name(a->dtype), what, hd_error_message(CTX));
    if (st) return;
    int64_t shape[HD_MAX_DIMS];
    int nd = bshape((const hd_tensor *const *)in, 3, shape);
    CHECK_MSG(y->dtype == want_dt && same_shape(y, shape, nd), "where %s %s: result %s",
              hd_dtype_name(a->dtype), what, hd_dtype_name(y->dtype));
    int bad = 0;
    for (int64_t i = 0; i < y->numel && y->dtype == want_dt; i++) {
        int take_a = hd_tensor_get(c, bidx(c, shape, nd, i)) != 0;
        hd_tensor *src = take_a ? a : b;
        int64_t j = bidx(src, shape, nd, i);
        int ok;
        if (is_float(want_dt))
            ok = hd_tensor_get(y, i) == round_to(want_dt, hd_tensor_get(src, j));
        else
            ok = hd_tensor_get_i64(y, i) == wrap(want_dt, hd_tensor_get_i64(src, j));
        if (!ok) {
            bad++;
            report_elem(what, i, hd_tensor_get(y, i), hd_tensor_get(src, j));
        }
    }
    CHECK_MSG(bad == 0, "where %s %s: %d wrong elements", hd_dtype_name(a->dtype), what, bad);
    hd_tensor_unref(y);
}

/* ---- unary ops ---- */

static const struct {
    hd_op op;
    int dom;
} unary_ops[] = {
    {HD_OP_NEG, DOM_ANY},      {HD_OP_ABS, DOM_ANY},       {HD_OP_EXP, DOM_ANY},
    {HD_OP_LOG, DOM_POS},      {HD_OP_SQRT, DOM_POS},      {HD_OP_RSQRT, DOM_POS},
    {HD_OP_SIN, DOM_ANY},      {HD_OP_COS, DOM_ANY},       {HD_OP_TANH, DOM_WIDE},
    {HD_OP_SIGMOID, DOM_WIDE}, {HD_OP_RELU, DOM_ANY},      {HD_OP_GELU, DOM_WIDE},
    {HD_OP_SILU, DOM_WIDE},    {HD_OP_SOFTPLUS, DOM_WIDE}, {HD_OP_SIGN, DOM_ANY},
    {HD_OP_FLOOR, DOM_WIDE},   {HD_OP_CEIL, DOM_WIDE},     {HD_OP_ROUND, DOM_WIDE},
    {HD_OP_CLAMP, DOM_ANY},    {HD_OP_NOT, DOM_SMALL},     {HD_OP_ERF, DOM_WIDE},
    {HD_OP_ERFC, DOM_WIDE},    {HD_OP_LGAMMA, DOM_WIDE},
};

static void test_unary_all(void) {
    hd_attrs at = {0};
    at.scalar[0] = -2.5; /* clamp bounds */
    at.scalar[1] = 3.5;
    int64_t shape[2] = {4, 5}, zero[2] = {0, 3};
    for (size_t o = 0; o < sizeof unary_ops / sizeof unary_ops[0]; o++) {
        hd_op op = unary_ops[o].op;
        for (int d = 0; d < NDT; d++) {
            hd_dtype dt = all_dtypes[d];
            int dom = unary_ops[o].dom;
            if (!is_float(dt) && float_only(op)) dom = DOM_SMALL; /* exact in f32 */
            hd_dtype want = float_only(op)    ? (is_float(dt) ? dt : HD_F32)
                            : op == HD_OP_NOT ? HD_BOOL
                                              : dt;
            if (dt == HD_BOOL && (op == HD_OP_NEG || op == HD_OP_RELU || op == HD_OP_SIGN)) {
                hd_tensor *x = make(dt, shape, 2, LAY_CONTIG, dom, 1), *y = NULL;
                CHECK(hd_op_run(CTX, op, &x, 1, &at, &y) == HD_ERR_RUNTIME && !y);
                CHECK(strstr(hd_error_message(CTX), hd_op_name(op)) &&
                      strstr(hd_error_message(CTX), "bool"));
                hd_tensor_unref(x);
                continue;
            }
            for (int lay = 0; lay < LAY_COUNT; lay++) {
                hd_tensor *x = make(dt, shape, 2, lay, dom, 3 + lay);
                check_unary(op, x, &at, want, lay_name[lay]);
                hd_tensor_unref(x);
            }
            hd_tensor *s = make(dt, shape, 0, LAY_CONTIG, dom, 7);
            check_unary(op, s, &at, want, "0-d");
            hd_tensor_unref(s);
            hd_tensor *z = make(dt, zero, 2, LAY_CONTIG, dom, 0);
            check_unary(op, z, &at, want, "zero-size");
            hd_tensor_unref(z);
        }
    }
}

static void test_clamp_bounds(void) {
    int64_t shape[1] = {40};
    const double bounds[][2] = {{NAN, 1.5}, {-1.5, NAN}, {NAN, NAN}, {2, -2}, {-1e30, 1e30}};
    for (int d = 0; d < NDT; d++) {
        for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++) {
            hd_attrs at = {0};
            at.scalar[0] = bounds[k][0];
            at.scalar[1] = bounds[k][1];
            hd_tensor *x = make(all_dtypes[d], shape, 1, LAY_STEP, DOM_ANY, 11);
            check_unary(HD_OP_CLAMP, x, &at, all_dtypes[d], "bounds");
            hd_tensor_unref(x);
        }
    }
    /* integer bounds that are not integers: clamp(i32, -2.5, 3.5) is [-2, 3] */
    int64_t v[4] = {-10, -2, 3, 10};
    hd_tensor *x = from_ints(HD_I32, v, 4), *y = NULL;
    hd_attrs at = {0};
    at.scalar[0] = -2.5;
    at.scalar[1] = 3.5;
    CHECK(hd_op_run(CTX, HD_OP_CLAMP, &x, 1, &at, &y) == HD_OK);
    CHECK(hd_tensor_get_i64(y, 0) == -2 && hd_tensor_get_i64(y, 3) == 3);
    hd_tensor_unref(y);
    hd_tensor_unref(x);
}

/* ---- binary ops ---- */

static const hd_op binary_ops[] = {HD_OP_ADD, HD_OP_SUB,     HD_OP_MUL,     HD_OP_DIV, HD_OP_MOD,
                                   HD_OP_POW, HD_OP_MAXIMUM, HD_OP_MINIMUM, HD_OP_EQ,  HD_OP_NE,
                                   HD_OP_LT,  HD_OP_LE,      HD_OP_GT,      HD_OP_GE,  HD_OP_ATAN2};

/* Integer operands give f32 (computed in f64, as every float op of ints). */
static int int_to_float(hd_op op) {
    return op == HD_OP_DIV || op == HD_OP_ATAN2;
}

/* Operand pairs: shapes and layouts of a and b. */
static const struct {
    int na, nb;
    int64_t sa[2], sb[2];
    int la, lb;
    const char *name;
} pairs[] = {
    {2, 2, {4, 5}, {4, 5}, LAY_CONTIG, LAY_CONTIG, "contiguous"},
    {2, 1, {3, 1}, {4}, LAY_CONTIG, LAY_CONTIG, "[3,1] with [4]"},
    {1, 2, {4}, {3, 1}, LAY_CONTIG, LAY_CONTIG, "[4] with [3,1]"},
    {0, 2, {0}, {2, 3}, LAY_CONTIG, LAY_CONTIG, "0-d with [2,3]"},
    {2, 0, {2, 3}, {0}, LAY_CONTIG, LAY_CONTIG, "[2,3] with 0-d"},
    {0, 0, {0}, {0}, LAY_CONTIG, LAY_CONTIG, "0-d with 0-d"},
    {2, 2, {4, 5}, {4, 5}, LAY_TRANS, LAY_STEP, "transposed with stepped"},
    {2, 2, {4, 5}, {4, 5}, LAY_EXPAND, LAY_TRANS, "expanded with transposed"},
    {2, 2, {4, 5}, {4, 5}, LAY_STEP, LAY_EXPAND, "stepped with expanded"},
    {2, 1, {3, 1}, {300}, LAY_CONTIG, LAY_STEP, "[3,1] with stepped [300]"},
    {2, 1, {0, 3}, {3}, LAY_CONTIG, LAY_CONTIG, "zero-size"},
};

static void binary_domains(hd_op op, hd_dtype dt, int *da, int *db) {
    *da = *db = DOM_ANY;
    if (hd_op_infos[op].kind == HD_KIND_COMPARE) *da = *db = DOM_SMALL; /* ties happen */
    if (op == HD_OP_POW) {
        *da = is_float(dt) ? DOM_POS : DOM_ANY;
        *db = DOM_EXP;
    }
    if (int_to_float(op) && !is_float(dt)) *da = *db = DOM_SMALL; /* exact in f32 */
}

static void test_binary_all(void) {
    for (size_t o = 0; o < sizeof binary_ops / sizeof binary_ops[0]; o++) {
        hd_op op = binary_ops[o];
        int cmp = hd_op_infos[op].kind == HD_KIND_COMPARE;
        for (int d = 0; d < NDT; d++) {
            hd_dtype dt = all_dtypes[d];
            hd_dtype want = cmp ? HD_BOOL : int_to_float(op) && !is_float(dt) ? HD_F32 : dt;
            int da, db;
            binary_domains(op, dt, &da, &db);
            if (dt == HD_BOOL && (op == HD_OP_SUB || op == HD_OP_MOD || op == HD_OP_POW)) {
                int64_t s[1] = {3};
                hd_tensor *a = make(dt, s, 1, LAY_CONTIG, da, 0), *y = NULL;
                CHECK(hd_op_binary(CTX, op, a, a, &y) == HD_ERR_RUNTIME && !y);
                CHECK(strstr(hd_error_message(CTX), "bool") != NULL);
                hd_tensor_unref(a);
                continue;
            }
            for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
                hd_tensor *a = make(dt, pairs[p].sa, pairs[p].na, pairs[p].la, da, 5);
                hd_tensor *b = make(dt, pairs[p].sb, pairs[p].nb, pairs[p].lb, db, 17);
                check_binary(op, a, b, want, pairs[p].name);
                hd_tensor_unref(a);
                hd_tensor_unref(b);
            }
            /* the same tensor on both sides */
            int64_t s[2] = {3, 4};
            hd_tensor *a = make(dt, s, 2, LAY_TRANS, da, 9);
            check_binary(op, a, a, want, "x op x");
            hd_tensor_unref(a);
        }
    }
}

/* Mixed dtypes and Hodu numbers: the result dtype follows PyTorch. */
static void test_promotion(void) {
    int64_t s[2] = {2, 3};
    struct {
        hd_op op;
        hd_dtype ta;
        int num_a; /* 0: tensor, 1: Hodu number, 2: 0-d tensor */
        hd_dtype tb;
        int num_b;
        double vb;
        hd_dtype want;
    } cases[] = {
        {HD_OP_MUL, HD_F16, 0, HD_F64, 1, 2.0, HD_F16},    /* f16 * 2.0 stays f16 */
        {HD_OP_ADD, HD_I32, 0, HD_F64, 1, 2.5, HD_F32},    /* i32 + 2.5 -> f32 */
        {HD_OP_DIV, HD_I32, 0, HD_I32, 0, 0, HD_F32},      /* i32 / i32 -> f32 */
        {HD_OP_ADD, HD_I32, 0, HD_I64, 1, 2, HD_I32},      /* i32 + 2 stays i32 */
        {HD_OP_ADD, HD_U8, 0, HD_I64, 1, 300, HD_U8},      /* 300 wraps to 44 as in torch */
        {HD_OP_ADD, HD_BOOL, 0, HD_I64, 1, 1, HD_I64},     /* bool + 1 -> i64 */
        {HD_OP_ADD, HD_I8, 0, HD_U8, 0, 0, HD_I32},        /* i8 + u8 -> i32 */
        {HD_OP_ADD, HD_F16, 0, HD_BF16, 0, 0, HD_F32},     /* f16 + bf16 -> f32 */
        {HD_OP_MUL, HD_I64, 0, HD_F16, 0, 0, HD_F16},      /* int * f16 -> f16 */
        {HD_OP_SUB, HD_F32, 0, HD_F64, 2, 0.25, HD_F32},   /* f32 - f64 0-d -> f32 */
        {HD_OP_SUB, HD_I32, 0, HD_F64, 2, 0.25, HD_F64},   /* i32 - f64 0-d -> f64 */
        {HD_OP_LT, HD_I32, 0, HD_F64, 1, 0.5, HD_BOOL},    /* compared as f32 */
        {HD_OP_MAXIMUM, HD_BOOL, 0, HD_F32, 0, 0, HD_F32}, /* bool with f32 */
        {HD_OP_POW, HD_F64, 1, HD_I32, 0, 2.0, HD_F32},    /* 2.0 ** i32 tensor -> f32 */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        hd_tensor *a, *b;
        if (cases[k].num_a == 1)
            a = hd_tensor_number(CTX, cases[k].ta, cases[k].vb);
        else
            a = make(cases[k].ta, s, 2, LAY_TRANS, DOM_SMALL, 2);
        if (cases[k].num_b == 1)
            b = hd_tensor_number(CTX, cases[k].tb, cases[k].vb);
        else if (cases[k].num_b == 2)
            b = hd_tensor_scalar(CTX, cases[k].tb, cases[k].vb);
        else
            b = make(cases[k].tb, s, 2, LAY_CONTIG, DOM_SMALL, 4);
        hd_tensor *y = NULL;
        CHECK_MSG(hd_op_binary(CTX, cases[k].op, a, b, &y) == HD_OK, "case %zu: %s", k,
                  hd_error_message(CTX));
        if (y) CHECK_MSG(y->dtype == cases[k].want, "case %zu: got %s", k, hd_dtype_name(y->dtype));
        if (y) check_binary(cases[k].op, a, b, cases[k].want, "promotion");
        hd_tensor_unref(y);
        hd_tensor_unref(a);
        hd_tensor_unref(b);
    }
    /* u8 [1, 250] + 300: 300 wraps to 44 */
    int64_t v[2] = {1, 250};
    hd_tensor *u = from_ints(HD_U8, v, 2), *n = hd_tensor_number(CTX, HD_I64, 300), *y = NULL;
    CHECK(hd_op_binary(CTX, HD_OP_ADD, u, n, &y) == HD_OK);
    CHECK(y && hd_tensor_get_i64(y, 0) == 45 && hd_tensor_get_i64(y, 1) == 38);
    hd_tensor_unref(y);
    hd_tensor_unref(n);
    hd_tensor_unref(u);
    /* f16 tensor * 2.0 */
    double hv[3] = {1.5, -0.25, 60000};
    hd_tensor *h = from_doubles(HD_F16, hv, 3), *two = hd_tensor_number(CTX, HD_F64, 2.0);
    CHECK(hd_op_binary(CTX, HD_OP_MUL, h, two, &y) == HD_OK);
    CHECK(y && y->dtype == HD_F16 && hd_tensor_get(y, 0) == 3.0 && hd_tensor_get(y, 1) == -0.5 &&
          isinf(hd_tensor_get(y, 2)));
    hd_tensor_unref(y);
    hd_tensor_unref(two);
    hd_tensor_unref(h);
}

/* ---- where ---- */

static void test_where_all(void) {
    int64_t s45[2] = {4, 5}, s31[2] = {3, 1}, s4[1] = {4}, z[2] = {0, 4};
    for (int d = 0; d < NDT; d++) {
        hd_dtype dt = all_dtypes[d];
        struct {
            hd_tensor *c, *a, *b;
            const char *name;
        } cs[] = {
            {make(HD_BOOL, s45, 2, LAY_CONTIG, DOM_ANY, 1),
             make(dt, s45, 2, LAY_CONTIG, DOM_ANY, 2), make(dt, s45, 2, LAY_CONTIG, DOM_ANY, 3),
             "contiguous"},
            {make(HD_BOOL, s31, 2, LAY_CONTIG, DOM_ANY, 1), make(dt, s4, 1, LAY_STEP, DOM_ANY, 2),
             make(dt, s4, 0, LAY_CONTIG, DOM_ANY, 3), "[3,1], stepped [4], 0-d"},
            {make(HD_BOOL, s45, 2, LAY_TRANS, DOM_ANY, 4), make(dt, s45, 2, LAY_EXPAND, DOM_ANY, 5),
             make(dt, s45, 2, LAY_STEP, DOM_ANY, 6), "transposed, expanded, stepped"},
            {make(HD_I32, s45, 2, LAY_CONTIG, DOM_SMALL, 1),
             make(dt, s45, 2, LAY_CONTIG, DOM_ANY, 2), make(dt, s4, 0, LAY_CONTIG, DOM_ANY, 8),
             "i32 condition"},
            {make(HD_BOOL, s4, 0, LAY_CONTIG, DOM_ANY, 0), make(dt, s4, 0, LAY_CONTIG, DOM_ANY, 2),
             make(dt, s4, 0, LAY_CONTIG, DOM_ANY, 4), "0-d"},
            {make(HD_BOOL, z, 2, LAY_CONTIG, DOM_ANY, 0), make(dt, s4, 1, LAY_CONTIG, DOM_ANY, 2),
             make(dt, s4, 0, LAY_CONTIG, DOM_ANY, 4), "zero-size"},
        };
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
            check_where(cs[k].c, cs[k].a, cs[k].b, dt, cs[k].name);
            hd_tensor_unref(cs[k].c);
            hd_tensor_unref(cs[k].a);
            hd_tensor_unref(cs[k].b);
        }
    }
    /* where(c, f16 tensor, 0.0 number) stays f16 */
    hd_tensor *c = make(HD_BOOL, s45, 2, LAY_CONTIG, DOM_ANY, 1);
    hd_tensor *a = make(HD_F16, s45, 2, LAY_CONTIG, DOM_ANY, 2);
    hd_tensor *n = hd_tensor_number(CTX, HD_F64, 0.0), *in[3] = {c, a, n}, *y = NULL;
    CHECK(hd_op_run(CTX, HD_OP_WHERE, in, 3, NULL, &y) == HD_OK && y && y->dtype == HD_F16);
    if (y) check_where(c, a, n, HD_F16, "f16 with a number");
    hd_tensor_unref(y);
    hd_tensor_unref(n);
    hd_tensor_unref(a);
    hd_tensor_unref(c);
}

/* ---- casts and copies ---- */

static double cast_float_ref(hd_dtype to, double v) {
    float f = (float)v;
    switch (to) {
    case HD_F64: return v;
    case HD_F32: return f;
    case HD_F16: return hd_f16_to_f32(hd_f32_to_f16(f));
    default: return hd_bf16_to_f32(hd_f32_to_bf16(f));
    }
}

/* Float to integer: truncate toward zero, saturate, NaN -> 0. */
static int64_t cast_int_ref(hd_dtype to, double v) {
    if (to == HD_BOOL) return v != 0;
    if (isnan(v)) return 0;
    if (v <= (double)int_min(to)) return int_min(to);
    if (v >= (double)int_max(to)) return int_max(to);
    return (int64_t)v;
}

static void check_cast(hd_tensor *x, hd_dtype to, const char *what) {
    hd_tensor *y = NULL;
    hd_status st = hd_op_cast(CTX, x, to, &y);
    CHECK_MSG(st == HD_OK, "cast %s -> %s: %s", hd_dtype_name(x->dtype), hd_dtype_name(to),
              hd_error_message(CTX));
    if (st) return;
    CHECK(y->dtype == to && same_shape(y, x->shape, x->ndim) && hd_tensor_is_contiguous(y));
    int bad = 0;
    for (int64_t i = 0; i < x->numel; i++) {
        int ok;
        double got = hd_tensor_get(y, i), want;
        if (is_float(x->dtype)) {
            double v = hd_tensor_get(x, i);
            if (is_float(to)) {
                want = cast_float_ref(to, v);
                ok = got == want || (isnan(got) && isnan(want));
            } else {
                int64_t w = cast_int_ref(to, v);
                ok = hd_tensor_get_i64(y, i) == w;
                want = (double)w;
            }
        } else {
            int64_t v = hd_tensor_get_i64(x, i);
            if (is_float(to)) {
                want = to == HD_F64 ? (double)v : cast_float_ref(to, (double)(float)v);
                ok = got == want;
            } else {
                int64_t w = wrap(to, v);
                ok = hd_tensor_get_i64(y, i) == w;
                want = (double)w;
            }
        }
        if (!ok) {
            bad++;
            report_elem(what, i, got, want);
        }
    }
    CHECK_MSG(bad == 0, "cast %s -> %s %s: %d wrong", hd_dtype_name(x->dtype), hd_dtype_name(to),
              what, bad);
    hd_tensor_unref(y);
}

static void test_cast_all(void) {
    int64_t s[2] = {6, 7};
    static const double special[] = {
        NAN,   INFINITY, -INFINITY, -0.0,   0.5,   -0.5,    1e10,         -1e10,        3e9,  -3e9,
        255.9, 256.5,    -128.7,    127.99, 65504, 65520,   70000,        1e-8,         -2.7, 2.7,
        1e19,  -1e19,    9.3e18,    3.4e38, 1e300, -1e-300, 2147483648.0, -2147483649.0};
    for (int i = 0; i < NDT; i++) {
        for (int j = 0; j < NDT; j++) {
            for (int lay = 0; lay < LAY_COUNT; lay++) {
                hd_tensor *x = make(all_dtypes[i], s, 2, lay, DOM_WIDE, 3);
                check_cast(x, all_dtypes[j], lay_name[lay]);
                hd_tensor_unref(x);
            }
            if (is_float(all_dtypes[i])) {
                hd_tensor *x = from_doubles(all_dtypes[i], special,
                                            (int64_t)(sizeof special / sizeof special[0]));
                check_cast(x, all_dtypes[j], "special values");
                hd_tensor_unref(x);
            } else {
                hd_tensor *x = make(all_dtypes[i], s, 2, LAY_CONTIG, DOM_ANY, 1);
                check_cast(x, all_dtypes[j], "integer range");
                hd_tensor_unref(x);
            }
        }
    }
    /* a few by hand */
    double v[5] = {NAN, INFINITY, -3.9, 3e9, -0.0};
    hd_tensor *x = from_doubles(HD_F32, v, 5), *y = NULL;
    CHECK(hd_op_cast(CTX, x, HD_I32, &y) == HD_OK);
    CHECK(hd_tensor_get_i64(y, 0) == 0 && hd_tensor_get_i64(y, 1) == INT32_MAX &&
          hd_tensor_get_i64(y, 2) == -3 && hd_tensor_get_i64(y, 3) == INT32_MAX);
    hd_tensor_unref(y);
    CHECK(hd_op_cast(CTX, x, HD_BOOL, &y) == HD_OK);
    CHECK(hd_tensor_get(y, 0) == 1 && hd_tensor_get(y, 2) == 1 && hd_tensor_get(y, 4) == 0);
    hd_tensor_unref(y);
    hd_tensor_unref(x);
    int64_t iv[3] = {300, -1, INT64_C(1) << 40};
    x = from_ints(HD_I64, iv, 3);
    CHECK(hd_op_cast(CTX, x, HD_U8, &y) == HD_OK);
    CHECK(hd_tensor_get_i64(y, 0) == 44 && hd_tensor_get_i64(y, 1) == 255);
    hd_tensor_unref(y);
    CHECK(hd_op_cast(CTX, x, HD_I32, &y) == HD_OK);
    CHECK(hd_tensor_get_i64(y, 2) == 0 && hd_tensor_get_i64(y, 1) == -1);
    hd_tensor_unref(y);
    hd_tensor_unref(x);
}

/* Every f16 and bf16 bit pattern to f32, and a wide sample of f32 bit
 * patterns (all exponents, ties, subnormals) to f16 and bf16, against the
 * core's scalar conversions. Large enough to run threaded. */
static void test_half_conversions(void) {
    int64_t n16[1] = {65536};
    hd_tensor *h = hd_tensor_new(CTX, HD_F16, n16, 1), *b = hd_tensor_new(CTX, HD_BF16, n16, 1);
    for (int64_t i = 0; i < 65536; i++) {
        ((uint16_t *)h->storage->data)[i] = (uint16_t)i;
        ((uint16_t *)b->storage->data)[i] = (uint16_t)i;
    }
    /* f32 targets may take a hardware path (F16C); f64 targets the portable one */
    hd_tensor *hf = NULL, *bf = NULL, *hd = NULL;
    CHECK(hd_op_cast(CTX, h, HD_F32, &hf) == HD_OK && hd_op_cast(CTX, b, HD_F32, &bf) == HD_OK);
    CHECK(hd_op_cast(CTX, h, HD_F64, &hd) == HD_OK);
    int bad = 0;
    for (int64_t i = 0; hf && bf && hd && i < 65536; i++) {
        float x = ((float *)hf->storage->data)[i], want = hd_f16_to_f32((uint16_t)i);
        float y = ((float *)bf->storage->data)[i], wantb = hd_bf16_to_f32((uint16_t)i);
        float z = (float)((double *)hd->storage->data)[i];
        if (isnan(want) ? !isnan(x) || !isnan(z) : memcmp(&x, &want, 4) || memcmp(&z, &want, 4))
            bad++;
        if (isnan(wantb) ? !isnan(y) : memcmp(&y, &wantb, 4) != 0) bad++;
    }
    CHECK_MSG(bad == 0, "%d f16/bf16 -> f32/f64 mismatches", bad);
    hd_tensor_unref(hf);
    hd_tensor_unref(bf);
    hd_tensor_unref(hd);
    hd_tensor_unref(h);
    hd_tensor_unref(b);

    int64_t n[1] = {(int64_t)1 << 20};
    hd_tensor *f = hd_tensor_new(CTX, HD_F32, n, 1);
    uint32_t *fp = f->storage->data;
    static const uint32_t edges[] = {0x33000000u, 0x33000001u, 0x337fffffu, 0x38800000u,
                                     0x387fe000u, 0x387ff000u, 0x477fe000u, 0x477fefffu,
                                     0x477ff000u, 0x7f800000u, 0x7f800001u, 0xffc12345u,
                                     0x3f801000u, 0x3f803000u, 0x3f808000u, 0x3f818000u};
    for (int64_t i = 0; i < n[0]; i++) {
        uint32_t u = (uint32_t)i * 4099u + (uint32_t)(i >> 9);
        fp[i] = i < 16 ? edges[i] : u;
    }
    /* f32 -> f16 may take F16C; f64 -> f16 (the same values) the portable code */
    hd_tensor *fh = NULL, *fb = NULL, *fd = NULL, *dh = NULL;
    CHECK(hd_op_cast(CTX, f, HD_F16, &fh) == HD_OK && hd_op_cast(CTX, f, HD_BF16, &fb) == HD_OK);
    CHECK(hd_op_cast(CTX, f, HD_F64, &fd) == HD_OK && fd &&
          hd_op_cast(CTX, fd, HD_F16, &dh) == HD_OK);
    bad = 0;
    for (int64_t i = 0; fh && fb && dh && i < n[0]; i++) {
        float x;
        memcpy(&x, &fp[i], 4);
        uint16_t want = hd_f32_to_f16(x);
        if (((uint16_t *)fh->storage->data)[i] != want) bad++;
        if (!isnan(x) && ((uint16_t *)dh->storage->data)[i] != want)
            bad++; /* f64 NaN payloads differ */
        if (isnan(x) && (((uint16_t *)dh->storage->data)[i] & 0x7e00) != 0x7e00) bad++;
        if (((uint16_t *)fb->storage->data)[i] != hd_f32_to_bf16(x)) bad++;
    }
    CHECK_MSG(bad == 0, "%d f32 -> f16/bf16 mismatches", bad);
    hd_tensor_unref(fh);
    hd_tensor_unref(fb);
    hd_tensor_unref(fd);
    hd_tensor_unref(dh);
    hd_tensor_unref(f);
}

static void test_copy(void) {
    int64_t s[2] = {5, 6};
    for (int d = 0; d < NDT; d++) {
        for (int lay = 0; lay < LAY_COUNT; lay++) {
            hd_tensor *x = make(all_dtypes[d], s, 2, lay, DOM_ANY, 2), *y = NULL;
            CHECK(hd_op_unary(CTX, HD_OP_COPY, x, &y) == HD_OK);
            CHECK(y && y->storage != x->storage && hd_tensor_is_contiguous(y) &&
                  y->dtype == x->dtype && same_shape(y, x->shape, 2));
            int bad = 0;
            for (int64_t i = 0; y && i < x->numel; i++) {
                size_t es = (size_t)hd_dtype_size(x->dtype);
                const char *xs = (const char *)x->storage->data + hd_tensor_elem_offset(x, i) * es;
                if (memcmp((const char *)y->storage->data + (size_t)i * es, xs, es)) bad++;
            }
            CHECK_MSG(bad == 0, "copy %s %s", hd_dtype_name(all_dtypes[d]), lay_name[lay]);
            hd_tensor_unref(y);
            hd_tensor_unref(x);
        }
    }
}

/* ---- special values ---- */

typedef struct {
    hd_op op;
    double x, want;
} un_case;

static void test_unary_special(void) {
    static const un_case cases[] = {
        {HD_OP_EXP, -INFINITY, 0},
        {HD_OP_EXP, INFINITY, INFINITY},
        {HD_OP_EXP, NAN, NAN},
        {HD_OP_LOG, 0, -INFINITY},
        {HD_OP_LOG, -1, NAN},
        {HD_OP_LOG, INFINITY, INFINITY},
        {HD_OP_SQRT, -1, NAN},
        {HD_OP_SQRT, -0.0, -0.0},
        {HD_OP_RSQRT, 0, INFINITY},
        {HD_OP_RSQRT, INFINITY, 0},
        {HD_OP_SIN, INFINITY, NAN},
        {HD_OP_TANH, INFINITY, 1},
        {HD_OP_TANH, -INFINITY, -1},
        {HD_OP_TANH, -0.0, -0.0},
        {HD_OP_EXP, 88.8, INFINITY},
        {HD_OP_EXP, -104, 0},
        {HD_OP_SIGMOID, INFINITY, 1},
        {HD_OP_SIGMOID, -INFINITY, 0},
        {HD_OP_SIGMOID, NAN, NAN},
        {HD_OP_RELU, NAN, NAN},
        {HD_OP_RELU, -INFINITY, 0},
        {HD_OP_RELU, INFINITY, INFINITY},
        {HD_OP_GELU, INFINITY, INFINITY},
        {HD_OP_GELU, NAN, NAN},
        {HD_OP_SILU, INFINITY, INFINITY},
        {HD_OP_SOFTPLUS, INFINITY, INFINITY},
        {HD_OP_SOFTPLUS, -INFINITY, 0},
        {HD_OP_SOFTPLUS, 19.5, 19.5},
        {HD_OP_SOFTPLUS, 25, 25},
        {HD_OP_SIGN, NAN, NAN},
        {HD_OP_SIGN, -0.0, 0},
        {HD_OP_SIGN, -INFINITY, -1},
        {HD_OP_NEG, 0, -0.0},
        {HD_OP_ABS, -0.0, 0},
        {HD_OP_ABS, -INFINITY, INFINITY},
        {HD_OP_FLOOR, -0.5, -1},
        {HD_OP_CEIL, -0.5, -0.0},
        {HD_OP_ROUND, 0.5, 0},
        {HD_OP_ROUND, 1.5, 2},
        {HD_OP_ROUND, 2.5, 2},
        {HD_OP_ROUND, -2.5, -2},
        {HD_OP_ROUND, -0.5, -0.0},
        {HD_OP_ROUND, INFINITY, INFINITY},
        {HD_OP_CLAMP, NAN, NAN},
        {HD_OP_CLAMP, INFINITY, 1},
        {HD_OP_CLAMP, -INFINITY, -1},
        {HD_OP_FLOOR, NAN, NAN},
    };
    const hd_dtype fdt[4] = {HD_F16, HD_BF16, HD_F32, HD_F64};
    hd_attrs at = {0};
    at.scalar[0] = -1;
    at.scalar[1] = 1;
    for (int d = 0; d < 4; d++) {
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            double want = cases[k].want;
            if (cases[k].op == HD_OP_SOFTPLUS && cases[k].x == 19.5)
                want = round_to(fdt[d], log1p(exp(19.5)));
            hd_tensor *x = from_doubles(fdt[d], &cases[k].x, 1), *y = NULL;
            if (cases[k].op == HD_OP_EXP && fabs(cases[k].x) > 50) /* near the f32 limits */
                want = round_to(fdt[d], exp(hd_tensor_get(x, 0)));
            CHECK(hd_op_run(CTX, cases[k].op, &x, 1, &at, &y) == HD_OK);
            double got = y ? hd_tensor_get(y, 0) : -999;
            int ok = isnan(want) ? isnan(got)
                                 : hd_test_close(got, want, tol_of(fdt[d], 1), 0) &&
                                       (want != 0 || signbit(got) == signbit(want));
            CHECK_MSG(ok, "%s(%g) in %s: got %g want %g", hd_op_name(cases[k].op), cases[k].x,
                      hd_dtype_name(fdt[d]), got, want);
            hd_tensor_unref(y);
            hd_tensor_unref(x);
        }
    }
}

typedef struct {
    hd_op op;
    double a, b, want;
} bin_case;

static void test_binary_special(void) {
    static const bin_case cases[] = {
        {HD_OP_MAXIMUM, NAN, 1, NAN},
        {HD_OP_MAXIMUM, 1, NAN, NAN},
        {HD_OP_MINIMUM, NAN, 1, NAN},
        {HD_OP_MINIMUM, 1, NAN, NAN},
        {HD_OP_MAXIMUM, -INFINITY, 2, 2},
        {HD_OP_DIV, 1, 0, INFINITY},
        {HD_OP_DIV, -1, 0, -INFINITY},
        {HD_OP_DIV, 0, 0, NAN},
        {HD_OP_MOD, 5, 0, NAN},
        {HD_OP_MOD, -7.5, 2, 0.5},
        {HD_OP_MOD, 7.5, -2, -0.5},
        {HD_OP_MOD, -7.5, -2, -1.5},
        {HD_OP_MOD, -1, INFINITY, INFINITY},
        {HD_OP_MOD, 6, 3, 0},
        {HD_OP_MOD, INFINITY, 2, NAN},
        {HD_OP_POW, 0, -1, INFINITY},
        {HD_OP_POW, -8, 1.0 / 3, NAN},
        {HD_OP_POW, NAN, 0, 1},
        {HD_OP_POW, -2, 3, -8},
        {HD_OP_ADD, INFINITY, -INFINITY, NAN},
        {HD_OP_MUL, 0, INFINITY, NAN},
        {HD_OP_SUB, INFINITY, 1, INFINITY},
        {HD_OP_EQ, NAN, NAN, 0},
        {HD_OP_NE, NAN, NAN, 1},
        {HD_OP_LT, NAN, 1, 0},
        {HD_OP_GE, NAN, 1, 0},
        {HD_OP_GT, INFINITY, 1e4, 1},
        {HD_OP_EQ, -0.0, 0, 1},
        {HD_OP_LE, -INFINITY, -INFINITY, 1},
    };
    const hd_dtype fdt[4] = {HD_F16, HD_BF16, HD_F32, HD_F64};
    for (int d = 0; d < 4; d++) {
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            hd_tensor *a = from_doubles(fdt[d], &cases[k].a, 1);
            hd_tensor *b = from_doubles(fdt[d], &cases[k].b, 1), *y = NULL;
            CHECK(hd_op_binary(CTX, cases[k].op, a, b, &y) == HD_OK);
            double got = y ? hd_tensor_get(y, 0) : -999, want = cases[k].want;
            int ok = isnan(want) ? isnan(got) : got == want;
            CHECK_MSG(ok, "%s(%g, %g) in %s: got %g want %g", hd_op_name(cases[k].op), cases[k].a,
                      cases[k].b, hd_dtype_name(fdt[d]), got, want);
            hd_tensor_unref(y);
            hd_tensor_unref(a);
            hd_tensor_unref(b);
        }
    }
}

typedef struct {
    hd_op op;
    hd_dtype dt;
    int64_t a, b, want;
} int_case;

/* Integer edge cases: division by zero, INT_MIN % -1, wraparound. */
static void test_int_special(void) {
    static const int_case cases[] = {
        {HD_OP_MOD, HD_I32, 5, 0, 0},
        {HD_OP_MOD, HD_I32, INT32_MIN, -1, 0},
        {HD_OP_MOD, HD_I64, INT64_MIN, -1, 0},
        {HD_OP_MOD, HD_I64, INT64_MIN, 0, 0},
        {HD_OP_MOD, HD_I8, INT8_MIN, -1, 0},
        {HD_OP_MOD, HD_U8, 200, 0, 0},
        {HD_OP_MOD, HD_I32, -7, 3, 2},
        {HD_OP_MOD, HD_I32, 7, -3, -2},
        {HD_OP_MOD, HD_I32, -7, -3, -1},
        {HD_OP_MOD, HD_I64, INT64_MIN, 3, 1},
        {HD_OP_MOD, HD_I8, -128, 7, 5},
        {HD_OP_ADD, HD_I32, INT32_MAX, 1, INT32_MIN},
        {HD_OP_SUB, HD_I64, INT64_MIN, 1, INT64_MAX},
        {HD_OP_MUL, HD_I64, INT64_MIN, -1, INT64_MIN},
        {HD_OP_MUL, HD_I8, 16, 16, 0},
        {HD_OP_ADD, HD_U8, 200, 100, 44},
        {HD_OP_SUB, HD_U8, 3, 5, 254},
        {HD_OP_POW, HD_I32, 2, 31, INT32_MIN},
        {HD_OP_POW, HD_I32, 2, -1, 0},
        {HD_OP_POW, HD_I32, -1, -3, -1},
        {HD_OP_POW, HD_I32, -1, -4, 1},
        {HD_OP_POW, HD_I32, 1, -5, 1},
        {HD_OP_POW, HD_I32, 0, -1, 0},
        {HD_OP_POW, HD_I32, 0, 0, 1},
        {HD_OP_POW, HD_I64, 3, 40, INT64_C(-6289078614652622815)}, /* 3^40 - 2^64 */
        {HD_OP_POW, HD_I64, 7, INT64_MAX, 0}, /* wraps; checked against the loop below */
        {HD_OP_POW, HD_U8, 3, 5, 243},
        {HD_OP_POW, HD_U8, 2, 8, 0},
        {HD_OP_MAXIMUM, HD_I64, INT64_MIN, INT64_MAX, INT64_MAX},
        {HD_OP_LT, HD_I64, INT64_MAX - 1, INT64_MAX, 1},
        {HD_OP_EQ, HD_I64, INT64_MAX - 1, INT64_MAX, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        hd_tensor *a = from_ints(cases[k].dt, &cases[k].a, 1);
        hd_tensor *b = from_ints(cases[k].dt, &cases[k].b, 1), *y = NULL;
        CHECK(hd_op_binary(CTX, cases[k].op, a, b, &y) == HD_OK);
        int64_t want = cases[k].want;
        if (cases[k].op == HD_OP_POW && cases[k].b == INT64_MAX) {
            uint64_t r = 1, x = 7; /* 7^(2^63 - 1) mod 2^64 by squaring, as math */
            for (uint64_t e = (uint64_t)INT64_MAX; e; e >>= 1, x *= x)
                if (e & 1) r *= x;
            want = (int64_t)r;
        }
        int64_t got = y ? hd_tensor_get_i64(y, 0) : -999;
        CHECK_MSG(got == want, "%s(%lld, %lld) in %s: got %lld want %lld", hd_op_name(cases[k].op),
                  (long long)cases[k].a, (long long)cases[k].b, hd_dtype_name(cases[k].dt),
                  (long long)got, (long long)want);
        hd_tensor_unref(y);
        hd_tensor_unref(a);
        hd_tensor_unref(b);
    }
    /* unary at the limits */
    int64_t v[3] = {INT32_MIN, -5, INT32_MAX};
    hd_tensor *x = from_ints(HD_I32, v, 3), *y = NULL;
    CHECK(hd_op_unary(CTX, HD_OP_NEG, x, &y) == HD_OK);
    CHECK(hd_tensor_get_i64(y, 0) == INT32_MIN && hd_tensor_get_i64(y, 2) == -INT32_MAX);
    hd_tensor_unref(y);
    CHECK(hd_op_unary(CTX, HD_OP_ABS, x, &y) == HD_OK);
    CHECK(hd_tensor_get_i64(y, 0) == INT32_MIN && hd_tensor_get_i64(y, 1) == 5);
    hd_tensor_unref(y);
    /* integer division goes through f32: x / 0 is inf, 0 / 0 NaN, never a trap */
    int64_t z[3] = {0, 0, 0};
    hd_tensor *zero = from_ints(HD_I32, z, 3);
    CHECK(hd_op_binary(CTX, HD_OP_DIV, x, zero, &y) == HD_OK);
    CHECK(y && y->dtype == HD_F32 && hd_tensor_get(y, 0) == -INFINITY &&
          hd_tensor_get(y, 2) == INFINITY);
    hd_tensor_unref(y);
    CHECK(hd_op_binary(CTX, HD_OP_DIV, zero, zero, &y) == HD_OK && isnan(hd_tensor_get(y, 0)));
    hd_tensor_unref(y);
    hd_tensor_unref(zero);
    hd_tensor_unref(x);
    int64_t u[2] = {0, 7};
    x = from_ints(HD_U8, u, 2);
    CHECK(hd_op_unary(CTX, HD_OP_NEG, x, &y) == HD_OK);
    CHECK(hd_tensor_get_i64(y, 0) == 0 && hd_tensor_get_i64(y, 1) == 249);
    hd_tensor_unref(y);
    hd_tensor_unref(x);
}

/* f32 exp, tanh, sigmoid, silu, softplus, gelu, log, sin and cos (the
 * vector math, docs/vmath.md) over a dense sweep of magnitudes, tiny to
 * overflowing, against double: relative error only (2e-6), so small
 * results cannot hide behind an absolute tolerance. */
static void test_transcendental_sweep(void) {
    enum { N = 24001 };
    static double v[2 * N];
    for (int i = 0; i < N; i++) {
        v[i] = -110.0 + 0.0083 * i;                                  /* -110 .. 89.2 */
        v[N + i] = (i % 2 ? -1 : 1) * pow(10.0, -38.0 + 0.0017 * i); /* 1e-38 .. 1.2e3 */
    }
    const hd_op ops[] = {HD_OP_EXP,  HD_OP_TANH, HD_OP_SIGMOID, HD_OP_SILU, HD_OP_SOFTPLUS,
                         HD_OP_GELU, HD_OP_LOG,  HD_OP_SIN,     HD_OP_COS};
    hd_tensor *x = from_doubles(HD_F32, v, 2 * N);
    for (int k = 0; k < (int)(sizeof ops / sizeof *ops); k++) {
        hd_tensor *y = NULL;
        CHECK(hd_op_unary(CTX, ops[k], x, &y) == HD_OK);
        int bad = 0;
        for (int64_t i = 0; y && i < 2 * N; i++) {
            double xv = hd_tensor_get(x, i);
            if (ops[k] == HD_OP_SILU && xv < -87)
                continue; /* x exp(x) with exp(x) subnormal: documented, as torch */
            double want = round_to(HD_F32, ref_unary_f(ops[k], xv, NULL));
            double got = hd_tensor_get(y, i);
            if (!hd_test_close(got, want, 2e-6, 1e-44)) {
                bad++;
                report_elem(hd_op_name(ops[k]), i, got, want);
            }
        }
        CHECK_MSG(bad == 0, "%s sweep: %d wrong", hd_op_name(ops[k]), bad);
        hd_tensor_unref(y);
    }
    hd_tensor_unref(x);
}

/* ---- large inputs through the threaded path ---- */

static void test_large(void) {
    int saved = g_ctx.nthreads;
    g_ctx.nthreads = 4;
    int64_t s2[2] = {1000, 131}, s1[1] = {131}, sq[2] = {300, 401}, s3[3] = {7, 129, 131};
    /* contiguous with a broadcast row; odd sizes cut chunks mid-row */
    hd_tensor *a = make(HD_F32, s2, 2, LAY_CONTIG, DOM_ANY, 1);
    hd_tensor *b = make(HD_F32, s1, 1, LAY_CONTIG, DOM_ANY, 2);
    check_binary(HD_OP_ADD, a, b, HD_F32, "large broadcast");
    check_unary(HD_OP_EXP, a, NULL, HD_F32, "large");
    hd_tensor *c = make(HD_BOOL, s1, 1, LAY_CONTIG, DOM_ANY, 3);
    check_where(c, a, b, HD_F32, "large");
    hd_tensor_unref(c);
    hd_tensor_unref(b);
    hd_tensor_unref(a);
    /* strided views, f16 and bf16 blocks, integer ops */
    const hd_dtype dts[4] = {HD_F16, HD_BF16, HD_I32, HD_F64};
    for (int d = 0; d < 4; d++) {
        a = make(dts[d], sq, 2, LAY_TRANS, DOM_ANY, 4);
        b = make(dts[d], sq, 2, LAY_STEP, DOM_ANY, 5);
        check_binary(HD_OP_MUL, a, b, dts[d], "large transposed");
        check_binary(HD_OP_LT, a, b, HD_BOOL, "large transposed");
        check_unary(HD_OP_NEG, a, NULL, dts[d], "large transposed");
        hd_tensor_unref(b);
        hd_tensor_unref(a);
    }
    a = make(HD_I64, s3, 3, LAY_STEP, DOM_ANY, 6);
    b = make(HD_I64, s1, 1, LAY_CONTIG, DOM_ANY, 7);
    check_binary(HD_OP_MOD, a, b, HD_I64, "large 3-d");
    hd_tensor_unref(b);
    /* the threaded result is bit for bit the single-threaded one */
    hd_tensor *y4 = NULL, *y1 = NULL;
    CHECK(hd_op_unary(CTX, HD_OP_SIN, a, &y4) == HD_OK);
    g_ctx.nthreads = 1;
    CHECK(hd_op_unary(CTX, HD_OP_SIN, a, &y1) == HD_OK);
    CHECK(y4 && y1 && memcmp(y4->storage->data, y1->storage->data, hd_tensor_nbytes(y1)) == 0);
    hd_tensor_unref(y4);
    hd_tensor_unref(y1);
    hd_tensor_unref(a);
    g_ctx.nthreads = saved;
}

/* The kernel called directly with an output that is a view (as an in-place
 * write would): transposed and stepped outputs get the right elements and
 * nothing else; a broadcast output is refused. */
static void test_view_outputs(void) {
    int64_t s[2] = {40, 30};
    for (int lay = LAY_TRANS; lay <= LAY_STEP; lay++) {
        const hd_op ops[3] = {HD_OP_ADD, HD_OP_EXP, HD_OP_WHERE};
        for (int k = 0; k < 3; k++) {
            hd_tensor *out = make(HD_F16, s, 2, lay, DOM_ANY, 1);
            hd_tensor *a = make(HD_F16, s, 2, LAY_CONTIG, DOM_ANY, 2);
            hd_tensor *b = make(HD_F16, s + 1, 1, LAY_STEP, DOM_ANY, 3);
            hd_tensor *c = make(HD_BOOL, s, 2, LAY_TRANS, DOM_ANY, 4);
            hd_tensor *in[3] = {a, b, b};
            if (ops[k] == HD_OP_WHERE) in[0] = c, in[1] = a;
            int64_t nb = (int64_t)(out->storage->nbytes / 2);
            uint16_t *before = malloc((size_t)nb * 2);
            memcpy(before, out->storage->data, (size_t)nb * 2);
            CHECK(hd_cpu_backend.run_op(CTX, ops[k], out, in, hd_op_infos[ops[k]].arity, NULL) ==
                  HD_OK);
            int bad = 0;
            for (int64_t i = 0; i < out->numel; i++) {
                double x = hd_tensor_get(a, i), y = hd_tensor_get(b, i % s[1]), want;
                if (ops[k] == HD_OP_ADD)
                    want = x + y;
                else if (ops[k] == HD_OP_EXP)
                    want = exp(x);
                else
                    want = hd_tensor_get(c, i) != 0 ? x : y;
                if (!hd_test_close(hd_tensor_get(out, i), round_to(HD_F16, want), 1e-3, 1e-3))
                    bad++;
            }
            /* elements outside the view are untouched */
            char *seen = calloc((size_t)nb, 1);
            for (int64_t i = 0; i < out->numel; i++) seen[hd_tensor_elem_offset(out, i)] = 1;
            for (int64_t i = 0; i < nb; i++)
                if (!seen[i] && ((uint16_t *)out->storage->data)[i] != before[i]) bad++;
            CHECK_MSG(bad == 0, "%s into a %s view: %d wrong", hd_op_name(ops[k]), lay_name[lay],
                      bad);
            free(seen);
            free(before);
            hd_tensor_unref(c);
            hd_tensor_unref(b);
            hd_tensor_unref(a);
            hd_tensor_unref(out);
        }
    }
    int64_t one[2] = {1, 30};
    hd_tensor *e = make(HD_F32, one, 2, LAY_CONTIG, DOM_ANY, 0), *v = NULL, *x = NULL;
    hd_attrs at = {0};
    at.nshape = 2;
    at.shape[0] = 40;
    at.shape[1] = 30;
    CHECK(hd_op_run(CTX, HD_OP_EXPAND, &e, 1, &at, &v) == HD_OK);
    x = make(HD_F32, s, 2, LAY_CONTIG, DOM_ANY, 0);
    CHECK(hd_cpu_backend.run_op(CTX, HD_OP_NEG, v, &x, 1, NULL) == HD_ERR_RUNTIME);
    CHECK(strstr(hd_error_message(CTX), "overlaps") != NULL);
    hd_tensor_unref(x);
    hd_tensor_unref(v);
    hd_tensor_unref(e);
}

/* ---- errors, support table, allocation failures ---- */

static void test_errors(void) {
    int64_t s23[2] = {2, 3}, s4[1] = {4};
    hd_tensor *a = make(HD_F32, s23, 2, LAY_CONTIG, DOM_ANY, 0);
    hd_tensor *b = make(HD_F32, s4, 1, LAY_CONTIG, DOM_ANY, 0), *y = NULL;
    CHECK(hd_op_binary(CTX, HD_OP_ADD, a, b, &y) == HD_ERR_RUNTIME && !y);
    CHECK(strstr(hd_error_message(CTX), "[2, 3]") && strstr(hd_error_message(CTX), "[4]"));
    CHECK(hd_op_binary(CTX, HD_OP_LT, b, a, &y) == HD_ERR_RUNTIME && !y);
    CHECK(strstr(hd_error_message(CTX), "[4]") && strstr(hd_error_message(CTX), "[2, 3]"));
    hd_tensor *in3[3] = {a, a, b};
    CHECK(hd_op_run(CTX, HD_OP_WHERE, in3, 3, NULL, &y) == HD_ERR_RUNTIME && !y);
    /* neg of a bool tensor */
    hd_tensor *t = make(HD_BOOL, s4, 1, LAY_CONTIG, DOM_ANY, 0);
    CHECK(hd_op_unary(CTX, HD_OP_NEG, t, &y) == HD_ERR_RUNTIME && !y);
    CHECK(strstr(hd_error_message(CTX), "neg") && strstr(hd_error_message(CTX), "bool"));
    /* the kernel itself refuses inputs the plan would have cast, and shapes
     * that do not broadcast to the output */
    hd_tensor *i32 = make(HD_I32, s4, 1, LAY_CONTIG, DOM_ANY, 0);
    hd_tensor *out = hd_tensor_new(CTX, HD_F32, s4, 1), *in[2] = {b, i32};
    CHECK(hd_cpu_backend.run_op(CTX, HD_OP_ADD, out, in, 2, NULL) == HD_ERR_RUNTIME);
    CHECK(strstr(hd_error_message(CTX), "add") && strstr(hd_error_message(CTX), "i32"));
    in[1] = a;
    CHECK(hd_cpu_backend.run_op(CTX, HD_OP_ADD, out, in, 2, NULL) == HD_ERR_RUNTIME);
    CHECK(strstr(hd_error_message(CTX), "[2, 3]") && strstr(hd_error_message(CTX), "[4]"));
    in[0] = i32;
    CHECK(hd_cpu_backend.run_op(CTX, HD_OP_EXP, out, in, 1, NULL) == HD_ERR_RUNTIME);
    /* an empty output runs nothing */
    int64_t z[2] = {0, 4};
    hd_tensor *ez = hd_tensor_new(CTX, HD_F32, z, 2);
    in[0] = b, in[1] = b;
    CHECK(hd_cpu_backend.run_op(CTX, HD_OP_ADD, ez, in, 2, NULL) == HD_OK);
    hd_tensor_unref(ez);
    hd_tensor_unref(out);
    hd_tensor_unref(i32);
    hd_tensor_unref(t);
    hd_tensor_unref(a);
    hd_tensor_unref(b);

    CHECK(hd_cpu_elementwise_supports(HD_OP_EXP, HD_F16) == 1);
    CHECK(hd_cpu_elementwise_supports(HD_OP_EXP, HD_I32) == 0);
    CHECK(hd_cpu_elementwise_supports(HD_OP_NOT, HD_F32) == 0);
    CHECK(hd_cpu_elementwise_supports(HD_OP_NOT, HD_BOOL) == 1);
    CHECK(hd_cpu_elementwise_supports(HD_OP_NEG, HD_BOOL) == 0);
    CHECK(hd_cpu_elementwise_supports(HD_OP_DIV, HD_I32) == 0);
    CHECK(hd_cpu_elementwise_supports(HD_OP_SUB, HD_BOOL) == 0);
    CHECK(hd_cpu_elementwise_supports(HD_OP_ADD, HD_BOOL) == 1);
    CHECK(hd_cpu_elementwise_supports(HD_OP_WHERE, HD_BOOL) == 1);
    CHECK(hd_cpu_elementwise_supports(HD_OP_CAST, HD_BF16) == 1);
    CHECK(hd_cpu_elementwise_supports(HD_OP_SUM, HD_F32) == 0);
    CHECK(hd_cpu_elementwise_supports(HD_OP_COUNT, HD_F32) == 0);
}

static void test_alloc_failures(void) {
    hd_ctx c;
    hd_ctx_init(&c, NULL, NULL);
    int64_t s[2] = {3, 4};
    for (long k = 0; k < 12; k++) {
        hd_tensor *a = hd_tensor_zeros(&c, HD_I32, s, 2);
        hd_tensor *n = hd_tensor_number(&c, HD_F64, 1.5);
        if (!a || !n) {
            hd_tensor_unref(a);
            hd_tensor_unref(n);
            continue;
        }
        c.fail_countdown = k;
        hd_tensor *y = NULL;
        hd_status st = hd_op_binary(&c, HD_OP_ADD, a, n, &y);
        CHECK((st == HD_OK) == (y != NULL));
        CHECK(st == HD_OK || st == HD_ERR_MEMORY);
        c.fail_countdown = -1;
        hd_tensor_unref(y);
        hd_tensor_unref(a);
        hd_tensor_unref(n);
    }
    CHECK(c.mem_used == 0);
}

int main(void) {
    hd_ctx_init(&g_ctx, NULL, NULL);
    test_unary_all();
    test_clamp_bounds();
    test_binary_all();
    test_promotion();
    test_where_all();
    test_cast_all();
    test_half_conversions();
    test_copy();
    test_unary_special();
    test_binary_special();
    test_int_special();
    test_transcendental_sweep();
    test_large();
    test_view_outputs();
    test_errors();
    test_alloc_failures();
    CHECK(g_ctx.mem_used == 0);
    TEST_END();
}
