/* The embedding API, function by function: what each does, and what each
 * does with bad arguments (an error status and a message, never a crash;
 * the VM stays usable). Uses include/hodu.h only. */
#include "api_test.h"

#include <stdint.h>
#include <unistd.h>

static void test_library(void) {
    CHECK(strcmp(hodu_version(), HODU_VERSION_STRING) == 0);
    CHECK(strcmp(hodu_status_name(HODU_OK), "HODU_OK") == 0);
    CHECK(strcmp(hodu_status_name(HODU_ERROR_SYNTAX), "HODU_ERROR_SYNTAX") == 0);
    CHECK(strcmp(hodu_status_name(HODU_ERROR_ARGUMENT), "HODU_ERROR_ARGUMENT") == 0);
    CHECK(strcmp(hodu_status_name((hodu_status)99), "HODU_STATUS_UNKNOWN") == 0);
    CHECK(strcmp(hodu_status_name((hodu_status)-1), "HODU_STATUS_UNKNOWN") == 0);
    CHECK(strcmp(hodu_dtype_name(HODU_F32), "f32") == 0);
    CHECK(strcmp(hodu_dtype_name(HODU_BOOL), "bool") == 0);
    CHECK(strcmp(hodu_dtype_name(HODU_DTYPE_INVALID), "invalid") == 0);
    CHECK(strcmp(hodu_dtype_name((hodu_dtype)42), "invalid") == 0);
    CHECK(hodu_dtype_size(HODU_F16) == 2 && hodu_dtype_size(HODU_BF16) == 2);
    CHECK(hodu_dtype_size(HODU_F64) == 8 && hodu_dtype_size(HODU_I64) == 8);
    CHECK(hodu_dtype_size(HODU_U8) == 1 && hodu_dtype_size(HODU_BOOL) == 1);
    CHECK(hodu_dtype_size((hodu_dtype)42) == 0);
    hodu_options o;
    memset(&o, 0xff, sizeof o);
    hodu_options_init(&o);
    CHECK(o.allow_io == 1 && o.memory_limit == 0 && o.max_steps == 0 && !o.alloc && !o.write);
    hodu_options_init(NULL);
}

/* Every function with a NULL VM or handle: a status or NULL, no crash. */
static void test_null_handles(void) {
    double d = 0;
    hodu_tensor *r = (hodu_tensor *)&d;
    int64_t shape[1] = {1};
    CHECK(hodu_eval(NULL, "1", NULL) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_eval_file(NULL, "x.hodu") == HODU_ERROR_ARGUMENT);
    CHECK(strlen(hodu_error_message(NULL)) > 0);
    CHECK(hodu_error_status(NULL) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_tensor_wrap(NULL, HODU_F64, shape, 1, &d) == NULL);
    CHECK(hodu_tensor_new(NULL, HODU_F64, shape, 1) == NULL);
    CHECK(hodu_tensor_data(NULL) == NULL);
    CHECK(hodu_tensor_ndim(NULL) == -1);
    CHECK(hodu_tensor_shape(NULL) == NULL);
    CHECK(hodu_tensor_dtype(NULL) == HODU_DTYPE_INVALID);
    CHECK(hodu_tensor_numel(NULL) == -1);
    CHECK(hodu_tensor_nbytes(NULL) == 0);
    hodu_tensor_release(NULL);
    CHECK(hodu_set_global(NULL, "x", NULL) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_set_global_number(NULL, "x", 1) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_get_global_tensor(NULL, "x") == NULL);
    CHECK(hodu_get_global_number(NULL, "x", &d) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_call(NULL, "f", NULL, 0, &r) == HODU_ERROR_ARGUMENT && r == NULL);
    CHECK(hodu_script_load(NULL, "x.hoduscript") == NULL);
    CHECK(hodu_script_set_input(NULL, "x", NULL) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_script_run(NULL) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_script_output(NULL, "y") == NULL);
    hodu_script_free(NULL);
    hodu_vm_interrupt(NULL);
    CHECK(hodu_vm_set_strategy(NULL, "training") == HODU_ERROR_ARGUMENT);
    hodu_vm_free(NULL);
    hodu_options bad;
    hodu_options_init(&bad);
    bad.num_threads = -1;
    CHECK(hodu_vm_new(&bad) == NULL);
}

static void test_eval(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK(vm != NULL);
    CHECK_OK(vm, hodu_eval(vm, "let a = 1 + 2", NULL));
    CHECK(strcmp(hodu_error_message(vm), "") == 0);
    CHECK(hodu_error_status(vm) == HODU_OK);
    /* globals persist between chunks */
    CHECK_OK(vm, hodu_eval(vm, "let b = a * 10", "second"));
    double b = 0;
    CHECK_OK(vm, hodu_get_global_number(vm, "b", &b));
    CHECK(b == 30);

    /* a syntax error: status, location, caret, no final newline */
    CHECK_ST(vm, hodu_eval(vm, "let = 3", "chunk.hodu"), HODU_ERROR_SYNTAX);
    CHECK_ERR(vm, "chunk.hodu:1:");
    CHECK_ERR(vm, "error:");
    CHECK_ERR(vm, "^");
    const char *m = hodu_error_message(vm);
    CHECK(m[strlen(m) - 1] != '\n');
    CHECK(hodu_error_status(vm) == HODU_ERROR_SYNTAX);
    /* unknown names are found before running */
    CHECK_ST(vm, hodu_eval(vm, "print(1)\nundefined_name + 1", NULL), HODU_ERROR_SYNTAX);
    CHECK_ERR(vm, "<host>:2:1");
    CHECK_ERR(vm, "unknown name 'undefined_name'");

    /* a runtime error inside a function: location and trace */
    CHECK_ST(vm,
             hodu_eval(
                 vm,
                 "fn inner(x) { return x @ x }\nfn outer() { return inner(ones([2, 3])) }\nouter()",
                 "trace.hodu"),
             HODU_ERROR_RUNTIME);
    CHECK_ERR(vm, "trace.hodu:1:");
    CHECK_ERR(vm, "in inner at trace.hodu:1:");
    CHECK_ERR(vm, "in outer at trace.hodu:2:");
    /* the VM is still usable, and a success clears the message */
    CHECK_OK(vm, hodu_eval(vm, "let c = b + 1", NULL));
    CHECK(strcmp(hodu_error_message(vm), "") == 0);
    CHECK_ST(vm, hodu_eval(vm, NULL, NULL), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "source is NULL");
    CHECK_OK(vm, hodu_eval(vm, "", NULL));
    hodu_vm_free(vm);
}

static void test_eval_file(void) {
    char path[] = "/tmp/hodu_api_test_XXXXXX.hodu";
    int fd = mkstemps(path, 5);
    CHECK(fd >= 0);
    if (fd < 0) return;
    const char src[] = "let from_file = 7\nfn twice(x) { return x * 2 }\n";
    CHECK(write(fd, src, sizeof src - 1) == (ssize_t)(sizeof src - 1));
    close(fd);
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK_OK(vm, hodu_eval_file(vm, path));
    double v = 0;
    CHECK_OK(vm, hodu_get_global_number(vm, "from_file", &v));
    CHECK(v == 7);
    CHECK_ST(vm, hodu_eval_file(vm, "/nonexistent/dir/file.hodu"), HODU_ERROR_IO);
    CHECK_ERR(vm, "/nonexistent/dir/file.hodu");
    CHECK_ST(vm, hodu_eval_file(vm, NULL), HODU_ERROR_ARGUMENT);
    /* file access off limits the language, not the host */
    hodu_options o = {0};
    hodu_vm *noio = hodu_vm_new(&o);
    CHECK_OK(noio, hodu_eval_file(noio, path));
    hodu_vm_free(noio);
    hodu_vm_free(vm);
    unlink(path);
}

static void test_wrap(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    hodu_tensor *x = hodu_tensor_wrap(vm, HODU_F32, shape, 2, data);
    CHECK(x != NULL);
    CHECK(hodu_tensor_ndim(x) == 2);
    CHECK(hodu_tensor_shape(x)[0] == 2 && hodu_tensor_shape(x)[1] == 3);
    CHECK(hodu_tensor_dtype(x) == HODU_F32);
    CHECK(hodu_tensor_numel(x) == 6 && hodu_tensor_nbytes(x) == sizeof data);
    CHECK(hodu_tensor_data(x) == (void *)data); /* borrowed: no copy */
    shape[0] = 99;                              /* the shape was copied */
    CHECK(hodu_tensor_shape(x)[0] == 2);
    CHECK_OK(vm, hodu_set_global(vm, "x", x));
    CHECK_OK(vm, hodu_eval(vm, "let y = x * 2 + 1", NULL));
    hodu_tensor *y = hodu_get_global_tensor(vm, "y");
    CHECK(y != NULL && hodu_tensor_dtype(y) == HODU_F32 && hodu_tensor_numel(y) == 6);
    const float *yd = hodu_tensor_data(y);
    CHECK(yd && yd[0] == 3 && yd[5] == 13);
    /* writes in place reach the host's array, and host writes reach Hodu */
    CHECK_OK(vm, hodu_eval(vm, "x[1, 2] = 100", NULL));
    CHECK(data[5] == 100);
    data[0] = -5;
    double s = 0;
    CHECK_OK(vm, hodu_eval(vm, "let s = sum(x).item()", NULL));
    CHECK_OK(vm, hodu_get_global_number(vm, "s", &s));
    CHECK(s == -5 + 2 + 3 + 4 + 5 + 100);
    /* the handle can go: the global keeps the tensor */
    hodu_tensor_release(x);
    CHECK_OK(vm, hodu_eval(vm, "let s2 = sum(x).item()", NULL));
    hodu_tensor_release(y);

    /* a scalar needs no shape; every dtype wraps */
    double one = 2.5;
    hodu_tensor *sc = hodu_tensor_wrap(vm, HODU_F64, NULL, 0, &one);
    CHECK(sc && hodu_tensor_ndim(sc) == 0 && hodu_tensor_numel(sc) == 1);
    hodu_tensor_release(sc);
    int64_t n4[1] = {4};
    uint64_t buf[4] = {0};
    for (int dt = HODU_F16; dt <= HODU_BOOL; dt++) {
        hodu_tensor *t = hodu_tensor_wrap(vm, (hodu_dtype)dt, n4, 1, buf);
        CHECK_MSG(t && hodu_tensor_dtype(t) == dt, "%s", hodu_dtype_name((hodu_dtype)dt));
        hodu_tensor_release(t);
    }
    hodu_vm_free(vm);
}

static void test_wrap_misuse(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    double data[16] = {0};
    int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    int64_t neg[2] = {2, -3};
    CHECK(hodu_tensor_wrap(vm, HODU_F64, shape, 2, NULL) == NULL);
    CHECK(hodu_error_status(vm) == HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "hodu_tensor_wrap: data is NULL");
    CHECK(hodu_tensor_wrap(vm, HODU_F64, shape, 9, data) == NULL);
    CHECK_ERR(vm, "ndim must be 0 to 8, got 9");
    CHECK(hodu_tensor_wrap(vm, HODU_F64, shape, -1, data) == NULL);
    CHECK(hodu_error_status(vm) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_tensor_wrap(vm, HODU_F64, neg, 2, data) == NULL);
    CHECK_ERR(vm, "dimension 1 is negative (-3)");
    CHECK(hodu_tensor_wrap(vm, HODU_F64, NULL, 2, data) == NULL);
    CHECK_ERR(vm, "shape is NULL");
    CHECK(hodu_tensor_wrap(vm, (hodu_dtype)42, shape, 1, data) == NULL);
    CHECK_ERR(vm, "unknown dtype 42");
    CHECK(hodu_tensor_wrap(vm, HODU_DTYPE_INVALID, shape, 1, data) == NULL);
    CHECK(hodu_tensor_wrap(vm, HODU_F64, shape, 1, (char *)data + 1) == NULL);
    CHECK_ERR(vm, "not aligned");
    int64_t huge[2] = {INT64_MAX, INT64_MAX};
    CHECK(hodu_tensor_wrap(vm, HODU_F64, huge, 2, data) == NULL);
    CHECK(hodu_error_status(vm) != HODU_OK);
    /* 8 dims is allowed; so are zero-size dims */
    hodu_tensor *t8 = hodu_tensor_wrap(vm, HODU_F64, shape, 8, data);
    CHECK(t8 != NULL && hodu_tensor_ndim(t8) == 8);
    int64_t empty[2] = {0, 3};
    hodu_tensor *e = hodu_tensor_wrap(vm, HODU_F64, empty, 2, data);
    CHECK(e != NULL && hodu_tensor_numel(e) == 0);
    CHECK_OK(vm, hodu_set_global(vm, "e", e));
    CHECK_OK(vm, hodu_eval(vm, "let es = e.shape", NULL));
    hodu_tensor_release(t8);
    hodu_tensor_release(e);
    CHECK_OK(vm, hodu_eval(vm, "let still = 1", NULL));
    hodu_vm_free(vm);
}

static void test_tensor_new(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    int64_t shape[3] = {2, 3, 4};
    hodu_tensor *t = hodu_tensor_new(vm, HODU_I32, shape, 3);
    CHECK(t && hodu_tensor_numel(t) == 24 && hodu_tensor_dtype(t) == HODU_I32);
    int32_t *d = hodu_tensor_data(t);
    int zero = 1;
    for (int i = 0; i < 24; i++) zero &= d[i] == 0;
    CHECK(zero);
    for (int i = 0; i < 24; i++) d[i] = i;
    CHECK_OK(vm, hodu_set_global(vm, "t", t));
    CHECK_OK(vm, hodu_eval(vm, "let total = sum(t).item()", NULL));
    double total = 0;
    CHECK_OK(vm, hodu_get_global_number(vm, "total", &total));
    CHECK(total == 276);
    hodu_tensor *s = hodu_tensor_new(vm, HODU_F64, NULL, 0);
    CHECK(s && hodu_tensor_ndim(s) == 0 && *(double *)hodu_tensor_data(s) == 0);
    hodu_tensor_release(s);
    CHECK(hodu_tensor_new(vm, HODU_F32, shape, 9) == NULL);
    CHECK_ERR(vm, "hodu_tensor_new: ndim must be 0 to 8");
    CHECK(hodu_tensor_new(vm, (hodu_dtype)9, shape, 1) == NULL);
    CHECK(hodu_error_status(vm) == HODU_ERROR_ARGUMENT);
    int64_t neg[1] = {-1};
    CHECK(hodu_tensor_new(vm, HODU_F32, neg, 1) == NULL);
    CHECK(hodu_tensor_new(vm, HODU_F32, NULL, 1) == NULL);
    hodu_tensor_release(t);
    hodu_vm_free(vm);
}

/* A transposed view is handed out as a contiguous copy, refreshed when
 * the tensor changes. */
static void test_data_views(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK_OK(vm, hodu_eval(vm, "let b = reshape(arange(0, 6), [2, 3])\nlet t = b.T", NULL));
    hodu_tensor *t = hodu_get_global_tensor(vm, "t");
    CHECK(t && hodu_tensor_dtype(t) == HODU_I64 && hodu_tensor_shape(t)[0] == 3);
    const int64_t *d = hodu_tensor_data(t);
    CHECK(d && d[0] == 0 && d[1] == 3 && d[2] == 1 && d[3] == 4 && d[4] == 2 && d[5] == 5);
    CHECK(hodu_tensor_data(t) == (const void *)d); /* unchanged: the same copy */
    CHECK_OK(vm, hodu_eval(vm, "b[0, 1] = 50", NULL));
    d = hodu_tensor_data(t);
    CHECK(d && d[2] == 50);
    /* a contiguous slice is handed out directly */
    CHECK_OK(vm, hodu_eval(vm, "let row = b[1]", NULL));
    hodu_tensor *row = hodu_get_global_tensor(vm, "row");
    const int64_t *r = hodu_tensor_data(row);
    CHECK(r && r[0] == 3 && r[2] == 5);
    /* a tensor with requires_grad copies without a gradient record */
    CHECK_OK(vm, hodu_eval(vm, "let p = param(ones([3, 2])).T", NULL));
    hodu_tensor *p = hodu_get_global_tensor(vm, "p");
    const float *pd = hodu_tensor_data(p);
    CHECK(pd && pd[0] == 1 && pd[5] == 1);
    hodu_tensor_release(p);
    hodu_tensor_release(row);
    hodu_tensor_release(t);
    hodu_vm_free(vm);
}

static void test_globals(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    hodu_vm *other = hodu_vm_new(NULL);
    float v[2] = {1, 2};
    int64_t shape[1] = {2};
    hodu_tensor *t = hodu_tensor_wrap(vm, HODU_F32, shape, 1, v);
    hodu_tensor *foreign = hodu_tensor_wrap(other, HODU_F32, shape, 1, v);
    CHECK_ST(vm, hodu_set_global(vm, NULL, t), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "hodu_set_global: name is NULL");
    CHECK_ST(vm, hodu_set_global(vm, "1abc", t), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "'1abc' is not a valid global name");
    CHECK_ST(vm, hodu_set_global(vm, "", t), HODU_ERROR_ARGUMENT);
    CHECK_ST(vm, hodu_set_global(vm, "a-b", t), HODU_ERROR_ARGUMENT);
    CHECK_ST(vm, hodu_set_global(vm, "while", t), HODU_ERROR_ARGUMENT);
    CHECK_ST(vm, hodu_set_global(vm, "x", NULL), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "tensor is NULL");
    CHECK_ST(vm, hodu_set_global(vm, "x", foreign), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "belongs to another VM");
    CHECK_OK(vm, hodu_set_global(vm, "_x9", t));
    /* rebinding replaces the value; programs see the latest */
    CHECK_OK(vm, hodu_set_global_number(vm, "_x9", 4));
    CHECK_OK(vm, hodu_eval(vm, "let doubled = _x9 * 2", NULL));
    double d = 0;
    CHECK_OK(vm, hodu_get_global_number(vm, "doubled", &d));
    CHECK(d == 8);
    CHECK_OK(vm, hodu_set_global(vm, "_x9", t));
    CHECK_OK(vm, hodu_eval(vm, "let n = _x9.numel", NULL));
    CHECK_OK(vm, hodu_get_global_number(vm, "n", &d));
    CHECK(d == 2);
    CHECK_ST(vm, hodu_set_global_number(vm, "not", 1), HODU_ERROR_ARGUMENT);

    /* reading: unknown names, values that are not tensors or numbers */
    CHECK(hodu_get_global_tensor(vm, "nope") == NULL);
    CHECK(hodu_error_status(vm) == HODU_ERROR_RUNTIME);
    CHECK_ERR(vm, "no global named 'nope'");
    CHECK(hodu_get_global_tensor(vm, NULL) == NULL);
    CHECK(hodu_error_status(vm) == HODU_ERROR_ARGUMENT);
    CHECK_OK(vm, hodu_eval(vm,
                           "let i = 3\nlet f = 2.5\nlet flag = true\nlet l = [1]\n"
                           "let one = tensor([4.0])\nlet many = ones([2])",
                           NULL));
    CHECK(hodu_get_global_tensor(vm, "i") == NULL);
    CHECK_ERR(vm, "global 'i' is an int, not a tensor");
    CHECK(hodu_get_global_tensor(vm, "l") == NULL);
    CHECK_ERR(vm, "not a tensor");
    CHECK(hodu_get_global_tensor(vm, "print") == NULL); /* a builtin: not a tensor */
    CHECK_OK(vm, hodu_get_global_number(vm, "i", &d));
    CHECK(d == 3);
    CHECK_OK(vm, hodu_get_global_number(vm, "f", &d));
    CHECK(d == 2.5);
    CHECK_OK(vm, hodu_get_global_number(vm, "flag", &d));
    CHECK(d == 1);
    CHECK_OK(vm, hodu_get_global_number(vm, "one", &d));
    CHECK(d == 4);
    CHECK_ST(vm, hodu_get_global_number(vm, "many", &d), HODU_ERROR_RUNTIME);
    CHECK_ERR(vm, "not a number");
    CHECK_ST(vm, hodu_get_global_number(vm, "l", &d), HODU_ERROR_RUNTIME);
    CHECK_ST(vm, hodu_get_global_number(vm, "nope", &d), HODU_ERROR_RUNTIME);
    CHECK_ST(vm, hodu_get_global_number(vm, "i", NULL), HODU_ERROR_ARGUMENT);
    CHECK_ST(vm, hodu_get_global_number(vm, NULL, &d), HODU_ERROR_ARGUMENT);
    /* each handle is the caller's: two handles on one global */
    hodu_tensor *a = hodu_get_global_tensor(vm, "one");
    hodu_tensor *b = hodu_get_global_tensor(vm, "one");
    CHECK(a && b && a != b && hodu_tensor_data(a) == hodu_tensor_data(b));
    hodu_tensor_release(a);
    CHECK(*(float *)hodu_tensor_data(b) == 4);
    hodu_tensor_release(b);
    hodu_tensor_release(t);
    hodu_tensor_release(foreign);
    hodu_vm_free(other);
    hodu_vm_free(vm);
}

static void test_call(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK_OK(vm, hodu_eval(vm,
                           "fn add(a, b) { return a + b }\n"
                           "fn total(x) { return sum(x).item() }\n"
                           "fn count(x) { return x.numel }\n"
                           "fn positive(x) { return total(x) > 0 }\n"
                           "fn nothing(x) { let y = x }\n"
                           "fn listy(x) { return [x] }\n"
                           "fn bad(x) {\n    return reshape(x, [3, 1]) @ reshape(x, [3, 1])\n}\n"
                           "fn forever() { while true { } }\n"
                           "class Scale { fn init(self, k) { self.k = k }\n"
                           "  fn forward(self, x) { return x * self.k } }\n"
                           "let model = Scale(3)\nlet number = 5",
                           "defs.hodu"));
    double a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
    int64_t shape[1] = {3};
    hodu_tensor *ta = hodu_tensor_wrap(vm, HODU_F64, shape, 1, a);
    hodu_tensor *tb = hodu_tensor_wrap(vm, HODU_F64, shape, 1, b);
    hodu_tensor *args[2] = {ta, tb}, *r = NULL;
    CHECK_OK(vm, hodu_call(vm, "add", args, 2, &r));
    CHECK(r && hodu_tensor_numel(r) == 3 && ((double *)hodu_tensor_data(r))[2] == 33);
    hodu_tensor_release(r);
    /* numbers and bools come back as 0-d tensors */
    CHECK_OK(vm, hodu_call(vm, "total", args, 1, &r));
    CHECK(r && hodu_tensor_ndim(r) == 0 && hodu_tensor_dtype(r) == HODU_F64 &&
          *(double *)hodu_tensor_data(r) == 6);
    hodu_tensor_release(r);
    CHECK_OK(vm, hodu_call(vm, "count", args, 1, &r));
    CHECK(r && hodu_tensor_dtype(r) == HODU_I64 && *(int64_t *)hodu_tensor_data(r) == 3);
    hodu_tensor_release(r);
    CHECK_OK(vm, hodu_call(vm, "positive", args, 1, &r));
    CHECK(r && hodu_tensor_dtype(r) == HODU_BOOL && *(uint8_t *)hodu_tensor_data(r) == 1);
    hodu_tensor_release(r);
    /* none: no result; result may be NULL */
    r = (hodu_tensor *)1;
    CHECK_OK(vm, hodu_call(vm, "nothing", args, 1, &r));
    CHECK(r == NULL);
    CHECK_OK(vm, hodu_call(vm, "add", args, 2, NULL));
    /* builtins, methods and callable objects */
    CHECK_OK(vm, hodu_call(vm, "relu", args, 1, &r));
    CHECK(r && ((double *)hodu_tensor_data(r))[0] == 1);
    hodu_tensor_release(r);
    CHECK_OK(vm, hodu_call(vm, "model.forward", args, 1, &r));
    CHECK(r && ((double *)hodu_tensor_data(r))[1] == 6);
    hodu_tensor_release(r);
    CHECK_OK(vm, hodu_call(vm, "model", args, 1, &r));
    CHECK(r && ((double *)hodu_tensor_data(r))[2] == 9);
    hodu_tensor_release(r);

    /* failures: each leaves *result NULL and the VM usable */
    CHECK_ST(vm, hodu_call(vm, "listy", args, 1, &r), HODU_ERROR_RUNTIME);
    CHECK(r == NULL);
    CHECK_ERR(vm, "listy returned a list, not a tensor or a number");
    CHECK_ST(vm, hodu_call(vm, "bad", args, 1, &r), HODU_ERROR_RUNTIME);
    CHECK(r == NULL);
    CHECK_ERR(vm, "defs.hodu:8:");
    CHECK_ERR(vm, "in bad at defs.hodu:8:");
    CHECK_ST(vm, hodu_call(vm, "add", args, 1, &r), HODU_ERROR_RUNTIME);
    CHECK_ST(vm, hodu_call(vm, "missing", args, 1, &r), HODU_ERROR_RUNTIME);
    CHECK_ERR(vm, "no global named 'missing'");
    CHECK_ST(vm, hodu_call(vm, "number", args, 1, &r), HODU_ERROR_RUNTIME);
    CHECK_ERR(vm, "cannot call");
    CHECK_ST(vm, hodu_call(vm, "model.nope", args, 1, &r), HODU_ERROR_RUNTIME);
    CHECK_ST(vm, hodu_call(vm, "model.", args, 1, &r), HODU_ERROR_ARGUMENT);
    CHECK_ST(vm, hodu_call(vm, ".x", args, 1, &r), HODU_ERROR_ARGUMENT);
    CHECK_ST(vm, hodu_call(vm, NULL, args, 1, &r), HODU_ERROR_ARGUMENT);
    CHECK_ST(vm, hodu_call(vm, "add", NULL, 2, &r), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "args is NULL");
    CHECK_ST(vm, hodu_call(vm, "add", args, -1, &r), HODU_ERROR_ARGUMENT);
    hodu_tensor *holes[2] = {ta, NULL};
    CHECK_ST(vm, hodu_call(vm, "add", holes, 2, &r), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "args[1] is NULL");
    hodu_vm *other = hodu_vm_new(NULL);
    hodu_tensor *foreign = hodu_tensor_wrap(other, HODU_F64, shape, 1, a);
    hodu_tensor *mixed[2] = {ta, foreign};
    CHECK_ST(vm, hodu_call(vm, "add", mixed, 2, &r), HODU_ERROR_ARGUMENT);
    CHECK_ERR(vm, "args[1] belongs to another VM");
    hodu_vm_free(other); /* releases foreign too */
    /* zero arguments, and many (past the on-stack array) */
    CHECK_OK(vm, hodu_eval(vm,
                           "fn ten(a, b, c, d, e, f, g, h, i, j) { return a + j }\n"
                           "fn zero() { return 0 }",
                           NULL));
    hodu_tensor *many[10];
    for (int i = 0; i < 10; i++) many[i] = i % 2 ? tb : ta;
    CHECK_OK(vm, hodu_call(vm, "ten", many, 10, &r));
    CHECK(r && ((double *)hodu_tensor_data(r))[0] == 11);
    hodu_tensor_release(r);
    CHECK_OK(vm, hodu_call(vm, "zero", NULL, 0, &r));
    CHECK(r && *(int64_t *)hodu_tensor_data(r) == 0);
    hodu_tensor_release(r);
    CHECK_OK(vm, hodu_eval(vm, "let fine = 1", NULL));
    hodu_tensor_release(ta);
    hodu_tensor_release(tb);
    hodu_vm_free(vm);
}

/* Handles the host never released are freed with the VM; everything the
 * VM allocated goes back through the host's allocator. */
static void test_vm_free_releases(void) {
    counting_alloc ca;
    counting_alloc_init(&ca);
    hodu_options o;
    hodu_options_init(&o);
    o.alloc = counting_alloc_fn;
    o.alloc_ud = &ca;
    hodu_vm *vm = hodu_vm_new(&o);
    CHECK(vm != NULL && ca.outstanding > 0);
    int64_t shape[2] = {16, 16};
    float data[256] = {0};
    for (int i = 0; i < 10; i++) {
        hodu_tensor *t = hodu_tensor_new(vm, HODU_F32, shape, 2);
        hodu_tensor *w = hodu_tensor_wrap(vm, HODU_F32, shape, 2, data);
        CHECK(t && w);
        CHECK_OK(vm, hodu_set_global(vm, "w", w));
    }
    CHECK_OK(vm, hodu_eval(vm, "let z = w.T\nfn f(x) { return x + 1 }", NULL));
    hodu_tensor *z = hodu_get_global_tensor(vm, "z");
    CHECK(hodu_tensor_data(z) != NULL); /* a copy held by the handle */
    hodu_vm_free(vm);
    CHECK_MSG(ca.outstanding == 0, "%zu bytes outstanding", ca.outstanding);
}

static void test_scripts_absent_or_bad(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK(hodu_script_load(vm, NULL) == NULL);
    CHECK(hodu_error_status(vm) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_script_load(vm, "/nonexistent/model.hoduscript") == NULL);
    CHECK(hodu_error_status(vm) != HODU_OK);
    CHECK(strlen(hodu_error_message(vm)) > 0);
    CHECK_OK(vm, hodu_eval(vm, "let ok = 1", NULL));
    hodu_vm_free(vm);
}

/* hodu_vm_set_strategy: a preset for what follows; an unknown name or
 * NULL is an error that leaves the VM usable. */
static void test_strategy(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    double d = -1;
    CHECK(hodu_vm_set_strategy(vm, "inference") == HODU_OK);
    CHECK(hodu_eval(vm, "let on = 0.0\nif is_grad_enabled() { on = 1.0 }", NULL) == HODU_OK);
    CHECK(hodu_get_global_number(vm, "on", &d) == HODU_OK && d == 0);
    CHECK(hodu_vm_set_strategy(vm, "fastest") == HODU_ERROR_RUNTIME);
    CHECK(strstr(hodu_error_message(vm), "no strategy named 'fastest' (the presets: default"));
    CHECK(hodu_vm_set_strategy(vm, NULL) == HODU_ERROR_ARGUMENT);
    CHECK(hodu_vm_set_strategy(vm, "default") == HODU_OK);
    CHECK(hodu_eval(vm, "if is_grad_enabled() { on = 1.0 }", NULL) == HODU_OK);
    CHECK(hodu_get_global_number(vm, "on", &d) == HODU_OK && d == 1);
    hodu_vm_free(vm);
}

int main(void) {
    test_library();
    test_strategy();
    test_null_handles();
    test_eval();
    test_eval_file();
    test_wrap();
    test_wrap_misuse();
    test_tensor_new();
    test_data_views();
    test_globals();
    test_call();
    test_vm_free_releases();
    test_scripts_absent_or_bad();
    TEST_END();
}
