/* wk_admission.h: admission under memory pressure. The setting admission_memory_floor
 * ("0" = off, a byte count such as 512MiB, or a percentage of the memory the worker may
 * use, such as 10%) is the least memory that must stay available for the worker to take
 * new tasks. The app samples the memory (adapters/wk_meminfo.h) on a timer, decides
 * here with hysteresis, and tells WorkerCore, which refuses new slots while paused
 * (RESOURCE_EXHAUSTED naming the reason). Pure: no I/O. */
#ifndef WK_ADMISSION_H
#define WK_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct wk_mem_floor {
  uint64_t bytes;   /* a fixed floor (0 with a percentage, or when off) */
  uint32_t percent; /* of the total the worker may use (0 = `bytes`) */
} wk_mem_floor;

/** Parses admission_memory_floor: "0" or "" (off), a byte count with an optional unit
 * (4096, 64KiB, 512MiB, 2GiB), or "N%" with N from 1 to 99. Returns 0, or -1 with the
 * reason in `err`. */
int wk_mem_floor_parse(const char *text, wk_mem_floor *out, char *err, size_t err_len);

/** The floor in bytes when the worker may use `total` bytes (0 = off). */
uint64_t wk_mem_floor_bytes(const wk_mem_floor *floor, uint64_t total);

/** Whether admission is to be paused, given whether it is now: it pauses when
 * `available` is under `floor` and resumes only once `available` is back at the floor
 * plus an eighth (hysteresis, so a worker near the floor does not flap). Never paused
 * when floor is 0. */
bool wk_mem_pressure_paused(bool paused, uint64_t available, uint64_t floor);

#endif
