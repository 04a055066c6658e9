/* The `cuda` compiler (compiled(compiler = "cuda")): runs the optimised
 * graph on a CUDA device with the backend's NVRTC kernels, one launch per
 * node, matmul through cuBLAS, constants placed on the device once at
 * compile time (the interp executor of hd_interp.c, on the cuda device).
 * Fused kernels per fusion group and CUDA Graph capture are not done yet
 * (docs/cuda.md). The device is the options' device when it is a cuda one,
 * else cuda:0; without a usable GPU every entry point is a clear error. */
#include "hd_compile.h"

#include <string.h>

/* opt with its device made a cuda one, in buf. */
static hd_jit_options cj_options(const hd_jit_options *opt) {
    hd_jit_options o;
    if (opt)
        o = *opt;
    else
        hd_jit_options_init(&o);
    if (!o.device || strncmp(o.device, "cuda", 4) != 0) o.device = "cuda:0";
    return o;
}

static hd_status cj_available(hd_ctx *ctx, const hd_jit_options *opt) {
    hd_jit_options o = cj_options(opt);
    const hd_backend *be;
    int dev;
    if (hd_backend_open_device(ctx, o.device, &be, &dev)) {
        char msg[HD_ERRMSG_MAX];
        memcpy(msg, ctx->errmsg, sizeof msg);
        return hd_error(ctx, HD_ERR_RUNTIME, "compiler 'cuda': %s", msg);
    }
    return HD_OK;
}

static hd_status cj_compile(hd_ctx *ctx, const hd_ir_graph *g, const hd_jit_options *opt,
                            hd_jit_exec **out) {
    hd_jit_options o = cj_options(opt);
    if (cj_available(ctx, &o)) return ctx->status;
    return hd_jit_interp.compile(ctx, g, &o, out);
}

static hd_status cj_run(hd_ctx *ctx, hd_jit_exec *e, hd_tensor *const *inputs, int ninputs,
                        hd_tensor **outputs, int noutputs) {
    return hd_jit_interp.run(ctx, e, inputs, ninputs, outputs, noutputs);
}

static void cj_free(hd_ctx *ctx, hd_jit_exec *e) {
    hd_jit_interp.free(ctx, e);
}

static void cj_stats(const hd_jit_exec *e, hd_jit_stats *st) {
    hd_jit_interp.stats(e, st);
}

static const hd_ir_graph *cj_graph(const hd_jit_exec *e) {
    return hd_jit_interp.graph(e);
}

const hd_jit_compiler hd_jit_cuda = {
    /* .name = */ "cuda",
    /* .available = */ cj_available,
    /* .compile = */ cj_compile,
    /* .run = */ cj_run,
    /* .free = */ cj_free,
    /* .stats = */ cj_stats,
    /* .graph = */ cj_graph,
};
