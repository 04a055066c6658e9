/* libFuzzer target for whole Hodu programs run through the public API
 * (include/hodu.h) under tight limits: a VM with a small memory_limit,
 * max_steps, no file access, and a watchdog thread that interrupts a run
 * after FUZZ_PROG_INTERRUPT_MS. Findings, besides crashes and sanitizer
 * reports: a status outside hodu_status or without a message; memory held
 * through the VM's allocator past memory_limit or after hodu_vm_free; a
 * run that outlives its interrupt by far (FUZZ_PROG_SLOW_MS); a VM that
 * cannot run a small program after the fuzzed one failed. */
#include <execinfo.h>
#include <pthread.h>
#include <sanitizer/common_interface_defs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hodu.h"

#define FUZZ_PROG_MEMORY       ((size_t)8 << 20)
#define FUZZ_PROG_STEPS        20000
#define FUZZ_PROG_INTERRUPT_MS 200
#define FUZZ_PROG_SLOW_MS      5000

static void fuzz_fail(const char *what, long long value) {
    fprintf(stderr, "fuzz_program: %s (%lld)\n", what, value);
    abort();
}

/* ---- the allocator: counts what the VM holds ---- */

typedef struct {
    size_t live, peak;
} fuzz_prog_mem;

/* HODU_FUZZ_TRACK set: every live block with the stack that made it, so
 * that bytes left after hodu_vm_free can be traced to their allocation
 * (slow: a linear search at each free). */
#define FUZZ_PROG_FRAMES 14
typedef struct {
    void *p;
    size_t n;
    void *frames[FUZZ_PROG_FRAMES];
    int nframes;
} fuzz_prog_block;

static int fuzz_prog_track;
static fuzz_prog_block *fuzz_prog_blocks;
static size_t fuzz_prog_nblocks, fuzz_prog_capblocks;

static void fuzz_prog_untrack(void *p) {
    for (size_t i = 0; i < fuzz_prog_nblocks; i++)
        if (fuzz_prog_blocks[i].p == p) {
            fuzz_prog_blocks[i] = fuzz_prog_blocks[--fuzz_prog_nblocks];
            return;
        }
}

static void fuzz_prog_record(void *p, size_t n) {
    if (fuzz_prog_nblocks == fuzz_prog_capblocks) {
        fuzz_prog_capblocks = fuzz_prog_capblocks ? 2 * fuzz_prog_capblocks : 1024;
        fuzz_prog_blocks =
            realloc(fuzz_prog_blocks, fuzz_prog_capblocks * sizeof *fuzz_prog_blocks);
        if (!fuzz_prog_blocks) abort();
    }
    fuzz_prog_block *b = &fuzz_prog_blocks[fuzz_prog_nblocks++];
    b->p = p;
    b->n = n;
    b->nframes = backtrace(b->frames, FUZZ_PROG_FRAMES);
}

static void fuzz_prog_print_blocks(void) {
    for (size_t i = 0; i < fuzz_prog_nblocks; i++) {
        fprintf(stderr, "fuzz_program: %zu bytes left, allocated at:\n", fuzz_prog_blocks[i].n);
        for (int k = 1; k < fuzz_prog_blocks[i].nframes; k++) {
            char buf[512];
            __sanitizer_symbolize_pc(fuzz_prog_blocks[i].frames[k], "    %p %F %L", buf,
                                     sizeof buf);
            fprintf(stderr, "%s\n", buf);
        }
    }
}

/* Each block carries its size in a 16-byte header (malloc's alignment kept),
 * so a block given back with another size than it was allocated with is
 * caught where it happens. */
#define FUZZ_PROG_HEADER 16

static void *fuzz_prog_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    fuzz_prog_mem *m = ud;
    unsigned char *blk = ptr ? (unsigned char *)ptr - FUZZ_PROG_HEADER : NULL;
    if (blk) {
        size_t had;
        memcpy(&had, blk, sizeof had);
        if (had != osize)
            fuzz_fail("block given back with another size; allocated", (long long)had);
    }
    if (fuzz_prog_track && ptr) fuzz_prog_untrack(ptr);
    if (nsize == 0) {
        free(blk);
        m->live -= ptr ? osize : 0;
        return NULL;
    }
    unsigned char *q =
        nsize <= SIZE_MAX - FUZZ_PROG_HEADER ? realloc(blk, nsize + FUZZ_PROG_HEADER) : NULL;
    if (fuzz_prog_track && (q || ptr))
        fuzz_prog_record(q ? q + FUZZ_PROG_HEADER : ptr, q ? nsize : osize);
    if (!q) return NULL;
    memcpy(q, &nsize, sizeof nsize);
    m->live = m->live - (ptr ? osize : 0) + nsize;
    if (m->live > m->peak) m->peak = m->live;
    if (m->live > FUZZ_PROG_MEMORY) fuzz_fail("VM memory passed memory_limit", (long long)m->live);
    return q + FUZZ_PROG_HEADER;
}

static void fuzz_prog_write(void *ud, const char *s, size_t n) {
    (void)ud;
    (void)s;
    (void)n;
}

/* ---- the watchdog: interrupts the running VM after its deadline ---- */

static pthread_mutex_t fuzz_prog_lock = PTHREAD_MUTEX_INITIALIZER;
static hodu_vm *fuzz_prog_running;
static int64_t fuzz_prog_deadline;

static int64_t fuzz_prog_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *fuzz_prog_watchdog(void *arg) {
    (void)arg;
    const struct timespec tick = {0, 5 * 1000000};
    for (;;) {
        nanosleep(&tick, NULL);
        pthread_mutex_lock(&fuzz_prog_lock);
        if (fuzz_prog_running && fuzz_prog_now_ms() > fuzz_prog_deadline)
            hodu_vm_interrupt(fuzz_prog_running);
        pthread_mutex_unlock(&fuzz_prog_lock);
    }
    return NULL;
}

static void fuzz_prog_watch(hodu_vm *vm) {
    pthread_mutex_lock(&fuzz_prog_lock);
    fuzz_prog_running = vm;
    fuzz_prog_deadline = fuzz_prog_now_ms() + FUZZ_PROG_INTERRUPT_MS;
    pthread_mutex_unlock(&fuzz_prog_lock);
}

/* ---- one run ---- */

static int fuzz_prog_verbose; /* HODU_FUZZ_VERBOSE set: print each status */

/* hodu_eval under the watchdog; checks the status and its message. */
static hodu_status fuzz_prog_eval(hodu_vm *vm, const char *src) {
    int64_t t0 = fuzz_prog_now_ms();
    fuzz_prog_watch(vm);
    hodu_status st = hodu_eval(vm, src, "fuzz.hodu");
    fuzz_prog_watch(NULL);
    int64_t ms = fuzz_prog_now_ms() - t0;
    if (ms > FUZZ_PROG_SLOW_MS) fuzz_fail("run outlived its interrupt, ms", ms);
    if (st < HODU_OK || st > HODU_ERROR_ARGUMENT) fuzz_fail("unknown status", st);
    if (hodu_error_status(vm) != st) fuzz_fail("hodu_error_status disagrees", st);
    const char *msg = hodu_error_message(vm);
    if (st != HODU_OK && !(msg && msg[0])) fuzz_fail("error without a message", st);
    if (fuzz_prog_verbose)
        fprintf(stderr, "%s after %lld ms: %s\n", hodu_status_name(st), (long long)ms, msg);
    return st;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_prog_verbose = getenv("HODU_FUZZ_VERBOSE") != NULL;
    fuzz_prog_track = getenv("HODU_FUZZ_TRACK") != NULL;
    pthread_t t;
    if (pthread_create(&t, NULL, fuzz_prog_watchdog, NULL) == 0) pthread_detach(t);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    fuzz_prog_mem mem = {0, 0};
    hodu_options opts;
    memset(&opts, 0, sizeof opts);
    opts.memory_limit = FUZZ_PROG_MEMORY;
    opts.max_steps = FUZZ_PROG_STEPS;
    opts.allow_io = 0;
    opts.alloc = fuzz_prog_alloc;
    opts.alloc_ud = &mem;
    opts.write = fuzz_prog_write;
    opts.num_threads = 1;
    opts.stdlib_path = HODU_FUZZ_STDLIB;
    hodu_vm *vm = hodu_vm_new(&opts);
    if (!vm) fuzz_fail("hodu_vm_new failed", 0);
    hodu_status st = fuzz_prog_eval(vm, src);
    if (st != HODU_OK) {
        hodu_status again = fuzz_prog_eval(vm, "let __fuzz_after = [1, 2, 3]\n");
        if (again != HODU_OK && again != HODU_ERROR_MEMORY)
            fuzz_fail("VM unusable after an error", again);
    }
    hodu_vm_free(vm);
    if (mem.live != 0) {
        fuzz_prog_print_blocks();
        fuzz_fail("bytes left after hodu_vm_free", (long long)mem.live);
    }
    fuzz_prog_nblocks = 0;
    free(src);
    return 0;
}
