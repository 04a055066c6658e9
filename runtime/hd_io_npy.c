/* hd_io_npy: the .npy format (numpy's NEP 1).
 *
 * A file is the magic "\x93NUMPY", a version byte pair, a header length (2
 * bytes in 1.0, 4 in 2.0 and 3.0), then a Python dict literal such as
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } and the raw
 * elements. The dict is read by a small parser that accepts exactly these
 * three keys and nothing that would need evaluating. */
#include "hd_io_impl.h"

#include <string.h>

static const unsigned char hd_io_npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* ---- header parsing ---- */

typedef struct {
    hd_ctx *ctx;
    const char *name;
    const unsigned char *p, *start, *end;
} hd_io_npy_cur;

typedef struct {
    const unsigned char *descr;
    size_t descr_len;
    int fortran;
    int ndim;
    int64_t shape[HD_MAX_DIMS];
    int seen; /* bit 0 descr, 1 fortran_order, 2 shape */
} hd_io_npy_header;

static hd_status hd_io_npy_fail(hd_io_npy_cur *c, const char *what) {
    return hd_error(c->ctx, HD_ERR_IO, "%s: bad .npy header: %s at header byte %zu", c->name, what,
                    (size_t)(c->p - c->start));
}

static void hd_io_npy_ws(hd_io_npy_cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Consume ch (after whitespace); 0 if it is not next. */
static int hd_io_npy_eat(hd_io_npy_cur *c, char ch) {
    hd_io_npy_ws(c);
    if (c->p < c->end && *c->p == (unsigned char)ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string without escapes: 'abc' or "abc". */
static hd_status hd_io_npy_string(hd_io_npy_cur *c, const unsigned char **s, size_t *n) {
    hd_io_npy_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return hd_io_npy_fail(c, "expected a quoted string");
    unsigned char q = *c->p++;
    const unsigned char *b = c->p;
    while (c->p < c->end && *c->p != q && *c->p != '\\') c->p++;
    if (c->p >= c->end || *c->p != q) return hd_io_npy_fail(c, "unterminated or escaped string");
    *s = b;
    *n = (size_t)(c->p - b);
    c->p++;
    return HD_OK;
}

/* A non-negative decimal dimension (Python 2 files may add an 'L'). */
static hd_status hd_io_npy_dim(hd_io_npy_cur *c, int64_t *out) {
    hd_io_npy_ws(c);
    if (c->p < c->end && *c->p == '-') return hd_io_npy_fail(c, "negative dimension in shape");
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return hd_io_npy_fail(c, "expected an integer in shape");
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int dig = *c->p++ - '0';
        if (v > (INT64_MAX - dig) / 10) return hd_io_npy_fail(c, "dimension overflows int64");
        v = v * 10 + dig;
    }
    if (c->p < c->end && *c->p == 'L') c->p++;
    *out = v;
    return HD_OK;
}

/* (), (n,), (a, b), (a, b,): a tuple of at most HD_MAX_DIMS dimensions. */
static hd_status hd_io_npy_shape(hd_io_npy_cur *c, hd_io_npy_header *h) {
    if (!hd_io_npy_eat(c, '(')) return hd_io_npy_fail(c, "shape is not a tuple");
    h->ndim = 0;
    int comma = 0;
    while (!hd_io_npy_eat(c, ')')) {
        if (h->ndim == HD_MAX_DIMS)
            return hd_error(c->ctx, HD_ERR_IO, "%s: shape has more than %d dimensions", c->name,
                            HD_MAX_DIMS);
        if (hd_io_npy_dim(c, &h->shape[h->ndim++])) return HD_ERR_IO;
        comma = hd_io_npy_eat(c, ',');
        hd_io_npy_ws(c);
        if (!comma && (c->p >= c->end || *c->p != ')'))
            return hd_io_npy_fail(c, "expected ',' or ')' in shape");
    }
    if (h->ndim == 1 && !comma) return hd_io_npy_fail(c, "shape (n) is not a tuple; write (n,)");
    return HD_OK;
}

static hd_status hd_io_npy_bool(hd_io_npy_cur *c, int *out) {
    hd_io_npy_ws(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
        c->p += 4;
        *out = 1;
    } else if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        c->p += 5;
        *out = 0;
    } else {
        return hd_io_npy_fail(c, "fortran_order is not True or False");
    }
    return HD_OK;
}

/* One "key: value" pair of the dict. */
static hd_status hd_io_npy_item(hd_io_npy_cur *c, hd_io_npy_header *h) {
    const unsigned char *k;
    size_t kn;
    if (hd_io_npy_string(c, &k, &kn)) return HD_ERR_IO;
    if (!hd_io_npy_eat(c, ':')) return hd_io_npy_fail(c, "expected ':'");
    int bit;
    hd_status st;
    if (kn == 5 && memcmp(k, "descr", 5) == 0) {
        bit = 1;
        hd_io_npy_ws(c);
        if (c->p < c->end && *c->p != '\'' && *c->p != '"')
            return hd_error(c->ctx, HD_ERR_IO,
                            "%s: unsupported dtype: structured arrays are not supported", c->name);
        st = hd_io_npy_string(c, &h->descr, &h->descr_len);
    } else if (kn == 13 && memcmp(k, "fortran_order", 13) == 0) {
        bit = 2;
        st = hd_io_npy_bool(c, &h->fortran);
    } else if (kn == 5 && memcmp(k, "shape", 5) == 0) {
        bit = 4;
        st = hd_io_npy_shape(c, h);
    } else {
        char q[64];
        return hd_error(c->ctx, HD_ERR_IO, "%s: bad .npy header: unexpected key '%s'", c->name,
                        hd_io_quote(k, kn, q, sizeof q));
    }
    if (st) return st;
    if (h->seen & bit) return hd_io_npy_fail(c, "repeated key");
    h->seen |= bit;
    return HD_OK;
}

static hd_status hd_io_npy_dict(hd_io_npy_cur *c, hd_io_npy_header *h) {
    memset(h, 0, sizeof *h);
    if (!hd_io_npy_eat(c, '{')) return hd_io_npy_fail(c, "expected '{'");
    while (!hd_io_npy_eat(c, '}')) {
        if (hd_io_npy_item(c, h)) return HD_ERR_IO;
        if (!hd_io_npy_eat(c, ',')) {
            if (hd_io_npy_eat(c, '}')) break;
            return hd_io_npy_fail(c, "expected ',' or '}'");
        }
    }
    hd_io_npy_ws(c);
    if (c->p != c->end) return hd_io_npy_fail(c, "text after the dict");
    if (h->seen != 7)
        return hd_error(c->ctx, HD_ERR_IO, "%s: bad .npy header: missing key '%s'", c->name,
                        !(h->seen & 1)   ? "descr"
                        : !(h->seen & 2) ? "fortran_order"
                                         : "shape");
    return HD_OK;
}

/* descr such as '<f4', '>i8', '|b1' into an element description. */
static hd_status hd_io_npy_descr(hd_ctx *ctx, const char *name, const hd_io_npy_header *h,
                                 hd_io_elem *e) {
    const unsigned char *d = h->descr;
    size_t n = h->descr_len;
    char q[64];
    int ok = n >= 3 && n <= 4 && (d[0] == '<' || d[0] == '>' || d[0] == '|');
    int size = 0;
    for (size_t i = 2; ok && i < n; i++) {
        if (d[i] < '0' || d[i] > '9') ok = 0;
        size = size * 10 + (d[i] - '0');
    }
    if (ok && d[0] == '|' && size != 1) ok = 0;
    if (ok && hd_io_elem_make((char)d[1], size, d[0] == '>', e)) return HD_OK;
    const char *hint = "";
    if (n >= 2 && d[1] == 'O') hint = " (Python objects are never loaded)";
    if (n >= 3 && d[1] == 'u' && d[2] == '8') hint = " (uint64 may not fit i64: save as int64)";
    return hd_error(ctx, HD_ERR_IO, "%s: unsupported dtype '%s'%s", name,
                    hd_io_quote(d, n, q, sizeof q), hint);
}

/* ---- load ---- */

/* The preamble: magic, version, header length; sets *hstart and *hlen. */
static hd_status hd_io_npy_preamble(hd_ctx *ctx, const char *name, const unsigned char *p, size_t n,
                                    size_t *hstart, size_t *hlen) {
    if (n < 6 || memcmp(p, hd_io_npy_magic, 6) != 0)
        return hd_error(ctx, HD_ERR_IO, "%s: not a .npy file (no \\x93NUMPY magic)", name);
    if (n < 10)
        return hd_error(ctx, HD_ERR_IO, "%s: truncated .npy file: %zu bytes, no header length",
                        name, n);
    int major = p[6], minor = p[7];
    if (major < 1 || major > 3 || minor != 0)
        return hd_error(ctx, HD_ERR_IO, "%s: unsupported .npy format version %d.%d", name, major,
                        minor);
    if (major == 1) {
        *hstart = 10;
        *hlen = hd_io_rd16(p + 8);
    } else {
        if (n < 12)
            return hd_error(ctx, HD_ERR_IO, "%s: truncated .npy file: %zu bytes, no header length",
                            name, n);
        *hstart = 12;
        *hlen = hd_io_rd32(p + 8);
    }
    if (*hlen > n - *hstart)
        return hd_error(ctx, HD_ERR_IO,
                        "%s: .npy header length %zu runs past the end of the file (%zu bytes)",
                        name, *hlen, n);
    return HD_OK;
}

hd_status hd_io_load_npy_buffer(hd_ctx *ctx, const char *name, const void *buf, size_t n,
                                hd_tensor **out) {
    *out = NULL;
    const unsigned char *p = buf;
    size_t hstart = 0, hlen = 0;
    if (hd_io_npy_preamble(ctx, name, p, n, &hstart, &hlen)) return HD_ERR_IO;
    hd_io_npy_cur c = {ctx, name, p + hstart, p + hstart, p + hstart + hlen};
    hd_io_npy_header h;
    hd_io_elem e;
    if (hd_io_npy_dict(&c, &h) || hd_io_npy_descr(ctx, name, &h, &e)) return HD_ERR_IO;
    int64_t numel;
    size_t nbytes;
    if (hd_io_shape_size(ctx, name, h.shape, h.ndim, e.size, &numel, &nbytes)) return HD_ERR_IO;
    size_t have = n - hstart - hlen;
    if (nbytes != have) {
        char sb[256], q[64];
        return hd_error(ctx, HD_ERR_IO,
                        "%s: shape %s of '%s' needs %zu data bytes, the file has %zu", name,
                        hd_shape_str(h.shape, h.ndim, sb, sizeof sb),
                        hd_io_quote(h.descr, h.descr_len, q, sizeof q), nbytes, have);
    }
    return hd_io_decode(ctx, &e, p + hstart + hlen, h.shape, h.ndim, h.fortran, out);
}

hd_status hd_io_load_npy(hd_ctx *ctx, const char *path, hd_tensor **out) {
    *out = NULL;
    hd_io_file f;
    if (hd_io_file_open(ctx, path, &f)) return ctx->status;
    hd_status st = hd_io_load_npy_buffer(ctx, path, f.data, f.n, out);
    hd_io_file_close(ctx, &f);
    return st;
}

/* ---- save ---- */

hd_status hd_io_npy_check(hd_ctx *ctx, const char *name, const hd_tensor *t) {
    if (hd_io_check_saveable(ctx, name, t)) return ctx->status;
    if (!hd_dtype_infos[t->dtype].npy)
        return hd_error(ctx, HD_ERR_ARGUMENT,
                        "%s: numpy has no %s dtype; save as .safetensors, or convert with "
                        ".to(f32) first",
                        name, hd_dtype_name(t->dtype));
    return HD_OK;
}

/* numpy's header text, padded with spaces and a newline so that the data
 * starts at a multiple of 64 bytes. */
static size_t hd_io_npy_header_text(const hd_tensor *t, char *buf, size_t cap, size_t preamble) {
    char shape[HD_MAX_DIMS * 24 + 4] = "";
    size_t k = 0;
    for (int i = 0; i < t->ndim; i++)
        k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", i ? ", " : "",
                              (long long)t->shape[i]);
    if (t->ndim == 1) snprintf(shape + k, sizeof shape - k, ",");
    size_t len =
        (size_t)snprintf(buf, cap, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                         hd_dtype_infos[t->dtype].npy, shape);
    size_t total = (preamble + len + 1 + 63) / 64 * 64 - preamble;
    memset(buf + len, ' ', total - 1 - len);
    buf[total - 1] = '\n';
    return total;
}

static hd_status hd_io_npy_emit(hd_io_out *o, const void *arg) {
    const hd_tensor *t = arg;
    char hdr[512];
    unsigned char pre[12];
    memcpy(pre, hd_io_npy_magic, 6);
    size_t hlen = hd_io_npy_header_text(t, hdr, sizeof hdr, 10), npre = 10;
    if (hlen > 0xffff) { /* unreachable with 8 dims; kept for the format's sake */
        hlen = hd_io_npy_header_text(t, hdr, sizeof hdr, 12);
        npre = 12;
    }
    pre[6] = npre == 10 ? 1 : 2;
    pre[7] = 0;
    if (npre == 10)
        hd_io_wr16(pre + 8, (uint32_t)hlen);
    else
        hd_io_wr32(pre + 8, (uint32_t)hlen);
    if (hd_io_out_write(o, pre, npre) || hd_io_out_write(o, hdr, hlen)) return o->ctx->status;
    return hd_io_out_tensor(o, t);
}

hd_status hd_io_save_npy_bytes(hd_ctx *ctx, const char *name, const hd_tensor *t,
                               hd_io_bytes *out) {
    if (hd_io_npy_check(ctx, name, t)) return ctx->status;
    return hd_io_save_to_bytes(ctx, name, hd_io_npy_emit, t, out);
}

hd_status hd_io_save_npy(hd_ctx *ctx, const char *path, const hd_tensor *t) {
    if (hd_io_npy_check(ctx, path, t)) return ctx->status;
    return hd_io_save_to_path(ctx, path, hd_io_npy_emit, t);
}

hd_status hd_io_npy_write(hd_io_out *o, const hd_tensor *t) {
    return hd_io_npy_emit(o, t);
}
