/* libFuzzer target for the .safetensors loader
 * (hd_io_load_safetensors_buffer) under a 1 MiB memory limit: see
 * fuzz_io.h for the checks. A file that loads is saved again and reloaded:
 * the same tensors and metadata. Then the load runs again with an
 * allocation failing part-way. */
#include "fuzz_io.h"

static void fuzz_st_roundtrip(hd_ctx *ctx, const hd_io_list *l) {
    hd_io_bytes b = {0};
    hd_status st = hd_io_save_safetensors_bytes(ctx, "again.safetensors", l, &b);
    fuzz_check(st == HD_OK);
    hd_io_list u;
    fuzz_check(hd_io_load_safetensors_buffer(ctx, "again.safetensors", b.data, b.len, &u) == HD_OK);
    fuzz_io_same_list(l, &u);
    hd_io_list_free(ctx, &u);
    hd_io_bytes_free(ctx, &b);
}

static void fuzz_st_load(const uint8_t *data, size_t size, long fail_at) {
    hd_ctx ctx;
    fuzz_io_begin(&ctx, fail_at);
    hd_io_list l;
    hd_status st = hd_io_load_safetensors_buffer(&ctx, "fuzz.safetensors", data, size, &l);
    fuzz_check(st == HD_OK || (l.count == 0 && l.nmeta == 0));
    fuzz_io_result(&ctx, st, st == HD_OK, fuzz_io_budget(size, 1), fail_at);
    if (st == HD_OK && fail_at < 0) {
        ctx.mem_limit = 0;
        fuzz_st_roundtrip(&ctx, &l);
    }
    hd_io_list_free(&ctx, &l);
    fuzz_io_end(&ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_st_load(data, size, -1);
    fuzz_st_load(data, size, (long)(size * 7 % 11));
    return 0;
}
