/* digamma and polygamma (op POLYGAMMA) against references computed here
 * another way: digamma as the central difference of the C library's
 * lgamma (log |gamma|, whose derivative it is, negative arguments too),
 * polygamma(n >= 1) as its defining series (-1)^(n+1) n! sum 1/(x+k)^(n+1)
 * summed to 10^5 terms with the tail's integral; on f32 and f64, at poles,
 * and the kernels' attribute n kept apart in compiled graphs' keys. */
#include "hd_test.h"
#include "hd_op.h"

/* central differences, extrapolated (Richardson): error O(h^4) */
static double ref_digamma(double x) {
    double h = 1e-3 * (fabs(x) > 1 ? fabs(x) : 1) * 0.01;
    double d1 = (lgamma(x + h) - lgamma(x - h)) / (2 * h);
    double d2 = (lgamma(x + h / 2) - lgamma(x - h / 2)) / h;
    return (4 * d2 - d1) / 3;
}

static double ref_polygamma(int n, double x) {
    if (n == 0) return ref_digamma(x);
    const int K = 100000;
    double s = 0, fact = 1;
    for (int k = K - 1; k >= 0; k--) s += pow(x + k, -(n + 1)); /* small terms first */
    s += pow(x + K - 0.5, -n) / n; /* the tail sum_{k >= K}, by its integral */
    for (int i = 2; i <= n; i++) fact *= i;
    return (n % 2 ? 1 : -1) * fact * s;
}

static double run(hd_ctx *ctx, hd_dtype dt, int n, double x) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.scalar[0] = n;
    int64_t one = 1;
    hd_tensor *t = hd_tensor_new(ctx, dt, &one, 1), *y = NULL;
    hd_dtype_store(dt, t->storage->data, 0, x);
    hd_status st = hd_op_run(ctx, HD_OP_POLYGAMMA, &t, 1, &at, &y);
    CHECK_MSG(st == HD_OK, "polygamma(%d, %g): %s", n, x, st ? hd_error_message(ctx) : "");
    double v = y ? hd_tensor_get(y, 0) : NAN;
    hd_tensor_unref(t), hd_tensor_unref(y);
    return v;
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    const double xs[] = {0.1, 0.5, 1.0, 2.5, 7.3, 9.99, 15.0, 40.0, 1e3, -0.5, -2.7, -7.25};
    for (int n = 0; n <= 4; n++)
        for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
            double ref = ref_polygamma(n, xs[i]);
            double tol = n == 0 ? 1e-8 : 1e-9; /* the difference quotient's own error */
            double got = run(&ctx, HD_F64, n, xs[i]);
            CHECK_MSG(hd_test_close(got, ref, tol, tol), "polygamma(%d, %g) f64: %.15g, want %.15g",
                      n, xs[i], got, ref);
            float xf = (float)xs[i];
            double reff = ref_polygamma(n, (double)xf), gotf = run(&ctx, HD_F32, n, xf);
            CHECK_MSG(hd_test_close(gotf, reff, 2e-6, 1e-6),
                      "polygamma(%d, %g) f32: %.9g, want %.9g", n, xs[i], gotf, reff);
        }
    /* poles and edges, as PyTorch */
    CHECK(run(&ctx, HD_F64, 0, 0.0) == -INFINITY);
    CHECK(isnan(run(&ctx, HD_F64, 0, -3.0)));
    CHECK(isinf(run(&ctx, HD_F64, 1, 0.0)));
    CHECK(isinf(run(&ctx, HD_F64, 2, -4.0)));
    CHECK(isnan(run(&ctx, HD_F64, 0, NAN)) && isnan(run(&ctx, HD_F64, 3, NAN)));
    CHECK(run(&ctx, HD_F64, 0, INFINITY) == INFINITY);
    CHECK(run(&ctx, HD_F64, 1, INFINITY) == 0);
    CHECK(isnan(run(&ctx, HD_F64, 1, -1000000.5)));
    /* integer inputs compute in f32 */
    int64_t one = 1;
    hd_tensor *i = hd_tensor_new(&ctx, HD_I64, &one, 1), *y = NULL;
    hd_dtype_store(HD_I64, i->storage->data, 0, 3);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    CHECK(hd_op_run(&ctx, HD_OP_POLYGAMMA, &i, 1, &at, &y) == HD_OK && y->dtype == HD_F32);
    if (y) CHECK_CLOSE(hd_tensor_get(y, 0), 1.5 - 0.5772156649015329, 1e-6, 1e-6);
    hd_tensor_unref(y), hd_tensor_unref(i);
    CHECK_MSG(ctx.mem_used == 0, "%zu bytes leaked", ctx.mem_used);
    TEST_END();
}
