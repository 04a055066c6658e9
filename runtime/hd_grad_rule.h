/* What the files of gradient rules share (internal): the RULE macro that
 * defines hd_grad_rule_<name> for hd_ops.def, the names a rule reads its
 * record through, and formula helpers (hd_grad_rules.c). */
#ifndef HD_GRAD_RULE_H
#define HD_GRAD_RULE_H

#include "hd_autograd.h"

#include <string.h>

#define IN(i)  (n->saved[(i)])
#define OUT    (n->saved[n->nin])
#define SAVE_X HD_GRAD_SAVE_IN(0)
#define SAVE_Y HD_GRAD_SAVE_OUT

/* Defines hd_grad_rule_<name> (declared through hd_ops.def) and its function. */
#define RULE(name, save)                                                                           \
    static void rule_##name(hd_gx *x, const hd_grad_node *n, hd_tensor *g,                         \
                            const unsigned char *need, hd_tensor **gin);                           \
    const hd_grad_rule hd_grad_rule_##name = {rule_##name, save};                                  \
    static void rule_##name(hd_gx *x, const hd_grad_node *n, hd_tensor *g,                         \
                            const unsigned char *need, hd_tensor **gin)

#define UNUSED_RULE_ARGS()                                                                         \
    do {                                                                                           \
        HD_UNUSED(n);                                                                              \
        HD_UNUSED(need);                                                                           \
    } while (0)

/* a number (never widens what it meets), a reshape, the last two dims
 * swapped (a view) */
hd_tensor *hd_gx_num(hd_gx *x, double v);
hd_tensor *hd_gx_reshape(hd_gx *x, hd_tensor *a, const int64_t *shape, int nd);
hd_tensor *hd_gx_transpose(hd_gx *x, hd_tensor *a);

/* layer_norm's gradient written with table ops (hd_grad_second.c): what
 * its rule runs when the graph is kept */
void hd_grad_layer_norm_create(hd_gx *x, const hd_grad_node *n, hd_tensor *g,
                               const unsigned char *need, hd_tensor **gin);

/* the formulas' vocabulary: ops through hd_gx_run */
static inline hd_attrs no_attrs(void) {
    hd_attrs a;
    memset(&a, 0, sizeof a);
    return a;
}
static inline hd_tensor *un(hd_gx *x, hd_op op, hd_tensor *a) {
    return hd_gx_run(x, op, &a, 1, NULL);
}
static inline hd_tensor *bin(hd_gx *x, hd_op op, hd_tensor *a, hd_tensor *b) {
    hd_tensor *in[2] = {a, b};
    return hd_gx_run(x, op, in, 2, NULL);
}
static inline hd_tensor *mul(hd_gx *x, hd_tensor *a, hd_tensor *b) {
    return bin(x, HD_OP_MUL, a, b);
}
static inline hd_tensor *divide(hd_gx *x, hd_tensor *a, hd_tensor *b) {
    return bin(x, HD_OP_DIV, a, b);
}
static inline hd_tensor *add(hd_gx *x, hd_tensor *a, hd_tensor *b) {
    return bin(x, HD_OP_ADD, a, b);
}
static inline hd_tensor *sub(hd_gx *x, hd_tensor *a, hd_tensor *b) {
    return bin(x, HD_OP_SUB, a, b);
}
static inline hd_tensor *neg(hd_gx *x, hd_tensor *a) {
    return un(x, HD_OP_NEG, a);
}

#endif
