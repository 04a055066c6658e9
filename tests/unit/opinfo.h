/* What the tables of test_opinfo share: the checks every row gets
 * (opinfo_check.c) and the table of ops with their own input shapes
 * (opinfo_shaped.c). */
#ifndef HD_OPINFO_H
#define HD_OPINFO_H

#include "hd_backend.h"
#include "hd_compile.h"

/* Is got (from a compiler or a device) the same result as eager's want?
 * in: the op's inputs, for results defined up to sign (checked by their
 * defining properties instead). */
typedef int (*opinfo_same_fn)(const hd_tensor *want, const hd_tensor *got, hd_tensor *const *in);

/* One call of an op: what every check runs again. */
typedef struct opinfo_call {
    hd_op op;
    hd_tensor **in;
    int nin;
    const hd_attrs *at;
    const char *name;
    opinfo_same_fn same; /* NULL: opinfo_agrees */
} opinfo_call;

/* got against want: NaN as NaN, infinities exact, else within rtol. */
int opinfo_same_value(double got, double want, double rtol);
/* got against eager's want: bits for integers and bools, else close. */
int opinfo_agrees(const hd_tensor *want, const hd_tensor *got);
/* References' helpers: element idx of t (idx has nd_out dims, t's are the
 * last of them, broadcast where t's are 1); element idx of t (t's dims);
 * the index of row-major element e of shape. */
double opinfo_value_at(const hd_tensor *t, const int64_t *idx, int nd_out);
double opinfo_load(const hd_tensor *t, const int64_t *idx);
void opinfo_unravel(int64_t e, const int64_t *shape, int nd, int64_t *idx);
/* out's elements against want[], within rtol (a failure names the first
 * three elements that differ). */
void opinfo_check_values(const hd_tensor *out, const double *want, double rtol, const char *name);
/* The op on in (c->in, or the same inputs elsewhere); NULL on error. */
hd_tensor *opinfo_run(hd_ctx *ctx, const opinfo_call *c, hd_tensor *const *in);
/* The eager result out against the op traced and run by each cpu compiler
 * (twice: the second run reuses the buffers); with cuda, the op run
 * eagerly on the cuda device and, with cuda_compiled, through the cuda
 * compiler. */
void opinfo_check_compilers(hd_ctx *ctx, const opinfo_call *c, const hd_tensor *out, int cuda,
                            int cuda_compiled);
/* In f64: backward of sum(op(x) * r) against central differences, for
 * every float input that is not a number. */
void opinfo_check_grad(hd_ctx *ctx, const opinfo_call *c);

/* opinfo_shaped.c: its rows, each checked; does the table have op? */
int opinfo_shaped_run(hd_ctx *ctx, int cuda);
int opinfo_shaped_has(hd_op op);

#endif
