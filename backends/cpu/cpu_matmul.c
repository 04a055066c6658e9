#include "cpu_kernels.h"

hd_status hd_cpu_matmul(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                        const hd_attrs *attrs) {
    HD_UNUSED(out);
    HD_UNUSED(in);
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    return hd_error(ctx, HD_ERR_RUNTIME, "%s: no cpu kernel yet", hd_op_name(op));
}

int hd_cpu_matmul_supports(hd_op op, hd_dtype dt) {
    HD_UNUSED(op);
    HD_UNUSED(dt);
    return 0;
}
