/* hd_io_safetensors: the safetensors format.
 *
 * An 8-byte little-endian header length N, N bytes of JSON (an object: each
 * tensor name maps to {"dtype", "shape", "data_offsets": [begin, end]},
 * offsets relative to the data section that follows; "__metadata__" maps
 * strings to strings), then the data. As in the reference implementation,
 * the tensors must tile the data section exactly: sorted by offset, each
 * begins where the previous ends, and the last ends at the end of the file.
 *
 * The JSON is read and written here rather than by a library, so that every
 * byte goes through the context's allocator (a header counts against the
 * memory limit) and nothing is built but the tensor list: the header is
 * checked as strict JSON (RFC 8259, UTF-8, at most 32 levels deep) in one
 * pass that allocates nothing, then walked for its entries. */
#include "hd_io_impl.h"

#include <stdlib.h>
#include <string.h>

#define HD_IO_ST_MAX_HEADER 100000000u /* the reference implementation's cap */
#define HD_IO_ST_MAX_DEPTH  32

static const struct {
    const char *name;
    char kind;
    int size;
} hd_io_st_types[] = {
    {"F16", 'f', 2}, {"BF16", 'h', 2}, {"F32", 'f', 4}, {"F64", 'f', 8},
    {"I8", 'i', 1},  {"U8", 'u', 1},   {"I16", 'i', 2}, {"U16", 'u', 2},
    {"I32", 'i', 4}, {"U32", 'u', 4},  {"I64", 'i', 8}, {"BOOL", 'b', 1},
};

/* One tensor of the header, validated. */
typedef struct {
    char *name; /* owned: name_len + 1 bytes */
    size_t name_len;
    hd_io_elem elem;
    int ndim;
    int64_t shape[HD_MAX_DIMS];
    uint64_t begin, end;
    size_t order; /* position in the header, to keep sorting stable */
} hd_io_st_info;

typedef struct {
    hd_ctx *ctx;
    const char *name;
    size_t data_len;
    hd_io_st_info *infos;
    size_t count, cap;
    int have_meta;
} hd_io_st;

/* ---- JSON ---- */

/* A cursor over the header's text. */
typedef struct {
    const unsigned char *p, *end;
} hd_json;

static void hd_json_ws(hd_json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int hd_json_hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], d = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
        if (d < 0) return 0;
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 1;
}

/* The length of the valid UTF-8 sequence at p (1 to 4), or 0. */
static int hd_json_utf8(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    int n = c < 0x80             ? 1
            : (c & 0xe0) == 0xc0 ? 2
            : (c & 0xf0) == 0xe0 ? 3
            : (c & 0xf8) == 0xf0 ? 4
                                 : 0;
    if (n == 0 || end - p < n) return 0;
    unsigned cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    static const unsigned least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

static size_t hd_json_put_utf8(unsigned char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* The string at j->p (at its opening quote): *n is its decoded length and,
 * with out, its decoded bytes are written there. Returns 0 on a malformed
 * string. */
static int hd_json_string(hd_json *j, unsigned char *out, size_t *n) {
    const unsigned char *p = j->p + 1;
    size_t k = 0;
    for (;;) {
        if (p >= j->end) return 0;
        unsigned c = *p;
        if (c == '"') break;
        if (c < 0x20) return 0;
        if (c == '\\') {
            if (j->end - p < 2) return 0;
            unsigned cp;
            const char *esc = strchr("\"\\/bfnrt", p[1]);
            if (p[1] && esc) {
                static const char to[] = "\"\\/\b\f\n\r\t";
                cp = (unsigned char)to[esc - "\"\\/bfnrt"];
                p += 2;
            } else if (p[1] == 'u' && j->end - p >= 6 && hd_json_hex4(p + 2, &cp)) {
                p += 6;
                if (cp >= 0xdc00 && cp <= 0xdfff) return 0;
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    unsigned lo;
                    if (j->end - p < 6 || p[0] != '\\' || p[1] != 'u' ||
                        !hd_json_hex4(p + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                        return 0;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    p += 6;
                }
            } else {
                return 0;
            }
            unsigned char tmp[4];
            k += hd_json_put_utf8(out ? out + k : tmp, cp);
            continue;
        }
        int len = hd_json_utf8(p, j->end);
        if (!len) return 0;
        if (out) memcpy(out + k, p, (size_t)len);
        k += (size_t)len;
        p += len;
    }
    j->p = p + 1;
    if (n) *n = k;
    return 1;
}

static int hd_json_number(hd_json *j) {
    const unsigned char *p = j->p, *e = j->end;
    if (p < e && *p == '-') p++;
    if (p >= e || *p < '0' || *p > '9') return 0;
    if (*p == '0')
        p++;
    else
        while (p < e && *p >= '0' && *p <= '9') p++;
    if (p < e && *p == '.') {
        if (++p >= e || *p < '0' || *p > '9') return 0;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        if (++p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || *p < '0' || *p > '9') return 0;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    j->p = p;
    return 1;
}

/* Check and pass one value (j->p at its first byte, white space skipped
 * after it). 0 if malformed or nested more than the depth allows. */
static int hd_json_skip(hd_json *j, int depth) {
    if (j->p >= j->end) return 0;
    unsigned c = *j->p;
    int ok;
    if (c == '{' || c == '[') {
        if (depth >= HD_IO_ST_MAX_DEPTH) return 0;
        unsigned close = c == '{' ? '}' : ']';
        j->p++;
        hd_json_ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            hd_json_ws(j);
            return 1;
        }
        for (;;) {
            if (c == '{') {
                if (j->p >= j->end || *j->p != '"' || !hd_json_string(j, NULL, NULL)) return 0;
                hd_json_ws(j);
                if (j->p >= j->end || *j->p != ':') return 0;
                j->p++;
                hd_json_ws(j);
            }
            if (!hd_json_skip(j, depth + 1)) return 0;
            if (j->p >= j->end) return 0;
            if (*j->p == close) break;
            if (*j->p != ',') return 0;
            j->p++;
            hd_json_ws(j);
        }
        j->p++;
        ok = 1;
    } else if (c == '"') {
        ok = hd_json_string(j, NULL, NULL);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        ok = hd_json_number(j);
    } else {
        static const char *const lits[] = {"true", "false", "null"};
        ok = 0;
        for (int i = 0; i < 3 && !ok; i++) {
            size_t n = strlen(lits[i]);
            if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, lits[i], n)) {
                j->p += n;
                ok = 1;
            }
        }
    }
    if (ok) hd_json_ws(j);
    return ok;
}

/* The whole header: one object, strict JSON, nothing after it but white
 * space. Allocates nothing. */
static hd_status hd_json_check(hd_ctx *ctx, const char *name, const unsigned char *text, size_t n) {
    hd_json j = {text, text + n};
    hd_json_ws(&j);
    const unsigned char *start = j.p;
    if (!hd_json_skip(&j, 0)) {
        const char *why = j.p >= j.end ? "it ends too soon" : "unexpected byte";
        if (j.p < j.end) {
            char q[32];
            return hd_error(ctx, HD_ERR_IO, "%s: header is not valid JSON (%s at byte %zu: %s)",
                            name, why, (size_t)(j.p - text),
                            hd_io_quote(j.p, HD_MIN((size_t)(j.end - j.p), 8), q, sizeof q));
        }
        return hd_error(ctx, HD_ERR_IO, "%s: header is not valid JSON (%s)", name, why);
    }
    if (j.p != j.end || *start != '{')
        return hd_error(ctx, HD_ERR_IO, "%s: header is not a single JSON object", name);
    return HD_OK;
}

/* A string of a checked header, decoded into memory from ctx
 * (NUL-terminated, *n + 1 bytes). */
static char *hd_json_dup(hd_ctx *ctx, hd_json *j, size_t *n) {
    hd_json probe = *j;
    hd_json_string(&probe, NULL, n);
    char *s = hd_ctx_alloc(ctx, *n + 1);
    if (!s) return NULL;
    hd_json_string(j, (unsigned char *)s, n);
    s[*n] = 0;
    hd_json_ws(j);
    return s;
}

/* Past the ':' after a key. */
static void hd_json_colon(hd_json *j) {
    j->p++;
    hd_json_ws(j);
}

/* After a member or element: 1 if another follows (the ',' is passed), 0
 * at the closing bracket (passed too). */
static int hd_json_next(hd_json *j) {
    int more = *j->p == ',';
    j->p++;
    hd_json_ws(j);
    return more;
}

/* Open an object or array at j->p; 0 when it is empty (and passed). */
static int hd_json_open(hd_json *j) {
    j->p++;
    hd_json_ws(j);
    if (*j->p == '}' || *j->p == ']') {
        j->p++;
        hd_json_ws(j);
        return 0;
    }
    return 1;
}

/* ---- reading ---- */

static hd_status hd_io_st_bad(hd_io_st *s, const char *tensor, size_t len, const char *what) {
    char q[128];
    return hd_error(s->ctx, HD_ERR_IO, "%s: tensor '%s': %s", s->name,
                    hd_io_quote(tensor, len, q, sizeof q), what);
}

/* "dtype": a string naming a supported type. */
static hd_status hd_io_st_dtype(hd_io_st *s, const hd_io_st_info *info, hd_json *j, hd_io_elem *e) {
    if (*j->p != '"')
        return hd_io_st_bad(s, info->name, info->name_len, "\"dtype\" is missing or not a string");
    unsigned char d[16];
    size_t n;
    hd_json probe = *j;
    hd_json_string(&probe, NULL, &n);
    if (n < sizeof d) hd_json_string(j, d, &n);
    for (size_t i = 0; n < sizeof d && i < sizeof hd_io_st_types / sizeof hd_io_st_types[0]; i++) {
        if (strlen(hd_io_st_types[i].name) != n || memcmp(hd_io_st_types[i].name, d, n) != 0)
            continue;
        if (hd_io_st_types[i].kind == 'h') {
            *e = (hd_io_elem){HD_BF16, 'f', 2, 0};
            return HD_OK;
        }
        hd_io_elem_make(hd_io_st_types[i].kind, hd_io_st_types[i].size, 0, e);
        return HD_OK;
    }
    char q[64], msg[128];
    snprintf(msg, sizeof msg, "unsupported dtype '%s'",
             n < sizeof d ? hd_io_quote(d, n, q, sizeof q) : "(a long name)");
    return hd_io_st_bad(s, info->name, info->name_len, msg);
}

/* A JSON array of non-negative integers (no fraction or exponent) that fit
 * int64: 1 and *n its length, which may pass max (only max are stored); 0
 * when the value is anything else. The value is passed either way. */
static int hd_io_st_ints(hd_json *j, int64_t *out, int max, int *n) {
    const unsigned char *at = j->p;
    hd_json_skip(j, 0); /* checked: it parses */
    hd_json a = {at, j->p};
    if (*at != '[') return 0;
    int k = 0;
    if (hd_json_open(&a)) {
        do {
            const unsigned char *p = a.p;
            uint64_t v = 0;
            if (*p == '-' && p[1] == '0') p++; /* -0 */
            while (p < a.end && *p >= '0' && *p <= '9') {
                if (v > ((uint64_t)INT64_MAX - (uint64_t)(*p - '0')) / 10) return 0;
                v = v * 10 + (uint64_t)(*p++ - '0');
            }
            if (p == a.p || (p < a.end && (*p == '.' || *p == 'e' || *p == 'E'))) return 0;
            if (*a.p == '-' && v != 0) return 0;
            if (k < max) out[k] = (int64_t)v;
            k++;
            a.p = p;
            hd_json_ws(&a);
        } while (hd_json_next(&a));
    }
    *n = k;
    return 1;
}

/* One tensor's entry: {"dtype", "shape", "data_offsets"}, other keys
 * ignored; the last of a repeated key counts. */
static hd_status hd_io_st_info_parse(hd_io_st *s, hd_json *j, hd_io_st_info *info) {
    const char *tname = info->name;
    size_t tlen = info->name_len;
    if (*j->p == 'n') return hd_io_st_bad(s, tname, tlen, "entry is null");
    if (*j->p != '{') return hd_io_st_bad(s, tname, tlen, "entry is not a JSON object");
    hd_json dt = {NULL, NULL}, shape = {NULL, NULL}, offs = {NULL, NULL};
    if (hd_json_open(j)) {
        do {
            unsigned char key[16];
            size_t kn;
            hd_json probe = *j;
            hd_json_string(&probe, NULL, &kn);
            hd_json_string(j, kn < sizeof key ? key : NULL, &kn);
            hd_json_ws(j);
            hd_json_colon(j);
            hd_json *slot = NULL;
            if (kn == 5 && !memcmp(key, "dtype", 5)) slot = &dt;
            if (kn == 5 && !memcmp(key, "shape", 5)) slot = &shape;
            if (kn == 12 && !memcmp(key, "data_offsets", 12)) slot = &offs;
            if (slot) slot->p = j->p;
            hd_json_skip(j, 0);
            if (slot) slot->end = j->p;
        } while (hd_json_next(j));
    }
    if (!dt.p) return hd_io_st_bad(s, tname, tlen, "\"dtype\" is missing or not a string");
    if (hd_io_st_dtype(s, info, &dt, &info->elem)) return HD_ERR_IO;
    if (!shape.p || !hd_io_st_ints(&shape, info->shape, HD_MAX_DIMS, &info->ndim))
        return hd_io_st_bad(s, tname, tlen, "\"shape\" is not a list of non-negative integers");
    if (info->ndim > HD_MAX_DIMS)
        return hd_io_st_bad(s, tname, tlen, "shape has more than 8 dimensions");
    int64_t o[2];
    int no = 0;
    if (!offs.p || !hd_io_st_ints(&offs, o, 2, &no) || no != 2)
        return hd_io_st_bad(s, tname, tlen, "\"data_offsets\" is not two non-negative integers");
    info->begin = (uint64_t)o[0];
    info->end = (uint64_t)o[1];
    int64_t numel;
    size_t nbytes;
    char label[256], q[128];
    snprintf(label, sizeof label, "%s: tensor '%s'", s->name,
             hd_io_quote(tname, tlen, q, sizeof q));
    if (hd_io_shape_size(s->ctx, label, info->shape, info->ndim, info->elem.size, &numel, &nbytes))
        return HD_ERR_IO;
    if (info->end < info->begin || info->end > s->data_len)
        return hd_error(s->ctx, HD_ERR_IO,
                        "%s: data_offsets [%llu, %llu] lie outside the data section of %zu bytes",
                        label, (unsigned long long)info->begin, (unsigned long long)info->end,
                        s->data_len);
    if (info->end - info->begin != nbytes) {
        char sb[256];
        return hd_error(s->ctx, HD_ERR_IO,
                        "%s: shape %s needs %zu bytes, data_offsets [%llu, %llu] hold %llu", label,
                        hd_shape_str(info->shape, info->ndim, sb, sizeof sb), nbytes,
                        (unsigned long long)info->begin, (unsigned long long)info->end,
                        (unsigned long long)(info->end - info->begin));
    }
    return HD_OK;
}

/* "__metadata__": an object of strings. */
static hd_status hd_io_st_meta(hd_io_st *s, hd_json *j, hd_io_list *out) {
    if (s->have_meta)
        return hd_error(s->ctx, HD_ERR_IO, "%s: \"__metadata__\" appears twice", s->name);
    s->have_meta = 1;
    if (*j->p != '{')
        return hd_error(s->ctx, HD_ERR_IO, "%s: \"__metadata__\" is not a JSON object", s->name);
    if (!hd_json_open(j)) return HD_OK;
    do {
        size_t kn, vn;
        char *k = hd_json_dup(s->ctx, j, &kn), *v = NULL;
        if (!k) return HD_ERR_MEMORY;
        hd_json_colon(j);
        hd_status st = HD_OK;
        if (*j->p != '"')
            st =
                hd_error(s->ctx, HD_ERR_IO, "%s: \"__metadata__\" values must be strings", s->name);
        else if (!(v = hd_json_dup(s->ctx, j, &vn)))
            st = HD_ERR_MEMORY;
        else if (strlen(k) != kn || strlen(v) != vn)
            st = hd_error(s->ctx, HD_ERR_IO, "%s: \"__metadata__\" holds a NUL character", s->name);
        else
            st = hd_io_list_add_meta(s->ctx, out, k, v);
        hd_ctx_free(s->ctx, k, kn + 1);
        if (v) hd_ctx_free(s->ctx, v, vn + 1);
        if (st) return st;
    } while (hd_json_next(j));
    return HD_OK;
}

static int hd_io_st_by_offset(const void *a, const void *b) {
    const hd_io_st_info *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int hd_io_st_by_name(const void *a, const void *b) {
    const hd_io_st_info *x = a, *y = b;
    size_t n = HD_MIN(x->name_len, y->name_len);
    int c = memcmp(x->name, y->name, n);
    if (c) return c;
    if (x->name_len != y->name_len) return x->name_len < y->name_len ? -1 : 1;
    return 0;
}

/* Names are unique; sorted by offset, the tensors tile the data section
 * exactly. Leaves the tensors in that order (the list's order). */
static hd_status hd_io_st_tiling(hd_io_st *s) {
    if (s->count == 0)
        return s->data_len ? hd_error(s->ctx, HD_ERR_IO,
                                      "%s: the data section has %zu bytes, the tensors use 0",
                                      s->name, s->data_len)
                           : HD_OK;
    qsort(s->infos, s->count, sizeof *s->infos, hd_io_st_by_name);
    for (size_t i = 1; i < s->count; i++)
        if (!hd_io_st_by_name(&s->infos[i - 1], &s->infos[i]))
            return hd_io_st_bad(s, s->infos[i].name, s->infos[i].name_len,
                                "the name appears twice");
    qsort(s->infos, s->count, sizeof *s->infos, hd_io_st_by_offset);
    uint64_t at = 0;
    for (size_t i = 0; i < s->count; i++) {
        const hd_io_st_info *t = &s->infos[i];
        if (t->begin < at)
            return hd_io_st_bad(s, t->name, t->name_len, "its data overlaps another tensor's");
        if (t->begin > at)
            return hd_io_st_bad(s, t->name, t->name_len, "unused bytes before its data");
        at = t->end;
    }
    if (at != s->data_len)
        return hd_error(s->ctx, HD_ERR_IO,
                        "%s: the data section has %zu bytes, the tensors use %llu", s->name,
                        s->data_len, (unsigned long long)at);
    return HD_OK;
}

/* Walk the checked header object: metadata into out, tensors into
 * s->infos. */
static hd_status hd_io_st_walk(hd_io_st *s, hd_json *j, hd_io_list *out) {
    if (!hd_json_open(j)) return hd_io_st_tiling(s);
    do {
        size_t kn;
        char *key = hd_json_dup(s->ctx, j, &kn);
        if (!key) return HD_ERR_MEMORY;
        hd_json_colon(j);
        if (kn == 12 && !memcmp(key, "__metadata__", 12)) {
            hd_ctx_free(s->ctx, key, kn + 1);
            if (hd_io_st_meta(s, j, out)) return s->ctx->status;
            continue;
        }
        if (s->count == s->cap) {
            size_t ncap = s->cap ? s->cap * 2 : 8, nbytes;
            hd_io_st_info *p = NULL;
            if (hd_mul_overflow(ncap, sizeof *p, &nbytes))
                p = hd_ctx_realloc(s->ctx, s->infos, s->cap * sizeof *p, nbytes);
            if (!p) {
                hd_ctx_free(s->ctx, key, kn + 1);
                return s->ctx->status ? s->ctx->status : HD_ERR_MEMORY;
            }
            s->infos = p;
            s->cap = ncap;
        }
        hd_io_st_info *info = &s->infos[s->count++];
        memset(info, 0, sizeof *info);
        info->name = key;
        info->name_len = kn;
        info->order = s->count - 1;
        if (strlen(key) != kn) return hd_io_st_bad(s, key, kn, "the name holds a NUL character");
        if (hd_io_st_info_parse(s, j, info)) return HD_ERR_IO;
    } while (hd_json_next(j));
    return hd_io_st_tiling(s);
}

static hd_status hd_io_st_tensors(hd_io_st *s, const unsigned char *data, hd_io_list *out) {
    for (size_t i = 0; i < s->count; i++) {
        const hd_io_st_info *info = &s->infos[i];
        hd_tensor *t = NULL;
        if (hd_io_decode(s->ctx, &info->elem, data + info->begin, info->shape, info->ndim, 0, &t))
            return s->ctx->status;
        hd_status st = hd_io_list_add(s->ctx, out, info->name, t);
        hd_tensor_unref(t);
        if (st) return st;
    }
    return HD_OK;
}

hd_status hd_io_load_safetensors_buffer(hd_ctx *ctx, const char *name, const void *buf, size_t n,
                                        hd_io_list *out) {
    hd_io_list_init(out);
    const unsigned char *p = buf;
    if (n < 8)
        return hd_error(ctx, HD_ERR_IO, "%s: truncated .safetensors file: %zu bytes, no header",
                        name, n);
    uint64_t hlen = hd_io_rd64(p);
    if (hlen > n - 8)
        return hd_error(ctx, HD_ERR_IO,
                        "%s: header length %llu runs past the end of the file (%zu bytes)", name,
                        (unsigned long long)hlen, n);
    if (hlen > HD_IO_ST_MAX_HEADER)
        return hd_error(ctx, HD_ERR_IO, "%s: header length %llu is over the 100 MB limit", name,
                        (unsigned long long)hlen);
    if (hd_json_check(ctx, name, p + 8, (size_t)hlen)) return ctx->status;
    hd_io_st s = {ctx, name, n - 8 - (size_t)hlen, NULL, 0, 0, 0};
    hd_json j = {p + 8, p + 8 + hlen};
    hd_json_ws(&j);
    hd_status st = hd_io_st_walk(&s, &j, out);
    if (!st) st = hd_io_st_tensors(&s, p + 8 + hlen, out);
    for (size_t i = 0; i < s.count; i++) hd_ctx_free(ctx, s.infos[i].name, s.infos[i].name_len + 1);
    hd_ctx_free(ctx, s.infos, s.cap * sizeof *s.infos);
    if (st) hd_io_list_free(ctx, out);
    return st;
}

hd_status hd_io_load_safetensors(hd_ctx *ctx, const char *path, hd_io_list *out) {
    hd_io_list_init(out);
    hd_io_file f;
    if (hd_io_file_open(ctx, path, &f)) return ctx->status;
    hd_status st = hd_io_load_safetensors_buffer(ctx, path, f.data, f.n, out);
    hd_io_file_close(ctx, &f);
    return st;
}

/* ---- writing ---- */

/* Append to the header being built (memory from ctx). */
static hd_status hd_io_st_put(hd_ctx *ctx, hd_io_bytes *b, const void *p, size_t n) {
    hd_io_out o = {ctx, "header", -1, b, 0, 0, NULL, NULL};
    return hd_io_out_raw(&o, p, n);
}

/* s as a JSON string. */
static hd_status hd_io_st_put_str(hd_ctx *ctx, hd_io_bytes *b, const char *s) {
    if (hd_io_st_put(ctx, b, "\"", 1)) return HD_ERR_MEMORY;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const unsigned char *run = p;
        while (*p && *p >= 0x20 && *p != '"' && *p != '\\') p++;
        if (p > run && hd_io_st_put(ctx, b, run, (size_t)(p - run))) return HD_ERR_MEMORY;
        if (!*p) break;
        char esc[8];
        int n = *p == '"' || *p == '\\' ? snprintf(esc, sizeof esc, "\\%c", *p)
                                        : snprintf(esc, sizeof esc, "\\u%04x", *p);
        if (hd_io_st_put(ctx, b, esc, (size_t)n)) return HD_ERR_MEMORY;
        p++;
    }
    return hd_io_st_put(ctx, b, "\"", 1);
}

static hd_status hd_io_st_put_fmt(hd_ctx *ctx, hd_io_bytes *b, const char *fmt, uint64_t v) {
    char t[32];
    int n = snprintf(t, sizeof t, fmt, (unsigned long long)v);
    return hd_io_st_put(ctx, b, t, (size_t)n);
}

/* {"dtype": ..., "shape": [...], "data_offsets": [begin, end]} */
static hd_status hd_io_st_put_entry(hd_ctx *ctx, hd_io_bytes *b, const hd_tensor *t,
                                    uint64_t begin) {
    if (hd_io_st_put(ctx, b, "{\"dtype\":", 9) ||
        hd_io_st_put_str(ctx, b, hd_dtype_infos[t->dtype].st) ||
        hd_io_st_put(ctx, b, ",\"shape\":[", 10))
        return HD_ERR_MEMORY;
    for (int i = 0; i < t->ndim; i++)
        if (hd_io_st_put_fmt(ctx, b, i ? ",%llu" : "%llu", (uint64_t)t->shape[i]))
            return HD_ERR_MEMORY;
    if (hd_io_st_put(ctx, b, "],\"data_offsets\":[", 18) ||
        hd_io_st_put_fmt(ctx, b, "%llu,", begin) ||
        hd_io_st_put_fmt(ctx, b, "%llu]}", begin + hd_tensor_nbytes(t)))
        return HD_ERR_MEMORY;
    return HD_OK;
}

/* The whole header object for l, tensors laid out in list order. */
static hd_status hd_io_st_header(hd_ctx *ctx, const hd_io_list *l, hd_io_bytes *b) {
    if (hd_io_st_put(ctx, b, "{", 1)) return HD_ERR_MEMORY;
    int first = 1;
    if (l->nmeta) {
        if (hd_io_st_put(ctx, b, "\"__metadata__\":{", 16)) return HD_ERR_MEMORY;
        for (size_t i = 0; i < l->nmeta; i++)
            if ((i && hd_io_st_put(ctx, b, ",", 1)) || hd_io_st_put_str(ctx, b, l->meta[i].key) ||
                hd_io_st_put(ctx, b, ":", 1) || hd_io_st_put_str(ctx, b, l->meta[i].value))
                return HD_ERR_MEMORY;
        if (hd_io_st_put(ctx, b, "}", 1)) return HD_ERR_MEMORY;
        first = 0;
    }
    uint64_t at = 0;
    for (size_t i = 0; i < l->count; i++) {
        if ((!first && hd_io_st_put(ctx, b, ",", 1)) ||
            hd_io_st_put_str(ctx, b, l->entries[i].name) || hd_io_st_put(ctx, b, ":", 1) ||
            hd_io_st_put_entry(ctx, b, l->entries[i].tensor, at))
            return HD_ERR_MEMORY;
        first = 0;
        at += hd_tensor_nbytes(l->entries[i].tensor);
    }
    return hd_io_st_put(ctx, b, "}", 1);
}

static hd_status hd_io_st_emit(hd_io_out *o, const void *arg) {
    const hd_io_list *l = arg;
    hd_io_bytes text = {0};
    hd_status st = hd_io_st_header(o->ctx, l, &text);
    if (!st) {
        size_t pad = (8 - text.len % 8) % 8;
        unsigned char hl[8];
        hd_io_wr64(hl, (uint64_t)(text.len + pad));
        if (hd_io_out_write(o, hl, 8) || hd_io_out_write(o, text.data, text.len) ||
            hd_io_out_write(o, "        ", pad))
            st = o->ctx->status;
    }
    hd_io_bytes_free(o->ctx, &text);
    for (size_t i = 0; !st && i < l->count; i++) st = hd_io_out_tensor(o, l->entries[i].tensor);
    return st;
}

static hd_status hd_io_st_check(hd_ctx *ctx, const char *name, const hd_io_list *l) {
    char label[256], q[128];
    for (size_t i = 0; i < l->count; i++) {
        const hd_io_entry *e = &l->entries[i];
        snprintf(label, sizeof label, "%s: '%s'", name,
                 hd_io_quote(e->name, strlen(e->name), q, sizeof q));
        if (strcmp(e->name, "__metadata__") == 0)
            return hd_error(ctx, HD_ERR_ARGUMENT, "%s: this name is reserved for metadata", label);
        if (hd_io_check_saveable(ctx, label, e->tensor)) return ctx->status;
    }
    return hd_io_list_check_unique(ctx, name, l, HD_ERR_ARGUMENT);
}

hd_status hd_io_save_safetensors_bytes(hd_ctx *ctx, const char *name, const hd_io_list *l,
                                       hd_io_bytes *out) {
    if (hd_io_st_check(ctx, name, l)) return ctx->status;
    return hd_io_save_to_bytes(ctx, name, hd_io_st_emit, l, out);
}

hd_status hd_io_save_safetensors(hd_ctx *ctx, const char *path, const hd_io_list *l) {
    if (hd_io_st_check(ctx, path, l)) return ctx->status;
    return hd_io_save_to_path(ctx, path, hd_io_st_emit, l);
}
