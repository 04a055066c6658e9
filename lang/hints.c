/* "did you mean ...": the spellings users bring from PyTorch and NumPy,
 * in one table, and the closest known name otherwise (hints.h). */
#include "hints.h"
#include "hd_dtype.h"

#include <string.h>

/* Another library's spelling and Hodu's. A keyword entry applies where
 * the function takes Hodu's keyword (dim= is also accepted outright where
 * axis= is: hd_hint_keyword_alias). */
static const struct {
    const char *from, *to;
} hint_names[] =
    {
        {"cat", "concat"},         {"concatenate", "concat"}, {"clip", "clamp"},
        {"amax", "max"},           {"amin", "min"},           {"expand_dims", "unsqueeze"},
        {"swapaxes", "transpose"}, {"dot", "matmul"},         {"randn_like", "randn"},
        {"nn_softmax", "softmax"},
},
  hint_keywords[] = {
      {"dim", "axis"},         {"dims", "axis"}, {"axes", "axis"},
      {"keepdims", "keepdim"}, {"min", "lo"},    {"max", "hi"},
      {"a_min", "lo"},         {"a_max", "hi"},  {"requires_grad_", "requires_grad"},
};

int hd_hint_distance(const char *a, const char *b, int limit) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return limit + 1;
    if ((n > m ? n - m : m - n) > (size_t)limit) return limit + 1;
    int rows[3][64], *pp = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= m; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        cur[0] = (int)i;
        int best = cur[0];
        for (size_t j = 1; j <= m; j++) {
            int d = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < d) d = prev[j] + 1;
            if (cur[j - 1] + 1 < d) d = cur[j - 1] + 1;
            /* two letters swapped count as one edit */
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pp[j - 2] + 1 < d)
                d = pp[j - 2] + 1;
            cur[j] = d;
            if (d < best) best = d;
        }
        if (best > limit) return limit + 1;
        int *t = pp;
        pp = prev, prev = cur, cur = t;
    }
    return prev[m];
}

/* How far a typo may be from a name of this length. */
static int hint_limit(const char *name) {
    size_t n = strlen(name);
    return n < 3 ? 0 : n < 6 ? 1 : 2;
}

void hd_hint_init(hd_hint *h, const char *name) {
    h->name = name;
    h->best = NULL;
    h->dist = hint_limit(name) + 1;
    h->synonym = NULL;
    for (size_t i = 0; i < sizeof hint_names / sizeof *hint_names; i++)
        if (!strcmp(name, hint_names[i].from)) h->synonym = hint_names[i].to;
}

void hd_hint_offer(hd_hint *h, const char *known) {
    if (!known || !strcmp(known, h->name) || known[0] == '$') return;
    if (h->synonym && !strcmp(known, h->synonym)) {
        h->best = known;
        h->dist = -1; /* the table's spelling wins */
        return;
    }
    if (h->dist <= 0) return;
    int d = hd_hint_distance(h->name, known, h->dist - 1);
    if (d < h->dist) {
        h->best = known;
        h->dist = d;
    }
}

const char *hd_hint_keyword(const char *kw, const char *const *params, int n) {
    hd_hint h;
    hd_hint_init(&h, kw);
    for (size_t i = 0; i < sizeof hint_keywords / sizeof *hint_keywords; i++)
        if (!strcmp(kw, hint_keywords[i].from)) h.synonym = hint_keywords[i].to;
    if (!params) return h.synonym; /* the table's spelling alone */
    for (int i = 0; i < n; i++) hd_hint_offer(&h, params[i]);
    return h.best;
}

const char *hd_hint_keyword_alias(const char *kw) {
    return !strcmp(kw, "dim") ? "axis" : NULL;
}

const char *hd_hint_dtype(const char *s) {
    static const struct {
        const char *from, *to;
    } dt[] = {
        {"float32", "f32"}, {"float", "f32"}, {"float64", "f64"},   {"double", "f64"},
        {"float16", "f16"}, {"half", "f16"},  {"bfloat16", "bf16"}, {"int32", "i32"},
        {"int", "i32"},     {"int64", "i64"}, {"long", "i64"},      {"int8", "i8"},
        {"uint8", "u8"},
    };
    int own = hd_dtype_from_name(s); /* Hodu's own names: "f32", "bool", ... */
    if (own >= 0) return hd_dtype_name((hd_dtype)own);
    for (size_t i = 0; i < sizeof dt / sizeof *dt; i++)
        if (!strcmp(s, dt[i].from)) return dt[i].to;
    return NULL;
}
