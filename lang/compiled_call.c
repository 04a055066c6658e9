/* The entry points of compiled code: compiled fn calls, compiled { }
 * blocks and (HODU_COMPILE_ALL) top-level statements. Each finds its body's
 * cache, runs a matching entry, or traces the body into a new one through
 * compiled.c's sessions (see compiled.c and docs/compiled.md). */
#include "builtins_tensor.h"
#include "compiled_int.h"
#include "eval.h"
#include "hd_autograd.h"
#include "tensor_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hd_status implicit_check(hd_vm *vm);

/* ---- compiled fn ---- */

static void count_eager(hd_vm *vm, cp_body *b) {
    b->eager_calls++;
    if (!b->implicit) vm->compiled->eager_calls++;
}

/* One call's arguments, flattened: self (if any), positional, named. */
typedef struct cp_call {
    hd_closure *c;
    int has_self, nargs, nkw, nall;
    const hd_kwarg *kw;
    hd_value *all;
    const char **names;
    hd_value all_buf[16];
    const char *names_buf[16];
    uint64_t kw_hash;
} cp_call;

static void call_free(hd_vm *vm, cp_call *k) {
    if (k->all && k->all != k->all_buf)
        hd_ctx_free(&vm->ctx, k->all, (size_t)k->nall * sizeof *k->all);
    if (k->names && k->names != k->names_buf)
        hd_ctx_free(&vm->ctx, k->names, (size_t)k->nall * sizeof *k->names);
}

static hd_status call_flatten(hd_vm *vm, cp_call *k, hd_closure *c, hd_value self, int has_self,
                              const hd_value *args, int nargs, const hd_kwarg *kw, int nkw) {
    memset(k, 0, sizeof *k);
    k->c = c;
    k->has_self = has_self;
    k->nargs = nargs;
    k->kw = kw;
    k->nkw = nkw;
    k->nall = has_self + nargs + nkw;
    k->all = k->all_buf;
    k->names = k->names_buf;
    if (k->nall > 16) {
        k->all = hd_ctx_alloc(&vm->ctx, (size_t)k->nall * sizeof *k->all);
        k->names = k->all ? hd_ctx_alloc(&vm->ctx, (size_t)k->nall * sizeof *k->names) : NULL;
        if (!k->names) {
            call_free(vm, k);
            return hd_vm_oom(vm);
        }
    }
    const hd_ast_fn *fn = c->fn;
    int at = 0;
    if (has_self) {
        k->all[at] = self;
        k->names[at++] = fn->nparams ? fn->params[0].name : "self";
    }
    for (int i = 0; i < nargs; i++, at++) {
        k->all[at] = args[i];
        k->names[at] = has_self + i < fn->nparams ? fn->params[has_self + i].name : "arg";
    }
    hd_ir_hasher h;
    hd_ir_hash_init(&h);
    for (int i = 0; i < nkw; i++, at++) {
        k->all[at] = kw[i].value;
        k->names[at] = kw[i].name;
        hd_ir_hash_str(&h, kw[i].name);
    }
    k->kw_hash = hd_ir_hash_final(&h);
    return HD_OK;
}

static void call_roots(const cp_call *k, hd_vm *vm, const cp_body *b, const hd_value *args,
                       cp_roots *r) {
    memset(r, 0, sizeof *r);
    r->vm = vm;
    r->args = args;
    r->nargs = k->nall;
    r->arg_names = k->names;
    r->closure = k->c;
    r->upval_names = b->upval_names;
}

static hd_status call_eager(hd_vm *vm, cp_body *b, const cp_call *k, hd_value *out) {
    if (b) count_eager(vm, b);
    const hd_value *all = k->all;
    hd_kwarg kwbuf[16], *kw = k->nkw <= 16 ? kwbuf : NULL;
    if (!kw) kw = hd_ctx_alloc(&vm->ctx, (size_t)k->nkw * sizeof *kw);
    if (!kw) return hd_vm_oom(vm);
    for (int i = 0; i < k->nkw; i++) kw[i] = k->kw[i];
    hd_status st = hd_eval_closure(vm, k->c, k->has_self ? all[0] : hd_none(), k->has_self,
                                   all + k->has_self, k->nargs, kw, k->nkw, out);
    if (kw != kwbuf) hd_ctx_free(&vm->ctx, kw, (size_t)k->nkw * sizeof *kw);
    return st;
}

/* Symbolic tensors for the tensor arguments (graph inputs named after the
 * parameters); other arguments as they are. */
static hd_status call_symbolic(cp_session *s, const cp_call *k, hd_value *sym) {
    hd_vm *vm = s->vm;
    for (int i = 0; i < k->nall; i++) sym[i] = hd_none();
    for (int i = 0; i < k->nall; i++) {
        hd_value v = k->all[i];
        if (v.type != HD_V_TENSOR || !v.as.t->storage) {
            hd_vref(sym[i] = v);
            continue;
        }
        char name[160];
        if (cp_session_input(s, k->names[i], i, -1, v.as.t, name, sizeof name)) return vm->err;
        hd_tensor *t = hd_trace_input(&vm->ctx, name, v.as.t->dtype, v.as.t->shape, v.as.t->ndim);
        if (!t) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
        sym[i] = hd_tensor_value(t);
        if (hd_grad_requires(&vm->ctx, v.as.t) && hd_grad_set_requires(&vm->ctx, t, 1))
            return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
        /* its .grad, which backward() inside adds to: an input through the
         * path x.grad (and whether it exists, a guard) */
        hd_tensor *g = hd_grad_get(v.as.t);
        if (hd_compiled_grad_input(vm, g)) return vm->err;
        if (g && hd_grad_set(&vm->ctx, t, g)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    }
    return HD_OK;
}

static hd_status call_body(hd_vm *vm, const cp_call *k, hd_value *sym, hd_value *ret) {
    hd_kwarg kwbuf[16], *kw = k->nkw <= 16 ? kwbuf : NULL;
    if (!kw) kw = hd_ctx_alloc(&vm->ctx, (size_t)k->nkw * sizeof *kw);
    if (!kw) return hd_vm_oom(vm);
    int off = k->has_self + k->nargs;
    for (int i = 0; i < k->nkw; i++) {
        kw[i].name = k->kw[i].name;
        kw[i].value = sym[off + i];
    }
    hd_status st = hd_eval_closure(vm, k->c, k->has_self ? sym[0] : hd_none(), k->has_self,
                                   sym + k->has_self, k->nargs, kw, k->nkw, ret);
    if (kw != kwbuf) hd_ctx_free(&vm->ctx, kw, (size_t)k->nkw * sizeof *kw);
    return st;
}

/* A tensor with gradient history made outside the body reached the trace
 * (a field, a global, an outer variable): that call runs eagerly, and is
 * traced again at the next one. */
#define HISTORY_WHY                                                                                \
    "it reads a tensor with gradient history made outside it (a graph would cut that history)"

static void log_eager(hd_vm *vm, const cp_body *b, const char *why) {
    char line[512];
    snprintf(line, sizeof line, "%s", b->where);
    cp_logf_line(vm, "hodu: %s runs eagerly: %s", line, why);
}

/* A key that runs eagerly (its result needs gradients, or it changes state
 * a graph cannot replay): said once per body on standard error (a silent
 * loss of speed would puzzle), and at every such key under
 * HODU_LOG=recompile. */
static void note_eager(hd_vm *vm, cp_body *b, const cp_entry *e) {
    if (!b->implicit && !b->noted && !(vm->compiled && vm->compiled->log)) {
        fflush(stdout);
        fprintf(stderr, "hodu: note: %s runs eagerly%s: %s\n", b->where,
                e->eager == CP_EAGER_GRAD ? " while gradients are on" : "", e->eager_why);
    }
    b->noted = 1;
    log_eager(vm, b, e->eager_why);
}

/* Plain code under a lazy strategy that does no tensor work runs eagerly
 * from now on (it is not traced again). */
static void idle_eager(hd_vm *vm, cp_body *b, cp_entry *e) {
    log_eager(vm, b, e->eager_why);
    b->no_compile = 1;
    cp_entry_free(vm, e);
}

/* The body on symbolic arguments, then the new entry run for this call
 * (unless its results need gradients: e->eager). */
static hd_status call_trace_body(cp_session *s, cp_call *k, hd_value *sym, cp_entry *e,
                                 hd_value *out) {
    hd_vm *vm = s->vm;
    cp_roots sroots, rroots;
    hd_value ret = hd_none();
    hd_tensor **first = NULL;
    hd_status st = call_symbolic(s, k, sym);
    call_roots(k, vm, s->body, sym, &sroots);
    call_roots(k, vm, s->body, k->all, &rroots);
    if (!st) st = cp_session_scan(s, &sroots);
    for (int i = 0; !st && i < k->nall; i++)
        st = cp_session_root_guard(s, CP_ROOT_ARG, i, k->all[i]);
    if (!st) st = call_body(vm, k, sym, &ret);
    if (!st) st = cp_session_finish(s, &ret, sym, k->nall, e, &first);
    hd_vunref(vm, ret);
    if (!st) cp_entry_take(s, e, k->nall, k->kw_hash);
    if (!st && !e->eager) st = cp_entry_run(vm, e, &rroots, first, out);
    e->hits = 0;
    cp_first_free(vm, e, first);
    return st;
}

/* Trace the call, compile, run; or run eagerly when a result needs
 * gradients. */
static hd_status call_trace(hd_vm *vm, cp_body *b, cp_call *k, const hd_jit_key *fixed,
                            const cp_opts *o, hd_value *out) {
    cp_session s;
    hd_value *sym = hd_ctx_calloc(&vm->ctx, (size_t)(k->nall + 1), sizeof *sym);
    cp_entry *e = hd_ctx_calloc(&vm->ctx, 1, sizeof *e);
    if (!sym || !e) {
        hd_ctx_free(&vm->ctx, sym, (size_t)(k->nall + 1) * sizeof *sym);
        hd_ctx_free(&vm->ctx, e, sizeof *e);
        return hd_vm_oom(vm);
    }
    e->ret.v = hd_none();
    e->key = *fixed;
    hd_status st = cp_session_begin(vm, &s, b, o, k->c->fn->name ? k->c->fn->name : "fn");
    if (!st) st = call_trace_body(&s, k, sym, e, out);
    if (st || e->eager) {
        hd_trace_abort(&vm->ctx);
        cp_session_restore(&s);
    }
    int history = st && s.history;
    cp_session_free(&s);
    for (int i = 0; i < k->nall; i++) hd_vunref(vm, sym[i]);
    hd_ctx_free(&vm->ctx, sym, (size_t)(k->nall + 1) * sizeof *sym);
    if (st) {
        cp_entry_free(vm, e);
        if (!history) return st;
        hd_vm_clear_error(vm);
        log_eager(vm, b, HISTORY_WHY);
        return call_eager(vm, b, k, out);
    }
    if (e->eager == CP_EAGER_IDLE) return idle_eager(vm, b, e), call_eager(vm, b, k, out);
    cp_body_add(vm, b, e);
    if (!e->eager) return HD_OK;
    note_eager(vm, b, e);
    return call_eager(vm, b, k, out);
}

static int any_tensor(const cp_call *k) {
    for (int i = 0; i < k->nall; i++)
        if (k->all[i].type == HD_V_TENSOR) return 1;
    return 0;
}

/* A tensor argument with gradient history (made by recorded ops): inside
 * the graph it would be a new leaf, cut from that history, so the call
 * runs eagerly. */
static int arg_with_history(hd_vm *vm, const cp_call *k) {
    for (int i = 0; i < k->nall; i++) {
        hd_value v = k->all[i];
        if (v.type == HD_V_TENSOR && hd_grad_requires(&vm->ctx, v.as.t) &&
            !hd_grad_is_leaf(&vm->ctx, v.as.t))
            return 1;
    }
    return 0;
}

/* Plain code a lazy strategy traces (not HODU_COMPILE_ALL's test mode). */
static int lazy_body(const hd_vm *vm, const cp_body *b) {
    return b->implicit && !(vm->compile_all & HD_COMPILE_ALL_ENV);
}

/* A miss: trace again unless the body was compiled too often (a plain
 * function under a lazy strategy: fewer times, since its compiles were not
 * asked for). Returns 1 when the caller should run eagerly. */
static int miss_eager(hd_vm *vm, cp_body *b, const char *why) {
    if (b->traces >= (lazy_body(vm, b) ? CP_MAX_LAZY_COMPILES : CP_MAX_COMPILES)) {
        if (!b->warned && !b->implicit) {
            fflush(stdout);
            fprintf(stderr,
                    "hodu: warning: %s was compiled %d times; calls with a new key run eagerly "
                    "from now on (HODU_LOG=recompile shows what changes)\n",
                    b->where, b->traces);
        }
        b->warned = 1;
        return 1;
    }
    if (b->traces) cp_logf_line(vm, "hodu: recompile %s: %s", b->where, why);
    return 0;
}

static hd_status call_hit(hd_vm *vm, cp_body *b, cp_entry *e, cp_call *k, hd_tensor **in,
                          hd_value *out) {
    hd_status st;
    if (e->eager) {
        st = call_eager(vm, b, k, out);
    } else {
        cp_roots r;
        call_roots(k, vm, b, k->all, &r);
        st = cp_entry_run(vm, e, &r, in, out);
        b->hits++;
        if (!b->implicit) vm->compiled->hits++;
    }
    hd_ctx_free(&vm->ctx, in, (size_t)(e->ninputs + 1) * sizeof *in);
    return st;
}

static HD_NOINLINE hd_status call_compiled(hd_vm *vm, cp_body *b, cp_call *k, hd_value *out) {
    cp_opts o;
    cp_opts_default(vm, &o);
    hd_jit_key fixed;
    cp_key_fixed(b, &o, &fixed);
    cp_roots r;
    call_roots(k, vm, b, k->all, &r);
    hd_tensor **in = NULL;
    char why[512] = "first call";
    cp_entry *e = cp_cache_find(vm, b, &r, k->kw_hash, &fixed, &in, why, sizeof why);
    if (e) return call_hit(vm, b, e, k, in, out);
    if (hd_vm_failed(vm)) return vm->err;
    if (arg_with_history(vm, k)) {
        log_eager(vm, b, "an argument carries gradient history (its graph would cut it)");
        return call_eager(vm, b, k, out);
    }
    if (miss_eager(vm, b, why)) return call_eager(vm, b, k, out);
    hd_status st = call_trace(vm, b, k, &fixed, &o, out);
    if (st && vm->compile_all && !k->c->fn->compiled && vm->err != HD_ERR_MEMORY) {
        /* plain code: what does not compile runs eagerly (out of memory
         * stays an error, as for compiled code) */
        log_eager(vm, b, vm->errmsg);
        hd_vm_clear_error(vm);
        b->no_compile = 1;
        return call_eager(vm, b, k, out);
    }
    return st;
}

hd_status hd_compiled_call(hd_vm *vm, hd_closure *c, hd_value self, int has_self,
                           const hd_value *args, int nargs, const hd_kwarg *kw, int nkw,
                           hd_value *out) {
    if (vm->ctx.trace) { /* inside compiled code: inline */
        if (c->fn->compiled && implicit_check(vm)) return vm->err;
        return hd_eval_closure(vm, c, self, has_self, args, nargs, kw, nkw, out);
    }
    if (vm->compile_none) return hd_eval_closure(vm, c, self, has_self, args, nargs, kw, nkw, out);
    cp_call k;
    if (call_flatten(vm, &k, c, self, has_self, args, nargs, kw, nkw)) return vm->err;
    hd_status st;
    cp_body *b = NULL;
    if (!c->fn->compiled && !any_tensor(&k)) {
        st = call_eager(vm, NULL, &k, out);
    } else if (!(b = cp_body_get(vm, c->fn, c->fn->name ? c->fn->name : "<anonymous>", c->chunk,
                                 &c->fn->body->span)) ||
               cp_body_upvals(vm, b, c)) {
        st = vm->err;
    } else {
        b->implicit = !c->fn->compiled;
        b->calls++;
        if (!b->implicit) vm->compiled->calls++;
        /* a lazy strategy traces a plain function from its second call:
         * one that runs once does not pay for a compile */
        int cold = lazy_body(vm, b) && b->calls < 2;
        st = b->no_compile || cold ? call_eager(vm, b, &k, out) : call_compiled(vm, b, &k, out);
    }
    call_free(vm, &k);
    return st;
}

/* ---- compiled blocks ---- */

static hd_status opt_str(hd_vm *vm, const char *what, hd_value v, char *buf, size_t n) {
    if (v.type != HD_V_STR)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "compiled: %s must be a string, got %s", what,
                           hd_value_type_name(v));
    if (hd_as_str(v)->len >= n)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "compiled: %s '%s' is too long", what,
                           hd_as_str(v)->chars);
    snprintf(buf, n, "%s", hd_as_str(v)->chars);
    return HD_OK;
}

static hd_status opt_set(hd_vm *vm, cp_opts *o, const char *name, hd_value v) {
    hd_ctx *ctx = &vm->ctx;
    if (!strcmp(name, "compiler")) {
        const hd_jit_compiler *jc;
        if (opt_str(vm, name, v, o->compiler, sizeof o->compiler)) return vm->err;
        if (hd_jit_compiler_find(ctx, o->compiler, &jc)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
        o->chosen = 1;
        return HD_OK;
    }
    if (!strcmp(name, "device")) {
        const hd_backend *be;
        int dev;
        if (opt_str(vm, name, v, o->device, sizeof o->device)) return vm->err;
        if (hd_backend_parse_device(ctx, o->device, &be, &dev) || be->available(ctx, dev))
            return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
        o->device_set = 1;
        return HD_OK;
    }
    if (!strcmp(name, "opt_level")) {
        if (v.type != HD_V_INT || v.as.i < 0 || v.as.i > 1)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "compiled: opt_level must be 0 or 1");
        o->opt_level = (int)v.as.i;
        return HD_OK;
    }
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "unknown option '%s' of compiled (options: compiler, device, opt_level)",
                       name);
}

/* The options of compiled(...) { }, each checked at its own place. */
static int block_opts(hd_vm *vm, hd_frame *f, const hd_ast *n, cp_opts *o) {
    cp_opts_default(vm, o);
    for (int i = 0; i < n->n; i++) {
        const hd_ast *arg = n->items[i];
        hd_value v = hd_eval_expr(vm, f, arg->kind == HD_AST_ARG ? arg->a : arg);
        if (v.type == HD_V_ERR) return 0;
        hd_status st = opt_set(vm, o, arg->name ? arg->name : "", v);
        hd_vunref(vm, v);
        if (st) {
            hd_vm_locate(vm, f, &arg->span);
            return 0;
        }
    }
    return 1;
}

void cp_block_roots(hd_vm *vm, const cp_body *b, hd_frame *f, cp_roots *r) {
    memset(r, 0, sizeof *r);
    r->vm = vm;
    r->closure = f->closure;
    r->upval_names = b->upval_names;
    r->slots = f->slots;
    r->nslots = f->nslots < b->nslots ? f->nslots : b->nslots;
    r->slot_skip = b->slot_decl;
    r->slot_names = b->slot_names;
}

/* What a block run compiles: a compiled { } block, or (HODU_COMPILE_ALL)
 * one statement of a chunk's top level. */
typedef struct cp_block {
    const hd_ast *node; /* identity and place */
    const hd_ast *body;
    int stmt;
} cp_block;

static int block_run_body(hd_vm *vm, hd_frame *f, const cp_block *k) {
    return k->stmt ? hd_eval_stmt(vm, f, k->body) : hd_eval_block(vm, f, k->body);
}

static int block_eager(hd_vm *vm, cp_body *b, hd_frame *f, const cp_block *k) {
    count_eager(vm, b);
    return block_run_body(vm, f, k);
}

static int block_fail(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_vm_locate(vm, f, &n->span);
    return HD_FLOW_ERROR;
}

static hd_status block_body(hd_vm *vm, hd_frame *f, const cp_block *k) {
    int fl = block_run_body(vm, f, k);
    if (fl == HD_FLOW_ERROR) return vm->err ? vm->err : HD_ERR_RUNTIME;
    if (fl != HD_FLOW_NORMAL) {
        hd_vm_error(vm, HD_ERR_RUNTIME,
                    "break, continue and return cannot leave a compiled block (its loops must "
                    "end inside it)");
        hd_vm_locate(vm, f, &k->node->span);
        return vm->err;
    }
    return HD_OK;
}

/* Guards on the outer slots the block reads, with their values now. */
static hd_status block_guards(cp_session *s, const cp_body *b, hd_frame *f, const cp_roots *r) {
    hd_status st = HD_OK;
    for (int i = 0; !st && i < b->nreads && b->slot_reads[i] >= 0; i++) {
        int k = b->slot_reads[i];
        hd_value v = k < r->nslots ? f->slots[k] : hd_none();
        if (v.type == HD_V_CELL) v = ((hd_cell *)v.as.o)->v;
        st = cp_session_root_guard(s, CP_ROOT_SLOT, k, v);
    }
    return st;
}

/* HODU_COMPILE_ALL: a statement that does not compile runs eagerly. */
static int block_fallback(hd_vm *vm, cp_body *b, hd_frame *f, const cp_block *k) {
    log_eager(vm, b, vm->errmsg);
    hd_vm_clear_error(vm);
    b->no_compile = 1;
    return block_eager(vm, b, f, k);
}

static int block_trace(hd_vm *vm, cp_body *b, hd_frame *f, const cp_block *k,
                       const hd_jit_key *fixed, const cp_opts *o) {
    cp_session s;
    cp_roots r;
    cp_entry *e = hd_ctx_calloc(&vm->ctx, 1, sizeof *e);
    hd_tensor **first = NULL;
    if (!e) return hd_vm_oom(vm), block_fail(vm, f, k->node);
    e->ret.v = hd_none();
    e->key = *fixed;
    cp_block_roots(vm, b, f, &r);
    hd_status st = cp_session_begin(vm, &s, b, o, "compiled");
    if (!st) st = cp_session_scan(&s, &r);
    if (!st) st = block_guards(&s, b, f, &r);
    if (!st) st = block_body(vm, f, k);
    if (!st) st = cp_session_finish(&s, NULL, NULL, 0, e, &first);
    if (!st) cp_entry_take(&s, e, 0, 0);
    if (!st && !e->eager) st = cp_entry_run(vm, e, &r, first, NULL);
    if (st || e->eager) {
        hd_trace_abort(&vm->ctx);
        cp_session_restore(&s);
    }
    cp_first_free(vm, e, first);
    int history = st && s.history;
    cp_session_free(&s);
    if (st && history) {
        cp_entry_free(vm, e);
        hd_vm_clear_error(vm);
        log_eager(vm, b, HISTORY_WHY);
        return block_eager(vm, b, f, k);
    }
    if (st) {
        cp_entry_free(vm, e);
        if (b->implicit && vm->err != HD_ERR_MEMORY) return block_fallback(vm, b, f, k);
        return block_fail(vm, f, k->node);
    }
    e->hits = 0;
    if (e->eager == CP_EAGER_IDLE) return idle_eager(vm, b, e), block_eager(vm, b, f, k);
    cp_body_add(vm, b, e);
    if (!e->eager) return HD_FLOW_NORMAL;
    note_eager(vm, b, e);
    return block_eager(vm, b, f, k);
}

static int block_cached(hd_vm *vm, cp_body *b, hd_frame *f, const cp_block *k, const cp_opts *o) {
    b->calls++;
    if (!b->implicit) vm->compiled->calls++;
    hd_jit_key fixed;
    cp_key_fixed(b, o, &fixed);
    cp_roots r;
    cp_block_roots(vm, b, f, &r);
    hd_tensor **in = NULL;
    char why[512] = "first run";
    cp_entry *e = cp_cache_find(vm, b, &r, 0, &fixed, &in, why, sizeof why);
    if (e) {
        hd_status st = e->eager ? HD_OK : cp_entry_run(vm, e, &r, in, NULL);
        hd_ctx_free(&vm->ctx, in, (size_t)(e->ninputs + 1) * sizeof *in);
        if (e->eager) return block_eager(vm, b, f, k);
        b->hits++;
        if (!b->implicit) vm->compiled->hits++;
        return st ? block_fail(vm, f, k->node) : HD_FLOW_NORMAL;
    }
    if (hd_vm_failed(vm)) return block_fail(vm, f, k->node);
    if (miss_eager(vm, b, why)) return block_eager(vm, b, f, k);
    return block_trace(vm, b, f, k, &fixed, o);
}

static int block_enter(hd_vm *vm, hd_frame *f, const cp_block *k, const char *what,
                       const cp_opts *o) {
    cp_body *b = cp_body_get(vm, k->node, what, f->chunk, &k->node->span);
    if (!b) return block_fail(vm, f, k->node);
    if (!b->analysed) {
        b->implicit = k->stmt;
        if (cp_block_analyse(vm, b, f, k->body, k->stmt) || cp_body_upvals(vm, b, f->closure))
            return block_fail(vm, f, k->node);
        b->analysed = 1;
    }
    if (b->no_compile) return block_eager(vm, b, f, k);
    return block_cached(vm, b, f, k, o);
}

/* Explicit compiled code reached while a statement or a function is traced
 * only because of HODU_COMPILE_ALL: that trace gives up (and runs eagerly),
 * so that compiled code keeps its own caches and counts. */
static hd_status implicit_check(hd_vm *vm) {
    const cp_session *s = cp_session_of(vm);
    if (s && s->body->implicit)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "compiled code inside a traced statement");
    return HD_OK;
}

int hd_compiled_block(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    cp_opts o;
    if (!block_opts(vm, f, n, &o)) return HD_FLOW_ERROR;
    if (vm->ctx.trace) { /* inside compiled code: inline */
        if (implicit_check(vm)) return block_fail(vm, f, n);
        return hd_eval_block(vm, f, n->body);
    }
    if (vm->compile_none) return hd_eval_block(vm, f, n->body);
    cp_block k = {n, n->body, 0};
    return block_enter(vm, f, &k, "compiled block", &o);
}

/* Statements worth tracing: not definitions, not explicit compiled blocks. */
static int traceable_stmt(const hd_ast *s) {
    switch (s->kind) {
    case HD_AST_FNDEF:
    case HD_AST_CLASS:
    case HD_AST_IMPORT:
    case HD_AST_TRY:
    case HD_AST_COMPILED:
    case HD_AST_BREAK:
    case HD_AST_CONTINUE:
    case HD_AST_RETURN: return 0;
    default: return 1;
    }
}

/* A statement a lazy strategy traces: a loop, under mode "lazy", at the
 * top level or in a function (other top-level statements run once: a
 * compile would not pay). */
static int lazy_stmt(const hd_vm *vm, const hd_ast *s) {
    if (vm->compile_all & HD_COMPILE_ALL_ENV) return 1;
    return (vm->compile_all & HD_COMPILE_ALL_LOOPS) &&
           (s->kind == HD_AST_FOR || s->kind == HD_AST_WHILE);
}

int hd_compiled_statement(hd_vm *vm, hd_frame *f, const hd_ast *s) {
    if (vm->ctx.trace || !traceable_stmt(s) || !lazy_stmt(vm, s) || !cp_state_of(vm))
        return hd_eval_stmt(vm, f, s);
    cp_opts o;
    cp_opts_default(vm, &o);
    cp_block k = {s, s, 1};
    return block_enter(vm, f, &k, "statement", &o);
}
