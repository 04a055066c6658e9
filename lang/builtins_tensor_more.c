/* Tensor functions built from the op table's ops, so each has gradients,
 * runs on every device and compiles as its parts do: isnan, isinf,
 * isfinite, nan_to_num, isclose, allclose, any, all, tril, triu, flip,
 * roll, tile (and x.repeat), norm. The index tensors and masks they need
 * are made by ops (arange and arithmetic) on x's device: constants of a
 * trace, kept by memory "cached", never copied up from the host. */
#include "builtins_tensor.h"
#include "hd_backend.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- helpers ---- */

static hd_status more_op2(hd_vm *vm, const char *fn, hd_op op, hd_tensor *a, hd_tensor *b,
                          hd_tensor **out) {
    hd_tensor *in[2] = {a, b};
    return hd_trun_t(vm, fn, op, in, 2, NULL, out);
}

/* op(a, number v) */
static hd_status more_op_num(hd_vm *vm, const char *fn, hd_op op, hd_tensor *a, double v,
                             hd_tensor **out) {
    hd_tensor *n = hd_tensor_number(hd_vm_ctx(vm), HD_F64, v);
    if (!n) return hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    hd_status st = more_op2(vm, fn, op, a, n, out);
    hd_tensor_unref(n);
    return st;
}

static hd_status more_op1(hd_vm *vm, const char *fn, hd_op op, hd_tensor *a, const hd_attrs *at,
                          hd_tensor **out) {
    return hd_trun_t(vm, fn, op, &a, 1, at, out);
}

static hd_status more_value(hd_tensor *t, hd_value *out) {
    *out = hd_tensor_value(t);
    return HD_OK;
}

/* arange(start, stop, step) (i64) on the current creation device */
static hd_status more_arange_from(hd_vm *vm, double start, double stop, double step,
                                  hd_tensor **out) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.scalar[0] = start;
    at.scalar[1] = stop;
    at.scalar[2] = step;
    at.dtype = HD_I64;
    return hd_trun_t(vm, NULL, HD_OP_ARANGE, NULL, 0, &at, out);
}

static hd_status more_arange(hd_vm *vm, int64_t n, hd_tensor **out) {
    return more_arange_from(vm, 0, (double)n, 1, out);
}

/* The tensor argument i, which must be a tensor of at least min_nd dims. */
static hd_status more_tensor(hd_vm *vm, const hd_targs *a, int i, int min_nd, hd_tensor **t) {
    if (hd_targ_tensor(vm, a, i, t)) return HD_ERR_RUNTIME;
    if ((*t)->ndim >= min_nd) return HD_OK;
    hd_tensor_unref(*t);
    *t = NULL;
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s needs a tensor of at least %d dims", a->f->name,
                       min_nd);
}

static int more_norm_axis(int64_t axis, int nd) {
    return (int)(axis < 0 ? axis + nd : axis);
}

/* ---- isnan, isinf, isfinite, nan_to_num ---- */

static HD_TF_FN(tf_isnan) {
    HD_TARGS_BIND(a); /* x */
    hd_tensor *x = NULL, *r = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st = more_op2(vm, "isnan", HD_OP_NE, x, x, &r);
    hd_tensor_unref(x);
    return st ? st : more_value(r, out);
}

/* isinf: |x| == inf; isfinite: |x| < inf (NaN is neither) */
static HD_TF_FN(tf_isinf) {
    HD_TARGS_BIND(a); /* x */
    hd_tensor *x = NULL, *ab = NULL, *r = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st = more_op1(vm, a.f->name, HD_OP_ABS, x, NULL, &ab);
    if (!st) st = more_op_num(vm, a.f->name, (hd_op)a.f->op, ab, INFINITY, &r);
    hd_tensor_unref(x);
    hd_tensor_unref(ab);
    return st ? st : more_value(r, out);
}

static double more_dtype_max(hd_dtype dt) {
    switch (dt) {
    case HD_F16: return 65504.0;
    case HD_BF16: return 3.3895313892515355e38;
    case HD_F32: return FLT_MAX;
    default: return DBL_MAX;
    }
}

/* where(cond(x), v, y) with cond x != x, x == inf or x == -inf */
static hd_status more_replace(hd_vm *vm, hd_tensor *x, hd_op cmp, double against, double v,
                              hd_tensor **y) {
    hd_tensor *c = NULL, *n = NULL, *r = NULL;
    hd_status st = cmp == HD_OP_NE ? more_op2(vm, "nan_to_num", HD_OP_NE, x, x, &c)
                                   : more_op_num(vm, "nan_to_num", cmp, x, against, &c);
    if (!st && !(n = hd_tensor_number(hd_vm_ctx(vm), HD_F64, v)))
        st = hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    hd_tensor *in[3] = {c, n, *y};
    if (!st) st = hd_trun_t(vm, "nan_to_num", HD_OP_WHERE, in, 3, NULL, &r);
    hd_tensor_unref(c);
    hd_tensor_unref(n);
    if (st) return st;
    hd_tensor_unref(*y);
    *y = r;
    return HD_OK;
}

static HD_TF_FN(tf_nan_to_num) {
    HD_TARGS_BIND(a); /* x, nan=, posinf=, neginf= */
    hd_tensor *x = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    if (!hd_dtype_is_float(x->dtype)) return more_value(x, out); /* nothing to replace */
    double big = more_dtype_max(x->dtype), nan, pos, neg;
    if (hd_targ_float(vm, &a, 1, 0.0, &nan) || hd_targ_float(vm, &a, 2, big, &pos) ||
        hd_targ_float(vm, &a, 3, -big, &neg)) {
        hd_tensor_unref(x);
        return HD_ERR_RUNTIME;
    }
    hd_tensor *y = hd_tensor_ref(x);
    hd_status st = more_replace(vm, x, HD_OP_NE, 0, nan, &y);
    if (!st) st = more_replace(vm, x, HD_OP_EQ, INFINITY, pos, &y);
    if (!st) st = more_replace(vm, x, HD_OP_EQ, -INFINITY, neg, &y);
    hd_tensor_unref(x);
    if (st) {
        hd_tensor_unref(y);
        return st;
    }
    return more_value(y, out);
}

/* ---- isclose, allclose ---- */

/* |a - b| <= atol + rtol |b|, or a == b (equal infinities); NaN equals
 * NaN only with equal_nan. Bools compare equal. */
static hd_status more_isclose(hd_vm *vm, const char *fn, hd_tensor *x, hd_tensor *y, double rtol,
                              double atol, int equal_nan, hd_tensor **out) {
    if (x->dtype == HD_BOOL || y->dtype == HD_BOOL) return more_op2(vm, fn, HD_OP_EQ, x, y, out);
    hd_tensor *d = NULL, *ad = NULL, *ab = NULL, *rb = NULL, *tol = NULL, *le = NULL, *eq = NULL;
    hd_tensor *r = NULL, *nx = NULL, *ny = NULL, *fin = NULL, *lf = NULL;
    hd_status st = more_op2(vm, fn, HD_OP_SUB, x, y, &d);
    if (!st) st = more_op1(vm, fn, HD_OP_ABS, d, NULL, &ad);
    if (!st) st = more_op1(vm, fn, HD_OP_ABS, y, NULL, &ab);
    if (!st) st = more_op_num(vm, fn, HD_OP_MUL, ab, rtol, &rb);
    if (!st) st = more_op_num(vm, fn, HD_OP_ADD, rb, atol, &tol);
    if (!st) st = more_op2(vm, fn, HD_OP_LE, ad, tol, &le);
    /* an infinite difference is close only when equal (inf <= inf) */
    if (!st) st = more_op_num(vm, fn, HD_OP_LT, ad, INFINITY, &fin);
    hd_tensor *fin_in[3] = {fin, le, fin};
    if (!st) st = hd_trun_t(vm, fn, HD_OP_WHERE, fin_in, 3, NULL, &lf); /* fin and le */
    if (!st) st = more_op2(vm, fn, HD_OP_EQ, x, y, &eq);
    hd_tensor *in[3] = {eq, eq, lf};
    if (!st) st = hd_trun_t(vm, fn, HD_OP_WHERE, in, 3, NULL, &r); /* eq or le */
    if (!st && equal_nan) {
        hd_tensor *nan_in[3] = {NULL, NULL, r};
        st = more_op2(vm, fn, HD_OP_NE, x, x, &nx);
        if (!st) st = more_op2(vm, fn, HD_OP_NE, y, y, &ny);
        nan_in[0] = nx, nan_in[1] = ny;
        hd_tensor *w = NULL;
        if (!st) st = hd_trun_t(vm, fn, HD_OP_WHERE, nan_in, 3, NULL, &w); /* x NaN: y NaN */
        hd_tensor_unref(r);
        r = st ? NULL : w;
    }
    hd_tensor *tmp[] = {d, ad, ab, rb, tol, le, eq, nx, ny, fin, lf};
    hd_tunref_all(tmp, (int)(sizeof tmp / sizeof *tmp));
    if (st) {
        hd_tensor_unref(r);
        return st;
    }
    *out = r;
    return HD_OK;
}

/* isclose(a, b, rtol = 1e-5, atol = 1e-8, equal_nan = false): elementwise,
 * as torch.isclose; allclose: all of it, a bool */
static HD_TF_FN(tf_isclose) {
    HD_TARGS_BIND(a); /* a, b, rtol=, atol=, equal_nan= */
    double rtol, atol;
    int equal_nan;
    if (hd_targ_float(vm, &a, 2, 1e-5, &rtol) || hd_targ_float(vm, &a, 3, 1e-8, &atol) ||
        hd_targ_bool(vm, &a, 4, 0, &equal_nan))
        return HD_ERR_RUNTIME;
    if (!(rtol >= 0) || !(atol >= 0))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "%s: rtol and atol must be at least 0, got rtol = %g, atol = %g",
                           a.f->name, rtol, atol);
    if (a.f->op == HD_OP_EQ && hd_vm_ctx(vm)->trace)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "allclose gives a bool, which compiled code knows only when it runs: "
                           "inside compiled code use all(isclose(a, b)), a tensor");
    hd_tensor *x = NULL, *y = NULL, *c = NULL, *n = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    if (hd_targ_tensor(vm, &a, 1, &y)) {
        hd_tensor_unref(x);
        return HD_ERR_RUNTIME;
    }
    hd_status st = more_isclose(vm, a.f->name, x, y, rtol, atol, equal_nan, &c);
    hd_tensor_unref(x);
    hd_tensor_unref(y);
    if (st || a.f->op != HD_OP_EQ) return st ? st : more_value(c, out);
    /* allclose: every element close (an empty pair is) */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    hd_tensor *cnt = NULL;
    hd_value v = hd_none();
    st = more_op_num(vm, a.f->name, HD_OP_EQ, c, 0, &n);
    if (!st) st = more_op1(vm, a.f->name, HD_OP_SUM, n, &at, &cnt);
    if (!st) st = hd_tensor_item(vm, cnt, &v);
    hd_tensor_unref(c);
    hd_tensor_unref(n);
    hd_tensor_unref(cnt);
    if (!st) *out = hd_bool(v.type == HD_V_INT && v.as.i == 0);
    return st;
}

/* ---- any, all ---- */

/* any: sum(x != 0) > 0; all: sum(x == 0) == 0 (an empty reduction is
 * false for any, true for all, as NumPy's) */
static HD_TF_FN(tf_any_all) {
    HD_TARGS_BIND(a); /* x, axis=, keepdim= */
    int any = a.f->op == HD_OP_NE, keep;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (hd_targ_axes(vm, &a, 1, &at) || hd_targ_bool(vm, &a, 2, 0, &keep)) return HD_ERR_RUNTIME;
    at.keepdim = keep;
    hd_tensor *x = NULL, *c = NULL, *s = NULL, *r = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st = more_op_num(vm, a.f->name, any ? HD_OP_NE : HD_OP_EQ, x, 0, &c);
    if (!st) st = more_op1(vm, a.f->name, HD_OP_SUM, c, &at, &s);
    if (!st) st = more_op_num(vm, a.f->name, any ? HD_OP_GT : HD_OP_EQ, s, 0, &r);
    hd_tensor_unref(x);
    hd_tensor_unref(c);
    hd_tensor_unref(s);
    return st ? st : more_value(r, out);
}

hd_status hd_tensor_any_value(hd_vm *vm, hd_tensor *x, hd_value *out) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    hd_tensor *c = NULL, *s = NULL, *r = NULL;
    hd_status st = more_op_num(vm, "in", HD_OP_NE, x, 0, &c);
    if (!st) st = more_op1(vm, "in", HD_OP_SUM, c, &at, &s);
    if (!st) st = more_op_num(vm, "in", HD_OP_GT, s, 0, &r);
    hd_tensor_unref(c);
    hd_tensor_unref(s);
    return st ? st : more_value(r, out);
}

/* ---- tril, triu ---- */

/* The [rows, cols] mask of j - i <= k (lower) or j - i >= k, made by ops
 * on x's device: no host data, so a trace folds it to a constant and
 * memory "cached" keeps it. */
static hd_status more_tri_mask(hd_vm *vm, const hd_tensor *x, const int64_t *shape, int64_t k,
                               int lower, hd_tensor **out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_place here = hd_place_of(x);
    hd_place prev = hd_place_push(ctx, here.backend ? here.backend : &hd_cpu_backend, here.device);
    hd_tensor *rows = NULL, *col = NULL, *cols = NULL, *d = NULL;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2;
    at.shape[0] = shape[0];
    at.shape[1] = 1;
    hd_status st = more_arange(vm, shape[0], &rows);
    if (!st) st = more_op1(vm, NULL, HD_OP_RESHAPE, rows, &at, &col);
    if (!st) st = more_arange(vm, shape[1], &cols);
    if (!st) st = more_op2(vm, NULL, HD_OP_SUB, cols, col, &d);
    /* an i64 number, so d stays i64; a k past every j - i means the same
     * clamped, and then converts exactly */
    k = HD_MAX(-shape[0] - 1, HD_MIN(k, shape[1] + 1));
    hd_tensor *kn = st ? NULL : hd_tensor_number(ctx, HD_I64, (double)k);
    if (!st && !kn) st = hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    if (!st) st = more_op2(vm, NULL, lower ? HD_OP_LE : HD_OP_GE, d, kn, out);
    hd_tensor_unref(kn);
    hd_place_pop(ctx, prev);
    hd_tensor_unref(rows);
    hd_tensor_unref(col);
    hd_tensor_unref(cols);
    hd_tensor_unref(d);
    return st;
}

/* where(mask, x, 0) with the [rows, cols] mask of j - i <= k (tril) or
 * j - i >= k (triu), over x's last two dims */
static HD_TF_FN(tf_tri) {
    HD_TARGS_BIND(a); /* x, diagonal= */
    int lower = a.f->op == HD_OP_LE;
    int64_t k;
    hd_tensor *x = NULL, *dm = NULL, *r = NULL, *zero = NULL;
    if (hd_targ_int(vm, &a, 1, 0, &k) || more_tensor(vm, &a, 0, 2, &x)) return HD_ERR_RUNTIME;
    int64_t shape[2] = {x->shape[x->ndim - 2], x->shape[x->ndim - 1]};
    hd_status st = more_tri_mask(vm, x, shape, k, lower, &dm);
    if (!st && !(zero = hd_tensor_number(hd_vm_ctx(vm), HD_I64, 0)))
        st = hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    hd_tensor *in[3] = {dm, x, zero};
    if (!st) st = hd_trun_t(vm, a.f->name, HD_OP_WHERE, in, 3, NULL, &r);
    hd_tensor_unref(x);
    hd_tensor_unref(dm);
    hd_tensor_unref(zero);
    return st ? st : more_value(r, out);
}

/* ---- flip, roll ---- */

/* x gathered along ax by idx[j] = n - 1 - j (flip), or (j - shift) mod n
 * (roll: element j moves to j + shift); idx made by ops on x's device */
static hd_status more_permute_axis(hd_vm *vm, hd_tensor *x, int ax, int flip, int64_t shift,
                                   hd_tensor **out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    int64_t n = x->shape[ax], s = n ? ((shift % n) + n) % n : 0;
    hd_place here = hd_place_of(x);
    hd_place prev = hd_place_push(ctx, here.backend ? here.backend : &hd_cpu_backend, here.device);
    hd_tensor *span = NULL, *idx = NULL;
    hd_status st;
    if (flip) {
        st = more_arange_from(vm, (double)(n - 1), -1.0, -1.0, &idx);
    } else { /* n - s, ..., 2n - s - 1, mod n */
        hd_tensor *nn = NULL;
        st = more_arange_from(vm, (double)(n - s), (double)(2 * n - s), 1.0, &span);
        if (!st && !(nn = hd_tensor_number(ctx, HD_I64, (double)(n ? n : 1))))
            st = hd_vm_from_ctx(vm, HD_ERR_MEMORY);
        if (!st) st = more_op2(vm, NULL, HD_OP_MOD, span, nn, &idx);
        hd_tensor_unref(nn);
    }
    hd_place_pop(ctx, prev);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = ax;
    hd_tensor *in[2] = {x, idx};
    if (!st) st = hd_trun_t(vm, NULL, HD_OP_INDEX_SELECT, in, 2, &at, out);
    hd_tensor_unref(span);
    hd_tensor_unref(idx);
    return st;
}

/* *x flipped along each of axes (none: every dim), or rolled by shifts[i]
 * along axes[i]; an axis out of range is an error naming fn. */
static hd_status more_permute_axes(hd_vm *vm, const char *fn, hd_tensor **x, const hd_attrs *at,
                                   const int64_t *shifts) {
    int nax = at->naxes ? at->naxes : (*x)->ndim;
    for (int i = 0; i < nax; i++) {
        int ax = at->naxes ? more_norm_axis(at->axes[i], (*x)->ndim) : i;
        if (ax < 0 || ax >= (*x)->ndim)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: axis %lld is out of range for %d dims", fn,
                               (long long)at->axes[i], (*x)->ndim);
        hd_tensor *r = NULL;
        if (more_permute_axis(vm, *x, ax, !shifts, shifts ? shifts[i] : 0, &r))
            return HD_ERR_RUNTIME;
        hd_tensor_unref(*x);
        *x = r;
    }
    return HD_OK;
}

static hd_status more_done(hd_status st, hd_tensor *x, hd_value *out) {
    if (!st) return more_value(x, out);
    hd_tensor_unref(x);
    return st;
}

static HD_TF_FN(tf_flip) {
    HD_TARGS_BIND(a); /* x, axis= */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    hd_tensor *x = NULL;
    if (hd_targ_axes(vm, &a, 1, &at) || hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st = more_permute_axes(vm, "flip", &x, &at, NULL); /* x changes: read after */
    return more_done(st, x, out);
}

/* roll over the flattened x, shape kept */
static hd_status more_roll_flat(hd_vm *vm, hd_tensor *x, int64_t shift, hd_tensor **out) {
    int64_t n = x->numel;
    hd_tensor *flat = NULL, *r = NULL;
    hd_status st = hd_treshape(hd_vm_ctx(vm), x, &n, 1, &flat) ? hd_tfail(vm, "roll") : HD_OK;
    if (!st) st = more_permute_axis(vm, flat, 0, 0, shift, &r);
    if (!st && hd_treshape(hd_vm_ctx(vm), r, x->shape, x->ndim, out)) st = hd_tfail(vm, "roll");
    hd_tensor_unref(flat);
    hd_tensor_unref(r);
    return st;
}

static HD_TF_FN(tf_roll) {
    HD_TARGS_BIND(a); /* x, shifts, axis= */
    int64_t shifts[HD_MAX_DIMS];
    int ns;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    hd_tensor *x = NULL, *r = NULL;
    if (hd_targ_shape(vm, &a, 1, shifts, &ns) || hd_targ_axes(vm, &a, 2, &at) ||
        hd_targ_tensor(vm, &a, 0, &x))
        return HD_ERR_RUNTIME;
    hd_status st = HD_OK;
    if (!at.naxes) {
        st = ns == 1
                 ? more_roll_flat(vm, x, shifts[0], &r)
                 : hd_vm_error(vm, HD_ERR_RUNTIME, "roll: one shift without axis, %d given", ns);
        hd_tensor_unref(x);
        return more_done(st, r, out);
    }
    if (ns != at.naxes)
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "roll: %d shifts for %d axes", ns, at.naxes);
    if (!st) st = more_permute_axes(vm, "roll", &x, &at, shifts);
    return more_done(st, x, out);
}

/* ---- tile, repeat ---- */

/* dim ax of x repeated r times as a whole: [.., s, ..] -> [.., 1, s, ..]
 * -> expand [.., r, s, ..] -> [.., r s, ..] (expand's gradient sums) */
static hd_status more_tile_axis(hd_vm *vm, hd_tensor *x, int ax, int64_t r, hd_tensor **out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (x->ndim + 1 > HD_MAX_DIMS)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "tile: tensors have at most %d dims", HD_MAX_DIMS);
    int64_t s[HD_MAX_DIMS], t[HD_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i == ax) s[nd++] = 1;
        s[nd++] = x->shape[i];
    }
    memcpy(t, s, sizeof s);
    t[ax] = r;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    memcpy(at.shape, t, (size_t)nd * sizeof *t);
    at.nshape = nd;
    hd_tensor *v = NULL, *e = NULL;
    hd_status st = hd_treshape(ctx, x, s, nd, &v) ? hd_tfail(vm, "tile") : HD_OK;
    if (!st) st = more_op1(vm, "tile", HD_OP_EXPAND, v, &at, &e);
    int64_t f[HD_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) f[i] = x->shape[i] * (i == ax ? r : 1);
    if (!st && hd_treshape(ctx, e, f, x->ndim, out)) st = hd_tfail(vm, "tile");
    hd_tensor_unref(v);
    hd_tensor_unref(e);
    return st;
}

/* tile(x, reps) and x.repeat(*reps): NumPy's tile, PyTorch's repeat (reps
 * longer than x's dims add leading dims) */
static HD_TF_FN(tf_tile) {
    HD_TARGS_BIND(a); /* x, *reps */
    int64_t reps[HD_MAX_DIMS], shape[HD_MAX_DIMS];
    int nr;
    hd_tensor *x = NULL, *v = NULL;
    if (hd_targ_shape(vm, &a, 1, reps, &nr) || hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st = HD_OK;
    for (int i = 0; i < nr && !st; i++)
        if (reps[i] < 0)
            st = hd_vm_error(vm, HD_ERR_RUNTIME, "%s: repetitions must be >= 0, got %lld",
                             a.f->name, (long long)reps[i]);
    int nd = nr > x->ndim ? nr : x->ndim;
    for (int i = 0; i < nd; i++) { /* x's shape with leading 1s */
        int xi = i - (nd - x->ndim);
        shape[i] = xi >= 0 ? x->shape[xi] : 1;
    }
    if (!st && hd_treshape(hd_vm_ctx(vm), x, shape, nd, &v)) st = hd_tfail(vm, a.f->name);
    hd_tensor_unref(x);
    for (int i = 0; i < nd && !st; i++) {
        int ri = i - (nd - nr);
        int64_t r = ri >= 0 ? reps[ri] : 1;
        if (r == 1) continue;
        hd_tensor *t = NULL;
        if (!(st = more_tile_axis(vm, v, i, r, &t))) {
            hd_tensor_unref(v);
            v = t;
        }
    }
    if (st) {
        hd_tensor_unref(v);
        return st;
    }
    return more_value(v, out);
}

/* ---- norm ---- */

/* p: a number (inf and -inf too) or "fro" (2) / "inf" / "-inf" */
static hd_status more_norm_p(hd_vm *vm, const hd_targs *a, double *p) {
    hd_value v = a->v[1];
    if (v.type == HD_V_STR) {
        const char *s = hd_as_str(v)->chars;
        if (!strcmp(s, "fro")) return *p = 2, HD_OK;
        if (!strcmp(s, "inf")) return *p = INFINITY, HD_OK;
        if (!strcmp(s, "-inf")) return *p = -INFINITY, HD_OK;
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "norm: p must be a number, \"fro\", \"inf\" or \"-inf\", got \"%s\"", s);
    }
    return hd_targ_float(vm, a, 1, 2.0, p);
}

/* The p-norm of x over at's axes into *r; t holds the temporaries. */
static hd_status more_norm_of(hd_vm *vm, hd_tensor *x, double p, const hd_attrs *at,
                              hd_tensor *t[3], hd_tensor **r) {
    hd_status st;
    if (p == 2) { /* sqrt(sum(x x)) */
        if ((st = more_op2(vm, "norm", HD_OP_MUL, x, x, &t[0])) ||
            (st = more_op1(vm, "norm", HD_OP_SUM, t[0], at, &t[1])))
            return st;
        return more_op1(vm, "norm", HD_OP_SQRT, t[1], NULL, r);
    }
    if (p == 0) { /* the nonzero count, in x's dtype */
        if ((st = more_op_num(vm, "norm", HD_OP_NE, x, 0, &t[0])) ||
            (st = more_op1(vm, "norm", HD_OP_SUM, t[0], at, &t[1])))
            return st;
        return hd_op_cast(hd_vm_ctx(vm), t[1], x->dtype, r) ? hd_tfail(vm, "norm") : HD_OK;
    }
    if ((st = more_op1(vm, "norm", HD_OP_ABS, x, NULL, &t[0]))) return st;
    if (isinf(p)) /* max or min of |x| */
        return more_op1(vm, "norm", p > 0 ? HD_OP_MAX : HD_OP_MIN, t[0], at, r);
    if (p == 1) return more_op1(vm, "norm", HD_OP_SUM, t[0], at, r);
    /* sum(|x|^p)^(1/p) */
    if ((st = more_op_num(vm, "norm", HD_OP_POW, t[0], p, &t[1])) ||
        (st = more_op1(vm, "norm", HD_OP_SUM, t[1], at, &t[2])))
        return st;
    return more_op_num(vm, "norm", HD_OP_POW, t[2], 1.0 / p, r);
}

static HD_TF_FN(tf_norm) {
    HD_TARGS_BIND(a); /* x, p=, axis=, keepdim= */
    double p;
    int keep;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (more_norm_p(vm, &a, &p) || hd_targ_axes(vm, &a, 2, &at) ||
        hd_targ_bool(vm, &a, 3, 0, &keep))
        return HD_ERR_RUNTIME;
    at.keepdim = keep;
    hd_tensor *x = NULL, *t[3] = {NULL, NULL, NULL}, *r = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st =
        hd_dtype_is_float(x->dtype)
            ? more_norm_of(vm, x, p, &at, t, &r)
            : hd_vm_error(vm, HD_ERR_RUNTIME, "norm needs a float tensor, got %s (use x.float())",
                          hd_dtype_name(x->dtype));
    hd_tensor_unref(x);
    hd_tunref_all(t, 3);
    return st ? st : more_value(r, out);
}

static const hd_tfunc rows[] = {
    {"isnan", tf_isnan, "x", -1, HD_TF_BOTH},
    {"isinf", tf_isinf, "x", HD_OP_EQ, HD_TF_BOTH},
    {"isfinite", tf_isinf, "x", HD_OP_LT, HD_TF_BOTH},
    {"nan_to_num", tf_nan_to_num, "x, nan=, posinf=, neginf=", -1, HD_TF_BOTH},
    {"any", tf_any_all, "x, axis=, keepdim=", HD_OP_NE, HD_TF_BOTH},
    {"all", tf_any_all, "x, axis=, keepdim=", HD_OP_EQ, HD_TF_BOTH},
    {"tril", tf_tri, "x, diagonal=", HD_OP_LE, HD_TF_BOTH},
    {"triu", tf_tri, "x, diagonal=", HD_OP_GE, HD_TF_BOTH},
    {"flip", tf_flip, "x, axis=", -1, HD_TF_BOTH},
    {"roll", tf_roll, "x, shifts, axis=", -1, HD_TF_BOTH},
    {"tile", tf_tile, "x, *reps", -1, HD_TF_BOTH},
    {"repeat", tf_tile, "x, *reps", -1, HD_TF_METHOD},
    {"norm", tf_norm, "x, p=, axis=, keepdim=", -1, HD_TF_BOTH},
    {"isclose", tf_isclose, "a, b, rtol=, atol=, equal_nan=", -1, HD_TF_BOTH},
    {"allclose", tf_isclose, "a, b, rtol=, atol=, equal_nan=", HD_OP_EQ, HD_TF_BOTH},
};

const hd_tfunc_table hd_tfuncs_more = {rows, (int)(sizeof rows / sizeof rows[0])};
