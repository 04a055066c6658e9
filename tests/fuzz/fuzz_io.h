/* Checks shared by the tensor-file loader targets (fuzz_npy.c, fuzz_npz.c,
 * fuzz_safetensors.c, fuzz_csv.c).
 *
 * Each load runs on a fresh context capped at FUZZ_IO_LIMIT bytes. A loader
 * must refuse a size its file cannot back before allocating it, so its peak
 * memory must stay within what the input justifies (fuzz_io_budget), and
 * running out of memory is a finding unless an allocation failure was
 * injected or the budget itself passes the cap. Every failure must be a
 * clean HD_ERR_IO (or HD_ERR_MEMORY) status with a message, and everything
 * allocated must be given back. */
#ifndef FUZZ_IO_H
#define FUZZ_IO_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hd_io.h"

#define FUZZ_IO_LIMIT ((size_t)1 << 20)

/* A broken check is a finding: say which, then abort for libFuzzer. */
static inline void fuzz_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, cond);
    abort();
}
#define fuzz_check(cond) ((cond) ? (void)0 : fuzz_fail(#cond, __FILE__, __LINE__))

/* Bytes a loader may use for n input bytes when each input byte can stand
 * for `expand` output bytes (deflate: 1032), with room for the tensor
 * structs and names of a list. */
static inline size_t fuzz_io_budget(size_t n, size_t expand) {
    return 16 * expand * n + ((size_t)64 << 10);
}

/* A context for one load; fail_at >= 0 fails that allocation. */
static inline void fuzz_io_begin(hd_ctx *ctx, long fail_at) {
    hd_ctx_init(ctx, NULL, NULL);
    ctx->mem_limit = FUZZ_IO_LIMIT;
    ctx->nthreads = 1;
    ctx->fail_countdown = fail_at;
}

/* The result of a load that returned st (got: it produced something). */
static inline void fuzz_io_result(hd_ctx *ctx, hd_status st, int got, size_t budget, long fail_at) {
    ctx->fail_countdown = -1;
    fuzz_check((st == HD_OK) == (got != 0));
    fuzz_check(st == HD_OK || st == HD_ERR_IO || st == HD_ERR_MEMORY);
    if (st != HD_OK) {
        const char *msg = hd_error_message(ctx);
        fuzz_check(ctx->status == st && msg && msg[0]);
    }
    if (st == HD_ERR_MEMORY) fuzz_check(fail_at >= 0 || budget > FUZZ_IO_LIMIT);
    fuzz_check(ctx->mem_peak <= budget);
}

/* After the caller freed what it got: nothing may be left allocated. */
static inline void fuzz_io_end(hd_ctx *ctx) {
    fuzz_check(ctx->mem_used == 0);
    hd_ctx_release(ctx);
}

/* Same dtype, shape and element bytes. */
static inline void fuzz_io_same_tensor(const hd_tensor *a, const hd_tensor *b) {
    fuzz_check(a->dtype == b->dtype && a->ndim == b->ndim && a->numel == b->numel);
    for (int i = 0; i < a->ndim; i++) fuzz_check(a->shape[i] == b->shape[i]);
    /* (empty tensors have strides hd_tensor_is_contiguous does not accept) */
    fuzz_check(a->numel == 0 || (hd_tensor_is_contiguous(a) && hd_tensor_is_contiguous(b)));
    size_t n = hd_tensor_nbytes(a);
    fuzz_check(n == hd_tensor_nbytes(b));
    if (n) fuzz_check(memcmp(hd_tensor_data(a), hd_tensor_data(b), n) == 0);
}

/* Same names, tensors and metadata, in the same order. */
static inline void fuzz_io_same_list(const hd_io_list *a, const hd_io_list *b) {
    fuzz_check(a->count == b->count && a->nmeta == b->nmeta);
    for (size_t i = 0; i < a->count; i++) {
        fuzz_check(strcmp(a->entries[i].name, b->entries[i].name) == 0);
        fuzz_io_same_tensor(a->entries[i].tensor, b->entries[i].tensor);
    }
    for (size_t i = 0; i < a->nmeta; i++)
        fuzz_check(strcmp(a->meta[i].key, b->meta[i].key) == 0 &&
                   strcmp(a->meta[i].value, b->meta[i].value) == 0);
}

#endif
