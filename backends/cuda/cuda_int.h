/* Internal interface of the CUDA backend (backends/cuda).
 *
 * Nothing here links against CUDA: the driver (libcuda.so.1), NVRTC and
 * cuBLAS are opened with dlopen on first use (cuda_loader.c), so one build
 * runs with and without a GPU, and builds without the toolkit (the types
 * and values it uses are in cuda_abi.h). A build configured with
 * HODU_CUDA=OFF compiles cuda_stub.c instead; the kernel sources
 * (cuda_src.c) are generated in plain C in every build. */
#ifndef HD_CUDA_INT_H
#define HD_CUDA_INT_H

#include "hd_backend.h"

/* ---- kernel sources (cuda_src.c, every build) ---- */

/* A generated CUDA C program: one module holding the kernels of one op (or
 * one fused group) for every dtype combination it is asked for. */
typedef struct hd_cuda_src {
    hd_ctx *ctx; /* memory comes from its allocator */
    char *text;
    size_t len, cap;
    int oom;
} hd_cuda_src;

void hd_cuda_src_init(hd_cuda_src *s, hd_ctx *ctx);
void hd_cuda_src_free(hd_cuda_src *s);
void hd_cuda_src_printf(hd_cuda_src *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The shared prelude: integer types, f16/bf16 conversions, the op
 * functions named after hd_ops.def, Philox4x32-10, block reductions. */
const char *hd_cuda_prelude(void);

/* A dtype in CUDA C: its storage and compute types and conversions. */
typedef struct hd_cuda_dtype {
    const char *sfx;   /* name suffix: "f32" */
    const char *store; /* storage type: u16 for f16 and bf16 */
    const char *comp;  /* compute type: float for f16 and bf16 */
    const char *ld;    /* load: storage -> compute, %s is the element */
    const char *st;    /* store: compute -> storage (a function name or a cast) */
    const char *uns;   /* integers: the unsigned type arithmetic wraps in */
    const char *tmin, *tmax;
} hd_cuda_dtype;

const hd_cuda_dtype *hd_cuda_dtype_info(hd_dtype dt);
/* The expression of elementwise op on dtype dt as the eager kernels
 * compute it, in the compute type C (U: the unsigned type, TMIN/TMAX its
 * range; unary: x, clamp's bounds s0 s1; binary: a, b). NULL: none. The
 * local typedefs come from hd_cuda_src_types. */
const char *hd_cuda_ew_expr(hd_op op, hd_dtype dt);
/* Binary ops (either operand) and where (its values, not its condition):
 * an operand that is a 0-d host tensor is passed to the kernel as its
 * value's bytes (the pointer NULL), never copied to the device
 * (hd_backend.takes_number). */
int hd_cuda_takes_number(hd_op op, int i);
void hd_cuda_src_types(hd_cuda_src *s, hd_dtype dt);

/* Which module an op's kernels live in; -1: no CUDA kernel for the op. */
typedef enum {
    HD_CUDA_MOD_UNARY, /* one module per unary op (cast: one for every pair) */
    HD_CUDA_MOD_BINARY,
    HD_CUDA_MOD_WHERE,
    HD_CUDA_MOD_REDUCE,
    HD_CUDA_MOD_ROW, /* softmax family over one axis */
    HD_CUDA_MOD_CREATE,
    HD_CUDA_MOD_INDEX,
    HD_CUDA_MOD_NN,
} hd_cuda_mod_kind;

/* The kernel entry point's name for op on dtypes (in: first input; out:
 * the output), e.g. "k_add_f32_f32"; buf is returned. */
char *hd_cuda_kernel_name(hd_op op, hd_dtype in, hd_dtype out, char *buf, size_t n);
/* Append the module that holds op's kernels for every dtype the cpu
 * backend supports it for (the same set run_op accepts). 0 when op has no
 * CUDA kernel. */
int hd_cuda_src_module(hd_cuda_src *s, hd_op op);
/* Does the CUDA backend have a kernel (or a composition) for op at all? */
int hd_cuda_has_op(hd_op op);
/* Does op have a generated module (hd_cuda_src_module)? The rest of
 * hd_cuda_has_op's ops are compositions, copies or cuBLAS calls. */
int hd_cuda_op_generated(hd_op op);
/* conv2d, the 2-d pools and their gradients (cuda_src_more.c, cuda_ops.c) */
int hd_cuda_is_conv(hd_op op);
/* Does the reduction have a split form (a chunk argument and a _fin
 * kernel combining the partials)? */
int hd_cuda_reduce_splits(hd_op op);
/* How a split reduction of nout outputs over nred elements each divides
 * its work: the elements one 256-thread block reduces, or 0 for one block
 * per output. resident: the 256-thread blocks the device runs at once
 * (hd_cuda_dev.resident). The eager kernels and the cuda compiler both
 * ask here, so that a sum compiled adds in eager's order. */
int64_t hd_cuda_split_chunk(int64_t nout, int64_t nred, int64_t resident);
/* A reduction's output dtype for an input of dtype dt. */
hd_dtype hd_cuda_reduce_out(hd_op op, hd_dtype dt);

#if HODU_HAVE_CUDA
#include "cuda_abi.h"

/* ---- the libraries, opened once per process (cuda_loader.c) ---- */

/* The cuSOLVER dense routines of one working type: the S or the D
 * functions, whose prototypes differ only in float * / double * (here
 * void *, the same at the ABI). _bs: the workspace query. */
typedef struct hd_cuda_solver_fns {
    cusolverStatus_t (*getrf_bs)(cusolverDnHandle_t, int, int, void *, int, int *);
    cusolverStatus_t (*getrf)(cusolverDnHandle_t, int, int, void *, int, void *, int *, int *);
    cusolverStatus_t (*getrs)(cusolverDnHandle_t, cublasOperation_t, int, int, const void *, int,
                              const int *, void *, int, int *);
    cusolverStatus_t (*potrf_bs)(cusolverDnHandle_t, cublasFillMode_t, int, void *, int, int *);
    cusolverStatus_t (*potrf)(cusolverDnHandle_t, cublasFillMode_t, int, void *, int, void *, int,
                              int *);
    cusolverStatus_t (*geqrf_bs)(cusolverDnHandle_t, int, int, void *, int, int *);
    cusolverStatus_t (*geqrf)(cusolverDnHandle_t, int, int, void *, int, void *, void *, int,
                              int *);
    cusolverStatus_t (*orgqr_bs)(cusolverDnHandle_t, int, int, int, const void *, int, const void *,
                                 int *);
    cusolverStatus_t (*orgqr)(cusolverDnHandle_t, int, int, int, void *, int, const void *, void *,
                              int, int *);
    cusolverStatus_t (*gesvd_bs)(cusolverDnHandle_t, int, int, int *);
    cusolverStatus_t (*gesvd)(cusolverDnHandle_t, signed char, signed char, int, int, void *, int,
                              void *, void *, int, void *, int, void *, int, void *, int *);
    cusolverStatus_t (*syevd_bs)(cusolverDnHandle_t, cusolverEigMode_t, cublasFillMode_t, int,
                                 const void *, int, const void *, int *);
    cusolverStatus_t (*syevd)(cusolverDnHandle_t, cusolverEigMode_t, cublasFillMode_t, int, void *,
                              int, void *, void *, int, int *);
} hd_cuda_solver_fns;

typedef struct hd_cuda_api {
    /* driver */
    CUresult (*init)(unsigned);
    CUresult (*device_get_count)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*device_get_name)(char *, int, CUdevice);
    CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
    CUresult (*primary_ctx_release)(CUdevice);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*stream_synchronize)(CUstream);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*memcpy_htod)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*memcpy_dtoh)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*memcpy_dtod)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*memset_d8)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*module_load_data)(CUmodule *, const void *);
    CUresult (*module_unload)(CUmodule);
    CUresult (*module_get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
    CUresult (*get_error_string)(CUresult, const char **);
    CUresult (*stream_begin_capture)(CUstream, CUstreamCaptureMode);
    CUresult (*stream_end_capture)(CUstream, CUgraph *);
    CUresult (*graph_instantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*graph_launch)(CUgraphExec, CUstream);
    CUresult (*graph_exec_destroy)(CUgraphExec);
    CUresult (*graph_destroy)(CUgraph);
    /* events: the profiler's device times (cuda_prof.c); events_ok is 0
     * where the driver lacks them, and device work then goes untimed */
    CUresult (*event_create)(CUevent *, unsigned);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_synchronize)(CUevent);
    CUresult (*event_elapsed_time)(float *, CUevent, CUevent);
    CUresult (*event_destroy)(CUevent);
    int events_ok;
    /* pinned host memory: the staging slots of copies to the device
     * (cuda_backend.c); without it (or events) copies up wait */
    CUresult (*mem_host_alloc)(void **, size_t, unsigned);
    CUresult (*mem_free_host)(void *);
    /* copies between devices without the host waiting (cuda_backend.c);
     * peer_ok is 0 where any of these or the events are missing */
    CUresult (*memcpy_peer)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
    CUresult (*stream_wait_event)(CUstream, CUevent, unsigned);
    int peer_ok;
    int driver_ok;
    char driver_error[256]; /* why the driver cannot be used */
    int ndevices;
    /* NVRTC */
    nvrtcResult (*nvrtc_create)(nvrtcProgram *, const char *, const char *, int,
                                const char *const *, const char *const *);
    nvrtcResult (*nvrtc_compile)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*nvrtc_log_size)(nvrtcProgram, size_t *);
    nvrtcResult (*nvrtc_log)(nvrtcProgram, char *);
    nvrtcResult (*nvrtc_cubin_size)(nvrtcProgram, size_t *);
    nvrtcResult (*nvrtc_cubin)(nvrtcProgram, char *);
    nvrtcResult (*nvrtc_destroy)(nvrtcProgram *);
    const char *(*nvrtc_error_string)(nvrtcResult);
    nvrtcResult (*nvrtc_version)(int *, int *);
    int nvrtc_ok;
    char nvrtc_error[256];
    /* cuBLAS */
    cublasStatus_t (*blas_create)(cublasHandle_t *);
    cublasStatus_t (*blas_destroy)(cublasHandle_t);
    cublasStatus_t (*blas_set_stream)(cublasHandle_t, CUstream);
    /* optional (cuBLAS 11.4 and later); NULL where the library lacks it */
    cublasStatus_t (*blas_set_workspace)(cublasHandle_t, void *, size_t);
    /* optional: one product (else the strided-batched call with one) */
    cublasStatus_t (*blas_gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                const void *, const void *, cudaDataType, int, const void *,
                                cudaDataType, int, const void *, void *, cudaDataType, int,
                                cublasComputeType_t, cublasGemmAlgo_t);
    cublasStatus_t (*blas_gemm_strided)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                        int, int, const void *, const void *, cudaDataType, int,
                                        long long, const void *, cudaDataType, int, long long,
                                        const void *, void *, cudaDataType, int, long long, int,
                                        cublasComputeType_t, cublasGemmAlgo_t);
    int blas_ok;
    char blas_error[256];
    /* cuSOLVER (optional: without it linalg runs on the host) */
    cusolverStatus_t (*sol_create)(cusolverDnHandle_t *);
    cusolverStatus_t (*sol_destroy)(cusolverDnHandle_t);
    cusolverStatus_t (*sol_set_stream)(cusolverDnHandle_t, CUstream);
    hd_cuda_solver_fns sol[2]; /* f32 (S), f64 (D) */
    int sol_ok;
    char sol_error[256];
    /* NCCL (optional: collectives stage through host memory without it) */
    ncclResult_t (*nccl_get_unique_id)(ncclUniqueId *);
    ncclResult_t (*nccl_comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*nccl_comm_destroy)(ncclComm_t);
    ncclResult_t (*nccl_all_reduce)(CUdeviceptr, CUdeviceptr, size_t, ncclDataType_t, ncclRedOp_t,
                                    ncclComm_t, CUstream);
    ncclResult_t (*nccl_broadcast)(CUdeviceptr, CUdeviceptr, size_t, ncclDataType_t, int,
                                   ncclComm_t, CUstream);
    ncclResult_t (*nccl_all_gather)(CUdeviceptr, CUdeviceptr, size_t, ncclDataType_t, ncclComm_t,
                                    CUstream);
    ncclResult_t (*nccl_reduce_scatter)(CUdeviceptr, CUdeviceptr, size_t, ncclDataType_t,
                                        ncclRedOp_t, ncclComm_t, CUstream);
    const char *(*nccl_error_string)(ncclResult_t);
    int nccl_ok;
    char nccl_error[256];
} hd_cuda_api;

/* The process's libraries: opened on the first call (thread-safe), kept
 * until exit. Never NULL; check driver_ok / nvrtc_ok / blas_ok. */
const hd_cuda_api *hd_cuda_api_get(void);
/* Driver call results as errors: "cuda: <what>: <driver's message>". */
hd_status hd_cuda_check(hd_ctx *ctx, CUresult r, const char *what);

/* ---- NVRTC (cuda_nvrtc.c) ---- */

/* Compile src for sm_<arch> (e.g. 80) into a CUBIN image (*img, *n from
 * hd_ctx_alloc). With use_cache the image is looked up and stored in the
 * disk cache (HODU_CACHE_DIR, as the llvm compiler's) under the source's
 * hash and the arch. */
hd_status hd_cuda_nvrtc_compile(hd_ctx *ctx, const char *src, size_t len, int arch, int use_cache,
                                void **img, size_t *n);

/* ---- per-context state (cuda_backend.c) ---- */

#define HD_CUDA_MAX_DEVICES 16
#define HD_CUDA_BINS        64

typedef struct hd_cuda_block {
    CUdeviceptr p;
    size_t size;
    struct hd_cuda_block *next;
} hd_cuda_block;

/* Blocks freed while a CUDA Graph is captured: the graph's replays use
 * them, so they stay out of the device's cache (where another tensor
 * could get them) until the graph is destroyed. */
typedef struct hd_cuda_pool {
    hd_cuda_block *free;
} hd_cuda_pool;

typedef struct hd_cuda_module {
    uint64_t key; /* hash of the source */
    CUmodule mod;
    struct hd_cuda_module *next;
} hd_cuda_module;

/* A loaded kernel by its key (cuda_backend.c's kernel table). */
typedef struct hd_cuda_kentry {
    uint64_t key; /* 0: empty */
    CUfunction f;
} hd_cuda_kentry;

/* A pinned staging slot of copies to the device: filled from the start
 * after its event (recorded after its last copy) has passed. */
#define HD_CUDA_STAGE_SLOTS 4
typedef struct hd_cuda_stage {
    void *host;
    size_t fill;
    CUevent done;
    int used; /* a copy from it was queued since the slot was last waited for */
} hd_cuda_stage;

typedef struct hd_cuda_dev {
    int ready;
    CUdevice dev;
    CUcontext cu;
    CUstream stream;
    cublasHandle_t blas;
    int arch; /* 10 * major + minor */
    /* 256-thread blocks resident at once: SMs x threads per SM / 256 (the
     * grid of one full wave) */
    int64_t resident;
    /* caching allocator: free blocks by size class (bin = log2 of the
     * rounded size), each list holding blocks of exactly one size */
    hd_cuda_block *bins[HD_CUDA_BINS];
    size_t cached_bytes, live_bytes, peak_bytes;
    hd_cuda_pool *pool;      /* set while a graph is captured */
    hd_cuda_module *modules; /* loaded modules by source hash */
    hd_cuda_kentry *kernels; /* eager kernels by hd_cuda_kernel's key (open addressing) */
    size_t kcap, kcount;
    /* cuBLAS's workspace, set on the handle: the GEMMs a CUDA Graph
     * captures may then pick the algorithms (split-K) that eager ones do */
    CUdeviceptr blas_ws;
    /* the profiler's reference event, recorded with the stream idle at
     * host time prof_epoch_host (cuda_prof.c) */
    CUevent prof_epoch;
    double prof_epoch_host;
    /* marks this device's stream for a copy to or from another device */
    CUevent peer_event;
    /* copies up go through these (made at the first; stage_failed: the
     * driver could not, and copies up wait for the stream) */
    hd_cuda_stage stage[HD_CUDA_STAGE_SLOTS];
    int stage_cur, stage_failed;
    cusolverDnHandle_t solver; /* made at the first linalg op (cuda_solver.c) */
    int solver_failed;         /* cusolverDnCreate failed: linalg on the host */
    ncclComm_t nccl;           /* made at the first collective (cuda_nccl.c) */
    int nccl_failed;           /* ncclCommInitRank failed: collectives on the host */
} hd_cuda_dev;

typedef struct hd_cuda_state {
    hd_cuda_dev dev[HD_CUDA_MAX_DEVICES];
} hd_cuda_state;

/* The context's state of device d, made current on this thread (made on
 * first use). NULL with an error when the device cannot be used. The
 * driver is asked to make the context current only when this thread's
 * last one was another (a per-thread note, reset when a device closes). */
hd_cuda_dev *hd_cuda_dev_get(hd_ctx *ctx, int device);

/* cuda_prof.c: with profiling on, the time of a piece of device work: a
 * mark begun on d's stream (NULL: not timed: profiling off, a graph being
 * captured, no events) and ended after the work, which hands it to the
 * profiler's row. hd_cuda_prof_release: d's reference event. */
void *hd_cuda_prof_begin(hd_ctx *ctx, hd_cuda_dev *d, int device);
void hd_cuda_prof_end(hd_ctx *ctx, hd_cuda_dev *d, void *mark, int row);
void hd_cuda_prof_release(hd_cuda_dev *d);
/* Which entry point of an op's module for a dtype pair. */
typedef enum {
    HD_CUDA_K_MAIN,     /* k_<op>_<in>_<out> */
    HD_CUDA_K_FIN,      /* k_<op>_<in>_<out>_fin: a split reduction's second pass */
    HD_CUDA_K_LN_STATS, /* k_layer_norm_stats_<out> */
    HD_CUDA_K_LN_DW,    /* k_layer_norm_dw_<out> */
    HD_CUDA_K_PICK,     /* k_index_select_<in>_<out>_pick: row r's element idx[r] */
    HD_CUDA_K_OPTIM,    /* k_<kind>_<out>: cuda_optim.c's (the op: the HD_OPTIM_* kind) */
} hd_cuda_kvariant;

/* The eager kernel of op for dtypes (in, out) and variant: one look-up in
 * the device's table by a packed key; the module's source is generated,
 * compiled and loaded (and the entry point looked up) only on the first
 * call for the key. */
hd_status hd_cuda_kernel(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_dtype in, hd_dtype out,
                         hd_cuda_kvariant variant, CUfunction *f);
/* The kernel `name` of a module given as source (the cuda compiler's). */
hd_status hd_cuda_function_src(hd_ctx *ctx, hd_cuda_dev *d, const char *src, size_t len,
                               const char *name, CUfunction *f);
/* Launch over n threads (1-D grid of 256-thread blocks, capped). */
hd_status hd_cuda_launch(hd_ctx *ctx, hd_cuda_dev *d, CUfunction f, int64_t n, void **args);
/* Launch with an explicit grid and block. */
hd_status hd_cuda_launch_grid(hd_ctx *ctx, hd_cuda_dev *d, CUfunction f, unsigned grid,
                              unsigned block, void **args);
/* Capture into pool: until the matching end, blocks freed on the device go
 * to pool, and allocations take from it first. */
void hd_cuda_pool_begin(hd_cuda_dev *d, hd_cuda_pool *pool);
void hd_cuda_pool_end(hd_cuda_dev *d);
/* pool's blocks back to the device's cache, once nothing replays them. */
void hd_cuda_pool_release(hd_cuda_dev *d, hd_cuda_pool *pool);
/* Scratch device memory through the caching allocator. */
CUdeviceptr hd_cuda_scratch(hd_ctx *ctx, int device, size_t nbytes);
void hd_cuda_scratch_free(hd_ctx *ctx, int device, CUdeviceptr p, size_t nbytes);

/* ---- kernels (cuda_ops.c, cuda_blas.c) ---- */

hd_status hd_cuda_run_op(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                         const hd_attrs *attrs);
/* op's indices (idx) checked on the host as op checks them, with op's
 * errors: cross_entropy's labels against its size classes, its gradient's
 * and one_hot's the same, index_select's and index_add's against axis's
 * size (negative ones counting from the end). */
hd_status hd_cuda_check_indices(hd_ctx *ctx, hd_op op, const hd_tensor *idx, int axis,
                                int64_t size);
/* This thread's note that the indices the ops meet were checked before
 * (set while the cuda compiler runs a graph whose index inputs it checked
 * with hd_cuda_check_indices): index ops and cross_entropy then read i64
 * contiguous device indices unchecked, and the run can be captured (a host
 * check waits for the stream). Sets it to on; returns what it was. */
int hd_cuda_indices_checked(int on);
/* This thread's random op (rand, randn, training dropout) takes its key
 * and base from the two u64 at device address kb (0: from the context's
 * stream, by value): the cuda compiler reserves a graph's draws before the
 * run, as eager code would, and writes them there, so that a CUDA Graph's
 * replays draw new numbers. Returns what it was. */
CUdeviceptr hd_cuda_rng_from(CUdeviceptr kb);
hd_status hd_cuda_matmul(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, hd_tensor *a, hd_tensor *b);
/* Can d run linalg through cuSOLVER (the library opened and d's handle
 * made, on the first call)? If not, the ops run on the host. */
int hd_cuda_solver_ready(hd_ctx *ctx, hd_cuda_dev *d);
/* The linalg ops through cuSOLVER (cuda_solver.c), once
 * hd_cuda_solver_ready; inputs contiguous, in out's dtype. */
hd_status hd_cuda_linalg(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                         hd_tensor *const *in, int nin, const hd_attrs *attrs);
/* The backend's collective slot (cuda_nccl.c): through NCCL, or *done 0;
 * hd_cuda_nccl_release: d's communicator. */
hd_status hd_cuda_collective(hd_ctx *ctx, const hd_coll *c, int *done);
/* The backend's optim slot (cuda_optim.c), and the module of its kernels:
 * one launch per HD_CUDA_OPTIM_N parameters (their table of addresses is
 * a kernel argument of 2.3 KB, within the 4 KB every GPU takes). */
#define HD_CUDA_OPTIM_N 32
hd_status hd_cuda_optim(hd_ctx *ctx, const hd_optim_step *s);
void hd_cuda_optim_module(hd_cuda_src *s);
/* An HD_OPTIM_* kind's name in its entry points ("adam"). */
const char *hd_cuda_optim_name(int kind);
void hd_cuda_nccl_release(const hd_cuda_api *a, hd_cuda_dev *d);
#endif

#endif
