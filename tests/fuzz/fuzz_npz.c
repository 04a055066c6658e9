/* libFuzzer target for the .npz loader (hd_io_load_npz_buffer) under a
 * 1 MiB memory limit: see fuzz_io.h for the checks. Deflate may turn one
 * byte into 1032, so a member's size is bounded by that, no more. An archive
 * that loads is saved again (stored and deflated) and reloaded: the same
 * list. Then the load runs again with an allocation failing part-way. */
#include "fuzz_io.h"

static void fuzz_npz_roundtrip(hd_ctx *ctx, const hd_io_list *l, int compress) {
    hd_io_bytes b = {0};
    hd_status st = hd_io_save_npz_bytes(ctx, "again.npz", l, compress, &b);
    if (st == HD_OK) {
        hd_io_list u;
        fuzz_check(hd_io_load_npz_buffer(ctx, "again.npz", b.data, b.len, &u) == HD_OK);
        fuzz_io_same_list(l, &u);
        hd_io_list_free(ctx, &u);
    } else {
        /* names the saver refuses (it writes "<name>.npy" members) */
        fuzz_check(st == HD_ERR_ARGUMENT && hd_error_message(ctx)[0]);
    }
    hd_io_bytes_free(ctx, &b);
}

static void fuzz_npz_load(const uint8_t *data, size_t size, long fail_at) {
    hd_ctx ctx;
    fuzz_io_begin(&ctx, fail_at);
    hd_io_list l;
    hd_status st = hd_io_load_npz_buffer(&ctx, "fuzz.npz", data, size, &l);
    fuzz_check(st == HD_OK || l.count == 0);
    fuzz_io_result(&ctx, st, st == HD_OK, fuzz_io_budget(size, 1032), fail_at);
    if (st == HD_OK && fail_at < 0) {
        ctx.mem_limit = 0;
        fuzz_npz_roundtrip(&ctx, &l, 0);
        fuzz_npz_roundtrip(&ctx, &l, 1);
    }
    hd_io_list_free(&ctx, &l);
    fuzz_io_end(&ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_npz_load(data, size, -1);
    fuzz_npz_load(data, size, (long)(size * 7 % 9));
    return 0;
}
