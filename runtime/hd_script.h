/* hd_script: scripts and the .hoduscript file format.
 *
 * A script is a named graph with named inputs and outputs, the tensors
 * bound to its inputs, a compiler and device, and the executable compiled
 * from it on first use. The language's script("name") { ... } block traces
 * its body (hd_trace.h) and hands the graph to hd_script_new;
 * load_script(path) is hd_script_load.
 *
 * A .hoduscript file (docs/hoduscript.md) holds the graph with op names,
 * attributes, input and output names, types, and the constants' bytes,
 * protected by a CRC-32. Loading validates every field before allocating
 * for it, re-runs every shape rule, and never runs code. */
#ifndef HD_SCRIPT_H
#define HD_SCRIPT_H

#include "hd_compile.h"
#include "hd_ir.h"

#define HD_SCRIPT_MAGIC   "HODUSCRP"
#define HD_SCRIPT_VERSION 5 /* 3: loop nodes, 4: while loops, 5: stacks; files are written in the oldest version that holds them */
/* Graph inputs and outputs named "$" + a state variable's name carry that
 * variable (read before a run, written after it). */
#define HD_SCRIPT_STATE_PREFIX '$'

/* A state variable of a script: a tensor the graph reads and writes back at
 * every run (a parameter, an optimizer buffer), or none before the first
 * run. inplace: runs copy the new value into t (it is shared with the
 * program that made the script) instead of replacing it. */
typedef struct hd_script_var {
    char *name;
    hd_tensor *t; /* held, or NULL (none) */
    int inplace;
} hd_script_var;

/* ---- the file format ---- */

/* Serialise g into a new buffer (hd_ctx_alloc; free with hd_ctx_free(ctx,
 * *data, *size)). Graphs with host callbacks cannot be saved. */
hd_status hd_script_encode(hd_ctx *ctx, const hd_ir_graph *g, unsigned char **data, size_t *size);
/* Parse and validate a buffer into a new graph (a state section is read,
 * checked and dropped). */
hd_status hd_script_decode(hd_ctx *ctx, const unsigned char *data, size_t size, hd_ir_graph **out);
/* The same with state variables: a file of version 2 when nvars > 0 (else
 * version 1, byte for byte as hd_script_encode). Decoding gives *vars
 * (hd_ctx_alloc'd, free with hd_script_vars_free) and checks every "$"
 * input and output of the graph against them. */
hd_status hd_script_encode_state(hd_ctx *ctx, const hd_ir_graph *g, const hd_script_var *vars,
                                 int nvars, unsigned char **data, size_t *size);
hd_status hd_script_decode_state(hd_ctx *ctx, const unsigned char *data, size_t size,
                                 hd_ir_graph **out, hd_script_var **vars, int *nvars);
void hd_script_vars_free(hd_ctx *ctx, hd_script_var *vars, int nvars);
/* Do the graph's "$" ports agree with vars (each names a variable; an input's
 * type is its variable's, when it has a value)? An HD_ERR_ARGUMENT error if
 * not. */
hd_status hd_script_check_state(hd_ctx *ctx, const hd_ir_graph *g, const hd_script_var *vars,
                                int nvars);
hd_status hd_script_save_graph(hd_ctx *ctx, const hd_ir_graph *g, const char *path);
/* Files larger than max_bytes (0: 1 GiB) are refused before reading. */
hd_status hd_script_load_graph(hd_ctx *ctx, const char *path, size_t max_bytes, hd_ir_graph **out);
/* The same with state variables (see hd_script_encode_state). */
hd_status hd_script_save_file(hd_ctx *ctx, const hd_ir_graph *g, const hd_script_var *vars,
                              int nvars, const char *path);
hd_status hd_script_load_file(hd_ctx *ctx, const char *path, size_t max_bytes, hd_ir_graph **out,
                              hd_script_var **vars, int *nvars);

/* ---- script objects ---- */

typedef struct hd_script hd_script;

/* A script over g, which it takes (freed with the script, or on error). */
hd_script *hd_script_new(hd_ctx *ctx, hd_ir_graph *g);
/* Give s state variables (taken: the array and what it holds, also on
 * error). init, when not NULL, is the graph of the first run (taken): a
 * block whose first run starts from other state (buffers still none) than
 * the later ones; g is then the graph of the later runs. */
hd_status hd_script_set_state(hd_script *s, hd_script_var *vars, int nvars, hd_ir_graph *init);
int hd_script_nstate(const hd_script *s);
const hd_script_var *hd_script_state_at(const hd_script *s, int i);
/* Replace variable name's value (a reference is held) by t, which must have
 * the variable's dtype and shape; errors name what is expected. t NULL
 * makes a variable that is not written in place none. */
hd_status hd_script_state_put(hd_script *s, const char *name, hd_tensor *t);
/* Is the graph of the first run still to run (the state cannot be saved)? */
int hd_script_state_pending(const hd_script *s);
void hd_script_free(hd_script *s);
hd_status hd_script_load(hd_ctx *ctx, const char *path, hd_script **out);
hd_status hd_script_save(hd_script *s, const char *path);

const char *hd_script_name(const hd_script *s);
/* The traced graph (not optimised); the optimised one once compiled. */
const hd_ir_graph *hd_script_graph(const hd_script *s);
const hd_ir_graph *hd_script_compiled_graph(const hd_script *s);

/* s.inputs / s.outputs: name, dtype, shape of entry i (state inputs and
 * outputs, "$name", are not among them). */
typedef struct hd_script_port {
    const char *name;
    hd_dtype dtype;
    int ndim;
    const int64_t *shape;
} hd_script_port;
int hd_script_ninputs(const hd_script *s);
int hd_script_noutputs(const hd_script *s);
void hd_script_input_info(const hd_script *s, int i, hd_script_port *p);
void hd_script_output_info(const hd_script *s, int i, hd_script_port *p);

/* Bind a tensor (a reference is held) to input name; the error names the
 * input, what it expects and what it got. */
hd_status hd_script_set_input(hd_script *s, const char *name, hd_tensor *t);
void hd_script_clear_inputs(hd_script *s);

/* Compile now (explicit warm-up); a no-op when already compiled. */
hd_status hd_script_compile(hd_script *s);
/* Run with the bound inputs (compiling first if needed). The outputs of the
 * last run stay in the script until the next run. */
hd_status hd_script_run(hd_script *s);
/* Output of the last run by name or index: borrowed, NULL if none. */
hd_tensor *hd_script_output(const hd_script *s, const char *name);
hd_tensor *hd_script_output_at(const hd_script *s, int i);

/* Both drop the compiled executable; the next run compiles again. */
hd_status hd_script_set_compiler(hd_script *s, const char *name);
hd_status hd_script_set_device(hd_script *s, const char *device);
const char *hd_script_compiler(const hd_script *s);
const char *hd_script_device(const hd_script *s);

typedef struct hd_script_stats {
    int compiled;  /* an executable exists */
    uint64_t runs; /* runs of the current executable */
    uint64_t compiles;
    hd_jit_stats jit; /* of the current executable (zero before compiling) */
} hd_script_stats;
void hd_script_stats_get(const hd_script *s, hd_script_stats *st);

/* s.ir() and s.dot(): the compiled graph once compiled, else the traced
 * one. Strings from hd_ctx_alloc, freed with hd_ctx_strfree. */
char *hd_script_ir(const hd_script *s);
char *hd_script_dot(const hd_script *s);

#endif
