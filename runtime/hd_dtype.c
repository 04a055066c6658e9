#include "hd_dtype.h"

#include <math.h>

const hd_dtype_info hd_dtype_infos[HD_DTYPE_COUNT] = {
    [HD_F16] = {"f16", 2, HD_CAT_FLOAT, "<f2", "F16"},
    [HD_BF16] = {"bf16", 2, HD_CAT_FLOAT, NULL, "BF16"},
    [HD_F32] = {"f32", 4, HD_CAT_FLOAT, "<f4", "F32"},
    [HD_F64] = {"f64", 8, HD_CAT_FLOAT, "<f8", "F64"},
    [HD_I8] = {"i8", 1, HD_CAT_INT, "|i1", "I8"},
    [HD_U8] = {"u8", 1, HD_CAT_INT, "|u1", "U8"},
    [HD_I32] = {"i32", 4, HD_CAT_INT, "<i4", "I32"},
    [HD_I64] = {"i64", 8, HD_CAT_INT, "<i8", "I64"},
    [HD_BOOL] = {"bool", 1, HD_CAT_BOOL, "|b1", "BOOL"},
};

int hd_dtype_from_name(const char *name) {
    for (int i = 0; i < HD_DTYPE_COUNT; i++)
        if (strcmp(hd_dtype_infos[i].name, name) == 0) return i;
    return -1;
}

/* torch.promote_types restricted to Hodu's dtypes; i16 does not exist, so
 * the i8/u8 pair widens to i32. */
hd_dtype hd_dtype_promote(hd_dtype a, hd_dtype b) {
    if (a == b) return a;
    if (a == HD_BOOL) return b;
    if (b == HD_BOOL) return a;
    hd_dtype_cat ca = hd_dtype_infos[a].cat, cb = hd_dtype_infos[b].cat;
    if (ca != cb) return ca == HD_CAT_FLOAT ? a : b;
    if (ca == HD_CAT_FLOAT) {
        if ((a == HD_F16 && b == HD_BF16) || (a == HD_BF16 && b == HD_F16)) return HD_F32;
        return hd_dtype_size(a) >= hd_dtype_size(b) ? a : b;
    }
    if ((a == HD_I8 && b == HD_U8) || (a == HD_U8 && b == HD_I8)) return HD_I32;
    return hd_dtype_size(a) >= hd_dtype_size(b) ? a : b;
}

void hd_promo_init(hd_promo *p) {
    memset(p, 0, sizeof *p);
}

void hd_promo_add(hd_promo *p, hd_dtype dt, hd_prio prio) {
    p->dt[prio] = p->have[prio] ? hd_dtype_promote(p->dt[prio], dt) : dt;
    p->have[prio] = 1;
}

/* torch's combine_categories: the higher-priority result wins unless the
 * lower one is of a higher category, in which case they promote (a float
 * number with an int tensor gives the default float dtype, f32). */
static int hd_promo_combine(int have_hi, hd_dtype hi, int have_lo, hd_dtype lo, hd_dtype *out) {
    if (!have_hi) {
        *out = lo;
        return have_lo;
    }
    if (!have_lo || hd_dtype_infos[lo].cat <= hd_dtype_infos[hi].cat) {
        *out = hi;
        return 1;
    }
    *out = hd_dtype_promote(hi, lo);
    return 1;
}

hd_dtype hd_promo_result(const hd_promo *p) {
    hd_dtype lo = HD_F32, res = HD_F32;
    hd_dtype num = p->dt[HD_PRIO_NUMBER];
    /* A Hodu float number counts as the default float dtype, an int as i64. */
    if (p->have[HD_PRIO_NUMBER] && num == HD_F64) num = HD_F32;
    int have_lo = hd_promo_combine(p->have[HD_PRIO_ZERODIM], p->dt[HD_PRIO_ZERODIM],
                                   p->have[HD_PRIO_NUMBER], num, &lo);
    if (!hd_promo_combine(p->have[HD_PRIO_TENSOR], p->dt[HD_PRIO_TENSOR], have_lo, lo, &res))
        return HD_F32;
    return res;
}

double hd_dtype_load(hd_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case HD_F16: return hd_f16_to_f32(((const uint16_t *)p)[i]);
    case HD_BF16: return hd_bf16_to_f32(((const uint16_t *)p)[i]);
    case HD_F32: return ((const float *)p)[i];
    case HD_F64: return ((const double *)p)[i];
    case HD_I8: return ((const int8_t *)p)[i];
    case HD_U8: return ((const uint8_t *)p)[i];
    case HD_I32: return ((const int32_t *)p)[i];
    case HD_I64: return (double)((const int64_t *)p)[i];
    case HD_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

int64_t hd_dtype_load_i64(hd_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case HD_I8: return ((const int8_t *)p)[i];
    case HD_U8: return ((const uint8_t *)p)[i];
    case HD_I32: return ((const int32_t *)p)[i];
    case HD_I64: return ((const int64_t *)p)[i];
    case HD_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: {
        double v = hd_dtype_load(dt, p, i);
        if (isnan(v)) return 0;
        if (v >= 9.2233720368547758e18) return INT64_MAX;
        if (v <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)v;
    }
    }
}

/* Float to integer conversion that is defined for every input (C leaves
 * out-of-range conversions undefined): NaN -> 0, saturate at the limits. */
static int64_t hd_sat_i64(double v, double lo, double hi) {
    if (isnan(v)) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

void hd_dtype_store(hd_dtype dt, void *p, int64_t i, double v) {
    switch (dt) {
    case HD_F16: ((uint16_t *)p)[i] = hd_f32_to_f16((float)v); break;
    case HD_BF16: ((uint16_t *)p)[i] = hd_f32_to_bf16((float)v); break;
    case HD_F32: ((float *)p)[i] = (float)v; break;
    case HD_F64: ((double *)p)[i] = v; break;
    case HD_I8: ((int8_t *)p)[i] = (int8_t)hd_sat_i64(v, -128, 127); break;
    case HD_U8: ((uint8_t *)p)[i] = (uint8_t)hd_sat_i64(v, 0, 255); break;
    case HD_I32: ((int32_t *)p)[i] = (int32_t)hd_sat_i64(v, -2147483648.0, 2147483647.0); break;
    case HD_I64:
        ((int64_t *)p)[i] = isnan(v)                     ? 0
                            : v >= 9.2233720368547758e18 ? INT64_MAX
                            : v < -9.2233720368547758e18 ? INT64_MIN
                                                         : (int64_t)v;
        break;
    case HD_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}
