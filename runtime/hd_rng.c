#include "hd_rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void philox_round(uint32_t c[4], uint32_t k0, uint32_t k1) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c[0] = hi1 ^ c[1] ^ k0;
    c[1] = lo1;
    c[2] = hi0 ^ c[3] ^ k1;
    c[3] = lo0;
}

/* The 128-bit counter is (counter, 0): 2^64 blocks per key is plenty. */
void hd_philox4x32(uint64_t key, uint64_t counter, uint32_t out[4]) {
    uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        philox_round(c, k0, k1);
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

void hd_rng_seed(hd_ctx *ctx, uint64_t seed) {
    ctx->rng_seed = seed;
    ctx->rng_offset = 0;
}

uint64_t hd_rng_reserve(hd_ctx *ctx, int64_t n) {
    uint64_t base = ctx->rng_offset;
    ctx->rng_offset += n > 0 ? ((uint64_t)n + 1) / 2 : 0;
    return base;
}

static inline uint64_t rng_word(uint64_t key, uint64_t base, int64_t i) {
    uint32_t w[4];
    hd_philox4x32(key, base + (uint64_t)(i / 2), w);
    int lane = (int)(i % 2) * 2;
    return ((uint64_t)w[lane] << 32) | w[lane + 1];
}

float hd_rng_uniform_f32(uint64_t key, uint64_t base, int64_t i) {
    return (float)(rng_word(key, base, i) >> 40) * (1.0f / 16777216.0f);
}

double hd_rng_uniform_f64(uint64_t key, uint64_t base, int64_t i) {
    return (double)(rng_word(key, base, i) >> 11) * (1.0 / 9007199254740992.0);
}

/* Box-Muller over the block's two 64-bit words; u1 in (0, 1] so log(u1)
 * is finite. */
void hd_rng_normal_pair_f64(uint64_t key, uint64_t base, int64_t j, double out[2]) {
    uint32_t w[4];
    hd_philox4x32(key, base + (uint64_t)j, w);
    uint64_t a = ((uint64_t)w[0] << 32) | w[1], b = ((uint64_t)w[2] << 32) | w[3];
    double u1 = ((double)(a >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);
    double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
    out[0] = r * cos(t);
    out[1] = r * sin(t);
}

double hd_rng_normal_f64(uint64_t key, uint64_t base, int64_t i) {
    double z[2];
    hd_rng_normal_pair_f64(key, base, i / 2, z);
    return z[i % 2];
}

void hd_rng_uniform_pair_f32(uint64_t key, uint64_t base, int64_t j, float out[2]) {
    uint32_t w[4];
    hd_philox4x32(key, base + (uint64_t)j, w);
    out[0] = (float)(w[0] >> 8) * (1.0f / 16777216.0f);
    out[1] = (float)(w[2] >> 8) * (1.0f / 16777216.0f);
}

void hd_rng_uniform_pair_f64(uint64_t key, uint64_t base, int64_t j, double out[2]) {
    uint32_t w[4];
    hd_philox4x32(key, base + (uint64_t)j, w);
    out[0] = (double)((((uint64_t)w[0] << 32) | w[1]) >> 11) * (1.0 / 9007199254740992.0);
    out[1] = (double)((((uint64_t)w[2] << 32) | w[3]) >> 11) * (1.0 / 9007199254740992.0);
}

float hd_rng_normal_f32(uint64_t key, uint64_t base, int64_t i) {
    return (float)hd_rng_normal_f64(key, base, i);
}
