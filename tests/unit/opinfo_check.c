/* The checks every row of test_opinfo's tables gets: the op traced and run
 * by each compiler against eager, on the cuda device, and its gradient
 * against central differences. */
#define HD_TEST_PART
#include "hd_autograd.h"
#include "hd_test.h"
#include "hd_trace.h"
#include "opinfo.h"

#define OPINFO_MAX_IN HD_OP_MAX_IN

int opinfo_same_value(double got, double want, double rtol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return hd_test_close(got, want, rtol, rtol);
}

int opinfo_agrees(const hd_tensor *want, const hd_tensor *got) {
    if (!got || got->dtype != want->dtype || got->numel != want->numel) return 0;
    double rtol = want->dtype == HD_F64 ? 1e-12 : want->dtype == HD_F32 ? 1e-5 : 1e-2;
    for (int64_t e = 0; e < want->numel; e++)
        if (!opinfo_same_value(hd_tensor_get(got, e), hd_tensor_get(want, e),
                               hd_dtype_is_float(want->dtype) ? rtol : 0))
            return 0;
    return 1;
}

double opinfo_value_at(const hd_tensor *t, const int64_t *idx, int nd_out) {
    int64_t off = 0; /* broadcast: t's dims are the last of nd_out */
    for (int d = 0; d < t->ndim; d++) {
        int64_t i = idx[nd_out - t->ndim + d];
        off += (t->shape[d] == 1 ? 0 : i) * t->strides[d];
    }
    return hd_dtype_load(t->dtype, t->storage->data, t->offset + off);
}

double opinfo_load(const hd_tensor *t, const int64_t *idx) {
    int64_t off = t->offset;
    for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
    return hd_dtype_load(t->dtype, t->storage->data, off);
}

void opinfo_unravel(int64_t e, const int64_t *shape, int nd, int64_t *idx) {
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = shape[d] ? e % shape[d] : 0;
        e = shape[d] ? e / shape[d] : 0;
    }
}

void opinfo_check_values(const hd_tensor *out, const double *want, double rtol, const char *name) {
    int bad = 0;
    for (int64_t e = 0; e < out->numel && bad < 3; e++) {
        double got = hd_tensor_get(out, e);
        if (opinfo_same_value(got, want[e], rtol)) continue;
        bad++;
        CHECK_MSG(0, "%s: element %lld is %.10g, the reference %.10g", name, (long long)e, got,
                  want[e]);
    }
    if (!bad) CHECK(1);
}

hd_tensor *opinfo_run(hd_ctx *ctx, const opinfo_call *c, hd_tensor *const *in) {
    hd_tensor *out = NULL;
    return hd_op_run(ctx, c->op, in, c->nin, c->at, &out) ? NULL : out;
}

static int same(const opinfo_call *c, const hd_tensor *want, const hd_tensor *got) {
    if (c->same) return got && c->same(want, got, c->in);
    return opinfo_agrees(want, got);
}

static hd_ir_graph *trace_op(hd_ctx *ctx, const opinfo_call *c) {
    hd_tensor *sym[OPINFO_MAX_IN] = {0}, *out = NULL;
    hd_ir_graph *g = NULL;
    hd_trace_begin(ctx, "opinfo");
    hd_status st = HD_OK;
    for (int i = 0; i < c->nin && !st; i++) {
        char name[8];
        snprintf(name, sizeof name, "in%d", i);
        const hd_tensor *t = c->in[i];
        sym[i] = hd_trace_input(ctx, name, t->dtype, t->shape, t->ndim);
        if (!sym[i]) st = ctx->status;
    }
    if (!st) st = hd_op_run(ctx, c->op, sym, c->nin, c->at, &out);
    if (!st) st = hd_trace_output(ctx, "out", out);
    if (st)
        hd_trace_abort(ctx);
    else
        hd_trace_end(ctx, &g);
    for (int i = 0; i < OPINFO_MAX_IN; i++) hd_tensor_unref(sym[i]);
    hd_tensor_unref(out);
    return g;
}

static void check_compiled(hd_ctx *ctx, const opinfo_call *c, const hd_jit_compiler *jc,
                           hd_ir_graph *g, hd_tensor *const *in, const hd_tensor *want,
                           const char *device) {
    hd_jit_exec *e = NULL;
    hd_jit_options o;
    hd_jit_options_init(&o);
    o.device = device;
    hd_status st = jc->compile(ctx, g, &o, &e);
    CHECK_MSG(st == HD_OK, "%s: %s compile: %s", c->name, jc->name, hd_error_message(ctx));
    for (int run = 0; !st && run < 2; run++) {
        hd_tensor *got = NULL;
        st = jc->run(ctx, e, in, c->nin, &got, 1);
        CHECK_MSG(st == HD_OK, "%s: %s run: %s", c->name, jc->name, hd_error_message(ctx));
        hd_tensor *h = got ? hd_tensor_to_host(ctx, got) : NULL;
        if (!st)
            CHECK_MSG(same(c, want, h), "%s: %s differs from eager (run %d)", c->name, jc->name,
                      run);
        hd_tensor_unref(h);
        hd_tensor_unref(got);
    }
    if (e) jc->free(ctx, e);
    hd_error_clear(ctx);
}

/* the op on the cuda device, eagerly and through the cuda compiler; an op
 * without inputs is placed there by the context */
static void check_cuda(hd_ctx *ctx, const opinfo_call *c, hd_ir_graph *g, const hd_tensor *want,
                       int compiled) {
    hd_tensor *din[OPINFO_MAX_IN] = {0};
    int ok = 1;
    for (int i = 0; i < c->nin && ok; i++)
        ok = hd_tensor_to_device(ctx, c->in[i], &hd_cuda_backend, 0, &din[i]) == HD_OK;
    CHECK_MSG(ok, "%s: to the device: %s", c->name, hd_error_message(ctx));
    const hd_backend *was = ctx->place_backend;
    ctx->place_backend = &hd_cuda_backend, ctx->place_device = 0;
    hd_tensor *d = ok ? opinfo_run(ctx, c, din) : NULL;
    ctx->place_backend = was;
    CHECK_MSG(!ok || (d && d->storage->backend == &hd_cuda_backend), "%s: cuda eager: %s", c->name,
              d ? "not on the device" : hd_error_message(ctx));
    hd_tensor *h = d ? hd_tensor_to_host(ctx, d) : NULL;
    if (ok) CHECK_MSG(same(c, want, h), "%s: cuda eager differs from cpu", c->name);
    if (ok && compiled && g) check_compiled(ctx, c, &hd_jit_cuda, g, din, want, "cuda:0");
    hd_tensor_unref(h);
    hd_tensor_unref(d);
    for (int i = 0; i < c->nin; i++) hd_tensor_unref(din[i]);
    hd_error_clear(ctx);
}

static const hd_jit_compiler *const opinfo_compilers[] = {
    &hd_jit_interp,
#if HODU_HAVE_LLVM
    &hd_jit_llvm,
#endif
};

void opinfo_check_compilers(hd_ctx *ctx, const opinfo_call *c, const hd_tensor *out, int cuda,
                            int cuda_compiled) {
    hd_ir_graph *g = trace_op(ctx, c);
    CHECK_MSG(g != NULL, "%s: trace: %s", c->name, hd_error_message(ctx));
    for (size_t i = 0; g && i < sizeof opinfo_compilers / sizeof *opinfo_compilers; i++)
        check_compiled(ctx, c, opinfo_compilers[i], g, c->in, out, NULL);
    if (cuda) check_cuda(ctx, c, g, out, cuda_compiled);
    if (g) hd_ir_graph_free(g);
    hd_error_clear(ctx);
}

static int grad_input(const hd_tensor *t) {
    return !t->number && t->dtype == HD_F64;
}

/* sum(op(in) * r) */
static double grad_objective(hd_ctx *ctx, const opinfo_call *c, const hd_tensor *r) {
    hd_tensor *ys = opinfo_run(ctx, c, c->in);
    double l = 0;
    for (int64_t k = 0; ys && k < ys->numel; k++) l += hd_tensor_get(ys, k) * hd_tensor_get(r, k);
    hd_tensor_unref(ys);
    return l;
}

/* input i's gradient g against central differences */
static void grad_compare(hd_ctx *ctx, const opinfo_call *c, int i, const hd_tensor *g,
                         const hd_tensor *r) {
    hd_tensor *t = c->in[i];
    for (int64_t e = 0; e < t->numel; e++) {
        int64_t off = hd_tensor_elem_offset(t, e);
        double x0 = hd_dtype_load(HD_F64, t->storage->data, off), h = 1e-6, l[2];
        for (int s = 0; s < 2; s++) {
            hd_dtype_store(HD_F64, t->storage->data, off, x0 + (s ? -h : h));
            l[s] = grad_objective(ctx, c, r);
        }
        hd_dtype_store(HD_F64, t->storage->data, off, x0);
        double fd = (l[0] - l[1]) / (2 * h), an = g ? hd_tensor_get(g, e) : 0;
        CHECK_MSG(hd_test_close(an, fd, 1e-6, 1e-6), "%s: d/d input %d [%lld]: %.10g vs %.10g",
                  c->name, i, (long long)e, an, fd);
    }
}

void opinfo_check_grad(hd_ctx *ctx, const opinfo_call *c) {
    for (int i = 0; i < c->nin; i++)
        if (grad_input(c->in[i])) CHECK(hd_grad_set_requires(ctx, c->in[i], 1) == HD_OK);
    hd_tensor *y = opinfo_run(ctx, c, c->in);
    if (!y) return;
    hd_tensor *r = hd_tensor_new(ctx, HD_F64, y->shape, y->ndim);
    for (int64_t e = 0; e < r->numel; e++) hd_dtype_store(HD_F64, r->storage->data, e, 0.5 + e % 3);
    CHECK_MSG(hd_grad_backward(ctx, y, r, 0) == HD_OK, "%s: backward: %s", c->name,
              hd_error_message(ctx));
    hd_tensor_unref(y);
    int was = hd_grad_set_enabled(ctx, 0);
    for (int i = 0; i < c->nin; i++) {
        if (!grad_input(c->in[i])) continue;
        grad_compare(ctx, c, i, hd_grad_get(c->in[i]), r);
        hd_grad_set(ctx, c->in[i], NULL);
    }
    hd_grad_set_enabled(ctx, was);
    hd_tensor_unref(r);
}
