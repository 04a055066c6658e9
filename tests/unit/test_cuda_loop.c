/* Loop nodes through the cuda compiler (tests/unit/hd_test_loop.h): the
 * loop against the unrolled graph and closed forms for 1, 2 and 1000
 * trips, a loop in a loop, a callback in a body, random draws, a dropped
 * body output, and compile time that does not grow with trips; and the
 * runs are replayed (the graph with a loop runs its steps one by one,
 * each body's executable captures its own CUDA Graph). On the emulated
 * device in CI (emu.test_cuda_loop); SKIPPED (77) without a device. */
#include "hd_test_loop.h"

#if HODU_HAVE_CUDA

/* A second and third run of one executable give the first run's values
 * (the body's executable replays its graph from its second call on). */
static void test_replays(lt_env *v) {
    hd_ctx *ctx = v->ctx;
    hd_tensor *in[2] = {lt_vec(ctx, lt_x0, LT_N), lt_vec(ctx, lt_w, LT_N)}, *din[2] = {0};
    hd_ir_graph *g = lt_graph(ctx, 50, 0);
    hd_jit_exec *e = NULL;
    for (int i = 0; i < 2; i++)
        CHECK(hd_tensor_to_device(ctx, in[i], v->be, v->dev, &din[i]) == HD_OK);
    CHECK_MSG(v->c->compile(ctx, g, &v->opt, &e) == HD_OK, "%s", hd_error_message(ctx));
    for (int run = 0; e && run < 3; run++) {
        hd_tensor *out[2] = {0}, *h[2] = {0};
        CHECK_MSG(v->c->run(ctx, e, din, 2, out, 2) == HD_OK, "%s", hd_error_message(ctx));
        for (int k = 0; k < 2; k++) h[k] = out[k] ? hd_tensor_to_host(ctx, out[k]) : NULL;
        lt_check_closed(v, h, 50);
        lt_release(out, 2);
        lt_release(h, 2);
    }
    hd_jit_stats st;
    if (e) {
        v->c->stats(e, &st);
        CHECK(!st.cuda_graph); /* a loop is host control flow */
        v->c->free(ctx, e);
    }
    hd_ir_graph_free(g);
    lt_release(din, 2);
    lt_release(in, 2);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    if (hd_cuda_backend.available(&ctx, 0)) {
        printf("SKIPPED: %s\n", hd_error_message(&ctx));
        hd_ctx_release(&ctx);
        return 77;
    }
    lt_env v = {&ctx, &hd_jit_cuda, {0}, &hd_cuda_backend, 0, 20};
    hd_jit_options_init(&v.opt);
    v.opt.device = "cuda:0";
    lt_check_compiler(&v);
    test_replays(&v);
    hd_ctx_release(&ctx);
    TEST_END();
}

#else
TEST_SKIPPED_MAIN("this build has no CUDA backend")
#endif
