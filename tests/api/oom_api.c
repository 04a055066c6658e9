/* Allocation failures through the embedding API: a host program that does
 * what hosts do (make a VM, hand it tensors and numbers, run source, call
 * functions, methods and a compiled function, read globals and
 * non-contiguous tensors, load and run a saved script, train with a script
 * that keeps state and set that state), run once to count its allocations,
 * then again with the Nth failing, for every N (a sample past
 * HODU_OOM_MAX when set: all of the first half, then an even spread).
 *
 * Each call either succeeds with exactly the right result (the failure was
 * absorbed) or fails with HODU_ERROR_MEMORY and "out of memory" in the
 * message; the scenario stops at the first failed call. Then, with
 * nothing failing, the same VM must run a program and a call, and freeing
 * it must give back every byte it took. A crash is reported with its N.
 *
 * usage: oom_api FILE.hoduscript (the API tests' predict script)
 * environment: HODU_OOM_MAX=K (0: every N), HODU_OOM_N=N (that one only) */
#define _POSIX_C_SOURCE 200809L
#include "api_test.h"

#include <signal.h>
#include <stdint.h>
#include <unistd.h>

static const char *script_path;
static char state_path[64];
static volatile long current_n = -1; /* the N running, for a crash report */

/* ---- naming N when the run dies ---- */

void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static void say_n(void) {
    char buf[64];
    int k = snprintf(buf, sizeof buf, "oom_api: died at N=%ld\n", (long)current_n);
    if (k > 0 && write(2, buf, (size_t)k) < 0) return;
}

static void on_signal(int sig) {
    say_n();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_crash_report(void) {
    if (__sanitizer_set_death_callback) {
        __sanitizer_set_death_callback(say_n); /* the sanitizers report, then this */
        return;
    }
    signal(SIGSEGV, on_signal);
    signal(SIGBUS, on_signal);
    signal(SIGABRT, on_signal);
    signal(SIGFPE, on_signal);
}

/* ---- the scenario ---- */

typedef struct scen {
    counting_alloc ca;
    hodu_vm *vm;
    hodu_tensor *h[32]; /* every handle, released at the end */
    int nh;
    hodu_script *s[2];
    char out[1024];
    size_t len;
    float x[2][2];
    float xin[4][3];
    double z[3];
    long n;       /* the failing allocation (from 1), 0: none */
    int problems; /* wrong outcomes seen */
} scen;

static void sink(void *ud, const char *s, size_t n) {
    scen *sc = ud;
    if (sc->len + n >= sizeof sc->out) n = sizeof sc->out - 1 - sc->len;
    memcpy(sc->out + sc->len, s, n);
    sc->len += n;
    sc->out[sc->len] = 0;
}

static hodu_tensor *keep(scen *sc, hodu_tensor *t) {
    if (t) sc->h[sc->nh++] = t;
    return t;
}

static void problem(scen *sc, int line, const char *what) {
    sc->problems++;
    fprintf(stderr, "oom_api.c:%d: N=%ld: %s: %s (%s)\n", line, sc->n, what,
            sc->vm ? hodu_error_message(sc->vm) : "no VM",
            sc->vm ? hodu_status_name(hodu_error_status(sc->vm)) : "-");
}

/* A call failed: it must be for memory. Returns 0 (the scenario stops). */
static int failed(scen *sc, int line) {
    const char *msg = hodu_error_message(sc->vm);
    if (!sc->ca.failures)
        problem(sc, line, "a call failed with nothing failing");
    else if (hodu_error_status(sc->vm) != HODU_ERROR_MEMORY || !strstr(msg, "out of memory"))
        problem(sc, line, "a failure other than out of memory");
    return 0;
}

/* Stop the scenario unless the call succeeded; a success must be right. */
#define STEP(ok)                                                                                   \
    do {                                                                                           \
        if (!(ok)) return failed(sc, __LINE__);                                                    \
    } while (0)
#define RIGHT(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) problem(sc, __LINE__, "a wrong result: " #cond);                              \
    } while (0)

static int floats_are(const float *got, hodu_tensor *t, const float *want, int n) {
    if (hodu_tensor_numel(t) != n || hodu_tensor_dtype(t) != HODU_F32) return 0;
    for (int i = 0; i < n; i++)
        if (got[i] - want[i] > 1e-5f || want[i] - got[i] > 1e-5f) return 0;
    return 1;
}

/* t's data (which may need a copy: a step that can fail) must be want. */
#define FLOATS(t, n, ...)                                                                          \
    do {                                                                                           \
        const float *got_ = hodu_tensor_data(t);                                                   \
        STEP(got_);                                                                                \
        RIGHT(floats_are(got_, t, (const float[]){__VA_ARGS__}, n));                               \
    } while (0)

static const char program[] =
    "let y = relu(x @ x.T) + k\n"
    "let names = {\"a\": [1, 2], \"b\": \"text\"}\n"
    "fn f(t) { return sum(t * 2, axis = 0) }\n"
    "class Lin { fn init(self) { self.w = ones([2, 2]) } fn forward(self, t) { return t @ self.w } "
    "}\n"
    "let model = Lin()\n"
    "compiled fn g(t) { return relu(t) * 2 + 1 }\n"
    "print(\"ready\", names[\"b\"], len(names[\"a\"]))\n";

/* Globals in, a program, calls, globals out (x = [[1, 2], [3, 4]]). */
static int scen_program(scen *sc) {
    hodu_vm *vm = sc->vm;
    int64_t s2[2] = {2, 2};
    hodu_tensor *x = keep(sc, hodu_tensor_wrap(vm, HODU_F32, s2, 2, sc->x)), *r = NULL;
    STEP(x);
    STEP(hodu_set_global(vm, "x", x) == HODU_OK);
    STEP(hodu_set_global_number(vm, "k", 3) == HODU_OK);
    STEP(hodu_eval(vm, program, "<program>") == HODU_OK);
    RIGHT(strcmp(sc->out, "ready text 2\n") == 0);
    STEP(hodu_call(vm, "f", &x, 1, &r) == HODU_OK);
    keep(sc, r);
    FLOATS(r, 2, 8, 12);
    STEP(hodu_call(vm, "model.forward", &x, 1, &r) == HODU_OK);
    keep(sc, r);
    FLOATS(r, 4, 3, 3, 7, 7);
    for (int i = 0; i < 2; i++) { /* the trace, then the compiled graph */
        STEP(hodu_call(vm, "g", &x, 1, &r) == HODU_OK);
        keep(sc, r);
        FLOATS(r, 4, 3, 5, 7, 9);
    }
    hodu_tensor *y = keep(sc, hodu_get_global_tensor(vm, "y"));
    STEP(y);
    FLOATS(y, 4, 8, 14, 14, 28);
    double k = 0;
    STEP(hodu_get_global_number(vm, "k", &k) == HODU_OK);
    RIGHT(k == 3);
    return 1;
}

/* Tensors Hodu owns, a transposed view read through a copy, a runtime
 * error that must keep its status. */
static int scen_tensors(scen *sc) {
    hodu_vm *vm = sc->vm;
    int64_t s1[1] = {3};
    hodu_tensor *z = keep(sc, hodu_tensor_new(vm, HODU_F64, s1, 1));
    STEP(z);
    double *zd = hodu_tensor_data(z);
    STEP(zd);
    for (int i = 0; i < 3; i++) zd[i] = i + 1;
    STEP(hodu_set_global(vm, "z", z) == HODU_OK);
    STEP(hodu_eval(vm, "let zz = z * 2\nlet xt = x.T", "<tensors>") == HODU_OK);
    hodu_tensor *zz = keep(sc, hodu_get_global_tensor(vm, "zz"));
    STEP(zz);
    const double *zzd = hodu_tensor_data(zz);
    STEP(zzd);
    RIGHT(zzd[0] == 2 && zzd[1] == 4 && zzd[2] == 6);
    hodu_tensor *xt = keep(sc, hodu_get_global_tensor(vm, "xt"));
    STEP(xt);
    FLOATS(xt, 4, 1, 3, 2, 4);
    hodu_status st = hodu_eval(vm, "let bad = [1, 2][5]", "<bad>");
    if (st == HODU_ERROR_MEMORY) return failed(sc, __LINE__);
    RIGHT(st == HODU_ERROR_RUNTIME && strstr(hodu_error_message(vm), "<bad>:1:") != NULL);
    return 1;
}

/* The saved predict script: y = relu(x @ w + b). */
static int scen_script(scen *sc) {
    static const float w[3][2] = {{0.1f, -0.2f}, {0.2f, 0.1f}, {0.3f, 0.4f}};
    static const float b[2] = {0.5f, -1.0f};
    hodu_vm *vm = sc->vm;
    hodu_script *s = sc->s[0] = hodu_script_load(vm, script_path);
    STEP(s);
    int64_t sx[2] = {4, 3};
    hodu_tensor *tx = keep(sc, hodu_tensor_wrap(vm, HODU_F32, sx, 2, sc->xin));
    STEP(tx);
    STEP(hodu_script_set_input(s, "x", tx) == HODU_OK);
    STEP(hodu_script_run(s) == HODU_OK);
    hodu_tensor *y = keep(sc, hodu_script_output(s, "y"));
    STEP(y);
    float want[4][2];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++) {
            float v = b[j];
            for (int k = 0; k < 3; k++) v += sc->xin[i][k] * w[k][j];
            want[i][j] = v > 0 ? v : 0;
        }
    const float *got = hodu_tensor_data(y);
    STEP(got);
    RIGHT(floats_are(got, y, &want[0][0], 8));
    return 1;
}

static const char train_src[] =
    "let xs = tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 1.0]])\n"
    "let ys = xs @ tensor([[2.0], [-1.0]]) + 0.5\n"
    "class Model {\n"
    "    fn init(self) { self.w = param(zeros([2, 1])); self.b = param(zeros([1])) }\n"
    "    fn forward(self, x) { return x @ self.w + self.b }\n"
    "}\n"
    "fn step(m, x, y) {\n"
    "    let loss = mean((m(x) - y) ** 2)\n"
    "    loss.backward()\n"
    "    no_grad {\n"
    "        m.w[...] = m.w - 0.1 * m.w.grad\n"
    "        m.b[...] = m.b - 0.1 * m.b.grad\n"
    "    }\n"
    "    zero_grad([m.w, m.b])\n"
    "    return loss\n"
    "}\n"
    "let model = Model()\n"
    "let s = script(\"fit\") {\n"
    "    let x = input(\"x\", [4, 2])\n"
    "    let y = input(\"y\", [4, 1])\n"
    "    output(\"loss\", step(model, x, y))\n"
    "}\n";

/* A script with state, made by the program, saved, loaded by the host,
 * run twice, its state read and set. One step from zeros: w gets
 * -0.1 * d/dw mean((xw + b - y)^2) = 0.05 * sum(y_i x_i) = (0.55, 0.225)
 * and b gets 0.05 * sum(y_i) = 0.35, for y = (2.5, -0.5, 1.5, 3.5). */
static int scen_state(scen *sc) {
    hodu_vm *vm = sc->vm;
    char save[128];
    snprintf(save, sizeof save, "s.save(\"%s\")", state_path);
    STEP(hodu_eval(vm, train_src, "<train>") == HODU_OK);
    STEP(hodu_eval(vm, save, "<save>") == HODU_OK);
    hodu_script *s = sc->s[1] = hodu_script_load(vm, state_path);
    STEP(s);
    hodu_tensor *xs = keep(sc, hodu_get_global_tensor(vm, "xs"));
    STEP(xs);
    hodu_tensor *ys = keep(sc, hodu_get_global_tensor(vm, "ys"));
    STEP(ys);
    STEP(hodu_script_set_input(s, "x", xs) == HODU_OK);
    STEP(hodu_script_set_input(s, "y", ys) == HODU_OK);
    STEP(hodu_script_run(s) == HODU_OK);
    hodu_tensor *w = keep(sc, hodu_script_state(s, "model.w"));
    STEP(w);
    FLOATS(w, 2, 0.55f, 0.225f);
    float zw[2] = {0, 0};
    int64_t sw[2] = {2, 1};
    hodu_tensor *tw = keep(sc, hodu_tensor_wrap(vm, HODU_F32, sw, 2, zw));
    STEP(tw);
    STEP(hodu_script_set_state(s, "model.w", tw) == HODU_OK);
    STEP(hodu_script_run(s) == HODU_OK);
    hodu_tensor *loss = keep(sc, hodu_script_output(s, "loss"));
    STEP(loss);
    /* w back at zeros, b still 0.35: the loss of the forward pass is
     * mean((0.35 - y)^2) */
    FLOATS(loss, 1, (2.15f * 2.15f + 0.85f * 0.85f + 1.15f * 1.15f + 3.15f * 3.15f) / 4);
    return 1;
}

static void scen_run(scen *sc) {
    hodu_options o;
    hodu_options_init(&o);
    o.alloc = counting_alloc_fn;
    o.alloc_ud = &sc->ca;
    o.write = sink;
    o.write_ud = sc;
    o.num_threads = 1;
    sc->vm = hodu_vm_new(&o);
    if (!sc->vm) {
        if (!sc->ca.failures) problem(sc, __LINE__, "hodu_vm_new failed with nothing failing");
        return;
    }
    if (scen_program(sc) && scen_tensors(sc) && scen_script(sc)) scen_state(sc);
}

/* With nothing failing: the VM still runs a program and a call. */
static void scen_after(scen *sc) {
    sc->ca.fail_at = -1;
    if (!sc->vm) return;
    sc->len = 0;
    sc->out[0] = 0;
    if (hodu_eval(sc->vm, "print(sum(ones([3])))\nfn after(t) { return t * 3 }", "<check>") !=
            HODU_OK ||
        strcmp(sc->out, "tensor(3.)\n") != 0)
        problem(sc, __LINE__, "the VM does not run a program after the failure");
    float v[2] = {1, 2};
    int64_t s1[1] = {2};
    hodu_tensor *t = hodu_tensor_wrap(sc->vm, HODU_F32, s1, 1, v), *r = NULL;
    const float *got =
        hodu_call(sc->vm, "after", &t, 1, &r) == HODU_OK ? hodu_tensor_data(r) : NULL;
    if (!got || !floats_are(got, r, (const float[]){3, 6}, 2))
        problem(sc, __LINE__, "the VM does not run a call after the failure");
    hodu_tensor_release(t);
    hodu_tensor_release(r);
}

static void scen_free(scen *sc) {
    for (int i = 0; i < sc->nh; i++) hodu_tensor_release(sc->h[i]);
    hodu_script_free(sc->s[0]);
    hodu_script_free(sc->s[1]);
    hodu_vm_free(sc->vm);
    if (sc->ca.outstanding) {
        char msg[96];
        snprintf(msg, sizeof msg, "%zu bytes not given back", sc->ca.outstanding);
        sc->vm = NULL;
        problem(sc, __LINE__, msg);
    }
}

/* One run with allocation n failing (0: none); returns the allocations it
 * made and adds its problems to *problems. */
static long scen_trial(long n, int *problems) {
    static const float x[2][2] = {{1, 2}, {3, 4}};
    static const float xin[4][3] = {{1, 2, 3}, {4, 5, 6}, {-1, 0, 1}, {0.5f, 0.25f, 0}};
    scen sc;
    memset(&sc, 0, sizeof sc);
    counting_alloc_init(&sc.ca);
    memcpy(sc.x, x, sizeof x);
    memcpy(sc.xin, xin, sizeof xin);
    sc.n = n;
    sc.ca.fail_at = n - 1; /* counting_alloc counts from 0 */
    current_n = n;
    scen_run(&sc);
    long calls = sc.ca.calls;
    scen_after(&sc);
    scen_free(&sc);
    *problems += sc.problems;
    return calls;
}

static long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: oom_api FILE.hoduscript\n");
        return 2;
    }
    script_path = argv[1];
    snprintf(state_path, sizeof state_path, "/tmp/hodu_oom_api_%ld.hoduscript", (long)getpid());
    install_crash_report();
    int problems = 0;
    long count = scen_trial(0, &problems), only = env_long("HODU_OOM_N", 0);
    long max = env_long("HODU_OOM_MAX", 0), runs = 0;
    if (problems) fprintf(stderr, "oom_api: the scenario fails with nothing failing\n");
    /* all of the first max/2, then max/2 more evenly spread */
    long head = max <= 0 || count <= max ? count : max / 2, rest = count > head ? max - head : 0;
    double stride = rest ? (double)(count - head) / (double)rest : 1;
    for (long i = 0; i < head + rest && problems < 10; i++) {
        long n = i < head ? i + 1 : head + 1 + (long)(stride * (double)(i - head));
        if (only) {
            if (i) break;
            n = only;
        }
        scen_trial(n, &problems);
        runs++;
    }
    remove(state_path);
    printf("oom_api: %ld allocations, %ld runs with one failing\n", count, runs);
    CHECK_MSG(problems == 0, "%d problems", problems);
    TEST_END();
}
