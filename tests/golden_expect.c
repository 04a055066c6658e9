/* golden_expect: see golden_expect.h. */
#define _POSIX_C_SOURCE 200809L
#include "golden_expect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *golden_read_all(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, fp);
        if (n < cap) break;
        char *b = realloc(buf, cap * 2 + 1);
        if (!b) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = b;
        cap *= 2;
    }
    fclose(fp);
    if (!buf) return NULL;
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

static char *dup_trim(const char *s, size_t n) {
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\r')) n--;
    char *d = malloc(n + 1);
    if (!d) exit(2);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* The text after `key` in a comment line, or NULL. */
static const char *after(const char *line, size_t len, const char *key, size_t *rest) {
    const char *hash = memchr(line, '#', len);
    if (!hash) return NULL;
    const char *p = hash + 1;
    while (p < line + len && *p == ' ') p++;
    size_t k = strlen(key);
    if ((size_t)(line + len - p) < k || memcmp(p, key, k) != 0) return NULL;
    p += k;
    if (p < line + len && *p == ' ') p++;
    *rest = (size_t)(line + len - p);
    return p;
}

static void split_words(golden_expect *e, const char *s, size_t n) {
    size_t i = 0;
    while (i < n && e->nargs < 63) {
        while (i < n && s[i] == ' ') i++;
        size_t start = i;
        while (i < n && s[i] != ' ') i++;
        if (i > start) e->args[e->nargs++] = dup_trim(s + start, i - start);
    }
}

static void add_item(char **items, int *n, const char *v, size_t len) {
    if (*n < GOLDEN_MAX_ITEMS) items[(*n)++] = dup_trim(v, len);
}

static void parse_line(golden_expect *e, const char *line, size_t len) {
    const char *v;
    size_t n;
    if ((v = after(line, len, "expect stderr:", &n)))
        add_item(e->log, &e->nlog, v, n);
    else if ((v = after(line, len, "expect error at:", &n)))
        add_item(e->at, &e->nat, v, n);
    else if ((v = after(line, len, "expect error:", &n)))
        add_item(e->err, &e->nerr, v, n);
    else if ((v = after(line, len, "expect:", &n)))
        add_item(e->out, &e->nout, v, n);
    else if ((v = after(line, len, "args:", &n)))
        split_words(e, v, n);
    else if ((v = after(line, len, "mode:", &n)))
        e->check = n >= 5 && memcmp(v, "check", 5) == 0;
    else if ((v = after(line, len, "env:", &n)) && e->nenv < 16)
        e->env[e->nenv++] = dup_trim(v, n);
}

void golden_expect_parse(golden_expect *e, const char *src) {
    memset(e, 0, sizeof *e);
    for (const char *line = src; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        parse_line(e, line, len);
        line = nl ? nl + 1 : line + len;
    }
}

void golden_expect_free(golden_expect *e) {
    for (int i = 0; i < e->nout; i++) free(e->out[i]);
    for (int i = 0; i < e->nerr; i++) free(e->err[i]);
    for (int i = 0; i < e->nat; i++) free(e->at[i]);
    for (int i = 0; i < e->nlog; i++) free(e->log[i]);
    for (int i = 0; i < e->nargs; i++) free(e->args[i]);
    for (int i = 0; i < e->nenv; i++) free(e->env[i]);
}

void golden_put_env(const char *spec, const char *dir) {
    const char *eq = strchr(spec, '=');
    if (!eq) return;
    char name[256], value[4096];
    snprintf(name, sizeof name, "%.*s", (int)(eq - spec), spec);
    size_t o = 0;
    for (const char *p = eq + 1; *p && o + 1 < sizeof value;) {
        if (strncmp(p, "$DIR", 4) == 0) {
            o += (size_t)snprintf(value + o, sizeof value - o, "%s", dir);
            if (o >= sizeof value) o = sizeof value - 1;
            p += 4;
        } else {
            value[o++] = *p++;
        }
    }
    value[o] = 0;
    setenv(name, value, 1);
}

void golden_dir_of(const char *file, char *dir, size_t n) {
    snprintf(dir, n, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, n, ".");
}

int golden_error_matches(const golden_expect *e, const char *file, const char *err) {
    const char *from = err;
    for (int i = 0; i < e->nerr; i++) {
        const char *hit = strstr(from, e->err[i]);
        if (!hit) return 0;
        from = hit + strlen(e->err[i]);
    }
    for (int i = 0; i < e->nat; i++) {
        char want[4200];
        snprintf(want, sizeof want, "%s:%s: error:", file, e->at[i]);
        if (!strstr(err, want)) return 0;
    }
    return 1;
}

/* Line i of the output (n bytes at s) against the expected one. */
static int line_matches(const golden_expect *e, int i, const char *s, size_t n, int cut) {
    while (n && (s[n - 1] == '\r' || s[n - 1] == ' ')) n--;
    if (i >= e->nout) return 0;
    size_t want = strlen(e->out[i]);
    if (cut) return n <= want && memcmp(s, e->out[i], n) == 0;
    return n == want && memcmp(s, e->out[i], n) == 0;
}

int golden_output_matches(const golden_expect *e, const char *out, int prefix) {
    int i = 0;
    for (const char *line = out; *line; i++) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (!line_matches(e, i, line, len, prefix && !nl)) return 0;
        if (!nl) {
            i++;
            break;
        }
        line = nl + 1;
    }
    return prefix || i == e->nout;
}
