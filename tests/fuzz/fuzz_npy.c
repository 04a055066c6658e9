/* libFuzzer target for the .npy loader (hd_io_load_npy_buffer) under a
 * 1 MiB memory limit: see fuzz_io.h for the checks. A file that loads is
 * saved again and reloaded: the same tensor. Then the load runs again with
 * an allocation failing part-way. */
#include "fuzz_io.h"

static void fuzz_npy_roundtrip(hd_ctx *ctx, const hd_tensor *t) {
    hd_io_bytes b = {0};
    fuzz_check(hd_io_save_npy_bytes(ctx, "again.npy", t, &b) == HD_OK);
    hd_tensor *u = NULL;
    fuzz_check(hd_io_load_npy_buffer(ctx, "again.npy", b.data, b.len, &u) == HD_OK);
    fuzz_io_same_tensor(t, u);
    hd_tensor_unref(u);
    hd_io_bytes_free(ctx, &b);
}

static void fuzz_npy_load(const uint8_t *data, size_t size, long fail_at) {
    hd_ctx ctx;
    fuzz_io_begin(&ctx, fail_at);
    hd_tensor *t = NULL;
    hd_status st = hd_io_load_npy_buffer(&ctx, "fuzz.npy", data, size, &t);
    fuzz_io_result(&ctx, st, t != NULL, fuzz_io_budget(size, 1), fail_at);
    if (t && fail_at < 0) {
        ctx.mem_limit = 0;
        fuzz_npy_roundtrip(&ctx, t);
    }
    hd_tensor_unref(t);
    fuzz_io_end(&ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_npy_load(data, size, -1);
    fuzz_npy_load(data, size, (long)(size * 7 % 5));
    return 0;
}
