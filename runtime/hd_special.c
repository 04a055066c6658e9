/* lgamma and polygamma for the cpu kernels and llvm code (hd_special.h). */
#define _GNU_SOURCE /* lgamma_r: no write to the global signgam from threads */
#include "hd_special.h"

#include <math.h>

static inline double sp_inf(void) {
    return INFINITY;
}
static inline double sp_nan(void) {
    return NAN;
}

HD_SPECIAL_CODE(static)

double hd_lgamma(double x) {
    int sign;
    return lgamma_r(x, &sign);
}

float hd_lgammaf(float x) {
    int sign;
    return lgammaf_r(x, &sign);
}

double hd_polygamma(double n, double x) {
    return hd_sp_polygamma(n, x);
}

float hd_polygammaf(float n, float x) {
    return (float)hd_sp_polygamma((double)n, (double)x);
}
