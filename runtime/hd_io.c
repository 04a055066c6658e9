/* hd_io: named-tensor lists, file input and output streams, element
 * conversion, and load/save chosen by file extension. */
#include "hd_io_impl.h"
#include "hd_backend.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- lists ---- */

void hd_io_list_init(hd_io_list *l) {
    memset(l, 0, sizeof *l);
}

void hd_io_list_free(hd_ctx *ctx, hd_io_list *l) {
    for (size_t i = 0; i < l->count; i++) {
        hd_ctx_strfree(ctx, l->entries[i].name);
        hd_tensor_unref(l->entries[i].tensor);
    }
    for (size_t i = 0; i < l->nmeta; i++) {
        hd_ctx_strfree(ctx, l->meta[i].key);
        hd_ctx_strfree(ctx, l->meta[i].value);
    }
    hd_ctx_free(ctx, l->entries, l->cap * sizeof *l->entries);
    hd_ctx_free(ctx, l->meta, l->meta_cap * sizeof *l->meta);
    hd_io_list_init(l);
}

/* Make room for one more element in an array of *cap elements of size sz. */
static hd_status hd_io_grow(hd_ctx *ctx, void **arr, size_t *cap, size_t count, size_t sz) {
    if (count < *cap) return HD_OK;
    size_t ncap = *cap ? *cap * 2 : 8;
    size_t nbytes;
    if (!hd_mul_overflow(ncap, sz, &nbytes))
        return hd_error(ctx, HD_ERR_MEMORY, "out of memory: list too long");
    void *p = hd_ctx_realloc(ctx, *arr, *cap * sz, nbytes);
    if (!p) return HD_ERR_MEMORY;
    *arr = p;
    *cap = ncap;
    return HD_OK;
}

hd_status hd_io_list_add(hd_ctx *ctx, hd_io_list *l, const char *name, hd_tensor *t) {
    if (hd_io_grow(ctx, (void **)&l->entries, &l->cap, l->count, sizeof *l->entries))
        return HD_ERR_MEMORY;
    char *s = hd_ctx_strdup(ctx, name);
    if (!s) return HD_ERR_MEMORY;
    l->entries[l->count].name = s;
    l->entries[l->count].tensor = hd_tensor_ref(t);
    l->count++;
    return HD_OK;
}

hd_status hd_io_list_add_meta(hd_ctx *ctx, hd_io_list *l, const char *key, const char *value) {
    if (hd_io_grow(ctx, (void **)&l->meta, &l->meta_cap, l->nmeta, sizeof *l->meta))
        return HD_ERR_MEMORY;
    char *k = hd_ctx_strdup(ctx, key);
    char *v = k ? hd_ctx_strdup(ctx, value) : NULL;
    if (!v) {
        hd_ctx_strfree(ctx, k);
        return HD_ERR_MEMORY;
    }
    l->meta[l->nmeta].key = k;
    l->meta[l->nmeta].value = v;
    l->nmeta++;
    return HD_OK;
}

hd_tensor *hd_io_list_get(const hd_io_list *l, const char *name) {
    for (size_t i = 0; i < l->count; i++)
        if (strcmp(l->entries[i].name, name) == 0) return l->entries[i].tensor;
    return NULL;
}

static int hd_io_cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

hd_status hd_io_list_check_unique(hd_ctx *ctx, const char *name, const hd_io_list *l,
                                  hd_status err) {
    if (l->count < 2) return HD_OK;
    char **names = hd_ctx_alloc(ctx, l->count * sizeof *names);
    if (!names) return HD_ERR_MEMORY;
    for (size_t i = 0; i < l->count; i++) names[i] = l->entries[i].name;
    qsort(names, l->count, sizeof *names, hd_io_cmp_names);
    hd_status st = HD_OK;
    for (size_t i = 1; i < l->count && !st; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            char q[96];
            st = hd_error(ctx, err, "%s: the name '%s' appears twice", name,
                          hd_io_quote(names[i], strlen(names[i]), q, sizeof q));
        }
    }
    hd_ctx_free(ctx, names, l->count * sizeof *names);
    return st;
}

void hd_io_bytes_free(hd_ctx *ctx, hd_io_bytes *b) {
    hd_ctx_free(ctx, b->data, b->cap);
    memset(b, 0, sizeof *b);
}

void hd_io_strings_free(hd_ctx *ctx, hd_io_strings *s) {
    for (size_t i = 0; i < s->count; i++) hd_ctx_strfree(ctx, s->names[i]);
    hd_ctx_free(ctx, s->names, s->count * sizeof *s->names);
    memset(s, 0, sizeof *s);
}

/* ---- small helpers ---- */

int hd_io_host_is_le(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

const char *hd_io_quote(const void *s, size_t n, char *buf, size_t cap) {
    const unsigned char *p = s;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (j + 8 >= cap) {
            memcpy(buf + j, "...", 3);
            j += 3;
            break;
        }
        unsigned c = p[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            buf[j++] = (char)c;
        else
            j += (size_t)snprintf(buf + j, cap - j, "\\x%02x", c);
    }
    buf[j] = 0;
    return buf;
}

hd_status hd_io_shape_size(hd_ctx *ctx, const char *name, const int64_t *shape, int ndim,
                           int elsize, int64_t *numel, size_t *nbytes) {
    const uint64_t cap = (uint64_t)1 << 62;
    uint64_t bytes = (uint64_t)elsize;
    int zero = 0;
    char sb[256];
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return hd_error(ctx, HD_ERR_IO, "%s: negative dimension in shape %s", name,
                            hd_shape_str(shape, ndim, sb, sizeof sb));
        if (shape[i] == 0) {
            zero = 1;
            continue;
        }
        if (bytes > cap / (uint64_t)shape[i])
            return hd_error(ctx, HD_ERR_IO, "%s: shape %s is too large (over 2^62 bytes)", name,
                            hd_shape_str(shape, ndim, sb, sizeof sb));
        bytes *= (uint64_t)shape[i];
    }
    *numel = zero ? 0 : (int64_t)(bytes / (uint64_t)elsize);
    *nbytes = zero ? 0 : (size_t)bytes;
    return HD_OK;
}

/* ---- input files ---- */

static const char *hd_io_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

hd_status hd_io_open_regular(hd_ctx *ctx, const char *path, int *fd, uint64_t *size) {
    /* O_NONBLOCK: opening a FIFO that has no writer would otherwise block */
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0) return hd_error(ctx, HD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(*fd, &st) != 0) {
        int e = errno;
        close(*fd);
        *fd = -1;
        return hd_error(ctx, HD_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(*fd);
        *fd = -1;
        if (S_ISDIR(st.st_mode)) return hd_error(ctx, HD_ERR_IO, "%s: is a directory", path);
        return hd_error(ctx, HD_ERR_IO, "%s: is %s, not a regular file", path,
                        hd_io_kind(st.st_mode));
    }
    *size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    return HD_OK;
}

hd_status hd_io_read_file(hd_ctx *ctx, const char *path, size_t max_bytes, unsigned char **data,
                          size_t *n) {
    *data = NULL;
    *n = 0;
    int fd;
    uint64_t size;
    if (hd_io_open_regular(ctx, path, &fd, &size)) return ctx->status;
    hd_status s = HD_OK;
    if (size >= SIZE_MAX / 2 || (max_bytes && size > max_bytes)) {
        close(fd);
        return hd_error(ctx, HD_ERR_IO, "%s: %llu bytes is more than the %zu allowed", path,
                        (unsigned long long)size, max_bytes ? max_bytes : SIZE_MAX / 2);
    }
    /* the size at open time bounds the read: a file that grows meanwhile is
     * read as it was */
    unsigned char *p = hd_ctx_alloc(ctx, (size_t)size + 1);
    size_t len = 0;
    if (!p) s = HD_ERR_MEMORY;
    while (!s && len < size) {
        ssize_t r = read(fd, p + len, (size_t)size - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) s = hd_error(ctx, HD_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    if (!s && len < size)
        s = hd_error(ctx, HD_ERR_IO, "%s: cannot read: the file shrank while it was read", path);
    if (s) {
        hd_ctx_free(ctx, p, (size_t)size + 1);
        return s;
    }
    p[len] = 0;
    *data = p;
    *n = len;
    return HD_OK;
}

hd_status hd_io_file_open(hd_ctx *ctx, const char *path, hd_io_file *f) {
    memset(f, 0, sizeof *f);
    unsigned char *p;
    size_t n;
    if (hd_io_read_file(ctx, path, 0, &p, &n)) return ctx->status;
    f->owned = p;
    f->owned_cap = n + 1;
    f->data = p;
    f->n = n;
    return HD_OK;
}

void hd_io_file_close(hd_ctx *ctx, hd_io_file *f) {
    hd_ctx_free(ctx, f->owned, f->owned_cap);
    memset(f, 0, sizeof *f);
}

/* ---- output streams ---- */

static hd_status hd_io_fd_write(hd_io_out *o, const unsigned char *p, size_t n, off_t at,
                                int positioned) {
    while (n) {
        ssize_t w = positioned ? pwrite(o->fd, p, n, at) : write(o->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return hd_error(o->ctx, HD_ERR_IO, "%s: cannot write: %s", o->name,
                            w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
        at += w;
    }
    return HD_OK;
}

hd_status hd_io_out_raw(hd_io_out *o, const void *p, size_t n) {
    if (n == 0) return HD_OK;
    if (o->fd >= 0) {
        if (hd_io_fd_write(o, p, n, 0, 0)) return HD_ERR_IO;
    } else {
        hd_io_bytes *b = o->mem;
        if (n > SIZE_MAX / 4 - b->len) return hd_error(o->ctx, HD_ERR_MEMORY, "out of memory");
        if (b->len + n > b->cap) {
            size_t ncap = HD_MAX(HD_MAX(b->cap * 2, b->len + n), (size_t)256);
            unsigned char *q = hd_ctx_realloc(o->ctx, b->data, b->cap, ncap);
            if (!q) return HD_ERR_MEMORY;
            b->data = q;
            b->cap = ncap;
        }
        memcpy(b->data + b->len, p, n);
        b->len += n;
    }
    o->pos += n;
    return HD_OK;
}

hd_status hd_io_out_write(hd_io_out *o, const void *p, size_t n) {
    return o->filter ? o->filter(o, p, n) : hd_io_out_raw(o, p, n);
}

hd_status hd_io_out_patch(hd_io_out *o, uint64_t pos, const void *p, size_t n) {
    HD_ASSERT(pos + n <= o->pos);
    if (o->fd >= 0) return hd_io_fd_write(o, p, n, (off_t)pos, 1);
    memcpy(o->mem->data + o->base + pos, p, n);
    return HD_OK;
}

/* Walks the storage offsets of a strided geometry in row-major order. */
typedef struct {
    int ndim;
    int64_t shape[HD_MAX_DIMS], strides[HD_MAX_DIMS], idx[HD_MAX_DIMS];
    int64_t off;
} hd_io_iter;

static void hd_io_iter_init(hd_io_iter *it, const int64_t *shape, const int64_t *strides, int ndim,
                            int64_t off) {
    memset(it, 0, sizeof *it);
    it->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        it->shape[d] = shape[d];
        it->strides[d] = strides[d];
    }
    it->off = off;
}

static void hd_io_iter_next(hd_io_iter *it) {
    for (int d = it->ndim - 1; d >= 0; d--) {
        it->off += it->strides[d];
        if (++it->idx[d] < it->shape[d]) return;
        it->off -= it->strides[d] * it->shape[d];
        it->idx[d] = 0;
    }
}

static void hd_io_reverse(unsigned char *d, const unsigned char *s, int n) {
    for (int k = 0; k < n; k++) d[k] = s[n - 1 - k];
}

static hd_status hd_io_out_host(hd_io_out *o, const hd_tensor *t);

/* A device tensor is written through a host copy (as PyTorch's safetensors
 * and NumPy conversions do). */
hd_status hd_io_out_tensor(hd_io_out *o, const hd_tensor *t) {
    if (t->numel == 0 || hd_tensor_is_cpu(t)) return hd_io_out_host(o, t);
    hd_tensor *h = hd_tensor_to_host(o->ctx, (hd_tensor *)t);
    if (!h) return o->ctx->status;
    hd_status st = hd_io_out_host(o, h);
    hd_tensor_unref(h);
    return st;
}

static hd_status hd_io_out_host(hd_io_out *o, const hd_tensor *t) {
    if (t->numel == 0) return HD_OK;
    int es = hd_dtype_size(t->dtype);
    int swap = es > 1 && !hd_io_host_is_le();
    if (hd_tensor_is_contiguous(t) && !swap)
        return hd_io_out_write(o, hd_tensor_data(t), hd_tensor_nbytes(t));
    unsigned char chunk[16384];
    size_t used = 0;
    const unsigned char *base = t->storage->data;
    hd_io_iter it;
    hd_io_iter_init(&it, t->shape, t->strides, t->ndim, t->offset);
    for (int64_t i = 0; i < t->numel; i++, hd_io_iter_next(&it)) {
        const unsigned char *src = base + it.off * es;
        if (swap)
            hd_io_reverse(chunk + used, src, es);
        else
            memcpy(chunk + used, src, (size_t)es);
        used += (size_t)es;
        if (used + (size_t)es > sizeof chunk) {
            if (hd_io_out_write(o, chunk, used)) return o->ctx->status;
            used = 0;
        }
    }
    return hd_io_out_write(o, chunk, used);
}

hd_status hd_io_check_saveable(hd_ctx *ctx, const char *name, const hd_tensor *t) {
    if (!t->storage)
        return hd_error(ctx, HD_ERR_ARGUMENT, "%s: cannot save a symbolic tensor (it has no data)",
                        name);
    return HD_OK;
}

hd_status hd_io_save_to_path(hd_ctx *ctx, const char *path, hd_io_emit_fn emit, const void *arg) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return hd_error(ctx, HD_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    hd_io_out o = {ctx, path, fd, NULL, 0, 0, NULL, NULL};
    hd_status st = emit(&o, arg);
    if (close(fd) != 0 && !st)
        st = hd_error(ctx, HD_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    if (st) unlink(path);
    return st;
}

hd_status hd_io_save_to_bytes(hd_ctx *ctx, const char *name, hd_io_emit_fn emit, const void *arg,
                              hd_io_bytes *out) {
    hd_io_out o = {ctx, name, -1, out, out->len, 0, NULL, NULL};
    hd_status st = emit(&o, arg);
    if (st) out->len = o.base;
    return st;
}

/* ---- element decoding ---- */

int hd_io_elem_make(char kind, int size, int big, hd_io_elem *e) {
    static const struct {
        char kind;
        int size;
        hd_dtype dt;
    } map[] = {
        {'f', 2, HD_F16}, {'f', 4, HD_F32}, {'f', 8, HD_F64},  {'i', 1, HD_I8},
        {'i', 2, HD_I32}, {'i', 4, HD_I32}, {'i', 8, HD_I64},  {'u', 1, HD_U8},
        {'u', 2, HD_I32}, {'u', 4, HD_I64}, {'b', 1, HD_BOOL},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (map[i].kind == kind && map[i].size == size) {
            e->dtype = map[i].dt;
            e->kind = kind;
            e->size = size;
            e->big = big;
            return 1;
        }
    }
    return 0;
}

/* One element from file bytes s into Hodu bytes d (dsize bytes). */
static void hd_io_convert(const hd_io_elem *e, const unsigned char *s, unsigned char *d, int dsize,
                          int swap) {
    if (e->kind == 'b') {
        unsigned char v = 0;
        for (int k = 0; k < e->size; k++) v |= s[k];
        *d = v != 0;
        return;
    }
    if (e->size == dsize) {
        if (swap)
            hd_io_reverse(d, s, dsize);
        else
            memcpy(d, s, (size_t)dsize);
        return;
    }
    /* lossless integer widening */
    uint64_t v = 0;
    for (int k = 0; k < e->size; k++) v = (v << 8) | s[e->big ? k : e->size - 1 - k];
    int bits = 8 * e->size;
    if (e->kind == 'i' && ((v >> (bits - 1)) & 1)) v |= ~(uint64_t)0 << bits;
    if (dsize == 4) {
        int32_t x = (int32_t)(int64_t)v;
        memcpy(d, &x, 4);
    } else {
        int64_t x = (int64_t)v;
        memcpy(d, &x, 8);
    }
}

hd_status hd_io_decode(hd_ctx *ctx, const hd_io_elem *e, const unsigned char *src,
                       const int64_t *shape, int ndim, int fortran, hd_tensor **out) {
    hd_tensor *t = hd_tensor_new(ctx, e->dtype, shape, ndim);
    if (!t) return ctx->status ? ctx->status : HD_ERR_MEMORY;
    int dsize = hd_dtype_size(e->dtype);
    int swap = e->size > 1 && e->big == hd_io_host_is_le();
    unsigned char *dst = t->storage->data;
    if (!fortran && !swap && e->size == dsize && e->kind != 'b') {
        if (t->numel) memcpy(dst, src, hd_tensor_nbytes(t));
    } else {
        int64_t strides[HD_MAX_DIMS];
        if (fortran) {
            int64_t s = 1;
            for (int d = 0; d < ndim; d++) {
                strides[d] = s;
                s *= shape[d];
            }
        } else {
            hd_contiguous_strides(shape, ndim, strides);
        }
        hd_io_iter it;
        hd_io_iter_init(&it, shape, strides, ndim, 0);
        for (int64_t i = 0; i < t->numel; i++, hd_io_iter_next(&it))
            hd_io_convert(e, src + it.off * e->size, dst + i * dsize, dsize, swap);
    }
    *out = t;
    return HD_OK;
}

/* ---- by extension ---- */

hd_io_format hd_io_format_of(const char *path) {
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return HD_IO_UNKNOWN;
    if (strcasecmp(dot, ".npy") == 0) return HD_IO_NPY;
    if (strcasecmp(dot, ".npz") == 0) return HD_IO_NPZ;
    if (strcasecmp(dot, ".safetensors") == 0) return HD_IO_SAFETENSORS;
    if (strcasecmp(dot, ".csv") == 0) return HD_IO_CSV;
    return HD_IO_UNKNOWN;
}

static hd_status hd_io_unknown_ext(hd_ctx *ctx, const char *path, const char *verb) {
    return hd_error(ctx, HD_ERR_ARGUMENT,
                    "%s: unknown file extension; %s handles .npy, .npz and .safetensors", path,
                    verb);
}

hd_status hd_io_load(hd_ctx *ctx, const char *path, hd_tensor **tensor, hd_io_list *list) {
    if (tensor) *tensor = NULL;
    hd_io_list_init(list);
    switch (hd_io_format_of(path)) {
    case HD_IO_NPY:
        if (!tensor) return hd_error(ctx, HD_ERR_ARGUMENT, "%s: a .npy file holds a tensor", path);
        return hd_io_load_npy(ctx, path, tensor);
    case HD_IO_NPZ: return hd_io_load_npz(ctx, path, list);
    case HD_IO_SAFETENSORS: return hd_io_load_safetensors(ctx, path, list);
    case HD_IO_CSV:
        return hd_error(ctx, HD_ERR_ARGUMENT, "%s: use read_csv(path) to read CSV files", path);
    default: return hd_io_unknown_ext(ctx, path, "load");
    }
}

hd_status hd_io_save(hd_ctx *ctx, const char *path, const hd_tensor *tensor, const hd_io_list *l) {
    hd_io_format f = hd_io_format_of(path);
    if (f == HD_IO_NPY) {
        if (!tensor)
            return hd_error(ctx, HD_ERR_ARGUMENT,
                            "%s: .npy holds one tensor; save a dict as .npz or .safetensors", path);
        return hd_io_save_npy(ctx, path, tensor);
    }
    if (f != HD_IO_NPZ && f != HD_IO_SAFETENSORS) return hd_io_unknown_ext(ctx, path, "save");
    if (!l)
        return hd_error(ctx, HD_ERR_ARGUMENT,
                        "%s: this format holds a dict of named tensors; save one tensor as .npy",
                        path);
    if (f == HD_IO_NPZ) return hd_io_save_npz(ctx, path, l, 0);
    return hd_io_save_safetensors(ctx, path, l);
}
