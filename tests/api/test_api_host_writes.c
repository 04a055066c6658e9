/* Host code writes tensors through hodu_tensor_data (or wrapped memory)
 * between calls, behind the VM's back: no write count sees it. Everything
 * that keeps results keyed by a tensor's identity and write count must
 * still give what a fresh computation gives: memory "cached"'s memo (its
 * inputs and its kept results), the contiguous copy hodu_tensor_data
 * makes of a view, compiled code's reads of arguments and globals. The
 * expected values come from C's expf on the values written. */
#include "api_test.h"

#include <math.h>

#define N 4

static float read0(hodu_tensor *t) {
    const float *d = hodu_tensor_data(t);
    return d ? d[0] : NAN;
}

static void fill(float *d, float v) {
    for (int i = 0; i < N; i++) d[i] = v;
}

/* fn_name(x) = exp(x) * 2, called again after each host write of x. */
static void check_calls(hodu_vm *vm, const char *fn_name, hodu_tensor *x, float *xd) {
    for (int it = 0; it < 6; it++) {
        float v = (float)(it % 3) + 0.5f * (float)it;
        fill(xd, v);
        hodu_tensor *args[1] = {x}, *r = NULL;
        CHECK_OK(vm, hodu_call(vm, fn_name, args, 1, &r));
        float want = expf(v) * 2, got = r ? read0(r) : NAN;
        CHECK_MSG(fabsf(got - want) <= 1e-5f * want, "%s call %d: %g, want %g", fn_name, it, got,
                  want);
        hodu_tensor_release(r);
    }
}

/* Memory "cached" keeps a result from the second time its inputs repeat;
 * an input the host wrote in place is not the input it saw. */
static void test_memo_inputs(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK_OK(vm, hodu_vm_set_strategy(vm, "inference"));
    CHECK_OK(vm, hodu_eval(vm, "fn f(x) { return exp(x) * 2 }", "f.hodu"));
    int64_t shape[1] = {N};
    hodu_tensor *x = hodu_tensor_new(vm, HODU_F32, shape, 1);
    check_calls(vm, "f", x, hodu_tensor_data(x));
    hodu_tensor_release(x);
    /* wrapped memory: the host owns it and writes it when it likes */
    float mem[N];
    hodu_tensor *w = hodu_tensor_wrap(vm, HODU_F32, shape, 1, mem);
    check_calls(vm, "f", w, mem);
    hodu_tensor_release(w);
    hodu_vm_free(vm);
}

/* A result the memo keeps, handed to the host, written there, released:
 * the next call with the same inputs must not hand it out again. */
static void test_memo_results(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK_OK(vm, hodu_vm_set_strategy(vm, "inference"));
    CHECK_OK(vm, hodu_eval(vm, "let x = full([4], 1.0)\nfn f() { return exp(x) * 2 }", "f.hodu"));
    float want = expf(1.0f) * 2;
    for (int it = 0; it < 5; it++) {
        hodu_tensor *r = NULL;
        CHECK_OK(vm, hodu_call(vm, "f", NULL, 0, &r));
        float *d = r ? hodu_tensor_data(r) : NULL;
        CHECK_MSG(d && fabsf(d[0] - want) <= 1e-5f * want, "call %d: %g, want %g", it,
                  d ? d[0] : NAN, want);
        if (d) fill(d, -1.0f); /* the host's own tensor: it may write it */
        hodu_tensor_release(r);
    }
    hodu_vm_free(vm);
}

/* hodu_tensor_data of a view copies it; a host write of the viewed
 * storage through another handle is seen at the next call. */
static void test_view_copy(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK_OK(vm, hodu_eval(vm, "let b = zeros([2, 3])\nlet t = b.T", NULL));
    hodu_tensor *b = hodu_get_global_tensor(vm, "b");
    hodu_tensor *t = hodu_get_global_tensor(vm, "t");
    float *bd = hodu_tensor_data(b);
    const float *td = hodu_tensor_data(t);
    CHECK(bd && td && td[1] == 0);
    for (int it = 1; it <= 3; it++) {
        bd[3] = (float)it; /* b[1, 0] = t[0, 1] */
        td = hodu_tensor_data(t);
        CHECK_MSG(td && td[1] == (float)it, "write %d: t[0, 1] = %g", it, td ? td[1] : NAN);
    }
    hodu_tensor_release(t);
    hodu_tensor_release(b);
    hodu_vm_free(vm);
}

/* Compiled code reads its arguments and the globals it captured at every
 * call, under either preset. */
static void test_compiled(const char *strategy) {
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK_OK(vm, hodu_vm_set_strategy(vm, strategy));
    CHECK_OK(vm, hodu_eval(vm,
                           "let k = full([4], 0.0)\n"
                           "compiled fn g(x) { return exp(x) * 2 }\n"
                           "compiled fn h(x) { return exp(x + k) * 2 }",
                           "g.hodu"));
    int64_t shape[1] = {N};
    hodu_tensor *x = hodu_tensor_new(vm, HODU_F32, shape, 1);
    check_calls(vm, "g", x, hodu_tensor_data(x));
    /* h(0) with k written by the host: exp(k) * 2 */
    hodu_tensor *k = hodu_get_global_tensor(vm, "k");
    float *kd = hodu_tensor_data(k);
    fill(hodu_tensor_data(x), 0.0f);
    for (int it = 0; it < 4; it++) {
        fill(kd, (float)it);
        hodu_tensor *args[1] = {x}, *r = NULL;
        CHECK_OK(vm, hodu_call(vm, "h", args, 1, &r));
        float want = expf((float)it) * 2, got = r ? read0(r) : NAN;
        CHECK_MSG(fabsf(got - want) <= 1e-5f * want, "%s h call %d: %g, want %g", strategy, it, got,
                  want);
        hodu_tensor_release(r);
    }
    hodu_tensor_release(k);
    hodu_tensor_release(x);
    hodu_vm_free(vm);
}

int main(void) {
    test_memo_inputs();
    test_memo_results();
    test_view_copy();
    test_compiled("default");
    test_compiled("inference");
    TEST_END();
}
