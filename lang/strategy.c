/* Execution strategies: presets, the fields as names, applying one to the
 * VM, with_strategy(s) { } and the builtins behind stdlib/strategy.hodu.
 *
 * What each field changes (docs/strategy.md has the table):
 *  - gradient: "none" turns recording off (no_grad throughout);
 *    "checkpointed" makes nn.Sequential run segments through checkpoint();
 *    "accumulated" makes optimizers step once every `steps` calls.
 *  - memory: "standard" turns the block cache off (freed blocks go back
 *    to the C library), "pooled" keeps it; "minimal_peak" is standard
 *    plus checkpointing of Sequential models (segments of sqrt(n)).
 *  - parallelism: "none" runs kernels on one thread, "automatic" on the
 *    VM's threads, "data_parallel" on `workers` threads (each op's rows,
 *    so each batch, split among them); model and pipeline parallelism
 *    make nn.Sequential place runs of its layers on cuda:0, cuda:1, ...
 *    and move the activations between them (pipelines in micro-batches);
 *    with fewer devices than asked for, applying says how many there are.
 *  - precision: "mixed" runs matmul and conv2d of f32 tensors in bf16
 *    (runtime/hd_op.c, as torch.autocast), the rest and the weights in
 *    f32; "full" and "half" run every op with float inputs in f64 and
 *    f16 (inputs cast, results in that dtype; tensors keep theirs).
 *  - fusion: off compiles graphs with one kernel per node.
 *  - profiling: the profiler (runtime/hd_profile.h) records every op,
 *    compile and compiled run; profile_report() prints the table, and a
 *    strategy's trace path (or HODU_PROFILE=trace.json) gets the Chrome
 *    trace when the VM closes.
 *  - mode: "lazy" and "hybrid" send calls of plain functions with tensor
 *    arguments through compiled code's caches (traced from their second
 *    call; what does not trace runs eagerly), and "lazy" the loops eager
 *    code meets too (compiled_call.c, eval.c).
 * data_parallel over the ranks of an MPI run with another workers count
 * prints a note the first time it is applied. */
#include "strategy.h"

#include "builtins_tensor.h"
#include "eval.h"
#include "hd_autograd.h"
#include "hd_backend.h"
#include "hd_dist.h"
#include "hd_memo.h"
#include "hd_profile.h"
#include "vm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ---- */

static const char *const mode_names[] = {"eager", "lazy", "hybrid", NULL};
static const char *const grad_names[] = {"none", "full", "checkpointed", "accumulated", NULL};
static const char *const prec_names[] = {"full", "single", "mixed", "half", NULL};
static const char *const mem_names[] = {"standard", "pooled", "cached", "minimal_peak", NULL};
static const char *const par_names[] = {"none",           "automatic",         "data_parallel",
                                        "model_parallel", "pipeline_parallel", NULL};

typedef struct strategy_field {
    const char *name;
    const char *const *values;
    size_t off;
} strategy_field;

static const strategy_field fields[] = {
    {"mode", mode_names, offsetof(hd_strategy, mode)},
    {"gradient", grad_names, offsetof(hd_strategy, gradient)},
    {"precision", prec_names, offsetof(hd_strategy, precision)},
    {"memory", mem_names, offsetof(hd_strategy, memory)},
    {"parallelism", par_names, offsetof(hd_strategy, parallelism)},
};
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

typedef struct strategy_count {
    const char *name;
    size_t off;
    int optional; /* a value without it reads 0 */
} strategy_count;

static const strategy_count counts[] = {
    {"interval", offsetof(hd_strategy, interval), 0},
    {"steps", offsetof(hd_strategy, steps), 0},
    {"workers", offsetof(hd_strategy, workers), 0},
    {"fusion", offsetof(hd_strategy, fusion), 0},
    {"profiling", offsetof(hd_strategy, profiling), 0},
    {"micro_batches", offsetof(hd_strategy, micro_batches), 1},
    {"mixed_f16", offsetof(hd_strategy, mixed_f16), 1},
};
#define NCOUNTS ((int)(sizeof counts / sizeof counts[0]))

static int *field_at(hd_strategy *s, size_t off) {
    return (int *)((char *)s + off);
}

static int name_index(const char *const *names, const char *v) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], v)) return i;
    return -1;
}

/* "a", "b" or "c" */
static void names_list(const char *const *names, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; names[i] && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s\"%s\"",
                                !i             ? ""
                                : names[i + 1] ? ", "
                                               : " or ",
                                names[i]);
}

/* ---- presets ----
 * The seeds' values, except default(): it is what Hodu does with no
 * strategy (the seeds' new() turns gradients off and computes in f64,
 * which no program expects of "default"). */

typedef struct strategy_preset {
    const char *name;
    hd_strategy s;
} strategy_preset;

static const strategy_preset presets[] = {
    {"default",
     {HD_MODE_EAGER, HD_GRADS_FULL, HD_PREC_SINGLE, HD_MEM_POOLED, HD_PAR_AUTOMATIC, 0, 0, 0, 1, 0,
      0, 0}},
    {"training",
     {HD_MODE_LAZY, HD_GRADS_FULL, HD_PREC_SINGLE, HD_MEM_POOLED, HD_PAR_AUTOMATIC, 0, 0, 0, 1, 1,
      0, 0}},
    {"inference",
     {HD_MODE_EAGER, HD_GRADS_NONE, HD_PREC_SINGLE, HD_MEM_CACHED, HD_PAR_AUTOMATIC, 0, 0, 0, 1, 0,
      0, 0}},
    {"memory_efficient",
     {HD_MODE_HYBRID, HD_GRADS_CHECKPOINTED, HD_PREC_MIXED, HD_MEM_MINIMAL_PEAK, HD_PAR_NONE, 10, 0,
      0, 0, 0, 0, 0}},
    {"high_throughput",
     {HD_MODE_LAZY, HD_GRADS_NONE, HD_PREC_SINGLE, HD_MEM_POOLED, HD_PAR_DATA, 0, 0, 4, 1, 0, 0,
      0}},
    {"debug",
     {HD_MODE_EAGER, HD_GRADS_FULL, HD_PREC_FULL, HD_MEM_STANDARD, HD_PAR_NONE, 0, 0, 0, 0, 1, 0,
      0}},
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

hd_status hd_strategy_preset(hd_vm *vm, const char *name, hd_strategy *s) {
    for (int i = 0; i < NPRESETS; i++)
        if (!strcmp(presets[i].name, name)) {
            *s = presets[i].s;
            return HD_OK;
        }
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "no strategy named '%s' (the presets: default, training, inference, "
                       "memory_efficient, high_throughput, debug)",
                       name);
}

void hd_strategy_init(hd_vm *vm) {
    hd_strategy_state *st = &vm->strategy;
    st->cur = presets[0].s;
    st->threads = vm->ctx.nthreads;
    st->cache = vm->ctx.cache_limit;
    st->grad_before = 1;
    const char *trace = getenv("HODU_PROFILE");
    if (trace && *trace && vm->opts.allow_io && !hd_profile_set(&vm->ctx, 1, trace)) {
        st->profile_env = 1;
        st->cur.profiling = 1;
    }
    hd_error_clear(&vm->ctx);
}

/* ---- a strategy value (a Strategy object, or a dict of its fields) ---- */

static hd_status field_get(hd_vm *vm, hd_value v, const char *name, hd_value *out) {
    if (v.type == HD_V_DICT) {
        hd_value *p = hd_dict_get(v, name);
        if (!p) return hd_vm_error(vm, HD_ERR_RUNTIME, "a strategy needs the field '%s'", name);
        *out = hd_value_ref(*p);
        return HD_OK;
    }
    return hd_eval_get_member(vm, v, name, out);
}

static hd_status field_read(hd_vm *vm, hd_value v, const strategy_field *f, hd_strategy *s) {
    hd_value x;
    if (field_get(vm, v, f->name, &x)) return vm->err;
    int i = x.type == HD_V_STR ? name_index(f->values, hd_as_str(x)->chars) : -1;
    if (i < 0) {
        char list[160];
        names_list(f->values, list, sizeof list);
        hd_value r = hd_value_repr(vm, x);
        hd_status e = hd_vm_error(vm, HD_ERR_RUNTIME, "strategy %s %s is not one of %s", f->name,
                                  r.type == HD_V_STR ? hd_as_str(r)->chars : "?", list);
        hd_value_unref(vm, r);
        hd_value_unref(vm, x);
        return e;
    }
    hd_value_unref(vm, x);
    *field_at(s, f->off) = i;
    return HD_OK;
}

/* Has the strategy value v the field name? */
static int field_has(hd_value v, const char *name) {
    hd_value d = v.type == HD_V_DICT ? v : ((hd_object *)v.as.o)->fields;
    return hd_dict_get(d, name) != NULL;
}

static hd_status count_read(hd_vm *vm, hd_value v, const strategy_count *c, hd_strategy *s) {
    hd_value x;
    if (c->optional && !field_has(v, c->name)) {
        *field_at(s, c->off) = 0;
        return HD_OK;
    }
    if (field_get(vm, v, c->name, &x)) return vm->err;
    int64_t n = x.type == HD_V_BOOL ? x.as.b : x.type == HD_V_INT ? x.as.i : -1;
    if (x.type == HD_V_NONE) n = 0;
    hd_status st = HD_OK;
    if (n < 0 || n > 1 << 20)
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "strategy %s must be a count from 0, got %s", c->name,
                         hd_value_type_name(x));
    hd_value_unref(vm, x);
    if (!st) *field_at(s, c->off) = (int)n;
    return st;
}

/* The counts a field's value needs. */
static hd_status strategy_check(hd_vm *vm, const hd_strategy *s) {
    if (s->gradient == HD_GRADS_CHECKPOINTED && s->interval < 1)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "strategy gradient \"checkpointed\" needs interval >= 1");
    if (s->gradient == HD_GRADS_ACCUMULATED && s->steps < 1)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "strategy gradient \"accumulated\" needs steps >= 1");
    if (s->parallelism >= HD_PAR_DATA && s->workers < 1)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "strategy parallelism \"%s\" needs a count >= 1",
                           par_names[s->parallelism]);
    if (s->mixed_f16 && s->precision != HD_PREC_MIXED)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "strategy mixed_f16 goes with precision \"mixed\", not \"%s\"",
                           prec_names[s->precision]);
    if (s->micro_batches && s->parallelism != HD_PAR_PIPELINE)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "strategy micro_batches goes with parallelism \"pipeline_parallel\", "
                           "not \"%s\"",
                           par_names[s->parallelism]);
    if (s->parallelism == HD_PAR_DATA && s->workers > HD_DATA_WORKERS_MAX)
        return hd_vm_error(
            vm, HD_ERR_RUNTIME,
            "strategy parallelism \"data_parallel\" takes at most %d workers, got %d",
            HD_DATA_WORKERS_MAX, s->workers);
    return HD_OK;
}

/* A strategy value's trace path (its field "trace", a string), applied
 * with it: the Chrome trace is written there when the VM closes. */
static hd_status strategy_trace(hd_vm *vm, hd_value v, const hd_strategy *s) {
    if (!s->profiling || (v.type != HD_V_OBJECT && v.type != HD_V_DICT)) return HD_OK;
    hd_value *p = hd_dict_get(v.type == HD_V_DICT ? v : ((hd_object *)v.as.o)->fields, "trace");
    if (!p || p->type == HD_V_NONE) return HD_OK;
    if (p->type != HD_V_STR)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "a strategy's trace must be a path, got %s",
                           hd_value_type_name(*p));
    if (!vm->opts.allow_io)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "a strategy's trace writes a file, and this VM has no file access");
    return hd_profile_set(&vm->ctx, 1, hd_as_str(*p)->chars) ? hd_vm_from_ctx(vm, HD_OK) : HD_OK;
}

/* s from a value: a preset's name, a Strategy object or a dict. */
static hd_status strategy_from_value(hd_vm *vm, hd_value v, hd_strategy *s) {
    if (v.type == HD_V_STR) return hd_strategy_preset(vm, hd_as_str(v)->chars, s);
    if (v.type != HD_V_OBJECT && v.type != HD_V_DICT)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "a strategy must be a strategy (strategy.training(), ...) or a "
                           "preset's name, got %s",
                           hd_value_type_name(v));
    memset(s, 0, sizeof *s);
    for (int i = 0; i < NFIELDS; i++)
        if (field_read(vm, v, &fields[i], s)) return vm->err;
    for (int i = 0; i < NCOUNTS; i++)
        if (count_read(vm, v, &counts[i], s)) return vm->err;
    return strategy_check(vm, s);
}

static hd_value strategy_to_dict(hd_vm *vm, const hd_strategy *s) {
    hd_value d = hd_dict_new(vm);
    if (d.type != HD_V_DICT) return hd_none();
    hd_strategy c = *s;
    for (int i = 0; i < NFIELDS; i++) {
        hd_value v = hd_str_from(vm, fields[i].values[*field_at(&c, fields[i].off)]);
        if (v.type != HD_V_STR || hd_dict_set(vm, d, fields[i].name, v)) goto fail;
    }
    for (int i = 0; i < NCOUNTS; i++) {
        int n = *field_at(&c, counts[i].off);
        int flag = counts[i].off == offsetof(hd_strategy, fusion) ||
                   counts[i].off == offsetof(hd_strategy, profiling) ||
                   counts[i].off == offsetof(hd_strategy, mixed_f16);
        if (hd_dict_set(vm, d, counts[i].name, flag ? hd_bool(n) : hd_int(n))) goto fail;
    }
    return d;
fail:
    hd_value_unref(vm, d);
    return hd_none();
}

/* ---- applying ---- */

enum {
    NOTE_RANKS = 32,
};

static void note_once(hd_vm *vm, unsigned bit, const char *fmt, const char *what) {
    if (vm->strategy.noted & bit) return;
    vm->strategy.noted |= bit;
    fprintf(stderr, "hodu: note: strategy: ");
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
}

static void strategy_notes(hd_vm *vm, const hd_strategy *s) {
    if (s->parallelism == HD_PAR_DATA && hd_dist_size() > 1 && s->workers != hd_dist_size()) {
        char what[96];
        snprintf(what, sizeof what, "the %d ranks of this run, not %d workers", hd_dist_size(),
                 s->workers);
        note_once(vm, NOTE_RANKS, "parallelism \"data_parallel\" is over %s", what);
    }
}

/* The cuda devices that open, counted up to most (at most 64). */
static int cuda_devices(hd_vm *vm, int most) {
    int n = 0;
    for (; n < most && n < 64; n++) {
        char spec[16];
        const hd_backend *be;
        int dev;
        snprintf(spec, sizeof spec, "cuda:%d", n);
        if (hd_backend_open_device(&vm->ctx, spec, &be, &dev)) break;
    }
    hd_error_clear(&vm->ctx);
    return n;
}

/* Model and pipeline parallelism need that many cuda devices. */
static hd_status strategy_devices(hd_vm *vm, const hd_strategy *s) {
    if (s->parallelism < HD_PAR_MODEL) return HD_OK;
    int n = cuda_devices(vm, s->workers);
    if (n >= s->workers) return HD_OK;
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "strategy parallelism \"%s\" asks for %d devices; this machine has %d cuda "
                       "device%s",
                       par_names[s->parallelism], s->workers, n, n == 1 ? "" : "s");
}

/* s's precision as the ops' autocast mode (runtime/hd_op.c). */
static int strategy_autocast(const hd_strategy *s) {
    switch (s->precision) {
    case HD_PREC_MIXED: return s->mixed_f16 ? HD_AUTOCAST_MIXED_F16 : HD_AUTOCAST_MIXED;
    case HD_PREC_FULL: return HD_AUTOCAST_FULL;
    case HD_PREC_HALF: return HD_AUTOCAST_HALF;
    default: return HD_AUTOCAST_OFF;
    }
}

/* Carry out s's fields (no checks, no notes): recording, threads, the
 * block cache. */
static void strategy_effects(hd_vm *vm, const hd_strategy *s) {
    hd_strategy_state *st = &vm->strategy;
    hd_ctx *ctx = &vm->ctx;
    if (s->gradient == HD_GRADS_NONE && st->cur.gradient != HD_GRADS_NONE)
        st->grad_before = hd_grad_set_enabled(ctx, 0);
    else if (s->gradient != HD_GRADS_NONE && st->cur.gradient == HD_GRADS_NONE)
        hd_grad_set_enabled(ctx, st->grad_before);
    /* data_parallel in a world of several ranks: the ranks are the workers,
     * and each keeps its share of the cores */
    int ranks = s->parallelism == HD_PAR_DATA && hd_dist_size() > 1;
    ctx->nthreads = s->parallelism == HD_PAR_NONE             ? 1
                    : s->parallelism == HD_PAR_DATA && !ranks ? s->workers
                                                              : st->threads;
    int pooled = s->memory == HD_MEM_POOLED || s->memory == HD_MEM_CACHED;
    hd_ctx_set_cache_limit(ctx, pooled ? st->cache : 0);
    if (!pooled) hd_ctx_trim(ctx);
    hd_memo_set(ctx, s->memory == HD_MEM_CACHED); /* memory made in hd_strategy_apply */
    ctx->autocast = strategy_autocast(s);
    /* (HODU_EAGER=1 runs all compiled code as plain code: lazy too) */
    int lazy = s->mode == HD_MODE_LAZY     ? HD_COMPILE_ALL_CALLS | HD_COMPILE_ALL_LOOPS
               : s->mode == HD_MODE_HYBRID ? HD_COMPILE_ALL_CALLS
                                           : 0;
    vm->compile_all = vm->compile_env | (vm->compile_none ? 0 : lazy);
    /* out of memory starting the profiler: it stays off, nothing else */
    if (!st->profile_env && hd_profile_set(ctx, s->profiling, NULL)) hd_error_clear(ctx);
    st->cur = *s;
}

hd_status hd_strategy_apply(hd_vm *vm, const hd_strategy *s) {
    if (strategy_check(vm, s) || strategy_devices(vm, s)) return vm->err;
    /* the memo's memory now, so that applying (and leaving a block back to
     * this strategy) cannot fail later */
    if (s->memory == HD_MEM_CACHED && hd_memo_set(&vm->ctx, 1))
        return hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    strategy_notes(vm, s);
    strategy_effects(vm, s);
    return HD_OK;
}

hd_status hd_vm_set_strategy(hd_vm *vm, const char *name) {
    hd_strategy s;
    if (!name) return hd_vm_error(vm, HD_ERR_ARGUMENT, "the strategy's name is NULL");
    if (hd_strategy_preset(vm, name, &s)) return vm->err;
    return hd_strategy_apply(vm, &s);
}

/* ---- with_strategy(s) { } ---- */

typedef struct strategy_saved {
    hd_strategy prev;
    int grad_on; /* recording when the block began */
} strategy_saved;

hd_status hd_strategy_enter(hd_vm *vm, const hd_value *arg, void **state) {
    hd_strategy s;
    if (!arg) return hd_vm_error(vm, HD_ERR_RUNTIME, "with_strategy(s) { } needs a strategy");
    if (vm->ctx.trace)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "with_strategy inside compiled code would apply once, when the code "
                           "is traced (put the block around the call instead)");
    if (strategy_from_value(vm, *arg, &s)) return vm->err;
    strategy_saved *sv = hd_ctx_calloc(&vm->ctx, 1, sizeof *sv);
    if (!sv) return hd_vm_from_ctx(vm, HD_OK);
    sv->prev = vm->strategy.cur;
    sv->grad_on = hd_grad_is_enabled(&vm->ctx);
    if (hd_strategy_apply(vm, &s) || strategy_trace(vm, *arg, &s)) {
        hd_strategy_exit(vm, sv);
        return vm->err;
    }
    *state = sv;
    return HD_OK;
}

void hd_strategy_exit(hd_vm *vm, void *state) {
    strategy_saved *sv = state;
    if (!sv) return;
    strategy_effects(vm, &sv->prev);
    hd_grad_set_enabled(&vm->ctx, sv->grad_on);
    hd_ctx_free(&vm->ctx, sv, sizeof *sv);
}

int hd_strategy_dist_data(const hd_vm *vm) {
    return vm->strategy.cur.parallelism == HD_PAR_DATA && hd_dist_size() > 1;
}

int hd_strategy_accum_steps(const hd_vm *vm) {
    const hd_strategy *s = &vm->strategy.cur;
    return s->gradient == HD_GRADS_ACCUMULATED ? s->steps : 1;
}

int hd_strategy_checkpoint_interval(const hd_vm *vm) {
    const hd_strategy *s = &vm->strategy.cur;
    if (s->gradient == HD_GRADS_CHECKPOINTED) return s->interval;
    if (s->gradient == HD_GRADS_FULL && s->memory == HD_MEM_MINIMAL_PEAK) return -1;
    return 0;
}

/* ---- builtins ---- */

/* set_strategy(s): s (a strategy, or a preset's name) for the rest of the
 * program. */
static HD_TF_FN(tf_set_strategy) {
    HD_TARGS_BIND(a); /* s */
    hd_strategy s;
    if (strategy_from_value(vm, a.v[0], &s) || hd_strategy_apply(vm, &s) ||
        strategy_trace(vm, a.v[0], &s))
        return vm->err;
    return HD_OK;
}

/* _strategy(name = none): the fields of a preset, or of the strategy in
 * force, as a dict (stdlib/strategy.hodu makes its Strategy from it). */
static HD_TF_FN(tf_strategy_fields) {
    HD_TARGS_BIND(a); /* name= */
    hd_strategy s = vm->strategy.cur;
    if (hd_targ_has(&a, 0)) {
        if (a.v[0].type != HD_V_STR) return hd_targ_type_error(vm, &a, 0, "a string");
        if (hd_strategy_preset(vm, hd_as_str(a.v[0])->chars, &s)) return vm->err;
    }
    *out = strategy_to_dict(vm, &s);
    return out->type == HD_V_DICT ? HD_OK : hd_vm_oom(vm);
}

/* _strategy_check(dict): an error naming the first bad field. */
static HD_TF_FN(tf_strategy_check) {
    HD_TARGS_BIND(a); /* fields */
    hd_strategy s;
    return strategy_from_value(vm, a.v[0], &s) ? vm->err : HD_OK;
}

/* _strategy_names(field): the values a field may take. */
static HD_TF_FN(tf_strategy_names) {
    HD_TARGS_BIND(a); /* field */
    if (a.v[0].type != HD_V_STR) return hd_targ_type_error(vm, &a, 0, "a string");
    const char *name = hd_as_str(a.v[0])->chars;
    for (int i = 0; i < NFIELDS; i++) {
        if (strcmp(fields[i].name, name)) continue;
        hd_value l = hd_list_new(vm, 8);
        if (l.type != HD_V_LIST) return hd_vm_oom(vm);
        for (int k = 0; fields[i].values[k]; k++)
            if (hd_list_push(vm, l, hd_str_from(vm, fields[i].values[k]))) {
                hd_value_unref(vm, l);
                return hd_vm_oom(vm);
            }
        *out = l;
        return HD_OK;
    }
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "strategies have no field '%s' (fields: mode, gradient, precision, memory, "
                       "parallelism)",
                       name);
}

/* A list of n ints into *out. */
static hd_status ints_list(hd_vm *vm, const int64_t *v, int n, hd_value *out) {
    hd_value l = hd_list_new(vm, n);
    if (l.type != HD_V_LIST) return hd_vm_oom(vm);
    for (int i = 0; i < n; i++)
        if (hd_list_push(vm, l, hd_int(v[i]))) {
            hd_value_unref(vm, l);
            return hd_vm_oom(vm);
        }
    *out = l;
    return HD_OK;
}

/* _strategy_knobs(): [optimizer steps per update, checkpoint interval,
 * 1 when optimizers average gradients over the ranks, the cuda devices
 * nn.Sequential splits its layers over (0: none), micro-batches per batch
 * (1: the batch whole)], what optim and nn read at every step. */
static HD_TF_FN(tf_strategy_knobs) {
    HD_TARGS_BIND(a); /* (none) */
    const hd_strategy *s = &vm->strategy.cur;
    int split = s->parallelism == HD_PAR_MODEL || s->parallelism == HD_PAR_PIPELINE;
    int pipe = s->parallelism == HD_PAR_PIPELINE;
    int64_t v[5] = {hd_strategy_accum_steps(vm), hd_strategy_checkpoint_interval(vm),
                    hd_strategy_dist_data(vm), split ? s->workers : 0,
                    !pipe              ? 1
                    : s->micro_batches ? s->micro_batches
                                       : 4 * (int64_t)s->workers};
    return ints_list(vm, v, 5, out);
}

/* _machine(): [cpu threads, cuda devices, MiB of memory available]. */
static int64_t machine_memory_mb(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb < 0 ? -1 : kb / 1024;
}

static HD_TF_FN(tf_machine) {
    HD_TARGS_BIND(a); /* (none) */
    int64_t v[3] = {vm->strategy.threads, cuda_devices(vm, 64), machine_memory_mb()};
    return ints_list(vm, v, 3, out);
}

/* get_num_threads(): the threads kernels run on now (parallelism "none":
 * 1). */
static HD_TF_FN(tf_get_num_threads) {
    HD_TARGS_BIND(a); /* (none) */
    *out = hd_int(vm->ctx.nthreads);
    return HD_OK;
}

/* empty_cache(): give the block caches' memory (the host's and every
 * open device's) and the memo's results back. */
static HD_TF_FN(tf_empty_cache) {
    HD_TARGS_BIND(a); /* (none) */
    hd_memo_clear(&vm->ctx);
    hd_ctx_trim(&vm->ctx);
    hd_devices_trim(&vm->ctx);
    return HD_OK;
}

/* reset_peak_memory_stats(device = none): memory_stats(device)["peak"]
 * starts again from what is in use now. */
static HD_TF_FN(tf_reset_peak) {
    HD_TARGS_BIND(a); /* device= */
    if (hd_targ_device(vm, &a, 0)) return HD_ERR_RUNTIME;
    if (a.place && a.place->memory) {
        if (a.place->memory(&vm->ctx, a.place_device, HD_MEM_RESET_PEAK, NULL))
            return hd_tfail(vm, "reset_peak_memory_stats");
        return HD_OK;
    }
    vm->ctx.mem_peak = vm->ctx.mem_used;
    return HD_OK;
}

/* profile_report(reset = false, show = true): print the profiler's
 * table (show = false: return it as a string). */
static HD_TF_FN(tf_profile_report) {
    HD_TARGS_BIND(a); /* reset=, show= */
    int reset, show;
    if (hd_targ_bool(vm, &a, 0, 0, &reset) || hd_targ_bool(vm, &a, 1, 1, &show))
        return HD_ERR_RUNTIME;
    char *t = hd_profile_table(&vm->ctx);
    if (!t) return hd_vm_oom(vm);
    if (show)
        hd_vm_write(vm, t, strlen(t));
    else
        *out = hd_str_from(vm, t);
    free(t);
    if (!show && out->type != HD_V_STR) return hd_vm_oom(vm);
    if (reset) hd_profile_reset(&vm->ctx);
    return HD_OK;
}

/* profile_stats(): {name: {calls, total, self, bytes, flops}} of every
 * row that recorded something (seconds, bytes, FLOPs). */
static hd_status profile_row_dict(hd_vm *vm, const hd_profile_stats *ps, hd_value *out) {
    hd_value r = hd_dict_new(vm);
    if (r.type != HD_V_DICT || hd_dict_set(vm, r, "calls", hd_int((int64_t)ps->calls)) ||
        hd_dict_set(vm, r, "total", hd_float(ps->total)) ||
        hd_dict_set(vm, r, "self", hd_float(ps->self)) ||
        hd_dict_set(vm, r, "bytes", hd_float(ps->bytes)) ||
        hd_dict_set(vm, r, "flops", hd_float(ps->flops)) ||
        hd_dict_set(vm, r, "device", hd_float(ps->device))) {
        hd_value_unref(vm, r);
        return hd_vm_oom(vm);
    }
    *out = r;
    return HD_OK;
}

static HD_TF_FN(tf_profile_stats) {
    HD_TARGS_BIND(a); /* (none) */
    hd_value d = hd_dict_new(vm);
    if (d.type != HD_V_DICT) return hd_vm_oom(vm);
    for (int row = 0; row < HD_PROF_ROWS; row++) {
        hd_profile_stats ps;
        hd_value r;
        if (!hd_profile_row(&vm->ctx, row, &ps)) continue;
        if (profile_row_dict(vm, &ps, &r) || hd_dict_set(vm, d, hd_profile_row_name(row), r)) {
            hd_value_unref(vm, d);
            return hd_vm_oom(vm);
        }
    }
    *out = d;
    return HD_OK;
}

static const hd_tfunc rows[] = {
    {"profile_report", tf_profile_report, "reset=, show=", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"profile_stats", tf_profile_stats, "", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"reset_peak_memory_stats", tf_reset_peak, "device=", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"set_strategy", tf_set_strategy, "s", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"_strategy", tf_strategy_fields, "name=", -1, HD_TF_GLOBAL},
    {"_strategy_check", tf_strategy_check, "fields", -1, HD_TF_GLOBAL},
    {"_strategy_names", tf_strategy_names, "field", -1, HD_TF_GLOBAL},
    {"_strategy_knobs", tf_strategy_knobs, "", -1, HD_TF_GLOBAL},
    {"_machine", tf_machine, "", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"empty_cache", tf_empty_cache, "", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"get_num_threads", tf_get_num_threads, "", -1, HD_TF_GLOBAL},
};

const hd_tfunc_table hd_tfuncs_strategy = {rows, (int)(sizeof rows / sizeof rows[0])};
