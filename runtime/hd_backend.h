/* hd_backend: a device is a table of functions (STYLE 7). The core calls
 * through the table and never #ifdefs on a backend; optional slots are NULL. */
#ifndef HD_BACKEND_H
#define HD_BACKEND_H

#include "hd_op.h"

typedef struct hd_backend {
    const char *name; /* "cpu", "cuda" */
    /* Is the device usable in this process? Fills ctx's error if not. */
    hd_status (*available)(hd_ctx *ctx, int device);
    /* Device memory: data pointers the backend's kernels understand. */
    void *(*alloc)(hd_ctx *ctx, int device, size_t nbytes);
    void (*free)(hd_ctx *ctx, int device, void *p, size_t nbytes);
    /* Copies between host memory and this backend's memory. */
    hd_status (*to_host)(hd_ctx *ctx, int device, void *dst, const void *src, size_t nbytes);
    hd_status (*from_host)(hd_ctx *ctx, int device, void *dst, const void *src, size_t nbytes);
    /* Does run_op handle this op for inputs of this dtype? */
    int (*supports_op)(hd_op op, hd_dtype dt);
    /* Compute op into out (already allocated with the shape rule's shape and
     * dtype). Inputs have been cast to the dtypes the rule asked for. */
    hd_status (*run_op)(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                        const hd_attrs *attrs);
} hd_backend;

extern const hd_backend hd_cpu_backend;

/* Find a backend by device string ("cpu", "cuda", "cuda:1"). */
hd_status hd_backend_parse_device(hd_ctx *ctx, const char *spec, const hd_backend **be,
                                  int *device);

#endif
