/* CPU backward kernels (HD_KIND_GRAD): the parts of gradient rules that a
 * composition of forward ops would make slow or could not express. Shape
 * rules cast float inputs to f32 or f64 and integer ones to i64, so each
 * kernel exists for float and double (cpu_grad_tmpl.h); the output is a
 * fresh contiguous tensor. */
#include "cpu_blas.h"
#include "cpu_kernels.h"
#include "cpu_nn.h"
#include "hd_rng.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#define GR_CAT2(a, b) a##_##b
#define GR_CAT(a, b)  GR_CAT2(a, b)

/* An axis of a contiguous tensor seen as [outer, c, inner]. */
typedef struct {
    int64_t outer, c, inner;
} grad_axis;

/* 2-d pooling over planes = n * c planes of [h, w]. */
typedef struct {
    int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
} grad_pool;

/* conv2d: x [n, c, h, w], w [o, cg, kh, kw], output [n, o, oh, ow];
 * k = cg * kh * kw, p = oh * ow. */
typedef struct {
    int64_t n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups, og, k, p;
} grad_conv;

/* index_add: out [outer, a, inner], src [outer, nj, inner], ix [nj]. */
typedef struct {
    int64_t outer, a, nj, inner;
    int64_t *ix;
} grad_index;

static void grad_axis_make(const hd_tensor *t, const hd_attrs *attrs, grad_axis *ax) {
    int64_t a = attrs->ints[0] < 0 ? attrs->ints[0] + t->ndim : attrs->ints[0];
    ax->outer = ax->inner = 1;
    ax->c = t->ndim ? t->shape[a] : 1;
    for (int d = 0; d < t->ndim; d++) {
        if (d < a) ax->outer *= t->shape[d];
        if (d > a) ax->inner *= t->shape[d];
    }
}

static void grad_pool_make(const hd_tensor *dx, const hd_tensor *g, const hd_attrs *attrs,
                           grad_pool *p) {
    p->planes = dx->shape[0] * dx->shape[1], p->h = dx->shape[2], p->w = dx->shape[3];
    p->oh = g->shape[2], p->ow = g->shape[3];
    p->kh = attrs->ints[0], p->kw = attrs->ints[1];
    p->sh = attrs->ints[2] ? attrs->ints[2] : p->kh,
    p->sw = attrs->ints[3] ? attrs->ints[3] : p->kw;
    p->ph = attrs->ints[4], p->pw = attrs->ints[5];
}

static hd_status grad_conv_make(hd_ctx *ctx, const hd_tensor *x, const hd_tensor *w,
                                const hd_tensor *g, const hd_attrs *attrs, grad_conv *c) {
    c->n = x->shape[0], c->c = x->shape[1], c->h = x->shape[2], c->w = x->shape[3];
    c->o = w->shape[0], c->cg = w->shape[1], c->kh = w->shape[2], c->kw = w->shape[3];
    c->oh = g->shape[2], c->ow = g->shape[3];
    c->sh = attrs->ints[0], c->sw = attrs->ints[1], c->ph = attrs->ints[2], c->pw = attrs->ints[3];
    c->dh = attrs->ints[4] ? attrs->ints[4] : 1, c->dw = attrs->ints[5] ? attrs->ints[5] : 1;
    c->groups = attrs->ints[6] ? attrs->ints[6] : 1;
    c->og = c->o / c->groups;
    c->k = c->cg * c->kh * c->kw;
    c->p = c->oh * c->ow;
    if (c->og > INT_MAX || c->p > INT_MAX || c->k > INT_MAX || c->k * c->p > INT64_MAX / 8) {
        char sx[128], sw[128];
        return hd_error(
            ctx, HD_ERR_RUNTIME, "conv2d backward: input %s with weight %s is too large",
            hd_shape_str(x->shape, 4, sx, sizeof sx), hd_shape_str(w->shape, 4, sw, sizeof sw));
    }
    return HD_OK;
}

/* A 1x1 kernel with unit stride and no padding reads the input as it is. */
static int grad_conv_pointwise(const grad_conv *c) {
    return c->kh == 1 && c->kw == 1 && c->sh == 1 && c->sw == 1 && c->ph == 0 && c->pw == 0;
}

static hd_status grad_check_labels(hd_ctx *ctx, const int64_t *lab, int64_t ls, int64_t rows,
                                   int64_t c) {
    for (int64_t r = 0; r < rows; r++)
        if (lab[r * ls] < 0 || lab[r * ls] >= c)
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "cross_entropy: label %lld (sample %lld) is out of range for %lld "
                            "classes",
                            (long long)lab[r * ls], (long long)r, (long long)c);
    return HD_OK;
}

/* The geometry and the indices (copied, negative ones counted from the
 * end, each checked) of an index_add into out. */
static hd_status grad_index_make(hd_ctx *ctx, const hd_tensor *out, const hd_tensor *idx,
                                 const hd_attrs *attrs, grad_index *gi) {
    int axis;
    if (hd_norm_axis(ctx, attrs->ints[0], out->ndim, &axis)) return ctx->status;
    gi->outer = gi->inner = 1;
    for (int d = 0; d < out->ndim; d++) {
        if (d < axis) gi->outer *= out->shape[d];
        if (d > axis) gi->inner *= out->shape[d];
    }
    gi->a = out->shape[axis];
    gi->nj = idx->numel;
    gi->ix = hd_ctx_alloc(ctx, (size_t)(gi->nj ? gi->nj : 1) * sizeof(int64_t));
    if (!gi->ix) return ctx->status;
    int64_t strides[HD_MAX_DIMS];
    hd_contiguous_strides(idx->shape, idx->ndim, strides);
    hd_cpu_copy_strided(1, 8, idx->ndim, idx->shape, gi->ix, strides, hd_tensor_data(idx),
                        idx->strides);
    for (int64_t j = 0; j < gi->nj; j++) {
        int64_t v = gi->ix[j] < 0 ? gi->ix[j] + gi->a : gi->ix[j];
        if (v < 0 || v >= gi->a) {
            hd_status st = hd_error(ctx, HD_ERR_RUNTIME,
                                    "index_add: index %lld is out of range for axis %d of size "
                                    "%lld",
                                    (long long)gi->ix[j], axis, (long long)gi->a);
            hd_ctx_free(ctx, gi->ix, (size_t)(gi->nj ? gi->nj : 1) * sizeof(int64_t));
            return st;
        }
        gi->ix[j] = v;
    }
    return HD_OK;
}

#define GR_T   float
#define GR_S   f32
#define GR_F64 0
#include "cpu_grad_tmpl.h"
#undef GR_T
#undef GR_S
#undef GR_F64

#define GR_T   double
#define GR_S   f64
#define GR_F64 1
#include "cpu_grad_tmpl.h"
#undef GR_T
#undef GR_S
#undef GR_F64

#define GR_CALL(f64, name, ...) ((f64) ? name##_f64(__VA_ARGS__) : name##_f32(__VA_ARGS__))

/* Plans cast every float input to the output's dtype and indices to i64;
 * anything else means the kernel was reached without a plan. */
static hd_status grad_check_inputs(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in,
                                   int nin) {
    for (int i = 0; i < nin; i++) {
        int index = (op == HD_OP_INDEX_ADD || op == HD_OP_CROSS_ENTROPY_BWD) && i == 1;
        hd_dtype want = index ? HD_I64 : out->dtype;
        if (in[i]->dtype != want || !hd_tensor_is_cpu(in[i]))
            return hd_error(ctx, HD_ERR_RUNTIME, "%s: cpu kernel got a %s input for a %s result",
                            hd_op_name(op), hd_dtype_name(in[i]->dtype), hd_dtype_name(out->dtype));
    }
    return HD_OK;
}

hd_status hd_cpu_grad(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                      const hd_attrs *attrs) {
    if (!hd_cpu_grad_supports(op, out->dtype))
        return hd_error(ctx, HD_ERR_RUNTIME, "%s is not supported for %s tensors on cpu",
                        hd_op_name(op), hd_dtype_name(out->dtype));
    if (grad_check_inputs(ctx, op, out, in, nin)) return ctx->status;
    int f64 = out->dtype == HD_F64;
    switch (op) {
    case HD_OP_GELU_BWD:
    case HD_OP_TANH_BWD:
    case HD_OP_SIGMOID_BWD:
    case HD_OP_DROPOUT_BWD:
    case HD_OP_SOFTMAX_BWD:
    case HD_OP_LOG_SOFTMAX_BWD: return GR_CALL(f64, run_like, ctx, op, out, in, nin, attrs);
    case HD_OP_CROSS_ENTROPY_BWD: return GR_CALL(f64, run_ce, ctx, out, in);
    case HD_OP_INDEX_ADD: return GR_CALL(f64, run_index_add, ctx, out, in, attrs);
    case HD_OP_MAX_POOL2D_BWD:
    case HD_OP_AVG_POOL2D_BWD: return GR_CALL(f64, run_pool, ctx, op, out, in, nin, attrs);
    case HD_OP_MAX_POOL2D_SEL: return GR_CALL(f64, run_select, ctx, out, in, attrs);
    case HD_OP_CONV2D_BWD_INPUT:
    case HD_OP_CONV2D_BWD_WEIGHT: return GR_CALL(f64, run_conv, ctx, op, out, in, attrs);
    case HD_OP_LAYER_NORM_BWD: return GR_CALL(f64, run_ln, ctx, out, in, nin, attrs);
    case HD_OP_ATTENTION_BWD: return hd_cpu_attention_bwd(ctx, out, in, nin, attrs);
    default:
        return hd_error(ctx, HD_ERR_RUNTIME, "%s is not a cpu gradient kernel", hd_op_name(op));
    }
}

int hd_cpu_grad_supports(hd_op op, hd_dtype dt) {
    if ((unsigned)op >= HD_OP_COUNT || hd_op_infos[op].kind != HD_KIND_GRAD) return 0;
    return dt == HD_F32 || dt == HD_F64;
}
