/* Eager CUDA against eager cpu (and compiled cuda against both): each case
 * is a Hodu expression over inputs drawn with the same seed on each device,
 * so it also checks that Philox gives identical numbers on both. f32 to
 * 1e-5 relative, f16/bf16 to 1e-2; integer and bool results exactly.
 * Needs a GPU: without one the programs still run cpu against cpu (so
 * they are known to be valid Hodu) and the test reports SKIPPED (77). */
#include "hd_test.h"
#include "hodu.h"
#include "hd_backend.h"

#include <stdio.h>

static const char *const cases[] = {
    "x + y",
    "x - 2.0 * y",
    "x * y",
    "x / y",
    "x % y",
    "y ** 1.5",
    "-x",
    "abs(x)",
    "exp(x)",
    "log(y)",
    "sqrt(y)",
    "rsqrt(y)",
    "sin(x)",
    "cos(x)",
    "tanh(x)",
    "sigmoid(x)",
    "relu(x)",
    "gelu(x)",
    "silu(x)",
    "softplus(x)",
    "sign(x)",
    "floor(x)",
    "ceil(x)",
    "round(x * 3)",
    "clamp(x, -0.5, 0.5)",
    "maximum(x, y)",
    "minimum(x, y)",
    "x < y",
    "x == x",
    "not (x > y)",
    "(x * 3).to(i32) > 1",
    "(x * 10).to(i8) ** 2",
    "where(x > 0, (x * 5).to(i64), 7)",
    "where(x > 0, x, y)",
    "x + y[0]",
    "x.T + 1",
    "x[1:3, ::2] * 2",
    "x.to(f16) * 2",
    "x.to(bf16) + 1",
    "x.to(i32)",
    "(x * 10).to(i64) % 3",
    "sum(x)",
    "sum(x, axis = 1)",
    "mean(x, axis = 0)",
    "max(x, axis = 1)",
    "min(x)",
    "prod(y, axis = 1)",
    "var(x, axis = 1)",
    "std(x)",
    "argmax(x, axis = 1)",
    "sum(rand([70001], device = dev))",
    "mean(rand([3, 70000], device = dev) - 0.5, axis = 1)",
    "sum(rand([300, 400], device = dev).T, axis = [0, 1])",
    "sum(rand([70000, 3], device = dev), axis = 0)",
    "max(randn([90000], device = dev))",
    "min(randn([2, 80000], device = dev), axis = 1)",
    "prod(rand([66000], device = dev) * 0.01 + 0.995)",
    "sum((rand([70000], device = dev) * 100).to(i32))",
    "max((randn([70000], device = dev) * 1e6).to(i64))",
    "argmin(x)",
    "logsumexp(x, axis = 1)",
    "x @ y.T",
    "x.to(f16) @ y.T.to(f16)",
    "x.to(bf16) @ y.T.to(bf16)",
    "x.to(f64) @ y.T.to(f64)",
    "(x * 100).to(i32) @ (y.T * 100).to(i32)",
    "(x * 1e6).to(i64) @ (y.T * 1e6).to(i64)",
    "(x * 50).to(i8) @ (y.T * 50).to(i8)",
    "(y * 100).to(u8) @ (y.T * 3).to(u8)",
    "i @ tensor([[1, 2], [3, 4], [5, 6], [7, 8]], device = dev)",
    "stack([i, i * 2]).reshape([2, 1, 4]) @ tensor([1, -1, 2, -2], device = dev)",
    "softmax(x)",
    "log_softmax(x, axis = 0)",
    "einsum(\"ij,kj->ik\", x, y)",
    "einsum(\"ij,ij->j\", x, y.to(f64))",
    "erf(x)",
    "lgamma(x.abs() + 0.25)",
    "lgamma(x.to(f64) - 0.5)",
    "digamma(x.abs() + 0.1)",
    "polygamma(2, x.to(f64) * 3 + 0.5)",
    "polygamma(1, x.T - 0.5)",
    "erfc(x.to(f64) * 3)",
    "erf(x.to(f16))",
    "atan2(x, y - 1)",
    "atan2(x.T, 0.5)",
    "atan2(i, i + 1)",
    "cumsum(x, 1)",
    "cumsum(x.T, 0)",
    "cumsum(x)",
    "cumprod(y, 0)",
    "cumprod(x.to(bf16), 1)",
    "cumsum(x.to(f64) * 1e10, 1)",
    "cumsum(rand([3, 70000], device = dev) - 0.5, 1)",
    "cumprod(rand([2, 3000], device = dev) * 0.02 + 0.99, 1)",
    "cumsum(i)",
    "argsort(x, 1)",
    "argsort(x.T, 1, descending = true)",
    "sort(x, axis = 0)[0]",
    "sort(x, axis = 0)[1]",
    "topk(x, 2)[0]",
    "topk(x, 3, axis = 0, largest = false)[1]",
    "argsort(i)",
    "argsort((x * 2).to(i32), 1)",
    "argsort((x > 0), 1, descending = true)",
    "argsort(x.to(bf16), 0)",
    "argsort(rand([3, 70000], device = dev), 1)",
    "sort(rand([5000], device = dev) - 0.5, descending = true)[0]",
    "concat([x, y], 1)",
    "stack([x, y])",
    "x[i]",
    "x[:, i]",
    "x[tensor([-1, 0, -2], device = dev)]",
    "x[x > 0]",
    "put(x, x > 0, i)",
    "one_hot(i, 5)",
    "cross_entropy(x, i)",
    "mse(x, y)",
    "dropout(x, 0.3)",
    "rand([3, 3])",
    "randn([5], mean = 1, std = 2)",
    "arange(0, 10, 3)",
    "linspace(0, 1, 7)",
    "eye(3)",
    "zeros_like(x) + 1",
    "x.reshape([5, 4])",
    "x.to(f16).sum()",
    "exp(x.to(bf16))",
    "conv2d(x.reshape([1, 1, 4, 5]), y[0:2, 0:3].reshape([1, 1, 2, 3]), padding = 1)",
    "conv2d(stack([x, y, x * y, y - x]).reshape([1, 4, 4, 5]), x.reshape([2, 2, 1, 5])[:, :, :, "
    "0:3], b = y[0, 0:2], stride = [1, 2], padding = [1, 0], dilation = [1, 2], groups = 2)",
    "conv2d(stack([x, y]).reshape([2, 1, 4, 5]).to(f16), y[0:3, 0:3].reshape([1, 1, 3, "
    "3]).to(f16))",
    "max_pool2d(stack([x, y]).reshape([1, 2, 4, 5]), 2)",
    "max_pool2d(x.reshape([1, 1, 4, 5]), [3, 2], stride = [1, 2], padding = [1, 1])",
    "avg_pool2d(x.reshape([2, 1, 2, 5]), [2, 3], stride = 1, padding = [1, 1])",
    "layer_norm(x, [5])",
    "layer_norm(x.reshape([2, 2, 5]), [2, 5], w = y.reshape([2, 2, 5])[0], b = y[1:3] - 1)",
    "layer_norm(x.to(bf16), [5])",
    /* products whose operands cuBLAS reads where they are (transposed,
     * sliced, batched at one stride, 1-D with a stride) and ones copied
     * first (columns two apart, batches not one stride apart) */
    "x @ y.T",
    "x.T @ y",
    "x[:, 1:4] @ y[1:4, :]",
    "x.T[1:3] @ y",
    "x.T[0] @ y",
    "x @ y[1]",
    "x[:, ::2] @ y[0:3]",
    "stack([x, y]) @ y.T",
    "stack([x, y]).transpose(1, 2) @ x",
    "stack([x, y]).reshape([2, 1, 4, 5]) @ stack([y.T, x.T, y.T])",
    "x.to(bf16) @ y.to(bf16).T",
    "x.to(f64).T @ y.to(f64)",
};

/* Gradients of a loss on each device. */
static const char *const grads[] = {
    "sum(x * y)",
    "mean(tanh(x) * y)",
    "sum(softmax(x) * y)",
    "sum(log_softmax(x) * y)",
    "cross_entropy(x, i)",
    "mse(x @ y.T, x @ x.T)",
    "sum((x.T @ y) ** 2)",
    "sum((stack([x, y]).transpose(1, 2) @ y) * 2)",
    "sum(gelu(x))",
    "sum(x[i])",
    "sum(relu(x) ** 2)",
    "sum(dropout(x, 0.5))",
    "sum(conv2d(x.reshape([1, 1, 4, 5]), y[0:2, 0:3].reshape([1, 1, 2, 3]), padding = 1) ** 2)",
    "sum(conv2d(stack([x, y]).reshape([1, 2, 4, 5]), y.reshape([2, 1, 2, 5])[:, :, :, 0:3], "
    "stride = [2, 1], dilation = [1, 2], groups = 2) * 3)",
    "sum(conv2d(y.reshape([1, 1, 4, 5]), x[0:3, 0:3].reshape([1, 1, 3, 3]), padding = 1) ** 2)",
    "sum(max_pool2d(x.reshape([1, 1, 4, 5]), 2, stride = 1, padding = 1) ** 2)",
    "sum(max_pool2d(x.reshape([1, 1, 4, 5]), [2, 3], stride = [2, 1]) * 3)",
    "sum(avg_pool2d(x.reshape([1, 1, 4, 5]), [2, 3], padding = 1) ** 2)",
    "sum(x.to(\"cpu\") ** 2)",
    "sum((x.to(\"cpu\") * 3).to(dev) * y)",
    "sum(layer_norm(x, [5]) * y)",
    "sum(layer_norm(y.T, [4], w = x[0:4, 1], b = x[1, 0:4]) * y.T ** 2)",
    "sum(layer_norm(y * 2, [5], w = x[1], b = y[0]) * y)",
};

static int run_case(hodu_vm *vm, const char *dev, const char *expr, int grad) {
    char src[2048];
    snprintf(src, sizeof src,
             "fn put(x, m, i) {\n"
             "  let y = x * 1\n"
             "  y[m] = 0.5\n"
             "  y[i[0:2]] = y[0] * 2\n"
             "  y[1, 1:3] = tensor([7.0, 8.0], device = x.device)\n"
             "  return y\n"
             "}\n"
             "fn run_on(dev) {\n"
             "  manual_seed(7)\n"
             "  let x = randn([4, 5], device = dev)\n"
             "  let y = rand([4, 5], device = dev) + 0.5\n"
             "  let i = tensor([2, 0, 3, 1], device = dev)\n"
             "  %s\n"
             "}\n"
             "let a = run_on(\"cpu\").to(f64)\n"
             "let b = run_on(\"%s\").to(\"cpu\").to(f64)\n"
             "assert(a.shape == b.shape, \"shapes differ\")\n"
             "let tol = 1e-5\n"
             "assert(max(abs(a - b) - tol * abs(a)).item() <= 1e-6 or a.numel == 0, \"values "
             "differ\")\n",
             grad ? "x.requires_grad = true\n  let l = %s\n  l.backward()\n  return x.grad"
                  : "return %s",
             dev);
    char full[2400];
    snprintf(full, sizeof full, src, expr);
    if (strstr(expr, "f16") || strstr(expr, "bf16")) { /* halves: 1e-2 */
        char *t = strstr(full, "1e-5");
        if (t) memcpy(t, "1e-2", 4);
    }
    hodu_status st = hodu_eval(vm, full, expr);
    CHECK_MSG(st == HODU_OK, "%s on %s: %s", expr, dev, hodu_error_message(vm));
    return st == HODU_OK;
}

/* compiled(compiler = "cuda") gives the eager cpu's values. */
static void run_compiled(hodu_vm *vm, const char *dev) {
    char src[1024];
    snprintf(src, sizeof src,
             "manual_seed(3)\n"
             "let w = randn([5, 3]).to(\"%s\")\n"
             "let xc = randn([4, 5]).to(\"%s\")\n"
             "let yc = none\n"
             "compiled(compiler = \"%s\", device = \"%s\") { yc = softmax(relu(xc @ w) * 2 + 1) }\n"
             "let ye = softmax(relu(xc.to(\"cpu\") @ w.to(\"cpu\")) * 2 + 1)\n"
             "assert(max(abs(yc.to(\"cpu\") - ye)).item() < 1e-5)\n",
             dev, dev, strcmp(dev, "cpu") ? "cuda" : "interp", dev);
    CHECK_MSG(hodu_eval(vm, src, "compiled") == HODU_OK, "%s", hodu_error_message(vm));
}

int main(void) {
    hd_ctx probe;
    hd_ctx_init(&probe, NULL, NULL);
    int gpu = hd_cuda_backend.available(&probe, 0) == HD_OK;
    hd_ctx_release(&probe);
    const char *dev = gpu ? "cuda" : "cpu";
    hodu_vm *vm = hodu_vm_new(NULL);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(vm, dev, cases[k], 0);
    for (size_t k = 0; k < sizeof grads / sizeof grads[0]; k++) run_case(vm, dev, grads[k], 1);
    run_compiled(vm, gpu ? "cuda:0" : "cpu");
    hodu_vm_free(vm);
    if (!gpu) {
        printf("%d passed, %d failed (cpu against cpu)\nSKIPPED: no CUDA device\n", hd_test_pass,
               hd_test_fail);
        return hd_test_fail ? 1 : 77;
    }
    TEST_END();
}
