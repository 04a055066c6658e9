/* hd_dist: the processes of a distributed run, through MPI.
 *
 * A process started by `mpirun` (Open MPI) is one rank of a world; any
 * other process is a world of one, and needs no MPI at all. The MPI
 * library is opened at run time (dlopen), so a build, or a machine, without
 * it still runs every program that is not distributed.
 *
 * rank and world size come from the launcher's environment, so they are
 * known, and fixed, from the start of the process; hd_dist_init opens MPI.
 * Collectives work on host buffers (the language moves device tensors)
 * and never hang: each waits at most the timeout for the other ranks,
 * then fails with an error that says so.
 *
 * Functions that can fail return 0 on success and -1 with a message in
 * err (at most n bytes). */
#ifndef HD_DIST_H
#define HD_DIST_H

#include "hd_dtype.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { HD_DIST_SUM, HD_DIST_PROD, HD_DIST_MAX, HD_DIST_MIN } hd_dist_op;

/* The launcher's world: OMPI_COMM_WORLD_RANK / _SIZE (0 and 1 without). */
int hd_dist_rank(void);
int hd_dist_size(void);
/* Whether a launcher (mpirun) started this process, even as a world of 1. */
int hd_dist_launched(void);
/* This process's place among the ranks on its machine (one GPU each):
 * OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE (0 and 1 without). */
int hd_dist_local_rank(void);
int hd_dist_local_size(void);
/* Whether MPI is open (hd_dist_init found a launcher, or was forced). */
int hd_dist_active(void);
/* Whether the MPI library can be opened here (HODU_MPI_LIB names it). */
int hd_dist_available(char *err, size_t n);

/* Opens MPI when the process was started by mpirun, or when force is set;
 * a world of one otherwise. Again after success: nothing. timeout_s > 0
 * sets how long a collective waits (default HODU_DIST_TIMEOUT, or 300 s). */
int hd_dist_init(int force, double timeout_s, char *err, size_t n);

/* All ranks reach it before any leaves. */
int hd_dist_barrier(char *err, size_t n);
/* buf (count elements of dt) replaced by op over every rank's buf. f16
 * and bf16 are not taken (the caller reduces them in f32); bool takes
 * max and min. */
int hd_dist_all_reduce(void *buf, int64_t count, hd_dtype dt, hd_dist_op op, char *err, size_t n);
/* The same for every dtype (f16 and bf16 through f32, rounded once), and
 * mean: the sum divided by the world's size (float dtypes). */
struct hd_ctx;
int hd_dist_all_reduce_any(struct hd_ctx *ctx, void *buf, int64_t count, hd_dtype dt, hd_dist_op op,
                           int mean, char *err, size_t n);
/* Started now, finished by the communication thread (one, in the order
 * started) while the caller goes on: buf (which must stay alive and
 * untouched until hd_dist_wait) replaced by op over every rank's buf, and
 * divided by the world's size with mean (f32 and f64). Every other call
 * here waits for what was started first. hd_dist_async_ok: MPI is open
 * and allows it (calls from a second thread). */
int hd_dist_async_ok(void);
int hd_dist_all_reduce_start(void *buf, int64_t count, hd_dtype dt, hd_dist_op op, int mean,
                             char *err, size_t n);
/* Every started all-reduce finished; -1 with the first one's error. */
int hd_dist_wait(char *err, size_t n);
/* root's nbytes copied into every rank's buf. */
int hd_dist_broadcast(void *buf, int64_t nbytes, int root, char *err, size_t n);
/* out (size * nbytes) gets every rank's in, in rank order. */
int hd_dist_all_gather(const void *in, void *out, int64_t nbytes, char *err, size_t n);
/* in holds size blocks of count elements; out gets block rank reduced by
 * op over every rank. */
int hd_dist_reduce_scatter(const void *in, void *out, int64_t count, hd_dtype dt, hd_dist_op op,
                           char *err, size_t n);
/* Watch a blocking call made elsewhere (a device collective's wait) as
 * the collectives here are: still inside it after the timeout, the rank
 * says so (naming what) and ends its process. */
void hd_dist_watch_begin(const char *what);
void hd_dist_watch_end(void);
int hd_dist_send(const void *buf, int64_t nbytes, int dst, int tag, char *err, size_t n);
int hd_dist_recv(void *buf, int64_t nbytes, int src, int tag, char *err, size_t n);

/* The end of the process, with the exit status it will have: MPI is
 * finalized after a success; after a failure the whole job is stopped
 * (MPI_Abort), with a line naming this rank, so that no other rank waits
 * for it. Nothing when MPI is not open. */
void hd_dist_finish(int status);

#endif
