/* hodu run-script: runs a saved .hoduscript without any source code.
 *
 *   hodu run-script F.hoduscript --input x=x.npy [--input y=y.npy]
 *                   [--output out.npz] [--state S.safetensors]
 *                   [--compiler NAME] [--device D]
 *
 * Inputs are .npy files. The outputs go to one .npz or .safetensors file
 * (every output by name), or a .npy file when the script has one output;
 * without --output they are printed, one "name = tensor(...)" each. A
 * script with state (a training loop) reads it from --state's file before
 * the run and writes it back there after (a missing file: the state saved
 * in the script, and the file is made).
 * Exit status: 0 success; 1 the script could not be loaded or run (a
 * missing or damaged file, an unknown input, a wrong shape or dtype); 2 a
 * usage error. */
#include "run_script.h"

#include "hd_backend.h"
#include "hd_io.h"
#include "hd_script.h"
#include "tensor_print.h"

#include <stdio.h>
#include <string.h>

#define RS_MAX_INPUTS 64

static const char rs_usage[] =
    "usage: hodu run-script F.hoduscript [--input NAME=FILE.npy]... [--output OUT]\n"
    "                       [--state FILE.safetensors] [--compiler NAME] [--device DEVICE]\n"
    "\n"
    "  --input NAME=FILE  bind input NAME to the tensor in FILE (.npy)\n"
    "  --output OUT       write the outputs to OUT: .npz or .safetensors (all of\n"
    "                     them, by name), .npy (a script with one output);\n"
    "                     without it the outputs are printed\n"
    "  --state FILE       a script's state (.safetensors): read before the run\n"
    "                     (if the file exists), written after it\n"
    "  --compiler NAME    interp, llvm, cuda (default: llvm where it runs, else interp)\n"
    "  --device DEVICE    cpu (default), cuda:0\n";

typedef struct rs_args {
    const char *script, *output, *compiler, *device, *state;
    const char *names[RS_MAX_INPUTS], *files[RS_MAX_INPUTS];
    int ninputs;
} rs_args;

static int rs_usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "hodu run-script: %s%s\n%s", msg, arg ? arg : "", rs_usage);
    return 2;
}

/* Parse the arguments; 0 on success, else the exit status. */
static int rs_parse(int argc, char **argv, rs_args *a) {
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(rs_usage, stdout);
            return -1;
        }
        const char **slot = !strcmp(s, "--output")     ? &a->output
                            : !strcmp(s, "--compiler") ? &a->compiler
                            : !strcmp(s, "--device")   ? &a->device
                            : !strcmp(s, "--state")    ? &a->state
                                                       : NULL;
        if (slot || !strcmp(s, "--input")) {
            if (i + 1 >= argc) return rs_usage_error("missing value after ", s);
            const char *v = argv[++i];
            if (slot) {
                *slot = v;
                continue;
            }
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || !eq[1]) return rs_usage_error("--input needs NAME=FILE, got ", v);
            if (a->ninputs == RS_MAX_INPUTS) return rs_usage_error("too many inputs", NULL);
            a->names[a->ninputs] = v;
            a->files[a->ninputs++] = eq + 1;
        } else if (s[0] == '-' && s[1]) {
            return rs_usage_error("unknown option ", s);
        } else if (a->script) {
            return rs_usage_error("more than one script: ", s);
        } else {
            a->script = s;
        }
    }
    if (!a->script) return rs_usage_error("missing the .hoduscript file", NULL);
    return 0;
}

static int rs_fail(hd_ctx *ctx) {
    fflush(stdout);
    fprintf(stderr, "hodu run-script: %s\n", hd_error_message(ctx));
    return 1;
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* Each input file, on the script's device (files load into host memory). */
static hd_status rs_bind(hd_ctx *ctx, hd_script *s, const rs_args *a) {
    const hd_backend *be;
    int dev;
    if (hd_backend_parse_device(ctx, hd_script_device(s), &be, &dev)) return ctx->status;
    for (int i = 0; i < a->ninputs; i++) {
        char name[256];
        size_t n = (size_t)(a->files[i] - 1 - a->names[i]);
        snprintf(name, sizeof name, "%.*s", (int)n, a->names[i]);
        hd_tensor *t = NULL, *d = NULL;
        if (hd_io_load_npy(ctx, a->files[i], &t)) return ctx->status;
        hd_status st = hd_tensor_to_device(ctx, t, be, dev, &d);
        hd_tensor_unref(t);
        if (!st) st = hd_script_set_input(s, name, d);
        hd_tensor_unref(d);
        if (st) return st;
    }
    return HD_OK;
}

static hd_status rs_print(hd_ctx *ctx, const hd_script *s) {
    for (int i = 0; i < hd_script_noutputs(s); i++) {
        hd_script_port p;
        hd_script_output_info(s, i, &p);
        size_t len;
        char *text = hd_tensor_format_cstr(ctx, hd_script_output_at(s, i), &len);
        if (!text) return ctx->status;
        printf("%s = %s\n", p.name, text);
        hd_ctx_free(ctx, text, len + 1);
    }
    return HD_OK;
}

static hd_status rs_save(hd_ctx *ctx, const hd_script *s, const char *path) {
    int n = hd_script_noutputs(s);
    if (ends_with(path, ".npy")) {
        if (n != 1)
            return hd_error(ctx, HD_ERR_ARGUMENT,
                            "%s: a .npy file holds one tensor and the script has %d outputs "
                            "(use .npz or .safetensors)",
                            path, n);
        return hd_io_save_npy(ctx, path, hd_script_output_at(s, 0));
    }
    int npz = ends_with(path, ".npz");
    if (!npz && !ends_with(path, ".safetensors"))
        return hd_error(ctx, HD_ERR_ARGUMENT, "%s: write .npz, .safetensors or .npy", path);
    hd_io_list l;
    hd_io_list_init(&l);
    hd_status st = HD_OK;
    for (int i = 0; i < n && !st; i++) {
        hd_script_port p;
        hd_script_output_info(s, i, &p);
        st = hd_io_list_add(ctx, &l, p.name, hd_script_output_at(s, i));
    }
    if (!st) st = npz ? hd_io_save_npz(ctx, path, &l, 0) : hd_io_save_safetensors(ctx, path, &l);
    hd_io_list_free(ctx, &l);
    return st;
}

/* --state FILE: the script's state from FILE, when it exists. */
static hd_status rs_state_load(hd_ctx *ctx, hd_script *s, const char *path) {
    if (!hd_script_nstate(s))
        return hd_error(ctx, HD_ERR_ARGUMENT,
                        "--state: script '%s' has no state (it writes no tensors it reads)",
                        hd_script_name(s));
    if (!ends_with(path, ".safetensors"))
        return hd_error(ctx, HD_ERR_ARGUMENT, "--state %s: the state file must be .safetensors",
                        path);
    FILE *f = fopen(path, "rb");
    if (!f) return HD_OK; /* made after the run */
    fclose(f);
    const hd_backend *be;
    int dev;
    if (hd_backend_parse_device(ctx, hd_script_device(s), &be, &dev)) return ctx->status;
    hd_io_list l;
    hd_io_list_init(&l);
    hd_status st = hd_io_load_safetensors(ctx, path, &l);
    for (size_t i = 0; !st && i < l.count; i++) {
        hd_tensor *d = NULL;
        st = hd_tensor_to_device(ctx, l.entries[i].tensor, be, dev, &d);
        if (!st) st = hd_script_state_put(s, l.entries[i].name, d);
        hd_tensor_unref(d);
    }
    if (st && st != HD_ERR_MEMORY && strncmp(hd_error_message(ctx), path, strlen(path))) {
        char msg[HD_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", hd_error_message(ctx));
        hd_error(ctx, st, "%.200s: %.800s", path, msg);
    }
    hd_io_list_free(ctx, &l);
    return st;
}

static hd_status rs_state_save(hd_ctx *ctx, const hd_script *s, const char *path) {
    hd_io_list l;
    hd_io_list_init(&l);
    hd_status st = HD_OK;
    for (int i = 0; i < hd_script_nstate(s) && !st; i++) {
        const hd_script_var *v = hd_script_state_at(s, i);
        if (v->t) st = hd_io_list_add(ctx, &l, v->name, v->t);
    }
    if (!st) st = hd_io_save_safetensors(ctx, path, &l);
    hd_io_list_free(ctx, &l);
    return st;
}

int hd_run_script_main(int argc, char **argv) {
    rs_args a;
    int rc = rs_parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    hd_script *s = NULL;
    hd_status st = hd_script_load(&ctx, a.script, &s);
    if (!st && a.compiler) st = hd_script_set_compiler(s, a.compiler);
    if (!st && a.device) st = hd_script_set_device(s, a.device);
    if (!st) st = rs_bind(&ctx, s, &a);
    if (!st && a.state) st = rs_state_load(&ctx, s, a.state);
    if (!st) st = hd_script_run(s);
    if (!st) st = a.output ? rs_save(&ctx, s, a.output) : rs_print(&ctx, s);
    if (!st && a.state) st = rs_state_save(&ctx, s, a.state);
    rc = st ? rs_fail(&ctx) : 0;
    hd_script_free(s);
    hd_ctx_release(&ctx);
    fflush(stdout);
    return rc;
}
