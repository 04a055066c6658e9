/* Tracing with gradients and in-place writes: backward() inside a trace
 * records its ops like any other (the step of a training loop compiles
 * into one graph), the lift hook turns captured tensors into inputs, and a
 * whole-tensor in-place write (an optimizer's p[...] = p - lr * g) goes on
 * as a new value and an output copied back after each run. */
#include "hd_autograd.h"
#include "hd_compile.h"
#include "hd_pass.h"
#include "hd_test.h"
#include "hd_trace.h"

static hd_tensor *seq(hd_ctx *ctx, const int64_t *shape, int nd, double scale) {
    hd_tensor *t = hd_tensor_new(ctx, HD_F32, shape, nd);
    for (int64_t i = 0; t && i < t->numel; i++)
        hd_dtype_store(HD_F32, t->storage->data, i, scale * (double)((i * 7) % 11 - 5));
    return t;
}

static hd_tensor *copy(hd_ctx *ctx, hd_tensor *t) {
    hd_tensor *c = NULL;
    hd_op_run(ctx, HD_OP_COPY, &t, 1, NULL, &c);
    return c;
}

static int close_all(const hd_tensor *a, const hd_tensor *b) {
    if (!a || !b || a->numel != b->numel) return 0;
    for (int64_t i = 0; i < a->numel; i++)
        if (!hd_test_close(hd_tensor_get(a, i), hd_tensor_get(b, i), 1e-5, 1e-6)) return 0;
    return 1;
}

/* loss = sum(tanh(x @ w) * 2) */
static hd_status loss_of(hd_ctx *ctx, hd_tensor *x, hd_tensor *w, hd_tensor **loss) {
    hd_tensor *h = NULL, *t = NULL, *s = NULL;
    hd_status st = hd_op_binary(ctx, HD_OP_MATMUL, x, w, &h);
    if (!st) st = hd_op_unary(ctx, HD_OP_TANH, h, &t);
    hd_tensor *two = st ? NULL : hd_tensor_number(ctx, HD_F64, 2.0);
    if (!st) st = hd_op_binary(ctx, HD_OP_MUL, t, two, &s);
    if (!st) st = hd_op_unary(ctx, HD_OP_SUM, s, loss);
    hd_tensor_unref(h);
    hd_tensor_unref(t);
    hd_tensor_unref(s);
    hd_tensor_unref(two);
    return st;
}

/* w[...] = w - 0.1 * g under no_grad, as an optimizer writes it */
static hd_status sgd(hd_ctx *ctx, hd_tensor *w, hd_tensor *g) {
    hd_tensor *lr = hd_tensor_number(ctx, HD_F64, 0.1), *d = NULL, *n = NULL;
    int was = hd_grad_set_enabled(ctx, 0);
    hd_status st = hd_op_binary(ctx, HD_OP_MUL, g, lr, &d);
    if (!st) st = hd_op_binary(ctx, HD_OP_SUB, w, d, &n);
    if (!st) st = hd_tensor_copy_into(ctx, w, n);
    hd_grad_set_enabled(ctx, was);
    hd_tensor_unref(lr);
    hd_tensor_unref(d);
    hd_tensor_unref(n);
    return st;
}

static int lift_all(hd_ctx *ctx, void *ud, hd_tensor *t, char *name, size_t n) {
    (void)ctx;
    int *count = ud;
    snprintf(name, n, "state%d", (*count)++);
    return t->ndim == 2 && t->shape[1] == 2; /* w, not the data */
}

/* One training step eagerly, then the same step traced, compiled and run
 * twice: loss, gradient and updated weights agree with eager mode. */
static void test_train_step(hd_ctx *ctx) {
    int64_t sx[2] = {4, 3}, sw[2] = {3, 2};
    hd_tensor *x = seq(ctx, sx, 2, 0.3), *w0 = seq(ctx, sw, 2, 0.1);
    /* eager reference: two steps */
    hd_tensor *we = copy(ctx, w0), *loss_e[2] = {NULL, NULL}, *grad_e[2] = {NULL, NULL};
    CHECK(hd_grad_set_requires(ctx, we, 1) == HD_OK);
    for (int k = 0; k < 2; k++) {
        hd_grad_set(ctx, we, NULL);
        CHECK(loss_of(ctx, x, we, &loss_e[k]) == HD_OK);
        CHECK(hd_grad_backward(ctx, loss_e[k], NULL, 0) == HD_OK);
        grad_e[k] = copy(ctx, hd_grad_get(we));
        CHECK(sgd(ctx, we, hd_grad_get(we)) == HD_OK);
    }
    /* traced: x is an input, w a lifted one */
    hd_tensor *w = copy(ctx, w0);
    CHECK(hd_grad_set_requires(ctx, w, 1) == HD_OK);
    int count = 0;
    CHECK(hd_trace_begin(ctx, "step") == HD_OK);
    hd_trace_set_lift(ctx, lift_all, &count);
    hd_tensor *xs = hd_trace_input(ctx, "x", HD_F32, sx, 2), *loss = NULL;
    CHECK(xs && loss_of(ctx, xs, w, &loss) == HD_OK);
    CHECK(loss && !loss->storage && hd_grad_requires(ctx, loss));
    CHECK(hd_trace_stands_for_input(ctx, w) && !hd_trace_stands_for_input(ctx, x));
    CHECK(hd_grad_backward(ctx, loss, NULL, 0) == HD_OK);
    hd_tensor *g = hd_grad_get(w);
    CHECK(g && !g->storage);
    CHECK(hd_trace_output(ctx, "loss", loss) == HD_OK);
    CHECK(hd_trace_output(ctx, "grad", g) == HD_OK);
    CHECK(sgd(ctx, w, g) == HD_OK);
    CHECK(hd_trace_nwrites(ctx) == 1 && hd_trace_write_target(ctx, 0) == w);
    CHECK(hd_trace_output(ctx, "w", w) == HD_OK);
    hd_grad_set(ctx, w, NULL);
    hd_ir_graph *gr = NULL;
    CHECK(hd_trace_end(ctx, &gr) == HD_OK && gr);
    CHECK(gr && gr->ninputs == 2 && hd_ir_find_input(gr, "state0") == 1);
    hd_jit_exec *e = NULL;
    CHECK(gr && hd_jit_interp.compile(ctx, gr, NULL, &e) == HD_OK);
    for (int k = 0; e && k < 2; k++) {
        hd_tensor *in[2] = {x, w}, *out[3] = {NULL, NULL, NULL};
        CHECK(hd_jit_interp.run(ctx, e, in, 2, out, 3) == HD_OK);
        CHECK(close_all(out[0], loss_e[k]));
        CHECK(close_all(out[1], grad_e[k]));
        if (out[2]) hd_tensor_copy_into(ctx, w, out[2]);
        for (int i = 0; i < 3; i++) hd_tensor_unref(out[i]);
    }
    CHECK(close_all(w, we));
    if (e) hd_jit_interp.free(ctx, e);
    hd_ir_graph_free(gr);
    hd_tensor *all[] = {x, w0, we, loss_e[0], loss_e[1], grad_e[0], grad_e[1], w, xs, loss};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) hd_tensor_unref(all[i]);
}

static int lift_one(hd_ctx *ctx, void *ud, hd_tensor *t, char *name, size_t n) {
    (void)ctx;
    snprintf(name, n, "w");
    return t == ud;
}

/* loss = sum(x @ w.T) traced with w lifted (nn.Linear): once the graph is
 * simplified, w's gradient is a product itself, not a transposition of
 * one, so compiled code hands it out without copying it into w's layout;
 * and it equals eager mode's. */
static void test_linear_grad_layout(hd_ctx *ctx) {
    int64_t sx[2] = {4, 3}, sw[2] = {2, 3};
    hd_tensor *x = seq(ctx, sx, 2, 0.3), *w = seq(ctx, sw, 2, 0.1), *wt = NULL, *y = NULL;
    hd_tensor *loss = NULL, *ge = NULL;
    hd_attrs tr;
    memset(&tr, 0, sizeof tr);
    tr.nshape = 2, tr.shape[0] = 1, tr.shape[1] = 0;
    CHECK(hd_grad_set_requires(ctx, w, 1) == HD_OK);
    for (int traced = 0; traced < 2; traced++) {
        if (traced) {
            CHECK(hd_trace_begin(ctx, "linear") == HD_OK);
            hd_trace_set_lift(ctx, lift_one, w);
        }
        CHECK(hd_op_run(ctx, HD_OP_PERMUTE, &w, 1, &tr, &wt) == HD_OK);
        CHECK(hd_op_binary(ctx, HD_OP_MATMUL, x, wt, &y) == HD_OK);
        CHECK(hd_op_unary(ctx, HD_OP_SUM, y, &loss) == HD_OK);
        CHECK(hd_grad_backward(ctx, loss, NULL, 0) == HD_OK);
        if (!traced) {
            ge = copy(ctx, hd_grad_get(w));
        } else {
            CHECK(hd_trace_output(ctx, "grad", hd_grad_get(w)) == HD_OK);
            hd_ir_graph *g = NULL;
            CHECK(hd_trace_end(ctx, &g) == HD_OK && g);
            int changed = 1;
            for (int k = 0; g && changed && k < 8; k++)
                CHECK(hd_pass_simplify(g, &changed) == HD_OK);
            const hd_ir_value *v = g ? &g->values[g->outputs[0].value] : NULL;
            CHECK(v && v->kind == HD_IR_VALUE_NODE && g->nodes[v->index].op == HD_OP_MATMUL);
            hd_jit_exec *e = NULL;
            hd_tensor *out = NULL;
            CHECK(g && hd_jit_interp.compile(ctx, g, NULL, &e) == HD_OK);
            CHECK(e && hd_jit_interp.run(ctx, e, (hd_tensor *[]){w}, 1, &out, 1) == HD_OK);
            CHECK(close_all(out, ge));
            hd_tensor_unref(out);
            if (e) hd_jit_interp.free(ctx, e);
            hd_ir_graph_free(g);
        }
        hd_grad_set(ctx, w, NULL);
        hd_tensor *ts[3] = {wt, y, loss};
        for (int i = 0; i < 3; i++) hd_tensor_unref(ts[i]);
        wt = y = loss = NULL;
    }
    hd_tensor *all[3] = {x, w, ge};
    for (int i = 0; i < 3; i++) hd_tensor_unref(all[i]);
}

/* x[...] = v through a whole-covering slice is a write of x; x[0] = v is
 * refused with the where(...) advice; writes into computed values too. */
static void test_writes(hd_ctx *ctx) {
    int64_t s[2] = {2, 3};
    hd_tensor *x = seq(ctx, s, 2, 1.0), *v = NULL, *view = NULL, *r = NULL;
    CHECK(hd_trace_begin(ctx, "w") == HD_OK);
    hd_tensor *in = hd_trace_input(ctx, "v", HD_F32, s + 1, 1);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    for (int i = 0; i < 2; i++) {
        at.step[i] = 1;
        at.len[i] = s[i];
    }
    CHECK(hd_op_run(ctx, HD_OP_SLICE, &x, 1, &at, &view) == HD_OK);
    CHECK(hd_tensor_copy_into(ctx, view, in) == HD_OK); /* broadcast [3] -> [2, 3] */
    CHECK(hd_trace_nwrites(ctx) == 1 && hd_trace_stands_for_input(ctx, x));
    CHECK(hd_op_unary(ctx, HD_OP_NEG, x, &r) == HD_OK); /* reads the new value */
    CHECK(hd_trace_output(ctx, "r", r) == HD_OK);
    hd_tensor_unref(view);
    view = NULL;
    at.len[0] = 1;
    CHECK(hd_op_run(ctx, HD_OP_SLICE, &x, 1, &at, &view) == HD_OK);
    CHECK(hd_tensor_copy_into(ctx, view, in) != HD_OK);
    CHECK(strstr(hd_error_message(ctx), "where(...)") != NULL);
    CHECK(hd_tensor_copy_into(ctx, r, in) != HD_OK); /* r is computed in the trace */
    hd_ir_graph *g = NULL;
    CHECK(hd_trace_end(ctx, &g) == HD_OK);
    hd_jit_exec *e = NULL;
    CHECK(g && hd_jit_interp.compile(ctx, g, NULL, &e) == HD_OK);
    int64_t s3 = 3;
    v = seq(ctx, &s3, 1, 1.0);
    hd_tensor *out = NULL;
    CHECK(e && hd_jit_interp.run(ctx, e, &v, 1, &out, 1) == HD_OK);
    for (int64_t i = 0; out && i < 6; i++) CHECK(hd_tensor_get(out, i) == -hd_tensor_get(v, i % 3));
    CHECK(hd_tensor_get(x, 0) == -5.0); /* the run does not write x: the caller does */
    if (e) hd_jit_interp.free(ctx, e);
    hd_ir_graph_free(g);
    hd_tensor *all[] = {x, v, view, r, in, out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) hd_tensor_unref(all[i]);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    test_train_step(&ctx);
    test_writes(&ctx);
    test_linear_grad_layout(&ctx);
    hd_grad_shutdown(&ctx);
    CHECK(ctx.mem_used == 0);
    if (ctx.mem_used) fprintf(stderr, "leaked %zu bytes\n", ctx.mem_used);
    TEST_END();
}
