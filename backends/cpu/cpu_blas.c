/* cpu_blas: OpenBLAS on one thread, gemm split over OpenMP threads
 * (cpu_blas.h). */
#include "cpu_blas.h"
#include "cpu_kernels.h"

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

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

const char *cpu_blas_core_for_cpu(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (hd_cpu_avx512()) {
        unsigned a = 0, b, c, d;
        /* leaf 7, subleaf 1, eax bit 5: AVX512_BF16 (clang 14's
         * __builtin_cpu_supports does not know the name) */
        int bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
        return bf16 ? "Cooperlake" : "SkylakeX";
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return __builtin_cpu_is("amd") ? "Zen" : "Haswell";
    if (__builtin_cpu_supports("avx")) return "Sandybridge";
#endif
    return NULL;
}

#ifdef HODU_HAVE_BLAS

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS, opened at the first product rather than linked: a linked
 * OpenBLAS (the pthread build) starts its worker threads when the process
 * loads, and they spin in sched_yield for about 0.1 s of CPU in every
 * process, whether it multiplies or not. Opened here after
 * OPENBLAS_NUM_THREADS=1 is set, it starts none: Hodu splits large
 * products over its own threads. */
static struct {
    __typeof__(cblas_sgemm) *sgemm;
    __typeof__(cblas_dgemm) *dgemm;
    __typeof__(cblas_sgemv) *sgemv;
    __typeof__(cblas_dgemv) *dgemv;
    void (*set_threads)(int);
    char *(*corename)(void);
    void *handle;
    int ready;
    char why[256];
    /* oneDNN's dnnl_sgemm (row-major; 2.x and 3.x alike), NULL when it is
     * not here or not wanted */
    int (*onednn_sgemm)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t,
                        const float *, int64_t, float, float *, int64_t);
} blas;

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void *blas_open(void) {
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so",
                                        "libopenblas64_.so.0"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    return h;
}

/* OpenBLAS picks its kernels when it loads, by the CPU's model; one it
 * does not know gets the Prescott (SSE3) kernels. Debian 12's 0.3.21 on an
 * Intel Xeon of model 207 multiplied at 20 GFLOP/s a core that way, 110
 * with its Cooperlake kernels. So when OpenBLAS chose Prescott, the user
 * did not choose (OPENBLAS_CORETYPE), and the CPU's instructions allow a
 * better set, it is opened again with OPENBLAS_CORETYPE naming that set
 * (a library still held elsewhere in the process stays as it was). */
static void *blas_open_best(void) {
    void *h = blas_open();
    char *(*core)(void) = NULL;
    if (h) *(void **)&core = dlsym(h, "openblas_get_corename");
    const char *want = cpu_blas_core_for_cpu();
    if (!core || getenv("OPENBLAS_CORETYPE") || !want || strcmp(core(), "Prescott") != 0) return h;
    if (hd_log_on("blas"))
        fprintf(stderr, "hodu: OpenBLAS chose its Prescott kernels; opened again with %s\n", want);
    dlclose(h);
    setenv("OPENBLAS_CORETYPE", want, 1);
    h = blas_open();
    unsetenv("OPENBLAS_CORETYPE");
    return h ? h : blas_open();
}

/* oneDNN, opened beside OpenBLAS when the process may use it: its sgemm
 * runs the f32 products of CPU_BLAS_ONEDNN_MIN multiply-adds and more
 * (docs/runtime.md, "Which gemm"). Not where HODU_GEMM=openblas, nor in a
 * process that runs LLVM's OpenMP (the fuzz targets, built with clang):
 * libdnnl brings GCC's, and two OpenMP runtimes in one process share
 * nothing. */
static void blas_open_onednn(void) {
    const char *want = getenv("HODU_GEMM");
    if (want && *want && strcmp(want, "onednn") != 0) {
        if (strcmp(want, "openblas") != 0)
            fprintf(stderr,
                    "hodu: HODU_GEMM=%s is not a gemm here (onednn, openblas); OpenBLAS "
                    "runs every product\n",
                    want);
        return;
    }
    if (dlsym(RTLD_DEFAULT, "__kmpc_fork_call")) {
        if (hd_log_on("blas")) fprintf(stderr, "hodu: oneDNN not used: LLVM's OpenMP runs here\n");
        return;
    }
    static const char *const names[] = {"libdnnl.so.3", "libdnnl.so.2", "libdnnl.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) *(void **)&blas.onednn_sgemm = dlsym(h, "dnnl_sgemm");
    if (h && !blas.onednn_sgemm) dlclose(h); /* else held for the process's life, as OpenBLAS */
    if (!blas.onednn_sgemm && want && *want)
        fprintf(stderr, "hodu: HODU_GEMM=onednn, but oneDNN could not be opened (libdnnl.so.3 "
                        "or .2); OpenBLAS runs every product\n");
    else if (hd_log_on("blas"))
        fprintf(stderr, "hodu: oneDNN %s\n",
                blas.onednn_sgemm ? "opened: its sgemm runs the larger f32 products"
                                  : "not found: OpenBLAS runs every product");
}

static void blas_init_once(void) {
    const char *off = getenv("HODU_NO_BLAS");
    if (off && *off && strcmp(off, "0") != 0) {
        snprintf(blas.why, sizeof blas.why, "HODU_NO_BLAS is set");
        return;
    }
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    void *h = blas_open_best();
    if (!h) {
        const char *e = dlerror();
        snprintf(blas.why, sizeof blas.why, "OpenBLAS could not be opened (%s)",
                 e ? e : "libopenblas.so.0");
        return;
    }
    blas.handle = h;
    *(void **)&blas.sgemm = dlsym(h, "cblas_sgemm");
    *(void **)&blas.dgemm = dlsym(h, "cblas_dgemm");
    *(void **)&blas.sgemv = dlsym(h, "cblas_sgemv");
    *(void **)&blas.dgemv = dlsym(h, "cblas_dgemv");
    *(void **)&blas.set_threads = dlsym(h, "openblas_set_num_threads");
    *(void **)&blas.corename = dlsym(h, "openblas_get_corename");
    if (!blas.sgemm || !blas.dgemm || !blas.sgemv || !blas.dgemv) {
        snprintf(blas.why, sizeof blas.why, "the OpenBLAS found lacks cblas_sgemm or cblas_sgemv");
        return;
    }
    if (blas.set_threads) blas.set_threads(1);
    if (hd_log_on("blas") && blas.corename)
        fprintf(stderr, "hodu: OpenBLAS opened, its %s kernels\n", blas.corename());
    blas_open_onednn();
    blas.ready = 1;
}

int cpu_blas_ready(void) {
    pthread_once(&blas_once, blas_init_once);
    return blas.ready;
}

const char *cpu_blas_why(void) {
    return cpu_blas_ready() ? "" : blas.why;
}

void *cpu_blas_symbol(const char *name) {
    return cpu_blas_ready() ? dlsym(blas.handle, name) : NULL;
}

const char *cpu_blas_core(void) {
    if (!cpu_blas_ready()) return "none";
    const char *core = blas.corename ? blas.corename() : NULL;
    return core ? core : "unknown";
}

void cpu_blas_gemv(int f64, int trans, int64_t rows, int64_t cols, const void *mat, int64_t ldm,
                   const void *vec, int64_t inc, void *out) {
    enum CBLAS_TRANSPOSE t = trans ? CblasTrans : CblasNoTrans;
    if (f64)
        blas.dgemv(CblasRowMajor, t, (int)rows, (int)cols, 1.0, mat, (int)ldm, vec, (int)inc, 0.0,
                   out, 1);
    else
        blas.sgemv(CblasRowMajor, t, (int)rows, (int)cols, 1.0f, mat, (int)ldm, vec, (int)inc, 0.0f,
                   out, 1);
}

int cpu_blas_matvec(const cpu_blas_args *g) {
    if (g->n != 1 && g->m != 1) return 0;
    int col = g->n == 1; /* b a column: y = A x; else a a row: y = B^T x */
    const void *mat = col ? g->a : g->b, *vec = col ? g->b : g->a;
    int tm = col ? g->ta : g->tb, tv = col ? g->tb : g->ta;
    int64_t ldm = col ? g->lda : g->ldb, ldv = col ? g->ldb : g->lda, len = col ? g->m : g->n;
    /* the vector's stride along k: a column (k x 1) steps by ld unless
     * transposed; a row (1 x k) steps by 1 unless transposed */
    int64_t inc = col == !tv ? ldv : 1;
    /* the stored matrix is len x k (y = M x) or k x len (y = M^T x) */
    int len_first = col == !tm;
    cpu_blas_gemv(g->f64, !len_first, len_first ? len : g->k, len_first ? g->k : len, mat, ldm, vec,
                  inc, g->c);
    return 1;
}

void cpu_blas_choose(cpu_blas_args *g) {
    double mnk = (double)g->m * (double)g->n * (double)g->k;
    g->onednn = !g->f64 && blas.onednn_sgemm && g->beta == 0 && mnk >= CPU_BLAS_ONEDNN_MIN &&
                g->m >= 16 && g->n >= 16;
}

const char *cpu_blas_gemm_name(void) {
    return !cpu_blas_ready() ? "none" : blas.onednn_sgemm ? "onednn" : "openblas";
}

/* oneDNN's sgemm on this thread alone, k in slices of CPU_BLAS_ONEDNN_K:
 * its own blocking of k depends on m and n (k = 2048 summed in another
 * order for 128 rows than for 16), so a block of a split product would
 * not give the whole product's bits; slices of 512 it sums in one pass
 * whatever the shape. 0 when it fails (out of memory for its packing):
 * OpenBLAS then runs the product. */
static int blas_onednn1(const cpu_blas_args *g) {
    int outer = !omp_in_parallel(), saved = outer ? omp_get_max_threads() : 1;
    if (saved > 1) omp_set_num_threads(1); /* else it runs a team of its own */
    int ok = 1;
    for (int64_t k0 = 0; k0 < g->k && ok; k0 += CPU_BLAS_ONEDNN_K) {
        int64_t kk = HD_MIN(CPU_BLAS_ONEDNN_K, g->k - k0);
        const float *a = (const float *)g->a + k0 * (g->ta ? g->lda : 1);
        const float *b = (const float *)g->b + k0 * (g->tb ? 1 : g->ldb);
        float beta = k0 ? 1.0f : (float)g->beta;
        ok = blas.onednn_sgemm(g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->m, g->n, kk,
                               (float)g->alpha, a, g->lda, b, g->ldb, beta, g->c, g->ldc) == 0;
    }
    if (saved > 1) omp_set_num_threads(saved);
    return ok;
}

/* One single-threaded gemm. */
static void blas_gemm1(const cpu_blas_args *g) {
    if (g->onednn && blas_onednn1(g)) return;
    enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = g->tb ? CblasTrans : CblasNoTrans;
    if (g->f64)
        blas.dgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, g->alpha, g->a,
                   (int)g->lda, g->b, (int)g->ldb, g->beta, g->c, (int)g->ldc);
    else
        blas.sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, (float)g->alpha, g->a,
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
    cpu_blas_args g = {f64, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 0};
    cpu_blas_choose(&g);
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

int cpu_blas_ready(void) {
    return 0;
}

const char *cpu_blas_why(void) {
    return "this build has no BLAS";
}

void *cpu_blas_symbol(const char *name) {
    HD_UNUSED(name);
    return NULL;
}

const char *cpu_blas_core(void) {
    return "none";
}

int cpu_blas_matvec(const cpu_blas_args *g) {
    HD_UNUSED(g);
    return 0;
}

void cpu_blas_choose(cpu_blas_args *g) {
    g->onednn = 0;
}

const char *cpu_blas_gemm_name(void) {
    return "none";
}

void cpu_blas_gemv(int f64, int trans, int64_t rows, int64_t cols, const void *mat, int64_t ldm,
                   const void *vec, int64_t inc, void *out) {
    HD_UNUSED(f64), HD_UNUSED(trans), HD_UNUSED(rows), HD_UNUSED(cols), HD_UNUSED(mat);
    HD_UNUSED(ldm), HD_UNUSED(vec), HD_UNUSED(inc), HD_UNUSED(out);
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
