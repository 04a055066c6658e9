/* hodu fmt: rewrites .hodu files into the canonical layout.
 *
 *   hodu fmt FILE...          rewrite each file that is not formatted
 *   hodu fmt --check FILE...  change nothing; name each file that would
 *                             change, exit status 1 if any
 *   hodu fmt -                format standard input to standard output
 *
 * Exit status: 0 done, 1 a file does not parse or (with --check) is not
 * formatted, 2 usage error or a file that cannot be read or written. A file
 * is replaced by renaming a finished copy over it, so an interrupted run
 * never leaves half a file. */
#include "fmt_cli.h"
#include "fmt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char fc_usage[] = "usage: hodu fmt [--check] FILE...\n"
                               "       hodu fmt -    (standard input to standard output)\n";

typedef struct fc_file {
    char *text;
    size_t len;
} fc_file;

static int fc_read(FILE *fp, fc_file *f) {
    size_t cap = 4096;
    f->len = 0;
    f->text = malloc(cap);
    while (f->text) {
        f->len += fread(f->text + f->len, 1, cap - f->len, fp);
        if (f->len < cap) return !ferror(fp);
        char *p = realloc(f->text, cap * 2);
        if (!p) break;
        f->text = p;
        cap *= 2;
    }
    free(f->text);
    f->text = NULL;
    return 0;
}

static int fc_read_path(const char *path, fc_file *f) {
    struct stat sb;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "hodu fmt: cannot read %s: %s\n", path, strerror(errno));
        return 0;
    }
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fprintf(stderr, "hodu fmt: cannot read %s: not a regular file\n", path);
        fclose(fp);
        return 0;
    }
    int ok = fc_read(fp, f);
    fclose(fp);
    if (!ok) fprintf(stderr, "hodu fmt: cannot read %s\n", path);
    return ok;
}

/* Write text to path through a copy in the same folder, keeping the mode;
 * a symbolic link is followed, so the file it names is the one replaced. */
static int fc_write(const char *path, const hd_fmt_text *t) {
    struct stat sb;
    char *real = realpath(path, NULL);
    size_t n = real ? strlen(real) + 16 : 0;
    char *tmp = real ? malloc(n) : NULL;
    if (!tmp || stat(real, &sb) != 0) {
        fprintf(stderr, "hodu fmt: cannot write %s: %s\n", path, strerror(errno));
        free(real);
        free(tmp);
        return 0;
    }
    snprintf(tmp, n, "%s.fmt-tmp", real);
    FILE *fp = fopen(tmp, "wb");
    int ok = fp && fwrite(t->s ? t->s : "", 1, t->len, fp) == t->len;
    if (fp) ok = fclose(fp) == 0 && ok;
    ok = ok && chmod(tmp, sb.st_mode & 07777) == 0 && rename(tmp, real) == 0;
    if (!ok) {
        fprintf(stderr, "hodu fmt: cannot write %s: %s\n", path, strerror(errno));
        remove(tmp);
    }
    free(real);
    free(tmp);
    return ok;
}

/* Format one text; 0 formatted, 1 does not parse (reported). */
static int fc_format(hd_ctx *ctx, const fc_file *f, const char *name, hd_fmt_text *out) {
    hd_status st = hd_fmt_source(ctx, f->text, f->len, name, out);
    if (st == HD_OK) return 0;
    if (st == HD_ERR_SYNTAX)
        fputs(out->s ? out->s : "", stderr);
    else
        fprintf(stderr, "hodu fmt: %s\n", hd_error_message(ctx));
    hd_fmt_text_free(ctx, out);
    return 1;
}

static int fc_stdin(hd_ctx *ctx) {
    fc_file f;
    if (!fc_read(stdin, &f)) {
        fprintf(stderr, "hodu fmt: cannot read standard input\n");
        return 2;
    }
    hd_fmt_text out;
    int rc = fc_format(ctx, &f, "<stdin>", &out);
    if (rc == 0) fwrite(out.s ? out.s : "", 1, out.len, stdout);
    hd_fmt_text_free(ctx, &out);
    free(f.text);
    return rc;
}

static int fc_path(hd_ctx *ctx, const char *path, int check) {
    fc_file f;
    if (!fc_read_path(path, &f)) return 2;
    hd_fmt_text out;
    int rc = fc_format(ctx, &f, path, &out);
    if (rc == 0 && (out.len != f.len || memcmp(out.s ? out.s : "", f.text, f.len) != 0)) {
        if (check) {
            printf("%s\n", path);
            rc = 1;
        } else if (!fc_write(path, &out)) {
            rc = 2;
        }
    }
    hd_fmt_text_free(ctx, &out);
    free(f.text);
    return rc;
}

int hd_fmt_main(int argc, char **argv) {
    int check = argc > 0 && strcmp(argv[0], "--check") == 0, i = check, rc = 0;
    if (argc > 0 && (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help"))) {
        fputs(fc_usage, stdout);
        return 0;
    }
    if (i == argc) {
        fprintf(stderr, "hodu fmt: no file given\n%s", fc_usage);
        return 2;
    }
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    for (; i < argc; i++) {
        int r;
        if (strcmp(argv[i], "-") == 0)
            r = fc_stdin(&ctx);
        else if (argv[i][0] == '-' && argv[i][1])
            r = (fprintf(stderr, "hodu fmt: unknown option %s\n%s", argv[i], fc_usage), 2);
        else
            r = fc_path(&ctx, argv[i], check);
        if (r > rc) rc = r;
    }
    hd_ctx_release(&ctx);
    return rc;
}
