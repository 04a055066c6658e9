/* golden_runner: runs the real hodu binary on one golden program and checks
 * it against the expectations written inside it:
 *
 *   # expect: TEXT           the next line of standard output is TEXT
 *   # expect error: TEXT     the run fails (exit status 1) and standard error
 *                            contains TEXT (several: each, in order)
 *   # expect error at: L:C   standard error reports an error at FILE:L:C
 *   # expect stderr: TEXT    standard error contains TEXT (several: each, in
 *                            order), also when the program succeeds (logs,
 *                            warnings)
 *   # args: A B C            words passed to the program (args())
 *   # mode: check            run `hodu check FILE` instead of running it
 *   # env: NAME=VALUE        set in the program's environment; $DIR is the
 *                            program's folder
 *   # device: cpu            (compiled_diff) not compared when run with
 *                            another default device
 *
 * Output must match line for line (trailing blanks aside): no missing or
 * extra lines. A program without `expect error` must exit 0 with nothing
 * on standard error. An empty program (blank lines and comments only)
 * fails: it would pass whatever hodu did. Reports from the sanitizers
 * (when hodu is an ASan/UBSan build) fail the test.
 *
 * usage: golden_runner HODU FILE.hodu */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "golden_expect.h"

static int run(const char *hodu, const char *file, const golden_expect *e, const char *outp,
               const char *errp) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        FILE *o = freopen(outp, "wb", stdout);
        FILE *r = freopen(errp, "wb", stderr);
        if (!o || !r) _exit(120);
        char dir[4096];
        golden_dir_of(file, dir, sizeof dir);
        for (int i = 0; i < e->nenv; i++) golden_put_env(e->env[i], dir);
        /* Sanitizer reports must not pass for the program's own exit 1. */
        const char *asan = getenv("ASAN_OPTIONS");
        char opts[1024];
        snprintf(opts, sizeof opts, "%s%sexitcode=86", asan ? asan : "", asan && *asan ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        setenv("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1:exitcode=87", 0);
        char *argv[80];
        int a = 0;
        argv[a++] = (char *)hodu;
        if (e->check) argv[a++] = "check";
        argv[a++] = (char *)file;
        for (int i = 0; i < e->nargs; i++) argv[a++] = e->args[i];
        argv[a] = NULL;
        execv(hodu, argv);
        fprintf(stderr, "golden_runner: cannot run %s: %s\n", hodu, strerror(errno));
        _exit(121);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) return -1;
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

static int failures;

static void fail(const char *file, const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "%s: ", file);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    failures++;
}

static void check_line(const char *file, const golden_expect *e, int i, char *line) {
    /* Trailing blanks are invisible in the program text: not compared. */
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = 0;
    if (i >= e->nout)
        fail(file, "unexpected output line: %s%s", line, "");
    else if (strcmp(line, e->out[i]) != 0)
        fail(file, "expected output \"%s\", got \"%s\"", e->out[i], line);
}

static void check_stdout(const char *file, const golden_expect *e, char *out) {
    int i = 0;
    size_t len = strlen(out);
    if (len) {
        if (out[len - 1] == '\n') out[len - 1] = 0;
        for (char *line = out;; i++) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            check_line(file, e, i, line);
            if (!nl) break;
            line = nl + 1;
        }
        i++;
    }
    for (; i < e->nout; i++) fail(file, "missing output line: %s%s", e->out[i], "");
}

/* Is line [s, s + n) of standard error an echo of a source line (an
 * error shows the failing line under its message)? Such echoes carry the
 * program's own comments, `# expect error:` ones too, so the expected
 * text is not looked for in them. */
static int echoes_source(const char *s, size_t n, const char *src) {
    if (n < 2 || s[0] != ' ' || s[1] != ' ') return 0;
    while (n && *s == ' ') s++, n--;
    while (n && s[n - 1] == ' ') n--;
    if (!n) return 0;
    for (const char *line = src; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        const char *t = line;
        size_t m = len;
        while (m && (*t == ' ' || *t == '\t')) t++, m--;
        while (m && (t[m - 1] == ' ' || t[m - 1] == '\r')) m--;
        if (m == n && !memcmp(t, s, n)) return 1;
        if (!nl) break;
        line = nl + 1;
    }
    return 0;
}

/* err without the lines that echo the source (malloc'd). */
static char *without_echoes(const char *err, const char *src) {
    size_t n = strlen(err);
    char *d = malloc(n + 1), *q = d;
    if (!d) exit(2);
    for (const char *line = err; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        if (!echoes_source(line, nl ? len - 1 : len, src)) {
            memcpy(q, line, len);
            q += len;
        }
        line += len;
    }
    *q = 0;
    return d;
}

static void check_stderr(const char *file, const golden_expect *e, const char *err) {
    const char *from = err;
    for (int i = 0; i < e->nerr; i++) {
        const char *hit = strstr(from, e->err[i]);
        if (!hit) {
            fail(file, "expected an error containing \"%s\"; stderr was:\n%s", e->err[i], err);
            return;
        }
        from = hit + strlen(e->err[i]);
    }
    from = err;
    for (int i = 0; i < e->nlog; i++) {
        const char *hit = strstr(from, e->log[i]);
        if (!hit) {
            fail(file, "expected standard error to contain \"%s\"; it was:\n%s", e->log[i], err);
            return;
        }
        from = hit + strlen(e->log[i]);
    }
    for (int i = 0; i < e->nat; i++) {
        char want[4200];
        snprintf(want, sizeof want, "%s:%s: error:", file, e->at[i]);
        if (!strstr(err, want))
            fail(file, "expected an error at %s; stderr was:\n%s", e->at[i], err);
    }
}

/* Does src have a line other than blanks and a comment? */
static int has_code(const char *src) {
    for (const char *p = src; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (*p && *p != '\n' && *p != '#') return 1;
        while (*p && *p != '\n') p++;
        if (*p) p++;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: golden_runner HODU FILE.hodu\n");
        return 2;
    }
    const char *hodu = argv[1], *file = argv[2];
    char *src = golden_read_all(file, NULL);
    if (!src) {
        fprintf(stderr, "golden_runner: cannot read %s\n", file);
        return 2;
    }
    if (!has_code(src)) { /* passes whatever hodu does: a test that cannot fail */
        fprintf(stderr, "%s: the program is empty (only blank lines and comments)\n", file);
        free(src);
        return 1;
    }
    golden_expect e;
    golden_expect_parse(&e, src);
    char outp[] = "/tmp/hodu_golden_outXXXXXX", errp[] = "/tmp/hodu_golden_errXXXXXX";
    int fo = mkstemp(outp), fe = mkstemp(errp);
    if (fo < 0 || fe < 0) return 2;
    close(fo);
    close(fe);
    int rc = run(hodu, file, &e, outp, errp);
    char *out = golden_read_all(outp, NULL), *err = golden_read_all(errp, NULL);
    unlink(outp);
    unlink(errp);
    if (!out || !err) {
        free(out);
        free(err);
        free(src);
        golden_expect_free(&e);
        return 2;
    }
    int want_rc = e.nerr || e.nat ? 1 : 0;
    if (strstr(err, "Sanitizer") || strstr(err, "runtime error:"))
        fail(file, "sanitizer report:\n%s%s", err, "");
    if (rc != want_rc) {
        char got[32], exp[32];
        snprintf(got, sizeof got, "%d", rc);
        snprintf(exp, sizeof exp, "%d", want_rc);
        fail(file, "exit status %s, expected %s", got, exp);
        if (!want_rc) fprintf(stderr, "stderr:\n%s", err);
    }
    if (!want_rc && *err && rc == 0 && !e.nlog)
        fail(file, "unexpected standard error:\n%s%s", err, "");
    check_stdout(file, &e, out);
    char *msgs = without_echoes(err, src);
    check_stderr(file, &e, msgs);
    free(msgs);
    if (failures) fprintf(stderr, "%s: %d problem%s\n", file, failures, failures == 1 ? "" : "s");
    golden_expect_free(&e);
    free(src);
    free(out);
    free(err);
    return failures ? 1 : 0;
}
