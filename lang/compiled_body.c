/* Compiled bodies: one record per compiled function or block (found by
 * its AST node, keyed by the hash of its source text), and what the
 * language learns from its AST once: the frame slots it declares and
 * reads, and the names of its variables and captured cells (for state
 * paths and messages). See compiled_int.h. */
#include "compiled_int.h"

#include <stdio.h>
#include <string.h>

/* Hash of the source text a span covers (the body part of the key). */
static uint64_t span_hash(const hd_chunk *c, const hd_span *sp) {
    const char *s = c->source;
    size_t i = 0, start, end;
    int line = 1;
    for (; i < c->len && line < sp->line; i++)
        if (s[i] == '\n') line++;
    start = i + (size_t)(sp->col > 0 ? sp->col - 1 : 0);
    for (; i < c->len && line < sp->end_line; i++)
        if (s[i] == '\n') line++;
    end = i + (size_t)(sp->end_col > 0 ? sp->end_col : 0);
    if (start > c->len) start = c->len;
    if (end > c->len || end < start) end = c->len;
    hd_ir_hasher h;
    hd_ir_hash_init(&h);
    hd_ir_hash_bytes(&h, s + start, end - start);
    return hd_ir_hash_final(&h);
}

static cp_body *body_find(hd_vm *vm, const void *node) {
    hd_compiled_state *cs = vm->compiled;
    cp_body **pp = &cs->bodies;
    for (cp_body *b = *pp; b; pp = &b->next, b = *pp) {
        if (b->node != node) continue;
        *pp = b->next; /* to the front */
        b->next = cs->bodies;
        cs->bodies = b;
        return b;
    }
    return NULL;
}

static cp_body *body_new(hd_vm *vm, const void *node, const char *what, const hd_chunk *c,
                         const hd_span *sp) {
    cp_body *b = hd_ctx_calloc(&vm->ctx, 1, sizeof *b);
    if (!b) return hd_vm_oom(vm), NULL;
    b->node = node;
    snprintf(b->where, sizeof b->where, "%s (%s:%d)", what, c->name, sp->line);
    b->hash = span_hash(c, sp);
    b->next = vm->compiled->bodies;
    vm->compiled->bodies = b;
    return b;
}

/* Names of the variables a function captures, from its body's names. */
static void names_walk(const hd_ast *n, hd_ref_kind kind, const char **names, int count, int depth);

static void names_items(const hd_ast *n, hd_ref_kind kind, const char **names, int count,
                        int depth) {
    names_walk(n->a, kind, names, count, depth);
    names_walk(n->b, kind, names, count, depth);
    names_walk(n->c, kind, names, count, depth);
    names_walk(n->body, kind, names, count, depth);
    for (int i = 0; i < n->n; i++) names_walk(n->items[i], kind, names, count, depth);
}

static void names_walk(const hd_ast *n, hd_ref_kind kind, const char **names, int count,
                       int depth) {
    if (!n || depth > 200) return;
    int has_ref = n->kind == HD_AST_NAME || n->kind == HD_AST_LET || n->kind == HD_AST_FOR ||
                  n->kind == HD_AST_FNDEF || n->kind == HD_AST_CLASS || n->kind == HD_AST_IMPORT;
    if (has_ref && n->name &&
        (n->ref.kind == kind || (kind == HD_REF_LOCAL && n->ref.kind == HD_REF_CELL)) &&
        n->ref.index >= 0 && n->ref.index < count && !names[n->ref.index])
        names[n->ref.index] = n->name;
    if (n->kind == HD_AST_FN || n->kind == HD_AST_FNDEF) return; /* other frames */
    names_items(n, kind, names, count, depth + 1);
}

static hd_status body_names(hd_vm *vm, const hd_ast *root, hd_ref_kind kind, int count,
                            const char ***out) {
    *out = NULL;
    if (count <= 0) return HD_OK;
    const char **names = hd_ctx_calloc(&vm->ctx, (size_t)count, sizeof *names);
    if (!names) return hd_vm_oom(vm);
    names_walk(root, kind, names, count, 0);
    *out = names;
    return HD_OK;
}

/* Slots a block declares (let, for, fn, class, import inside it). */
void hd_compiled_decl_walk(const hd_ast *n, unsigned char *decl, int count, int depth) {
    if (!n || depth > 200) return;
    int declares = n->kind == HD_AST_LET || n->kind == HD_AST_FOR || n->kind == HD_AST_FNDEF ||
                   n->kind == HD_AST_CLASS || n->kind == HD_AST_IMPORT;
    if (declares && (n->ref.kind == HD_REF_LOCAL || n->ref.kind == HD_REF_CELL) &&
        n->ref.index >= 0 && n->ref.index < count)
        decl[n->ref.index] = 1;
    if (n->kind == HD_AST_FN || n->kind == HD_AST_FNDEF) return;
    hd_compiled_decl_walk(n->a, decl, count, depth + 1);
    hd_compiled_decl_walk(n->b, decl, count, depth + 1);
    hd_compiled_decl_walk(n->c, decl, count, depth + 1);
    hd_compiled_decl_walk(n->body, decl, count, depth + 1);
    for (int i = 0; i < n->n; i++) hd_compiled_decl_walk(n->items[i], decl, count, depth + 1);
}

/* Outer slots a block reads: marks 2 in reads (declared ones are 1). */
static void reads_walk(const hd_ast *n, unsigned char *mark, int count, int depth) {
    if (!n || depth > 200) return;
    if (n->kind == HD_AST_NAME && (n->ref.kind == HD_REF_LOCAL || n->ref.kind == HD_REF_CELL) &&
        n->ref.index >= 0 && n->ref.index < count && !mark[n->ref.index])
        mark[n->ref.index] = 2;
    if (n->kind == HD_AST_FN) {
        /* a closure made inside reads the outer cells it captures: through
         * the cells, which guards on captured variables cover */
        return;
    }
    if (n->kind == HD_AST_FNDEF) return;
    reads_walk(n->a, mark, count, depth + 1);
    reads_walk(n->b, mark, count, depth + 1);
    reads_walk(n->c, mark, count, depth + 1);
    reads_walk(n->body, mark, count, depth + 1);
    for (int i = 0; i < n->n; i++) reads_walk(n->items[i], mark, count, depth + 1);
}

hd_status cp_block_analyse(hd_vm *vm, cp_body *b, const hd_frame *f, const hd_ast *body, int stmt) {
    HD_UNUSED(stmt);
    int count = f->nslots;
    b->nslots = count;
    if (count <= 0) return HD_OK;
    unsigned char *mark = hd_ctx_calloc(&vm->ctx, (size_t)count, 1);
    if (!mark) return hd_vm_oom(vm);
    b->slot_decl = mark;
    hd_compiled_decl_walk(body, mark, count, 0);
    int *reads = hd_ctx_calloc(&vm->ctx, (size_t)count, sizeof *reads);
    if (!reads) return hd_vm_oom(vm);
    b->slot_reads = reads;
    b->nreads = count; /* allocation size; entries past nr unused */
    unsigned char *tmp = hd_ctx_alloc(&vm->ctx, (size_t)count);
    if (!tmp) return hd_vm_oom(vm);
    memcpy(tmp, mark, (size_t)count);
    reads_walk(body, tmp, count, 0);
    int nr = 0;
    for (int i = 0; i < count; i++)
        if (tmp[i] == 2) reads[nr++] = i;
    for (int i = nr; i < count; i++) reads[i] = -1;
    hd_ctx_free(&vm->ctx, tmp, (size_t)count);
    const hd_ast *scope = f->closure ? f->closure->fn->body : f->chunk->parse.program;
    return body_names(vm, scope, HD_REF_LOCAL, count, &b->slot_names);
}

hd_status cp_body_upvals(hd_vm *vm, cp_body *b, const hd_closure *c) {
    if (!c || b->upval_names) return HD_OK;
    b->nupval = c->ncells;
    return body_names(vm, c->fn->body, HD_REF_UPVALUE, c->ncells, &b->upval_names);
}

cp_body *cp_body_get(hd_vm *vm, const void *node, const char *what, const hd_chunk *c,
                     const hd_span *sp) {
    if (!cp_state_of(vm)) return NULL;
    cp_body *b = body_find(vm, node);
    return b ? b : body_new(vm, node, what, c, sp);
}
