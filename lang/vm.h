/* vm: one interpreter instance: its runtime context, globals, builtins,
 * loaded modules and error state. Used by the CLI, the REPL and (later) the
 * embedding API. No global mutable state: many VMs per process. */
#ifndef HD_VM_H
#define HD_VM_H

#include "value.h"

typedef struct hd_vm_options {
    size_t memory_limit; /* 0: none */
    uint64_t max_steps;  /* 0: none */
    uint32_t time_limit_ms; /* wall-clock time per run (hd_vm_run_begin); 0: none */
    int allow_io;        /* file builtins and path imports */
    int argc;            /* args() of the program */
    char **argv;
    hd_alloc_fn alloc; /* every byte of the VM, itself included; NULL: realloc/free */
    void *alloc_ud;
    int nthreads;           /* threads for large kernels; 0: HODU_NUM_THREADS or the cores */
    const char *stdlib_dir; /* NULL: found as hd_vm_new describes */
} hd_vm_options;

/* NULL opts: defaults, io allowed. NULL when memory runs out (or the
 * memory limit is too small for the VM itself). The standard library is
 * opts->stdlib_dir, else the first folder that exists of: the installed
 * one next to the binary holding this code (../share/hodu/stdlib from the
 * library or the program), the install prefix's, the source tree's. */
hd_vm *hd_vm_new(const hd_vm_options *opts);
void hd_vm_free(hd_vm *vm);

/* Whether file builtins exist in this VM (builtins that touch files
 * register only when this is true). */
int hd_vm_allow_io(const hd_vm *vm);

/* Run a chunk of source. In REPL mode the value of each top-level
 * expression statement that is not none is printed, and globals persist
 * between chunks. Returns HD_OK, HD_ERR_SYNTAX (also when *incomplete is
 * set: the input ended inside an open construct), HD_ERR_RUNTIME, ... */
typedef struct hd_eval_opts {
    int repl;       /* print expression statement values */
    int check_only; /* parse and resolve, do not run (hodu check) */
} hd_eval_opts;
hd_status hd_vm_eval(hd_vm *vm, const char *source, size_t len, const char *chunk,
                     const hd_eval_opts *opts, int *incomplete);
hd_status hd_vm_eval_file(hd_vm *vm, const char *path, const hd_eval_opts *opts);

/* The full text of the last error: "file:line:col: error: message", the
 * source line, a caret, and the call trace (several errors for syntax and
 * name errors). Empty if none. */
const char *hd_vm_error_text(hd_vm *vm);
/* Apply the execution strategy preset called name (strategy.c): an error
 * listing the presets when there is none so called. */
hd_status hd_vm_set_strategy(hd_vm *vm, const char *name);
void hd_vm_clear_error(hd_vm *vm);

/* Ask a running evaluation to stop at the next statement with an
 * "interrupted" error (sets an atomic flag: safe from a signal handler or
 * another thread). */
void hd_vm_interrupt(hd_vm *vm);

/* A run (an evaluation, or a call from the host) begins: the step count,
 * the interrupt flag and the time limit's deadline start again. */
void hd_vm_run_begin(hd_vm *vm);

/* REPL support: global names (builtins and user globals), a global's
 * value (borrowed, NULL if none), and the member names of a value. */
void hd_vm_global_names(hd_vm *vm, void (*fn)(const char *name, void *ud), void *ud);
hd_value *hd_vm_get_global(hd_vm *vm, const char *name);
void hd_vm_member_names(hd_vm *vm, hd_value v, void (*fn)(const char *name, void *ud), void *ud);

/* Gradient blocks: `no_grad { }` and `grad_context { }` call enter (kind is
 * HD_AST_NO_GRAD or HD_AST_GRAD_CTX from ast.h) before the block and exit
 * after it, also when the block fails. arg is the value of `grad_context(arg)
 * { }` (borrowed), NULL for the forms without one. The autograd layer
 * installs them; without hooks the blocks just run their body. */
typedef hd_status (*hd_grad_enter_fn)(hd_vm *vm, int kind, const hd_value *arg, void **state);
typedef void (*hd_grad_exit_fn)(hd_vm *vm, int kind, void *state);
void hd_vm_set_grad_hooks(hd_vm *vm, hd_grad_enter_fn enter, hd_grad_exit_fn exit);

/* Limit on nested Hodu calls (default 1000); returns the previous one. */
int hd_vm_set_max_depth(hd_vm *vm, int depth);

/* Redirect print output (default: stdout). */
void hd_vm_set_writer(hd_vm *vm, void (*write)(void *ud, const char *s, size_t n), void *ud);

#endif
