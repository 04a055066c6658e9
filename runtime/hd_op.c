/* Eager dispatch: one entry point (hd_op_run) for every op of the table. */
#include "hd_op.h"
#include "hd_autograd.h"
#include "hd_backend.h"
#include "hd_memo.h"
#include "hd_profile.h"
#include "hd_trace.h"

#include <math.h>
#include <string.h>

#define HD_GRAD(rule) 1
#define HD_NOGRAD     0
const hd_op_info hd_op_infos[HD_OP_COUNT] = {
#define X(NAME, name, arity, kind, shape, grad) {name, arity, kind, hd_shape_##shape, grad},
#include "hd_ops.def"
#undef X
};
#undef HD_GRAD
#undef HD_NOGRAD

_Static_assert(sizeof hd_op_infos / sizeof hd_op_infos[0] == HD_OP_COUNT, "op table size");

int hd_op_from_name(const char *name) {
    for (int i = 0; i < HD_OP_COUNT; i++)
        if (strcmp(hd_op_infos[i].name, name) == 0) return i;
    return -1;
}

/* Every shape a rule produces must have an element count (counting zero
 * dims as one, so strides stay representable) that fits in 2^62. */
static hd_status plan_check_size(hd_ctx *ctx, hd_op op, const hd_op_plan *plan) {
    int64_t n = 1;
    for (int i = 0; i < plan->ndim; i++) {
        int64_t d = plan->shape[i] > 0 ? plan->shape[i] : 1;
        if (n > (INT64_C(1) << 62) / d)
            return hd_error(ctx, HD_ERR_MEMORY, "out of memory: %s result shape too large",
                            hd_op_name(op));
        n *= d;
    }
    return HD_OK;
}

hd_status hd_op_plan_make(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                          const hd_attrs *attrs, hd_op_plan *plan) {
    if ((unsigned)op >= HD_OP_COUNT) return hd_error(ctx, HD_ERR_ARGUMENT, "unknown op %d", op);
    const hd_op_info *info = &hd_op_infos[op];
    if (info->arity >= 0 && nin != info->arity)
        return hd_error(ctx, HD_ERR_ARGUMENT, "%s takes %d tensor inputs, got %d", info->name,
                        info->arity, nin);
    for (int i = 0; i < nin; i++)
        if (!in[i]) return hd_error(ctx, HD_ERR_ARGUMENT, "%s: input %d is missing", info->name, i);
    memset(plan, 0, sizeof *plan);
    if (info->shape(ctx, op, in, nin, attrs, plan)) return ctx->status;
    return plan_check_size(ctx, op, plan);
}

/* ---- views ---- */

/* Strides for viewing t as `shape` without copying, as torch's
 * computeStride: possible when each group of merged or split dims is
 * contiguous within itself. Returns 0 if no view exists. */
static int view_strides(const hd_tensor *t, const int64_t *shape, int nd, int64_t *strides) {
    if (t->numel == 0 || nd == 0 || t->ndim == 0) {
        hd_contiguous_strides(shape, nd, strides);
        return 1;
    }
    int view_d = nd - 1;
    int64_t chunk_base_stride = t->strides[t->ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int td = t->ndim - 1; td >= 0; td--) {
        tensor_numel *= t->shape[td];
        if (td == 0 ||
            (t->shape[td - 1] != 1 && t->strides[td - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base_stride;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return 0;
            if (td > 0) {
                chunk_base_stride = t->strides[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

static hd_status make_view(hd_ctx *ctx, hd_op op, hd_tensor *t, const hd_attrs *attrs,
                           const hd_op_plan *plan, hd_tensor **out) {
    int64_t strides[HD_MAX_DIMS];
    int64_t offset = t->offset;
    switch (op) {
    case HD_OP_RESHAPE:
        if (!view_strides(t, plan->shape, plan->ndim, strides)) {
            hd_tensor *c = NULL;
            if (hd_op_unary(ctx, HD_OP_COPY, t, &c)) return ctx->status;
            hd_contiguous_strides(plan->shape, plan->ndim, strides);
            *out = hd_tensor_view(ctx, c, plan->shape, strides, plan->ndim, c->offset);
            hd_tensor_unref(c);
            return *out ? HD_OK : ctx->status;
        }
        break;
    case HD_OP_PERMUTE:
        for (int i = 0; i < plan->ndim; i++) {
            int a = (int)(attrs->shape[i] < 0 ? attrs->shape[i] + t->ndim : attrs->shape[i]);
            strides[i] = t->strides[a];
        }
        break;
    case HD_OP_EXPAND: hd_broadcast_strides(t, plan->shape, plan->ndim, strides); break;
    case HD_OP_SLICE: {
        int k = 0;
        for (int i = 0; i < t->ndim; i++) {
            if (attrs->len[i] > 0) offset += attrs->start[i] * t->strides[i];
            if (attrs->drop_mask & (1u << i)) continue;
            strides[k++] = hd_slice_stride(t->strides[i], attrs->step[i], attrs->len[i]);
        }
        break;
    }
    default: return hd_error(ctx, HD_ERR_ARGUMENT, "%s is not a view op", hd_op_name(op));
    }
    *out = hd_tensor_view(ctx, t, plan->shape, strides, plan->ndim, offset);
    return *out ? HD_OK : ctx->status;
}

/* ---- dispatch ---- */

/* Where an op runs: where its inputs' storage is. Numbers and 0-d cpu
 * tensors follow the other inputs; when every input follows, the first
 * one's device (a number may live on a device: a kernel of another
 * backend must never see its data). ASSIGN writes into its first input,
 * so that one decides. */
static const hd_backend *inputs_backend(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                                        int *device) {
    const hd_backend *be = &hd_cpu_backend;
    *device = 0;
    if (nin == 0 && ctx->place_backend) {
        be = ctx->place_backend;
        *device = ctx->place_device;
    }
    int placed = 0;
    for (int i = 0; i < nin; i++) {
        const hd_storage *s = in[i]->storage;
        if (!s) {
            hd_error(ctx, HD_ERR_RUNTIME, "%s: input %d has no data (symbolic tensor)",
                     hd_op_name(op), i);
            return NULL;
        }
        if (hd_tensor_follows_device(in[i]) && !(op == HD_OP_ASSIGN && i == 0)) continue;
        if (placed && (s->backend != be || s->device != *device)) {
            hd_error(ctx, HD_ERR_RUNTIME, "%s: inputs are on different devices (%s:%d and %s:%d)",
                     hd_op_name(op), be->name, *device, s->backend->name, s->device);
            return NULL;
        }
        be = s->backend;
        *device = s->device;
        placed = 1;
    }
    if (!placed && nin > 0) {
        be = in[0]->storage->backend;
        *device = in[0]->storage->device;
    }
    return be;
}

/* A 0-d host tensor (a Hodu number, or a cpu scalar such as an
 * optimizer's bias correction) that be's kernel for op takes as an
 * argument: it stays where it is (cast there), never copied to the device
 * (a copy from the host and a wait for it at every use). */
static int op_number_stays(hd_op op, int i, const hd_tensor *t, const hd_backend *be) {
    return t->ndim == 0 && t->storage->backend == &hd_cpu_backend && be->takes_number &&
           be->takes_number(op, i);
}

/* Inputs that live elsewhere than (be, device), followers only, copied
 * there: a backend's kernels read only its own memory. */
static hd_status inputs_to_place(hd_ctx *ctx, hd_op op, hd_tensor **in, int nin,
                                 const hd_backend *be, int device) {
    for (int i = 0; i < nin; i++) {
        const hd_storage *s = in[i]->storage;
        if ((s->backend == be && s->device == device) || op_number_stays(op, i, in[i], be))
            continue;
        hd_tensor *m = NULL;
        if (hd_tensor_to_device(ctx, in[i], be, device, &m)) return ctx->status;
        hd_tensor_unref(in[i]);
        in[i] = m;
    }
    return HD_OK;
}

/* Can number t (0-d, on the host) be cast to dt without the cast op,
 * the result being the kernel's bit for bit: f64 to f32 (one rounding
 * either way) or to f16 and bf16 (through f32, with hd_dtype.h's
 * conversions, which the kernels match bit for bit), and integers exact
 * in f32 to f32 or f64? */
static int op_number_casts_here(const hd_tensor *t, hd_dtype dt) {
    if (!t->number || t->ndim || !t->storage || t->storage->backend != &hd_cpu_backend) return 0;
    double v = hd_dtype_load(t->dtype, hd_tensor_data(t), 0);
    return t->dtype == HD_F64   ? dt == HD_F32 || dt == HD_F16 || dt == HD_BF16
           : t->dtype == HD_I64 ? (dt == HD_F32 || dt == HD_F64) && fabs(v) <= 16777216.0
                                : 0;
}

/* t cast to dt: a number on the host where it can be, else the cast op. */
static hd_status op_input_cast(hd_ctx *ctx, hd_tensor *t, hd_dtype dt, hd_tensor **out) {
    if (!op_number_casts_here(t, dt)) return hd_op_cast(ctx, t, dt, out);
    *out = hd_tensor_scalar(ctx, dt, hd_dtype_load(t->dtype, hd_tensor_data(t), 0));
    return *out ? HD_OK : ctx->status;
}

static void unref_casts(hd_tensor **cast, int n) {
    for (int i = 0; i < n; i++) hd_tensor_unref(cast[i]);
}

static int op_all_numbers(hd_tensor *const *in, int nin) {
    for (int i = 0; i < nin; i++)
        if (!in[i]->number) return 0;
    return 1;
}

/* Cast the inputs to the plan's dtypes and run the kernel; when rec is
 * set, record the op for backward with the inputs the kernel saw. */
static hd_status op_execute(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                            const hd_attrs *attrs, const hd_op_plan *plan, const hd_backend *be,
                            int device, int rec, hd_tensor **out) {
    enum { MAX_CAST = 64 };
    uint64_t rng_base = ctx->rng_offset; /* dropout's draw starts here */
    hd_tensor *cast_buf[MAX_CAST];
    hd_tensor **cast = nin <= MAX_CAST ? cast_buf : hd_ctx_calloc(ctx, (size_t)nin, sizeof *cast);
    if (!cast) return ctx->status;
    hd_status st = HD_OK;
    for (int i = 0; i < nin; i++) cast[i] = hd_tensor_ref(in[i]);
    st = inputs_to_place(ctx, op, cast, nin, be, device);
    for (int i = 0; i < nin && !st; i++) {
        int want = op == HD_OP_CONCAT ? plan->in_dtype[0]
                   : i < HD_OP_MAX_IN ? plan->in_dtype[i]
                                      : -1;
        if (want < 0 || (hd_dtype)want == in[i]->dtype) continue;
        hd_tensor *c = NULL;
        st = op_input_cast(ctx, cast[i], (hd_dtype)want, &c);
        hd_tensor_unref(cast[i]);
        cast[i] = c;
    }
    if (st) goto done;
    if (!be->supports_op(op, nin ? cast[0]->dtype : plan->dtype)) {
        st = hd_error(ctx, HD_ERR_RUNTIME, "%s is not supported for %s tensors on %s",
                      hd_op_name(op), hd_dtype_name(nin ? cast[0]->dtype : plan->dtype), be->name);
        goto done;
    }
    hd_tensor *res;
    if (op == HD_OP_ASSIGN) {
        res = hd_tensor_ref(cast[0]);
        if (res->storage) res->storage->version++;
    } else {
        res = hd_tensor_new_on(ctx, be, device, plan->dtype, plan->shape, plan->ndim);
        if (!res) {
            st = ctx->status;
            goto done;
        }
    }
    if (res->numel > 0) st = be->run_op(ctx, op, res, cast, nin, attrs);
    /* numbers made from numbers (a cast, a gradient rule's 1 - b) are still
     * numbers: they follow the other operands' device */
    if (!st && nin > 0 && res->ndim == 0 && op_all_numbers(in, nin)) res->number = 1;
    if (!st && rec) st = hd_autograd_record(ctx, op, in, cast, nin, attrs, res, rng_base);
    if (st)
        hd_tensor_unref(res);
    else
        *out = res;
done:
    unref_casts(cast, nin);
    if (cast != cast_buf) hd_ctx_free(ctx, cast, (size_t)nin * sizeof *cast);
    return st;
}

static hd_status op_view(hd_ctx *ctx, hd_op op, hd_tensor *const *in, const hd_attrs *attrs,
                         const hd_op_plan *plan, int rec, hd_tensor **out) {
    hd_tensor *res = NULL;
    hd_status st = make_view(ctx, op, in[0], attrs, plan, &res);
    if (!st && rec) st = hd_autograd_record(ctx, op, in, in, 1, attrs, res, 0);
    if (st)
        hd_tensor_unref(res);
    else
        *out = res;
    return st;
}

/* The record of a traced op: the kernel inputs are the casts the executor
 * will make, traced too, so that the gradient rules see what eager mode
 * gives them (unused casts are removed by the passes). */
static hd_status trace_grad_record(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                                   const hd_attrs *attrs, const hd_op_plan *plan, hd_tensor *out) {
    if (hd_op_infos[op].kind == HD_KIND_VIEW)
        return hd_autograd_record(ctx, op, in, in, 1, attrs, out, 0);
    enum { MAX_CAST = 64 };
    if (nin > MAX_CAST) return hd_error(ctx, HD_ERR_RUNTIME, "%s: too many inputs", hd_op_name(op));
    hd_tensor *kin[MAX_CAST];
    hd_status st = HD_OK;
    int n = 0;
    for (; n < nin && !st; n++) {
        int want = op == HD_OP_CONCAT ? plan->in_dtype[0]
                   : n < HD_OP_MAX_IN ? plan->in_dtype[n]
                                      : -1;
        kin[n] = NULL;
        if (want < 0 || (hd_dtype)want == in[n]->dtype)
            kin[n] = hd_tensor_ref(in[n]);
        else
            st = hd_op_cast(ctx, in[n], (hd_dtype)want, &kin[n]);
    }
    if (!st) st = hd_autograd_record(ctx, op, in, kin, nin, attrs, out, ctx->rng_offset);
    unref_casts(kin, n);
    return st;
}

/* Dropout in training mode with gradients inside compiled code: the mask
 * is dropout of ones (the same one draw from the stream as eager dropout
 * makes, at each run), and the result x * mask, whose gradient is g * mask:
 * eager code's backward replays its draw from the record, which a graph
 * run at another point of the stream could not. Survivors are x * (1/(1-p))
 * rounded once more than eager's x / (1-p): within an ulp. */
static hd_status trace_dropout(hd_ctx *ctx, hd_tensor *x, const hd_attrs *attrs, hd_tensor **out) {
    hd_attrs fa;
    memset(&fa, 0, sizeof fa);
    fa.nshape = x->ndim;
    memcpy(fa.shape, x->shape, sizeof fa.shape);
    fa.dtype = x->dtype;
    fa.scalar[0] = 1;
    hd_tensor *ones = NULL, *mask = NULL;
    int was = hd_grad_set_enabled(ctx, 0);
    hd_status st = hd_op_run(ctx, HD_OP_FULL, NULL, 0, &fa, &ones);
    if (!st) st = hd_op_run(ctx, HD_OP_DROPOUT, &ones, 1, attrs, &mask);
    hd_grad_set_enabled(ctx, was);
    hd_tensor *in[2] = {x, mask};
    if (!st) st = hd_op_run(ctx, HD_OP_MUL, in, 2, NULL, out);
    hd_tensor_unref(ones);
    hd_tensor_unref(mask);
    return st;
}

/* Inside compiled code the op becomes a graph node (the shape rule has
 * already validated it), recorded for backward as an eager op would be, so
 * that backward() inside compiled code is traced like any other op. */
static hd_status op_trace(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                          const hd_attrs *attrs, const hd_op_plan *plan, hd_tensor **out) {
    int rec = hd_autograd_wants(ctx, op, in, nin, plan->dtype);
    if (rec < 0) return ctx->status;
    if (rec && op == HD_OP_DROPOUT && attrs->ints[0]) return trace_dropout(ctx, in[0], attrs, out);
    int was_disabled = ctx->grad_disabled;
    ctx->grad_disabled = 1;
    hd_status st = hd_trace_record(ctx, op, in, nin, attrs, plan, out);
    if (!st && rec && *out) st = trace_grad_record(ctx, op, in, nin, attrs, plan, *out);
    ctx->grad_disabled = was_disabled;
    if (st) {
        hd_tensor_unref(*out);
        *out = NULL;
    }
    return st;
}

static inline hd_status op_run(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                               const hd_attrs *attrs, hd_tensor **out) {
    static const hd_attrs no_attrs;
    hd_op_plan plan;
    *out = NULL;
    if (!attrs) attrs = &no_attrs;
    if (hd_op_plan_make(ctx, op, in, nin, attrs, &plan)) return ctx->status;
    if (ctx->trace) return op_trace(ctx, op, in, nin, attrs, &plan, out);
    int device;
    const hd_backend *be = inputs_backend(ctx, op, in, nin, &device);
    if (!be) return ctx->status;
    int rec = hd_autograd_wants(ctx, op, in, nin, plan.dtype);
    if (rec < 0) return ctx->status;
    /* ops run inside this one (input casts, reshape's copy) are not recorded:
     * the record links the output to the inputs as given */
    int was_disabled = ctx->grad_disabled;
    ctx->grad_disabled = 1;
    hd_status st = hd_op_infos[op].kind == HD_KIND_VIEW
                       ? op_view(ctx, op, in, attrs, &plan, rec, out)
                       : op_execute(ctx, op, in, nin, attrs, &plan, be, device, rec, out);
    ctx->grad_disabled = was_disabled;
    return st;
}

static hd_status op_run_timed(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                              const hd_attrs *attrs, hd_tensor **out) {
    return op_run(ctx, op, in, nin, attrs, out);
}

/* An op computed, timed when the profiler is on. */
static hd_status op_dispatch(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                             const hd_attrs *attrs, hd_tensor **out) {
    if (__builtin_expect(ctx->prof != NULL, 0))
        return hd_profile_op(ctx, op_run_timed, op, in, nin, attrs, out);
    return op_run(ctx, op, in, nin, attrs, out);
}

/* A strategy's precision (hd_ctx.autocast).
 *  - MIXED, MIXED_F16 (as torch.autocast): a matmul or conv2d whose float
 *    inputs are all f32 runs on bf16 (f16) copies of them, and its result
 *    is cast back to f32, so everything around it (and the weights) stays
 *    f32. f16's range needs loss scaling (optim.GradScaler).
 *  - FULL, HALF: every op that computes from float inputs runs in f64 or
 *    f16: its float inputs of another dtype are cast (Hodu numbers stay:
 *    they never widen) and the result keeps that dtype. Views, casts,
 *    copies, concatenation, index moves and writes, and creation are left
 *    alone (they compute nothing, and a view of a cast would not alias);
 *    so is linear algebra in f16 (LAPACK has none).
 * The casts are recorded ops: gradients flow through them back to the
 * tensors' own dtypes. */
static hd_dtype autocast_dtype(int mode) {
    return mode == HD_AUTOCAST_FULL                                    ? HD_F64
           : mode == HD_AUTOCAST_HALF || mode == HD_AUTOCAST_MIXED_F16 ? HD_F16
                                                                       : HD_BF16;
}

static int autocast_mixed(int mode) {
    return mode == HD_AUTOCAST_MIXED || mode == HD_AUTOCAST_MIXED_F16;
}

/* in[i] is cast by autocast in this mode */
static int autocast_casts(int mode, const hd_tensor *t) {
    if (!t) return 0;
    if (autocast_mixed(mode)) return 1; /* all f32: autocast_wants checked */
    return !t->number && hd_dtype_is_float(t->dtype) && t->dtype != autocast_dtype(mode);
}

static int autocast_wants(const hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin) {
    int mode = ctx->autocast;
    if (nin > HD_OP_MAX_IN) return 0; /* concat of many: moves data, computes nothing */
    if (autocast_mixed(mode)) {
        if (op != HD_OP_MATMUL && op != HD_OP_CONV2D) return 0;
        for (int i = 0; i < nin; i++)
            if (in[i] && in[i]->dtype != HD_F32) return 0;
        return 1;
    }
    switch (hd_op_infos[op].kind) {
    case HD_KIND_VIEW:
    case HD_KIND_SHAPE:
    case HD_KIND_CREATE:
    case HD_KIND_INDEX: return 0;
    case HD_KIND_LINALG:
        if (mode == HD_AUTOCAST_HALF) return 0;
        break;
    default: break;
    }
    if (op == HD_OP_CAST || op == HD_OP_COPY) return 0;
    for (int i = 0; i < nin; i++)
        if (autocast_casts(mode, in[i])) return 1;
    return 0;
}

static hd_status autocast_run(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                              const hd_attrs *attrs, hd_tensor **out) {
    hd_tensor *cin[HD_OP_MAX_IN] = {0}, *y = NULL;
    hd_status st = HD_OK;
    int mode = ctx->autocast;
    hd_dtype dt = autocast_dtype(mode);
    ctx->autocast = HD_AUTOCAST_OFF; /* the casts and the op itself run plainly */
    for (int i = 0; i < nin && !st; i++) {
        if (autocast_casts(mode, in[i]))
            st = hd_op_cast(ctx, in[i], dt, &cin[i]);
        else
            cin[i] = in[i] ? hd_tensor_ref(in[i]) : NULL;
    }
    if (!st) st = hd_op_run(ctx, op, cin, nin, attrs, &y);
    if (!st && autocast_mixed(mode)) {
        st = hd_op_cast(ctx, y, HD_F32, out);
    } else if (!st) {
        *out = y;
        y = NULL;
    }
    ctx->autocast = mode;
    for (int i = 0; i < nin; i++) hd_tensor_unref(cin[i]);
    hd_tensor_unref(y);
    return st;
}

hd_status hd_op_run(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin, const hd_attrs *attrs,
                    hd_tensor **out) {
    if (__builtin_expect(ctx->autocast, 0) && autocast_wants(ctx, op, in, nin)) {
        *out = NULL;
        return autocast_run(ctx, op, in, nin, attrs, out);
    }
    if (__builtin_expect(ctx->memo != NULL, 0))
        return hd_memo_run(ctx, op, in, nin, attrs, out, op_dispatch);
    return op_dispatch(ctx, op, in, nin, attrs, out);
}

hd_status hd_op_unary(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor **out) {
    return hd_op_run(ctx, op, &a, 1, NULL, out);
}

hd_status hd_op_binary(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b, hd_tensor **out) {
    hd_tensor *in[2] = {a, b};
    return hd_op_run(ctx, op, in, 2, NULL, out);
}

hd_status hd_op_cast(hd_ctx *ctx, hd_tensor *a, hd_dtype dt, hd_tensor **out) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = dt;
    return hd_op_run(ctx, HD_OP_CAST, &a, 1, &at, out);
}

hd_status hd_tensor_copy_into(hd_ctx *ctx, hd_tensor *dst, hd_tensor *src) {
    hd_place pd = hd_place_of(dst), ps = hd_place_of(src);
    hd_tensor *moved = NULL;
    if (dst->storage && src->storage && !hd_tensor_follows_device(src) &&
        (pd.backend != ps.backend || pd.device != ps.device)) { /* across devices: as copy_ */
        if (hd_tensor_to_device(ctx, src, pd.backend ? pd.backend : &hd_cpu_backend, pd.device,
                                &moved))
            return ctx->status;
        src = moved;
    }
    hd_tensor *in[2] = {dst, src}, *out = NULL;
    hd_status st = hd_op_run(ctx, HD_OP_ASSIGN, in, 2, NULL, &out);
    hd_tensor_unref(out);
    hd_tensor_unref(moved);
    return st;
}
