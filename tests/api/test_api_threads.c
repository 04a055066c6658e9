/* Several VMs in one process: 4 threads, each with its own VM, evaluating,
 * wrapping its own arrays, setting globals and calling functions at the
 * same time; then one thread interrupting another's endless loop. Run
 * under helgrind or ThreadSanitizer to find shared state. */
#include "api_test.h"

#include <pthread.h>
#include <time.h>

#define NTHREADS 4

static int iterations(void) {
    return getenv("HODU_API_TEST_SLOW") ? 20 : 200;
}

typedef struct worker {
    int id;
    int failures;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    hodu_options o;
    hodu_options_init(&o);
    o.num_threads = 1;
    o.allow_io = 0;
    o.memory_limit = (size_t)64 << 20;
    hodu_vm *vm = hodu_vm_new(&o);
    if (!vm) {
        w->failures++;
        return NULL;
    }
    char src[256];
    snprintf(src, sizeof src,
             "let k = %d\nfn affine(x, w) { return relu(x @ w) + k }\n"
             "fn norm(x) { return sqrt(sum(x * x)).item() }",
             w->id);
    if (hodu_eval(vm, src, "worker") != HODU_OK) w->failures++;
    float x[2 * 3], wt[3 * 2];
    int64_t xs[2] = {2, 3}, ws[2] = {3, 2};
    for (int it = 0; it < iterations(); it++) {
        for (int i = 0; i < 6; i++) {
            x[i] = (float)(i + it % 5);
            wt[i] = (float)((i % 2) ? 1 : -1) * 0.5f;
        }
        hodu_tensor *tx = hodu_tensor_wrap(vm, HODU_F32, xs, 2, x);
        hodu_tensor *tw = hodu_tensor_wrap(vm, HODU_F32, ws, 2, wt);
        hodu_tensor *args[2] = {tx, tw}, *r = NULL;
        if (hodu_set_global(vm, "x", tx) != HODU_OK) w->failures++;
        if (hodu_call(vm, "affine", args, 2, &r) != HODU_OK || !r) {
            w->failures++;
        } else {
            /* row 0 of x @ w: column 1 sums +0.5 * x[0..2], column 0 is its negation */
            const float *d = hodu_tensor_data(r);
            float want = 0.5f * (x[0] + x[1] + x[2]) + (float)w->id;
            if (!d || d[1] != want || d[0] != (float)w->id) w->failures++;
        }
        hodu_tensor_release(r);
        if (hodu_eval(vm, "let y = x.T * 2", NULL) != HODU_OK) w->failures++;
        hodu_tensor *y = hodu_get_global_tensor(vm, "y");
        const float *yd = y ? hodu_tensor_data(y) : NULL;
        if (!yd || yd[1] != 2 * x[3]) w->failures++;
        hodu_tensor_release(y);
        /* an error on the way does not disturb the other VMs */
        if (it % 50 == 0 && hodu_eval(vm, "let bad = x @ x", NULL) != HODU_ERROR_RUNTIME)
            w->failures++;
        hodu_tensor_release(tx);
        hodu_tensor_release(tw);
    }
    double k = -1;
    if (hodu_get_global_number(vm, "k", &k) != HODU_OK || k != w->id) w->failures++;
    hodu_vm_free(vm);
    return NULL;
}

static void test_parallel_vms(void) {
    pthread_t th[NTHREADS];
    worker w[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        w[i].id = i;
        w[i].failures = 0;
        CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        CHECK_MSG(w[i].failures == 0, "worker %d: %d failures", i, w[i].failures);
    }
}

typedef struct spinner {
    hodu_vm *vm;
    atomic_int done;
    hodu_status st;
} spinner;

static void *spin(void *arg) {
    spinner *s = arg;
    s->st = hodu_eval(s->vm, "let n = 0\nwhile true { n += 1 }", "spin.hodu");
    atomic_store(&s->done, 1);
    return NULL;
}

/* hodu_vm_interrupt from another thread stops an endless loop. */
static void test_interrupt(void) {
    hodu_options o;
    hodu_options_init(&o);
    o.num_threads = 1;
    spinner s;
    s.vm = hodu_vm_new(&o);
    atomic_init(&s.done, 0);
    s.st = HODU_OK;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, spin, &s) == 0);
    /* hodu_eval clears the flag on entry: raise it until the loop stops */
    struct timespec ms = {0, 20 * 1000 * 1000};
    while (!atomic_load(&s.done)) {
        nanosleep(&ms, NULL);
        hodu_vm_interrupt(s.vm);
    }
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(s.st == HODU_ERROR_LIMIT);
    CHECK_ERR(s.vm, "interrupted");
    CHECK_OK(s.vm, hodu_eval(s.vm, "let after = 1", NULL));
    hodu_vm_free(s.vm);
}

int main(void) {
    test_parallel_vms();
    test_interrupt();
    TEST_END();
}
