/* Core runtime: dtype promotion, f16/bf16 conversion, views and aliasing,
 * broadcasting shapes, allocator limits and failure injection. */
#include "hd_test.h"
#include "hd_op.h"

static void test_promotion(void) {
    /* torch.promote_types, written out from PyTorch's table. */
    CHECK(hd_dtype_promote(HD_F16, HD_BF16) == HD_F32);
    CHECK(hd_dtype_promote(HD_I8, HD_U8) == HD_I32);
    CHECK(hd_dtype_promote(HD_BOOL, HD_I8) == HD_I8);
    CHECK(hd_dtype_promote(HD_U8, HD_I64) == HD_I64);
    CHECK(hd_dtype_promote(HD_I64, HD_F16) == HD_F16);
    CHECK(hd_dtype_promote(HD_F32, HD_F64) == HD_F64);
    CHECK(hd_dtype_promote(HD_I32, HD_F32) == HD_F32);
    CHECK(hd_dtype_promote(HD_BOOL, HD_BOOL) == HD_BOOL);
    hd_promo p;
    /* f16 tensor * 2.0 stays f16 */
    hd_promo_init(&p);
    hd_promo_add(&p, HD_F16, HD_PRIO_TENSOR);
    hd_promo_add(&p, HD_F64, HD_PRIO_NUMBER);
    CHECK(hd_promo_result(&p) == HD_F16);
    /* i32 tensor + 2.5 -> f32 (default float) */
    hd_promo_init(&p);
    hd_promo_add(&p, HD_I32, HD_PRIO_TENSOR);
    hd_promo_add(&p, HD_F64, HD_PRIO_NUMBER);
    CHECK(hd_promo_result(&p) == HD_F32);
    /* i32 tensor + 2 -> i32 */
    hd_promo_init(&p);
    hd_promo_add(&p, HD_I32, HD_PRIO_TENSOR);
    hd_promo_add(&p, HD_I64, HD_PRIO_NUMBER);
    CHECK(hd_promo_result(&p) == HD_I32);
    /* bool tensor + 1 -> i64 */
    hd_promo_init(&p);
    hd_promo_add(&p, HD_BOOL, HD_PRIO_TENSOR);
    hd_promo_add(&p, HD_I64, HD_PRIO_NUMBER);
    CHECK(hd_promo_result(&p) == HD_I64);
    /* f32 tensor + f64 0-d tensor -> f32; i32 tensor + f64 0-d -> f64 */
    hd_promo_init(&p);
    hd_promo_add(&p, HD_F32, HD_PRIO_TENSOR);
    hd_promo_add(&p, HD_F64, HD_PRIO_ZERODIM);
    CHECK(hd_promo_result(&p) == HD_F32);
    hd_promo_init(&p);
    hd_promo_add(&p, HD_I32, HD_PRIO_TENSOR);
    hd_promo_add(&p, HD_F64, HD_PRIO_ZERODIM);
    CHECK(hd_promo_result(&p) == HD_F64);
    /* two numbers: int and float -> f32 */
    hd_promo_init(&p);
    hd_promo_add(&p, HD_I64, HD_PRIO_NUMBER);
    hd_promo_add(&p, HD_F64, HD_PRIO_NUMBER);
    CHECK(hd_promo_result(&p) == HD_F32);
}

static void test_half(void) {
    /* Exact values from the IEEE 754 binary16 / bfloat16 encodings. */
    CHECK(hd_f32_to_f16(1.0f) == 0x3c00);
    CHECK(hd_f32_to_f16(-2.0f) == 0xc000);
    CHECK(hd_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(hd_f32_to_f16(65520.0f) == 0x7c00);               /* rounds to inf */
    CHECK(hd_f32_to_f16(5.960464477539063e-08f) == 0x0001); /* smallest subnormal */
    CHECK(hd_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00);     /* tie to even */
    CHECK(hd_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02);
    CHECK(hd_f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(hd_f16_to_f32(0x0001) == 5.960464477539063e-08f);
    CHECK(isnan(hd_f16_to_f32(hd_f32_to_f16(NAN))));
    CHECK(hd_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(hd_f32_to_bf16(3.140625f) == 0x4049);
    CHECK(hd_bf16_to_f32(0x4049) == 3.140625f);
    CHECK(isnan(hd_bf16_to_f32(hd_f32_to_bf16(NAN))));
    /* every f16 value round-trips through f32 */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
        if (hd_f32_to_f16(hd_f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK(bad == 0);
}

static void test_views(hd_ctx *ctx) {
    float data[6] = {0, 1, 2, 3, 4, 5};
    int64_t shape[2] = {2, 3};
    hd_tensor *t = hd_tensor_from_data(ctx, HD_F32, shape, 2, data);
    CHECK(t && t->numel == 6 && hd_tensor_is_contiguous(t));
    hd_attrs at = {0};
    at.nshape = 2;
    at.shape[0] = 1;
    at.shape[1] = 0;
    hd_tensor *tt = NULL;
    CHECK(hd_op_run(ctx, HD_OP_PERMUTE, &t, 1, &at, &tt) == HD_OK);
    CHECK(tt->shape[0] == 3 && tt->shape[1] == 2 && !hd_tensor_is_contiguous(tt));
    CHECK(tt->storage == t->storage);
    CHECK(hd_tensor_get(tt, 1) == 3.0 && hd_tensor_get(tt, 2) == 1.0);
    /* reshape of the transposed view cannot be a view: copies */
    hd_attrs rs = {0};
    rs.nshape = 1;
    rs.shape[0] = -1;
    hd_tensor *flat = NULL;
    CHECK(hd_op_run(ctx, HD_OP_RESHAPE, &tt, 1, &rs, &flat) == HD_OK);
    CHECK(flat->storage != t->storage);
    CHECK(hd_tensor_get(flat, 1) == 3.0);
    hd_tensor_unref(flat);
    /* reshape of the contiguous tensor is a view */
    hd_tensor *flat2 = NULL;
    CHECK(hd_op_run(ctx, HD_OP_RESHAPE, &t, 1, &rs, &flat2) == HD_OK);
    CHECK(flat2->storage == t->storage && flat2->shape[0] == 6);
    /* writing through the view is seen by the base */
    ((float *)hd_tensor_data(flat2))[4] = 40;
    CHECK(hd_tensor_get(t, 4) == 40);
    /* unsqueeze of the transposed view is a view */
    hd_attrs us = {0};
    us.nshape = 3;
    us.shape[0] = 3;
    us.shape[1] = 1;
    us.shape[2] = 2;
    hd_tensor *u = NULL;
    CHECK(hd_op_run(ctx, HD_OP_RESHAPE, &tt, 1, &us, &u) == HD_OK);
    CHECK(u->storage == t->storage && hd_tensor_get(u, 1) == 3.0);
    /* slice t[:, 1:3:1] and t[1] */
    hd_attrs sl = {0};
    sl.start[0] = 0, sl.step[0] = 1, sl.len[0] = 2;
    sl.start[1] = 1, sl.step[1] = 1, sl.len[1] = 2;
    hd_tensor *s = NULL;
    CHECK(hd_op_run(ctx, HD_OP_SLICE, &t, 1, &sl, &s) == HD_OK);
    CHECK(s->ndim == 2 && s->shape[1] == 2 && hd_tensor_get(s, 2) == 40.0);
    hd_attrs row = {0};
    row.start[0] = 1, row.step[0] = 1, row.len[0] = 1;
    row.start[1] = 0, row.step[1] = 1, row.len[1] = 3;
    row.drop_mask = 1;
    hd_tensor *r = NULL;
    CHECK(hd_op_run(ctx, HD_OP_SLICE, &t, 1, &row, &r) == HD_OK);
    CHECK(r->ndim == 1 && r->shape[0] == 3 && hd_tensor_get(r, 0) == 3.0);
    /* out-of-range slice is an error, not a crash */
    row.start[0] = 2;
    hd_tensor *bad = NULL;
    CHECK(hd_op_run(ctx, HD_OP_SLICE, &t, 1, &row, &bad) == HD_ERR_RUNTIME && !bad);
    CHECK(strstr(hd_error_message(ctx), "out of range") != NULL);
    /* expand */
    hd_attrs ex = {0};
    ex.nshape = 3;
    ex.shape[0] = 4, ex.shape[1] = -1, ex.shape[2] = 3;
    hd_tensor *e = NULL;
    CHECK(hd_op_run(ctx, HD_OP_EXPAND, &t, 1, &ex, &e) == HD_OK);
    CHECK(e->ndim == 3 && e->strides[0] == 0 && hd_tensor_get(e, 7) == 1.0);
    hd_tensor_unref(e);
    hd_tensor_unref(r);
    hd_tensor_unref(s);
    hd_tensor_unref(u);
    hd_tensor_unref(flat2);
    hd_tensor_unref(tt);
    hd_tensor_unref(t);
}

static void test_broadcast_shapes(hd_ctx *ctx) {
    int64_t a[3] = {4, 1, 3}, b[2] = {5, 1}, out[8];
    int n;
    CHECK(hd_broadcast_shapes(ctx, a, 3, b, 2, out, &n) == HD_OK);
    CHECK(n == 3 && out[0] == 4 && out[1] == 5 && out[2] == 3);
    int64_t c[1] = {2};
    CHECK(hd_broadcast_shapes(ctx, a, 3, c, 1, out, &n) == HD_ERR_RUNTIME);
    CHECK(strstr(hd_error_message(ctx), "[4, 1, 3] and [2]") != NULL);
    int64_t z[2] = {0, 3};
    CHECK(hd_broadcast_shapes(ctx, z, 2, c + 0, 0, out, &n) == HD_OK && out[0] == 0);
}

static void test_memory(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    ctx.mem_limit = 1 << 20;
    int64_t big[1] = {1 << 20};
    CHECK(hd_tensor_new(&ctx, HD_F32, big, 1) == NULL && ctx.status == HD_ERR_MEMORY);
    int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 16};
    CHECK(hd_tensor_new(&ctx, HD_F32, huge, 3) == NULL && ctx.status == HD_ERR_MEMORY);
    int64_t neg[1] = {-1};
    CHECK(hd_tensor_new(&ctx, HD_F32, neg, 1) == NULL && ctx.status == HD_ERR_ARGUMENT);
    /* fail each allocation of a small op in turn: errors, never crashes or leaks */
    int64_t s[1] = {4};
    for (long k = 0; k < 8; k++) {
        hd_tensor *t = hd_tensor_new(&ctx, HD_F32, s, 1);
        if (!t) continue;
        ctx.fail_countdown = k;
        hd_tensor *out = NULL;
        hd_attrs at = {0};
        at.nshape = 2;
        at.shape[0] = 2, at.shape[1] = 2;
        hd_status st = hd_op_run(&ctx, HD_OP_RESHAPE, &t, 1, &at, &out);
        CHECK((st == HD_OK) == (out != NULL));
        hd_tensor_unref(out);
        hd_tensor_unref(t);
        ctx.fail_countdown = -1;
    }
    CHECK(ctx.mem_used == 0);
}

/* Calls of the allocator hook that allocate a block the cache may keep. */
static void *alloc_counting(void *ud, void *ptr, size_t osize, size_t nsize) {
    HD_UNUSED(osize);
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (!ptr && nsize >= HD_BLOCK_CACHE_MIN) ++*(long *)ud;
    return realloc(ptr, nsize);
}

static void test_block_class(void) {
    const size_t k = 1024;
    CHECK(hd_block_class(100) == 100);
    CHECK(hd_block_class(16 * k) == 16 * k);
    CHECK(hd_block_class(16 * k + 1) == 18 * k);
    CHECK(hd_block_class(64 * k + 80) == 72 * k); /* eighths of 64 KiB */
    CHECK(hd_block_class(511 * k) == 512 * k);
    CHECK(hd_block_class(1024 * k - 1) == 1024 * k);
    CHECK(hd_block_class(1024 * k + 1) == 1024 * k + 1); /* large blocks: as they are */
    for (size_t n = 16 * k; n < 1024 * k; n += 4093) {
        size_t c = hd_block_class(n);
        CHECK_MSG(c >= n && c - n <= n / 8, "class of %zu: %zu", n, c);
    }
}

/* A loop that makes and drops tensors of 32 KiB to 512 KiB (an MLP's
 * training step) allocates only in its first pass once the cache is on;
 * cached bytes count as used, and an allocation that would pass the
 * memory limit empties the cache first. */
static void test_block_cache(void) {
    long calls = 0;
    hd_ctx c;
    hd_ctx_init(&c, alloc_counting, &calls);
    hd_ctx_set_cache_limit(&c, (size_t)64 << 20);
    int64_t sizes[4] = {8192, 32768, 131072, 16384}; /* f32: 32 KiB to 512 KiB */
    long first = 0;
    for (int pass = 0; pass < 10; pass++) {
        hd_tensor *t[4];
        for (int i = 0; i < 4; i++) t[i] = hd_tensor_new(&c, HD_F32, sizes + i, 1);
        for (int i = 0; i < 4; i++) hd_tensor_unref(t[i]);
        if (pass == 0) first = calls;
    }
    CHECK_MSG(calls == first, "%ld allocations after the first pass", calls - first);
    CHECK(c.mem_used > (size_t)700 << 10); /* the cached blocks */
    c.mem_limit = c.mem_used + ((size_t)100 << 10);
    int64_t big[1] = {60000}; /* 240 KB: fits only without the cache */
    hd_tensor *b = hd_tensor_new(&c, HD_F32, big, 1);
    CHECK_MSG(b != NULL, "%s", hd_error_message(&c));
    hd_tensor_unref(b);
    hd_ctx_release(&c);
    CHECK(c.mem_used == 0);
}

/* Geometry that would overflow int64 arithmetic is an error, never UB. */
static void test_overflow_guards(hd_ctx *ctx) {
    int64_t one[1] = {1};
    hd_tensor *t = hd_tensor_zeros(ctx, HD_F32, one, 1), *out = NULL;
    hd_attrs ex = {0};
    ex.nshape = 2;
    ex.shape[0] = INT64_C(1) << 40, ex.shape[1] = INT64_C(1) << 40;
    CHECK(hd_op_run(ctx, HD_OP_EXPAND, &t, 1, &ex, &out) == HD_ERR_MEMORY && !out);
    hd_attrs sl = {0};
    sl.start[0] = 0, sl.step[0] = INT64_MAX, sl.len[0] = INT64_MAX;
    CHECK(hd_op_run(ctx, HD_OP_SLICE, &t, 1, &sl, &out) == HD_ERR_RUNTIME && !out);
    int64_t empty_huge[3] = {0, INT64_C(1) << 62, 4};
    CHECK(hd_tensor_new(ctx, HD_F32, empty_huge, 3) == NULL && ctx->status == HD_ERR_MEMORY);
    int64_t xs[4] = {1, 1, 4, 4}, ws[4] = {1, 1, 3, 3};
    hd_tensor *x = hd_tensor_zeros(ctx, HD_F32, xs, 4), *w = hd_tensor_zeros(ctx, HD_F32, ws, 4);
    hd_tensor *in[2] = {x, w};
    hd_attrs cv = {0};
    cv.ints[0] = cv.ints[1] = 1;
    cv.ints[2] = cv.ints[3] = INT64_MAX / 2;
    CHECK(hd_op_run(ctx, HD_OP_CONV2D, in, 2, &cv, &out) != HD_OK && !out);
    hd_tensor_unref(x);
    hd_tensor_unref(w);
    hd_tensor_unref(t);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    test_promotion();
    test_half();
    test_views(&ctx);
    test_broadcast_shapes(&ctx);
    test_memory();
    test_block_class();
    test_block_cache();
    test_overflow_guards(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
