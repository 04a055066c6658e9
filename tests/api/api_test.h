/* The C API tests' harness: CHECK records a failure and goes on; TEST_END
 * prints "N passed, N failed" and sets the exit status. Counters are
 * atomic so that the thread test can check from every thread. Also: a
 * host allocator that counts what is outstanding and can fail on demand. */
#ifndef HODU_API_TEST_H
#define HODU_API_TEST_H

#include "hodu.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int api_test_pass, api_test_fail;

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (cond) {                                                                                \
            atomic_fetch_add(&api_test_pass, 1);                                                   \
        } else {                                                                                   \
            atomic_fetch_add(&api_test_fail, 1);                                                   \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK(cond) CHECK_MSG(cond, "%s", "")

/* A call's status, with the VM's message when it is not the one expected. */
#define CHECK_ST(vm, call, want)                                                                   \
    do {                                                                                           \
        hodu_status st_ = (call);                                                                  \
        CHECK_MSG(st_ == (want), "%s, expected %s: %s", hodu_status_name(st_),                     \
                  hodu_status_name(want), hodu_error_message(vm));                                 \
    } while (0)

#define CHECK_OK(vm, call) CHECK_ST(vm, call, HODU_OK)

/* The VM's message contains s. */
#define CHECK_ERR(vm, s)                                                                           \
    CHECK_MSG(strstr(hodu_error_message(vm), (s)) != NULL, "message lacks \"%s\": %s", (s),        \
              hodu_error_message(vm))

#define TEST_END()                                                                                 \
    do {                                                                                           \
        printf("%d passed, %d failed\n", atomic_load(&api_test_pass),                              \
               atomic_load(&api_test_fail));                                                       \
        return atomic_load(&api_test_fail) ? 1 : 0;                                                \
    } while (0)

/* ---- a counting allocator with a failure switch ---- */

typedef struct counting_alloc {
    size_t outstanding; /* bytes allocated and not freed */
    size_t peak;
    long calls;   /* allocations and growths so far */
    long fail_at; /* the call with this number fails; -1: never */
    long failures;
} counting_alloc;

static inline void counting_alloc_init(counting_alloc *a) {
    memset(a, 0, sizeof *a);
    a->fail_at = -1;
}

static inline void *counting_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    counting_alloc *a = ud;
    if (nsize == 0) {
        free(ptr);
        if (ptr) a->outstanding -= osize;
        return NULL;
    }
    /* shrinking never fails (the allocator contract, as Lua's) */
    if (nsize > (ptr ? osize : 0) && a->calls++ == a->fail_at) {
        a->failures++;
        return NULL;
    }
    void *p = realloc(ptr, nsize);
    if (!p) return NULL;
    a->outstanding = a->outstanding - (ptr ? osize : 0) + nsize;
    if (a->outstanding > a->peak) a->peak = a->outstanding;
    return p;
}

#endif
