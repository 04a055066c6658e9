/* Loop nodes (HD_IR_LOOP, HD_IR_LOOP_OUT): builders and their errors, the
 * verifier, printers, hashing, clone and free, value ids out of node
 * order, the passes, and runs with interp and llvm against unrolled
 * graphs and closed forms (hd_test_loop.h). */
#include "hd_loop.h"
#include "hd_pass.h"
#include "hd_script.h"
#include "hd_test_loop.h"

#include <zlib.h>

static int contains(const char *s, const char *sub) {
    return s && strstr(s, sub) != NULL;
}

static void test_build_print_hash(hd_ctx *ctx) {
    hd_ir_graph *g = lt_graph(ctx, 7, 0);
    CHECK_MSG(hd_ir_verify(g) == HD_OK, "%s", hd_error_message(ctx));
    char *text = hd_ir_to_text(g);
    CHECK_MSG(contains(text, "%2 = loop(%0, %1) {trips=7, carry=[%b0 <- out 0]} : u8[68]"), "%s",
              text);
    CHECK_MSG(contains(text, "\n    graph body {\n      %0 = input \"x\" : f32[4]\n"), "%s", text);
    CHECK(contains(text, "      output \"y\" = %"));
    CHECK(contains(text, "%4 = loop_out(%2) {out=1} : f32[]"));
    hd_ctx_strfree(ctx, text);
    char *dot = hd_ir_to_dot(g);
    CHECK(contains(dot, "loop x7") && contains(dot, "v2 -> v3;"));
    hd_ctx_strfree(ctx, dot);
    hd_ir_graph *c = hd_ir_graph_clone(g), *g8 = lt_graph(ctx, 8, 0);
    CHECK(c && hd_ir_graph_hash(c) == hd_ir_graph_hash(g));
    CHECK(hd_ir_graph_hash(g8) != hd_ir_graph_hash(g));
    CHECK(c && c->nodes[0].loop != g->nodes[0].loop &&
          c->nodes[0].loop->body != g->nodes[0].loop->body);
    CHECK(c && hd_ir_verify(c) == HD_OK);
    /* a body of other values hashes otherwise */
    c->nodes[0].loop->body->nodes[0].op = HD_OP_ADD;
    CHECK(hd_ir_graph_hash(c) != hd_ir_graph_hash(g));
    hd_ir_graph_free(c);
    hd_ir_graph_free(g8);
    hd_ir_graph_free(g);
}

static void test_builder_errors(hd_ctx *ctx) {
    int64_t n = LT_N;
    hd_ir_graph *g = hd_ir_graph_new(ctx, "bad");
    int x = hd_ir_add_input(g, "x0", HD_F32, &n, 1), w = hd_ir_add_input(g, "w", HD_F32, &n, 1);
    int in[2] = {x, w}, src = 1, src0 = 0;
    /* x (f32[4]) fed by y (f32[]): the body is freed with the error */
    CHECK(hd_ir_add_loop(g, lt_body(ctx, 0), 3, in, 2, 1, &src) < 0);
    CHECK(contains(hd_error_message(ctx), "carried input 'x' is f32[4], the output 'y'"));
    CHECK(hd_ir_add_loop(g, lt_body(ctx, 0), 0, in, 2, 1, &src0) < 0);
    CHECK(contains(hd_error_message(ctx), "0 trips"));
    CHECK(hd_ir_add_loop(g, lt_body(ctx, 0), 3, in, 1, 1, &src0) < 0);
    CHECK(contains(hd_error_message(ctx), "1 inputs, its body takes 2"));
    int64_t n5 = 5;
    int x5 = hd_ir_add_input(g, "x5", HD_F32, &n5, 1), in5[2] = {x5, w};
    CHECK(hd_ir_add_loop(g, lt_body(ctx, 0), 3, in5, 2, 1, &src0) < 0);
    CHECK(contains(hd_error_message(ctx), "input 0 is f32[5], the body's 'x' is f32[4]"));
    CHECK(hd_ir_add_loop_out(g, x, 0) < 0);
    CHECK(contains(hd_error_message(ctx), "not a loop's value"));
    int l = hd_ir_add_loop(g, lt_body(ctx, 0), 3, in, 2, 1, &src0);
    CHECK(l >= 0 && hd_ir_add_loop_out(g, l, 2) < 0);
    CHECK(contains(hd_error_message(ctx), "output 2 of a loop with 2 outputs"));
    int y = hd_ir_add_loop_out(g, l, 1);
    CHECK(hd_ir_add_output(g, "y", y) == HD_OK && hd_ir_verify(g) == HD_OK);
    /* the verifier: a carry source of another type, a bad layout, a bad view */
    hd_ir_loop *lp = g->nodes[0].loop;
    lp->carry_src[0] = 1;
    CHECK(hd_ir_verify(g) != HD_OK &&
          contains(hd_error_message(ctx), "node 0 (loop): loop: carried"));
    lp->carry_src[0] = 0;
    lp->offset[1] = 32;
    CHECK(hd_ir_verify(g) != HD_OK && contains(hd_error_message(ctx), "output 1 at offset 32"));
    lp->offset[1] = 64;
    g->nodes[1].attrs.ints[0] = 0;
    CHECK(hd_ir_verify(g) != HD_OK &&
          contains(hd_error_message(ctx), "declared type f32[], output 0 is f32[4]"));
    g->nodes[1].attrs.ints[0] = 1;
    /* a body that does not verify */
    lp->body->nodes[0].op = HD_OP_ASSIGN;
    CHECK(hd_ir_verify(g) != HD_OK &&
          contains(hd_error_message(ctx), "node 0 (loop): body: node 0"));
    lp->body->nodes[0].op = HD_OP_MUL;
    CHECK(hd_ir_verify(g) == HD_OK);
    hd_ir_graph_free(g);
}

/* The tracer's way: a value's node is removed from the end and the value
 * is defined again by a LOOP_OUT, so value ids are out of node order. */
static void test_loop_out_as(hd_ctx *ctx) {
    int64_t n = LT_N;
    hd_ir_graph *g = hd_ir_graph_new(ctx, "as");
    int x = hd_ir_add_input(g, "x0", HD_F32, &n, 1), w = hd_ir_add_input(g, "w", HD_F32, &n, 1);
    int y, xn = lt_step(g, x, w, &y);                   /* one step, traced */
    CHECK(hd_ir_add_loop_out_as(g, x, 0, xn) != HD_OK); /* not a loop */
    /* drop the traced step's nodes (mul, add, sum) and its constant stays */
    int nn = g->nnodes;
    g->nnodes = nn - 3;
    int in[2] = {x, w}, src = 0;
    int l = hd_ir_add_loop(g, lt_body(ctx, 0), 5, in, 2, 1, &src);
    CHECK(hd_ir_add_loop_out_as(g, l, 1, xn) != HD_OK); /* f32[] is not f32[4] */
    CHECK(hd_ir_add_loop_out_as(g, l, 0, xn) == HD_OK &&
          hd_ir_add_loop_out_as(g, l, 1, y) == HD_OK);
    CHECK(hd_ir_add_loop_out_as(g, l, 1, y) != HD_OK); /* defined already */
    int z = lt_bin(g, HD_OP_MUL, xn, xn);
    CHECK(hd_ir_add_output(g, "z", z) == HD_OK && hd_ir_add_output(g, "y", y) == HD_OK);
    CHECK_MSG(hd_ir_verify(g) == HD_OK, "%s", hd_error_message(ctx));
    CHECK(xn < l && g->values[xn].index > g->values[l].index);
    CHECK(hd_ir_compact(g) == HD_OK && hd_ir_verify(g) == HD_OK);
    hd_tensor *in_t[2] = {lt_vec(ctx, lt_x0, LT_N), lt_vec(ctx, lt_w, LT_N)}, *out[2] = {0};
    lt_env v = {ctx, &hd_jit_interp, {0}, NULL, 0, 0};
    hd_jit_options_init(&v.opt);
    CHECK(lt_run(&v, g, in_t, 2, out, 2, NULL));
    for (int i = 0; out[0] && i < LT_N; i++)
        CHECK_CLOSE(hd_tensor_get(out[0], i), lt_closed(i, 5) * lt_closed(i, 5), 1e-5, 1e-6);
    lt_release(out, 2);
    lt_release(in_t, 2);
    hd_ir_graph_free(g);
}

/* Passes: no fold of a loop over constants, CSE merges views of one output
 * but never loops, DCE keeps loops with effects. */
static void test_passes(hd_ctx *ctx) {
    hd_ir_graph *g = hd_ir_graph_new(ctx, "p");
    int64_t n = LT_N;
    hd_tensor *x0 = lt_vec(ctx, lt_x0, LT_N), *w = lt_vec(ctx, lt_w, LT_N);
    int cx = hd_ir_add_const(g, x0), cw = hd_ir_add_const(g, w);
    int in[2] = {cx, cw}, src = 0;
    int l1 = hd_ir_add_loop(g, lt_body(ctx, 0), 3, in, 2, 1, &src);
    int l2 = hd_ir_add_loop(g, lt_body(ctx, 0), 3, in, 2, 1, &src);
    int a = hd_ir_add_loop_out(g, l1, 1), b = hd_ir_add_loop_out(g, l1, 1);
    int c = hd_ir_add_loop_out(g, l2, 1);
    CHECK(hd_ir_add_output(g, "s", lt_bin(g, HD_OP_ADD, lt_bin(g, HD_OP_ADD, a, b), c)) == HD_OK);
    /* a loop nobody reads, with a random draw in its body: it stays */
    hd_ir_graph *rb = hd_ir_graph_new(ctx, "rb");
    int rx = hd_ir_add_input(rb, "x", HD_F32, &n, 1);
    CHECK(hd_ir_add_output(rb, "x", lt_rand_step(rb, rx)) == HD_OK);
    CHECK(hd_ir_add_loop(g, rb, 2, &cx, 1, 1, &src) >= 0);
    /* and one without: it goes */
    CHECK(hd_ir_add_loop(g, lt_body(ctx, 0), 3, in, 2, 1, &src) >= 0);
    hd_jit_options o;
    hd_jit_options_init(&o);
    hd_jit_stats st;
    memset(&st, 0, sizeof st);
    CHECK_MSG(hd_jit_optimize(ctx, g, &o, &st) == HD_OK, "%s", hd_error_message(ctx));
    int loops = 0, outs = 0;
    for (int i = 0; i < g->nnodes; i++) {
        loops += g->nodes[i].op == HD_IR_LOOP;
        outs += g->nodes[i].op == HD_IR_LOOP_OUT;
    }
    CHECK_MSG(loops == 3 && outs == 2, "%d loops, %d loop_out", loops, outs);
    CHECK(st.merged >= 1 && hd_ir_verify(g) == HD_OK);
    hd_ir_graph_free(g);
    hd_tensor_unref(x0);
    hd_tensor_unref(w);
}

/* Clone and free of nested loops, with and without compiled bodies, and
 * allocation failures while cloning: nothing leaks (ASan, mem_used). */
static void test_clone_free(hd_ctx *ctx) {
    hd_ir_graph *g = lt_nested(ctx, 2, 3);
    hd_ir_graph *c = hd_ir_graph_clone(g);
    CHECK(c && hd_ir_verify(c) == HD_OK);
    CHECK(hd_jit_loops_compile(ctx, &hd_jit_interp, c, NULL) == HD_OK && c->nodes[0].loop->exec);
    hd_ir_graph *cc = hd_ir_graph_clone(c);
    CHECK(cc && !cc->nodes[0].loop->exec);
    hd_ir_graph_free(cc);
    hd_ir_graph_free(c);
    for (long k = 1; k < 200; k++) {
        size_t before = ctx->mem_used;
        ctx->fail_countdown = k;
        hd_ir_graph *f = hd_ir_graph_clone(g);
        ctx->fail_countdown = -1;
        hd_error_clear(ctx);
        int done = f != NULL;
        hd_ir_graph_free(f);
        CHECK_MSG(ctx->mem_used == before, "leak after failing allocation %ld", k);
        if (done) break;
    }
    hd_ir_graph_free(g);
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* g saved as the given file version and loaded back with the same hash;
 * the loaded graph (caller frees) into *back when wanted. */
static void round_trip(hd_ctx *ctx, const hd_ir_graph *g, unsigned version, hd_ir_graph **back) {
    unsigned char *d = NULL;
    size_t n = 0;
    hd_ir_graph *b = NULL;
    CHECK_MSG(hd_script_encode(ctx, g, &d, &n) == HD_OK, "%s", hd_error_message(ctx));
    CHECK_MSG(d && le32(d + 8) == version, "version %u, want %u", d ? le32(d + 8) : 0, version);
    CHECK_MSG(d && hd_script_decode(ctx, d, n, &b) == HD_OK, "%s", hd_error_message(ctx));
    CHECK(b && hd_ir_graph_hash(b) == hd_ir_graph_hash(g));
    hd_ctx_free(ctx, d, n);
    if (back)
        *back = b;
    else
        hd_ir_graph_free(b);
}

/* .hoduscript: a nested loop graph saves as version 3 and loads as the
 * same graph (same hash, same results); a graph without loops is still
 * version 1; a file cut inside a body is refused. */
static void test_script_round_trip(hd_ctx *ctx) {
    hd_ir_graph *g = lt_nested(ctx, 4, 3), *back = NULL;
    unsigned char *d = NULL;
    size_t n = 0;
    round_trip(ctx, g, 3, &back);
    CHECK_MSG(hd_script_encode(ctx, g, &d, &n) == HD_OK, "%s", hd_error_message(ctx));
    if (back) {
        hd_tensor *in[2] = {lt_vec(ctx, lt_x0, LT_N), lt_vec(ctx, lt_w, LT_N)}, *got[2] = {0};
        lt_env v = {ctx, &hd_jit_interp, {0}, NULL, 0, 0};
        hd_jit_options_init(&v.opt);
        CHECK(lt_run(&v, back, in, 2, got, 2, NULL));
        lt_check_closed(&v, got, 12);
        lt_release(got, 2);
        lt_release(in, 2);
    }
    /* cut anywhere after the header (inside the bodies too), with the
     * header's size and the checksum made to match: refused, no leak */
    for (size_t cut = 60; d && cut < n - 4; cut += 7) {
        hd_ir_graph *bad = NULL;
        unsigned char *m = hd_ctx_alloc(ctx, cut + 4);
        memcpy(m, d, cut);
        put32(m + 40, (uint32_t)(cut + 4));
        memset(m + 44, 0, 4);
        put32(m + cut, (uint32_t)crc32(crc32(0L, Z_NULL, 0), m, (uInt)cut));
        CHECK_MSG(hd_script_decode(ctx, m, cut + 4, &bad) != HD_OK && !bad &&
                      contains(hd_error_message(ctx), "invalid script file"),
                  "cut at %zu: %s", cut, hd_error_message(ctx));
        hd_ctx_free(ctx, m, cut + 4);
    }
    hd_ir_graph_free(back);
    hd_ctx_free(ctx, d, n);
    hd_ir_graph *u = lt_graph(ctx, 2, 1);
    CHECK(hd_script_encode(ctx, u, &d, &n) == HD_OK && le32(d + 8) == 1);
    hd_ctx_free(ctx, d, n);
    hd_ir_graph_free(u);
    hd_ir_graph_free(g);
}

/* A while loop: printed, hashed with its condition, saved as version 4
 * and loaded as the same graph; the builder's checks. */
static void test_while(hd_ctx *ctx) {
    hd_ir_graph *g = lt_while_graph(ctx);
    char *text = hd_ir_to_text(g);
    CHECK_MSG(contains(text, "{while %b2, carry=[%b0 <- out 0, %b1 <- out 1, %b2 <- out 2]}"), "%s",
              text);
    hd_ctx_strfree(ctx, text);
    hd_ir_graph *c = hd_ir_graph_clone(g);
    CHECK(c && c->nodes[1].op == HD_IR_LOOP && c->nodes[1].loop->while_in == 2 &&
          hd_ir_graph_hash(c) == hd_ir_graph_hash(g));
    if (c) c->nodes[1].loop->while_in = -1; /* a counted loop of 1 trip: another graph */
    CHECK(c && hd_ir_graph_hash(c) != hd_ir_graph_hash(g));
    hd_ir_graph_free(c);
    /* the body's constants first, as a file numbers them */
    CHECK(hd_ir_compact(g) == HD_OK && hd_ir_compact(g->nodes[1].loop->body) == HD_OK);
    round_trip(ctx, g, 4, NULL);
    /* the condition must be carried, one element, and every output carried
     * into its own input */
    int loop = g->nodes[1].out;
    CHECK(hd_ir_loop_while(g, loop, 3) != HD_OK && contains(hd_error_message(ctx), "of 3 carried"));
    CHECK(hd_ir_loop_while(g, loop, 0) != HD_OK &&
          contains(hd_error_message(ctx), "not one element"));
    CHECK(hd_ir_loop_while(g, g->nodes[0].out, 0) != HD_OK &&
          contains(hd_error_message(ctx), "not a loop's value"));
    CHECK(g->nodes[1].loop->while_in == 2 && hd_ir_verify(g) == HD_OK);
    g->nodes[1].loop->carry_src[1] = 0;
    CHECK(hd_ir_verify(g) != HD_OK);
    hd_ir_graph_free(g);
    hd_error_clear(ctx);
}

/* Stacks: printed, hashed, cloned, saved as version 5 and loaded as the
 * same graph; the builder's checks; unused stacks dropped by DCE. */
static void test_stacks(hd_ctx *ctx) {
    hd_ir_graph *g = lt_graph(ctx, 5, 0);
    int loop = g->nodes[0].out;
    uint64_t before = hd_ir_graph_hash(g);
    int k = hd_ir_loop_stack(g, loop, 0);
    CHECK(k == 2 && hd_ir_graph_hash(g) != before);
    int s = hd_ir_add_loop_out(g, loop, k);
    CHECK(s >= 0 && g->values[s].ndim == 2 && g->values[s].shape[0] == 5 &&
          g->values[s].shape[1] == LT_N);
    CHECK(hd_ir_add_output(g, "s", s) == HD_OK && hd_ir_verify(g) == HD_OK);
    char *text = hd_ir_to_text(g);
    CHECK_MSG(contains(text, "stack=[%b0]}") && contains(text, "{out=2} : f32[5, 4]"), "%s", text);
    hd_ctx_strfree(ctx, text);
    hd_ir_graph *c = hd_ir_graph_clone(g);
    CHECK(c && c->nodes[0].loop->nstack == 1 && hd_ir_graph_hash(c) == hd_ir_graph_hash(g));
    hd_ir_graph_free(c);
    round_trip(ctx, g, 5, NULL);
    /* only carried inputs, and only under a static trip count */
    CHECK(hd_ir_loop_stack(g, loop, 1) < 0 && contains(hd_error_message(ctx), "not carried"));
    CHECK(hd_ir_loop_stack(g, g->inputs[0].value, 0) < 0 &&
          contains(hd_error_message(ctx), "not a loop's value"));
    hd_error_clear(ctx);
    /* a stack no one reads goes */
    g->noutputs = 2;
    int changed = 0;
    CHECK(hd_pass_dce(g, &changed) == HD_OK && changed > 0);
    CHECK(g->nodes[0].op == HD_IR_LOOP && g->nodes[0].loop->nstack == 0 &&
          hd_ir_verify(g) == HD_OK);
    hd_ir_graph_free(g);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    test_build_print_hash(&ctx);
    test_builder_errors(&ctx);
    test_loop_out_as(&ctx);
    test_passes(&ctx);
    test_clone_free(&ctx);
    test_script_round_trip(&ctx);
    test_while(&ctx);
    test_stacks(&ctx);
    lt_env v = {&ctx, &hd_jit_interp, {0}, NULL, 0, 1000};
    hd_jit_options_init(&v.opt);
    lt_check_compiler(&v);
#if HODU_HAVE_LLVM
    v.c = &hd_jit_llvm;
    v.unroll_max = 20;
    lt_check_compiler(&v);
#endif
    hd_ctx_release(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
