/* oomfail: allocation-failure injection over the golden programs, as
 * SQLite's and Lua's test suites do it. For one program it counts the VM
 * allocations a run makes (those after the VM exists), then runs it again
 * with the Nth failing, for every N up to the count (long programs: a
 * sample, all of the first ones then an even spread drawn with a fixed
 * seed). Each run must end
 *   - in a clean out-of-memory error: status HD_ERR_MEMORY, a message with
 *     "out of memory" and a location, the output so far the start of the
 *     expected output; or
 *   - as the program's expectations say (the failure was absorbed);
 *   - for a program that catches errors (try { } catch), normally: its try
 *     caught the failure (out of memory is an error a catch takes), and
 *     what it printed then is its own business (counted as absorbed);
 * then the same VM must still run `print(sum(ones([3])))` and print
 * tensor(3.), and freeing it must give back every byte it took. Anything
 * else (another error or status, wrong output, a crash, a sanitizer
 * report, a leak) fails, naming the program and N. Expectations are those golden_runner
 * reads, less `expect stderr:` (standard error is not captured here).
 *
 * Each program gets a compile cache of its own (HODU_CACHE_DIR), filled by
 * a first run, so every counted run loads the same compiled code whatever
 * runs beside it.
 *
 * The runs happen in a child process (this program again, with --child):
 * a crash there is reported with the N that was running, and the sweep
 * goes on after it in a new child.
 *
 * usage: oomfail FILE.hodu...       sweep each program
 *        oomfail --vm-new           fail each allocation hd_vm_new makes
 *        oomfail --sites FILE       the distinct allocation sites in a
 *                                   HODU_OOM_SITES file
 * environment:
 *   HODU_OOM_MAX=K     runs per program (default 150; 0: every N)
 *   HODU_OOM_BUDGET=A  allocations the runs of a program may make in all,
 *                      about (default 2000000; 0: no bound)
 *   HODU_OOM_N=N       run that N only (to debug one failure)
 *   HODU_OOM_SEED=S    draw the spread with another seed
 *   HODU_OOM_SITES=F   append each failed allocation's call stack to F
 *   HODU_OOM_VERBOSE=1 print each run's outcome
 *   HODU_OOM_LEAKS=1   name the blocks a leak leaves (their call stacks)
 *   HODU_OOM_CACHE=D   the compile cache for every program (off: compile in
 *                      every run, so failures in compiling are tried too) */
#define _GNU_SOURCE
#include "golden_expect.h"
#include "vm.h"

#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define OOM_DEFAULT_MAX    150
#define OOM_DEFAULT_BUDGET 2000000 /* allocations the runs of one program make, about */
#define OOM_CHECK_SRC      "print(sum(ones([3])))"
#define OOM_CHECK_OUT      "tensor(3.)\n"
#define OOM_MAX_REPORTS    10 /* failures one program reports before its sweep stops */

/* ---- the allocator: counts what is outstanding, fails call fail_at ---- */

/* HODU_OOM_LEAKS: every live block with its size and call stack, to name
 * the blocks a leak leaves */
typedef struct oom_live {
    void *p;
    size_t n;
    void *frames[14];
} oom_live;

typedef struct oom_alloc {
    oom_live *live; /* NULL: not tracked */
    long nlive, caplive;
    size_t outstanding; /* bytes allocated and not freed */
    long calls;         /* allocations and growths since armed */
    long fail_at;       /* the call with this number (from 1) fails; 0: none */
    int failed;         /* fail_at was reached */
    FILE *sites;        /* HODU_OOM_SITES, or NULL */
} oom_alloc;

/* The load address of the program, so that stacks name file offsets. */
static int oom_base_cb(struct dl_phdr_info *info, size_t size, void *ud) {
    (void)size;
    *(uintptr_t *)ud = (uintptr_t)info->dlpi_addr;
    return 1; /* the first entry is the program itself */
}

/* Return addresses as addr2line takes them: offsets in the program, of
 * the call instruction. */
static void oom_print_stack(FILE *fp, void *const *frames, int n) {
    static uintptr_t base;
    if (!base) dl_iterate_phdr(oom_base_cb, &base);
    for (int i = 0; i < n && frames[i]; i++)
        fprintf(fp, "%s%#lx", i ? " " : "", (unsigned long)((uintptr_t)frames[i] - base - 1));
    fputc('\n', fp);
}

static void oom_record_site(FILE *fp) {
    void *frames[10];
    int n = backtrace(frames, 10);
    oom_print_stack(fp, frames + 1, n - 1);
    fflush(fp);
}

/* Forget block p, given back as n bytes: a size other than the one it
 * was made with is reported (it breaks the context's byte count). */
static void oom_live_drop(oom_alloc *a, void *p, size_t n) {
    for (long i = a->nlive - 1; i >= 0; i--)
        if (a->live[i].p == p) {
            if (a->live[i].n != n) {
                void *frames[8];
                int k = backtrace(frames, 8);
                fprintf(stderr, "  a block of %zu bytes given back as %zu, by: ", a->live[i].n, n);
                oom_print_stack(stderr, frames + 2, k - 2);
            }
            a->live[i] = a->live[--a->nlive];
            return;
        }
}

static void oom_live_add(oom_alloc *a, void *p, size_t n) {
    if (a->nlive == a->caplive) {
        long cap = a->caplive ? a->caplive * 2 : 1024;
        oom_live *l = realloc(a->live, (size_t)cap * sizeof *l);
        if (!l) return;
        a->live = l;
        a->caplive = cap;
    }
    oom_live *e = &a->live[a->nlive++];
    e->p = p;
    e->n = n;
    memset(e->frames, 0, sizeof e->frames);
    backtrace(e->frames, 14);
}

/* The blocks still live, with the stacks that made them. */
static void oom_live_report(const oom_alloc *a) {
    for (long i = 0; i < a->nlive; i++) {
        fprintf(stderr, "  %zu bytes from (addr2line -f -i -e oomfail): ", a->live[i].n);
        oom_print_stack(stderr, a->live[i].frames + 2, 12);
    }
}

static void *oom_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    oom_alloc *a = ud;
    if (nsize == 0) {
        if (ptr && a->live) oom_live_drop(a, ptr, osize);
        free(ptr);
        if (ptr) a->outstanding -= osize;
        return NULL;
    }
    /* shrinking never fails (the allocator contract, as Lua's) */
    if (nsize > (ptr ? osize : 0) && ++a->calls == a->fail_at) {
        a->failed = 1;
        if (a->sites) oom_record_site(a->sites);
        return NULL;
    }
    if (ptr && a->live) oom_live_drop(a, ptr, osize);
    void *p = realloc(ptr, nsize);
    if (!p) {
        if (ptr && a->live) oom_live_add(a, ptr, osize);
        return NULL;
    }
    a->outstanding = a->outstanding - (ptr ? osize : 0) + nsize;
    if (a->live) oom_live_add(a, p, nsize);
    return p;
}

/* ---- one program ---- */

typedef struct oom_prog {
    const char *file;
    golden_expect e;
    oom_alloc alloc;
    char *out; /* what the program printed */
    size_t len, cap;
    long trials, injected, absorbed, clean, failures;
    int catches; /* the program has a try ... catch */
} oom_prog;

static void oom_write(void *ud, const char *s, size_t n) {
    oom_prog *p = ud;
    if (p->len + n + 1 > p->cap) {
        size_t cap = (p->len + n + 1) * 2;
        char *b = realloc(p->out, cap);
        if (!b) return;
        p->out = b;
        p->cap = cap;
    }
    memcpy(p->out + p->len, s, n);
    p->len += n;
    p->out[p->len] = 0;
}

static hd_vm *oom_vm_new(oom_prog *p) {
    hd_vm_options o = {0};
    o.allow_io = 1;
    o.argc = p->e.nargs;
    o.argv = p->e.args;
    o.alloc = oom_alloc_fn;
    o.alloc_ud = &p->alloc;
    o.nthreads = 1;
    hd_vm *vm = hd_vm_new(&o);
    if (vm) hd_vm_set_writer(vm, oom_write, p);
    p->len = 0;
    if (p->out) p->out[0] = 0;
    return vm;
}

static void oom_fail(oom_prog *p, long n, const char *what, const char *detail) {
    p->failures++;
    fprintf(stderr, "%s: N=%ld: %s\n", p->file, n, what);
    if (detail && *detail)
        fprintf(stderr, "%s%s", detail, detail[strlen(detail) - 1] == '\n' ? "" : "\n");
}

/* The run ended as the program's expectations say. */
static int oom_as_expected(const oom_prog *p, hd_status st, const char *err) {
    int want_error = p->e.nerr || p->e.nat;
    if ((st != HD_OK) != want_error) return 0;
    if (want_error && !golden_error_matches(&p->e, p->file, err)) return 0;
    return golden_output_matches(&p->e, p->out ? p->out : "", 0);
}

/* The first line is "WHERE: error: ...", WHERE a chunk's name, with
 * ":L:C" when the error happened inside its source (failures before a
 * chunk runs, in reading or parsing it, are located at the chunk). */
static int oom_located(const char *err) {
    const char *e = strstr(err, ": error: ");
    const char *nl = strchr(err, '\n');
    if (!e || e == err || (nl && nl < e)) return 0;
    for (const char *s = err; s < e; s++)
        if (*s == ' ') return 0;
    return 1;
}

/* A clean out-of-memory error; NULL, else what is wrong with it. */
static const char *oom_clean_error(const oom_prog *p, hd_status st, const char *err) {
    if (st != HD_ERR_MEMORY) return "an error other than out of memory";
    if (!strstr(err, "out of memory")) return "HD_ERR_MEMORY without \"out of memory\"";
    if (!oom_located(err)) return "out of memory without a location";
    if (!golden_output_matches(&p->e, p->out ? p->out : "", 1))
        return "out of memory, after output that differs from the expected";
    return NULL;
}

/* Set the program's `# env:` entries (on), or remove them (off). */
static void oom_env(const oom_prog *p, int on) {
    char dir[4096], name[256];
    golden_dir_of(p->file, dir, sizeof dir);
    for (int i = 0; i < p->e.nenv; i++) {
        if (on) {
            golden_put_env(p->e.env[i], dir);
            continue;
        }
        const char *eq = strchr(p->e.env[i], '=');
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - p->e.env[i]) : 0, p->e.env[i]);
        if (*name) unsetenv(name);
    }
}

/* After a run: the VM still works (without the program's environment),
 * and gives every byte back when freed. */
static void oom_after(oom_prog *p, hd_vm *vm, long n) {
    oom_env(p, 0);
    p->len = 0;
    if (p->out) p->out[0] = 0;
    hd_status st = hd_vm_eval(vm, OOM_CHECK_SRC, strlen(OOM_CHECK_SRC), "<check>", NULL, NULL);
    if (st != HD_OK || !p->out || strcmp(p->out, OOM_CHECK_OUT) != 0) {
        char detail[2048];
        snprintf(detail, sizeof detail, "%soutput: %s", hd_vm_error_text(vm), p->out ? p->out : "");
        oom_fail(p, n, "the VM does not work after the run", detail);
    }
    hd_vm_free(vm);
    if (p->alloc.outstanding) {
        char msg[96];
        snprintf(msg, sizeof msg, "%zu bytes not given back when the VM was freed",
                 p->alloc.outstanding);
        oom_fail(p, n, msg, NULL);
        oom_live_report(&p->alloc);
    }
}

/* Run the program with allocation n failing (0: none). Returns the
 * number of allocations the run made. */
static long oom_trial(oom_prog *p, long n) {
    p->alloc.outstanding = 0;
    p->alloc.fail_at = 0;
    p->alloc.nlive = 0;
    if (!p->alloc.live && getenv("HODU_OOM_LEAKS")) oom_live_add(&p->alloc, NULL, 0);
    p->alloc.nlive = 0;
    oom_env(p, 1);
    hd_vm *vm = oom_vm_new(p);
    if (!vm) {
        oom_fail(p, n, "hd_vm_new failed without an injected failure", NULL);
        return 0;
    }
    hd_eval_opts check = {0, 1};
    p->alloc.calls = 0;
    p->alloc.failed = 0;
    p->alloc.fail_at = n;
    hd_status st = hd_vm_eval_file(vm, p->file, p->e.check ? &check : NULL);
    p->alloc.fail_at = 0;
    long calls = p->alloc.calls;
    const char *err = hd_vm_error_text(vm);
    const char *why = NULL;
    if (!p->alloc.failed) {
        if (!oom_as_expected(p, st, err))
            why = n ? "wrong outcome (nothing failed)" : "baseline run: wrong outcome";
    } else if (oom_as_expected(p, st, err) || (p->catches && st == HD_OK)) {
        p->absorbed++;
    } else if (!(why = oom_clean_error(p, st, err))) {
        p->clean++;
    }
    p->injected += p->alloc.failed;
    if (getenv("HODU_OOM_VERBOSE"))
        fprintf(stderr, "%s: N=%ld: status %d%s\n%s", p->file, n, (int)st,
                p->alloc.failed ? "" : " (nothing failed)", err);
    if (why) {
        char detail[2048];
        snprintf(detail, sizeof detail, "status %d, error:\n%soutput:\n%s", (int)st, err,
                 p->out ? p->out : "");
        oom_fail(p, n, why, detail);
    }
    oom_after(p, vm, n);
    return calls;
}

/* ---- which N to run ---- */

static uint64_t oom_rng = 0x9e3779b97f4a7c15ULL;

static uint64_t oom_next(void) {
    oom_rng ^= oom_rng << 13;
    oom_rng ^= oom_rng >> 7;
    oom_rng ^= oom_rng << 17;
    return oom_rng;
}

/* The Ns to run for a program of `count` allocations: all when there are
 * at most max (or max is 0), else the first max/2 and one drawn in each
 * of max - max/2 equal strides over the rest, fewer strides if their runs
 * would make more than `budget` allocations in all (a run with N failing
 * makes about N: a long program gets few runs past its head). Returns
 * how many; *ns is malloc'd. */
static long oom_samples(long count, long max, long budget, long **ns) {
    long k = max <= 0 || count <= max ? count : max;
    long head = k == count ? count : max / 2, rest = k - head;
    double afford = budget > 0 ? 2.0 * (double)budget / (double)(count + head) : (double)rest;
    if (afford < (double)rest) rest = (long)afford;
    k = head + rest;
    *ns = malloc((size_t)(k > 0 ? k : 1) * sizeof **ns);
    if (!*ns) return 0;
    for (long i = 0; i < head; i++) (*ns)[i] = i + 1;
    double stride = rest ? (double)(count - head) / (double)rest : 0;
    for (long i = 0; i < rest; i++) {
        long lo = head + 1 + (long)(stride * (double)i);
        long hi = head + (long)(stride * (double)(i + 1));
        (*ns)[head + i] = hi > lo ? lo + (long)(oom_next() % (uint64_t)(hi - lo + 1)) : lo;
    }
    return k;
}

static long oom_env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

/* The child: count, then every sampled N above `after`, announcing each
 * on standard error ("@N n") for the parent. Exit 0: all passed; 3: some
 * failed (reported). */
/* A first run fills the program's own compile cache (oom_sweep), so that
 * the counting run and every trial load the same code from it: which
 * allocations a run makes no longer depends on the tests beside it. */
static void oom_warm(oom_prog *p) {
    oom_env(p, 1);
    hd_vm *vm = oom_vm_new(p);
    if (vm) {
        hd_eval_opts check = {0, 1};
        hd_vm_eval_file(vm, p->file, p->e.check ? &check : NULL);
        hd_vm_free(vm);
    }
    oom_env(p, 0);
    p->alloc.outstanding = 0;
    p->alloc.nlive = 0;
}

static int oom_child(const char *file, long after) {
    oom_prog p = {0};
    p.file = file;
    char *src = golden_read_all(file, NULL);
    if (!src) {
        fprintf(stderr, "%s: cannot read\n", file);
        return 3;
    }
    golden_expect_parse(&p.e, src);
    p.catches = strstr(src, "catch") != NULL;
    free(src);
    const char *sites = getenv("HODU_OOM_SITES");
    if (!after) oom_warm(&p);
    long count = oom_trial(&p, 0), only = oom_env_long("HODU_OOM_N", 0), *ns = NULL;
    oom_rng ^= (uint64_t)oom_env_long("HODU_OOM_SEED", 0) * 0x2545f4914f6cdd1dULL;
    if (sites && *sites) p.alloc.sites = fopen(sites, "a");
    long k = only ? (ns = malloc(sizeof *ns)) != NULL
                  : oom_samples(count, oom_env_long("HODU_OOM_MAX", OOM_DEFAULT_MAX),
                                oom_env_long("HODU_OOM_BUDGET", OOM_DEFAULT_BUDGET), &ns);
    if (only && ns) ns[0] = only;
    for (long i = 0; i < k && p.failures < OOM_MAX_REPORTS; i++) {
        if (ns[i] <= after) continue;
        fprintf(stderr, "@N %ld\n", ns[i]);
        p.trials++;
        oom_trial(&p, ns[i]);
    }
    fprintf(stderr, "@done %ld %ld %ld %ld %ld\n", count, p.trials, p.injected, p.absorbed,
            p.clean);
    if (p.alloc.sites) fclose(p.alloc.sites);
    free(p.alloc.live);
    free(ns);
    free(p.out);
    golden_expect_free(&p.e);
    return p.failures ? 3 : 0;
}

/* ---- the parent: one child per program, another after a crash ---- */

typedef struct oom_total {
    long programs, count, trials, injected, absorbed, clean, failures;
} oom_total;

typedef struct oom_watch {
    long n;        /* the N running (0: the counting run) */
    long started;  /* runs started */
    int done;      /* the child finished its sweep */
    int sanitizer; /* a sanitizer report went by */
    long stats[5]; /* count, trials, injected, absorbed, clean */
} oom_watch;

/* Relay the child's standard error, following its "@" lines. */
static void oom_watch_line(oom_watch *w, const char *line) {
    if (sscanf(line, "@N %ld", &w->n) == 1) {
        w->started++;
        return;
    }
    if (sscanf(line, "@done %ld %ld %ld %ld %ld", &w->stats[0], &w->stats[1], &w->stats[2],
               &w->stats[3], &w->stats[4]) == 5) {
        w->done = 1;
        return;
    }
    if (strstr(line, "Sanitizer") || strstr(line, "runtime error:")) w->sanitizer = 1;
    /* the VM's own notes and logs ("hodu: ...") only when asked */
    if (strncmp(line, "hodu: ", 6) != 0 || getenv("HODU_OOM_VERBOSE")) fputs(line, stderr);
}

static pid_t oom_spawn(const char *file, long after, int *fd) {
    int pfd[2];
    if (pipe(pfd) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        char from[32];
        snprintf(from, sizeof from, "%ld", after);
        execl("/proc/self/exe", "oomfail", "--child", file, from, (char *)NULL);
        fprintf(stderr, "oomfail: cannot run itself: %s\n", strerror(errno));
        _exit(121);
    }
    close(pfd[1]);
    if (pid < 0) close(pfd[0]);
    *fd = pfd[0];
    return pid;
}

/* Run one child from after; returns 1 when the sweep is over. */
static int oom_child_run(const char *file, long after, oom_watch *w, long *failures) {
    int fd;
    pid_t pid = oom_spawn(file, after, &fd);
    if (pid < 0) {
        fprintf(stderr, "%s: cannot start a child\n", file);
        ++*failures;
        return 1;
    }
    FILE *in = fdopen(fd, "r");
    char line[4096];
    while (in && fgets(line, sizeof line, in)) oom_watch_line(w, line);
    if (in) fclose(in);
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (w->done && !w->sanitizer && (code == 0 || code == 3)) {
        *failures += code == 3;
        return 1;
    }
    ++*failures;
    char how[64];
    if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "signal %d", WTERMSIG(status));
    else
        snprintf(how, sizeof how, "exit status %d", code);
    if (w->done)
        fprintf(stderr, "%s: a sanitizer report or %s at the end of the sweep\n", file, how);
    else if (w->n == 0)
        fprintf(stderr, "%s: the counting run (nothing failing) crashed: %s\n", file, how);
    else
        fprintf(stderr, "%s: N=%ld: crashed (%s%s)\n", file, w->n, how,
                w->sanitizer ? ", sanitizer report above" : "");
    return w->done || w->n == 0 || *failures >= OOM_MAX_REPORTS;
}

/* Remove the private cache folder and its entries. */
static void oom_cache_remove(const char *dir) {
    DIR *d = opendir(dir);
    char path[4200];
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static void oom_sweep(const char *file, oom_total *t) {
    long after = 0, failures = 0, trials = 0;
    oom_watch w;
    char cache[] = "/tmp/hodu-oom-cache-XXXXXX"; /* the program's own (oom_warm) */
    const char *fixed = getenv("HODU_OOM_CACHE");
    int own = !fixed && mkdtemp(cache) != NULL;
    if (own || fixed) setenv("HODU_CACHE_DIR", own ? cache : fixed, 1);
    for (;;) {
        memset(&w, 0, sizeof w);
        int over = oom_child_run(file, after, &w, &failures);
        trials += w.started;
        if (over) break;
        after = w.n;
    }
    if (own) oom_cache_remove(cache);
    t->programs++;
    t->count += w.stats[0];
    t->trials += trials;
    t->injected += w.stats[2];
    t->absorbed += w.stats[3];
    t->clean += w.stats[4];
    t->failures += failures;
    printf("%s: %ld allocations, %ld runs: %ld out of memory, %ld absorbed%s\n", file, w.stats[0],
           trials, w.stats[4], w.stats[3], failures ? ", FAILED" : "");
    fflush(stdout);
}

/* ---- hd_vm_new itself ---- */

/* Fail each allocation hd_vm_new makes in turn: it must return NULL having
 * given every byte back, or a VM that works (the failure absorbed). */
static int oom_vm_new_sweep(void) {
    oom_prog p = {0};
    p.file = "hd_vm_new";
    long n = 1;
    for (;; n++) {
        p.alloc.outstanding = 0;
        p.alloc.calls = 0;
        p.alloc.failed = 0;
        p.alloc.fail_at = n;
        hd_vm *vm = oom_vm_new(&p);
        p.alloc.fail_at = 0;
        if (!p.alloc.failed) {
            if (vm) hd_vm_free(vm);
            break;
        }
        if (vm) {
            oom_after(&p, vm, n);
        } else if (p.alloc.outstanding) {
            char msg[96];
            snprintf(msg, sizeof msg, "NULL, with %zu bytes not given back", p.alloc.outstanding);
            oom_fail(&p, n, msg, NULL);
        }
        if (p.failures >= OOM_MAX_REPORTS) break;
    }
    printf("hd_vm_new: %ld allocations, each failed once%s\n", n - 1, p.failures ? ", FAILED" : "");
    free(p.out);
    return p.failures ? 1 : 0;
}

/* ---- distinct sites ---- */

/* Each address's innermost source place outside the allocator (hd_base.c)
 * and this file, as addr2line tells it (its inline chain, innermost
 * first); "" when every place of it is inside them. */
typedef struct oom_place {
    unsigned long addr;
    char site[256];
} oom_place;

static int oom_place_cmp(const void *a, const void *b) {
    unsigned long x = ((const oom_place *)a)->addr, y = ((const oom_place *)b)->addr;
    return x < y ? -1 : x > y;
}

static int oom_outside(const char *fn, const char *loc) {
    return !strstr(loc, "hd_base.c") && !strstr(loc, "oomfail.c") && !strstr(fn, "??") &&
           !strstr(loc, "??");
}

/* Run addr2line over the n addresses of pl (sorted), filling their sites. */
static void oom_symbolize(oom_place *pl, long n) {
    char tmp[] = "/tmp/oomfail_addrXXXXXX";
    int fd = mkstemp(tmp);
    FILE *w = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!w) return;
    for (long i = 0; i < n; i++) fprintf(w, "%#lx\n", pl[i].addr);
    fclose(w);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "addr2line -a -i -f -e /proc/%ld/exe < %s", (long)getpid(), tmp);
    FILE *fp = popen(cmd, "r");
    char fn[1024], loc[1024];
    oom_place *cur = NULL;
    while (fp && fgets(fn, sizeof fn, fp)) {
        if (strncmp(fn, "0x", 2) == 0) {
            oom_place key = {strtoul(fn, NULL, 16), ""};
            cur = bsearch(&key, pl, (size_t)n, sizeof *pl, oom_place_cmp);
            continue;
        }
        if (!fgets(loc, sizeof loc, fp)) break;
        if (!cur || cur->site[0] || !oom_outside(fn, loc)) continue;
        fn[strcspn(fn, "\n")] = 0;
        loc[strcspn(loc, " \n")] = 0; /* "file:line (discriminator 2)" */
        const char *base = strrchr(loc, '/');
        snprintf(cur->site, sizeof cur->site, "%.127s %.120s", fn, base ? base + 1 : loc);
    }
    if (fp) pclose(fp);
    unlink(tmp);
}

static int oom_str_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Read a HODU_OOM_SITES file: its stacks (one a line) into *stacks, and
 * every address into *pl (sorted, distinct). */
static long oom_read_stacks(FILE *fp, char ***stacks, oom_place **pl, long *npl) {
    char line[4096];
    long n = 0, cap = 0, pcap = 0;
    *npl = 0;
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = 0;
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            char **s = realloc(*stacks, (size_t)cap * sizeof *s);
            if (!s) break;
            *stacks = s;
        }
        (*stacks)[n++] = strdup(line);
        for (char *p = line, *end; *p; p = end) {
            unsigned long a = strtoul(p, &end, 16);
            if (end == p) break;
            if (*npl == pcap) {
                pcap = pcap ? pcap * 2 : 4096;
                oom_place *q = realloc(*pl, (size_t)pcap * sizeof *q);
                if (!q) return n;
                *pl = q;
            }
            (*pl)[*npl].addr = a;
            (*pl)[(*npl)++].site[0] = 0;
        }
    }
    qsort(*pl, (size_t)*npl, sizeof **pl, oom_place_cmp);
    long m = 0;
    for (long i = 0; i < *npl; i++)
        if (!m || (*pl)[i].addr != (*pl)[m - 1].addr) (*pl)[m++] = (*pl)[i];
    *npl = m;
    return n;
}

/* The site of one stack: its first frame with one. */
static const char *oom_stack_site(char *stack, oom_place *pl, long npl) {
    for (char *p = stack, *end; *p; p = end) {
        oom_place key = {strtoul(p, &end, 16), ""};
        if (end == p) break;
        oom_place *hit = bsearch(&key, pl, (size_t)npl, sizeof *pl, oom_place_cmp);
        if (hit && hit->site[0]) return hit->site;
    }
    return "?";
}

/* Print the distinct allocation sites in a HODU_OOM_SITES file (written
 * by this same binary). */
static int oom_sites(const char *path) {
    FILE *fp = fopen(path, "r");
    if (!fp) {
        fprintf(stderr, "oomfail: cannot read %s\n", path);
        return 2;
    }
    char **stacks = NULL;
    oom_place *pl = NULL;
    long npl, n = oom_read_stacks(fp, &stacks, &pl, &npl);
    fclose(fp);
    oom_symbolize(pl, npl);
    const char **sites = malloc((size_t)(n ? n : 1) * sizeof *sites);
    for (long i = 0; sites && i < n; i++) sites[i] = oom_stack_site(stacks[i], pl, npl);
    if (sites) qsort(sites, (size_t)n, sizeof *sites, oom_str_cmp);
    long d = 0;
    for (long i = 0; sites && i < n; i++) {
        if (i && strcmp(sites[i], sites[i - 1]) == 0) continue;
        d++;
        printf("  %s\n", sites[i]);
    }
    printf("%ld failed allocations at %ld distinct sites\n", n, d);
    for (long i = 0; i < n; i++) free(stacks[i]);
    free(stacks);
    free(sites);
    free(pl);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--child") == 0)
        return oom_child(argv[2], strtol(argv[3], NULL, 10));
    if (argc == 2 && strcmp(argv[1], "--vm-new") == 0) return oom_vm_new_sweep();
    if (argc == 3 && strcmp(argv[1], "--sites") == 0) return oom_sites(argv[2]);
    if (argc < 2) {
        fprintf(stderr, "usage: oomfail FILE.hodu... | --vm-new | --sites FILE\n");
        return 2;
    }
    oom_total t = {0};
    for (int i = 1; i < argc; i++) oom_sweep(argv[i], &t);
    if (argc > 2)
        printf("%ld programs, %ld allocations counted, %ld runs, %ld failed an allocation: "
               "%ld out of memory, %ld absorbed; %ld failures\n",
               t.programs, t.count, t.trials, t.injected, t.clean, t.absorbed, t.failures);
    return t.failures ? 1 : 0;
}
