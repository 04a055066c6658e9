/* libFuzzer target for the lexer and parser: parse the bytes, format every
 * diagnostic, dump the tree, free; then parse again with an allocation
 * failing part-way. Any crash, sanitizer report, broken invariant or leak
 * through the context's allocator is a finding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"

static char out[1 << 16];

static void fuzz_check(int cond) {
    if (!cond) abort();
}

static void fuzz_parse(const char *src, size_t size, long fail_at) {
    hd_ctx ctx;
    hd_parse p;
    hd_ctx_init(&ctx, NULL, NULL);
    ctx.fail_countdown = fail_at;
    hd_status st = hd_parse_source(&ctx, src, size, "fuzz.hodu", &p);
    ctx.fail_countdown = -1;
    if (st == HD_OK) {
        fuzz_check(p.program && p.ndiags == 0 && !p.incomplete);
        hd_ast_dump(out, sizeof out, p.program);
    } else if (st == HD_ERR_SYNTAX) {
        fuzz_check(!p.program && p.ndiags >= 1 && p.ndiags <= 20);
    } else {
        fuzz_check(st == HD_ERR_MEMORY && fail_at >= 0 && !p.arena);
    }
    for (int i = 0; i < p.ndiags; i++) {
        const hd_diag *d = &p.diags[i];
        fuzz_check(d->message && d->span.line >= 1 && d->span.col >= 1);
        hd_diag_format(out, sizeof out, p.chunk, src, &d->span, "error", d->message);
    }
    hd_parse_free(&p);
    fuzz_check(ctx.mem_used == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    fuzz_parse(src, size, -1);
    if (size < 4096) fuzz_parse(src, size, (long)(size * 7 % 61));
    free(src);
    return 0;
}
