/* A tiny test harness: CHECK records a failure and goes on; each test file
 * ends with TEST_END(), which prints "N passed, N failed" and sets the exit
 * status. */
#ifndef HD_TEST_H
#define HD_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The counts. A test made of several files defines HD_TEST_PART in each
 * file but the one with main, and they all count in that one's. */
#ifdef HD_TEST_PART
extern int hd_test_pass, hd_test_fail;
#else
int hd_test_pass, hd_test_fail;
#endif

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            hd_test_pass++;                                                                        \
        } else {                                                                                   \
            hd_test_fail++;                                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (cond) {                                                                                \
            hd_test_pass++;                                                                        \
        } else {                                                                                   \
            hd_test_fail++;                                                                        \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* |a - b| <= atol + rtol * |b|, NaNs equal to NaNs, infinities exact. */
static inline int hd_test_close(double a, double b, double rtol, double atol) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    return fabs(a - b) <= atol + rtol * fabs(b);
}

#define CHECK_CLOSE(a, b, rtol, atol)                                                              \
    CHECK_MSG(hd_test_close((a), (b), (rtol), (atol)), "%.10g vs %.10g", (double)(a), (double)(b))

#define TEST_END()                                                                                 \
    do {                                                                                           \
        printf("%d passed, %d failed\n", hd_test_pass, hd_test_fail);                              \
        return hd_test_fail ? 1 : 0;                                                               \
    } while (0)

/* The main of a test this build cannot run: ctest counts exit status 77
 * as skipped. */
#define TEST_SKIPPED_MAIN(why)                                                                     \
    int main(void) {                                                                               \
        (void)hd_test_pass;                                                                        \
        (void)hd_test_fail;                                                                        \
        printf("SKIPPED: %s\n", why);                                                              \
        return 77;                                                                                 \
    }

#endif
