/* NVRTC: generated CUDA C to CUBIN, with a disk cache.
 *
 * Cache folder: the llvm compiler's (HODU_CACHE_DIR, "off" turns it off;
 * else $XDG_CACHE_HOME/hodu, else ~/.cache/hodu). An entry is
 * cuda-<key>-sm<arch>.cubin: a header (magic, format version, the 128-bit
 * key of the source text, the NVRTC version and arch, the image's size and
 * checksum) and the image. Entries are checked as the llvm cache checks its
 * own: a damaged one is removed and compiled again; writes go to a
 * temporary file that is renamed into place. */
#if HODU_HAVE_CUDA
#include "cuda_int.h"
#include "hd_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NV_MAGIC   "HODUCUDA"
#define NV_VERSION 2u

typedef struct nv_header {
    char magic[8];
    uint32_t version, arch;
    uint64_t key[2];
    int32_t nvrtc_major, nvrtc_minor;
    uint64_t size, checksum;
} nv_header;

static uint64_t nv_hash(const void *p, size_t n, uint64_t h) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ULL;
    return h;
}

static int nv_log_on(void) {
    return hd_log_on("cuda");
}

static int nv_cache_path(const hd_ctx *ctx, const nv_header *h, char *buf, size_t n) {
    char name[80];
    snprintf(name, sizeof name, "cuda-%016llx%016llx-sm%u.cubin", (unsigned long long)h->key[0],
             (unsigned long long)h->key[1], h->arch);
    return hd_cache_path(ctx, name, buf, n);
}

/* A checked entry's image, or *img NULL (a miss or a damaged entry). */
static hd_status nv_cache_get(hd_ctx *ctx, const nv_header *want, void **img, size_t *n) {
    char path[1200];
    *img = NULL;
    if (!nv_cache_path(ctx, want, path, sizeof path)) return HD_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return HD_OK;
    struct stat sb;
    nv_header h;
    int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() &&
             (size_t)sb.st_size > sizeof h && hd_cache_read_full(fd, (char *)&h, sizeof h) &&
             !memcmp(h.magic, want->magic, 8) && h.version == want->version &&
             h.arch == want->arch && h.key[0] == want->key[0] && h.key[1] == want->key[1] &&
             h.nvrtc_major == want->nvrtc_major && h.nvrtc_minor == want->nvrtc_minor &&
             h.size == (uint64_t)sb.st_size - sizeof h;
    char *p = ok ? hd_ctx_alloc(ctx, (size_t)h.size) : NULL;
    if (ok && !p) {
        close(fd);
        return ctx->status;
    }
    if (p && hd_cache_read_full(fd, p, (size_t)h.size) &&
        nv_hash(p, (size_t)h.size, 7) == h.checksum) {
        *img = p;
        *n = (size_t)h.size;
        hd_cache_touch(fd);
    } else if (p) {
        hd_ctx_free(ctx, p, (size_t)h.size);
    }
    close(fd);
    if (!*img) unlink(path);
    if (nv_log_on()) fprintf(stderr, "cuda: cache %s %s\n", *img ? "hit" : "miss", path);
    return HD_OK;
}

static void nv_cache_put(const hd_ctx *ctx, const nv_header *k, const void *img, size_t n) {
    char path[1200];
    if (!nv_cache_path(ctx, k, path, sizeof path)) return;
    nv_header h = *k;
    h.size = n;
    h.checksum = nv_hash(img, n, 7);
    hd_cache_write(path, &h, sizeof h, img, n);
}

/* The compiler's log as the error message (first lines: enough to see the
 * cause; the whole source is in HODU_LOG=cuda's output). */
static hd_status nv_fail(hd_ctx *ctx, const hd_cuda_api *a, nvrtcProgram prog, nvrtcResult r,
                         const char *src) {
    size_t n = 0;
    char log[700] = "";
    if (a->nvrtc_log_size(prog, &n) == NVRTC_SUCCESS && n > 1) {
        char *full = hd_ctx_alloc(ctx, n);
        if (full && a->nvrtc_log(prog, full) == NVRTC_SUCCESS)
            snprintf(log, sizeof log, "%s", full);
        if (full) hd_ctx_free(ctx, full, n);
    }
    if (nv_log_on()) fprintf(stderr, "cuda: NVRTC failed on:\n%s\n", src);
    return hd_error(ctx, HD_ERR_RUNTIME, "cuda: NVRTC: %s\n%s", a->nvrtc_error_string(r), log);
}

static hd_status nv_compile(hd_ctx *ctx, const hd_cuda_api *a, const char *src, int arch,
                            void **img, size_t *n) {
    nvrtcProgram prog;
    nvrtcResult r = a->nvrtc_create(&prog, src, "hodu.cu", 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return hd_error(ctx, HD_ERR_RUNTIME, "cuda: NVRTC: %s", a->nvrtc_error_string(r));
    char archopt[48];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=sm_%d", arch);
    /* --fmad=false: a multiply and an add are never contracted into one
     * FMA, so a fused kernel rounds every node as the eager kernels (one
     * op each) do, and compiled cuda code gives eager cuda's bits */
    const char *opts[] = {archopt, "--std=c++17", "-default-device", "--fmad=false"};
    r = a->nvrtc_compile(prog, 4, opts);
    hd_status st = HD_OK;
    if (r != NVRTC_SUCCESS) {
        st = nv_fail(ctx, a, prog, r, src);
    } else if ((r = a->nvrtc_cubin_size(prog, n)) != NVRTC_SUCCESS || *n == 0) {
        st = hd_error(ctx, HD_ERR_RUNTIME, "cuda: NVRTC gave no CUBIN for sm_%d", arch);
    } else if (!(*img = hd_ctx_alloc(ctx, *n))) {
        st = ctx->status;
    } else if ((r = a->nvrtc_cubin(prog, *img)) != NVRTC_SUCCESS) {
        hd_ctx_free(ctx, *img, *n);
        *img = NULL;
        st = hd_error(ctx, HD_ERR_RUNTIME, "cuda: NVRTC: %s", a->nvrtc_error_string(r));
    }
    a->nvrtc_destroy(&prog);
    return st;
}

hd_status hd_cuda_nvrtc_compile(hd_ctx *ctx, const char *src, size_t len, int arch, int use_cache,
                                void **img, size_t *n) {
    const hd_cuda_api *a = hd_cuda_api_get();
    *img = NULL;
    *n = 0;
    if (!a->nvrtc_ok)
        return hd_error(ctx, HD_ERR_RUNTIME, "cuda: cannot compile kernels: %s", a->nvrtc_error);
    nv_header k;
    memset(&k, 0, sizeof k);
    memcpy(k.magic, NV_MAGIC, 8);
    k.version = NV_VERSION;
    k.arch = (uint32_t)arch;
    k.key[0] = nv_hash(src, len, 1469598103934665603ULL);
    k.key[1] = nv_hash(src, len, 0x9E3779B97F4A7C15ULL);
    int mj = 0, mn = 0;
    a->nvrtc_version(&mj, &mn);
    k.nvrtc_major = mj;
    k.nvrtc_minor = mn;
    if (use_cache && nv_cache_get(ctx, &k, img, n)) return ctx->status;
    if (*img) return HD_OK;
    if (nv_compile(ctx, a, src, arch, img, n)) return ctx->status;
    if (use_cache) nv_cache_put(ctx, &k, *img, *n);
    return HD_OK;
}
#endif
