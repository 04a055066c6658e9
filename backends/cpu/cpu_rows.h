/* cpu_rows: f32 products of few rows, C[m, n] = A[m, k] B[k, n] with m <=
 * HD_ROWS_M (batch-1 inference: a matrix-vector product), in vector loops
 * of Hodu's own instead of OpenBLAS (whose gemv and small gemm pay set-up
 * and threading decisions at every call). The eager matmul and the llvm
 * compiler's gemm steps both run them, so compiled and eager products of
 * few rows give the same bits. b row-major: blocks of columns kept in
 * registers while k runs down b's rows (axpy form); b transposed (a Linear
 * layer's [out, in] weight): dot products along its rows. Sums are f32 with
 * FMA where the build has it. Each column is computed on its own, so any
 * split of the columns over threads gives the same bits. */
#ifndef HD_CPU_ROWS_H
#define HD_CPU_ROWS_H

#include "hd_base.h"

#include <stdint.h>

/* Rows up to which these loops run instead of BLAS. */
#define HD_ROWS_M 4
/* m * n * k from which the columns are split over threads (about 10 us of
 * work on one core; waking a second thread for less loses on a busy
 * machine), when there are at least 32 columns. */
#define HD_ROWS_PAR (1 << 20)

/* One product; strides in elements, C contiguous [m, n]. */
typedef struct hd_rows_job {
    const float *a, *b;
    float *c;
    int64_t m, n, k;
    int64_t ars, acs, brs, bcs;
    /* looked at every HD_INTERRUPT_CHUNK steps of k; on a stop the loops
     * return early and C is left unfinished (the caller fails). NULL: never */
    const hd_stop *stop;
} hd_rows_job;

/* Columns [c0, c1) of C. */
typedef void (*hd_rows_fn)(const hd_rows_job *j, int64_t c0, int64_t c1);

/* The loops for j, or NULL when they do not apply (m not in 1..HD_ROWS_M,
 * or neither operand laid out for them). */
hd_rows_fn hd_cpu_rows_fn(const hd_rows_job *j);

/* Threads for j on a context of nt: 1 below HD_ROWS_PAR or 32 columns. */
int hd_cpu_rows_threads(const hd_rows_job *j, int nt);

/* Start of part t of nt of [0, n), a multiple of align (but the ends). */
int64_t hd_cpu_rows_part(int64_t n, int t, int nt, int64_t align);

/* f over all columns, on nt threads (16-column parts). */
void hd_cpu_rows_run(const hd_rows_job *j, hd_rows_fn f, int nt);

#endif
