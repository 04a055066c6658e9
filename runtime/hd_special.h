/* Special functions the elementwise ops lgamma and polygamma (digamma is
 * polygamma(0, x)) compute, the same on the cpu and in llvm code (which
 * calls these), and the same algorithm on cuda: HD_SPECIAL_CODE is also
 * the text of the CUDA prelude's copy (cuda_prelude.h), so the two cannot
 * drift apart. Each needs sp_inf() and sp_nan() from the side that
 * expands it.
 *
 * digamma: the reflection psi(x) = psi(1 - x) - pi / tan(pi x) below 0,
 * the recurrence psi(x) = psi(x + 1) - 1 / x up to 10, then the
 * asymptotic series to x^-14 (error below 1e-16 there). polygamma(n, x),
 * n >= 1: (-1)^(n+1) n! zeta(n + 1, x), with the Hurwitz zeta function by
 * Euler-Maclaurin summation (as Cephes' zeta); NaN below -1e5, where the
 * shift would take too long. Poles: digamma(0) = -inf, NaN at negative
 * integers; polygamma(n, x) at 0 and negative integers is inf (as
 * PyTorch). */
#ifndef HD_SPECIAL_H
#define HD_SPECIAL_H

#define HD_SPECIAL_CODE(Q)                                                                         \
    Q double hd_sp_digamma(double x) {                                                             \
        double r = 0;                                                                              \
        if (x != x || x == -sp_inf()) return sp_nan();                                             \
        if (x == 0) return -sp_inf();                                                              \
        if (x < 0) {                                                                               \
            if (x == floor(x)) return sp_nan();                                                    \
            r = -3.14159265358979323846 / tan(3.14159265358979323846 * x);                         \
            x = 1 - x;                                                                             \
        }                                                                                          \
        while (x < 10) {                                                                           \
            r -= 1 / x;                                                                            \
            x += 1;                                                                                \
        }                                                                                          \
        double f = 1 / (x * x);                                                                    \
        double t =                                                                                 \
            f * (-1.0 / 12 +                                                                       \
                 f * (1.0 / 120 +                                                                  \
                      f * (-1.0 / 252 +                                                            \
                           f * (1.0 / 240 + f * (-1.0 / 132 + f * (691.0 / 32760 - f / 12))))));   \
        return r + log(x) - 0.5 / x + t;                                                           \
    }                                                                                              \
    Q double hd_sp_zeta(double s, double q) {                                                      \
        const double A[12] = {12.0,                                                                \
                              -720.0,                                                              \
                              30240.0,                                                             \
                              -1209600.0,                                                          \
                              47900160.0,                                                          \
                              -1.8924375803183791606e9,                                            \
                              7.47242496e10,                                                       \
                              -2.950130727918164224e12,                                            \
                              1.1646782814350067249e14,                                            \
                              -4.5979787224074726105e15,                                           \
                              1.8152105401943546773e17,                                            \
                              -7.1661652561756670113e18};                                          \
        if (q != q) return sp_nan();                                                               \
        if (q == sp_inf()) return 0;                                                               \
        if (q <= 0 && q == floor(q)) return sp_inf();                                              \
        if (q < -1e5) return sp_nan();                                                             \
        double a = q, b = 0, sum = pow(q, -s), w, k = 0, fac = 1, t;                               \
        int i = 0;                                                                                 \
        while (i < 9 || a <= 9) {                                                                  \
            i++;                                                                                   \
            a += 1;                                                                                \
            b = pow(a, -s);                                                                        \
            sum += b;                                                                              \
            if (fabs(b / sum) < 1.1102230246251565e-16) return sum;                                \
        }                                                                                          \
        w = a;                                                                                     \
        sum += b * w / (s - 1) - 0.5 * b;                                                          \
        for (i = 0; i < 12; i++) {                                                                 \
            fac *= s + k;                                                                          \
            b /= w;                                                                                \
            t = fac * b / A[i];                                                                    \
            sum += t;                                                                              \
            if (fabs(t / sum) < 1.1102230246251565e-16) break;                                     \
            k += 1;                                                                                \
            fac *= s + k;                                                                          \
            b /= w;                                                                                \
            k += 1;                                                                                \
        }                                                                                          \
        return sum;                                                                                \
    }                                                                                              \
    Q double hd_sp_polygamma(double n, double x) {                                                 \
        if (n == 0) return hd_sp_digamma(x);                                                       \
        double f = tgamma(n + 1) * hd_sp_zeta(n + 1, x);                                           \
        return fmod(n, 2.0) != 0 ? f : -f;                                                         \
    }

/* What the cpu kernels and llvm code call (hd_special.c). n: a whole
 * number >= 0, as the op's scalar[0]. */
double hd_lgamma(double x);
float hd_lgammaf(float x);
double hd_polygamma(double n, double x);
float hd_polygammaf(float n, float x);

#endif
