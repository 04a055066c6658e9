/* The .hoduscript format: writer and validating reader (docs/hoduscript.md).
 *
 * Everything is little-endian. The reader checks the size, magic, version
 * and CRC first, then every count against the bytes left before allocating
 * for it; names are length-checked, ops looked up by name, inputs must refer
 * to earlier values, every node goes through its shape rule and must give
 * the type the file declares. Nothing in a file is ever executed. */
#include "hd_script.h"
#include "hd_io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

enum {
    HEADER_BYTES = 48,
    NAME_MAX_BYTES = 1024,
    MAX_ENTRIES = 1 << 24,
    MAX_NODE_INPUTS = 4096,
    MAX_LOOP_DEPTH = 16, /* loops in loops in a file */
};

enum {
    TAG_AXES = 1,
    TAG_KEEPDIM,
    TAG_SHAPE,
    TAG_SCALAR,
    TAG_INTS,
    TAG_DTYPE,
    TAG_SLICE,
    TAG_DROP,
    TAG_LAST = TAG_DROP
};

/* ---- writer ---- */

typedef struct wbuf {
    hd_ctx *ctx;
    unsigned char *p;
    size_t len, cap;
    int failed;
    unsigned version; /* the file's */
} wbuf;

static void w_bytes(wbuf *b, const void *src, size_t n) {
    if (b->failed) return;
    if (n > b->cap - b->len) {
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap - b->len < n) {
            if (ncap > SIZE_MAX / 2) {
                b->failed = 1;
                hd_error(b->ctx, HD_ERR_MEMORY, "out of memory: script too large");
                return;
            }
            ncap *= 2;
        }
        unsigned char *q = hd_ctx_realloc(b->ctx, b->p, b->cap, ncap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = ncap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void w_uint(wbuf *b, uint64_t v, int nbytes) {
    unsigned char le[8];
    for (int i = 0; i < nbytes; i++) le[i] = (unsigned char)(v >> (8 * i));
    w_bytes(b, le, (size_t)nbytes);
}

static void w_u8(wbuf *b, unsigned v) {
    w_uint(b, v, 1);
}
static void w_u16(wbuf *b, unsigned v) {
    w_uint(b, v, 2);
}
static void w_u32(wbuf *b, uint32_t v) {
    w_uint(b, v, 4);
}
static void w_u64(wbuf *b, uint64_t v) {
    w_uint(b, v, 8);
}
static void w_i64(wbuf *b, int64_t v) {
    w_uint(b, (uint64_t)v, 8);
}
static void w_f64(wbuf *b, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    w_u64(b, u);
}

static void w_str(wbuf *b, const char *s) {
    size_t n = strlen(s);
    w_u16(b, (unsigned)n);
    w_bytes(b, s, n);
}

static void w_type(wbuf *b, hd_dtype dt, const int64_t *shape, int ndim) {
    w_u8(b, (unsigned)dt);
    w_u8(b, (unsigned)ndim);
    for (int i = 0; i < ndim; i++) w_i64(b, shape[i]);
}

static void w_ints_tag(wbuf *b, int tag, const int64_t *v, int n) {
    w_u8(b, (unsigned)tag);
    w_u8(b, (unsigned)n);
    for (int i = 0; i < n; i++) w_i64(b, v[i]);
}

static int used_len(const int64_t *v, int n) {
    while (n > 0 && v[n - 1] == 0) n--;
    return n;
}

static void w_attrs(wbuf *b, const hd_attrs *a) {
    int ns = 4, ni = used_len(a->ints, 8), nsl = HD_MAX_DIMS;
    while (ns > 0 && a->scalar[ns - 1] == 0 && !signbit(a->scalar[ns - 1])) ns--;
    while (nsl > 0 && !a->start[nsl - 1] && !a->step[nsl - 1] && !a->len[nsl - 1]) nsl--;
    int count = (a->naxes > 0) + (a->keepdim != 0) + (a->nshape > 0) + (ns > 0) + (ni > 0) + 1 +
                (nsl > 0) + (a->drop_mask != 0);
    w_u8(b, (unsigned)count);
    if (a->naxes > 0) w_ints_tag(b, TAG_AXES, a->axes, a->naxes);
    if (a->keepdim) w_u8(b, TAG_KEEPDIM), w_u8(b, 1);
    if (a->nshape > 0) w_ints_tag(b, TAG_SHAPE, a->shape, a->nshape);
    if (ns > 0) {
        w_u8(b, TAG_SCALAR);
        w_u8(b, (unsigned)ns);
        for (int i = 0; i < ns; i++) w_f64(b, a->scalar[i]);
    }
    if (ni > 0) w_ints_tag(b, TAG_INTS, a->ints, ni);
    w_u8(b, TAG_DTYPE);
    w_u8(b, (unsigned)a->dtype);
    if (nsl > 0) {
        w_u8(b, TAG_SLICE);
        w_u8(b, (unsigned)nsl);
        for (int i = 0; i < nsl; i++) w_i64(b, a->start[i]);
        for (int i = 0; i < nsl; i++) w_i64(b, a->step[i]);
        for (int i = 0; i < nsl; i++) w_i64(b, a->len[i]);
    }
    if (a->drop_mask) w_u8(b, TAG_DROP), w_u32(b, a->drop_mask);
}

/* A tensor's dims, nbytes and bytes; number: the constant record's flag
 * (-1: a state value, which has none). */
static hd_status w_data(wbuf *b, const hd_tensor *t);

static hd_status w_tensor(wbuf *b, hd_ctx *ctx, const hd_tensor *t, int number) {
    w_u8(b, (unsigned)t->dtype);
    w_u8(b, (unsigned)t->ndim);
    if (number >= 0) w_u8(b, (unsigned)number);
    for (int i = 0; i < t->ndim; i++) w_i64(b, t->shape[i]);
    w_u64(b, hd_tensor_nbytes(t));
    /* a tensor on a device (a constant or a state value): through a host
     * copy; a loaded graph's compiler places its constants as it does a
     * traced graph's */
    hd_tensor *host = NULL;
    if (!hd_tensor_is_cpu(t)) {
        if (!(host = hd_tensor_to_host(ctx, (hd_tensor *)t))) return ctx->status;
        t = host;
    }
    hd_status st = w_data(b, t);
    hd_tensor_unref(host);
    return st;
}

static hd_status w_data(wbuf *b, const hd_tensor *t) {
    size_t es = (size_t)hd_dtype_size(t->dtype);
    if (hd_tensor_is_contiguous(t)) {
        w_bytes(b, hd_tensor_data(t), hd_tensor_nbytes(t));
        return HD_OK;
    }
    for (int64_t i = 0; i < t->numel; i++)
        w_bytes(b, (char *)t->storage->data + (size_t)hd_tensor_elem_offset(t, i) * es, es);
    return HD_OK;
}

static hd_status script_check_savable(hd_ctx *ctx, const hd_ir_graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].op == HD_IR_CALLBACK)
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "script '%s' calls the host (%s) inside compiled code and cannot be "
                            "saved: a .hoduscript file holds no host code",
                            g->name, g->nodes[i].cb.name);
        if (g->nodes[i].op == HD_IR_LOOP && script_check_savable(ctx, g->nodes[i].loop->body))
            return ctx->status;
    }
    for (int i = 0; i < g->ninputs; i++)
        if (strlen(g->inputs[i].name) > NAME_MAX_BYTES)
            return hd_error(ctx, HD_ERR_ARGUMENT, "input name too long to save");
    for (int i = 0; i < g->noutputs; i++)
        if (strlen(g->outputs[i].name) > NAME_MAX_BYTES)
            return hd_error(ctx, HD_ERR_ARGUMENT, "output name too long to save");
    if (strlen(g->name) > NAME_MAX_BYTES)
        return hd_error(ctx, HD_ERR_ARGUMENT, "script name too long to save");
    return HD_OK;
}

static void w_body(wbuf *b, hd_ctx *ctx, const hd_ir_graph *g, uint64_t *const_bytes);

/* A loop's fields after its node record (version 3): trips (-1 - k: the
 * count is the value of the loop's input k at run time), from version 4
 * the while condition (u32: its carried input + 1, 0 for none), carries,
 * from version 5 the stacks (a count, then each one's carried input),
 * and its body as a graph of its own (counts, constant bytes, then as the
 * file's main graph). */
static void w_loop(wbuf *b, hd_ctx *ctx, const hd_ir_loop *l) {
    const hd_ir_graph *body = l->body;
    uint64_t const_bytes = 0;
    w_i64(b, l->trips_in >= 0 ? -1 - (int64_t)l->trips_in : l->trips);
    if (b->version >= 4) w_u32(b, (uint32_t)(l->while_in + 1));
    w_u32(b, (uint32_t)l->ncarry);
    for (int i = 0; i < l->ncarry; i++) w_u32(b, (uint32_t)l->carry_src[i]);
    if (b->version >= 5) {
        w_u32(b, (uint32_t)l->nstack);
        for (int i = 0; i < l->nstack; i++) w_u32(b, (uint32_t)l->stack_in[i]);
    }
    for (int i = 0; i < body->nconsts; i++) const_bytes += hd_tensor_nbytes(body->consts[i].t);
    w_u32(b, (uint32_t)body->ninputs);
    w_u32(b, (uint32_t)body->nconsts);
    w_u32(b, (uint32_t)body->nnodes);
    w_u32(b, (uint32_t)body->noutputs);
    w_u64(b, const_bytes);
    w_body(b, ctx, body, &const_bytes);
}

static void w_body(wbuf *b, hd_ctx *ctx, const hd_ir_graph *g, uint64_t *const_bytes) {
    w_str(b, g->name);
    for (int i = 0; i < g->ninputs; i++) {
        const hd_ir_value *v = &g->values[g->inputs[i].value];
        w_str(b, g->inputs[i].name);
        w_type(b, v->dtype, v->shape, v->ndim);
    }
    for (int i = 0; i < g->nconsts && !b->failed; i++) {
        *const_bytes += hd_tensor_nbytes(g->consts[i].t);
        if (w_tensor(b, ctx, g->consts[i].t, g->consts[i].t->number != 0)) b->failed = 1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        const char *name = hd_ir_node_name(n);
        const hd_ir_value *v = &g->values[n->out];
        w_u8(b, (unsigned)strlen(name));
        w_bytes(b, name, strlen(name));
        w_u16(b, (unsigned)n->nin);
        for (int k = 0; k < n->nin; k++) w_u32(b, (uint32_t)n->in[k]);
        w_attrs(b, &n->attrs);
        w_type(b, v->dtype, v->shape, v->ndim);
        if (n->op == HD_IR_LOOP) w_loop(b, ctx, n->loop);
    }
    for (int i = 0; i < g->noutputs; i++) {
        w_str(b, g->outputs[i].name);
        w_u32(b, (uint32_t)g->outputs[i].value);
    }
}

/* The state section (version 2): a count, then per variable its name,
 * flags (1: in place, 2: has a value) and value. */
static void w_state(wbuf *b, hd_ctx *ctx, const hd_script_var *vars, int nvars) {
    w_u32(b, (uint32_t)nvars);
    for (int i = 0; i < nvars && !b->failed; i++) {
        w_str(b, vars[i].name);
        w_u8(b, (unsigned)((vars[i].inplace ? 1 : 0) | (vars[i].t ? 2 : 0)));
        if (vars[i].t && w_tensor(b, ctx, vars[i].t, -1)) b->failed = 1;
    }
}

/* The numbering the format relies on (inputs, constants, nodes) in g and
 * in every loop body; *has_loops 1 if g has loops, 2 if a while loop, 3 if a
 * loop with stacks. */
static hd_status script_compact(hd_ir_graph *g, int *has_loops) {
    if (hd_ir_compact(g)) return g->ctx->status;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].op != HD_IR_LOOP) continue;
        if (*has_loops < 1) *has_loops = 1;
        if (g->nodes[i].loop->while_in >= 0 && *has_loops < 2) *has_loops = 2;
        if (g->nodes[i].loop->nstack) *has_loops = 3;
        if (script_compact(g->nodes[i].loop->body, has_loops)) return g->ctx->status;
    }
    return HD_OK;
}

static void put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

hd_status hd_script_encode(hd_ctx *ctx, const hd_ir_graph *src, unsigned char **data,
                           size_t *size) {
    return hd_script_encode_state(ctx, src, NULL, 0, data, size);
}

hd_status hd_script_encode_state(hd_ctx *ctx, const hd_ir_graph *src, const hd_script_var *vars,
                                 int nvars, unsigned char **data, size_t *size) {
    *data = NULL;
    *size = 0;
    if (script_check_savable(ctx, src)) return ctx->status;
    for (int i = 0; i < nvars; i++)
        if (strlen(vars[i].name) > NAME_MAX_BYTES)
            return hd_error(ctx, HD_ERR_ARGUMENT, "state name too long to save");
    /* the numbering the format relies on: inputs, constants, nodes */
    hd_ir_graph *g = hd_ir_graph_clone(src);
    int has_loops = 0;
    if (!g || script_compact(g, &has_loops) || hd_ir_verify(g)) {
        hd_ir_graph_free(g);
        return ctx->status;
    }
    /* the oldest version that holds the graph: readers of versions 1 and 2
     * read what has no loop, readers of 3 what has no while loop, readers
     * of 4 what has no stacks */
    unsigned version = has_loops ? 2 + (unsigned)has_loops : nvars ? 2 : 1;
    wbuf b = {ctx, NULL, 0, 0, 0, version};
    uint64_t const_bytes = 0;
    unsigned char header[HEADER_BYTES] = {0};
    w_bytes(&b, header, sizeof header);
    w_body(&b, ctx, g, &const_bytes);
    if (version >= 2) w_state(&b, ctx, vars, nvars);
    w_u32(&b, 0); /* checksum, filled below */
    if (!b.failed) {
        memcpy(b.p, HD_SCRIPT_MAGIC, 8);
        put_le(b.p + 8, version, 4);
        put_le(b.p + 12, 0, 4);
        put_le(b.p + 16, (uint64_t)g->ninputs, 4);
        put_le(b.p + 20, (uint64_t)g->nconsts, 4);
        put_le(b.p + 24, (uint64_t)g->nnodes, 4);
        put_le(b.p + 28, (uint64_t)g->noutputs, 4);
        put_le(b.p + 32, const_bytes, 8);
        put_le(b.p + 40, (uint64_t)b.len, 8);
        uLong crc = crc32(0L, Z_NULL, 0);
        for (size_t off = 0; off < b.len - 4; off += 1u << 30) {
            size_t n = HD_MIN((size_t)1 << 30, b.len - 4 - off);
            crc = crc32(crc, b.p + off, (uInt)n);
        }
        put_le(b.p + b.len - 4, (uint64_t)crc, 4);
    }
    hd_ir_graph_free(g);
    if (b.failed) {
        if (b.p) hd_ctx_free(ctx, b.p, b.cap);
        return ctx->status ? ctx->status : hd_error(ctx, HD_ERR_RUNTIME, "cannot save script");
    }
    *data = b.p; /* allocated size is b.cap: shrink so that the caller frees *size */
    unsigned char *q = hd_ctx_realloc(ctx, b.p, b.cap, b.len);
    if (!q) {
        hd_ctx_free(ctx, b.p, b.cap);
        *data = NULL;
        return ctx->status;
    }
    *data = q;
    *size = b.len;
    return HD_OK;
}

/* ---- reader ---- */

typedef struct rbuf {
    hd_ctx *ctx;
    const unsigned char *p;
    size_t pos, end;   /* end: where the checksum starts */
    const char *where; /* the section being read, for messages */
    unsigned version;  /* the file's */
    int depth;         /* loop bodies being read */
} rbuf;

static hd_status r_fail(rbuf *r, const char *what) {
    return hd_error(r->ctx, HD_ERR_IO, "invalid script file: %s (in %s, at byte %zu)", what,
                    r->where, r->pos);
}

/* Pass on the error a graph builder left: out of memory stays so, anything
 * else is the file's fault. */
static hd_status r_wrap(rbuf *r) {
    char msg[HD_ERRMSG_MAX];
    if (r->ctx->status == HD_ERR_MEMORY) return HD_ERR_MEMORY;
    snprintf(msg, sizeof msg, "%s", r->ctx->errmsg);
    return r_fail(r, msg);
}

static int r_need(rbuf *r, size_t n) {
    if (n > r->end - r->pos) {
        r_fail(r, "truncated");
        return 0;
    }
    return 1;
}

static int r_uint(rbuf *r, int nbytes, uint64_t *v) {
    if (!r_need(r, (size_t)nbytes)) return 0;
    *v = 0;
    for (int i = nbytes - 1; i >= 0; i--) *v = *v << 8 | r->p[r->pos + (size_t)i];
    r->pos += (size_t)nbytes;
    return 1;
}

static int r_u8(rbuf *r, unsigned *v) {
    uint64_t x;
    if (!r_uint(r, 1, &x)) return 0;
    *v = (unsigned)x;
    return 1;
}

static int r_i64(rbuf *r, int64_t *v) {
    uint64_t x;
    if (!r_uint(r, 8, &x)) return 0;
    *v = (int64_t)x;
    return 1;
}

/* A length-prefixed name (lenbytes 1 or 2) into buf (NUL-terminated). */
static int r_name(rbuf *r, int lenbytes, char *buf, size_t bufsize) {
    uint64_t n;
    if (!r_uint(r, lenbytes, &n)) return 0;
    if (n == 0 || n > NAME_MAX_BYTES || n >= bufsize) {
        r_fail(r, "name length out of range");
        return 0;
    }
    if (!r_need(r, (size_t)n)) return 0;
    if (memchr(r->p + r->pos, 0, (size_t)n)) {
        r_fail(r, "name contains a NUL byte");
        return 0;
    }
    memcpy(buf, r->p + r->pos, (size_t)n);
    buf[n] = 0;
    r->pos += (size_t)n;
    return 1;
}

static int r_type(rbuf *r, hd_dtype *dt, int64_t *shape, int *ndim) {
    unsigned d, nd;
    if (!r_u8(r, &d) || !r_u8(r, &nd)) return 0;
    if (d >= HD_DTYPE_COUNT) return r_fail(r, "dtype out of range"), 0;
    if (nd > HD_MAX_DIMS) return r_fail(r, "too many dims"), 0;
    for (unsigned i = 0; i < nd; i++) {
        if (!r_i64(r, &shape[i])) return 0;
        if (shape[i] < 0) return r_fail(r, "negative dimension"), 0;
    }
    *dt = (hd_dtype)d;
    *ndim = (int)nd;
    return 1;
}

static int r_ints(rbuf *r, int64_t *dst, int max, int *count) {
    unsigned n;
    if (!r_u8(r, &n)) return 0;
    if ((int)n > max) return r_fail(r, "attribute list too long"), 0;
    for (unsigned i = 0; i < n; i++)
        if (!r_i64(r, &dst[i])) return 0;
    if (count) *count = (int)n;
    return 1;
}

static int r_attr(rbuf *r, unsigned tag, hd_attrs *a) {
    unsigned v, n;
    uint64_t u;
    switch (tag) {
    case TAG_AXES: return r_ints(r, a->axes, HD_MAX_DIMS, &a->naxes);
    case TAG_KEEPDIM:
        if (!r_u8(r, &v)) return 0;
        a->keepdim = v != 0;
        return 1;
    case TAG_SHAPE: return r_ints(r, a->shape, HD_MAX_DIMS, &a->nshape);
    case TAG_SCALAR:
        if (!r_u8(r, &n)) return 0;
        if (n > 4) return r_fail(r, "too many scalars"), 0;
        for (unsigned i = 0; i < n; i++) {
            if (!r_uint(r, 8, &u)) return 0;
            memcpy(&a->scalar[i], &u, 8);
        }
        return 1;
    case TAG_INTS: return r_ints(r, a->ints, 8, NULL);
    case TAG_DTYPE:
        if (!r_u8(r, &v)) return 0;
        if (v >= HD_DTYPE_COUNT) return r_fail(r, "dtype out of range"), 0;
        a->dtype = (hd_dtype)v;
        return 1;
    case TAG_SLICE:
        if (!r_u8(r, &n)) return 0;
        if (n > HD_MAX_DIMS) return r_fail(r, "slice too long"), 0;
        for (unsigned i = 0; i < n; i++)
            if (!r_i64(r, &a->start[i])) return 0;
        for (unsigned i = 0; i < n; i++)
            if (!r_i64(r, &a->step[i])) return 0;
        for (unsigned i = 0; i < n; i++)
            if (!r_i64(r, &a->len[i])) return 0;
        return 1;
    case TAG_DROP:
        if (!r_uint(r, 4, &u)) return 0;
        a->drop_mask = (uint32_t)u;
        return 1;
    default: return r_fail(r, "unknown attribute tag"), 0;
    }
}

static int r_attrs(rbuf *r, hd_attrs *a) {
    unsigned count, tag, last = 0;
    memset(a, 0, sizeof *a);
    if (!r_u8(r, &count)) return 0;
    if (count > TAG_LAST) return r_fail(r, "too many attributes"), 0;
    for (unsigned i = 0; i < count; i++) {
        if (!r_u8(r, &tag)) return 0;
        if (tag <= last) return r_fail(r, "attributes out of order"), 0;
        if (!r_attr(r, tag, a)) return 0;
        last = tag;
    }
    return 1;
}

typedef struct script_header {
    uint32_t version, flags, ninputs, nconsts, nnodes, noutputs;
    uint64_t const_bytes, file_size;
} script_header;

static hd_status r_header(hd_ctx *ctx, const unsigned char *d, size_t size, script_header *h) {
    if (size < HEADER_BYTES + 4)
        return hd_error(ctx, HD_ERR_IO, "invalid script file: truncated (in header)");
    if (memcmp(d, HD_SCRIPT_MAGIC, 8))
        return hd_error(ctx, HD_ERR_IO, "not a .hoduscript file (bad magic)");
    rbuf r = {ctx, d, 8, HEADER_BYTES, "header", 0, 0};
    uint64_t v[8] = {0};
    int widths[8] = {4, 4, 4, 4, 4, 4, 8, 8};
    for (int i = 0; i < 8; i++) r_uint(&r, widths[i], &v[i]);
    h->version = (uint32_t)v[0];
    h->flags = (uint32_t)v[1];
    h->ninputs = (uint32_t)v[2];
    h->nconsts = (uint32_t)v[3];
    h->nnodes = (uint32_t)v[4];
    h->noutputs = (uint32_t)v[5];
    h->const_bytes = v[6];
    h->file_size = v[7];
    if (h->version > HD_SCRIPT_VERSION)
        return hd_error(ctx, HD_ERR_IO,
                        "script file format version %u is newer than this Hodu reads (versions "
                        "1 to %d): the file needs a newer Hodu",
                        (unsigned)h->version, HD_SCRIPT_VERSION);
    if (h->version < 1)
        return hd_error(ctx, HD_ERR_IO, "script file format version %u is not supported",
                        (unsigned)h->version);
    if (h->flags) return hd_error(ctx, HD_ERR_IO, "invalid script file: unknown flags");
    if (h->file_size != size)
        return hd_error(ctx, HD_ERR_IO,
                        "invalid script file: truncated or extended (header says %llu bytes, "
                        "got %zu)",
                        (unsigned long long)h->file_size, size);
    uint64_t stored = 0;
    for (int i = 3; i >= 0; i--) stored = stored << 8 | d[size - 4 + (size_t)i];
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t off = 0; off < size - 4; off += 1u << 30)
        crc = crc32(crc, d + off, (uInt)HD_MIN((size_t)1 << 30, size - 4 - off));
    if ((uint64_t)crc != stored)
        return hd_error(ctx, HD_ERR_IO, "invalid script file: checksum mismatch (damaged file)");
    return HD_OK;
}

/* Counts bounded by the bytes left: each entry takes at least min bytes. */
static hd_status r_counts(rbuf *r, const script_header *h) {
    size_t left = r->end - r->pos;
    struct {
        uint32_t n;
        size_t min;
        const char *what;
    } c[4] = {{h->ninputs, 5, "inputs"},
              {h->nconsts, 11, "constants"},
              {h->nnodes, 7, "nodes"},
              {h->noutputs, 7, "outputs"}};
    for (int i = 0; i < 4; i++)
        if (c[i].n > MAX_ENTRIES || (uint64_t)c[i].n * c[i].min > left)
            return hd_error(r->ctx, HD_ERR_IO, "invalid script file: %u %s cannot fit in %zu bytes",
                            c[i].n, c[i].what, left);
    if (h->const_bytes > left)
        return hd_error(r->ctx, HD_ERR_IO,
                        "invalid script file: %llu bytes of constants cannot fit in %zu bytes",
                        (unsigned long long)h->const_bytes, left);
    return HD_OK;
}

static hd_status r_inputs(rbuf *r, hd_ir_graph *g, uint32_t n) {
    char name[NAME_MAX_BYTES + 1];
    r->where = "inputs";
    for (uint32_t i = 0; i < n; i++) {
        hd_dtype dt;
        int64_t shape[HD_MAX_DIMS];
        int nd;
        if (!r_name(r, 2, name, sizeof name) || !r_type(r, &dt, shape, &nd)) return r->ctx->status;
        if (hd_ir_add_input(g, name, dt, shape, nd) < 0) return r_wrap(r);
    }
    return HD_OK;
}

/* A tensor record (a constant's, or a state value's when number is NULL)
 * into a new tensor; *total adds its bytes. */
static hd_status r_tensor(rbuf *r, unsigned *number, uint64_t *total, hd_tensor **out) {
    unsigned d, nd;
    int64_t shape[HD_MAX_DIMS];
    uint64_t nbytes;
    *out = NULL;
    if (!r_u8(r, &d) || !r_u8(r, &nd) || (number && !r_u8(r, number))) return r->ctx->status;
    if (d >= HD_DTYPE_COUNT) return r_fail(r, "dtype out of range");
    if (nd > HD_MAX_DIMS) return r_fail(r, "too many dims");
    if (number && (*number > 1 || (*number && nd))) return r_fail(r, "bad number flag");
    size_t want = (size_t)hd_dtype_size((hd_dtype)d), span = want;
    for (unsigned i = 0; i < nd; i++) {
        if (!r_i64(r, &shape[i])) return r->ctx->status;
        if (shape[i] < 0) return r_fail(r, "negative dimension");
        /* nonzero dims bounded too: strides of an empty tensor are products */
        if (!hd_mul_overflow(want, (size_t)shape[i], &want) ||
            !hd_mul_overflow(span, (size_t)(shape[i] ? shape[i] : 1), &span) ||
            span > ((size_t)1 << 62) || want > r->end)
            return r_fail(r, "constant too large for the file");
    }
    if (!r_uint(r, 8, &nbytes)) return r->ctx->status;
    if (nbytes != want) return r_fail(r, "constant size does not match its shape");
    if (!r_need(r, (size_t)nbytes)) return r->ctx->status;
    *total += nbytes;
    hd_tensor *t = hd_tensor_from_data(r->ctx, (hd_dtype)d, shape, (int)nd, r->p + r->pos);
    if (!t) return r->ctx->status;
    r->pos += (size_t)nbytes;
    *out = t;
    return HD_OK;
}

static hd_status r_const(rbuf *r, hd_ir_graph *g, uint64_t *total) {
    unsigned number;
    hd_tensor *t;
    if (r_tensor(r, &number, total, &t)) return r->ctx->status;
    t->number = (int)number;
    int v = hd_ir_add_const(g, t);
    hd_tensor_unref(t);
    return v < 0 ? r->ctx->status : HD_OK;
}

/* Bounds on attributes before a shape rule sees them: the rules compute
 * with these values (slice ends, convolution windows) and a hostile file
 * must not make that arithmetic overflow. */
static int r_check_attrs(rbuf *r, hd_ir_graph *g, int op, const hd_attrs *a, const int *in,
                         int nin) {
    const int64_t small = INT32_MAX, big = (int64_t)1 << 62;
    for (int i = 0; i < HD_MAX_DIMS; i++) {
        if (a->axes[i] < -small || a->axes[i] > small || a->shape[i] < -big || a->shape[i] > big ||
            a->start[i] < 0 || a->start[i] > big || a->step[i] < 0 || a->step[i] > big ||
            a->len[i] < 0 || a->len[i] > big)
            return r_fail(r, "attribute out of range"), 0;
        int64_t span;
        if (a->len[i] > 0 &&
            (__builtin_mul_overflow(a->len[i] - 1, a->step[i], &span) || span > big - a->start[i]))
            return r_fail(r, "slice out of range"), 0;
    }
    for (int i = 0; i < 8; i++)
        if (a->ints[i] < -small || a->ints[i] > small)
            return r_fail(r, "attribute out of range"), 0;
    if (op == HD_OP_CONV2D || op == HD_OP_MAX_POOL2D || op == HD_OP_AVG_POOL2D)
        for (int k = 0; k < nin; k++)
            for (int d = 0; d < g->values[in[k]].ndim; d++)
                if (g->values[in[k]].shape[d] > small)
                    return r_fail(r, "convolution or pooling dims out of range"), 0;
    return 1;
}

static hd_status r_graph(rbuf *r, const script_header *h, hd_ir_graph *g);

/* A loop's stacks (version 5): their count, then each one's carried input
 * (checked again when added); *stack is allocated. 0 on failure. */
static int r_stacks(rbuf *r, int ncarry, uint64_t *n, int **stack) {
    if (!r_uint(r, 4, n)) return 0;
    if (*n > (uint64_t)ncarry) return r_fail(r, "more stacks than carried inputs"), 0;
    if (!(*stack = hd_ctx_alloc(r->ctx, (size_t)(*n + 1) * sizeof **stack))) return 0;
    for (uint64_t s = 0; s < *n; s++) {
        uint64_t c = 0;
        if (!r_uint(r, 4, &c)) return 0;
        if (c >= (uint64_t)ncarry) return r_fail(r, "stack of an input that is not carried"), 0;
        (*stack)[s] = (int)c;
    }
    return 1;
}

/* A loop's fields after its node record: the loop's value id, or -1. */
static int r_loop(rbuf *r, hd_ir_graph *g, const int *ins, int nin) {
    char name[NAME_MAX_BYTES + 1];
    int64_t trips;
    uint64_t ncarry, src = 0;
    script_header h;
    memset(&h, 0, sizeof h);
    if (r->depth >= MAX_LOOP_DEPTH) return r_fail(r, "loops nested too deep"), -1;
    uint64_t while_in = 0;
    if (!r_i64(r, &trips) || (r->version >= 4 && !r_uint(r, 4, &while_in)) ||
        !r_uint(r, 4, &ncarry))
        return -1;
    if (while_in > (uint64_t)nin) return r_fail(r, "while condition out of range"), -1;
    if (ncarry > (uint64_t)nin) return r_fail(r, "more carried inputs than inputs"), -1;
    int *carry = hd_ctx_alloc(r->ctx, (size_t)(ncarry + 1) * sizeof *carry);
    if (!carry) return -1;
    int ok = 1;
    for (uint64_t i = 0; i < ncarry && ok; i++) {
        ok = r_uint(r, 4, &src);
        if (ok && src > MAX_ENTRIES) ok = (r_fail(r, "carry source out of range"), 0);
        carry[i] = (int)src;
    }
    uint64_t nstack = 0;
    int *stack = NULL;
    if (ok && r->version >= 5) ok = r_stacks(r, (int)ncarry, &nstack, &stack);
    uint64_t c[5];
    int widths[5] = {4, 4, 4, 4, 8};
    for (int i = 0; i < 5 && ok; i++) ok = r_uint(r, widths[i], &c[i]);
    if (ok) {
        h.ninputs = (uint32_t)c[0];
        h.nconsts = (uint32_t)c[1];
        h.nnodes = (uint32_t)c[2];
        h.noutputs = (uint32_t)c[3];
        h.const_bytes = c[4];
    }
    hd_ir_graph *body = NULL;
    ok = ok && r_name(r, 2, name, sizeof name) && !r_counts(r, &h) &&
         (body = hd_ir_graph_new(r->ctx, name)) != NULL;
    const char *where = r->where;
    r->depth++;
    /* compacted as the outer graph is: an unused constant read in a body
     * is dropped, as a save drops it, so that the graph hashes the same */
    ok = ok && !r_graph(r, &h, body) && !hd_ir_compact(body);
    r->depth--;
    r->where = where;
    int v = -1;
    if (ok) {
        v = hd_ir_add_loop(g, body, trips < 0 ? 1 : trips, ins, nin, (int)ncarry,
                           carry); /* takes body */
        body = NULL;
        if (v >= 0 && trips < -(int64_t)nin) {
            r_fail(r, "trip count input out of range");
            v = -2; /* said */
        }
        if (v >= 0 && trips < 0 && hd_ir_loop_trips_from(g, v, (int)(-1 - trips))) v = -1;
        if (v >= 0 && while_in && hd_ir_loop_while(g, v, (int)while_in - 1)) v = -1;
        for (uint64_t s = 0; s < nstack && v >= 0; s++)
            if (hd_ir_loop_stack(g, v, stack[s]) < 0) v = -1;
        if (v == -1) r_wrap(r);
        v = v < 0 ? -1 : v;
    }
    if (stack) hd_ctx_free(r->ctx, stack, (size_t)(nstack + 1) * sizeof *stack);
    hd_ir_graph_free(body);
    hd_ctx_free(r->ctx, carry, (size_t)(ncarry + 1) * sizeof *carry);
    return v;
}

/* A loop or loop_out node after its common fields: the value id, or -1
 * with the error in ctx. */
static int r_loop_node(rbuf *r, hd_ir_graph *g, int loop, const int *ins, int nin,
                       const hd_attrs *a) {
    if (loop) return r_loop(r, g, ins, nin);
    if (nin != 1) return r_fail(r, "loop_out takes one input"), -1;
    int v = hd_ir_add_loop_out(g, ins[0], (int)a->ints[0]);
    if (v < 0) r_wrap(r);
    return v;
}

static hd_status r_node(rbuf *r, hd_ir_graph *g, int **ins, size_t *ins_cap) {
    char name[64];
    uint64_t nin, id = 0;
    hd_attrs a;
    if (!r_name(r, 1, name, sizeof name)) return r->ctx->status;
    int op = hd_op_from_name(name);
    int loop = r->version >= 3 && !strcmp(name, "loop");
    int loop_out = r->version >= 3 && !strcmp(name, "loop_out");
    if (op < 0 && !loop && !loop_out) return r_fail(r, "unknown op name");
    if (!r_uint(r, 2, &nin)) return r->ctx->status;
    if (nin > MAX_NODE_INPUTS || !r_need(r, (size_t)nin * 4)) return r_fail(r, "bad input count");
    if (nin > *ins_cap) {
        int *p = hd_ctx_realloc(r->ctx, *ins, *ins_cap * sizeof **ins, (size_t)nin * sizeof **ins);
        if (!p) return r->ctx->status;
        *ins = p;
        *ins_cap = (size_t)nin;
    }
    for (uint64_t k = 0; k < nin; k++) {
        r_uint(r, 4, &id);
        if (id >= (uint64_t)g->nvalues)
            return r_fail(r, "input refers to a later or unknown value");
        (*ins)[k] = (int)id;
    }
    hd_dtype dt;
    int64_t shape[HD_MAX_DIMS];
    int nd;
    if (!r_attrs(r, &a) || !r_type(r, &dt, shape, &nd) ||
        !r_check_attrs(r, g, op, &a, *ins, (int)nin))
        return r->ctx->status;
    if (loop || loop_out) {
        int v = r_loop_node(r, g, loop, *ins, (int)nin, &a);
        if (v < 0) return r->ctx->status;
        const hd_ir_value *val = &g->values[v];
        if (val->dtype != dt || val->ndim != nd ||
            memcmp(val->shape, shape, (size_t)nd * sizeof *shape))
            return r_fail(r, "loop type differs from what its body gives");
        return HD_OK;
    }
    int v = hd_ir_add_node(g, (hd_op)op, *ins, (int)nin, &a);
    if (v < 0) {
        if (r->ctx->status == HD_ERR_MEMORY) return HD_ERR_MEMORY;
        char msg[HD_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "node %s rejected by its shape rule: %.900s", name,
                 r->ctx->errmsg);
        return r_fail(r, msg);
    }
    const hd_ir_value *val = &g->values[v];
    if (val->dtype != dt || val->ndim != nd ||
        memcmp(val->shape, shape, (size_t)nd * sizeof *shape))
        return r_fail(r, "node type differs from what its shape rule gives");
    return HD_OK;
}

static hd_status r_outputs(rbuf *r, hd_ir_graph *g, uint32_t n) {
    char name[NAME_MAX_BYTES + 1];
    r->where = "outputs";
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v;
        if (!r_name(r, 2, name, sizeof name) || !r_uint(r, 4, &v)) return r->ctx->status;
        if (v >= (uint64_t)g->nvalues) return r_fail(r, "output refers to an unknown value");
        if (hd_ir_add_output(g, name, (int)v)) return r_wrap(r);
    }
    return HD_OK;
}

static hd_status r_state(rbuf *r, hd_script_var **out, int *nout) {
    char name[NAME_MAX_BYTES + 1];
    uint64_t n, total = 0;
    r->where = "state";
    if (!r_uint(r, 4, &n)) return r->ctx->status;
    if (n > MAX_ENTRIES || n * 4 > r->end - r->pos) return r_fail(r, "too many state variables");
    hd_script_var *vars = hd_ctx_calloc(r->ctx, (size_t)n + 1, sizeof *vars);
    if (!vars) return r->ctx->status;
    hd_status st = HD_OK;
    int k = 0;
    for (; k < (int)n && !st; k++) {
        unsigned flags;
        if (!r_name(r, 2, name, sizeof name) || !r_u8(r, &flags)) {
            st = r->ctx->status;
            break;
        }
        for (int i = 0; i < k && !st; i++)
            if (!strcmp(vars[i].name, name)) st = r_fail(r, "duplicate state name");
        if (!st && flags > 3) st = r_fail(r, "unknown state flags");
        if (!st && !(vars[k].name = hd_ctx_strdup(r->ctx, name))) st = r->ctx->status;
        vars[k].inplace = flags & 1;
        if (!st && (flags & 2)) st = r_tensor(r, NULL, &total, &vars[k].t);
    }
    if (st || n == 0) { /* no state: no table (its owner keeps none) */
        hd_script_vars_free(r->ctx, vars, (int)n);
        return st;
    }
    *out = vars;
    *nout = (int)n;
    return HD_OK;
}

/* A graph's inputs, constants, nodes and outputs (the file's main graph,
 * or a loop's body). */
static hd_status r_graph(rbuf *r, const script_header *h, hd_ir_graph *g) {
    uint64_t total = 0;
    if (r_inputs(r, g, h->ninputs)) return r->ctx->status;
    r->where = "constants";
    for (uint32_t i = 0; i < h->nconsts; i++)
        if (r_const(r, g, &total)) return r->ctx->status;
    if (total != h->const_bytes) return r_fail(r, "constant bytes differ from the header");
    r->where = r->depth ? "a loop's nodes" : "nodes";
    int *ins = NULL;
    size_t cap = 0;
    hd_status st = HD_OK;
    for (uint32_t i = 0; i < h->nnodes && !st; i++) st = r_node(r, g, &ins, &cap);
    if (ins) hd_ctx_free(r->ctx, ins, cap * sizeof *ins);
    return st || r_outputs(r, g, h->noutputs) ? r->ctx->status : HD_OK;
}

static hd_status r_body(rbuf *r, const script_header *h, hd_ir_graph *g, hd_script_var **vars,
                        int *nvars) {
    if (r_graph(r, h, g)) return r->ctx->status;
    if (h->version >= 2 && r_state(r, vars, nvars)) return r->ctx->status;
    if (r->pos != r->end) return r_fail(r, "trailing bytes");
    if (*nvars && hd_script_check_state(r->ctx, g, *vars, *nvars)) return r_wrap(r);
    /* canonical numbering, unused constants dropped: a loaded graph hashes
     * and saves as the graph a trace of the same program */
    return hd_ir_compact(g) || hd_ir_verify(g) ? r_wrap(r) : HD_OK;
}

hd_status hd_script_decode(hd_ctx *ctx, const unsigned char *data, size_t size, hd_ir_graph **out) {
    hd_script_var *vars = NULL;
    int nvars = 0;
    hd_status st = hd_script_decode_state(ctx, data, size, out, &vars, &nvars);
    hd_script_vars_free(ctx, vars, nvars);
    return st;
}

hd_status hd_script_decode_state(hd_ctx *ctx, const unsigned char *data, size_t size,
                                 hd_ir_graph **out, hd_script_var **vars, int *nvars) {
    script_header h;
    char name[NAME_MAX_BYTES + 1];
    memset(&h, 0, sizeof h);
    *out = NULL;
    *vars = NULL;
    *nvars = 0;
    if (!data && size) return hd_error(ctx, HD_ERR_ARGUMENT, "no data");
    if (r_header(ctx, data, size, &h)) return ctx->status;
    rbuf r = {ctx, data, HEADER_BYTES, size - 4, "name", h.version, 0};
    if (!r_name(&r, 2, name, sizeof name)) return ctx->status;
    if (r_counts(&r, &h)) return ctx->status;
    hd_ir_graph *g = hd_ir_graph_new(ctx, name);
    if (!g) return ctx->status;
    if (r_body(&r, &h, g, vars, nvars)) {
        hd_script_vars_free(ctx, *vars, *nvars);
        *vars = NULL;
        *nvars = 0;
        hd_ir_graph_free(g);
        return ctx->status;
    }
    *out = g;
    return HD_OK;
}

/* ---- files ---- */

hd_status hd_script_save_graph(hd_ctx *ctx, const hd_ir_graph *g, const char *path) {
    return hd_script_save_file(ctx, g, NULL, 0, path);
}

hd_status hd_script_save_file(hd_ctx *ctx, const hd_ir_graph *g, const hd_script_var *vars,
                              int nvars, const char *path) {
    unsigned char *data;
    size_t size;
    if (hd_script_encode_state(ctx, g, vars, nvars, &data, &size)) return ctx->status;
    FILE *f = fopen(path, "wb");
    hd_status st = HD_OK;
    if (!f)
        st = hd_error(ctx, HD_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    else if (fwrite(data, 1, size, f) != size)
        st = hd_error(ctx, HD_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (f && fclose(f) && !st) st = hd_error(ctx, HD_ERR_IO, "cannot write %s", path);
    hd_ctx_free(ctx, data, size);
    return st;
}

hd_status hd_script_load_graph(hd_ctx *ctx, const char *path, size_t max_bytes, hd_ir_graph **out) {
    hd_script_var *vars = NULL;
    int nvars = 0;
    hd_status st = hd_script_load_file(ctx, path, max_bytes, out, &vars, &nvars);
    hd_script_vars_free(ctx, vars, nvars);
    return st;
}

hd_status hd_script_load_file(hd_ctx *ctx, const char *path, size_t max_bytes, hd_ir_graph **out,
                              hd_script_var **vars, int *nvars) {
    *out = NULL;
    *vars = NULL;
    *nvars = 0;
    if (!max_bytes) max_bytes = (size_t)1 << 30;
    unsigned char *data;
    size_t size;
    hd_status st = hd_io_read_file(ctx, path, max_bytes, &data, &size);
    if (st) return st;
    st = hd_script_decode_state(ctx, data, size, out, vars, nvars);
    if (st && st != HD_ERR_MEMORY && strncmp(ctx->errmsg, path, strlen(path))) {
        char msg[HD_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", ctx->errmsg);
        hd_error(ctx, st, "%.200s: %.800s", path, msg);
    }
    hd_ctx_free(ctx, data, size + 1);
    return st;
}

/* ---- state ---- */

static hd_status state_port(hd_ctx *ctx, const hd_ir_graph *g, const char *port, int value,
                            const hd_script_var *vars, int nvars, int input) {
    if (port[0] != HD_SCRIPT_STATE_PREFIX) return HD_OK;
    int v = 0;
    while (v < nvars && strcmp(vars[v].name, port + 1)) v++;
    if (v == nvars)
        return hd_error(ctx, HD_ERR_ARGUMENT, "the graph's %s '%s' names no state variable",
                        input ? "input" : "output", port);
    const hd_tensor *t = vars[v].t;
    const hd_ir_value *val = &g->values[value];
    if (!input || !t) return HD_OK;
    if (t->dtype != val->dtype || t->ndim != val->ndim ||
        memcmp(t->shape, val->shape, (size_t)t->ndim * sizeof *t->shape)) {
        char want[160], got[160];
        hd_ir_type_str(val->dtype, val->shape, val->ndim, want, sizeof want);
        hd_ir_type_str(t->dtype, t->shape, t->ndim, got, sizeof got);
        return hd_error(ctx, HD_ERR_ARGUMENT, "state '%s' is %s where the graph reads %s",
                        vars[v].name, got, want);
    }
    return HD_OK;
}

hd_status hd_script_check_state(hd_ctx *ctx, const hd_ir_graph *g, const hd_script_var *vars,
                                int nvars) {
    for (int i = 0; i < g->ninputs; i++)
        if (state_port(ctx, g, g->inputs[i].name, g->inputs[i].value, vars, nvars, 1))
            return ctx->status;
    for (int i = 0; i < g->noutputs; i++)
        if (state_port(ctx, g, g->outputs[i].name, g->outputs[i].value, vars, nvars, 0))
            return ctx->status;
    return HD_OK;
}
