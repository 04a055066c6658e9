/* The memo of memory "cached" (a strategy's field): eager ops whose inputs
 * and attributes repeat give back the result they gave before instead of
 * computing it again, so a pure subgraph that a loop or a model's forward
 * recomputes from the same tensors (a causal mask, positional encodings, a
 * weight's normalisation) runs once.
 *
 * A result is handed out again only when nobody else can see it: the memo
 * holds the only reference to it and to its storage, its storage was not
 * written since, and its geometry is as it was made. So a hit gives what a
 * fresh computation would, bit for bit, and a caller that writes into the
 * result changes nothing that another holder sees. The key is the op, its
 * attributes, the threads and the creation device, and each input's
 * identity: its storage (a number 'tensor' by its value), that storage's
 * write count (hd_storage.version), dtype and geometry. A result is kept
 * from the second time its key is seen (at once when every tensor input
 * came from the memo, so chains are kept whole), within HD_MEMO_SLOTS
 * results and HD_MEMO_MAX_BYTES, least recently used out first; two per
 * key, since a variable reassigned in a loop still holds the last one
 * while the next is computed.
 *
 * Never memoised: random ops, collectives, writes, copies, views, ops
 * whose result would be recorded for gradients, and anything under a
 * trace (compiled code folds and merges its own subgraphs). */
#ifndef HD_MEMO_H
#define HD_MEMO_H

#include "hd_op.h"

#define HD_MEMO_SLOTS     256
#define HD_MEMO_MAX_BYTES ((size_t)256 << 20)

/* How hd_op_run computes an op (the profiler or not). */
typedef hd_status (*hd_memo_compute)(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                                     const hd_attrs *attrs, hd_tensor **out);

/* On or off. Off drops the results it holds and keeps its own memory, so
 * turning it on again cannot fail; the first time on fails when memory
 * runs out (an error in ctx). */
hd_status hd_memo_set(hd_ctx *ctx, int on);
/* Off, and its memory freed (hd_ctx_release). */
void hd_memo_free(hd_ctx *ctx);
/* Drop every result the memo holds (empty_cache(), hd_ctx_release). */
void hd_memo_clear(hd_ctx *ctx);
/* Bytes of the results the memo holds. */
size_t hd_memo_bytes(const hd_ctx *ctx);
/* Results handed out again, and results computed under the memo. */
void hd_memo_counts(const hd_ctx *ctx, uint64_t *hits, uint64_t *misses);

/* hd_op_run's path while the memo is on. */
hd_status hd_memo_run(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin, const hd_attrs *attrs,
                      hd_tensor **out, hd_memo_compute compute);

#endif
