/* The hodu program: runs a file, a -e string or stdin, checks files
 * without running them, or starts the REPL on a terminal.
 *
 * Exit status: 0 success, 1 the program failed (syntax, name or runtime
 * error), 2 usage error (unknown option, missing or unreadable file). */
#include "fmt_cli.h"
#include "hd_dist.h"
#include "repl.h"
#include "run_script.h"
#include "vm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char hd_usage[] =
    "usage: hodu [options] [FILE | -e CODE | -] [args...]\n"
    "       hodu check FILE...\n"
    "       hodu fmt [--check] FILE...\n"
    "       hodu run-script F.hoduscript [--input NAME=FILE.npy]... [--output OUT]\n"
    "\n"
    "  FILE        run a .hodu program; args() returns the words after it\n"
    "  -e CODE     run CODE\n"
    "  -           run the program read from standard input\n"
    "  (none)      start the REPL on a terminal, else read standard input\n"
    "  check FILE  report every syntax and name error without running\n"
    "  fmt FILE    rewrite FILE in the canonical layout (--check: only say\n"
    "              which files would change, exit status 1 if any)\n"
    "  run-script  run a saved script (hodu run-script --help)\n"
    "  --strategy NAME  run with an execution strategy: default, training,\n"
    "              inference, memory_efficient, high_throughput or debug\n"
    "  --version   print the version\n"
    "  -h, --help  print this help\n"
    "\n"
    "environment: HODU_PATH (folders searched by import, colon-separated),\n"
    "             HODU_NUM_THREADS, HODU_LOG (HODU_LOG=help lists its categories),\n"
    "             HODU_COMPILER (interp, llvm, cuda; default: llvm where it runs)\n";

/* The VM a Ctrl-C interrupts (the CLI runs one at a time). */
static hd_vm *volatile hd_running_vm;

static void hd_on_sigint(int sig) {
    (void)sig;
    if (hd_running_vm) hd_vm_interrupt(hd_running_vm);
    /* A second Ctrl-C ends the process even if the program never checks. */
    signal(SIGINT, SIG_DFL);
}

static int hd_usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "hodu: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", hd_usage);
    return 2;
}

/* Print the VM's error (the text ends in a newline). */
static int hd_report(hd_vm *vm, hd_status st) {
    if (st == HD_OK) return 0;
    fflush(stdout);
    fputs(hd_vm_error_text(vm), stderr);
    return 1;
}

/* A file argument that cannot be read is a usage error (2), reported
 * before anything starts: so is a directory or a device such as /dev/zero
 * (a pipe, as from <(...), is read). */
static int hd_readable(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block here */
    if (fd < 0) {
        fprintf(stderr, "hodu: cannot read %s: %s\n", path, strerror(errno));
        return 0;
    }
    struct stat sb;
    int bad =
        fstat(fd, &sb) == 0 && (S_ISDIR(sb.st_mode) || S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode));
    if (bad)
        fprintf(stderr, "hodu: cannot read %s: %s\n", path,
                S_ISDIR(sb.st_mode) ? "it is a directory" : "it is a device, not a file");
    close(fd);
    return !bad;
}

/* --strategy NAME: the preset every VM of this run starts with. */
static const char *hd_cli_strategy;

static hd_vm *hd_make_vm(int argc, char **argv) {
    hd_vm_options o = {0};
    o.allow_io = 1;
    o.argc = argc;
    o.argv = argv;
    hd_vm *vm = hd_vm_new(&o);
    if (!vm) fprintf(stderr, "hodu: cannot start the interpreter (out of memory)\n");
    if (vm && hd_cli_strategy && hd_vm_set_strategy(vm, hd_cli_strategy)) {
        fprintf(stderr, "hodu: --strategy: %s\n", hd_vm_error_text(vm));
        hd_vm_free(vm);
        exit(2);
    }
    return vm;
}

static char *hd_read_stream(FILE *fp, size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, fp);
        if (n < cap) break;
        char *b = realloc(buf, cap * 2);
        if (!b) {
            free(buf);
            return NULL;
        }
        buf = b;
        cap *= 2;
    }
    *len = n;
    return buf;
}

enum { HD_RUN_FILE, HD_RUN_CODE, HD_RUN_STDIN };

static int hd_run(int mode, const char *what, int argc, char **argv) {
    if (mode == HD_RUN_FILE && !hd_readable(what)) return 2;
    hd_vm *vm = hd_make_vm(argc, argv);
    if (!vm) return 1;
    hd_running_vm = vm;
    signal(SIGINT, hd_on_sigint);
    hd_status st;
    if (mode == HD_RUN_FILE) {
        st = hd_vm_eval_file(vm, what, NULL);
    } else if (mode == HD_RUN_CODE) {
        st = hd_vm_eval(vm, what, strlen(what), "-e", NULL, NULL);
    } else {
        size_t len;
        char *src = hd_read_stream(stdin, &len);
        if (!src) {
            fprintf(stderr, "hodu: cannot read standard input\n");
            hd_vm_free(vm);
            return 2;
        }
        st = hd_vm_eval(vm, src, len, "<stdin>", NULL, NULL);
        free(src);
    }
    signal(SIGINT, SIG_DFL);
    hd_running_vm = NULL;
    int rc = hd_report(vm, st);
    fflush(stdout);
    hd_vm_free(vm);
    hd_dist_finish(rc); /* a failed rank stops the others */
    return rc;
}

static int hd_check(int argc, char **argv) {
    if (argc == 0) return hd_usage_error("%s", "check needs a file");
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        if (!hd_readable(argv[i])) {
            rc = 2;
            continue;
        }
        hd_vm *vm = hd_make_vm(0, NULL);
        if (!vm) return 1;
        hd_eval_opts opts = {0, 1};
        int r = hd_report(vm, hd_vm_eval_file(vm, argv[i], &opts));
        if (r > rc) rc = r;
        hd_vm_free(vm);
    }
    return rc;
}

static int hd_interactive(void) {
    if (!isatty(STDIN_FILENO)) return hd_run(HD_RUN_STDIN, NULL, 0, NULL);
    hd_vm *vm = hd_make_vm(0, NULL);
    if (!vm) return 1;
    int rc = hd_repl_run(vm);
    hd_vm_free(vm);
    return rc;
}

int main(int argc, char **argv) {
    while (argc >= 2 && strcmp(argv[1], "--strategy") == 0) {
        if (argc < 3) return hd_usage_error("%s", "--strategy needs a preset's name");
        hd_cli_strategy = argv[2];
        argv[2] = argv[0];
        argv += 2;
        argc -= 2;
    }
    if (argc < 2) return hd_interactive();
    const char *a = argv[1];
    if (strcmp(a, "--version") == 0) {
        printf("hodu %s\n", HODU_VERSION);
        return 0;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
        fputs(hd_usage, stdout);
        return 0;
    }
    if (strcmp(a, "check") == 0) return hd_check(argc - 2, argv + 2);
    if (strcmp(a, "fmt") == 0) return hd_fmt_main(argc - 2, argv + 2);
    if (strcmp(a, "run-script") == 0) return hd_run_script_main(argc - 2, argv + 2);
    if (strcmp(a, "-e") == 0) {
        if (argc < 3) return hd_usage_error("%s", "-e needs an argument");
        return hd_run(HD_RUN_CODE, argv[2], argc - 3, argv + 3);
    }
    if (strcmp(a, "-") == 0) return hd_run(HD_RUN_STDIN, NULL, argc - 2, argv + 2);
    if (strcmp(a, "--") == 0) {
        if (argc < 3) return hd_usage_error("%s", "missing file after --");
        return hd_run(HD_RUN_FILE, argv[2], argc - 3, argv + 3);
    }
    if (a[0] == '-') return hd_usage_error("unknown option %s", a);
    return hd_run(HD_RUN_FILE, a, argc - 2, argv + 2);
}
