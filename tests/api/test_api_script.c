/* Scripts through the embedding API: load a saved .hoduscript (argv[1],
 * written by tools/make_script: input x f32 [4, 3], output
 * y = relu(x @ w + b)), bind host memory, run, read outputs; and every
 * misuse: wrong names, shapes, dtypes, missing inputs, damaged files; and
 * a script with state (a training loop) that goes on from run to run. */
#include "api_test.h"

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

static const char *script_path;

/* relu(x @ w + b) for the weights make_script bakes in */
static void expected(const float x[4][3], float y[4][2]) {
    static const float w[3][2] = {{0.1f, -0.2f}, {0.2f, 0.1f}, {0.3f, 0.4f}};
    static const float b[2] = {0.5f, -1.0f};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++) {
            float s = b[j];
            for (int k = 0; k < 3; k++) s += x[i][k] * w[k][j];
            y[i][j] = s > 0 ? s : 0;
        }
}

static int close_to(const float *got, const float want[4][2]) {
    for (int i = 0; i < 8; i++) {
        float d = got[i] - want[i / 2][i % 2];
        if (d > 1e-5f || d < -1e-5f) return 0;
    }
    return 1;
}

static void test_run(void) {
    hodu_options o = {0}; /* no file access: the host still loads scripts */
    hodu_vm *vm = hodu_vm_new(&o);
    hodu_script *s = hodu_script_load(vm, script_path);
    CHECK_MSG(s != NULL, "%s", hodu_error_message(vm));
    if (!s) {
        hodu_vm_free(vm);
        return;
    }
    float x[4][3] = {{1, 2, 3}, {4, 5, 6}, {-1, 0, 1}, {0.5f, 0.25f, 0}}, want[4][2];
    int64_t shape[2] = {4, 3};
    hodu_tensor *tx = hodu_tensor_wrap(vm, HODU_F32, shape, 2, x);
    CHECK(hodu_script_output(s, "y") == NULL); /* not run yet */
    CHECK(hodu_error_status(vm) == HODU_ERROR_RUNTIME);
    CHECK_ST(vm, hodu_script_run(s), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "'x'");
    CHECK_OK(vm, hodu_script_set_input(s, "x", tx));
    hodu_tensor_release(tx); /* the script keeps the tensor */
    CHECK_OK(vm, hodu_script_run(s));
    hodu_tensor *y = hodu_script_output(s, "y");
    CHECK(y && hodu_tensor_ndim(y) == 2 && hodu_tensor_shape(y)[0] == 4 &&
          hodu_tensor_shape(y)[1] == 2 && hodu_tensor_dtype(y) == HODU_F32);
    expected(x, want);
    CHECK(y && close_to(hodu_tensor_data(y), want));
    /* the input is borrowed: change the array, run again */
    x[2][0] = 10;
    CHECK_OK(vm, hodu_script_run(s));
    hodu_tensor *y2 = hodu_script_output(s, "y");
    expected(x, want);
    CHECK(y2 && close_to(hodu_tensor_data(y2), want));
    /* an output handle outlives later runs */
    CHECK(y && hodu_tensor_numel(y) == 8);
    hodu_tensor_release(y);
    hodu_tensor_release(y2);
    /* the VM is usable alongside */
    CHECK_OK(vm, hodu_eval(vm, "let a = 1", NULL));
    hodu_script_free(s);
    hodu_vm_free(vm);
}

static void test_misuse(void) {
    hodu_vm *vm = hodu_vm_new(NULL), *other = hodu_vm_new(NULL);
    hodu_script *s = hodu_script_load(vm, script_path);
    CHECK(s != NULL);
    if (!s) goto done;
    float x[4][3] = {{0}};
    double xd[4][3] = {{0}};
    int64_t good[2] = {4, 3}, bad[2] = {3, 4};
    hodu_tensor *wrong_shape = hodu_tensor_wrap(vm, HODU_F32, bad, 2, x);
    hodu_tensor *wrong_dtype = hodu_tensor_wrap(vm, HODU_F64, good, 2, xd);
    hodu_tensor *foreign = hodu_tensor_wrap(other, HODU_F32, good, 2, x);
    hodu_tensor *ok = hodu_tensor_wrap(vm, HODU_F32, good, 2, x);
    CHECK_ST(vm, hodu_script_set_input(s, "z", ok), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "has no input 'z'");
    CHECK_ST(vm, hodu_script_set_input(s, "x", wrong_shape), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "input 'x' expects");
    CHECK_ERR(vm, "[3, 4]");
    CHECK_ST(vm, hodu_script_set_input(s, "x", wrong_dtype), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "f64");
    CHECK_ST(vm, hodu_script_set_input(s, NULL, ok), HODU_ERROR_ARGUMENT);
    CHECK_ST(vm, hodu_script_set_input(s, "x", NULL), HODU_ERROR_ARGUMENT);
    CHECK_ST(vm, hodu_script_set_input(s, "x", foreign), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "another VM");
    CHECK_OK(vm, hodu_script_set_input(s, "x", ok));
    CHECK_OK(vm, hodu_script_run(s));
    CHECK(hodu_script_output(s, "nope") == NULL);
    CHECK_ERR(vm, "no output 'nope'");
    CHECK(hodu_script_output(s, NULL) == NULL);
    CHECK(hodu_error_status(vm) == HODU_ERROR_ARGUMENT);
    /* loading: missing, not a script, damaged */
    CHECK(hodu_script_load(vm, "/nonexistent/x.hoduscript") == NULL);
    CHECK(hodu_error_status(vm) != HODU_OK);
    CHECK_ERR(vm, "/nonexistent/x.hoduscript");
    char path[] = "/tmp/hodu_api_script_XXXXXX";
    int fd = mkstemp(path);
    FILE *in = fopen(script_path, "rb"), *out = fd >= 0 ? fdopen(fd, "wb") : NULL;
    CHECK(in && out);
    if (in && out) {
        unsigned char buf[65536];
        size_t n = fread(buf, 1, sizeof buf, in);
        buf[n / 2] ^= 0x5a; /* one damaged byte */
        fwrite(buf, 1, n, out);
        fclose(out);
        CHECK(hodu_script_load(vm, path) == NULL);
        CHECK(hodu_error_status(vm) != HODU_OK && strlen(hodu_error_message(vm)) > 0);
        out = fopen(path, "wb");
        fwrite(buf, 1, n / 3, out); /* truncated */
        fclose(out);
        CHECK(hodu_script_load(vm, path) == NULL);
        out = fopen(path, "wb");
        fputs("let x = 1\n", out); /* not a script */
        fclose(out);
        CHECK(hodu_script_load(vm, path) == NULL);
    }
    if (in) fclose(in);
    remove(path);
    CHECK_OK(vm, hodu_eval(vm, "let still = 1", NULL));
    /* scripts and handles left alive are freed with the VM */
    hodu_script *kept = hodu_script_load(vm, script_path);
    CHECK(kept != NULL);
done:
    hodu_vm_free(other);
    hodu_vm_free(vm);
}

static void test_limits(void) {
    counting_alloc ca;
    counting_alloc_init(&ca);
    hodu_options o;
    hodu_options_init(&o);
    o.alloc = counting_alloc_fn;
    o.alloc_ud = &ca;
    hodu_vm *vm = hodu_vm_new(&o);
    hodu_script *s = hodu_script_load(vm, script_path);
    float x[4][3] = {{1}};
    int64_t shape[2] = {4, 3};
    hodu_tensor *t = hodu_tensor_wrap(vm, HODU_F32, shape, 2, x);
    CHECK(s && hodu_script_set_input(s, "x", t) == HODU_OK && hodu_script_run(s) == HODU_OK);
    hodu_vm_free(vm);
    CHECK_MSG(ca.outstanding == 0, "%zu bytes outstanding", ca.outstanding);
    long total = ca.calls, leaks = 0;
    /* every allocation of load, bind and run failing in turn */
    for (long k = 0; k < total; k += getenv("HODU_API_TEST_SLOW") ? 5 : 1) {
        counting_alloc_init(&ca);
        ca.fail_at = k;
        vm = hodu_vm_new(&o);
        if (vm) {
            /* each step either works or fails with a status */
            int ok = (s = hodu_script_load(vm, script_path)) != NULL;
            ok = ok && (t = hodu_tensor_wrap(vm, HODU_F32, shape, 2, x)) != NULL;
            ok = ok && hodu_script_set_input(s, "x", t) == HODU_OK;
            ok = ok && hodu_script_run(s) == HODU_OK;
            hodu_tensor *y = ok ? hodu_script_output(s, "y") : NULL;
            ok = ok && y != NULL;
            if (!ok) CHECK(hodu_error_status(vm) != HODU_OK);
            hodu_tensor_release(y);
            hodu_vm_free(vm);
        }
        leaks += ca.outstanding != 0;
    }
    CHECK_MSG(leaks == 0, "%ld runs leaked", leaks);
}

/* A training loop saved from a program: the loaded script's state (the
 * model's weights) goes on from run to run as eager training does. */
static const char train_src[] =
    "manual_seed(2)\n"
    "let xs = randn([16, 2])\n"
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
    "let ref = Model()\n"
    "let s = script(\"fit\") {\n"
    "    let x = input(\"x\", [16, 2])\n"
    "    let y = input(\"y\", [16, 1])\n"
    "    let loss = none\n"
    "    for e in 0..5 { loss = step(model, x, y) }\n"
    "    output(\"loss\", loss)\n"
    "}\n"
    "fn ref5() { for e in 0..5 { step(ref, xs, ys) } }\n";

static int same_floats(hodu_tensor *a, hodu_tensor *b, int n) {
    const float *x = hodu_tensor_data(a), *y = hodu_tensor_data(b);
    for (int i = 0; x && y && i < n; i++) {
        float d = x[i] - y[i], m = y[i] < 0 ? -y[i] : y[i];
        if (d > 1e-5f * (m + 1e-3f) || d < -1e-5f * (m + 1e-3f)) return 0;
    }
    return x && y;
}

static void test_state(void) {
    hodu_options o;
    hodu_options_init(&o);
    o.allow_io = 1;
    hodu_vm *vm = hodu_vm_new(&o);
    char path[64], src[256];
    snprintf(path, sizeof path, "/tmp/hodu_api_state_%ld.hoduscript", (long)getpid());
    snprintf(src, sizeof src, "s.save(\"%s\")", path);
    CHECK_OK(vm, hodu_eval(vm, train_src, "<train>"));
    CHECK_OK(vm, hodu_eval(vm, src, "<save>"));
    hodu_script *s = hodu_script_load(vm, path);
    remove(path);
    CHECK_MSG(s != NULL, "%s", hodu_error_message(vm));
    if (!s) {
        hodu_vm_free(vm);
        return;
    }
    hodu_tensor *xs = hodu_get_global_tensor(vm, "xs"), *ys = hodu_get_global_tensor(vm, "ys");
    CHECK_OK(vm, hodu_script_set_input(s, "x", xs));
    CHECK_OK(vm, hodu_script_set_input(s, "y", ys));
    CHECK(hodu_script_set_input(s, "$model.w", xs) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_script_state(s, "model.w.grad") == NULL); /* zeroed: not state */
    CHECK_OK(vm, hodu_eval(vm, "let rw = ref.w\nlet rb = ref.b", "<ref>"));
    hodu_tensor *rw = hodu_get_global_tensor(vm, "rw"), *rb = hodu_get_global_tensor(vm, "rb");
    for (int k = 0; k < 3; k++) {
        CHECK_OK(vm, hodu_script_run(s));
        CHECK_OK(vm, hodu_eval(vm, "ref5()", "<ref>"));
        hodu_tensor *w = hodu_script_state(s, "model.w"), *b = hodu_script_state(s, "model.b");
        CHECK(w && b && same_floats(w, rw, 2) && same_floats(b, rb, 1));
        hodu_tensor_release(w);
        hodu_tensor_release(b);
    }
    /* the state can be set from the host: back to zeros, as at the start */
    float zw[2] = {0, 0}, z3[3] = {0, 0, 0};
    int64_t sw[2] = {2, 1}, s3[1] = {3};
    hodu_tensor *tw = hodu_tensor_wrap(vm, HODU_F32, sw, 2, zw);
    hodu_tensor *t3 = hodu_tensor_wrap(vm, HODU_F32, s3, 1, z3);
    CHECK_OK(vm, hodu_script_set_state(s, "model.w", tw));
    CHECK_ST(vm, hodu_script_set_state(s, "model.b", t3), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "state 'model.b' is f32[1], got f32[3]");
    CHECK_ST(vm, hodu_script_set_state(s, "nope", tw), HODU_ERROR_ARGUMENT);
    hodu_tensor *w = hodu_script_state(s, "model.w");
    CHECK(w && ((const float *)hodu_tensor_data(w))[1] == 0.0f);
    hodu_tensor *handles[] = {xs, ys, rw, rb, tw, t3, w};
    for (size_t i = 0; i < sizeof handles / sizeof *handles; i++) hodu_tensor_release(handles[i]);
    hodu_script_free(s);
    hodu_vm_free(vm);
}

/* A script handle freed twice, used after hodu_script_free or after its
 * VM was freed, or of another kind: refused, no freed memory touched. */
static void check_dead_script(hodu_vm *vm, hodu_script *s, hodu_tensor *t) {
    CHECK(hodu_script_set_input(s, "x", t) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_script_run(s) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_script_output(s, "y") == NULL);
    CHECK(hodu_script_state(s, "w") == NULL);
    CHECK(hodu_script_set_state(s, "w", t) == HODU_ERROR_ARGUMENT);
    hodu_script_free(s); /* ignored */
    if (vm) CHECK_OK(vm, hodu_eval(vm, "let fine = 1", NULL));
}

static void test_stale_scripts(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    int64_t shape[1] = {2};
    hodu_tensor *t = hodu_tensor_new(vm, HODU_F32, shape, 1);
    hodu_script *s = hodu_script_load(vm, script_path), *s2 = hodu_script_load(vm, script_path);
    CHECK(s && s2);
    hodu_script_free(s);
    check_dead_script(vm, s, t);
    check_dead_script(vm, (hodu_script *)(void *)t, t);
    CHECK(hodu_tensor_numel(t) == 2);
    hodu_vm_free(vm);
    check_dead_script(NULL, s2, t);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_api_script FILE.hoduscript\n");
        return 2;
    }
    script_path = argv[1];
    test_run();
    test_misuse();
    test_limits();
    test_state();
    test_stale_scripts();
    TEST_END();
}
