/* hd_io_safetensors: the safetensors format.
 *
 * An 8-byte little-endian header length N, N bytes of JSON (an object: each
 * tensor name maps to {"dtype", "shape", "data_offsets": [begin, end]},
 * offsets relative to the data section that follows; "__metadata__" maps
 * strings to strings), then the data. The JSON is parsed by json-c. As in the
 * reference implementation, the tensors must tile the data section exactly:
 * sorted by offset, each begins where the previous ends, and the last ends at
 * the end of the file. */
#include "hd_io_impl.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#define HD_IO_ST_MAX_HEADER 100000000u /* the reference implementation's cap */

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
    const char *name; /* owned by the JSON object */
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
    size_t count;
} hd_io_st;

/* ---- reading ---- */

static hd_status hd_io_st_bad(hd_io_st *s, const char *tensor, const char *what) {
    char q[128];
    return hd_error(s->ctx, HD_ERR_IO, "%s: tensor '%s': %s", s->name,
                    hd_io_quote(tensor, strlen(tensor), q, sizeof q), what);
}

static hd_status hd_io_st_dtype(hd_io_st *s, const char *tensor, json_object *v, hd_io_elem *e) {
    if (!v || !json_object_is_type(v, json_type_string))
        return hd_io_st_bad(s, tensor, "\"dtype\" is missing or not a string");
    const char *d = json_object_get_string(v);
    size_t n = (size_t)json_object_get_string_len(v);
    for (size_t i = 0; i < sizeof hd_io_st_types / sizeof hd_io_st_types[0]; i++) {
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
    snprintf(msg, sizeof msg, "unsupported dtype '%s'", hd_io_quote(d, n, q, sizeof q));
    return hd_io_st_bad(s, tensor, msg);
}

/* A JSON array of at most max non-negative integers. */
static int hd_io_st_ints(json_object *v, int64_t *out, int max, int *n) {
    if (!v || !json_object_is_type(v, json_type_array)) return 0;
    size_t len = json_object_array_length(v);
    if (len > (size_t)max) return 0;
    for (size_t i = 0; i < len; i++) {
        json_object *x = json_object_array_get_idx(v, i);
        if (!x || !json_object_is_type(x, json_type_int) || json_object_get_int64(x) < 0) return 0;
        out[i] = json_object_get_int64(x);
    }
    *n = (int)len;
    return 1;
}

static hd_status hd_io_st_info_parse(hd_io_st *s, const char *tensor, json_object *v,
                                     hd_io_st_info *info) {
    if (!json_object_is_type(v, json_type_object))
        return hd_io_st_bad(s, tensor, "entry is not a JSON object");
    json_object *dt = NULL, *shape = NULL, *offs = NULL;
    json_object_object_get_ex(v, "dtype", &dt);
    json_object_object_get_ex(v, "shape", &shape);
    json_object_object_get_ex(v, "data_offsets", &offs);
    if (hd_io_st_dtype(s, tensor, dt, &info->elem)) return HD_ERR_IO;
    if (!hd_io_st_ints(shape, info->shape, HD_MAX_DIMS, &info->ndim)) {
        if (shape && json_object_is_type(shape, json_type_array) &&
            json_object_array_length(shape) > HD_MAX_DIMS)
            return hd_io_st_bad(s, tensor, "shape has more than 8 dimensions");
        return hd_io_st_bad(s, tensor, "\"shape\" is not a list of non-negative integers");
    }
    int64_t o[2];
    int no = 0;
    if (!hd_io_st_ints(offs, o, 2, &no) || no != 2)
        return hd_io_st_bad(s, tensor, "\"data_offsets\" is not two non-negative integers");
    info->begin = (uint64_t)o[0];
    info->end = (uint64_t)o[1];
    info->name = tensor;
    int64_t numel;
    size_t nbytes;
    char label[256], q[128];
    snprintf(label, sizeof label, "%s: tensor '%s'", s->name,
             hd_io_quote(tensor, strlen(tensor), q, sizeof q));
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

static hd_status hd_io_st_meta(hd_io_st *s, json_object *v, hd_io_list *out) {
    if (!json_object_is_type(v, json_type_object))
        return hd_error(s->ctx, HD_ERR_IO, "%s: \"__metadata__\" is not a JSON object", s->name);
    struct json_object_iterator it = json_object_iter_begin(v), end = json_object_iter_end(v);
    for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
        json_object *x = json_object_iter_peek_value(&it);
        if (!x || !json_object_is_type(x, json_type_string))
            return hd_error(s->ctx, HD_ERR_IO, "%s: \"__metadata__\" values must be strings",
                            s->name);
        if (hd_io_list_add_meta(s->ctx, out, json_object_iter_peek_name(&it),
                                json_object_get_string(x)))
            return HD_ERR_MEMORY;
    }
    return HD_OK;
}

static int hd_io_st_by_offset(const void *a, const void *b) {
    const hd_io_st_info *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Sorted by offset, the tensors must tile the data section exactly. */
static hd_status hd_io_st_tiling(hd_io_st *s) {
    qsort(s->infos, s->count, sizeof *s->infos, hd_io_st_by_offset);
    uint64_t at = 0;
    for (size_t i = 0; i < s->count; i++) {
        const hd_io_st_info *t = &s->infos[i];
        if (t->begin < at) return hd_io_st_bad(s, t->name, "its data overlaps another tensor's");
        if (t->begin > at) return hd_io_st_bad(s, t->name, "unused bytes before its data");
        at = t->end;
    }
    if (at != s->data_len)
        return hd_error(s->ctx, HD_ERR_IO,
                        "%s: the data section has %zu bytes, the tensors use %llu", s->name,
                        s->data_len, (unsigned long long)at);
    return HD_OK;
}

/* Walk the header object: metadata into out, tensors into s->infos. */
static hd_status hd_io_st_walk(hd_io_st *s, json_object *root, hd_io_list *out) {
    size_t n = (size_t)json_object_object_length(root);
    s->infos = hd_ctx_calloc(s->ctx, n ? n : 1, sizeof *s->infos);
    if (!s->infos) return HD_ERR_MEMORY;
    struct json_object_iterator it = json_object_iter_begin(root), end = json_object_iter_end(root);
    for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
        const char *key = json_object_iter_peek_name(&it);
        json_object *v = json_object_iter_peek_value(&it);
        if (strcmp(key, "__metadata__") == 0) {
            if (hd_io_st_meta(s, v, out)) return s->ctx->status;
            continue;
        }
        if (!v) return hd_io_st_bad(s, key, "entry is null");
        hd_io_st_info *info = &s->infos[s->count];
        info->order = s->count;
        if (hd_io_st_info_parse(s, key, v, info)) return HD_ERR_IO;
        s->count++;
    }
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

/* The JSON header as an object; NULL with an error otherwise. */
static json_object *hd_io_st_json(hd_ctx *ctx, const char *name, const char *text, size_t n) {
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        hd_error(ctx, HD_ERR_MEMORY, "out of memory");
        return NULL;
    }
    /* strict: no comments, single quotes or other extensions; UTF-8 checked */
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = json_tokener_parse_ex(tok, text, (int)n);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!root || err != json_tokener_success) {
        json_object_put(root);
        hd_error(ctx, HD_ERR_IO, "%s: header is not valid JSON (%s)", name,
                 err == json_tokener_continue ? "it ends too soon" : json_tokener_error_desc(err));
        return NULL;
    }
    while (used < n &&
           (text[used] == ' ' || text[used] == '\t' || text[used] == '\n' || text[used] == '\r'))
        used++;
    if (used != n || !json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        hd_error(ctx, HD_ERR_IO, "%s: header is not a single JSON object", name);
        return NULL;
    }
    return root;
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
    json_object *root = hd_io_st_json(ctx, name, (const char *)p + 8, (size_t)hlen);
    if (!root) return ctx->status;
    hd_io_st s = {ctx, name, n - 8 - (size_t)hlen, NULL, 0};
    size_t cap = (size_t)json_object_object_length(root);
    hd_status st = hd_io_st_walk(&s, root, out);
    if (!st) st = hd_io_st_tensors(&s, p + 8 + hlen, out);
    if (s.infos) hd_ctx_free(ctx, s.infos, (cap ? cap : 1) * sizeof *s.infos);
    json_object_put(root);
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

/* {"dtype": ..., "shape": [...], "data_offsets": [begin, end]} */
static json_object *hd_io_st_entry(const hd_tensor *t, uint64_t begin) {
    json_object *o = json_object_new_object(), *shape = json_object_new_array(),
                *offs = json_object_new_array();
    json_object *dt = json_object_new_string(hd_dtype_infos[t->dtype].st);
    int ok = o && shape && offs && dt;
    for (int i = 0; ok && i < t->ndim; i++)
        ok = json_object_array_add(shape, json_object_new_int64(t->shape[i])) == 0;
    ok = ok && json_object_array_add(offs, json_object_new_int64((int64_t)begin)) == 0 &&
         json_object_array_add(offs,
                               json_object_new_int64((int64_t)(begin + hd_tensor_nbytes(t)))) == 0;
    if (ok && json_object_object_add(o, "dtype", dt) == 0) {
        dt = NULL;
        if (json_object_object_add(o, "shape", shape) == 0) {
            shape = NULL;
            if (json_object_object_add(o, "data_offsets", offs) == 0) return o;
        }
    }
    json_object_put(dt);
    json_object_put(shape);
    json_object_put(offs);
    json_object_put(o);
    return NULL;
}

static json_object *hd_io_st_meta_json(const hd_io_list *l) {
    json_object *m = json_object_new_object();
    for (size_t i = 0; m && i < l->nmeta; i++) {
        json_object *v = json_object_new_string(l->meta[i].value);
        if (!v || json_object_object_add(m, l->meta[i].key, v) != 0) {
            json_object_put(v);
            json_object_put(m);
            return NULL;
        }
    }
    return m;
}

/* The whole header object for l, tensors laid out in list order. */
static json_object *hd_io_st_header(const hd_io_list *l) {
    json_object *root = json_object_new_object();
    if (root && l->nmeta) {
        json_object *m = hd_io_st_meta_json(l);
        if (!m || json_object_object_add(root, "__metadata__", m) != 0) {
            json_object_put(m);
            json_object_put(root);
            return NULL;
        }
    }
    uint64_t at = 0;
    for (size_t i = 0; root && i < l->count; i++) {
        json_object *e = hd_io_st_entry(l->entries[i].tensor, at);
        if (!e || json_object_object_add(root, l->entries[i].name, e) != 0) {
            json_object_put(e);
            json_object_put(root);
            return NULL;
        }
        at += hd_tensor_nbytes(l->entries[i].tensor);
    }
    return root;
}

static hd_status hd_io_st_emit(hd_io_out *o, const void *arg) {
    const hd_io_list *l = arg;
    json_object *root = hd_io_st_header(l);
    if (!root) return hd_error(o->ctx, HD_ERR_MEMORY, "out of memory building the JSON header");
    size_t len = 0;
    const char *text = json_object_to_json_string_length(
        root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    hd_status st = HD_OK;
    if (!text) {
        st = hd_error(o->ctx, HD_ERR_MEMORY, "out of memory writing the JSON header");
    } else {
        size_t pad = (8 - len % 8) % 8;
        unsigned char hl[8];
        hd_io_wr64(hl, (uint64_t)(len + pad));
        if (hd_io_out_write(o, hl, 8) || hd_io_out_write(o, text, len) ||
            hd_io_out_write(o, "        ", pad))
            st = o->ctx->status;
    }
    json_object_put(root);
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
    return hd_io_list_check_unique(ctx, name, l);
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
