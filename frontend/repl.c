/* The REPL: libedit for line editing, history and completion; the VM for
 * everything else. A statement spans lines while the parser reports the
 * input incomplete. Ctrl-C is a SIGINT handler: at the prompt it drops
 * the current input, during evaluation it asks the VM to stop. */
#include "repl.h"
#include "compiled.h"

#include <errno.h>
#include <histedit.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

typedef struct repl {
    hd_vm *vm;
    EditLine *el;
    History *hist;
    char *histfile; /* NULL: no history file */
    char *buf;      /* the statement being typed, over several lines */
    size_t len, cap;
} repl;

/* The signal handler's only state (one REPL per process). */
static hd_vm *volatile g_vm;
static volatile sig_atomic_t g_sigint, g_evaluating;

static void on_sigint(int sig) {
    (void)sig;
    g_sigint = 1;
    if (g_evaluating && g_vm) hd_vm_interrupt(g_vm);
}

static void install_sigint(struct sigaction *old) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a read at the prompt returns EINTR */
    sigaction(SIGINT, &sa, old);
}

/* ---- input ---- */

/* libedit's character reader, replaced so that Ctrl-C ends el_gets at
 * once; decodes UTF-8. */
static int read_char(EditLine *el, wchar_t *wc) {
    (void)el;
    unsigned char b[4];
    int need = 1;
    for (int got = 0; got < need;) {
        ssize_t n = read(STDIN_FILENO, b + got, 1);
        if (n == 0) return 0;
        if (n < 0) {
            if (errno == EINTR && !g_sigint) continue;
            return -1;
        }
        if (got == 0)
            need = b[0] < 0x80 ? 1 : b[0] >= 0xf0 ? 4 : b[0] >= 0xe0 ? 3 : b[0] >= 0xc0 ? 2 : 1;
        got++;
    }
    static const unsigned char mask[5] = {0, 0x7f, 0x1f, 0x0f, 0x07};
    wchar_t c = b[0] & mask[need];
    for (int i = 1; i < need; i++) c = (c << 6) | (b[i] & 0x3f);
    *wc = c;
    return 1;
}

static int buf_add(repl *r, const char *s, size_t n) {
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        while (cap < r->len + n + 1) cap *= 2;
        char *p = realloc(r->buf, cap);
        if (!p) return -1;
        r->buf = p;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, s, n);
    r->len += n;
    r->buf[r->len] = 0;
    return 0;
}

static int continuing; /* prompt state for the prompt callback */

static char *prompt(EditLine *el) {
    (void)el;
    return continuing ? "... " : ">>> ";
}

/* ---- completion ---- */

typedef struct cands {
    const char *prefix;
    size_t plen;
    char **items;
    int n, cap;
} cands;

static void cand_add(const char *name, void *ud) {
    cands *c = ud;
    if (strncmp(name, c->prefix, c->plen) != 0) return;
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->items[i], name) == 0) return;
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 32;
        char **p = realloc(c->items, (size_t)cap * sizeof *p);
        if (!p) return;
        c->items = p;
        c->cap = cap;
    }
    char *s = strdup(name);
    if (s) c->items[c->n++] = s;
}

static int is_ident(int ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Fill c with the completions of the word before the cursor: a global
 * name, or a member after `name.`. */
static void collect(repl *r, const char *start, const char *cursor, cands *c) {
    const char *w = cursor;
    while (w > start && is_ident((unsigned char)w[-1])) w--;
    c->prefix = w;
    c->plen = (size_t)(cursor - w);
    if (w > start && w[-1] == '.') {
        const char *o = w - 1;
        while (o > start && is_ident((unsigned char)o[-1])) o--;
        char name[128];
        size_t n = (size_t)(w - 1 - o);
        if (n == 0 || n >= sizeof name) return;
        memcpy(name, o, n);
        name[n] = 0;
        hd_value *v = hd_vm_get_global(r->vm, name);
        if (v) hd_vm_member_names(r->vm, *v, cand_add, c);
        return;
    }
    hd_vm_global_names(r->vm, cand_add, c);
}

static unsigned char complete(EditLine *el, int ch) {
    (void)ch;
    repl *r;
    el_get(el, EL_CLIENTDATA, &r);
    const LineInfo *li = el_line(el);
    cands c;
    memset(&c, 0, sizeof c);
    collect(r, li->buffer, li->cursor, &c);
    unsigned char res = CC_ERROR;
    if (c.n > 0) {
        qsort(c.items, (size_t)c.n, sizeof *c.items, cmp_str);
        size_t common = strlen(c.items[0]);
        for (int i = 1; i < c.n; i++) {
            size_t k = 0;
            while (k < common && c.items[i][k] == c.items[0][k]) k++;
            common = k;
        }
        if (common > c.plen) {
            char *ins = strndup(c.items[0] + c.plen, common - c.plen);
            if (ins && el_insertstr(el, ins) == 0) res = CC_REFRESH;
            free(ins);
        } else if (c.n > 1) {
            fputc('\n', stdout);
            for (int i = 0; i < c.n; i++) fprintf(stdout, "%s%s", i ? "  " : "", c.items[i]);
            fputc('\n', stdout);
            res = CC_REDISPLAY;
        }
        if (c.n == 1 && common == c.plen) res = CC_NORM;
    }
    for (int i = 0; i < c.n; i++) free(c.items[i]);
    free(c.items);
    return res;
}

/* ---- evaluation ---- */

static void report_error(repl *r) {
    const char *t = hd_vm_error_text(r->vm);
    if (t && *t) {
        fputs(t, stderr);
        if (t[strlen(t) - 1] != '\n') fputc('\n', stderr);
    }
    hd_vm_clear_error(r->vm);
}

/* Run source; *incomplete tells whether more lines are wanted. */
static hd_status run(repl *r, const char *src, int repl_mode, int *incomplete) {
    hd_eval_opts opts = {repl_mode, 0};
    int inc = 0;
    g_sigint = 0;
    g_evaluating = 1;
    hd_status st = hd_vm_eval(r->vm, src, strlen(src), "<stdin>", &opts, &inc);
    g_evaluating = 0;
    fflush(stdout);
    if (incomplete) *incomplete = st == HD_ERR_SYNTAX && inc;
    if (st != HD_OK && !(incomplete && *incomplete))
        report_error(r);
    else if (st != HD_OK)
        hd_vm_clear_error(r->vm);
    return st;
}

static const char help_text[] =
    "Type Hodu statements; an open bracket or block continues on the next line.\n"
    "  :help        this text\n"
    "  :type EXPR   the type of EXPR (tensors: shape, dtype, device); stores it in _\n"
    "  :time EXPR   run EXPR and print how long it took\n"
    "  :ir          the graph compiled last (compiled fn, compiled { }, scripts)\n"
    "  :quit        leave (Ctrl-D too)\n"
    "Tab completes names and members (x.<Tab>). Ctrl-C cancels the line or stops a\n"
    "running computation. History is kept in ~/.hodu_history.\n";

static void cmd_type(repl *r, const char *expr) {
    size_t n = strlen(expr) + 32;
    char *src = malloc(n);
    if (!src) return;
    snprintf(src, n, "%s_ = (%s)\n", hd_vm_get_global(r->vm, "_") ? "" : "let ", expr);
    if (run(r, src, 0, NULL) == HD_OK) {
        hd_value *v = hd_vm_get_global(r->vm, "_");
        if (v && v->type == HD_V_TENSOR) {
            const hd_tensor *t = v->as.t;
            char s[128];
            printf("tensor(shape=%s, dtype=%s, device=%s)\n",
                   hd_shape_str(t->shape, t->ndim, s, sizeof s), hd_dtype_name(t->dtype),
                   t->storage && !hd_tensor_is_cpu(t) ? "cuda" : "cpu");
        } else if (v) {
            printf("%s\n", hd_value_type_name(*v));
        }
    }
    free(src);
}

static void cmd_time(repl *r, const char *expr) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    hd_status st = run(r, expr, 1, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    if (st == HD_OK) printf("time: %.3f ms\n", ms);
}

/* A `:command` line; returns 1 to quit. */
static int command(repl *r, char *line) {
    char *arg = line + 1;
    while (*arg && *arg != ' ' && *arg != '\t') arg++;
    size_t nlen = (size_t)(arg - line - 1);
    while (*arg == ' ' || *arg == '\t') arg++;
#define IS(name) (nlen == strlen(name) && strncmp(line + 1, name, nlen) == 0)
    if (IS("quit") || IS("q") || IS("exit")) return 1;
    if (IS("help") || IS("h"))
        fputs(help_text, stdout);
    else if ((IS("type") || IS("t")) && *arg)
        cmd_type(r, arg);
    else if (IS("time") && *arg)
        cmd_time(r, arg);
    else if (IS("ir"))
        fputs(hd_compiled_last_ir(r->vm) ? hd_compiled_last_ir(r->vm) : "no compiled graph yet\n",
              stdout);
    else
        fprintf(stderr, "unknown command %s (try :help)\n", line);
#undef IS
    return 0;
}

/* ---- the loop ---- */

static void history_open(repl *r) {
    HistEvent ev;
    r->hist = history_init();
    if (!r->hist) return;
    history(r->hist, &ev, H_SETSIZE, 1000);
    history(r->hist, &ev, H_SETUNIQUE, 1);
    const char *home = getenv("HOME");
    if (home && *home) {
        size_t n = strlen(home) + 32;
        r->histfile = malloc(n);
        if (r->histfile) {
            snprintf(r->histfile, n, "%s/.hodu_history", home);
            history(r->hist, &ev, H_LOAD, r->histfile);
        }
    }
}

static void history_add(repl *r, const char *line) {
    HistEvent ev;
    if (!r->hist || !*line) return;
    history(r->hist, &ev, H_ENTER, line);
    if (r->histfile) history(r->hist, &ev, H_SAVE, r->histfile);
}

static EditLine *editor_open(repl *r) {
    EditLine *el = el_init("hodu", stdin, stdout, stderr);
    if (!el) return NULL;
    el_set(el, EL_CLIENTDATA, r);
    el_set(el, EL_PROMPT, prompt);
    el_set(el, EL_EDITOR, "emacs");
    el_set(el, EL_GETCFN, read_char);
    if (r->hist) el_set(el, EL_HIST, history, r->hist);
    el_set(el, EL_ADDFN, "hodu-complete", "complete a name or member", complete);
    el_set(el, EL_BIND, "^I", "hodu-complete", NULL);
    el_source(el, NULL); /* ~/.editrc */
    return el;
}

/* One line from the editor: the line with its newline stripped (in a
 * static buffer of libedit), NULL at end of input; *cancelled on Ctrl-C. */
static const char *get_line(repl *r, int *cancelled) {
    int count = 0;
    g_sigint = 0;
    fflush(stdout);
    const char *line = el_gets(r->el, &count);
    *cancelled = g_sigint != 0;
    if (*cancelled) {
        g_sigint = 0;
        fputs("^C\n", stdout);
        return "";
    }
    return count > 0 ? line : NULL;
}

static int step(repl *r, const char *line) {
    char *copy = strdup(line);
    if (!copy) return 0;
    size_t n = strlen(copy);
    while (n && (copy[n - 1] == '\n' || copy[n - 1] == '\r')) copy[--n] = 0;
    history_add(r, copy);
    int quit = 0;
    if (r->len == 0 && copy[0] == ':') {
        quit = command(r, copy);
    } else if (buf_add(r, copy, n) == 0 && buf_add(r, "\n", 1) == 0) {
        int inc = 0;
        run(r, r->buf, 1, &inc);
        continuing = inc;
        if (!inc) r->len = 0;
    }
    free(copy);
    return quit;
}

#if defined(__SANITIZE_ADDRESS__)
#define HD_REPL_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HD_REPL_LSAN 1
#endif
#endif
#ifdef HD_REPL_LSAN
/* LeakSanitizer's suppressions for a sanitizer build: libedit keeps the
 * name and help strings that el_set(EL_ADDFN) copies with wcsdup, and
 * el_end never frees them (160 bytes, once, inside libedit). With fast
 * unwinding the stack stops at wcsdup (libedit has no frame pointers). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
    return "leak:el_set\nleak:wcsdup\n";
}
#endif

int hd_repl_run(hd_vm *vm) {
    repl r;
    memset(&r, 0, sizeof r);
    r.vm = vm;
    g_vm = vm;
    struct sigaction old;
    install_sigint(&old);
    history_open(&r);
    r.el = editor_open(&r);
    if (!r.el) {
        fprintf(stderr, "hodu: cannot start the line editor\n");
        return 1;
    }
    printf("Hodu %s. Type :help for help, :quit or Ctrl-D to leave.\n", HODU_VERSION);
    continuing = 0;
    for (;;) {
        int cancelled;
        const char *line = get_line(&r, &cancelled);
        if (cancelled) {
            r.len = 0;
            continuing = 0;
            continue;
        }
        if (!line) {
            fputc('\n', stdout);
            if (!continuing) break;
            /* Ctrl-D on a continuation line drops the statement, as Ctrl-C
             * does; on the first line it leaves (a second end of input,
             * as from a closed terminal, leaves too) */
            r.len = 0;
            continuing = 0;
            continue;
        }
        if (step(&r, line)) break;
    }
    el_end(r.el);
    if (r.hist) history_end(r.hist);
    free(r.histfile);
    free(r.buf);
    sigaction(SIGINT, &old, NULL);
    g_vm = NULL;
    return 0;
}
