#include "hd_base.h"
#include "hd_profile.h"
#include "hd_memo.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char hd_oom_message[] = "out of memory";

static void *hd_default_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    HD_UNUSED(ud);
    HD_UNUSED(osize);
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, nsize);
}

void hd_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "hodu: internal error: %s (%s:%d)\n", cond, file, line);
    abort();
}

/* HODU_NUM_THREADS, else the online cores (at most 64), shared among the
 * ranks mpirun started on this machine (their threads would otherwise
 * fight over the cores: 100x slower collectives measured with 4 ranks on
 * 2 cores). */
static int hd_default_threads(void) {
    const char *env = getenv("HODU_NUM_THREADS");
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long n = env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    if (!env && local && atol(local) > 1) n /= atol(local);
    if (n < 1) n = 1;
    if (n > 64) n = 64;
    return (int)n;
}

void hd_ctx_init(hd_ctx *ctx, hd_alloc_fn alloc, void *ud) {
    memset(ctx, 0, sizeof *ctx);
    ctx->alloc = alloc ? alloc : hd_default_alloc;
    ctx->alloc_ud = ud;
    ctx->fail_countdown = -1;
    ctx->nthreads = hd_default_threads();
    ctx->rng_seed = 0x853c49e6748fea9bULL;
}

static int hd_ctx_may_alloc(hd_ctx *ctx, size_t extra) {
    if (ctx->fail_countdown >= 0 && ctx->fail_countdown-- == 0) return 0;
    if (ctx->mem_limit && (extra > ctx->mem_limit || ctx->mem_used > ctx->mem_limit - extra))
        return 0;
    return 1;
}

static void *hd_ctx_oom(hd_ctx *ctx, size_t nbytes) {
    if (ctx->mem_limit && nbytes <= ((size_t)1 << 62))
        hd_error(ctx, HD_ERR_MEMORY, "%s: %zu bytes requested, %zu of %zu in use", hd_oom_message,
                 nbytes, ctx->mem_used, ctx->mem_limit);
    else
        hd_error(ctx, HD_ERR_MEMORY, "%s: %zu bytes requested", hd_oom_message, nbytes);
    return NULL;
}

void *hd_ctx_alloc(hd_ctx *ctx, size_t nbytes) {
    if (nbytes == 0) nbytes = 1;
    if (!hd_ctx_may_alloc(ctx, nbytes)) return hd_ctx_oom(ctx, nbytes);
    void *p = ctx->alloc(ctx->alloc_ud, NULL, 0, nbytes);
    if (!p) return hd_ctx_oom(ctx, nbytes);
    ctx->mem_used += nbytes;
    if (ctx->mem_used > ctx->mem_peak) ctx->mem_peak = ctx->mem_used;
    return p;
}

void *hd_ctx_calloc(hd_ctx *ctx, size_t n, size_t size) {
    size_t total;
    if (!hd_mul_overflow(n, size, &total)) return hd_ctx_oom(ctx, SIZE_MAX);
    void *p = hd_ctx_alloc(ctx, total);
    if (p) memset(p, 0, total ? total : 1);
    return p;
}

void *hd_ctx_realloc(hd_ctx *ctx, void *p, size_t osize, size_t nsize) {
    if (!p) return hd_ctx_alloc(ctx, nsize);
    if (nsize == 0) nsize = 1;
    if (osize == 0) osize = 1;
    if (nsize > osize && !hd_ctx_may_alloc(ctx, nsize - osize)) return hd_ctx_oom(ctx, nsize);
    void *q = ctx->alloc(ctx->alloc_ud, p, osize, nsize);
    if (!q) return hd_ctx_oom(ctx, nsize);
    ctx->mem_used = ctx->mem_used - osize + nsize;
    if (ctx->mem_used > ctx->mem_peak) ctx->mem_peak = ctx->mem_used;
    return q;
}

void hd_ctx_free(hd_ctx *ctx, void *p, size_t nbytes) {
    if (!p) return;
    if (nbytes == 0) nbytes = 1;
    ctx->alloc(ctx->alloc_ud, p, nbytes, 0);
    ctx->mem_used -= nbytes;
}

void hd_ctx_trim(hd_ctx *ctx) {
    for (int i = 0; i < ctx->cache_count; i++) hd_ctx_free(ctx, ctx->cache[i].p, ctx->cache[i].n);
    ctx->cache_count = 0;
    ctx->cache_bytes = 0;
}

void hd_ctx_set_cache_limit(hd_ctx *ctx, size_t bytes) {
    ctx->cache_limit = bytes;
    if (ctx->cache_bytes > bytes) hd_ctx_trim(ctx);
}

void hd_ctx_release(hd_ctx *ctx) {
    hd_memo_free(ctx); /* its results may be on a device */
    hd_profile_release(ctx);
    if (ctx->device_release) ctx->device_release(ctx);
    ctx->device_release = NULL;
    ctx->device_state = NULL;
    hd_ctx_trim(ctx);
}

/* Best fit among cached blocks of size in [nbytes, nbytes * 4/3]. */
static int hd_cache_find(const hd_ctx *ctx, size_t nbytes) {
    int best = -1;
    for (int i = 0; i < ctx->cache_count; i++) {
        size_t n = ctx->cache[i].n;
        if (n < nbytes || n - nbytes > nbytes / 3) continue;
        if (best < 0 || n < ctx->cache[best].n) best = i;
    }
    return best;
}

/* The size class of a cached block of nbytes: rounded up to a multiple of
 * an eighth of its highest power of two, from HD_BLOCK_CACHE_MIN to
 * HD_BLOCK_CACHE_ROUND; other sizes as they are. */
size_t hd_block_class(size_t nbytes) {
    if (nbytes < HD_BLOCK_CACHE_MIN || nbytes >= HD_BLOCK_CACHE_ROUND) return nbytes;
    size_t top = HD_BLOCK_CACHE_MIN;
    while (top <= nbytes / 2) top *= 2;
    size_t step = top / 8;
    return (nbytes + step - 1) / step * step;
}

void *hd_ctx_alloc_block(hd_ctx *ctx, size_t nbytes, size_t *got) {
    if (ctx->cache_limit) nbytes = hd_block_class(nbytes);
    int i = nbytes >= HD_BLOCK_CACHE_MIN ? hd_cache_find(ctx, nbytes) : -1;
    if (i >= 0) {
        void *p = ctx->cache[i].p;
        *got = ctx->cache[i].n;
        ctx->cache_bytes -= *got;
        ctx->cache[i] = ctx->cache[--ctx->cache_count];
        return p;
    }
    if (ctx->cache_count && ctx->mem_limit && nbytes <= ctx->mem_limit &&
        ctx->mem_used > ctx->mem_limit - nbytes)
        hd_ctx_trim(ctx);
    *got = nbytes;
    return hd_ctx_alloc(ctx, nbytes);
}

void hd_ctx_free_block(hd_ctx *ctx, void *p, size_t size) {
    if (!p) return;
    if (size >= HD_BLOCK_CACHE_MIN && size <= ctx->cache_limit) {
        if (ctx->cache_count == HD_BLOCK_CACHE_SLOTS ||
            ctx->cache_bytes + size > ctx->cache_limit) {
            /* make room by dropping the oldest entry */
            if (ctx->cache_count == 0) goto release;
            hd_ctx_free(ctx, ctx->cache[0].p, ctx->cache[0].n);
            ctx->cache_bytes -= ctx->cache[0].n;
            memmove(ctx->cache, ctx->cache + 1, (size_t)(--ctx->cache_count) * sizeof *ctx->cache);
            if (ctx->cache_bytes + size > ctx->cache_limit) goto release;
        }
        ctx->cache[ctx->cache_count].p = p;
        ctx->cache[ctx->cache_count].n = size;
        ctx->cache_count++;
        ctx->cache_bytes += size;
        return;
    }
release:
    hd_ctx_free(ctx, p, size);
}

char *hd_ctx_strdup(hd_ctx *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = hd_ctx_alloc(ctx, n);
    if (d) memcpy(d, s, n);
    return d;
}

void hd_ctx_strfree(hd_ctx *ctx, char *s) {
    if (s) hd_ctx_free(ctx, s, strlen(s) + 1);
}

hd_status hd_verror(hd_ctx *ctx, hd_status st, const char *fmt, va_list ap) {
    ctx->status = st;
    vsnprintf(ctx->errmsg, sizeof ctx->errmsg, fmt, ap);
    return st;
}

hd_status hd_error(hd_ctx *ctx, hd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hd_verror(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

void hd_error_clear(hd_ctx *ctx) {
    ctx->status = HD_OK;
    ctx->errmsg[0] = 0;
}

const char *hd_error_message(const hd_ctx *ctx) {
    return ctx->errmsg;
}

int hd_mul_overflow(size_t a, size_t b, size_t *out) {
    if (a && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* ---- stopping a run ---- */

int64_t hd_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int hd_stop_deadline(const hd_stop *s) {
    if (hd_now_ns() < s->deadline_ns) return 0;
    int none = 0;
    atomic_compare_exchange_strong(s->flag, &none, HD_STOP_TIME);
    return 1;
}

const char *hd_stop_reason(const hd_stop *s, char *buf, size_t n) {
    if (!s->flag || atomic_load(s->flag) != HD_STOP_TIME) return "interrupted";
    snprintf(buf, n, "time limit (%u ms) exceeded", (unsigned)s->limit_ms);
    return buf;
}

hd_status hd_ctx_stop_error(hd_ctx *ctx) {
    char buf[64];
    return hd_error(ctx, HD_ERR_LIMIT, "%s", hd_stop_reason(&ctx->stop, buf, sizeof buf));
}

/* ---- HODU_LOG ---- */

static const struct {
    const char *name, *what;
} hd_log_table[] = {
    {"compile", "every compile of compiled code, with its time"},
    {"recompile", "why compiled code compiles again, or runs eagerly from now on"},
    {"loop", "each loop in compiled code: a loop node of N iterations, or why it stays unrolled"},
    {"fallback", "llvm: each node the runtime's kernels run instead of generated code, and why"},
    {"llvm", "llvm: every function of the module as generated"},
    {"llvm-opt", "llvm: every function after optimisation"},
    {"cache", "llvm: the disk cache's hits, misses, writes and damaged entries"},
    {"cuda", "cuda: kernel cache hits and misses, sources NVRTC rejects, graphs not captured"},
    {"blas", "OpenBLAS: the kernels it uses on this CPU, and when Hodu chose others"},
    {"dist", "nn.DataParallel: each bucket's all-reduce, started during backward() or after it"},
    {"all", "every category above"},
    {"help", "this table"},
};

/* Does list s name cat (or `all`)? */
static int log_names(const char *s, const char *cat) {
    size_t n = strlen(cat);
    while (s && *s) {
        size_t k = strcspn(s, ", ");
        if ((k == n && !strncmp(s, cat, n)) || (k == 3 && !strncmp(s, "all", 3))) return 1;
        s += k;
        s += strspn(s, ", ");
    }
    return 0;
}

int hd_log_on(const char *cat) {
    return log_names(getenv("HODU_LOG"), cat);
}

static int log_known(const char *s, size_t k) {
    for (size_t i = 0; i < sizeof hd_log_table / sizeof *hd_log_table; i++)
        if (strlen(hd_log_table[i].name) == k && !strncmp(s, hd_log_table[i].name, k)) return 1;
    return 0;
}

static void log_check_once(void) {
    const char *s = getenv("HODU_LOG");
    size_t nt = sizeof hd_log_table / sizeof *hd_log_table;
    for (; s && *s; s += strspn(s, ", ")) {
        size_t k = strcspn(s, ", ");
        if (k == 4 && !strncmp(s, "help", 4)) {
            fprintf(stderr, "hodu: HODU_LOG categories (comma-separated):\n");
            for (size_t i = 0; i < nt; i++)
                fprintf(stderr, "  %-10s %s\n", hd_log_table[i].name, hd_log_table[i].what);
        } else if (!log_known(s, k)) {
            fprintf(stderr, "hodu: warning: HODU_LOG: unknown category '%.*s' (known:", (int)k, s);
            for (size_t i = 0; i < nt; i++) fprintf(stderr, " %s", hd_log_table[i].name);
            fprintf(stderr, ")\n");
        }
        s += k;
    }
}

void hd_log_check(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, log_check_once);
}
