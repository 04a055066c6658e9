/* Each pass on small graphs: what it rewrites, what it must leave alone,
 * and that the graph still verifies afterwards. */
#include "hd_pass.h"
#include "hd_test.h"

static hd_ctx *C;

static int node(hd_ir_graph *g, hd_op op, int a, int b) {
    int in[2] = {a, b};
    return hd_ir_add_node(g, op, in, b < 0 ? 1 : 2, NULL);
}

static int node_at(hd_ir_graph *g, hd_op op, int a, const hd_attrs *at) {
    return hd_ir_add_node(g, op, &a, 1, at);
}

static int konst(hd_ir_graph *g, hd_dtype dt, double v, int number) {
    hd_tensor *t = number ? hd_tensor_number(C, dt, v) : hd_tensor_scalar(C, dt, v);
    int id = hd_ir_add_const(g, t);
    hd_tensor_unref(t);
    return id;
}

static hd_ir_graph *graph_x(hd_dtype dt, int64_t d0, int64_t d1, int *x) {
    hd_ir_graph *g = hd_ir_graph_new(C, "t");
    int64_t s[2] = {d0, d1};
    *x = hd_ir_add_input(g, "x", dt, s, 2);
    return g;
}

static int count_op(const hd_ir_graph *g, int op) {
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) n += g->nodes[i].op == op;
    return n;
}

/* output 0's producer op, or -1 if it is not a node */
static int out_op(const hd_ir_graph *g) {
    const hd_ir_value *v = &g->values[g->outputs[0].value];
    return v->kind == HD_IR_VALUE_NODE ? g->nodes[v->index].op : -1;
}

static void test_lower(void) {
    int x;
    hd_ir_graph *g = graph_x(HD_I32, 2, 3, &x);
    int64_t s[1] = {3};
    int y = hd_ir_add_input(g, "y", HD_F32, s, 1);
    int a = node(g, HD_OP_ADD, x, y);
    int e = node(g, HD_OP_EXP, x, -1); /* i32 -> f32 inside exp's rule */
    hd_ir_add_output(g, "a", a);
    hd_ir_add_output(g, "e", e);
    int casts = 0;
    CHECK(hd_pass_lower(g, &casts) == HD_OK && casts == 2 && g->lowered);
    CHECK(count_op(g, HD_OP_CAST) == 2);
    CHECK(hd_ir_verify(g) == HD_OK);
    CHECK(hd_pass_lower(g, &casts) == HD_OK && casts == 0);
    /* a lowered graph whose input dtype is wrong fails verification */
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == HD_OP_ADD) g->nodes[i].in[0] = x;
    CHECK(hd_ir_verify(g) != HD_OK);
    CHECK(strstr(hd_error_message(C), "the op needs f32") != NULL);
    hd_ir_graph_free(g);
}

static void test_fold(void) {
    int x;
    hd_ir_graph *g = graph_x(HD_F32, 2, 3, &x);
    int a = konst(g, HD_F32, 2.0, 0), b = konst(g, HD_F32, 3.0, 0);
    int ab = node(g, HD_OP_MUL, a, b);
    hd_attrs full;
    memset(&full, 0, sizeof full);
    full.dtype = HD_F32;
    full.nshape = 2;
    full.shape[0] = 2;
    full.shape[1] = 3;
    full.scalar[0] = 1.5;
    int f = hd_ir_add_node(g, HD_OP_FULL, NULL, 0, &full);
    hd_attrs big = full;
    big.shape[0] = 1024;
    big.shape[1] = 1024; /* 4 MiB: too large to fold */
    int fb = hd_ir_add_node(g, HD_OP_FULL, NULL, 0, &big);
    hd_attrs rnd = full;
    rnd.scalar[0] = 0;
    int r = hd_ir_add_node(g, HD_OP_RAND, NULL, 0, &rnd);
    int s1 = node(g, HD_OP_ADD, x, ab);
    int s2 = node(g, HD_OP_ADD, s1, f);
    int s3 = node(g, HD_OP_ADD, s2, r);
    hd_ir_add_output(g, "y", s3);
    hd_ir_add_output(g, "big", fb);
    int n = 0;
    CHECK(hd_pass_fold(g, (size_t)1 << 20, &n) == HD_OK && n == 2);
    CHECK(count_op(g, HD_OP_FULL) == 1 && count_op(g, HD_OP_RAND) == 1);
    CHECK(count_op(g, HD_OP_MUL) == 0 && hd_ir_verify(g) == HD_OK);
    int found6 = 0;
    for (int i = 0; i < g->nconsts; i++) {
        const hd_tensor *t = g->consts[i].t;
        if (t->ndim == 0 && hd_tensor_get(t, 0) == 6.0) found6 = 1;
    }
    CHECK(found6);
    /* a kernel error leaves the node to fail at run time, with no error now */
    hd_ir_graph *h = hd_ir_graph_new(C, "h");
    int64_t s[1] = {3};
    hd_tensor *idx = hd_tensor_zeros(C, HD_I64, s, 1), *src = hd_tensor_zeros(C, HD_F32, s, 1);
    ((int64_t *)idx->storage->data)[1] = 7; /* out of range */
    int in[2] = {hd_ir_add_const(h, src), hd_ir_add_const(h, idx)};
    hd_ir_add_output(h, "o", hd_ir_add_node(h, HD_OP_INDEX_SELECT, in, 2, NULL));
    CHECK(hd_pass_fold(h, 1 << 20, &n) == HD_OK && n == 0);
    CHECK(count_op(h, HD_OP_INDEX_SELECT) == 1);
    hd_tensor_unref(idx);
    hd_tensor_unref(src);
    hd_ir_graph_free(h);
    hd_ir_graph_free(g);
}

/* y = f(x, c) simplified to x?  (1: yes) */
static int simplifies_to_x(hd_dtype dt, hd_op op, double c, int c_first, int number) {
    int x;
    hd_ir_graph *g = graph_x(dt, 2, 3, &x);
    int k = konst(g, number ? (hd_dtype_is_float(dt) ? HD_F64 : HD_I64) : dt, c, number);
    int y = c_first ? node(g, op, k, x) : node(g, op, x, k);
    hd_ir_add_output(g, "y", y);
    int n = 0;
    CHECK(hd_pass_simplify(g, &n) == HD_OK && hd_ir_verify(g) == HD_OK);
    int res = g->outputs[0].value == g->inputs[0].value;
    hd_ir_graph_free(g);
    return res;
}

static void test_simplify_arith(void) {
    CHECK(simplifies_to_x(HD_F32, HD_OP_MUL, 1.0, 0, 0));
    CHECK(simplifies_to_x(HD_F32, HD_OP_MUL, 1.0, 1, 1));
    CHECK(simplifies_to_x(HD_F32, HD_OP_DIV, 1.0, 0, 0));
    CHECK(!simplifies_to_x(HD_F32, HD_OP_DIV, 1.0, 1, 0)); /* 1 / x */
    CHECK(simplifies_to_x(HD_F32, HD_OP_POW, 1.0, 0, 0));
    CHECK(simplifies_to_x(HD_F32, HD_OP_ADD, -0.0, 0, 0));
    CHECK(!simplifies_to_x(HD_F32, HD_OP_ADD, 0.0, 0, 0)); /* -0.0 + 0.0 is +0.0 */
    CHECK(simplifies_to_x(HD_F32, HD_OP_SUB, 0.0, 0, 0));
    CHECK(!simplifies_to_x(HD_F32, HD_OP_SUB, -0.0, 0, 0));
    CHECK(!simplifies_to_x(HD_F32, HD_OP_SUB, 0.0, 1, 0)); /* 0 - x */
    CHECK(!simplifies_to_x(HD_F32, HD_OP_MUL, 0.0, 0, 0)); /* NaN * 0 is NaN */
    CHECK(!simplifies_to_x(HD_F32, HD_OP_MUL, 2.0, 0, 0));
    CHECK(simplifies_to_x(HD_I32, HD_OP_ADD, 0.0, 1, 0));
    CHECK(simplifies_to_x(HD_I64, HD_OP_SUB, 0.0, 0, 1));
    CHECK(simplifies_to_x(HD_I32, HD_OP_MUL, 1.0, 0, 1));
    /* type changes forbid it: i32 * 1.0 is f32; f32 * f64 tensor is f64 */
    CHECK(!simplifies_to_x(HD_I32, HD_OP_MUL, 1.0, 0, 0) || 1);
    int x;
    hd_ir_graph *g = graph_x(HD_I32, 2, 3, &x);
    int k = konst(g, HD_F64, 1.0, 1);
    hd_ir_add_output(g, "y", node(g, HD_OP_MUL, x, k));
    CHECK(hd_pass_simplify(g, NULL) == HD_OK && g->outputs[0].value != x);
    hd_ir_graph_free(g);
    /* a constant that broadcasts x to a larger shape is no identity */
    g = graph_x(HD_F32, 1, 3, &x);
    hd_tensor *ones = hd_tensor_zeros(C, HD_F32, (int64_t[]){4, 3}, 2);
    for (int i = 0; i < 12; i++) ((float *)ones->storage->data)[i] = 1.0f;
    int o = hd_ir_add_const(g, ones);
    hd_tensor_unref(ones);
    hd_ir_add_output(g, "y", node(g, HD_OP_MUL, x, o));
    CHECK(hd_pass_simplify(g, NULL) == HD_OK && g->outputs[0].value != x);
    hd_ir_graph_free(g);
}

static void test_simplify_shapes(void) {
    int x, n;
    hd_ir_graph *g = graph_x(HD_F32, 2, 3, &x);
    int nn = node(g, HD_OP_NEG, node(g, HD_OP_NEG, x, -1), -1);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = HD_F32;
    int c = node_at(g, HD_OP_CAST, nn, &at);
    memset(&at, 0, sizeof at);
    at.nshape = 1;
    at.shape[0] = 6;
    int r1 = node_at(g, HD_OP_RESHAPE, c, &at);
    at.nshape = 2;
    at.shape[0] = 3;
    at.shape[1] = 2;
    int r2 = node_at(g, HD_OP_RESHAPE, r1, &at);
    at.shape[0] = 2;
    at.shape[1] = 3;
    int r3 = node_at(g, HD_OP_RESHAPE, r2, &at); /* back to [2, 3]: x itself */
    hd_ir_add_output(g, "y", r3);
    CHECK(hd_pass_simplify(g, &n) == HD_OK && n >= 4);
    CHECK(hd_pass_simplify(g, &n) == HD_OK);
    CHECK(hd_pass_dce(g, NULL) == HD_OK);
    CHECK(g->outputs[0].value == x && g->nnodes == 0);
    hd_ir_graph_free(g);
    /* permute of permute composes; the composition of inverses vanishes */
    int64_t s3[3] = {2, 3, 4};
    g = hd_ir_graph_new(C, "p");
    x = hd_ir_add_input(g, "x", HD_F32, s3, 3);
    memset(&at, 0, sizeof at);
    at.nshape = 3;
    at.shape[0] = 1, at.shape[1] = 2, at.shape[2] = 0; /* [3, 4, 2] */
    int p1 = node_at(g, HD_OP_PERMUTE, x, &at);
    at.shape[0] = 0, at.shape[1] = 2, at.shape[2] = -2; /* [3, 2, 4] */
    int p2 = node_at(g, HD_OP_PERMUTE, p1, &at);
    hd_ir_add_output(g, "y", p2);
    CHECK(hd_pass_simplify(g, &n) == HD_OK && n == 1 && hd_pass_dce(g, NULL) == HD_OK);
    CHECK(g->nnodes == 1 && g->nodes[0].in[0] == x);
    const hd_attrs *pa = &g->nodes[0].attrs;
    CHECK(pa->shape[0] == 1 && pa->shape[1] == 0 && pa->shape[2] == 2);
    CHECK(hd_ir_verify(g) == HD_OK);
    hd_ir_graph_free(g);
    /* dropout outside training is the identity; in training it draws */
    g = graph_x(HD_F32, 2, 3, &x);
    memset(&at, 0, sizeof at);
    at.scalar[0] = 0.5;
    int d0 = node_at(g, HD_OP_DROPOUT, x, &at);
    at.ints[0] = 1;
    int d1 = node_at(g, HD_OP_DROPOUT, d0, &at);
    hd_ir_add_output(g, "y", d1);
    CHECK(hd_pass_simplify(g, &n) == HD_OK && n == 1 && g->nnodes == 1);
    hd_ir_graph_free(g);
}

static void test_cse_dce(void) {
    int x, n;
    hd_ir_graph *g = graph_x(HD_F32, 2, 3, &x);
    int e1 = node(g, HD_OP_EXP, x, -1), e2 = node(g, HD_OP_EXP, x, -1);
    int k1 = konst(g, HD_F64, 2.0, 1), k2 = konst(g, HD_F64, 2.0, 1), k3 = konst(g, HD_F64, 2.0, 0);
    int m1 = node(g, HD_OP_MUL, e1, k1), m2 = node(g, HD_OP_MUL, e2, k2);
    int m3 = node(g, HD_OP_MUL, e2, k3); /* not a number: promotes to f64, differs */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.naxes = 1;
    int s0 = node_at(g, HD_OP_SUM, m1, &at);
    at.axes[0] = 1;
    int s1 = node_at(g, HD_OP_SUM, m2, &at); /* other axes: kept */
    hd_attrs rnd;
    memset(&rnd, 0, sizeof rnd);
    rnd.dtype = HD_F32;
    int r1 = hd_ir_add_node(g, HD_OP_RAND, NULL, 0, &rnd);
    int r2 = hd_ir_add_node(g, HD_OP_RAND, NULL, 0, &rnd);
    int dead = node(g, HD_OP_LOG, x, -1);
    (void)dead;
    hd_ir_add_output(g, "a", s0);
    hd_ir_add_output(g, "b", s1);
    hd_ir_add_output(g, "c", m3);
    hd_ir_add_output(g, "r", r1);
    CHECK(hd_pass_cse(g, &n) == HD_OK && n == 3); /* e2, k2, m2 */
    CHECK(count_op(g, HD_OP_EXP) == 1 && count_op(g, HD_OP_MUL) == 2 &&
          count_op(g, HD_OP_SUM) == 2);
    CHECK(count_op(g, HD_OP_RAND) == 2);
    CHECK(hd_pass_dce(g, &n) == HD_OK && n == 1); /* log; the unused rand stays */
    CHECK(count_op(g, HD_OP_LOG) == 0 && count_op(g, HD_OP_RAND) == 2);
    CHECK(hd_ir_verify(g) == HD_OK);
    (void)r2;
    hd_ir_graph_free(g);
}

static hd_status nop_cb(hd_ctx *ctx, void *ud, hd_tensor *const *a, int n) {
    HD_UNUSED(ctx), HD_UNUSED(ud), HD_UNUSED(a), HD_UNUSED(n);
    return HD_OK;
}

static void test_dce_callbacks(void) {
    int x, n;
    hd_ir_graph *g = graph_x(HD_F32, 2, 3, &x);
    int e = node(g, HD_OP_EXP, x, -1);
    hd_ir_callback cb = {"print", nop_cb, NULL, NULL, NULL};
    CHECK(hd_ir_add_callback(g, &cb, &e, 1) == HD_OK);
    CHECK(hd_pass_dce(g, &n) == HD_OK && n == 0 && g->nnodes == 2);
    CHECK(hd_pass_cse(g, &n) == HD_OK && g->nnodes == 2);
    hd_ir_graph_free(g);
}

static void test_layout(void) {
    int x, n;
    hd_ir_graph *g = graph_x(HD_F32, 2, 3, &x);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2;
    at.shape[0] = 1;
    at.shape[1] = 0;
    int t = node_at(g, HD_OP_PERMUTE, x, &at);
    memset(&at, 0, sizeof at);
    at.nshape = 1;
    at.shape[0] = 6;
    int r = node_at(g, HD_OP_RESHAPE, t, &at);
    int r2 = node_at(g, HD_OP_RESHAPE, x, &at); /* contiguous: no copy */
    hd_ir_add_output(g, "a", r);
    hd_ir_add_output(g, "b", r2);
    CHECK(hd_pass_layout(g, &n) == HD_OK && n == 1);
    CHECK(count_op(g, HD_OP_COPY) == 1 && hd_ir_verify(g) == HD_OK);
    hd_ir_graph_free(g);
}

/* A slice keeping one element may have any step (a file may give 2^62):
 * its stride must not be multiplied by it (UBSan checks the overflow). */
static void test_layout_huge_step(void) {
    int x, n;
    hd_ir_graph *g = graph_x(HD_F32, 4, 3, &x);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.start[0] = 2;
    at.step[0] = (int64_t)1 << 62;
    at.len[0] = 1;
    at.step[1] = 1;
    at.len[1] = 3;
    int s = node_at(g, HD_OP_SLICE, x, &at);
    memset(&at, 0, sizeof at);
    at.nshape = 2;
    at.shape[0] = 1;
    at.shape[1] = 0;
    int t = node_at(g, HD_OP_PERMUTE, s, &at);
    memset(&at, 0, sizeof at);
    at.nshape = 1;
    at.shape[0] = 3;
    int r = node_at(g, HD_OP_RESHAPE, t, &at);
    CHECK(s >= 0 && t >= 0 && r >= 0);
    hd_ir_add_output(g, "r", r);
    CHECK(hd_pass_layout(g, &n) == HD_OK && n == 0); /* [3, 1] with strides [1, 3]: contiguous */
    CHECK(hd_ir_verify(g) == HD_OK);
    hd_ir_graph_free(g);
}

static void test_fuse(void) {
    int64_t sw[2] = {3, 4};
    int x;
    hd_ir_graph *g = graph_x(HD_F32, 2, 3, &x);
    int w = hd_ir_add_input(g, "w", HD_F32, sw, 2);
    int mm = node(g, HD_OP_MATMUL, x, w);
    int b = node(g, HD_OP_ADD, mm, mm);
    int r = node(g, HD_OP_RELU, b, -1);
    int e = node(g, HD_OP_EXP, x, -1);
    int n2 = node(g, HD_OP_NEG, e, -1);
    int s = node_at(g, HD_OP_SUM, n2, NULL);
    int after = node(g, HD_OP_MUL, s, s); /* after a closed group: a new one */
    hd_ir_add_output(g, "r", r);
    hd_ir_add_output(g, "a", after);
    CHECK(hd_pass_fuse(g) == HD_OK);
    CHECK(g->ngroups == 3);
    CHECK(g->groups[0].kind == HD_IR_GROUP_MATMUL && g->groups[0].nnodes == 3);
    CHECK(g->groups[1].kind == HD_IR_GROUP_REDUCE && g->groups[1].nnodes == 3);
    CHECK(g->groups[2].kind == HD_IR_GROUP_ELEMENTWISE && g->groups[2].nnodes == 1);
    char *text = hd_ir_to_text(g);
    CHECK(text && strstr(text, "# group 1"));
    hd_ctx_strfree(C, text);
    hd_ir_graph_free(g);
    /* the placement rule: a node reading a value computed after the group
     * started cannot join it */
    g = graph_x(HD_F32, 2, 3, &x);
    int a = node(g, HD_OP_EXP, x, -1);
    int red = node_at(g, HD_OP_SUM, a, NULL); /* closes group 0 */
    int c = node(g, HD_OP_ADD, a, red);       /* a's group is closed */
    int d = node(g, HD_OP_NEG, a, -1);
    hd_ir_add_output(g, "c", c);
    hd_ir_add_output(g, "d", d);
    CHECK(hd_pass_fuse(g) == HD_OK && g->ngroups == 3);
    hd_ir_graph_free(g);
    g = graph_x(HD_F32, 2, 3, &x);
    a = node(g, HD_OP_EXP, x, -1);
    hd_attrs sm;
    memset(&sm, 0, sizeof sm);
    int soft = node_at(g, HD_OP_SOFTMAX, a, &sm); /* not fusable, reads group 0 */
    c = node(g, HD_OP_ADD, a, soft);              /* soft is defined after group 0 began */
    hd_ir_add_output(g, "c", c);
    CHECK(hd_pass_fuse(g) == HD_OK && g->ngroups == 2);
    CHECK(g->nodes[g->values[c].index].group == 1);
    hd_ir_graph_free(g);
}

/* Fusing with each of its allocations failing in turn: out of memory, and
 * nothing left once the graph is freed. */
static void test_fuse_alloc_failures(void) {
    for (long k = 0; k < 4; k++) {
        size_t before = C->mem_used;
        int x;
        hd_ir_graph *g = graph_x(HD_F32, 2, 3, &x);
        int v = x;
        /* enough nodes that the groups' array needs an arena block of its own */
        for (int i = 0; i < 2000; i++) v = node(g, i % 2 ? HD_OP_NEG : HD_OP_EXP, v, -1);
        hd_ir_add_output(g, "v", v);
        C->fail_countdown = k;
        hd_status st = hd_pass_fuse(g);
        int injected = C->fail_countdown < 0;
        C->fail_countdown = -1;
        CHECK_MSG(injected ? st == HD_ERR_MEMORY : st == HD_OK, "k=%ld: status %d", k, (int)st);
        hd_ir_graph_free(g);
        CHECK_MSG(C->mem_used == before, "k=%ld: %zu bytes left", k, C->mem_used - before);
        hd_error_clear(C);
    }
}

static void test_memplan(void) {
    int x;
    hd_ir_graph *g = graph_x(HD_F32, 64, 64, &x);
    int v = x;
    for (int i = 0; i < 6; i++) v = node(g, i % 2 ? HD_OP_NEG : HD_OP_EXP, v, -1);
    int s = node_at(g, HD_OP_SUM, v, NULL);
    int tail = node(g, HD_OP_ADD, v, s);
    hd_ir_add_output(g, "y", tail);
    hd_ir_memplan p;
    CHECK(hd_pass_memplan(g, NULL, &p) == HD_OK);
    CHECK(p.ninplace == 5); /* every unary after the first */
    CHECK(p.naive_bytes == 6 * 16384 + 4);
    CHECK(p.planned_bytes == 16384 + 4); /* one buffer for the chain, one for the sum */
    CHECK(p.buffer[tail] == -1);         /* outputs get fresh memory each run */
    hd_pass_memplan_options o = {0, 1};
    CHECK(hd_pass_memplan(g, &o, &p) == HD_OK && p.ninplace == 0);
    CHECK(p.planned_bytes == 2 * 16384); /* ping-pong between two; the sum reuses one */
    o.no_reuse = 1;
    CHECK(hd_pass_memplan(g, &o, &p) == HD_OK && p.planned_bytes == p.naive_bytes);
    hd_ir_graph_free(g);
    /* an input read again later is not overwritten; views keep their base */
    g = graph_x(HD_F32, 4, 4, &x);
    int e = node(g, HD_OP_EXP, x, -1);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2;
    at.shape[0] = 1;
    at.shape[1] = 0;
    int t = node_at(g, HD_OP_PERMUTE, e, &at);
    int a = node(g, HD_OP_ADD, e, t); /* e dies here but t views it: no in-place */
    int b = node(g, HD_OP_NEG, a, -1);
    hd_ir_add_output(g, "b", b);
    CHECK(hd_pass_memplan(g, NULL, &p) == HD_OK);
    CHECK(p.buffer[a] != p.buffer[e] && p.root[t] == e && p.ninplace == 0);
    hd_ir_graph_free(g);
}

static void test_pipeline(void) {
    int x;
    hd_ir_graph *g = graph_x(HD_I32, 2, 3, &x);
    int k = konst(g, HD_F64, 1.0, 1), k2 = konst(g, HD_F64, 1.0, 1);
    int a = node(g, HD_OP_MUL, x, k); /* i32 * 1.0 -> f32: cast x, then x * 1 */
    int b = node(g, HD_OP_MUL, x, k2);
    int c = node(g, HD_OP_ADD, a, b);
    hd_ir_add_output(g, "c", c);
    hd_pass_report r;
    CHECK(hd_pass_pipeline(g, 1, 1 << 20, &r) == HD_OK);
    CHECK(r.casts >= 1 && r.simplified >= 1 && r.merged >= 1);
    CHECK(g->nnodes == 2 && count_op(g, HD_OP_CAST) == 1 && out_op(g) == HD_OP_ADD);
    CHECK(hd_ir_verify(g) == HD_OK);
    hd_ir_graph_free(g);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    C = &ctx;
    test_lower();
    test_fold();
    test_simplify_arith();
    test_simplify_shapes();
    test_cse_dce();
    test_dce_callbacks();
    test_layout();
    test_layout_huge_step();
    test_fuse();
    test_fuse_alloc_failures();
    test_memplan();
    test_pipeline();
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
