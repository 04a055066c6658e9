/* hodu_api_handle: the handles include/hodu.h hands out.
 *
 * A hodu_vm *, hodu_tensor * or hodu_script * is not the address of
 * anything: it is a slot of one process-wide table, its kind and the
 * slot's generation, packed into a pointer-sized value with the low bit
 * set (so no real pointer is ever mistaken for one). Releasing a handle
 * bumps its slot's generation, so the same value used again (released
 * twice, or used after hodu_vm_free) no longer matches and is refused with
 * HODU_ERROR_ARGUMENT instead of reaching freed memory.
 *
 * The table grows by chunks that are never moved or freed, so looking a
 * handle up takes no lock (two atomic loads: hodu_vm_interrupt does it
 * from signal handlers); making and dropping handles take a mutex. Freed
 * slots are reused most recently freed last (a FIFO), so that a stale
 * value meets a new generation rather than the same one soon after. */
#include "hodu_api_int.h"

#include <pthread.h>
#include <stdlib.h>

#if UINTPTR_MAX > 0xffffffffu
#define HD_HANDLE_INDEX_BITS 29
#else
#define HD_HANDLE_INDEX_BITS 20
#endif
#define HD_HANDLE_GEN_SHIFT (HD_HANDLE_INDEX_BITS + 3)
#define HD_HANDLE_GEN_MASK  ((uintptr_t)-1 >> HD_HANDLE_GEN_SHIFT)
#define HD_HANDLE_CHUNK     4096
#define HD_HANDLE_CHUNKS    (((uintptr_t)1 << HD_HANDLE_INDEX_BITS) / HD_HANDLE_CHUNK)

typedef struct {
    _Atomic uintptr_t tag; /* the live handle's value; 0 when free */
    void *_Atomic obj;
    uintptr_t gen;      /* the slot's next generation (1..GEN_MASK) */
    uint32_t next_free; /* index + 1 of the next free slot; 0: none */
} hd_handle_slot;

static hd_handle_slot *_Atomic hd_handle_chunks[HD_HANDLE_CHUNKS];
static pthread_mutex_t hd_handle_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t hd_handle_used;                 /* slots handed out at least once */
static uint32_t hd_handle_head, hd_handle_tail; /* free list, index + 1 */

static hd_handle_slot *handle_slot(uintptr_t index) {
    hd_handle_slot *c =
        atomic_load_explicit(&hd_handle_chunks[index / HD_HANDLE_CHUNK], memory_order_acquire);
    return c ? &c[index % HD_HANDLE_CHUNK] : NULL;
}

/* A free slot's index (locked), or -1 when memory or the table runs out. */
static int64_t handle_take(void) {
    if (hd_handle_head) {
        uint32_t i = hd_handle_head - 1;
        hd_handle_slot *s = handle_slot(i);
        hd_handle_head = s->next_free;
        if (!hd_handle_head) hd_handle_tail = 0;
        return i;
    }
    uint32_t i = hd_handle_used;
    if ((uintptr_t)i >= (uintptr_t)HD_HANDLE_CHUNKS * HD_HANDLE_CHUNK) return -1;
    if (i % HD_HANDLE_CHUNK == 0) {
        hd_handle_slot *c = calloc(HD_HANDLE_CHUNK, sizeof *c);
        if (!c) return -1;
        for (int k = 0; k < HD_HANDLE_CHUNK; k++) c[k].gen = 1;
        atomic_store_explicit(&hd_handle_chunks[i / HD_HANDLE_CHUNK], c, memory_order_release);
    }
    hd_handle_used++;
    return i;
}

uintptr_t hd_api_handle_new(void *obj, hd_handle_kind kind) {
    pthread_mutex_lock(&hd_handle_lock);
    int64_t i = handle_take();
    uintptr_t h = 0;
    if (i >= 0) {
        hd_handle_slot *s = handle_slot((uintptr_t)i);
        h = s->gen << HD_HANDLE_GEN_SHIFT | (uintptr_t)i << 3 | (uintptr_t)kind << 1 | 1;
        s->gen = s->gen == HD_HANDLE_GEN_MASK ? 1 : s->gen + 1;
        atomic_store_explicit(&s->obj, obj, memory_order_relaxed);
        atomic_store_explicit(&s->tag, h, memory_order_release);
    }
    pthread_mutex_unlock(&hd_handle_lock);
    return h;
}

static hd_handle_slot *handle_find(uintptr_t h) {
    if (!(h & 1)) return NULL;
    hd_handle_slot *s = handle_slot(h >> 3 & (((uintptr_t)1 << HD_HANDLE_INDEX_BITS) - 1));
    if (!s || atomic_load_explicit(&s->tag, memory_order_acquire) != h) return NULL;
    return s;
}

void *hd_api_handle_get(const void *handle, hd_handle_kind kind) {
    uintptr_t h = (uintptr_t)handle;
    if ((h >> 1 & 3) != (uintptr_t)kind) return NULL;
    hd_handle_slot *s = handle_find(h);
    return s ? atomic_load_explicit(&s->obj, memory_order_relaxed) : NULL;
}

void hd_api_handle_drop(uintptr_t h) {
    pthread_mutex_lock(&hd_handle_lock);
    hd_handle_slot *s = handle_find(h);
    if (s) {
        uint32_t i = (uint32_t)(h >> 3 & (((uintptr_t)1 << HD_HANDLE_INDEX_BITS) - 1));
        atomic_store_explicit(&s->tag, 0, memory_order_release);
        atomic_store_explicit(&s->obj, NULL, memory_order_relaxed);
        s->next_free = 0;
        if (hd_handle_tail)
            handle_slot(hd_handle_tail - 1)->next_free = i + 1;
        else
            hd_handle_head = i + 1;
        hd_handle_tail = i + 1;
    }
    pthread_mutex_unlock(&hd_handle_lock);
}
