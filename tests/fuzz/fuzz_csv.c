/* libFuzzer target for the CSV reader (hd_io_read_csv_buffer) under a
 * 1 MiB memory limit: see fuzz_io.h for the checks. A file that reads is a
 * [rows, cols] f32 tensor with at least one row, or a header row alone (a
 * [0, cols] tensor); the header, when there is one, names every column. Then the read runs again
 * with an allocation failing part-way. */
#include "fuzz_io.h"

static void fuzz_csv_valid(const hd_tensor *t, const hd_io_strings *header) {
    fuzz_check(t->dtype == HD_F32 && t->ndim == 2 && t->shape[1] >= 1);
    fuzz_check(t->shape[0] >= 1 || header->count > 0); /* a header alone: [0, cols] */
    fuzz_check(header->count == 0 || header->count == (size_t)t->shape[1]);
    for (size_t i = 0; i < header->count; i++) fuzz_check(header->names[i] != NULL);
}

static void fuzz_csv_read(const uint8_t *data, size_t size, long fail_at) {
    hd_ctx ctx;
    fuzz_io_begin(&ctx, fail_at);
    hd_tensor *t = NULL;
    hd_io_strings header = {0};
    hd_status st = hd_io_read_csv_buffer(&ctx, "fuzz.csv", data, size, &t, &header);
    fuzz_check(st == HD_OK || header.count == 0);
    fuzz_io_result(&ctx, st, t != NULL, fuzz_io_budget(size, 1), fail_at);
    if (t) fuzz_csv_valid(t, &header);
    hd_tensor_unref(t);
    hd_io_strings_free(&ctx, &header);
    fuzz_io_end(&ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_csv_read(data, size, -1);
    fuzz_csv_read(data, size, (long)(size * 7 % 7));
    return 0;
}
