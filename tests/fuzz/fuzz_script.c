/* libFuzzer target for the .hoduscript reader: decode the bytes under a
 * memory limit; when they are a valid script, print it (text and DOT), hash
 * it, write it again and read that back (the same hash), and run the passes
 * that need no kernels on it. Then decode again with an allocation failing
 * part-way. Any crash, sanitizer report, broken invariant or leak through
 * the context's allocator is a finding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "hd_pass.h"
#include "hd_script.h"

static void fuzz_check(int cond) {
    if (!cond) abort();
}

static void fuzz_passes(hd_ir_graph *g) {
    hd_ir_graph *c = hd_ir_graph_clone(g);
    if (!c) return;
    hd_ir_memplan plan;
    int n;
    if (!hd_pass_lower(c, &n) && !hd_pass_simplify(c, &n) && !hd_pass_cse(c, &n) &&
        !hd_pass_dce(c, &n) && !hd_pass_layout(c, &n) && !hd_ir_compact(c)) {
        fuzz_check(hd_ir_verify(c) == HD_OK);
        if (!hd_pass_fuse(c)) hd_pass_memplan(c, NULL, &plan);
    }
    hd_ir_graph_free(c);
}

static void fuzz_valid(hd_ctx *ctx, hd_ir_graph *g) {
    fuzz_check(hd_ir_verify(g) == HD_OK);
    char *text = hd_ir_to_text(g), *dot = hd_ir_to_dot(g);
    hd_ctx_strfree(ctx, text);
    hd_ctx_strfree(ctx, dot);
    uint64_t h = hd_ir_graph_hash(g);
    unsigned char *data;
    size_t size;
    if (hd_script_encode(ctx, g, &data, &size) == HD_OK) {
        hd_ir_graph *again = NULL;
        hd_status st = hd_script_decode(ctx, data, size, &again);
        fuzz_check(st == HD_OK || st == HD_ERR_MEMORY);
        if (again) fuzz_check(hd_ir_graph_hash(again) == h);
        hd_ir_graph_free(again);
        hd_ctx_free(ctx, data, size);
    }
    fuzz_passes(g);
}

static void fuzz_decode(const uint8_t *data, size_t size, long fail_at) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    ctx.mem_limit = (size_t)256 << 20;
    ctx.nthreads = 1;
    ctx.fail_countdown = fail_at;
    hd_ir_graph *g = NULL;
    hd_status st = hd_script_decode(&ctx, data, size, &g);
    ctx.fail_countdown = -1;
    fuzz_check((st == HD_OK) == (g != NULL));
    fuzz_check(st == HD_OK || st == HD_ERR_IO || st == HD_ERR_MEMORY);
    if (g && fail_at < 0) fuzz_valid(&ctx, g);
    hd_ir_graph_free(g);
    fuzz_check(ctx.mem_used == 0);
}

/* The bytes with their size field and CRC made consistent, so that
 * mutations reach the sections behind the checksum. */
static void fuzz_decode_fixed(const uint8_t *data, size_t size) {
    if (size < 52 || size > (1u << 20)) return;
    uint8_t *d = malloc(size);
    if (!d) return;
    memcpy(d, data, size);
    for (int i = 0; i < 8; i++) d[40 + i] = (uint8_t)((uint64_t)size >> (8 * i));
    uLong crc = crc32(crc32(0L, Z_NULL, 0), d, (uInt)(size - 4));
    for (int i = 0; i < 4; i++) d[size - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
    fuzz_decode(d, size, -1);
    fuzz_decode(d, size, (long)(data[size - 1] % 64));
    free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_decode(data, size, -1);
    fuzz_decode_fixed(data, size);
    return 0;
}
