/* PyTorch's tensor printing (torch/_tensor_str.py, default options), over
 * Hodu tensors. The formatter first looks at every value that will be shown
 * (the edge items only, once summarised) to choose between integer-valued,
 * fixed and scientific notation and a common width; the printer then lays
 * the nested brackets out as torch does. */
#include "tensor_print.h"
#include "hd_backend.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { PRECISION = 4, THRESHOLD = 1000, EDGE = 3, LINEWIDTH = 80 };

/* ---- a growable string in ctx memory ---- */

typedef struct sbuf {
    hd_ctx *ctx;
    char *s;
    size_t len, cap;
    int failed;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = hd_ctx_realloc(b->ctx, b->s, b->cap, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_puts(sbuf *b, const char *s) {
    sb_put(b, s, strlen(s));
}

static void sb_spaces(sbuf *b, int n) {
    for (int i = 0; i < n; i++) sb_put(b, " ", 1);
}

/* ---- the formatter (torch's _Formatter) ---- */

typedef struct fmt {
    const hd_tensor *t;
    const char *data; /* host storage data */
    int summarize;
    int is_float;
    int int_mode, sci_mode;
    int width;
    /* first pass over nonzero finite values */
    int have_nz;
    double nz_min, nz_max;
} fmt;

/* Shown positions of a dim of size n: all, or the edge items. */
static int64_t shown_count(const fmt *f, int64_t n) {
    return f->summarize && n > 2 * EDGE ? 2 * EDGE : n;
}

static int64_t shown_index(const fmt *f, int64_t n, int64_t k) {
    return (f->summarize && n > 2 * EDGE && k >= EDGE) ? n - 2 * EDGE + k : k;
}

typedef void (*visit_fn)(fmt *f, int64_t off);

/* Calls fn for the storage offset of every shown element. */
static void visit(fmt *f, int dim, int64_t off, visit_fn fn) {
    const hd_tensor *t = f->t;
    if (dim == t->ndim) {
        fn(f, off);
        return;
    }
    int64_t n = t->shape[dim], m = shown_count(f, n);
    for (int64_t k = 0; k < m; k++)
        visit(f, dim + 1, off + shown_index(f, n, k) * t->strides[dim], fn);
}

static double load(const fmt *f, int64_t off) {
    return hd_dtype_load(f->t->dtype, f->data, off);
}

static void scan_float(fmt *f, int64_t off) {
    double v = load(f, off);
    if (!isfinite(v) || v == 0) return;
    double a = fabs(v);
    if (!f->have_nz || a < f->nz_min) f->nz_min = a;
    if (!f->have_nz || a > f->nz_max) f->nz_max = a;
    f->have_nz = 1;
    if (v != ceil(v)) f->int_mode = 0;
}

/* The text of one value, unpadded. */
static int value_str(const fmt *f, int64_t off, char *buf, size_t n) {
    hd_dtype dt = f->t->dtype;
    if (dt == HD_BOOL) return snprintf(buf, n, "%s", load(f, off) != 0 ? "true" : "false");
    if (!f->is_float)
        return snprintf(buf, n, "%lld", (long long)hd_dtype_load_i64(dt, f->data, off));
    double v = load(f, off);
    if (isnan(v)) return snprintf(buf, n, "nan");
    if (isinf(v)) return snprintf(buf, n, "%s", v < 0 ? "-inf" : "inf");
    if (f->sci_mode) return snprintf(buf, n, "%.*e", PRECISION, v);
    if (f->int_mode) return snprintf(buf, n, "%.0f.", v);
    return snprintf(buf, n, "%.*f", PRECISION, v);
}

static void widen(fmt *f, int64_t off) {
    char buf[64];
    if (f->is_float) {
        double v = load(f, off);
        if (!isfinite(v) || v == 0) return;
    }
    int w = value_str(f, off, buf, sizeof buf);
    if (w > f->width) f->width = w;
}

static void fmt_init(fmt *f) {
    f->is_float = hd_dtype_is_float(f->t->dtype);
    f->int_mode = 1;
    f->sci_mode = 0;
    f->width = 1;
    if (f->is_float) {
        visit(f, 0, f->t->offset, scan_float);
        if (!f->have_nz) return;
        double ratio = f->nz_max / f->nz_min;
        if (f->int_mode)
            f->sci_mode = ratio > 1000.0 || f->nz_max > 1.0e8;
        else
            f->sci_mode = ratio > 1000.0 || f->nz_max > 1.0e8 || f->nz_min < 1.0e-4;
    }
    visit(f, 0, f->t->offset, widen);
}

static void put_value(const fmt *f, sbuf *b, int64_t off) {
    char buf[64];
    int w = value_str(f, off, buf, sizeof buf);
    sb_spaces(b, f->width - w);
    sb_put(b, buf, (size_t)w);
}

/* ---- layout (torch's _tensor_str_with_formatter) ---- */

static void vector_str(const fmt *f, sbuf *b, int64_t off, int indent) {
    const hd_tensor *t = f->t;
    int dim = t->ndim - 1;
    int64_t n = t->shape[dim], m = shown_count(f, n);
    int per_line = (LINEWIDTH - indent) / (f->width + 2);
    if (per_line < 1) per_line = 1;
    int items = (int)m + (m < n ? 1 : 0);
    sb_puts(b, "[");
    for (int it = 0, k = 0; it < items; it++) {
        if (it > 0) {
            if (it % per_line == 0) {
                sb_puts(b, ",\n");
                sb_spaces(b, indent + 1);
            } else {
                sb_puts(b, ", ");
            }
        }
        if (m < n && it == EDGE) {
            sb_puts(b, " ...");
            continue;
        }
        put_value(f, b, off + shown_index(f, n, k) * t->strides[dim]);
        k++;
    }
    sb_puts(b, "]");
}

static void tensor_str(const fmt *f, sbuf *b, int dim, int64_t off, int indent) {
    const hd_tensor *t = f->t;
    int rest = t->ndim - dim;
    if (rest == 0) {
        put_value(f, b, off);
        return;
    }
    if (rest == 1) {
        vector_str(f, b, off, indent);
        return;
    }
    int64_t n = t->shape[dim], m = shown_count(f, n);
    sb_puts(b, "[");
    for (int64_t k = 0; k < m; k++) {
        if (k > 0) {
            sb_puts(b, ",");
            for (int i = 0; i < rest - 1; i++) sb_puts(b, "\n");
            sb_spaces(b, indent + 1);
        }
        if (m < n && k == EDGE) {
            sb_puts(b, "...,");
            for (int i = 0; i < rest - 1; i++) sb_puts(b, "\n");
            sb_spaces(b, indent + 1);
        }
        tensor_str(f, b, dim + 1, off + shown_index(f, n, k) * t->strides[dim], indent + 1);
    }
    sb_puts(b, "]");
}

/* torch's _add_suffixes: a suffix goes on a new line when it would pass
 * the line width. */
static void add_suffix(sbuf *b, const char *suffix, int indent) {
    const char *nl = NULL;
    for (size_t i = 0; i < b->len; i++)
        if (b->s[i] == '\n') nl = b->s + i;
    size_t last = nl ? (size_t)(b->s + b->len - nl) + 1 : b->len + 2;
    if (last + strlen(suffix) + 2 > LINEWIDTH) {
        sb_puts(b, ",\n");
        sb_spaces(b, indent);
    } else {
        sb_puts(b, ", ");
    }
    sb_puts(b, suffix);
}

static void suffixes(const hd_tensor *t, sbuf *b, int indent) {
    char s[160];
    if (t->numel == 0 && t->ndim != 1) {
        size_t n = (size_t)snprintf(s, sizeof s, "size=(");
        for (int i = 0; i < t->ndim && n < sizeof s; i++)
            n += (size_t)snprintf(s + n, sizeof s - n, "%s%lld", i ? ", " : "",
                                  (long long)t->shape[i]);
        if (n < sizeof s) snprintf(s + n, sizeof s - n, "%s)", t->ndim == 1 ? "," : "");
        add_suffix(b, s, indent);
    }
    int default_dt =
        t->dtype == HD_F32 || (t->numel > 0 && (t->dtype == HD_I64 || t->dtype == HD_BOOL));
    if (!default_dt) {
        snprintf(s, sizeof s, "dtype=%s", hd_dtype_name(t->dtype));
        add_suffix(b, s, indent);
    }
    const hd_storage *st = t->storage;
    if (st && st->backend != &hd_cpu_backend) {
        snprintf(s, sizeof s, "device=\"%s:%d\"", st->backend->name, st->device);
        add_suffix(b, s, indent);
    }
}

/* A host copy of t when its storage lives on another device. */
static hd_tensor *host_tensor(hd_ctx *ctx, const hd_tensor *t) {
    if (t->storage->backend == &hd_cpu_backend) return hd_tensor_ref((hd_tensor *)t);
    hd_tensor *c = hd_tensor_contiguous(ctx, (hd_tensor *)t);
    if (!c) return NULL;
    hd_tensor *h = hd_tensor_new(ctx, c->dtype, c->shape, c->ndim);
    const hd_storage *st = c->storage;
    if (h && st->backend->to_host(ctx, st->device, h->storage->data,
                                  (char *)st->data + c->offset * hd_dtype_size(c->dtype),
                                  hd_tensor_nbytes(c))) {
        hd_tensor_unref(h);
        h = NULL;
    }
    hd_tensor_unref(c);
    return h;
}

char *hd_tensor_format_cstr(hd_ctx *ctx, const hd_tensor *t, size_t *len) {
    sbuf b = {ctx, NULL, 0, 0, 0};
    const int indent = 7; /* strlen("tensor(") */
    sb_puts(&b, "tensor(");
    if (!t->storage) {
        char s[128];
        sb_puts(&b, "<symbolic>");
        add_suffix(&b, hd_shape_str(t->shape, t->ndim, s, sizeof s), indent);
        sb_puts(&b, ")");
        goto done;
    }
    hd_tensor *h = host_tensor(ctx, t);
    if (!h) {
        b.failed = 1;
        goto done;
    }
    if (h->numel == 0) {
        sb_puts(&b, "[]");
    } else {
        fmt f;
        memset(&f, 0, sizeof f);
        f.t = h;
        f.data = h->storage->data;
        f.summarize = h->numel > THRESHOLD;
        fmt_init(&f);
        tensor_str(&f, &b, 0, h->offset, indent);
    }
    suffixes(t, &b, indent);
    sb_puts(&b, ")");
    hd_tensor_unref(h);
done:
    if (b.failed) {
        if (b.s) hd_ctx_free(ctx, b.s, b.cap);
        if (!ctx->status) hd_error(ctx, HD_ERR_MEMORY, "out of memory");
        return NULL;
    }
    /* shrink so the caller frees exactly len + 1 bytes */
    char *s = hd_ctx_realloc(ctx, b.s, b.cap, b.len + 1);
    if (!s) {
        hd_ctx_free(ctx, b.s, b.cap);
        return NULL;
    }
    *len = b.len;
    return s;
}
