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
#include "hd_cache.h"

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
 * (the runtime's calling conventions, the code model). */
#define CACHE_CODEGEN 2u

typedef struct cache_header {
    char magic[8];
    uint32_t version, codegen;
    uint64_t key[2];
    uint64_t size;
    uint64_t checksum;
} cache_header;

static void cache_log(const char *fmt, const char *path) {
    if (hd_log_on("cache")) fprintf(stderr, fmt, path);
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
static int cache_path(const hd_ctx *ctx, const hd_llvm_key *k, char *buf, size_t n) {
    char name[64];
    snprintf(name, sizeof name, "llvm-%016llx%016llx.o", (unsigned long long)k->h[0],
             (unsigned long long)k->h[1]);
    return hd_cache_path(ctx, name, buf, n);
}

/* The object of a checked entry into *buf, or NULL (damaged). */
static hd_status cache_load(hd_ctx *ctx, int fd, const struct stat *sb, const hd_llvm_key *k,
                            LLVMMemoryBufferRef *buf) {
    cache_header h;
    *buf = NULL;
    if ((size_t)sb->st_size < sizeof h || !hd_cache_read_full(fd, (char *)&h, sizeof h))
        return HD_OK;
    if (memcmp(h.magic, CACHE_MAGIC, 8) || h.version != CACHE_VERSION ||
        h.codegen != CACHE_CODEGEN || h.key[0] != k->h[0] || h.key[1] != k->h[1] ||
        h.size != (uint64_t)sb->st_size - sizeof h || h.size == 0)
        return HD_OK;
    char *obj = hd_ctx_alloc(ctx, (size_t)h.size);
    if (!obj) return ctx->status;
    if (hd_cache_read_full(fd, obj, (size_t)h.size) &&
        cache_checksum(obj, (size_t)h.size) == h.checksum)
        *buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(obj, (size_t)h.size, "hodu-cached");
    hd_ctx_free(ctx, obj, (size_t)h.size);
    return HD_OK;
}

hd_status hd_llvm_cache_get(hd_ctx *ctx, const hd_llvm_key *k, LLVMMemoryBufferRef *buf) {
    char path[1200];
    *buf = NULL;
    if (!cache_path(ctx, k, path, sizeof path)) return HD_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        cache_log("llvm: cache miss %s\n", path);
        return HD_OK;
    }
    struct stat sb;
    hd_status st = HD_OK;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid())
        st = cache_load(ctx, fd, &sb, k, buf);
    if (*buf) hd_cache_touch(fd);
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

void hd_llvm_cache_put(hd_ctx *ctx, const hd_llvm_key *k, const void *obj, size_t n) {
    char path[1200];
    if (!cache_path(ctx, k, path, sizeof path)) return;
    cache_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CACHE_MAGIC, 8);
    h.version = CACHE_VERSION;
    h.codegen = CACHE_CODEGEN;
    h.key[0] = k->h[0];
    h.key[1] = k->h[1];
    h.size = n;
    h.checksum = cache_checksum(obj, n);
    if (hd_cache_write(path, &h, sizeof h, obj, n))
        cache_log("llvm: cache write %s\n", path);
    else
        cache_log("llvm: cannot write the cache entry %s\n", path);
}

#endif /* HODU_HAVE_LLVM */
