/* The second table of test_opinfo: ops whose inputs have shapes and
 * arguments of their own (creation, selection, sorting, nn, linalg), so
 * each row lists its samples as input specs (hd_test_spec.h: shapes with
 * 0-d, empty, transposed and stepped views) with the attrs to run them
 * with. Every row, dtype and sample gets the same checks as the first
 * table: the eager cpu result against the row's reference, written here in
 * plain loops in double (or, for decompositions defined up to sign, their
 * defining properties); the op traced and run by interp and llvm against
 * eager; on the cuda device (eagerly, and through the cuda compiler once
 * per row) against eager cpu; and for rows with a gradient, backward in
 * f64 against central differences. */
#define HD_TEST_PART
#include "hd_test.h"
#include "hd_test_linalg.h"
#include "hd_test_spec.h"
#include "opinfo.h"

#define DT(d)  (1u << (d))
#define FL     (DT(HD_F32) | DT(HD_F64))
#define FLOATS (FL | DT(HD_F16) | DT(HD_BF16))
#define SINTS  (DT(HD_I8) | DT(HD_I32) | DT(HD_I64))
#define NUMS   (FLOATS | SINTS | DT(HD_U8))
#define MAXS   4 /* samples per row */

typedef void (*shaped_ref)(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out,
                           double *want);

typedef struct shaped_sample {
    const char *in[4]; /* NULL ends; float specs take the row's dtype */
    void (*set)(hd_attrs *);
} shaped_sample;

typedef struct shaped_row {
    hd_op op;
    unsigned dtypes; /* the float inputs' dtypes, or the created tensor's */
    shaped_sample s[MAXS];
    shaped_ref ref;      /* want[e] for every element of the result */
    opinfo_same_fn prop; /* instead of ref: a result defined up to sign */
    int grad;            /* gradcheck in f64 */
    double rtol;         /* f32 against the reference (0: 1e-5) */
} shaped_row;

/* ---- attrs (more in hd_test_spec.h) ---- */

SET(full_2x3, a->scalar[0] = 2.5; a->nshape = 2; a->shape[0] = 2; a->shape[1] = 3)
SET(full_0d, a->scalar[0] = 3)
SET(full_0x3, a->scalar[0] = 1; a->nshape = 2; a->shape[1] = 3)
SET(arange_a, a->scalar[0] = 1; a->scalar[1] = 4; a->scalar[2] = 0.5)
SET(arange_b, a->scalar[0] = -3; a->scalar[1] = 8; a->scalar[2] = 2)
SET(arange_none, a->scalar[0] = 2; a->scalar[1] = 1; a->scalar[2] = 1)
SET(lin_5, a->scalar[0] = -1; a->scalar[1] = 2; a->ints[0] = 5)
SET(lin_1, a->scalar[0] = 3; a->scalar[1] = 7; a->ints[0] = 1)
SET(lin_0, a->scalar[1] = 1)
SET(eye_3x4, a->nshape = 2; a->shape[0] = 3; a->shape[1] = 4)
SET(eye_4x2, a->nshape = 2; a->shape[0] = 4; a->shape[1] = 2)
SET(eye_0x2, a->nshape = 2; a->shape[1] = 2)
SET(none, (void)a)
SET(axis0_desc, a->ints[0] = 0; a->ints[1] = 1)
SET(axis1_first2, a->ints[0] = 1; a->ints[2] = 2)
SET(axis0_desc_first3, a->ints[0] = 0; a->ints[1] = 1; a->ints[2] = 3)
SET(axis0_first1, a->ints[0] = 0; a->ints[2] = 1)
SET(classes_4, a->ints[0] = 4)
SET(classes_3, a->ints[0] = 3)
SET(pool_2x3s1, a->ints[0] = 2; a->ints[1] = 3; a->ints[2] = 1; a->ints[3] = 1)
SET(complete, a->ints[0] = 1)
SET(to_i64, a->dtype = HD_I64)
SET(to_bool, a->dtype = HD_BOOL)
SET(sh_2x6, a->nshape = 2; a->shape[0] = 2; a->shape[1] = 6)
SET(sh_m1, a->nshape = 1; a->shape[0] = -1)
SET(sh_0d, a->nshape = 0)
SET(exp_m1, a->nshape = 3; a->shape[0] = 2; a->shape[1] = -1; a->shape[2] = 0)
SET(slice_3, a->start[0] = 1; a->step[0] = 3; a->len[0] = 2)

/* ---- references: creation, selection, sorting ---- */

/* the value, truncated toward zero in an integer dtype (as C converts) */
static void ref_full(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    (void)in;
    double v = hd_dtype_is_float(out->dtype) ? at->scalar[0] : trunc(at->scalar[0]);
    for (int64_t e = 0; e < out->numel; e++) w[e] = v;
}

static void ref_arange(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    (void)in;
    double n = ceil((at->scalar[1] - at->scalar[0]) / at->scalar[2]);
    CHECK_MSG(out->numel == (int64_t)(n > 0 ? n : 0), "arange: %lld elements, want %g",
              (long long)out->numel, n);
    for (int64_t e = 0; e < out->numel; e++) w[e] = at->scalar[0] + (double)e * at->scalar[2];
}

static void ref_linspace(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out,
                         double *w) {
    (void)in;
    int64_t n = at->ints[0];
    CHECK(out->numel == n);
    for (int64_t e = 0; e < n; e++)
        w[e] = n == 1
                   ? at->scalar[0]
                   : at->scalar[0] + (at->scalar[1] - at->scalar[0]) * (double)e / (double)(n - 1);
}

static void ref_eye(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    (void)in, (void)at;
    for (int64_t e = 0; e < out->numel; e++) w[e] = e / out->shape[1] == e % out->shape[1];
}

static void ref_where(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    (void)at;
    int64_t idx[HD_MAX_DIMS];
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, idx);
        int c = opinfo_value_at(in[0], idx, out->ndim) != 0;
        w[e] = opinfo_value_at(in[c ? 1 : 2], idx, out->ndim);
    }
}

/* the inputs one after another along the axis */
static void ref_concat(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    int64_t idx[HD_MAX_DIMS];
    int axis = (int)at->ints[0];
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, idx);
        int i = 0;
        while (idx[axis] >= in[i]->shape[axis]) idx[axis] -= in[i++]->shape[axis];
        w[e] = opinfo_load(in[i], idx);
    }
}

/* out[pre, j.., post] = x[pre, idx[j..], post] */
static void ref_index_select(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out,
                             double *w) {
    int64_t o[HD_MAX_DIMS], xi[HD_MAX_DIMS];
    int axis = (int)at->ints[0], ni = in[1]->ndim;
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, o);
        for (int d = 0; d < in[0]->ndim; d++)
            xi[d] = d < axis ? o[d] : d > axis ? o[d - 1 + ni] : 0;
        xi[axis] = (int64_t)opinfo_load(in[1], o + axis);
        w[e] = opinfo_load(in[0], xi);
    }
}

static void ref_one_hot(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    int64_t idx[HD_MAX_DIMS];
    (void)at;
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, idx);
        w[e] = opinfo_load(in[0], idx) == (double)idx[out->ndim - 1];
    }
}

/* position j of the stable order of its line: the index of the element
 * with exactly j elements before it (smaller, or equal and earlier) */
static void ref_argsort(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    int64_t idx[HD_MAX_DIMS], k[HD_MAX_DIMS];
    int axis = (int)at->ints[0], desc = at->ints[1] != 0;
    int64_t n = in[0]->shape[axis]; /* out's axis: ints[2] (the first positions) or n */
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, idx);
        memcpy(k, idx, sizeof k);
        for (int64_t i = 0; i < n; i++) {
            k[axis] = i;
            double vi = opinfo_load(in[0], k);
            int64_t before = 0;
            for (int64_t j = 0; j < n; j++) {
                k[axis] = j;
                double vj = opinfo_load(in[0], k);
                before += (desc ? vj > vi : vj < vi) || (vj == vi && j < i);
            }
            if (before == idx[axis]) w[e] = (double)i;
            k[axis] = i;
        }
    }
}

/* ---- references: conversions and views ---- */

/* the value as the target dtype holds it: truncated toward zero (ints),
 * nonzero (bool), rounded to nearest (f32), exact (f64) */
static void ref_cast(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    int64_t idx[HD_MAX_DIMS];
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, idx);
        double v = opinfo_load(in[0], idx);
        w[e] = at->dtype == HD_BOOL  ? v != 0
               : at->dtype == HD_F32 ? (double)(float)v
               : at->dtype == HD_F64 ? v
                                     : trunc(v);
    }
}

static void ref_not(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    int64_t idx[HD_MAX_DIMS];
    (void)at;
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, idx);
        w[e] = opinfo_load(in[0], idx) == 0;
    }
}

/* element e of the input in row-major order */
static void ref_reshape(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    int64_t idx[HD_MAX_DIMS];
    (void)at;
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, in[0]->shape, in[0]->ndim, idx);
        w[e] = opinfo_load(in[0], idx);
    }
}

/* out[o] = x[i] with i[perm[d]] = o[d] */
static void ref_permute(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    int64_t o[HD_MAX_DIMS], i[HD_MAX_DIMS];
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, o);
        for (int d = 0; d < out->ndim; d++) i[at->shape[d]] = o[d];
        w[e] = opinfo_load(in[0], i);
    }
}

static void ref_expand(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    int64_t o[HD_MAX_DIMS];
    (void)at;
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, o);
        w[e] = opinfo_value_at(in[0], o, out->ndim);
    }
}

/* x[start + step * o] in each dim; dropped dims take their start */
static void ref_slice(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    int64_t o[HD_MAX_DIMS], i[HD_MAX_DIMS];
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, out->ndim, o);
        for (int d = 0, k = 0; d < in[0]->ndim; d++)
            i[d] = at->start[d] + at->step[d] * ((at->drop_mask >> d & 1) ? 0 : o[k++]);
        w[e] = opinfo_load(in[0], i);
    }
}

/* ---- references: nn ---- */

/* the mean over rows of logsumexp(row) - row[label] */
static void ref_cross_entropy(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out,
                              double *w) {
    (void)at, (void)out;
    const hd_tensor *x = in[0];
    int64_t rows = x->ndim == 2 ? x->shape[0] : 1, c = x->shape[x->ndim - 1], i[2], l[1];
    double s = 0;
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, se = 0;
        i[0] = r;
        for (i[1] = 0; i[1] < c; i[1]++) m = fmax(m, opinfo_load(x, x->ndim == 2 ? i : i + 1));
        for (i[1] = 0; i[1] < c; i[1]++) se += exp(opinfo_load(x, x->ndim == 2 ? i : i + 1) - m);
        l[0] = r;
        i[1] = (int64_t)opinfo_load(in[1], l);
        s += m + log(se) - opinfo_load(x, x->ndim == 2 ? i : i + 1);
    }
    w[0] = s / (double)rows;
}

static void ref_mse(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    (void)at, (void)out;
    int64_t shape[HD_MAX_DIMS] = {0}, idx[HD_MAX_DIMS], n = 1;
    int nd = in[0]->ndim > in[1]->ndim ? in[0]->ndim : in[1]->ndim;
    for (int d = 0; d < nd; d++) {
        int64_t a = d - (nd - in[0]->ndim) >= 0 ? in[0]->shape[d - (nd - in[0]->ndim)] : 1;
        int64_t b = d - (nd - in[1]->ndim) >= 0 ? in[1]->shape[d - (nd - in[1]->ndim)] : 1;
        shape[d] = a > b ? a : b;
        n *= shape[d];
    }
    double s = 0;
    for (int64_t e = 0; e < n; e++) {
        opinfo_unravel(e, shape, nd, idx);
        double d = opinfo_value_at(in[0], idx, nd) - opinfo_value_at(in[1], idx, nd);
        s += d * d;
    }
    w[0] = s / (double)n;
}

static int64_t or1(int64_t v) {
    return v ? v : 1;
}

/* y[n, o, i, j] = b[o] + sum over the group's channels c and the kernel
 * (p, q) of x[n, c, i*sh - ph + p*dh, j*sw - pw + q*dw] w[o, c', p, q] */
static void ref_conv2d(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    const hd_tensor *x = in[0], *k = in[1];
    int64_t sh = or1(at->ints[0]), sw = or1(at->ints[1]), ph = at->ints[2], pw = at->ints[3];
    int64_t dh = or1(at->ints[4]), dw = or1(at->ints[5]), groups = or1(at->ints[6]);
    int64_t cg = k->shape[1], og = k->shape[0] / groups, o4[4], xi[4], ki[4];
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, 4, o4);
        double s = 0;
        for (int64_t c = 0; c < cg; c++)
            for (int64_t p = 0; p < k->shape[2]; p++)
                for (int64_t q = 0; q < k->shape[3]; q++) {
                    int64_t r = o4[2] * sh - ph + p * dh, t = o4[3] * sw - pw + q * dw;
                    if (r < 0 || t < 0 || r >= x->shape[2] || t >= x->shape[3]) continue;
                    xi[0] = o4[0], xi[1] = o4[1] / og * cg + c, xi[2] = r, xi[3] = t;
                    ki[0] = o4[1], ki[1] = c, ki[2] = p, ki[3] = q;
                    s += opinfo_load(x, xi) * opinfo_load(k, ki);
                }
        w[e] = s;
    }
}

static void ref_conv2d_bias(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out,
                            double *w) {
    int64_t o4[4];
    ref_conv2d(at, in, out, w);
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, 4, o4);
        w[e] += opinfo_load(in[2], o4 + 1);
    }
}

/* max, or the mean with the padding's zeros counted (kh * kw) */
static void ref_pool(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w,
                     int max) {
    const hd_tensor *x = in[0];
    int64_t kh = at->ints[0], kw = at->ints[1], sh = at->ints[2] ? at->ints[2] : kh;
    int64_t sw = at->ints[3] ? at->ints[3] : kw, ph = at->ints[4], pw = at->ints[5], o4[4], xi[4];
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, 4, o4);
        double m = -INFINITY, s = 0;
        for (int64_t p = 0; p < kh; p++)
            for (int64_t q = 0; q < kw; q++) {
                int64_t r = o4[2] * sh - ph + p, t = o4[3] * sw - pw + q;
                if (r < 0 || t < 0 || r >= x->shape[2] || t >= x->shape[3]) continue;
                xi[0] = o4[0], xi[1] = o4[1], xi[2] = r, xi[3] = t;
                double v = opinfo_load(x, xi);
                m = fmax(m, v), s += v;
            }
        w[e] = max ? m : s / (double)(kh * kw);
    }
}

static void ref_max_pool(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out,
                         double *w) {
    ref_pool(at, in, out, w, 1);
}

static void ref_avg_pool(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out,
                         double *w) {
    ref_pool(at, in, out, w, 0);
}

/* over the last ints[0] dims: (x - mean) / sqrt(var + eps) * w + b, the
 * variance biased */
static void ref_layer_norm(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out,
                           double *w) {
    const hd_tensor *x = in[0];
    int64_t d = 1, idx[HD_MAX_DIMS], nd = x->ndim, k = at->ints[0];
    for (int i = 0; i < k; i++) d *= x->shape[nd - 1 - i];
    double eps = at->scalar[0] ? at->scalar[0] : 1e-5;
    for (int64_t r = 0; r < out->numel / d; r++) {
        double s = 0, ss = 0;
        for (int64_t j = 0; j < d; j++) {
            opinfo_unravel(r * d + j, x->shape, (int)nd, idx);
            s += opinfo_load(x, idx);
        }
        double mean = s / (double)d;
        for (int64_t j = 0; j < d; j++) {
            opinfo_unravel(r * d + j, x->shape, (int)nd, idx);
            ss += (opinfo_load(x, idx) - mean) * (opinfo_load(x, idx) - mean);
        }
        double rs = 1 / sqrt(ss / (double)d + eps);
        for (int64_t j = 0; j < d; j++) {
            opinfo_unravel(r * d + j, x->shape, (int)nd, idx);
            double v = (opinfo_load(x, idx) - mean) * rs;
            if (in[1] && in[1] != x) v = v * opinfo_value_at(in[1], idx, (int)nd);
            if (in[2] && in[2] != x) v += opinfo_value_at(in[2], idx, (int)nd);
            w[r * d + j] = v;
        }
    }
}

/* softmax(q k^T * scale + mask, keys j <= i when causal) v, per batch */
static void ref_attention(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out,
                          double *w) {
    const hd_tensor *q = in[0], *k = in[1], *v = in[2], *mask = in[3];
    int nd = q->ndim;
    int64_t E = q->shape[nd - 1], S = k->shape[nd - 2];
    int64_t o[HD_MAX_DIMS], a[HD_MAX_DIMS], b[HD_MAX_DIMS], mi[2];
    double sc[64]; /* S <= 64 in the samples */
    for (int64_t e = 0; e < out->numel; e++) {
        opinfo_unravel(e, out->shape, nd, o);
        int64_t i = o[nd - 2];
        double m = -INFINITY, se = 0, y = 0;
        memcpy(a, o, sizeof a), memcpy(b, o, sizeof b);
        for (int64_t j = 0; j < S; j++) {
            double s = 0;
            for (int64_t c = 0; c < E; c++) {
                a[nd - 1] = c, b[nd - 2] = j, b[nd - 1] = c;
                s += opinfo_load(q, a) * opinfo_load(k, b);
            }
            mi[0] = i, mi[1] = j;
            sc[j] = s * at->scalar[0] + (mask ? opinfo_value_at(mask, mi, 2) : 0);
            if (at->ints[0] && j > i) sc[j] = -INFINITY;
            m = fmax(m, sc[j]);
        }
        for (int64_t j = 0; j < S; j++) {
            double p = exp(sc[j] - m);
            b[nd - 2] = j, b[nd - 1] = o[nd - 1];
            se += p, y += p * opinfo_load(v, b);
        }
        w[e] = y / se;
    }
}

/* ---- references: linalg ---- */

/* matrix b of in's batch, row-major, into m; lower: its lower triangle
 * mirrored (ops that read only that) */
static void la_matrix(const hd_tensor *t, int64_t b, double *m, int lower) {
    int nd = t->ndim;
    int64_t r = t->shape[nd - 2], c = t->shape[nd - 1], idx[HD_MAX_DIMS];
    opinfo_unravel(b, t->shape, nd - 2, idx);
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) {
            idx[nd - 2] = lower && j > i ? j : i, idx[nd - 1] = lower && j > i ? i : j;
            m[i * c + j] = opinfo_load(t, idx);
        }
}

static int64_t la_batch(const hd_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim - 2; d++) n *= t->shape[d];
    return n;
}

static void ref_inv(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    (void)at, (void)out;
    int n = (int)in[0]->shape[in[0]->ndim - 1];
    double a[LA_NMAX * LA_NMAX], id[LA_NMAX * LA_NMAX];
    for (int i = 0; i < n * n; i++) id[i] = i / n == i % n;
    for (int64_t b = 0; b < la_batch(in[0]); b++) {
        la_matrix(in[0], b, a, 0);
        ref_solve(a, id, w + b * n * n, n, n);
    }
}

static void ref_solve_op(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out,
                         double *w) {
    (void)at, (void)out;
    int n = (int)in[0]->shape[in[0]->ndim - 1], k = (int)in[1]->shape[in[1]->ndim - 1];
    double a[LA_NMAX * LA_NMAX], r[LA_NMAX * LA_NMAX];
    for (int64_t b = 0; b < la_batch(in[0]); b++) {
        la_matrix(in[0], b, a, 0);
        la_matrix(in[1], b, r, 0);
        ref_solve(a, r, w + b * n * k, n, k);
    }
}

/* det, or slogdet's (sign, log |det|) */
static void ref_dets(hd_tensor *const *in, double *w, int slog) {
    int n = (int)in[0]->shape[in[0]->ndim - 1];
    double a[LA_NMAX * LA_NMAX];
    for (int64_t b = 0; b < la_batch(in[0]); b++) {
        la_matrix(in[0], b, a, 0);
        double d = ref_det(a, n);
        if (!slog) {
            w[b] = d;
            continue;
        }
        w[2 * b] = d > 0 ? 1 : d < 0 ? -1 : 0;
        w[2 * b + 1] = log(fabs(d));
    }
}

static void ref_det_op(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    (void)at, (void)out;
    ref_dets(in, w, 0);
}

static void ref_slogdet(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out, double *w) {
    (void)at, (void)out;
    ref_dets(in, w, 1);
}

static void ref_cholesky_op(const hd_attrs *at, hd_tensor *const *in, const hd_tensor *out,
                            double *w) {
    (void)at, (void)out;
    int n = (int)in[0]->shape[in[0]->ndim - 1];
    double a[LA_NMAX * LA_NMAX];
    for (int64_t b = 0; b < la_batch(in[0]); b++) {
        la_matrix(in[0], b, a, 1);
        ref_cholesky(a, w + b * n * n, n);
    }
}

/* ---- properties: results defined up to sign ---- */

static double la_tol(const hd_tensor *t) {
    return t->dtype == HD_F64 ? 1e-10 : 2e-4;
}

/* element (i, j) of the r x c block at offset p of packed result y */
static double la_at(const hd_tensor *y, int64_t p, int64_t c, int64_t i, int64_t j) {
    return hd_tensor_get(y, p + i * c + j);
}

/* Do columns of the r x c block at p form an orthonormal set (rows: its
 * rows do)? */
static int la_orthonormal(const hd_tensor *y, int64_t p, int64_t r, int64_t c, int rows,
                          double tol) {
    int64_t n = rows ? r : c, len = rows ? c : r;
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) {
            double s = 0;
            for (int64_t i = 0; i < len; i++)
                s += rows ? la_at(y, p, c, a, i) * la_at(y, p, c, b, i)
                          : la_at(y, p, c, i, a) * la_at(y, p, c, i, b);
            if (!hd_test_close(s, a == b, tol, tol)) return 0;
        }
    return 1;
}

/* Q [m, q] orthonormal, R [q, n] upper triangular, QR = A, and |diag R|
 * as want's (unique) */
static int prop_qr(const hd_tensor *want, const hd_tensor *got, hd_tensor *const *in) {
    const hd_tensor *x = in[0];
    int64_t m = x->shape[x->ndim - 2], n = x->shape[x->ndim - 1], k = m < n ? m : n;
    int64_t q = want->shape[want->ndim - 1] == m * m + m * n ? m : k, len = m * q + q * n;
    double a[LA_NMAX * LA_NMAX], tol = la_tol(got) * 10;
    if (got->numel != want->numel) return 0;
    for (int64_t b = 0; b < la_batch(x); b++) {
        int64_t p = b * len, r0 = p + m * q;
        la_matrix(x, b, a, 0);
        if (!la_orthonormal(got, p, m, q, 0, tol)) return 0;
        for (int64_t i = 0; i < q; i++)
            for (int64_t j = 0; j < (i < k ? i : n); j++)
                if (la_at(got, r0, n, i, j) != 0) return 0;
        for (int64_t i = 0; i < k; i++)
            if (!hd_test_close(fabs(la_at(got, r0, n, i, i)), fabs(la_at(want, r0, n, i, i)), tol,
                               tol))
                return 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t l = 0; l < q; l++)
                    s += la_at(got, p, q, i, l) * la_at(got, r0, n, l, j);
                if (!hd_test_close(s, a[i * n + j], tol, tol)) return 0;
            }
    }
    return 1;
}

/* U [m, cu] orthonormal, S descending >= 0 and as want's, Vh [rv, n]
 * orthonormal rows, U diag(S) Vh = A */
static int prop_svd(const hd_tensor *want, const hd_tensor *got, hd_tensor *const *in) {
    const hd_tensor *x = in[0];
    int64_t m = x->shape[x->ndim - 2], n = x->shape[x->ndim - 1], k = m < n ? m : n;
    int full = want->shape[want->ndim - 1] == m * m + k + n * n;
    int64_t cu = full ? m : k, rv = full ? n : k, len = m * cu + k + rv * n;
    double a[LA_NMAX * LA_NMAX], tol = la_tol(got) * 10;
    if (got->numel != want->numel) return 0;
    for (int64_t b = 0; b < la_batch(x); b++) {
        int64_t p = b * len, s0 = p + m * cu, v0 = s0 + k;
        la_matrix(x, b, a, 0);
        if (!la_orthonormal(got, p, m, cu, 0, tol) || !la_orthonormal(got, v0, rv, n, 1, tol))
            return 0;
        for (int64_t i = 0; i < k; i++) {
            double s = hd_tensor_get(got, s0 + i);
            if (s < 0 || (i && s > hd_tensor_get(got, s0 + i - 1)) ||
                !hd_test_close(s, hd_tensor_get(want, s0 + i), tol, tol))
                return 0;
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t l = 0; l < k; l++)
                    s += la_at(got, p, cu, i, l) * hd_tensor_get(got, s0 + l) *
                         la_at(got, v0, n, l, j);
                if (!hd_test_close(s, a[i * n + j], tol, tol)) return 0;
            }
    }
    return 1;
}

/* w ascending and as want's, V [n, n] orthonormal, A V = V diag(w) (A
 * from the lower triangle) */
static int prop_eigh(const hd_tensor *want, const hd_tensor *got, hd_tensor *const *in) {
    const hd_tensor *x = in[0];
    int64_t n = x->shape[x->ndim - 1], len = n + n * n;
    double a[LA_NMAX * LA_NMAX], tol = la_tol(got) * 10;
    if (got->numel != want->numel) return 0;
    for (int64_t b = 0; b < la_batch(x); b++) {
        int64_t p = b * len, v0 = p + n;
        la_matrix(x, b, a, 1);
        if (!la_orthonormal(got, v0, n, n, 0, tol)) return 0;
        for (int64_t j = 0; j < n; j++) {
            double wj = hd_tensor_get(got, p + j);
            if ((j && wj < hd_tensor_get(got, p + j - 1)) ||
                !hd_test_close(wj, hd_tensor_get(want, p + j), tol, tol))
                return 0;
            for (int64_t i = 0; i < n; i++) {
                double av = 0;
                for (int64_t l = 0; l < n; l++) av += a[i * n + l] * la_at(got, v0, n, l, j);
                if (!hd_test_close(av, wj * la_at(got, v0, n, i, j), tol, tol * (double)n))
                    return 0;
            }
        }
    }
    return 1;
}

/* ---- the table ---- */

static const shaped_row shaped_rows[] = {
    {HD_OP_FULL, NUMS, {{{0}, full_2x3}, {{0}, full_0d}, {{0}, full_0x3}}, ref_full, 0, 0, 0},
    {HD_OP_ARANGE, FLOATS | SINTS, {{{0}, arange_b}, {{0}, arange_none}}, ref_arange, 0, 0, 0},
    {HD_OP_ARANGE, FL, {{{0}, arange_a}}, ref_arange, 0, 0, 0},
    {HD_OP_LINSPACE, FLOATS, {{{0}, lin_5}, {{0}, lin_1}, {{0}, lin_0}}, ref_linspace, 0, 0, 0},
    {HD_OP_EYE, NUMS, {{{0}, eye_3x4}, {{0}, eye_4x2}, {{0}, eye_0x2}}, ref_eye, 0, 0, 0},
    {HD_OP_CAST,
     NUMS,
     {{{"n:3x4"}, to_f64}, {{"n:4x3:t"}, to_i64}, {{"n:2x3:s"}, to_bool}, {{"n:s"}, to_i64}},
     ref_cast,
     0,
     0,
     0},
    {HD_OP_CAST,
     DT(HD_F64) | SINTS,
     {{{"n:3x4:t"}, to_f32}, {{"n:0x2"}, to_f32}},
     ref_cast,
     0,
     0,
     0},
    {HD_OP_NOT,
     DT(HD_BOOL),
     {{{"b:3x4"}, none}, {{"b:s"}, none}, {{"b:0"}, none}, {{"b:3x2:t"}, none}},
     ref_not,
     0,
     0,
     0},
    {HD_OP_RESHAPE,
     NUMS,
     {{{"n:3x4:t"}, sh_2x6}, {{"n:2x3"}, sh_m1}, {{"n:1x1"}, sh_0d}, {{"n:0x4"}, sh_m1}},
     ref_reshape,
     0,
     1,
     0},
    {HD_OP_PERMUTE, NUMS, {{{"n:2x3x4"}, perm_201}, {{"n:3x5:s"}, perm_10}}, ref_permute, 0, 1, 0},
    {HD_OP_EXPAND, NUMS, {{{"n:3x1"}, exp_2x3x4}, {{"n:3x1:s"}, exp_m1}}, ref_expand, 0, 1, 0},
    {HD_OP_SLICE,
     NUMS,
     {{{"n:5x3x4"}, slice_a}, {{"n:4x5:t"}, slice_b}, {{"n:5"}, slice_3}},
     ref_slice,
     0,
     1,
     0},
    {HD_OP_WHERE,
     NUMS,
     {{{"b:3x4", "n:3x4", "n:4"}, none},
      {{"b:4", "n:3x1", "n:3x4:t"}, none},
      {{"b:s", "n:s", "n:2x3:s"}, none},
      {{"b:0x3", "n:0x3", "n:3"}, none}},
     ref_where,
     0,
     1,
     0},
    {HD_OP_CONCAT,
     NUMS,
     {{{"n:2x3", "n:2x1:s", "n:2x2"}, axis1},
      {{"n:2x3:t", "n:1x3", "n:0x3"}, axis0},
      {{"n:4", "n:0"}, axis0}},
     ref_concat,
     0,
     1,
     0},
    {HD_OP_INDEX_SELECT,
     NUMS,
     {{{"n:5x3", "i5:7"}, axis0},
      {{"n:3x4:t", "i4:2x3"}, axis1},
      {{"n:5x3", "i5:0"}, axis0},
      {{"n:6", "i6:s"}, axis0}},
     ref_index_select,
     0,
     1,
     0},
    {HD_OP_ONE_HOT,
     DT(HD_I64),
     {{{"i4:6"}, classes_4},
      {{"i3:2x3:t"}, classes_3},
      {{"i3:0"}, classes_3},
      {{"i4:s"}, classes_4}},
     ref_one_hot,
     0,
     0,
     0},
    {HD_OP_ARGSORT,
     NUMS,
     {{{"n:3x5"}, axis1}, {{"n:4x3:t"}, axis0_desc}, {{"n:0x3"}, axis1}, {{"n:7:s"}, axis0}},
     ref_argsort,
     0,
     0,
     0},
    /* the first positions only (topk's) */
    {HD_OP_ARGSORT,
     NUMS,
     {{{"n:3x5"}, axis1_first2}, {{"n:5x3:t"}, axis0_desc_first3}, {{"n:9:s"}, axis0_first1}},
     ref_argsort,
     0,
     0,
     0},
    {HD_OP_CROSS_ENTROPY,
     FL,
     {{{"n:4x5", "i5:4"}, none}, {{"n:5", "i5:s"}, none}, {{"n:5x4:t", "i4:5"}, none}},
     ref_cross_entropy,
     0,
     1,
     0},
    {HD_OP_MSE,
     FL,
     {{{"n:3x4", "n:4"}, none}, {{"n:3x4:t", "n:3x4:s"}, none}, {{"n:s", "n:2x3"}, none}},
     ref_mse,
     0,
     1,
     0},
    {HD_OP_CONV2D,
     FL,
     {{{"n:2x3x4x4", "n:5x3x1x1"}, conv_1}, {{"n:1x2x5x5:s", "n:3x2x3x3"}, conv_s2}},
     ref_conv2d,
     0,
     1,
     0},
    {HD_OP_CONV2D,
     FL,
     {{{"n:2x4x5x7", "n:6x2x3x3", "n:6"}, conv_a}, {{"n:1x3x5x4:t", "n:6x1x3x2", "n:6"}, conv_dw}},
     ref_conv2d_bias,
     0,
     1,
     0},
    {HD_OP_MAX_POOL2D,
     FL,
     {{{"n:2x3x4x6"}, pool_2}, {{"n:1x2x5x5:t"}, pool_3s2p1}, {{"n:1x1x3x4:s"}, pool_2x3s1}},
     ref_max_pool,
     0,
     1,
     0},
    {HD_OP_AVG_POOL2D,
     FL,
     {{{"n:2x3x4x6"}, pool_2}, {{"n:1x2x5x5:t"}, pool_3s2p1}, {{"n:1x1x3x4:s"}, pool_2x3s1}},
     ref_avg_pool,
     0,
     1,
     0},
    {HD_OP_LAYER_NORM,
     FL,
     {{{"n:3x4x5", "n:5", "n:5"}, ln_1},
      {{"n:3x4x5:s", "n:4x5", "n:4x5"}, ln_2},
      {{"n:3x6:t"}, ln_1}},
     ref_layer_norm,
     0,
     1,
     0},
    {HD_OP_ATTENTION,
     FL,
     {{{"n:2x3x4", "n:2x5x4", "n:2x5x2"}, att_plain},
      {{"n:4x3:t", "n:6x3", "n:6x2:s"}, att_causal},
      {{"n:2x3x4", "n:2x5x4", "n:2x5x2", "n:3x5"}, att_plain},
      {{"n:2x4x3", "n:2x4x3", "n:2x4x3"}, att_causal}},
     ref_attention,
     0,
     1,
     0},
    {HD_OP_LINALG_INV,
     FL,
     {{{"d:4x4"}, none}, {{"d:2x3x3:t"}, none}, {{"d:0x3x3"}, none}},
     ref_inv,
     0,
     1,
     1e-4},
    {HD_OP_LINALG_SOLVE,
     FL,
     {{{"d:3x3", "n:3x2"}, none}, {{"d:2x3x3:t", "n:2x3x1"}, none}},
     ref_solve_op,
     0,
     1,
     1e-4},
    {HD_OP_LINALG_DET,
     FL,
     {{{"d:4x4"}, none}, {{"n:2x3x3:t"}, none}, {{"n:0x2x2"}, none}},
     ref_det_op,
     0,
     1,
     1e-4},
    {HD_OP_LINALG_SLOGDET, FL, {{{"n:3x3"}, none}, {{"d:2x2x2:t"}, none}}, ref_slogdet, 0, 1, 1e-4},
    {HD_OP_LINALG_CHOLESKY,
     FL,
     {{{"d:3x3"}, none}, {{"d:2x3x3:t"}, none}},
     ref_cholesky_op,
     0,
     0,
     1e-4},
    {HD_OP_LINALG_QR,
     FL,
     {{{"n:4x3"}, none}, {{"n:3x4"}, complete}, {{"n:2x3x3:t"}, none}},
     0,
     prop_qr,
     0,
     0},
    {HD_OP_LINALG_SVD,
     FL,
     {{{"n:4x3"}, none}, {{"n:3x4"}, complete}, {{"n:2x3x2:t"}, none}},
     0,
     prop_svd,
     0,
     0},
    {HD_OP_LINALG_EIGH, FL, {{{"n:4x4"}, none}, {{"n:2x3x3:t"}, none}}, 0, prop_eigh, 0, 0},
};
#define NSHAPED ((int)(sizeof shaped_rows / sizeof *shaped_rows))

int opinfo_shaped_has(hd_op op) {
    for (int i = 0; i < NSHAPED; i++)
        if (shaped_rows[i].op == op) return 1;
    return 0;
}

/* ---- the checks ---- */

static double shaped_rtol(const shaped_row *r, hd_dtype dt) {
    switch (dt) {
    case HD_F16: return 2e-3;
    case HD_BF16: return 1.6e-2;
    case HD_F32: return r->rtol ? r->rtol : 1e-5;
    case HD_F64: return 1e-10;
    default: return 0;
    }
}

static void shaped_reference(const shaped_row *r, const opinfo_call *c, const hd_tensor *out,
                             hd_dtype dt) {
    if (r->prop) {
        CHECK_MSG(r->prop(out, out, c->in), "%s: not a valid result", c->name);
        return;
    }
    double *want = calloc((size_t)out->numel + 1, sizeof *want);
    r->ref(c->at, c->in, out, want);
    opinfo_check_values(out, want, shaped_rtol(r, dt), c->name);
    free(want);
}

static void shaped_case(hd_ctx *ctx, const shaped_row *r, hd_dtype dt, int si, int cuda) {
    const shaped_sample *s = &r->s[si];
    hd_tensor *in[4] = {0};
    int nin = 0;
    while (nin < 4 && s->in[nin]) {
        in[nin] = spec_input(ctx, s->in[nin], dt);
        nin++;
    }
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = dt;
    s->set(&at);
    char name[96];
    snprintf(name, sizeof name, "%s %s sample %d", hd_op_name(r->op), hd_dtype_name(dt), si);
    opinfo_call c = {r->op, in, nin, &at, name, r->prop};
    hd_tensor *out = opinfo_run(ctx, &c, in);
    CHECK_MSG(out != NULL, "%s: %s", name, hd_error_message(ctx));
    if (out) {
        shaped_reference(r, &c, out, dt);
        opinfo_check_compilers(ctx, &c, out, cuda, si == 0 && dt == HD_F32);
        if (r->grad && dt == HD_F64 && out->numel > 0) opinfo_check_grad(ctx, &c);
    }
    hd_error_clear(ctx);
    hd_tensor_unref(out);
    for (int i = 0; i < nin; i++) hd_tensor_unref(in[i]);
}

int opinfo_shaped_run(hd_ctx *ctx, int cuda) {
    int cases = 0;
    for (int i = 0; i < NSHAPED; i++)
        for (int dt = 0; dt < HD_DTYPE_COUNT; dt++) {
            if (!(shaped_rows[i].dtypes & DT(dt))) continue;
            for (int si = 0; si < MAXS && shaped_rows[i].s[si].set; si++, cases++)
                shaped_case(ctx, &shaped_rows[i], (hd_dtype)dt, si, cuda);
        }
    return cases;
}
