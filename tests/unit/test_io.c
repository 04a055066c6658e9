/* Files: .npy, .npz, .safetensors and CSV. Round trips for every dtype and
 * awkward shapes and views; fixtures written by numpy and the safetensors
 * package (tests/data/io/make_fixtures.py); damaged files, each an error with
 * a message and no leak; allocation failures at every step of each load. */
#include "hd_test.h"
#include "hd_io.h"

#include <stdint.h>
#include <unistd.h>
#include <zlib.h>

static hd_ctx ctx;
static char tmpdir[64];

/* ---- helpers ---- */

static const char *data_path(const char *file) {
    static char buf[1024];
    const char *root = getenv("HODU_TEST_DATA");
    snprintf(buf, sizeof buf, "%s/io/%s", root ? root : "tests/data", file);
    return buf;
}

static const char *tmp_path(const char *file) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, file);
    return buf;
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* A tensor of dtype dt with element i = f(i), a value every dtype holds. */
static double pattern(hd_dtype dt, int64_t i) {
    if (dt == HD_BOOL) return (double)(i % 3 == 1);
    if (dt == HD_U8) return (double)((i * 7) % 256);
    if (dt == HD_I8) return (double)((i * 5) % 256 - 128);
    if (hd_dtype_is_int(dt)) return (double)(i * 1001 - 5000);
    return (double)i * 0.5 - 3.25;
}

static hd_tensor *make(hd_dtype dt, const int64_t *shape, int ndim) {
    hd_tensor *t = hd_tensor_new(&ctx, dt, shape, ndim);
    for (int64_t i = 0; t && i < t->numel; i++)
        hd_dtype_store(dt, t->storage->data, i, pattern(dt, i));
    return t;
}

/* Same dtype, shape and bytes of every element (bitwise, in row-major order). */
static int same(const hd_tensor *a, const hd_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    int es = hd_dtype_size(a->dtype);
    for (int64_t i = 0; i < a->numel; i++) {
        const char *pa = (const char *)a->storage->data + hd_tensor_elem_offset(a, i) * es;
        const char *pb = (const char *)b->storage->data + hd_tensor_elem_offset(b, i) * es;
        if (memcmp(pa, pb, (size_t)es) != 0) return 0;
    }
    return 1;
}

static int has_shape(const hd_tensor *t, int ndim, int64_t a, int64_t b) {
    if (!t || t->ndim != ndim) return 0;
    if (ndim > 0 && t->shape[0] != a) return 0;
    if (ndim > 1 && t->shape[1] != b) return 0;
    return 1;
}

static int msg_has(const char *s) {
    return strstr(hd_error_message(&ctx), s) != NULL;
}

/* ---- .npy ---- */

static void roundtrip_npy(const hd_tensor *t, const char *what) {
    hd_io_bytes b = {0};
    hd_tensor *u = NULL;
    hd_status st = hd_io_save_npy_bytes(&ctx, "mem.npy", t, &b);
    CHECK_MSG(st == HD_OK, "%s: %s", what, hd_error_message(&ctx));
    if (!st) {
        CHECK((b.len - hd_tensor_nbytes(t)) % 64 == 0); /* header padded to 64 */
        st = hd_io_load_npy_buffer(&ctx, "mem.npy", b.data, b.len, &u);
        CHECK_MSG(st == HD_OK && same(t, u), "%s: %s", what, hd_error_message(&ctx));
    }
    hd_tensor_unref(u);
    hd_io_bytes_free(&ctx, &b);
}

static const int64_t shapes[][HD_MAX_DIMS] = {
    {0}, {0}, {5}, {2, 3}, {0, 4}, {3, 0, 2}, {2, 1, 3, 1, 1, 2, 1, 2},
};
static const int shape_dims[] = {0, 1, 1, 2, 2, 3, 8};
#define NSHAPES 7

static void test_npy_roundtrip(void) {
    size_t before = ctx.mem_used;
    for (int dt = 0; dt < HD_DTYPE_COUNT; dt++) {
        if (dt == HD_BF16) continue;
        for (int s = 0; s < NSHAPES; s++) {
            hd_tensor *t = make((hd_dtype)dt, shapes[s], shape_dims[s]);
            char what[64];
            snprintf(what, sizeof what, "%s shape #%d", hd_dtype_name((hd_dtype)dt), s);
            roundtrip_npy(t, what);
            hd_tensor_unref(t);
        }
    }
    /* the header numpy would write */
    int64_t sh[2] = {2, 3};
    hd_tensor *t = make(HD_F32, sh, 2);
    hd_io_bytes b = {0};
    CHECK(hd_io_save_npy_bytes(&ctx, "m.npy", t, &b) == HD_OK);
    CHECK(b.len == 128 + 24 && memcmp(b.data, "\x93NUMPY\x01\x00\x76\x00", 10) == 0);
    const char *hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    CHECK(memcmp(b.data + 10, hdr, strlen(hdr)) == 0);
    CHECK(b.data[127] == '\n');
    hd_io_bytes_free(&ctx, &b);
    /* bf16 has no numpy dtype */
    hd_tensor *h = make(HD_BF16, sh, 2);
    CHECK(hd_io_save_npy_bytes(&ctx, "m.npy", h, &b) == HD_ERR_ARGUMENT);
    CHECK(msg_has("safetensors") && msg_has(".to(f32)"));
    CHECK(b.len == 0 && b.data == NULL);
    CHECK(hd_io_save_npy(&ctx, tmp_path("bf.npy"), h) == HD_ERR_ARGUMENT);
    CHECK(access(tmp_path("bf.npy"), F_OK) != 0); /* nothing created */
    hd_tensor_unref(h);
    hd_tensor_unref(t);
    CHECK(ctx.mem_used == before);
}

/* Views: transposed, strided with an offset, reversed, and 8-d permuted. */
static void test_npy_views(void) {
    size_t before = ctx.mem_used;
    int64_t sh[2] = {3, 4};
    hd_tensor *base = make(HD_F32, sh, 2);
    int64_t tsh[2] = {4, 3}, tst[2] = {1, 4};
    hd_tensor *tr = hd_tensor_view(&ctx, base, tsh, tst, 2, 0);
    CHECK(!hd_tensor_is_contiguous(tr));
    roundtrip_npy(tr, "transposed");
    /* check actual values: element (i, j) of the transpose is base (j, i) */
    hd_io_bytes b = {0};
    hd_tensor *u = NULL;
    CHECK(hd_io_save_npy_bytes(&ctx, "t.npy", tr, &b) == HD_OK);
    CHECK(hd_io_load_npy_buffer(&ctx, "t.npy", b.data, b.len, &u) == HD_OK);
    CHECK(u && hd_tensor_is_contiguous(u) && hd_tensor_get(u, 1) == hd_tensor_get(base, 4));
    hd_tensor_unref(u);
    hd_io_bytes_free(&ctx, &b);
    int64_t ssh[2] = {3, 2}, sst[2] = {4, 2};
    hd_tensor *sl = hd_tensor_view(&ctx, base, ssh, sst, 2, 1);
    roundtrip_npy(sl, "strided");
    int64_t rsh[1] = {4}, rst[1] = {-1};
    hd_tensor *rev = hd_tensor_view(&ctx, base, rsh, rst, 1, 3);
    roundtrip_npy(rev, "reversed");
    int64_t bsh[1] = {5}, bst[1] = {0};
    hd_tensor *bc = hd_tensor_view(&ctx, base, bsh, bst, 1, 2);
    roundtrip_npy(bc, "broadcast");
    /* 8-d: reverse the dims of a contiguous tensor, strides computed by hand */
    int64_t s8[8] = {2, 3, 1, 2, 2, 1, 3, 2}, st8[8], p8[8], pst[8];
    hd_tensor *t8 = make(HD_I64, s8, 8);
    hd_contiguous_strides(s8, 8, st8);
    for (int d = 0; d < 8; d++) p8[d] = s8[7 - d], pst[d] = st8[7 - d];
    hd_tensor *v8 = hd_tensor_view(&ctx, t8, p8, pst, 8, 0);
    roundtrip_npy(v8, "8-d permuted");
    hd_tensor_unref(v8);
    hd_tensor_unref(t8);
    hd_tensor_unref(bc);
    hd_tensor_unref(rev);
    hd_tensor_unref(sl);
    hd_tensor_unref(tr);
    hd_tensor_unref(base);
    CHECK(ctx.mem_used == before);
}

static hd_tensor *load_fixture_npy(const char *file) {
    hd_tensor *t = NULL;
    hd_status st = hd_io_load_npy(&ctx, data_path(file), &t);
    CHECK_MSG(st == HD_OK, "%s: %s", file, hd_error_message(&ctx));
    return t;
}

static void test_npy_fixtures(void) {
    size_t before = ctx.mem_used;
    hd_tensor *t = load_fixture_npy("f32_2x3.npy");
    CHECK(has_shape(t, 2, 2, 3) && t->dtype == HD_F32);
    CHECK(t && hd_tensor_get(t, 0) == 1.5 && hd_tensor_get(t, 2) == 3.25 &&
          hd_tensor_get(t, 5) == -7.5 && hd_tensor_get(t, 4) == (double)1e-3f);
    hd_tensor_unref(t);
    t = load_fixture_npy("scalar_f64.npy");
    CHECK(t && t->ndim == 0 && t->dtype == HD_F64 && hd_tensor_get(t, 0) == 3.5);
    hd_tensor_unref(t);
    t = load_fixture_npy("empty_0x3.npy");
    CHECK(has_shape(t, 2, 0, 3) && t->numel == 0);
    hd_tensor_unref(t);
    t = load_fixture_npy("bool.npy");
    CHECK(t && t->dtype == HD_BOOL && t->numel == 4 && hd_tensor_get(t, 1) == 0 &&
          hd_tensor_get(t, 3) == 1);
    hd_tensor_unref(t);
    /* column-major on disk, row-major in memory */
    t = load_fixture_npy("fortran_i4.npy");
    CHECK(t && t->dtype == HD_I32 && t->ndim == 3 && t->shape[2] == 4);
    int ok = t != NULL;
    for (int64_t i = 0; t && i < 24; i++) ok &= hd_tensor_get_i64(t, i) == i;
    CHECK(ok);
    hd_tensor_unref(t);
    t = load_fixture_npy("be_f8.npy");
    CHECK(has_shape(t, 2, 2, 3) && t->dtype == HD_F64 && hd_tensor_get(t, 1) == -2.5 &&
          hd_tensor_get(t, 2) == 1e100 && hd_tensor_get(t, 5) == 6.0);
    hd_tensor_unref(t);
    t = load_fixture_npy("be_i2.npy");
    CHECK(t && t->dtype == HD_I32 && hd_tensor_get_i64(t, 0) == -32768 &&
          hd_tensor_get_i64(t, 1) == -1 && hd_tensor_get_i64(t, 4) == 32767);
    hd_tensor_unref(t);
    t = load_fixture_npy("le_u2.npy");
    CHECK(t && t->dtype == HD_I32 && hd_tensor_get_i64(t, 2) == 65535);
    hd_tensor_unref(t);
    t = load_fixture_npy("le_u4.npy");
    CHECK(t && t->dtype == HD_I64 && hd_tensor_get_i64(t, 1) == INT64_C(2147483648) &&
          hd_tensor_get_i64(t, 2) == INT64_C(4294967295));
    hd_tensor_unref(t);
    t = load_fixture_npy("be_f2.npy");
    CHECK(t && t->dtype == HD_F16 && ((uint16_t *)t->storage->data)[0] == 0x3c00 &&
          hd_tensor_get(t, 1) == -2.0 && hd_tensor_get(t, 2) == 65504.0);
    hd_tensor_unref(t);
    for (int v = 2; v <= 3; v++) {
        t = load_fixture_npy(v == 2 ? "v2_i8.npy" : "v3_i8.npy");
        CHECK(has_shape(t, 2, 2, 3) && t->dtype == HD_I64 && hd_tensor_get_i64(t, 0) == -3 &&
              hd_tensor_get_i64(t, 5) == 2);
        hd_tensor_unref(t);
    }
    t = NULL;
    CHECK(hd_io_load_npy(&ctx, data_path("complex.npy"), &t) == HD_ERR_IO && !t);
    CHECK(msg_has("unsupported dtype '<c8'"));
    CHECK(hd_io_load_npy(&ctx, data_path("no_such_file.npy"), &t) == HD_ERR_IO);
    CHECK(msg_has("cannot open"));
    CHECK(hd_io_load_npy(&ctx, data_path(""), &t) == HD_ERR_IO);
    CHECK(msg_has("directory"));
    CHECK(ctx.mem_used == before);
}

/* ---- .npz ---- */

/* The arrays make_fixtures.py writes into dtypes.npz. */
static void check_dtypes_npz(const hd_io_list *l) {
    CHECK(l->count == 10);
    static const char *order[] = {"f16", "f32", "f64",  "i8",      "u8",
                                  "i32", "i64", "bool", "layer/w", "scalar"};
    for (size_t i = 0; i < 10 && i < l->count; i++)
        CHECK(strcmp(l->entries[i].name, order[i]) == 0);
    hd_tensor *t = hd_io_list_get(l, "f16");
    CHECK(t && t->dtype == HD_F16 && hd_tensor_get(t, 1) == -1.25 && hd_tensor_get(t, 2) == 65504);
    CHECK(t && ((uint16_t *)t->storage->data)[3] == 0x0001); /* 6e-8: the least subnormal */
    t = hd_io_list_get(l, "f32");
    CHECK(has_shape(t, 2, 2, 2) && t->dtype == HD_F32 && hd_tensor_get(t, 3) == (double)1e30f);
    t = hd_io_list_get(l, "f64");
    CHECK(t && t->dtype == HD_F64 && hd_tensor_get(t, 0) == 3.141592653589793 &&
          hd_tensor_get(t, 2) == 1e-300);
    t = hd_io_list_get(l, "i8");
    CHECK(t && t->dtype == HD_I8 && hd_tensor_get_i64(t, 0) == -128 &&
          hd_tensor_get_i64(t, 3) == 127);
    t = hd_io_list_get(l, "u8");
    CHECK(t && t->dtype == HD_U8 && hd_tensor_get_i64(t, 2) == 200 &&
          hd_tensor_get_i64(t, 3) == 255);
    t = hd_io_list_get(l, "i32");
    CHECK(t && t->dtype == HD_I32 && hd_tensor_get_i64(t, 0) == INT32_MIN &&
          hd_tensor_get_i64(t, 3) == INT32_MAX);
    t = hd_io_list_get(l, "i64");
    CHECK(t && t->dtype == HD_I64 && hd_tensor_get_i64(t, 0) == INT64_MIN &&
          hd_tensor_get_i64(t, 3) == INT64_MAX);
    t = hd_io_list_get(l, "bool");
    CHECK(has_shape(t, 2, 2, 2) && t->dtype == HD_BOOL && hd_tensor_get(t, 0) == 1 &&
          hd_tensor_get(t, 1) == 0 && hd_tensor_get(t, 3) == 1);
    t = hd_io_list_get(l, "layer/w");
    CHECK(has_shape(t, 2, 2, 3) && hd_tensor_get(t, 5) == 5.0);
    t = hd_io_list_get(l, "scalar");
    CHECK(t && t->ndim == 0 && t->dtype == HD_I64 && hd_tensor_get_i64(t, 0) == -4);
}

static void test_npz_fixtures(void) {
    size_t before = ctx.mem_used;
    const char *files[] = {"dtypes.npz", "dtypes_deflate.npz"};
    for (int f = 0; f < 2; f++) {
        hd_io_list l;
        hd_status st = hd_io_load_npz(&ctx, data_path(files[f]), &l);
        CHECK_MSG(st == HD_OK, "%s: %s", files[f], hd_error_message(&ctx));
        check_dtypes_npz(&l);
        hd_io_list_free(&ctx, &l);
    }
    CHECK(ctx.mem_used == before);
}

/* Every dtype numpy has, the awkward shapes, and a view. */
static void fill_list(hd_io_list *l, int with_bf16) {
    hd_io_list_init(l);
    char name[64];
    for (int dt = 0; dt < HD_DTYPE_COUNT; dt++) {
        if (dt == HD_BF16 && !with_bf16) continue;
        for (int s = 0; s < NSHAPES; s++) {
            hd_tensor *t = make((hd_dtype)dt, shapes[s], shape_dims[s]);
            snprintf(name, sizeof name, "%s/%d", hd_dtype_name((hd_dtype)dt), s);
            hd_io_list_add(&ctx, l, name, t);
            hd_tensor_unref(t);
        }
    }
    int64_t sh[2] = {3, 4}, tsh[2] = {4, 3}, tst[2] = {1, 4};
    hd_tensor *base = make(HD_F64, sh, 2);
    hd_tensor *tr = hd_tensor_view(&ctx, base, tsh, tst, 2, 0);
    hd_io_list_add(&ctx, l, "transposed \xc3\xa9", tr);
    hd_tensor_unref(tr);
    hd_tensor_unref(base);
}

static int same_lists(const hd_io_list *a, const hd_io_list *b) {
    if (a->count != b->count) return 0;
    for (size_t i = 0; i < a->count; i++) {
        if (strcmp(a->entries[i].name, b->entries[i].name) != 0) return 0;
        if (!same(a->entries[i].tensor, b->entries[i].tensor)) return 0;
    }
    return 1;
}

static void test_npz_roundtrip(void) {
    size_t before = ctx.mem_used;
    hd_io_list l, back;
    fill_list(&l, 0);
    for (int compress = 0; compress <= 1; compress++) {
        hd_io_bytes b = {0};
        hd_status st = hd_io_save_npz_bytes(&ctx, "mem.npz", &l, compress, &b);
        CHECK_MSG(st == HD_OK, "%s", hd_error_message(&ctx));
        st = hd_io_load_npz_buffer(&ctx, "mem.npz", b.data, b.len, &back);
        CHECK_MSG(st == HD_OK && same_lists(&l, &back), "%s", hd_error_message(&ctx));
        hd_io_list_free(&ctx, &back);
        hd_io_bytes_free(&ctx, &b);
        /* through a file, by extension */
        if (compress)
            st = hd_io_save_npz(&ctx, tmp_path("a.npz"), &l, 1);
        else
            st = hd_io_save(&ctx, tmp_path("a.npz"), NULL, &l);
        CHECK_MSG(st == HD_OK, "%s", hd_error_message(&ctx));
        hd_tensor *none = NULL;
        st = hd_io_load(&ctx, tmp_path("a.npz"), &none, &back);
        CHECK(st == HD_OK && none == NULL && same_lists(&l, &back));
        hd_io_list_free(&ctx, &back);
    }
    /* an empty archive is valid */
    hd_io_list empty;
    hd_io_list_init(&empty);
    hd_io_bytes b = {0};
    CHECK(hd_io_save_npz_bytes(&ctx, "e.npz", &empty, 0, &b) == HD_OK && b.len == 22);
    CHECK(hd_io_load_npz_buffer(&ctx, "e.npz", b.data, b.len, &back) == HD_OK && back.count == 0);
    hd_io_bytes_free(&ctx, &b);
    /* bf16 cannot go in an .npz; duplicates are refused */
    hd_io_list bad;
    fill_list(&bad, 1);
    CHECK(hd_io_save_npz_bytes(&ctx, "b.npz", &bad, 0, &b) == HD_ERR_ARGUMENT && msg_has("bf16"));
    hd_io_list_free(&ctx, &bad);
    hd_io_list_init(&bad);
    hd_io_list_add(&ctx, &bad, "x", l.entries[0].tensor);
    hd_io_list_add(&ctx, &bad, "x", l.entries[1].tensor);
    CHECK(hd_io_save_npz_bytes(&ctx, "d.npz", &bad, 0, &b) == HD_ERR_ARGUMENT && msg_has("twice"));
    CHECK(hd_io_save_safetensors_bytes(&ctx, "d.st", &bad, &b) == HD_ERR_ARGUMENT);
    CHECK(b.data == NULL);
    hd_io_list_free(&ctx, &bad);
    hd_io_list_free(&ctx, &l);
    CHECK(ctx.mem_used == before);
}

/* ---- .safetensors ---- */

static void test_safetensors_fixtures(void) {
    size_t before = ctx.mem_used;
    hd_io_list l;
    hd_status st = hd_io_load_safetensors(&ctx, data_path("ref.safetensors"), &l);
    CHECK_MSG(st == HD_OK, "%s", hd_error_message(&ctx));
    CHECK(l.count == 12 && l.nmeta == 2);
    CHECK(l.count && strcmp(l.entries[0].name, "i64") == 0); /* data order */
    int meta_ok = 0;
    for (size_t i = 0; i < l.nmeta; i++)
        meta_ok += strcmp(l.meta[i].key, "format") == 0 && strcmp(l.meta[i].value, "np") == 0;
    CHECK(meta_ok == 1);
    hd_tensor *t = hd_io_list_get(&l, "f16");
    CHECK(t && t->dtype == HD_F16 && hd_tensor_get(t, 2) == 65504);
    t = hd_io_list_get(&l, "f64");
    CHECK(t && hd_tensor_get(t, 0) == 3.141592653589793);
    t = hd_io_list_get(&l, "i64");
    CHECK(t && t->dtype == HD_I64 && hd_tensor_get_i64(t, 0) == INT64_MIN);
    t = hd_io_list_get(&l, "bool");
    CHECK(has_shape(t, 2, 2, 2) && t->dtype == HD_BOOL && hd_tensor_get(t, 3) == 1);
    t = hd_io_list_get(&l, "i16");
    CHECK(t && t->dtype == HD_I32 && hd_tensor_get_i64(t, 0) == -300);
    t = hd_io_list_get(&l, "u32");
    CHECK(t && t->dtype == HD_I64 && hd_tensor_get_i64(t, 0) == INT64_C(4000000000));
    t = hd_io_list_get(&l, "empty");
    CHECK(has_shape(t, 2, 2, 0) && t->numel == 0);
    t = hd_io_list_get(&l, "scalar");
    CHECK(t && t->ndim == 0 && hd_tensor_get(t, 0) == 2.5);
    t = hd_io_list_get(&l, "u8");
    CHECK(t && t->dtype == HD_U8 && hd_tensor_get_i64(t, 3) == 255);
    hd_io_list_free(&ctx, &l);
    st = hd_io_load_safetensors(&ctx, data_path("bf16.safetensors"), &l);
    CHECK_MSG(st == HD_OK, "%s", hd_error_message(&ctx));
    t = l.count ? l.entries[0].tensor : NULL;
    CHECK(t && t->dtype == HD_BF16 && hd_tensor_get(t, 0) == 1.0 && hd_tensor_get(t, 1) == -2.0 &&
          hd_tensor_get(t, 2) == 0.5);
    hd_io_list_free(&ctx, &l);
    CHECK(ctx.mem_used == before);
}

static void test_safetensors_roundtrip(void) {
    size_t before = ctx.mem_used;
    hd_io_list l, back;
    fill_list(&l, 1);
    hd_io_list_add_meta(&ctx, &l, "format", "pt");
    hd_io_list_add_meta(&ctx, &l, "path/with \"quotes\"", "caf\xc3\xa9");
    hd_io_bytes b = {0};
    hd_status st = hd_io_save_safetensors_bytes(&ctx, "m.safetensors", &l, &b);
    CHECK_MSG(st == HD_OK, "%s", hd_error_message(&ctx));
    uint64_t hlen = 0;
    for (int k = 7; k >= 0 && b.len >= 8; k--) hlen = hlen << 8 | b.data[k];
    CHECK(hlen % 8 == 0 && hlen + 8 <= b.len && b.data[8] == '{');
    CHECK(b.data[8 + hlen - 1] == ' ' || b.data[8 + hlen - 1] == '}');
    int escaped = 0; /* slashes are not escaped, as in the reference implementation */
    for (size_t i = 8; i + 1 < 8 + hlen; i++) escaped |= b.data[i] == '\\' && b.data[i + 1] == '/';
    CHECK(!escaped);
    st = hd_io_load_safetensors_buffer(&ctx, "m.safetensors", b.data, b.len, &back);
    CHECK_MSG(st == HD_OK && same_lists(&l, &back), "%s", hd_error_message(&ctx));
    CHECK(back.nmeta == 2);
    for (size_t i = 0; i < back.nmeta && i < 2; i++)
        CHECK(strcmp(back.meta[i].key, l.meta[i].key) == 0 &&
              strcmp(back.meta[i].value, l.meta[i].value) == 0);
    hd_io_list_free(&ctx, &back);
    hd_io_bytes_free(&ctx, &b);
    /* by extension, through a file */
    CHECK(hd_io_save(&ctx, tmp_path("m.SafeTensors"), NULL, &l) == HD_OK);
    CHECK(hd_io_load(&ctx, tmp_path("m.SafeTensors"), NULL, &back) == HD_OK &&
          same_lists(&l, &back));
    hd_io_list_free(&ctx, &back);
    /* reserved name */
    hd_io_list bad;
    hd_io_list_init(&bad);
    hd_io_list_add(&ctx, &bad, "__metadata__", l.entries[0].tensor);
    CHECK(hd_io_save_safetensors_bytes(&ctx, "r", &bad, &b) == HD_ERR_ARGUMENT);
    hd_io_list_free(&ctx, &bad);
    hd_io_list_free(&ctx, &l);
    CHECK(ctx.mem_used == before);
}

/* ---- CSV ---- */

static hd_status csv(const char *text, hd_tensor **t, hd_io_strings *h) {
    return hd_io_read_csv_buffer(&ctx, "t.csv", text, strlen(text), t, h);
}

static void test_csv(void) {
    size_t before = ctx.mem_used;
    hd_tensor *t = NULL;
    hd_io_strings h;
    CHECK(csv("1,2,3\n4,5,6\n", &t, &h) == HD_OK && has_shape(t, 2, 2, 3) && h.count == 0);
    CHECK(t && t->dtype == HD_F32 && hd_tensor_get(t, 5) == 6 && hd_tensor_get(t, 1) == 2);
    hd_tensor_unref(t);
    const char *with_header = "\xef\xbb\xbfx, \"y, the second\" ,z\r\n"
                              "\r\n"
                              " 1.5, -2e3 , nan\r\n"
                              "\"4\",inf,-0.25";
    CHECK(csv(with_header, &t, &h) == HD_OK && has_shape(t, 2, 2, 3));
    CHECK(h.count == 3 && strcmp(h.names[0], "x") == 0 &&
          strcmp(h.names[1], "y, the second") == 0 && strcmp(h.names[2], "z") == 0);
    CHECK(t && hd_tensor_get(t, 0) == 1.5 && hd_tensor_get(t, 1) == -2000 &&
          isnan(hd_tensor_get(t, 2)) && hd_tensor_get(t, 3) == 4 && isinf(hd_tensor_get(t, 4)) &&
          hd_tensor_get(t, 5) == -0.25);
    hd_io_strings_free(&ctx, &h);
    hd_tensor_unref(t);
    CHECK(csv("a,b\n", &t, NULL) == HD_OK && has_shape(t, 2, 0, 2));
    hd_tensor_unref(t);
    CHECK(csv("7\n\n\n8", &t, NULL) == HD_OK && has_shape(t, 2, 2, 1));
    hd_tensor_unref(t);
    /* quotes: "" is a quote; a quoted cell may span lines */
    CHECK(csv("\"a\"\"b\",\"c\nd\"\n1,2\n3,4\n", &t, &h) == HD_OK && has_shape(t, 2, 2, 2));
    CHECK(h.count == 2 && strcmp(h.names[0], "a\"b") == 0 && strcmp(h.names[1], "c\nd") == 0);
    hd_io_strings_free(&ctx, &h);
    hd_tensor_unref(t);
    /* errors name the line and column */
    CHECK(csv("1,2\n3,4\n5\n", &t, &h) == HD_ERR_IO && !t && msg_has("t.csv:3:") &&
          msg_has("line 1 has 2"));
    CHECK(csv("1,2\n3,4,5\n", &t, NULL) == HD_ERR_IO && msg_has("t.csv:2: 3 columns"));
    CHECK(csv("x,y\n1,2\n3,abc\n", &t, &h) == HD_ERR_IO && msg_has("t.csv:3: column 2: 'abc'"));
    CHECK(h.count == 0 && h.names == NULL);
    CHECK(csv("1,2\n3,\n", &t, NULL) == HD_ERR_IO && msg_has("t.csv:2: column 2 is empty"));
    CHECK(csv("1,x\n", &t, NULL) == HD_ERR_IO && msg_has("t.csv:1: column 2"));
    CHECK(csv("", &t, NULL) == HD_ERR_IO && msg_has("empty"));
    CHECK(hd_io_read_csv_buffer(&ctx, "n", NULL, 0, &t, NULL) == HD_ERR_IO && msg_has("empty"));
    CHECK(csv("\n  \n\r\n", &t, NULL) == HD_ERR_IO && msg_has("empty"));
    CHECK(csv("1,\"2\n", &t, NULL) == HD_ERR_IO && msg_has("never closed"));
    CHECK(csv("1,\"2\"x\n", &t, NULL) == HD_ERR_IO && msg_has("after a closing quote"));
    CHECK(csv("1,2\n3,4e\n", &t, NULL) == HD_ERR_IO && msg_has("'4e'"));
    /* a file */
    FILE *f = fopen(tmp_path("a.csv"), "w");
    fputs("p,q\n0.5,1\n", f);
    fclose(f);
    CHECK(hd_io_read_csv(&ctx, tmp_path("a.csv"), &t, NULL) == HD_OK && has_shape(t, 2, 1, 2));
    hd_tensor_unref(t);
    CHECK(hd_io_read_csv(&ctx, tmp_path("missing.csv"), &t, NULL) == HD_ERR_IO);
    CHECK(ctx.mem_used == before);
}

/* ---- by extension ---- */

static void test_by_extension(void) {
    size_t before = ctx.mem_used;
    int64_t sh[2] = {2, 2};
    hd_tensor *t = make(HD_F32, sh, 2), *u = NULL;
    hd_io_list l;
    CHECK(hd_io_save(&ctx, tmp_path("x.NPY"), t, NULL) == HD_OK);
    CHECK(hd_io_load(&ctx, tmp_path("x.NPY"), &u, &l) == HD_OK && same(t, u) && l.count == 0);
    hd_tensor_unref(u);
    CHECK(hd_io_save(&ctx, tmp_path("x.pt"), t, NULL) == HD_ERR_ARGUMENT && msg_has("extension"));
    CHECK(hd_io_load(&ctx, tmp_path("x.pkl"), &u, &l) == HD_ERR_ARGUMENT && msg_has("extension"));
    CHECK(hd_io_load(&ctx, tmp_path("noext"), &u, &l) == HD_ERR_ARGUMENT);
    CHECK(hd_io_load(&ctx, tmp_path("x.csv"), &u, &l) == HD_ERR_ARGUMENT && msg_has("read_csv"));
    CHECK(hd_io_save(&ctx, tmp_path("x.npy"), NULL, &l) == HD_ERR_ARGUMENT);
    CHECK(hd_io_save(&ctx, tmp_path("x.npz"), t, NULL) == HD_ERR_ARGUMENT);
    CHECK(hd_io_format_of("a.b/c") == HD_IO_UNKNOWN && hd_io_format_of("w.npz") == HD_IO_NPZ);
    CHECK(hd_io_save_npy(&ctx, "/nonexistent-dir/x.npy", t) == HD_ERR_IO &&
          msg_has("cannot create"));
    /* a symbolic tensor has nothing to save */
    hd_tensor *sym = hd_tensor_symbolic(&ctx, HD_F32, sh, 2);
    hd_io_bytes b = {0};
    CHECK(hd_io_save_npy_bytes(&ctx, "s.npy", sym, &b) == HD_ERR_ARGUMENT && msg_has("symbolic"));
    hd_tensor_unref(sym);
    hd_tensor_unref(t);
    CHECK(ctx.mem_used == before);
}

/* ---- damaged files ---- */

static int ncorrupt;

/* Each loader must fail on these bytes with a message, output nothing and
 * leak nothing; wanted (if not NULL) must appear in the message. */
static void expect_bad(int fmt, const void *buf, size_t n, const char *wanted, int line) {
    size_t before = ctx.mem_used;
    hd_error_clear(&ctx);
    hd_status st;
    hd_tensor *t = NULL;
    hd_io_list l;
    if (fmt == 0) {
        st = hd_io_load_npy_buffer(&ctx, "bad.npy", buf, n, &t);
    } else if (fmt == 1) {
        st = hd_io_load_npz_buffer(&ctx, "bad.npz", buf, n, &l);
        CHECK(l.count == 0 && l.entries == NULL);
    } else {
        st = hd_io_load_safetensors_buffer(&ctx, "bad.st", buf, n, &l);
        CHECK(l.count == 0 && l.entries == NULL && l.meta == NULL);
    }
    ncorrupt++;
    CHECK_MSG(st != HD_OK && t == NULL && hd_error_message(&ctx)[0], "line %d", line);
    CHECK_MSG(!wanted || msg_has(wanted), "line %d: wanted '%s', got '%s'", line, wanted,
              hd_error_message(&ctx));
    CHECK_MSG(ctx.mem_used == before, "line %d: leak", line);
}
#define BAD(fmt, buf, n, wanted) expect_bad(fmt, buf, n, wanted, __LINE__)

/* A v1.0 .npy with this header text and nbytes of data. */
static size_t npy_with(unsigned char *out, const char *dict, size_t nbytes) {
    size_t hl = strlen(dict);
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (unsigned char)(hl & 0xff);
    out[9] = (unsigned char)(hl >> 8);
    memcpy(out + 10, dict, hl);
    memset(out + 10 + hl, 0x3f, nbytes);
    return 10 + hl + nbytes;
}

static void test_bad_npy(void) {
    int64_t sh[2] = {2, 3};
    hd_tensor *t = make(HD_F32, sh, 2);
    hd_io_bytes good = {0};
    hd_io_save_npy_bytes(&ctx, "g.npy", t, &good);
    hd_tensor_unref(t);
    /* truncated at every length: magic, version, header length, header, data */
    for (size_t k = 0; k < good.len; k++) BAD(0, good.data, k, NULL);
    BAD(0, good.data, 0, "not a .npy file");
    BAD(0, NULL, 0, "not a .npy file");
    BAD(1, NULL, 0, "not a ZIP");
    BAD(2, NULL, 0, "no header");
    BAD(0, good.data, 8, "no header length");
    BAD(0, good.data, 60, "runs past the end");
    BAD(0, good.data, good.len - 1, "needs 24 data bytes, the file has 23");
    unsigned char buf[512];
    memcpy(buf, good.data, good.len);
    buf[good.len] = 0;
    BAD(0, buf, good.len + 1, "needs 24 data bytes, the file has 25"); /* data too long */
    buf[0] = 0x92;
    BAD(0, buf, good.len, "magic");
    memcpy(buf, good.data, good.len);
    buf[6] = 4;
    BAD(0, buf, good.len, "version 4.0");
    memcpy(buf, good.data, good.len);
    buf[8] = 0xff, buf[9] = 0xff;
    BAD(0, buf, good.len, "header length 65535 runs past");
    hd_io_bytes_free(&ctx, &good);
    /* v2.0 header length beyond the file */
    memcpy(buf, "\x93NUMPY\x02\x00\xff\xff\xff\x7f{}", 14);
    BAD(0, buf, 14, "runs past");
    struct {
        const char *dict;
        size_t nbytes;
        const char *wanted;
    } cases[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, "
         "4294967296), }",
         0, "too large"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }", 0, "negative"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", 4,
         "more than 8"},
        {"{'descr': '<U5', 'fortran_order': False, 'shape': (1,), }", 20,
         "unsupported dtype '<U5'"},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 8, "objects"},
        {"{'descr': '<u8', 'fortran_order': False, 'shape': (1,), }", 8, "int64"},
        {"{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }", 4, "unsupported"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4, "structured"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0,
         "overflows"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", 12, "(n,)"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1.5,), }", 4, "expected ','"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [3], }", 12, "not a tuple"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (3,), }", 12, "True or False"},
        {"{'descr': '<f4', 'shape': (3,), }", 12, "missing key 'fortran_order'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", 12, "key 'x'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 12, "repeated"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), } junk", 12, "after the dict"},
        {"{'descr': '<f4, 'fortran_order': False, 'shape': (3,), }", 12, NULL},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)", 12, "expected ',' or '}'"},
        {"", 0, "expected '{'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 23, "needs 24"},
        {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (), }", 4, "escaped"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = npy_with(buf, cases[i].dict, cases[i].nbytes);
        expect_bad(0, buf, n, cases[i].wanted, (int)(1000 + i));
    }
    /* the header parser takes what numpy writes, Python 2's 'L' included */
    size_t n = npy_with(buf, "{\"descr\":\"<i8\",\"fortran_order\":True,\"shape\":(1L,2L)}", 16);
    CHECK(hd_io_load_npy_buffer(&ctx, "ok.npy", buf, n, &t) == HD_OK && has_shape(t, 2, 1, 2));
    hd_tensor_unref(t);
}

/* Offsets into the stored npz of one member "a.npy": local header at 0,
 * central directory entry at cd, end record at end. */
typedef struct {
    unsigned char *b;
    size_t n, cd, end, data;
} npz_img;

static void wr32(unsigned char *p, uint32_t v) {
    for (int k = 0; k < 4; k++) p[k] = (unsigned char)(v >> (8 * k));
}
static void wr16(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static uint32_t rd32(const unsigned char *p) {
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static npz_img npz_make(int compress) {
    int64_t sh[1] = {64};
    hd_tensor *t = make(HD_F32, sh, 1);
    hd_io_list l;
    hd_io_list_init(&l);
    hd_io_list_add(&ctx, &l, "a", t);
    hd_tensor_unref(t);
    hd_io_bytes b = {0};
    hd_io_save_npz_bytes(&ctx, "g.npz", &l, compress, &b);
    hd_io_list_free(&ctx, &l);
    npz_img z;
    z.n = b.len;
    z.b = malloc(b.len + 64);
    memcpy(z.b, b.data, b.len);
    hd_io_bytes_free(&ctx, &b);
    z.end = z.n - 22;
    z.cd = rd32(z.b + z.end + 16);
    z.data = 30 + 5;
    return z;
}

static npz_img npz_copy(const npz_img *z) {
    npz_img c = *z;
    c.b = malloc(z->n + 64);
    memcpy(c.b, z->b, z->n);
    return c;
}

static void test_bad_npz(void) {
    npz_img good = npz_make(0), gz = npz_make(1);
    hd_io_list l;
    CHECK(hd_io_load_npz_buffer(&ctx, "g.npz", good.b, good.n, &l) == HD_OK && l.count == 1);
    hd_io_list_free(&ctx, &l);
    CHECK(hd_io_load_npz_buffer(&ctx, "g.npz", gz.b, gz.n, &l) == HD_OK && l.count == 1);
    hd_io_list_free(&ctx, &l);
    for (size_t k = 0; k < good.n; k++) BAD(1, good.b, k, NULL);
    for (size_t k = 0; k < gz.n; k++) BAD(1, gz.b, k, NULL);
    BAD(1, "PK", 2, "not a ZIP");
    npz_img z = npz_copy(&good);
    z.b[z.data + 40] ^= 1; /* a data byte: the CRC no longer matches */
    BAD(1, z.b, z.n, "CRC-32");
    memcpy(z.b, good.b, z.n);
    wr32(z.b + z.cd + 24, rd32(z.b + z.cd + 24) + 1); /* central size lies */
    BAD(1, z.b, z.n, "stored member has sizes");
    memcpy(z.b, good.b, z.n);
    wr32(z.b + z.cd + 20, rd32(z.b + z.cd + 20) + 1); /* both sizes lie */
    wr32(z.b + z.cd + 24, rd32(z.b + z.cd + 24) + 1);
    BAD(1, z.b, z.n, "disagrees");
    memcpy(z.b, good.b, z.n);
    wr32(z.b + z.end + 16, 0x7fffff00); /* central directory outside the file */
    BAD(1, z.b, z.n, "outside");
    memcpy(z.b, good.b, z.n);
    wr32(z.b + z.cd + 42, 0x10000); /* local header outside */
    BAD(1, z.b, z.n, "outside the file");
    memcpy(z.b, good.b, z.n);
    wr16(z.b + 8, 12), wr16(z.b + z.cd + 10, 12); /* bzip2 */
    BAD(1, z.b, z.n, "method 12");
    memcpy(z.b, good.b, z.n);
    wr16(z.b + 6, 1), wr16(z.b + z.cd + 8, 1);
    BAD(1, z.b, z.n, "encrypted");
    memcpy(z.b, good.b, z.n);
    z.b[z.cd + 46] = 'b'; /* central name differs from the local one */
    BAD(1, z.b, z.n, "disagrees");
    memcpy(z.b, good.b, z.n);
    memcpy(z.b + 30 + 2, "txt", 3), memcpy(z.b + z.cd + 46 + 2, "txt", 3);
    BAD(1, z.b, z.n, "not a .npy member");
    memcpy(z.b, good.b, z.n);
    wr16(z.b + z.end + 8, 0xffff), wr16(z.b + z.end + 10, 0xffff);
    BAD(1, z.b, z.n, "ZIP64");
    memcpy(z.b, good.b, z.n);
    wr32(z.b + z.cd + 42, 0xffffffffu);
    BAD(1, z.b, z.n, "ZIP64");
    memcpy(z.b, good.b, z.n);
    wr16(z.b + z.end + 4, 1);
    BAD(1, z.b, z.n, "multi-disk");
    memcpy(z.b, good.b, z.n);
    wr32(z.b + z.end + 12, rd32(z.b + z.end + 12) - 1); /* directory size lies */
    BAD(1, z.b, z.n, "runs past its end");
    memcpy(z.b, good.b, z.n);
    wr32(z.b + z.end + 12, rd32(z.b + z.end + 12) - 10); /* too short for its one entry */
    BAD(1, z.b, z.n, "cannot hold the 1 entries");
    memcpy(z.b, good.b, z.n);
    z.b[z.cd] = 'X';
    BAD(1, z.b, z.n, "entry 0 is damaged");
    /* 65534 entries claimed for an empty directory: refused before the
     * table for them is allocated */
    BAD(1, "PK\x05\x06\0\0\0\0\xfe\xff\xfe\xff\0\0\0\0\0\0\0\0\0\0", 22,
        "cannot hold the 65534 entries");
    memcpy(z.b, good.b, z.n);
    wr32(z.b + z.end + 12, rd32(z.b + z.end + 12) + 1), wr32(z.b + z.end + 16, z.cd - 1);
    BAD(1, z.b, z.n, "damaged");
    memcpy(z.b, good.b, z.n);
    wr16(z.b + z.cd + 28, 200); /* name runs past the directory */
    BAD(1, z.b, z.n, "runs past");
    memcpy(z.b, good.b, z.n);
    wr16(z.b + 28, 4), wr16(z.b + 30 + 5, 0x0001), wr16(z.b + 30 + 7, 60); /* bad extra field */
    BAD(1, z.b, z.n, "damaged");
    memcpy(z.b, good.b, z.n);
    z.b[z.end + 20] = 5; /* comment longer than what follows: no valid end record */
    BAD(1, z.b, z.n, "not a ZIP");
    free(z.b);
    /* the directory lists the same member twice: they overlap */
    z = npz_copy(&good);
    size_t cdlen = z.end - z.cd;
    memmove(z.b + z.cd + cdlen + cdlen, z.b + z.end, 22);
    memcpy(z.b + z.cd + cdlen, z.b + z.cd, cdlen);
    z.end += cdlen;
    z.n += cdlen;
    wr16(z.b + z.end + 8, 2), wr16(z.b + z.end + 10, 2);
    wr32(z.b + z.end + 12, (uint32_t)(2 * cdlen));
    BAD(1, z.b, z.n, "overlaps");
    free(z.b);
    /* deflate: damaged stream, truncated stream, inflated size lies, bomb claims */
    z = npz_copy(&gz);
    uint32_t cs = rd32(z.b + z.cd + 20), us = rd32(z.b + z.cd + 24);
    z.b[z.data] = 0xff; /* block type 3 is invalid */
    BAD(1, z.b, z.n, "damaged deflate data");
    memcpy(z.b, gz.b, z.n);
    wr32(z.b + 18, cs - 5), wr32(z.b + z.cd + 20, cs - 5);
    BAD(1, z.b, z.n, "truncated");
    memcpy(z.b, gz.b, z.n);
    wr32(z.b + 22, us - 1), wr32(z.b + z.cd + 24, us - 1);
    BAD(1, z.b, z.n, "inflates to more than");
    memcpy(z.b, gz.b, z.n);
    wr32(z.b + 22, us + 1), wr32(z.b + z.cd + 24, us + 1);
    BAD(1, z.b, z.n, "the directory says");
    memcpy(z.b, gz.b, z.n);
    wr32(z.b + 22, 0x7ffffff0), wr32(z.b + z.cd + 24, 0x7ffffff0);
    BAD(1, z.b, z.n, "more than deflate can give");
    memcpy(z.b, gz.b, z.n);
    wr32(z.b + 14, 1), wr32(z.b + z.cd + 16, 1);
    BAD(1, z.b, z.n, "CRC-32");
    free(z.b);
    /* a member that is not a valid .npy, with a CRC to match */
    z = npz_copy(&good);
    z.b[z.data] = 'X';
    uint32_t crc = (uint32_t)crc32(0, z.b + z.data, rd32(z.b + z.cd + 20));
    wr32(z.b + 14, crc), wr32(z.b + z.cd + 16, crc);
    BAD(1, z.b, z.n, "bad.npz: member 'a.npy': not a .npy file");
    free(z.b);
    free(good.b);
    free(gz.b);
}

/* A safetensors file from header text and nbytes of data. */
static size_t st_with(unsigned char *out, const char *json, size_t nbytes) {
    size_t hl = strlen(json);
    for (int k = 0; k < 8; k++) out[k] = (unsigned char)((uint64_t)hl >> (8 * k));
    memcpy(out + 8, json, hl);
    memset(out + 8 + hl, 0, nbytes);
    return 8 + hl + nbytes;
}

static void test_bad_safetensors(void) {
    hd_io_list l;
    fill_list(&l, 1);
    hd_io_bytes good = {0};
    hd_io_save_safetensors_bytes(&ctx, "g", &l, &good);
    hd_io_list_free(&ctx, &l);
    for (size_t k = 0; k < good.len; k += (k < 64 || good.len - k < 64) ? 1 : 97)
        BAD(2, good.data, k, NULL);
    hd_io_bytes_free(&ctx, &good);
    unsigned char buf[1024];
    BAD(2, "\x10\0\0\0", 4, "no header");
    memcpy(buf, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10);
    BAD(2, buf, 10, "runs past");
    memcpy(buf, "\x00\x00\x00\x10\x00\x00\x00\x00{}", 10);
    BAD(2, buf, 10, "runs past");
    struct {
        const char *json;
        size_t nbytes;
        const char *wanted;
    } cases[] = {
        {"hello", 0, "not valid JSON"},
        {"[1, 2]", 0, "single JSON object"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}", 4, "too soon"},
        {"{} x", 0, "JSON"},
        {"{}\0   ", 0, NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4, "outside"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4, "outside"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [2, 6]}}",
         8, "overlaps"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, "unused"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 8,
         "the tensors use 4"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4,
         "needs 8 bytes"},
        {"{\"a\": {\"dtype\": \"F8_E4M3\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
         "unsupported dtype 'F8_E4M3'"},
        {"{\"a\": {\"dtype\": \"U64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8,
         "unsupported dtype"},
        {"{\"a\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "dtype"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1.0], \"data_offsets\": [0, 4]}}", 4, "shape"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, "shape"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": \"1\", \"data_offsets\": [0, 4]}}", 4, "shape"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}",
         4, "more than 8"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], "
         "\"data_offsets\": [0, 4]}}",
         4, "too large"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 4,
         "data_offsets"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, "
         "18446744073709551615]}}",
         4, NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 4,
         "data_offsets"},
        {"{\"a\": [1, 2]}", 0, "not a JSON object"},
        {"{\"a\": 'x'}", 0, "not valid JSON"},
        {"{/* c */}", 0, "not valid JSON"},
        {"{\"\xff\": {}}", 0, "not valid JSON"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4],}}", 4,
         "not valid JSON"},
        {"{\"a\": null}", 0, "null"},
        {"{\"__metadata__\": {\"k\": 1}}", 0, "must be strings"},
        {"{\"__metadata__\": \"x\"}", 0, "not a JSON object"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "data_offsets"},
        {"{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{"
         "\"a\":"
         "{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{"
         "\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":1}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}"
         "}",
         0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t hl = i == 4 ? 6 : strlen(cases[i].json);
        size_t n = st_with(buf, cases[i].json, cases[i].nbytes);
        if (i == 4) { /* a NUL inside the header */
            memcpy(buf + 8, "{}\0   ", 6);
            for (int k = 0; k < 8; k++) buf[k] = (unsigned char)(hl >> (8 * k));
            n = 8 + hl;
        }
        expect_bad(2, buf, n, cases[i].wanted, (int)(2000 + i));
    }
    /* accepted: zero tensors; a zero-size tensor sharing an offset */
    size_t n = st_with(buf, "{}", 0);
    CHECK(hd_io_load_safetensors_buffer(&ctx, "z", buf, n, &l) == HD_OK && l.count == 0);
    n = st_with(buf,
                "{\"b\": {\"dtype\": \"I8\", \"shape\": [0], \"data_offsets\": [1, 1]},"
                " \"a\": {\"dtype\": \"I8\", \"shape\": [1], \"data_offsets\": [0, 1]}}",
                1);
    CHECK(hd_io_load_safetensors_buffer(&ctx, "z", buf, n, &l) == HD_OK && l.count == 2 &&
          strcmp(l.entries[0].name, "a") == 0);
    hd_io_list_free(&ctx, &l);
}

/* ---- allocation failures ---- */

typedef hd_status (*load_fn)(const void *buf, size_t n);

static hd_status load_npy(const void *buf, size_t n) {
    hd_tensor *t = NULL;
    hd_status st = hd_io_load_npy_buffer(&ctx, "a.npy", buf, n, &t);
    if ((st == HD_OK) != (t != NULL)) st = HD_ERR_RUNTIME;
    hd_tensor_unref(t);
    return st;
}
static hd_status load_npz(const void *buf, size_t n) {
    hd_io_list l;
    hd_status st = hd_io_load_npz_buffer(&ctx, "a.npz", buf, n, &l);
    hd_io_list_free(&ctx, &l);
    return st;
}
static hd_status load_st(const void *buf, size_t n) {
    hd_io_list l;
    hd_status st = hd_io_load_safetensors_buffer(&ctx, "a.st", buf, n, &l);
    hd_io_list_free(&ctx, &l);
    return st;
}
static hd_status load_csv(const void *buf, size_t n) {
    hd_tensor *t = NULL;
    hd_io_strings h;
    hd_status st = hd_io_read_csv_buffer(&ctx, "a.csv", buf, n, &t, &h);
    hd_io_strings_free(&ctx, &h);
    hd_tensor_unref(t);
    return st;
}

/* Fail allocation k = 0, 1, ... until the load succeeds; each failure must be
 * a memory error that leaves no allocation behind. */
static void sweep(const char *what, load_fn fn, const void *buf, size_t n) {
    size_t before = ctx.mem_used;
    long k;
    for (k = 0; k < 10000; k++) {
        ctx.fail_countdown = k;
        hd_status st = fn(buf, n);
        ctx.fail_countdown = -1;
        CHECK_MSG(ctx.mem_used == before, "%s: leak after failing allocation %ld", what, k);
        if (st == HD_OK) break;
        CHECK_MSG(st == HD_ERR_MEMORY, "%s: allocation %ld: %s", what, k, hd_error_message(&ctx));
    }
    CHECK_MSG(k > 0 && k < 10000, "%s: %ld allocations", what, k);
}

static void test_alloc_failures(void) {
    size_t n;
    unsigned char *b = read_all(data_path("fortran_i4.npy"), &n);
    sweep("npy", load_npy, b, n);
    free(b);
    b = read_all(data_path("dtypes.npz"), &n);
    sweep("npz stored", load_npz, b, n);
    free(b);
    b = read_all(data_path("dtypes_deflate.npz"), &n);
    sweep("npz deflated", load_npz, b, n);
    free(b);
    b = read_all(data_path("ref.safetensors"), &n);
    sweep("safetensors", load_st, b, n);
    free(b);
    const char *text = "a,b,\"c\"\n1,2,3\n4,5,6\n";
    sweep("csv", load_csv, text, strlen(text));
    /* saving too */
    hd_io_list l;
    fill_list(&l, 0);
    size_t before = ctx.mem_used;
    for (int fmt = 0; fmt < 3; fmt++) {
        long k;
        for (k = 0; k < 10000; k++) {
            hd_io_bytes out = {0};
            ctx.fail_countdown = k;
            hd_status st = fmt == 2 ? hd_io_save_safetensors_bytes(&ctx, "s", &l, &out)
                                    : hd_io_save_npz_bytes(&ctx, "s", &l, fmt, &out);
            ctx.fail_countdown = -1;
            hd_io_bytes_free(&ctx, &out);
            CHECK(ctx.mem_used == before);
            if (st == HD_OK) break;
            CHECK_MSG(st == HD_ERR_MEMORY, "save %d: %s", fmt, hd_error_message(&ctx));
        }
        CHECK(k < 10000);
    }
    hd_io_list_free(&ctx, &l);
}

int main(void) {
    hd_ctx_init(&ctx, NULL, NULL);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hodu_test_io_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_npy_roundtrip();
    test_npy_views();
    test_npy_fixtures();
    test_npz_fixtures();
    test_npz_roundtrip();
    test_safetensors_fixtures();
    test_safetensors_roundtrip();
    test_csv();
    test_by_extension();
    test_bad_npy();
    test_bad_npz();
    test_bad_safetensors();
    test_alloc_failures();
    printf("%d damaged inputs rejected\n", ncorrupt);
    CHECK(ctx.mem_used == 0);
    const char *files[] = {"a.npz", "m.SafeTensors", "a.csv", "x.NPY"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(tmp_path(files[i]));
    rmdir(tmpdir);
    TEST_END();
}
