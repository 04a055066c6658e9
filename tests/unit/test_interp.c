/* The interp compiler: the same code eagerly and traced + compiled gives
 * the same values; fresh outputs; input binding (zero-copy, strided,
 * wrong shapes); callbacks at every run; random draws in eager order;
 * memory-plan figures; compiler lookup; allocation failures. */
#include "hd_compile.h"
#include "hd_test.h"
#include "hd_test_trace.h"
#include "hd_trace.h"

static int contains(const char *s, const char *sub) {
    return s && strstr(s, sub) != NULL;
}

static hd_tensor *seq(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int nd, double scale) {
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, nd);
    for (int64_t i = 0; t && i < t->numel; i++)
        hd_dtype_store(dt, t->storage->data, i, scale * (double)((i * 7) % 11 - 5));
    return t;
}

/* Equal values (tol 0), or within relative tolerance tol. */
static int same_values(const hd_tensor *a, const hd_tensor *b, double tol) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->numel != b->numel) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    for (int64_t i = 0; i < a->numel; i++) {
        double x = hd_tensor_get(a, i), y = hd_tensor_get(b, i);
        if (!(x == y || (x != x && y != y) || (tol > 0 && hd_test_close(x, y, tol, tol)))) return 0;
    }
    return 1;
}

/* Eager vs compiled by c on the same inputs; returns 1 if all outputs
 * agree (to tol, relative; 0: equal). */
static int check_with(hd_ctx *ctx, const hd_jit_compiler *c, body_fn body, hd_tensor *const *in,
                      int nin, int nout, void *ud, const hd_jit_options *opt, hd_jit_stats *stats,
                      double tol) {
    hd_tensor *want[8] = {0}, *got[8] = {0};
    int ok = body(ctx, in, want, ud) == HD_OK;
    hd_ir_graph *g = ok ? trace_body(ctx, "body", body, in, nin, nout, ud) : NULL;
    hd_jit_exec *e = NULL;
    ok = ok && g && c->compile(ctx, g, opt, &e) == HD_OK;
    ok = ok && c->run(ctx, e, in, nin, got, nout) == HD_OK;
    for (int i = 0; ok && i < nout; i++) ok = same_values(want[i], got[i], tol);
    if (!ok) fprintf(stderr, "check_body (%s): %s\n", c->name, hd_error_message(ctx));
    if (e && stats) c->stats(e, stats);
    if (e) c->free(ctx, e);
    hd_ir_graph_free(g);
    for (int i = 0; i < 8; i++) {
        hd_tensor_unref(want[i]);
        hd_tensor_unref(got[i]);
    }
    return ok;
}

/* interp (stats from it), and llvm too where the build has it: equal
 * values, but for llvm's matmul of few rows (its own loops, which round
 * otherwise than OpenBLAS: 1e-6 relative). */
static int check_body(hd_ctx *ctx, body_fn body, hd_tensor *const *in, int nin, int nout, void *ud,
                      const hd_jit_options *opt, hd_jit_stats *stats) {
    int ok = check_with(ctx, &hd_jit_interp, body, in, nin, nout, ud, opt, stats, 0);
#if HODU_HAVE_LLVM
    ok = check_with(ctx, &hd_jit_llvm, body, in, nin, nout, ud, opt, NULL,
                    body == mlp2_body ? 1e-6 : 0) &&
         ok;
#endif
    return ok;
}

static void mlp_params(hd_ctx *ctx, hd_tensor **p) {
    int64_t s1[2] = {6, 5}, s2[1] = {5}, s3[2] = {5, 2}, s4[1] = {2};
    p[0] = seq(ctx, HD_F32, s1, 2, 0.1);
    p[1] = seq(ctx, HD_F32, s2, 1, 0.05);
    p[2] = seq(ctx, HD_F32, s3, 2, 0.2);
    p[3] = seq(ctx, HD_F32, s4, 1, 0.3);
}

static void test_mlp(hd_ctx *ctx) {
    hd_tensor *p[4];
    mlp_params(ctx, p);
    int64_t sx[2] = {3, 6};
    hd_tensor *x = seq(ctx, HD_F32, sx, 2, 1.0);
    hd_jit_stats st;
    CHECK(check_body(ctx, mlp2_body, &x, 1, 2, p, NULL, &st));
    CHECK(st.kernels == 6 && st.consts == 4 && st.runs == 1);
    CHECK(st.planned_bytes < st.naive_bytes);
    CHECK(st.inplace >= 1); /* relu over the bias add */
    hd_jit_options o;
    hd_jit_options_init(&o);
    o.opt_level = 0;
    o.no_inplace = o.no_reuse = 1;
    CHECK(check_body(ctx, mlp2_body, &x, 1, 2, p, &o, &st));
    CHECK(st.inplace == 0 && st.planned_bytes == st.naive_bytes);
    /* a strided (transposed) input is copied into the executable's buffer */
    hd_tensor *xt = NULL, *xtt = NULL;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2;
    at.shape[0] = 1;
    at.shape[1] = 0;
    int64_t sxt[2] = {6, 3};
    hd_tensor *base = seq(ctx, HD_F32, sxt, 2, 1.0);
    CHECK(op1(ctx, HD_OP_PERMUTE, base, &at, &xt) == HD_OK && !hd_tensor_is_contiguous(xt));
    CHECK(check_body(ctx, mlp2_body, &xt, 1, 2, p, NULL, NULL));
    hd_tensor_unref(xtt);
    hd_tensor_unref(xt);
    hd_tensor_unref(base);
    hd_tensor_unref(x);
    for (int i = 0; i < 4; i++) hd_tensor_unref(p[i]);
}

static void test_fresh_outputs_and_errors(hd_ctx *ctx) {
    hd_tensor *p[4];
    mlp_params(ctx, p);
    int64_t sx[2] = {3, 6}, bad[2] = {3, 5};
    hd_tensor *x = seq(ctx, HD_F32, sx, 2, 1.0), *x2 = seq(ctx, HD_F32, sx, 2, -0.5);
    hd_ir_graph *g = trace_body(ctx, "body", mlp2_body, &x, 1, 2, p);
    hd_jit_exec *e = NULL;
    CHECK(g && hd_jit_interp.compile(ctx, g, NULL, &e) == HD_OK);
    hd_tensor *o1[2] = {0}, *o2[2] = {0}, *want[2] = {0};
    CHECK(hd_jit_interp.run(ctx, e, &x, 1, o1, 2) == HD_OK);
    CHECK(hd_jit_interp.run(ctx, e, &x2, 1, o2, 2) == HD_OK);
    CHECK(o1[0] != o2[0] && o1[0]->storage != o2[0]->storage);
    CHECK(mlp2_body(ctx, &x, want, p) == HD_OK);
    CHECK(same_values(want[0], o1[0], 0) &&
          same_values(want[1], o1[1], 0)); /* kept by the caller */
    hd_tensor *wrong = seq(ctx, HD_F32, bad, 2, 1.0), *none[2] = {0};
    CHECK(hd_jit_interp.run(ctx, e, &wrong, 1, none, 2) == HD_ERR_ARGUMENT);
    CHECK(strcmp(hd_error_message(ctx), "input 'x0' expects f32[3, 6], got f32[3, 5]") == 0);
    hd_tensor *wrongdt = seq(ctx, HD_F64, sx, 2, 1.0);
    CHECK(hd_jit_interp.run(ctx, e, &wrongdt, 1, none, 2) == HD_ERR_ARGUMENT);
    CHECK(contains(hd_error_message(ctx), "expects f32[3, 6], got f64[3, 6]"));
    hd_tensor *missing = NULL;
    CHECK(hd_jit_interp.run(ctx, e, &missing, 1, none, 2) == HD_ERR_ARGUMENT);
    CHECK(contains(hd_error_message(ctx), "input 'x0' (f32[3, 6]) is missing"));
    CHECK(hd_jit_interp.run(ctx, e, &x, 1, none, 1) == HD_ERR_ARGUMENT);
    CHECK(none[0] == NULL);
    hd_jit_stats st;
    hd_jit_interp.stats(e, &st);
    CHECK(st.runs == 2 && st.compile_seconds > 0);
    CHECK(hd_jit_interp.graph(e)->lowered);
    hd_jit_interp.free(ctx, e);
    hd_ir_graph_free(g);
    hd_tensor *ts[] = {x,       x2,    o1[0],   o1[1], o2[0], o2[1], want[0],
                       want[1], wrong, wrongdt, p[0],  p[1],  p[2],  p[3]};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) hd_tensor_unref(ts[i]);
}

/* outputs that are an input, a constant and views of computed values */
static hd_status passthrough_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2;
    at.shape[0] = 1;
    at.shape[1] = 0;
    hd_tensor *e = NULL;
    out[0] = hd_tensor_ref(in[0]);
    out[1] = hd_tensor_ref((hd_tensor *)ud);
    hd_status st = op1(ctx, HD_OP_EXP, in[0], NULL, &e);
    if (!st) st = op1(ctx, HD_OP_PERMUTE, e, &at, &out[2]);
    if (!st) st = op1(ctx, HD_OP_PERMUTE, in[0], &at, &out[3]);
    hd_tensor_unref(e);
    return st;
}

static void test_passthrough(hd_ctx *ctx) {
    int64_t s[2] = {2, 3};
    hd_tensor *x = seq(ctx, HD_F32, s, 2, 0.25), *c = seq(ctx, HD_F64, s, 2, 2.0);
    CHECK(check_body(ctx, passthrough_body, &x, 1, 4, c, NULL, NULL));
    hd_tensor_unref(x);
    hd_tensor_unref(c);
}

/* mixed dtypes: explicit casts, numbers, comparisons, where */
static hd_status mixed_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    HD_UNUSED(ud);
    hd_tensor *n = hd_tensor_number(ctx, HD_F64, 2.5), *a = NULL, *b = NULL, *c = NULL;
    hd_status st = op2(ctx, HD_OP_MUL, in[0], n, &a); /* i32 * 2.5 -> f32 */
    if (!st) st = op2(ctx, HD_OP_ADD, a, in[1], &b);  /* f32 + f64 -> f64 */
    if (!st) st = op2(ctx, HD_OP_GT, b, in[0], &c);
    if (!st) {
        hd_tensor *w[3] = {c, in[0], b};
        st = hd_op_run(ctx, HD_OP_WHERE, w, 3, NULL, &out[0]);
    }
    hd_tensor_unref(n);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    hd_tensor_unref(c);
    return st;
}

static void test_mixed_dtypes(hd_ctx *ctx) {
    int64_t s[2] = {4, 3}, s1[1] = {3};
    hd_tensor *in[2] = {seq(ctx, HD_I32, s, 2, 1.0), seq(ctx, HD_F64, s1, 1, -0.75)};
    hd_jit_stats st;
    CHECK(check_body(ctx, mixed_body, in, 2, 1, NULL, NULL, &st));
    CHECK(st.casts >= 3);
    hd_tensor_unref(in[0]);
    hd_tensor_unref(in[1]);
}

/* random draws: same seed, same values as eager, and a new draw each run */
static hd_status rand_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    HD_UNUSED(ud);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = HD_F32;
    at.nshape = 2;
    at.shape[0] = 4;
    at.shape[1] = 3;
    at.scalar[1] = 1.0; /* randn's std */
    hd_tensor *unused = NULL, *r = NULL;
    hd_status st = hd_op_run(ctx, HD_OP_RAND, NULL, 0, &at, &unused); /* dead, yet it draws */
    if (!st) st = hd_op_run(ctx, HD_OP_RANDN, NULL, 0, &at, &r);
    if (!st) st = op2(ctx, HD_OP_ADD, r, in[0], &out[0]);
    hd_tensor_unref(unused);
    hd_tensor_unref(r);
    return st;
}

static void test_random(hd_ctx *ctx) {
    int64_t s[2] = {4, 3};
    hd_tensor *x = seq(ctx, HD_F32, s, 2, 1.0), *want = NULL, *got = NULL, *got2 = NULL;
    hd_ir_graph *g = trace_body(ctx, "body", rand_body, &x, 1, 1, NULL);
    hd_jit_exec *e = NULL;
    CHECK(g && hd_jit_interp.compile(ctx, g, NULL, &e) == HD_OK);
    ctx->rng_offset = 0;
    CHECK(rand_body(ctx, &x, &want, NULL) == HD_OK);
    ctx->rng_offset = 0;
    CHECK(hd_jit_interp.run(ctx, e, &x, 1, &got, 1) == HD_OK);
    CHECK(same_values(want, got, 0));
    CHECK(hd_jit_interp.run(ctx, e, &x, 1, &got2, 1) == HD_OK);
    CHECK(!same_values(got, got2, 0));
    hd_jit_interp.free(ctx, e);
    hd_ir_graph_free(g);
    hd_tensor_unref(x);
    hd_tensor_unref(want);
    hd_tensor_unref(got);
    hd_tensor_unref(got2);
}

/* print inside compiled code: the callback sees each run's values */
static double seen[16];
static int nseen;
static hd_status record_cb(hd_ctx *ctx, void *ud, hd_tensor *const *args, int nargs) {
    HD_UNUSED(ctx);
    HD_UNUSED(ud);
    if (nargs == 1 && nseen < 16) seen[nseen++] = hd_tensor_get(args[0], 0);
    return HD_OK;
}

static hd_status fail_cb(hd_ctx *ctx, void *ud, hd_tensor *const *args, int nargs) {
    HD_UNUSED(ud);
    HD_UNUSED(args);
    HD_UNUSED(nargs);
    return hd_error(ctx, HD_ERR_RUNTIME, "callback failed");
}

static void test_callbacks(hd_ctx *ctx) {
    int64_t s[1] = {2};
    hd_tensor *x = seq(ctx, HD_F32, s, 1, 1.0), *y = NULL, *out = NULL;
    hd_ir_graph *g = NULL;
    CHECK(hd_trace_begin(ctx, "p") == HD_OK);
    hd_tensor *sx = hd_trace_input(ctx, "x", HD_F32, s, 1);
    CHECK(op1(ctx, HD_OP_NEG, sx, NULL, &y) == HD_OK);
    hd_ir_callback cb = {"print", record_cb, NULL, NULL, NULL};
    CHECK(hd_trace_callback(ctx, &cb, &y, 1) == HD_OK);
    CHECK(hd_trace_end(ctx, &g) == HD_OK);
    hd_jit_exec *e = NULL;
    CHECK(hd_jit_interp.compile(ctx, g, NULL, &e) == HD_OK);
    nseen = 0;
    CHECK(hd_jit_interp.run(ctx, e, &x, 1, &out, 0) == HD_OK);
    ((float *)x->storage->data)[0] = 7.0f;
    CHECK(hd_jit_interp.run(ctx, e, &x, 1, &out, 0) == HD_OK);
    CHECK(nseen == 2 && seen[0] == 5.0 && seen[1] == -7.0);
    hd_jit_interp.free(ctx, e);
    g->nodes[1].cb.fn = fail_cb;
    CHECK(hd_jit_interp.compile(ctx, g, NULL, &e) == HD_OK);
    CHECK(hd_jit_interp.run(ctx, e, &x, 1, &out, 0) == HD_ERR_RUNTIME);
    CHECK(strcmp(hd_error_message(ctx), "callback failed") == 0);
    hd_jit_interp.free(ctx, e);
    hd_ir_graph_free(g);
    hd_tensor_unref(sx);
    hd_tensor_unref(y);
    hd_tensor_unref(x);
}

static void test_compiler_lookup(hd_ctx *ctx) {
    const hd_jit_compiler *c = NULL;
    CHECK(hd_jit_compiler_find(ctx, "interp", &c) == HD_OK && c == &hd_jit_interp);
    CHECK(hd_jit_compiler_find(ctx, "tvm", &c) == HD_ERR_ARGUMENT && !c);
    CHECK(strcmp(hd_error_message(ctx), "unknown compiler 'tvm' (known: interp, llvm, cuda)") == 0);
#if HODU_HAVE_LLVM
    CHECK(hd_jit_compiler_find(ctx, "llvm", &c) == HD_OK && c == &hd_jit_llvm);
#else
    CHECK(hd_jit_compiler_find(ctx, "llvm", &c) == HD_ERR_RUNTIME);
    CHECK(contains(hd_error_message(ctx), "not available in this build"));
#endif
    CHECK(hd_jit_compiler_find(ctx, "cuda", &c) == HD_OK && c == &hd_jit_cuda);
    hd_jit_options o;
    hd_jit_options_init(&o);
    /* the cuda compiler is usable exactly where the cuda device is */
    int gpu = hd_cuda_backend.available(ctx, 0) == HD_OK;
    CHECK((hd_jit_cuda.available(ctx, &o) == HD_OK) == gpu);
    if (!gpu) CHECK(contains(hd_error_message(ctx), "compiler 'cuda': cuda is not available"));
    CHECK(hd_jit_interp.available(ctx, &o) == HD_OK);
    o.device = "tpu";
    CHECK(hd_jit_interp.available(ctx, &o) != HD_OK);
    CHECK(contains(hd_error_message(ctx), "unknown device 'tpu'"));
}

/* zero-size values run no kernel but keep their shapes */
static hd_status empty_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    HD_UNUSED(ud);
    hd_tensor *a = NULL;
    hd_status st = op1(ctx, HD_OP_EXP, in[0], NULL, &a);
    if (!st) st = op1(ctx, HD_OP_SUM, a, NULL, &out[0]);
    if (!st) st = op2(ctx, HD_OP_ADD, a, in[0], &out[1]);
    hd_tensor_unref(a);
    return st;
}

static void test_empty(hd_ctx *ctx) {
    int64_t s[2] = {0, 3};
    hd_tensor *x = hd_tensor_zeros(ctx, HD_F32, s, 2);
    CHECK(check_body(ctx, empty_body, &x, 1, 2, NULL, NULL, NULL));
    hd_tensor_unref(x);
}

static void test_alloc_failures(hd_ctx *ctx) {
    hd_tensor *p[4];
    mlp_params(ctx, p);
    int64_t sx[2] = {3, 6};
    hd_tensor *x = seq(ctx, HD_F32, sx, 2, 1.0);
    hd_ir_graph *g = trace_body(ctx, "body", mlp2_body, &x, 1, 2, p);
    int ok_at = -1;
    for (long k = 0; k < 400 && ok_at < 0; k++) {
        size_t before = ctx->mem_used;
        hd_jit_exec *e = NULL;
        hd_tensor *out[2] = {0};
        ctx->fail_countdown = k;
        hd_status st = hd_jit_interp.compile(ctx, g, NULL, &e);
        if (!st) st = hd_jit_interp.run(ctx, e, &x, 1, out, 2);
        ctx->fail_countdown = -1;
        if (!st) ok_at = (int)k;
        if (e) hd_jit_interp.free(ctx, e);
        hd_tensor_unref(out[0]);
        hd_tensor_unref(out[1]);
        CHECK_MSG(ctx->mem_used == before, "leak after failing allocation %ld", k);
        CHECK(st == HD_OK || st == HD_ERR_MEMORY);
        hd_error_clear(ctx);
    }
    CHECK(ok_at > 10);
    hd_ir_graph_free(g);
    hd_tensor_unref(x);
    for (int i = 0; i < 4; i++) hd_tensor_unref(p[i]);
}

/* cache keys: signatures, constants, what changed */
static void test_cache_keys(hd_ctx *ctx) {
    int64_t s23[2] = {2, 3}, s43[2] = {4, 3};
    hd_tensor *a = seq(ctx, HD_F32, s23, 2, 1.0), *b = seq(ctx, HD_F32, s43, 2, 1.0);
    hd_tensor *c = seq(ctx, HD_F32, s23, 2, 2.0);
    hd_jit_signature sa, sb, sc;
    hd_jit_signature_make(&sa, &a, 1);
    hd_jit_signature_make(&sb, &b, 1);
    hd_jit_signature_make(&sc, &c, 1);
    CHECK(sa.hash != sb.hash && sa.hash == sc.hash); /* values do not matter */
    hd_jit_options o;
    hd_jit_options_init(&o);
    hd_jit_key ka = {1, sa.hash, hd_jit_constants_hash(&a, 1, 1024), hd_jit_string_hash("interp"),
                     hd_jit_options_hash(&o)};
    hd_jit_key kb = ka;
    CHECK(hd_jit_key_diff(&ka, &kb) == 0);
    kb.inputs = sb.hash;
    kb.compiler = hd_jit_string_hash("llvm");
    char buf[512];
    unsigned d = hd_jit_key_diff(&ka, &kb);
    CHECK(d == (HD_JIT_KEY_INPUTS | HD_JIT_KEY_COMPILER));
    hd_jit_key_describe(d, &sa, &sb, buf, sizeof buf);
    CHECK(strcmp(buf, "input 0 changed: f32[2, 3] on cpu:0 -> f32[4, 3] on cpu:0; the compiler "
                      "changed") == 0);
    /* constants: bytes when small, identity and version when large */
    uint64_t h1 = hd_jit_constants_hash(&a, 1, 1024), h0 = hd_jit_constants_hash(&a, 1, 0);
    ((float *)a->storage->data)[0] += 1;
    CHECK(hd_jit_constants_hash(&a, 1, 1024) != h1);
    CHECK(hd_jit_constants_hash(&a, 1, 0) == h0); /* a write not seen by the runtime */
    hd_tensor *one = hd_tensor_number(ctx, HD_F32, 1.0);
    CHECK(hd_tensor_copy_into(ctx, a, one) == HD_OK); /* bumps the storage version */
    CHECK(hd_jit_constants_hash(&a, 1, 0) != h0);
    o.opt_level = 0;
    CHECK(hd_jit_options_hash(&o) != ka.options);
    hd_tensor_unref(one);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    hd_tensor_unref(c);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    test_mlp(&ctx);
    test_fresh_outputs_and_errors(&ctx);
    test_passthrough(&ctx);
    test_mixed_dtypes(&ctx);
    test_random(&ctx);
    test_callbacks(&ctx);
    test_compiler_lookup(&ctx);
    test_empty(&ctx);
    test_alloc_failures(&ctx);
    test_cache_keys(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
