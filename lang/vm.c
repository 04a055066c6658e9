/* vm: one interpreter instance (see vm.h): creation and teardown, the
 * prelude tables, running chunks and files, imports, and error text. */
#ifdef __linux__
#define _GNU_SOURCE /* dladdr */
#endif
#include "builtins_tensor.h"
#include "compiled.h"
#include "eval.h"
#include "hd_autograd.h"
#include "hd_io.h"
#include "resolve.h"
#include "tensor_api.h"
#include "vm_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <dlfcn.h>
#endif

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif
/* The installed standard library relative to the folders of the installed
 * library and program (CMake passes the real ones). */
#ifndef HODU_STDLIB_FROM_LIB
#define HODU_STDLIB_FROM_LIB "../share/hodu/stdlib"
#endif
#ifndef HODU_STDLIB_FROM_BIN
#define HODU_STDLIB_FROM_BIN "../share/hodu/stdlib"
#endif

/* ---- errors ---- */

hd_ctx *hd_vm_ctx(hd_vm *vm) {
    return &vm->ctx;
}

hd_status hd_vm_error(hd_vm *vm, hd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(vm->errmsg, sizeof vm->errmsg, fmt, ap);
    va_end(ap);
    vm->err = st;
    vm->err_located = 0;
    vm->err_line = vm->err_col = 0;
    vm->err_file[0] = 0;
    return st;
}

static void err_place(hd_vm *vm, const char *file, const hd_span *span) {
    snprintf(vm->err_file, sizeof vm->err_file, "%s", file ? file : "");
    vm->err_line = span ? span->line : 0;
    vm->err_col = span ? span->col : 0;
}

hd_status hd_vm_ctx_status(const hd_vm *vm, hd_status st) {
    hd_status cs = vm->ctx.status;
    if (cs == HD_ERR_MEMORY || cs == HD_ERR_LIMIT) return cs;
    if (st == HD_OK) return cs ? cs : HD_ERR_RUNTIME;
    return st;
}

hd_status hd_vm_from_ctx(hd_vm *vm, hd_status st) {
    st = hd_vm_ctx_status(vm, st);
    hd_vm_error(vm, st, "%s", vm->ctx.errmsg[0] ? vm->ctx.errmsg : "error in the tensor runtime");
    hd_error_clear(&vm->ctx);
    return st;
}

int hd_vm_failed(hd_vm *vm) {
    return vm->err != HD_OK;
}

void hd_vm_clear_error(hd_vm *vm) {
    vm->err = HD_OK;
    vm->err_located = 0;
    vm->errmsg[0] = 0;
    vm->errtext[0] = 0;
    err_place(vm, NULL, NULL);
    hd_error_clear(&vm->ctx);
}

const char *hd_vm_error_text(hd_vm *vm) {
    if (vm->err == HD_OK) return "";
    if (!vm->err_located) {
        snprintf(vm->errtext, sizeof vm->errtext, "error: %s\n", vm->errmsg);
        vm->err_located = 1;
    }
    return vm->errtext;
}

static void errtext_add(hd_vm *vm, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void errtext_add(hd_vm *vm, const char *fmt, ...) {
    size_t len = strlen(vm->errtext);
    if (len + 1 >= sizeof vm->errtext) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(vm->errtext + len, sizeof vm->errtext - len, fmt, ap);
    va_end(ap);
}

/* One diagnostic, with the source line and caret, ending in a newline. */
static void errtext_diag(hd_vm *vm, hd_chunk *c, const hd_span *span, const char *msg) {
    size_t len = strlen(vm->errtext);
    if (len + 1 >= sizeof vm->errtext) return;
    hd_diag_format(vm->errtext + len, sizeof vm->errtext - len, c->name, c->source, span, "error",
                   msg);
    len = strlen(vm->errtext);
    if (len && vm->errtext[len - 1] != '\n') errtext_add(vm, "\n");
}

static void frame_name(hd_vm *vm, const hd_frame *f, char *buf, size_t n) {
    if (f->closure)
        snprintf(buf, n, "%s", f->closure->fn->name ? f->closure->fn->name : "<anonymous>");
    else if (f->mod == vm->main)
        snprintf(buf, n, "<main>");
    else
        snprintf(buf, n, "<module %s>", f->mod->name);
}

/* "  in f at file:line:col" for f (at span) and every frame below it. A
 * line repeated by deep recursion is shown three times, then counted. */
static void errtext_trace(hd_vm *vm, const hd_frame *f, const hd_span *span) {
    char line[512], prev[512] = "";
    int same = 0;
    for (; f; f = f->parent) {
        if (span) {
            char name[128];
            frame_name(vm, f, name, sizeof name);
            snprintf(line, sizeof line, "  in %s at %s:%d:%d\n", name, f->chunk->name, span->line,
                     span->col);
            if (strcmp(line, prev) == 0) {
                if (++same <= 2) errtext_add(vm, "%s", line);
            } else {
                if (same > 2) errtext_add(vm, "  ... repeated %d more times\n", same - 2);
                same = 0;
                errtext_add(vm, "%s", line);
                memcpy(prev, line, sizeof prev);
            }
        }
        span = f->parent && f->parent->at ? &f->parent->at->span : NULL;
    }
    if (same > 2) errtext_add(vm, "  ... repeated %d more times\n", same - 2);
}

void hd_vm_locate(hd_vm *vm, hd_frame *f, const hd_span *span) {
    if (vm->err_located) return;
    if (vm->err == HD_OK) hd_vm_error(vm, HD_ERR_RUNTIME, "unknown error");
    vm->errtext[0] = 0;
    /* An error inside the standard library (an optimizer given a bad
     * argument, say) is shown at the user's call into it; the trace still
     * lists the library's frames. */
    const hd_frame *at = f;
    const hd_span *sp = span;
    while (at->mod->stdlib && at->parent && at->parent->at) {
        sp = &at->parent->at->span;
        at = at->parent;
    }
    errtext_diag(vm, at->chunk, sp, vm->errmsg);
    err_place(vm, at->chunk->name, sp);
    /* A trace only when there is more than the top level to show. */
    if (f->parent || f->closure) errtext_trace(vm, f, span);
    vm->err_located = 1;
}

/* An error before any of a chunk's source ran (reading, copying, parsing
 * or resolving it, which can only run out of memory) is located at the
 * chunk: "NAME: error: message". */
static hd_status errtext_chunk(hd_vm *vm, const char *name) {
    if (vm->err != HD_OK && !vm->err_located) {
        snprintf(vm->errtext, sizeof vm->errtext, "%s: error: %s\n", name, vm->errmsg);
        err_place(vm, name, NULL);
        vm->err_located = 1;
    }
    return vm->err;
}

static void errtext_diags(hd_vm *vm, hd_chunk *c, const hd_diag *d, int n) {
    vm->errtext[0] = 0;
    for (int i = 0; i < n; i++) errtext_diag(vm, c, &d[i].span, d[i].message);
    vm->err = HD_ERR_SYNTAX;
    snprintf(vm->errmsg, sizeof vm->errmsg, "%s", n ? d[0].message : "syntax error");
    err_place(vm, c->name, n ? &d[0].span : NULL);
    vm->err_located = 1;
}

/* ---- prelude tables ---- */

hd_status hd_vm_def_value(hd_vm *vm, const char *name, hd_value v) {
    hd_value *idx = hd_dict_get(vm->builtin_index, name);
    if (idx) {
        hd_value old = vm->builtins[idx->as.i];
        vm->builtins[idx->as.i] = v;
        hd_vunref(vm, old);
        return HD_OK;
    }
    if (vm->nbuiltins == vm->builtins_cap) {
        int cap = vm->builtins_cap ? vm->builtins_cap * 2 : 64;
        hd_value *b =
            hd_ctx_realloc(&vm->ctx, vm->builtins, (size_t)vm->builtins_cap * sizeof(hd_value),
                           (size_t)cap * sizeof(hd_value));
        if (!b) {
            hd_vunref(vm, v);
            return hd_vm_oom(vm);
        }
        vm->builtins = b;
        vm->builtins_cap = cap;
    }
    if (hd_dict_set(vm, vm->builtin_index, name, hd_int(vm->nbuiltins)) != HD_OK) {
        hd_vunref(vm, v);
        return vm->err;
    }
    vm->builtins[vm->nbuiltins++] = v;
    return HD_OK;
}

hd_status hd_vm_def_native(hd_vm *vm, const char *name, hd_native_fn fn, void *data) {
    hd_value v = hd_native_new(vm, name, fn, data);
    if (v.type != HD_V_NATIVE) return vm->err;
    return hd_vm_def_value(vm, name, v);
}

hd_status hd_vm_def_method(hd_vm *vm, hd_vtype type, const char *name, hd_native_fn fn) {
    if (vm->methods[type].type != HD_V_DICT) {
        vm->methods[type] = hd_dict_new(vm);
        if (vm->methods[type].type != HD_V_DICT) return vm->err;
    }
    hd_value v = hd_native_new(vm, name, fn, NULL);
    if (v.type != HD_V_NATIVE) return vm->err;
    return hd_dict_set(vm, vm->methods[type], name, v);
}

hd_value *hd_vm_find_method(hd_vm *vm, hd_vtype type, const char *name) {
    if (vm->methods[type].type != HD_V_DICT) return NULL;
    return hd_dict_get(vm->methods[type], name);
}

void hd_vm_set_grad_hooks(hd_vm *vm, hd_grad_enter_fn enter, hd_grad_exit_fn exit) {
    vm->grad_enter = enter;
    vm->grad_exit = exit;
}

int hd_vm_set_max_depth(hd_vm *vm, int depth) {
    int old = vm->max_depth;
    if (depth > 0) vm->max_depth = depth;
    return old;
}

void hd_vm_write(hd_vm *vm, const char *s, size_t n) {
    if (vm->write)
        vm->write(vm->write_ud, s, n);
    else
        fwrite(s, 1, n, stdout);
}

void hd_vm_set_writer(hd_vm *vm, void (*write)(void *ud, const char *s, size_t n), void *ud) {
    vm->write = write;
    vm->write_ud = ud;
}

void hd_vm_interrupt(hd_vm *vm) {
    vm->interrupted = HD_STOP_INTERRUPT;
}

hd_status hd_vm_stop_error(hd_vm *vm) {
    char buf[64];
    hd_status st =
        hd_vm_error(vm, HD_ERR_LIMIT, "%s", hd_stop_reason(&vm->ctx.stop, buf, sizeof buf));
    vm->interrupted = 0;
    return st;
}

void hd_vm_run_begin(hd_vm *vm) {
    vm->steps = 0;
    vm->interrupted = 0;
    vm->step_check = vm->max_steps;
    uint32_t ms = vm->opts.time_limit_ms;
    vm->ctx.stop.limit_ms = ms;
    vm->ctx.stop.deadline_ns = ms ? hd_now_ns() + (int64_t)ms * 1000000 : 0;
    if (ms) vm->step_check = HD_MIN(vm->max_steps, HD_TICK_CLOCK);
}

/* ---- modules ---- */

hd_status hd_module_grow(hd_vm *vm, hd_module *m, int n) {
    if (n > m->cap) {
        int cap = m->cap ? m->cap : 16;
        while (cap < n) cap *= 2;
        hd_value *g = hd_ctx_realloc(&vm->ctx, m->globals, (size_t)m->cap * sizeof(hd_value),
                                     (size_t)cap * sizeof(hd_value));
        if (!g) return hd_vm_oom(vm);
        m->globals = g;
        m->cap = cap;
    }
    for (int i = m->nglobals; i < n; i++) m->globals[i] = hd_uninit();
    if (n > m->nglobals) m->nglobals = n;
    return HD_OK;
}

hd_value *hd_module_global(hd_module *m, const char *name) {
    hd_value *slot = hd_dict_get(m->names, name);
    return slot ? &m->globals[slot->as.i] : NULL;
}

/* The folder part of path ("." when there is none), in the VM's memory. */
static char *dir_of(hd_vm *vm, const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return hd_ctx_strdup(&vm->ctx, ".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = hd_ctx_alloc(&vm->ctx, n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = 0;
    return d;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Read a whole file into VM memory (NUL-terminated, *len + 1 bytes). Only
 * a regular file: a FIFO or a device would block or never end. */
static char *read_file(hd_vm *vm, const char *path, size_t *len) {
    unsigned char *buf;
    if (hd_io_read_file(&vm->ctx, path, 0, &buf, len)) {
        hd_vm_from_ctx(vm, vm->ctx.status);
        return NULL;
    }
    return (char *)buf;
}

/* ---- chunks ---- */

static void chunk_free(hd_vm *vm, hd_chunk *c) {
    if (!c) return;
    if (c->parsed) hd_parse_free(&c->parse);
    hd_ctx_free(&vm->ctx, c->source, c->len + 1);
    hd_ctx_strfree(&vm->ctx, c->name);
    hd_ctx_free(&vm->ctx, c, sizeof *c);
}

/* A chunk owning a copy of the source (or taking `owned`, len + 1 bytes). */
static hd_chunk *chunk_new(hd_vm *vm, const char *source, size_t len, char *owned,
                           const char *name) {
    hd_chunk *c = hd_ctx_calloc(&vm->ctx, 1, sizeof *c);
    if (!c) {
        hd_ctx_free(&vm->ctx, owned, len + 1);
        return NULL;
    }
    c->len = len;
    c->name = hd_ctx_strdup(&vm->ctx, name ? name : "<input>");
    if (owned) {
        c->source = owned;
    } else if ((c->source = hd_ctx_alloc(&vm->ctx, len + 1))) {
        if (len) memcpy(c->source, source, len);
        c->source[len] = 0;
    }
    if (!c->name || !c->source) {
        chunk_free(vm, c);
        return NULL;
    }
    return c;
}

/* Parse and resolve c against mod; the chunk is freed on failure. */
static hd_status chunk_prepare(hd_vm *vm, hd_chunk *c, hd_module *mod, int repl, int *incomplete) {
    hd_status st = hd_parse_source(&vm->ctx, c->source, c->len, c->name, &c->parse);
    c->parsed = 1;
    if (incomplete) *incomplete = c->parse.incomplete;
    if (st == HD_OK && !c->parse.program) st = HD_ERR_SYNTAX;
    if (st != HD_OK) {
        if (st == HD_ERR_MEMORY)
            hd_vm_oom(vm);
        else
            errtext_diags(vm, c, c->parse.diags, c->parse.ndiags);
        chunk_free(vm, c);
        return st;
    }
    hd_diag *diags;
    int ndiags;
    st = hd_resolve(vm, &c->parse, mod, repl, &diags, &ndiags);
    if (st != HD_OK) {
        if (st == HD_ERR_SYNTAX) errtext_diags(vm, c, diags, ndiags);
        chunk_free(vm, c);
    }
    return st;
}

hd_status hd_vm_eval(hd_vm *vm, const char *source, size_t len, const char *chunk,
                     const hd_eval_opts *opts, int *incomplete) {
    hd_eval_opts none = {0, 0};
    if (!opts) opts = &none;
    if (incomplete) *incomplete = 0;
    hd_vm_clear_error(vm);
    hd_vm_run_begin(vm);
    hd_chunk *c = chunk_new(vm, source, len, NULL, chunk);
    if (!c) {
        hd_vm_oom(vm);
        return errtext_chunk(vm, chunk ? chunk : "<input>");
    }
    hd_status st = chunk_prepare(vm, c, vm->main, opts->repl, incomplete);
    if (st != HD_OK) return errtext_chunk(vm, chunk ? chunk : "<input>");
    if (opts->check_only) {
        chunk_free(vm, c);
        return HD_OK;
    }
    c->next = vm->chunks;
    vm->chunks = c;
    vm->repl = opts->repl;
    return hd_eval_chunk(vm, c, vm->main, opts->repl);
}

hd_status hd_vm_eval_file(hd_vm *vm, const char *path, const hd_eval_opts *opts) {
    hd_vm_clear_error(vm);
    size_t len;
    char *src = read_file(vm, path, &len);
    if (!src) return errtext_chunk(vm, path);
    char *dir = dir_of(vm, path);
    if (!dir) {
        hd_ctx_free(&vm->ctx, src, len + 1);
        hd_vm_oom(vm);
        return errtext_chunk(vm, path);
    }
    hd_ctx_strfree(&vm->ctx, vm->main->dir);
    vm->main->dir = dir;
    hd_status st = hd_vm_eval(vm, src, len, path, opts, NULL);
    hd_ctx_free(&vm->ctx, src, len + 1);
    return st;
}

/* Where `import name` finds name.hodu: the importing file's folder, each
 * folder of HODU_PATH, then the standard library. Only the standard
 * library when file access is off. */
static int find_module(hd_vm *vm, const char *from_dir, const char *name, char *out, size_t n) {
    if (vm->opts.allow_io) {
        snprintf(out, n, "%s/%s.hodu", from_dir ? from_dir : ".", name);
        if (is_file(out)) return 1;
        const char *env = getenv("HODU_PATH");
        while (env && *env) {
            const char *colon = strchr(env, ':');
            size_t len = colon ? (size_t)(colon - env) : strlen(env);
            if (len) {
                snprintf(out, n, "%.*s/%s.hodu", (int)len, env, name);
                if (is_file(out)) return 1;
            }
            env = colon ? colon + 1 : NULL;
        }
    }
    snprintf(out, n, "%s/%s.hodu", vm->stdlib_dir, name);
    return is_file(out);
}

static hd_status import_path(hd_vm *vm, hd_frame *f, const hd_ast *node, char *path, size_t n) {
    const char *what = node->str ? node->str : "";
    if (node->is_path) {
        if (!vm->opts.allow_io)
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "import by path is disabled (file access is off)");
        if (what[0] == '/')
            snprintf(path, n, "%s", what);
        else
            snprintf(path, n, "%s/%s", f->mod->dir ? f->mod->dir : ".", what);
        if (!is_file(path))
            return hd_vm_error(vm, HD_ERR_RUNTIME, "cannot find module file %s", path);
        return HD_OK;
    }
    if (strchr(what, '/') || !what[0])
        return hd_vm_error(vm, HD_ERR_RUNTIME, "bad module name '%s'", what);
    if (!find_module(vm, f->mod->dir, what, path, n))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "cannot find module '%s' (looked for %s.hodu next to this file, in "
                           "HODU_PATH and in %s)",
                           what, what, vm->stdlib_dir);
    return HD_OK;
}

/* A file that imports the standard module it is named after finds
 * itself first: say so. */
static hd_status import_circular(hd_vm *vm, const hd_module *m) {
    char std[4096];
    snprintf(std, sizeof std, "%s/%s.hodu", vm->stdlib_dir, m->name);
    if (!m->stdlib && m->path && is_file(std))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "circular import of module %s: %s is named like the standard module "
                           "%s, and `import %s` finds it first (rename the file)",
                           m->name, m->path, m->name, m->name);
    return hd_vm_error(vm, HD_ERR_RUNTIME, "circular import of module %s", m->name);
}

static hd_status import_cached(hd_vm *vm, hd_module *m, hd_value *out) {
    if (m->state == HD_MOD_LOADING) return import_circular(vm, m);
    if (m->state == HD_MOD_FAILED)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "module %s failed to load", m->name);
    hd_vref(*out = hd_obj_value(&m->obj));
    return HD_OK;
}

/* Run a module's file once: parse, resolve, evaluate in its own globals. */
static hd_status import_load(hd_vm *vm, hd_frame *f, const hd_ast *node, const char *path,
                             const char *canon, hd_value *out) {
    const char *name = node->is_path ? node->name : node->str;
    hd_module *m = hd_module_new(vm, name ? name : "?", canon);
    if (!m) return vm->err;
    size_t sl = strlen(vm->stdlib_dir);
    m->stdlib = !node->is_path && strncmp(path, vm->stdlib_dir, sl) == 0 && path[sl] == '/';
    hd_value mv = hd_obj_value(&m->obj);
    m->dir = dir_of(vm, canon);
    hd_vref(mv);
    if (!m->dir || hd_dict_set(vm, vm->modules, canon, mv) != HD_OK) {
        hd_vunref(vm, mv);
        return hd_vm_oom(vm);
    }
    m->state = HD_MOD_FAILED;
    size_t len;
    char *src = read_file(vm, path, &len);
    hd_chunk *c = src ? chunk_new(vm, NULL, len, src, path) : NULL;
    if (!c) {
        hd_vunref(vm, mv);
        return vm->err ? vm->err : hd_vm_oom(vm);
    }
    hd_status st = chunk_prepare(vm, c, m, 0, NULL);
    if (st != HD_OK) {
        if (st == HD_ERR_SYNTAX) errtext_trace(vm, f, &node->span);
        hd_vunref(vm, mv);
        return st;
    }
    c->next = vm->chunks;
    vm->chunks = c;
    m->state = HD_MOD_LOADING;
    st = hd_eval_chunk(vm, c, m, 0);
    m->state = st == HD_OK ? HD_MOD_READY : HD_MOD_FAILED;
    if (st != HD_OK) {
        hd_vunref(vm, mv);
        return st;
    }
    *out = mv;
    return HD_OK;
}

hd_status hd_vm_import(hd_vm *vm, hd_frame *f, const hd_ast *node, hd_value *out) {
    char path[PATH_MAX], canon[PATH_MAX];
    hd_status st = import_path(vm, f, node, path, sizeof path);
    if (st != HD_OK) return st;
    if (!realpath(path, canon)) return hd_vm_error(vm, HD_ERR_RUNTIME, "cannot read %s", path);
    hd_value *cached = hd_dict_get(vm->modules, canon);
    if (cached) return import_cached(vm, (hd_module *)cached->as.o, out);
    return import_load(vm, f, node, path, canon, out);
}

/* ---- REPL support ---- */

void hd_vm_global_names(hd_vm *vm, void (*fn)(const char *name, void *ud), void *ud) {
    hd_dict *b = hd_as_dict(vm->builtin_index);
    for (int64_t i = 0; i < b->len; i++) fn(b->keys[i]->chars, ud);
    hd_dict *g = hd_as_dict(vm->main->names);
    for (int64_t i = 0; i < g->len; i++)
        if (!hd_dict_get(vm->builtin_index, g->keys[i]->chars)) fn(g->keys[i]->chars, ud);
}

hd_value *hd_vm_get_global(hd_vm *vm, const char *name) {
    hd_value *slot = hd_module_global(vm->main, name);
    if (slot && !hd_is_uninit(*slot)) return slot;
    hd_value *idx = hd_dict_get(vm->builtin_index, name);
    return idx ? &vm->builtins[idx->as.i] : NULL;
}

static void keys_of(hd_value dict, void (*fn)(const char *name, void *ud), void *ud) {
    if (dict.type != HD_V_DICT) return;
    hd_dict *d = hd_as_dict(dict);
    for (int64_t i = 0; i < d->len; i++) fn(d->keys[i]->chars, ud);
}

void hd_vm_member_names(hd_vm *vm, hd_value v, void (*fn)(const char *name, void *ud), void *ud) {
    switch (v.type) {
    case HD_V_OBJECT:
        keys_of(((hd_object *)v.as.o)->fields, fn, ud);
        keys_of(((hd_object *)v.as.o)->cls->methods, fn, ud);
        keys_of(vm->methods[HD_V_OBJECT], fn, ud);
        break;
    case HD_V_DICT:
        keys_of(v, fn, ud);
        keys_of(vm->methods[HD_V_DICT], fn, ud);
        break;
    case HD_V_RANGE:
        fn("start", ud);
        fn("stop", ud);
        fn("step", ud);
        keys_of(vm->methods[v.type], fn, ud);
        break;
    case HD_V_STR:
    case HD_V_LIST: keys_of(vm->methods[v.type], fn, ud); break;
    case HD_V_MODULE: keys_of(((hd_module *)v.as.o)->names, fn, ud); break;
    case HD_V_CLASS: keys_of(((hd_class *)v.as.o)->methods, fn, ud); break;
    case HD_V_TENSOR: hd_tensor_member_names(fn, ud); break;
    default: break;
    }
}

/* ---- lifetime ---- */

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The installed standard library seen from the folder of the file that
 * holds this code: libhodu.so (HODU_STDLIB_FROM_LIB from it), or the
 * program libhodu.a was linked into (HODU_STDLIB_FROM_BIN). 0 if unknown. */
static int stdlib_near_binary(char *out, size_t n) {
#ifdef __linux__
    char self[PATH_MAX];
    Dl_info info;
    const char *file = NULL, *rel = HODU_STDLIB_FROM_LIB;
    if (dladdr((void *)stdlib_near_binary, &info) && info.dli_fname &&
        strchr(info.dli_fname, '/') && strstr(info.dli_fname, "libhodu"))
        file = info.dli_fname;
    if (!file) {
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len <= 0) return 0;
        self[len] = 0;
        file = self;
        rel = HODU_STDLIB_FROM_BIN;
    }
    const char *slash = strrchr(file, '/');
    int w = snprintf(out, n, "%.*s/%s", (int)(slash - file), file, rel);
    return w > 0 && (size_t)w < n;
#else
    (void)out;
    (void)n;
    return 0;
#endif
}

/* See hd_vm_new. The last candidate is kept even if it does not exist, so
 * that import errors name it. */
static char *stdlib_dir(hd_vm *vm) {
    if (vm->opts.stdlib_dir) return hd_ctx_strdup(&vm->ctx, vm->opts.stdlib_dir);
    char buf[PATH_MAX], canon[PATH_MAX];
    if (stdlib_near_binary(buf, sizeof buf) && is_dir(buf) && realpath(buf, canon))
        return hd_ctx_strdup(&vm->ctx, canon);
#ifdef HODU_STDLIB_DIR
    if (is_dir(HODU_STDLIB_DIR)) return hd_ctx_strdup(&vm->ctx, HODU_STDLIB_DIR);
#endif
#ifdef HODU_SOURCE_STDLIB_DIR
    snprintf(buf, sizeof buf, "%s", HODU_SOURCE_STDLIB_DIR);
#else
    /* The stdlib/ folder of the source tree this file is in. */
    snprintf(buf, sizeof buf, "%s", __FILE__);
    char *lang = strstr(buf, "lang/vm.c");
    if (lang)
        snprintf(lang, sizeof buf - (size_t)(lang - buf), "stdlib");
    else
        snprintf(buf, sizeof buf, "stdlib");
#endif
    return hd_ctx_strdup(&vm->ctx, buf);
}

int hd_vm_allow_io(const hd_vm *vm) {
    return vm->opts.allow_io;
}

static hd_status vm_init(hd_vm *vm) {
    vm->builtin_index = hd_dict_new(vm);
    vm->modules = hd_dict_new(vm);
    vm->main = hd_module_new(vm, "<main>", NULL);
    vm->stdlib_dir = stdlib_dir(vm);
    if (vm->builtin_index.type != HD_V_DICT || vm->modules.type != HD_V_DICT || !vm->main ||
        !vm->stdlib_dir)
        return hd_vm_oom(vm);
    vm->main->state = HD_MOD_READY;
    /* The tensor prelude first: core builtins that share a name with a
     * tensor function (abs, min, max) keep it and hand tensors to it. */
    if (hd_builtins_tensor_open(vm) != HD_OK) return vm->err;
    if (hd_builtins_compiled_open(vm) != HD_OK) return vm->err;
    if (hd_builtins_core_open(vm) != HD_OK) return vm->err;
    if (hd_eval_try_init(vm) != HD_OK) return vm->err;
    return hd_eval_super_init(vm);
}

/* The VM's own struct comes from its allocator too, under its limit. */
hd_vm *hd_vm_new(const hd_vm_options *opts) {
    hd_vm_options defaults = {0};
    defaults.allow_io = 1;
    if (!opts) opts = &defaults;
    hd_ctx boot;
    hd_ctx_init(&boot, opts->alloc, opts->alloc_ud);
    boot.mem_limit = opts->memory_limit;
    hd_vm *vm = hd_ctx_alloc(&boot, sizeof *vm);
    if (!vm) return NULL;
    memset(vm, 0, sizeof *vm);
    hd_ctx_init(&vm->ctx, opts->alloc, opts->alloc_ud);
    vm->ctx.mem_used = vm->ctx.mem_peak = sizeof *vm;
    vm->opts = *opts;
    vm->ctx.mem_limit = opts->memory_limit;
    if (opts->nthreads > 0) vm->ctx.nthreads = opts->nthreads;
    vm->ctx.disk_off = !opts->allow_io;
    vm->ctx.stop.flag = &vm->interrupted;
    /* Keep freed tensor blocks for reuse: a training loop makes and drops
     * the same sizes every step. A quarter of the memory limit at most. */
    size_t cache = (size_t)256 << 20;
    if (vm->opts.memory_limit && vm->opts.memory_limit / 4 < cache)
        cache = vm->opts.memory_limit / 4;
    hd_ctx_set_cache_limit(&vm->ctx, cache);
    hd_strategy_init(vm);
    vm->max_steps = vm->opts.max_steps ? vm->opts.max_steps : UINT64_MAX;
    vm->step_check = vm->max_steps;
    vm->max_depth = HD_DEFAULT_MAX_DEPTH;
    vm->gc_threshold = 100000;
    for (int i = 0; i < HD_V_COUNT; i++) vm->methods[i] = hd_none();
    vm->builtin_index = vm->modules = vm->backward_hooks = hd_none();
    hd_status st = vm_init(vm);
    vm->opts.stdlib_dir = NULL; /* the caller's string: copied by vm_init */
    if (st != HD_OK) {
        hd_vm_free(vm);
        return NULL;
    }
    return vm;
}

void hd_vm_free(hd_vm *vm) {
    if (!vm) return;
    hd_compiled_free(vm); /* its caches hold values */
    hd_dist_dp_free(vm);
    /* Everything at once, cycles included: clear every object (tensors
     * are released, objects only lose counts), then free them all. */
    vm->sweeping = 1;
    for (hd_obj *o = vm->objects; o; o = o->next) hd_obj_clear(vm, o);
    while (vm->objects) {
        hd_obj *o = vm->objects;
        vm->objects = o->next;
        hd_ctx_free(&vm->ctx, o, hd_obj_size(o));
    }
    while (vm->chunks) {
        hd_chunk *c = vm->chunks;
        vm->chunks = c->next;
        chunk_free(vm, c);
    }
    for (int i = 0; i < vm->nbuiltins; i++)
        if (vm->builtins[i].type == HD_V_TENSOR) hd_tensor_unref(vm->builtins[i].as.t);
    hd_ctx_free(&vm->ctx, vm->builtins, (size_t)vm->builtins_cap * sizeof(hd_value));
    hd_ctx_strfree(&vm->ctx, vm->stdlib_dir);
    /* gradient records still held (a graph never backwarded), then the
     * block cache */
    hd_grad_shutdown(&vm->ctx);
    hd_ctx_release(&vm->ctx);
    size_t left = vm->ctx.mem_used - sizeof *vm;
    if (left && getenv("HODU_DEBUG_MEM"))
        fprintf(stderr, "hodu: %zu bytes still allocated at VM exit\n", left);
    hd_ctx ctx = vm->ctx;
    hd_ctx_free(&ctx, vm, sizeof *vm);
}
