/* Shape rules: for each op, validate the inputs and attributes and decide
 * the output's dtype and shape and the dtype each input is cast to. They
 * read metadata only, so they work on symbolic tensors too. */
#include "hd_op.h"

#include <math.h>
#include <string.h>

#define SHAPE_FN(name)                                                                             \
    hd_status hd_shape_##name(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,                \
                              const hd_attrs *attrs, hd_op_plan *plan)

static void plan_set(hd_op_plan *plan, hd_dtype dt, const int64_t *shape, int ndim) {
    plan->dtype = dt;
    plan->ndim = ndim;
    if (ndim) memcpy(plan->shape, shape, (size_t)ndim * sizeof *shape);
    for (int i = 0; i < HD_OP_MAX_IN; i++) plan->in_dtype[i] = -1;
}

static hd_prio prio_of(const hd_tensor *t) {
    if (t->number) return HD_PRIO_NUMBER;
    return t->ndim == 0 ? HD_PRIO_ZERODIM : HD_PRIO_TENSOR;
}

static hd_dtype promote_inputs(hd_tensor *const *in, int n) {
    hd_promo p;
    hd_promo_init(&p);
    for (int i = 0; i < n; i++) hd_promo_add(&p, in[i]->dtype, prio_of(in[i]));
    return hd_promo_result(&p);
}

static hd_dtype float_of(hd_dtype dt) {
    return hd_dtype_is_float(dt) ? dt : HD_F32;
}

static hd_status err_dtype(hd_ctx *ctx, hd_op op, hd_dtype dt) {
    return hd_error(ctx, HD_ERR_RUNTIME, "%s is not defined for %s tensors", hd_op_name(op),
                    hd_dtype_name(dt));
}

static hd_status check_shape_attr(hd_ctx *ctx, hd_op op, const hd_attrs *attrs) {
    if (attrs->nshape < 0 || attrs->nshape > HD_MAX_DIMS)
        return hd_error(ctx, HD_ERR_ARGUMENT, "%s: at most %d dims, got %d", hd_op_name(op),
                        HD_MAX_DIMS, attrs->nshape);
    for (int i = 0; i < attrs->nshape; i++)
        if (attrs->shape[i] < 0)
            return hd_error(ctx, HD_ERR_ARGUMENT, "%s: negative dimension %lld in shape",
                            hd_op_name(op), (long long)attrs->shape[i]);
    return HD_OK;
}

/* ---- creation ---- */

SHAPE_FN(create) {
    HD_UNUSED(in);
    HD_UNUSED(nin);
    if (check_shape_attr(ctx, op, attrs)) return ctx->status;
    if ((op == HD_OP_RAND || op == HD_OP_RANDN) && !hd_dtype_is_float(attrs->dtype))
        return hd_error(ctx, HD_ERR_RUNTIME, "%s needs a float dtype, got %s", hd_op_name(op),
                        hd_dtype_name(attrs->dtype));
    if (op == HD_OP_EYE && attrs->nshape != 2)
        return hd_error(ctx, HD_ERR_ARGUMENT, "eye: shape must have 2 dims");
    plan_set(plan, attrs->dtype, attrs->shape, attrs->nshape);
    return HD_OK;
}

SHAPE_FN(arange) {
    HD_UNUSED(in);
    HD_UNUSED(nin);
    double a = attrs->scalar[0], b = attrs->scalar[1], step = attrs->scalar[2];
    if (!isfinite(a) || !isfinite(b) || !isfinite(step))
        return hd_error(ctx, HD_ERR_RUNTIME, "arange: bounds and step must be finite");
    if (step == 0) return hd_error(ctx, HD_ERR_RUNTIME, "arange: step must not be zero");
    double n = ceil((b - a) / step);
    if (n < 0) n = 0;
    if (n > 4e18) return hd_error(ctx, HD_ERR_MEMORY, "out of memory: arange of %g elements", n);
    int64_t shape[1] = {(int64_t)n};
    plan_set(plan, attrs->dtype, shape, 1);
    HD_UNUSED(op);
    return HD_OK;
}

SHAPE_FN(linspace) {
    HD_UNUSED(in);
    HD_UNUSED(nin);
    if (attrs->ints[0] < 0) return hd_error(ctx, HD_ERR_RUNTIME, "linspace: n must be >= 0");
    if (!hd_dtype_is_float(attrs->dtype)) return err_dtype(ctx, op, attrs->dtype);
    int64_t shape[1] = {attrs->ints[0]};
    plan_set(plan, attrs->dtype, shape, 1);
    return HD_OK;
}

/* ---- elementwise ---- */

SHAPE_FN(unary_same) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    HD_UNUSED(ctx);
    HD_UNUSED(op);
    plan_set(plan, in[0]->dtype, in[0]->shape, in[0]->ndim);
    return HD_OK;
}

SHAPE_FN(all_reduce) {
    HD_UNUSED(nin);
    if (attrs->ints[0] < 0 || attrs->ints[0] > 3)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s: no reduction %lld", hd_op_name(op),
                        (long long)attrs->ints[0]);
    if (attrs->ints[1] && !hd_dtype_is_float(in[0]->dtype))
        return hd_error(ctx, HD_ERR_RUNTIME, "%s: the mean needs a float tensor, got %s",
                        hd_op_name(op), hd_dtype_name(in[0]->dtype));
    plan_set(plan, in[0]->dtype, in[0]->shape, in[0]->ndim);
    return HD_OK;
}

SHAPE_FN(unary_signed) {
    if (in[0]->dtype == HD_BOOL) return err_dtype(ctx, op, HD_BOOL);
    return hd_shape_unary_same(ctx, op, in, nin, attrs, plan);
}

SHAPE_FN(unary_float) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    HD_UNUSED(ctx);
    HD_UNUSED(op);
    hd_dtype dt = float_of(in[0]->dtype);
    plan_set(plan, dt, in[0]->shape, in[0]->ndim);
    plan->in_dtype[0] = dt;
    return HD_OK;
}

SHAPE_FN(unary_bool) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    HD_UNUSED(ctx);
    HD_UNUSED(op);
    plan_set(plan, HD_BOOL, in[0]->shape, in[0]->ndim);
    plan->in_dtype[0] = HD_BOOL;
    return HD_OK;
}

SHAPE_FN(cast) {
    HD_UNUSED(nin);
    HD_UNUSED(op);
    if ((unsigned)attrs->dtype >= HD_DTYPE_COUNT)
        return hd_error(ctx, HD_ERR_ARGUMENT, "to: unknown dtype");
    plan_set(plan, attrs->dtype, in[0]->shape, in[0]->ndim);
    return HD_OK;
}

static hd_status binary_plan(hd_ctx *ctx, hd_tensor *const *in, hd_dtype compute, hd_dtype out,
                             hd_op_plan *plan) {
    int64_t shape[HD_MAX_DIMS];
    int nd;
    if (hd_broadcast_shapes(ctx, in[0]->shape, in[0]->ndim, in[1]->shape, in[1]->ndim, shape, &nd))
        return ctx->status;
    plan_set(plan, out, shape, nd);
    plan->in_dtype[0] = plan->in_dtype[1] = compute;
    return HD_OK;
}

SHAPE_FN(binary) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    HD_UNUSED(op);
    hd_dtype dt = promote_inputs(in, 2);
    return binary_plan(ctx, in, dt, dt, plan);
}

SHAPE_FN(binary_num) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    hd_dtype dt = promote_inputs(in, 2);
    if (dt == HD_BOOL) return err_dtype(ctx, op, dt);
    return binary_plan(ctx, in, dt, dt, plan);
}

SHAPE_FN(binary_float) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    HD_UNUSED(op);
    hd_dtype dt = float_of(promote_inputs(in, 2));
    return binary_plan(ctx, in, dt, dt, plan);
}

SHAPE_FN(compare) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    HD_UNUSED(op);
    return binary_plan(ctx, in, promote_inputs(in, 2), HD_BOOL, plan);
}

SHAPE_FN(where) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    HD_UNUSED(op);
    int64_t s1[HD_MAX_DIMS], s2[HD_MAX_DIMS];
    int n1, n2;
    if (hd_broadcast_shapes(ctx, in[0]->shape, in[0]->ndim, in[1]->shape, in[1]->ndim, s1, &n1) ||
        hd_broadcast_shapes(ctx, s1, n1, in[2]->shape, in[2]->ndim, s2, &n2))
        return ctx->status;
    hd_dtype dt = promote_inputs(in + 1, 2);
    plan_set(plan, dt, s2, n2);
    plan->in_dtype[0] = HD_BOOL;
    plan->in_dtype[1] = plan->in_dtype[2] = dt;
    return HD_OK;
}

/* ---- reductions ---- */

/* Which axes a reduction covers, as a bitmask over t's dims; duplicates
 * and out-of-range axes are errors. naxes == 0 means all. */
static hd_status reduce_mask(hd_ctx *ctx, hd_op op, const hd_tensor *t, const hd_attrs *attrs,
                             unsigned *mask) {
    *mask = 0;
    if (attrs->naxes < 0 || attrs->naxes > HD_MAX_DIMS)
        return hd_error(ctx, HD_ERR_ARGUMENT, "%s: too many axes", hd_op_name(op));
    if (attrs->naxes == 0) {
        *mask = (1u << t->ndim) - 1;
        return HD_OK;
    }
    for (int i = 0; i < attrs->naxes; i++) {
        int a;
        if (hd_norm_axis(ctx, attrs->axes[i], t->ndim, &a)) return ctx->status;
        if (t->ndim == 0) continue;
        if (*mask & (1u << a))
            return hd_error(ctx, HD_ERR_RUNTIME, "%s: axis %d appears twice", hd_op_name(op), a);
        *mask |= 1u << a;
    }
    return HD_OK;
}

static hd_status reduce_plan(hd_ctx *ctx, hd_op op, hd_tensor *const *in, const hd_attrs *attrs,
                             hd_dtype out, int cast, hd_op_plan *plan) {
    unsigned mask;
    if (reduce_mask(ctx, op, in[0], attrs, &mask)) return ctx->status;
    int64_t shape[HD_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < in[0]->ndim; i++) {
        if (!(mask & (1u << i)))
            shape[nd++] = in[0]->shape[i];
        else if (attrs->keepdim)
            shape[nd++] = 1;
    }
    plan_set(plan, out, shape, nd);
    if (cast) plan->in_dtype[0] = out;
    return HD_OK;
}

/* max, min, argmax, argmin have no value over zero elements. */
static hd_status reduce_nonempty(hd_ctx *ctx, hd_op op, hd_tensor *const *in,
                                 const hd_attrs *attrs) {
    unsigned mask;
    if (reduce_mask(ctx, op, in[0], attrs, &mask)) return ctx->status;
    for (int i = 0; i < in[0]->ndim; i++)
        if ((mask & (1u << i)) && in[0]->shape[i] == 0)
            return hd_error(ctx, HD_ERR_RUNTIME, "%s over an empty axis has no value",
                            hd_op_name(op));
    return HD_OK;
}

SHAPE_FN(reduce_sum) {
    HD_UNUSED(nin);
    hd_dtype dt = hd_dtype_is_float(in[0]->dtype) ? in[0]->dtype : HD_I64;
    return reduce_plan(ctx, op, in, attrs, dt, 1, plan);
}

SHAPE_FN(reduce_float) {
    HD_UNUSED(nin);
    if (op == HD_OP_LOGSUMEXP && reduce_nonempty(ctx, op, in, attrs)) return ctx->status;
    return reduce_plan(ctx, op, in, attrs, float_of(in[0]->dtype), 1, plan);
}

SHAPE_FN(reduce_same) {
    HD_UNUSED(nin);
    if (reduce_nonempty(ctx, op, in, attrs)) return ctx->status;
    return reduce_plan(ctx, op, in, attrs, in[0]->dtype, 0, plan);
}

SHAPE_FN(reduce_arg) {
    HD_UNUSED(nin);
    if (attrs->naxes > 1)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s takes one axis, got %d", hd_op_name(op),
                        attrs->naxes);
    if (reduce_nonempty(ctx, op, in, attrs)) return ctx->status;
    return reduce_plan(ctx, op, in, attrs, HD_I64, 0, plan);
}

/* ---- matmul ---- */

SHAPE_FN(matmul) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    const hd_tensor *a = in[0], *b = in[1];
    char sa[128], sb[128];
    if (a->ndim == 0 || b->ndim == 0)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "matmul needs tensors of at least 1 dim, got %s and %s",
                        hd_shape_str(a->shape, a->ndim, sa, sizeof sa),
                        hd_shape_str(b->shape, b->ndim, sb, sizeof sb));
    hd_dtype dt = promote_inputs(in, 2);
    if (dt == HD_BOOL) return err_dtype(ctx, op, dt);
    int64_t m = a->ndim == 1 ? 1 : a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
    int64_t k2 = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
    int64_t n = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
    if (k != k2)
        return hd_error(ctx, HD_ERR_RUNTIME, "matmul shapes %s and %s do not agree",
                        hd_shape_str(a->shape, a->ndim, sa, sizeof sa),
                        hd_shape_str(b->shape, b->ndim, sb, sizeof sb));
    int64_t batch[HD_MAX_DIMS], shape[HD_MAX_DIMS];
    int nb = 0;
    int na_b = a->ndim > 2 ? a->ndim - 2 : 0, nb_b = b->ndim > 2 ? b->ndim - 2 : 0;
    if (hd_broadcast_shapes(ctx, a->shape, na_b, b->shape, nb_b, batch, &nb)) {
        return hd_error(ctx, HD_ERR_RUNTIME, "matmul batch dims of %s and %s do not broadcast",
                        hd_shape_str(a->shape, a->ndim, sa, sizeof sa),
                        hd_shape_str(b->shape, b->ndim, sb, sizeof sb));
    }
    int nd = nb;
    memcpy(shape, batch, (size_t)nb * sizeof *batch);
    if (a->ndim > 1) shape[nd++] = m;
    if (b->ndim > 1) shape[nd++] = n;
    if (nd > HD_MAX_DIMS) return hd_error(ctx, HD_ERR_RUNTIME, "matmul: too many dims");
    plan_set(plan, dt, shape, nd);
    plan->in_dtype[0] = plan->in_dtype[1] = dt;
    return HD_OK;
}

/* ---- views ---- */

SHAPE_FN(reshape) {
    HD_UNUSED(nin);
    const hd_tensor *t = in[0];
    if (attrs->nshape < 0 || attrs->nshape > HD_MAX_DIMS)
        return hd_error(ctx, HD_ERR_ARGUMENT, "reshape: at most %d dims", HD_MAX_DIMS);
    int64_t shape[HD_MAX_DIMS], known = 1;
    int infer = -1;
    for (int i = 0; i < attrs->nshape; i++) {
        shape[i] = attrs->shape[i];
        if (shape[i] == -1) {
            if (infer >= 0) return hd_error(ctx, HD_ERR_RUNTIME, "reshape: only one -1 allowed");
            infer = i;
        } else if (shape[i] < 0) {
            return hd_error(ctx, HD_ERR_RUNTIME, "reshape: invalid dimension %lld",
                            (long long)shape[i]);
        } else if (shape[i] && known > INT64_MAX / shape[i]) {
            return hd_error(ctx, HD_ERR_RUNTIME, "reshape: shape too large");
        } else {
            known *= shape[i];
        }
    }
    char sa[128], sb[128];
    if (infer >= 0) {
        if (known == 0 || t->numel % known)
            return hd_error(ctx, HD_ERR_RUNTIME, "cannot reshape %s (%lld elements) into %s",
                            hd_shape_str(t->shape, t->ndim, sa, sizeof sa), (long long)t->numel,
                            hd_shape_str(attrs->shape, attrs->nshape, sb, sizeof sb));
        shape[infer] = t->numel / known;
        known *= shape[infer];
    }
    if (known != t->numel)
        return hd_error(ctx, HD_ERR_RUNTIME, "cannot reshape %s (%lld elements) into %s",
                        hd_shape_str(t->shape, t->ndim, sa, sizeof sa), (long long)t->numel,
                        hd_shape_str(attrs->shape, attrs->nshape, sb, sizeof sb));
    plan_set(plan, t->dtype, shape, attrs->nshape);
    HD_UNUSED(op);
    return HD_OK;
}

SHAPE_FN(permute) {
    HD_UNUSED(nin);
    HD_UNUSED(op);
    const hd_tensor *t = in[0];
    if (attrs->nshape != t->ndim)
        return hd_error(ctx, HD_ERR_RUNTIME, "permute: %d axes given for a tensor of %d dims",
                        attrs->nshape, t->ndim);
    int64_t shape[HD_MAX_DIMS];
    unsigned seen = 0;
    for (int i = 0; i < t->ndim; i++) {
        int a;
        if (hd_norm_axis(ctx, attrs->shape[i], t->ndim, &a)) return ctx->status;
        if (seen & (1u << a))
            return hd_error(ctx, HD_ERR_RUNTIME, "permute: axis %d appears twice", a);
        seen |= 1u << a;
        shape[i] = t->shape[a];
    }
    plan_set(plan, t->dtype, shape, t->ndim);
    return HD_OK;
}

SHAPE_FN(expand) {
    HD_UNUSED(nin);
    HD_UNUSED(op);
    const hd_tensor *t = in[0];
    char sa[128], sb[128];
    int n = attrs->nshape;
    if (n < t->ndim || n > HD_MAX_DIMS)
        return hd_error(
            ctx, HD_ERR_RUNTIME, "cannot expand %s to %s",
            hd_shape_str(t->shape, t->ndim, sa, sizeof sa),
            hd_shape_str(attrs->shape, n < 0 ? 0 : HD_MIN(n, HD_MAX_DIMS), sb, sizeof sb));
    int64_t shape[HD_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int j = i - (n - t->ndim);
        int64_t want = attrs->shape[i];
        int64_t have = j >= 0 ? t->shape[j] : 1;
        if (want == -1 && j >= 0) want = have;
        if (want < 0 || (have != 1 && have != want))
            return hd_error(ctx, HD_ERR_RUNTIME, "cannot expand %s to %s",
                            hd_shape_str(t->shape, t->ndim, sa, sizeof sa),
                            hd_shape_str(attrs->shape, n, sb, sizeof sb));
        shape[i] = want;
    }
    plan_set(plan, t->dtype, shape, n);
    return HD_OK;
}

SHAPE_FN(slice) {
    HD_UNUSED(nin);
    HD_UNUSED(op);
    const hd_tensor *t = in[0];
    int64_t shape[HD_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < t->ndim; i++) {
        int64_t st = attrs->start[i], step = attrs->step[i], len = attrs->len[i];
        if (step <= 0 || len < 0 || st < 0 ||
            (len > 0 && (st >= t->shape[i] || (len - 1) > (t->shape[i] - 1 - st) / step)))
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "index out of range: dim %d has size %lld (start %lld, step %lld, "
                            "length %lld)",
                            i, (long long)t->shape[i], (long long)st, (long long)step,
                            (long long)len);
        if (attrs->drop_mask & (1u << i)) {
            if (len != 1) return hd_error(ctx, HD_ERR_RUNTIME, "index out of range on dim %d", i);
            continue;
        }
        shape[nd++] = len;
    }
    plan_set(plan, t->dtype, shape, nd);
    return HD_OK;
}

/* ---- copying shape ops and indexing ---- */

SHAPE_FN(concat) {
    HD_UNUSED(op);
    if (nin < 1) return hd_error(ctx, HD_ERR_RUNTIME, "concat needs at least one tensor");
    const hd_tensor *t0 = in[0];
    if (t0->ndim == 0) return hd_error(ctx, HD_ERR_RUNTIME, "concat: 0-d tensors cannot be joined");
    int axis;
    if (hd_norm_axis(ctx, attrs->ints[0], t0->ndim, &axis)) return ctx->status;
    int64_t shape[HD_MAX_DIMS];
    memcpy(shape, t0->shape, sizeof shape);
    shape[axis] = 0;
    char sa[128], sb[128];
    for (int k = 0; k < nin; k++) {
        const hd_tensor *t = in[k];
        int ok = t->ndim == t0->ndim;
        for (int i = 0; ok && i < t->ndim; i++)
            if (i != axis && t->shape[i] != t0->shape[i]) ok = 0;
        if (!ok)
            return hd_error(ctx, HD_ERR_RUNTIME, "concat: shapes %s and %s differ outside axis %d",
                            hd_shape_str(t0->shape, t0->ndim, sa, sizeof sa),
                            hd_shape_str(t->shape, t->ndim, sb, sizeof sb), axis);
        shape[axis] += t->shape[axis];
    }
    hd_dtype dt = promote_inputs(in, nin);
    plan_set(plan, dt, shape, t0->ndim);
    plan->in_dtype[0] = dt;
    return HD_OK;
}

static hd_status check_index_dtype(hd_ctx *ctx, hd_op op, const hd_tensor *idx) {
    if (!hd_dtype_is_int(idx->dtype))
        return hd_error(ctx, HD_ERR_RUNTIME, "%s: indices must be an integer tensor, got %s",
                        hd_op_name(op), hd_dtype_name(idx->dtype));
    return HD_OK;
}

SHAPE_FN(index_select) {
    HD_UNUSED(nin);
    const hd_tensor *x = in[0], *idx = in[1];
    if (check_index_dtype(ctx, op, idx)) return ctx->status;
    if (x->ndim == 0) return hd_error(ctx, HD_ERR_RUNTIME, "cannot index a 0-d tensor");
    int axis;
    if (hd_norm_axis(ctx, attrs->ints[0], x->ndim, &axis)) return ctx->status;
    int nd = x->ndim - 1 + idx->ndim;
    if (nd > HD_MAX_DIMS) return hd_error(ctx, HD_ERR_RUNTIME, "index_select: too many dims");
    int64_t shape[HD_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < axis; i++) shape[k++] = x->shape[i];
    for (int i = 0; i < idx->ndim; i++) shape[k++] = idx->shape[i];
    for (int i = axis + 1; i < x->ndim; i++) shape[k++] = x->shape[i];
    plan_set(plan, x->dtype, shape, nd);
    plan->in_dtype[1] = HD_I64;
    return HD_OK;
}

SHAPE_FN(one_hot) {
    HD_UNUSED(nin);
    const hd_tensor *idx = in[0];
    if (check_index_dtype(ctx, op, idx)) return ctx->status;
    if (attrs->ints[0] <= 0)
        return hd_error(ctx, HD_ERR_RUNTIME, "one_hot: number of classes must be positive");
    if (idx->ndim + 1 > HD_MAX_DIMS) return hd_error(ctx, HD_ERR_RUNTIME, "one_hot: too many dims");
    int64_t shape[HD_MAX_DIMS];
    memcpy(shape, idx->shape, (size_t)idx->ndim * sizeof *shape);
    shape[idx->ndim] = attrs->ints[0];
    plan_set(plan, HD_I64, shape, idx->ndim + 1);
    plan->in_dtype[0] = HD_I64;
    return HD_OK;
}

/* ints[2] > 0: only the first ints[2] positions of each line (topk's). */
SHAPE_FN(argsort) {
    HD_UNUSED(nin);
    HD_UNUSED(op);
    int axis;
    if (hd_norm_axis(ctx, attrs->ints[0], in[0]->ndim, &axis)) return ctx->status;
    int64_t shape[HD_MAX_DIMS], k = attrs->ints[2], n = in[0]->ndim ? in[0]->shape[axis] : 1;
    if (k < 0 || k > n)
        return hd_error(ctx, HD_ERR_ARGUMENT, "argsort: %lld first positions of an axis of %lld",
                        (long long)k, (long long)n);
    memcpy(shape, in[0]->shape, (size_t)in[0]->ndim * sizeof *shape);
    if (k > 0 && in[0]->ndim) shape[axis] = k;
    plan_set(plan, HD_I64, shape, in[0]->ndim);
    plan->in_dtype[0] = in[0]->dtype;
    return HD_OK;
}

SHAPE_FN(assign) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    HD_UNUSED(op);
    const hd_tensor *dst = in[0], *src = in[1];
    int64_t shape[HD_MAX_DIMS];
    int nd;
    char sa[128], sb[128];
    if (hd_broadcast_shapes(ctx, dst->shape, dst->ndim, src->shape, src->ndim, shape, &nd) ||
        nd != dst->ndim || memcmp(shape, dst->shape, (size_t)nd * sizeof *shape))
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "cannot assign a tensor of shape %s to one of shape %s",
                        hd_shape_str(src->shape, src->ndim, sa, sizeof sa),
                        hd_shape_str(dst->shape, dst->ndim, sb, sizeof sb));
    plan_set(plan, dst->dtype, dst->shape, dst->ndim);
    plan->in_dtype[1] = dst->dtype;
    return HD_OK;
}

/* ---- nn ---- */

SHAPE_FN(softmax) {
    HD_UNUSED(nin);
    HD_UNUSED(op);
    int axis;
    if (hd_norm_axis(ctx, attrs->ints[0], in[0]->ndim, &axis)) return ctx->status;
    hd_dtype dt = float_of(in[0]->dtype);
    plan_set(plan, dt, in[0]->shape, in[0]->ndim);
    plan->in_dtype[0] = dt;
    return HD_OK;
}

SHAPE_FN(cross_entropy) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    const hd_tensor *x = in[0], *y = in[1];
    char sa[128], sb[128];
    if (check_index_dtype(ctx, op, y)) return ctx->status;
    int ok = (x->ndim == 2 && y->ndim == 1 && y->shape[0] == x->shape[0]) ||
             (x->ndim == 1 && y->ndim == 0);
    if (!ok)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "cross_entropy: logits %s and labels %s do not agree (want [N, C] and [N])",
                        hd_shape_str(x->shape, x->ndim, sa, sizeof sa),
                        hd_shape_str(y->shape, y->ndim, sb, sizeof sb));
    if (x->shape[x->ndim - 1] == 0)
        return hd_error(ctx, HD_ERR_RUNTIME, "cross_entropy: no classes");
    hd_dtype dt = float_of(x->dtype);
    plan_set(plan, dt, NULL, 0);
    plan->in_dtype[0] = dt;
    plan->in_dtype[1] = HD_I64;
    return HD_OK;
}

SHAPE_FN(mse) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    HD_UNUSED(op);
    int64_t shape[HD_MAX_DIMS];
    int nd;
    if (hd_broadcast_shapes(ctx, in[0]->shape, in[0]->ndim, in[1]->shape, in[1]->ndim, shape, &nd))
        return ctx->status;
    hd_dtype dt = float_of(promote_inputs(in, 2));
    plan_set(plan, dt, NULL, 0);
    plan->in_dtype[0] = plan->in_dtype[1] = dt;
    return HD_OK;
}

/* Output length of a sliding window; <= 0 means the window does not fit. */
static int64_t window_out(int64_t size, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
    /* geometry past 2^31 is nonsense from a bad call or file: no window */
    const int64_t lim = INT64_C(1) << 31;
    if (size > lim || k > lim || stride > lim || pad > lim || dil > lim) return 0;
    int64_t span = dil * (k - 1) + 1;
    if (size + 2 * pad < span) return 0;
    return (size + 2 * pad - span) / stride + 1;
}

SHAPE_FN(conv2d) {
    HD_UNUSED(op);
    char sa[128], sb[128];
    if (nin != 2 && nin != 3)
        return hd_error(ctx, HD_ERR_RUNTIME, "conv2d takes input, weight and an optional bias");
    const hd_tensor *x = in[0], *w = in[1];
    int64_t sh = attrs->ints[0], sw = attrs->ints[1], ph = attrs->ints[2], pw = attrs->ints[3];
    int64_t dh = attrs->ints[4] ? attrs->ints[4] : 1, dw = attrs->ints[5] ? attrs->ints[5] : 1;
    int64_t g = attrs->ints[6] ? attrs->ints[6] : 1;
    if (sh <= 0 || sw <= 0 || ph < 0 || pw < 0 || dh <= 0 || dw <= 0 || g <= 0)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "conv2d: stride, dilation and groups must be positive "
                        "and padding non-negative");
    /* C == C/groups * groups without the product, which a huge groups overflows */
    if (x->ndim != 4 || w->ndim != 4 || x->shape[1] % g || x->shape[1] / g != w->shape[1] ||
        w->shape[0] % g)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "conv2d: input %s and weight %s do not agree (want [N, C, H, W] and "
                        "[O, C/groups, kH, kW])",
                        hd_shape_str(x->shape, x->ndim, sa, sizeof sa),
                        hd_shape_str(w->shape, w->ndim, sb, sizeof sb));
    if (nin == 3 && (in[2]->ndim != 1 || in[2]->shape[0] != w->shape[0]))
        return hd_error(ctx, HD_ERR_RUNTIME, "conv2d: bias %s does not match %lld output channels",
                        hd_shape_str(in[2]->shape, in[2]->ndim, sa, sizeof sa),
                        (long long)w->shape[0]);
    int64_t oh = window_out(x->shape[2], w->shape[2], sh, ph, dh);
    int64_t ow = window_out(x->shape[3], w->shape[3], sw, pw, dw);
    if (oh <= 0 || ow <= 0)
        return hd_error(ctx, HD_ERR_RUNTIME, "conv2d: kernel %s is larger than padded input %s",
                        hd_shape_str(w->shape + 2, 2, sa, sizeof sa),
                        hd_shape_str(x->shape + 2, 2, sb, sizeof sb));
    hd_dtype dt = float_of(promote_inputs(in, nin));
    int64_t shape[4] = {x->shape[0], w->shape[0], oh, ow};
    plan_set(plan, dt, shape, 4);
    plan->in_dtype[0] = plan->in_dtype[1] = plan->in_dtype[2] = dt;
    return HD_OK;
}

SHAPE_FN(pool2d) {
    HD_UNUSED(nin);
    char sa[128];
    const hd_tensor *x = in[0];
    int64_t kh = attrs->ints[0], kw = attrs->ints[1];
    int64_t sh = attrs->ints[2] ? attrs->ints[2] : kh, sw = attrs->ints[3] ? attrs->ints[3] : kw;
    int64_t ph = attrs->ints[4], pw = attrs->ints[5];
    if (x->ndim != 4)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s: input %s must be [N, C, H, W]", hd_op_name(op),
                        hd_shape_str(x->shape, x->ndim, sa, sizeof sa));
    if (kh <= 0 || kw <= 0 || sh <= 0 || sw <= 0 || ph < 0 || pw < 0 || ph > kh / 2 || pw > kw / 2)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "%s: kernel and stride must be positive, padding at most half the kernel",
                        hd_op_name(op));
    int64_t oh = window_out(x->shape[2], kh, sh, ph, 1),
            ow = window_out(x->shape[3], kw, sw, pw, 1);
    if (oh <= 0 || ow <= 0)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s: kernel is larger than the input %s",
                        hd_op_name(op), hd_shape_str(x->shape + 2, 2, sa, sizeof sa));
    hd_dtype dt = float_of(x->dtype);
    int64_t shape[4] = {x->shape[0], x->shape[1], oh, ow};
    plan_set(plan, dt, shape, 4);
    plan->in_dtype[0] = dt;
    return HD_OK;
}

SHAPE_FN(dropout) {
    HD_UNUSED(nin);
    HD_UNUSED(op);
    double p = attrs->scalar[0];
    if (!(p >= 0 && p <= 1)) return hd_error(ctx, HD_ERR_RUNTIME, "dropout: p must be in [0, 1]");
    hd_dtype dt = float_of(in[0]->dtype);
    plan_set(plan, dt, in[0]->shape, in[0]->ndim);
    plan->in_dtype[0] = dt;
    return HD_OK;
}

SHAPE_FN(layer_norm) {
    HD_UNUSED(op);
    char sa[128], sb[128];
    if (nin != 1 && nin != 3)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "layer_norm takes input and optionally weight and bias");
    const hd_tensor *x = in[0];
    int64_t k = attrs->ints[0] ? attrs->ints[0] : 1;
    if (k < 1 || k > x->ndim)
        return hd_error(ctx, HD_ERR_RUNTIME, "layer_norm: cannot normalise %lld dims of %s",
                        (long long)k, hd_shape_str(x->shape, x->ndim, sa, sizeof sa));
    for (int j = 1; j < nin; j++) {
        const hd_tensor *p = in[j];
        if (p->ndim != k || memcmp(p->shape, x->shape + x->ndim - k, (size_t)k * sizeof(int64_t)))
            return hd_error(ctx, HD_ERR_RUNTIME, "layer_norm: %s %s does not match input %s",
                            j == 1 ? "weight" : "bias",
                            hd_shape_str(p->shape, p->ndim, sa, sizeof sa),
                            hd_shape_str(x->shape, x->ndim, sb, sizeof sb));
    }
    hd_dtype dt = float_of(promote_inputs(in, nin));
    plan_set(plan, dt, x->shape, x->ndim);
    plan->in_dtype[0] = plan->in_dtype[1] = plan->in_dtype[2] = dt;
    return HD_OK;
}

/* attention (q, k, v[, mask]): q [..., L, E], k [..., S, E], v [..., S, Ev]
 * with the same leading dims; the additive mask broadcasts to [..., L, S].
 * The result is [..., L, Ev]. */
SHAPE_FN(attention) {
    HD_UNUSED(attrs);
    char sa[128], sb[128], sc[128];
    if (nin != 3 && nin != 4)
        return hd_error(ctx, HD_ERR_RUNTIME, "attention takes q, k, v and optionally a mask");
    const hd_tensor *q = in[0], *k = in[1], *v = in[2];
    int nd = q->ndim;
    int ok = nd >= 2 && k->ndim == nd && v->ndim == nd;
    for (int d = 0; ok && d < nd - 2; d++)
        ok = k->shape[d] == q->shape[d] && v->shape[d] == q->shape[d];
    if (ok) ok = k->shape[nd - 1] == q->shape[nd - 1] && v->shape[nd - 2] == k->shape[nd - 2];
    if (!ok)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "attention: q %s, k %s and v %s do not agree (want [..., L, E], "
                        "[..., S, E] and [..., S, Ev] with the same leading dims)",
                        hd_shape_str(q->shape, q->ndim, sa, sizeof sa),
                        hd_shape_str(k->shape, k->ndim, sb, sizeof sb),
                        hd_shape_str(v->shape, v->ndim, sc, sizeof sc));
    int64_t ss[HD_MAX_DIMS], b[HD_MAX_DIMS];
    int nb;
    memcpy(ss, q->shape, (size_t)nd * sizeof *ss);
    ss[nd - 1] = k->shape[nd - 2];
    if (nin == 4 && (hd_broadcast_shapes(ctx, ss, nd, in[3]->shape, in[3]->ndim, b, &nb) ||
                     nb != nd || memcmp(b, ss, (size_t)nd * sizeof *b)))
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "attention: the mask %s does not broadcast to the scores' shape %s",
                        hd_shape_str(in[3]->shape, in[3]->ndim, sa, sizeof sa),
                        hd_shape_str(ss, nd, sb, sizeof sb));
    if (nin == 4 && in[3]->dtype == HD_BOOL)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "attention: the mask must be additive (a float tensor: 0 where a key may "
                        "be attended to, -inf where not)");
    hd_dtype dt = float_of(promote_inputs(in, nin));
    int64_t os[HD_MAX_DIMS];
    memcpy(os, q->shape, (size_t)nd * sizeof *os);
    os[nd - 1] = v->shape[nd - 1];
    plan_set(plan, dt, os, nd);
    for (int i = 0; i < nin; i++) plan->in_dtype[i] = dt;
    return HD_OK;
}

/* ---- gradients ---- */

/* Backward kernels compute in f64 when a float input is f64, else in f32. */
static hd_dtype grad_dtype(hd_tensor *const *in, int nin) {
    for (int i = 0; i < nin; i++)
        if (in[i]->dtype == HD_F64) return HD_F64;
    return HD_F32;
}

static hd_status grad_need_float(hd_ctx *ctx, hd_op op, const hd_tensor *t) {
    if (!hd_dtype_is_float(t->dtype)) return err_dtype(ctx, op, t->dtype);
    return HD_OK;
}

static int same_shape(const hd_tensor *a, const int64_t *shape, int ndim) {
    return a->ndim == ndim && (ndim == 0 || !memcmp(a->shape, shape, (size_t)ndim * sizeof *shape));
}

static hd_status grad_shape_mismatch(hd_ctx *ctx, hd_op op, const int64_t *a, int na,
                                     const int64_t *b, int nb) {
    char sa[128], sb[128];
    return hd_error(ctx, HD_ERR_RUNTIME, "%s: shapes %s and %s do not agree", hd_op_name(op),
                    hd_shape_str(a, na, sa, sizeof sa), hd_shape_str(b, nb, sb, sizeof sb));
}

/* A metadata-only stand-in for a tensor of the given shape, so backward
 * rules can reuse the forward shape rules. */
static void grad_fake(hd_tensor *t, hd_dtype dt, const int64_t *shape, int ndim) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = hd_shape_numel(shape, ndim);
}

/* Output shaped like in[0]; every input float and of that shape. */
SHAPE_FN(grad_like) {
    for (int i = 0; i < nin; i++) {
        if (grad_need_float(ctx, op, in[i])) return ctx->status;
        if (!same_shape(in[i], in[0]->shape, in[0]->ndim))
            return grad_shape_mismatch(ctx, op, in[0]->shape, in[0]->ndim, in[i]->shape,
                                       in[i]->ndim);
    }
    int axis;
    if ((op == HD_OP_SOFTMAX_BWD || op == HD_OP_LOG_SOFTMAX_BWD || op == HD_OP_CUMPROD_BWD) &&
        hd_norm_axis(ctx, attrs->ints[0], in[0]->ndim, &axis))
        return ctx->status;
    hd_dtype dt = grad_dtype(in, nin);
    plan_set(plan, dt, in[0]->shape, in[0]->ndim);
    for (int i = 0; i < nin; i++) plan->in_dtype[i] = dt;
    return HD_OK;
}

SHAPE_FN(index_add) {
    HD_UNUSED(nin);
    const hd_tensor *src = in[0], *idx = in[1];
    if (grad_need_float(ctx, op, src) || check_index_dtype(ctx, op, idx) ||
        check_shape_attr(ctx, op, attrs))
        return ctx->status;
    int nd = attrs->nshape, axis;
    if (nd < 1) return hd_error(ctx, HD_ERR_RUNTIME, "index_add: the output needs a dim");
    if (hd_norm_axis(ctx, attrs->ints[0], nd, &axis)) return ctx->status;
    int64_t want[HD_MAX_DIMS];
    int k = 0;
    if (nd - 1 + idx->ndim > HD_MAX_DIMS)
        return hd_error(ctx, HD_ERR_RUNTIME, "index_add: too many dims");
    for (int i = 0; i < axis; i++) want[k++] = attrs->shape[i];
    for (int i = 0; i < idx->ndim; i++) want[k++] = idx->shape[i];
    for (int i = axis + 1; i < nd; i++) want[k++] = attrs->shape[i];
    if (!same_shape(src, want, k))
        return grad_shape_mismatch(ctx, op, src->shape, src->ndim, want, k);
    hd_dtype dt = grad_dtype(in, 1);
    plan_set(plan, dt, attrs->shape, nd);
    plan->in_dtype[0] = dt;
    plan->in_dtype[1] = HD_I64;
    return HD_OK;
}

SHAPE_FN(cross_entropy_bwd) {
    HD_UNUSED(nin);
    hd_op_plan fwd;
    if (hd_shape_cross_entropy(ctx, HD_OP_CROSS_ENTROPY, in, 2, attrs, &fwd) ||
        grad_need_float(ctx, op, in[0]) || grad_need_float(ctx, op, in[2]))
        return ctx->status;
    if (in[2]->numel != 1)
        return hd_error(ctx, HD_ERR_RUNTIME, "cross_entropy_bwd: the gradient must be one element");
    hd_tensor *fl[2] = {in[0], in[2]};
    hd_dtype dt = grad_dtype(fl, 2);
    plan_set(plan, dt, in[0]->shape, in[0]->ndim);
    plan->in_dtype[0] = plan->in_dtype[2] = dt;
    plan->in_dtype[1] = HD_I64;
    return HD_OK;
}

/* conv2d_bwd_input (g, w) -> input shape; conv2d_bwd_weight (x, g) ->
 * weight shape; both given in attrs.shape and checked by running conv2d's
 * rule forward and comparing with g. */
SHAPE_FN(conv2d_bwd) {
    HD_UNUSED(nin);
    if (grad_need_float(ctx, op, in[0]) || grad_need_float(ctx, op, in[1])) return ctx->status;
    if (attrs->nshape != 4)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s: attrs.shape must have 4 dims", hd_op_name(op));
    int input = op == HD_OP_CONV2D_BWD_INPUT;
    const hd_tensor *g = input ? in[0] : in[1];
    hd_tensor fake, *fwd_in[2];
    grad_fake(&fake, g->dtype, attrs->shape, 4);
    fwd_in[0] = input ? &fake : in[0];
    fwd_in[1] = input ? in[1] : &fake;
    hd_op_plan fwd;
    if (hd_shape_conv2d(ctx, HD_OP_CONV2D, fwd_in, 2, attrs, &fwd)) return ctx->status;
    if (!same_shape(g, fwd.shape, fwd.ndim))
        return grad_shape_mismatch(ctx, op, g->shape, g->ndim, fwd.shape, fwd.ndim);
    hd_dtype dt = grad_dtype(in, 2);
    plan_set(plan, dt, attrs->shape, 4);
    plan->in_dtype[0] = plan->in_dtype[1] = dt;
    return HD_OK;
}

/* max_pool2d_bwd (x, g) -> x's shape; avg_pool2d_bwd (g) -> attrs.shape. */
SHAPE_FN(pool2d_bwd) {
    for (int i = 0; i < nin; i++)
        if (grad_need_float(ctx, op, in[i])) return ctx->status;
    int max = op == HD_OP_MAX_POOL2D_BWD;
    const hd_tensor *g = in[nin - 1];
    hd_tensor fake, *x = in[0];
    if (!max) {
        if (attrs->nshape != 4)
            return hd_error(ctx, HD_ERR_RUNTIME, "%s: attrs.shape must have 4 dims",
                            hd_op_name(op));
        grad_fake(&fake, g->dtype, attrs->shape, 4);
        x = &fake;
    }
    hd_op_plan fwd;
    hd_op fop = max ? HD_OP_MAX_POOL2D : HD_OP_AVG_POOL2D;
    if (hd_shape_pool2d(ctx, fop, &x, 1, attrs, &fwd)) return ctx->status;
    if (!same_shape(g, fwd.shape, fwd.ndim))
        return grad_shape_mismatch(ctx, op, g->shape, g->ndim, fwd.shape, fwd.ndim);
    hd_dtype dt = grad_dtype(in, nin);
    plan_set(plan, dt, x->shape, 4);
    for (int i = 0; i < nin; i++) plan->in_dtype[i] = dt;
    return HD_OK;
}

/* max_pool2d_select (x, h): h of x's shape -> max_pool2d's shape of x. */
SHAPE_FN(pool2d_sel) {
    HD_UNUSED(nin);
    for (int i = 0; i < 2; i++)
        if (grad_need_float(ctx, op, in[i])) return ctx->status;
    hd_tensor *x = in[0];
    if (!same_shape(in[1], x->shape, x->ndim))
        return grad_shape_mismatch(ctx, op, in[1]->shape, in[1]->ndim, x->shape, x->ndim);
    hd_op_plan fwd;
    if (hd_shape_pool2d(ctx, HD_OP_MAX_POOL2D, &x, 1, attrs, &fwd)) return ctx->status;
    hd_dtype dt = grad_dtype(in, 2);
    plan_set(plan, dt, fwd.shape, fwd.ndim);
    plan->in_dtype[0] = plan->in_dtype[1] = dt;
    return HD_OK;
}

/* layer_norm_bwd (x, g[, w]): ints[1] == 0 gives dx (x's shape), 1 gives
 * the weight's gradient (the normalized dims' shape). */
SHAPE_FN(layer_norm_bwd) {
    if (nin < 2 || nin > 3 || (attrs->ints[1] == 1 && nin != 2))
        return hd_error(ctx, HD_ERR_RUNTIME, "layer_norm_bwd takes x, g and, for dx, a weight");
    for (int i = 0; i < nin; i++)
        if (grad_need_float(ctx, op, in[i])) return ctx->status;
    const hd_tensor *x = in[0];
    if (!same_shape(in[1], x->shape, x->ndim))
        return grad_shape_mismatch(ctx, op, x->shape, x->ndim, in[1]->shape, in[1]->ndim);
    hd_tensor *fwd_in[3] = {in[0], nin == 3 ? in[2] : NULL, nin == 3 ? in[2] : NULL};
    hd_op_plan fwd; /* checks the normalized dims and the weight's shape */
    if (hd_shape_layer_norm(ctx, HD_OP_LAYER_NORM, fwd_in, nin == 3 ? 3 : 1, attrs, &fwd))
        return ctx->status;
    int k = (int)(attrs->ints[0] ? attrs->ints[0] : 1);
    hd_dtype dt = grad_dtype(in, nin);
    if (attrs->ints[1] == 1)
        plan_set(plan, dt, x->shape + x->ndim - k, k);
    else if (attrs->ints[1] == 0)
        plan_set(plan, dt, x->shape, x->ndim);
    else
        return hd_error(ctx, HD_ERR_RUNTIME, "layer_norm_bwd: ints[1] must be 0 or 1");
    for (int i = 0; i < nin; i++) plan->in_dtype[i] = dt;
    return HD_OK;
}

/* attention_bwd (q, k, v, y, g[, mask]): attention's inputs, its result y
 * and y's gradient g, with v as wide as q ([..., L, E] for y and g); the
 * result stacks dq, dk and dv along the rows: [..., L + 2 S, E]. */
SHAPE_FN(attention_bwd) {
    char sa[128], sb[128];
    if (nin != 5 && nin != 6)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "attention_bwd takes q, k, v, y, g and optionally a mask");
    for (int i = 0; i < nin; i++)
        if (grad_need_float(ctx, op, in[i])) return ctx->status;
    hd_tensor *fwd_in[4] = {in[0], in[1], in[2], nin == 6 ? in[5] : NULL};
    hd_op_plan fwd; /* checks q, k, v and the mask */
    if (hd_shape_attention(ctx, HD_OP_ATTENTION, fwd_in, nin == 6 ? 4 : 3, attrs, &fwd))
        return ctx->status;
    const hd_tensor *q = in[0], *k = in[1], *v = in[2];
    int nd = q->ndim;
    if (v->shape[nd - 1] != q->shape[nd - 1])
        return hd_error(ctx, HD_ERR_RUNTIME, "attention_bwd: v %s is not as wide as q %s",
                        hd_shape_str(v->shape, nd, sa, sizeof sa),
                        hd_shape_str(q->shape, nd, sb, sizeof sb));
    for (int i = 3; i < 5; i++)
        if (!same_shape(in[i], fwd.shape, fwd.ndim))
            return grad_shape_mismatch(ctx, op, fwd.shape, fwd.ndim, in[i]->shape, in[i]->ndim);
    int64_t os[HD_MAX_DIMS];
    memcpy(os, q->shape, (size_t)nd * sizeof *os);
    os[nd - 2] = q->shape[nd - 2] + 2 * k->shape[nd - 2];
    hd_dtype dt = grad_dtype(in, nin);
    plan_set(plan, dt, os, nd);
    for (int i = 0; i < nin; i++) plan->in_dtype[i] = dt;
    return HD_OK;
}

/* ---- linear algebra ---- */

/* LAPACK counts in int: each matrix dim and each packed result's length. */
#define LINALG_DIM_MAX INT32_MAX

static hd_status linalg_input(hd_ctx *ctx, hd_op op, const hd_tensor *a, int square) {
    char sa[128];
    if (a->dtype != HD_F32 && a->dtype != HD_F64)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "%s needs an f32 or f64 tensor, got %s (convert it "
                        "with .float() or .double())",
                        hd_op_name(op), hd_dtype_name(a->dtype));
    if (a->ndim < 2)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s needs a matrix or a batch of them, got shape %s",
                        hd_op_name(op), hd_shape_str(a->shape, a->ndim, sa, sizeof sa));
    int64_t m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1];
    if (square && m != n)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s needs square matrices, got shape %s",
                        hd_op_name(op), hd_shape_str(a->shape, a->ndim, sa, sizeof sa));
    if (m > LINALG_DIM_MAX / (n ? n : 1))
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "%s: a %lld x %lld matrix is larger than LAPACK "
                        "takes (2^31 elements)",
                        hd_op_name(op), (long long)m, (long long)n);
    return HD_OK;
}

/* The packed length of op's result for an m x n input (see hd_ops.def);
 * below 2^33, as m * n < 2^31. */
static int64_t linalg_packed(hd_op op, int64_t m, int64_t n, int full) {
    int64_t k = HD_MIN(m, n);
    switch (op) {
    case HD_OP_LINALG_QR: return full ? m * m + m * n : m * k + k * n; /* complete */
    case HD_OP_LINALG_SVD: return full ? m * m + k + n * n : m * k + k + k * n;
    case HD_OP_LINALG_EIGH: return n + n * n;
    default: return 2; /* slogdet */
    }
}

SHAPE_FN(linalg) {
    HD_UNUSED(nin);
    const hd_tensor *a = in[0];
    int square = op != HD_OP_LINALG_QR && op != HD_OP_LINALG_SVD;
    if (linalg_input(ctx, op, a, square)) return ctx->status;
    int64_t shape[HD_MAX_DIMS], m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1];
    int nd = a->ndim - 2;
    memcpy(shape, a->shape, (size_t)nd * sizeof *shape);
    switch (op) {
    case HD_OP_LINALG_INV:
    case HD_OP_LINALG_CHOLESKY: nd = a->ndim, shape[nd - 2] = m, shape[nd - 1] = n; break;
    case HD_OP_LINALG_DET: break;
    default: {
        int64_t len = linalg_packed(op, m, n, attrs->ints[0] != 0);
        if (op == HD_OP_LINALG_SVD && attrs->ints[0] && HD_MAX(m, n) > 46340)
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "%s: full matrices of %lld x %lld are larger "
                            "than LAPACK takes",
                            hd_op_name(op), (long long)m, (long long)n);
        shape[nd++] = len;
    }
    }
    plan_set(plan, a->dtype, shape, nd);
    plan->in_dtype[0] = a->dtype;
    return HD_OK;
}

/* A [.., n, n] and B [.., n, k] with the same batch dims (the language
 * broadcasts them) */
SHAPE_FN(linalg_solve) {
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    const hd_tensor *a = in[0], *b = in[1];
    char sa[128], sb[128];
    if (linalg_input(ctx, op, a, 1) || linalg_input(ctx, op, b, 0)) return ctx->status;
    int ok = a->ndim == b->ndim && a->dtype == b->dtype &&
             b->shape[b->ndim - 2] == a->shape[a->ndim - 1];
    for (int i = 0; ok && i < a->ndim - 2; i++) ok = a->shape[i] == b->shape[i];
    if (!ok)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "%s: A %s %s and B %s %s do not agree (want "
                        "[..., n, n] and [..., n, k] of one dtype)",
                        hd_op_name(op), hd_dtype_name(a->dtype),
                        hd_shape_str(a->shape, a->ndim, sa, sizeof sa), hd_dtype_name(b->dtype),
                        hd_shape_str(b->shape, b->ndim, sb, sizeof sb));
    plan_set(plan, a->dtype, b->shape, b->ndim);
    plan->in_dtype[0] = plan->in_dtype[1] = a->dtype;
    return HD_OK;
}
