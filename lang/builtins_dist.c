/* Natives under stdlib/dist.hodu, nn.DataParallel and the optimizers'
 * data_parallel strategy: the world of ranks (runtime/hd_dist.c) and
 * collectives on tensors.
 *
 * all_reduce is an op (HD_OP_ALL_REDUCE), so inside compiled code it is a
 * node of the graph that runs at every call, and so is the gradients'
 * averaging (_dist_grad_mean, traced as concat, all_reduce and slices).
 * The other collectives are effects, refused inside compiled code as file
 * reads are: their argument's values are staged in a contiguous host copy,
 * detached from any gradient record, and a device tensor's result goes
 * back to its device, except where the device's backend runs the
 * collective itself (cuda: NCCL; send and recv always go through MPI,
 * whose tags NCCL does not have). dist.hodu writes a result into the
 * argument where the operation is in place, with copy_'s rules, except
 * that a contiguous cpu tensor no gradient record watches is reduced in
 * its own storage.
 * f16 and bf16 are reduced in f32 and rounded once. */
#include "builtins_tensor.h"
#include "compiled.h"
#include "hd_autograd.h"
#include "hd_backend.h"
#include "hd_dist.h"
#include "hd_trace.h"
#include "vm_internal.h"

#include <stdio.h>
#include <string.h>

#define DIST_ERR 512

/* The name a user called: "dist.all_reduce" for _dist_all_reduce and
 * _dist_all_reduce_ (the row names stay out of messages). */
static const char *dist_name(const hd_tfunc *f) {
    static const char *const names[][2] = {
        {"_dist_all_reduce", "dist.all_reduce"},
        {"_dist_all_reduce_", "dist.all_reduce"},
        {"_dist_broadcast", "dist.broadcast"},
        {"_dist_broadcast_", "dist.broadcast"},
        {"_dist_all_gather", "dist.all_gather"},
        {"_dist_reduce_scatter", "dist.reduce_scatter"},
        {"_dist_send", "dist.send"},
        {"_dist_recv", "dist.recv"},
        {"_dist_grad_mean", "DataParallel"},
        {"_dist_overlap", "DataParallel"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(f->name, names[i][0])) return names[i][1];
    return f->name;
}

static hd_status dist_error(hd_vm *vm, const char *msg) {
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s", msg);
}

/* t's values, contiguous on the host, detached (a new reference; it may
 * share t's storage: read it only). NULL with the ctx's error. */
static hd_tensor *dist_host_view(hd_ctx *ctx, hd_tensor *t) {
    hd_tensor *d = hd_grad_detach(ctx, t), *h = NULL, *c = NULL;
    if (d && !hd_tensor_to_device(ctx, d, &hd_cpu_backend, 0, &h)) c = hd_tensor_contiguous(ctx, h);
    hd_tensor_unref(d), hd_tensor_unref(h);
    return c;
}

/* Argument i is a tensor with data. */
static hd_status dist_tensor_arg(hd_vm *vm, const hd_targs *a, int i) {
    if (a->v[i].type != HD_V_TENSOR) return hd_targ_type_error(vm, a, i, "a tensor");
    return hd_tensor_need_data(vm, a->v[i].as.t, dist_name(a->f)) ? HD_ERR_RUNTIME : HD_OK;
}

/* Argument i as a tensor: a contiguous host copy of its values (new,
 * never sharing the argument's storage), and where it lives. */
static hd_status dist_stage(hd_vm *vm, const hd_targs *a, int i, hd_tensor **out, hd_place *place) {
    if (dist_tensor_arg(vm, a, i)) return HD_ERR_RUNTIME;
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_tensor *t = a->v[i].as.t;
    *place = hd_place_of(t);
    hd_tensor *c = dist_host_view(ctx, t);
    hd_tensor *r = c ? hd_tensor_new(ctx, t->dtype, t->shape, t->ndim) : NULL;
    if (r) memcpy(hd_tensor_data(r), hd_tensor_data(c), hd_tensor_nbytes(r));
    hd_tensor_unref(c);
    if (!r) return hd_tfail(vm, dist_name(a->f));
    *out = r;
    return HD_OK;
}

/* The collective c on argument i's device without host copies, where its
 * backend can (cuda: NCCL): c->in is the argument's values (contiguous,
 * detached), c->out a new tensor of shape there, which becomes *out; *done
 * 0 where the backend declines (the caller stages through host memory). */
static hd_status dist_on_device(hd_vm *vm, const hd_targs *a, int i, hd_coll *c,
                                const int64_t *shape, int nd, hd_value *out, int *done) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_tensor *t = a->v[i].as.t;
    *done = 0;
    if (t->number || !t->storage || !t->storage->backend->collective) return HD_OK;
    const hd_backend *be = t->storage->backend;
    hd_tensor *det = hd_grad_detach(ctx, t);
    c->in = det ? hd_tensor_contiguous(ctx, det) : NULL;
    c->out = c->in ? hd_tensor_new_on(ctx, be, t->storage->device, t->dtype, shape, nd) : NULL;
    hd_status st = c->out ? be->collective(ctx, c, done) : ctx->status;
    hd_tensor_unref(det), hd_tensor_unref(c->in);
    if (st || !*done) {
        hd_tensor_unref(c->out);
        return st ? hd_tfail(vm, dist_name(a->f)) : HD_OK;
    }
    *out = hd_tensor_value(c->out);
    return HD_OK;
}

/* r (a host tensor, taken) as the result, on place. */
static hd_status dist_result(hd_vm *vm, const char *fname, hd_tensor *r, hd_place place,
                             hd_value *out) {
    if (place.backend && place.backend != &hd_cpu_backend) {
        hd_tensor *d = NULL;
        hd_status st = hd_tensor_to_device(hd_vm_ctx(vm), r, place.backend, place.device, &d);
        hd_tensor_unref(r);
        if (st) return hd_tfail(vm, fname);
        r = d;
    }
    *out = hd_tensor_value(r);
    return HD_OK;
}

/* op: "sum", "mean", "max", "min" or "prod"; *mean set for "mean". */
static hd_status dist_op(hd_vm *vm, const hd_targs *a, int i, hd_dist_op *op, int *mean) {
    static const char *const names[] = {"sum", "prod", "max", "min"};
    const char *s = "sum";
    if (hd_targ_has(a, i)) {
        if (a->v[i].type != HD_V_STR) return hd_targ_type_error(vm, a, i, "a str");
        s = hd_as_str(a->v[i])->chars;
    }
    *mean = strcmp(s, "mean") == 0;
    for (int k = 0; k < 4; k++)
        if (*mean ? k == 0 : strcmp(s, names[k]) == 0) {
            *op = (hd_dist_op)k;
            return HD_OK;
        }
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "%s: op must be \"sum\", \"mean\", \"max\", \"min\" or \"prod\", got \"%s\"",
                       dist_name(a->f), s);
}

static hd_status dist_check_mean(hd_vm *vm, const char *fname, hd_dtype dt, int mean) {
    if (!mean || hd_dtype_infos[dt].cat == HD_CAT_FLOAT) return HD_OK;
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "%s: op \"mean\" needs a float tensor, got %s (use \"sum\", or .float())",
                       fname, hd_dtype_name(dt));
}

/* _dist_all_reduce(t, op = "sum"): a new tensor, through the op
 * all_reduce, so that inside compiled code it is a node of the graph that
 * runs at every call (on cuda tensors, through NCCL where it is). */
static HD_TF_FN(tf_all_reduce) {
    HD_TARGS_BIND(a);
    hd_dist_op op;
    int mean;
    if (a.v[0].type != HD_V_TENSOR) return hd_targ_type_error(vm, &a, 0, "a tensor");
    hd_tensor *x = a.v[0].as.t, *r = NULL;
    if (dist_op(vm, &a, 1, &op, &mean) || dist_check_mean(vm, dist_name(a.f), x->dtype, mean))
        return HD_ERR_RUNTIME;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = op, at.ints[1] = mean;
    if (hd_trun_t(vm, "dist.all_reduce", HD_OP_ALL_REDUCE, &x, 1, &at, &r)) return HD_ERR_RUNTIME;
    *out = hd_tensor_value(r);
    return HD_OK;
}

static hd_status dist_rank_arg(hd_vm *vm, const hd_targs *a, int i, int *rank) {
    int64_t v;
    if (hd_targ_int(vm, a, i, 0, &v)) return HD_ERR_RUNTIME;
    if (v < 0 || v >= hd_dist_size())
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: no rank %lld in a world of %d", dist_name(a->f),
                           (long long)v, hd_dist_size());
    *rank = (int)v;
    return HD_OK;
}

/* _dist_broadcast(t, root = 0) */
static HD_TF_FN(tf_broadcast) {
    HD_TARGS_BIND(a);
    int root = 0, done;
    hd_tensor *r = NULL;
    hd_place place;
    if (dist_rank_arg(vm, &a, 1, &root) || dist_tensor_arg(vm, &a, 0)) return HD_ERR_RUNTIME;
    hd_tensor *t = a.v[0].as.t;
    hd_coll c = {HD_COLL_BROADCAST, NULL, NULL, 0, 0, root};
    if (dist_on_device(vm, &a, 0, &c, t->shape, t->ndim, out, &done)) return HD_ERR_RUNTIME;
    if (done) return HD_OK;
    if (dist_stage(vm, &a, 0, &r, &place)) return HD_ERR_RUNTIME;
    char err[DIST_ERR];
    if (hd_dist_broadcast(hd_tensor_data(r), (int64_t)hd_tensor_nbytes(r), root, err, sizeof err)) {
        hd_tensor_unref(r);
        return dist_error(vm, err);
    }
    return dist_result(vm, dist_name(a.f), r, place, out);
}

/* _dist_all_gather(t): [world size, *t.shape] */
static HD_TF_FN(tf_all_gather) {
    HD_TARGS_BIND(a);
    hd_tensor *x = NULL;
    hd_place place;
    int done;
    if (dist_tensor_arg(vm, &a, 0)) return HD_ERR_RUNTIME;
    hd_tensor *t = a.v[0].as.t;
    if (t->ndim + 1 > HD_MAX_DIMS)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: a tensor of %d dims gathers into too many dims",
                           dist_name(a.f), t->ndim);
    int64_t shape[HD_MAX_DIMS];
    shape[0] = hd_dist_size();
    memcpy(shape + 1, t->shape, (size_t)t->ndim * sizeof(int64_t));
    hd_coll c = {HD_COLL_ALL_GATHER, NULL, NULL, 0, 0, 0};
    if (dist_on_device(vm, &a, 0, &c, shape, t->ndim + 1, out, &done)) return HD_ERR_RUNTIME;
    if (done) return HD_OK;
    if (dist_stage(vm, &a, 0, &x, &place)) return HD_ERR_RUNTIME;
    hd_tensor *r = hd_tensor_new(hd_vm_ctx(vm), x->dtype, shape, x->ndim + 1);
    char err[DIST_ERR];
    hd_status st = r ? HD_OK : hd_tfail(vm, dist_name(a.f));
    if (!st && hd_dist_all_gather(hd_tensor_data(x), hd_tensor_data(r),
                                  (int64_t)hd_tensor_nbytes(x), err, sizeof err))
        st = dist_error(vm, err);
    hd_tensor_unref(x);
    if (st) {
        hd_tensor_unref(r);
        return st;
    }
    return dist_result(vm, dist_name(a.f), r, place, out);
}

/* _dist_reduce_scatter(t, op = "sum"): block `rank` of t's first axis (of
 * world-size blocks), reduced over every rank. */
static HD_TF_FN(tf_reduce_scatter) {
    HD_TARGS_BIND(a);
    hd_dist_op op;
    int mean, ws = hd_dist_size(), done;
    hd_tensor *x = NULL, *r = NULL;
    hd_place place;
    if (dist_op(vm, &a, 1, &op, &mean) || dist_tensor_arg(vm, &a, 0)) return HD_ERR_RUNTIME;
    hd_tensor *t = a.v[0].as.t;
    if (dist_check_mean(vm, dist_name(a.f), t->dtype, mean)) return HD_ERR_RUNTIME;
    if (t->ndim == 0 || t->shape[0] % ws != 0)
        return hd_vm_error(
            vm, HD_ERR_RUNTIME,
            "%s: the first axis (%lld) must split into %d equal blocks, one per rank",
            dist_name(a.f), (long long)(t->ndim ? t->shape[0] : 0), ws);
    int64_t shape[HD_MAX_DIMS];
    memcpy(shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
    shape[0] /= ws;
    hd_coll c = {HD_COLL_REDUCE_SCATTER, NULL, NULL, (int)op, mean, 0};
    if (dist_on_device(vm, &a, 0, &c, shape, t->ndim, out, &done)) return HD_ERR_RUNTIME;
    if (done) return HD_OK;
    if (dist_stage(vm, &a, 0, &x, &place)) return HD_ERR_RUNTIME;
    hd_status st = HD_OK;
    r = hd_tensor_new(hd_vm_ctx(vm), x->dtype, shape, x->ndim);
    if (!r) st = hd_tfail(vm, dist_name(a.f));
    char err[DIST_ERR];
    /* through all_reduce: one code path for every dtype, half included */
    if (!st && hd_dist_all_reduce_any(hd_vm_ctx(vm), hd_tensor_data(x), x->numel, x->dtype, op,
                                      mean, err, sizeof err))
        st = dist_error(vm, err);
    if (!st)
        memcpy(hd_tensor_data(r), (char *)hd_tensor_data(x) + hd_dist_rank() * hd_tensor_nbytes(r),
               hd_tensor_nbytes(r));
    hd_tensor_unref(x);
    if (st) {
        hd_tensor_unref(r);
        return st;
    }
    return dist_result(vm, dist_name(a.f), r, place, out);
}

static hd_status dist_tag_arg(hd_vm *vm, const hd_targs *a, int i, int *tag) {
    int64_t v;
    if (hd_targ_int(vm, a, i, 0, &v)) return HD_ERR_RUNTIME;
    if (v < 0 || v > 32767)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: tag must be in 0..32767, got %lld",
                           dist_name(a->f), (long long)v);
    *tag = (int)v;
    return HD_OK;
}

/* ---- in place, without copies: _dist_all_reduce_ and _dist_broadcast_ ---- */

/* Can t's own storage take the result (a contiguous host tensor that no
 * gradient record watches, outside compiled code)? */
static int dist_direct_ok(hd_vm *vm, hd_tensor *t) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (hd_trace_active(ctx) || t->number || hd_tensor_is_symbolic(t) || !hd_tensor_is_cpu(t) ||
        !hd_tensor_is_contiguous(t))
        return 0;
    return hd_autograd_wants(ctx, HD_OP_ADD, &t, 1, t->dtype) == 0;
}

/* _dist_all_reduce_(t, op = "sum"): t itself, reduced in place, or none
 * when t cannot be written directly (dist.hodu then goes through copy_,
 * with its rules). */
static HD_TF_FN(tf_all_reduce_direct) {
    HD_TARGS_BIND(a);
    hd_dist_op op;
    int mean;
    if (a.v[0].type != HD_V_TENSOR) return hd_targ_type_error(vm, &a, 0, "a tensor");
    hd_tensor *t = a.v[0].as.t;
    if (dist_op(vm, &a, 1, &op, &mean) || dist_check_mean(vm, dist_name(a.f), t->dtype, mean))
        return HD_ERR_RUNTIME;
    *out = hd_none();
    if (hd_trace_active(hd_vm_ctx(vm)) && hd_tensor_is_symbolic(t))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "dist.all_reduce: inside compiled code it writes into tensors with "
                           "data (a global, a field, a captured tensor), not into an argument or "
                           "a value computed inside: write x = dist.all_reduced(x) instead");
    if (!dist_direct_ok(vm, t)) return HD_OK;
    char err[DIST_ERR];
    if (hd_dist_all_reduce_any(hd_vm_ctx(vm), hd_tensor_data(t), t->numel, t->dtype, op, mean, err,
                               sizeof err))
        return dist_error(vm, err);
    t->storage->version++;
    *out = hd_value_ref(a.v[0]);
    return HD_OK;
}

/* _dist_broadcast_(t, root = 0): as _dist_all_reduce_, for broadcast. */
static HD_TF_FN(tf_broadcast_direct) {
    HD_TARGS_BIND(a);
    int root = 0;
    if (a.v[0].type != HD_V_TENSOR) return hd_targ_type_error(vm, &a, 0, "a tensor");
    if (dist_rank_arg(vm, &a, 1, &root)) return HD_ERR_RUNTIME;
    hd_tensor *t = a.v[0].as.t;
    *out = hd_none();
    if (!dist_direct_ok(vm, t)) return HD_OK;
    char err[DIST_ERR];
    if (hd_dist_broadcast(hd_tensor_data(t), (int64_t)hd_tensor_nbytes(t), root, err, sizeof err))
        return dist_error(vm, err);
    t->storage->version++;
    *out = hd_value_ref(a.v[0]);
    return HD_OK;
}

/* _dist_send(t, dst, tag = 0) */
static HD_TF_FN(tf_send) {
    HD_TARGS_BIND(a);
    int tag;
    int64_t dst;
    hd_tensor *x = NULL;
    hd_place place;
    if (hd_targ_int(vm, &a, 1, 0, &dst) || dist_tag_arg(vm, &a, 2, &tag) ||
        dist_stage(vm, &a, 0, &x, &place))
        return HD_ERR_RUNTIME;
    char err[DIST_ERR];
    int dst_i = dst < 0 || dst > 1 << 30 ? -1 : (int)dst;
    int rc =
        hd_dist_send(hd_tensor_data(x), (int64_t)hd_tensor_nbytes(x), dst_i, tag, err, sizeof err);
    hd_tensor_unref(x);
    if (rc) return dist_error(vm, err);
    *out = hd_none();
    return HD_OK;
}

/* _dist_recv(t, src, tag = 0): a tensor like t with src's values */
static HD_TF_FN(tf_recv) {
    HD_TARGS_BIND(a);
    int tag;
    int64_t src;
    hd_tensor *r = NULL;
    hd_place place;
    if (hd_targ_int(vm, &a, 1, 0, &src) || dist_tag_arg(vm, &a, 2, &tag) ||
        dist_stage(vm, &a, 0, &r, &place))
        return HD_ERR_RUNTIME;
    char err[DIST_ERR];
    int src_i = src < 0 || src > 1 << 30 ? -1 : (int)src;
    if (hd_dist_recv(hd_tensor_data(r), (int64_t)hd_tensor_nbytes(r), src_i, tag, err,
                     sizeof err)) {
        hd_tensor_unref(r);
        return dist_error(vm, err);
    }
    return dist_result(vm, dist_name(a.f), r, place, out);
}

/* _dist_init(force = false, timeout = none): whether MPI is open */
static HD_TF_FN(tf_init) {
    HD_TARGS_BIND(a);
    int force;
    double timeout;
    if (hd_targ_bool(vm, &a, 0, 0, &force) || hd_targ_float(vm, &a, 1, 0, &timeout))
        return HD_ERR_RUNTIME;
    char err[DIST_ERR];
    if (hd_dist_init(force, timeout, err, sizeof err))
        return hd_vm_error(vm, HD_ERR_RUNTIME, "dist.init: %s", err);
    *out = hd_bool(hd_dist_active());
    return HD_OK;
}

static HD_TF_FN(tf_rank) {
    HD_TARGS_BIND(a);
    *out = hd_int(hd_dist_rank());
    return HD_OK;
}

static HD_TF_FN(tf_size) {
    HD_TARGS_BIND(a);
    *out = hd_int(hd_dist_size());
    return HD_OK;
}

static HD_TF_FN(tf_local_rank) {
    HD_TARGS_BIND(a);
    *out = hd_int(hd_dist_local_rank());
    return HD_OK;
}

static HD_TF_FN(tf_local_size) {
    HD_TARGS_BIND(a);
    *out = hd_int(hd_dist_local_size());
    return HD_OK;
}

/* _dist_available(): "" when MPI can be opened, else why not */
static HD_TF_FN(tf_available) {
    HD_TARGS_BIND(a);
    char err[DIST_ERR] = "";
    if (hd_dist_available(err, sizeof err)) err[0] = 0;
    *out = hd_str_new(vm, err, strlen(err));
    return out->type == HD_V_STR ? HD_OK : hd_vm_oom(vm);
}

static HD_TF_FN(tf_barrier) {
    HD_TARGS_BIND(a);
    char err[DIST_ERR];
    if (hd_dist_barrier(err, sizeof err)) return dist_error(vm, err);
    *out = hd_none();
    return HD_OK;
}

/* ---- _dist_grad_mean(params, bucket): nn.DataParallel's averaging ---- */

typedef struct grad_bucket {
    hd_vm *vm;
    hd_tensor **ps;     /* the parameters */
    unsigned char *has; /* some rank has a gradient for ps[k] */
    int n;
} grad_bucket;

static int same_place(const hd_tensor *a, const hd_tensor *b) {
    hd_place pa = hd_place_of(a), pb = hd_place_of(b);
    return a->dtype == b->dtype && pa.backend == pb.backend && pa.device == pb.device;
}

int hd_dist_bucket_end(hd_tensor *const *ps, int n, int i, int64_t limit) {
    int64_t count = ps[i]->numel;
    int j = i + 1;
    while (j < n && same_place(ps[j], ps[i]) && (count += ps[j]->numel) <= limit) j++;
    return j;
}

static int bucket_end(const grad_bucket *b, int i, int64_t limit) {
    return hd_dist_bucket_end(b->ps, b->n, i, limit);
}

/* ps[i..j)'s gradients (zeros where none) packed into buf. */
static hd_status bucket_pack(grad_bucket *b, int i, int j, char *buf) {
    hd_ctx *ctx = hd_vm_ctx(b->vm);
    for (int k = i; k < j; k++) {
        size_t nb = hd_tensor_nbytes(b->ps[k]);
        hd_tensor *g = hd_grad_get(b->ps[k]), *c = g ? dist_host_view(ctx, g) : NULL;
        if (g && !c) return hd_tfail(b->vm, "DataParallel");
        if (c)
            memcpy(buf, hd_tensor_data(c), nb);
        else
            memset(buf, 0, nb);
        hd_tensor_unref(c);
        buf += nb;
    }
    return HD_OK;
}

/* A new tensor of p's shape and place holding buf's values. */
static hd_tensor *grad_from(hd_ctx *ctx, const hd_tensor *p, const char *buf) {
    hd_tensor *g = hd_tensor_new(ctx, p->dtype, p->shape, p->ndim), *d = NULL;
    if (!g) return NULL;
    memcpy(hd_tensor_data(g), buf, hd_tensor_nbytes(g));
    hd_place pl = hd_place_of(p);
    if (!pl.backend || pl.backend == &hd_cpu_backend) return g;
    if (hd_tensor_to_device(ctx, g, pl.backend, pl.device, &d)) d = NULL;
    hd_tensor_unref(g);
    return d;
}

/* Each of ps[i..j) that some rank has a gradient for gets its mean from
 * buf as a new .grad. */
static hd_status bucket_unpack(grad_bucket *b, int i, int j, const char *buf) {
    hd_ctx *ctx = hd_vm_ctx(b->vm);
    for (int k = i; k < j; k++) {
        if (b->has[k]) {
            hd_tensor *g = grad_from(ctx, b->ps[k], buf);
            hd_status st = !g || hd_grad_set(ctx, b->ps[k], g) ? HD_ERR_RUNTIME : HD_OK;
            hd_tensor_unref(g);
            if (st) return hd_tfail(b->vm, "DataParallel");
        }
        buf += hd_tensor_nbytes(b->ps[k]);
    }
    return HD_OK;
}

/* flat's parts as ps[i..j)'s gradients (only: those whose flag is set;
 * NULL: all). */
static hd_status bucket_split(grad_bucket *b, int i, int j, hd_tensor *flat,
                              const unsigned char *only) {
    hd_ctx *ctx = hd_vm_ctx(b->vm);
    int64_t at = 0;
    for (int k = i; k < j; k++) {
        hd_tensor *p = b->ps[k], *part = NULL, *g = NULL;
        if (only && !only[k]) {
            at += p->numel;
            continue;
        }
        hd_status st = hd_tslice_axis(ctx, flat, 0, at, p->numel, 0, &part);
        if (!st) st = hd_treshape(ctx, part, p->shape, p->ndim, &g);
        if (!st) st = hd_grad_set(ctx, p, g);
        hd_tensor_unref(part), hd_tensor_unref(g);
        if (st) return hd_tfail(b->vm, "DataParallel");
        at += p->numel;
    }
    return HD_OK;
}

/* ps[k]'s gradient, flat (a traced op), or zeros of its size on its
 * device where it has none. */
static hd_tensor *bucket_flat(grad_bucket *b, int k) {
    hd_ctx *ctx = hd_vm_ctx(b->vm);
    hd_tensor *p = b->ps[k], *g = hd_grad_get(p), *r = NULL;
    int64_t n = p->numel;
    if (g) return hd_treshape(ctx, g, &n, 1, &r) ? NULL : r;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 1, at.shape[0] = n, at.dtype = p->dtype;
    hd_place pl = hd_place_of(p), was = hd_place_push(ctx, pl.backend, pl.device);
    hd_op_run(ctx, HD_OP_FULL, NULL, 0, &at, &r);
    hd_place_pop(ctx, was);
    return r;
}

/* ps[i..j)'s gradients, flat, concatenated (traced ops). */
static hd_tensor *bucket_concat(grad_bucket *b, int i, int j) {
    hd_ctx *ctx = hd_vm_ctx(b->vm);
    hd_tensor *parts[64],
        **pp = j - i <= 64 ? parts : hd_ctx_alloc(ctx, (size_t)(j - i) * sizeof *pp);
    if (!pp) return NULL;
    int got = 0;
    while (got < j - i && (pp[got] = bucket_flat(b, i + got))) got++;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    hd_tensor *flat = NULL;
    if (got == j - i)
        hd_trun_t(b->vm, "DataParallel", HD_OP_CONCAT, pp, got, &at, &flat);
    else
        hd_tfail(b->vm, "DataParallel");
    hd_tunref_all(pp, got);
    if (pp != parts) hd_ctx_free(ctx, pp, (size_t)(j - i) * sizeof *pp);
    return flat;
}

/* bucket_reduce on the parameters' device without host copies, where its
 * backend runs collectives (cuda: NCCL): the gradients concatenated
 * there, averaged in place, and each parameter's slice of the result its
 * new .grad; *done 0 where the backend declines. */
static hd_status bucket_reduce_device(grad_bucket *b, int i, int j, int *done) {
    hd_ctx *ctx = hd_vm_ctx(b->vm);
    const hd_backend *be = b->ps[i]->storage ? b->ps[i]->storage->backend : NULL;
    *done = 0;
    if (!be || !be->collective) return HD_OK;
    hd_tensor *cat = bucket_concat(b, i, j), *flat = cat ? hd_grad_detach(ctx, cat) : NULL;
    hd_tensor_unref(cat);
    if (!flat) return HD_ERR_RUNTIME;
    hd_coll c = {HD_COLL_ALL_REDUCE, flat, flat, HD_DIST_SUM, 1, 0};
    hd_status st = be->collective(ctx, &c, done);
    if (!st && *done) st = bucket_split(b, i, j, flat, b->has);
    hd_tensor_unref(flat);
    return st ? hd_tfail(b->vm, "DataParallel") : HD_OK;
}

static hd_status bucket_reduce(grad_bucket *b, int i, int j) {
    hd_ctx *ctx = hd_vm_ctx(b->vm);
    int done;
    if (bucket_reduce_device(b, i, j, &done)) return HD_ERR_RUNTIME;
    if (done) return HD_OK;
    int64_t total = 0;
    for (int k = i; k < j; k++) total += b->ps[k]->numel;
    hd_dtype dt = b->ps[i]->dtype;
    hd_tensor *buf = hd_tensor_new(ctx, dt, &total, 1);
    if (!buf) return hd_tfail(b->vm, "DataParallel");
    char err[DIST_ERR];
    hd_status st = bucket_pack(b, i, j, hd_tensor_data(buf));
    if (!st && hd_dist_all_reduce_any(ctx, hd_tensor_data(buf), total, dt, HD_DIST_SUM, 1, err,
                                      sizeof err))
        st = dist_error(b->vm, err);
    if (!st) st = bucket_unpack(b, i, j, hd_tensor_data(buf));
    hd_tensor_unref(buf);
    return st;
}

/* run op all_reduce on x (taken) */
static hd_tensor *traced_reduce(hd_vm *vm, hd_tensor *x, hd_dist_op op, int mean) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = op, at.ints[1] = mean;
    hd_tensor *r = NULL;
    if (x) hd_trun_t(vm, "DataParallel", HD_OP_ALL_REDUCE, &x, 1, &at, &r);
    hd_tensor_unref(x);
    return r;
}

/* Inside compiled code: grad_mean_run's collectives, in the same order and
 * sizes, as nodes of the graph. Every parameter must have a gradient there
 * (whether another rank has one cannot decide the graph). */
static hd_status grad_mean_traced(grad_bucket *b, int64_t limit) {
    hd_vm *vm = b->vm;
    for (int k = 0; k < b->n; k++) {
        if (vm->trace_reads) hd_compiled_note_grad(vm, b->ps[k]);
        if (!hd_grad_get(b->ps[k]))
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "DataParallel: parameter %d has no gradient in this compiled "
                               "step; compiled code averages every parameter's gradient (run "
                               "the step eagerly where some parameters are unused)",
                               k);
    }
    int64_t n = b->n;
    hd_tensor *flags = hd_tensor_new(hd_vm_ctx(vm), HD_U8, &n, 1);
    if (flags) memset(hd_tensor_data(flags), 1, (size_t)n);
    hd_tensor *any = traced_reduce(vm, flags, HD_DIST_MAX, 0);
    if (!any) return HD_ERR_RUNTIME;
    hd_tensor_unref(any);
    for (int i = 0; i < b->n;) {
        int j = bucket_end(b, i, limit);
        hd_tensor *mean = traced_reduce(vm, bucket_concat(b, i, j), HD_DIST_SUM, 1);
        hd_status st = mean ? bucket_split(b, i, j, mean, NULL) : HD_ERR_RUNTIME;
        hd_tensor_unref(mean);
        if (st) return st;
        i = j;
    }
    return HD_OK;
}

static hd_status grad_mean_run(grad_bucket *b, int64_t limit) {
    char err[DIST_ERR];
    for (int k = 0; k < b->n; k++) b->has[k] = hd_grad_get(b->ps[k]) != NULL;
    if (hd_dist_all_reduce(b->has, b->n, HD_U8, HD_DIST_MAX, err, sizeof err))
        return dist_error(b->vm, err);
    for (int i = 0; i < b->n;) {
        int j = bucket_end(b, i, limit);
        if (hd_dtype_infos[b->ps[i]->dtype].cat != HD_CAT_FLOAT)
            return hd_vm_error(b->vm, HD_ERR_RUNTIME,
                               "DataParallel: parameter %d is %s; gradients are averaged in "
                               "float dtypes only",
                               i, hd_dtype_name(b->ps[i]->dtype));
        hd_status st = bucket_reduce(b, i, j);
        if (st) return st;
        i = j;
    }
    return HD_OK;
}

/* Argument 0 as the list's tensors (*ps allocated, *n of them). */
static hd_status dist_param_list(hd_vm *vm, const hd_targs *a, hd_tensor ***ps, int *n) {
    if (a->v[0].type != HD_V_LIST) return hd_targ_type_error(vm, a, 0, "a list of tensors");
    hd_list *l = hd_as_list(a->v[0]);
    for (int64_t k = 0; k < l->len; k++)
        if (l->items[k].type != HD_V_TENSOR)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: item %lld is a %s, not a tensor",
                               dist_name(a->f), (long long)k, hd_value_type_name(l->items[k]));
    if (l->len > INT32_MAX / 2)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: too many parameters", dist_name(a->f));
    *n = (int)l->len;
    *ps = hd_ctx_alloc(hd_vm_ctx(vm), (size_t)(*n ? *n : 1) * (sizeof(hd_tensor *) + 1));
    if (!*ps) return hd_vm_oom(vm);
    for (int k = 0; k < *n; k++) (*ps)[k] = l->items[k].as.t;
    return HD_OK;
}

static void dist_param_list_free(hd_vm *vm, hd_tensor **ps, int n) {
    hd_ctx_free(hd_vm_ctx(vm), ps, (size_t)(n ? n : 1) * (sizeof(hd_tensor *) + 1));
}

/* _dist_grad_mean(params, bucket, group = -1): every parameter's .grad
 * becomes its mean over the ranks (zeros counted for a rank without one;
 * none kept where no rank has one), in all-reduces of at most bucket
 * elements; nothing where group (_dist_overlap's) averaged them during
 * the backward() just run. */
static HD_TF_FN(tf_grad_mean) {
    HD_TARGS_BIND(a);
    int64_t limit, group;
    if (hd_targ_int(vm, &a, 1, 1 << 22, &limit) || hd_targ_int(vm, &a, 2, -1, &group))
        return HD_ERR_RUNTIME;
    grad_bucket b = {vm, NULL, NULL, 0};
    if (dist_param_list(vm, &a, &b.ps, &b.n)) return HD_ERR_RUNTIME;
    b.has = (unsigned char *)(b.ps + b.n);
    hd_status st = HD_OK;
    if (hd_compiled_tracing(vm))
        st = grad_mean_traced(&b, limit);
    else if (group < 0 || !hd_dist_dp_covered(vm, (int)group, b.ps, b.n))
        st = grad_mean_run(&b, limit);
    dist_param_list_free(vm, b.ps, b.n);
    if (st) return st;
    *out = hd_none();
    return HD_OK;
}

/* _dist_overlap(params, bucket): the gradients of params averaged during
 * backward() from now on, as each bucket's are complete; the group's id
 * for _dist_grad_mean, or -1 where that cannot be done (see
 * builtins_dist_dp.c). */
static HD_TF_FN(tf_overlap) {
    HD_TARGS_BIND(a);
    int64_t limit;
    hd_tensor **ps;
    int n;
    if (hd_targ_int(vm, &a, 1, 1 << 22, &limit) || dist_param_list(vm, &a, &ps, &n))
        return HD_ERR_RUNTIME;
    int id = hd_dist_dp_register(vm, ps, n, limit);
    dist_param_list_free(vm, ps, n);
    if (id == -2) return hd_vm_oom(vm);
    *out = hd_int(id);
    return HD_OK;
}

/* _on_backward(fn): fn() runs after every successful backward() (how
 * nn.DataParallel averages gradients) */
static HD_TF_FN(tf_on_backward) {
    HD_TARGS_BIND(a);
    if (vm->backward_hooks.type != HD_V_LIST) {
        vm->backward_hooks = hd_list_new(vm, 1);
        if (vm->backward_hooks.type != HD_V_LIST) return hd_vm_oom(vm);
    }
    if (hd_list_push(vm, vm->backward_hooks, hd_value_ref(a.v[0]))) return vm->err;
    *out = hd_none();
    return HD_OK;
}

hd_status hd_dist_backward_hooks(hd_vm *vm) {
    if (vm->backward_hooks.type != HD_V_LIST) return HD_OK;
    for (int64_t i = 0; i < hd_as_list(vm->backward_hooks)->len; i++) {
        hd_value fn = hd_value_ref(hd_as_list(vm->backward_hooks)->items[i]), r;
        hd_status st = hd_vm_call(vm, fn, NULL, 0, NULL, 0, &r);
        hd_vunref(vm, fn);
        if (st) return st;
        hd_vunref(vm, r);
    }
    return HD_OK;
}

static const hd_tfunc rows[] = {
    {"_dist_init", tf_init, "force=, timeout=", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"_dist_rank", tf_rank, "", -1, HD_TF_GLOBAL},
    {"_dist_size", tf_size, "", -1, HD_TF_GLOBAL},
    {"_dist_local_rank", tf_local_rank, "", -1, HD_TF_GLOBAL},
    {"_dist_local_size", tf_local_size, "", -1, HD_TF_GLOBAL},
    {"_dist_available", tf_available, "", -1, HD_TF_GLOBAL},
    {"_dist_barrier", tf_barrier, "", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"_dist_all_reduce", tf_all_reduce, "t, op=", -1, HD_TF_GLOBAL},
    {"_dist_all_reduce_", tf_all_reduce_direct, "t, op=", -1, HD_TF_GLOBAL},
    {"_dist_broadcast_", tf_broadcast_direct, "t, root=", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"_dist_broadcast", tf_broadcast, "t, root=", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"_dist_all_gather", tf_all_gather, "t", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"_dist_reduce_scatter", tf_reduce_scatter, "t, op=", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"_dist_send", tf_send, "t, dst, tag=", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"_dist_recv", tf_recv, "t, src, tag=", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"_dist_grad_mean", tf_grad_mean, "params, bucket=, group=", -1, HD_TF_GLOBAL},
    {"_dist_overlap", tf_overlap, "params, bucket=", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"_on_backward", tf_on_backward, "fn", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
};

const hd_tfunc_table hd_tfuncs_dist = {rows, (int)(sizeof rows / sizeof rows[0])};
