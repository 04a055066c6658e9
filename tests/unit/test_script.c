/* Scripts and .hoduscript files: save/load round trips, the script object
 * (inputs, runs, compilers, devices, stats, ir, dot), and damaged or
 * hostile files, each an error and never a crash or a large allocation. */
#include "hd_script.h"
#include "hd_test.h"
#include "hd_trace.h"

#include <zlib.h>

static hd_ctx *C;

static int contains(const char *s, const char *sub) {
    return s && strstr(s, sub) != NULL;
}

static hd_tensor *seq(hd_dtype dt, const int64_t *shape, int nd, double scale) {
    hd_tensor *t = hd_tensor_new(C, dt, shape, nd);
    for (int64_t i = 0; t && i < t->numel; i++)
        hd_dtype_store(dt, t->storage->data, i, scale * (double)((i * 5) % 7 - 3));
    return t;
}

static hd_status op(hd_op o, hd_tensor *a, hd_tensor *b, const hd_attrs *at, hd_tensor **out) {
    hd_tensor *in[2] = {a, b};
    return hd_op_run(C, o, in, b ? 2 : 1, at, out);
}

/* linreg: x[8, 3] @ w + b -> mse with y, plus a sum over axis 1 with keepdim,
 * a slice, a clamp and a cast: attributes of every kind. */
static hd_ir_graph *build_linreg(void) {
    int64_t sx[2] = {8, 3}, sy[2] = {8, 1}, sw[2] = {3, 1};
    hd_tensor *w = seq(HD_F32, sw, 2, 0.5), *bias = hd_tensor_number(C, HD_F64, 0.25);
    hd_tensor *x, *y, *p = NULL, *pb = NULL, *loss = NULL, *s = NULL, *sl = NULL, *cl = NULL,
                      *ct = NULL;
    hd_ir_graph *g = NULL;
    hd_trace_begin(C, "linreg");
    x = hd_trace_input(C, "x", HD_F32, sx, 2);
    y = hd_trace_input(C, "y", HD_F32, sy, 2);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    op(HD_OP_MATMUL, x, w, NULL, &p);
    op(HD_OP_ADD, p, bias, NULL, &pb);
    op(HD_OP_MSE, pb, y, NULL, &loss);
    at.naxes = 1;
    at.axes[0] = 1;
    at.keepdim = 1;
    op(HD_OP_SUM, x, NULL, &at, &s);
    memset(&at, 0, sizeof at);
    at.start[0] = 1, at.step[0] = 2, at.len[0] = 3;
    at.start[1] = 0, at.step[1] = 1, at.len[1] = 1;
    at.drop_mask = 2;
    op(HD_OP_SLICE, s, NULL, &at, &sl);
    memset(&at, 0, sizeof at);
    at.scalar[0] = -1.0, at.scalar[1] = 2.0;
    op(HD_OP_CLAMP, sl, NULL, &at, &cl);
    memset(&at, 0, sizeof at);
    at.dtype = HD_F64;
    op(HD_OP_CAST, cl, NULL, &at, &ct);
    hd_trace_output(C, "loss", loss);
    hd_trace_output(C, "side", ct);
    hd_trace_end(C, &g);
    hd_tensor *ts[] = {w, bias, x, y, p, pb, loss, s, sl, cl, ct};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) hd_tensor_unref(ts[i]);
    return g;
}

static int same_values(const hd_tensor *a, const hd_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || a->numel != b->numel || a->ndim != b->ndim) return 0;
    for (int64_t i = 0; i < a->numel; i++)
        if (hd_tensor_get(a, i) != hd_tensor_get(b, i)) return 0;
    return 1;
}

static void test_round_trip(void) {
    hd_ir_graph *g = build_linreg();
    CHECK(g != NULL);
    unsigned char *data = NULL;
    size_t size = 0;
    CHECK(hd_script_encode(C, g, &data, &size) == HD_OK && size > 48);
    CHECK(memcmp(data, "HODUSCRP", 8) == 0);
    hd_ir_graph *h = NULL;
    CHECK(hd_script_decode(C, data, size, &h) == HD_OK && h);
    CHECK(hd_ir_graph_hash(g) == hd_ir_graph_hash(h));
    char *t1 = hd_ir_to_text(g), *t2 = hd_ir_to_text(h);
    CHECK(t1 && t2 && strcmp(t1, t2) == 0);
    hd_ctx_strfree(C, t1);
    hd_ctx_strfree(C, t2);
    /* encoding is deterministic */
    unsigned char *d2;
    size_t s2;
    CHECK(hd_script_encode(C, h, &d2, &s2) == HD_OK && s2 == size && !memcmp(d2, data, size));
    hd_ctx_free(C, d2, s2);
    /* through a file, then run both and compare */
    const char *keep = getenv("HODU_SCRIPT_SAVE"); /* a seed for the script fuzzer */
    const char *path = keep ? keep : "test_script_linreg.hoduscript";
    CHECK(hd_script_save_graph(C, g, path) == HD_OK);
    hd_script *s = NULL;
    CHECK(hd_script_load(C, path, &s) == HD_OK && s);
    hd_script *orig = hd_script_new(C, g);
    int64_t sx[2] = {8, 3}, sy[2] = {8, 1};
    hd_tensor *x = seq(HD_F32, sx, 2, 1.0), *y = seq(HD_F32, sy, 2, 2.0);
    CHECK(hd_script_set_input(s, "x", x) == HD_OK && hd_script_set_input(s, "y", y) == HD_OK);
    CHECK(hd_script_set_input(orig, "x", x) == HD_OK && hd_script_set_input(orig, "y", y) == HD_OK);
    CHECK(hd_script_run(s) == HD_OK && hd_script_run(orig) == HD_OK);
    CHECK(same_values(hd_script_output(s, "loss"), hd_script_output(orig, "loss")));
    CHECK(same_values(hd_script_output(s, "side"), hd_script_output(orig, "side")));
    CHECK(hd_script_output(s, "side")->dtype == HD_F64 && hd_script_output(s, "side")->ndim == 1);
    if (!keep) remove(path);
    hd_script_free(s);
    hd_script_free(orig);
    hd_ir_graph_free(h);
    hd_ctx_free(C, data, size);
    hd_tensor_unref(x);
    hd_tensor_unref(y);
}

static hd_status nop_cb(hd_ctx *ctx, void *ud, hd_tensor *const *a, int n) {
    HD_UNUSED(ctx), HD_UNUSED(ud), HD_UNUSED(a), HD_UNUSED(n);
    return HD_OK;
}

static void test_script_object(void) {
    hd_script *s = hd_script_new(C, build_linreg());
    CHECK(strcmp(hd_script_name(s), "linreg") == 0);
    CHECK(hd_script_ninputs(s) == 2 && hd_script_noutputs(s) == 2);
    hd_script_port p;
    hd_script_input_info(s, 1, &p);
    CHECK(strcmp(p.name, "y") == 0 && p.dtype == HD_F32 && p.ndim == 2 && p.shape[0] == 8);
    hd_script_output_info(s, 0, &p);
    CHECK(strcmp(p.name, "loss") == 0 && p.ndim == 0);
    int64_t sx[2] = {8, 3}, bad[2] = {10, 3};
    hd_tensor *x = seq(HD_F32, sx, 2, 1.0), *xb = seq(HD_F32, bad, 2, 1.0);
    CHECK(hd_script_set_input(s, "z", x) == HD_ERR_ARGUMENT);
    CHECK(strcmp(hd_error_message(C), "script 'linreg' has no input 'z' (inputs: x, y)") == 0);
    CHECK(hd_script_set_input(s, "x", xb) == HD_ERR_ARGUMENT);
    CHECK(strcmp(hd_error_message(C), "input 'x' expects f32[8, 3], got f32[10, 3]") == 0);
    CHECK(hd_script_set_input(s, "x", x) == HD_OK);
    CHECK(hd_script_run(s) == HD_ERR_ARGUMENT);
    CHECK(strcmp(hd_error_message(C), "script 'linreg': input 'y' (f32[8, 1]) is not set") == 0);
    hd_script_stats st;
    hd_script_stats_get(s, &st);
    CHECK(st.compiled && st.compiles == 1 && st.runs == 0);
    char *ir = hd_script_ir(s), *dot = hd_script_dot(s);
    CHECK(contains(ir, "matmul(") && contains(dot, "digraph"));
    hd_ctx_strfree(C, ir);
    hd_ctx_strfree(C, dot);
    CHECK(hd_script_set_compiler(s, "tvm") == HD_ERR_ARGUMENT);
#if HODU_HAVE_LLVM
    CHECK(hd_script_set_compiler(s, "llvm") == HD_OK);
#else
    CHECK(hd_script_set_compiler(s, "llvm") == HD_ERR_RUNTIME);
#endif
    CHECK(hd_script_set_compiler(s, "interp") == HD_OK);
    hd_script_stats_get(s, &st);
    CHECK(!st.compiled); /* dropped */
    CHECK(hd_script_set_device(s, "cuda:0") != HD_OK);
    CHECK(hd_script_set_device(s, "cpu") == HD_OK && strcmp(hd_script_device(s), "cpu") == 0);
    int64_t sy[2] = {8, 1};
    hd_tensor *y = seq(HD_F32, sy, 2, 0.5);
    CHECK(hd_script_set_input(s, "y", y) == HD_OK);
    CHECK(hd_script_compile(s) == HD_OK && hd_script_run(s) == HD_OK && hd_script_run(s) == HD_OK);
    hd_script_stats_get(s, &st);
    CHECK(st.compiled && st.compiles == 2 && st.runs == 2 && st.jit.nodes > 0);
    CHECK(st.jit.kernels > 0 && st.jit.compile_seconds > 0);
    CHECK(hd_script_output(s, "loss") && !hd_script_output(s, "nope"));
    CHECK(hd_script_output_at(s, 1) && !hd_script_output_at(s, 2));
    hd_script_clear_inputs(s);
    CHECK(hd_script_run(s) == HD_ERR_ARGUMENT);
    hd_script_free(s);
    /* a graph that calls the host cannot be saved */
    hd_ir_graph *g = hd_ir_graph_new(C, "p");
    int v = hd_ir_add_input(g, "x", HD_F32, sx, 2);
    hd_ir_callback cb = {"print", nop_cb, NULL, NULL, NULL};
    hd_ir_add_callback(g, &cb, &v, 1);
    unsigned char *data;
    size_t size;
    CHECK(hd_script_encode(C, g, &data, &size) == HD_ERR_RUNTIME);
    CHECK(contains(hd_error_message(C), "calls the host (print)"));
    hd_ir_graph_free(g);
    hd_tensor_unref(x);
    hd_tensor_unref(xb);
    hd_tensor_unref(y);
}

/* ---- damaged files ---- */

/* Offsets of the sections of a valid file, found by walking it. */
typedef struct layout {
    size_t name, inputs, consts, nodes, outputs, end;
    size_t node_at[32];
    int nnodes;
} layout;

static uint64_t rd(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void wr(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void walk(const unsigned char *d, size_t size, layout *L) {
    size_t pos = 48;
    int ni = (int)rd(d + 16, 4), nc = (int)rd(d + 20, 4), nn = (int)rd(d + 24, 4);
    L->name = pos;
    pos += 2 + rd(d + pos, 2);
    L->inputs = pos;
    for (int i = 0; i < ni; i++) {
        pos += 2 + rd(d + pos, 2);
        pos += 2 + 8 * d[pos + 1];
    }
    L->consts = pos;
    for (int i = 0; i < nc; i++) {
        int nd = d[pos + 1];
        pos += 3 + 8 * (size_t)nd;
        pos += 8 + rd(d + pos, 8);
    }
    L->nodes = pos;
    L->nnodes = nn;
    for (int i = 0; i < nn; i++) {
        L->node_at[i] = pos;
        pos += 1 + d[pos];
        int nin = (int)rd(d + pos, 2);
        pos += 2 + 4 * (size_t)nin;
        int cnt = d[pos++];
        for (int k = 0; k < cnt; k++) {
            int tag = d[pos++];
            if (tag == 1 || tag == 3 || tag == 5)
                pos += 1 + 8 * (size_t)d[pos];
            else if (tag == 2 || tag == 6)
                pos += 1;
            else if (tag == 4)
                pos += 1 + 8 * (size_t)d[pos];
            else if (tag == 7)
                pos += 1 + 24 * (size_t)d[pos];
            else if (tag == 8)
                pos += 4;
        }
        pos += 2 + 8 * d[pos + 1];
    }
    L->outputs = pos;
    L->end = size - 4;
}

static void fix_crc(unsigned char *d, size_t size) {
    wr(d + 40, size, 8);
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, d, (uInt)(size - 4));
    wr(d + size - 4, crc, 4);
}

static int ndamaged;

/* Decoding must fail with a message containing want (NULL: any), within
 * a memory budget, and leak nothing. */
static void expect_bad(const unsigned char *d, size_t size, const char *want, int line) {
    size_t before = C->mem_used;
    C->mem_limit = before + (size_t)64 * 1024 * 1024;
    hd_ir_graph *g = NULL;
    hd_status st = hd_script_decode(C, d, size, &g);
    C->mem_limit = 0;
    ndamaged++;
    CHECK_MSG(st != HD_OK && !g, "line %d: damaged file accepted", line);
    if (want)
        CHECK_MSG(contains(hd_error_message(C), want), "line %d: %s", line, hd_error_message(C));
    CHECK_MSG(st != HD_ERR_MEMORY, "line %d: memory error %s", line, hd_error_message(C));
    hd_ir_graph_free(g);
    CHECK_MSG(C->mem_used == before, "line %d: leak", line);
    hd_error_clear(C);
}

#define BAD(d, n, want) expect_bad((d), (n), (want), __LINE__)

typedef struct mut {
    unsigned char *d;
    size_t n;
} mut;

/* A copy of the first n bytes of d (n may exceed the file: zeros follow). */
static mut copy_of(const unsigned char *d, size_t n) {
    mut m = {calloc(1, n + 64), n};
    memcpy(m.d, d, n);
    return m;
}

static mut copy_grown(const unsigned char *d, size_t size, size_t n) {
    mut m = {calloc(1, n + 64), n};
    memcpy(m.d, d, size);
    return m;
}

static void test_truncations(const unsigned char *d, size_t size, const layout *L) {
    /* every prefix, as written */
    for (size_t n = 0; n < size; n++) {
        hd_ir_graph *g = NULL;
        CHECK(hd_script_decode(C, n ? d : NULL, n, &g) != HD_OK && !g);
        hd_error_clear(C);
    }
    ndamaged++;
    /* prefixes that end inside each section, with header size and CRC made
     * consistent so that the reader reaches the section */
    size_t cuts[] = {L->name + 1,  L->inputs + 3, L->consts + 5,  L->consts + 20,
                     L->nodes + 2, L->nodes + 9,  L->outputs + 3, L->end - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        mut m = copy_of(d, cuts[i] + 4);
        fix_crc(m.d, m.n);
        BAD(m.d, m.n, "invalid script file");
        free(m.d);
    }
}

static void test_header_damage(const unsigned char *d, size_t size) {
    mut m = copy_of(d, size);
    m.d[0] = 'X';
    BAD(m.d, m.n, "bad magic");
    memcpy(m.d, d, size);
    wr(m.d + 8, 6, 4);
    fix_crc(m.d, m.n);
    BAD(m.d, m.n,
        "version 6 is newer than this Hodu reads (versions 1 to 5): the file needs a "
        "newer Hodu");
    memcpy(m.d, d, size);
    wr(m.d + 12, 1, 4);
    fix_crc(m.d, m.n);
    BAD(m.d, m.n, "unknown flags");
    memcpy(m.d, d, size);
    m.d[size / 2] ^= 0x40;
    BAD(m.d, m.n, "checksum mismatch");
    memcpy(m.d, d, size);
    m.d[size - 1] ^= 1;
    BAD(m.d, m.n, "checksum mismatch");
    memcpy(m.d, d, size);
    wr(m.d + 40, size + 100, 8);
    BAD(m.d, m.n, "header says");
    /* counts far beyond what the file can hold */
    size_t count_at[] = {16, 20, 24, 28};
    for (int i = 0; i < 4; i++) {
        memcpy(m.d, d, size);
        wr(m.d + count_at[i], 0xffffffffu, 4);
        fix_crc(m.d, m.n);
        BAD(m.d, m.n, "cannot fit");
        memcpy(m.d, d, size);
        wr(m.d + count_at[i], 100000, 4);
        fix_crc(m.d, m.n);
        BAD(m.d, m.n, "cannot fit");
    }
    memcpy(m.d, d, size);
    wr(m.d + 32, (uint64_t)1 << 60, 8);
    fix_crc(m.d, m.n);
    BAD(m.d, m.n, "bytes of constants cannot fit");
    memcpy(m.d, d, size);
    wr(m.d + 32, rd(d + 32, 8) - 4, 8);
    fix_crc(m.d, m.n);
    BAD(m.d, m.n, "constant bytes differ");
    /* one more byte at the end, with a consistent header */
    mut big = copy_grown(d, size, size + 1);
    memmove(big.d + size - 3, big.d + size - 4, 4);
    big.d[size - 4] = 0;
    fix_crc(big.d, big.n);
    BAD(big.d, big.n, "trailing bytes");
    free(big.d);
    free(m.d);
}

/* Apply f at offset off of a fresh copy (with CRC fixed) and expect want. */
static void poke(const unsigned char *d, size_t size, size_t off, uint64_t v, int n,
                 const char *want, int line) {
    mut m = copy_of(d, size);
    wr(m.d + off, v, n);
    fix_crc(m.d, m.n);
    expect_bad(m.d, m.n, want, line);
    free(m.d);
}
#define POKE(off, v, n, want) poke(d, size, (off), (v), (n), (want), __LINE__)

static void test_field_damage(const unsigned char *d, size_t size, const layout *L) {
    POKE(L->name, 0, 2, "name length");
    POKE(L->name, 5000, 2, "name length");
    POKE(L->name + 2, 0, 1, "NUL");
    size_t in0 = L->inputs, nlen = rd(d + in0, 2);
    POKE(in0 + 2 + nlen, HD_DTYPE_COUNT, 1, "dtype out of range");
    POKE(in0 + 2 + nlen + 1, 9, 1, "too many dims");
    POKE(in0 + 2 + nlen + 2, (uint64_t)-3, 8, "negative dimension");
    POKE(in0 + 2 + nlen + 2, (uint64_t)1 << 62, 8, "too large");
    /* two inputs named alike: make "y" read "x" */
    size_t in1 = in0 + 2 + nlen + 2 + 8 * d[in0 + 2 + nlen + 1];
    POKE(in1 + 2, 'x', 1, "declared twice");
    /* constants: dtype, number flag, shape/size disagreement, huge sizes */
    size_t c0 = L->consts;
    POKE(c0, 77, 1, "dtype out of range");
    POKE(c0 + 2, 2, 1, "number flag");
    POKE(c0 + 3, 4, 8, "does not match its shape");
    POKE(c0 + 3, (uint64_t)1 << 40, 8, "too large");
    POKE(c0 + 3 + 8 * (size_t)d[c0 + 1], (uint64_t)1 << 50, 8, "does not match its shape");
    /* nodes: unknown op, an in-place op, input out of range and forward,
     * too many inputs, attribute damage, declared type against the rule */
    size_t n0 = L->node_at[0], n1 = L->node_at[1];
    POKE(n0 + 1, 'X', 1, "unknown op name");
    POKE(n0, 0, 1, "name length");
    size_t in_at = n1 + 1 + d[n1] + 2; /* node 1 (add): first input */
    POKE(in_at, 9999, 4, "later or unknown value");
    POKE(in_at, rd(d + 24, 4) + rd(d + 16, 4) + rd(d + 20, 4) - 1, 4, "later or unknown");
    POKE(in_at - 2, 65535, 2, "bad input count");
    POKE(in_at - 2, 1, 2, NULL); /* add with one input: arity */
    size_t attr_at = in_at + 4 * rd(d + in_at - 2, 2);
    POKE(attr_at, 200, 1, "too many attributes");
    POKE(attr_at + 1, 99, 1, "unknown attribute tag");
    POKE(attr_at + 2, 200, 1, "dtype out of range"); /* the dtype tag's value */
    size_t type_at = attr_at + 3;
    POKE(type_at + 2, 7, 8, "differs from what its shape rule gives");
    POKE(type_at, HD_F64, 1, "differs from what its shape rule gives");
    POKE(type_at + 1, 1, 1, NULL);
    /* the sum node (index 3): a duplicate tag, an axis out of range */
    size_t n3 = L->node_at[3];
    size_t a3 = n3 + 1 + d[n3] + 2 + 4 * rd(d + n3 + 1 + d[n3], 2);
    POKE(a3 + 1, 2, 1, "out of order");
    POKE(a3 + 3, 5, 8, "axis 5 is out of range");
    POKE(a3 + 2, 9, 1, "list too long");
    /* the slice node: start past the end */
    size_t n4 = L->node_at[4];
    size_t a4 = n4 + 1 + d[n4] + 2 + 4 * rd(d + n4 + 1 + d[n4], 2);
    CHECK(d[a4 + 1] == 6 && d[a4 + 3] == 7); /* tags: dtype, slice */
    POKE(a4 + 5, 50, 8, "index out of range");
    POKE(a4 + 37, (uint64_t)1 << 62, 8, "slice out of range"); /* len * step overflows */
    POKE(a4 + 5, (uint64_t)-1, 8, "attribute out of range");
    POKE(a3 + 3, (uint64_t)1 << 40, 8, "attribute out of range");
    /* outputs */
    size_t o0 = L->outputs;
    POKE(o0 + 2 + rd(d + o0, 2), 4000, 4, "unknown value");
    size_t o1 = o0 + 2 + rd(d + o0, 2) + 4;
    mut m = copy_of(d, size);
    memcpy(m.d + o1 + 2, "loss", 4); /* "side" -> "loss": twice */
    fix_crc(m.d, m.n);
    BAD(m.d, m.n, "given twice");
    free(m.d);
}

static void test_poke_valid_rename(const unsigned char *d, size_t size, const layout *L) {
    mut m = copy_of(d, size);
    m.d[L->outputs + 2] = 's';
    fix_crc(m.d, m.n);
    hd_ir_graph *g = NULL;
    CHECK(hd_script_decode(C, m.d, m.n, &g) == HD_OK && hd_ir_find_output(g, "soss") == 0);
    hd_ir_graph_free(g);
    free(m.d);
}

/* Random byte flips with a consistent CRC: errors or valid graphs, never a
 * crash (ASan and UBSan builds check the rest). */
static void test_random_flips(const unsigned char *d, size_t size) {
    uint64_t seed = 12345;
    int ok = 0;
    for (int i = 0; i < 3000; i++) {
        mut m = copy_of(d, size);
        int flips = 1 + i % 4;
        for (int k = 0; k < flips; k++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t at = 48 + (size_t)(seed >> 33) % (size - 52);
            m.d[at] ^= (unsigned char)(1u << ((seed >> 20) & 7));
        }
        fix_crc(m.d, m.n);
        hd_ir_graph *g = NULL;
        size_t before = C->mem_used;
        C->mem_limit = before + (size_t)64 * 1024 * 1024;
        if (hd_script_decode(C, m.d, m.n, &g) == HD_OK) {
            ok++;
            CHECK(hd_ir_verify(g) == HD_OK);
        }
        C->mem_limit = 0;
        hd_ir_graph_free(g);
        CHECK(C->mem_used == before);
        hd_error_clear(C);
        free(m.d);
    }
    CHECK(ok < 3000);
}

static void test_load_file_errors(void) {
    hd_ir_graph *g = NULL;
    CHECK(hd_script_load_graph(C, "no/such/file.hoduscript", 0, &g) == HD_ERR_IO);
    CHECK(contains(hd_error_message(C), "no/such/file.hoduscript: cannot open"));
    FILE *f = fopen("test_script_junk.hoduscript", "wb");
    fputs("HODUSCRP but not really a script file at all, just text", f);
    fclose(f);
    CHECK(hd_script_load_graph(C, "test_script_junk.hoduscript", 0, &g) == HD_ERR_IO && !g);
    CHECK(contains(hd_error_message(C), "test_script_junk.hoduscript: "));
    CHECK(hd_script_load_graph(C, "test_script_junk.hoduscript", 10, &g) == HD_ERR_IO);
    CHECK(contains(hd_error_message(C), "more than the 10 allowed"));
    remove("test_script_junk.hoduscript");
}

static void test_alloc_failures(const unsigned char *d, size_t size) {
    int ok_at = -1;
    for (long k = 0; k < 200 && ok_at < 0; k++) {
        size_t before = C->mem_used;
        hd_ir_graph *g = NULL;
        C->fail_countdown = k;
        hd_status st = hd_script_decode(C, d, size, &g);
        C->fail_countdown = -1;
        if (!st) ok_at = (int)k;
        CHECK(st == HD_OK || st == HD_ERR_MEMORY);
        hd_ir_graph_free(g);
        CHECK(C->mem_used == before);
        hd_error_clear(C);
    }
    CHECK(ok_at > 5);
}

/* ---- state (version 2) ---- */

/* step: $w' = w - 0.5 * x, $c' = x * 2, y = sum(w); variables w (a value,
 * in place) and c (none: written, never read). */
static hd_ir_graph *build_state(hd_script_var **vars) {
    int64_t sh[1] = {3};
    hd_ir_graph *g = NULL;
    hd_tensor *half = hd_tensor_number(C, HD_F64, 0.5), *two = hd_tensor_number(C, HD_F64, 2.0);
    hd_tensor *a = NULL, *b = NULL, *c = NULL, *y = NULL;
    hd_trace_begin(C, "state");
    hd_tensor *w = hd_trace_input(C, "$w", HD_F32, sh, 1);
    hd_tensor *x = hd_trace_input(C, "x", HD_F32, sh, 1);
    op(HD_OP_MUL, x, half, NULL, &a);
    op(HD_OP_SUB, w, a, NULL, &b);
    op(HD_OP_MUL, x, two, NULL, &c);
    op(HD_OP_SUM, w, NULL, NULL, &y);
    hd_trace_output(C, "$w", b);
    hd_trace_output(C, "$c", c);
    hd_trace_output(C, "y", y);
    hd_trace_end(C, &g);
    hd_tensor *ts[] = {half, two, a, b, c, y, w, x};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) hd_tensor_unref(ts[i]);
    *vars = hd_ctx_calloc(C, 3, sizeof **vars);
    (*vars)[0].name = hd_ctx_strdup(C, "w");
    (*vars)[0].t = seq(HD_F32, sh, 1, 1.0);
    (*vars)[0].inplace = 1;
    (*vars)[1].name = hd_ctx_strdup(C, "c");
    return g;
}

static void test_state_file(void) {
    hd_script_var *vars, *back = NULL;
    int nback = 0;
    hd_ir_graph *g = build_state(&vars), *h = NULL;
    unsigned char *d = NULL, *d2 = NULL;
    size_t size = 0, size2 = 0;
    CHECK(hd_script_encode_state(C, g, vars, 2, &d, &size) == HD_OK && d[8] == 2);
    CHECK(hd_script_decode_state(C, d, size, &h, &back, &nback) == HD_OK && nback == 2);
    CHECK(!strcmp(back[0].name, "w") && back[0].inplace && same_values(back[0].t, vars[0].t));
    CHECK(!strcmp(back[1].name, "c") && !back[1].inplace && !back[1].t);
    CHECK(hd_script_encode_state(C, h, back, nback, &d2, &size2) == HD_OK && size2 == size &&
          !memcmp(d, d2, size));
    hd_ctx_free(C, d2, size2);
    hd_ir_graph_free(h);
    /* the script object: state read and written at each run */
    hd_script *s = hd_script_new(C, g);
    CHECK(s && hd_script_set_state(s, back, nback, NULL) == HD_OK);
    CHECK(hd_script_ninputs(s) == 1 && hd_script_noutputs(s) == 1 && hd_script_nstate(s) == 2);
    int64_t sh[1] = {3}, sh4[1] = {4};
    hd_tensor *x = seq(HD_F32, sh, 1, 2.0), *x4 = seq(HD_F32, sh4, 1, 1.0);
    CHECK(hd_script_set_input(s, "$w", x) == HD_ERR_ARGUMENT);
    CHECK(contains(hd_error_message(C), "'w' is state, not an input"));
    hd_error_clear(C);
    CHECK(hd_script_set_input(s, "x", x) == HD_OK);
    CHECK(hd_script_run(s) == HD_OK && hd_script_run(s) == HD_OK);
    const hd_tensor *w = hd_script_state_at(s, 0)->t;
    for (int64_t i = 0; i < 3; i++)
        CHECK(hd_tensor_get(w, i) == hd_tensor_get(vars[0].t, i) - hd_tensor_get(x, i));
    CHECK(hd_script_state_at(s, 1)->t && hd_script_output(s, "$w") == NULL);
    CHECK(hd_script_state_put(s, "w", x4) == HD_ERR_ARGUMENT);
    CHECK(contains(hd_error_message(C), "state 'w' is f32[3], got f32[4]"));
    hd_error_clear(C);
    CHECK(hd_script_state_put(s, "q", x) == HD_ERR_ARGUMENT);
    hd_error_clear(C);
    hd_script_free(s);
    hd_tensor_unref(x);
    hd_tensor_unref(x4);
    hd_script_vars_free(C, vars, 2);
    /* damage in the state section: truncation everywhere, flips */
    size_t state_at = size - 4 - (4 + 3 + 1 + 2 + 8 + 8 + 12) - (3 + 1);
    for (size_t n = state_at; n < size - 4; n++) {
        mut m = copy_of(d, n + 4);
        wr(m.d + 40, n + 4, 8);
        fix_crc(m.d, m.n);
        BAD(m.d, m.n, "invalid script file");
        free(m.d);
    }
    mut m = copy_of(d, size);
    m.d[state_at + 4 + 3] = 9; /* w's flags */
    fix_crc(m.d, m.n);
    BAD(m.d, m.n, "unknown state flags");
    memcpy(m.d, d, size);
    m.d[size - 4 - 2] = 'w'; /* c renamed w */
    fix_crc(m.d, m.n);
    BAD(m.d, m.n, "duplicate state name");
    memcpy(m.d, d, size);
    m.d[size - 4 - 2] = 'q'; /* $c names no variable */
    fix_crc(m.d, m.n);
    BAD(m.d, m.n, "names no state variable");
    memcpy(m.d, d, size);
    m.d[state_at + 4 + 3 + 1] = 3; /* w's value f64: not what the graph reads */
    fix_crc(m.d, m.n);
    BAD(m.d, m.n, NULL);
    free(m.d);
    for (int i = 0; i < 2000; i++) {
        mut r = copy_of(d, size);
        r.d[state_at + (size_t)i % (size - 4 - state_at)] ^= (unsigned char)(1u << (i % 8));
        fix_crc(r.d, r.n);
        hd_ir_graph *gg = NULL;
        hd_script_var *vv = NULL;
        int nv = 0;
        size_t before = C->mem_used;
        if (hd_script_decode_state(C, r.d, r.n, &gg, &vv, &nv) == HD_OK)
            CHECK(hd_script_check_state(C, gg, vv, nv) == HD_OK);
        hd_ir_graph_free(gg);
        hd_script_vars_free(C, vv, nv);
        CHECK(C->mem_used == before);
        hd_error_clear(C);
        free(r.d);
    }
    hd_ctx_free(C, d, size);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    C = &ctx;
    test_round_trip();
    test_script_object();
    hd_ir_graph *g = build_linreg();
    unsigned char *d = NULL;
    size_t size = 0;
    CHECK(hd_script_encode(C, g, &d, &size) == HD_OK);
    layout L;
    walk(d, size, &L);
    CHECK(L.nnodes == 7 && L.outputs < L.end);
    test_truncations(d, size, &L);
    test_header_damage(d, size);
    test_field_damage(d, size, &L);
    test_poke_valid_rename(d, size, &L);
    test_random_flips(d, size);
    test_load_file_errors();
    test_alloc_failures(d, size);
    test_state_file();
    printf("%d damaged files rejected\n", ndamaged);
    CHECK(ndamaged >= 30);
    hd_ctx_free(C, d, size);
    hd_ir_graph_free(g);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
