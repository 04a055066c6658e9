/* hd_dtype: element types, their sizes and names, f16/bf16 conversion, and
 * PyTorch's type promotion. */
#ifndef HD_DTYPE_H
#define HD_DTYPE_H

#include <stdint.h>
#include <string.h>

/* Same order and values as hodu_dtype in include/hodu.h. */
typedef enum {
    HD_F16,
    HD_BF16,
    HD_F32,
    HD_F64,
    HD_I8,
    HD_U8,
    HD_I32,
    HD_I64,
    HD_BOOL,
    HD_DTYPE_COUNT
} hd_dtype;

typedef enum { HD_CAT_BOOL, HD_CAT_INT, HD_CAT_FLOAT } hd_dtype_cat;

typedef struct {
    const char *name; /* "f32" */
    int size;         /* bytes per element */
    hd_dtype_cat cat;
    const char *npy; /* numpy descr, e.g. "<f4"; NULL where numpy has none */
    const char *st;  /* safetensors dtype, e.g. "F32" */
} hd_dtype_info;

extern const hd_dtype_info hd_dtype_infos[HD_DTYPE_COUNT];

static inline int hd_dtype_size(hd_dtype dt) {
    return hd_dtype_infos[dt].size;
}
static inline const char *hd_dtype_name(hd_dtype dt) {
    return hd_dtype_infos[dt].name;
}
static inline int hd_dtype_is_float(hd_dtype dt) {
    return hd_dtype_infos[dt].cat == HD_CAT_FLOAT;
}
static inline int hd_dtype_is_int(hd_dtype dt) {
    return hd_dtype_infos[dt].cat == HD_CAT_INT;
}
/* Look a dtype up by name ("f32"); -1 if unknown. */
int hd_dtype_from_name(const char *name);

/* Promotion of two dtypes (torch.promote_types), e.g. f16+bf16 -> f32,
 * i8+u8 -> i32 (Hodu has no i16), bool+x -> x, int+float -> float. */
hd_dtype hd_dtype_promote(hd_dtype a, hd_dtype b);

/* Operand priority in promotion (torch's result_type): a dimensioned tensor
 * outranks a 0-d tensor, which outranks a Hodu number. A number never widens
 * a tensor within its category: an f16 tensor times 2.0 stays f16. */
typedef enum { HD_PRIO_NUMBER, HD_PRIO_ZERODIM, HD_PRIO_TENSOR } hd_prio;

typedef struct {
    int have[3];
    hd_dtype dt[3]; /* per priority */
} hd_promo;

void hd_promo_init(hd_promo *p);
void hd_promo_add(hd_promo *p, hd_dtype dt, hd_prio prio);
hd_dtype hd_promo_result(const hd_promo *p);

/* Half-precision conversions (round to nearest even, NaN and Inf kept). */
static inline float hd_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t hd_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* Inf or NaN */
        return (uint16_t)(sign | 0x7c00 |
                          (absx > 0x7f800000u ? 0x200 | ((absx >> 13) & 0x3ff) : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow to Inf */
    if (absx < 0x38800000u) {                                  /* subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign;
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((absx - 0x38000000u) >> 13);
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

static inline float hd_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t hd_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* Read element i of a typed buffer as double / write a double into it
 * (slow generic paths: printing, conversion, reference code). */
double hd_dtype_load(hd_dtype dt, const void *p, int64_t i);
void hd_dtype_store(hd_dtype dt, void *p, int64_t i, double v);
int64_t hd_dtype_load_i64(hd_dtype dt, const void *p, int64_t i);

#endif
