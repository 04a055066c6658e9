/* The CPU backend table: host memory, kernels routed by op kind. */
#include "cpu_kernels.h"

#include <string.h>

int hd_cpu_avx512(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
#else
    return 0;
#endif
}

static hd_status cpu_available(hd_ctx *ctx, int device) {
    if (device != 0) return hd_error(ctx, HD_ERR_RUNTIME, "there is only one cpu device (cpu:0)");
    return HD_OK;
}

/* 64-byte aligned so vector loads never straddle a cache line at the start.
 * The block comes from the context, possibly reused from its
 * block cache; a small header before the aligned data keeps the block's
 * address and size for cpu_free. */
typedef struct cpu_block_header {
    void *raw;
    size_t size;
} cpu_block_header;

#define CPU_ALIGN 64
#define CPU_PAD   (CPU_ALIGN + sizeof(cpu_block_header))

static void *cpu_alloc(hd_ctx *ctx, int device, size_t nbytes) {
    HD_UNUSED(device);
    if (nbytes > SIZE_MAX - CPU_PAD) {
        hd_error(ctx, HD_ERR_MEMORY, "out of memory: %zu bytes requested", nbytes);
        return NULL;
    }
    size_t got;
    char *raw = hd_ctx_alloc_block(ctx, nbytes + CPU_PAD, &got);
    if (!raw) return NULL;
    uintptr_t a =
        ((uintptr_t)(raw + sizeof(cpu_block_header)) + CPU_ALIGN - 1) & ~(uintptr_t)(CPU_ALIGN - 1);
    cpu_block_header *h = (cpu_block_header *)a - 1;
    h->raw = raw;
    h->size = got;
    return (void *)a;
}

static void cpu_free(hd_ctx *ctx, int device, void *p, size_t nbytes) {
    HD_UNUSED(device);
    HD_UNUSED(nbytes);
    if (!p) return;
    cpu_block_header *h = (cpu_block_header *)p - 1;
    hd_ctx_free_block(ctx, h->raw, h->size);
}

static hd_status cpu_copy(hd_ctx *ctx, int device, void *dst, const void *src, size_t n) {
    HD_UNUSED(ctx);
    HD_UNUSED(device);
    if (n) memcpy(dst, src, n);
    return HD_OK;
}

typedef hd_status (*cpu_family_fn)(hd_ctx *, hd_op, hd_tensor *, hd_tensor *const *, int,
                                   const hd_attrs *);
typedef int (*cpu_supports_fn)(hd_op, hd_dtype);

static const struct {
    cpu_family_fn run;
    cpu_supports_fn supports;
} cpu_families[HD_KIND_COUNT] = {
    [HD_KIND_CREATE] = {hd_cpu_create, hd_cpu_create_supports},
    [HD_KIND_UNARY] = {hd_cpu_elementwise, hd_cpu_elementwise_supports},
    [HD_KIND_BINARY] = {hd_cpu_elementwise, hd_cpu_elementwise_supports},
    [HD_KIND_COMPARE] = {hd_cpu_elementwise, hd_cpu_elementwise_supports},
    [HD_KIND_TERNARY] = {hd_cpu_elementwise, hd_cpu_elementwise_supports},
    [HD_KIND_REDUCE] = {hd_cpu_reduce, hd_cpu_reduce_supports},
    [HD_KIND_MATMUL] = {hd_cpu_matmul, hd_cpu_matmul_supports},
    [HD_KIND_VIEW] = {NULL, NULL},
    [HD_KIND_SHAPE] = {hd_cpu_shape, hd_cpu_shape_supports},
    [HD_KIND_INDEX] = {hd_cpu_index, hd_cpu_index_supports},
    [HD_KIND_NN] = {hd_cpu_nn, hd_cpu_nn_supports},
    [HD_KIND_GRAD] = {hd_cpu_grad, hd_cpu_grad_supports},
    [HD_KIND_LINALG] = {hd_cpu_linalg, hd_cpu_linalg_supports},
};

static int cpu_supports_op(hd_op op, hd_dtype dt) {
    cpu_supports_fn f = cpu_families[hd_op_infos[op].kind].supports;
    return f && f(op, dt);
}

static hd_status cpu_run_op(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                            const hd_attrs *attrs) {
    cpu_family_fn f = cpu_families[hd_op_infos[op].kind].run;
    if (!f) return hd_error(ctx, HD_ERR_RUNTIME, "%s has no cpu kernel", hd_op_name(op));
    return f(ctx, op, out, in, nin, attrs);
}

const hd_backend hd_cpu_backend = {
    /* .name = */ "cpu",
    /* .available = */ cpu_available,
    /* .alloc = */ cpu_alloc,
    /* .free = */ cpu_free,
    /* .to_host = */ cpu_copy,
    /* .from_host = */ cpu_copy,
    /* .supports_op = */ cpu_supports_op,
    /* .run_op = */ cpu_run_op,
    /* .takes_number = */ NULL,
    /* .copy_device = */ NULL,
    /* .collective = */ NULL,
    /* .optim = */ hd_cpu_optim,
    /* .memory = */ NULL,
};
