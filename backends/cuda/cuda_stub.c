/* The cuda backend of a build configured with HODU_CUDA=OFF (or not on
 * Linux): every device query says so, and nothing else is ever reached. */
#if !HODU_HAVE_CUDA
#include "cuda_int.h"

static hd_status stub_available(hd_ctx *ctx, int device) {
    HD_UNUSED(device);
    return hd_error(ctx, HD_ERR_RUNTIME,
                    "cuda is not available: this build has no CUDA backend (configured "
                    "with HODU_CUDA=OFF)");
}

static void *stub_alloc(hd_ctx *ctx, int device, size_t nbytes) {
    HD_UNUSED(nbytes);
    stub_available(ctx, device);
    return NULL;
}

static void stub_free(hd_ctx *ctx, int device, void *p, size_t nbytes) {
    HD_UNUSED(ctx);
    HD_UNUSED(device);
    HD_UNUSED(p);
    HD_UNUSED(nbytes);
}

static hd_status stub_copy(hd_ctx *ctx, int device, void *dst, const void *src, size_t n) {
    HD_UNUSED(dst);
    HD_UNUSED(src);
    HD_UNUSED(n);
    return stub_available(ctx, device);
}

static int stub_supports_op(hd_op op, hd_dtype dt) {
    HD_UNUSED(op);
    HD_UNUSED(dt);
    return 0;
}

static hd_status stub_run_op(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                             const hd_attrs *attrs) {
    HD_UNUSED(op);
    HD_UNUSED(out);
    HD_UNUSED(in);
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    return stub_available(ctx, 0);
}

const hd_backend hd_cuda_backend = {
    /* .name = */ "cuda",
    /* .available = */ stub_available,
    /* .alloc = */ stub_alloc,
    /* .free = */ stub_free,
    /* .to_host = */ stub_copy,
    /* .from_host = */ stub_copy,
    /* .supports_op = */ stub_supports_op,
    /* .run_op = */ stub_run_op,
    /* .takes_number = */ NULL,
    /* .copy_device = */ NULL,
    /* .collective = */ NULL,
    /* .optim = */ NULL,
    /* .memory = */ NULL,
};
#endif
