/* wk_malloc_policy.h: glibc's heap kept warm under load.
 *
 * By default glibc gives the top of its heap back to the system whenever more than
 * 128 KiB of it is free, and serves each block of 128 KiB or more (until its dynamic
 * threshold has grown) with an mmap of its own, unmapped again on free. A process that
 * allocates and frees payload-sized buffers for every request therefore returns pages
 * and takes them back again and again: a page fault per 4 KiB each time (expensive
 * under virtualised paging), and with several threads a TLB shootdown per return.
 * Measured on the project's VM, 64 KiB echo tasks: the load generator's CPU per task
 * 340-420 -> 110-127 us, the worker's 310-515 -> 255-260 us once its retained results
 * were at their bound (docs/perf-history.md, fifteenth session).
 *
 * With the policy the heap keeps up to `trim_bytes` free at its top and blocks below
 * `mmap_bytes` come from the heap; the program returns memory itself when its load
 * falls (the worker: malloc_trim from lib/wk_trim.h's decisions). */
#ifndef WK_MALLOC_POLICY_H
#define WK_MALLOC_POLICY_H

#include <stdbool.h>
#include <stddef.h>

/* The worker's and the load generator's settings: payloads up to 1 MiB on the heap;
 * up to 16 MiB free kept at the top of each arena between trims. */
#define WK_MALLOC_MMAP_BYTES ((size_t)1 << 20)
#define WK_MALLOC_TRIM_BYTES ((size_t)16 << 20)

/** Sets glibc's mmap threshold to `mmap_bytes` and its trim threshold to `trim_bytes`
 * (mallopt), unless the environment sets glibc's malloc itself (a glibc.malloc tunable
 * in GLIBC_TUNABLES, MALLOC_TRIM_THRESHOLD_ or MALLOC_MMAP_THRESHOLD_): then the
 * operator's choice stands and nothing changes. True when it set both. Call once,
 * at start, before other threads allocate. */
bool wk_malloc_keep_warm(size_t mmap_bytes, size_t trim_bytes);

#endif
