/* compiled_stats(f) and the builtins of compiled code (see
 * docs/compiled.md): counts of calls, cache hits, compiles and eager calls,
 * per body or for the whole VM. */
#include "compiled_int.h"
#include "eval.h"

#include <string.h>

static hd_status stat_put(hd_vm *vm, hd_value d, const char *k, uint64_t v) {
    return hd_dict_set(vm, d, k, hd_int((int64_t)v));
}

/* The jit statistics of the entry used last (entries are kept most recent
 * first; zeros: none compiled). */
static hd_jit_stats stats_last(const cp_body *b) {
    hd_jit_stats st;
    memset(&st, 0, sizeof st);
    for (int i = 0; i < b->nentries; i++) {
        const cp_entry *e = b->entries[i];
        if (!e || !e->exec || !e->jc->stats) continue;
        e->jc->stats(e->exec, &st);
        break;
    }
    return st;
}

static hd_status stats_of(hd_vm *vm, const cp_body *b, hd_value d) {
    const hd_compiled_state *cs = vm->compiled;
    uint64_t z = 0;
    if (b) {
        hd_jit_stats st = stats_last(b);
        return stat_put(vm, d, "calls", b->calls) || stat_put(vm, d, "hits", b->hits) ||
               stat_put(vm, d, "compiles", (uint64_t)b->traces) ||
               stat_put(vm, d, "entries", (uint64_t)b->nentries) ||
               stat_put(vm, d, "eager_calls", b->eager_calls) ||
               stat_put(vm, d, "kernels", (uint64_t)st.kernels) ||
               stat_put(vm, d, "donated", (uint64_t)st.donated) ||
               stat_put(vm, d, "launches", (uint64_t)st.launches) ||
               stat_put(vm, d, "copies", (uint64_t)st.run_copies) ||
               hd_dict_set(vm, d, "cuda_graph", hd_bool(st.cuda_graph != 0)) ||
               hd_dict_set(vm, d, "compile_seconds", hd_float(b->compile_seconds));
    }
    return stat_put(vm, d, "calls", cs ? cs->calls : z) ||
           stat_put(vm, d, "hits", cs ? cs->hits : z) ||
           stat_put(vm, d, "compiles", cs ? cs->traces : z) ||
           stat_put(vm, d, "eager_calls", cs ? cs->eager_calls : z) ||
           hd_dict_set(vm, d, "compile_seconds", hd_float(cs ? cs->compile_seconds : 0));
}

static hd_status bi_compiled_stats(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                                   const hd_kwarg *kw, int nkw, hd_value *out, void *data) {
    (void)self;
    (void)kw;
    (void)data;
    if (nargs > 1 || nkw)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "compiled_stats(f = none) takes one argument");
    const cp_body *b = NULL;
    if (nargs && args[0].type != HD_V_NONE) {
        if (args[0].type != HD_V_FUNC)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "compiled_stats: expected a function, got %s",
                               hd_value_type_name(args[0]));
        const hd_ast_fn *fn = ((hd_closure *)args[0].as.o)->fn;
        for (b = vm->compiled ? vm->compiled->bodies : NULL; b && b->node != fn; b = b->next) {
        }
    }
    hd_value d = hd_dict_new(vm);
    if (d.type != HD_V_DICT) return vm->err;
    cp_body none;
    memset(&none, 0, sizeof none);
    if (stats_of(vm, nargs && args[0].type != HD_V_NONE ? (b ? b : &none) : NULL, d)) {
        hd_vunref(vm, d);
        return vm->err;
    }
    *out = d;
    return HD_OK;
}

hd_status hd_builtins_compiled_open(hd_vm *vm) {
    hd_compiled_init(vm);
    if (hd_vm_def_native(vm, "compiled_stats", bi_compiled_stats, NULL)) return vm->err;
    return hd_builtins_script_open(vm);
}
