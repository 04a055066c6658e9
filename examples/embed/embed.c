/* embed: a C host running Hodu through include/hodu.h.
 *
 *   embed                      define a small model in Hodu source, call it on
 *                              a C array (borrowed, no copy), print the result
 *   embed MODEL.hoduscript     run a saved script: input "x" (f32 [4, 3]) from
 *                              the same C array, print its output "y"
 *
 * Exit status 0 on success, 1 with the VM's message on stderr otherwise. */
#include <hodu.h>

#include <stdio.h>

static const char model_source[] = "# a tiny linear layer; the host supplies w and x\n"
                                   "let b = tensor([0.5, -1.0], dtype = f32)\n"
                                   "fn predict(x) {\n"
                                   "    return relu(x @ w + b)\n"
                                   "}\n";

/* Four samples of three features, and the layer's weights: host memory. */
static float samples[4][3] = {{1, 2, 3}, {4, 5, 6}, {-1, 0, 1}, {0.5f, 0.25f, 0}};
static float weights[3][2] = {{0.1f, -0.2f}, {0.2f, 0.1f}, {0.3f, 0.4f}};

static int fail(hodu_vm *vm, const char *what) {
    fprintf(stderr, "embed: %s failed: %s\n", what, hodu_error_message(vm));
    hodu_vm_free(vm);
    return 1;
}

static void print_rows(const char *title, hodu_tensor *t) {
    const float *d = hodu_tensor_data(t);
    const int64_t *shape = hodu_tensor_shape(t);
    printf("%s [%lld, %lld]:\n", title, (long long)shape[0], (long long)shape[1]);
    for (int64_t i = 0; i < shape[0]; i++) {
        printf(" ");
        for (int64_t j = 0; j < shape[1]; j++) printf(" %8.4f", d[i * shape[1] + j]);
        printf("\n");
    }
}

/* Source, globals and a call: everything an interpreter host does. */
static int run_source(hodu_vm *vm, hodu_tensor *x) {
    int64_t wshape[2] = {3, 2};
    hodu_tensor *w = hodu_tensor_wrap(vm, HODU_F32, wshape, 2, weights);
    if (!w || hodu_set_global(vm, "w", w) != HODU_OK) return fail(vm, "setting w");
    hodu_tensor_release(w); /* the global keeps the tensor */
    if (hodu_eval(vm, model_source, "model.hodu") != HODU_OK) return fail(vm, "model.hodu");
    hodu_tensor *y = NULL;
    if (hodu_call(vm, "predict", &x, 1, &y) != HODU_OK) return fail(vm, "predict");
    print_rows("predict(x)", y);
    hodu_tensor_release(y);
    return 0;
}

/* A saved, compiled graph: no source needed. */
static int run_script(hodu_vm *vm, hodu_tensor *x, const char *path) {
    hodu_script *s = hodu_script_load(vm, path);
    if (!s) return fail(vm, path);
    if (hodu_script_set_input(s, "x", x) != HODU_OK || hodu_script_run(s) != HODU_OK)
        return fail(vm, "running the script");
    hodu_tensor *y = hodu_script_output(s, "y");
    if (!y) return fail(vm, "reading output y");
    print_rows("script output y", y);
    hodu_tensor_release(y);
    hodu_script_free(s);
    return 0;
}

int main(int argc, char **argv) {
    /* Limits suit untrusted models: 256 MiB, 10 million steps, no files. */
    hodu_options opts = {.memory_limit = (size_t)256 << 20, .max_steps = 10000000, .allow_io = 0};
    hodu_vm *vm = hodu_vm_new(&opts);
    if (!vm) {
        fprintf(stderr, "embed: cannot create the VM\n");
        return 1;
    }
    printf("hodu %s\n", hodu_version());
    int64_t xshape[2] = {4, 3};
    hodu_tensor *x = hodu_tensor_wrap(vm, HODU_F32, xshape, 2, samples);
    if (!x) return fail(vm, "wrapping the samples");
    int rc = argc > 1 ? run_script(vm, x, argv[1]) : run_source(vm, x);
    if (rc) return rc; /* fail() freed the VM */
    hodu_tensor_release(x);
    hodu_vm_free(vm);
    return 0;
}
