/* hd_cache: where the disk cache's entries live and how they are read and
 * written (hd_cache.h). */
#include "hd_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int hd_cache_path(const char *name, char *buf, size_t n) {
    char dir[1024];
    if (!*hd_cache_dir(dir, sizeof dir)) return 0;
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
    if (ok && rename(tmp, path) == 0) return 1;
    unlink(tmp);
    return 0;
}
