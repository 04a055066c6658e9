/* nn.DataParallel's averaging overlapped with backward().
 *
 * A group is one DataParallel's parameters, cut into buckets in reverse
 * order (the order backward() usually completes them: the last layer
 * first), and after the first pass in the order rank 0's backward() did
 * complete them. The
 * autograd runtime tells the VM's watcher each leaf's gradient as soon as
 * it is complete (hd_grad_set_watcher); when the next bucket in order has
 * all its gradients, they are packed into the bucket's host buffer and
 * its all-reduce is started on MPI's communication thread
 * (hd_dist_all_reduce_start), while backward() goes on with the layers
 * below. Buckets start strictly in order, so every rank makes the same
 * calls in the same order whatever its timing. At the end of the pass the
 * buckets not started yet (parameters without a gradient on this rank
 * count as zeros) are started, the ranks agree on which parameters have a
 * gradient anywhere (one small all-reduce, which waits for the buckets),
 * and each such parameter's gradient of the pass becomes its mean over
 * the ranks, which backward() then adds to .grad as usual. A .grad from
 * before is the same on every rank (it was averaged when it was made), so
 * this equals averaging the accumulated .grad, which the plain path does.
 *
 * Only eager backward() of cpu parameters in float dtypes, with MPI open
 * for a second thread; anything else (compiled code, devices, a world of
 * one) takes the plain path after backward() (_dist_grad_mean). */
#include "builtins_tensor.h"
#include "hd_autograd.h"
#include "hd_backend.h"
#include "hd_dist.h"
#include "vm_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct dp_bucket {
    int i, j;       /* the group's parameters ps[i..j) */
    hd_tensor *buf; /* their gradients, flat, in f32 (f64 for f64) */
    int left;       /* parameters whose gradient this pass has not completed */
} dp_bucket;

typedef struct hd_dp_group {
    hd_tensor **ps;    /* the parameters (references): last first, then as made */
    hd_tensor **given; /* the same, in the order given */
    int *seen, nseen;  /* the order of this pass's gradients, until ordered */
    int ordered;       /* ps is in the order rank 0's backward() made them */
    int nready;        /* gradients made this pass */
    int n, nb, next;   /* next: the first bucket not started this pass */
    int64_t limit;
    dp_bucket *b;
    int *bucket_of;     /* ps[k]'s bucket */
    unsigned char *has; /* ps[k] has a gradient this pass: here, then anywhere */
    hd_tensor **keys;   /* open addressing, cap slots: a parameter to its index */
    int *vals, cap;
    uint64_t done_pass; /* the last pass averaged (the ctx's grad_ids then) */
    int log;            /* HODU_LOG=dist */
    struct hd_dp_group *next_group;
} hd_dp_group;

struct hd_dp {
    hd_grad_watcher watcher;
    hd_dp_group *groups;
    int ngroups;
};

static size_t slot_of(const hd_dp_group *g, const hd_tensor *t) {
    uintptr_t h = (uintptr_t)t;
    h ^= h >> 17;
    h *= (uintptr_t)0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 7) & (size_t)(g->cap - 1);
}

static int group_find(const hd_dp_group *g, const hd_tensor *t) {
    for (size_t s = slot_of(g, t);; s = (s + 1) & (size_t)(g->cap - 1)) {
        if (!g->keys[s]) return -1;
        if (g->keys[s] == t) return g->vals[s];
    }
}

/* The index from parameter to place in ps; 0 where one is listed twice. */
static int group_index(hd_dp_group *g) {
    memset(g->keys, 0, (size_t)g->cap * sizeof *g->keys);
    for (int k = 0; k < g->n; k++) {
        size_t s = slot_of(g, g->ps[k]);
        while (g->keys[s] && g->keys[s] != g->ps[k]) s = (s + 1) & (size_t)(g->cap - 1);
        if (g->keys[s]) return 0;
        g->keys[s] = g->ps[k], g->vals[s] = k;
    }
    return 1;
}

static void group_free(hd_ctx *ctx, hd_dp_group *g) {
    for (int k = 0; g->ps && k < g->n; k++) hd_tensor_unref(g->ps[k]);
    for (int k = 0; k < g->nb; k++) hd_tensor_unref(g->b[k].buf);
    hd_ctx_free(ctx, g->ps, (size_t)g->n * sizeof *g->ps);
    hd_ctx_free(ctx, g->given, (size_t)g->n * sizeof *g->given);
    hd_ctx_free(ctx, g->seen, (size_t)g->n * sizeof *g->seen);
    hd_ctx_free(ctx, g->b, (size_t)g->n * sizeof *g->b);
    hd_ctx_free(ctx, g->bucket_of, (size_t)g->n * sizeof *g->bucket_of);
    hd_ctx_free(ctx, g->has, (size_t)g->n);
    hd_ctx_free(ctx, g->keys, (size_t)g->cap * sizeof *g->keys);
    hd_ctx_free(ctx, g->vals, (size_t)g->cap * sizeof *g->vals);
    hd_ctx_free(ctx, g, sizeof *g);
}

static hd_dtype wire_dtype(hd_dtype dt) {
    return dt == HD_F64 ? HD_F64 : HD_F32;
}

static void group_reset(hd_dp_group *g) {
    g->next = g->nready = 0;
    memset(g->has, 0, (size_t)g->n);
    for (int k = 0; k < g->nb; k++) {
        g->b[k].left = g->b[k].j - g->b[k].i;
    }
}

/* The buckets (the rule of the averaging after backward()), each with
 * its buffer. */
static hd_status group_buckets(hd_ctx *ctx, hd_dp_group *g) {
    for (int i = 0; i < g->n;) {
        int j = hd_dist_bucket_end(g->ps, g->n, i, g->limit);
        int64_t count = 0;
        for (int k = i; k < j; k++) count += g->ps[k]->numel;
        dp_bucket *b = &g->b[g->nb++];
        b->i = i, b->j = j;
        b->buf = hd_tensor_new(ctx, wire_dtype(g->ps[i]->dtype), &count, 1);
        if (!b->buf) return ctx->status;
        for (int k = i; k < j; k++) g->bucket_of[k] = g->nb - 1;
        i = j;
    }
    return HD_OK;
}

/* Whether the group can be averaged this way: cpu tensors of float
 * dtypes, each once. */
static int group_fits(hd_tensor *const *ps, int n) {
    for (int k = 0; k < n; k++) {
        const hd_tensor *t = ps[k];
        if (!t->storage || t->storage->backend != &hd_cpu_backend ||
            hd_dtype_infos[t->dtype].cat != HD_CAT_FLOAT)
            return 0;
    }
    return 1;
}

static hd_dp_group *group_new(hd_ctx *ctx, hd_tensor *const *ps, int n, int64_t limit) {
    hd_dp_group *g = hd_ctx_calloc(ctx, 1, sizeof *g);
    if (!g) return NULL;
    g->cap = 16;
    while (g->cap < 2 * n) g->cap *= 2;
    g->ps = hd_ctx_calloc(ctx, (size_t)n, sizeof *g->ps);
    g->b = hd_ctx_calloc(ctx, (size_t)n, sizeof *g->b);
    g->bucket_of = hd_ctx_calloc(ctx, (size_t)n, sizeof *g->bucket_of);
    g->has = hd_ctx_calloc(ctx, (size_t)n, 1);
    g->keys = hd_ctx_calloc(ctx, (size_t)g->cap, sizeof *g->keys);
    g->vals = hd_ctx_calloc(ctx, (size_t)g->cap, sizeof *g->vals);
    g->given = hd_ctx_calloc(ctx, (size_t)n, sizeof *g->given);
    g->seen = hd_ctx_calloc(ctx, (size_t)n, sizeof *g->seen);
    g->n = n, g->limit = limit;
    int ok = g->ps && g->b && g->bucket_of && g->has && g->keys && g->vals && g->given && g->seen;
    for (int k = 0; ok && k < n; k++) {
        g->ps[k] = hd_tensor_ref(ps[n - 1 - k]);
        g->given[k] = ps[k];
    }
    ok = ok && group_index(g); /* a parameter listed twice: the plain path */
    if (ok && group_buckets(ctx, g)) ok = 0;
    if (!ok) {
        group_free(ctx, g); /* hd_tensor_unref takes the NULLs not reached */
        return NULL;
    }
    group_reset(g);
    g->log = hd_log_on("dist");
    return g;
}

/* p's part of bucket b's buffer, from element at, in p's shape. */
static hd_status bucket_part(hd_ctx *ctx, const dp_bucket *b, int64_t at, const hd_tensor *p,
                             hd_tensor **view) {
    hd_tensor *part = NULL;
    hd_status st = hd_tslice_axis(ctx, b->buf, 0, at, p->numel, 0, &part);
    if (!st) st = hd_treshape(ctx, part, p->shape, p->ndim, view);
    hd_tensor_unref(part);
    return st;
}

/* Bucket b's gradients of this pass (zeros where none) into its buffer. */
static hd_status bucket_pack(hd_ctx *ctx, hd_dp_group *g, dp_bucket *b) {
    char *data = hd_tensor_data(b->buf);
    size_t es = (size_t)hd_dtype_size(b->buf->dtype);
    int64_t at = 0;
    hd_status st = HD_OK;
    for (int k = b->i; k < b->j && !st; k++) {
        hd_tensor *p = g->ps[k], *pend = hd_grad_pass_get(ctx, p), *view = NULL;
        if (!pend) {
            memset(data + (size_t)at * es, 0, (size_t)p->numel * es);
        } else {
            st = bucket_part(ctx, b, at, p, &view);
            if (!st) st = hd_tensor_copy_into(ctx, view, pend);
            hd_tensor_unref(view);
        }
        at += p->numel;
    }
    return st;
}

static hd_status bucket_start(hd_ctx *ctx, hd_dp_group *g, dp_bucket *b) {
    char err[512];
    int was = hd_grad_set_enabled(ctx, 0);
    hd_status st = bucket_pack(ctx, g, b);
    hd_grad_set_enabled(ctx, was);
    if (st) return st;
    if (hd_dist_all_reduce_start(hd_tensor_data(b->buf), b->buf->numel, b->buf->dtype, HD_DIST_SUM,
                                 1, err, sizeof err))
        return hd_error(ctx, HD_ERR_RUNTIME, "%s", err);
    return HD_OK;
}

static void bucket_log(const hd_dp_group *g, const dp_bucket *b, int after) {
    char when[96] = "after backward()";
    if (!after)
        snprintf(when, sizeof when, "during backward(), %d of %d gradients still to come",
                 g->n - g->nready, g->n);
    fprintf(stderr,
            "hodu: rank %d: DataParallel: bucket %d of %d (%d parameters, %lld elements) "
            "started %s\n",
            hd_dist_rank(), (int)(b - g->b), g->nb, b->j - b->i, (long long)b->buf->numel, when);
}

/* Start the buckets, in order, whose gradients are complete (all: the
 * pass has ended). */
static hd_status group_advance(hd_ctx *ctx, hd_dp_group *g, int all) {
    while (g->next < g->nb && (all || g->b[g->next].left == 0)) {
        if (g->log) bucket_log(g, &g->b[g->next], all);
        hd_status st = bucket_start(ctx, g, &g->b[g->next]);
        if (st) return st;
        g->next++;
    }
    return HD_OK;
}

static hd_status dp_ready(hd_ctx *ctx, void *ud, hd_tensor *leaf, hd_tensor *grad) {
    (void)grad;
    struct hd_dp *dp = ud;
    for (hd_dp_group *g = dp->groups; g; g = g->next_group) {
        int k = group_find(g, leaf);
        if (k < 0 || g->has[k]) continue;
        g->has[k] = 1;
        g->nready++;
        if (!g->ordered) g->seen[g->nseen++] = k;
        g->b[g->bucket_of[k]].left--;
        hd_status st = group_advance(ctx, g, 0);
        if (st) return st;
    }
    return HD_OK;
}

/* Each parameter that some rank has a gradient for: its mean, from the
 * bucket's buffer, as its gradient of this pass. */
static hd_status group_unpack(hd_ctx *ctx, hd_dp_group *g) {
    for (int bk = 0; bk < g->nb; bk++) {
        dp_bucket *b = &g->b[bk];
        int64_t at = 0;
        for (int k = b->i; k < b->j; k++) {
            hd_tensor *p = g->ps[k], *view = NULL, *mean = NULL;
            hd_status st = HD_OK;
            if (g->has[k]) {
                st = bucket_part(ctx, b, at, p, &view);
                mean = st ? NULL : hd_tensor_new(ctx, p->dtype, p->shape, p->ndim);
                st = st ? st : !mean ? ctx->status : hd_tensor_copy_into(ctx, mean, view);
                if (!st) st = hd_grad_pass_set(ctx, p, hd_tensor_ref(mean));
            }
            hd_tensor_unref(view), hd_tensor_unref(mean);
            if (st) return st;
            at += p->numel;
        }
    }
    return HD_OK;
}

/* ps in order (a permutation of its places), and buckets made again;
 * as before where that fails. */
static hd_status group_permute(hd_ctx *ctx, hd_dp_group *g, const int32_t *order) {
    size_t nbytes = (size_t)g->n * sizeof *g->ps;
    hd_tensor **old = hd_ctx_alloc(ctx, nbytes);
    dp_bucket *b = hd_ctx_calloc(ctx, (size_t)g->n, sizeof *b), *old_b = g->b;
    int old_nb = g->nb;
    if (!old || !b) {
        hd_ctx_free(ctx, old, nbytes), hd_ctx_free(ctx, b, (size_t)g->n * sizeof *b);
        return ctx->status;
    }
    memcpy(old, g->ps, nbytes);
    for (int k = 0; k < g->n; k++) g->ps[k] = old[order[k]];
    g->b = b, g->nb = 0;
    hd_status st = group_buckets(ctx, g);
    dp_bucket *drop = st ? b : old_b;
    int ndrop = st ? g->nb : old_nb;
    if (st) { /* back as it was */
        memcpy(g->ps, old, nbytes);
        g->b = old_b, g->nb = old_nb;
        for (int k = 0; k < g->nb; k++)
            for (int i = g->b[k].i; i < g->b[k].j; i++) g->bucket_of[i] = k;
    }
    group_index(g);
    for (int k = 0; k < ndrop; k++) hd_tensor_unref(drop[k].buf);
    hd_ctx_free(ctx, drop, (size_t)g->n * sizeof *drop);
    hd_ctx_free(ctx, old, nbytes);
    return st;
}

/* After the first pass in which rank 0 made gradients for the group:
 * every rank puts the parameters in the order rank 0's backward() made
 * them (those it did not make after, as they were), so that each bucket
 * is complete as early as it can be, whatever order parameters() gives
 * (PyTorch's DistributedDataParallel rebuilds its buckets so). */
static hd_status group_reorder(hd_ctx *ctx, hd_dp_group *g) {
    char err[512];
    size_t bytes = (size_t)(g->n + 1) * sizeof(int32_t);
    int32_t *order = hd_ctx_alloc(ctx, bytes);
    if (!order) return ctx->status;
    unsigned char *placed = g->has; /* scratch: the pass is over */
    memset(placed, 0, (size_t)g->n);
    int m = 0;
    for (int s = 0; s < g->nseen; s++) placed[order[1 + m++] = g->seen[s]] = 1;
    for (int k = 0; k < g->n; k++)
        if (!placed[k]) order[1 + m++] = k;
    order[0] = g->nseen;
    g->nseen = 0;
    hd_status st = HD_OK;
    if (hd_dist_broadcast(order, (int64_t)bytes, 0, err, sizeof err))
        st = hd_error(ctx, HD_ERR_RUNTIME, "%s", err);
    else if (order[0] > 0)
        st = group_permute(ctx, g, order + 1);
    if (!st && order[0] > 0) {
        g->ordered = 1;
        if (g->log)
            fprintf(stderr, "hodu: rank %d: DataParallel: buckets in the order of backward()\n",
                    hd_dist_rank());
    }
    hd_ctx_free(ctx, order, bytes);
    return st;
}

static hd_status group_finish(hd_ctx *ctx, hd_dp_group *g) {
    char err[512];
    hd_status st = group_advance(ctx, g, 1);
    int64_t t0 = g->log ? hd_now_ns() : 0;
    /* waits for the buckets first (the calls are made in order) */
    if (!st && hd_dist_all_reduce(g->has, g->n, HD_U8, HD_DIST_MAX, err, sizeof err))
        st = hd_error(ctx, HD_ERR_RUNTIME, "%s", err);
    if (g->log)
        fprintf(stderr, "hodu: rank %d: DataParallel: %.0f us waited for the buckets\n",
                hd_dist_rank(), 1e-3 * (double)(hd_now_ns() - t0));
    if (!st) {
        int was = hd_grad_set_enabled(ctx, 0);
        st = group_unpack(ctx, g);
        hd_grad_set_enabled(ctx, was);
    }
    if (!st) g->done_pass = ctx->grad_ids;
    if (!st && !g->ordered) st = group_reorder(ctx, g);
    return st;
}

static hd_status dp_finish(hd_ctx *ctx, void *ud, int failed) {
    struct hd_dp *dp = ud;
    hd_status st = HD_OK;
    for (hd_dp_group *g = dp->groups; g; g = g->next_group) {
        if (!failed && !st) st = group_finish(ctx, g);
        char err[512];
        hd_dist_wait(err, sizeof err); /* the buffers are free again */
        group_reset(g);
    }
    return st;
}

int hd_dist_dp_register(hd_vm *vm, hd_tensor *const *ps, int n, int64_t limit) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (n < 1 || !hd_dist_async_ok() || !group_fits(ps, n) || limit < 1) return -1;
    if (!vm->dp) {
        vm->dp = hd_ctx_calloc(ctx, 1, sizeof *vm->dp);
        if (!vm->dp) return -2;
        vm->dp->watcher = (hd_grad_watcher){dp_ready, dp_finish, vm->dp};
    }
    hd_dp_group *g = group_new(ctx, ps, n, limit), **end = &vm->dp->groups;
    if (!g) return ctx->status == HD_ERR_MEMORY ? -2 : -1;
    while (*end) end = &(*end)->next_group;
    *end = g;
    hd_grad_set_watcher(ctx, &vm->dp->watcher);
    return vm->dp->ngroups++;
}

int hd_dist_dp_covered(hd_vm *vm, int id, hd_tensor *const *ps, int n) {
    hd_dp_group *g = vm->dp ? vm->dp->groups : NULL;
    for (int k = 0; g && k < id; k++) g = g->next_group;
    if (!g || g->done_pass != hd_vm_ctx(vm)->grad_ids || g->n != n) return 0;
    for (int k = 0; k < n; k++)
        if (g->given[k] != ps[k]) return 0;
    return 1;
}

void hd_dist_dp_free(hd_vm *vm) {
    if (!vm->dp) return;
    hd_ctx *ctx = hd_vm_ctx(vm);
    char err[512];
    hd_dist_wait(err, sizeof err);
    hd_grad_set_watcher(ctx, NULL);
    while (vm->dp->groups) {
        hd_dp_group *g = vm->dp->groups;
        vm->dp->groups = g->next_group;
        group_free(ctx, g);
    }
    hd_ctx_free(ctx, vm->dp, sizeof *vm->dp);
    vm->dp = NULL;
}
