/* The emulated NCCL: the collectives the backend calls (cuda_nccl.c),
 * between the processes of an mpirun job, through the Open MPI the
 * process already uses (opened again by name: HODU_MPI_LIB, or
 * libmpi.so.40), on the host view of device memory. What a GPU's NCCL
 * would refuse or get wrong is refused, with a message on stderr:
 *  - a communicator whose rank or size is not MPI's, or whose unique id
 *    differs between ranks (the id must be made once, by
 *    ncclGetUniqueId, and sent to every rank);
 *  - buffers that are not memory of the communicator's device, or a
 *    stream of another device;
 *  - a call on a capturing stream (Hodu never captures a collective);
 *  - dtypes and ops Hodu does not send (f16, bf16: it reduces them in
 *    f32; avg: it divides the sum).
 * The work runs at once, as every queued operation here does. */
#define _GNU_SOURCE
#include "emu_int.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { NCCL_OK = 0, NCCL_SYSTEM = 2, NCCL_INVALID_ARGUMENT = 4, NCCL_INVALID_USAGE = 5 };
enum { N_INT8 = 0, N_UINT8 = 1, N_INT32 = 2, N_INT64 = 4, N_FLOAT32 = 7, N_FLOAT64 = 8 };

typedef struct {
    char internal[128];
} emu_nccl_id;

typedef struct emu_nccl_comm {
    int dev, rank, nranks;
} emu_nccl_comm;

#define ID_MAGIC "HDEMUNCL"

/* ---- MPI ---- */

typedef void *mpi_h;
static struct {
    int (*allreduce)(const void *, void *, int, mpi_h, mpi_h, mpi_h);
    int (*bcast)(void *, int, mpi_h, int, mpi_h);
    int (*allgather)(const void *, int, mpi_h, void *, int, mpi_h, mpi_h);
    int (*reduce_scatter_block)(const void *, void *, int, mpi_h, mpi_h, mpi_h);
    int (*comm_rank)(mpi_h, int *);
    int (*comm_size)(mpi_h, int *);
    mpi_h world, byte, type[9], op[4];
    int ok;
} mpi;

static int mpi_open(void) {
    static int tried;
    if (tried) return mpi.ok;
    tried = 1;
    const char *name = getenv("HODU_MPI_LIB");
    void *h = dlopen(name && *name ? name : "libmpi.so.40", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "cuda emulator: NCCL: no MPI: %s\n", dlerror());
        return 0;
    }
    struct {
        void **slot;
        const char *name;
    } syms[] = {
        {(void **)&mpi.allreduce, "MPI_Allreduce"},
        {(void **)&mpi.bcast, "MPI_Bcast"},
        {(void **)&mpi.allgather, "MPI_Allgather"},
        {(void **)&mpi.reduce_scatter_block, "MPI_Reduce_scatter_block"},
        {(void **)&mpi.comm_rank, "MPI_Comm_rank"},
        {(void **)&mpi.comm_size, "MPI_Comm_size"},
        {&mpi.world, "ompi_mpi_comm_world"},
        {&mpi.byte, "ompi_mpi_byte"},
        {&mpi.type[N_INT8], "ompi_mpi_int8_t"},
        {&mpi.type[N_UINT8], "ompi_mpi_uint8_t"},
        {&mpi.type[N_INT32], "ompi_mpi_int32_t"},
        {&mpi.type[N_INT64], "ompi_mpi_int64_t"},
        {&mpi.type[N_FLOAT32], "ompi_mpi_float"},
        {&mpi.type[N_FLOAT64], "ompi_mpi_double"},
        {&mpi.op[0], "ompi_mpi_op_sum"},
        {&mpi.op[1], "ompi_mpi_op_prod"},
        {&mpi.op[2], "ompi_mpi_op_max"},
        {&mpi.op[3], "ompi_mpi_op_min"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++)
        if (!(*syms[i].slot = dlsym(h, syms[i].name))) {
            fprintf(stderr, "cuda emulator: NCCL: MPI has no %s\n", syms[i].name);
            return 0;
        }
    return mpi.ok = 1;
}

/* ---- checks ---- */

static size_t type_size(int t) {
    return t == N_INT8 || t == N_UINT8 ? 1 : t == N_INT32 || t == N_FLOAT32 ? 4 : 8;
}

static int type_ok(int t, const char *what) {
    if (t >= 0 && t < 9 && t != 3 && t != 5 && t != 6) return 1;
    fprintf(stderr, "cuda emulator: %s: datatype %d is not one Hodu sends\n", what, t);
    return 0;
}

static int op_ok(int op, const char *what) {
    if (op >= 0 && op < 4) return 1;
    fprintf(stderr, "cuda emulator: %s: reduction op %d is not one Hodu sends\n", what, op);
    return 0;
}

/* The host view of n bytes at p, memory of the communicator's device. */
static void *buf_of(const emu_nccl_comm *c, const void *p, size_t n, const char *what) {
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
    if (!emu_mem_valid_on(d, n ? n : 1, c->dev)) {
        fprintf(stderr, "cuda emulator: %s: %p (%zu bytes) is not memory of device %d\n", what, p,
                n, c->dev);
        return NULL;
    }
    return emu_mem_host(d);
}

/* A call that may run: a communicator, a stream of its device, not
 * capturing, MPI open. */
static int call_ok(const emu_nccl_comm *c, const emu_stream *s, const char *what) {
    if (!c || !mpi.ok) return 0;
    if (s && s->capturing) {
        fprintf(stderr, "cuda emulator: %s on a capturing stream\n", what);
        return 0;
    }
    if (emu_stream_dev(s) != c->dev) {
        fprintf(stderr, "cuda emulator: %s: a stream of device %d, the communicator's is %d\n",
                what, emu_stream_dev(s), c->dev);
        return 0;
    }
    return 1;
}

/* ---- entry points ---- */

EMU_EXPORT const char *ncclGetErrorString(int r) {
    return r == NCCL_OK                 ? "no error"
           : r == NCCL_INVALID_ARGUMENT ? "invalid argument (emulated NCCL)"
           : r == NCCL_INVALID_USAGE    ? "invalid usage (emulated NCCL)"
                                        : "system error (emulated NCCL)";
}

EMU_EXPORT int ncclGetUniqueId(emu_nccl_id *id) {
    if (!id) return NCCL_INVALID_ARGUMENT;
    memset(id, 0, sizeof *id);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(id->internal, sizeof id->internal, ID_MAGIC " %ld %ld %ld", (long)getpid(),
             (long)ts.tv_sec, ts.tv_nsec);
    return NCCL_OK;
}

/* every rank's id equals this one's */
static int ids_agree(const emu_nccl_id *id, int nranks) {
    char *all = malloc((size_t)nranks * sizeof *id);
    int ok = all && mpi.allgather(id, (int)sizeof *id, mpi.byte, all, (int)sizeof *id, mpi.byte,
                                  mpi.world) == 0;
    for (int r = 0; ok && r < nranks; r++) ok = !memcmp(all + r * sizeof *id, id, sizeof *id);
    free(all);
    return ok;
}

EMU_EXPORT int ncclCommInitRank(emu_nccl_comm **out, int nranks, emu_nccl_id id, int rank) {
    EMU_COUNT(ncclCommInitRank);
    int r = -1, n = 0;
    if (!out || !mpi_open()) return NCCL_SYSTEM;
    mpi.comm_rank(mpi.world, &r);
    mpi.comm_size(mpi.world, &n);
    if (rank != r || nranks != n) {
        fprintf(stderr, "cuda emulator: ncclCommInitRank: rank %d of %d, MPI's is %d of %d\n", rank,
                nranks, r, n);
        return NCCL_INVALID_ARGUMENT;
    }
    if (memcmp(id.internal, ID_MAGIC, strlen(ID_MAGIC)) || !ids_agree(&id, nranks)) {
        fprintf(stderr, "cuda emulator: ncclCommInitRank: the unique id is not one made by "
                        "ncclGetUniqueId and given to every rank\n");
        return NCCL_INVALID_ARGUMENT;
    }
    if (emu_current_dev() < 0) return NCCL_INVALID_USAGE;
    emu_nccl_comm *c = calloc(1, sizeof *c);
    if (!c) return NCCL_SYSTEM;
    *c = (emu_nccl_comm){emu_current_dev(), rank, nranks};
    *out = c;
    return NCCL_OK;
}

EMU_EXPORT int ncclCommDestroy(emu_nccl_comm *c) {
    free(c);
    return NCCL_OK;
}

EMU_EXPORT int ncclAllReduce(const void *send, void *recv, size_t count, int dt, int op,
                             emu_nccl_comm *c, emu_stream *s) {
    EMU_COUNT(ncclAllReduce);
    const char *what = "ncclAllReduce";
    if (!call_ok(c, s, what) || !type_ok(dt, what) || !op_ok(op, what) || count > 1u << 30)
        return NCCL_INVALID_ARGUMENT;
    size_t n = count * type_size(dt);
    char *in = buf_of(c, send, n, what), *out = buf_of(c, recv, n, what);
    if (!in || !out) return NCCL_INVALID_ARGUMENT;
    int rc = mpi.allreduce(in == out ? (void *)1 /* MPI_IN_PLACE */ : in, out, (int)count,
                           mpi.type[dt], mpi.op[op], mpi.world);
    return rc ? NCCL_SYSTEM : NCCL_OK;
}

EMU_EXPORT int ncclBroadcast(const void *send, void *recv, size_t count, int dt, int root,
                             emu_nccl_comm *c, emu_stream *s) {
    EMU_COUNT(ncclBroadcast);
    const char *what = "ncclBroadcast";
    if (!call_ok(c, s, what) || !type_ok(dt, what) || root < 0 || root >= c->nranks ||
        count > 1u << 30)
        return NCCL_INVALID_ARGUMENT;
    size_t n = count * type_size(dt);
    char *out = buf_of(c, recv, n, what), *in = c->rank == root ? buf_of(c, send, n, what) : out;
    if (!in || !out) return NCCL_INVALID_ARGUMENT;
    if (in != out) memmove(out, in, n);
    return mpi.bcast(out, (int)n, mpi.byte, root, mpi.world) ? NCCL_SYSTEM : NCCL_OK;
}

EMU_EXPORT int ncclAllGather(const void *send, void *recv, size_t count, int dt, emu_nccl_comm *c,
                             emu_stream *s) {
    EMU_COUNT(ncclAllGather);
    const char *what = "ncclAllGather";
    if (!call_ok(c, s, what) || !type_ok(dt, what) || count > 1u << 30)
        return NCCL_INVALID_ARGUMENT;
    size_t n = count * type_size(dt);
    char *in = buf_of(c, send, n, what), *out = buf_of(c, recv, n * (size_t)c->nranks, what);
    if (!in || !out) return NCCL_INVALID_ARGUMENT;
    int in_place = in == out + n * (size_t)c->rank;
    int rc = mpi.allgather(in_place ? (void *)1 : in, (int)n, mpi.byte, out, (int)n, mpi.byte,
                           mpi.world);
    return rc ? NCCL_SYSTEM : NCCL_OK;
}

EMU_EXPORT int ncclReduceScatter(const void *send, void *recv, size_t count, int dt, int op,
                                 emu_nccl_comm *c, emu_stream *s) {
    EMU_COUNT(ncclReduceScatter);
    const char *what = "ncclReduceScatter";
    if (!call_ok(c, s, what) || !type_ok(dt, what) || !op_ok(op, what) || count > 1u << 30)
        return NCCL_INVALID_ARGUMENT;
    size_t n = count * type_size(dt);
    char *in = buf_of(c, send, n * (size_t)c->nranks, what), *out = buf_of(c, recv, n, what);
    if (!in || !out) return NCCL_INVALID_ARGUMENT;
    int rc = mpi.reduce_scatter_block(in, out, (int)count, mpi.type[dt], mpi.op[op], mpi.world);
    return rc ? NCCL_SYSTEM : NCCL_OK;
}
