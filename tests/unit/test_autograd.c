/* Autograd semantics: accumulation, grad=, non-leaf tensors, shared
 * values, views, no_grad, detach, gradient contexts, clear_tape, every
 * error, dtypes, memory that stays flat over a training loop, and
 * allocation failures during recording and backward. */
#include "hd_test.h"
#include "hd_autograd.h"

#include <sys/resource.h>

/* ---- helpers ---- */

static hd_tensor *vec(hd_ctx *ctx, hd_dtype dt, int n, const double *v) {
    int64_t s[1] = {n};
    hd_tensor *t = hd_tensor_new(ctx, dt, s, 1);
    for (int i = 0; i < n; i++) hd_dtype_store(dt, t->storage->data, i, v[i]);
    return t;
}

static hd_tensor *mat(hd_ctx *ctx, int r, int c, const double *v) {
    int64_t s[2] = {r, c};
    hd_tensor *t = hd_tensor_new(ctx, HD_F64, s, 2);
    for (int i = 0; i < r * c; i++) hd_dtype_store(HD_F64, t->storage->data, i, v[i]);
    return t;
}

static hd_tensor *param(hd_ctx *ctx, hd_tensor *t) {
    CHECK(hd_grad_set_requires(ctx, t, 1) == HD_OK);
    return t;
}

static hd_tensor *op1(hd_ctx *ctx, hd_op op, hd_tensor *a, const hd_attrs *at) {
    hd_tensor *out = NULL;
    hd_status st = hd_op_run(ctx, op, &a, 1, at, &out);
    CHECK_MSG(st == HD_OK, "%s: %s", hd_op_name(op), hd_error_message(ctx));
    return out;
}

static hd_tensor *op2(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b) {
    hd_tensor *out = NULL;
    hd_status st = hd_op_binary(ctx, op, a, b, &out);
    CHECK_MSG(st == HD_OK, "%s: %s", hd_op_name(op), hd_error_message(ctx));
    return out;
}

static hd_tensor *sum(hd_ctx *ctx, hd_tensor *a) {
    return op1(ctx, HD_OP_SUM, a, NULL);
}

static hd_tensor *num(hd_ctx *ctx, double v) {
    return hd_tensor_number(ctx, HD_F64, v);
}

/* a * v for a Hodu number v */
static hd_tensor *scale(hd_ctx *ctx, hd_tensor *a, double v) {
    hd_tensor *n = num(ctx, v), *out = op2(ctx, HD_OP_MUL, a, n);
    hd_tensor_unref(n);
    return out;
}

static int grad_is(const hd_tensor *t, int n, const double *want) {
    const hd_tensor *g = hd_grad_get(t);
    if (!g || g->numel != n) return 0;
    for (int i = 0; i < n; i++)
        if (!hd_test_close(hd_tensor_get(g, i), want[i], 1e-12, 1e-12)) return 0;
    return 1;
}

static hd_status backward(hd_ctx *ctx, hd_tensor *t) {
    return hd_grad_backward(ctx, t, NULL, 0);
}

static void unref_all(hd_tensor **ts, int n) {
    for (int i = 0; i < n; i++) hd_tensor_unref(ts[i]);
}

static int msg_has(hd_ctx *ctx, const char *s) {
    return strstr(hd_error_message(ctx), s) != NULL;
}

/* ---- basics ---- */

static void test_accumulate(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 2, (double[]){2, 3}));
    CHECK(hd_grad_requires(ctx, w) && hd_grad_is_leaf(ctx, w) && hd_grad_get(w) == NULL);
    for (int k = 1; k <= 2; k++) { /* two forwards, two backwards: += */
        hd_tensor *y = op2(ctx, HD_OP_MUL, w, w), *l = sum(ctx, y);
        CHECK(hd_grad_requires(ctx, y) && !hd_grad_is_leaf(ctx, y));
        CHECK(backward(ctx, l) == HD_OK);
        CHECK(grad_is(w, 2, (double[]){4.0 * k, 6.0 * k}));
        CHECK(hd_grad_get(y) == NULL); /* non-leaf gradients are not kept */
        unref_all((hd_tensor *[]){y, l}, 2);
    }
    /* retain_graph: backward twice through one forward */
    hd_grad_zero(ctx, &w, 1);
    CHECK(hd_grad_get(w) == NULL);
    hd_tensor *w3 = scale(ctx, w, 3), *l = sum(ctx, w3);
    hd_tensor_unref(w3);
    CHECK(hd_grad_backward(ctx, l, NULL, 1) == HD_OK);
    CHECK(hd_grad_backward(ctx, l, NULL, 0) == HD_OK);
    CHECK(grad_is(w, 2, (double[]){6, 6}));
    CHECK(backward(ctx, l) == HD_ERR_RUNTIME);
    CHECK(msg_has(ctx, "backward through records that were already freed"));
    hd_tensor_unref(l);
    CHECK(hd_grad_record_count(ctx) == 0); /* the scale output died with l */
    hd_tensor_unref(w);
}

static void test_grad_arg(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 3, (double[]){1, 2, 3}));
    hd_tensor *y = scale(ctx, w, 3);
    CHECK(backward(ctx, y) == HD_ERR_RUNTIME);
    CHECK(strcmp(hd_error_message(ctx), "backward needs a one-element tensor or grad=") == 0);
    hd_tensor *bad = vec(ctx, HD_F64, 2, (double[]){1, 1});
    CHECK(hd_grad_backward(ctx, y, bad, 0) == HD_ERR_RUNTIME && msg_has(ctx, "grad has shape [2]"));
    hd_tensor *g = vec(ctx, HD_F32, 3, (double[]){1, 2, -1}); /* cast to the loss dtype */
    CHECK(hd_grad_backward(ctx, y, g, 0) == HD_OK);
    CHECK(grad_is(w, 3, (double[]){3, 6, -3}));
    unref_all((hd_tensor *[]){w, y, bad, g}, 4);
    /* a leaf can be the loss */
    hd_tensor *s = param(ctx, vec(ctx, HD_F64, 1, (double[]){5}));
    CHECK(backward(ctx, s) == HD_OK && grad_is(s, 1, (double[]){1}));
    hd_tensor *c = vec(ctx, HD_F64, 1, (double[]){5});
    CHECK(backward(ctx, c) == HD_ERR_RUNTIME && msg_has(ctx, "does not require grad"));
    unref_all((hd_tensor *[]){s, c}, 2);
}

static int tensor_is(const hd_tensor *g, int n, const double *want) {
    if (!g || g->numel != n) return 0;
    for (int i = 0; i < n; i++)
        if (!hd_test_close(hd_tensor_get(g, i), want[i], 1e-12, 1e-12)) return 0;
    return 1;
}

/* hd_grad_partial: gradients for some tensors only (a leaf and a record's
 * result), no .grad changed, the graph kept; with create, the gradient
 * has records and differentiates again */
static void test_partial(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 2, (double[]){2, 3}));
    hd_tensor *v = param(ctx, vec(ctx, HD_F64, 2, (double[]){1, -1}));
    hd_tensor *u = scale(ctx, w, 2); /* u = 2w */
    hd_tensor *uv = op2(ctx, HD_OP_MUL, u, v), *uvu = op2(ctx, HD_OP_MUL, uv, u);
    hd_tensor *l = sum(ctx, uvu); /* l = sum(u^2 v) */
    unref_all((hd_tensor *[]){uv, uvu}, 2);
    hd_tensor *g[2];
    CHECK(hd_grad_partial(ctx, l, (hd_tensor *[]){u, v}, 2, g, 0) == HD_OK);
    CHECK(tensor_is(g[0], 2, (double[]){8, -12}) && tensor_is(g[1], 2, (double[]){16, 36}));
    CHECK(hd_grad_get(w) == NULL && hd_grad_get(v) == NULL);
    CHECK(!hd_grad_requires(ctx, g[0]));
    unref_all(g, 2);
    /* the graph was kept: a backward through it still runs */
    CHECK(backward(ctx, l) == HD_OK && grad_is(w, 2, (double[]){16, -24}));
    hd_grad_zero(ctx, &w, 1);
    unref_all((hd_tensor *[]){u, l}, 2);
    /* create: d/dw sum(d/dw sum(w^3)) = 6w; a tensor the loss skips: NULL */
    hd_tensor *w2 = op2(ctx, HD_OP_MUL, w, w), *w3 = op2(ctx, HD_OP_MUL, w2, w);
    hd_tensor *c = sum(ctx, w3);
    unref_all((hd_tensor *[]){w2, w3}, 2);
    CHECK(hd_grad_partial(ctx, c, (hd_tensor *[]){w, v}, 2, g, 1) == HD_OK);
    CHECK(tensor_is(g[0], 2, (double[]){12, 27}) && g[1] == NULL && hd_grad_get(w) == NULL);
    CHECK(hd_grad_requires(ctx, g[0]));
    hd_tensor *s = sum(ctx, g[0]);
    CHECK(backward(ctx, s) == HD_OK && grad_is(w, 2, (double[]){12, 18}));
    unref_all((hd_tensor *[]){g[0], s, c, w, v}, 5);
}

/* ---- the backward watcher (hd_grad_set_watcher) ---- */

typedef struct watch_log {
    hd_tensor *leaf[8];
    double first[8]; /* the gradient's first value when ready was told */
    int nready, nfinish, failed, fail_finish;
    hd_tensor *set_leaf[2], *set_to[2]; /* what finish replaces */
    double got_w1;                      /* hd_grad_pass_get in finish */
    hd_tensor *w1;
} watch_log;

static hd_status watch_ready(hd_ctx *ctx, void *ud, hd_tensor *leaf, hd_tensor *g) {
    (void)ctx;
    watch_log *w = ud;
    if (w->nready < 8) {
        w->leaf[w->nready] = leaf;
        w->first[w->nready] = hd_tensor_get(g, 0);
    }
    w->nready++;
    return HD_OK;
}

static hd_status watch_finish(hd_ctx *ctx, void *ud, int failed) {
    watch_log *w = ud;
    w->nfinish++;
    w->failed = failed;
    hd_tensor *g = w->w1 ? hd_grad_pass_get(ctx, w->w1) : NULL;
    w->got_w1 = g ? hd_tensor_get(g, 0) : -1;
    for (int k = 0; k < 2; k++)
        if (w->set_leaf[k])
            CHECK(hd_grad_pass_set(ctx, w->set_leaf[k], hd_tensor_ref(w->set_to[k])) == HD_OK);
    if (w->fail_finish) return hd_error(ctx, HD_ERR_RUNTIME, "finish failed on purpose");
    return HD_OK;
}

/* Each leaf is told once, as soon as its gradient is whole (w2, fed by
 * two records, after both and before w1); finish sees the pass's
 * gradients and may replace them, also for a leaf the pass did not reach;
 * grad() and create_graph are not watched; a failing finish keeps .grad. */
static void test_watcher(hd_ctx *ctx) {
    watch_log log;
    memset(&log, 0, sizeof log);
    hd_grad_watcher gw = {watch_ready, watch_finish, &log};
    hd_tensor *w1 = param(ctx, vec(ctx, HD_F64, 2, (double[]){1, 2}));
    hd_tensor *w2 = param(ctx, vec(ctx, HD_F64, 2, (double[]){3, 5}));
    hd_tensor *w3 = param(ctx, vec(ctx, HD_F64, 2, (double[]){0, 0}));
    log.w1 = w1;
    hd_grad_set_watcher(ctx, &gw);
    /* l = sum(2 w1 * w2 + w2): dl/dw2 = 2 w1 + 1, dl/dw1 = 2 w2 */
    hd_tensor *a = scale(ctx, w1, 2), *b = op2(ctx, HD_OP_MUL, a, w2),
              *c = op2(ctx, HD_OP_ADD, b, w2);
    hd_tensor *l = sum(ctx, c);
    unref_all((hd_tensor *[]){a, b, c}, 3);
    CHECK(hd_grad_backward(ctx, l, NULL, 1) == HD_OK);
    CHECK(log.nready == 2 && log.nfinish == 1 && !log.failed);
    CHECK(log.leaf[0] == w2 && log.first[0] == 3 && log.leaf[1] == w1 && log.first[1] == 6);
    CHECK(log.got_w1 == 6);
    CHECK(grad_is(w1, 2, (double[]){6, 10}) && grad_is(w2, 2, (double[]){3, 5}));
    CHECK(hd_grad_get(w3) == NULL);
    /* finish replaces w1's gradient and gives w3 one */
    log.set_leaf[0] = w1, log.set_to[0] = vec(ctx, HD_F64, 2, (double[]){10, 10});
    log.set_leaf[1] = w3, log.set_to[1] = vec(ctx, HD_F64, 2, (double[]){7, 7});
    CHECK(hd_grad_backward(ctx, l, NULL, 1) == HD_OK && log.nready == 4 && log.nfinish == 2);
    CHECK(grad_is(w1, 2, (double[]){16, 20}) && grad_is(w2, 2, (double[]){6, 10}));
    CHECK(grad_is(w3, 2, (double[]){7, 7}));
    /* a failing finish: the error, and no .grad changed */
    log.fail_finish = 1;
    CHECK(hd_grad_backward(ctx, l, NULL, 1) == HD_ERR_RUNTIME && msg_has(ctx, "on purpose"));
    CHECK(log.nfinish == 3 && grad_is(w1, 2, (double[]){16, 20}) &&
          grad_is(w3, 2, (double[]){7, 7}));
    log.fail_finish = 0;
    unref_all(log.set_to, 2);
    log.set_leaf[0] = log.set_leaf[1] = NULL;
    /* grad() and create_graph: not watched */
    hd_tensor *g[1];
    CHECK(hd_grad_partial(ctx, l, &w1, 1, g, 0) == HD_OK && tensor_is(g[0], 2, (double[]){6, 10}));
    hd_tensor_unref(g[0]);
    CHECK(hd_grad_backward_create(ctx, l, NULL) == HD_OK);
    CHECK(log.nready == 6 && log.nfinish == 3);
    /* a leaf as the loss: told, then finish */
    hd_tensor *s = param(ctx, vec(ctx, HD_F64, 1, (double[]){4}));
    CHECK(backward(ctx, s) == HD_OK && log.nready == 7 && log.leaf[6] == s && log.nfinish == 4);
    hd_grad_set_watcher(ctx, NULL);
    CHECK(backward(ctx, l) == HD_OK && log.nfinish == 4);
    unref_all((hd_tensor *[]){w1, w2, w3, l, s}, 5);
}

/* diamond graphs: a value used twice */
static void test_shared(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 2, (double[]){1, -2}));
    hd_tensor *a = scale(ctx, w, 2), *b = scale(ctx, w, 3), *c = op2(ctx, HD_OP_MUL, a, b);
    hd_tensor *d = op2(ctx, HD_OP_ADD, c, c), *l = sum(ctx, d); /* 12 w^2 */
    CHECK(backward(ctx, l) == HD_OK);
    CHECK(grad_is(w, 2, (double[]){24, -48}));
    unref_all((hd_tensor *[]){w, a, b, c, d, l}, 6);
}

static void test_views(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, mat(ctx, 2, 3, (double[]){1, 2, 3, 4, 5, 6}));
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2, at.shape[0] = 1, at.shape[1] = 0;
    hd_tensor *t = op1(ctx, HD_OP_PERMUTE, w, &at); /* [3, 2] */
    memset(&at, 0, sizeof at);
    at.step[0] = 2, at.len[0] = 2, at.start[1] = 1, at.step[1] = 1, at.len[1] = 1;
    hd_tensor *s = op1(ctx, HD_OP_SLICE, t, &at); /* t[0:3:2, 1:2] = w[1, 0], w[1, 2] */
    memset(&at, 0, sizeof at);
    at.nshape = 3, at.shape[0] = 4, at.shape[1] = 2, at.shape[2] = 1;
    hd_tensor *e = op1(ctx, HD_OP_EXPAND, s, &at);
    memset(&at, 0, sizeof at);
    at.nshape = 1, at.shape[0] = -1;
    hd_tensor *r = op1(ctx, HD_OP_RESHAPE, e, &at), *l = sum(ctx, r);
    CHECK(s->storage == w->storage); /* views share storage, and record */
    CHECK(backward(ctx, l) == HD_OK);
    CHECK(grad_is(w, 6, (double[]){0, 0, 0, 4, 0, 4}));
    unref_all((hd_tensor *[]){w, t, s, e, r, l}, 6);
}

static void test_no_grad_detach(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 2, (double[]){1, 2}));
    CHECK(hd_grad_is_enabled(ctx));
    int was = hd_grad_set_enabled(ctx, 0);
    CHECK(was == 1 && !hd_grad_is_enabled(ctx));
    hd_tensor *y = scale(ctx, w, 2);
    CHECK(!hd_grad_requires(ctx, y) && hd_grad_record_count(ctx) == 0);
    CHECK(backward(ctx, y) == HD_ERR_RUNTIME && msg_has(ctx, "does not require grad"));
    hd_grad_set_enabled(ctx, was);
    hd_tensor *d = hd_grad_detach(ctx, w);
    CHECK(d->storage == w->storage && !hd_grad_requires(ctx, d) && hd_grad_is_leaf(ctx, d));
    hd_tensor *p = op2(ctx, HD_OP_MUL, d, w), *l = sum(ctx, p); /* d is a constant */
    CHECK(backward(ctx, l) == HD_OK && grad_is(w, 2, (double[]){1, 2}));
    /* a detached view of a computed tensor is a leaf that can be marked */
    hd_tensor *q = scale(ctx, w, 3), *dq = hd_grad_detach(ctx, q);
    CHECK(hd_grad_set_requires(ctx, q, 1) == HD_ERR_RUNTIME && msg_has(ctx, "leaf tensors"));
    CHECK(hd_grad_set_requires(ctx, dq, 1) == HD_OK && hd_grad_requires(ctx, dq));
    unref_all((hd_tensor *[]){w, y, d, p, l, q, dq}, 7);
}

/* ---- gradient contexts ---- */

static void test_contexts(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 2, (double[]){1, 2}));
    hd_tensor *outer = scale(ctx, w, 2);
    size_t outer_records = hd_grad_record_count(ctx);
    CHECK(outer_records == 1 && hd_grad_context_depth(ctx) == 0);

    CHECK(hd_grad_context_push(ctx) == HD_OK && hd_grad_context_depth(ctx) == 1);
    CHECK(hd_grad_record_count(ctx) == 0 && !hd_grad_requires(ctx, w));
    hd_tensor *v = param(ctx, vec(ctx, HD_F64, 2, (double[]){3, 4}));
    hd_tensor *z = op2(ctx, HD_OP_MUL, w, v), *lz = sum(ctx, z);
    CHECK(hd_grad_record_count(ctx) == 2);
    /* the outer tensor is a constant here, and cannot be differentiated */
    CHECK(backward(ctx, outer) == HD_ERR_RUNTIME && msg_has(ctx, "another gradient context"));
    {
        CHECK(hd_grad_context_push(ctx) == HD_OK && hd_grad_context_depth(ctx) == 2);
        hd_tensor *u = op2(ctx, HD_OP_MUL, v, v), *lu = sum(ctx, u); /* v constant here */
        CHECK(!hd_grad_requires(ctx, u) && hd_grad_record_count(ctx) == 0);
        CHECK(backward(ctx, lu) == HD_ERR_RUNTIME);
        CHECK(hd_grad_context_pop(ctx) == HD_OK);
        unref_all((hd_tensor *[]){u, lu}, 2);
    }
    CHECK(hd_grad_record_count(ctx) == 2);
    CHECK(hd_grad_backward(ctx, lz, NULL, 1) == HD_OK);
    CHECK(grad_is(v, 2, (double[]){1, 2}) && hd_grad_get(w) == NULL); /* isolation */
    hd_tensor *keep = scale(ctx, v, 5);
    CHECK(hd_grad_context_pop(ctx) == HD_OK && hd_grad_context_depth(ctx) == 0);

    /* records made inside are freed at the end: backward through them fails,
     * and the tensors are constants outside */
    CHECK(hd_grad_record_count(ctx) == outer_records);
    CHECK(backward(ctx, lz) == HD_ERR_RUNTIME && msg_has(ctx, "already freed"));
    CHECK(!hd_grad_requires(ctx, keep) && !hd_grad_requires(ctx, v));
    hd_tensor *m = op2(ctx, HD_OP_MUL, keep, w), *lm = sum(ctx, m);
    CHECK(backward(ctx, lm) == HD_OK && grad_is(w, 2, (double[]){15, 20}));
    /* the outer records were not touched */
    hd_tensor *lo = sum(ctx, outer);
    CHECK(backward(ctx, lo) == HD_OK && grad_is(w, 2, (double[]){17, 22}));
    CHECK(hd_grad_context_pop(ctx) == HD_ERR_RUNTIME && msg_has(ctx, "no gradient context"));
    unref_all((hd_tensor *[]){w, outer, v, z, lz, keep, m, lm, lo}, 9);
    CHECK(hd_grad_record_count(ctx) == 0);
}

/* grad_context turns recording on inside no_grad and restores the mode */
static void test_context_mode(hd_ctx *ctx) {
    int was = hd_grad_set_enabled(ctx, 0);
    CHECK(hd_grad_context_push(ctx) == HD_OK && hd_grad_is_enabled(ctx));
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 1, (double[]){2}));
    hd_tensor *y = op2(ctx, HD_OP_MUL, w, w);
    CHECK(backward(ctx, y) == HD_OK && grad_is(w, 1, (double[]){4}));
    /* records still alive at the end are freed; their tensors outlive them */
    hd_tensor *z = scale(ctx, w, 2);
    CHECK(hd_grad_record_count(ctx) == 1);
    CHECK(hd_grad_context_pop(ctx) == HD_OK && !hd_grad_is_enabled(ctx));
    hd_grad_set_enabled(ctx, was);
    CHECK(hd_tensor_get(z, 0) == 4);
    unref_all((hd_tensor *[]){w, y, z}, 3);
}

/* Held contexts: entered again and again, their leaves train at every
 * entry, their records last between entries and go when the context is
 * freed; a context is on the stack at most once. */
static void test_held_context(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 2, (double[]){1, 2}));
    hd_grad_scope *a = hd_grad_context_new(ctx), *b = hd_grad_context_new(ctx);
    CHECK(a && b && hd_grad_context_id(a) != hd_grad_context_id(b));
    CHECK(hd_grad_context_enter(ctx, a) == HD_OK && hd_grad_context_depth(ctx) == 1);
    hd_tensor *v = param(ctx, vec(ctx, HD_F64, 2, (double[]){3, 4}));
    hd_tensor *m1 = op2(ctx, HD_OP_MUL, v, w), *l1 = sum(ctx, m1); /* w: a constant here */
    hd_tensor *m2 = scale(ctx, v, 2), *keep = sum(ctx, m2);
    CHECK(hd_grad_context_records(a) == 4 && hd_grad_record_count(ctx) == 4);
    CHECK(backward(ctx, l1) == HD_OK && grad_is(v, 2, (double[]){1, 2}) && !hd_grad_get(w));
    CHECK(hd_grad_context_enter(ctx, a) == HD_ERR_RUNTIME && msg_has(ctx, "already entered"));
    CHECK(hd_grad_context_pop(ctx) == HD_OK && hd_grad_context_depth(ctx) == 0);
    /* outside: v is a constant, the records are kept */
    CHECK(!hd_grad_requires(ctx, v) && !hd_grad_requires(ctx, keep));
    CHECK(hd_grad_context_records(a) == 2);
    CHECK(backward(ctx, keep) == HD_ERR_RUNTIME && msg_has(ctx, "another gradient context"));
    /* b inside a plain block, and a inside b */
    CHECK(hd_grad_context_push(ctx) == HD_OK && hd_grad_context_enter(ctx, b) == HD_OK);
    CHECK(hd_grad_context_enter(ctx, a) == HD_OK && hd_grad_context_depth(ctx) == 3);
    CHECK(hd_grad_requires(ctx, v) && hd_grad_requires(ctx, keep));
    CHECK(backward(ctx, keep) == HD_OK && grad_is(v, 2, (double[]){3, 4}));
    CHECK(hd_grad_context_records(a) == 0);
    hd_tensor *m3 = scale(ctx, v, 3), *l2 = sum(ctx, m3);
    CHECK(hd_grad_context_pop(ctx) == HD_OK && hd_grad_context_pop(ctx) == HD_OK);
    CHECK(hd_grad_context_pop(ctx) == HD_OK && hd_grad_context_depth(ctx) == 0);
    /* freeing a frees its records: l2 is a constant with freed records */
    CHECK(hd_grad_context_records(a) == 2);
    hd_grad_context_free(ctx, a);
    CHECK(backward(ctx, l2) == HD_ERR_RUNTIME && msg_has(ctx, "already freed"));
    /* freeing a context still entered leaves it, and what is inside it */
    CHECK(hd_grad_context_enter(ctx, b) == HD_OK && hd_grad_context_push(ctx) == HD_OK);
    hd_tensor *u = param(ctx, vec(ctx, HD_F64, 1, (double[]){5}));
    hd_tensor *lu = scale(ctx, u, 2);
    hd_grad_context_free(ctx, b);
    CHECK(hd_grad_context_depth(ctx) == 0 && hd_grad_record_count(ctx) == 0);
    CHECK(hd_grad_get(w) == NULL);
    unref_all((hd_tensor *[]){w, v, m1, l1, m2, keep, m3, l2, u, lu}, 10);
}

static void test_clear_tape(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 2, (double[]){1, 2}));
    hd_tensor *y = scale(ctx, w, 2), *l = sum(ctx, y);
    CHECK(hd_grad_record_count(ctx) == 2);
    hd_grad_clear_tape(ctx);
    CHECK(hd_grad_record_count(ctx) == 0);
    CHECK(backward(ctx, l) == HD_ERR_RUNTIME);
    CHECK(strstr(hd_error_message(ctx), "backward through records that were already freed") ==
          hd_error_message(ctx));
    CHECK(!hd_grad_requires(ctx, y) && hd_grad_is_leaf(ctx, y));
    hd_tensor *z = scale(ctx, y, 3); /* y is a constant now */
    CHECK(!hd_grad_requires(ctx, z) && hd_grad_record_count(ctx) == 0);
    /* and can become a leaf of its own */
    CHECK(hd_grad_set_requires(ctx, y, 1) == HD_OK);
    hd_tensor *yy = op2(ctx, HD_OP_MUL, y, y), *lz = sum(ctx, yy);
    CHECK(backward(ctx, lz) == HD_OK && grad_is(y, 2, (double[]){4, 8}));
    CHECK(hd_grad_get(w) == NULL);
    unref_all((hd_tensor *[]){w, y, l, z, yy, lz}, 6);
    CHECK(hd_grad_record_count(ctx) == 0);
}

/* ---- errors ---- */

static void test_inplace(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 2, (double[]){1, 2}));
    hd_tensor *x = vec(ctx, HD_F64, 2, (double[]){3, 4});
    hd_tensor *y = op2(ctx, HD_OP_MUL, w, x), *l = sum(ctx, y);
    hd_tensor *v = vec(ctx, HD_F64, 2, (double[]){0, 0});
    CHECK(hd_tensor_copy_into(ctx, x, v) == HD_OK); /* x was saved by mul */
    CHECK(backward(ctx, l) == HD_ERR_RUNTIME);
    CHECK(msg_has(ctx, "a tensor needed by the gradient of mul was changed in place"));
    CHECK(hd_grad_get(w) == NULL);
    /* writes into computed tensors, and of values that need a gradient */
    hd_tensor *z = scale(ctx, w, 2);
    CHECK(hd_tensor_copy_into(ctx, z, v) == HD_ERR_RUNTIME && msg_has(ctx, "in-place write into"));
    CHECK(hd_tensor_copy_into(ctx, v, z) == HD_ERR_RUNTIME && msg_has(ctx, "requires grad"));
    /* writing into a leaf is allowed (an optimizer step); saved copies notice */
    hd_tensor *q = op2(ctx, HD_OP_MUL, w, w), *lq = sum(ctx, q);
    CHECK(hd_tensor_copy_into(ctx, w, x) == HD_OK);
    CHECK(backward(ctx, lq) == HD_ERR_RUNTIME && msg_has(ctx, "gradient of mul was changed"));
    /* under no_grad nothing is checked */
    int was = hd_grad_set_enabled(ctx, 0);
    CHECK(hd_tensor_copy_into(ctx, z, v) == HD_OK);
    hd_grad_set_enabled(ctx, was);
    unref_all((hd_tensor *[]){w, x, y, l, v, z, q, lq}, 8);
}

static void test_errors(hd_ctx *ctx) {
    hd_tensor *i = vec(ctx, HD_I64, 2, (double[]){1, 2}),
              *b = vec(ctx, HD_BOOL, 2, (double[]){1, 0});
    CHECK(hd_grad_set_requires(ctx, i, 1) == HD_ERR_RUNTIME);
    CHECK(msg_has(ctx, "gradient of an integer tensor (i64)"));
    CHECK(hd_grad_set_requires(ctx, b, 1) == HD_ERR_RUNTIME && msg_has(ctx, "a bool tensor"));
    CHECK(hd_grad_set_requires(ctx, i, 0) == HD_OK && !hd_grad_requires(ctx, i));
    /* ops without a gradient give constants; integer outputs too */
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 2, (double[]){1, 2}));
    hd_tensor *c = op2(ctx, HD_OP_GT, w, i), *ic = NULL;
    CHECK(hd_op_cast(ctx, w, HD_I32, &ic) == HD_OK);
    CHECK(!hd_grad_requires(ctx, c) && !hd_grad_requires(ctx, ic));
    CHECK(hd_grad_record_count(ctx) == 0);
    /* .grad = */
    hd_tensor *g = vec(ctx, HD_F32, 2, (double[]){7, 8}),
              *g3 = vec(ctx, HD_F64, 3, (double[]){0, 0, 0});
    CHECK(hd_grad_set(ctx, w, g3) == HD_ERR_RUNTIME && msg_has(ctx, "grad of shape [3]"));
    CHECK(hd_grad_set(ctx, w, g) == HD_OK && grad_is(w, 2, (double[]){7, 8}));
    CHECK(hd_grad_get(w)->dtype == HD_F64);
    CHECK(hd_grad_set(ctx, w, NULL) == HD_OK && hd_grad_get(w) == NULL);
    unref_all((hd_tensor *[]){i, b, w, c, ic, g, g3}, 7);
}

/* gradients take the dtype of their input through casts and promotion */
static void test_dtypes(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, vec(ctx, HD_F32, 2, (double[]){1, 2}));
    hd_tensor *d = vec(ctx, HD_F64, 2, (double[]){3, 4});
    hd_tensor *y = op2(ctx, HD_OP_MUL, w, d); /* f64 */
    hd_tensor *h = NULL;
    CHECK(hd_op_cast(ctx, y, HD_F16, &h) == HD_OK);
    hd_tensor *l = sum(ctx, h);
    CHECK(y->dtype == HD_F64 && l->dtype == HD_F16);
    CHECK(backward(ctx, l) == HD_OK);
    CHECK(hd_grad_get(w)->dtype == HD_F32 && grad_is(w, 2, (double[]){3, 4}));
    unref_all((hd_tensor *[]){w, d, y, h, l}, 5);
}

/* subgradients and ties, as torch */
static void test_ties(hd_ctx *ctx) {
    hd_tensor *a = param(ctx, vec(ctx, HD_F64, 3, (double[]){1, 2, 3}));
    hd_tensor *b = param(ctx, vec(ctx, HD_F64, 3, (double[]){1, 5, 0}));
    hd_tensor *m = op2(ctx, HD_OP_MAXIMUM, a, b), *l = sum(ctx, m);
    CHECK(backward(ctx, l) == HD_OK);
    CHECK(grad_is(a, 3, (double[]){0.5, 0, 1}) && grad_is(b, 3, (double[]){0.5, 1, 0}));
    hd_tensor *x = param(ctx, vec(ctx, HD_F64, 4, (double[]){3, 1, 3, 0}));
    hd_tensor *mx = op1(ctx, HD_OP_MAX, x, NULL);
    CHECK(backward(ctx, mx) == HD_OK && grad_is(x, 4, (double[]){0.5, 0, 0.5, 0}));
    hd_tensor *z = param(ctx, vec(ctx, HD_F64, 3, (double[]){-1, 0, 2}));
    hd_tensor *r = op1(ctx, HD_OP_RELU, z, NULL), *ab = op1(ctx, HD_OP_ABS, z, NULL);
    hd_tensor *s = op2(ctx, HD_OP_ADD, r, ab), *ls = sum(ctx, s);
    CHECK(backward(ctx, ls) == HD_OK && grad_is(z, 3, (double[]){-1, 0, 2}));
    unref_all((hd_tensor *[]){a, b, m, l, x, mx, z, r, ab, s, ls}, 11);
}

/* dropout: the gradient uses the forward's mask */
static void test_dropout_mask(hd_ctx *ctx) {
    int64_t shape[1] = {1001};
    hd_tensor *x = hd_tensor_new(ctx, HD_F32, shape, 1);
    for (int i = 0; i < 1001; i++) ((float *)x->storage->data)[i] = (float)(i % 7) - 3;
    param(ctx, x);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.scalar[0] = 0.25;
    at.ints[0] = 1;
    hd_tensor *y = op1(ctx, HD_OP_DROPOUT, x, &at);
    hd_tensor *other = op1(ctx, HD_OP_DROPOUT, x, &at); /* moves the rng on */
    hd_tensor *l = sum(ctx, y);
    CHECK(backward(ctx, l) == HD_OK);
    const hd_tensor *g = hd_grad_get(x);
    int ok = g != NULL, kept = 0;
    for (int i = 0; ok && i < 1001; i++) {
        double xv = hd_tensor_get(x, i), yv = hd_tensor_get(y, i), gv = hd_tensor_get(g, i);
        if (xv == 0) continue;
        ok = yv == 0 ? gv == 0 : hd_test_close(gv, 1 / 0.75, 1e-6, 0);
        kept += yv != 0;
    }
    CHECK(ok && kept > 600 && kept < 900);
    unref_all((hd_tensor *[]){x, y, other, l}, 4);
}

/* a chain of 20,000 records is freed and differentiated without recursion */
static void test_long_chain(hd_ctx *ctx) {
    hd_tensor *w = param(ctx, vec(ctx, HD_F64, 1, (double[]){1}));
    hd_tensor *y = hd_tensor_ref(w), *one = num(ctx, 1);
    for (int i = 0; i < 20000; i++) {
        hd_tensor *n = op2(ctx, HD_OP_ADD, y, one);
        hd_tensor_unref(y);
        y = n;
    }
    CHECK(hd_grad_record_count(ctx) == 20000);
    CHECK(hd_grad_backward(ctx, y, NULL, 1) == HD_OK && grad_is(w, 1, (double[]){1}));
    hd_tensor_unref(y);
    CHECK(hd_grad_record_count(ctx) == 0);
    unref_all((hd_tensor *[]){w, one}, 2);
}

/* ---- threads ---- */

static hd_tensor *filled(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int nd, double phase) {
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, nd);
    for (int64_t i = 0; i < t->numel; i++)
        hd_dtype_store(dt, t->storage->data, i, sin(phase + 0.61 * (double)i));
    return t;
}

/* ---- the gradient of a transposed weight ---- */

/* Allocations through a context of at least big_bytes. */
typedef struct big_count {
    size_t min;
    int n;
} big_count;

static void *alloc_counting(void *ud, void *ptr, size_t osize, size_t nsize) {
    big_count *bc = ud;
    HD_UNUSED(osize);
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (!ptr && nsize >= bc->min) bc->n++;
    return realloc(ptr, nsize);
}

/* y = x @ w.T (nn.Linear): w.grad comes out contiguous in w's layout, made
 * by one product and no copy of a transposed one, and equals
 * dL/dw[o][i] = sum_b c[b][o] x[b][i] for L = sum(y * c). */
static void test_linear_weight_grad(void) {
    enum { B = 3, IN = 40, OUT = 30 };
    big_count bc = {OUT * IN * sizeof(double), 0};
    hd_ctx c;
    hd_ctx_init(&c, alloc_counting, &bc);
    c.nthreads = 1;
    int64_t ws[2] = {OUT, IN}, xs[2] = {B, IN}, cs[2] = {B, OUT};
    hd_tensor *w = param(&c, filled(&c, HD_F64, ws, 2, 0.3));
    hd_tensor *x = filled(&c, HD_F64, xs, 2, 0.7), *k = filled(&c, HD_F64, cs, 2, 1.1);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2, at.shape[0] = 1, at.shape[1] = 0;
    hd_tensor *wt = op1(&c, HD_OP_PERMUTE, w, &at), *y = op2(&c, HD_OP_MATMUL, x, wt);
    hd_tensor *yk = op2(&c, HD_OP_MUL, y, k), *l = sum(&c, yk);
    int before = bc.n;
    CHECK(backward(&c, l) == HD_OK);
    CHECK_MSG(bc.n - before == 1, "%d weight-sized blocks made by backward", bc.n - before);
    const hd_tensor *g = hd_grad_get(w);
    CHECK(g && g->ndim == 2 && g->shape[0] == OUT && g->shape[1] == IN);
    CHECK(g && hd_tensor_is_contiguous(g) && g->offset == 0);
    int bad = 0;
    for (int o = 0; g && o < OUT; o++)
        for (int i = 0; i < IN; i++) {
            double want = 0;
            for (int b = 0; b < B; b++)
                want += hd_tensor_get(k, b * OUT + o) * hd_tensor_get(x, b * IN + i);
            bad += !hd_test_close(hd_tensor_get(g, o * IN + i), want, 1e-12, 1e-12);
        }
    CHECK_MSG(bad == 0, "%d elements of w.grad differ from the reference", bad);
    unref_all((hd_tensor *[]){w, x, k, wt, y, yk, l}, 7);
    hd_grad_shutdown(&c);
    CHECK(c.mem_used == 0);
}

/* A network big enough for the parallel paths of the backward kernels:
 * conv2d, max and avg pools, layer_norm, softmax, dropout, index_select,
 * cross_entropy. Returns the gradients of its parameters, in order. */
static void big_net_grads(int nthreads, double *out, int nout) {
    hd_ctx c;
    hd_ctx_init(&c, NULL, NULL);
    c.nthreads = nthreads;
    int64_t xs[4] = {8, 8, 32, 32}, ws[4] = {8, 8, 3, 3}, es[2] = {64, 512}, is[1] = {64};
    hd_tensor *x = param(&c, filled(&c, HD_F32, xs, 4, 0.1));
    hd_tensor *w = param(&c, filled(&c, HD_F32, ws, 4, 0.2));
    hd_tensor *emb = param(&c, filled(&c, HD_F32, es, 2, 0.3));
    hd_tensor *idx = hd_tensor_new(&c, HD_I64, is, 1);
    for (int i = 0; i < 64; i++) ((int64_t *)idx->storage->data)[i] = (i * 7) % 64;
    hd_attrs ca, pa, la, da, sa;
    memset(&ca, 0, sizeof ca), memset(&pa, 0, sizeof pa), memset(&la, 0, sizeof la);
    memset(&da, 0, sizeof da), memset(&sa, 0, sizeof sa);
    ca.ints[0] = ca.ints[1] = ca.ints[2] = ca.ints[3] = 1;
    pa.ints[0] = pa.ints[1] = 2;
    la.ints[0] = 1;
    da.scalar[0] = 0.2, da.ints[0] = 1;
    sa.ints[0] = -1;
    hd_tensor *cin[2] = {x, w}, *cv = NULL, *e = NULL, *in2[2] = {emb, idx};
    hd_op_run(&c, HD_OP_CONV2D, cin, 2, &ca, &cv);
    hd_tensor *mp = op1(&c, HD_OP_MAX_POOL2D, cv, &pa), *ap = op1(&c, HD_OP_AVG_POOL2D, cv, &pa);
    hd_tensor *pp = op2(&c, HD_OP_MUL, mp, ap); /* [8, 8, 16, 16] */
    hd_attrs ra;
    memset(&ra, 0, sizeof ra);
    ra.nshape = 2, ra.shape[0] = 64, ra.shape[1] = 256;
    hd_tensor *flat = op1(&c, HD_OP_RESHAPE, pp, &ra);
    hd_op_run(&c, HD_OP_INDEX_SELECT, in2, 2, NULL, &e); /* [64, 512] */
    hd_tensor *ln = op1(&c, HD_OP_LAYER_NORM, e, &la), *dr = op1(&c, HD_OP_DROPOUT, ln, &da);
    hd_tensor *sm = op1(&c, HD_OP_LOG_SOFTMAX, dr, &sa);
    ra.shape[0] = 256, ra.shape[1] = 128;
    hd_tensor *smr = op1(&c, HD_OP_RESHAPE, sm, &ra);
    hd_tensor *logits = op2(&c, HD_OP_MATMUL, flat, smr); /* [64, 128] */
    hd_tensor *loss = op2(&c, HD_OP_CROSS_ENTROPY, logits, idx);
    CHECK(loss && backward(&c, loss) == HD_OK);
    hd_tensor *ps[3] = {w, emb, x};
    int k = 0;
    for (int p = 0; p < 3; p++)
        for (int64_t i = 0; hd_grad_get(ps[p]) && i < hd_grad_get(ps[p])->numel && k < nout;
             i += 97)
            out[k++] = hd_tensor_get(hd_grad_get(ps[p]), i);
    unref_all(
        (hd_tensor *[]){x, w, emb, idx, cv, e, mp, ap, pp, flat, ln, dr, sm, smr, logits, loss},
        16);
    CHECK(c.mem_used == 0);
}

static void test_threads(void) {
    enum { N = 2000 };
    double one[N], many[N];
    memset(one, 0, sizeof one), memset(many, 0, sizeof many);
    big_net_grads(1, one, N);
    big_net_grads(4, many, N);
    int same = 1;
    for (int i = 0; i < N; i++) same &= hd_test_close(many[i], one[i], 1e-5, 1e-7);
    CHECK(same && one[0] != 0);
}

/* ---- memory over a training loop ---- */

/* Linear regression, 100 samples x 3 features, plain SGD through
 * hd_op_run; the outputs of each step are dropped and clear_tape() is
 * never called. Returns the final loss. */
static double linreg(hd_ctx *ctx, int iters) {
    int64_t xs[2] = {100, 3}, ys[2] = {100, 1}, ws[2] = {3, 1}, bs[1] = {1};
    hd_tensor *x = hd_tensor_new(ctx, HD_F32, xs, 2), *y = hd_tensor_new(ctx, HD_F32, ys, 2);
    for (int i = 0; i < 100; i++) {
        float *xr = (float *)x->storage->data + 3 * i;
        for (int j = 0; j < 3; j++) xr[j] = (float)sin(i * 1.3 + j * 0.7);
        ((float *)y->storage->data)[i] = 2 * xr[0] - xr[1] + 0.5f * xr[2] + 0.25f;
    }
    hd_tensor *w = param(ctx, hd_tensor_zeros(ctx, HD_F32, ws, 2));
    hd_tensor *b = param(ctx, hd_tensor_zeros(ctx, HD_F32, bs, 1));
    hd_tensor *lr = num(ctx, 0.1);
    double loss = NAN;
    for (int it = 0; it < iters; it++) {
        hd_tensor *xw = op2(ctx, HD_OP_MATMUL, x, w), *pred = op2(ctx, HD_OP_ADD, xw, b);
        hd_tensor *l = op2(ctx, HD_OP_MSE, pred, y);
        if (backward(ctx, l)) break;
        loss = hd_tensor_get(l, 0);
        int was = hd_grad_set_enabled(ctx, 0);
        hd_tensor *params[2] = {w, b};
        for (int k = 0; k < 2; k++) {
            hd_tensor *step = op2(ctx, HD_OP_MUL, hd_grad_get(params[k]), lr);
            hd_tensor *next = op2(ctx, HD_OP_SUB, params[k], step);
            hd_tensor_copy_into(ctx, params[k], next);
            unref_all((hd_tensor *[]){step, next}, 2);
        }
        hd_grad_set_enabled(ctx, was);
        hd_grad_zero(ctx, params, 2);
        unref_all((hd_tensor *[]){xw, pred, l}, 3);
    }
    CHECK(hd_grad_record_count(ctx) == 0);
    unref_all((hd_tensor *[]){x, y, w, b, lr}, 5);
    return loss;
}

static long peak_rss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void test_memory_flat(void) {
    size_t peak[2];
    long rss[2];
    double loss[2];
    int iters[2] = {2000, 20000};
    for (int k = 0; k < 2; k++) {
        hd_ctx c;
        hd_ctx_init(&c, NULL, NULL);
        c.nthreads = 1;
        loss[k] = linreg(&c, iters[k]);
        peak[k] = c.mem_peak;
        rss[k] = peak_rss_kb();
        CHECK(c.mem_used == 0);
    }
    CHECK_MSG(loss[1] < 1e-6, "loss %g", loss[1]); /* it learned */
    CHECK_MSG(peak[1] < peak[0] * 1.2, "peak bytes: %zu after 2,000 steps, %zu after 20,000",
              peak[0], peak[1]);
#if !defined(__SANITIZE_ADDRESS__) /* ASan's quarantine holds freed memory */
    CHECK_MSG(rss[1] < rss[0] * 1.2, "peak RSS: %ld kB after 2,000 steps, %ld after 20,000", rss[0],
              rss[1]);
#endif
    printf("memory: peak %zu / %zu bytes, RSS %ld / %ld kB (2,000 / 20,000 steps)\n", peak[0],
           peak[1], rss[0], rss[1]);
}

/* ---- allocation failures ---- */

/* A small network: relu(x @ w1 + b1) @ w2, cross_entropy against labels.
 * Returns 0 and leaves *loss NULL when an allocation failed. */
static hd_status mlp(hd_ctx *ctx, hd_tensor **p, hd_tensor **loss) {
    hd_tensor *t[5] = {NULL, NULL, NULL, NULL, NULL};
    hd_status st = hd_op_binary(ctx, HD_OP_MATMUL, p[0], p[1], &t[0]);
    if (!st) st = hd_op_binary(ctx, HD_OP_ADD, t[0], p[2], &t[1]);
    if (!st) st = hd_op_unary(ctx, HD_OP_RELU, t[1], &t[2]);
    if (!st) st = hd_op_binary(ctx, HD_OP_MATMUL, t[2], p[3], &t[3]);
    if (!st) st = hd_op_binary(ctx, HD_OP_CROSS_ENTROPY, t[3], p[4], loss);
    unref_all(t, 5);
    return st;
}

static void mlp_params(hd_ctx *ctx, hd_tensor **p) {
    int64_t s0[2] = {4, 3}, s1[2] = {3, 5}, s2[1] = {5}, s3[2] = {5, 2}, s4[1] = {4};
    const int64_t *shapes[4] = {s0, s1, s2, s3};
    int nd[4] = {2, 2, 1, 2};
    for (int k = 0; k < 4; k++) {
        p[k] = hd_tensor_new(ctx, HD_F32, shapes[k], nd[k]);
        for (int64_t i = 0; i < p[k]->numel; i++)
            ((float *)p[k]->storage->data)[i] = (float)sin(1.0 + k + 0.37 * (double)i);
        if (k) hd_grad_set_requires(ctx, p[k], 1);
    }
    p[4] = hd_tensor_from_data(ctx, HD_I64, s4, 1, (int64_t[]){0, 1, 1, 0});
}

/* One forward and backward with the k-th allocation failing, in the
 * forward (phase 0) or in backward (phase 1). Returns the status of the
 * phase; everything is released, so nothing may leak. */
static hd_status mlp_fail_at(hd_ctx *c, int phase, long k) {
    hd_tensor *p[5], *loss = NULL;
    mlp_params(c, p);
    c->fail_countdown = phase == 0 ? k : -1;
    hd_status st = mlp(c, p, &loss);
    c->fail_countdown = -1;
    if (phase == 1 && !st) {
        c->fail_countdown = k;
        st = hd_grad_backward(c, loss, NULL, 0);
        c->fail_countdown = -1;
        if (st) /* all or nothing: no .grad was touched */
            for (int i = 1; i < 4; i++) CHECK(hd_grad_get(p[i]) == NULL);
        else
            for (int i = 1; i < 4; i++) CHECK(hd_grad_get(p[i]) != NULL);
    }
    hd_tensor_unref(loss);
    unref_all(p, 5);
    return st;
}

static void test_alloc_failures(void) {
    hd_ctx c;
    hd_ctx_init(&c, NULL, NULL);
    c.nthreads = 1;
    for (int phase = 0; phase < 2; phase++) {
        long k;
        hd_status st = HD_ERR_MEMORY;
        for (k = 0; k < 5000 && st; k++) {
            st = mlp_fail_at(&c, phase, k);
            CHECK_MSG(st == HD_OK || st == HD_ERR_MEMORY, "%s", hd_error_message(&c));
            CHECK_MSG(c.mem_used == 0, "phase %d, k = %ld: %zu bytes leaked", phase, k, c.mem_used);
            CHECK(hd_grad_record_count(&c) == 0);
        }
        CHECK(st == HD_OK);
        printf("allocation failures in %s: %ld points\n", phase ? "backward" : "recording", k - 1);
    }
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    ctx.nthreads = 1;
    test_accumulate(&ctx);
    test_grad_arg(&ctx);
    test_partial(&ctx);
    test_shared(&ctx);
    test_watcher(&ctx);
    test_views(&ctx);
    test_no_grad_detach(&ctx);
    test_contexts(&ctx);
    test_context_mode(&ctx);
    test_held_context(&ctx);
    test_clear_tape(&ctx);
    test_inplace(&ctx);
    test_errors(&ctx);
    test_dtypes(&ctx);
    test_ties(&ctx);
    test_dropout_mask(&ctx);
    test_long_chain(&ctx);
    hd_grad_shutdown(&ctx);
    CHECK_MSG(ctx.mem_used == 0, "%zu bytes leaked", ctx.mem_used);
    test_linear_weight_grad();
    test_threads();
    test_memory_flat();
    test_alloc_failures();
    TEST_END();
}
