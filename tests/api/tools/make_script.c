/* make_script OUT.hoduscript: writes the script the API tests and the
 * embedding example run: "predict", input x (f32 [4, 3]), output
 * y = relu(x @ w + b) with the example's w and b as constants. Built on the
 * runtime's tracer until the language can save scripts itself. */
#include "hd_script.h"
#include "hd_trace.h"

#include <stdio.h>

static const float weights[3][2] = {{0.1f, -0.2f}, {0.2f, 0.1f}, {0.3f, 0.4f}};
static const float bias[2] = {0.5f, -1.0f};

static hd_status op(hd_ctx *ctx, hd_op o, hd_tensor *a, hd_tensor *b, hd_tensor **out) {
    hd_tensor *in[2] = {a, b};
    return hd_op_run(ctx, o, in, b ? 2 : 1, NULL, out);
}

static hd_status build(hd_ctx *ctx, hd_ir_graph **g) {
    int64_t sx[2] = {4, 3}, sw[2] = {3, 2}, sb[1] = {2};
    hd_tensor *w = hd_tensor_from_data(ctx, HD_F32, sw, 2, weights);
    hd_tensor *b = hd_tensor_from_data(ctx, HD_F32, sb, 1, bias);
    hd_tensor *x = NULL, *xw = NULL, *xwb = NULL, *y = NULL;
    hd_status st = w && b ? hd_trace_begin(ctx, "predict") : HD_ERR_MEMORY;
    int tracing = st == HD_OK;
    if (!st) st = (x = hd_trace_input(ctx, "x", HD_F32, sx, 2)) ? HD_OK : ctx->status;
    if (!st) st = op(ctx, HD_OP_MATMUL, x, w, &xw);
    if (!st) st = op(ctx, HD_OP_ADD, xw, b, &xwb);
    if (!st) st = op(ctx, HD_OP_RELU, xwb, NULL, &y);
    if (!st) st = hd_trace_output(ctx, "y", y);
    if (!st)
        st = hd_trace_end(ctx, g);
    else if (tracing)
        hd_trace_abort(ctx);
    hd_tensor *all[] = {w, b, x, xw, xwb, y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) hd_tensor_unref(all[i]);
    return st;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_script OUT.hoduscript\n");
        return 2;
    }
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    hd_ir_graph *g = NULL;
    hd_status st = build(&ctx, &g);
    if (!st) st = hd_script_save_graph(&ctx, g, argv[1]);
    if (st) fprintf(stderr, "make_script: %s\n", hd_error_message(&ctx));
    hd_ir_graph_free(g);
    hd_ctx_release(&ctx);
    return st ? 1 : 0;
}
