/* The op table and dispatch: names, coverage of every op by the CPU
 * backend, and dispatch errors (arity, missing and symbolic inputs,
 * devices). */
#include "hd_test.h"
#include "hd_backend.h"

static void test_names(void) {
    for (int i = 0; i < HD_OP_COUNT; i++) {
        CHECK_MSG(hd_op_from_name(hd_op_name((hd_op)i)) == i, "op %s", hd_op_name((hd_op)i));
        for (int j = 0; j < i; j++) CHECK(strcmp(hd_op_name((hd_op)i), hd_op_name((hd_op)j)) != 0);
    }
    CHECK(hd_op_from_name("no_such_op") == -1);
}

/* Every op that is not a view has a CPU kernel for f32 (the dtype every op
 * accepts after its shape rule's casts). */
static void test_cpu_coverage(void) {
    for (int i = 0; i < HD_OP_COUNT; i++) {
        hd_op op = (hd_op)i;
        if (hd_op_infos[op].kind == HD_KIND_VIEW) continue;
        hd_dtype dt = HD_F32;
        if (op == HD_OP_NOT || op == HD_OP_WHERE) dt = HD_BOOL; /* the condition */
        if (op == HD_OP_ONE_HOT) dt = HD_I64;
        CHECK_MSG(hd_cpu_backend.supports_op(op, dt), "cpu has no %s kernel for %s", hd_op_name(op),
                  hd_dtype_name(dt));
    }
}

static void test_dispatch_errors(hd_ctx *ctx) {
    int64_t s[1] = {3};
    hd_tensor *a = hd_tensor_zeros(ctx, HD_F32, s, 1);
    hd_tensor *out = NULL;
    hd_tensor *two[2] = {a, a};
    CHECK(hd_op_run(ctx, HD_OP_EXP, two, 2, NULL, &out) == HD_ERR_ARGUMENT && !out);
    CHECK(strstr(hd_error_message(ctx), "exp takes 1 tensor inputs, got 2") != NULL);
    hd_tensor *missing[2] = {a, NULL};
    CHECK(hd_op_run(ctx, HD_OP_ADD, missing, 2, NULL, &out) == HD_ERR_ARGUMENT && !out);
    hd_tensor *sym = hd_tensor_symbolic(ctx, HD_F32, s, 1);
    hd_tensor *mixed[2] = {a, sym};
    CHECK(hd_op_run(ctx, HD_OP_ADD, mixed, 2, NULL, &out) == HD_ERR_RUNTIME && !out);
    CHECK(strstr(hd_error_message(ctx), "symbolic") != NULL);
    CHECK(hd_op_run(ctx, (hd_op)HD_OP_COUNT, &a, 1, NULL, &out) == HD_ERR_ARGUMENT);
    const hd_backend *be;
    int dev;
    CHECK(hd_backend_parse_device(ctx, "cpu", &be, &dev) == HD_OK && be == &hd_cpu_backend);
    CHECK(hd_backend_parse_device(ctx, "tpu", &be, &dev) == HD_ERR_ARGUMENT);
    CHECK(strstr(hd_error_message(ctx), "unknown device 'tpu'") != NULL);
    /* shape-rule errors keep their message */
    int64_t s2[2] = {2, 3}, s3[2] = {4, 5};
    hd_tensor *m1 = hd_tensor_zeros(ctx, HD_F32, s2, 2), *m2 = hd_tensor_zeros(ctx, HD_F32, s3, 2);
    hd_tensor *mm[2] = {m1, m2};
    CHECK(hd_op_run(ctx, HD_OP_MATMUL, mm, 2, NULL, &out) == HD_ERR_RUNTIME && !out);
    CHECK(strcmp(hd_error_message(ctx), "matmul shapes [2, 3] and [4, 5] do not agree") == 0);
    hd_tensor_unref(m1);
    hd_tensor_unref(m2);
    hd_tensor_unref(sym);
    hd_tensor_unref(a);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    test_names();
    test_cpu_coverage();
    test_dispatch_errors(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
