/* Drives the real `hodu` REPL through a pseudo-terminal, as a user would:
 * a multi-line function, an error and recovery, tab completion of a global
 * name, Ctrl-C at the prompt, history, :quit. Usage: test_repl PATH_TO_HODU */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int pass, fail;
static char out[1 << 16];
static size_t outlen, seen; /* output so far; where the next expect starts */

static void check(int ok, const char *what) {
    if (ok) {
        pass++;
        return;
    }
    fail++;
    fprintf(stderr, "FAILED: %s\n--- output after the last match ---\n%.*s\n---\n", what,
            (int)(outlen - seen), out + seen);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Read until `want` appears after the last match, or the timeout. */
static int expect(int fd, const char *want, double timeout) {
    double end = now() + timeout;
    for (;;) {
        out[outlen] = 0;
        char *p = strstr(out + seen, want);
        if (p) {
            seen = (size_t)(p - out) + strlen(want);
            return 1;
        }
        double left = end - now();
        if (left <= 0 || outlen + 1 >= sizeof out) return 0;
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, (int)(left * 1000) + 1) <= 0) continue;
        ssize_t n = read(fd, out + outlen, sizeof out - 1 - outlen);
        if (n <= 0) return 0;
        outlen += (size_t)n;
    }
}

/* libedit switches the terminal's mode with TCSAFLUSH around each prompt,
 * which discards input typed in that instant; a person never types that
 * fast, so wait a moment after each prompt before typing. */
static void send_str(int fd, const char *s) {
    usleep(100000);
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

static pid_t start(const char *hodu, const char *home, int *fd) {
    struct winsize ws = {24, 80, 0, 0};
    pid_t pid = forkpty(fd, NULL, NULL, &ws);
    if (pid == 0) {
        if (home)
            setenv("HOME", home, 1);
        else
            unsetenv("HOME");
        setenv("TERM", "dumb", 1);
        execl(hodu, hodu, (char *)NULL);
        _exit(127);
    }
    outlen = seen = 0;
    return pid;
}

static int finish(pid_t pid, int fd) {
    int status = -1;
    double end = now() + 10;
    /* never block on the terminal: a hodu that does not exit is killed below */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    while (now() < end) {
        ssize_t n;
        while (outlen + 1 < sizeof out && (n = read(fd, out + outlen, sizeof out - 1 - outlen)) > 0)
            outlen += (size_t)n;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        usleep(20000);
    }
    if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    close(fd);
    return status;
}

static void session(const char *hodu, const char *home) {
    int fd;
    pid_t pid = start(hodu, home, &fd);
    check(pid > 0, "forkpty");
    check(expect(fd, ">>> ", 10), "first prompt");

    send_str(fd, "fn add(a, b) {\r");
    check(expect(fd, "... ", 5), "continuation prompt after an open block");
    send_str(fd, "    return a + b\r");
    check(expect(fd, "... ", 5), "still continuing inside the block");
    send_str(fd, "}\r");
    check(expect(fd, ">>> ", 5), "prompt after the block closes");
    send_str(fd, "add(2, 3)\r");
    check(expect(fd, "5\r\n", 5) && expect(fd, ">>> ", 5), "calling the multi-line function");

    send_str(fd, "add(1, nosuchname)\r");
    check(expect(fd, "error", 5) && expect(fd, ">>> ", 5), "an error is reported");
    send_str(fd, "add(40, 2)\r");
    check(expect(fd, "42\r\n", 5) && expect(fd, ">>> ", 5), "the REPL goes on after an error");

    send_str(fd, "let myvariable = 41\r");
    check(expect(fd, ">>> ", 5), "let");
    send_str(fd, "myvari\t + 1\r");
    check(expect(fd, "42\r\n", 5) && expect(fd, ">>> ", 5), "tab completes a global name");

    send_str(fd, "1 + ");
    usleep(100000);
    send_str(fd, "\x03");
    check(expect(fd, "^C", 5) && expect(fd, ">>> ", 5), "Ctrl-C cancels the line");
    send_str(fd, "[1, 2]\r");
    check(expect(fd, "[1, 2]\r\n", 5) && expect(fd, ">>> ", 5), "input works after Ctrl-C");

    send_str(fd, "let n = 0\r");
    check(expect(fd, ">>> ", 5), "let n");
    send_str(fd, "while true { n = n + 1 }\r");
    /* A Ctrl-C that arrives while libedit still holds the terminal (a slow,
     * loaded machine) is a character its TCSAFLUSH discards, not a signal:
     * press it again until the loop reports the interrupt. */
    int interrupted = 0;
    for (int i = 0; i < 20 && !interrupted; i++) {
        send_str(fd, "\x03");
        interrupted = expect(fd, "interrupted", 1);
    }
    check(interrupted && expect(fd, ">>> ", 5), "Ctrl-C interrupts a running loop");
    send_str(fd, "n > 0\r");
    check(expect(fd, "true\r\n", 5) && expect(fd, ">>> ", 5), "state survives the interrupt");

    send_str(fd, ":type zeros([2, 3])\r");
    check(expect(fd, "tensor(shape=[2, 3], dtype=f32, device=cpu)", 5) && expect(fd, ">>> ", 5),
          ":type of a tensor");
    send_str(fd, "let t = ones(2)\r");
    check(expect(fd, ">>> ", 5), "let t");
    send_str(fd, "t.resh\t(2, 1).shape\r");
    check(expect(fd, "[2, 1]\r\n", 5) && expect(fd, ">>> ", 5), "tab completes a tensor method");

    send_str(fd, ":ir\r");
    check(expect(fd, "no compiled graph yet", 5) && expect(fd, ">>> ", 5), ":ir before compiling");
    send_str(fd, "compiled fn sq(x) { return x * x }\r");
    check(expect(fd, ">>> ", 5), "a compiled function");
    send_str(fd, "sq(t).shape\r");
    check(expect(fd, "[2]\r\n", 5) && expect(fd, ">>> ", 5), "calling it");
    send_str(fd, ":ir\r");
    check(expect(fd, "graph sq {", 5) && expect(fd, "mul(", 5) && expect(fd, ">>> ", 5),
          ":ir shows the graph compiled last");
    send_str(fd, ":help\r");
    check(expect(fd, ":quit", 5) && expect(fd, ">>> ", 5), ":help");
    send_str(fd, ":time 6 * 7\r");
    check(expect(fd, "42\r\n", 5) && expect(fd, "time: ", 5) && expect(fd, ">>> ", 5), ":time");
    send_str(fd, ":type 1.5\r");
    check(expect(fd, "float\r\n", 5) && expect(fd, ">>> ", 5), ":type");

    send_str(fd, "fn g() {\r");
    check(expect(fd, "... ", 5), "continuation prompt before Ctrl-D");
    send_str(fd, "\x04");
    check(expect(fd, ">>> ", 5), "Ctrl-D on a continuation line cancels the statement");
    send_str(fd, "1 + 2\r");
    check(expect(fd, "3\r\n", 5) && expect(fd, ">>> ", 5), "input works after that Ctrl-D");

    send_str(fd, ":quit\r");
    int status = finish(pid, fd);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0, ":quit exits with status 0");
}

static void ctrl_d(const char *hodu, const char *home) {
    int fd;
    pid_t pid = start(hodu, home, &fd);
    check(expect(fd, ">>> ", 10), "prompt without HOME");
    send_str(fd, "\x04");
    if (!expect(fd, "^D", 3)) send_str(fd, "\x04"); /* typed while the mode changed */
    int status = finish(pid, fd);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "Ctrl-D exits with status 0");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_repl HODU\n");
        return 2;
    }
    char home[] = "/tmp/hodu_repl_XXXXXX";
    if (!mkdtemp(home)) return 2;
    session(argv[1], home);
    char hist[64];
    snprintf(hist, sizeof hist, "%s/.hodu_history", home);
    FILE *f = fopen(hist, "r");
    char text[4096] = {0};
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = 0;
        fclose(f);
    }
    check(strstr(text, "myvariable") != NULL, "history is saved in $HOME/.hodu_history");
    remove(hist);
    rmdir(home);
    ctrl_d(argv[1], NULL);
    printf("%d passed, %d failed\n", pass, fail);
    return fail ? 1 : 0;
}
