/* hd_cache: where the disk cache's entries live and how they are read and
 * written (hd_cache.h). */
#include "hd_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *hd_cache_dir(char *buf, size_t n) {
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

int hd_cache_path(const hd_ctx *ctx, const char *name, char *buf, size_t n) {
    char dir[1024];
    if (ctx->disk_off || !*hd_cache_dir(dir, sizeof dir)) return 0;
    int w = snprintf(buf, n, "%s/%s", dir, name);
    return w > 0 && (size_t)w < n;
}

int hd_cache_read_full(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        c += r;
        n -= (size_t)r;
    }
    return 1;
}

static int cache_write_full(int fd, const void *p, size_t n) {
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

/* mkdir -p of path's folder, mode 0700; 0 on failure. */
static int cache_mkdirs(const char *path) {
    char p[1024];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n == 0 || n >= sizeof p) return n == 0;
    memcpy(p, path, n);
    p[n] = 0;
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST) return 0;
        p[i] = c;
    }
    return 1;
}

uint64_t hd_cache_cap(void) {
    const char *s = getenv("HODU_CACHE_MAX");
    if (!s || !*s) return HD_CACHE_DEFAULT_CAP;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    uint64_t unit = 1;
    if (*end == 'K' || *end == 'k') unit = (uint64_t)1 << 10;
    if (*end == 'M' || *end == 'm') unit = (uint64_t)1 << 20;
    if (*end == 'G' || *end == 'g') unit = (uint64_t)1 << 30;
    if (end == s || (unit > 1 && end[1]) || (unit == 1 && *end)) return HD_CACHE_DEFAULT_CAP;
    return v > UINT64_MAX / unit ? UINT64_MAX : (uint64_t)v * unit;
}

void hd_cache_touch(int fd) {
    futimens(fd, NULL); /* best effort: the order is only a hint */
}

/* An entry of the cache: a file the compilers write (llvm-*, cuda-*). A
 * temporary file of a writer counts once it is a minute old (a writer
 * that died leaves it behind). */
static int cache_is_entry(const char *name, const struct stat *sb, time_t now) {
    if (strncmp(name, "llvm-", 5) && strncmp(name, "cuda-", 5)) return 0;
    if (!S_ISREG(sb->st_mode)) return 0;
    return !strstr(name, ".tmp") || now - sb->st_mtime > 60;
}

static int cache_older(const struct stat *a, const struct stat *b) {
    if (a->st_mtim.tv_sec != b->st_mtim.tv_sec) return a->st_mtim.tv_sec < b->st_mtim.tv_sec;
    return a->st_mtim.tv_nsec < b->st_mtim.tv_nsec;
}

/* Remove the least recently used entries of dir until they take at most
 * cap bytes. One pass per removal, and no allocation: a write evicts one
 * entry or a few. */
static void cache_evict(const char *dir, uint64_t cap) {
    for (int round = 0; round < 100000; round++) {
        DIR *d = opendir(dir);
        if (!d) return;
        int dfd = dirfd(d);
        time_t now = time(NULL);
        uint64_t total = 0;
        char oldest[256] = "";
        struct stat old_sb = {0};
        struct dirent *e;
        while ((e = readdir(d))) {
            struct stat sb;
            if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;
            if (!cache_is_entry(e->d_name, &sb, now)) continue;
            total += (uint64_t)sb.st_size;
            if (strlen(e->d_name) < sizeof oldest && (!oldest[0] || cache_older(&sb, &old_sb))) {
                snprintf(oldest, sizeof oldest, "%s", e->d_name);
                old_sb = sb;
            }
        }
        int done = total <= cap || !oldest[0] || unlinkat(dfd, oldest, 0) != 0;
        closedir(d);
        if (done) return;
    }
}

int hd_cache_write(const char *path, const void *head, size_t nhead, const void *body,
                   size_t nbody) {
    char tmp[1300];
    if (!cache_mkdirs(path)) return 0;
    int w = snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    if (w <= 0 || (size_t)w >= sizeof tmp) return 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return 0;
    int ok = cache_write_full(fd, head, nhead) && cache_write_full(fd, body, nbody);
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0) {
        const char *slash = strrchr(path, '/');
        if (slash && (size_t)(slash - path) < sizeof tmp) {
            memcpy(tmp, path, (size_t)(slash - path));
            tmp[slash - path] = 0;
            cache_evict(slash == path ? "/" : tmp, hd_cache_cap());
        }
        return 1;
    }
    unlink(tmp);
    return 0;
}
