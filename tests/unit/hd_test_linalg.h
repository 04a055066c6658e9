/* Plain f64 references for the linalg ops, row-major, matrices of at most
 * LA_NMAX x LA_NMAX: Gaussian elimination with partial pivoting (det,
 * inv, solve), the Cholesky-Banachiewicz loop, cyclic Jacobi rotations
 * (eigenvalues). Shared by test_linalg.c and test_opinfo's table. */
#ifndef HD_TEST_LINALG_H
#define HD_TEST_LINALG_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LA_NMAX 8

/* det by elimination with partial pivoting; a is destroyed */
static inline double ref_det(double *a, int n) {
    double det = 1;
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[p * n + c])) p = r;
        if (p != c) {
            for (int j = 0; j < n; j++) {
                double t = a[c * n + j];
                a[c * n + j] = a[p * n + j], a[p * n + j] = t;
            }
            det = -det;
        }
        det *= a[c * n + c];
        if (a[c * n + c] == 0) return 0;
        for (int r = c + 1; r < n; r++) {
            double f = a[r * n + c] / a[c * n + c];
            for (int j = c; j < n; j++) a[r * n + j] -= f * a[c * n + j];
        }
    }
    return det;
}

/* X = A^-1 B (n x k) by Gauss-Jordan on [A | B] */
static inline void ref_solve(const double *a0, const double *b0, double *x, int n, int k) {
    double m[LA_NMAX][2 * LA_NMAX];
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) m[i][j] = a0[i * n + j];
        for (int j = 0; j < k; j++) m[i][n + j] = b0[i * k + j];
    }
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(m[r][c]) > fabs(m[p][c])) p = r;
        for (int j = 0; j < n + k; j++) {
            double t = m[c][j];
            m[c][j] = m[p][j], m[p][j] = t;
        }
        for (int r = 0; r < n; r++) {
            if (r == c) continue;
            double f = m[r][c] / m[c][c];
            for (int j = 0; j < n + k; j++) m[r][j] -= f * m[c][j];
        }
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < k; j++) x[i * k + j] = m[i][n + j] / m[i][i];
}

static inline void ref_cholesky(const double *a, double *l, int n) {
    memset(l, 0, sizeof(double) * (size_t)(n * n));
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = a[i * n + j];
            for (int p = 0; p < j; p++) s -= l[i * n + p] * l[j * n + p];
            l[i * n + j] = i == j ? sqrt(s) : s / l[j * n + j];
        }
}

static inline int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* the eigenvalues of symmetric a, ascending, by cyclic Jacobi rotations */
static inline void ref_eigvals(const double *a0, double *w, int n) {
    double a[LA_NMAX * LA_NMAX];
    memcpy(a, a0, sizeof(double) * (size_t)(n * n));
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) off += a[p * n + q] * a[p * n + q];
        if (off < 1e-30) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                if (a[p * n + q] == 0) continue;
                double th = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
                double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    double kp = a[k * n + p], kq = a[k * n + q];
                    a[k * n + p] = c * kp - s * kq, a[k * n + q] = s * kp + c * kq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    double pk = a[p * n + k], qk = a[q * n + k];
                    a[p * n + k] = c * pk - s * qk, a[q * n + k] = s * pk + c * qk;
                }
            }
    }
    for (int i = 0; i < n; i++) w[i] = a[i * n + i];
    qsort(w, (size_t)n, sizeof *w, cmp_double);
}

#endif
