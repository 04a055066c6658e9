/* hd_cache: the disk cache's files, shared by the compilers that keep
 * compiled code between processes (the llvm compiler's objects, the cuda
 * backend's CUBINs). Each caller owns its header, key and checks; this
 * layer owns where entries live and how they are read and written. */
#ifndef HD_CACHE_H
#define HD_CACHE_H

#include "hd_base.h"

#include <stddef.h>

/* The cache folder: HODU_CACHE_DIR ("", "off" or "0": none), else
 * $XDG_CACHE_HOME/hodu, else ~/.cache/hodu. Returns buf; "" when off. */
const char *hd_cache_dir(char *buf, size_t n);

/* The path of entry `name` in the cache folder into buf; 0 when the cache
 * is off, ctx may not touch the disk (ctx->disk_off) or the path does not
 * fit. */
int hd_cache_path(const hd_ctx *ctx, const char *name, char *buf, size_t n);

/* Read exactly n bytes from fd; 0 on a short read or an error. */
int hd_cache_read_full(int fd, void *p, size_t n);

/* The cap on the bytes of the cache's entries: HODU_CACHE_MAX (a number of
 * bytes, with an optional K, M or G), else HD_CACHE_DEFAULT_CAP. After each
 * write the least recently used entries are removed until the rest fit. */
#define HD_CACHE_DEFAULT_CAP ((uint64_t)256 << 20)
uint64_t hd_cache_cap(void);

/* Mark an entry just used (its modification time: the eviction order). */
void hd_cache_touch(int fd);

/* Write head and body to path through a temporary file and a rename, so
 * that a reader never sees half an entry; the folder is made (mode 0700)
 * first, and entries past the cap are evicted after. 0 on failure (nothing
 * is left behind). */
int hd_cache_write(const char *path, const void *head, size_t nhead, const void *body,
                   size_t nbody);

#endif
