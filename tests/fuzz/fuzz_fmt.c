/* libFuzzer target for hodu fmt (lang/fmt.c): any source that parses must
 * format (the formatter's own check that the layout keeps the program's
 * tree must hold), formatting the result must change nothing, and one that
 * does not parse must be refused as a syntax error; then the same with an
 * allocation failing part-way. A crash, sanitizer report, broken invariant
 * or leak through the context's allocator is a finding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "fmt.h"

static void fuzz_check(int cond) {
    if (!cond) abort();
}

static int fuzz_parses(const char *src, size_t size) {
    hd_ctx ctx;
    hd_parse p;
    hd_ctx_init(&ctx, NULL, NULL);
    hd_status st = hd_parse_source(&ctx, src, size, "fuzz.hodu", &p);
    hd_parse_free(&p);
    return st == HD_OK;
}

static void fuzz_fmt(const char *src, size_t size, int parses, long fail_at) {
    hd_ctx ctx;
    hd_fmt_text a, b;
    hd_ctx_init(&ctx, NULL, NULL);
    ctx.fail_countdown = fail_at;
    hd_status st = hd_fmt_source(&ctx, src, size, "fuzz.hodu", &a);
    ctx.fail_countdown = -1;
    if (st == HD_ERR_MEMORY) {
        fuzz_check(fail_at >= 0 && !a.s);
    } else if (!parses) {
        fuzz_check(st == HD_ERR_SYNTAX && a.s && a.len > 0);
    } else {
        fuzz_check(st == HD_OK);
        fuzz_check(hd_fmt_source(&ctx, a.s ? a.s : "", a.len, "fuzz.hodu", &b) == HD_OK);
        fuzz_check(b.len == a.len && (a.len == 0 || memcmp(a.s, b.s, a.len) == 0));
        hd_fmt_text_free(&ctx, &b);
    }
    hd_fmt_text_free(&ctx, &a);
    fuzz_check(ctx.mem_used == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    int parses = fuzz_parses(src, size);
    fuzz_fmt(src, size, parses, -1);
    if (size < 4096) fuzz_fmt(src, size, parses, (long)(size * 7 % 61));
    free(src);
    return 0;
}
