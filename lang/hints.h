/* "did you mean ...": hints for unknown names, keywords and dtype
 * strings. One table holds the spellings of other libraries (PyTorch,
 * NumPy) and Hodu's; otherwise the closest known name within a small edit
 * distance is suggested. */
#ifndef HD_HINTS_H
#define HD_HINTS_H

/* Collects the best suggestion for an unknown name among names offered. */
typedef struct hd_hint {
    const char *name;    /* the unknown one */
    const char *synonym; /* the table's Hodu spelling of it, or NULL */
    const char *best;    /* the suggestion so far, or NULL */
    int dist;
} hd_hint;

void hd_hint_init(hd_hint *h, const char *name);
/* Offer a known name: kept when it is the table's spelling, or closer. */
void hd_hint_offer(hd_hint *h, const char *known);

/* Edit distance of a and b (insertions, deletions, substitutions and
 * swaps of two neighbours), or limit + 1 when it is larger. */
int hd_hint_distance(const char *a, const char *b, int limit);

/* The parameter of params[n] an unknown keyword kw means (the table's
 * spelling, or the closest), or NULL; params NULL: the table's spelling of
 * kw, or NULL. */
const char *hd_hint_keyword(const char *kw, const char *const *params, int n);
/* A keyword taken as another outright (dim= for axis=), or NULL. */
const char *hd_hint_keyword_alias(const char *kw);
/* The dtype name a string means ("float32" -> "f32"), or NULL. */
const char *hd_hint_dtype(const char *s);

#endif
