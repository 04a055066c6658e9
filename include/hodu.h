/* hodu.h: the embedding API of Hodu, a small tensor scripting language.
 *
 * One header, opaque handles, status codes. A host makes a VM, runs Hodu
 * source in it, hands it tensors (its own memory, borrowed without a copy,
 * or memory Hodu owns), calls Hodu functions, reads globals back, and runs
 * saved .hoduscript files. See docs/embedding.md for a complete example.
 *
 * Errors are values: every function that can fail returns a status (or
 * NULL) and leaves a message in its VM, read with hodu_error_message. No
 * call aborts or exits on bad input; the VM stays usable after any error.
 *
 * Ownership: every hodu_tensor * and hodu_script * a function returns is
 * the caller's, to give back with hodu_tensor_release / hodu_script_free.
 * hodu_vm_free releases whatever handles of that VM are still alive.
 *
 * Handles are checked: a hodu_vm *, hodu_tensor * or hodu_script * is a
 * numbered slot with a generation, not an address, so a handle used after
 * it was released (twice released, or used after hodu_vm_free), one of
 * another kind, or a made-up value is refused as NULL would be
 * (HODU_ERROR_ARGUMENT, NULL or -1) and never reaches freed memory.
 *
 * Threads: any number of VMs per process, each used by one thread at a
 * time; a call from a second thread while one is inside the VM returns
 * HODU_ERROR_ARGUMENT. Only hodu_vm_interrupt may be called from another
 * thread (or a signal handler). The one process-wide structure is the
 * table of handles (locked to add and remove, read without a lock). */
#ifndef HODU_H
#define HODU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HODU_VERSION_MAJOR  0
#define HODU_VERSION_MINOR  1
#define HODU_VERSION_PATCH  0
#define HODU_VERSION_STRING "0.1.0"

#if defined(__GNUC__) || defined(__clang__)
#define HODU_API __attribute__((visibility("default")))
#else
#define HODU_API
#endif

typedef struct hodu_vm hodu_vm;
typedef struct hodu_tensor hodu_tensor;
typedef struct hodu_script hodu_script;

typedef enum {
    HODU_OK = 0,
    HODU_ERROR_SYNTAX,   /* parse or name errors, before anything ran */
    HODU_ERROR_RUNTIME,  /* the program failed while running */
    HODU_ERROR_MEMORY,   /* an allocation failed or passed memory_limit */
    HODU_ERROR_LIMIT,    /* max_steps, the call depth limit, or hodu_vm_interrupt */
    HODU_ERROR_IO,       /* a file could not be read or written */
    HODU_ERROR_ARGUMENT, /* the host passed something invalid */
} hodu_status;

typedef enum {
    HODU_F16,
    HODU_BF16,
    HODU_F32,
    HODU_F64,
    HODU_I8,
    HODU_U8,
    HODU_I32,
    HODU_I64,
    HODU_BOOL,
    HODU_DTYPE_INVALID = -1 /* what hodu_tensor_dtype(NULL) returns */
} hodu_dtype;

/* Lua's allocator contract: nsize == 0 frees ptr (osize bytes) and returns
 * NULL; otherwise allocate (ptr == NULL) or resize to nsize bytes, returning
 * NULL on failure (ptr stays valid). Shrinking (nsize <= osize) must not
 * fail. Memory need not be zeroed; alignment as malloc's. */
typedef void *(*hodu_alloc_fn)(void *ud, void *ptr, size_t osize, size_t nsize);
/* Receives what the program prints (s is not NUL-terminated). */
typedef void (*hodu_write_fn)(void *ud, const char *s, size_t n);

/* Zero-initialised fields mean the defaults, except allow_io: a zeroed
 * struct has no file access (pass NULL, or call hodu_options_init, for the
 * defaults with file access). */
typedef struct hodu_options {
    size_t memory_limit; /* bytes of tensor and VM memory; 0: no limit */
    uint64_t max_steps;  /* loop iterations and calls per hodu_eval / hodu_call; 0: none */
    /* wall-clock milliseconds per hodu_eval / hodu_call / hodu_script_run, checked between
     * statements' loop iterations and calls and inside long kernels;
     * HODU_ERROR_LIMIT "time limit (N ms) exceeded"; 0: none */
    uint32_t time_limit_ms;
    int allow_io;        /* 0: no file builtins (load, save, read_csv, ...), no path imports */
    hodu_alloc_fn alloc; /* NULL: realloc and free */
    void *alloc_ud;
    hodu_write_fn write; /* NULL: standard output */
    void *write_ud;
    int num_threads;         /* threads for large kernels; 0: HODU_NUM_THREADS or the cores */
    const char *stdlib_path; /* folder of the standard modules; NULL: the installed one */
} hodu_options;

/* ---- library ---- */

HODU_API const char *hodu_version(void);               /* "0.1.0" */
HODU_API const char *hodu_status_name(hodu_status st); /* "HODU_ERROR_MEMORY" */
HODU_API const char *hodu_dtype_name(hodu_dtype dt);   /* "f32"; "invalid" if unknown */
HODU_API size_t hodu_dtype_size(hodu_dtype dt);        /* bytes per element; 0 if unknown */
HODU_API void hodu_options_init(hodu_options *opts);   /* the defaults, file access on */

/* ---- VMs ---- */

/* NULL opts: defaults (file access, no limits). Returns NULL when memory
 * runs out, memory_limit is too small for the VM itself, or opts is bad. */
HODU_API hodu_vm *hodu_vm_new(const hodu_options *opts);
/* Frees the VM, its globals, and every handle of it still alive. Ignored
 * when called from a hook while the VM runs. */
HODU_API void hodu_vm_free(hodu_vm *vm);
/* Make the running hodu_eval / hodu_call stop with HODU_ERROR_LIMIT
 * ("interrupted") at its next loop iteration or call, or inside a long
 * reduction or string repetition. Safe from another thread or a signal
 * handler. */
HODU_API void hodu_vm_interrupt(hodu_vm *vm);
/* Run what follows with an execution strategy preset: "default",
 * "training", "inference", "memory_efficient", "high_throughput" or
 * "debug" (as set_strategy(name) in a program; docs/strategy.md). An
 * unknown name is HODU_ERROR_RUNTIME with a message listing them. */
HODU_API hodu_status hodu_vm_set_strategy(hodu_vm *vm, const char *name);

/* Run source (a whole program; its top-level names become globals that
 * later calls see). chunk_name appears in error messages; NULL: "<host>". */
HODU_API hodu_status hodu_eval(hodu_vm *vm, const char *source, const char *chunk_name);
/* Run a .hodu file; the host reads it whatever allow_io says. */
HODU_API hodu_status hodu_eval_file(hodu_vm *vm, const char *path);

/* The last error: "file:line:col: error: message", the source line with a
 * caret and the call trace, on several lines (no final newline). "" when
 * the last call that could fail succeeded. Valid until the next call on
 * vm. NULL vm gives a fixed message. */
HODU_API const char *hodu_error_message(hodu_vm *vm);
/* The status of the last call that could fail (HODU_OK if it succeeded):
 * tells why a function that returns a handle returned NULL. */
HODU_API hodu_status hodu_error_status(hodu_vm *vm);

/* ---- tensors ----
 * A handle holds one reference to a tensor of its VM. Shapes have at most
 * 8 dims, none negative; ndim 0 is a scalar (shape may then be NULL). */

/* Borrow data (contiguous, row-major, aligned for dt): no copy. Hodu never
 * frees it and writes into it when a program assigns to the tensor in
 * place; it must stay valid while the VM can reach it (see docs). */
HODU_API hodu_tensor *hodu_tensor_wrap(hodu_vm *vm, hodu_dtype dt, const int64_t *shape, int ndim,
                                       void *data);
/* A new zeroed tensor in memory Hodu owns (counted in memory_limit). */
HODU_API hodu_tensor *hodu_tensor_new(hodu_vm *vm, hodu_dtype dt, const int64_t *shape, int ndim);
/* Contiguous row-major host memory with the tensor's values. For a tensor
 * that is not contiguous (a transposed view, say) this is a copy held by
 * the handle, refreshed at each call when the tensor changed; writes to a
 * copy do not reach the tensor. NULL on error (the message is in the VM). */
HODU_API void *hodu_tensor_data(hodu_tensor *t);
HODU_API int hodu_tensor_ndim(const hodu_tensor *t);             /* -1 for NULL */
HODU_API const int64_t *hodu_tensor_shape(const hodu_tensor *t); /* ndim entries; NULL for NULL */
HODU_API hodu_dtype hodu_tensor_dtype(const hodu_tensor *t);
HODU_API int64_t hodu_tensor_numel(const hodu_tensor *t); /* -1 for NULL */
HODU_API size_t hodu_tensor_nbytes(const hodu_tensor *t); /* numel * dtype size */
/* Drop the handle (the tensor lives on while a global or script holds it).
 * NULL is a no-op. */
HODU_API void hodu_tensor_release(hodu_tensor *t);

/* ---- globals (the top-level names of the programs run in the VM) ---- */

/* Bind name to t's tensor (shared, not copied; the handle stays the
 * caller's). name must be an identifier and not a keyword. */
HODU_API hodu_status hodu_set_global(hodu_vm *vm, const char *name, hodu_tensor *t);
HODU_API hodu_status hodu_set_global_number(hodu_vm *vm, const char *name, double value);
/* A new handle on the global's tensor, or NULL and an error if there is no
 * such global or it is not a tensor. */
HODU_API hodu_tensor *hodu_get_global_tensor(hodu_vm *vm, const char *name);
/* An int, float or bool global, or a tensor of one element. */
HODU_API hodu_status hodu_get_global_number(hodu_vm *vm, const char *name, double *out);

/* Call the global function fn_name (a name like "model.forward" calls a
 * member) with tensor arguments. *result (result may be NULL) receives a
 * new handle: the returned tensor, a number or bool as a 0-d tensor (f64,
 * i64, bool), or NULL when the function returned none. */
HODU_API hodu_status hodu_call(hodu_vm *vm, const char *fn_name, hodu_tensor **args, int nargs,
                               hodu_tensor **result);

/* ---- scripts (saved compiled graphs, .hoduscript) ---- */

/* Load a .hoduscript file (the host reads it whatever allow_io says). */
HODU_API hodu_script *hodu_script_load(hodu_vm *vm, const char *path);
/* Bind input name (the script keeps a reference to t's tensor). Wrong
 * names, shapes or dtypes are HODU_ERROR_ARGUMENT, naming what the script
 * expects. */
HODU_API hodu_status hodu_script_set_input(hodu_script *s, const char *name, hodu_tensor *t);
/* Run with the bound inputs (compiling on the first run). */
HODU_API hodu_status hodu_script_run(hodu_script *s);
/* A new handle on output name of the last run, or NULL and an error. */
HODU_API hodu_tensor *hodu_script_output(hodu_script *s, const char *name);
/* A script that trains keeps state (parameters, optimizer buffers) that
 * every run reads and updates, so runs continue from each other. A new
 * handle on state variable name ("model.weight"), or NULL and an error
 * (no such variable, or none before a first run). */
HODU_API hodu_tensor *hodu_script_state(hodu_script *s, const char *name);
/* Replace state variable name's value by a copy of t's (same dtype and
 * shape, else HODU_ERROR_ARGUMENT naming what is expected). */
HODU_API hodu_status hodu_script_set_state(hodu_script *s, const char *name, hodu_tensor *t);
/* NULL is a no-op. */
HODU_API void hodu_script_free(hodu_script *s);

#ifdef __cplusplus
}
#endif

#endif
