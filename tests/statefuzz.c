/* statefuzz: a stateful differential fuzzer for compiled code.
 *
 * Each seed makes a random program: a model object with parameters, a
 * plain tensor field and a number field, a global parameter, an optimizer
 * (none, SGD with or without momentum, Adam, AdamW), and a few compiled
 * functions drawn from a pool (losses with backward() inside, mse and
 * cross_entropy on labels L among them, whole
 * training steps, steps that accumulate gradients, functions that read
 * .grad, write state in place, assign fields, call each other). Between
 * calls the program does what users do eagerly: zero_grad, .grad = none,
 * optimizer steps, eager backward(), writes into parameters, replacing a
 * field or a parameter, changing the batch size, no_grad and grad_context
 * around calls, calls under another strategy (precision "full" for
 * functions without loops or branches, whose variables would change dtype
 * in their first iteration, which compiled code refuses; gradients
 * accumulated over two steps), toggling requires_grad.
 * After every action it prints every
 * tensor the program can reach: parameters, their .grad (none or a
 * tensor), the optimizer's buffers and step count, the fields, the result.
 *
 * The program runs with compiled_diff --explicit: once with HODU_EAGER=1
 * (the reference: compiled code run as plain code) and once per compiler;
 * outputs, errors and exit statuses must agree (numbers within 1e-5
 * relative). With it goes the same program with every tensor made in f64
 * (compiled_diff --f64): a standard output whose numbers differ only as
 * far as f32's own rounding reaches (compiled no further from the f64
 * values than 3 times eager) is printed but not counted. A failing program
 * is kept in the output folder.
 *
 * usage: statefuzz HODU COMPILED_DIFF [-n COUNT] [-s FIRST_SEED] [-o DIR]
 *                  [-p SEED] [COMPILER...]
 *   -p SEED prints that seed's program and exits.
 *   HODU_STATEFUZZ_SECONDS=T: run seeds from FIRST_SEED on for T seconds
 *   (the long mode) instead of COUNT of them. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- a growing text ---- */

typedef struct {
    char *p;
    size_t n, cap;
} sf_buf;

static void sf_put(sf_buf *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (k >= 0 && cap - b->n <= (size_t)k) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            fprintf(stderr, "statefuzz: out of memory\n");
            exit(2);
        }
        b->p = q;
        b->cap = cap;
    }
}

/* ---- random numbers (splitmix64) ---- */

static uint64_t sf_state;

static uint64_t sf_next(void) {
    uint64_t z = (sf_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int sf_pick(int n) {
    return (int)(sf_next() % (uint64_t)n);
}

/* ---- the program ---- */

/* Bodies of compiled functions, each (x, y) -> a tensor or none. LOSS is
 * replaced by the program's loss expression. */
static const char *const sf_bodies[] = {
    /* a loss with backward() inside: gradients accumulate across calls */
    "let l = LOSS\n    l.backward()\n    return l",
    /* a whole training step */
    "opt.zero_grad()\n    let l = LOSS\n    l.backward()\n    opt.step()\n    return l",
    /* a step that does not zero the gradients first */
    "let l = LOSS\n    l.backward()\n    opt.step()\n    return l",
    /* the forward pass only: its result needs gradients */
    "return net(x) * P",
    /* reads .grad: none or a tensor changes what it computes */
    "if net.w1.grad == none { return x.sum() }\n    return (net.w1.grad * 2).sum() + x.sum()",
    /* writes state: a parameter in place, a tensor field assigned */
    "no_grad { P[...] = P * 0.9 + 0.01 }\n    net.scale = net.scale * 0.5 + 0.1\n"
    "    return (x @ net.w1.detach()).sum()",
    /* a number field read and changed */
    "let l = (net(x) * net.k).sum()\n    l.backward()\n    net.k = net.k + 1\n    return l",
    /* gradients of the global parameter, returned */
    "zero_grad([P])\n    let l = (P * x.sum(axis = 0).sum()).sum()\n    l.backward()\n"
    "    return P.grad",
    /* backward() into a gradient that may exist, then a read of it */
    "let l = (P * P).sum() + LOSS\n    l.backward()\n    return P.grad + 0",
    /* non-tensor state written without being read, and a list appended to */
    "net.k = 7\n    net.log.append(1)\n    return x.sum()",
    /* a field replaced by a list made inside, with tensors in it */
    "net.pair = [x.sum(), none, 2]\n    return net.pair[0]",
    /* calls another compiled function */
    "let a = CALLEE(x, y)\n    let b = (P * P * 0.5).sum()\n    b.backward()\n"
    "    return a",
    /* loops (most become one loop node; the others stay unrolled) */
    /* training steps in a loop */
    "let l = none\n    for e in 0..25 {\n        opt.zero_grad()\n        l = LOSS\n"
    "        l.backward()\n        opt.step()\n    }\n    return l",
    /* steps that do not zero the gradients */
    "let l = none\n    for e in 0..25 { l = LOSS; l.backward(); opt.step() }\n    return l",
    /* gradients summed over iterations */
    "for i in 0..30 { let l = LOSS; l.backward() }\n    return P.grad",
    /* a field carried through the iterations */
    "for i in 0..30 { net.scale = net.scale * 0.9 + 0.05 }\n    return net.scale.sum()",
    /* a parameter written in place at every iteration */
    "for i in 0..30 { no_grad { P[...] = P * 0.99 + 0.001 } }\n    return (P * x.sum()).sum()",
    /* a chain that needs gradients through the iterations */
    "let h = x\n    for i in 0..25 { h = tanh(h @ net.w1[:, 0:3]) + 0.1 }\n    return h",
    /* a number changed at every iteration */
    "for i in 0..30 { net.k = net.k + 1; x = x * 1.01 }\n    return x",
    /* the loop variable read */
    "let s = x.sum()\n    for i in 0..30 { s = s + i * 0.01 }\n    return s",
    /* nested loops */
    "let h = x\n    for i in 0..6 {\n        for j in 0..20 { h = h * 0.95 + 0.01 }\n"
    "        h = h - 0.001\n    }\n    return h",
    /* branches on tensor data (conds), alone and inside a loop */
    "let z = x.detach()\n    if z.sum() > 0 { z = z * 2.0 } else { z = z - 1.0 }\n    return z",
    "let z = x.detach()\n    for i in 0..30 { if z.sum() > 1.0 { z = z * 0.5 } else { z = z + 0.3 "
    "} }\n"
    "    return z",
    /* while loops on tensor data, and a for over a count known only at run time */
    "let z = x.detach()\n    while z.abs().max() > 0.5 { z = z * 0.5 }\n    return z",
    "let z = x.detach()\n    let k = (z.abs().sum() * 2.0).to(i64)\n"
    "    for i in 0..k { z = z * 0.9 + 0.01 }\n    return z",
    /* .grad read in the loop */
    "for i in 0..25 {\n        if net.w1.grad == none { x = x * 0.5 } else { x = x + "
    "net.w1.grad.sum() }\n"
    "    }\n    return x",
    /* backward() through a loop (the loop and its gradient are loop nodes) */
    "let h = x\n    for i in 0..20 { h = sigmoid(h @ net.w1[:, 0:3]) * net.b1[0:3] + 0.1 }\n"
    "    let l = (h * h).sum()\n    l.backward()\n    return net.w1.grad",
    /* two carried values and one kept from the last iteration, with the loss */
    "let h = x\n    let c = x * 0.5\n    let o = none\n    for i in 0..20 {\n"
    "        c = c * 0.8 + tanh(h @ net.w1[:, 0:3])\n        h = sigmoid(c) * h\n"
    "        o = h @ net.w1\n    }\n    let l = (o * o).mean() + LOSS\n    l.backward()\n"
    "    return o",
    /* the loop variable as an index (x[i]): an RNN over rows, backward() through it */
    "let xs = ones([24, 1]) * x.mean(axis = 0)\n    let h = net.b1 * 0.0\n"
    "    for i in 0..24 { h = tanh(xs[i] @ net.w1 + h * 0.5) }\n"
    "    let l = (h * h).sum()\n    l.backward()\n    return h",
    /* training steps over minibatches xs[i] */
    "let xs = ones([12, 1, 1]) * x.detach()\n    let l = none\n    for i in 0..12 {\n"
    "        let x = xs[i]\n        opt.zero_grad()\n        l = LOSS\n        l.backward()\n"
    "        opt.step()\n    }\n    return l",
};
#define SF_NBODIES (int)(sizeof sf_bodies / sizeof sf_bodies[0])
#define SF_CALLER  11 /* the body that calls another */

static const char *const sf_forwards[] = {
    "tanh(x @ self.w1 + self.b1)",
    "sigmoid(x @ self.w1) * self.b1 + self.scale",
    "relu(x @ self.w1 + self.b1) * self.scale",
    "exp(-((x @ self.w1) ** 2)) + self.b1 * self.scale",
    "(x @ self.w1 + self.b1) * 0.5",
};

static const char *const sf_losses[] = {
    "mean((net(x) - y) ** 2)",
    "(net(x) * y).sum() * 0.1",
    "mean(abs(net(x) - y)) + (P * net.b1).sum()",
    "mean((net(x) * P - y) ** 2)",
    "mse(net(x), y)",
    "cross_entropy(net(x), L) + (P * net.b1).sum() * 0.1",
};

static const char *const sf_opts[] = {
    "none",
    "optim.SGD(net.parameters(), lr = 0.1)",
    "optim.SGD(net.parameters(), lr = 0.05, momentum = 0.9)",
    "optim.SGD(net.parameters(), lr = 0.05, momentum = 0.5, weight_decay = 0.01, nesterov = true)",
    "optim.Adam(net.parameters(), lr = 0.01)",
    "optim.AdamW(net.parameters(), lr = 0.01, weight_decay = 0.1)",
    "optim.Adagrad(net.parameters(), lr = 0.1, weight_decay = 0.01)",
    "optim.Lion(net.parameters(), lr = 0.01, weight_decay = 0.1)",
    "optim.RMSprop(net.parameters(), lr = 0.01, momentum = 0.5, centered = true)",
};

/* Eager actions between calls (CALL, the call of a compiled function, is
 * filled in). Several weigh more than once. */
static const char *const sf_actions[] = {
    "r = CALL",
    "r = CALL",
    "r = CALL",
    "r = CALL",
    "no_grad { r = CALL }",
    "grad_context { r = CALL }",
    "net.w1.grad = none",
    "if opt != none { opt.zero_grad() }",
    "if opt != none { opt.step() }",
    "el = mean((net(x) - y) ** 2)\nel.backward()",
    "no_grad { net.w1[...] = net.w1 * 0.5 }",
    "no_grad { net.b1[0] = 0.25 }",
    "net.k = net.k + 1",
    "net.scale = randn([4])",
    "x = randn([NB, 3])\ny = randn([NB, 4])\nL = argmax(y, axis = 1)",
    "P.grad = ones([4])",
    "net.w1.requires_grad = not net.w1.requires_grad",
    "if opt != none { opt.lr = opt.lr * 0.5 }",
    "net.w1 = param(randn([3, 4]))",
    "net.log = []",
    "x = param(randn([NB, 3]))\ny = randn([NB, 4])\nL = argmax(y, axis = 1)",
    "if type(r) == \"tensor\" and r.requires_grad { r.sum().backward() }",
    "if type(r) == \"tensor\" and r.requires_grad { r.sum().backward() }",
    "net.pair = none",
    "zero_grad(net.parameters())",
    "with_strategy(strategy.default().with_precision(\"full\")) { r = FLAT }",
    "with_strategy(strategy.default().with_gradient(\"accumulated\", steps = 2)) {\n"
    "    r = CALL\n    if opt != none { opt.step() }\n}",
};
#define SF_NACTIONS (int)(sizeof sf_actions / sizeof sf_actions[0])

static void sf_replace(sf_buf *out, const char *text, const char *key, const char *with) {
    size_t k = strlen(key);
    for (const char *p = text; *p;) {
        const char *q = strstr(p, key);
        if (!q) {
            sf_put(out, "%s", p);
            return;
        }
        sf_put(out, "%.*s%s", (int)(q - p), p, with);
        p = q + k;
    }
}

static void sf_dump_fn(sf_buf *b) {
    /* values in full (tolist: shortest round-trip digits), none as none */
    sf_put(b, "fn T(t) {\n"
              "    if t == none { return none }\n"
              "    if type(t) == \"list\" { let l = []\n for u in t { l.append(T(u)) }\n"
              " return l }\n"
              "    if type(t) != \"tensor\" { return t }\n"
              "    return t.tolist()\n"
              "}\n"
              "fn dump(tag, r) {\n"
              "    print(tag, \"r\", T(r))\n"
              "    print(\"w1\", T(net.w1), T(net.w1.grad), net.w1.requires_grad)\n"
              "    print(\"b1\", T(net.b1), T(net.b1.grad))\n"
              "    print(\"P\", T(P), T(P.grad), \"x\", T(x.grad))\n"
              "    print(\"scale\", T(net.scale), \"k\", net.k, len(net.log), T(net.pair))\n"
              "    if opt != none {\n"
              "        print(\"lr\", opt.lr)\n"
              "        if hasattr(opt, \"bufs\") { print(\"bufs\", T(opt.bufs)) }\n"
              "        if hasattr(opt, \"m\") { print(\"m\", T(opt.m)) }\n"
              "        if hasattr(opt, \"t\") { print(\"t\", T(opt.t)) }\n"
              "        if hasattr(opt, \"v\") { print(\"v\", T(opt.v)) }\n"
              "        if hasattr(opt, \"avg\") { print(\"avg\", T(opt.avg)) }\n"
              "        if hasattr(opt, \"sums\") { print(\"sums\", T(opt.sums)) }\n"
              "        print(\"opt params\", T(opt.params))\n"
              "    }\n"
              "}\n");
}

static void sf_header(sf_buf *b, uint64_t seed) {
    sf_put(b, "# statefuzz seed %llu\nimport optim\nimport strategy\nmanual_seed(%llu)\n",
           (unsigned long long)seed, (unsigned long long)(seed % 1000));
    sf_put(b, "class Net {\n"
              "    fn init(self) {\n"
              "        self.w1 = param(randn([3, 4]) * 0.5)\n"
              "        self.b1 = param(randn([4]) * 0.1)\n"
              "        self.scale = ones([4])\n"
              "        self.k = 1\n"
              "        self.log = []\n"
              "        self.pair = none\n"
              "    }\n"
              "    fn parameters(self) { return [self.w1, self.b1] }\n");
    sf_put(b, "    fn forward(self, x) { return %s }\n}\n",
           sf_forwards[sf_pick((int)(sizeof sf_forwards / sizeof *sf_forwards))]);
    sf_put(b, "let net = Net()\nlet P = param(randn([4]))\n");
    sf_put(b, "let opt = %s\n", sf_opts[sf_pick((int)(sizeof sf_opts / sizeof *sf_opts))]);
    sf_put(b, "let x = randn([5, 3])\nlet y = randn([5, 4])\nlet L = argmax(y, axis = 1)\n"
              "let r = none\nlet el = none\n");
}

/* One compiled function named f<i>; callee: the name of an earlier one. */
static int sf_function(sf_buf *b, int i, int has_opt, const char *loss, int prev) {
    int k;
    do k = sf_pick(SF_NBODIES);
    while ((!has_opt && strstr(sf_bodies[k], "opt.")) || (k == SF_CALLER && prev < 0));
    char callee[16] = "";
    if (k == SF_CALLER) snprintf(callee, sizeof callee, "f%d", prev);
    sf_buf t = {0}, u = {0};
    sf_replace(&t, sf_bodies[k], "LOSS", loss);
    sf_replace(&u, t.p ? t.p : "", "CALLEE", callee);
    sf_put(b, "compiled fn f%d(x, y) {\n    %s\n}\n", i, u.p ? u.p : "");
    free(t.p);
    free(u.p);
    return k;
}

/* Whether body k has a loop or a branch (or calls one that may). */
static int sf_body_rolls(int k) {
    const char *t = sf_bodies[k];
    return strstr(t, "for ") || strstr(t, "while ") || strstr(t, "if ") || strstr(t, "CALLEE");
}

static void sf_program(sf_buf *b, uint64_t seed) {
    sf_state = seed * 0x2545f4914f6cdd1dull + 1;
    sf_header(b, seed);
    int has_opt = !strstr(b->p, "let opt = none");
    const char *loss = sf_losses[sf_pick((int)(sizeof sf_losses / sizeof *sf_losses))];
    int nf = 2 + sf_pick(3), flat = -1;
    for (int i = 0; i < nf; i++)
        if (!sf_body_rolls(sf_function(b, i, has_opt, loss, i ? sf_pick(i) : -1))) flat = i;
    sf_dump_fn(b);
    int nact = 10 + sf_pick(15);
    for (int a = 0; a < nact; a++) {
        const char *act = sf_actions[sf_pick(SF_NACTIONS)];
        if (flat < 0 && strstr(act, "FLAT")) act = "r = CALL";
        char call[32], flatcall[32], nb[8];
        snprintf(call, sizeof call, "f%d(x, y)", sf_pick(nf));
        snprintf(flatcall, sizeof flatcall, "f%d(x, y)", flat);
        snprintf(nb, sizeof nb, "%d", 1 + sf_pick(6));
        sf_buf t = {0}, u = {0};
        sf_replace(&t, act, "CALL", call);
        sf_replace(&u, t.p, "FLAT", flatcall);
        sf_replace(b, u.p, "NB", nb);
        sf_put(b, "\ndump(%d, r)\n", a);
        free(t.p);
        free(u.p);
    }
}

/* The program with its tensors made in f64: `, dtype = f64` added to every
 * randn([...]) and ones([...]) (the only constructors the programs use;
 * the rest follows their dtype). */
static void sf_to_f64(sf_buf *out, const char *text) {
    for (const char *p = text; *p;) {
        const char *q = strstr(p, "randn(["), *o = strstr(p, "ones([");
        if (!q || (o && o < q)) q = o;
        const char *end = q ? strstr(q, "])") : NULL;
        if (!end) {
            sf_put(out, "%s", p);
            return;
        }
        sf_put(out, "%.*s, dtype = f64)", (int)(end + 1 - p), p);
        p = end + 2;
    }
}

/* ---- running ---- */

static int sf_run_diff(const char *diff, const char *hodu, const char *file, const char *file64,
                       char **compilers, int ncomp) {
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        char *argv[40];
        int a = 0;
        argv[a++] = (char *)diff;
        argv[a++] = "--explicit";
        argv[a++] = "--f64";
        argv[a++] = (char *)file64;
        argv[a++] = (char *)hodu;
        argv[a++] = (char *)file;
        for (int i = 0; i < ncomp && a < 39; i++) argv[a++] = compilers[i];
        argv[a] = NULL;
        execv(diff, argv);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) return 2;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

static int sf_write(const char *path, const sf_buf *b) {
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    fwrite(b->p, 1, b->n, f);
    return fclose(f) != 0;
}

static double sf_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: statefuzz HODU COMPILED_DIFF [-n COUNT] [-s FIRST_SEED] [-o DIR] "
                        "[-p SEED] [COMPILER...]\n");
        return 2;
    }
    const char *hodu = argv[1], *diff = argv[2], *dir = "/tmp";
    long count = 100;
    uint64_t first = 1;
    char *compilers[32];
    int ncomp = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            count = atol(argv[++i]);
        } else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            first = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strcmp(argv[i], "-p") && i + 1 < argc) {
            sf_buf b = {0};
            sf_program(&b, strtoull(argv[++i], NULL, 10));
            fputs(b.p, stdout);
            free(b.p);
            return 0;
        } else if (ncomp < 32) {
            compilers[ncomp++] = argv[i];
        }
    }
    const char *secs = getenv("HODU_STATEFUZZ_SECONDS");
    double until = secs && *secs ? sf_now() + atof(secs) : 0;
    char path[4096], path64[4096];
    snprintf(path, sizeof path, "%s/statefuzz_%d.hodu", dir, (int)getpid());
    snprintf(path64, sizeof path64, "%s/statefuzz_%d_f64.hodu", dir, (int)getpid());
    long ran = 0, failed = 0;
    for (uint64_t seed = first;; seed++) {
        if (until ? sf_now() >= until : ran >= count) break;
        sf_buf b = {0}, b64 = {0};
        sf_program(&b, seed);
        sf_to_f64(&b64, b.p);
        if (sf_write(path, &b) || sf_write(path64, &b64)) {
            fprintf(stderr, "statefuzz: cannot write %s\n", path);
            return 2;
        }
        int rc = sf_run_diff(diff, hodu, path, path64, compilers, ncomp);
        ran++;
        if (rc) { /* kept with its f64 twin, for compiled_diff --f64 */
            char keep[4096];
            snprintf(keep, sizeof keep, "%s/statefuzz_fail_%llu_f64.hodu", dir,
                     (unsigned long long)seed);
            sf_write(keep, &b64);
            snprintf(keep, sizeof keep, "%s/statefuzz_fail_%llu.hodu", dir,
                     (unsigned long long)seed);
            sf_write(keep, &b);
            fprintf(stderr, "statefuzz: seed %llu differs (kept as %s)\n", (unsigned long long)seed,
                    keep);
            failed++;
        }
        free(b.p);
        free(b64.p);
    }
    unlink(path);
    unlink(path64);
    printf("statefuzz: %ld programs, %ld differ\n", ran, failed);
    return failed ? 1 : 0;
}
