/* Tensor printing against strings PyTorch prints for the same data (with
 * Hodu's spellings: true/false, dtype=f16). */
#include "hd_test.h"
#include "tensor_print.h"

static hd_ctx ctx;

static void check_fmt(const hd_tensor *t, const char *want, int line) {
    size_t len = 0;
    char *s = hd_tensor_format_cstr(&ctx, t, &len);
    int ok = s && strcmp(s, want) == 0;
    if (ok) {
        hd_test_pass++;
    } else {
        hd_test_fail++;
        fprintf(stderr, "line %d:\n  got:  %s\n  want: %s\n", line, s ? s : "(null)", want);
    }
    if (s) hd_ctx_free(&ctx, s, len + 1);
}

static hd_tensor *f32(const float *v, const int64_t *shape, int nd) {
    return hd_tensor_from_data(&ctx, HD_F32, shape, nd, v);
}

#define FMT(t, want)                                                                               \
    do {                                                                                           \
        hd_tensor *t_ = (t);                                                                       \
        check_fmt(t_, want, __LINE__);                                                             \
        hd_tensor_unref(t_);                                                                       \
    } while (0)

static hd_tensor *filled(hd_dtype dt, const int64_t *shape, int nd, double (*f)(int64_t)) {
    hd_tensor *t = hd_tensor_new(&ctx, dt, shape, nd);
    for (int64_t i = 0; i < t->numel; i++) hd_dtype_store(dt, t->storage->data, i, f(i));
    return t;
}

static double iota(int64_t i) {
    return (double)i;
}
static double quarter(int64_t i) {
    return (double)i / 4;
}
static double zero(int64_t i) {
    return 0 * (double)i;
}

static void test_basic(void) {
    int64_t s22[] = {2, 2}, s2[] = {2}, s3[] = {3};
    FMT(f32((float[]){1, 2, 3, 4}, s22, 2), "tensor([[1., 2.],\n        [3., 4.]])");
    FMT(f32((float[]){1.5f, 2, 3, 4}, s22, 2),
        "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]])");
    FMT(hd_tensor_from_data(&ctx, HD_I64, s3, 1, (int64_t[]){1, 2, 3}), "tensor([1, 2, 3])");
    FMT(hd_tensor_from_data(&ctx, HD_I64, s2, 1, (int64_t[]){1, -20}), "tensor([  1, -20])");
    FMT(hd_tensor_from_data(&ctx, HD_BOOL, s2, 1, (uint8_t[]){1, 0}), "tensor([ true, false])");
    FMT(f32((float[]){-1.5f, 2.25f}, s2, 1), "tensor([-1.5000,  2.2500])");
    FMT(f32((float[]){0, 0}, s2, 1), "tensor([0., 0.])");
}

static void test_scalars_and_empty(void) {
    int64_t s03[] = {0, 3}, s0[] = {0};
    FMT(hd_tensor_scalar(&ctx, HD_F32, 3.5), "tensor(3.5000)");
    FMT(hd_tensor_scalar(&ctx, HD_I64, 7), "tensor(7)");
    FMT(hd_tensor_scalar(&ctx, HD_BOOL, 1), "tensor(true)");
    FMT(hd_tensor_scalar(&ctx, HD_F16, 2.5), "tensor(2.5000, dtype=f16)");
    FMT(hd_tensor_new(&ctx, HD_F32, s03, 2), "tensor([], size=(0, 3))");
    FMT(hd_tensor_new(&ctx, HD_F32, s0, 1), "tensor([])");
    FMT(hd_tensor_new(&ctx, HD_I64, s0, 1), "tensor([], dtype=i64)");
    FMT(hd_tensor_new(&ctx, HD_BOOL, s03, 2), "tensor([], size=(0, 3), dtype=bool)");
}

static void test_dtypes(void) {
    int64_t s2[] = {2}, s9[] = {9};
    hd_tensor *h = hd_tensor_new(&ctx, HD_F16, s2, 1);
    hd_dtype_store(HD_F16, h->storage->data, 0, 1.5);
    hd_dtype_store(HD_F16, h->storage->data, 1, 2.5);
    FMT(h, "tensor([1.5000, 2.5000], dtype=f16)");
    FMT(hd_tensor_from_data(&ctx, HD_F64, s2, 1, (double[]){1.5, 2}),
        "tensor([1.5000, 2.0000], dtype=f64)");
    FMT(hd_tensor_from_data(&ctx, HD_I32, s2, 1, (int32_t[]){1, 2}), "tensor([1, 2], dtype=i32)");
    /* the suffix moves to its own line past 80 columns */
    FMT(filled(HD_F64, s9, 1, quarter),
        "tensor([0.0000, 0.2500, 0.5000, 0.7500, 1.0000, 1.2500, 1.5000, 1.7500, 2.0000],\n"
        "       dtype=f64)");
}

static void test_sci_and_nonfinite(void) {
    int64_t s2[] = {2}, s3[] = {3};
    FMT(f32((float[]){1e-5f, 1}, s2, 1), "tensor([1.0000e-05, 1.0000e+00])");
    FMT(f32((float[]){1e10f, 1}, s2, 1), "tensor([1.0000e+10, 1.0000e+00])");
    FMT(hd_tensor_from_data(&ctx, HD_F64, s2, 1, (double[]){0.00001234, 123.4}),
        "tensor([1.2340e-05, 1.2340e+02], dtype=f64)");
    FMT(f32((float[]){1.5f, NAN, INFINITY}, s3, 1), "tensor([1.5000,    nan,    inf])");
    FMT(f32((float[]){1, NAN}, s2, 1), "tensor([1., nan])");
    FMT(f32((float[]){-INFINITY, 2}, s2, 1), "tensor([-inf, 2.])");
}

static void test_layout(void) {
    int64_t s222[] = {2, 2, 2}, s30[] = {30};
    FMT(hd_tensor_from_data(&ctx, HD_I64, s222, 3, (int64_t[]){0, 1, 2, 3, 4, 5, 6, 7}),
        "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]])");
    FMT(filled(HD_F32, s30, 1, quarter),
        "tensor([0.0000, 0.2500, 0.5000, 0.7500, 1.0000, 1.2500, 1.5000, 1.7500, 2.0000,\n"
        "        2.2500, 2.5000, 2.7500, 3.0000, 3.2500, 3.5000, 3.7500, 4.0000, 4.2500,\n"
        "        4.5000, 4.7500, 5.0000, 5.2500, 5.5000, 5.7500, 6.0000, 6.2500, 6.5000,\n"
        "        6.7500, 7.0000, 7.2500])");
    /* a transposed view prints its own element order */
    int64_t s22[] = {2, 2}, st[] = {1, 2};
    hd_tensor *base = f32((float[]){1, 2, 3, 4}, s22, 2);
    FMT(hd_tensor_view(&ctx, base, s22, st, 2, 0), "tensor([[1., 3.],\n        [2., 4.]])");
    hd_tensor_unref(base);
}

static void test_summary(void) {
    int64_t s1100[] = {1100}, s1001[] = {1001}, s100[] = {100, 100}, s3d[] = {10, 10, 11};
    FMT(filled(HD_F32, s1100, 1, iota),
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.0970e+03, 1.0980e+03,\n"
        "        1.0990e+03])");
    FMT(filled(HD_I64, s1001, 1, iota), "tensor([   0,    1,    2,  ...,  998,  999, 1000])");
    FMT(filled(HD_F32, s100, 2, zero), "tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n"
                                       "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
                                       "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
                                       "        ...,\n"
                                       "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
                                       "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
                                       "        [0., 0., 0.,  ..., 0., 0., 0.]])");
    /* 1100 elements; dims of 10 are summarised too */
    FMT(filled(HD_I64, s3d, 3, zero), "tensor([[[0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         ...,\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0]],\n"
                                      "\n"
                                      "        [[0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         ...,\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0]],\n"
                                      "\n"
                                      "        [[0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         ...,\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0]],\n"
                                      "\n"
                                      "        ...,\n"
                                      "\n"
                                      "        [[0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         ...,\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0]],\n"
                                      "\n"
                                      "        [[0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         ...,\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0]],\n"
                                      "\n"
                                      "        [[0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         ...,\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0],\n"
                                      "         [0, 0, 0,  ..., 0, 0, 0]]])");
}

/* Every allocation failing in turn gives NULL and an error, never a crash. */
static void test_oom(void) {
    int64_t s22[] = {2, 2};
    hd_tensor *t = f32((float[]){1, 2, 3, 4}, s22, 2);
    for (long k = 0; k < 8; k++) {
        ctx.fail_countdown = k;
        size_t len;
        char *s = hd_tensor_format_cstr(&ctx, t, &len);
        if (s)
            hd_ctx_free(&ctx, s, len + 1);
        else
            CHECK(ctx.status == HD_ERR_MEMORY);
        ctx.fail_countdown = -1;
        hd_error_clear(&ctx);
    }
    hd_tensor_unref(t);
}

int main(void) {
    hd_ctx_init(&ctx, NULL, NULL);
    test_basic();
    test_scalars_and_empty();
    test_dtypes();
    test_sci_and_nonfinite();
    test_layout();
    test_summary();
    size_t before = ctx.mem_used;
    test_oom();
    CHECK(ctx.mem_used == before);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
