/* hd_dist: MPI opened at run time (see hd_dist.h).
 *
 * Open MPI's ABI: its handles (communicator, datatypes, ops) are the
 * addresses of exported objects (mpi.h's OMPI_PREDEFINED_GLOBAL), so they
 * are found with dlsym as the functions are. libmpi is opened RTLD_GLOBAL:
 * Open MPI's own plugins resolve its symbols from the global scope.
 *
 * Every collective is MPI's blocking call, watched by a thread: a rank
 * that has stopped, or that does not call the same collective, would leave
 * the others waiting for ever, so a rank still inside a call after the
 * timeout says so and ends its process, and mpirun then stops the job (a
 * blocked MPI call cannot be cancelled). The nonblocking calls with a
 * polled deadline measured 2-9x slower than the blocking ones on this
 * machine (Open MPI's nonblocking collectives are a separate, untuned
 * implementation), so work that runs beside the caller (DataParallel's
 * buckets during backward()) goes to a thread of ours that makes the
 * blocking calls. */
#include "hd_dist.h"
#include "hd_base.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef void *mpi_h; /* any handle: MPI_Comm, MPI_Datatype, MPI_Op, ... */

typedef struct dist_mpi {
    int (*init)(int *, char ***);
    int (*init_thread)(int *, char ***, int, int *);
    int (*finalize)(void);
    int (*abort)(mpi_h, int);
    int (*comm_rank)(mpi_h, int *);
    int (*comm_size)(mpi_h, int *);
    int (*set_errhandler)(mpi_h, mpi_h);
    int (*error_string)(int, char *, int *);
    int (*barrier)(mpi_h);
    int (*allreduce)(const void *, void *, int, mpi_h, mpi_h, mpi_h);
    int (*bcast)(void *, int, mpi_h, int, mpi_h);
    int (*allgather)(const void *, int, mpi_h, void *, int, mpi_h, mpi_h);
    int (*reduce_scatter_block)(const void *, void *, int, mpi_h, mpi_h, mpi_h);
    int (*send)(const void *, int, mpi_h, int, int, mpi_h);
    int (*recv)(void *, int, mpi_h, int, int, mpi_h, void *);
    mpi_h world, errors_return, byte;
    mpi_h dtype[HD_DTYPE_COUNT]; /* NULL: not reduced by MPI */
    mpi_h op[HD_DIST_MIN + 1];
} dist_mpi;

static dist_mpi mpi;
static void *mpi_lib;
static int dist_open;       /* MPI initialized by hd_dist_init */
static int dist_done;       /* finalized or aborted */
static int dist_serialized; /* MPI may be called from any one thread at a time */
static double dist_timeout = 300;

/* mpi.h's thread levels (the same in every MPI). */
#define MPI_THREAD_SERIALIZED 2

/* Element counts per MPI call: MPI counts are ints. */
#define DIST_CHUNK ((int64_t)1 << 28)

static int env_int(const char *name, int def) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : def;
}

int hd_dist_rank(void) {
    return env_int("OMPI_COMM_WORLD_RANK", 0);
}

int hd_dist_size(void) {
    int n = env_int("OMPI_COMM_WORLD_SIZE", 1);
    return n > 0 ? n : 1;
}

int hd_dist_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL;
}

int hd_dist_local_rank(void) {
    return env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
}

int hd_dist_local_size(void) {
    int n = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    return n > 0 ? n : 1;
}

int hd_dist_active(void) {
    return dist_open && !dist_done;
}

static int dist_fail(char *err, size_t n, const char *fmt, const char *a, const char *b) {
    snprintf(err, n, fmt, a, b);
    return -1;
}

static const char *mpi_lib_name(void) {
    const char *e = getenv("HODU_MPI_LIB");
    return e && *e ? e : "libmpi.so.40";
}

static int mpi_load_lib(char *err, size_t n) {
    if (mpi_lib) return 0;
    const char *name = mpi_lib_name();
    void *h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (!h && !getenv("HODU_MPI_LIB")) h = dlopen("libmpi.so", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *why = dlerror();
        return dist_fail(err, n,
                         "MPI is missing: %s could not be opened (%s); install Open MPI "
                         "(Debian: apt-get install openmpi-bin libopenmpi3)",
                         name, why ? why : "not found");
    }
    mpi_lib = h;
    return 0;
}

typedef struct {
    void **slot;
    const char *name;
} mpi_sym;

static int mpi_resolve(char *err, size_t n) {
    const mpi_sym syms[] = {
        {(void **)&mpi.init, "MPI_Init"},
        {(void **)&mpi.init_thread, "MPI_Init_thread"},
        {(void **)&mpi.finalize, "MPI_Finalize"},
        {(void **)&mpi.abort, "MPI_Abort"},
        {(void **)&mpi.comm_rank, "MPI_Comm_rank"},
        {(void **)&mpi.comm_size, "MPI_Comm_size"},
        {(void **)&mpi.set_errhandler, "MPI_Comm_set_errhandler"},
        {(void **)&mpi.error_string, "MPI_Error_string"},
        {(void **)&mpi.barrier, "MPI_Barrier"},
        {(void **)&mpi.allreduce, "MPI_Allreduce"},
        {(void **)&mpi.bcast, "MPI_Bcast"},
        {(void **)&mpi.allgather, "MPI_Allgather"},
        {(void **)&mpi.reduce_scatter_block, "MPI_Reduce_scatter_block"},
        {(void **)&mpi.send, "MPI_Send"},
        {(void **)&mpi.recv, "MPI_Recv"},
        {&mpi.world, "ompi_mpi_comm_world"},
        {&mpi.errors_return, "ompi_mpi_errors_return"},
        {&mpi.byte, "ompi_mpi_byte"},
        {&mpi.dtype[HD_F32], "ompi_mpi_float"},
        {&mpi.dtype[HD_F64], "ompi_mpi_double"},
        {&mpi.dtype[HD_I8], "ompi_mpi_int8_t"},
        {&mpi.dtype[HD_U8], "ompi_mpi_uint8_t"},
        {&mpi.dtype[HD_I32], "ompi_mpi_int32_t"},
        {&mpi.dtype[HD_I64], "ompi_mpi_int64_t"},
        {&mpi.dtype[HD_BOOL], "ompi_mpi_uint8_t"},
        {&mpi.op[HD_DIST_SUM], "ompi_mpi_op_sum"},
        {&mpi.op[HD_DIST_PROD], "ompi_mpi_op_prod"},
        {&mpi.op[HD_DIST_MAX], "ompi_mpi_op_max"},
        {&mpi.op[HD_DIST_MIN], "ompi_mpi_op_min"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(mpi_lib, syms[i].name);
        if (!*syms[i].slot)
            return dist_fail(err, n, "%s has no %s (hodu needs Open MPI 4 or later)",
                             mpi_lib_name(), syms[i].name);
    }
    return 0;
}

int hd_dist_available(char *err, size_t n) {
    return mpi_load_lib(err, n) == 0 && mpi_resolve(err, n) == 0;
}

/* MPI's message for rc, after what. */
static int mpi_error(int rc, const char *what, char *err, size_t n) {
    char s[512];
    int len = 0;
    if (mpi.error_string(rc, s, &len) != 0 || len <= 0) snprintf(s, sizeof s, "MPI error %d", rc);
    s[sizeof s - 1] = 0;
    snprintf(err, n, "%s: %s", what, s);
    return -1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The watch: when the call began (0: none running) and its name. */
static _Atomic double watch_since;
static const char *_Atomic watch_what;

static void *watch_main(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double since = atomic_load(&watch_since);
        if (since == 0 || now_s() - since <= dist_timeout) continue;
        fprintf(stderr,
                "hodu: rank %d of %d: %s: no answer from the other ranks within %g s: a rank "
                "has stopped, or is not calling the same operation (HODU_DIST_TIMEOUT or "
                "dist.init(timeout =) sets the wait); stopping every rank\n",
                hd_dist_rank(), hd_dist_size(), atomic_load(&watch_what), dist_timeout);
        fflush(stderr);
        fflush(stdout); /* what the rank printed before it waited */
        _exit(1);       /* mpirun stops the other ranks */
    }
    return NULL;
}

static void watch_begin(const char *what) {
    atomic_store(&watch_what, what);
    atomic_store(&watch_since, now_s());
}

/* The end of the watched call that returned rc. */
static int watch_end(int rc, const char *what, char *err, size_t n) {
    atomic_store(&watch_since, 0.0);
    return rc != 0 ? mpi_error(rc, what, err, n) : 0;
}

void hd_dist_watch_begin(const char *what) {
    watch_begin(what);
}

void hd_dist_watch_end(void) {
    atomic_store(&watch_since, 0.0);
}

static void dist_exit_hook(void) {
    if (hd_dist_active()) {
        char err[256];
        hd_dist_wait(err, sizeof err);
        dist_done = 1;
        mpi.finalize();
    }
}

int hd_dist_init(int force, double timeout_s, char *err, size_t n) {
    const char *t = getenv("HODU_DIST_TIMEOUT");
    if (t && *t && atof(t) > 0) dist_timeout = atof(t);
    if (timeout_s > 0) dist_timeout = timeout_s;
    if (dist_open) return 0;
    if (!hd_dist_launched() && !force) return 0; /* a world of one */
    if (mpi_load_lib(err, n) || mpi_resolve(err, n)) return -1;
    /* a rank waiting in a collective yields its core (DataParallel's
     * communication thread waits beside the rank's computing one) */
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    int provided = 0;
    int rc = mpi.init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != 0) return mpi_error(rc, "MPI_Init_thread", err, n);
    dist_serialized = provided >= MPI_THREAD_SERIALIZED;
    dist_open = 1;
    atexit(dist_exit_hook);
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, watch_main, NULL) == 0) pthread_detach(watcher);
    mpi.set_errhandler(mpi.world, mpi.errors_return);
    int r = 0, s = 1;
    mpi.comm_rank(mpi.world, &r);
    mpi.comm_size(mpi.world, &s);
    if (r != hd_dist_rank() || s != hd_dist_size()) {
        char a[64], b[64];
        snprintf(a, sizeof a, "rank %d of %d", r, s);
        snprintf(b, sizeof b, "rank %d of %d", hd_dist_rank(), hd_dist_size());
        return dist_fail(err, n, "MPI says %s, the launcher's environment %s", a, b);
    }
    return 0;
}

/* MPI is open, and the communication thread idle (its error, if one
 * failed unawaited). */
static int need_open(const char *what, char *err, size_t n) {
    if (hd_dist_active()) return hd_dist_wait(err, n);
    snprintf(err, n, "%s: the world of %d ranks is not open: call dist.init() first", what,
             hd_dist_size());
    return -1;
}

int hd_dist_barrier(char *err, size_t n) {
    if (hd_dist_size() == 1 && !hd_dist_active()) return 0;
    if (need_open("dist.barrier", err, n)) return -1;
    watch_begin("dist.barrier");
    return watch_end(mpi.barrier(mpi.world), "dist.barrier", err, n);
}

/* The all-reduce itself, watched as what (MPI open, dt and op checked). */
static int all_reduce_run(void *buf, int64_t count, hd_dtype dt, hd_dist_op op, const char *what,
                          char *err, size_t n) {
    mpi_h type = mpi.dtype[dt], mop = mpi.op[op];
    if (dt == HD_BOOL)
        mop = mpi.op[op == HD_DIST_SUM || op == HD_DIST_MAX ? HD_DIST_MAX : HD_DIST_MIN];
    size_t es = (size_t)hd_dtype_size(dt);
    for (int64_t at = 0; at < count; at += DIST_CHUNK) {
        int c = (int)(count - at < DIST_CHUNK ? count - at : DIST_CHUNK);
        char *p = (char *)buf + (size_t)at * es;
        watch_begin(what);
        int rc = mpi.allreduce((void *)1 /* MPI_IN_PLACE */, p, c, type, mop, mpi.world);
        if (watch_end(rc, what, err, n)) return -1;
    }
    return 0;
}

static int reducible(hd_dtype dt, hd_dist_op op, char *err, size_t n) {
    if ((unsigned)dt < HD_DTYPE_COUNT && mpi.dtype[dt] && (unsigned)op <= HD_DIST_MIN) return 0;
    snprintf(err, n, "dist.all_reduce: no MPI reduction for %s (f16 and bf16 go through f32)",
             (unsigned)dt < HD_DTYPE_COUNT ? hd_dtype_name(dt) : "this dtype");
    return -1;
}

int hd_dist_all_reduce(void *buf, int64_t count, hd_dtype dt, hd_dist_op op, char *err, size_t n) {
    if (hd_dist_size() == 1 && !hd_dist_active()) return 0;
    if (need_open("dist.all_reduce", err, n) || reducible(dt, op, err, n)) return -1;
    return all_reduce_run(buf, count, dt, op, "dist.all_reduce", err, n);
}

static void half_to_f32(const uint16_t *h, float *f, int64_t n, hd_dtype dt) {
    for (int64_t i = 0; i < n; i++)
        f[i] = dt == HD_F16 ? hd_f16_to_f32(h[i]) : hd_bf16_to_f32(h[i]);
}

static void f32_to_half(const float *f, uint16_t *h, int64_t n, hd_dtype dt) {
    for (int64_t i = 0; i < n; i++)
        h[i] = dt == HD_F16 ? hd_f32_to_f16(f[i]) : hd_f32_to_bf16(f[i]);
}

static void scale_by(void *p, int64_t n, hd_dtype dt, double by) {
    if (dt == HD_F64)
        for (int64_t i = 0; i < n; i++) ((double *)p)[i] /= by;
    else
        for (int64_t i = 0; i < n; i++) ((float *)p)[i] /= (float)by;
}

/* ---- the communication thread ----
 *
 * hd_dist_all_reduce_start queues an all-reduce; one thread runs the
 * queue in order with MPI's blocking calls (under the watch), so the
 * caller goes on computing (nn.DataParallel reduces a bucket while
 * backward() makes the next). MPI is called from one thread at a time
 * (MPI_THREAD_SERIALIZED): every other call here first waits for the
 * queue to empty (drain). */

typedef struct dist_job {
    void *buf;
    int64_t count;
    hd_dtype dt;
    hd_dist_op op;
    int mean;
} dist_job;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work, idle;
    dist_job *jobs;
    int cap, head, tail; /* jobs[head..tail) wait or run */
    int up;              /* the thread is running */
    int failed;
    char err[256];
} q = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .work = PTHREAD_COND_INITIALIZER,
       .idle = PTHREAD_COND_INITIALIZER};

static int job_run(const dist_job *j, char *err, size_t n) {
    if (all_reduce_run(j->buf, j->count, j->dt, j->op, "DataParallel's all_reduce", err, n))
        return -1;
    if (j->mean) scale_by(j->buf, j->count, j->dt, hd_dist_size());
    return 0;
}

static void *comm_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&q.mu);
    for (;;) {
        while (q.head == q.tail) pthread_cond_wait(&q.work, &q.mu);
        dist_job j = q.jobs[q.head];
        int skip = q.failed; /* after a failure: the rest are skipped */
        pthread_mutex_unlock(&q.mu);
        char err[sizeof q.err];
        int rc = skip ? 0 : job_run(&j, err, sizeof err);
        pthread_mutex_lock(&q.mu);
        if (rc && !q.failed) {
            q.failed = 1;
            memcpy(q.err, err, sizeof err);
        }
        if (++q.head == q.tail) {
            q.head = q.tail = 0;
            pthread_cond_broadcast(&q.idle);
        }
    }
    return NULL;
}

int hd_dist_async_ok(void) {
    return hd_dist_active() && dist_serialized;
}

int hd_dist_all_reduce_start(void *buf, int64_t count, hd_dtype dt, hd_dist_op op, int mean,
                             char *err, size_t n) {
    if (!hd_dist_async_ok()) {
        snprintf(err, n, "DataParallel: MPI is not open for calls from a second thread");
        return -1;
    }
    if (reducible(dt, op, err, n)) return -1;
    if (mean && dt != HD_F32 && dt != HD_F64) {
        snprintf(err, n, "dist.all_reduce: mean of %s", hd_dtype_name(dt));
        return -1;
    }
    pthread_mutex_lock(&q.mu);
    int ok = 1;
    if (!q.up) {
        pthread_t t;
        ok = q.up = pthread_create(&t, NULL, comm_main, NULL) == 0;
        if (ok) pthread_detach(t);
    }
    if (ok && q.tail == q.cap) {
        int cap = q.cap ? 2 * q.cap : 16;
        dist_job *jobs = realloc(q.jobs, (size_t)cap * sizeof *jobs);
        ok = jobs != NULL;
        if (ok) q.jobs = jobs, q.cap = cap;
    }
    if (ok) {
        q.jobs[q.tail++] = (dist_job){buf, count, dt, op, mean};
        pthread_cond_signal(&q.work);
    }
    pthread_mutex_unlock(&q.mu);
    if (!ok) snprintf(err, n, "DataParallel: no thread or memory for the communication queue");
    return ok ? 0 : -1;
}

int hd_dist_wait(char *err, size_t n) {
    if (!q.up) return 0;
    pthread_mutex_lock(&q.mu);
    while (q.head != q.tail) pthread_cond_wait(&q.idle, &q.mu);
    int failed = q.failed;
    if (failed) snprintf(err, n, "%s", q.err);
    q.failed = 0;
    pthread_mutex_unlock(&q.mu);
    return failed ? -1 : 0;
}

int hd_dist_all_reduce_any(hd_ctx *ctx, void *buf, int64_t count, hd_dtype dt, hd_dist_op op,
                           int mean, char *err, size_t n) {
    if (dt != HD_F16 && dt != HD_BF16) {
        if (hd_dist_all_reduce(buf, count, dt, op, err, n)) return -1;
        if (mean) scale_by(buf, count, dt, hd_dist_size());
        return 0;
    }
    size_t bytes = (size_t)(count ? count : 1) * sizeof(float);
    float *f = hd_ctx_alloc(ctx, bytes);
    if (!f) {
        snprintf(err, n, "dist.all_reduce: out of memory for %lld elements", (long long)count);
        return -1;
    }
    half_to_f32(buf, f, count, dt);
    int rc = hd_dist_all_reduce(f, count, HD_F32, op, err, n);
    if (!rc && mean) scale_by(f, count, HD_F32, hd_dist_size());
    if (!rc) f32_to_half(f, buf, count, dt);
    hd_ctx_free(ctx, f, bytes);
    return rc;
}

int hd_dist_broadcast(void *buf, int64_t nbytes, int root, char *err, size_t n) {
    if (hd_dist_size() == 1 && !hd_dist_active()) return 0;
    if (need_open("dist.broadcast", err, n)) return -1;
    for (int64_t at = 0; at < nbytes; at += DIST_CHUNK) {
        int c = (int)(nbytes - at < DIST_CHUNK ? nbytes - at : DIST_CHUNK);
        watch_begin("dist.broadcast");
        int rc = mpi.bcast((char *)buf + at, c, mpi.byte, root, mpi.world);
        if (watch_end(rc, "dist.broadcast", err, n)) return -1;
    }
    return 0;
}

static int too_big(int64_t count, const char *what, char *err, size_t n) {
    if (count <= INT_MAX) return 0;
    snprintf(err, n,
             "%s: %lld elements per rank is more than one call carries (%d); split the "
             "tensor",
             what, (long long)count, INT_MAX);
    return -1;
}

int hd_dist_all_gather(const void *in, void *out, int64_t nbytes, char *err, size_t n) {
    if (hd_dist_size() == 1 && !hd_dist_active()) {
        memmove(out, in, (size_t)nbytes);
        return 0;
    }
    if (need_open("dist.all_gather", err, n) || too_big(nbytes, "dist.all_gather", err, n))
        return -1;
    watch_begin("dist.all_gather");
    int rc = mpi.allgather(in, (int)nbytes, mpi.byte, out, (int)nbytes, mpi.byte, mpi.world);
    return watch_end(rc, "dist.all_gather", err, n);
}

int hd_dist_reduce_scatter(const void *in, void *out, int64_t count, hd_dtype dt, hd_dist_op op,
                           char *err, size_t n) {
    if (hd_dist_size() == 1 && !hd_dist_active()) {
        memmove(out, in, (size_t)count * (size_t)hd_dtype_size(dt));
        return 0;
    }
    if (need_open("dist.reduce_scatter", err, n) || too_big(count, "dist.reduce_scatter", err, n))
        return -1;
    mpi_h mop = mpi.op[op];
    if (dt == HD_BOOL)
        mop = mpi.op[op == HD_DIST_SUM || op == HD_DIST_MAX ? HD_DIST_MAX : HD_DIST_MIN];
    watch_begin("dist.reduce_scatter");
    int rc = mpi.reduce_scatter_block(in, out, (int)count, mpi.dtype[dt], mop, mpi.world);
    return watch_end(rc, "dist.reduce_scatter", err, n);
}

/* A peer rank other than this one, inside the world. */
static int check_peer(int peer, const char *what, char *err, size_t n) {
    if (peer >= 0 && peer < hd_dist_size() && peer != hd_dist_rank()) return 0;
    if (peer == hd_dist_rank())
        snprintf(err, n, "%s: rank %d cannot exchange with itself", what, peer);
    else
        snprintf(err, n, "%s: no rank %d in a world of %d", what, peer, hd_dist_size());
    return -1;
}

int hd_dist_send(const void *buf, int64_t nbytes, int dst, int tag, char *err, size_t n) {
    if (check_peer(dst, "dist.send", err, n) || need_open("dist.send", err, n)) return -1;
    for (int64_t at = 0; at < nbytes || at == 0; at += DIST_CHUNK) {
        int c = (int)(nbytes - at < DIST_CHUNK ? nbytes - at : DIST_CHUNK);
        watch_begin("dist.send");
        int rc = mpi.send((const char *)buf + at, c, mpi.byte, dst, tag, mpi.world);
        if (watch_end(rc, "dist.send", err, n)) return -1;
        if (nbytes == 0) break;
    }
    return 0;
}

int hd_dist_recv(void *buf, int64_t nbytes, int src, int tag, char *err, size_t n) {
    if (check_peer(src, "dist.recv", err, n) || need_open("dist.recv", err, n)) return -1;
    for (int64_t at = 0; at < nbytes || at == 0; at += DIST_CHUNK) {
        int c = (int)(nbytes - at < DIST_CHUNK ? nbytes - at : DIST_CHUNK);
        watch_begin("dist.recv");
        int rc = mpi.recv((char *)buf + at, c, mpi.byte, src, tag, mpi.world, NULL);
        if (watch_end(rc, "dist.recv", err, n)) return -1;
        if (nbytes == 0) break;
    }
    return 0;
}

void hd_dist_finish(int status) {
    if (!hd_dist_active()) return;
    if (status == 0) {
        char err[256];
        hd_dist_wait(err, sizeof err);
        dist_done = 1;
        mpi.finalize();
        return;
    }
    dist_done = 1;
    fprintf(stderr, "hodu: rank %d of %d stopped with an error; stopping every rank\n",
            hd_dist_rank(), hd_dist_size());
    fflush(stderr);
    mpi.abort(mpi.world, status);
}
