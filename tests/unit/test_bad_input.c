/* Bad input that once crashed the VM or overflowed: each program runs in
 * one VM, in turn; it must give its output or fail with its message at its
 * line, and the VM must still run a program afterwards. Run under the
 * sanitizers (HODU_SANITIZE) this also checks that no arithmetic overflows. */
#include "hd_test.h"
#include "vm.h"

#include <string.h>

typedef struct {
    char buf[8192];
    size_t len;
} sink;

static void sink_write(void *ud, const char *s, size_t n) {
    sink *k = ud;
    if (k->len + n >= sizeof k->buf) n = sizeof k->buf - 1 - k->len;
    memcpy(k->buf + k->len, s, n);
    k->len += n;
    k->buf[k->len] = 0;
}

/* One case: a program and what it must give. An error case names the text
 * its message contains, and the line it is reported at. */
typedef struct {
    const char *src;
    const char *out; /* standard output, or NULL for an error */
    const char *err; /* part of the error message */
    int line;
} bad_case;

#define I64_MIN "(-9223372036854775807 - 1)"
#define I64_MAX "9223372036854775807"
#define Z8      "let z = zeros([1, 1, 1, 1, 1, 1, 1, 2])\n"

static const bad_case cases[] = {
    /* x[...] = v with a value that is not tensor-like, in every index form */
    {"let x = zeros([3])\nx[0] = \"a\"", NULL, "must be a tensor, got str", 2},
    {"let x = zeros([3])\nx[0] = none", NULL, "must be a tensor, got none", 2},
    {"let x = zeros([3])\nx[:] = {}", NULL, "must be a tensor, got dict", 2},
    {"let x = zeros([3])\nx[...] = [1, \"a\"]", NULL, "is a str", 2},
    {"let x = zeros([3])\nx[tensor([0])] = print", NULL, "must be a tensor, got function", 2},
    {"let x = zeros([3])\nx[x > 0] = range(3)", NULL, "must be a tensor, got range", 2},
    {"let x = zeros([3])\nx[none, 0] = fn() { 1 }", NULL, "must be a tensor, got function", 2},
    {"let x = zeros([3])\nx[0] = [[1], [1, 2]]", NULL, "ragged", 2},
    /* dims past HD_MAX_DIMS */
    {Z8 "stack([z, z])", NULL, "at most 8 dims", 2},
    {Z8 "stack([z, z], axis = -1)", NULL, "at most 8 dims", 2},
    {Z8 "z.unsqueeze(0)", NULL, "at most 8 dims", 2},
    {Z8 "z[none]", NULL, "at most 8 dims", 2},
    {Z8 "z[..., none] = 1", NULL, "at most 8 dims", 2},
    {Z8 "z.reshape([1, 1, 1, 1, 1, 1, 1, 1, 2])", NULL, "at most 8", 2},
    {Z8 "z.expand([1, 1, 1, 1, 1, 1, 1, 1, 2])", NULL, "at most 8", 2},
    {Z8 "one_hot(z.to(i64), 3)", NULL, "too many dims", 2},
    {Z8 "embedding(z.to(i64), zeros([3, 4]))", NULL, "too many dims", 2},
    {Z8 "z.sum(axis = [0, 1, 2, 3, 4, 5, 6, 7, 7])", NULL, "at most 8", 2},
    /* slices with steps and bounds at the ends of i64 */
    {"print(arange(5)[::" I64_MAX "])", "tensor([0])\n", NULL, 0},
    {"print(arange(5)[3::" I64_MAX "])", "tensor([3])\n", NULL, 0},
    {"print(arange(5)[" I64_MIN ":" I64_MAX "].shape)", "[5]\n", NULL, 0},
    {"print([1, 2, 3][::" I64_MIN "])", "[3]\n", NULL, 0},
    {"print([1, 2, 3][::" I64_MAX "])", "[1]\n", NULL, 0},
    {"print(\"abc\"[::" I64_MIN "], \"abc\"[" I64_MIN ":" I64_MAX "])", "c abc\n", NULL, 0},
    {"print(range(5)[::" I64_MIN "])", "range(4, 3, -9223372036854775808)\n", NULL, 0},
    /* ranges longer than 2^63 */
    {"let r = range(" I64_MIN ", " I64_MAX ")\nprint(len(r))", NULL, "len() of a range longer", 2},
    {"let r = range(" I64_MIN ", " I64_MAX ")\nprint(r[::2][-1], r[-1], r[" I64_MAX "])",
     "9223372036854775806 9223372036854775806 -1\n", NULL, 0},
    {"let r = range(" I64_MIN ", " I64_MAX ")\nprint(r[::-1][0], r[::-1][" I64_MAX "])", NULL,
     "past the range of ints", 2},
    {"let r = range(" I64_MIN ", " I64_MAX ")\nprint(r[1::-1])", NULL, "past the range of ints", 2},
    {"print(range(" I64_MIN ", " I64_MAX ") == range(" I64_MIN ", " I64_MAX ", 1))", "true\n", NULL,
     0},
    {"print(range(" I64_MIN ", " I64_MAX ")[" I64_MIN "])", "-1\n", NULL, 0},
    /* sizes and windows */
    {"ones([3]).split([" I64_MAX ", " I64_MAX ", 4])", NULL, "add up to more than", 1},
    {"print(ones([3]).split(" I64_MAX "))", "[tensor([1., 1., 1.])]\n", NULL, 0},
    {"max_pool2d(ones([1, 1, 4, 4]), 2, padding = " I64_MAX ")", NULL, "padding at most half", 1},
    {"ones([1]).expand([4611686018427387904, 4611686018427387904])", NULL, "too large", 1},
    {"conv2d(ones([1, 4, 4, 4]), ones([1, 1, 2, 2]), groups = 4611686018427387904)", NULL,
     "do not agree", 1},
    {"let x = ones([4, 4])\nprint(x[::" I64_MAX ", 1::" I64_MAX "].T.reshape([1]))",
     "tensor([1.])\n", NULL, 0},
};

static void run_case(hd_vm *vm, sink *k, const bad_case *c) {
    hd_eval_opts o = {0, 0};
    k->len = 0;
    k->buf[0] = 0;
    hd_status st = hd_vm_eval(vm, c->src, strlen(c->src), "<bad>", &o, NULL);
    const char *t = hd_vm_error_text(vm);
    if (!c->err) {
        CHECK_MSG(st == HD_OK, "%s: %s", c->src, t);
        CHECK_MSG(strcmp(k->buf, c->out) == 0, "%s: printed \"%s\"", c->src, k->buf);
    } else {
        char at[32];
        snprintf(at, sizeof at, "<bad>:%d:", c->line);
        CHECK_MSG(st == HD_ERR_RUNTIME || st == HD_ERR_MEMORY, "%s: status %d", c->src, (int)st);
        CHECK_MSG(strstr(t, c->err) != NULL && strncmp(t, at, strlen(at)) == 0, "%s: %s", c->src,
                  t);
        if (c->out) CHECK_MSG(strstr(k->buf, c->out) == k->buf, "%s: printed %s", c->src, k->buf);
    }
    hd_vm_clear_error(vm);
    /* the VM goes on */
    k->len = 0;
    CHECK(hd_vm_eval(vm, "print(1 + 1)", 12, "<bad>", &o, NULL) == HD_OK);
    CHECK_MSG(strcmp(k->buf, "2\n") == 0, "after %s: %s", c->src, k->buf);
}

/* An error on a line longer than the error text shows a window of the line
 * around the column, with the caret under it. */
static void test_long_line(hd_vm *vm) {
    enum { N = 20000 };
    static char src[N + 64];
    size_t n = 0;
    n += (size_t)snprintf(src, sizeof src, "let x = [");
    while (n < N) n += (size_t)snprintf(src + n, sizeof src - n, "1, ");
    n += (size_t)snprintf(src + n, sizeof src - n, "\"a\" + 1, 2]");
    hd_eval_opts o = {0, 0};
    CHECK(hd_vm_eval(vm, src, n, "<long>", &o, NULL) == HD_ERR_RUNTIME);
    const char *t = hd_vm_error_text(vm);
    const char *l1 = strchr(t, '\n'), *l2 = l1 ? strchr(l1 + 1, '\n') : NULL;
    CHECK_MSG(l1 && l2 && strstr(l1, "...1, 1") == l1 + 3, "%.300s", t);
    if (l1 && l2) {
        const char *q = strstr(l1, "\"a\" + 1");
        const char *caret = strchr(l2, '^');
        CHECK_MSG(q && caret && caret - (l2 + 1) == q - (l1 + 1), "%.400s", t);
        CHECK(l2 - l1 < 200);
    }
    hd_vm_clear_error(vm);
}

int main(void) {
    sink k;
    hd_vm *vm = hd_vm_new(NULL);
    CHECK(vm != NULL);
    if (!vm) TEST_END();
    hd_vm_set_writer(vm, sink_write, &k);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(vm, &k, &cases[i]);
    test_long_line(vm);
    hd_vm_free(vm);
    TEST_END();
}
