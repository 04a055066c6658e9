/* cpu_blas: how Hodu calls OpenBLAS, and oneDNN's sgemm where it is
 * installed (the cpu kernels and the llvm compiler's gemm steps). Both
 * always run on one thread: a large product is split by Hodu over the
 * context's OpenMP threads, one single-threaded gemm per block of columns
 * (or rows), so OpenBLAS's own pthreads never spin beside OpenMP's
 * (docs/runtime.md, "Threads" and "Which gemm"). */
#ifndef HD_CPU_BLAS_H
#define HD_CPU_BLAS_H

#include "hd_base.h"

#include <stdint.h>

/* m * n * k from which a gemm is split across threads (about 10 us of work
 * on one core). */
#define CPU_BLAS_PAR (1 << 20)

/* Is OpenBLAS here? The first call opens it (thread-safe, cheap after the
 * first) with one thread; every BLAS path asks first and falls back to
 * Hodu's own loops when it is not (cpu_blas_why says why). */
int cpu_blas_ready(void);
const char *cpu_blas_why(void);

/* A function of the OpenBLAS library by name (its LAPACK routines:
 * "dgetrf_", ...), or NULL when it lacks it or is not here. */
void *cpu_blas_symbol(const char *name);

/* y = op(M) x for a row-major rows x cols M (trans: M^T), x read every inc
 * elements, alpha 1, beta 0. Needs cpu_blas_ready(). */
void cpu_blas_gemv(int f64, int trans, int64_t rows, int64_t cols, const void *mat, int64_t ldm,
                   const void *vec, int64_t inc, void *out);

/* The name of the kernels OpenBLAS chose for this CPU ("Cooperlake",
 * "Haswell", ...; OPENBLAS_CORETYPE forces one), "none" without BLAS. */
const char *cpu_blas_core(void);
/* The best of OpenBLAS's x86 kernel sets ("Cooperlake", "SkylakeX", "Zen",
 * "Haswell", "Sandybridge") that this CPU and its OS can run, by the
 * instructions the CPU has rather than its model; NULL where none (or not
 * x86). When OpenBLAS falls back to "Prescott" on a CPU it does not know,
 * cpu_blas_ready() opens it again with this set. */
const char *cpu_blas_core_for_cpu(void);

/* Multiply-adds of one piece of a long gemm: stop is looked at between two
 * (about 2^28: tens of milliseconds on one core). */
#define CPU_BLAS_PIECE ((double)(1 << 28))
/* Columns (or rows) of a piece at least. Each piece packs the whole other
 * operand again, so narrow pieces cost: 16 columns made a 4096 product 3x
 * slower, 512 columns 7.5% slower (0.66 -> 0.72 s, 2 threads); 2048 keeps
 * products up to 4096 wide in at most two pieces. */
#define CPU_BLAS_PIECE_MIN 2048

/* One gemm's arguments, as cpu_blas_gemm takes them. */
typedef struct cpu_blas_args {
    int f64, ta, tb;
    int64_t m, n, k;
    double alpha;
    const void *a;
    int64_t lda;
    const void *b;
    int64_t ldb;
    double beta;
    void *c;
    int64_t ldc;
    int onednn; /* oneDNN's sgemm runs it (cpu_blas_choose) */
} cpu_blas_args;

/* f32 products of at least this many multiply-adds (and 16 rows and 16
 * columns) run on oneDNN's sgemm where it is here: 0.80-0.95x OpenBLAS's
 * time from there up on AVX-512, slower below (its calls cost about 1 us
 * more). */
#define CPU_BLAS_ONEDNN_MIN ((double)(1 << 19))
/* k per oneDNN call (cpu_blas.c: why slices) */
#define CPU_BLAS_ONEDNN_K 512

/* Sets g->onednn for the whole product g, before any split: every block
 * of it then runs on the same library, so the bits do not depend on the
 * threads. Needs cpu_blas_ready(). */
void cpu_blas_choose(cpu_blas_args *g);

/* "onednn" when oneDNN's sgemm runs the larger f32 products, "openblas"
 * when OpenBLAS runs them all, "none" without BLAS. HODU_GEMM=openblas
 * leaves oneDNN out. */
const char *cpu_blas_gemm_name(void);

/* A product with one row or one column (m or n is 1; alpha 1, beta 0, C
 * contiguous) as the matrix-vector product it is: 1 when done, 0 for a
 * gemm. The eager matmul and the llvm compiler's gemm steps both take
 * this path, so their bits agree whatever kernels OpenBLAS picked for the
 * CPU (gemm and gemv sum in another order on some). Needs
 * cpu_blas_ready(). */
int cpu_blas_matvec(const cpu_blas_args *g);

/* How a gemm of m x n x k is split over nt threads; cpu_blas_gemm and the
 * llvm compiler's gemm steps follow the same rule. None when the product
 * is small (under CPU_BLAS_PAR) or both sides are under 32; else along the
 * longer side of C, so that each thread packs only its own part of the
 * larger operand and both threads get work when one side is narrow. */
typedef enum { CPU_BLAS_SPLIT_NONE, CPU_BLAS_SPLIT_ROWS, CPU_BLAS_SPLIT_COLS } cpu_blas_split;
cpu_blas_split cpu_blas_split_of(int nt, int64_t m, int64_t n, int64_t k);

/* Start of part t of nt of [0, len), on a multiple of 16 (len for t >= nt). */
int64_t cpu_blas_part(int64_t len, int t, int nt);

/* Rows (or columns) [lo, hi) of C with one single-threaded gemm; split
 * NONE is taken as COLS. Needs cpu_blas_ready(). */
void cpu_blas_gemm_part(const cpu_blas_args *g, cpu_blas_split split, int64_t lo, int64_t hi);

/* C[m, n] = alpha op(A) op(B) + beta C, row-major (ldc >= n), f32 or f64
 * (f64 != 0), on up to nt threads when the product is large and the caller
 * is not itself on an OpenMP team. ta / tb transpose. Needs cpu_blas_ready()
 * and m, n, k, lda, ldb, ldc within int. A product of more than two pieces
 * runs piece by piece along its longer side and returns early, C
 * unfinished, when stop (may be NULL) says so. */
void cpu_blas_gemm(int nt, int f64, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                   const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                   int64_t ldc, const hd_stop *stop);

#endif
