/* Execution strategies (docs/strategy.md): the VM's active strategy, its
 * presets, and what applying one changes. The language's strategy values
 * are objects of stdlib/strategy.hodu's Strategy class; the fields cross
 * into C as a dict (hd_strategy_from_value / hd_strategy_to_dict). */
#ifndef HD_STRATEGY_H
#define HD_STRATEGY_H

#include <stddef.h>

#include "value.h"

enum { HD_MODE_EAGER, HD_MODE_LAZY, HD_MODE_HYBRID, HD_MODE_COUNT };
enum { HD_GRADS_NONE, HD_GRADS_FULL, HD_GRADS_CHECKPOINTED, HD_GRADS_ACCUMULATED, HD_GRADS_COUNT };
enum { HD_PREC_FULL, HD_PREC_SINGLE, HD_PREC_MIXED, HD_PREC_HALF, HD_PREC_COUNT };
enum { HD_MEM_STANDARD, HD_MEM_POOLED, HD_MEM_CACHED, HD_MEM_MINIMAL_PEAK, HD_MEM_COUNT };
enum { HD_PAR_NONE, HD_PAR_AUTOMATIC, HD_PAR_DATA, HD_PAR_MODEL, HD_PAR_PIPELINE, HD_PAR_COUNT };
/* data_parallel's workers are the kernels' threads: at most this many */
#define HD_DATA_WORKERS_MAX 256

typedef struct hd_strategy {
    int mode, gradient, precision, memory, parallelism;
    int interval; /* checkpointed: layers per segment */
    int steps;    /* accumulated: calls per optimizer step */
    int workers;  /* data_parallel workers, model_parallel devices, pipeline stages */
    int fusion, profiling;
    int micro_batches; /* pipeline_parallel: per batch (0: four per stage) */
    int mixed_f16;     /* precision "mixed" in f16 rather than bf16 */
} hd_strategy;

/* What a VM keeps: the strategy in force and what "automatic" and
 * "pooled" restore. */
typedef struct hd_strategy_state {
    hd_strategy cur;
    int threads;     /* the VM's threads when it opened */
    size_t cache;    /* the VM's block cache limit when it opened */
    unsigned noted;  /* notes already printed (one bit per note) */
    int grad_before; /* recording as it was before gradient "none" took it off */
    int profile_env; /* HODU_PROFILE turned profiling on: strategies leave it on */
} hd_strategy_state;

struct hd_vm;

/* At VM creation, after its threads and cache are set: the default
 * strategy, not applied (nothing changes). */
void hd_strategy_init(struct hd_vm *vm);
/* A preset by name into *s; an error listing the presets if none is so
 * named ("api" names the caller in the message). */
hd_status hd_strategy_preset(struct hd_vm *vm, const char *name, hd_strategy *s);
/* Make s the VM's strategy and carry out what its fields change. */
hd_status hd_strategy_apply(struct hd_vm *vm, const hd_strategy *s);
/* with_strategy(s) { }: apply s, keeping what to restore in *state. */
hd_status hd_strategy_enter(struct hd_vm *vm, const hd_value *arg, void **state);
void hd_strategy_exit(struct hd_vm *vm, void *state);
/* Optimizer steps between updates (accumulated), else 1. */
int hd_strategy_accum_steps(const struct hd_vm *vm);
/* 1 when optimizers average gradients over the ranks (data_parallel in a
 * run of several ranks). */
int hd_strategy_dist_data(const struct hd_vm *vm);
/* Layers per checkpointed segment: 0 (off), or n; minimal_peak memory
 * with full gradients asks for -1 (the square root of the layer count). */
int hd_strategy_checkpoint_interval(const struct hd_vm *vm);

#endif
