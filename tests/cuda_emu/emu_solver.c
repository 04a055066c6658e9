/* The emulated cuSOLVER: the dense routines the backend calls (cuda_solver.c), through the
 * LAPACK that OpenBLAS ships: cuSOLVER documents them as LAPACK's, on
 * column-major matrices. Every matrix, pivot array, info word and
 * workspace must lie in the handle's stream's device memory, and a
 * workspace must be at least the size its _bufferSize query answered;
 * gesvd refuses m < n, as cuSOLVER's does. The work runs at once (not in a
 * capture: Hodu never calls cuSOLVER while capturing). */
#define _GNU_SOURCE
#include "emu_int.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

enum { SOL_OK = 0, SOL_NOT_INIT = 1, SOL_ALLOC = 2, SOL_INVALID = 3, SOL_INTERNAL = 7 };

typedef struct emu_solver {
    emu_stream *stream;
} emu_solver;

/* LAPACK's s<name>_ or d<name>_ from OpenBLAS (NULL without it). */
static void *sol_lapack(int dbl, const char *name) {
    static void *lib;
    static int tried;
    if (!tried) {
        tried = 1;
        lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
        if (!lib) lib = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
    }
    char full[32];
    snprintf(full, sizeof full, "%c%s_", dbl ? 'd' : 's', name);
    return lib ? dlsym(lib, full) : NULL;
}

EMU_EXPORT int cusolverDnCreate(emu_solver **h) {
    if (!h) return SOL_INVALID;
    if (!sol_lapack(0, "getrf")) return SOL_NOT_INIT; /* no LAPACK: no solver */
    *h = calloc(1, sizeof **h);
    return *h ? SOL_OK : SOL_ALLOC;
}
EMU_EXPORT int cusolverDnDestroy(emu_solver *h) {
    free(h);
    return SOL_OK;
}
EMU_EXPORT int cusolverDnSetStream(emu_solver *h, emu_stream *s) {
    if (!h) return SOL_NOT_INIT;
    h->stream = s;
    return SOL_OK;
}

/* The host view of n bytes at p, which must be memory of the handle's
 * stream's device; NULL (and a message) if not. */
static void *sol_mem(emu_solver *h, const void *p, long long n, const char *what) {
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
    if (n < 1) n = 1;
    if (!emu_mem_valid_on(d, (size_t)n, emu_stream_dev(h->stream))) {
        fprintf(stderr, "cuda emulator: cuSOLVER %s: %p (%lld bytes) is not memory of device %d\n",
                what, p, n, emu_stream_dev(h->stream));
        return NULL;
    }
    return emu_mem_host(d);
}

/* A call that may run: a handle, a stream not capturing. */
static int sol_ready(emu_solver *h) {
    EMU_COUNT(cusolverDn);
    return h && !(h->stream && h->stream->capturing);
}

static size_t sol_es(int dbl) {
    return dbl ? 8 : 4;
}

/* Workspace sizes the queries answer (the emulator's LAPACK calls make
 * their own): enough to catch a workspace the backend sized wrongly. */
static int sol_ws(int m, int n) {
    return (m > n ? m : n) + 1;
}

/* LAPACK's own workspace query and call (lwork = -1 first). */
static void *sol_work(int dbl, double q, int *lwork) {
    *lwork = q < 1 ? 1 : (int)q;
    return malloc((size_t)*lwork * sol_es(dbl));
}

static double sol_first(int dbl, const void *w) {
    return dbl ? *(const double *)w : *(const float *)w;
}

typedef void (*sol_getrf_fn)(const int *, const int *, void *, const int *, int *, int *);
typedef void (*sol_getrs_fn)(const char *, const int *, const int *, const void *, const int *,
                             const int *, void *, const int *, int *, size_t);
typedef void (*sol_potrf_fn)(const char *, const int *, void *, const int *, int *, size_t);
typedef void (*sol_geqrf_fn)(const int *, const int *, void *, const int *, void *, void *,
                             const int *, int *);
typedef void (*sol_orgqr_fn)(const int *, const int *, const int *, void *, const int *,
                             const void *, void *, const int *, int *);
typedef void (*sol_gesvd_fn)(const char *, const char *, const int *, const int *, void *,
                             const int *, void *, void *, const int *, void *, const int *, void *,
                             const int *, int *, size_t, size_t);
typedef void (*sol_syevd_fn)(const char *, const char *, const int *, void *, const int *, void *,
                             void *, const int *, int *, const int *, int *, size_t, size_t);

static int sol_getrf_bs(int dbl, emu_solver *h, int m, int n, void *A, int lda, int *lw) {
    (void)dbl, (void)A, (void)lda;
    if (!h || !lw || m < 0 || n < 0) return SOL_INVALID;
    *lw = sol_ws(m, n);
    return SOL_OK;
}

static int sol_getrf(int dbl, emu_solver *h, int m, int n, void *A, int lda, void *W, int *ipiv,
                     int *info) {
    if (!sol_ready(h)) return SOL_INTERNAL;
    if (m < 1 || n < 1 || lda < m) return SOL_INVALID;
    size_t es = sol_es(dbl);
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, "getrf A");
    void *w = sol_mem(h, W, (long long)sol_ws(m, n) * (long long)es, "getrf workspace");
    int *p = sol_mem(h, ipiv, (long long)(m < n ? m : n) * 4, "getrf ipiv");
    int *i = sol_mem(h, info, 4, "getrf info");
    if (!a || !w || !p || !i) return SOL_INVALID;
    ((sol_getrf_fn)sol_lapack(dbl, "getrf"))(&m, &n, a, &lda, p, i);
    return SOL_OK;
}

static int sol_getrs(int dbl, emu_solver *h, int trans, int n, int nrhs, const void *A, int lda,
                     const int *ipiv, void *B, int ldb, int *info) {
    if (!sol_ready(h)) return SOL_INTERNAL;
    if (n < 1 || nrhs < 0 || lda < n || ldb < n || trans < 0 || trans > 1) return SOL_INVALID;
    size_t es = sol_es(dbl);
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, "getrs A");
    int *p = sol_mem(h, ipiv, (long long)n * 4, "getrs ipiv");
    void *b = sol_mem(h, B, (long long)ldb * nrhs * (long long)es, "getrs B");
    int *i = sol_mem(h, info, 4, "getrs info");
    if (!a || !p || !b || !i) return SOL_INVALID;
    ((sol_getrs_fn)sol_lapack(dbl, "getrs"))(trans ? "T" : "N", &n, &nrhs, a, &lda, p, b, &ldb, i,
                                             1);
    return SOL_OK;
}

static int sol_potrf_bs(int dbl, emu_solver *h, int uplo, int n, void *A, int lda, int *lw) {
    (void)dbl, (void)uplo, (void)A, (void)lda;
    if (!h || !lw || n < 0) return SOL_INVALID;
    *lw = sol_ws(n, n);
    return SOL_OK;
}

static int sol_potrf(int dbl, emu_solver *h, int uplo, int n, void *A, int lda, void *W, int lw,
                     int *info) {
    if (!sol_ready(h)) return SOL_INTERNAL;
    if (n < 1 || lda < n || lw < sol_ws(n, n) || uplo < 0 || uplo > 1) return SOL_INVALID;
    size_t es = sol_es(dbl);
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, "potrf A");
    void *w = sol_mem(h, W, (long long)lw * (long long)es, "potrf workspace");
    int *i = sol_mem(h, info, 4, "potrf info");
    if (!a || !w || !i) return SOL_INVALID;
    ((sol_potrf_fn)sol_lapack(dbl, "potrf"))(uplo ? "U" : "L", &n, a, &lda, i, 1);
    return SOL_OK;
}

static int sol_geqrf_bs(int dbl, emu_solver *h, int m, int n, void *A, int lda, int *lw) {
    return sol_getrf_bs(dbl, h, m, n, A, lda, lw);
}

/* geqrf (gen 0: the reflectors of A's QR) or orgqr (gen 1: Q's first n
 * columns from k of them), with LAPACK's own workspace. */
static int sol_householder(int dbl, int gen, emu_solver *h, int m, int n, int k, void *A, int lda,
                           const void *tau, void *W, int lw, int *info) {
    const char *name = gen ? "orgqr" : "geqrf";
    if (!sol_ready(h)) return SOL_INTERNAL;
    if (m < 1 || n < 1 || lda < m || lw < sol_ws(m, n) || (gen && (n > m || k < 0 || k > n)))
        return SOL_INVALID;
    size_t es = sol_es(dbl);
    int lwork = -1;
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, name);
    void *t = sol_mem(h, tau, (long long)k * (long long)es, name);
    void *w = sol_mem(h, W, (long long)lw * (long long)es, name);
    int *i = sol_mem(h, info, 4, name);
    if (!a || !t || !w || !i) return SOL_INVALID;
    void *f = sol_lapack(dbl, name), *work = NULL;
    double q[1];
    for (int pass = 0; pass < 2; pass++) { /* the query, then the call */
        void *wk = pass ? work : (void *)q;
        if (gen)
            ((sol_orgqr_fn)f)(&m, &n, &k, a, &lda, t, wk, &lwork, i);
        else
            ((sol_geqrf_fn)f)(&m, &n, a, &lda, (void *)t, wk, &lwork, i);
        if (!pass && !(work = sol_work(dbl, sol_first(dbl, q), &lwork))) return SOL_ALLOC;
    }
    free(work);
    return SOL_OK;
}

static int sol_geqrf(int dbl, emu_solver *h, int m, int n, void *A, int lda, void *tau, void *W,
                     int lw, int *info) {
    return sol_householder(dbl, 0, h, m, n, m < n ? m : n, A, lda, tau, W, lw, info);
}

static int sol_orgqr_bs(int dbl, emu_solver *h, int m, int n, int k, const void *A, int lda,
                        const void *tau, int *lw) {
    (void)dbl, (void)k, (void)A, (void)lda, (void)tau;
    if (!h || !lw || m < 0 || n < 0) return SOL_INVALID;
    *lw = sol_ws(m, n);
    return SOL_OK;
}

static int sol_orgqr(int dbl, emu_solver *h, int m, int n, int k, void *A, int lda, const void *tau,
                     void *W, int lw, int *info) {
    return sol_householder(dbl, 1, h, m, n, k, A, lda, tau, W, lw, info);
}

static int sol_gesvd_bs(int dbl, emu_solver *h, int m, int n, int *lw) {
    (void)dbl;
    if (!h || !lw || m < 0 || n < 0) return SOL_INVALID;
    *lw = sol_ws(m, n);
    return SOL_OK;
}

static int sol_gesvd(int dbl, emu_solver *h, signed char ju, signed char jv, int m, int n, void *A,
                     int lda, void *S, void *U, int ldu, void *VT, int ldvt, void *W, int lw,
                     void *rwork, int *info) {
    if (!sol_ready(h)) return SOL_INTERNAL;
    int k = n, lwork = -1;
    if (m < n || n < 1 || lda < m || ldu < m || lw < sol_ws(m, n) || (ju != 'A' && ju != 'S') ||
        (jv != 'A' && jv != 'S') || ldvt < (jv == 'A' ? n : k))
        return SOL_INVALID;
    size_t es = sol_es(dbl);
    char jobu[2] = {(char)ju, 0}, jobvt[2] = {(char)jv, 0};
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, "gesvd A");
    void *s = sol_mem(h, S, (long long)k * (long long)es, "gesvd S");
    void *u = sol_mem(h, U, (long long)ldu * (ju == 'A' ? m : k) * (long long)es, "gesvd U");
    void *vt = sol_mem(h, VT, (long long)ldvt * n * (long long)es, "gesvd VT");
    void *w = sol_mem(h, W, (long long)lw * (long long)es, "gesvd workspace");
    void *rw = sol_mem(h, rwork, (long long)(k - 1) * (long long)es, "gesvd rwork");
    int *i = sol_mem(h, info, 4, "gesvd info");
    if (!a || !s || !u || !vt || !w || !rw || !i) return SOL_INVALID;
    sol_gesvd_fn f = (sol_gesvd_fn)sol_lapack(dbl, "gesvd");
    double q[1];
    f(jobu, jobvt, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, q, &lwork, i, 1, 1);
    void *work = sol_work(dbl, sol_first(dbl, q), &lwork);
    if (!work) return SOL_ALLOC;
    f(jobu, jobvt, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, i, 1, 1);
    free(work);
    return SOL_OK;
}

static int sol_syevd_bs(int dbl, emu_solver *h, int jobz, int uplo, int n, const void *A, int lda,
                        const void *W, int *lw) {
    (void)dbl, (void)jobz, (void)uplo, (void)A, (void)lda, (void)W;
    if (!h || !lw || n < 0) return SOL_INVALID;
    *lw = sol_ws(2 * n, n);
    return SOL_OK;
}

static int sol_syevd(int dbl, emu_solver *h, int jobz, int uplo, int n, void *A, int lda, void *Wv,
                     void *W, int lw, int *info) {
    if (!sol_ready(h)) return SOL_INTERNAL;
    if (n < 1 || lda < n || lw < sol_ws(2 * n, n) || jobz < 0 || jobz > 1 || uplo < 0 || uplo > 1)
        return SOL_INVALID;
    size_t es = sol_es(dbl);
    int lwork = -1, liwork = -1, iq = 0;
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, "syevd A");
    void *wv = sol_mem(h, Wv, (long long)n * (long long)es, "syevd W");
    void *w = sol_mem(h, W, (long long)lw * (long long)es, "syevd workspace");
    int *i = sol_mem(h, info, 4, "syevd info");
    if (!a || !wv || !w || !i) return SOL_INVALID;
    sol_syevd_fn f = (sol_syevd_fn)sol_lapack(dbl, "syevd");
    const char *jz = jobz ? "V" : "N", *ul = uplo ? "U" : "L";
    double q[1];
    f(jz, ul, &n, a, &lda, wv, q, &lwork, &iq, &liwork, i, 1, 1);
    void *work = sol_work(dbl, sol_first(dbl, q), &lwork);
    liwork = iq < 1 ? 1 : iq;
    int *iwork = malloc((size_t)liwork * sizeof *iwork);
    if (work && iwork) f(jz, ul, &n, a, &lda, wv, work, &lwork, iwork, &liwork, i, 1, 1);
    free(work);
    free(iwork);
    return work && iwork ? SOL_OK : SOL_ALLOC;
}

/* cusolverDnS<name> and cusolverDnD<name>: float * and double * are the
 * same at the ABI, so both take void *. */
#define SOL_PAIR(name, params, ...)                                                                \
    EMU_EXPORT int cusolverDnS##name params {                                                      \
        return sol_##name(0, __VA_ARGS__);                                                         \
    }                                                                                              \
    EMU_EXPORT int cusolverDnD##name params {                                                      \
        return sol_##name(1, __VA_ARGS__);                                                         \
    }
#define sol_getrf_bufferSize sol_getrf_bs
#define sol_potrf_bufferSize sol_potrf_bs
#define sol_geqrf_bufferSize sol_geqrf_bs
#define sol_orgqr_bufferSize sol_orgqr_bs
#define sol_gesvd_bufferSize sol_gesvd_bs
#define sol_syevd_bufferSize sol_syevd_bs

SOL_PAIR(getrf_bufferSize, (emu_solver * h, int m, int n, void *A, int lda, int *lw), h, m, n, A,
         lda, lw)
SOL_PAIR(getrf, (emu_solver * h, int m, int n, void *A, int lda, void *W, int *ipiv, int *info), h,
         m, n, A, lda, W, ipiv, info)
SOL_PAIR(getrs,
         (emu_solver * h, int t, int n, int nrhs, const void *A, int lda, const int *ipiv, void *B,
          int ldb, int *info),
         h, t, n, nrhs, A, lda, ipiv, B, ldb, info)
SOL_PAIR(potrf_bufferSize, (emu_solver * h, int uplo, int n, void *A, int lda, int *lw), h, uplo, n,
         A, lda, lw)
SOL_PAIR(potrf, (emu_solver * h, int uplo, int n, void *A, int lda, void *W, int lw, int *info), h,
         uplo, n, A, lda, W, lw, info)
SOL_PAIR(geqrf_bufferSize, (emu_solver * h, int m, int n, void *A, int lda, int *lw), h, m, n, A,
         lda, lw)
SOL_PAIR(geqrf,
         (emu_solver * h, int m, int n, void *A, int lda, void *tau, void *W, int lw, int *info), h,
         m, n, A, lda, tau, W, lw, info)
SOL_PAIR(orgqr_bufferSize,
         (emu_solver * h, int m, int n, int k, const void *A, int lda, const void *tau, int *lw), h,
         m, n, k, A, lda, tau, lw)
SOL_PAIR(orgqr,
         (emu_solver * h, int m, int n, int k, void *A, int lda, const void *tau, void *W, int lw,
          int *info),
         h, m, n, k, A, lda, tau, W, lw, info)
SOL_PAIR(gesvd_bufferSize, (emu_solver * h, int m, int n, int *lw), h, m, n, lw)
SOL_PAIR(gesvd,
         (emu_solver * h, signed char ju, signed char jv, int m, int n, void *A, int lda, void *S,
          void *U, int ldu, void *VT, int ldvt, void *W, int lw, void *rwork, int *info),
         h, ju, jv, m, n, A, lda, S, U, ldu, VT, ldvt, W, lw, rwork, info)
SOL_PAIR(syevd_bufferSize,
         (emu_solver * h, int jobz, int uplo, int n, const void *A, int lda, const void *W,
          int *lw),
         h, jobz, uplo, n, A, lda, W, lw)
SOL_PAIR(syevd,
         (emu_solver * h, int jobz, int uplo, int n, void *A, int lda, void *Wv, void *W, int lw,
          int *info),
         h, jobz, uplo, n, A, lda, Wv, W, lw, info)
