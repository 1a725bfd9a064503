/* wk_freelist.h: a bounded free list of same-size objects, for the records the loop
 * makes and drops once per task or call (task runtimes, deferred steps, attempts): an
 * object given back is kept for the next allocation instead of going back to malloc,
 * up to `max` objects (the rest are freed), so at most max * size bytes are held beyond
 * what is live, and a burst's memory returns to malloc as before.
 *
 * Single-threaded: one list per owner, used from one thread. Under AddressSanitizer a
 * kept object is poisoned: a use after wk_freelist_put is reported (use-after-poison)
 * as a use after free() would be. LeakSanitizer sees kept objects through the list:
 * wk_freelist_drain frees them. */
#ifndef WK_FREELIST_H
#define WK_FREELIST_H

#include <stddef.h>
#include <stdint.h>

typedef struct wk_freelist {
  void *head;      /* kept objects, each holding the next one's address at its start */
  size_t size;     /* bytes of one object (at least a pointer) */
  uint32_t count;  /* kept now */
  uint32_t max;    /* kept at most */
  uint64_t reused; /* allocations served from the list (for tests and figures) */
} wk_freelist;

/** An empty list of objects of `size` bytes keeping at most `max` of them (0: none, every
 * allocation goes to malloc). */
void wk_freelist_init(wk_freelist *f, size_t size, uint32_t max);

/** A zeroed object of f->size bytes: a kept one, or a new one (aborts when out of
 * memory). Give it back with wk_freelist_put (or free() it). */
void *wk_freelist_calloc(wk_freelist *f);

/** As wk_freelist_calloc, but the object's bytes are left as they are (uninitialised):
 * for an owner that sets every field itself. */
void *wk_freelist_take(wk_freelist *f);

/** Gives back an object of f->size bytes (from wk_freelist_calloc, or any malloc'ed
 * block of that size): kept when fewer than f->max are, else freed. NULL is a no-op.
 * The object must not be used afterwards. */
void wk_freelist_put(wk_freelist *f, void *p);

/** Frees every kept object; the list stays usable. */
void wk_freelist_drain(wk_freelist *f);

#endif
