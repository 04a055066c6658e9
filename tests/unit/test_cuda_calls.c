/* Driver calls on the hot paths, counted by the emulator (hodu_emu_calls):
 * once warm, an eager elementwise op makes exactly one launch and no
 * module look-up, context switch, synchronization, allocation or copy; a
 * compiled call (a CUDA Graph replay) whose tensors stay where they were
 * makes one graph launch and no copies; new addresses are captured again
 * (and the results stay right). It counts calls, not times. Runs on the
 * emulator only (emu.test_cuda_calls): elsewhere it reports SKIPPED (77). */
#include "hd_test.h"
#include "hd_backend.h"
#include "hd_compile.h"
#include "hd_profile.h"
#include "hd_rng.h"
#include "hd_trace.h"
#include "hd_test_trace.h"
#include "hodu.h"

#if HODU_HAVE_CUDA
#include "cuda_int.h"

#include <dlfcn.h>

static unsigned long long (*emu_calls)(const char *);
static void (*emu_reset)(void);

static int emu_open(void) {
    const char *lib = getenv("HODU_CUDA_DRIVER");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (!h) return 0;
    *(void **)&emu_calls = dlsym(h, "hodu_emu_calls");
    *(void **)&emu_reset = dlsym(h, "hodu_emu_calls_reset");
    return emu_calls && emu_reset;
}

static hd_tensor *dev_tensor(hd_ctx *ctx, const float *v, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    hd_tensor *h = hd_tensor_from_data(ctx, HD_F32, shape, cols ? 2 : 1, v), *d = NULL;
    if (h) hd_tensor_to_device(ctx, h, &hd_cuda_backend, 0, &d);
    hd_tensor_unref(h);
    return d;
}

static float host_at(hd_ctx *ctx, hd_tensor *t, int64_t i) {
    hd_tensor *h = hd_tensor_to_host(ctx, t);
    float v = h ? (float)hd_tensor_get(h, i) : -12345.0f;
    hd_tensor_unref(h);
    return v;
}

/* Calls other than launches that an eager op must not make. */
static unsigned long long other_calls(void) {
    static const char *const names[] = {
        "cuModuleGetFunction",  "cuModuleLoadData",     "cuCtxSetCurrent",
        "cuStreamSynchronize",  "cuMemAlloc_v2",        "cuMemFree_v2",
        "cuMemcpyDtoDAsync_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2"};
    unsigned long long n = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) n += emu_calls(names[i]);
    return n;
}

static void check_eager(hd_ctx *ctx, hd_op op, hd_tensor **in, int nin) {
    hd_tensor *r = NULL;
    for (int i = 0; i < 3; i++) { /* warm: module compiled, kernel in the table, memory cached */
        CHECK(hd_op_run(ctx, op, in, nin, NULL, &r) == HD_OK);
        hd_tensor_unref(r);
        r = NULL;
    }
    emu_reset();
    CHECK(hd_op_run(ctx, op, in, nin, NULL, &r) == HD_OK);
    CHECK_MSG(emu_calls("cuLaunchKernel") == 1, "%s: %llu launches", hd_op_name(op),
              emu_calls("cuLaunchKernel"));
    CHECK_MSG(other_calls() == 0, "%s: %llu other driver calls", hd_op_name(op), other_calls());
    hd_tensor_unref(r);
}

static void test_eager(hd_ctx *ctx) {
    const float xv[4] = {1, -2, 3, -4}, yv[4] = {10, 20, 30, 40};
    hd_tensor *x = dev_tensor(ctx, xv, 4, 0), *y = dev_tensor(ctx, yv, 4, 0);
    hd_tensor *a = dev_tensor(ctx, xv, 4, 1), *b = dev_tensor(ctx, yv, 1, 4);
    CHECK(x && y && a && b);
    if (!x || !y || !a || !b) return;
    hd_tensor *xy[2] = {x, y}, *ab[2] = {a, b};
    check_eager(ctx, HD_OP_ADD, xy, 2);
    check_eager(ctx, HD_OP_RELU, xy, 1);
    check_eager(ctx, HD_OP_MUL, ab, 2); /* broadcasting: strided geometry, same kernel */
    hd_tensor *r = NULL;
    CHECK(hd_op_run(ctx, HD_OP_ADD, xy, 2, NULL, &r) == HD_OK);
    CHECK(r && host_at(ctx, r, 3) == 36.0f);
    hd_tensor_unref(r);
    /* Hodu numbers (f64 and i64 0-d host tensors, cast to f32 on the
     * host) on either side: kernel arguments, never uploaded, no wait */
    hd_tensor *two = hd_tensor_number(ctx, HD_F64, 2.5), *three = hd_tensor_number(ctx, HD_I64, 3);
    CHECK(two && three);
    if (two && three) {
        hd_tensor *xn[2] = {x, two}, *nx[2] = {three, x};
        check_eager(ctx, HD_OP_MUL, xn, 2);
        check_eager(ctx, HD_OP_SUB, nx, 2);
        check_eager(ctx, HD_OP_GT, xn, 2);
        CHECK(hd_op_run(ctx, HD_OP_SUB, nx, 2, NULL, &r) == HD_OK);
        CHECK(r && host_at(ctx, r, 1) == 5.0f && host_at(ctx, r, 3) == 7.0f);
        hd_tensor_unref(r);
        CHECK(hd_op_run(ctx, HD_OP_MUL, xn, 2, NULL, &r) == HD_OK);
        CHECK(r && host_at(ctx, r, 0) == 2.5f && host_at(ctx, r, 3) == -10.0f);
        hd_tensor_unref(r);
    }
    hd_tensor_unref(two);
    hd_tensor_unref(three);
    /* the first product gives cuBLAS its workspace, once (so a captured
     * GEMM may use the algorithms an eager one does) */
    hd_tensor *ba[2] = {b, a};
    emu_reset();
    for (int i = 0; i < 2; i++) {
        CHECK(hd_op_run(ctx, HD_OP_MATMUL, ba, 2, NULL, &r) == HD_OK);
        hd_tensor_unref(r);
    }
    CHECK_MSG(emu_calls("cublasSetWorkspace_v2") == 1, "%llu workspaces",
              emu_calls("cublasSetWorkspace_v2"));
    CHECK(emu_calls("cublasGemmEx") == 2 && emu_calls("cublasGemmStridedBatchedEx") == 0);
    hd_tensor *all[] = {x, y, a, b};
    for (int i = 0; i < 4; i++) hd_tensor_unref(all[i]);
}

/* One product of the device tensors a and b (views), warm: cuBLAS reads
 * them where they are (no copy kernel, nothing else) or, for `copies`
 * operands cuBLAS cannot read, a copy kernel each. Its values against a
 * loop over the views' elements on the host. */
static void check_product(hd_ctx *ctx, hd_tensor *a, hd_tensor *b, int copies, const char *what) {
    hd_tensor *ab[2] = {a, b}, *r = NULL;
    for (int i = 0; i < 2; i++) {
        CHECK(hd_op_run(ctx, HD_OP_MATMUL, ab, 2, NULL, &r) == HD_OK);
        hd_tensor_unref(r);
        r = NULL;
    }
    emu_reset();
    CHECK_MSG(hd_op_run(ctx, HD_OP_MATMUL, ab, 2, NULL, &r) == HD_OK, "%s", what);
    unsigned long long gemms = emu_calls("cublasGemmEx") + emu_calls("cublasGemmStridedBatchedEx");
    CHECK_MSG(gemms == 1 && emu_calls("cuLaunchKernel") == (unsigned long long)copies &&
                  other_calls() == 0,
              "%s: %llu GEMMs, %llu launches, %llu other calls", what, gemms,
              emu_calls("cuLaunchKernel"), other_calls());
    hd_tensor *ha = hd_tensor_to_host(ctx, a), *hb = hd_tensor_to_host(ctx, b);
    hd_tensor *hr = r ? hd_tensor_to_host(ctx, r) : NULL;
    CHECK(ha && hb && hr);
    int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1], n = b->shape[b->ndim - 1];
    int64_t batch = hr ? hr->numel / (m * n) : 0;
    for (int64_t q = 0; hr && q < batch; q++) /* a batched, b one matrix */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double want = 0;
                for (int64_t l = 0; l < k; l++)
                    want += hd_tensor_get(ha, (q * m + i) * k + l) * hd_tensor_get(hb, l * n + j);
                CHECK_MSG(hd_tensor_get(hr, (q * m + i) * n + j) == (float)want,
                          "%s: [%lld, %lld, %lld]", what, (long long)q, (long long)i, (long long)j);
            }
    hd_tensor *all[] = {ha, hb, hr, r};
    for (int i = 0; i < 4; i++) hd_tensor_unref(all[i]);
}

/* nn.Linear's x @ weight.T, its gradients' transposes, slices and
 * batches one stride apart reach cuBLAS with no copy; columns two apart
 * are copied. */
static void test_products(hd_ctx *ctx) {
    float v[48];
    for (int i = 0; i < 48; i++) v[i] = (float)((i * 7) % 11) - 5.0f;
    hd_tensor *x = dev_tensor(ctx, v, 4, 6), *w = dev_tensor(ctx, v + 24, 4, 6);
    hd_tensor *p = dev_tensor(ctx, v, 2, 24);
    CHECK(x && w && p);
    if (!x || !w || !p) return;
    hd_tensor *wt = hd_tensor_view(ctx, w, (int64_t[]){6, 4}, (int64_t[]){1, 6}, 2, 0);
    hd_tensor *xs = hd_tensor_view(ctx, x, (int64_t[]){4, 3}, (int64_t[]){6, 1}, 2, 2);
    hd_tensor *ws = hd_tensor_view(ctx, w, (int64_t[]){3, 4}, (int64_t[]){1, 6}, 2, 1);
    hd_tensor *xe = hd_tensor_view(ctx, x, (int64_t[]){4, 3}, (int64_t[]){6, 2}, 2, 0);
    /* p as [2, 6, 4] per batch transposed: [2, 4, 6] with strides [24, 1, 4] */
    hd_tensor *pt = hd_tensor_view(ctx, p, (int64_t[]){2, 4, 6}, (int64_t[]){24, 1, 4}, 3, 0);
    CHECK(wt && xs && ws && xe && pt);
    if (wt && xs && ws && xe && pt) {
        check_product(ctx, x, wt, 0, "x @ w.T");
        check_product(ctx, xs, ws, 0, "x[:, 2:5] @ w.T[1:4]");
        check_product(ctx, pt, wt, 0, "batched transposes @ w.T");
        check_product(ctx, xe, ws, 1, "x[:, ::2] @ w.T[1:4]");
    }
    hd_tensor *all[] = {x, w, p, wt, xs, ws, xe, pt};
    for (int i = 0; i < 8; i++) hd_tensor_unref(all[i]);
}

/* Calls of one warm op other than launches, by name. */
static unsigned long long calls_of(hd_ctx *ctx, hd_op op, hd_tensor **in, int nin,
                                   const hd_attrs *at, const char *name, int *launches) {
    hd_tensor *r = NULL;
    for (int i = 0; i < 2; i++) {
        CHECK(hd_op_run(ctx, op, in, nin, at, &r) == HD_OK);
        hd_tensor_unref(r);
        r = NULL;
    }
    emu_reset();
    CHECK(hd_op_run(ctx, op, in, nin, at, &r) == HD_OK);
    hd_tensor_unref(r);
    *launches = (int)emu_calls("cuLaunchKernel");
    return emu_calls(name);
}

/* Host scalars that are not Hodu numbers (0-d cpu tensors: an optimizer's
 * bias correction) and where's values are kernel arguments too: one
 * launch, nothing copied, no wait. Index ops wait once, for the check of
 * their indices, and copy nothing up when the indices are on the device;
 * indices whose range is known (sent up from the host, or checked once,
 * and not written since) are not checked again: no copy back, no wait. */
static void test_host_scalars(hd_ctx *ctx) {
    const float xv[4] = {1, -2, 3, -4};
    hd_tensor *x = dev_tensor(ctx, xv, 4, 0), *r = NULL;
    double sv = 0.5;
    hd_tensor *s = hd_tensor_from_data(ctx, HD_F64, NULL, 0, &sv);
    hd_tensor *zero = hd_tensor_number(ctx, HD_F32, 0.0);
    CHECK(x && s && zero && !s->number);
    if (!x || !s || !zero) return;
    hd_tensor *xs[2] = {x, s}, *sx[2] = {s, x};
    check_eager(ctx, HD_OP_MUL, xs, 2);
    check_eager(ctx, HD_OP_SUB, sx, 2);
    CHECK(hd_op_run(ctx, HD_OP_SUB, sx, 2, NULL, &r) == HD_OK);
    CHECK(r && host_at(ctx, r, 1) == 2.5f && host_at(ctx, r, 3) == 4.5f);
    hd_tensor_unref(r);
    hd_tensor *gt[2] = {x, zero}, *c = NULL;
    CHECK(hd_op_run(ctx, HD_OP_GT, gt, 2, NULL, &c) == HD_OK);
    hd_tensor *w1[3] = {c, x, zero}, *w2[3] = {c, s, zero};
    check_eager(ctx, HD_OP_WHERE, w1, 3); /* relu's gradient: where(y > 0, g, 0) */
    check_eager(ctx, HD_OP_WHERE, w2, 3);
    CHECK(hd_op_run(ctx, HD_OP_WHERE, w2, 3, NULL, &r) == HD_OK);
    CHECK(r && host_at(ctx, r, 0) == 0.5f && host_at(ctx, r, 1) == 0.0f);
    hd_tensor_unref(r);
    /* index_select with i64 indices sent up from the host: their range is
     * known, so one launch, no copy back, no wait, nothing copied up */
    const int64_t iv[3] = {3, -1, 0}, bad[3] = {3, 4, 0};
    int64_t n3 = 3;
    hd_tensor *ih = hd_tensor_from_data(ctx, HD_I64, &n3, 1, iv), *id = NULL, *id2 = NULL;
    hd_tensor *bh = hd_tensor_from_data(ctx, HD_I64, &n3, 1, bad), *bd = NULL;
    CHECK(ih && hd_tensor_to_device(ctx, ih, &hd_cuda_backend, 0, &id) == HD_OK);
    CHECK(hd_tensor_to_device(ctx, ih, &hd_cuda_backend, 0, &id2) == HD_OK);
    CHECK(bh && hd_tensor_to_device(ctx, bh, &hd_cuda_backend, 0, &bd) == HD_OK);
    hd_tensor *xi[2] = {x, id};
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int launches = 0;
    CHECK(calls_of(ctx, HD_OP_INDEX_SELECT, xi, 2, &at, "cuMemcpyHtoDAsync_v2", &launches) == 0);
    CHECK(launches == 1 && emu_calls("cuStreamSynchronize") == 0 &&
          emu_calls("cuMemcpyDtoHAsync_v2") == 0);
    CHECK(hd_op_run(ctx, HD_OP_INDEX_SELECT, xi, 2, &at, &r) == HD_OK);
    CHECK(r && host_at(ctx, r, 0) == -4.0f && host_at(ctx, r, 1) == -4.0f &&
          host_at(ctx, r, 2) == 1.0f);
    hd_tensor_unref(r);
    /* written in place: checked again (one copy back, one wait), then known */
    CHECK(hd_tensor_copy_into(ctx, id, id2) == HD_OK);
    emu_reset();
    CHECK(hd_op_run(ctx, HD_OP_INDEX_SELECT, xi, 2, &at, &r) == HD_OK);
    hd_tensor_unref(r);
    CHECK(emu_calls("cuStreamSynchronize") == 1 && emu_calls("cuMemcpyDtoHAsync_v2") == 1);
    CHECK(calls_of(ctx, HD_OP_INDEX_SELECT, xi, 2, &at, "cuStreamSynchronize", &launches) == 0);
    /* an index out of range written in: the check sees it, nothing runs */
    CHECK(hd_tensor_copy_into(ctx, id, bd) == HD_OK);
    emu_reset();
    r = NULL;
    CHECK(hd_op_run(ctx, HD_OP_INDEX_SELECT, xi, 2, &at, &r) != HD_OK && !r);
    CHECK_MSG(strstr(hd_error_message(ctx), "index 4 is out of range") != NULL, "%s",
              hd_error_message(ctx));
    CHECK(emu_calls("cuLaunchKernel") == 0 && emu_calls("cuMemcpyDtoHAsync_v2") == 1);
    hd_error_clear(ctx);
    CHECK(hd_op_run(ctx, HD_OP_INDEX_SELECT, xi, 2, &at, &r) != HD_OK); /* and again */
    hd_error_clear(ctx);
    /* cross_entropy: labels sent up are known; the pick kernel reads them
     * where they are, nothing goes up or back, no wait */
    const float lv[8] = {0.5f, -1, 2, 0, 1, 1, -3, 0.25f};
    const int64_t labv[2] = {3, 0};
    int64_t n2 = 2;
    hd_tensor *logits = dev_tensor(ctx, lv, 2, 4),
              *lh = hd_tensor_from_data(ctx, HD_I64, &n2, 1, labv);
    hd_tensor *ld = NULL;
    CHECK(logits && lh && hd_tensor_to_device(ctx, lh, &hd_cuda_backend, 0, &ld) == HD_OK);
    hd_tensor *ce[2] = {logits, ld};
    CHECK(calls_of(ctx, HD_OP_CROSS_ENTROPY, ce, 2, NULL, "cuStreamSynchronize", &launches) == 0);
    CHECK(emu_calls("cuMemcpyHtoDAsync_v2") == 0 && emu_calls("cuMemcpyDtoHAsync_v2") == 0);
    /* written in place (the same labels): one copy back and one wait */
    hd_tensor *ld2 = NULL;
    CHECK(hd_tensor_to_device(ctx, lh, &hd_cuda_backend, 0, &ld2) == HD_OK);
    CHECK(hd_tensor_copy_into(ctx, ld, ld2) == HD_OK);
    emu_reset();
    hd_tensor *loss = NULL;
    CHECK(hd_op_run(ctx, HD_OP_CROSS_ENTROPY, ce, 2, NULL, &loss) == HD_OK);
    CHECK(emu_calls("cuStreamSynchronize") == 1 && emu_calls("cuMemcpyDtoHAsync_v2") == 1);
    /* -(log_softmax(row 0)[3] + log_softmax(row 1)[0]) / 2, in double */
    double l0 = log(exp(0.5) + exp(-1.0) + exp(2.0) + exp(0.0)) - 0.0;
    double l1 = log(exp(1.0) + exp(1.0) + exp(-3.0) + exp(0.25)) - 1.0;
    CHECK_MSG(loss && fabs(host_at(ctx, loss, 0) - (l0 + l1) / 2) < 1e-6, "loss %g, want %g",
              loss ? host_at(ctx, loss, 0) : -1.0, (l0 + l1) / 2);
    hd_tensor_unref(loss);
    hd_tensor *all[] = {x, s, zero, c, ih, id, id2, bh, bd, logits, lh, ld, ld2};
    for (int i = 0; i < 13; i++) hd_tensor_unref(all[i]);
}

/* y = relu(x @ w + b) * 2 with x, w, b inputs of the graph. */
static hd_ir_graph *trace_layer(hd_ctx *ctx, hd_tensor *const *args) {
    static const char *const names[] = {"x", "w", "b"};
    hd_tensor *s[3] = {NULL, NULL, NULL}, *t[4] = {NULL, NULL, NULL, NULL};
    hd_ir_graph *g = NULL;
    if (hd_trace_begin(ctx, "layer")) return NULL;
    for (int i = 0; i < 3; i++)
        s[i] = hd_trace_input(ctx, names[i], HD_F32, args[i]->shape, args[i]->ndim);
    hd_tensor *two = hd_tensor_number(ctx, HD_F32, 2.0);
    hd_tensor *mm[2] = {s[0], s[1]}, *ad[2] = {NULL, s[2]}, *mu[2] = {NULL, two};
    hd_status st = hd_op_run(ctx, HD_OP_MATMUL, mm, 2, NULL, &t[0]);
    ad[0] = t[0];
    if (!st) st = hd_op_run(ctx, HD_OP_ADD, ad, 2, NULL, &t[1]);
    if (!st) st = hd_op_run(ctx, HD_OP_RELU, &t[1], 1, NULL, &t[2]);
    mu[0] = t[2];
    if (!st) st = hd_op_run(ctx, HD_OP_MUL, mu, 2, NULL, &t[3]);
    if (!st) st = hd_trace_output(ctx, "y", t[3]);
    if (!st)
        st = hd_trace_end(ctx, &g);
    else
        hd_trace_abort(ctx);
    for (int i = 0; i < 4; i++) hd_tensor_unref(t[i]);
    for (int i = 0; i < 3; i++) hd_tensor_unref(s[i]);
    hd_tensor_unref(two);
    return g;
}

/* One compiled call; y[0] and the calls it made. */
static float run_once(hd_ctx *ctx, hd_jit_exec *e, hd_tensor **args, hd_tensor **keep) {
    hd_tensor *y = NULL;
    CHECK_MSG(hd_jit_cuda.run(ctx, e, args, 3, &y, 1) == HD_OK, "run: %s", ctx->errmsg);
    float v = y ? host_at(ctx, y, 0) : -1.0f;
    if (keep) {
        hd_tensor_unref(*keep);
        *keep = y;
    } else {
        hd_tensor_unref(y);
    }
    return v;
}

static void test_compiled(hd_ctx *ctx) {
    const float xv[2] = {1, 2}, wv[4] = {1, 0, 0, 1}, bv[2] = {0.5f, -10};
    hd_tensor *args[3] = {dev_tensor(ctx, xv, 1, 2), dev_tensor(ctx, wv, 2, 2),
                          dev_tensor(ctx, bv, 2, 0)};
    const float x2v[2] = {4, 8};
    hd_tensor *x2 = dev_tensor(ctx, x2v, 1, 2), *old = args[0];
    hd_ir_graph *g = args[0] && args[1] && args[2] && x2 ? trace_layer(ctx, args) : NULL;
    CHECK_MSG(g != NULL, "trace: %s", ctx->errmsg);
    if (!g) {
        hd_tensor_unref(x2);
        for (int i = 0; i < 3; i++) hd_tensor_unref(args[i]);
        return;
    }
    hd_jit_options o;
    hd_jit_options_init(&o);
    o.device = "cuda:0";
    hd_jit_exec *e = NULL;
    CHECK_MSG(hd_jit_cuda.compile(ctx, g, &o, &e) == HD_OK, "compile: %s", ctx->errmsg);
    if (!e) {
        hd_ir_graph_free(g);
        hd_tensor_unref(x2);
        for (int i = 0; i < 3; i++) hd_tensor_unref(args[i]);
        return;
    }
    CHECK(run_once(ctx, e, args, NULL) == 3.0f); /* launch by launch */
    CHECK(run_once(ctx, e, args, NULL) == 3.0f); /* captured */
    hd_jit_stats st;
    emu_reset();
    hd_tensor *y = NULL;
    CHECK(hd_jit_cuda.run(ctx, e, args, 3, &y, 1) == HD_OK); /* replayed */
    CHECK_MSG(emu_calls("cuGraphLaunch") == 1, "%llu graph launches", emu_calls("cuGraphLaunch"));
    CHECK_MSG(emu_calls("cuMemcpyDtoDAsync_v2") == 0, "%llu copies",
              emu_calls("cuMemcpyDtoDAsync_v2"));
    CHECK(emu_calls("cuLaunchKernel") == 0 && emu_calls("cuStreamBeginCapture_v2") == 0);
    CHECK(emu_calls("cuCtxSetCurrent") == 0 && emu_calls("cuStreamSynchronize") == 0);
    CHECK(emu_calls("cuMemAlloc_v2") == 0);
    hd_jit_cuda.stats(e, &st);
    CHECK(st.cuda_graph && st.launches == 1);
    CHECK(y && host_at(ctx, y, 0) == 3.0f && host_at(ctx, y, 1) == 0.0f);
    hd_tensor_unref(y);

    /* a new x elsewhere: captured again, the new values used */
    args[0] = x2;
    emu_reset();
    CHECK(run_once(ctx, e, args, NULL) == 9.0f);
    CHECK(emu_calls("cuStreamBeginCapture_v2") == 1 && emu_calls("cuMemcpyDtoDAsync_v2") == 0);
    emu_reset();
    CHECK(run_once(ctx, e, args, NULL) == 9.0f); /* and replayed */
    CHECK(emu_calls("cuStreamBeginCapture_v2") == 0 && emu_calls("cuGraphLaunch") == 1);
    args[0] = old; /* back: its graph is still there */
    emu_reset();
    CHECK(run_once(ctx, e, args, NULL) == 3.0f);
    CHECK(emu_calls("cuStreamBeginCapture_v2") == 0 && emu_calls("cuGraphLaunch") == 1);

    /* the result kept across calls (y = f(x)): two addresses, two graphs */
    hd_tensor *keep = NULL;
    for (int i = 0; i < 4; i++) run_once(ctx, e, args, &keep);
    emu_reset();
    CHECK(run_once(ctx, e, args, &keep) == 3.0f);
    CHECK(emu_calls("cuStreamBeginCapture_v2") == 0 && emu_calls("cuGraphLaunch") == 1);
    CHECK(emu_calls("cuMemcpyDtoDAsync_v2") == 0);

    /* eager tensors of the output's size made and freed between calls take
     * the allocator's blocks: the outputs' memory is the executable's (two
     * blocks, each taken again once the caller drops it), so the addresses
     * repeat: no capture, no copy, no allocation */
    hd_tensor *junk[8] = {NULL};
    for (int i = 0; i < 8; i++) {
        CHECK(run_once(ctx, e, args, &keep) == 3.0f);
        junk[i] = dev_tensor(ctx, xv, 1, 2);
        if (i % 3 == 2) hd_tensor_unref(junk[i - 1]), junk[i - 1] = NULL;
    }
    emu_reset();
    CHECK(run_once(ctx, e, args, &keep) == 3.0f);
    CHECK_MSG(emu_calls("cuStreamBeginCapture_v2") == 0 && emu_calls("cuGraphLaunch") == 1 &&
                  emu_calls("cuMemcpyDtoDAsync_v2") == 0 && emu_calls("cuMemAlloc_v2") == 0,
              "%llu captures, %llu copies", emu_calls("cuStreamBeginCapture_v2"),
              emu_calls("cuMemcpyDtoDAsync_v2"));
    for (int i = 0; i < 8; i++) hd_tensor_unref(junk[i]);

    /* an input that moves at every call ends up copied, with fixed graphs */
    enum { NMOVE = 24 };
    hd_tensor *xs[NMOVE];
    for (int i = 0; i < NMOVE; i++) {
        float v[2] = {(float)i, 0};
        xs[i] = dev_tensor(ctx, v, 1, 2);
    }
    for (int i = 0; i < NMOVE; i++) {
        args[0] = xs[i];
        CHECK(xs[i] && run_once(ctx, e, args, &keep) == (float)i * 2 + 1);
    }
    for (int i = 0; i < NMOVE; i++) hd_tensor_unref(xs[i]);
    emu_reset();
    const float x3v[2] = {5, 0};
    hd_tensor *x3 = dev_tensor(ctx, x3v, 1, 2);
    args[0] = x3;
    CHECK(run_once(ctx, e, args, &keep) == 11.0f);
    CHECK(emu_calls("cuStreamBeginCapture_v2") == 0 && emu_calls("cuGraphLaunch") == 1);
    args[0] = old;
    hd_tensor_unref(x3);
    hd_tensor_unref(keep);
    hd_tensor_unref(x2);
    hd_jit_cuda.free(ctx, e);
    hd_ir_graph_free(g);
    for (int i = 0; i < 3; i++) hd_tensor_unref(args[i]);
}

/* y0 = rand([8]) + x0. */
static hd_status rand_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    (void)ud;
    hd_attrs at = {.dtype = HD_F32, .nshape = 1, .shape = {8}};
    hd_tensor *r = NULL;
    hd_status st = hd_op_run(ctx, HD_OP_RAND, NULL, 0, &at, &r);
    if (!st) st = op2(ctx, HD_OP_ADD, r, in[0], &out[0]);
    hd_tensor_unref(r);
    return st;
}

/* One call of the rand graph on x (zeros): the numbers against the
 * Philox stream at the context's position before the call. */
static int rand_call(hd_ctx *ctx, hd_jit_exec *e, hd_tensor *x) {
    uint64_t key = ctx->rng_seed, base = ctx->rng_offset;
    hd_tensor *y = NULL;
    CHECK_MSG(hd_jit_cuda.run(ctx, e, &x, 1, &y, 1) == HD_OK, "run: %s", ctx->errmsg);
    int bad = !y;
    for (int64_t i = 0; y && i < 8; i++)
        bad += host_at(ctx, y, i) != hd_rng_uniform_f32(key, base, i);
    hd_tensor_unref(y);
    return bad == 0 && ctx->rng_offset == base + 4;
}

/* A compiled graph with a random node replays with new numbers, eager's:
 * its (key, base) pair goes to the device before a run only when the last
 * run did not leave it there (each run ends by moving the bases on by
 * what it reserved): a run following the last copies nothing up. */
static void test_compiled_draws(hd_ctx *ctx) {
    const float zv[8] = {0};
    hd_tensor *x = dev_tensor(ctx, zv, 8, 0);
    hd_ir_graph *g = x ? trace_body(ctx, "rand", rand_body, &x, 1, 1, NULL) : NULL;
    CHECK_MSG(g != NULL, "trace: %s", ctx->errmsg);
    hd_jit_options o;
    hd_jit_options_init(&o);
    o.device = "cuda:0";
    hd_jit_exec *e = NULL;
    CHECK_MSG(g && hd_jit_cuda.compile(ctx, g, &o, &e) == HD_OK, "compile: %s", ctx->errmsg);
    for (int i = 0; e && i < 3; i++) CHECK(rand_call(ctx, e, x));
    emu_reset();
    CHECK(e && rand_call(ctx, e, x));
    CHECK_MSG(emu_calls("cuGraphLaunch") == 1 && emu_calls("cuMemcpyHtoDAsync_v2") == 0,
              "%llu graph launches, %llu copies up", emu_calls("cuGraphLaunch"),
              emu_calls("cuMemcpyHtoDAsync_v2"));
    /* numbers drawn between two calls: the pair goes up again (staged: no
     * wait for the stream but the 8 reading the values back) */
    hd_rng_reserve(ctx, 6);
    emu_reset();
    CHECK(e && rand_call(ctx, e, x));
    CHECK_MSG(emu_calls("cuGraphLaunch") == 1 && emu_calls("cuMemcpyHtoDAsync_v2") == 1 &&
                  emu_calls("cuEventRecord") == 1 && emu_calls("cuStreamSynchronize") == 8,
              "%llu graph launches, %llu copies up, %llu events, %llu stream waits",
              emu_calls("cuGraphLaunch"), emu_calls("cuMemcpyHtoDAsync_v2"),
              emu_calls("cuEventRecord"), emu_calls("cuStreamSynchronize"));
    emu_reset();
    CHECK(e && rand_call(ctx, e, x)); /* and then not */
    CHECK(emu_calls("cuMemcpyHtoDAsync_v2") == 0);
    ctx->rng_seed += 1; /* manual_seed */
    emu_reset();
    CHECK(e && rand_call(ctx, e, x));
    CHECK(emu_calls("cuMemcpyHtoDAsync_v2") == 1);
    if (e) hd_jit_cuda.free(ctx, e);
    hd_ir_graph_free(g);
    hd_tensor_unref(x);
}

#define CALLS_TRACE "test_cuda_calls_trace.json" /* written again when ctx closes */

/* With profiling on, each eager op on the device is timed by two events
 * recorded on its stream (and the device's reference event once); their
 * times reach the op's row, the report's "device ms" column and the
 * trace's device line. Off, no event is made. */
static void test_profile(hd_ctx *ctx) {
    const float xv[4] = {1, -2, 3, -4};
    hd_tensor *x = dev_tensor(ctx, xv, 4, 0), *r = NULL, *xx[2] = {x, x};
    CHECK(x != NULL);
    if (!x) return;
    emu_reset();
    CHECK(hd_op_run(ctx, HD_OP_ADD, xx, 2, NULL, &r) == HD_OK);
    hd_tensor_unref(r);
    CHECK(emu_calls("cuEventCreate") == 0 && emu_calls("cuEventRecord") == 0);
    CHECK(hd_profile_set(ctx, 1, CALLS_TRACE) == HD_OK); /* events kept for a trace */
    emu_reset();
    for (int i = 0; i < 3; i++) {
        CHECK(hd_op_run(ctx, HD_OP_ADD, xx, 2, NULL, &r) == HD_OK);
        hd_tensor_unref(r);
    }
    CHECK_MSG(emu_calls("cuEventRecord") == 1 + 2 * 3, "%llu events recorded",
              emu_calls("cuEventRecord"));
    CHECK(emu_calls("cuLaunchKernel") == 3);
    hd_profile_stats ps;
    CHECK(hd_profile_row(ctx, HD_OP_ADD, &ps) && ps.calls == 3 && ps.device > 0);
    CHECK(emu_calls("cuEventElapsedTime_v2") == 2 * 3);
    char *table = hd_profile_table(ctx);
    CHECK(table && strstr(table, "device ms"));
    free(table);
    CHECK(hd_profile_write_trace(ctx, CALLS_TRACE) == HD_OK);
    char buf[8192] = {0};
    FILE *f = fopen(CALLS_TRACE, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    CHECK(n > 0 && strstr(buf, "\"cat\": \"device\"") && strstr(buf, "\"tid\": 2"));
    /* a reset drops waiting marks unread; profiling off makes none */
    CHECK(hd_op_run(ctx, HD_OP_ADD, xx, 2, NULL, &r) == HD_OK);
    hd_tensor_unref(r);
    hd_profile_reset(ctx);
    CHECK(!hd_profile_row(ctx, HD_OP_ADD, &ps));
    CHECK(hd_profile_set(ctx, 0, NULL) == HD_OK);
    emu_reset();
    CHECK(hd_op_run(ctx, HD_OP_ADD, xx, 2, NULL, &r) == HD_OK);
    hd_tensor_unref(r);
    CHECK(emu_calls("cuEventRecord") == 0);
    hd_tensor_unref(x);
}

/* Between two devices (the emulator made with two): one peer copy on the
 * source's stream, ordered by one event each way, and no copy through the
 * host, no synchronization; the values arrive, on the other device. */
static void test_peer(hd_ctx *ctx) {
    const float xv[6] = {1, 2, 3, 4, 5, 6};
    hd_tensor *x = dev_tensor(ctx, xv, 2, 3), *y = NULL, *z = NULL;
    CHECK(x != NULL && hd_cuda_backend.available(ctx, 1) == HD_OK);
    if (!x) return;
    CHECK(hd_tensor_to_device(ctx, x, &hd_cuda_backend, 1, &y) == HD_OK); /* warm */
    hd_tensor_unref(y);
    emu_reset();
    CHECK(hd_tensor_to_device(ctx, x, &hd_cuda_backend, 1, &y) == HD_OK);
    CHECK(emu_calls("cuMemcpyPeerAsync") == 1 && emu_calls("cuStreamWaitEvent") == 2);
    CHECK_MSG(other_calls() == emu_calls("cuCtxSetCurrent"), "%llu other driver calls",
              other_calls() - emu_calls("cuCtxSetCurrent"));
    CHECK(emu_calls("cuCtxSetCurrent") <= 2); /* to the destination and back */
    CHECK(y && y->storage->device == 1 && y->numel == 6);
    /* a transposed view goes across as its contiguous copy, and back */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2, at.shape[0] = 1, at.shape[1] = 0;
    hd_tensor *xt = NULL;
    CHECK(y && hd_op_run(ctx, HD_OP_PERMUTE, &y, 1, &at, &xt) == HD_OK);
    CHECK(xt && hd_tensor_to_device(ctx, xt, &hd_cuda_backend, 0, &z) == HD_OK);
    CHECK(z && z->storage->device == 0 && z->shape[0] == 3);
    CHECK(z && host_at(ctx, z, 1) == 4 && host_at(ctx, z, 2) == 2 && host_at(ctx, z, 5) == 6);
    hd_tensor_unref(xt);
    hd_tensor_unref(z);
    hd_tensor_unref(y);
    hd_tensor_unref(x);
}

/* linalg through cuSOLVER: inv of two 3x3 matrices is two getrf and two
 * getrs calls; the only copies to the host are the info words (one read
 * for the batch, one for getrs'), nothing goes up. The values are the
 * inverses; a singular matrix is the cpu's error, naming it. */
static void test_linalg(hd_ctx *ctx) {
    const float av[18] = {2, 0, 0, 0, 4, 0, 0, 0, 8, 1, 2, 0, 0, 1, 0, 0, 0, 1};
    int64_t shape[3] = {2, 3, 3};
    hd_tensor *h = hd_tensor_from_data(ctx, HD_F32, shape, 3, av), *a = NULL, *r = NULL;
    CHECK(h && hd_tensor_to_device(ctx, h, &hd_cuda_backend, 0, &a) == HD_OK);
    hd_tensor_unref(h);
    if (!a) return;
    CHECK(hd_op_run(ctx, HD_OP_LINALG_INV, &a, 1, NULL, &r) == HD_OK); /* warm */
    hd_tensor_unref(r);
    emu_reset();
    CHECK(hd_op_run(ctx, HD_OP_LINALG_INV, &a, 1, NULL, &r) == HD_OK);
    CHECK_MSG(emu_calls("cusolverDn") == 4, "%llu cuSOLVER calls", emu_calls("cusolverDn"));
    CHECK(emu_calls("cuMemcpyDtoHAsync_v2") == 2 && emu_calls("cuMemcpyHtoDAsync_v2") == 0);
    /* inv(diag(2, 4, 8)); inv([[1, 2, 0], [0, 1, 0], [0, 0, 1]]) has -2 at [0][1] */
    CHECK(r && host_at(ctx, r, 0) == 0.5f && host_at(ctx, r, 4) == 0.25f);
    CHECK(r && host_at(ctx, r, 8) == 0.125f && host_at(ctx, r, 10) == -2.0f);
    CHECK(r && host_at(ctx, r, 9) == 1.0f && host_at(ctx, r, 3) == 0.0f);
    hd_tensor_unref(r);
    r = NULL;
    const float sv[18] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 2, 3, 2, 4, 6, 1, 1, 1};
    h = hd_tensor_from_data(ctx, HD_F32, shape, 3, sv);
    hd_tensor *s = NULL;
    CHECK(h && hd_tensor_to_device(ctx, h, &hd_cuda_backend, 0, &s) == HD_OK);
    CHECK(s && hd_op_run(ctx, HD_OP_LINALG_INV, &s, 1, NULL, &r) != HD_OK);
    CHECK_MSG(strstr(ctx->errmsg, "linalg.inv: matrix 1 of the batch is singular"), "%s",
              ctx->errmsg);
    hd_error_clear(ctx);
    hd_tensor_unref(h);
    hd_tensor_unref(s);
    hd_tensor_unref(a);
}

/* Split reductions (hd_cuda_split_chunk): chunks of at least 4096
 * elements, a multiple of 256, enough of them for one wave of the device
 * and no more, whatever its size; small extents not split. */
static void test_split_chunk(void) {
    static const int64_t residents[] = {1, 8, 56, 1056, 4224};
    static const int64_t nouts[] = {1, 3, 17, 1024};
    static const int64_t nreds[] = {65535, 65536, 1000003, 5000000, 40000000, 1LL << 33};
    for (size_t r = 0; r < sizeof residents / sizeof residents[0]; r++)
        for (size_t o = 0; o < sizeof nouts / sizeof nouts[0]; o++)
            for (size_t e = 0; e < sizeof nreds / sizeof nreds[0]; e++) {
                int64_t res = residents[r], nout = nouts[o], nred = nreds[e];
                int64_t chunk = hd_cuda_split_chunk(nout, nred, res);
                if (nred < 65536) {
                    CHECK(chunk == 0);
                    continue;
                }
                int64_t blocks = nout * ((nred + chunk - 1) / chunk);
                CHECK_MSG(chunk >= 4096 && chunk % 256 == 0 && blocks < res + nout &&
                              (chunk == 4096 || 10 * blocks >= 9 * res),
                          "%lld outputs of %lld on %lld slots: chunk %lld, %lld blocks",
                          (long long)nout, (long long)nred, (long long)res, (long long)chunk,
                          (long long)blocks);
            }
    CHECK(hd_cuda_split_chunk(1025, 1 << 20, 1056) == 0);
}

/* n f32 values i * scale + add, up to the device (each a new host buffer,
 * freed at once: the copy must not read it afterwards). */
static hd_tensor *upload_ramp(hd_ctx *ctx, int64_t n, float scale, float add) {
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++) v[i] = (float)i * scale + add;
    hd_tensor *h = hd_tensor_from_data(ctx, HD_F32, &n, 1, v), *d = NULL;
    free(v);
    if (h) hd_tensor_to_device(ctx, h, &hd_cuda_backend, 0, &d);
    hd_tensor_unref(h);
    return d;
}

/* Copies up go through pinned staging slots: one copy and one event
 * record each, no wait for the stream; a slot is filled again only after
 * waiting for its event (the emulator refuses a copy from pinned bytes
 * whose last copy was not waited for); copies bigger than a slot go a
 * slot at a time. Every value read back. */
static void test_uploads(hd_ctx *ctx) {
    hd_tensor *warm = upload_ramp(ctx, 4, 1, 0);
    hd_tensor_unref(warm);
    emu_reset();
    hd_tensor *small = upload_ramp(ctx, 1000, 1, 0);
    CHECK_MSG(emu_calls("cuMemcpyHtoDAsync_v2") == 1 && emu_calls("cuEventRecord") == 1 &&
                  emu_calls("cuStreamSynchronize") == 0 && emu_calls("cuEventSynchronize") == 0,
              "%llu copies, %llu waits", emu_calls("cuMemcpyHtoDAsync_v2"),
              emu_calls("cuStreamSynchronize"));
    CHECK(small && host_at(ctx, small, 999) == 999.0f);
    hd_tensor_unref(small);
    /* 3 MiB each: one slot apiece, the fifth reuses the first (one wait
     * for its event, not for the stream) */
    enum { N = 10, ELEMS = 3 << 18 };
    hd_tensor *big[N];
    emu_reset();
    for (int i = 0; i < N; i++) big[i] = upload_ramp(ctx, ELEMS, 0.5f, (float)i);
    CHECK_MSG(emu_calls("cuEventSynchronize") == N - 4 && emu_calls("cuStreamSynchronize") == 0,
              "%llu event waits, %llu stream waits", emu_calls("cuEventSynchronize"),
              emu_calls("cuStreamSynchronize"));
    for (int i = 0; i < N; i++) {
        CHECK(big[i] && host_at(ctx, big[i], 0) == (float)i &&
              host_at(ctx, big[i], ELEMS - 1) == (float)(ELEMS - 1) * 0.5f + (float)i);
        hd_tensor_unref(big[i]);
    }
    /* 6 MiB: two slots, no wait; 40 MiB (and a bit): eleven slots, each
     * refilled after a wait for its event, none for the stream */
    emu_reset();
    hd_tensor *huge = upload_ramp(ctx, 3 << 19, 1, 2);
    CHECK(emu_calls("cuStreamSynchronize") == 0 && emu_calls("cuEventRecord") == 2 &&
          emu_calls("cuMemcpyHtoDAsync_v2") == 2);
    CHECK(huge && host_at(ctx, huge, 0) == 2.0f && host_at(ctx, huge, 1 << 20) == 1048578.0f &&
          host_at(ctx, huge, (3 << 19) - 1) == (float)((3 << 19) - 1) + 2);
    hd_tensor_unref(huge);
    emu_reset();
    int64_t n40 = (10 << 20) + 5;
    huge = upload_ramp(ctx, n40, 1, 0);
    CHECK_MSG(emu_calls("cuStreamSynchronize") == 0 && emu_calls("cuMemcpyHtoDAsync_v2") == 11 &&
                  emu_calls("cuEventSynchronize") >= 7,
              "%llu copies, %llu event waits", emu_calls("cuMemcpyHtoDAsync_v2"),
              emu_calls("cuEventSynchronize"));
    hd_tensor *back = huge ? hd_tensor_to_host(ctx, huge) : NULL;
    int64_t bad = back ? 0 : -1;
    for (int64_t i = 0; back && i < n40; i++)
        if (hd_tensor_get(back, i) != (double)i) bad = bad ? bad : i + 1;
    CHECK_MSG(bad == 0, "value %lld", (long long)bad - 1);
    hd_tensor_unref(back);
    hd_tensor_unref(huge);
}

/* Driver calls of one step of vm's optimizer opt, all of them: launches. */
static unsigned long long opt_step_calls(hodu_vm *vm) {
    emu_reset();
    CHECK_MSG(hodu_eval(vm, "opt.step()", "<step>") == HODU_OK, "%s", hodu_error_message(vm));
    unsigned long long all = emu_calls(NULL), launches = emu_calls("cuLaunchKernel");
    CHECK_MSG(all == launches, "%llu calls, %llu launches", all, launches);
    return launches;
}

/* An eager Adam step: one launch for the parameters with a gradient (one
 * per dtype and 32 parameters: their whole update is one kernel,
 * cuda_optim.c; was 14 per parameter), nothing copied, no wait and no
 * allocation (the new moments come from the cache, the step count and
 * bias corrections are computed on the cpu, the parameters' addresses are
 * a kernel argument), weight decay in it; SGD's, Adagrad's, Lion's and
 * RMSprop's as well. */
static void test_optimizer(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK(vm != NULL);
    if (!vm) return;
    CHECK_MSG(hodu_eval(vm,
                        "import optim\n"
                        "let w = randn([64, 32], device = \"cuda\")\n"
                        "let b = randn([32], device = \"cuda\")\n"
                        "let u = randn([8], device = \"cuda\")\n"
                        "for p in [w, b, u] { p.requires_grad = true }\n"
                        "w.grad = randn([64, 32], device = \"cuda\")\n"
                        "b.grad = randn([32], device = \"cuda\")\n"
                        "let opt = optim.Adam([w, b, u], lr = 0.01)\n"
                        "opt.step()\nopt.step()\n",
                        "<adam>") == HODU_OK,
              "%s", hodu_error_message(vm));
    unsigned long long n = opt_step_calls(vm);
    CHECK_MSG(n == 1, "%llu", n);
    /* weight decay in the kernel too: AdamW's p *= 1 - lr wd, Adam's
     * g += wd p (were one and two launches a parameter) */
    CHECK(hodu_eval(vm, "opt = optim.AdamW([w, b, u], lr = 0.01)\nopt.step()\nopt.step()",
                    "<adamw>") == HODU_OK);
    n = opt_step_calls(vm);
    CHECK_MSG(n == 1, "%llu", n);
    CHECK(hodu_eval(vm,
                    "opt = optim.Adam([w, b, u], lr = 0.01, weight_decay = 0.1)\n"
                    "opt.step()\nopt.step()",
                    "<adam_l2>") == HODU_OK);
    n = opt_step_calls(vm);
    CHECK_MSG(n == 1, "%llu", n);
    /* 70 parameters, 40 f32 and 30 bf16, in two groups: per group, one
     * launch per dtype; in one group: two launches of f32 (32 and 8), one
     * of bf16 */
    CHECK_MSG(
        hodu_eval(vm,
                  "let ps = []\n"
                  "for i in 0..70 {\n"
                  "    let p = randn([1 + i], device = \"cuda\", dtype = [f32, bf16][i % 7 % 2])\n"
                  "    p.requires_grad = true\n"
                  "    p.grad = randn([1 + i], device = \"cuda\", dtype = p.dtype)\n"
                  "    ps.append(p)\n"
                  "}\n"
                  "opt = optim.Adam([{\"params\": ps[0:35]}, {\"params\": ps[35:70]}])\n"
                  "opt.step()\nopt.step()\n",
                  "<adam70>") == HODU_OK,
        "%s", hodu_error_message(vm));
    n = opt_step_calls(vm);
    CHECK_MSG(n == 4, "%llu", n);
    CHECK(hodu_eval(vm, "opt = optim.Adam(ps)\nopt.step()\nopt.step()", "<adam70b>") == HODU_OK);
    n = opt_step_calls(vm);
    CHECK_MSG(n == 3, "%llu", n);
    /* SGD the same way, with or without momentum and weight decay (were
     * two launches a parameter, six with both); Adagrad, Lion and RMSprop
     * too (were 10 to 12, 9 to 11 and 7 to 18 launches a parameter) */
    static const char *const steps[] = {
        "opt = optim.SGD([w, b, u], lr = 0.1)\nopt.step()",
        "opt = optim.SGD([w, b, u], lr = 0.1, momentum = 0.9, weight_decay = 0.01, "
        "nesterov = true)\nopt.step()\nopt.step()",
        "opt = optim.Adagrad([w, b, u], lr = 0.1, weight_decay = 0.01)\nopt.step()\nopt.step()",
        "opt = optim.Lion([w, b, u], weight_decay = 0.1)\nopt.step()\nopt.step()",
        "opt = optim.RMSprop([w, b, u], weight_decay = 0.1, momentum = 0.9, centered = true)\n"
        "opt.step()\nopt.step()",
    };
    for (int i = 0; i < (int)(sizeof steps / sizeof *steps); i++) {
        CHECK(hodu_eval(vm, steps[i], "<step>") == HODU_OK);
        n = opt_step_calls(vm);
        CHECK_MSG(n == 1, "%s: %llu", steps[i], n);
    }
    hodu_vm_free(vm);
}

/* memory_stats(device = "cuda") reads the allocator's counts: no driver
 * call. empty_cache() gives each cached block back (one cuMemFree each,
 * after one wait for the stream); the next tensor then allocates. */
static void test_memory(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK(vm != NULL);
    if (!vm) return;
    CHECK_MSG(hodu_eval(vm,
                        "let a = randn([1000], device = \"cuda\")\n"
                        "let b = randn([300000], device = \"cuda\")\n"
                        "a = none\nb = none\n",
                        "<mem>") == HODU_OK,
              "%s", hodu_error_message(vm));
    emu_reset();
    CHECK(hodu_eval(vm, "let s = memory_stats(device = \"cuda\")", "<stats>") == HODU_OK);
    CHECK_MSG(emu_calls(NULL) == 0, "%llu calls", emu_calls(NULL));
    emu_reset();
    CHECK(hodu_eval(vm, "empty_cache()", "<empty>") == HODU_OK);
    CHECK_MSG(emu_calls("cuMemFree_v2") == 2 && emu_calls("cuStreamSynchronize") == 1,
              "%llu frees, %llu waits", emu_calls("cuMemFree_v2"),
              emu_calls("cuStreamSynchronize"));
    emu_reset();
    CHECK(hodu_eval(vm, "let c = randn([1000], device = \"cuda\")", "<again>") == HODU_OK);
    CHECK_MSG(emu_calls("cuMemAlloc_v2") == 1, "%llu", emu_calls("cuMemAlloc_v2"));
    hodu_vm_free(vm);
}

int main(void) {
    setenv("HODU_CUDA_EMU_DEVICES", "2", 1); /* read when the driver is opened */
    test_split_chunk();
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    int dev = hd_cuda_backend.available(&ctx, 0) == HD_OK;
    hd_error_clear(&ctx);
    if (!dev || !emu_open()) {
        hd_ctx_release(&ctx);
        printf("SKIPPED: needs the CUDA emulator (its call counts)\n");
        return 77;
    }
    test_eager(&ctx);
    test_uploads(&ctx);
    test_products(&ctx);
    test_host_scalars(&ctx);
    test_compiled(&ctx);
    test_compiled_draws(&ctx);
    test_profile(&ctx);
    test_peer(&ctx);
    test_linalg(&ctx);
    test_optimizer();
    test_memory();
    hd_ctx_release(&ctx);
    remove(CALLS_TRACE);
    TEST_END();
}

#else
TEST_SKIPPED_MAIN("this build has no CUDA backend")
#endif
