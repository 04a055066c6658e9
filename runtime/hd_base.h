/* hd_base: status codes, the runtime context, its allocator and its error slot.
 *
 * Every runtime call takes an hd_ctx. The context owns no global state: many
 * contexts may live in one process, each used by one thread at a time. All
 * memory the runtime allocates goes through hd_ctx_alloc so that a host can cap
 * it and tests can fail the k-th allocation. */
#ifndef HD_BASE_H
#define HD_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdatomic.h>

/* Same values as hodu_status in include/hodu.h. */
typedef enum {
    HD_OK = 0,
    HD_ERR_SYNTAX,
    HD_ERR_RUNTIME,
    HD_ERR_MEMORY,
    HD_ERR_LIMIT,
    HD_ERR_IO,
    HD_ERR_ARGUMENT,
} hd_status;

/* Lua-style allocator hook: nsize == 0 frees, ptr == NULL allocates. */
typedef void *(*hd_alloc_fn)(void *ud, void *ptr, size_t osize, size_t nsize);

#define HD_ERRMSG_MAX 1024

/* Freed tensor blocks kept for reuse (see hd_ctx_alloc_block): blocks of
 * at least HD_BLOCK_CACHE_MIN bytes; those under HD_BLOCK_CACHE_ROUND are
 * made in size classes (8 per power of two), so that nearby sizes share. */
#define HD_BLOCK_CACHE_SLOTS 64
#define HD_BLOCK_CACHE_MIN   ((size_t)16 << 10)
#define HD_BLOCK_CACHE_ROUND ((size_t)1 << 20)
typedef struct hd_cached_block {
    void *p;
    size_t n;
} hd_cached_block;

/* A gradient context (grad_context blocks and context values; the outermost
 * one is built into hd_ctx). Managed by hd_autograd.c: records made while it
 * is innermost are linked here so that clear_tape(), the block's end or the
 * context's release can free them. */
typedef struct hd_grad_scope {
    struct hd_grad_scope *parent;
    struct hd_grad_node *records; /* live records made in this context */
    size_t nrecords;
    uint64_t id;        /* tensors name their context by id: ids are never reused */
    int outer_disabled; /* grad mode to restore when the block ends */
    int entered;        /* on the stack of entered contexts */
    int held;           /* made by hd_grad_context_new: its owner frees it, not the block */
    int watch_outer;    /* note a recordable op reading a tensor the enclosing context tracks */
    int read_outer;     /* ... one did (grad and vjp refuse: their results would drop it) */
} hd_grad_scope;

struct hd_backend;
struct hd_tensor;

/* When a run must stop: its owner's interrupt flag (set to HD_STOP_INTERRUPT
 * by an interrupt, maybe from another thread or a signal handler) and a
 * deadline on the monotonic clock, which the first look after it turns into
 * HD_STOP_TIME in the flag. */
enum { HD_STOP_INTERRUPT = 1, HD_STOP_TIME = 2 };
typedef struct hd_stop {
    _Atomic int *flag;   /* NULL: nothing stops the owner */
    int64_t deadline_ns; /* 0: none */
    uint32_t limit_ms;   /* the limit the deadline came from, for messages */
} hd_stop;

typedef struct hd_profile hd_profile;

/* hd_ctx.autocast: a strategy's precision (hd_op.c). OFF: ops run in
 * their inputs' dtypes; MIXED, MIXED_F16: matmul and conv2d of f32 run in
 * bf16 or f16 (the result back in f32); FULL, HALF: every op with float
 * inputs runs in f64, f16 (its float inputs cast; the result stays in
 * that dtype). */
enum {
    HD_AUTOCAST_OFF,
    HD_AUTOCAST_MIXED,
    HD_AUTOCAST_FULL,
    HD_AUTOCAST_HALF,
    HD_AUTOCAST_MIXED_F16
};

typedef struct hd_ctx {
    hd_alloc_fn alloc;
    void *alloc_ud;
    size_t mem_used;     /* bytes currently allocated through this context */
    size_t mem_peak;     /* high-water mark of mem_used */
    size_t mem_limit;    /* 0: no limit */
    long fail_countdown; /* tests: the allocation that brings this to 0 fails; <0 off */
    int nthreads;        /* threads for large kernels; 1 = single-threaded */
    int disk_off;        /* 1: never touch the disk (no disk cache): VMs without file access */
    /* when the owner's run must stop: long kernels look every
     * HD_INTERRUPT_CHUNK elements or so and stop early (hd_ctx_interrupted) */
    hd_stop stop;
    uint64_t rng_seed;   /* Philox key */
    uint64_t rng_offset; /* Philox counter: next unused 128-bit block */
    size_t cache_limit;  /* bytes of freed large blocks kept for reuse; 0: off */
    size_t cache_bytes;
    int cache_count;
    hd_cached_block cache[HD_BLOCK_CACHE_SLOTS];
    hd_status status; /* last error */
    char errmsg[HD_ERRMSG_MAX];
    int grad_disabled;        /* no_grad: ops are not recorded for gradients */
    int grad_create;          /* a backward(create_graph = true) runs: its rules are recorded */
    uint64_t grad_ids;        /* last id given to a gradient context or a backward pass */
    uint64_t grad_seq;        /* records made so far (hd_grad_node.seq) */
    struct hd_profile *prof;  /* the profiler (hd_profile.h), or NULL */
    struct hd_memo *memo;     /* memory "cached": results kept (hd_memo.h), or NULL when off */
    struct hd_memo *memo_mem; /* the memo's memory, kept while off (hd_memo_set) */
    int autocast;             /* HD_AUTOCAST_*: the precision ops run in (hd_op.c) */
    /* gradient contexts: the outermost (id 0), and the innermost (NULL: the outermost) */
    hd_grad_scope grad_root;
    hd_grad_scope *grad_scope;
    /* tracing (hd_trace.h): while a trace is active, hd_op_run records graph
     * nodes instead of computing; serials tell one trace's tensors from
     * another's */
    struct hd_trace *trace;
    uint32_t trace_serial;
    /* a traced loop's check that its iterations repeat (hd_autograd.h,
     * hd_grad_watch_*): records made while grad_watch is nonzero carry it,
     * and every change to a leaf's .grad or requires_grad is told to
     * grad_write first */
    uint32_t grad_watch;
    uint32_t grad_watch_seq; /* the last generation given (hd_grad_watch_next) */
    void (*grad_write)(struct hd_ctx *ctx, void *ud, struct hd_tensor *t);
    void *grad_write_ud;
    /* told of each leaf's gradient as backward() completes it
     * (hd_grad_set_watcher), and the backward pass running (NULL: none) */
    const struct hd_grad_watcher *grad_watcher;
    void *grad_pass;
    /* where ops without tensor inputs (creation) put their result: NULL is
     * the cpu (hd_op_place_push in hd_op.h) */
    const struct hd_backend *place_backend;
    int place_device;
    /* a device backend's state in this context (allocator, streams, loaded
     * kernels), made on first use; device_release frees it (hd_ctx_release) */
    void *device_state;
    void (*device_release)(struct hd_ctx *ctx);
} hd_ctx;

/* Project invariants only; never for conditions a user, file or host causes. */
#ifdef NDEBUG
#define HD_ASSERT(c) ((void)0)
#else
#define HD_ASSERT(c) ((c) ? (void)0 : hd_assert_fail(#c, __FILE__, __LINE__))
#endif
void hd_assert_fail(const char *cond, const char *file, int line);

#define HD_UNUSED(x) ((void)(x))
#define HD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HD_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Elements a kernel may process between two looks at ctx->interrupt. */
#define HD_INTERRUPT_CHUNK ((int64_t)1 << 16)

/* Monotonic time in nanoseconds. */
int64_t hd_now_ns(void);

/* HODU_LOG: a comma- or space-separated list of categories (the table is
 * in hd_base.c and docs/runtime.md; `all` turns every one on). Is cat
 * on? */
int hd_log_on(const char *cat);
/* Once per process: HODU_LOG=help prints the categories to stderr, and an
 * unknown category gets a warning naming the known ones. */
void hd_log_check(void);
/* The deadline has passed: sets the flag to HD_STOP_TIME and says 1. */
int hd_stop_deadline(const hd_stop *s);
/* The run must stop (a relaxed load, and a clock read when there is a
 * deadline: cheap enough once a chunk). */
static inline int hd_stop_now(const hd_stop *s) {
    if (!s || !s->flag) return 0;
    if (atomic_load_explicit(s->flag, memory_order_relaxed)) return 1;
    return s->deadline_ns && hd_stop_deadline(s);
}
static inline int hd_ctx_interrupted(const hd_ctx *ctx) {
    return hd_stop_now(&ctx->stop);
}
/* Why the run stopped, for an error message: "interrupted" or "time limit
 * (N ms) exceeded" (buf holds the text). */
const char *hd_stop_reason(const hd_stop *s, char *buf, size_t n);
/* The HD_ERR_LIMIT error of a stopped run. */
hd_status hd_ctx_stop_error(hd_ctx *ctx);

/* Initialise a context with the default allocator (alloc may be NULL). */
void hd_ctx_init(hd_ctx *ctx, hd_alloc_fn alloc, void *ud);

/* Allocation through the context: NULL and an HD_ERR_MEMORY error on failure,
 * on passing mem_limit, or when the test countdown reaches zero. */
void *hd_ctx_alloc(hd_ctx *ctx, size_t nbytes);
void *hd_ctx_calloc(hd_ctx *ctx, size_t n, size_t size);
void *hd_ctx_realloc(hd_ctx *ctx, void *p, size_t osize, size_t nsize);
void hd_ctx_free(hd_ctx *ctx, void *p, size_t nbytes);
/* Large blocks (tensor storage). With a cache limit set, freed blocks of at
 * least HD_BLOCK_CACHE_MIN bytes are kept and handed out again for requests
 * of up to the same size (and no less than 3/4 of it), so a loop that makes
 * and drops tensors does not pay the system's page faults each time (the
 * C library gives freed memory back to the system and faults it in again
 * when the heap grows back). Requests under HD_BLOCK_CACHE_ROUND are
 * rounded up to their size class first (at most 1/8 more).
 * Cached bytes stay counted in mem_used; an allocation that would pass the
 * memory limit empties the cache first. *got receives the block's size,
 * which must be passed back to hd_ctx_free_block. */
void *hd_ctx_alloc_block(hd_ctx *ctx, size_t nbytes, size_t *got);
void hd_ctx_free_block(hd_ctx *ctx, void *p, size_t size);
void hd_ctx_set_cache_limit(hd_ctx *ctx, size_t bytes);
/* The size hd_ctx_alloc_block makes a request of nbytes with the cache on. */
size_t hd_block_class(size_t nbytes);
/* Return every cached block to the allocator. */
void hd_ctx_trim(hd_ctx *ctx);
/* Release what the context holds (the block cache, device state). */
void hd_ctx_release(hd_ctx *ctx);
char *hd_ctx_strdup(hd_ctx *ctx, const char *s);
void hd_ctx_strfree(hd_ctx *ctx, char *s);

/* Record an error and return its status, so callers write
 * `return hd_error(ctx, HD_ERR_RUNTIME, "...", ...);`. */
hd_status hd_error(hd_ctx *ctx, hd_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
hd_status hd_verror(hd_ctx *ctx, hd_status st, const char *fmt, va_list ap);
void hd_error_clear(hd_ctx *ctx);
const char *hd_error_message(const hd_ctx *ctx);

/* Overflow-checked size arithmetic: 0 on overflow. */
int hd_mul_overflow(size_t a, size_t b, size_t *out);

#endif
