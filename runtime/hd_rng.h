/* hd_rng: Philox4x32-10 counter-based random numbers.
 *
 * A stream is (key = ctx->rng_seed, counter). A draw of n values reserves
 * ceil(n / 2) counter blocks starting at ctx->rng_offset. Element i uses
 * block base + i / 2: uniforms take the 64-bit word made of lanes
 * 2*(i%2) and 2*(i%2)+1 (top 24 bits for f32, top 53 for f64); normals take
 * the block's two 64-bit words as u1, u2 of Box-Muller and element i is
 * r*cos(t) when i is even, r*sin(t) when odd. So element i depends only on
 * (key, base, i): any device produces it independently, and every backend
 * gives the same numbers for the same seed.
 */
#ifndef HD_RNG_H
#define HD_RNG_H

#include "hd_base.h"

/* One Philox4x32-10 block: 4 random words for (key, counter). */
void hd_philox4x32(uint64_t key, uint64_t counter, uint32_t out[4]);

/* Set the seed and rewind the stream (manual_seed). */
void hd_rng_seed(hd_ctx *ctx, uint64_t seed);

/* Reserve the counter blocks for a draw of n values; returns the first
 * block. Draws are laid out so element i only depends on (key, base, i). */
uint64_t hd_rng_reserve(hd_ctx *ctx, int64_t n);

/* Uniform in [0, 1) from element i of the draw starting at block base:
 * 24 random bits for f32 precision, 53 for f64. */
float hd_rng_uniform_f32(uint64_t key, uint64_t base, int64_t i);
double hd_rng_uniform_f64(uint64_t key, uint64_t base, int64_t i);
/* Standard normal for element i (Box-Muller over a pair of uniforms from
 * the same block: elements 2j and 2j+1 share lanes). */
float hd_rng_normal_f32(uint64_t key, uint64_t base, int64_t i);
double hd_rng_normal_f64(uint64_t key, uint64_t base, int64_t i);

/* Elements 2j and 2j+1 of a draw come from one Philox block: these give
 * both at the cost of one (the same values as the functions above). */
void hd_rng_uniform_pair_f32(uint64_t key, uint64_t base, int64_t j, float out[2]);
void hd_rng_uniform_pair_f64(uint64_t key, uint64_t base, int64_t j, double out[2]);
void hd_rng_normal_pair_f64(uint64_t key, uint64_t base, int64_t j, double out[2]);

#endif
