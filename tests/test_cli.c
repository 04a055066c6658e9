/* The hodu program's command line: options, exit statuses (0 ok, 1 program
 * error, 2 usage error), standard input, program arguments, and Ctrl-C
 * stopping a running loop with an "interrupted" error.
 *
 * usage: test_cli HODU */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures, checks;
static const char *hodu;

typedef struct {
    int status;
    char out[8192], err[8192];
} result;

static void slurp(int fd, char *buf, size_t n) {
    size_t len = 0;
    ssize_t r;
    while (len + 1 < n && (r = read(fd, buf + len, n - 1 - len)) > 0) len += (size_t)r;
    buf[len] = 0;
    close(fd);
}

/* Run hodu with argv (NULL-terminated, after the program name), feeding
 * input on standard input; after interrupt_ms milliseconds (when > 0) send
 * SIGINT. */
static result run(const char *const *args, const char *input, int interrupt_ms) {
    result res;
    memset(&res, 0, sizeof res);
    char outp[] = "/tmp/hodu_cli_outXXXXXX", errp[] = "/tmp/hodu_cli_errXXXXXX";
    int fo = mkstemp(outp), fe = mkstemp(errp), in[2];
    if (fo < 0 || fe < 0 || pipe(in) < 0) {
        res.status = -1;
        return res;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(fo, 1);
        dup2(fe, 2);
        close(in[1]);
        const char *argv[32];
        int a = 0;
        argv[a++] = hodu;
        for (int i = 0; args[i] && a < 31; i++) argv[a++] = args[i];
        argv[a] = NULL;
        execv(hodu, (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    if (input && write(in[1], input, strlen(input)) < 0) res.status = -1;
    close(in[1]);
    if (interrupt_ms > 0) {
        struct timespec ts = {interrupt_ms / 1000, (long)(interrupt_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGINT);
    }
    int st;
    waitpid(pid, &st, 0);
    res.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    lseek(fo, 0, SEEK_SET);
    lseek(fe, 0, SEEK_SET);
    slurp(fo, res.out, sizeof res.out);
    slurp(fe, res.err, sizeof res.err);
    unlink(outp);
    unlink(errp);
    return res;
}

#define EXPECT(cond, what, r)                                                                      \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: %s: status %d\nstdout: %s\nstderr: %s\n", __FILE__, __LINE__,  \
                    what, (r).status, (r).out, (r).err);                                           \
        }                                                                                          \
    } while (0)

/* --strategy NAME, and HODU_PROFILE's Chrome trace. */
static void test_strategy_and_profile(void) {
    result r =
        run((const char *[]){"--strategy", "inference", "-e", "print(is_grad_enabled())", NULL},
            NULL, 0);
    EXPECT(r.status == 0 && strcmp(r.out, "false\n") == 0, "--strategy inference", r);
    r = run((const char *[]){"--strategy", "debug", "-e",
                             "import strategy\nprint(strategy.current().memory)", NULL},
            NULL, 0);
    EXPECT(r.status == 0 && strcmp(r.out, "standard\n") == 0, "--strategy debug", r);
    r = run((const char *[]){"--strategy", "fastest", "-e", "print(1)", NULL}, NULL, 0);
    EXPECT(r.status == 2 && !r.out[0] && strstr(r.err, "no strategy named 'fastest'"),
           "--strategy with an unknown name", r);
    r = run((const char *[]){"--strategy", NULL}, NULL, 0);
    EXPECT(r.status == 2 && strstr(r.err, "--strategy needs a preset's name"),
           "--strategy without a name", r);

    char path[] = "/tmp/hodu_cli_traceXXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    close(fd);
    setenv("HODU_PROFILE", path, 1);
    r = run((const char *[]){"-e",
                             "let a = ones([8, 8])\nlet b = a @ a\ncompiled fn f(x) { return "
                             "sum(x * 2.0) }\nprint(f(b).item())",
                             NULL},
            NULL, 0);
    unsetenv("HODU_PROFILE");
    EXPECT(r.status == 0 && strcmp(r.out, "1024.0\n") == 0, "HODU_PROFILE runs the program", r);
    FILE *f = fopen(path, "r");
    char buf[1 << 14];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
    unlink(path);
    checks++;
    if (strncmp(buf, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", 42) ||
        !strstr(buf, "{\"name\": \"matmul\", \"cat\": \"op\", \"ph\": \"X\", \"ts\": ") ||
        !strstr(buf, "\"name\": \"compile f\", \"cat\": \"compile\"") ||
        !strstr(buf, "\"name\": \"compiled run f\", \"cat\": \"compiled\"") || n < 4 ||
        strcmp(buf + n - 4, "\n]}\n")) {
        failures++;
        printf("FAIL HODU_PROFILE's trace:\n%s\n", buf);
    }

    /* a strategy's trace path */
    char code[512];
    snprintf(code, sizeof code,
             "import strategy\nset_strategy(strategy.default().with_profiling(true, path = "
             "\"%s\"))\nlet a = ones([4]) + 1.0\nprint(a.sum().item())",
             path);
    r = run((const char *[]){"-e", code, NULL}, NULL, 0);
    EXPECT(r.status == 0 && strcmp(r.out, "8.0\n") == 0, "a strategy's trace path", r);
    f = fopen(path, "r");
    n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
    unlink(path);
    checks++;
    if (!strstr(buf, "{\"name\": \"add\", \"cat\": \"op\"")) {
        failures++;
        printf("FAIL a strategy's trace:\n%s\n", buf);
    }
}

/* HODU_GEMM: which library runs the larger f32 products; a value it does
 * not know is named, and the program still runs (on OpenBLAS). */
static void test_gemm_env(void) {
    const char *code = "let a = ones([128, 128])\nprint((a @ a).sum().item())";
    static const char *const values[] = {"openblas", "onednn", "", "bogus"};
    for (int i = 0; i < 4; i++) {
        setenv("HODU_GEMM", values[i], 1);
        result r = run((const char *[]){"-e", code, NULL}, NULL, 0);
        int warned = strstr(r.err, "HODU_GEMM=bogus is not a gemm here (onednn, openblas)") != 0;
        EXPECT(r.status == 0 && strcmp(r.out, "2097152.0\n") == 0 && warned == (i == 3), values[i],
               r);
    }
    unsetenv("HODU_GEMM");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_cli HODU\n");
        return 2;
    }
    hodu = argv[1];
    result r;

    r = run((const char *[]){"--version", NULL}, NULL, 0);
    EXPECT(r.status == 0 && strncmp(r.out, "hodu ", 5) == 0, "--version", r);
    r = run((const char *[]){"--help", NULL}, NULL, 0);
    EXPECT(r.status == 0 && strstr(r.out, "usage: hodu"), "--help", r);
    r = run((const char *[]){"--bogus", NULL}, NULL, 0);
    EXPECT(r.status == 2 && strstr(r.err, "unknown option --bogus"), "unknown option", r);
    r = run((const char *[]){"/nonexistent/x.hodu", NULL}, NULL, 0);
    EXPECT(r.status == 2 && strstr(r.err, "cannot read /nonexistent/x.hodu"), "missing file", r);
    r = run((const char *[]){"/dev/zero", NULL}, NULL, 0);
    EXPECT(r.status == 2 && strstr(r.err, "cannot read /dev/zero: it is a device"), "a device", r);
    r = run((const char *[]){"/", NULL}, NULL, 0);
    EXPECT(r.status == 2 && strstr(r.err, "cannot read /: it is a directory"), "a directory", r);
    r = run((const char *[]){"-e", NULL}, NULL, 0);
    EXPECT(r.status == 2, "-e without code", r);
    r = run((const char *[]){"check", NULL}, NULL, 0);
    EXPECT(r.status == 2, "check without a file", r);

    r = run((const char *[]){"-e", "print(1 + 1)", NULL}, NULL, 0);
    EXPECT(r.status == 0 && strcmp(r.out, "2\n") == 0 && !r.err[0], "-e", r);
    r = run((const char *[]){"-e", "print(args())", "a", "b c", NULL}, NULL, 0);
    EXPECT(r.status == 0 && strcmp(r.out, "[\"a\", \"b c\"]\n") == 0, "-e args", r);
    r = run((const char *[]){"-e", "print(", NULL}, NULL, 0);
    EXPECT(r.status == 1 && strstr(r.err, "-e:1:7: error:"), "syntax error", r);
    r = run((const char *[]){"-e", "print(\"before\")\nprint(1 / 0)", NULL}, NULL, 0);
    EXPECT(r.status == 1 && strcmp(r.out, "before\n") == 0 &&
               strstr(r.err,
                      "-e:2:7: error: division by zero: 1 / 0\n  print(1 / 0)\n        ^~~~~\n"),
           "runtime error", r);

    r = run((const char *[]){"-", "x", NULL}, "print(args(), 3)\n", 0);
    EXPECT(r.status == 0 && strcmp(r.out, "[\"x\"] 3\n") == 0, "- reads stdin", r);
    r = run((const char *[]){NULL}, "print(\"piped\")\n", 0);
    EXPECT(r.status == 0 && strcmp(r.out, "piped\n") == 0, "stdin that is not a terminal", r);
    r = run((const char *[]){"-", NULL}, "let x = \nprint(x)", 0);
    EXPECT(r.status == 1 && strstr(r.err, "<stdin>:"), "stdin syntax error", r);

    char path[] = "/tmp/hodu_cli_checkXXXXXX";
    int fd = mkstemp(path);
    const char bad[] = "print(a)\nb = 1\n";
    if (fd >= 0 && write(fd, bad, sizeof bad - 1) == (ssize_t)(sizeof bad - 1)) {
        close(fd);
        r = run((const char *[]){"check", path, NULL}, NULL, 0);
        EXPECT(r.status == 1 && strstr(r.err, "unknown name 'a'") &&
                   strstr(r.err, "assignment to undeclared name 'b'") && !r.out[0],
               "check reports every error", r);
        r = run((const char *[]){path, NULL}, NULL, 0);
        EXPECT(r.status == 1 && !r.out[0], "name errors stop the run before it starts", r);
    }
    unlink(path);

    r = run((const char *[]){"-e", "print(\"go\")\nlet i = 0\nwhile true { i += 1 }", NULL}, NULL,
            300);
    EXPECT(r.status == 1 && strstr(r.err, "error: interrupted") && strstr(r.err, "-e:3:"),
           "Ctrl-C stops a loop", r);

    r = run((const char *[]){"-e", "print(ones([1]).expand([10**12]).sum())", NULL}, NULL, 300);
    EXPECT(r.status == 1 && strstr(r.err, "interrupted") && strstr(r.err, "-e:1:"),
           "Ctrl-C stops a long sum", r);
    /* files that are not files: refused at once, named */
    char fifo[] = "/tmp/hodu_cli_fifo_XXXXXX";
    if (mkdtemp(fifo)) {
        char path[64], in[128];
        snprintf(path, sizeof path, "%s/p.hodu", fifo);
        if (mkfifo(path, 0600) == 0) {
            r = run((const char *[]){path, NULL}, NULL, 0);
            EXPECT(r.status == 1 && strstr(r.err, "is a FIFO"), "a FIFO as the program", r);
            snprintf(in, sizeof in, "x=%s", path);
            r = run((const char *[]){"run-script", path, "--input", in, NULL}, NULL, 0);
            EXPECT(r.status != 0 && strstr(r.err, "is a FIFO"), "a FIFO as a script", r);
            unlink(path);
        }
        rmdir(fifo);
    }

    test_strategy_and_profile();
    test_gemm_env();

    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
