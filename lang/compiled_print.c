/* print inside compiled code: a callback node of the graph that prints at
 * every run with the run's values (see compiled.h and docs/compiled.md).
 * The text around the tensors is made while tracing; each tensor is
 * formatted when the graph runs. */
#include "compiled_int.h"
#include "tensor_api.h"

#include <string.h>

typedef struct cp_piece {
    size_t off, len; /* literal text in cp_print.text */
    int arg;         /* >= 0: the callback's tensor argument */
} cp_piece;

typedef struct cp_print {
    int refcount;
    hd_vm *vm;
    char *text;
    size_t text_len;
    cp_piece *pieces;
    int npieces;
} cp_print;

typedef struct cp_pbuild {
    hd_buf text;
    cp_piece *pieces;
    int n, cap;
    size_t open; /* start of the literal piece being written */
    hd_tensor **args;
    int nargs, capargs;
} cp_pbuild;

static void *print_dup(void *ud) {
    ((cp_print *)ud)->refcount++;
    return ud;
}

static void print_free(hd_ctx *ctx, void *ud) {
    cp_print *p = ud;
    if (--p->refcount > 0) return;
    hd_ctx_free(ctx, p->text, p->text_len + 1);
    hd_ctx_free(ctx, p->pieces, (size_t)(p->npieces + 1) * sizeof *p->pieces);
    hd_ctx_free(ctx, p, sizeof *p);
}

/* At every run: the literal text with each tensor's values in its place. */
static hd_status print_run(hd_ctx *ctx, void *ud, hd_tensor *const *args, int nargs) {
    cp_print *p = ud;
    hd_vm *vm = p->vm;
    hd_buf b;
    hd_buf_init(&b, vm);
    for (int i = 0; i < p->npieces; i++) {
        const cp_piece *pc = &p->pieces[i];
        if (pc->arg < 0) {
            hd_buf_add(&b, p->text + pc->off, pc->len);
            continue;
        }
        if (pc->arg >= nargs) continue;
        hd_value s = hd_tensor_format(vm, args[pc->arg]);
        if (s.type == HD_V_STR) hd_buf_add(&b, hd_as_str(s)->chars, hd_as_str(s)->len);
        hd_vunref(vm, s);
    }
    if (hd_buf_failed(&b) || hd_vm_failed(vm)) {
        hd_buf_free(&b);
        return hd_error(ctx, HD_ERR_MEMORY, "print: %s", vm->err ? vm->errmsg : "out of memory");
    }
    hd_vm_write(vm, b.p ? b.p : "", b.len);
    hd_buf_free(&b);
    return HD_OK;
}

static int pb_piece(cp_pbuild *pb, hd_vm *vm, int arg) {
    if (!CP_GROW(vm, pb->pieces, pb->cap, pb->n)) return 0;
    cp_piece *pc = &pb->pieces[pb->n++];
    pc->off = pb->open;
    pc->len = pb->text.len - pb->open;
    pc->arg = arg;
    if (arg >= 0) pc->len = 0;
    pb->open = pb->text.len;
    return 1;
}

static int pb_tensor(cp_pbuild *pb, hd_vm *vm, hd_tensor *t) {
    if (!pb_piece(pb, vm, -1) || !CP_GROW(vm, pb->args, pb->capargs, pb->nargs)) return 0;
    pb->args[pb->nargs] = t;
    return pb_piece(pb, vm, pb->nargs++);
}

static int holds_tensor(hd_value v, int depth) {
    if (v.type == HD_V_TENSOR) return 1;
    if (depth > 100) return 0;
    if (v.type == HD_V_LIST) {
        for (int64_t i = 0; i < hd_as_list(v)->len; i++)
            if (holds_tensor(hd_as_list(v)->items[i], depth + 1)) return 1;
    } else if (v.type == HD_V_DICT) {
        for (int64_t i = 0; i < hd_as_dict(v)->len; i++)
            if (holds_tensor(hd_as_dict(v)->vals[i], depth + 1)) return 1;
    }
    return 0;
}

/* v as print shows it, tensors left as places for their run's values. */
static int pb_value(cp_pbuild *pb, hd_vm *vm, hd_value v, int quote, int depth) {
    if (v.type == HD_V_TENSOR) return pb_tensor(pb, vm, v.as.t);
    if (depth > 100 || !holds_tensor(v, 0)) {
        hd_buf_value(&pb->text, v, quote);
        return 1;
    }
    int dict = v.type == HD_V_DICT;
    int64_t n = dict ? hd_as_dict(v)->len : hd_as_list(v)->len;
    hd_buf_add(&pb->text, dict ? "{" : "[", 1);
    for (int64_t i = 0; i < n; i++) {
        if (i) hd_buf_add(&pb->text, ", ", 2);
        if (dict) {
            hd_buf_value(&pb->text, hd_obj_value(&hd_as_dict(v)->keys[i]->obj), 1);
            hd_buf_add(&pb->text, ": ", 2);
        }
        hd_value item = dict ? hd_as_dict(v)->vals[i] : hd_as_list(v)->items[i];
        if (!pb_value(pb, vm, item, 1, depth + 1)) return 0;
    }
    hd_buf_add(&pb->text, dict ? "}" : "]", 1);
    return 1;
}

static hd_status print_record(hd_vm *vm, cp_pbuild *pb) {
    hd_ctx *ctx = &vm->ctx;
    cp_print *p = hd_ctx_calloc(ctx, 1, sizeof *p);
    if (!p) return hd_vm_oom(vm);
    p->refcount = 1;
    p->vm = vm;
    p->text_len = pb->text.len;
    p->text = hd_ctx_alloc(ctx, p->text_len + 1);
    p->pieces = hd_ctx_calloc(ctx, (size_t)(pb->n + 1), sizeof *p->pieces);
    if (!p->text || !p->pieces) {
        p->npieces = pb->n;
        print_free(ctx, p);
        return hd_vm_oom(vm);
    }
    if (p->text_len) memcpy(p->text, pb->text.p, p->text_len);
    p->text[p->text_len] = 0;
    if (pb->n) memcpy(p->pieces, pb->pieces, (size_t)pb->n * sizeof *p->pieces);
    p->npieces = pb->n;
    hd_ir_callback cb = {"print", print_run, p, print_dup, print_free};
    hd_status st = hd_trace_callback(ctx, &cb, pb->args, pb->nargs);
    if (!st) return HD_OK; /* the graph owns p now */
    print_free(ctx, p);
    return hd_vm_from_ctx(vm, st);
}

hd_status hd_compiled_print(hd_vm *vm, const hd_value *args, int nargs, const hd_value *sep,
                            const hd_value *end) {
    cp_pbuild pb;
    memset(&pb, 0, sizeof pb);
    hd_buf_init(&pb.text, vm);
    int ok = 1;
    hd_status err = HD_OK;
    for (int i = 0; i < nargs && ok; i++) {
        if (i) {
            if (sep)
                hd_buf_add(&pb.text, hd_as_str(*sep)->chars, hd_as_str(*sep)->len);
            else
                hd_buf_add(&pb.text, " ", 1);
        }
        hd_value t; /* an object's str method runs while tracing: its text is fixed */
        if ((err = hd_eval_str_method(vm, args[i], &t)) != HD_OK) break;
        if (t.type == HD_V_STR) {
            hd_buf_add(&pb.text, hd_as_str(t)->chars, hd_as_str(t)->len);
            hd_vunref(vm, t);
            continue;
        }
        ok = pb_value(&pb, vm, args[i], 0, 0);
    }
    if (end)
        hd_buf_add(&pb.text, hd_as_str(*end)->chars, hd_as_str(*end)->len);
    else
        hd_buf_add(&pb.text, "\n", 1);
    hd_status st;
    if (err)
        st = err;
    else if (hd_buf_failed(&pb.text))
        st = hd_buf_error(&pb.text);
    else
        st = ok && pb_piece(&pb, vm, -1) ? print_record(vm, &pb) : hd_vm_oom(vm);
    hd_buf_free(&pb.text);
    cp_free_array(vm, pb.pieces, pb.cap, sizeof *pb.pieces);
    cp_free_array(vm, pb.args, pb.capargs, sizeof *pb.args);
    return st;
}
