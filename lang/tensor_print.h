/* tensor_print: the text print(x) shows for a tensor, as PyTorch prints it
 * (torch/_tensor_str.py with the default print options: precision 4,
 * threshold 1000, edge items 3, line width 80), with Hodu's spellings:
 * `true`/`false` and `dtype=f16`. Depends on the runtime only, so the
 * formatting is unit-tested without a VM. */
#ifndef HD_TENSOR_PRINT_H
#define HD_TENSOR_PRINT_H

#include "hd_tensor.h"

/* A new NUL-terminated string from ctx's allocator (free it with
 * hd_ctx_free(ctx, s, *len + 1)), or NULL with an error in ctx. */
char *hd_tensor_format_cstr(hd_ctx *ctx, const hd_tensor *t, size_t *len);

#endif
