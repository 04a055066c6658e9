/* cpu_blas: how Hodu calls OpenBLAS (the cpu kernels and the llvm
 * compiler's gemm steps). OpenBLAS always runs on one thread: a large
 * product is split by Hodu over the context's OpenMP threads, one
 * single-threaded gemm per block of columns (or rows), so OpenBLAS's own
 * pthreads never spin beside OpenMP's (docs/runtime.md, "Threads"). */
#ifndef HD_CPU_BLAS_H
#define HD_CPU_BLAS_H

#include "hd_base.h"

#include <stdint.h>

/* m * n * k from which a gemm is split across threads (about 10 us of work
 * on one core). */
#define CPU_BLAS_PAR (1 << 20)

/* Once per process, before the first BLAS call (thread-safe, cheap after
 * the first): one OpenBLAS thread. */
void cpu_blas_init(void);

/* The name of the kernels OpenBLAS chose for this CPU ("Cooperlake",
 * "Haswell", ...; OPENBLAS_CORETYPE forces one), "none" without BLAS. */
const char *cpu_blas_core(void);

/* Multiply-adds of one piece of a long gemm: stop is looked at between two
 * (about 2^28: tens of milliseconds on one core). */
#define CPU_BLAS_PIECE ((double)(1 << 28))
/* Columns (or rows) of a piece at least: narrower panels lose BLAS speed
 * (16 columns made a 4096 product three times slower). */
#define CPU_BLAS_PIECE_MIN 512

/* C[m, n] = alpha op(A) op(B) + beta C, row-major (ldc >= n), f32 or f64
 * (f64 != 0), on up to nt threads when the product is large and the caller
 * is not itself on an OpenMP team. ta / tb transpose. Needs a BLAS build
 * and m, n, k, lda, ldb, ldc within int. A product of more than two pieces
 * runs piece by piece along its longer side and returns early, C
 * unfinished, when stop (may be NULL) says so. */
void cpu_blas_gemm(int nt, int f64, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                   const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                   int64_t ldc, const hd_stop *stop);

#endif
