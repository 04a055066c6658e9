/* The memo of memory "cached" (hd_memo.h). */
#include "hd_memo.h"
#include "hd_autograd.h"
#include "hd_backend.h"

#include <stdatomic.h>
#include <string.h>

#define MEMO_IN    HD_OP_MAX_IN
#define MEMO_HEADS 512 /* hash chains */
#define MEMO_SEEN  256 /* keys seen once, by hash: sets of MEMO_WAYS, newest first */
#define MEMO_WAYS  4

/* An input as the key sees it. */
typedef struct memo_in {
    uint64_t uid, version; /* the storage (0: no input); a number: its value's bits */
    int present, number, dtype, ndim;
    int64_t offset;
    int64_t shape[HD_MAX_DIMS], strides[HD_MAX_DIMS];
} memo_in;

typedef struct memo_key {
    uint64_t hash;
    int op, nin, nthreads, place_device;
    const void *place_backend;
    hd_attrs attrs;
    memo_in in[MEMO_IN];
} memo_key;

/* A kept result, and its tensor as it was made. */
typedef struct memo_entry {
    memo_key key;
    hd_tensor *out; /* NULL: a free slot */
    /* out's storage when kept: its id (a tensor can take another storage,
     * hd_tensor_adopt, and the first be freed) and size */
    uint64_t uid, version, used;
    size_t nbytes;
    int dtype, ndim, number;
    int64_t offset;
    int64_t shape[HD_MAX_DIMS], strides[HD_MAX_DIMS];
    int16_t next; /* the chain of its hash, -1 at the end */
} memo_entry;

typedef struct hd_memo {
    memo_entry slots[HD_MEMO_SLOTS];
    int16_t heads[MEMO_HEADS];
    uint64_t seen[MEMO_SEEN][MEMO_WAYS];
    uint64_t tick, hits, misses;
    size_t bytes;
} hd_memo;

/* Storage ids, unique in the process (a freed storage's address may come
 * back; its id does not). Given when the memo first keys a storage. */
static _Atomic uint64_t memo_uids;

static uint64_t storage_uid(hd_storage *s) {
    if (!s->uid) s->uid = atomic_fetch_add_explicit(&memo_uids, 1, memory_order_relaxed) + 1;
    return s->uid;
}

/* ---- on, off ---- */

hd_status hd_memo_set(hd_ctx *ctx, int on) {
    if (!on) {
        hd_memo_clear(ctx);
        ctx->memo = NULL;
        return HD_OK;
    }
    if (!ctx->memo_mem) {
        hd_memo *m = hd_ctx_calloc(ctx, 1, sizeof *m);
        if (!m) return ctx->status;
        memset(m->heads, 0xff, sizeof m->heads);
        ctx->memo_mem = m;
    }
    ctx->memo = ctx->memo_mem;
    return HD_OK;
}

void hd_memo_free(hd_ctx *ctx) {
    hd_memo_set(ctx, 0);
    if (ctx->memo_mem) hd_ctx_free(ctx, ctx->memo_mem, sizeof *ctx->memo_mem);
    ctx->memo_mem = NULL;
}

static void entry_drop(hd_memo *m, int i) {
    memo_entry *e = &m->slots[i];
    int16_t *p = &m->heads[e->key.hash % MEMO_HEADS];
    while (*p != i) p = &m->slots[*p].next;
    *p = e->next;
    m->bytes -= e->nbytes;
    if (e->out->storage && e->out->storage->uid == e->uid) e->out->storage->memo = 0;
    hd_tensor_unref(e->out);
    e->out = NULL;
}

void hd_memo_clear(hd_ctx *ctx) {
    hd_memo *m = ctx->memo_mem;
    if (!m) return;
    for (int i = 0; i < HD_MEMO_SLOTS; i++)
        if (m->slots[i].out) entry_drop(m, i);
    memset(m->seen, 0, sizeof m->seen);
}

size_t hd_memo_bytes(const hd_ctx *ctx) {
    return ctx->memo ? ctx->memo->bytes : 0;
}

void hd_memo_counts(const hd_ctx *ctx, uint64_t *hits, uint64_t *misses) {
    *hits = ctx->memo ? ctx->memo->hits : 0;
    *misses = ctx->memo ? ctx->memo->misses : 0;
}

/* ---- keys ---- */

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static uint64_t mix_words(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = mix(h, w);
    }
    return h;
}

/* Ops whose result depends on more than their inputs, that write, or whose
 * result is (or should be) fresh memory. */
static int op_memoisable(hd_op op, const hd_attrs *attrs) {
    switch (op) {
    case HD_OP_RAND:
    case HD_OP_RANDN:
    case HD_OP_ALL_REDUCE:
    case HD_OP_ASSIGN:
    case HD_OP_COPY: return 0;
    case HD_OP_DROPOUT: return attrs->ints[0] == 0;
    default: return hd_op_infos[op].kind != HD_KIND_VIEW;
    }
}

/* A Hodu number on the host: keyed by its value. */
static int number_value(const hd_tensor *t, uint64_t *bits) {
    if (!t->number || t->numel != 1 || t->storage->backend != &hd_cpu_backend) return 0;
    *bits = 0;
    memcpy(bits, hd_tensor_data(t), (size_t)hd_dtype_size(t->dtype));
    return 1;
}

/* An input's identity: its storage and that storage's writes, or a
 * number's value (uid 0). */
static void input_identity(const hd_tensor *t, uint64_t *uid, uint64_t *version) {
    *uid = 0;
    if (number_value(t, version)) return;
    *uid = storage_uid(t->storage);
    *version = t->storage->version;
}

/* What hd_memo_run keys an op by, before the key itself is made. */
typedef struct memo_call {
    hd_op op;
    hd_tensor *const *in;
    int nin;
    const hd_attrs *attrs;
    int from_memo; /* every tensor input (not a number) is a result the memo keeps */
    uint64_t hash;
} memo_call;

/* The hash of what tells calls apart most (equal keys compare all). */
static uint64_t call_hash(const hd_ctx *ctx, const memo_call *c) {
    const hd_attrs *a = c->attrs;
    uint64_t h = mix(mix((uint64_t)c->op, (uint64_t)c->nin), (uint64_t)ctx->nthreads);
    h = mix_words(h, a->scalar, sizeof a->scalar);
    h = mix_words(h, a->shape, (size_t)HD_MIN(a->nshape, HD_MAX_DIMS) * sizeof *a->shape);
    h = mix_words(h, a->ints, sizeof a->ints);
    h = mix(h, (uint64_t)a->dtype);
    for (int i = 0; i < c->nin; i++) {
        const hd_tensor *t = c->in[i];
        uint64_t uid = 0, version = 0;
        if (t) input_identity(t, &uid, &version);
        h = mix(mix(mix(h, uid), version), t ? (uint64_t)t->offset : 1);
        if (t) h = mix_words(h, t->shape, (size_t)t->ndim * sizeof *t->shape);
    }
    h ^= h >> 33; /* the low bits pick chains and seen slots: mix the high ones in */
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

/* 0 if the op cannot be memoised here; else c->hash and c->from_memo. */
static int call_make(hd_ctx *ctx, memo_call *c) {
    static const hd_attrs none;
    if (!c->attrs) c->attrs = &none;
    if (c->nin > MEMO_IN || ctx->trace || !op_memoisable(c->op, c->attrs)) return 0;
    if (ctx->grad_scope && ctx->grad_scope->watch_outer) return 0;
    int kept = 0, tensors = 0;
    for (int i = 0; i < c->nin; i++) {
        hd_tensor *t = c->in[i];
        if (!t) continue;
        /* symbolic, or memory host code may write without a trace */
        if (!t->storage || hd_storage_host_writable(t->storage)) return 0;
        if (!ctx->grad_disabled && hd_grad_requires(ctx, t)) return 0;
        tensors += !t->number;
        kept += !t->number && t->storage->memo;
    }
    c->from_memo = tensors > 0 && kept == tensors;
    c->hash = call_hash(ctx, c);
    return 1;
}

static void key_input(memo_in *k, const hd_tensor *t) {
    if (!t) return;
    k->present = 1;
    k->number = t->number;
    k->dtype = (int)t->dtype;
    k->ndim = t->ndim;
    k->offset = t->offset;
    memcpy(k->shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
    memcpy(k->strides, t->strides, (size_t)t->ndim * sizeof *t->strides);
    input_identity(t, &k->uid, &k->version);
}

/* The whole key of a call (made only when its hash matched, or to keep
 * its result). */
static void key_make(const hd_ctx *ctx, const memo_call *c, memo_key *k) {
    memset(k, 0, sizeof *k);
    k->hash = c->hash;
    k->op = (int)c->op;
    k->nin = c->nin;
    k->nthreads = ctx->nthreads;
    k->place_backend = ctx->place_backend;
    k->place_device = ctx->place_device;
    k->attrs = *c->attrs;
    for (int i = 0; i < c->nin; i++) key_input(&k->in[i], c->in[i]);
}

static int key_equal(const memo_key *a, const memo_key *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

/* ---- lookup, store ---- */

/* The entry's result is as it was made, and nobody else holds it (nor
 * was handed its memory: host code may have written it). */
static int entry_intact(const memo_entry *e) {
    const hd_tensor *t = e->out;
    return t->storage && t->storage->uid == e->uid && t->storage->version == e->version &&
           !hd_storage_host_writable(t->storage) && !t->grad_info && (int)t->dtype == e->dtype &&
           t->ndim == e->ndim && t->number == e->number && t->offset == e->offset &&
           !memcmp(t->shape, e->shape, sizeof e->shape) &&
           !memcmp(t->strides, e->strides, sizeof e->strides);
}

#define MEMO_NONE   (-1)
#define MEMO_IN_USE (-2)
#define MEMO_COPIES 2 /* results kept per key: one a variable still holds, one to hand out */

/* A slot of c's key whose result nobody holds, else MEMO_IN_USE when
 * MEMO_COPIES of them are held elsewhere now, else MEMO_NONE (one more
 * may be kept); an entry changed since it was kept is dropped. The whole
 * key is made (into *k) only when a hash matches. */
static int memo_find(hd_ctx *ctx, hd_memo *m, const memo_call *c, memo_key *k, int *made) {
    int held = 0;
    for (int i = m->heads[c->hash % MEMO_HEADS], next; i >= 0; i = next) {
        memo_entry *e = &m->slots[i];
        next = e->next;
        if (e->key.hash != c->hash) continue;
        if (!*made) key_make(ctx, c, k), *made = 1;
        if (!key_equal(&e->key, k)) continue;
        if (e->out->refcount > 1 || (e->out->storage && e->out->storage->refcount > 1))
            held++;
        else if (entry_intact(e))
            return i;
        else
            entry_drop(m, i);
    }
    return held >= MEMO_COPIES ? MEMO_IN_USE : MEMO_NONE;
}

/* A free slot, dropping the least recently used results until one is free
 * and nbytes more fit (-1: the result is too large to keep). */
static int memo_room(hd_memo *m, size_t nbytes) {
    if (nbytes > HD_MEMO_MAX_BYTES / 4) return -1;
    for (;;) {
        int free_slot = -1, old = -1;
        for (int i = 0; i < HD_MEMO_SLOTS; i++) {
            memo_entry *e = &m->slots[i];
            if (!e->out) {
                if (free_slot < 0) free_slot = i;
            } else if (old < 0 || e->used < m->slots[old].used) {
                old = i;
            }
        }
        if (free_slot >= 0 && m->bytes + nbytes <= HD_MEMO_MAX_BYTES) return free_slot;
        if (old < 0) return -1;
        entry_drop(m, old);
    }
}

static void memo_store(hd_memo *m, const memo_key *k, hd_tensor *t) {
    /* a result the op shares with anything else is not the memo's to keep */
    if (t->refcount > 1 || !t->storage || t->storage->refcount > 1 || t->grad_info) return;
    int i = memo_room(m, t->storage->nbytes);
    if (i < 0) return;
    memo_entry *e = &m->slots[i];
    e->key = *k;
    e->out = hd_tensor_ref(t);
    e->uid = storage_uid(t->storage);
    e->nbytes = t->storage->nbytes;
    e->version = t->storage->version;
    e->used = ++m->tick;
    e->dtype = (int)t->dtype;
    e->ndim = t->ndim;
    e->number = t->number;
    e->offset = t->offset;
    memcpy(e->shape, t->shape, sizeof e->shape);
    memcpy(e->strides, t->strides, sizeof e->strides);
    e->next = m->heads[k->hash % MEMO_HEADS];
    m->heads[k->hash % MEMO_HEADS] = (int16_t)i;
    m->bytes += t->storage->nbytes;
    t->storage->memo = 1;
}

/* Kept from the second time a key is seen, or at once in a chain. A set
 * forgets its oldest key when a fifth comes (a few keys never push each
 * other out, whatever their hashes). */
static int memo_wants(hd_memo *m, const memo_call *c) {
    uint64_t *set = m->seen[c->hash % MEMO_SEEN];
    if (c->from_memo) return 1;
    for (int w = 0; w < MEMO_WAYS; w++)
        if (set[w] == c->hash) return 1;
    memmove(set + 1, set, (MEMO_WAYS - 1) * sizeof *set);
    set[0] = c->hash;
    return 0;
}

hd_status hd_memo_run(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin, const hd_attrs *attrs,
                      hd_tensor **out, hd_memo_compute compute) {
    hd_memo *m = ctx->memo;
    memo_call c = {.op = op, .in = in, .nin = nin, .attrs = attrs};
    memo_key k;
    int made = 0;
    if (!call_make(ctx, &c)) return compute(ctx, op, in, nin, attrs, out);
    int i = memo_find(ctx, m, &c, &k, &made);
    if (i >= 0) {
        m->slots[i].used = ++m->tick;
        m->hits++;
        *out = hd_tensor_ref(m->slots[i].out);
        return HD_OK;
    }
    hd_status st = compute(ctx, op, in, nin, attrs, out);
    if (st) return st;
    m->misses++;
    if (i == MEMO_NONE && memo_wants(m, &c)) {
        if (!made) key_make(ctx, &c, &k);
        memo_store(m, &k, *out);
    }
    return HD_OK;
}
