/* cpu_blas: OpenBLAS on one thread, gemm split over OpenMP threads
 * (cpu_blas.h). */
#include "cpu_blas.h"

#include "../../runtime/hd_base.h"

#ifdef HODU_HAVE_BLAS

#include <cblas.h>
#include <omp.h>
#include <pthread.h>

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_init_once(void) {
    openblas_set_num_threads(1);
}

void cpu_blas_init(void) {
    pthread_once(&blas_once, blas_init_once);
}

const char *cpu_blas_core(void) {
    cpu_blas_init();
    const char *core = openblas_get_corename();
    return core ? core : "unknown";
}

/* One single-threaded gemm. */
static void blas_gemm1(int f64, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                       const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                       int64_t ldc) {
    enum CBLAS_TRANSPOSE tra = ta ? CblasTrans : CblasNoTrans, trb = tb ? CblasTrans : CblasNoTrans;
    if (f64)
        cblas_dgemm(CblasRowMajor, tra, trb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                    (int)ldb, beta, c, (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, tra, trb, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b,
                    (int)ldb, (float)beta, c, (int)ldc);
}

/* Start of part t of nt of [0, n), a multiple of align (but the end). */
static int64_t blas_part(int64_t n, int t, int nt, int64_t align) {
    if (t >= nt) return n;
    int64_t q = n / nt, r = n % nt, lo = q * t + (t < r ? t : r);
    return lo - lo % align;
}

static void blas_gemm_par(int nt, int f64, int ta, int tb, int64_t m, int64_t n, int64_t k,
                          double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                          double beta, void *c, int64_t ldc) {
    double mnk = (double)m * (double)n * (double)k;
    if (nt < 2 || mnk < CPU_BLAS_PAR || omp_in_parallel() || (m < 32 && n < 32)) {
        blas_gemm1(f64, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    size_t es = f64 ? sizeof(double) : sizeof(float);
    int cols = n >= m; /* split the longer side */
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t len = cols ? n : m, lo = blas_part(len, t, T, 16),
                hi = blas_part(len, t + 1, T, 16);
        if (lo < hi && cols)
            blas_gemm1(f64, ta, tb, m, hi - lo, k, alpha, a, lda,
                       (const char *)b + (size_t)(lo * (tb ? ldb : 1)) * es, ldb, beta,
                       (char *)c + (size_t)lo * es, ldc);
        else if (lo < hi)
            blas_gemm1(f64, ta, tb, hi - lo, n, k, alpha,
                       (const char *)a + (size_t)(lo * (ta ? 1 : lda)) * es, lda, b, ldb, beta,
                       (char *)c + (size_t)(lo * ldc) * es, ldc);
    }
}

void cpu_blas_gemm(int nt, int f64, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                   const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                   int64_t ldc, const hd_stop *stop) {
    cpu_blas_init();
    double mnk = (double)m * (double)n * (double)k;
    if (!stop || mnk <= 2 * CPU_BLAS_PIECE) {
        blas_gemm_par(nt, f64, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    size_t es = f64 ? sizeof(double) : sizeof(float);
    int cols = n >= m;
    int64_t len = cols ? n : m, other = cols ? m : n;
    int64_t step = (int64_t)(CPU_BLAS_PIECE / ((double)other * (double)k));
    step = HD_MAX(CPU_BLAS_PIECE_MIN, step - step % 16);
    for (int64_t lo = 0; lo < len && !hd_stop_now(stop); lo += step) {
        int64_t w = HD_MIN(step, len - lo);
        if (cols)
            blas_gemm_par(nt, f64, ta, tb, m, w, k, alpha, a, lda,
                          (const char *)b + (size_t)(lo * (tb ? ldb : 1)) * es, ldb, beta,
                          (char *)c + (size_t)lo * es, ldc);
        else
            blas_gemm_par(nt, f64, ta, tb, w, n, k, alpha,
                          (const char *)a + (size_t)(lo * (ta ? 1 : lda)) * es, lda, b, ldb, beta,
                          (char *)c + (size_t)(lo * ldc) * es, ldc);
    }
}

#else

void cpu_blas_init(void) {}

const char *cpu_blas_core(void) {
    return "none";
}

void cpu_blas_gemm(int nt, int f64, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                   const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                   int64_t ldc, const hd_stop *stop) {
    HD_UNUSED(stop);
    HD_UNUSED(nt), HD_UNUSED(f64), HD_UNUSED(ta), HD_UNUSED(tb), HD_UNUSED(m), HD_UNUSED(n);
    HD_UNUSED(k), HD_UNUSED(alpha), HD_UNUSED(a), HD_UNUSED(lda), HD_UNUSED(b), HD_UNUSED(ldb);
    HD_UNUSED(beta), HD_UNUSED(c), HD_UNUSED(ldc);
}

#endif
