/* The disk cache of object files.
 *
 * Folder: HODU_CACHE_DIR ("off" turns the cache off), else
 * $XDG_CACHE_HOME/hodu, else ~/.cache/hodu; made with mode 0700. An entry
 * is llvm-<key>.o: a header (magic, format version, the 128-bit key, the
 * object's size and a 64-bit checksum of it) and the object file. The key
 * hashes the generated module's IR text (a function of the optimised graph
 * and the code generator), the target triple, CPU name and features, the
 * LLVM version and Hodu's version.
 *
 * An entry is never trusted: one that is not a regular file of this user,
 * is short, or whose magic, version, key, size or checksum do not match is
 * removed and compiled again. Entries are written to a temporary file and
 * renamed, so a reader never sees half an entry. */
#include "hd_llvm.h"

#if HODU_HAVE_LLVM

#include <errno.h>
#include <fcntl.h>
#include <llvm/Config/llvm-config.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_MAGIC   "HODULLVM"
#define CACHE_VERSION 1u
/* Bumped when generated code changes in ways the IR text does not show
 * (the runtime's calling conventions). */
#define CACHE_CODEGEN 1u

typedef struct cache_header {
    char magic[8];
    uint32_t version, codegen;
    uint64_t key[2];
    uint64_t size;
    uint64_t checksum;
} cache_header;

static void cache_log(const char *fmt, const char *path) {
    if (hd_llvm_log_on("cache")) fprintf(stderr, fmt, path);
}

const char *hd_llvm_cache_dir(char *buf, size_t n) {
    const char *d = getenv("HODU_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    buf[0] = 0;
    if (d && (!*d || !strcmp(d, "off") || !strcmp(d, "0"))) return buf;
    if (d)
        snprintf(buf, n, "%s", d);
    else if (x && *x)
        snprintf(buf, n, "%s/hodu", x);
    else if (h && *h)
        snprintf(buf, n, "%s/.cache/hodu", h);
    return buf;
}

void hd_llvm_cache_key(const char *ir, const hd_llvm_host *h, hd_llvm_key *k) {
    const char *parts[] = {ir, h->triple, h->cpu, h->features, LLVM_VERSION_STRING, HODU_VERSION};
    for (int half = 0; half < 2; half++) {
        hd_ir_hasher s;
        hd_ir_hash_init(&s);
        hd_ir_hash_u64(&s, (uint64_t)half * 0x9e3779b97f4a7c15ULL + CACHE_CODEGEN);
        for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) hd_ir_hash_str(&s, parts[i]);
        k->h[half] = hd_ir_hash_final(&s);
    }
}

static uint64_t cache_checksum(const void *p, size_t n) {
    hd_ir_hasher s;
    hd_ir_hash_init(&s);
    hd_ir_hash_bytes(&s, p, n);
    return hd_ir_hash_final(&s);
}

/* <dir>/llvm-<key>.o into buf; 0 when the cache is off. */
static int cache_path(const hd_llvm_key *k, char *buf, size_t n) {
    char dir[1024];
    if (!*hd_llvm_cache_dir(dir, sizeof dir)) return 0;
    int w = snprintf(buf, n, "%s/llvm-%016llx%016llx.o", dir, (unsigned long long)k->h[0],
                     (unsigned long long)k->h[1]);
    return w > 0 && (size_t)w < n;
}

static int cache_read_all(int fd, char *p, size_t n) {
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        p += r;
        n -= (size_t)r;
    }
    return 1;
}

/* The object of a checked entry into *buf, or NULL (damaged). */
static hd_status cache_load(hd_ctx *ctx, int fd, const struct stat *sb, const hd_llvm_key *k,
                            LLVMMemoryBufferRef *buf) {
    cache_header h;
    *buf = NULL;
    if ((size_t)sb->st_size < sizeof h || !cache_read_all(fd, (char *)&h, sizeof h)) return HD_OK;
    if (memcmp(h.magic, CACHE_MAGIC, 8) || h.version != CACHE_VERSION ||
        h.codegen != CACHE_CODEGEN || h.key[0] != k->h[0] || h.key[1] != k->h[1] ||
        h.size != (uint64_t)sb->st_size - sizeof h || h.size == 0)
        return HD_OK;
    char *obj = hd_ctx_alloc(ctx, (size_t)h.size);
    if (!obj) return ctx->status;
    if (cache_read_all(fd, obj, (size_t)h.size) &&
        cache_checksum(obj, (size_t)h.size) == h.checksum)
        *buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(obj, (size_t)h.size, "hodu-cached");
    hd_ctx_free(ctx, obj, (size_t)h.size);
    return HD_OK;
}

hd_status hd_llvm_cache_get(hd_ctx *ctx, const hd_llvm_key *k, LLVMMemoryBufferRef *buf) {
    char path[1200];
    *buf = NULL;
    if (!cache_path(k, path, sizeof path)) return HD_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        cache_log("llvm: cache miss %s\n", path);
        return HD_OK;
    }
    struct stat sb;
    hd_status st = HD_OK;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid())
        st = cache_load(ctx, fd, &sb, k, buf);
    close(fd);
    if (st) return st;
    if (!*buf) {
        cache_log("llvm: cache entry %s is damaged: removed, compiling again\n", path);
        unlink(path);
        return HD_OK;
    }
    cache_log("llvm: cache hit %s\n", path);
    return HD_OK;
}

/* mkdir -p with mode 0700; 0 on failure. */
static int cache_mkdirs(const char *dir) {
    char p[1024];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof p) return 0;
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST) return 0;
        p[i] = c;
    }
    return 1;
}

static int cache_write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return 0;
        c += w;
        n -= (size_t)w;
    }
    return 1;
}

void hd_llvm_cache_put(hd_ctx *ctx, const hd_llvm_key *k, const void *obj, size_t n) {
    HD_UNUSED(ctx);
    char path[1200], tmp[1300], dir[1024];
    if (!cache_path(k, path, sizeof path) || !cache_mkdirs(hd_llvm_cache_dir(dir, sizeof dir)))
        return;
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        cache_log("llvm: cannot write the cache entry %s\n", tmp);
        return;
    }
    cache_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CACHE_MAGIC, 8);
    h.version = CACHE_VERSION;
    h.codegen = CACHE_CODEGEN;
    h.key[0] = k->h[0];
    h.key[1] = k->h[1];
    h.size = n;
    h.checksum = cache_checksum(obj, n);
    int ok = cache_write_all(fd, &h, sizeof h) && cache_write_all(fd, obj, n);
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0) {
        cache_log("llvm: cache write %s\n", path);
        return;
    }
    unlink(tmp);
    cache_log("llvm: cannot write the cache entry %s\n", path);
}

#endif /* HODU_HAVE_LLVM */
