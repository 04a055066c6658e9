/* fmt_test: hodu fmt's layout, checked three ways.
 *
 *   fmt_test cases DIR        each DIR/NAME.in.hodu formats to NAME.out.hodu,
 *                             and NAME.out.hodu to itself
 *   fmt_test tree DIR...      every .hodu file under DIR (fuzz inputs aside):
 *                             it is formatted already, and a copy with its
 *                             whitespace scrambled (indentation, spaces
 *                             between tokens, blank lines, CRLF, trailing
 *                             blanks) formats back to it. A file that does
 *                             not parse must be an error test ("# expect
 *                             error").
 *
 * Expected layouts come from the files, written by hand, never from the
 * formatter. A file that does not parse must say so: "# expect error", or
 * "# Does not parse" for a module such a test imports. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"

static hd_ctx ft_ctx;
static int ft_failures, ft_files;

typedef struct ft_buf {
    char *s;
    size_t len, cap;
} ft_buf;

static void ft_add(ft_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        if (!b->s) {
            fprintf(stderr, "fmt_test: out of memory\n");
            exit(1);
        }
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static int ft_read(const char *path, ft_buf *b) {
    FILE *fp = fopen(path, "rb");
    char tmp[4096];
    size_t n;
    memset(b, 0, sizeof *b);
    if (!fp) {
        fprintf(stderr, "FAIL %s: cannot read\n", path);
        ft_failures++;
        return 0;
    }
    ft_add(b, "", 0);
    while ((n = fread(tmp, 1, sizeof tmp, fp)) > 0) ft_add(b, tmp, n);
    fclose(fp);
    return 1;
}

/* The first line where a and b differ, shown. */
static void ft_show_diff(const char *what, const char *a, const char *b) {
    int line = 1;
    const char *la = a, *lb = b;
    while (*a && *a == *b) {
        if (*a == '\n') line++, la = a + 1, lb = b + 1;
        a++, b++;
    }
    fprintf(stderr, "FAIL %s: differs at line %d\n  expected: %.*s\n  got:      %.*s\n", what, line,
            (int)strcspn(la, "\n"), la, (int)strcspn(lb, "\n"), lb);
    ft_failures++;
}

/* Format text; 1 with *out set when it parses. */
static int ft_format(const char *name, const char *text, size_t len, hd_fmt_text *out, int quiet) {
    hd_status st = hd_fmt_source(&ft_ctx, text, len, name, out);
    if (st == HD_OK) return 1;
    if (!quiet)
        fprintf(stderr, "FAIL %s: %s\n", name,
                st == HD_ERR_SYNTAX && out->s ? out->s : hd_error_message(&ft_ctx));
    hd_fmt_text_free(&ft_ctx, out);
    return 0;
}

/* text formats to want. */
static void ft_expect(const char *name, const char *text, size_t len, const char *want) {
    hd_fmt_text out;
    if (!ft_format(name, text, len, &out, 0)) {
        ft_failures++;
        return;
    }
    if (strcmp(out.s ? out.s : "", want) != 0) ft_show_diff(name, want, out.s ? out.s : "");
    hd_fmt_text_free(&ft_ctx, &out);
}

/* ---- cases ---- */

static int ft_cases(const char *dir) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep '\\.in\\.hodu$'", dir);
    FILE *ls = popen(cmd, "r");
    char name[1024];
    int n = 0;
    while (ls && fgets(name, sizeof name, ls)) {
        name[strcspn(name, "\n")] = 0;
        char in[3072], want[3072];
        snprintf(in, sizeof in, "%s/%s", dir, name);
        snprintf(want, sizeof want, "%s/%.*s.out.hodu", dir, (int)(strlen(name) - 8), name);
        ft_buf a = {0}, b = {0};
        if (ft_read(in, &a) && ft_read(want, &b)) {
            ft_expect(in, a.s, a.len, b.s);
            ft_expect(want, b.s, b.len, b.s);
            n++;
        }
        free(a.s);
        free(b.s);
    }
    if (ls) pclose(ls);
    if (n == 0) {
        fprintf(stderr, "FAIL no cases in %s\n", dir);
        ft_failures++;
    }
    printf("%d cases\n", n);
    return 0;
}

/* ---- scrambled copies ---- */

static unsigned long long ft_seed;

static int ft_rand(int n) {
    ft_seed = ft_seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((ft_seed >> 33) % (unsigned)n);
}

/* Characters that are tokens on their own: spaces next to them may go,
 * and may be added. */
static int ft_single(char c) {
    return c && strchr(",()[]{};", c) != NULL;
}

static void ft_blanks(ft_buf *o, int min) {
    int n = min + ft_rand(3);
    for (int i = 0; i < n; i++) ft_add(o, ft_rand(4) ? " " : "\t", 1);
}

/* One line's code and comment, scrambled: runs of blanks made longer,
 * shorter or tabs, blanks around single-character tokens dropped or added;
 * strings and comments as they are. */
static void ft_scramble_line(ft_buf *o, const char *s, const char *e) {
    int in_str = 0;
    for (const char *p = s; p < e; p++) {
        char c = *p;
        if (in_str) {
            ft_add(o, p, 1);
            if (c == '\\' && p + 1 < e)
                ft_add(o, ++p, 1);
            else if (c == '"')
                in_str = 0;
        } else if (c == '#') {
            ft_add(o, p, (size_t)(e - p));
            return;
        } else if (c == ' ' || c == '\t') {
            const char *q = p;
            while (q < e && (*q == ' ' || *q == '\t')) q++;
            int drop = (ft_single(p[-1]) || ft_single(*q)) && ft_rand(2);
            if (!drop) ft_blanks(o, 1);
            p = q - 1;
        } else {
            if (c == '"') in_str = 1;
            if (ft_single(c) && ft_rand(4) == 0) ft_blanks(o, 1);
            ft_add(o, p, 1);
            if (ft_single(c) && ft_rand(4) == 0) ft_blanks(o, 1);
        }
    }
}

static int ft_has_fstring(const char *b, const char *e) {
    for (const char *p = b; p + 1 < e; p++)
        if (p[0] == 'f' && p[1] == '"') return 1;
    return 0;
}

static void ft_scramble(const char *text, ft_buf *o) {
    memset(o, 0, sizeof *o);
    ft_add(o, "", 0);
    for (const char *s = text; *s;) {
        const char *e = s + strcspn(s, "\n");
        const char *b = s;
        while (b < e && (*b == ' ' || *b == '\t')) b++;
        if (b < e) {
            ft_blanks(o, 0);
            if (ft_has_fstring(b, e)) /* its fields' strings nest: left as written */
                ft_add(o, b, (size_t)(e - b));
            else
                ft_scramble_line(o, b, e);
        }
        if (ft_rand(3) == 0) ft_blanks(o, 1);
        if (ft_rand(4) == 0) ft_add(o, "\r", 1);
        if (!*e) break;
        ft_add(o, "\n", 1);
        if (b == e && ft_rand(2)) ft_add(o, "\n", 1); /* a blank line: make it two */
        s = e + 1;
    }
}

static int ft_tree_file(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)ftw;
    size_t n = strlen(path);
    if (flag != FTW_F || n < 5 || strcmp(path + n - 5, ".hodu") != 0 || strstr(path, "/fuzz/") ||
        strstr(path, "/fmt/cases/"))
        return 0;
    ft_buf a;
    if (!ft_read(path, &a)) return 0;
    ft_files++;
    hd_fmt_text out;
    if (!ft_format(path, a.s, a.len, &out, 1)) {
        if (!strstr(a.s, "# expect error") && !strstr(a.s, "# Does not parse")) {
            fprintf(stderr, "FAIL %s: does not parse, and is no error test\n", path);
            ft_failures++;
        }
        free(a.s);
        return 0;
    }
    if (strcmp(out.s ? out.s : "", a.s) != 0) {
        fprintf(stderr, "FAIL %s is not formatted: run hodu fmt %s\n", path, path);
        ft_show_diff(path, a.s, out.s ? out.s : "");
    } else if (!strstr(a.s, "# fmt: off")) {
        for (int k = 0; k < 3; k++) {
            ft_buf sc;
            char what[2048];
            ft_scramble(a.s, &sc);
            snprintf(what, sizeof what, "%s (scrambled, copy %d)", path, k + 1);
            ft_expect(what, sc.s, sc.len, a.s);
            free(sc.s);
        }
    }
    hd_fmt_text_free(&ft_ctx, &out);
    free(a.s);
    return 0;
}

int main(int argc, char **argv) {
    hd_ctx_init(&ft_ctx, NULL, NULL);
    if (argc >= 3 && strcmp(argv[1], "cases") == 0) {
        ft_cases(argv[2]);
    } else if (argc >= 3 && strcmp(argv[1], "tree") == 0) {
        ft_seed = 12345;
        for (int i = 2; i < argc; i++) nftw(argv[i], ft_tree_file, 16, FTW_PHYS);
        printf("%d files\n", ft_files);
        if (ft_files == 0) ft_failures++;
    } else {
        fprintf(stderr, "usage: fmt_test cases DIR | tree DIR...\n");
        return 2;
    }
    hd_ctx_release(&ft_ctx);
    if (ft_failures) fprintf(stderr, "%d failures\n", ft_failures);
    return ft_failures ? 1 : 0;
}
