/* Every generated CUDA module (one per op with a kernel: every dtype the
 * cpu accepts it for) compiles with NVRTC for sm_90, and every fourth one
 * for sm_80 too (the sources have no architecture-dependent code, so the
 * second architecture checks NVRTC's back end, not the generator). With
 * HODU_TEST_NVRTC_EVERY=K only every Kth module is compiled, for sm_90
 * only: the sanitized build, where NVRTC runs several times slower under
 * the sanitizers' allocator and the host code they check is the same for
 * every module; the generator's checks below still cover them all. Needs
 * libnvrtc only, not a GPU; reports SKIPPED (77) where NVRTC is missing or
 * the build has no CUDA headers. Also checks the generator's contract:
 * each module holds the entry point run_op asks for. The optimizer's
 * module (cuda_optim.c) compiles too. */
#include "hd_test.h"
#include "cuda_int.h"

#include <stdlib.h>

#if HODU_HAVE_CUDA
/* The module of op names the kernel for (in, out). */
static int has_kernel(const hd_cuda_src *s, hd_op op, hd_dtype in, hd_dtype out) {
    char name[96], decl[128];
    hd_cuda_kernel_name(op, in, out, name, sizeof name);
    snprintf(decl, sizeof decl, "void %s(", name);
    return strstr(s->text, decl) != NULL;
}

static void check_entry_points(const hd_cuda_src *s, hd_op op) {
    for (int dt = 0; dt < HD_DTYPE_COUNT; dt++) {
        if (!hd_cpu_backend.supports_op(op, (hd_dtype)dt)) continue;
        hd_op_kind k = hd_op_infos[op].kind;
        if (op == HD_OP_CAST || op == HD_OP_WHERE || op == HD_OP_ONE_HOT) continue;
        if (op == HD_OP_MATMUL && hd_dtype_is_float((hd_dtype)dt)) continue; /* cuBLAS */
        hd_dtype out = k == HD_KIND_COMPARE  ? HD_BOOL
                       : k == HD_KIND_REDUCE ? hd_cuda_reduce_out(op, (hd_dtype)dt)
                       : op == HD_OP_ARGSORT ? HD_I64
                                             : (hd_dtype)dt;
        CHECK_MSG(has_kernel(s, op, (hd_dtype)dt, out), "%s has no %s kernel", hd_op_name(op),
                  hd_dtype_name((hd_dtype)dt));
    }
    if (op == HD_OP_CAST)
        for (int a = 0; a < HD_DTYPE_COUNT; a++)
            for (int b = 0; b < HD_DTYPE_COUNT; b++)
                CHECK(has_kernel(s, op, (hd_dtype)a, (hd_dtype)b));
}

int main(void) {
    const hd_cuda_api *a = hd_cuda_api_get();
    if (!a->nvrtc_ok) {
        printf("SKIPPED: %s\n", a->nvrtc_error);
        return 77;
    }
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    int modules = 0;
    static const int archs[] = {90, 80};
    const char *every_env = getenv("HODU_TEST_NVRTC_EVERY");
    int every = every_env ? atoi(every_env) : 0, compiled = 0;
    for (int op = 0; op < HD_OP_COUNT; op++) {
        hd_cuda_src s;
        hd_cuda_src_init(&s, &ctx);
        int made = hd_cuda_src_module(&s, (hd_op)op);
        CHECK(made == hd_cuda_op_generated((hd_op)op));
        if (!made) {
            hd_cuda_src_free(&s);
            continue;
        }
        CHECK(!s.oom);
        check_entry_points(&s, (hd_op)op);
        int narchs = every > 0 ? modules % every == 0 : modules % 4 == 0 ? 2 : 1;
        compiled += narchs > 0;
        for (int k = 0; k < narchs; k++) {
            void *img = NULL;
            size_t n = 0;
            hd_status st = hd_cuda_nvrtc_compile(&ctx, s.text, s.len, archs[k], 0, &img, &n);
            CHECK_MSG(st == HD_OK && n > 0, "%s for sm_%d: %s", hd_op_name((hd_op)op), archs[k],
                      ctx.errmsg);
            if (img) hd_ctx_free(&ctx, img, n);
            hd_error_clear(&ctx);
        }
        modules++;
        hd_cuda_src_free(&s);
    }
    CHECK(modules > 50 && compiled > 0);
    /* the optimizer's module (cuda_optim.c): entry points of each kind,
     * both architectures */
    hd_cuda_src os;
    hd_cuda_src_init(&os, &ctx);
    hd_cuda_optim_module(&os);
    static const char *const entries[] = {"k_adam_f32(", "k_sgd_f64(", "k_adagrad_f16(",
                                          "k_lion_bf16(", "k_rmsprop_f32("};
    for (int i = 0; i < 5; i++) CHECK_MSG(strstr(os.text, entries[i]) != NULL, "no %s", entries[i]);
    for (int k = 0; k < 2 && !os.oom; k++) {
        void *img = NULL;
        size_t n = 0;
        CHECK_MSG(hd_cuda_nvrtc_compile(&ctx, os.text, os.len, archs[k], 0, &img, &n) == HD_OK,
                  "the optimizer's module for sm_%d: %s", archs[k], ctx.errmsg);
        if (img) hd_ctx_free(&ctx, img, n);
        hd_error_clear(&ctx);
    }
    hd_cuda_src_free(&os);
    /* a broken source is an error with the compiler's log, not a crash */
    const char *bad = "extern \"C\" __global__ void k(float *o) { o[0] = undefined_name; }";
    void *img = NULL;
    size_t n = 0;
    CHECK(hd_cuda_nvrtc_compile(&ctx, bad, strlen(bad), 80, 0, &img, &n) == HD_ERR_RUNTIME);
    CHECK(strstr(ctx.errmsg, "NVRTC") && strstr(ctx.errmsg, "undefined_name"));
    CHECK(img == NULL);
    CHECK(ctx.mem_used == 0);
    hd_ctx_release(&ctx);
    printf("%d modules, %d compiled\n", modules, compiled);
    TEST_END();
}
#else
TEST_SKIPPED_MAIN("this build has no CUDA backend")
#endif
