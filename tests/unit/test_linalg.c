/* The linalg ops (LAPACK) against plain f64 loops written here: Gaussian
 * elimination with partial pivoting (det, inv, solve), the Cholesky-
 * Banachiewicz loop, cyclic Jacobi rotations (eigenvalues, singular
 * values), and the defining properties of each decomposition (A = QR with
 * orthonormal Q and upper R, A = U diag(S) Vh, A = V diag(w) V^T), on f32
 * and f64, batches, transposed views and edge sizes; then every error. The
 * gradients are checked in test_gradcheck.c. */
#include "hd_test.h"
#include "hd_backend.h"
#include "hd_op.h"
#include "hd_test_linalg.h"

static uint64_t rng = 0x2545f4914f6cdd1dULL;

static double uni(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ULL << 52) - 1.0;
}

/* ---- tensors ---- */

static hd_tensor *make(hd_ctx *ctx, hd_dtype dt, const double *v, const int64_t *shape, int nd) {
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, nd);
    for (int64_t i = 0; i < t->numel; i++) hd_dtype_store(dt, t->storage->data, i, v[i]);
    return t;
}

static hd_tensor *run1(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b, int flag) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = flag;
    hd_tensor *in[2] = {a, b}, *y = NULL;
    hd_status st = hd_op_run(ctx, op, in, b ? 2 : 1, &at, &y);
    CHECK_MSG(st == HD_OK, "%s: %s", hd_op_name(op), st ? hd_error_message(ctx) : "");
    return st ? NULL : y;
}

static double tol_of(hd_dtype dt) {
    return dt == HD_F64 ? 1e-10 : 2e-4;
}

/* a random n x n matrix with its diagonal raised (well conditioned), or
 * an spd one (b b^T + n I) */
static void random_matrix(double *a, int n, int spd) {
    double b[LA_NMAX * LA_NMAX];
    for (int i = 0; i < n * n; i++) b[i] = uni();
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < n && spd; p++) s += b[i * n + p] * b[j * n + p];
            a[i * n + j] = spd ? s + (i == j ? n : 0) : b[i * n + j] + (i == j ? 1.5 : 0);
        }
}

/* ---- forward checks ---- */

static void check_lu(hd_ctx *ctx, hd_dtype dt, int n) {
    double a[LA_NMAX * LA_NMAX], w[LA_NMAX * LA_NMAX], b[LA_NMAX * 2], x[LA_NMAX * 2],
        id[LA_NMAX * LA_NMAX];
    random_matrix(a, n, 0);
    for (int i = 0; i < 2 * n; i++) b[i] = uni();
    for (int i = 0; i < n * n; i++) id[i] = i % (n + 1) == 0;
    int64_t sa[2] = {n, n}, sb[2] = {n, 2};
    hd_tensor *ta = make(ctx, dt, a, sa, 2), *tb = make(ctx, dt, b, sb, 2);
    double tol = tol_of(dt);
    memcpy(w, a, sizeof(double) * (size_t)(n * n));
    double det = ref_det(w, n);
    hd_tensor *y = run1(ctx, HD_OP_LINALG_DET, ta, NULL, 0);
    if (y) CHECK_CLOSE(hd_tensor_get(y, 0), det, tol, 0);
    hd_tensor_unref(y);
    if ((y = run1(ctx, HD_OP_LINALG_SLOGDET, ta, NULL, 0))) {
        CHECK_CLOSE(hd_tensor_get(y, 0), det < 0 ? -1 : 1, 0, 0);
        CHECK_CLOSE(hd_tensor_get(y, 1), log(fabs(det)), tol, tol);
    }
    hd_tensor_unref(y);
    ref_solve(a, id, w, n, n);
    if ((y = run1(ctx, HD_OP_LINALG_INV, ta, NULL, 0)))
        for (int i = 0; i < n * n; i++) CHECK_CLOSE(hd_tensor_get(y, i), w[i], tol, tol);
    hd_tensor_unref(y);
    ref_solve(a, b, x, n, 2);
    if ((y = run1(ctx, HD_OP_LINALG_SOLVE, ta, tb, 0)))
        for (int i = 0; i < n * 2; i++) CHECK_CLOSE(hd_tensor_get(y, i), x[i], tol, tol);
    hd_tensor_unref(y);
    hd_tensor_unref(ta), hd_tensor_unref(tb);
}

static void check_symmetric(hd_ctx *ctx, hd_dtype dt, int n) {
    double a[LA_NMAX * LA_NMAX], l[LA_NMAX * LA_NMAX], w[LA_NMAX];
    random_matrix(a, n, 1);
    int64_t sa[2] = {n, n};
    hd_tensor *ta = make(ctx, dt, a, sa, 2), *y;
    double tol = tol_of(dt) * 10;
    ref_cholesky(a, l, n);
    if ((y = run1(ctx, HD_OP_LINALG_CHOLESKY, ta, NULL, 0)))
        for (int i = 0; i < n * n; i++) CHECK_CLOSE(hd_tensor_get(y, i), l[i], tol, tol);
    hd_tensor_unref(y);
    ref_eigvals(a, w, n);
    if ((y = run1(ctx, HD_OP_LINALG_EIGH, ta, NULL, 0))) {
        for (int i = 0; i < n; i++) CHECK_CLOSE(hd_tensor_get(y, i), w[i], tol, tol);
        /* A v_j = w_j v_j, |v_j| = 1 */
        for (int j = 0; j < n; j++) {
            double norm = 0;
            for (int i = 0; i < n; i++) {
                double av = 0, vij = hd_tensor_get(y, n + i * n + j);
                for (int p = 0; p < n; p++) av += a[i * n + p] * hd_tensor_get(y, n + p * n + j);
                CHECK_CLOSE(av, hd_tensor_get(y, j) * vij, tol, tol * n);
                norm += vij * vij;
            }
            CHECK_CLOSE(norm, 1, tol, tol);
        }
    }
    hd_tensor_unref(y);
    hd_tensor_unref(ta);
}

/* columns j and k of the r x c block at p (row stride ld) */
static double col_dot(hd_tensor *y, int64_t p, int64_t ld, int r, int j, int k) {
    double s = 0;
    for (int i = 0; i < r; i++)
        s += hd_tensor_get(y, p + i * ld + j) * hd_tensor_get(y, p + i * ld + k);
    return s;
}

/* Q [m, q] with orthonormal columns, R [q, n] upper triangular (rows past
 * min(m, n) zero), QR = A; q = min(m, n), or m for the complete form */
static void check_qr(hd_ctx *ctx, hd_dtype dt, int m, int n, int complete) {
    double a[LA_NMAX * LA_NMAX];
    int k = m < n ? m : n, q = complete ? m : k;
    for (int i = 0; i < m * n; i++) a[i] = uni();
    int64_t sa[2] = {m, n};
    hd_tensor *ta = make(ctx, dt, a, sa, 2), *y = run1(ctx, HD_OP_LINALG_QR, ta, NULL, complete);
    double tol = tol_of(dt) * 10;
    if (y) {
        CHECK(y->numel == (int64_t)m * q + (int64_t)q * n);
        int64_t r0 = (int64_t)m * q;
        for (int j = 0; j < q; j++)
            for (int l = 0; l < q; l++) CHECK_CLOSE(col_dot(y, 0, q, m, j, l), j == l, tol, tol);
        for (int i = 0; i < q; i++)
            for (int j = 0; j < (i < k ? i : n); j++) CHECK(hd_tensor_get(y, r0 + i * n + j) == 0);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int p = 0; p < q; p++)
                    s += hd_tensor_get(y, i * q + p) * hd_tensor_get(y, r0 + p * n + j);
                CHECK_CLOSE(s, a[i * n + j], tol, tol);
            }
    }
    hd_tensor_unref(y);
    hd_tensor_unref(ta);
}

static void check_svd(hd_ctx *ctx, hd_dtype dt, int m, int n, int full) {
    double a[LA_NMAX * LA_NMAX], g[LA_NMAX * LA_NMAX], w[LA_NMAX];
    int k = m < n ? m : n, cu = full ? m : k, rv = full ? n : k;
    for (int i = 0; i < m * n; i++) a[i] = uni();
    int64_t sa[2] = {m, n};
    hd_tensor *ta = make(ctx, dt, a, sa, 2), *y = run1(ctx, HD_OP_LINALG_SVD, ta, NULL, full);
    double tol = tol_of(dt) * 10;
    /* S^2: the largest k eigenvalues of A^T A (n x n) */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < m; p++) s += a[p * n + i] * a[p * n + j];
            g[i * n + j] = s;
        }
    ref_eigvals(g, w, n);
    if (y) {
        int64_t s0 = (int64_t)m * cu, v0 = s0 + k;
        CHECK(y->numel == v0 + (int64_t)rv * n);
        for (int i = 0; i < k; i++)
            CHECK_CLOSE(hd_tensor_get(y, s0 + i), sqrt(fmax(w[n - 1 - i], 0)), tol, tol);
        for (int j = 0; j < cu; j++)
            for (int l = 0; l < cu; l++) CHECK_CLOSE(col_dot(y, 0, cu, m, j, l), j == l, tol, tol);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int p = 0; p < k; p++)
                    s += hd_tensor_get(y, i * cu + p) * hd_tensor_get(y, s0 + p) *
                         hd_tensor_get(y, v0 + p * n + j);
                CHECK_CLOSE(s, a[i * n + j], tol, tol);
            }
        for (int i = 0; i < rv; i++) /* Vh's rows orthonormal */
            for (int l = 0; l < rv; l++) {
                double s = 0;
                for (int j = 0; j < n; j++)
                    s += hd_tensor_get(y, v0 + i * n + j) * hd_tensor_get(y, v0 + l * n + j);
                CHECK_CLOSE(s, i == l, tol, tol);
            }
    }
    hd_tensor_unref(y);
    hd_tensor_unref(ta);
}

/* a batch of two, one of them through a transposed view: each matrix as
 * its own call gives */
static void check_batch(hd_ctx *ctx) {
    double a[2 * 9];
    for (int i = 0; i < 18; i++) a[i] = uni() + (i % 4 == 0 ? 2 : 0);
    int64_t sb[3] = {2, 3, 3}, s1[2] = {3, 3}, st[3] = {2, 3, 3};
    hd_tensor *tb = make(ctx, HD_F64, a, sb, 3);
    hd_tensor *tt = hd_tensor_view(ctx, tb, st, (int64_t[]){9, 1, 3}, 3, 0); /* each transposed */
    hd_tensor *y = run1(ctx, HD_OP_LINALG_INV, tt, NULL, 0);
    for (int b = 0; b < 2 && y; b++) {
        double m[9], id[9], r[9];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) m[i * 3 + j] = a[b * 9 + j * 3 + i], id[i * 3 + j] = i == j;
        ref_solve(m, id, r, 3, 3);
        for (int i = 0; i < 9; i++) CHECK_CLOSE(hd_tensor_get(y, b * 9 + i), r[i], 1e-10, 1e-10);
    }
    hd_tensor_unref(y);
    if ((y = run1(ctx, HD_OP_LINALG_DET, tb, NULL, 0))) {
        CHECK(y->ndim == 1 && y->shape[0] == 2);
        for (int b = 0; b < 2; b++) {
            double m[9];
            memcpy(m, a + 9 * b, sizeof m);
            CHECK_CLOSE(hd_tensor_get(y, b), ref_det(m, 3), 1e-10, 0);
        }
    }
    hd_tensor_unref(y);
    HD_UNUSED(s1);
    hd_tensor_unref(tt), hd_tensor_unref(tb);
}

/* ---- edges and errors ---- */

static void expect_error(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b, const char *part) {
    hd_tensor *in[2] = {a, b}, *y = NULL;
    hd_status st = hd_op_run(ctx, op, in, b ? 2 : 1, NULL, &y);
    CHECK_MSG(st != HD_OK && strstr(hd_error_message(ctx), part),
              "%s: want an error with '%s', got '%s'", hd_op_name(op), part,
              st ? hd_error_message(ctx) : "none");
    hd_tensor_unref(y);
}

static void check_errors(hd_ctx *ctx) {
    double sing[4] = {1, 2, 2, 4}, notpd[4] = {1, 2, 2, 1}, batch[8] = {1, 0, 0, 1, 1, 1, 1, 1};
    int64_t s2[2] = {2, 2}, s23[2] = {2, 3}, sb[3] = {2, 2, 2}, s1[1] = {2};
    hd_tensor *ts = make(ctx, HD_F64, sing, s2, 2), *tn = make(ctx, HD_F32, notpd, s2, 2);
    hd_tensor *tb = make(ctx, HD_F64, batch, sb, 3), *tr = make(ctx, HD_F64, batch, s23, 2);
    hd_tensor *ti = make(ctx, HD_I64, sing, s2, 2), *tv = make(ctx, HD_F64, sing, s1, 1);
    expect_error(ctx, HD_OP_LINALG_INV, ts, NULL, "singular");
    expect_error(ctx, HD_OP_LINALG_SOLVE, ts, ts, "singular");
    expect_error(ctx, HD_OP_LINALG_INV, tb, NULL, "matrix 1 of the batch is singular");
    expect_error(ctx, HD_OP_LINALG_CHOLESKY, tn, NULL, "not positive-definite");
    expect_error(ctx, HD_OP_LINALG_INV, tr, NULL, "square");
    expect_error(ctx, HD_OP_LINALG_DET, ti, NULL, "f32 or f64");
    expect_error(ctx, HD_OP_LINALG_QR, tv, NULL, "matrix or a batch");
    expect_error(ctx, HD_OP_LINALG_SOLVE, tr, ts, "square");
    expect_error(ctx, HD_OP_LINALG_SOLVE, ts, tn, "do not agree"); /* f64 and f32 */
    /* a singular matrix's det is 0, its slogdet (0, -inf) */
    hd_tensor *y = run1(ctx, HD_OP_LINALG_DET, ts, NULL, 0);
    if (y) CHECK(hd_tensor_get(y, 0) == 0);
    hd_tensor_unref(y);
    if ((y = run1(ctx, HD_OP_LINALG_SLOGDET, ts, NULL, 0)))
        CHECK(hd_tensor_get(y, 0) == 0 && isinf(hd_tensor_get(y, 1)) && hd_tensor_get(y, 1) < 0);
    hd_tensor_unref(y);
    /* 0 x 0: det 1, inverse empty */
    int64_t s0[2] = {0, 0};
    hd_tensor *te = hd_tensor_new(ctx, HD_F64, s0, 2);
    if ((y = run1(ctx, HD_OP_LINALG_DET, te, NULL, 0))) CHECK(hd_tensor_get(y, 0) == 1);
    hd_tensor_unref(y);
    if ((y = run1(ctx, HD_OP_LINALG_INV, te, NULL, 0))) CHECK(y->numel == 0);
    hd_tensor_unref(y);
    hd_tensor_unref(te);
    hd_tensor_unref(ts), hd_tensor_unref(tn), hd_tensor_unref(tb), hd_tensor_unref(tr);
    hd_tensor_unref(ti), hd_tensor_unref(tv);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    int64_t one[2] = {1, 1};
    hd_tensor *p = hd_tensor_zeros(&ctx, HD_F64, one, 2), *q = NULL;
    if (hd_op_run(&ctx, HD_OP_LINALG_DET, &p, 1, NULL, &q) &&
        strstr(hd_error_message(&ctx), "needs LAPACK")) {
        printf("SKIPPED: %s\n", hd_error_message(&ctx));
        hd_tensor_unref(p);
        return 77;
    }
    hd_tensor_unref(p), hd_tensor_unref(q);
    hd_dtype dts[2] = {HD_F32, HD_F64};
    for (int d = 0; d < 2; d++) {
        for (int n = 1; n <= LA_NMAX; n += 3) {
            check_lu(&ctx, dts[d], n);
            check_symmetric(&ctx, dts[d], n);
            check_qr(&ctx, dts[d], n, n, 0);
        }
        check_qr(&ctx, dts[d], 6, 3, 0);
        check_qr(&ctx, dts[d], 3, 6, 0);
        check_qr(&ctx, dts[d], 6, 3, 1); /* complete: Q 6 x 6, R 6 x 3 */
        check_qr(&ctx, dts[d], 3, 6, 1);
        check_qr(&ctx, dts[d], 4, 4, 1);
        check_svd(&ctx, dts[d], 5, 3, 0);
        check_svd(&ctx, dts[d], 3, 5, 0);
        check_svd(&ctx, dts[d], 4, 4, 0);
        check_svd(&ctx, dts[d], 5, 3, 1);
        check_svd(&ctx, dts[d], 2, 6, 1);
    }
    check_batch(&ctx);
    check_errors(&ctx);
    CHECK_MSG(ctx.mem_used == 0, "%zu bytes leaked", ctx.mem_used);
    TEST_END();
}
