/* The CUDA backend table: devices, the caching allocator, copies, loaded
 * kernels and launches. State lives in the context (ctx->device_state),
 * one hd_cuda_dev per device used, freed by hd_ctx_release. */
#if HODU_HAVE_CUDA
#include "cuda_int.h"

#include <stdatomic.h>
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

/* 256-thread blocks the device runs at once; a modest GPU's where the
 * driver does not say (which no driver of the supported versions does). */
static int64_t cuda_resident_blocks(const hd_cuda_api *a, CUdevice dev) {
    int sms = 0, threads = 0;
    if (a->device_get_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ||
        a->device_get_attribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                                dev) ||
        sms < 1 || threads < 256)
        return 64 * 8;
    return (int64_t)sms * (threads / 256);
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
    d->resident = cuda_resident_blocks(a, d->dev);
    return HD_OK;
}

/* The context this thread last made current, and the epoch it was made
 * in: closing a device starts a new epoch, so no thread trusts a note
 * about a context that may since have been released. */
static _Thread_local CUcontext cuda_tls_ctx;
static _Thread_local unsigned cuda_tls_epoch;
static atomic_uint cuda_epoch = 1;

static hd_status cuda_make_current(hd_ctx *ctx, const hd_cuda_api *a, hd_cuda_dev *d) {
    unsigned epoch = atomic_load_explicit(&cuda_epoch, memory_order_relaxed);
    if (cuda_tls_ctx == d->cu && cuda_tls_epoch == epoch) return HD_OK;
    if (hd_cuda_check(ctx, a->ctx_set_current(d->cu), "cuCtxSetCurrent")) return ctx->status;
    cuda_tls_ctx = d->cu;
    cuda_tls_epoch = epoch;
    return HD_OK;
}

hd_cuda_dev *hd_cuda_dev_get(hd_ctx *ctx, int device) {
    hd_cuda_state *s = ctx->device_state;
    if (s && device >= 0 && device < HD_CUDA_MAX_DEVICES && s->dev[device].ready) {
        hd_cuda_dev *d = &s->dev[device]; /* the hot path: no driver call */
        return cuda_make_current(ctx, hd_cuda_api_get(), d) ? NULL : d;
    }
    if (cuda_available(ctx, device)) return NULL;
    s = cuda_state(ctx);
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
    return cuda_make_current(ctx, a, d) ? NULL : d;
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
    if (d->live_bytes > d->peak_bytes) d->peak_bytes = d->live_bytes;
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

/* hd_backend.memory: the allocator's figures of an open device; its
 * cached blocks back to the driver (not while a graph is captured, which
 * may not wait for the stream). */
static hd_status cuda_memory(hd_ctx *ctx, int device, int req, hd_mem_stats *st) {
    hd_cuda_state *s = ctx->device_state;
    if (req == HD_MEM_TRIM) {
        for (int i = 0; i < HD_CUDA_MAX_DEVICES; i++) {
            if (device >= 0 && i != device) continue;
            if (!s || !s->dev[i].ready) continue;
            hd_cuda_dev *d = hd_cuda_dev_get(ctx, i);
            if (!d)
                hd_error_clear(ctx); /* nothing to give back then */
            else if (!d->pool)
                alloc_release_cached(hd_cuda_api_get(), d, ctx);
        }
        return HD_OK;
    }
    if (device < 0 || device >= HD_CUDA_MAX_DEVICES)
        return hd_error(ctx, HD_ERR_ARGUMENT, "cuda:%d: no such device", device);
    hd_cuda_dev *d = s && s->dev[device].ready ? &s->dev[device] : NULL;
    if (req == HD_MEM_RESET_PEAK) {
        if (d) d->peak_bytes = d->live_bytes;
        return HD_OK;
    }
    st->used = d ? d->live_bytes : 0;
    st->peak = d ? d->peak_bytes : 0;
    st->cached = d ? d->cached_bytes : 0;
    return HD_OK;
}

CUdeviceptr hd_cuda_scratch(hd_ctx *ctx, int device, size_t nbytes) {
    return (CUdeviceptr)(uintptr_t)cuda_alloc(ctx, device, nbytes ? nbytes : 1);
}

void hd_cuda_scratch_free(hd_ctx *ctx, int device, CUdeviceptr p, size_t nbytes) {
    cuda_free(ctx, device, (void *)(uintptr_t)p, nbytes ? nbytes : 1);
}

static void stage_release(const hd_cuda_api *a, hd_cuda_dev *d) {
    for (int i = 0; i < HD_CUDA_STAGE_SLOTS; i++) {
        if (d->stage[i].done) a->event_destroy(d->stage[i].done);
        if (d->stage[i].host) a->mem_free_host(d->stage[i].host);
    }
    memset(d->stage, 0, sizeof d->stage);
}

static void cuda_dev_release(hd_ctx *ctx, const hd_cuda_api *a, hd_cuda_dev *d) {
    if (!d->ready) return;
    a->ctx_set_current(d->cu);
    atomic_fetch_add_explicit(&cuda_epoch, 1, memory_order_relaxed);
    cuda_tls_ctx = NULL;
    if (d->stream) a->stream_synchronize(d->stream);
    for (hd_cuda_module *m = d->modules, *n; m; m = n) {
        n = m->next;
        a->module_unload(m->mod);
        hd_ctx_free(ctx, m, sizeof *m);
    }
    hd_ctx_free(ctx, d->kernels, d->kcap * sizeof *d->kernels);
    alloc_release_cached(a, d, ctx);
    if (d->blas) a->blas_destroy(d->blas);
    if (d->solver) a->sol_destroy(d->solver);
    hd_cuda_nccl_release(a, d);
    if (d->blas_ws) a->mem_free(d->blas_ws);
    hd_cuda_prof_release(d);
    if (d->peer_event) a->event_destroy(d->peer_event);
    stage_release(a, d); /* the stream has ended every copy */
    if (d->stream) a->stream_destroy(d->stream);
    a->primary_ctx_release(d->dev);
    memset(d, 0, sizeof *d);
}

/* ---- copies: stream-ordered; copies back wait for the stream (the host
 * reads the bytes next), copies up do not ---- */

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

/* Copies up stage through pinned memory: the caller's bytes are copied
 * into a slot and the device copies them from there, so the host goes on
 * at once, with its memory free for reuse, and never waits for the work
 * queued before (a copy from pageable memory may make the driver wait for
 * the stream, which stops the host from queueing ahead of the device).
 * Slots fill in turn; a slot is filled again from its start only after
 * waiting for its event, recorded after its last copy (work older than
 * the copies since, usually done by then). A copy bigger than a slot goes
 * a slot at a time: the host waits only for the pieces four slots back,
 * so up to 16 MiB it does not wait. Copies while a graph is captured, and
 * drivers without pinned memory or events, copy from the caller's memory
 * and wait for the stream. */
#define STAGE_BYTES ((size_t)4 << 20)

static int stage_ready(hd_cuda_dev *d, const hd_cuda_api *a) {
    if (d->stage[0].host) return 1;
    if (d->stage_failed || !a->mem_host_alloc || !a->mem_free_host || !a->events_ok) return 0;
    for (int i = 0; i < HD_CUDA_STAGE_SLOTS; i++) {
        hd_cuda_stage *s = &d->stage[i];
        if (a->mem_host_alloc(&s->host, STAGE_BYTES, 0) != CUDA_SUCCESS) s->host = NULL;
        if (!s->host || a->event_create(&s->done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
            s->done = NULL;
            stage_release(a, d);
            d->stage_failed = 1;
            return 0;
        }
    }
    d->stage_cur = 0;
    return 1;
}

static hd_status stage_copy(hd_ctx *ctx, const hd_cuda_api *a, hd_cuda_dev *d, void *dst,
                            const void *src, size_t n) {
    hd_cuda_stage *s = &d->stage[d->stage_cur];
    if (s->fill + n > STAGE_BYTES) {
        d->stage_cur = (d->stage_cur + 1) % HD_CUDA_STAGE_SLOTS;
        s = &d->stage[d->stage_cur];
        if (s->used && hd_cuda_check(ctx, a->event_synchronize(s->done), "cuEventSynchronize"))
            return ctx->status;
        s->fill = 0, s->used = 0;
    }
    char *h = (char *)s->host + s->fill;
    memcpy(h, src, n);
    if (hd_cuda_check(ctx, a->memcpy_htod((CUdeviceptr)(uintptr_t)dst, h, n, d->stream),
                      "copy to the device"))
        return ctx->status;
    s->used = 1;
    s->fill += (n + 255) & ~(size_t)255;
    if (a->event_record(s->done, d->stream) != CUDA_SUCCESS) { /* unmarked: wait now */
        a->stream_synchronize(d->stream);
        return hd_error(ctx, HD_ERR_RUNTIME, "cuda: copy to the device: cuEventRecord failed");
    }
    return HD_OK;
}

static hd_status cuda_from_host(hd_ctx *ctx, int device, void *dst, const void *src, size_t n) {
    if (n == 0) return HD_OK;
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, device);
    if (!d) return ctx->status;
    const hd_cuda_api *a = hd_cuda_api_get();
    if (!d->pool && stage_ready(d, a)) {
        for (size_t at = 0; at < n; at += STAGE_BYTES) {
            size_t k = n - at < STAGE_BYTES ? n - at : STAGE_BYTES;
            if (stage_copy(ctx, a, d, (char *)dst + at, (const char *)src + at, k))
                return ctx->status;
        }
        return HD_OK;
    }
    if (hd_cuda_check(ctx, a->memcpy_htod((CUdeviceptr)(uintptr_t)dst, src, n, d->stream),
                      "copy to the device"))
        return ctx->status;
    return hd_cuda_check(ctx, a->stream_synchronize(d->stream), "copy to the device");
}

static hd_status copy_via_host(hd_ctx *ctx, int ddev, void *dst, int sdev, const void *src,
                               size_t n) {
    void *h = hd_ctx_alloc(ctx, n);
    if (!h) return ctx->status;
    hd_status st = cuda_to_host(ctx, sdev, h, src, n);
    if (!st) st = cuda_from_host(ctx, ddev, dst, h, n);
    hd_ctx_free(ctx, h, n);
    return st;
}

/* The event that marks d's stream for a copy between devices. */
static hd_status peer_event(hd_ctx *ctx, const hd_cuda_api *a, hd_cuda_dev *d) {
    if (d->peer_event) return HD_OK;
    return hd_cuda_check(ctx, a->event_create(&d->peer_event, CU_EVENT_DISABLE_TIMING),
                         "cuEventCreate");
}

/* n bytes from device sdev's memory to device ddev's, without the host
 * waiting: on the source's stream once the destination's stream has
 * reached this point (dst may be a block its queued work still reads),
 * and the destination's stream waits for the copy. Where the driver lacks
 * peer copies or events, through host memory. */
static hd_status cuda_copy_device(hd_ctx *ctx, int ddev, void *dst, int sdev, const void *src,
                                  size_t n) {
    const hd_cuda_api *a = hd_cuda_api_get();
    if (n == 0) return HD_OK;
    if (!a->peer_ok) return copy_via_host(ctx, ddev, dst, sdev, src, n);
    hd_cuda_dev *dd = hd_cuda_dev_get(ctx, ddev);
    if (!dd || peer_event(ctx, a, dd)) return ctx->status;
    hd_cuda_dev *sd = hd_cuda_dev_get(ctx, sdev); /* current from here on */
    if (!sd || peer_event(ctx, a, sd)) return ctx->status;
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, s = (CUdeviceptr)(uintptr_t)src;
    if (hd_cuda_check(ctx, a->event_record(dd->peer_event, dd->stream), "cuEventRecord") ||
        hd_cuda_check(ctx, a->stream_wait_event(sd->stream, dd->peer_event, 0),
                      "cuStreamWaitEvent") ||
        hd_cuda_check(ctx, a->memcpy_peer(d, dd->cu, s, sd->cu, n, sd->stream),
                      "copy between devices") ||
        hd_cuda_check(ctx, a->event_record(sd->peer_event, sd->stream), "cuEventRecord"))
        return ctx->status;
    return hd_cuda_check(ctx, a->stream_wait_event(dd->stream, sd->peer_event, 0),
                         "cuStreamWaitEvent");
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
    CUresult r = hd_cuda_api_get()->module_get_function(f, mod, name);
    if (r == CUDA_SUCCESS) return HD_OK;
    char what[160];
    snprintf(what, sizeof what, "kernel %s", name);
    return hd_cuda_check(ctx, r, what);
}

/* ---- the eager kernels' table: packed key -> CUfunction ---- */

static uint64_t kernel_key(hd_op op, hd_dtype in, hd_dtype out, hd_cuda_kvariant v) {
    return ((uint64_t)op + 1) << 24 | (uint64_t)in << 16 | (uint64_t)out << 8 | (uint64_t)v;
}

static size_t kernel_slot(const hd_cuda_dev *d, uint64_t key) {
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 32) & (d->kcap - 1);
    while (d->kernels[i].key && d->kernels[i].key != key) i = (i + 1) & (d->kcap - 1);
    return i;
}

/* Room for one more entry (the table stays at most half full). */
static hd_status kernel_table_grow(hd_ctx *ctx, hd_cuda_dev *d) {
    if ((d->kcount + 1) * 2 <= d->kcap) return HD_OK;
    size_t cap = d->kcap ? d->kcap * 2 : 64, oldcap = d->kcap;
    hd_cuda_kentry *old = d->kernels, *t = hd_ctx_calloc(ctx, cap, sizeof *t);
    if (!t) return ctx->status;
    d->kernels = t;
    d->kcap = cap;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].key) d->kernels[kernel_slot(d, old[i].key)] = old[i];
    hd_ctx_free(ctx, old, oldcap * sizeof *old);
    return HD_OK;
}

/* The entry point's name, as cuda_src.c's modules define it. */
static void kernel_entry_name(hd_op op, hd_dtype in, hd_dtype out, hd_cuda_kvariant v, char *buf,
                              size_t n) {
    if (v == HD_CUDA_K_LN_STATS || v == HD_CUDA_K_LN_DW) {
        snprintf(buf, n, "k_layer_norm_%s_%s", v == HD_CUDA_K_LN_STATS ? "stats" : "dw",
                 hd_dtype_name(out));
        return;
    }
    if (v == HD_CUDA_K_OPTIM) {
        snprintf(buf, n, "k_%s_%s", hd_cuda_optim_name((int)op), hd_dtype_name(out));
        return;
    }
    hd_cuda_kernel_name(op, in, out, buf, n);
    if (v == HD_CUDA_K_FIN) strncat(buf, "_fin", n - strlen(buf) - 1);
    if (v == HD_CUDA_K_PICK) strncat(buf, "_pick", n - strlen(buf) - 1);
}

/* A miss: generate op's module, load it, look the entry point up. */
static hd_status kernel_load(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_dtype in, hd_dtype out,
                             hd_cuda_kvariant v, CUfunction *f) {
    char name[112];
    kernel_entry_name(op, in, out, v, name, sizeof name);
    hd_cuda_src s;
    hd_cuda_src_init(&s, ctx);
    if (v == HD_CUDA_K_OPTIM) {
        hd_cuda_optim_module(&s);
    } else if (!hd_cuda_src_module(&s, op)) {
        hd_cuda_src_free(&s);
        return hd_error(ctx, HD_ERR_RUNTIME, "%s has no cuda kernel", hd_op_name(op));
    }
    hd_status st = s.oom ? hd_error(ctx, HD_ERR_MEMORY, "out of memory generating a cuda kernel")
                         : hd_cuda_function_src(ctx, d, s.text, s.len, name, f);
    hd_cuda_src_free(&s);
    return st;
}

hd_status hd_cuda_kernel(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_dtype in, hd_dtype out,
                         hd_cuda_kvariant variant, CUfunction *f) {
    uint64_t key = kernel_key(op, in, out, variant);
    if (d->kcap) {
        const hd_cuda_kentry *k = &d->kernels[kernel_slot(d, key)];
        if (k->key == key) {
            *f = k->f;
            return HD_OK;
        }
    }
    if (kernel_load(ctx, d, op, in, out, variant, f) || kernel_table_grow(ctx, d))
        return ctx->status;
    hd_cuda_kentry *k = &d->kernels[kernel_slot(d, key)];
    k->key = key;
    k->f = *f;
    d->kcount++;
    return HD_OK;
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
    /* .takes_number = */ hd_cuda_takes_number,
    /* .copy_device = */ cuda_copy_device,
    /* .collective = */ hd_cuda_collective,
    /* .optim = */ hd_cuda_optim,
    /* .memory = */ cuda_memory,
};
#endif
