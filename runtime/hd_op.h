/* hd_op: the op enum and info table generated from hd_ops.def, op
 * attributes, shape rules, and eager dispatch (hd_op_run). */
#ifndef HD_OP_H
#define HD_OP_H

#include "hd_tensor.h"

typedef enum {
#define X(NAME, name, arity, kind, shape, diff) HD_OP_##NAME,
#include "hd_ops.def"
#undef X
    HD_OP_COUNT
} hd_op;

typedef enum {
    HD_KIND_CREATE,  /* no inputs: full, arange, rand, ... */
    HD_KIND_UNARY,   /* elementwise, one input */
    HD_KIND_BINARY,  /* elementwise, two broadcast inputs */
    HD_KIND_COMPARE, /* elementwise, two broadcast inputs, bool output */
    HD_KIND_TERNARY, /* where */
    HD_KIND_REDUCE,  /* reductions over axes */
    HD_KIND_MATMUL,
    HD_KIND_VIEW,   /* shares storage, no kernel */
    HD_KIND_SHAPE,  /* copying shape ops: concat */
    HD_KIND_INDEX,  /* index_select, one_hot, assign */
    HD_KIND_NN,     /* softmax family, losses, conv, pooling, dropout, layer_norm */
    HD_KIND_GRAD,   /* backward kernels the gradient rules use (index_add, conv2d_bwd_*, ...) */
    HD_KIND_LINALG, /* matrix decompositions and solves: LAPACK */
    HD_KIND_COUNT
} hd_op_kind;

/* Attributes of one op application. Which fields an op reads is written
 * beside it in hd_ops.def. Zero-initialise, then set what the op needs. */
typedef struct hd_attrs {
    int64_t axes[HD_MAX_DIMS]; /* reductions: axes (may be negative) */
    int naxes;                 /* 0: reduce over all axes */
    int keepdim;
    int64_t shape[HD_MAX_DIMS]; /* reshape/expand/create: shape; permute: order */
    int nshape;
    double scalar[4]; /* full: value; clamp: lo, hi; arange: start, stop, step; eps; p */
    int64_t ints[8];  /* axis, correction, conv/pool geometry, classes, training */
    hd_dtype dtype;   /* cast target; creation dtype */
    /* slice: for every input dim, start and step, and the output length;
     * dims whose bit is set in drop_mask were indexed by an integer and are
     * removed from the output. */
    int64_t start[HD_MAX_DIMS], step[HD_MAX_DIMS], len[HD_MAX_DIMS];
    uint32_t drop_mask;
} hd_attrs;

/* layer_norm's (and layer_norm_bwd's) epsilon: scalar[0], 0 meaning the
 * default 1e-5; every kernel and formula reads it through this. */
static inline double hd_layer_norm_eps(const hd_attrs *a) {
    return a->scalar[0] != 0 ? a->scalar[0] : 1e-5;
}

/* What a shape rule decides: the output's dtype and shape, and the dtype
 * each input is cast to before the kernel runs (-1: left as it is). For a
 * variable-arity op in_dtype[0] applies to every input. */
#define HD_OP_MAX_IN 6
typedef struct hd_op_plan {
    hd_dtype dtype;
    int ndim;
    int64_t shape[HD_MAX_DIMS];
    int in_dtype[HD_OP_MAX_IN];
} hd_op_plan;

typedef hd_status (*hd_shape_fn)(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                                 const hd_attrs *attrs, hd_op_plan *plan);

typedef struct hd_op_info {
    const char *name;
    int arity;
    hd_op_kind kind;
    hd_shape_fn shape;
    int differentiable; /* has a gradient rule (hd_grad_rules.c) */
} hd_op_info;

extern const hd_op_info hd_op_infos[HD_OP_COUNT];

static inline const char *hd_op_name(hd_op op) {
    return hd_op_infos[op].name;
}
/* Look an op up by name; -1 if unknown. */
int hd_op_from_name(const char *name);

/* Run the shape rule only: validates inputs and attributes. */
hd_status hd_op_plan_make(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                          const hd_attrs *attrs, hd_op_plan *plan);

/* Eager dispatch: check, plan, cast inputs, allocate the output on the
 * inputs' device and run the backend's kernel (views: make the view).
 * *out receives a new reference. Errors name the op, shapes and dtypes.
 * When gradients are on and an input requires grad in the current gradient
 * context, the op is recorded for backward (hd_autograd.h). */
hd_status hd_op_run(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin, const hd_attrs *attrs,
                    hd_tensor **out);

/* Conveniences over hd_op_run. */
hd_status hd_op_unary(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor **out);
hd_status hd_op_binary(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b, hd_tensor **out);
hd_status hd_op_cast(hd_ctx *ctx, hd_tensor *a, hd_dtype dt, hd_tensor **out);

/* Copy src (broadcast, any dtype) into dst's view in place. */
hd_status hd_tensor_copy_into(hd_ctx *ctx, hd_tensor *dst, hd_tensor *src);

/* Shape rules, one per `shape` column value of hd_ops.def. */
#define X(NAME, name, arity, kind, shape, diff)                                                    \
    hd_status hd_shape_##shape(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,               \
                               const hd_attrs *attrs, hd_op_plan *plan);
#include "hd_ops.def"
#undef X

#endif
