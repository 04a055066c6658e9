/* cpu_blas: OpenBLAS on one thread, gemm split over OpenMP threads
 * (cpu_blas.h). */
#include "cpu_blas.h"

#include "../../runtime/hd_base.h"

cpu_blas_split cpu_blas_split_of(int nt, int64_t m, int64_t n, int64_t k) {
    double mnk = (double)m * (double)n * (double)k;
    if (nt < 2 || mnk < CPU_BLAS_PAR || (m < 32 && n < 32)) return CPU_BLAS_SPLIT_NONE;
    return n >= m ? CPU_BLAS_SPLIT_COLS : CPU_BLAS_SPLIT_ROWS;
}

int64_t cpu_blas_part(int64_t len, int t, int nt) {
    if (t >= nt) return len;
    int64_t q = len / nt, r = len % nt, lo = q * t + (t < r ? t : r);
    return lo - lo % 16;
}

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
static void blas_gemm1(const cpu_blas_args *g) {
    enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = g->tb ? CblasTrans : CblasNoTrans;
    if (g->f64)
        cblas_dgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, g->alpha, g->a,
                    (int)g->lda, g->b, (int)g->ldb, g->beta, g->c, (int)g->ldc);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, (float)g->alpha, g->a,
                    (int)g->lda, g->b, (int)g->ldb, (float)g->beta, g->c, (int)g->ldc);
}

/* The same product restricted to rows (or columns) [lo, hi) of C. */
static cpu_blas_args blas_sub(const cpu_blas_args *g, cpu_blas_split split, int64_t lo,
                              int64_t hi) {
    size_t es = g->f64 ? sizeof(double) : sizeof(float);
    cpu_blas_args p = *g;
    if (split == CPU_BLAS_SPLIT_ROWS) {
        p.m = hi - lo;
        p.a = (const char *)g->a + (size_t)(lo * (g->ta ? 1 : g->lda)) * es;
        p.c = (char *)g->c + (size_t)(lo * g->ldc) * es;
    } else {
        p.n = hi - lo;
        p.b = (const char *)g->b + (size_t)(lo * (g->tb ? g->ldb : 1)) * es;
        p.c = (char *)g->c + (size_t)lo * es;
    }
    return p;
}

void cpu_blas_gemm_part(const cpu_blas_args *g, cpu_blas_split split, int64_t lo, int64_t hi) {
    if (lo >= hi) return;
    cpu_blas_args p = blas_sub(g, split, lo, hi);
    blas_gemm1(&p);
}

static void blas_gemm_par(int nt, const cpu_blas_args *g) {
    cpu_blas_split split = cpu_blas_split_of(nt, g->m, g->n, g->k);
    if (split == CPU_BLAS_SPLIT_NONE || omp_in_parallel()) {
        blas_gemm1(g);
        return;
    }
    int64_t len = split == CPU_BLAS_SPLIT_COLS ? g->n : g->m;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        cpu_blas_gemm_part(g, split, cpu_blas_part(len, t, T), cpu_blas_part(len, t + 1, T));
    }
}

void cpu_blas_gemm(int nt, int f64, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                   const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                   int64_t ldc, const hd_stop *stop) {
    cpu_blas_init();
    cpu_blas_args g = {f64, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
    double mnk = (double)m * (double)n * (double)k;
    if (!stop || mnk <= 2 * CPU_BLAS_PIECE) {
        blas_gemm_par(nt, &g);
        return;
    }
    cpu_blas_split side = n >= m ? CPU_BLAS_SPLIT_COLS : CPU_BLAS_SPLIT_ROWS;
    int64_t len = HD_MAX(m, n), other = HD_MIN(m, n);
    int64_t step = (int64_t)(CPU_BLAS_PIECE / ((double)other * (double)k));
    step = HD_MAX(CPU_BLAS_PIECE_MIN, step - step % 16);
    for (int64_t lo = 0; lo < len && !hd_stop_now(stop); lo += step) {
        cpu_blas_args p = blas_sub(&g, side, lo, HD_MIN(lo + step, len));
        blas_gemm_par(nt, &p);
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
