/* hd_io_impl: helpers shared by the hd_io_*.c files (not part of hd_io.h):
 * little-endian fields, files mapped for reading, an output stream to a file
 * or to memory, and element decoding/encoding between file and tensor. */
#ifndef HD_IO_IMPL_H
#define HD_IO_IMPL_H

#include "hd_io.h"

#include <stdio.h>

/* ---- little-endian fields ---- */
static inline uint16_t hd_io_rd16(const unsigned char *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t hd_io_rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t hd_io_rd64(const unsigned char *p) {
    return (uint64_t)hd_io_rd32(p) | ((uint64_t)hd_io_rd32(p + 4) << 32);
}
static inline void hd_io_wr16(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static inline void hd_io_wr32(unsigned char *p, uint32_t v) {
    hd_io_wr16(p, v & 0xffff);
    hd_io_wr16(p + 2, v >> 16);
}
static inline void hd_io_wr64(unsigned char *p, uint64_t v) {
    hd_io_wr32(p, (uint32_t)v);
    hd_io_wr32(p + 4, (uint32_t)(v >> 32));
}

int hd_io_host_is_le(void);

/* A printable, truncated rendering of untrusted bytes for messages: quotes
 * kept out, control and non-ASCII bytes as \xNN. Returns buf. */
const char *hd_io_quote(const void *s, size_t n, char *buf, size_t cap);

/* ---- input files ---- */
typedef struct {
    const unsigned char *data;
    size_t n;
    unsigned char *owned; /* the bytes read */
    size_t owned_cap;
} hd_io_file;

/* The whole file at path, read into memory. Not mapped: a mapped file that
 * another process truncates while it is parsed raises SIGBUS; a read sees
 * the bytes as they were (a shortened file parses as a damaged one). */
hd_status hd_io_file_open(hd_ctx *ctx, const char *path, hd_io_file *f);
void hd_io_file_close(hd_ctx *ctx, hd_io_file *f);

/* ---- output stream ----
 * Bytes go to the file descriptor fd, or (fd < 0) are appended to mem. A filter, when set, sees the
 * bytes of hd_io_out_write first (the zip writer's CRC and deflate); raw writes and patches bypass
 * it. */
typedef struct hd_io_out hd_io_out;
typedef hd_status (*hd_io_filter_fn)(hd_io_out *o, const void *p, size_t n);

struct hd_io_out {
    hd_ctx *ctx;
    const char *name; /* for messages */
    int fd;
    hd_io_bytes *mem;
    size_t base;  /* mem->len when the stream began */
    uint64_t pos; /* bytes written so far */
    hd_io_filter_fn filter;
    void *filter_ud;
};

hd_status hd_io_out_raw(hd_io_out *o, const void *p, size_t n);
hd_status hd_io_out_write(hd_io_out *o, const void *p, size_t n);
/* Overwrite n bytes at an earlier position (headers whose sizes come late). */
hd_status hd_io_out_patch(hd_io_out *o, uint64_t pos, const void *p, size_t n);
/* The tensor's elements, row-major and little-endian, through the filter
 * (a device tensor's through a host copy). */
hd_status hd_io_out_tensor(hd_io_out *o, const hd_tensor *t);

/* Error unless t can be saved: a tensor with data. */
hd_status hd_io_check_saveable(hd_ctx *ctx, const char *name, const hd_tensor *t);

/* Create path and run emit on a stream to it; on failure the partial file is
 * removed. */
typedef hd_status (*hd_io_emit_fn)(hd_io_out *o, const void *arg);
hd_status hd_io_save_to_path(hd_ctx *ctx, const char *path, hd_io_emit_fn emit, const void *arg);
/* The same into memory, appended to out. */
hd_status hd_io_save_to_bytes(hd_ctx *ctx, const char *name, hd_io_emit_fn emit, const void *arg,
                              hd_io_bytes *out);

/* Error unless t can be saved as .npy; then its .npy bytes into an open
 * stream (the .npz writer's members). */
hd_status hd_io_npy_check(hd_ctx *ctx, const char *name, const hd_tensor *t);
hd_status hd_io_npy_write(hd_io_out *o, const hd_tensor *t);

/* ---- element decoding ---- */

/* How a file stores the elements of one tensor. */
typedef struct {
    hd_dtype dtype; /* the Hodu dtype it loads as */
    char kind;      /* 'f' float, 'i' signed, 'u' unsigned, 'b' bool */
    int size;       /* bytes per element in the file */
    int big;        /* big-endian in the file */
} hd_io_elem;

/* Error st unless the names of l are unique (sorts a copy of the names):
 * HD_ERR_ARGUMENT for a list to save, HD_ERR_IO for a file read. */
hd_status hd_io_list_check_unique(hd_ctx *ctx, const char *name, const hd_io_list *l,
                                  hd_status st);

/* Fill e for file elements of a kind ('f', 'i', 'u', 'b') and size; 0 if
 * Hodu has no lossless dtype for them. */
int hd_io_elem_make(char kind, int size, int big, hd_io_elem *e);

/* Number of elements and file bytes of a shape, refusing negative dims and
 * products past 2^62 bytes. Errors name the file. */
hd_status hd_io_shape_size(hd_ctx *ctx, const char *name, const int64_t *shape, int ndim,
                           int elsize, int64_t *numel, size_t *nbytes);

/* New tensor of e->dtype and shape from the file bytes at src (exactly
 * numel * e->size of them), converting, byte-swapping and, for fortran,
 * reordering column-major data to row-major. */
hd_status hd_io_decode(hd_ctx *ctx, const hd_io_elem *e, const unsigned char *src,
                       const int64_t *shape, int ndim, int fortran, hd_tensor **out);

#endif
