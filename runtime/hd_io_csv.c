/* hd_io_csv: numeric CSV into a 2-D f32 tensor.
 *
 * Cells are separated by commas and records by \n, \r\n or \r; a cell may be
 * double-quoted (RFC 4180: "" is a quote, and commas and newlines may appear
 * inside). Spaces around cells are ignored, blank lines skipped, a UTF-8 BOM
 * dropped. The text is read twice: once to check it and count rows and
 * columns, once to fill the tensor, so nothing grows while reading. */
#include "hd_io_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    hd_ctx *ctx;
    const char *name;
    const unsigned char *start, *p, *end;
    size_t line; /* physical line of p, from 1 */
} hd_io_csv;

typedef struct {
    const unsigned char *s; /* raw text, quotes still doubled when quoted */
    size_t n;
    int quoted;
    size_t line;
} hd_io_csv_cell;

static int hd_io_csv_space(unsigned char ch) {
    return ch == ' ' || ch == '\t';
}

/* Consume a line that holds only spaces; 1 if there was one. */
static int hd_io_csv_blank(hd_io_csv *c) {
    const unsigned char *q = c->p;
    while (q < c->end && hd_io_csv_space(*q)) q++;
    if (q < c->end && *q != '\n' && *q != '\r') return 0;
    if (q < c->end && *q == '\r') q++;
    if (q < c->end && *q == '\n') q++;
    c->p = q;
    c->line++;
    return 1;
}

static hd_status hd_io_csv_quoted(hd_io_csv *c, hd_io_csv_cell *cell) {
    c->p++;
    cell->s = c->p;
    for (;;) {
        if (c->p >= c->end)
            return hd_error(c->ctx, HD_ERR_IO, "%s:%zu: quoted cell is never closed", c->name,
                            cell->line);
        if (*c->p == '"') {
            if (c->p + 1 < c->end && c->p[1] == '"') {
                c->p += 2;
                continue;
            }
            break;
        }
        if (*c->p == '\n' || (*c->p == '\r' && (c->p + 1 >= c->end || c->p[1] != '\n'))) c->line++;
        c->p++;
    }
    cell->n = (size_t)(c->p - cell->s);
    cell->quoted = 1;
    c->p++;
    while (c->p < c->end && hd_io_csv_space(*c->p)) c->p++;
    if (c->p < c->end && *c->p != ',' && *c->p != '\n' && *c->p != '\r')
        return hd_error(c->ctx, HD_ERR_IO, "%s:%zu: text after a closing quote", c->name, c->line);
    return HD_OK;
}

/* The next cell of the current record; *last is set when it ends the record
 * (the newline is consumed). */
static hd_status hd_io_csv_next(hd_io_csv *c, hd_io_csv_cell *cell, int *last) {
    while (c->p < c->end && hd_io_csv_space(*c->p)) c->p++;
    cell->line = c->line;
    if (c->p < c->end && *c->p == '"') {
        if (hd_io_csv_quoted(c, cell)) return HD_ERR_IO;
    } else {
        cell->s = c->p;
        while (c->p < c->end && *c->p != ',' && *c->p != '\n' && *c->p != '\r') c->p++;
        const unsigned char *e = c->p;
        while (e > cell->s && hd_io_csv_space(e[-1])) e--;
        cell->n = (size_t)(e - cell->s);
        cell->quoted = 0;
    }
    *last = !(c->p < c->end && *c->p == ',');
    if (!*last) {
        c->p++;
        return HD_OK;
    }
    int nl = 0;
    if (c->p < c->end && *c->p == '\r') c->p++, nl = 1;
    if (c->p < c->end && *c->p == '\n') c->p++, nl = 1;
    c->line += (size_t)nl;
    return HD_OK;
}

/* The cell's text with quotes undoubled into buf (cap bytes, terminated);
 * its length, or (size_t)-1 if it does not fit. */
static size_t hd_io_csv_text(const hd_io_csv_cell *cell, char *buf, size_t cap) {
    size_t j = 0;
    for (size_t i = 0; i < cell->n; i++) {
        if (j + 1 >= cap) return (size_t)-1;
        buf[j++] = (char)cell->s[i];
        if (cell->quoted && cell->s[i] == '"') i++;
    }
    buf[j] = 0;
    return j;
}

static int hd_io_csv_number(const hd_io_csv_cell *cell, float *v) {
    char buf[256], *e;
    size_t n = hd_io_csv_text(cell, buf, sizeof buf);
    if (n == 0 || n == (size_t)-1 || memchr(buf, 0, n)) return 0;
    float x = strtof(buf, &e);
    if (e != buf + n) return 0;
    *v = x;
    return 1;
}

/* Is the record at the cursor a header (no cell a number)? The cursor does
 * not move. */
static hd_status hd_io_csv_probe(hd_io_csv *c, int *header) {
    hd_io_csv save = *c;
    hd_io_csv_cell cell;
    int last = 0;
    float v;
    *header = 1;
    while (!last) {
        if (hd_io_csv_next(c, &cell, &last)) return HD_ERR_IO;
        if (hd_io_csv_number(&cell, &v)) *header = 0;
    }
    *c = save;
    return HD_OK;
}

static hd_status hd_io_csv_bad_cell(hd_io_csv *c, const hd_io_csv_cell *cell, size_t col) {
    char q[96];
    if (cell->n == 0)
        return hd_error(c->ctx, HD_ERR_IO, "%s:%zu: column %zu is empty", c->name, cell->line, col);
    return hd_error(c->ctx, HD_ERR_IO, "%s:%zu: column %zu: '%s' is not a number", c->name,
                    cell->line, col, hd_io_quote(cell->s, cell->n, q, sizeof q));
}

static hd_status hd_io_csv_name(hd_io_csv *c, const hd_io_csv_cell *cell, size_t col, char **out) {
    char *s = hd_ctx_alloc(c->ctx, cell->n + 1);
    if (!s) return HD_ERR_MEMORY;
    size_t n = hd_io_csv_text(cell, s, cell->n + 1);
    if (memchr(s, 0, n)) {
        hd_ctx_free(c->ctx, s, cell->n + 1);
        return hd_error(c->ctx, HD_ERR_IO, "%s:%zu: column %zu: NUL byte in the header", c->name,
                        cell->line, col);
    }
    *out = hd_ctx_strdup(c->ctx, s);
    hd_ctx_free(c->ctx, s, cell->n + 1);
    return *out ? HD_OK : HD_ERR_MEMORY;
}

/* One record: numbers into row (when not NULL), or names into names (when
 * a header). Sets *ncells; a count other than want (when want > 0) is an
 * error naming first_line, the line that set the count. */
static hd_status hd_io_csv_record(hd_io_csv *c, int header, float *row, char **names, size_t want,
                                  size_t first_line, size_t *ncells) {
    size_t k = 0, line = c->line;
    int last = 0;
    hd_io_csv_cell cell;
    while (!last) {
        if (hd_io_csv_next(c, &cell, &last)) return HD_ERR_IO;
        k++;
        if (want && k > want) continue;
        float v = 0;
        if (header) {
            if (names && hd_io_csv_name(c, &cell, k, &names[k - 1])) return c->ctx->status;
        } else if (!hd_io_csv_number(&cell, &v)) {
            return hd_io_csv_bad_cell(c, &cell, k);
        }
        if (row) row[k - 1] = v;
    }
    if (want && k != want)
        return hd_error(c->ctx, HD_ERR_IO, "%s:%zu: %zu columns, but line %zu has %zu", c->name,
                        line, k, first_line, want);
    *ncells = k;
    return HD_OK;
}

/* Whole text: counts rows and columns (out == NULL, cols == 0), or fills out
 * and names, with the cols found by that counting pass. */
static hd_status hd_io_csv_scan(hd_io_csv *c, float *out, char **names, size_t cols, size_t *rows,
                                size_t *cols_out) {
    c->p = c->start;
    c->line = 1;
    if (c->end - c->p >= 3 && memcmp(c->p, "\xef\xbb\xbf", 3) == 0) c->p += 3;
    size_t nrows = 0, ncols = cols, first = 0;
    int probed = 0;
    while (c->p < c->end) {
        if (hd_io_csv_blank(c)) continue;
        int header = 0;
        if (!probed && hd_io_csv_probe(c, &header)) return HD_ERR_IO;
        probed = 1;
        size_t line = c->line, n = 0;
        float *row = out && !header ? out + nrows * ncols : NULL;
        if (hd_io_csv_record(c, header, row, names, ncols, first, &n)) return c->ctx->status;
        if (!ncols) ncols = n, first = line;
        nrows += !header;
    }
    if (!probed) return hd_error(c->ctx, HD_ERR_IO, "%s: empty CSV file", c->name);
    *rows = nrows;
    *cols_out = ncols;
    return HD_OK;
}

hd_status hd_io_read_csv_buffer(hd_ctx *ctx, const char *name, const void *buf, size_t n,
                                hd_tensor **out, hd_io_strings *header) {
    *out = NULL;
    if (header) memset(header, 0, sizeof *header);
    if (!buf) buf = "", n = 0;
    hd_io_csv c = {ctx, name, buf, buf, (const unsigned char *)buf + n, 1};
    size_t rows = 0, cols = 0;
    if (hd_io_csv_scan(&c, NULL, NULL, 0, &rows, &cols)) return ctx->status;
    int64_t shape[2] = {(int64_t)rows, (int64_t)cols};
    hd_tensor *t = hd_tensor_new(ctx, HD_F32, shape, 2);
    if (!t) return ctx->status;
    char **names = NULL;
    if (header && !(names = hd_ctx_calloc(ctx, cols, sizeof *names))) {
        hd_tensor_unref(t);
        return HD_ERR_MEMORY;
    }
    hd_status st = hd_io_csv_scan(&c, t->storage->data, names, cols, &rows, &cols);
    if (header) {
        header->names = names;
        header->count = cols;
        if (st || !names[0]) hd_io_strings_free(ctx, header); /* no header row: no names */
    }
    if (st) {
        hd_tensor_unref(t);
        return st;
    }
    *out = t;
    return HD_OK;
}

hd_status hd_io_read_csv(hd_ctx *ctx, const char *path, hd_tensor **out, hd_io_strings *header) {
    *out = NULL;
    if (header) memset(header, 0, sizeof *header);
    hd_io_file f;
    if (hd_io_file_open(ctx, path, &f)) return ctx->status;
    hd_status st = hd_io_read_csv_buffer(ctx, path, f.data, f.n, out, header);
    hd_io_file_close(ctx, &f);
    return st;
}
