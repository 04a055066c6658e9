/* The CUDA backend table: devices, the caching allocator, copies, loaded
 * kernels and launches. State lives in the context (ctx->device_state),
 * one hd_cuda_dev per device used, freed by hd_ctx_release. */
#if HODU_HAVE_CUDA
#include "cuda_int.h"

#include <stdio.h>
#include <string.h>

static hd_status cuda_available(hd_ctx *ctx, int device) {
    const hd_cuda_api *a = hd_cuda_api_get();
    if (!a->driver_ok)
        return hd_error(ctx, HD_ERR_RUNTIME, "cuda is not available: %s", a->driver_error);
    if (device < 0 || device >= a->ndevices || device >= HD_CUDA_MAX_DEVICES)
        return hd_error(ctx, HD_ERR_RUNTIME, "cuda:%d: no such device (%d CUDA device%s)", device,
                        a->ndevices, a->ndevices == 1 ? "" : "s");
    return HD_OK;
}

/* ---- per-context state ---- */

static void cuda_dev_release(hd_ctx *ctx, const hd_cuda_api *a, hd_cuda_dev *d);

static void cuda_state_release(hd_ctx *ctx) {
    hd_cuda_state *s = ctx->device_state;
    if (!s) return;
    const hd_cuda_api *a = hd_cuda_api_get();
    for (int i = 0; i < HD_CUDA_MAX_DEVICES; i++) cuda_dev_release(ctx, a, &s->dev[i]);
    hd_ctx_free(ctx, s, sizeof *s);
}

static hd_cuda_state *cuda_state(hd_ctx *ctx) {
    if (ctx->device_state) return ctx->device_state;
    hd_cuda_state *s = hd_ctx_calloc(ctx, 1, sizeof *s);
    if (!s) return NULL;
    ctx->device_state = s;
    ctx->device_release = cuda_state_release;
    return s;
}

static hd_status cuda_dev_open(hd_ctx *ctx, const hd_cuda_api *a, hd_cuda_dev *d, int device) {
    int major = 0, minor = 0;
    if (hd_cuda_check(ctx, a->device_get(&d->dev, device), "cuDeviceGet") ||
        hd_cuda_check(ctx, a->primary_ctx_retain(&d->cu, d->dev), "cuDevicePrimaryCtxRetain"))
        return ctx->status;
    d->ready = 1; /* from here on release undoes what was made */
    if (hd_cuda_check(ctx, a->ctx_set_current(d->cu), "cuCtxSetCurrent") ||
        hd_cuda_check(ctx, a->stream_create(&d->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"))
        return ctx->status;
    a->device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
    a->device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev);
    d->arch = major * 10 + minor;
    return hd_cuda_check(ctx, a->mem_alloc(&d->flag, sizeof(int)), "cuMemAlloc");
}

hd_cuda_dev *hd_cuda_dev_get(hd_ctx *ctx, int device) {
    if (cuda_available(ctx, device)) return NULL;
    hd_cuda_state *s = cuda_state(ctx);
    if (!s) return NULL;
    const hd_cuda_api *a = hd_cuda_api_get();
    hd_cuda_dev *d = &s->dev[device];
    if (!d->ready && cuda_dev_open(ctx, a, d, device)) {
        hd_status st = ctx->status;
        char msg[HD_ERRMSG_MAX];
        memcpy(msg, ctx->errmsg, sizeof msg);
        cuda_dev_release(ctx, a, d);
        hd_error(ctx, st, "%s", msg);
        return NULL;
    }
    if (hd_cuda_check(ctx, a->ctx_set_current(d->cu), "cuCtxSetCurrent")) return NULL;
    return d;
}

/* ---- caching allocator ----
 *
 * As PyTorch's: requests are rounded to a size class (512 bytes up to
 * 1 MiB, then 2 MiB multiples); a freed block goes to its class's free
 * list and is handed out again for the next request of that class, in
 * stream order (one stream per device and context, so reuse needs no
 * event). When cuMemAlloc fails, every cached block is released and the
 * allocation retried once. */

static size_t alloc_round(size_t n) {
    const size_t small = (size_t)1 << 20, big = (size_t)2 << 20;
    if (n <= small) return (n + 511) & ~(size_t)511;
    return (n + big - 1) / big * big;
}

static int alloc_bin(size_t size) {
    int b = 0;
    while (b < HD_CUDA_BINS - 1 && ((size_t)1 << (b + 1)) <= size) b++;
    return b;
}

static void alloc_release_cached(const hd_cuda_api *a, hd_cuda_dev *d, hd_ctx *ctx) {
    if (d->stream) a->stream_synchronize(d->stream);
    for (int b = 0; b < HD_CUDA_BINS; b++) {
        while (d->bins[b]) {
            hd_cuda_block *k = d->bins[b];
            d->bins[b] = k->next;
            a->mem_free(k->p);
            hd_ctx_free(ctx, k, sizeof *k);
        }
    }
    d->cached_bytes = 0;
}

/* A block of exactly size from the list at pp (0: none). */
static CUdeviceptr alloc_take_from(hd_cuda_block **pp, hd_ctx *ctx, size_t size) {
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->size != size) continue;
        hd_cuda_block *k = *pp;
        CUdeviceptr p = k->p;
        *pp = k->next;
        hd_ctx_free(ctx, k, sizeof *k);
        return p;
    }
    return 0;
}

static CUdeviceptr alloc_take(hd_cuda_dev *d, hd_ctx *ctx, size_t size) {
    CUdeviceptr p = d->pool ? alloc_take_from(&d->pool->free, ctx, size) : 0;
    if (p) return p;
    p = alloc_take_from(&d->bins[alloc_bin(size)], ctx, size);
    if (p) d->cached_bytes -= size;
    return p;
}

static void *cuda_alloc(hd_ctx *ctx, int device, size_t nbytes) {
    static char empty_marker;
    if (nbytes == 0) return &empty_marker; /* empty tensors own no memory */
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, device);
    if (!d) return NULL;
    const hd_cuda_api *a = hd_cuda_api_get();
    size_t size = alloc_round(nbytes);
    CUdeviceptr p = alloc_take(d, ctx, size);
    if (!p) {
        CUresult r = a->mem_alloc(&p, size);
        if (r == CUDA_ERROR_OUT_OF_MEMORY && d->cached_bytes) {
            alloc_release_cached(a, d, ctx);
            r = a->mem_alloc(&p, size);
        }
        if (hd_cuda_check(ctx, r, "cuMemAlloc")) return NULL;
    }
    d->live_bytes += size;
    return (void *)(uintptr_t)p;
}

static void cuda_free(hd_ctx *ctx, int device, void *p, size_t nbytes) {
    if (nbytes == 0 || !p) return;
    const hd_cuda_api *a = hd_cuda_api_get();
    hd_cuda_state *s = ctx->device_state;
    size_t size = alloc_round(nbytes);
    hd_cuda_block *k = s && s->dev[device].ready ? hd_ctx_alloc(ctx, sizeof *k) : NULL;
    if (!k) { /* no state (released) or no host memory for the node: give it back */
        if (s && s->dev[device].ready) a->stream_synchronize(s->dev[device].stream);
        a->mem_free((CUdeviceptr)(uintptr_t)p);
        if (s) s->dev[device].live_bytes -= size;
        hd_error_clear(ctx);
        return;
    }
    hd_cuda_dev *d = &s->dev[device];
    k->p = (CUdeviceptr)(uintptr_t)p;
    k->size = size;
    d->live_bytes -= size;
    if (d->pool) { /* a captured graph replays into it */
        k->next = d->pool->free;
        d->pool->free = k;
        return;
    }
    int b = alloc_bin(size);
    k->next = d->bins[b];
    d->bins[b] = k;
    d->cached_bytes += size;
}

void hd_cuda_pool_begin(hd_cuda_dev *d, hd_cuda_pool *pool) {
    d->pool = pool;
}

void hd_cuda_pool_end(hd_cuda_dev *d) {
    d->pool = NULL;
}

void hd_cuda_pool_release(hd_cuda_dev *d, hd_cuda_pool *pool) {
    while (pool->free) {
        hd_cuda_block *k = pool->free;
        pool->free = k->next;
        int b = alloc_bin(k->size);
        k->next = d->bins[b];
        d->bins[b] = k;
        d->cached_bytes += k->size;
    }
}

CUdeviceptr hd_cuda_scratch(hd_ctx *ctx, int device, size_t nbytes) {
    return (CUdeviceptr)(uintptr_t)cuda_alloc(ctx, device, nbytes ? nbytes : 1);
}

void hd_cuda_scratch_free(hd_ctx *ctx, int device, CUdeviceptr p, size_t nbytes) {
    cuda_free(ctx, device, (void *)(uintptr_t)p, nbytes ? nbytes : 1);
}

static void cuda_dev_release(hd_ctx *ctx, const hd_cuda_api *a, hd_cuda_dev *d) {
    if (!d->ready) return;
    a->ctx_set_current(d->cu);
    if (d->stream) a->stream_synchronize(d->stream);
    for (hd_cuda_module *m = d->modules, *n; m; m = n) {
        n = m->next;
        a->module_unload(m->mod);
        hd_ctx_free(ctx, m, sizeof *m);
    }
    alloc_release_cached(a, d, ctx);
    if (d->flag) a->mem_free(d->flag);
    if (d->blas) a->blas_destroy(d->blas);
    if (d->stream) a->stream_destroy(d->stream);
    a->primary_ctx_release(d->dev);
    memset(d, 0, sizeof *d);
}

/* ---- copies: stream-ordered, then synchronized (host memory is pageable
 * and the caller may reuse it at once) ---- */

static hd_status cuda_to_host(hd_ctx *ctx, int device, void *dst, const void *src, size_t n) {
    if (n == 0) return HD_OK; /* empty tensors own no device memory */
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, device);
    if (!d) return ctx->status;
    const hd_cuda_api *a = hd_cuda_api_get();
    if (hd_cuda_check(ctx, a->memcpy_dtoh(dst, (CUdeviceptr)(uintptr_t)src, n, d->stream),
                      "copy to the host"))
        return ctx->status;
    return hd_cuda_check(ctx, a->stream_synchronize(d->stream), "copy to the host");
}

static hd_status cuda_from_host(hd_ctx *ctx, int device, void *dst, const void *src, size_t n) {
    if (n == 0) return HD_OK;
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, device);
    if (!d) return ctx->status;
    const hd_cuda_api *a = hd_cuda_api_get();
    if (hd_cuda_check(ctx, a->memcpy_htod((CUdeviceptr)(uintptr_t)dst, src, n, d->stream),
                      "copy to the device"))
        return ctx->status;
    return hd_cuda_check(ctx, a->stream_synchronize(d->stream), "copy to the device");
}

/* ---- modules: compiled from generated source, cached by its hash ---- */

static uint64_t src_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static hd_status module_load(hd_ctx *ctx, hd_cuda_dev *d, const char *src, size_t len,
                             CUmodule *out) {
    uint64_t key = src_hash(src, len);
    for (hd_cuda_module *m = d->modules; m; m = m->next)
        if (m->key == key) {
            *out = m->mod;
            return HD_OK;
        }
    void *img = NULL;
    size_t n = 0;
    if (hd_cuda_nvrtc_compile(ctx, src, len, d->arch, 1, &img, &n)) return ctx->status;
    hd_cuda_module *m = hd_ctx_alloc(ctx, sizeof *m);
    hd_status st = m ? HD_OK : ctx->status;
    if (!st)
        st = hd_cuda_check(ctx, hd_cuda_api_get()->module_load_data(&m->mod, img),
                           "cuModuleLoadData");
    hd_ctx_free(ctx, img, n);
    if (st) {
        if (m) hd_ctx_free(ctx, m, sizeof *m);
        return st;
    }
    m->key = key;
    m->next = d->modules;
    d->modules = m;
    *out = m->mod;
    return HD_OK;
}

hd_status hd_cuda_function_src(hd_ctx *ctx, hd_cuda_dev *d, const char *src, size_t len,
                               const char *name, CUfunction *f) {
    CUmodule mod = NULL;
    if (module_load(ctx, d, src, len, &mod)) return ctx->status;
    char what[160];
    snprintf(what, sizeof what, "kernel %s", name);
    return hd_cuda_check(ctx, hd_cuda_api_get()->module_get_function(f, mod, name), what);
}

hd_status hd_cuda_function(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, const char *name, CUfunction *f) {
    hd_cuda_src s;
    hd_cuda_src_init(&s, ctx);
    if (!hd_cuda_src_module(&s, op)) {
        hd_cuda_src_free(&s);
        return hd_error(ctx, HD_ERR_RUNTIME, "%s has no cuda kernel", hd_op_name(op));
    }
    hd_status st = s.oom ? hd_error(ctx, HD_ERR_MEMORY, "out of memory generating a cuda kernel")
                         : hd_cuda_function_src(ctx, d, s.text, s.len, name, f);
    hd_cuda_src_free(&s);
    return st;
}

hd_status hd_cuda_launch_grid(hd_ctx *ctx, hd_cuda_dev *d, CUfunction f, unsigned grid,
                              unsigned block, void **args) {
    if (grid == 0) return HD_OK;
    return hd_cuda_check(
        ctx, hd_cuda_api_get()->launch_kernel(f, grid, 1, 1, block, 1, 1, 0, d->stream, args, NULL),
        "cuLaunchKernel");
}

hd_status hd_cuda_launch(hd_ctx *ctx, hd_cuda_dev *d, CUfunction f, int64_t n, void **args) {
    int64_t blocks = (n + 255) / 256;
    if (blocks > 65535 * 8) blocks = 65535 * 8; /* kernels loop over the rest */
    return hd_cuda_launch_grid(ctx, d, f, (unsigned)blocks, 256, args);
}

static int cuda_supports_op(hd_op op, hd_dtype dt) {
    return hd_cuda_has_op(op) && hd_cpu_backend.supports_op(op, dt);
}

const hd_backend hd_cuda_backend = {
    /* .name = */ "cuda",
    /* .available = */ cuda_available,
    /* .alloc = */ cuda_alloc,
    /* .free = */ cuda_free,
    /* .to_host = */ cuda_to_host,
    /* .from_host = */ cuda_from_host,
    /* .supports_op = */ cuda_supports_op,
    /* .run_op = */ hd_cuda_run_op,
};
#endif
