/* compiled_diff: runs one program with the real hodu binary eagerly, then
 * with HODU_COMPILE_ALL=1 (every call with a tensor argument traced and run
 * as a compiled graph; what cannot be traced runs eagerly) once per compiler
 * named (HODU_COMPILER; none named: the default compiler), and checks that
 * every run prints the same output, reports the same errors and exits with
 * the same status as the eager one (equivalence). "The same":
 * text and integers exactly; a number written with a point or an exponent
 * may differ by 1e-5 relative (the cuda compiler's runs 1e-4, as its
 * reductions sum in another order; or 1e-6 absolute near zero), as compiled
 * code may sum in another order (a matrix-vector product by its own loops,
 * not the BLAS kernel eager code ran).
 *
 * Honours the golden programs' `# args:` and `# env:` lines; programs with
 * `# mode: check` are not run, nor programs that measure the allocator
 * (memory_stats(): compiled code keeps caches, so the figures differ). Lines starting with "hodu: "
 * (logs, warnings) are left out of the comparison of standard error.
 *
 * The COMPILER "lazy" runs the program with HODU_COMPILE_ALL=lazy instead,
 * as under the strategy mode "lazy" (the default compiler; calls traced
 * from their second, loops met in eager code traced whole).
 *
 * A COMPILER of the form device=D runs the program eagerly with HODU_DEVICE=D
 * instead (tensors made without device= go to D), and compares it with the
 * cpu run once D's name is read as "cpu"; programs marked `# device: cpu`
 * are left out of that comparison.
 *
 * --explicit compares explicit compiled code with itself run eagerly: the
 * reference run sets HODU_EAGER=1 (every compiled fn and block runs as
 * plain code), the others set neither HODU_EAGER nor HODU_COMPILE_ALL (the
 * stateful fuzzer's programs, statefuzz.c); the cuda compiler's run then
 * also sets HODU_DEVICE=cuda (the program's tensors on the device) and its
 * output is read as the cpu's.
 *
 * --f64 FILE64 (the stateful fuzzer's): FILE64 is the same program with its
 * tensors made in f64. A standard output that differs beyond the tolerance
 * is then compared with FILE64's eager output too, and is not counted when
 * every differing number is explained by f32 rounding: the compiled value
 * is no further from the f64 value than 3 times the eager f32 value is
 * (plus 1e-6), and all else (text, integers, the numbers that agree) is
 * where it is in all three outputs. A sum that cancels down to a small
 * number (a gradient near zero), or an Adam step divided by such a
 * gradient's root, carries f32's rounding up to 1e-5 relative and beyond
 * in both orders of summation; a compiled value wrong by more than eager's
 * own error still counts. The difference is printed either way.
 *
 * usage: compiled_diff [--explicit] [--f64 FILE64] HODU FILE.hodu [COMPILER...] */
#define _POSIX_C_SOURCE 200809L
#include "golden_expect.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int explicit_mode;
static const char *f64_file; /* --f64 */
static char *f64_out;        /* its eager standard output, read at the first need */

/* The text after "# key" on a comment line, or NULL. */
static const char *after(const char *line, size_t len, const char *key, size_t *rest) {
    const char *hash = memchr(line, '#', len);
    if (!hash) return NULL;
    const char *p = hash + 1;
    while (p < line + len && *p == ' ') p++;
    size_t k = strlen(key);
    if ((size_t)(line + len - p) < k || memcmp(p, key, k) != 0) return NULL;
    p += k;
    while (p < line + len && *p == ' ') p++;
    *rest = (size_t)(line + len - p);
    return p;
}

typedef struct {
    char *args[64];
    int nargs;
    char *env[16];
    int nenv;
    int check;
    int cpu_only; /* "# device: cpu": not run on another default device */
} directives;

static char *dup_n(const char *s, size_t n) {
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\r')) n--;
    char *d = malloc(n + 1);
    if (!d) exit(2);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static void parse(directives *d, const char *src) {
    memset(d, 0, sizeof *d);
    for (const char *line = src; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line), n;
        const char *v;
        if ((v = after(line, len, "args:", &n))) {
            for (size_t i = 0; i < n && d->nargs < 63;) {
                while (i < n && v[i] == ' ') i++;
                size_t s = i;
                while (i < n && v[i] != ' ') i++;
                if (i > s) d->args[d->nargs++] = dup_n(v + s, i - s);
            }
        } else if ((v = after(line, len, "env:", &n)) && d->nenv < 16) {
            d->env[d->nenv++] = dup_n(v, n);
        } else if ((v = after(line, len, "mode:", &n))) {
            d->check = n >= 5 && memcmp(v, "check", 5) == 0;
        } else if ((v = after(line, len, "device:", &n))) {
            d->cpu_only = n >= 3 && memcmp(v, "cpu", 3) == 0;
        }
        line = nl ? nl + 1 : line + len;
    }
}

static void put_env(const char *spec, const char *dir) {
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

/* Run hodu on file; stdout and stderr into the files; the exit status. */
static int run(const char *hodu, const char *file, const directives *d, int compiled,
               const char *compiler, const char *outp, const char *errp) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (!freopen(outp, "wb", stdout) || !freopen(errp, "wb", stderr)) _exit(120);
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", file);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, sizeof dir, ".");
        int lazy = compiler && !strcmp(compiler, "lazy");
        if (compiler && !strncmp(compiler, "device=", 7)) {
            setenv("HODU_DEVICE", compiler + 7, 1);
        } else if (compiler && !lazy) {
            setenv("HODU_COMPILER", compiler, 1);
            if (explicit_mode && !strcmp(compiler, "cuda")) setenv("HODU_DEVICE", "cuda", 1);
        }
        for (int i = 0; i < d->nenv; i++) put_env(d->env[i], dir);
        if (explicit_mode) {
            unsetenv("HODU_COMPILE_ALL");
            if (compiled)
                unsetenv("HODU_EAGER");
            else
                setenv("HODU_EAGER", "1", 1);
        } else if (compiled) {
            setenv("HODU_COMPILE_ALL", lazy ? "lazy" : "1", 1);
        } else {
            unsetenv("HODU_COMPILE_ALL");
        }
        char *argv[80];
        int a = 0;
        argv[a++] = (char *)hodu;
        argv[a++] = (char *)file;
        for (int i = 0; i < d->nargs; i++) argv[a++] = d->args[i];
        argv[a] = NULL;
        execv(hodu, argv);
        fprintf(stderr, "compiled_diff: cannot run %s: %s\n", hodu, strerror(errno));
        _exit(121);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) return -1;
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

/* Drop the lines that start with "hodu: " (in place). */
static void drop_logs(char *s) {
    char *w = s;
    for (char *line = s; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        if (strncmp(line, "hodu: ", 6) != 0) {
            memmove(w, line, len);
            w += len;
        }
        line += len;
    }
    *w = 0;
}

/* Length of the number token at s (0 if none); *real when it has a point
 * or an exponent. */
static size_t number_len(const char *s, int *real) {
    const char *p = s;
    *real = 0;
    if (*p == '-' || *p == '+') p++;
    if (!isdigit((unsigned char)*p) && !(*p == '.' && isdigit((unsigned char)p[1]))) return 0;
    while (isdigit((unsigned char)*p)) p++;
    if (*p == '.') {
        *real = 1;
        p++;
        while (isdigit((unsigned char)*p)) p++;
    }
    if ((*p == 'e' || *p == 'E') &&
        (isdigit((unsigned char)p[1]) ||
         ((p[1] == '-' || p[1] == '+') && isdigit((unsigned char)p[2])))) {
        *real = 1;
        p += 2;
        while (isdigit((unsigned char)*p)) p++;
    }
    return (size_t)(p - s);
}

/* Relative tolerance for numbers: 1e-5; runs of the cuda compiler 1e-4,
 * as its reductions sum in another order and a gradient summed over many
 * backward passes can cancel down to a small value (test_randgraph allows
 * the device 10x too). */
static double diff_rtol = 1e-5;

/* x and y agree: within diff_rtol relative or 1e-6 absolute. */
static int numbers_near(double x, double y) {
    return fabs(x - y) <= diff_rtol * fmax(fabs(x), fabs(y)) || fabs(x - y) <= 1e-6;
}

/* a and b are the same output (see the top of the file), up to the end of
 * the line when line is set. */
static int same_text(const char *a, const char *b, int line) {
    while (*a && *b && !(line && *a == '\n' && *b == '\n')) {
        int ra, rb;
        size_t na = number_len(a, &ra), nb = number_len(b, &rb);
        if (na && nb && (ra || rb)) {
            if (!numbers_near(strtod(a, NULL), strtod(b, NULL))) return 0;
            a += na;
            b += nb;
        } else if (na && nb) {
            if (na != nb || memcmp(a, b, na) != 0) return 0;
            a += na;
            b += nb;
        } else if (*a++ != *b++) {
            return 0;
        }
    }
    return *a == *b;
}

static int same_output(const char *a, const char *b) {
    return same_text(a, b, 0);
}

/* The first line where a and b differ (beyond the tolerance), for the
 * report: its number. */
static int first_difference(const char *what, const char *a, const char *b) {
    int line = 1;
    const char *la = a, *lb = b;
    while (same_text(la, lb, 1)) {
        const char *na = strchr(la, '\n'), *nb = strchr(lb, '\n');
        if (!na || !nb) break;
        la = na + 1;
        lb = nb + 1;
        line++;
    }
    const char *ea = strchr(la, '\n'), *eb = strchr(lb, '\n');
    fprintf(stderr, "%s differs at line %d:\n  eager:    %.*s\n  compiled: %.*s\n", what, line,
            (int)(ea ? ea - la : (long)strlen(la)), la, (int)(eb ? eb - lb : (long)strlen(lb)), lb);
    return line;
}

/* e (eager), c (compiled) and r (the f64 program's eager output) agree
 * but for numbers explained by f32 rounding (see the top of the file). */
static int rounding_only(const char *e, const char *c, const char *r) {
    while (*e && *c && *r) {
        int re, rc, rr;
        size_t ne = number_len(e, &re), nc = number_len(c, &rc), nr = number_len(r, &rr);
        if (ne && nc && nr && (re || rc || rr)) {
            double x = strtod(e, NULL), y = strtod(c, NULL), t = strtod(r, NULL);
            if (!numbers_near(x, y) && !(fabs(y - t) <= 3 * fabs(x - t) + 1e-6)) return 0;
            e += ne, c += nc, r += nr;
        } else if (ne && nc && nr) {
            if (ne != nc || ne != nr || memcmp(e, c, ne) || memcmp(e, r, ne)) return 0;
            e += ne, c += nc, r += nr;
        } else if (*e != *c || *e != *r) {
            return 0;
        } else {
            e++, c++, r++;
        }
    }
    return !*e && !*c && !*r;
}

/* The f64 program's eager standard output (run once), or NULL. */
static const char *f64_output(const char *hodu, const directives *d) {
    if (f64_out || !f64_file) return f64_out;
    char paths[2][32] = {"/tmp/hodu_diff_XXXXXX", "/tmp/hodu_diff_XXXXXX"};
    for (int i = 0; i < 2; i++) {
        int fd = mkstemp(paths[i]);
        if (fd < 0) return NULL;
        close(fd);
    }
    run(hodu, f64_file, d, 0, NULL, paths[0], paths[1]);
    f64_out = golden_read_all(paths[0], NULL);
    for (int i = 0; i < 2; i++) unlink(paths[i]);
    return f64_out;
}

/* s with every mention of the default device's tensors made the cpu's
 * (in place): `, device="cuda:0"` dropped, "cuda:0" read as "cpu". */
static void undevice(char *s, const char *dev) {
    char full[64], note[96];
    snprintf(full, sizeof full, "%s%s", dev, strchr(dev, ':') ? "" : ":0");
    snprintf(note, sizeof note, ", device=\"%s\"", full);
    char *w = s;
    for (const char *r = s; *r;) {
        if (!strncmp(r, note, strlen(note))) {
            r += strlen(note);
        } else if (!strncmp(r, full, strlen(full))) {
            memcpy(w, "cpu", 3);
            w += 3;
            r += strlen(full);
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
}

/* Runs FILE compiled with compiler (NULL: the default) and compares it with
 * the eager run's status and outputs; 1 when they differ, 2 on a failure of
 * the tool itself. */
static int diff_compiled(const char *hodu, const char *file, const directives *d,
                         const char *compiler, int rc_e, const char *out_e, const char *err_e) {
    char paths[2][32] = {"/tmp/hodu_diff_XXXXXX", "/tmp/hodu_diff_XXXXXX"};
    for (int i = 0; i < 2; i++) {
        int fd = mkstemp(paths[i]);
        if (fd < 0) return 2;
        close(fd);
    }
    const char *dev = compiler && !strncmp(compiler, "device=", 7) ? compiler + 7 : NULL;
    int rc_c = run(hodu, file, d, !dev, compiler, paths[0], paths[1]);
    /* --explicit with cuda: the program's tensors live on the device too */
    if (explicit_mode && compiler && !strcmp(compiler, "cuda")) dev = "cuda";
    diff_rtol = compiler && !strcmp(compiler, "cuda") ? 1e-4 : 1e-5;
    char *out_c = golden_read_all(paths[0], NULL), *err_c = golden_read_all(paths[1], NULL);
    for (int i = 0; i < 2; i++) unlink(paths[i]);
    if (!out_c || !err_c) {
        free(out_c);
        free(err_c);
        return 2;
    }
    drop_logs(err_c);
    if (dev) {
        undevice(out_c, dev);
        undevice(err_c, dev);
    }
    const char *name = compiler ? compiler : "default";
    int bad = 0;
    if (rc_e != rc_c) {
        fprintf(stderr, "%s: exit status %d eagerly, %d compiled (%s)\n", file, rc_e, rc_c, name);
        bad = 1;
    }
    if (!same_output(out_e, out_c)) {
        fprintf(stderr, "%s (%s): ", file, name);
        first_difference("standard output", out_e, out_c);
        const char *out_r = f64_output(hodu, d);
        if (out_r && rounding_only(out_e, out_c, out_r))
            fputs("  within f32 rounding (compiled no further from the f64 run than 3 times "
                  "eager): not counted\n",
                  stderr);
        else
            bad = 1;
    }
    if (!same_output(err_e, err_c)) {
        fprintf(stderr, "%s (%s): ", file, name);
        first_difference("standard error", err_e, err_c);
        bad = 1;
    }
    if (strstr(err_c, "Sanitizer") || strstr(err_c, "runtime error:")) {
        fprintf(stderr, "%s: sanitizer report when compiled (%s):\n%s", file, name, err_c);
        bad = 1;
    }
    free(out_c);
    free(err_c);
    return bad;
}

/* The f32-rounding rule's cases: eager, compiled, the f64 run, expected. */
static int self_test_rounding(void) {
    static const struct {
        const char *e, *c, *r;
        int ok;
    } cases[] = {
        /* an Adam step through a gradient that cancels (statefuzz seed 12010041) */
        {"w1 [1.157235860824585, 0.5] -6.0e-08 true\n",
         "w1 [1.1571389436721802, 0.5] -5.1e-08 true\n",
         "w1 [1.1574487926470634, 0.50000000001] -8.9e-08 true\n", 1},
        /* compiled off by more than eager's own error */
        {"v 1.25 k 3\n", "v 1.2501 k 3\n", "v 1.2500000001 k 3\n", 0},
        /* text or integers elsewhere differ in the f64 run */
        {"v 1.157235 k 3\n", "v 1.157138 k 3\n", "v 1.157448 k 4\n", 0},
        {"v 1.157235 f32\n", "v 1.157138 f32\n", "v 1.157448 f64\n", 0},
        {"v 1.157235\n", "v 1.157138\n", "v 1.157448\nmore\n", 0},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (rounding_only(cases[i].e, cases[i].c, cases[i].r) != cases[i].ok) {
            fprintf(stderr, "self-test: rounding case %zu: expected %s\n", i,
                    cases[i].ok ? "explained" : "counted");
            bad = 1;
        }
    return bad;
}

/* compiled_diff --self-test: the comparison's own cases. */
static int self_test(void) {
    static const struct {
        const char *a, *b;
        int same;
    } cases[] = {
        {"loss 0.0062660351395606995\n", "loss 0.006266034673899412\n", 1},
        {"loss 0.00626603\n", "loss 0.00626703\n", 0},
        {"x 1e-9 y\n", "x 3e-9 y\n", 1},
        {"[1.5, -2.25]", "[1.5000001, -2.2500001]", 1},
        {"[1.5, -2.25]", "[1.5, 2.25]", 0},
        {"count 100000", "count 100001", 0},
        {"epoch 5 of 10", "epoch 5 of 10", 1},
        {"epoch 5 of 10", "epoch 5 of 10 ", 0},
        {"a1.0", "b1.0", 0},
        {"nan inf", "nan inf", 1},
        {"1.0", "1.0\nextra", 0},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (same_output(cases[i].a, cases[i].b) != cases[i].same) {
            fprintf(stderr, "self-test: '%s' vs '%s': expected %s\n", cases[i].a, cases[i].b,
                    cases[i].same ? "same" : "different");
            bad = 1;
        }
    /* the cuda compiler's tolerance, and the report's line: the second,
     * though the first differs in its text */
    const char *x = "g 1.5000001\ng 0.019005948677659035\n", *y = "g 1.5\ng 0.019007021561264992\n";
    if (same_output(x, y)) bad = (fprintf(stderr, "self-test: 5.6e-5 apart at 1e-5\n"), 1);
    diff_rtol = 1e-4;
    if (!same_output(x, y)) bad = (fprintf(stderr, "self-test: 5.6e-5 apart at 1e-4\n"), 1);
    diff_rtol = 1e-5;
    if (first_difference("self-test output", x, y) != 2)
        bad = (fprintf(stderr, "self-test: the report names another line\n"), 1);
    return bad | self_test_rounding();
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--self-test")) return self_test();
    if (argc > 1 && !strcmp(argv[1], "--explicit")) {
        explicit_mode = 1;
        argv++;
        argc--;
    }
    if (argc > 2 && !strcmp(argv[1], "--f64")) {
        f64_file = argv[2];
        argv += 2;
        argc -= 2;
    }
    if (argc < 3) {
        fprintf(stderr,
                "usage: compiled_diff [--explicit] [--f64 FILE64] HODU FILE.hodu [COMPILER...]\n");
        return 2;
    }
    char *src = golden_read_all(argv[2], NULL);
    if (!src) {
        fprintf(stderr, "compiled_diff: cannot read %s\n", argv[2]);
        return 2;
    }
    directives d;
    parse(&d, src);
    int measures_memory = strstr(src, "memory_stats(") != NULL;
    free(src);
    if (d.check || measures_memory) return 0;
    if (d.cpu_only && argc == 4 && !strncmp(argv[3], "device=", 7)) return 0;
    char paths[2][32] = {"/tmp/hodu_diff_XXXXXX", "/tmp/hodu_diff_XXXXXX"};
    for (int i = 0; i < 2; i++) {
        int fd = mkstemp(paths[i]);
        if (fd < 0) return 2;
        close(fd);
    }
    int rc_e = run(argv[1], argv[2], &d, 0, NULL, paths[0], paths[1]);
    char *out_e = golden_read_all(paths[0], NULL), *err_e = golden_read_all(paths[1], NULL);
    for (int i = 0; i < 2; i++) unlink(paths[i]);
    if (!out_e || !err_e) return 2;
    drop_logs(err_e);
    int bad = 0;
    if (argc == 3) bad = diff_compiled(argv[1], argv[2], &d, NULL, rc_e, out_e, err_e);
    for (int i = 3; i < argc; i++) {
        int r = diff_compiled(argv[1], argv[2], &d, argv[i], rc_e, out_e, err_e);
        if (r > bad) bad = r;
    }
    free(out_e);
    free(err_e);
    free(f64_out);
    for (int i = 0; i < d.nargs; i++) free(d.args[i]);
    for (int i = 0; i < d.nenv; i++) free(d.env[i]);
    return bad;
}
