/* fmt: Hodu's canonical source layout (`hodu fmt`).
 *
 * The formatter keeps every token, comment and line break of the source and
 * decides the rest: each line's indentation (four spaces a level), the
 * spaces between tokens, at most one blank line in a row, no trailing
 * spaces, one newline at the end. Lines between `# fmt: off` and
 * `# fmt: on` (each a comment alone on its line) are kept as written.
 * Formatting its own output changes nothing. A result that would parse to
 * a different tree than the source is refused, so formatting can never
 * change what a program does. */
#ifndef HD_FMT_H
#define HD_FMT_H

#include "hd_base.h"

/* Text in context memory; free with hd_fmt_text_free. */
typedef struct hd_fmt_text {
    char *s;
    size_t len, cap;
} hd_fmt_text;

/* Format `source` (len bytes; `chunk` names it in messages). HD_OK: out
 * holds the formatted text. HD_ERR_SYNTAX: the source does not parse, and
 * out holds every diagnostic ("file:line:col: error: ..." with the source
 * line and a caret). HD_ERR_MEMORY, or HD_ERR_RUNTIME when the layout
 * would change the program (a formatter bug; the message says so). */
hd_status hd_fmt_source(hd_ctx *ctx, const char *source, size_t len, const char *chunk,
                        hd_fmt_text *out);
void hd_fmt_text_free(hd_ctx *ctx, hd_fmt_text *t);

#endif
