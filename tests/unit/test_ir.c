/* The graph IR and tracing: builders and shape rules, the verifier,
 * printers, hashing, cloning, compaction, symbolic tensors through
 * hd_op_run, captured constants, callbacks, and tracing errors. */
#include "hd_test.h"
#include "hd_trace.h"

static int contains(const char *s, const char *sub) {
    return s && strstr(s, sub) != NULL;
}

static hd_tensor *filled(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int nd, double v) {
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, nd);
    for (int64_t i = 0; t && i < t->numel; i++) hd_dtype_store(dt, t->storage->data, i, v);
    return t;
}

/* x[100, 3] @ w[3, 1] -> mse with y */
static hd_ir_graph *linreg(hd_ctx *ctx) {
    hd_ir_graph *g = hd_ir_graph_new(ctx, "linreg");
    int64_t sx[2] = {100, 3}, sy[2] = {100, 1}, sw[2] = {3, 1};
    int x = hd_ir_add_input(g, "x", HD_F32, sx, 2);
    int y = hd_ir_add_input(g, "y", HD_F32, sy, 2);
    hd_tensor *w = filled(ctx, HD_F32, sw, 2, 0.5);
    int c = hd_ir_add_const(g, w);
    hd_tensor_unref(w);
    int mm[2] = {x, c};
    int p = hd_ir_add_node(g, HD_OP_MATMUL, mm, 2, NULL);
    int ls[2] = {p, y};
    int l = hd_ir_add_node(g, HD_OP_MSE, ls, 2, NULL);
    CHECK(hd_ir_add_output(g, "loss", l) == HD_OK);
    CHECK(hd_ir_add_output(g, "pred", p) == HD_OK);
    return g;
}

static void test_build_and_print(hd_ctx *ctx) {
    hd_ir_graph *g = linreg(ctx);
    CHECK(g->nvalues == 5 && g->nnodes == 2 && g->ninputs == 2 && g->nconsts == 1);
    CHECK(g->values[3].dtype == HD_F32 && g->values[3].ndim == 2 && g->values[3].shape[0] == 100 &&
          g->values[3].shape[1] == 1);
    CHECK(g->values[4].ndim == 0);
    CHECK(hd_ir_verify(g) == HD_OK);
    char *text = hd_ir_to_text(g);
    CHECK(contains(text, "graph linreg {"));
    CHECK(contains(text, "%0 = input \"x\" : f32[100, 3]"));
    CHECK(contains(text, "%3 = matmul(%0, %2) : f32[100, 1]"));
    CHECK(contains(text, "%4 = mse(%3, %1) : f32[]"));
    CHECK(contains(text, "output \"loss\" = %4"));
    hd_ctx_strfree(ctx, text);
    char *dot = hd_ir_to_dot(g);
    CHECK(contains(dot, "digraph \"linreg\""));
    CHECK(contains(dot, "v0 -> v3;"));
    CHECK(contains(dot, "out0"));
    hd_ctx_strfree(ctx, dot);
    hd_ir_graph_free(g);
}

static void test_builder_errors(hd_ctx *ctx) {
    hd_ir_graph *g = hd_ir_graph_new(ctx, "bad");
    int64_t s23[2] = {2, 3}, s45[2] = {4, 5}, neg[1] = {-1};
    int a = hd_ir_add_input(g, "a", HD_F32, s23, 2);
    int b = hd_ir_add_input(g, "b", HD_F32, s45, 2);
    CHECK(hd_ir_add_input(g, "a", HD_F32, s23, 2) == -1);
    CHECK(contains(hd_error_message(ctx), "declared twice"));
    CHECK(hd_ir_add_input(g, "n", HD_F32, neg, 1) == -1);
    CHECK(hd_ir_add_input(g, "d", (hd_dtype)99, s23, 2) == -1);
    int ab[2] = {a, b};
    CHECK(hd_ir_add_node(g, HD_OP_MATMUL, ab, 2, NULL) == -1);
    CHECK(strcmp(hd_error_message(ctx), "matmul shapes [2, 3] and [4, 5] do not agree") == 0);
    int bad[2] = {a, 17};
    CHECK(hd_ir_add_node(g, HD_OP_ADD, bad, 2, NULL) == -1);
    CHECK(contains(hd_error_message(ctx), "refers to value 17"));
    CHECK(hd_ir_add_node(g, HD_OP_ASSIGN, ab, 2, NULL) == -1);
    CHECK(hd_ir_add_output(g, "o", 99) != HD_OK);
    CHECK(hd_ir_add_output(g, "o", a) == HD_OK);
    CHECK(hd_ir_add_output(g, "o", b) != HD_OK);
    hd_tensor *sym = hd_tensor_symbolic(ctx, HD_F32, s23, 2);
    CHECK(hd_ir_add_const(g, sym) == -1);
    hd_tensor_unref(sym);
    CHECK(hd_ir_verify(g) == HD_OK);
    hd_ir_graph_free(g);
}

static void test_verifier(hd_ctx *ctx) {
    hd_ir_graph *g = linreg(ctx);
    /* forward reference: matmul reads the mse result */
    g->nodes[0].in[0] = 4;
    CHECK(hd_ir_verify(g) != HD_OK);
    CHECK(contains(hd_error_message(ctx), "used before it is defined"));
    g->nodes[0].in[0] = 0;
    /* a declared type the rule disagrees with */
    g->values[3].shape[0] = 99;
    CHECK(hd_ir_verify(g) != HD_OK);
    CHECK(contains(hd_error_message(ctx), "shape rule gives f32[100, 1]"));
    g->values[3].shape[0] = 100;
    g->outputs[0].value = 42;
    CHECK(hd_ir_verify(g) != HD_OK);
    g->outputs[0].value = 4;
    g->nodes[1].op = 9999;
    CHECK(hd_ir_verify(g) != HD_OK);
    g->nodes[1].op = HD_OP_MSE;
    CHECK(hd_ir_verify(g) == HD_OK);
    hd_ir_graph_free(g);
}

static void test_hash_clone_compact(hd_ctx *ctx) {
    hd_ir_graph *a = linreg(ctx), *b = linreg(ctx);
    uint64_t ha = hd_ir_graph_hash(a);
    CHECK(ha == hd_ir_graph_hash(b));
    hd_ir_graph *c = hd_ir_graph_clone(a);
    CHECK(c && hd_ir_graph_hash(c) == ha && hd_ir_verify(c) == HD_OK);
    /* constants' bytes are part of the hash */
    float *w = b->consts[0].t->storage->data;
    w[1] = 0.25f;
    CHECK(hd_ir_graph_hash(b) != ha);
    /* so are attributes and names */
    hd_ir_graph_free(b);
    b = linreg(ctx);
    b->outputs[1].name = "p";
    CHECK(hd_ir_graph_hash(b) != ha);
    /* compaction drops dead nodes and unused constants */
    c->nodes[1].op = HD_IR_DEAD;
    c->noutputs = 1;
    c->outputs[0].value = 3;
    CHECK(hd_ir_compact(c) == HD_OK);
    CHECK(c->nnodes == 1 && c->nvalues == 4 && c->nconsts == 1);
    CHECK(hd_ir_verify(c) == HD_OK);
    c->outputs[0].value = 0;
    CHECK(hd_ir_compact(c) == HD_OK);
    CHECK(c->nnodes == 1 && c->nconsts == 1); /* nodes stay: DCE removes them, not compact */
    hd_ir_graph_free(a);
    hd_ir_graph_free(b);
    hd_ir_graph_free(c);
}

static void test_stable_hash_value(void) {
    /* the hash is a file-independent function of bytes: pin one value */
    hd_ir_hasher h;
    hd_ir_hash_init(&h);
    hd_ir_hash_str(&h, "hodu");
    uint64_t v1 = hd_ir_hash_final(&h);
    hd_ir_hash_init(&h);
    hd_ir_hash_str(&h, "hodu");
    CHECK(hd_ir_hash_final(&h) == v1);
    hd_ir_hash_init(&h);
    hd_ir_hash_str(&h, "hodv");
    CHECK(hd_ir_hash_final(&h) != v1);
}

/* ---- tracing ---- */

static void test_trace_basic(hd_ctx *ctx) {
    int64_t sx[2] = {4, 3}, sw[2] = {3, 2};
    hd_tensor *w = filled(ctx, HD_F32, sw, 2, 1.0);
    CHECK(hd_trace_begin(ctx, "f") == HD_OK);
    CHECK(hd_trace_active(ctx));
    CHECK(hd_trace_begin(ctx, "g") != HD_OK);
    hd_tensor *x = hd_trace_input(ctx, "x", HD_F32, sx, 2);
    CHECK(x && hd_tensor_is_symbolic(x));
    hd_tensor *y = NULL, *z = NULL, *t = NULL, *u = NULL;
    hd_tensor *in[2] = {x, w};
    CHECK(hd_op_run(ctx, HD_OP_MATMUL, in, 2, NULL, &y) == HD_OK);
    CHECK(y && hd_tensor_is_symbolic(y) && y->shape[0] == 4 && y->shape[1] == 2);
    /* the same captured tensor twice is one constant */
    hd_tensor *in2[2] = {x, w};
    CHECK(hd_op_run(ctx, HD_OP_MATMUL, in2, 2, NULL, &z) == HD_OK);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2;
    at.shape[0] = 1;
    at.shape[1] = 0;
    CHECK(hd_op_run(ctx, HD_OP_PERMUTE, &z, 1, &at, &t) == HD_OK); /* a view, symbolic too */
    CHECK(t && hd_tensor_is_symbolic(t) && t->shape[0] == 2);
    hd_tensor *two = hd_tensor_number(ctx, HD_F64, 2.0);
    hd_tensor *in3[2] = {y, two};
    CHECK(hd_op_run(ctx, HD_OP_MUL, in3, 2, NULL, &u) == HD_OK);
    CHECK(u->dtype == HD_F32); /* a number never widens */
    /* shape rules still validate */
    hd_tensor *bad = NULL, *in4[2] = {y, x};
    CHECK(hd_op_run(ctx, HD_OP_MATMUL, in4, 2, NULL, &bad) != HD_OK && !bad);
    CHECK(contains(hd_error_message(ctx), "matmul shapes [4, 2] and [4, 3]"));
    /* reading data is an error that suggests where */
    CHECK(hd_trace_check_data(ctx, u, "if") == HD_ERR_RUNTIME);
    CHECK(contains(hd_error_message(ctx), "branch on tensor data inside compiled code: use where"));
    CHECK(hd_trace_check_data(ctx, u, "item()") == HD_ERR_RUNTIME);
    CHECK(contains(hd_error_message(ctx), "item() needs tensor data") &&
          contains(hd_error_message(ctx), "read it after the call returns"));
    CHECK(hd_trace_check_data(ctx, u, "writing through an index tensor") == HD_ERR_RUNTIME);
    CHECK(contains(hd_error_message(ctx), "one_hot(i, n)"));
    CHECK(hd_trace_check_data(ctx, u, "indexing with a bool mask") == HD_ERR_RUNTIME);
    CHECK(contains(hd_error_message(ctx), "where(mask, x, 0.0)"));
    CHECK(hd_trace_check_data(ctx, w, "item()") == HD_OK);
    /* in-place assignment is rejected */
    hd_tensor *in5[2] = {y, u}, *r = NULL;
    CHECK(hd_op_run(ctx, HD_OP_ASSIGN, in5, 2, NULL, &r) != HD_OK);
    CHECK(contains(hd_error_message(ctx), "in-place assignment"));
    CHECK(hd_trace_output(ctx, "u", u) == HD_OK);
    CHECK(hd_trace_output(ctx, "t", t) == HD_OK);
    CHECK(hd_trace_output(ctx, "u", t) != HD_OK);
    hd_ir_graph *g = NULL;
    CHECK(hd_trace_end(ctx, &g) == HD_OK && g);
    CHECK(!hd_trace_active(ctx));
    CHECK(g->ninputs == 1 && g->nconsts == 2 && g->nnodes == 4 && g->noutputs == 2);
    CHECK(g->values[g->consts[1].value].number == 1);
    /* a symbolic tensor outside its trace has no data */
    hd_tensor *e = NULL;
    CHECK(hd_op_unary(ctx, HD_OP_NEG, u, &e) != HD_OK);
    CHECK(contains(hd_error_message(ctx), "symbolic"));
    /* ... and cannot enter another trace */
    CHECK(hd_trace_begin(ctx, "h") == HD_OK);
    CHECK(hd_op_unary(ctx, HD_OP_NEG, u, &e) != HD_OK);
    CHECK(contains(hd_error_message(ctx), "other compiled code"));
    hd_trace_abort(ctx);
    CHECK(!hd_trace_active(ctx));
    hd_ir_graph_free(g);
    hd_tensor *ts[] = {x, y, z, t, u, two, w};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) hd_tensor_unref(ts[i]);
}

static int calls;
static hd_status count_cb(hd_ctx *ctx, void *ud, hd_tensor *const *args, int nargs) {
    HD_UNUSED(ctx);
    HD_UNUSED(args);
    calls += nargs + *(int *)ud;
    return HD_OK;
}
static int ud_live;
static void *ud_dup(void *ud) {
    ud_live++;
    return ud;
}
static void ud_free(hd_ctx *ctx, void *ud) {
    HD_UNUSED(ctx);
    HD_UNUSED(ud);
    ud_live--;
}

static void test_trace_callback(hd_ctx *ctx) {
    int64_t s[1] = {3};
    static int one = 1;
    CHECK(hd_trace_begin(ctx, "cb") == HD_OK);
    hd_tensor *x = hd_trace_input(ctx, "x", HD_F32, s, 1);
    hd_ir_callback cb = {"print", count_cb, &one, ud_dup, ud_free};
    ud_live = 1;
    CHECK(hd_trace_callback(ctx, &cb, &x, 1) == HD_OK);
    hd_ir_graph *g = NULL;
    CHECK(hd_trace_end(ctx, &g) == HD_OK);
    CHECK(g->nnodes == 1 && g->ncallbacks == 1 && g->nodes[0].out == -1);
    char *text = hd_ir_to_text(g);
    CHECK(contains(text, "callback print(%0)"));
    hd_ctx_strfree(ctx, text);
    hd_ir_graph *c = hd_ir_graph_clone(g);
    CHECK(ud_live == 2);
    hd_ir_graph_free(c);
    hd_ir_graph_free(g);
    CHECK(ud_live == 0);
    hd_tensor_unref(x);
}

/* Every allocation of a trace failing in turn: an error, never a crash or
 * a leak. */
static void test_trace_alloc_failures(hd_ctx *ctx) {
    int64_t s[2] = {2, 3};
    for (long k = 0; k < 60; k++) {
        size_t before = ctx->mem_used;
        ctx->fail_countdown = k;
        hd_tensor *x = NULL, *y = NULL, *z = NULL;
        hd_ir_graph *g = NULL;
        hd_status st = hd_trace_begin(ctx, "f");
        if (!st) x = hd_trace_input(ctx, "x", HD_F32, s, 2);
        if (x) st = hd_op_unary(ctx, HD_OP_EXP, x, &y);
        if (y) st = hd_op_unary(ctx, HD_OP_NEG, y, &z);
        if (z) st = hd_trace_output(ctx, "z", z);
        if (hd_trace_active(ctx)) {
            if (!z || st)
                hd_trace_abort(ctx);
            else
                st = hd_trace_end(ctx, &g);
        }
        ctx->fail_countdown = -1;
        hd_tensor_unref(x);
        hd_tensor_unref(y);
        hd_tensor_unref(z);
        hd_ir_graph_free(g);
        CHECK_MSG(ctx->mem_used == before, "leak after failing allocation %ld", k);
        hd_error_clear(ctx);
    }
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    test_build_and_print(&ctx);
    test_builder_errors(&ctx);
    test_verifier(&ctx);
    test_hash_clone_compact(&ctx);
    test_stable_hash_value();
    test_trace_basic(&ctx);
    test_trace_callback(&ctx);
    test_trace_alloc_failures(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
