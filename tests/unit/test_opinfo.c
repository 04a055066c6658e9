/* The op tests driven by one table of op descriptions, in the way of
 * PyTorch's OpInfo. Each row names an op of the table (elementwise,
 * comparison, reduction, along an axis: softmax, log_softmax, cumsum,
 * cumprod; matmul), the dtypes it takes, its reference in double
 * (written here, not taken from the kernels), the domain its inputs are
 * drawn from and whether it has a gradient. For every row, dtype and
 * sample (0-d, empty, 1-D, 2-D, 3-D, a transposed view, broadcasting
 * pairs; reductions over all dims, each axis, kept or not; each axis;
 * matmul's vector, batched, empty and k = 0 operands) it checks:
 *  - the eager cpu result against the reference;
 *  - the same op traced and run by each compiler (interp, llvm) against
 *    eager, twice (the second run reuses the buffers);
 *  - with HODU_OPINFO_CUDA=1 (a GPU, or the emulated one: emu.test_opinfo),
 *    the op run eagerly on the cuda device, and through the cuda compiler,
 *    against eager cpu;
 *  - for rows with a gradient, in f64, backward against central
 *    differences of sum(op(x) * r).
 * A second table (opinfo_shaped.c) holds the ops whose inputs have
 * shapes and arguments of their own (creation, conversion, views,
 * selection, sorting, nn, linalg), each row with its samples listed; its
 * rows get the same checks (opinfo_check.c). The tables themselves are
 * checked: every op of hd_ops.def has a row, or is named in
 * opinfo_elsewhere with the tests that check it. */
#include "hd_autograd.h"
#include "hd_backend.h"
#include "hd_compile.h"
#include "hd_test.h"
#include "hd_trace.h"
#include "opinfo.h"

#include <math.h>

#define DT(d)     (1u << (d))
#define FLOATS    (DT(HD_F16) | DT(HD_BF16) | DT(HD_F32) | DT(HD_F64))
#define SINTS     (DT(HD_I8) | DT(HD_I32) | DT(HD_I64))
#define INTS      (SINTS | DT(HD_U8))
#define NUMS      (FLOATS | INTS)
#define SIGNED    (FLOATS | SINTS)
#define MAX_IN    2
#define MAX_ELEMS 64

/* Input domains. */
enum { DOM_ANY, DOM_POS, DOM_UNIT, DOM_NONZERO, DOM_GAMMA };

/* How a reduction's reference combines a row; an op along an axis
 * (softmax, ...) maps each line to a line; matmul. */
enum { R_NONE, R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_VAR, R_STD, R_ARGMAX, R_ARGMIN, R_LSE };
enum { A_NONE, A_SOFTMAX, A_LOG_SOFTMAX, A_CUMSUM, A_CUMSUM_REV, A_CUMPROD, A_MATMUL };

typedef struct opinfo {
    hd_op op;
    unsigned dtypes;
    double (*f1)(double);         /* unary reference */
    double (*f2)(double, double); /* binary or comparison reference */
    int reduce;                   /* R_*: a reduction */
    int along;                    /* A_*: an op along an axis, or matmul */
    int dom;
    int grad;     /* gradcheck in f64 (smooth on the domain) */
    double rtol;  /* against the reference in f32 and f64 (0: 2e-6, 1e-12) */
    double scal0; /* attrs.scalar[0] (clamp's bounds: scal0, scal1) */
    double scal1;
} opinfo;

/* ---- references ---- */

static double r_neg(double a) {
    return -a;
}
static double r_sigmoid(double a) {
    return 1 / (1 + exp(-a));
}
static double r_relu(double a) {
    return a > 0 ? a : 0;
}
static double r_gelu(double a) {
    return 0.5 * a * erfc(-a / sqrt(2.0));
}
static double r_silu(double a) {
    return a / (1 + exp(-a));
}
static double r_softplus(double a) {
    return a > 20 ? a : log1p(exp(a));
}
static double r_rsqrt(double a) {
    return 1 / sqrt(a);
}
static double r_sign(double a) {
    return (a > 0) - (a < 0);
}
static double r_round(double a) {
    return nearbyint(a);
}
static double r_clamp(double a) {
    return a < -2.0 ? -2.0 : a > 2.0 ? 2.0 : a;
}
static double r_copy(double a) {
    return a;
}
static double r_add(double a, double b) {
    return a + b;
}
static double r_sub(double a, double b) {
    return a - b;
}
static double r_mul(double a, double b) {
    return a * b;
}
static double r_div(double a, double b) {
    return a / b;
}
static double r_mod(double a, double b) {
    double m = fmod(a, b);
    return m != 0 && (m < 0) != (b < 0) ? m + b : m;
}
static double r_max(double a, double b) {
    return a > b ? a : b;
}
static double r_min(double a, double b) {
    return a < b ? a : b;
}
static double r_eq(double a, double b) {
    return a == b;
}
static double r_ne(double a, double b) {
    return a != b;
}
static double r_lt(double a, double b) {
    return a < b;
}
static double r_le(double a, double b) {
    return a <= b;
}
static double r_gt(double a, double b) {
    return a > b;
}
static double r_ge(double a, double b) {
    return a >= b;
}

static const opinfo opinfos[] = {
    {HD_OP_NEG, SIGNED, r_neg, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_ABS, NUMS, fabs, 0, 0, 0, DOM_NONZERO, 1, 0, 0, 0},
    {HD_OP_EXP, FLOATS, exp, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_LOG, FLOATS, log, 0, 0, 0, DOM_POS, 1, 0, 0, 0},
    {HD_OP_SQRT, FLOATS, sqrt, 0, 0, 0, DOM_POS, 1, 0, 0, 0},
    {HD_OP_RSQRT, FLOATS, r_rsqrt, 0, 0, 0, DOM_POS, 1, 0, 0, 0},
    {HD_OP_SIN, FLOATS, sin, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_COS, FLOATS, cos, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_TANH, FLOATS, tanh, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_SIGMOID, FLOATS, r_sigmoid, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_RELU, SIGNED, r_relu, 0, 0, 0, DOM_NONZERO, 1, 0, 0, 0},
    {HD_OP_GELU, FLOATS, r_gelu, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_SILU, FLOATS, r_silu, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_SOFTPLUS, FLOATS, r_softplus, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_ERF, FLOATS, erf, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_ERFC, FLOATS, erfc, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_LGAMMA, FLOATS, lgamma, 0, 0, 0, DOM_GAMMA, 1, 1e-5, 0, 0},
    {HD_OP_SIGN, SIGNED, r_sign, 0, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_FLOOR, FLOATS, floor, 0, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_CEIL, FLOATS, ceil, 0, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_ROUND, FLOATS, r_round, 0, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_CLAMP, SIGNED, r_clamp, 0, 0, 0, DOM_ANY, 0, 0, -2.0, 2.0},
    {HD_OP_COPY, NUMS, r_copy, 0, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_ADD, NUMS, 0, r_add, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_SUB, SIGNED, 0, r_sub, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_MUL, NUMS, 0, r_mul, 0, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_DIV, FLOATS, 0, r_div, 0, 0, DOM_NONZERO, 1, 0, 0, 0},
    {HD_OP_MOD, SIGNED, 0, r_mod, 0, 0, DOM_NONZERO, 0, 0, 0, 0},
    {HD_OP_POW, FLOATS, 0, pow, 0, 0, DOM_POS, 1, 0, 0, 0},
    {HD_OP_ATAN2, FLOATS, 0, atan2, 0, 0, DOM_NONZERO, 1, 0, 0, 0},
    {HD_OP_MAXIMUM, NUMS, 0, r_max, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_MINIMUM, NUMS, 0, r_min, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_EQ, NUMS, 0, r_eq, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_NE, NUMS, 0, r_ne, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_LT, NUMS, 0, r_lt, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_LE, NUMS, 0, r_le, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_GT, NUMS, 0, r_gt, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_GE, NUMS, 0, r_ge, 0, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_SUM, NUMS, 0, 0, R_SUM, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_MEAN, FLOATS, 0, 0, R_MEAN, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_MAX, NUMS, 0, 0, R_MAX, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_MIN, NUMS, 0, 0, R_MIN, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_PROD, FLOATS, 0, 0, R_PROD, 0, DOM_UNIT, 1, 0, 0, 0},
    {HD_OP_VAR, FLOATS, 0, 0, R_VAR, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_STD, FLOATS, 0, 0, R_STD, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_ARGMAX, NUMS, 0, 0, R_ARGMAX, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_ARGMIN, NUMS, 0, 0, R_ARGMIN, 0, DOM_ANY, 0, 0, 0, 0},
    {HD_OP_LOGSUMEXP, FLOATS, 0, 0, R_LSE, 0, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_SOFTMAX, FLOATS, 0, 0, 0, A_SOFTMAX, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_LOG_SOFTMAX, FLOATS, 0, 0, 0, A_LOG_SOFTMAX, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_CUMSUM, NUMS, 0, 0, 0, A_CUMSUM, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_CUMSUM, NUMS, 0, 0, 0, A_CUMSUM_REV, DOM_ANY, 1, 0, 0, 0},
    {HD_OP_CUMPROD, FLOATS, 0, 0, 0, A_CUMPROD, DOM_UNIT, 1, 0, 0, 0},
    {HD_OP_MATMUL, FLOATS, 0, 0, 0, A_MATMUL, DOM_ANY, 1, 0, 0, 0},
};
#define NOPINFOS ((int)(sizeof opinfos / sizeof opinfos[0]))

/* Every op of the op table that neither table has a row for (this one,
 * or opinfo_shaped.c's, for ops with input shapes of their own), and where
 * it is checked against a reference of its own: random streams, in-place
 * writes, ops that take an argument per element, and the backward kernels
 * (run by every gradcheck of their forward ops' rows). A new op must get a
 * row or a line here, never both. */
static const struct {
    hd_op op;
    const char *where;
} opinfo_elsewhere[] = {
    {HD_OP_POLYGAMMA, "test_special (an order argument)"},
    {HD_OP_ALL_REDUCE, "tests/dist (1, 2 and 4 ranks, every dtype, against the definition)"},
    {HD_OP_RAND, "test_create (the Philox stream's values)"},
    {HD_OP_RANDN, "test_create (the Philox stream's values)"},
    {HD_OP_ASSIGN, "test_shape_index, test_loop"},
    {HD_OP_DROPOUT, "test_nn (the mask's stream), test_gradcheck"},
    {HD_OP_CUMPROD_BWD, "test_nn (zeros in the line)"},
    {HD_OP_GELU_BWD, "test_gradcheck (gelu's rule, and its own)"},
    {HD_OP_TANH_BWD, "test_gradcheck (tanh's rule, and its own), tests/golden/act_bwd.hodu (the "
                     "composition's bits)"},
    {HD_OP_SIGMOID_BWD, "test_gradcheck (sigmoid's rule, and its own), tests/golden/act_bwd.hodu"},
    {HD_OP_INDEX_ADD, "test_gradcheck"},
    {HD_OP_CROSS_ENTROPY_BWD, "test_gradcheck"},
    {HD_OP_CONV2D_BWD_INPUT, "test_gradcheck"},
    {HD_OP_CONV2D_BWD_WEIGHT, "test_gradcheck"},
    {HD_OP_MAX_POOL2D_BWD, "test_gradcheck"},
    {HD_OP_MAX_POOL2D_SEL, "test_gradcheck"},
    {HD_OP_AVG_POOL2D_BWD, "test_gradcheck"},
    {HD_OP_DROPOUT_BWD, "test_gradcheck"},
    {HD_OP_SOFTMAX_BWD, "test_gradcheck"},
    {HD_OP_LOG_SOFTMAX_BWD, "test_gradcheck"},
    {HD_OP_LAYER_NORM_BWD, "test_gradcheck (layer_norm's rule), test_llvm_reduce"},
    {HD_OP_ATTENTION_BWD, "test_gradcheck (attention's rule, v as wide as q), "
                          "tests/golden/attention_fused.hodu"},
};

/* ---- samples ---- */

typedef struct sample {
    int nd[MAX_IN];
    int64_t shape[MAX_IN][3];
    int transpose; /* the first input is a transposed view */
} sample;

static const sample samples[] = {
    {{0, 0}, {{0}, {0}}, 0},             /* 0-d */
    {{1, 1}, {{0}, {0}}, 0},             /* empty */
    {{2, 1}, {{0, 3}, {3}}, 0},          /* empty rows, broadcast */
    {{1, 1}, {{7}, {7}}, 0},             /* 1-D */
    {{2, 1}, {{3, 4}, {4}}, 0},          /* broadcast a row */
    {{3, 2}, {{2, 1, 4}, {3, 1}}, 0},    /* broadcast both ways */
    {{2, 0}, {{4, 3}, {0}}, 0},          /* with a 0-d */
    {{2, 2}, {{3, 5}, {3, 5}}, 1},       /* a transposed view */
    {{3, 3}, {{2, 3, 4}, {2, 3, 4}}, 0}, /* 3-D */
};
#define NSAMPLES ((int)(sizeof samples / sizeof samples[0]))

static const sample matmul_samples[] = {
    {{2, 2}, {{3, 4}, {4, 5}}, 0},       {{1, 2}, {{4}, {4, 5}}, 0},
    {{2, 1}, {{3, 4}, {4}}, 0},          {{3, 2}, {{2, 3, 4}, {4, 2}}, 0},
    {{3, 3}, {{2, 3, 4}, {2, 4, 2}}, 0}, {{2, 2}, {{0, 4}, {4, 3}}, 0}, /* no rows */
    {{2, 2}, {{3, 0}, {0, 2}}, 0},                                      /* k = 0: zeros */
    {{2, 2}, {{3, 5}, {5, 2}}, 1},                                      /* a transposed view */
};

static const sample *samples_of(const opinfo *oi, int *n) {
    *n = oi->along == A_MATMUL ? (int)(sizeof matmul_samples / sizeof *matmul_samples) : NSAMPLES;
    return oi->along == A_MATMUL ? matmul_samples : samples;
}

/* Reductions: over every dim (-1), or one axis, kept or not. */
static const struct { int axis, keep; } reductions[] = {{-1, 0}, {0, 0}, {1, 1}, {2, 0}};

static double dom_value(int dom, hd_dtype dt, int64_t k, int which) {
    int64_t h = (k * 37 + which * 11 + 5) % 23;
    if (!hd_dtype_is_float(dt)) {
        double v = (double)(h % 9) - (dt == HD_U8 ? 0 : 4); /* -4 .. 4, or 0 .. 8 */
        if (dom == DOM_NONZERO && v == 0) v = 3;
        if (dom == DOM_POS && v <= 0) v = 1 - v;
        return v;
    }
    double u = (double)h / 22.0; /* 0 .. 1 */
    switch (dom) {
    case DOM_POS: return 0.2 + 2.3 * u;
    case DOM_UNIT: return (u - 0.5) * 1.8 + (u < 0.5 ? -0.1 : 0.1);
    case DOM_GAMMA: return 0.3 + 4.0 * u;
    case DOM_NONZERO: return (u - 0.5) * 6.0 + (u < 0.5 ? -0.25 : 0.25);
    default: return (u - 0.5) * 6.0;
    }
}

static hd_tensor *make_input(hd_ctx *ctx, const opinfo *oi, hd_dtype dt, const sample *s, int i) {
    int64_t shape[3];
    int nd = s->nd[i];
    memcpy(shape, s->shape[i], sizeof shape);
    int tr = s->transpose && i == 0 && nd == 2;
    if (tr) shape[0] = s->shape[i][1], shape[1] = s->shape[i][0];
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, nd);
    if (!t) return NULL;
    for (int64_t k = 0; k < t->numel; k++)
        hd_dtype_store(dt, t->storage->data, k, dom_value(oi->dom, dt, k, i));
    if (!tr) return t;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2, at.shape[0] = 1, at.shape[1] = 0;
    hd_tensor *v = NULL;
    hd_op_run(ctx, HD_OP_PERMUTE, &t, 1, &at, &v);
    hd_tensor_unref(t);
    return v;
}

static int nin_of(const opinfo *oi) {
    return oi->f2 || oi->along == A_MATMUL ? 2 : 1;
}

static void attrs_of(const opinfo *oi, int r, hd_attrs *at) {
    memset(at, 0, sizeof *at);
    at->scalar[0] = oi->scal0;
    at->scalar[1] = oi->scal1;
    if (oi->along && oi->along != A_MATMUL) {
        at->ints[0] = reductions[r].axis;
        at->ints[1] = oi->along == A_CUMSUM_REV;
    }
    if (!oi->reduce) return;
    if (reductions[r].axis >= 0) at->naxes = 1, at->axes[0] = reductions[r].axis;
    at->keepdim = reductions[r].keep;
    if (oi->reduce == R_VAR || oi->reduce == R_STD) at->ints[0] = 1;
}

/* ---- the reference ---- */

static double reduce_row(int how, const double *v, int64_t n) {
    double s = 0, p = 1, mx = -INFINITY, mn = INFINITY, ss = 0, lse = 0;
    int64_t amax = 0, amin = 0;
    for (int64_t i = 0; i < n; i++) {
        s += v[i], p *= v[i];
        if (v[i] > mx) mx = v[i], amax = i;
        if (v[i] < mn) mn = v[i], amin = i;
    }
    double mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) ss += (v[i] - mean) * (v[i] - mean), lse += exp(v[i] - mx);
    switch (how) {
    case R_SUM: return s;
    case R_MEAN: return mean;
    case R_MAX: return mx;
    case R_MIN: return mn;
    case R_PROD: return p;
    case R_VAR: return ss / (double)(n - 1);
    case R_STD: return sqrt(ss / (double)(n - 1));
    case R_ARGMAX: return (double)amax;
    case R_ARGMIN: return (double)amin;
    default: return mx + log(lse);
    }
}

/* element j of the line v[0..n) mapped by how */
static double along_line(int how, const double *v, int64_t n, int64_t j) {
    double m = -INFINITY, se = 0, acc = how == A_CUMPROD ? 1 : 0;
    for (int64_t k = 0; k < n; k++) m = v[k] > m ? v[k] : m;
    for (int64_t k = 0; k < n; k++) se += exp(v[k] - m);
    for (int64_t k = 0; k < n; k++) {
        if (how == A_CUMSUM && k <= j) acc += v[k];
        if (how == A_CUMSUM_REV && k >= j) acc += v[k];
        if (how == A_CUMPROD && k <= j) acc *= v[k];
    }
    if (how == A_SOFTMAX) return exp(v[j] - m) / se;
    if (how == A_LOG_SOFTMAX) return v[j] - m - log(se);
    return acc;
}

/* out[idx] of a @ b (1-D operands as numpy's matmul takes them, batch
 * dims broadcast) */
static double matmul_at(const hd_tensor *a, const hd_tensor *b, const int64_t *idx, int nd) {
    int a1 = a->ndim == 1, b1 = b->ndim == 1;
    int ab = a->ndim - (a1 ? 1 : 2), bb = b->ndim - (b1 ? 1 : 2), nb = nd - !a1 - !b1;
    int64_t ia[HD_MAX_DIMS], ib[HD_MAX_DIMS], i = a1 ? 0 : idx[nd - 1 - !b1];
    int64_t j = b1 ? 0 : idx[nd - 1];
    for (int d = 0; d < ab; d++) ia[d] = a->shape[d] == 1 ? 0 : idx[nb - ab + d];
    for (int d = 0; d < bb; d++) ib[d] = b->shape[d] == 1 ? 0 : idx[nb - bb + d];
    double s = 0;
    for (int64_t k = 0; k < a->shape[a->ndim - 1]; k++) {
        if (a1)
            ia[0] = k;
        else
            ia[ab] = i, ia[ab + 1] = k;
        if (b1)
            ib[0] = k;
        else
            ib[bb] = k, ib[bb + 1] = j;
        s += opinfo_load(a, ia) * opinfo_load(b, ib);
    }
    return s;
}

/* the ops along an axis and matmul */
static void reference_along(const opinfo *oi, const hd_attrs *at, hd_tensor *const *in,
                            const hd_tensor *out, double *want) {
    int64_t idx[HD_MAX_DIMS], full[HD_MAX_DIMS];
    double line[MAX_ELEMS];
    int axis = (int)at->ints[0];
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, idx);
        if (oi->along == A_MATMUL) {
            want[e] = matmul_at(in[0], in[1], idx, out->ndim);
            continue;
        }
        memcpy(full, idx, sizeof full);
        for (int64_t k = 0; k < in[0]->shape[axis]; k++)
            full[axis] = k, line[k] = opinfo_load(in[0], full);
        want[e] = along_line(oi->along, line, in[0]->shape[axis], idx[axis]);
    }
}

/* want[e] for every element of out */
static void reference(const opinfo *oi, const hd_attrs *at, hd_tensor *const *in,
                      const hd_tensor *out, double *want) {
    int64_t idx[HD_MAX_DIMS], full[HD_MAX_DIMS];
    if (oi->along) {
        reference_along(oi, at, in, out, want);
        return;
    }
    if (!oi->reduce) {
        for (int64_t e = 0; e < out->numel; e++) {
            opinfo_unravel(e, out->shape, out->ndim, idx);
            double a = opinfo_value_at(in[0], idx, out->ndim);
            want[e] = oi->f1 ? oi->f1(a) : oi->f2(a, opinfo_value_at(in[1], idx, out->ndim));
        }
        return;
    }
    const hd_tensor *x = in[0];
    int axis = at->naxes ? (int)at->axes[0] : -1;
    int64_t n = axis < 0 ? x->numel : x->shape[axis];
    double row[MAX_ELEMS];
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, idx);
        for (int64_t j = 0; j < n; j++) {
            if (axis < 0) {
                opinfo_unravel(j, x->shape, x->ndim, full);
            } else { /* out's index with j at the axis */
                for (int d = 0, o = 0; d < x->ndim; d++) {
                    int kept = at->keepdim || d != axis;
                    full[d] = d == axis ? j : idx[o];
                    o += kept;
                }
            }
            row[j] = opinfo_value_at(x, full, x->ndim);
        }
        want[e] = reduce_row(oi->reduce, row, n);
    }
}

static double rtol_of(const opinfo *oi, hd_dtype dt) {
    switch (dt) {
    case HD_F16: return 2e-3;
    case HD_BF16: return 1.6e-2;
    case HD_F32: return oi->rtol ? oi->rtol : 2e-6;
    case HD_F64: return oi->rtol ? oi->rtol * 1e-5 : 1e-12;
    default: return 0;
    }
}

/* ---- checks ---- */

static const char *case_name(const opinfo *oi, hd_dtype dt, int si, int r, char *buf, size_t n) {
    int k = snprintf(buf, n, "%s%s %s sample %d", hd_op_name(oi->op),
                     oi->along == A_CUMSUM_REV ? " (reversed)" : "", hd_dtype_name(dt), si);
    if ((oi->reduce || (oi->along && oi->along != A_MATMUL)) && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, " axis %d", r);
    return buf;
}

static void check_reference(const opinfo *oi, hd_tensor *const *in, const hd_attrs *at,
                            const hd_tensor *out, const char *name) {
    double want[MAX_ELEMS];
    reference(oi, at, in, out, want);
    opinfo_check_values(out, want, rtol_of(oi, in[0]->dtype), name);
}

/* One row, dtype, sample and reduction: every check that applies. */
static void check_case(hd_ctx *ctx, const opinfo *oi, hd_dtype dt, int si, int r, int cuda) {
    int ns;
    const sample *s = &samples_of(oi, &ns)[si];
    char name[96];
    case_name(oi, dt, si, r, name, sizeof name);
    hd_tensor *in[MAX_IN] = {0};
    int n = nin_of(oi);
    for (int i = 0; i < n; i++) in[i] = make_input(ctx, oi, dt, s, i);
    hd_attrs at;
    attrs_of(oi, r, &at);
    opinfo_call c = {oi->op, in, n, &at, name, NULL};
    hd_tensor *out = opinfo_run(ctx, &c, in);
    CHECK_MSG(out != NULL, "%s: %s", name, hd_error_message(ctx));
    if (out) {
        check_reference(oi, in, &at, out, name);
        /* the cuda compiler once per row and dtype: each graph is a compile */
        opinfo_check_compilers(ctx, &c, out, cuda,
                               si == (oi->along == A_MATMUL ? 0 : 4) && dt == HD_F32);
        if (oi->grad && dt == HD_F64 && out->numel > 0) opinfo_check_grad(ctx, &c);
    }
    hd_error_clear(ctx);
    hd_tensor_unref(out);
    for (int i = 0; i < n; i++) hd_tensor_unref(in[i]);
}

/* A sample a row takes: one input for unary ops and reductions, the
 * reduction's axis within the first input's dims (3-D for keepdim). */
static int sample_fits(const opinfo *oi, int si, int r) {
    if (oi->along == A_MATMUL) return r == 0;
    if (oi->along) return reductions[r].axis >= 0 && reductions[r].axis < samples[si].nd[0];
    if (!oi->reduce) return 1;
    int nd = samples[si].nd[0], axis = reductions[r].axis;
    if (axis >= nd) return 0;
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= samples[si].shape[0][d];
    int64_t rows = axis < 0 ? n : samples[si].shape[0][axis];
    /* var/std of one element divide by 0; arg and max/min of none are errors */
    if ((oi->reduce == R_VAR || oi->reduce == R_STD) && rows < 2) return 0;
    return rows > 0 || oi->reduce == R_SUM || oi->reduce == R_PROD || oi->reduce == R_MEAN;
}

static void test_table_covers_ops(void) {
    for (int op = 0; op < HD_OP_COUNT; op++) {
        int rows = opinfo_shaped_has((hd_op)op), listed = 0;
        for (int i = 0; i < NOPINFOS; i++) rows |= (int)opinfos[i].op == op;
        for (size_t i = 0; i < sizeof opinfo_elsewhere / sizeof *opinfo_elsewhere; i++)
            listed |= (int)opinfo_elsewhere[i].op == op;
        CHECK_MSG(rows || listed, "%s has no opinfo row", hd_op_name((hd_op)op));
        CHECK_MSG(!(rows && listed), "%s has a row and is listed in opinfo_elsewhere",
                  hd_op_name((hd_op)op));
    }
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    const char *env = getenv("HODU_OPINFO_CUDA");
    int cuda = env && *env == '1';
    if (cuda && hd_cuda_backend.available(&ctx, 0) != HD_OK) {
        printf("HODU_OPINFO_CUDA: %s\nSKIPPED: no CUDA device\n", hd_error_message(&ctx));
        hd_ctx_release(&ctx);
        return 77;
    }
    test_table_covers_ops();
    int cases = 0;
    for (int i = 0; i < NOPINFOS; i++)
        for (int dt = 0; dt < HD_DTYPE_COUNT; dt++) {
            if (!(opinfos[i].dtypes & DT(dt))) continue;
            int nr = opinfos[i].reduce || opinfos[i].along
                         ? (int)(sizeof reductions / sizeof *reductions)
                         : 1,
                ns;
            samples_of(&opinfos[i], &ns);
            for (int si = 0; si < ns; si++)
                for (int r = 0; r < nr; r++)
                    if (sample_fits(&opinfos[i], si, r)) {
                        check_case(&ctx, &opinfos[i], (hd_dtype)dt, si, r, cuda);
                        cases++;
                    }
        }
    int shaped = opinfo_shaped_run(&ctx, cuda);
    printf("%d rows, %d cases; %d shaped cases\n", NOPINFOS, cases, shaped);
    CHECK(hd_grad_record_count(&ctx) == 0);
    hd_ctx_release(&ctx);
    TEST_END();
}
