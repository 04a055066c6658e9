/* T-generic bodies of the LAPACK kernels, included by cpu_linalg.c once
 * per working type. The includer defines:
 *   LA_T    float or double
 *   LA_S    the suffix of the instance (f32 or f64)
 * No include guard on purpose.
 *
 * A row-major matrix is, read column-major, its transpose. So inv and det
 * run on the buffer as it comes (inv(A^T) = inv(A)^T, det(A^T) = det(A)),
 * and the symmetric routines (cholesky, eigh) reading the column-major
 * upper triangle read the row-major lower one. */

#define LA_FN(name) NN_CAT(name, LA_S)

typedef struct LA_FN(la_lapack) {
    void (*getrf)(const int *m, const int *n, LA_T *a, const int *lda, int *ipiv, int *info);
    void (*getri)(const int *n, LA_T *a, const int *lda, const int *ipiv, LA_T *work,
                  const int *lwork, int *info);
    void (*getrs)(const char *trans, const int *n, const int *nrhs, const LA_T *a, const int *lda,
                  const int *ipiv, LA_T *b, const int *ldb, int *info, size_t);
    void (*potrf)(const char *uplo, const int *n, LA_T *a, const int *lda, int *info, size_t);
    void (*geqrf)(const int *m, const int *n, LA_T *a, const int *lda, LA_T *tau, LA_T *work,
                  const int *lwork, int *info);
    void (*orgqr)(const int *m, const int *n, const int *k, LA_T *a, const int *lda,
                  const LA_T *tau, LA_T *work, const int *lwork, int *info);
    void (*gesdd)(const char *jobz, const int *m, const int *n, LA_T *a, const int *lda, LA_T *s,
                  LA_T *u, const int *ldu, LA_T *vt, const int *ldvt, LA_T *work, const int *lwork,
                  int *iwork, int *info, size_t);
    void (*syevd)(const char *jobz, const char *uplo, const int *n, LA_T *a, const int *lda,
                  LA_T *w, LA_T *work, const int *lwork, int *iwork, const int *liwork, int *info,
                  size_t, size_t);
} LA_FN(la_lapack);

/* Scratch of n elements of LA_T, freed by la_release. */
static LA_T *LA_FN(la_scratch)(la_job *j, int64_t n) {
    return la_alloc(j, (size_t)HD_MAX(n, 1) * sizeof(LA_T));
}

/* The work size a query (lwork = -1) answered, at least min. */
static int LA_FN(la_lwork)(LA_T w, int min) {
    double v = (double)w;
    return v > (double)INT32_MAX ? INT32_MAX : HD_MAX((int)v, min);
}

/* column-major c (ldc rows) from row-major x (rows x cols) and back */
static void LA_FN(la_to_cols)(const LA_T *x, LA_T *c, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) c[i + j * rows] = x[i * cols + j];
}

static void LA_FN(la_from_cols)(const LA_T *c, int64_t ldc, LA_T *x, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) x[i * cols + j] = c[i + j * ldc];
}

/* ---- LU: inv, det, slogdet, solve ---- */

static hd_status LA_FN(la_inv)(la_job *j, const LA_FN(la_lapack) * L, LA_T *a, LA_T *y) {
    int n = (int)j->n, info = 0, lwork = -1, *ipiv = la_alloc(j, (size_t)n * sizeof(int));
    LA_T q = 0, *work = NULL;
    if (!ipiv) return j->ctx->status;
    L->getrf(&n, &n, a, &n, ipiv, &info);
    if (info > 0) return la_fail(j, info);
    L->getri(&n, a, &n, ipiv, &q, &lwork, &info);
    lwork = LA_FN(la_lwork)(q, n);
    if (!(work = LA_FN(la_scratch)(j, lwork))) return j->ctx->status;
    L->getri(&n, a, &n, ipiv, work, &lwork, &info);
    if (info) return la_fail(j, info);
    memcpy(y, a, (size_t)n * (size_t)n * sizeof *y);
    return HD_OK;
}

/* det, or [sign, log|det|] (log 0 = -inf, sign 0 for a singular matrix);
 * the product of U's diagonal in double, the sign of the row swaps. */
static hd_status LA_FN(la_det)(la_job *j, const LA_FN(la_lapack) * L, LA_T *a, LA_T *y) {
    int n = (int)j->n, info = 0, *ipiv = la_alloc(j, (size_t)HD_MAX(n, 1) * sizeof(int));
    if (!ipiv) return j->ctx->status;
    if (n) L->getrf(&n, &n, a, &n, ipiv, &info);
    if (info < 0) return la_fail(j, info);
    double prod = 1.0, logabs = 0.0;
    int odd = 0, zero = 0; /* row swaps and negative pivots; a zero pivot */
    for (int i = 0; i < n; i++) {
        double u = (double)a[(int64_t)i * n + i];
        odd ^= (ipiv[i] != i + 1) ^ (u < 0);
        zero |= u == 0;
        prod *= fabs(u);
        logabs += log(fabs(u));
    }
    double sign = zero ? 0.0 : odd ? -1.0 : 1.0;
    if (j->op == HD_OP_LINALG_DET) {
        y[0] = (LA_T)(sign * prod);
    } else {
        y[0] = (LA_T)sign;
        y[1] = (LA_T)(zero ? -INFINITY : logabs);
    }
    return HD_OK;
}

/* X = A^-1 B: the LU of A^T (the buffer as it comes), solved transposed */
static hd_status LA_FN(la_solve)(la_job *j, const LA_FN(la_lapack) * L, LA_T *a, const LA_T *b,
                                 LA_T *y) {
    int n = (int)j->n, k = (int)j->k, info = 0;
    int *ipiv = la_alloc(j, (size_t)n * sizeof(int));
    LA_T *bc = LA_FN(la_scratch)(j, (int64_t)n * k);
    if (!ipiv || !bc) return j->ctx->status;
    L->getrf(&n, &n, a, &n, ipiv, &info);
    if (info > 0) return la_fail(j, info);
    LA_FN(la_to_cols)(b, bc, n, k);
    L->getrs("T", &n, &k, a, &n, ipiv, bc, &n, &info, 1);
    if (info) return la_fail(j, info);
    LA_FN(la_from_cols)(bc, n, y, n, k);
    return HD_OK;
}

/* ---- cholesky, eigh ---- */

static hd_status LA_FN(la_cholesky)(la_job *j, const LA_FN(la_lapack) * L, LA_T *a, LA_T *y) {
    int n = (int)j->n, info = 0;
    L->potrf("U", &n, a, &n, &info, 1);
    if (info > 0) return la_fail(j, info);
    if (info) return la_fail(j, info);
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < n; c++) y[r * n + c] = c > r ? (LA_T)0 : a[r * n + c];
    return HD_OK;
}

static hd_status LA_FN(la_eigh)(la_job *j, const LA_FN(la_lapack) * L, LA_T *a, LA_T *y) {
    int n = (int)j->n, info = 0, lwork = -1, liwork = -1, iq = 0;
    LA_T q = 0;
    L->syevd("V", "U", &n, a, &n, y, &q, &lwork, &iq, &liwork, &info, 1, 1);
    lwork = LA_FN(la_lwork)(q, 1);
    liwork = HD_MAX(iq, 1);
    LA_T *work = LA_FN(la_scratch)(j, lwork);
    int *iwork = la_alloc(j, (size_t)liwork * sizeof(int));
    if (!work || !iwork) return j->ctx->status;
    L->syevd("V", "U", &n, a, &n, y, work, &lwork, iwork, &liwork, &info, 1, 1);
    if (info > 0) return la_fail(j, info);
    if (info) return la_fail(j, info);
    LA_FN(la_from_cols)(a, n, y + n, n, n);
    /* la_from_cols wrote V[i][j] = a[i + j n]: the j-th column is vector j */
    return HD_OK;
}

/* ---- qr, svd: on a column-major copy ---- */

/* Q [m, qc] and R [qc, n]: qc = k (reduced) or m (complete: the
 * reflectors make all of Q, R's rows past k are 0) */
static hd_status LA_FN(la_qr)(la_job *j, const LA_FN(la_lapack) * L, const LA_T *x, LA_T *y) {
    int m = (int)j->m, n = (int)j->n, k = HD_MIN(m, n), info = 0, lwork = -1;
    int qc = j->full ? m : k;
    LA_T q = 0, q2 = 0, *c = LA_FN(la_scratch)(j, (int64_t)m * HD_MAX(n, qc));
    LA_T *tau = LA_FN(la_scratch)(j, k);
    if (!c || !tau) return j->ctx->status;
    LA_FN(la_to_cols)(x, c, m, n);
    L->geqrf(&m, &n, c, &m, tau, &q, &lwork, &info);
    L->orgqr(&m, &qc, &k, c, &m, tau, &q2, &lwork, &info);
    lwork = HD_MAX(LA_FN(la_lwork)(q, n), LA_FN(la_lwork)(q2, qc));
    LA_T *work = LA_FN(la_scratch)(j, lwork);
    if (!work) return j->ctx->status;
    L->geqrf(&m, &n, c, &m, tau, work, &lwork, &info);
    if (info) return la_fail(j, info);
    LA_T *r = y + (int64_t)m * qc;
    for (int64_t i = 0; i < qc; i++)
        for (int64_t jj = 0; jj < n; jj++)
            r[i * n + jj] = jj >= i && i < k ? c[i + jj * m] : (LA_T)0;
    L->orgqr(&m, &qc, &k, c, &m, tau, work, &lwork, &info);
    if (info) return la_fail(j, info);
    LA_FN(la_from_cols)(c, m, y, m, qc);
    return HD_OK;
}

static void LA_FN(la_eye)(LA_T *y, int64_t n) {
    for (int64_t i = 0; i < n * n; i++) y[i] = i % (n + 1) == 0 ? (LA_T)1 : (LA_T)0;
}

static hd_status LA_FN(la_svd)(la_job *j, const LA_FN(la_lapack) * L, const LA_T *x, LA_T *y) {
    int m = (int)j->m, n = (int)j->n, k = HD_MIN(m, n), info = 0, lwork = -1;
    int full = j->full, cu = full ? m : k, rv = full ? n : k, ldvt = HD_MAX(rv, 1);
    LA_T *U = y, *S = y + (int64_t)m * cu, *Vh = S + k;
    if (k == 0) { /* full matrices of an empty one */
        LA_FN(la_eye)(U, m);
        LA_FN(la_eye)(Vh, n);
        return HD_OK;
    }
    LA_T q = 0, *c = LA_FN(la_scratch)(j, (int64_t)m * n);
    LA_T *u = LA_FN(la_scratch)(j, (int64_t)m * cu), *vt = LA_FN(la_scratch)(j, (int64_t)rv * n);
    int *iwork = la_alloc(j, (size_t)8 * (size_t)k * sizeof(int));
    if (!c || !u || !vt || !iwork) return j->ctx->status;
    LA_FN(la_to_cols)(x, c, m, n);
    const char *jobz = full ? "A" : "S";
    L->gesdd(jobz, &m, &n, c, &m, S, u, &m, vt, &ldvt, &q, &lwork, iwork, &info, 1);
    lwork = LA_FN(la_lwork)(q, 1);
    LA_T *work = LA_FN(la_scratch)(j, lwork);
    if (!work) return j->ctx->status;
    L->gesdd(jobz, &m, &n, c, &m, S, u, &m, vt, &ldvt, work, &lwork, iwork, &info, 1);
    if (info > 0) return la_fail(j, info);
    if (info) return la_fail(j, info);
    LA_FN(la_from_cols)(u, m, U, m, cu);
    LA_FN(la_from_cols)(vt, ldvt, Vh, rv, n);
    return HD_OK;
}

/* ---- one matrix of the batch ---- */

static hd_status LA_FN(la_one)(la_job *j, const LA_FN(la_lapack) * L, int64_t b) {
    int64_t mn = j->m * j->n;
    LA_T *a = LA_FN(la_scratch)(j, mn), *bb = NULL;
    if (!a) return j->ctx->status;
    if (mn) LA_FN(hd_cpu_nn_read)(j->in[0], b * mn, mn, a); /* 0 x 0: det 1 */
    LA_T *y = (LA_T *)hd_tensor_data(j->out) + b * j->outlen;
    switch (j->op) {
    case HD_OP_LINALG_INV: return LA_FN(la_inv)(j, L, a, y);
    case HD_OP_LINALG_DET:
    case HD_OP_LINALG_SLOGDET: return LA_FN(la_det)(j, L, a, y);
    case HD_OP_LINALG_SOLVE:
        if (!(bb = LA_FN(la_scratch)(j, j->n * j->k))) return j->ctx->status;
        LA_FN(hd_cpu_nn_read)(j->in[1], b * j->n * j->k, j->n * j->k, bb);
        return LA_FN(la_solve)(j, L, a, bb, y);
    case HD_OP_LINALG_CHOLESKY: return LA_FN(la_cholesky)(j, L, a, y);
    case HD_OP_LINALG_EIGH: return LA_FN(la_eigh)(j, L, a, y);
    case HD_OP_LINALG_QR: return LA_FN(la_qr)(j, L, a, y);
    case HD_OP_LINALG_SVD: return LA_FN(la_svd)(j, L, a, y);
    default: return hd_error(j->ctx, HD_ERR_RUNTIME, "%s is not a linalg op", hd_op_name(j->op));
    }
}

#undef LA_FN
