/* sim_harness.h: what every deterministic simulation shares: the run-wide state a
 * failure report needs, the failure report itself (seed, step and the command that
 * replays it), CHECK and the verbose log, a counting allocator that must balance,
 * and the command line (--seed S, --seeds N, --steps M, --verbose, $WK_SIM_STEPS).
 *
 * A simulation sets g_run.name once, calls sim_parse_args, then for each seed of the
 * plan calls sim_begin_seed, numbers its steps in g_run.step, sets g_run.in_drain
 * when the random steps are over, and fails with CHECK or sim_fail. A failure
 * prints, on stderr:
 *
 *   NAME: FAILED seed=S step=K: what went wrong
 *   NAME: replay: NAME --seed S --steps K --verbose
 *
 * and exits 1; the replay runs that seed alone and stops its random steps at K (at
 * the seed's full step count when the failure came after them). */
#ifndef SIM_HARNESS_H
#define SIM_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/wk_alloc.h"

/* ---- run-wide state: what a failure report needs ------------------------------ */

typedef struct sim_run {
  const char *name;    /* the program, as printed in reports ("sim_core") */
  uint64_t seed;       /* seed being run */
  uint64_t step;       /* step being executed, 1-based; 0 before the first */
  uint64_t seed_steps; /* random steps per seed of this run */
  bool in_drain;       /* past the random steps: replay needs the full step count */
  bool verbose;        /* --verbose: vlog prints */
} sim_run;

/** The one run of this process; the simulation writes step and in_drain. */
extern sim_run g_run;

/** Reports a failure of g_run's seed and step with the command that replays it, on
 *  stderr after flushing stdout, and exits 1. */
__attribute__((format(printf, 1, 2), noreturn)) void sim_fail(const char *fmt, ...);

/** Fails the run (sim_fail) with a printf-style message unless `cond` holds. */
#define CHECK(cond, ...)                \
  do {                                  \
    if (!(cond)) sim_fail(__VA_ARGS__); \
  } while (0)

/** printf to stdout when --verbose was given; nothing otherwise. */
__attribute__((format(printf, 1, 2))) void vlog(const char *fmt, ...);

/** Starts a seed: sets g_run.seed, step 0, not draining. */
void sim_begin_seed(uint64_t seed);

/* ---- counting allocator: sizes must match, everything must come back ------------ */

typedef struct sim_alloc {
  uint64_t live_bytes;
  uint64_t allocs, frees;
} sim_alloc;

/** A wk_allocator counting into `a` (owned by the caller, zeroed first). Every free
 *  must name the size of its allocation (else sim_fail); after the owner is
 *  destroyed, live_bytes must be 0 and allocs == frees. */
wk_allocator sim_allocator(sim_alloc *a);

/* ---- PRNG: splitmix64, the simulations' own (never the C library's) ------------- */

typedef struct prng {
  uint64_t s;
} prng;

static inline uint64_t prng_u64(prng *r) {
  uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/** Uniform in [0, n); n > 0. */
static inline uint32_t prng_below(prng *r, uint32_t n) {
  return (uint32_t)(((prng_u64(r) >> 32) * (uint64_t)n) >> 32);
}

static inline bool prng_pct(prng *r, uint32_t pct) { return prng_below(r, 100) < pct; }

/* ---- the command line ------------------------------------------------------------ */

/** What to run: seeds first_seed .. first_seed + seeds - 1, `steps` random steps each. */
typedef struct sim_plan {
  uint64_t first_seed; /* --seed, default 1 */
  uint64_t seeds;      /* --seeds; 1 with --seed alone; else ceil(total / steps) */
  uint64_t steps;      /* --steps, default default_seed_steps */
} sim_plan;

/** Handles one simulation-specific argument at argv[*i] (advancing *i past any value
 *  it takes); returns false for an argument it does not know. */
typedef bool (*sim_extra_arg_fn)(int argc, char **argv, int *i);

/** Parses --seed S, --seeds N, --steps M and --verbose (and, through `extra` when not
 *  NULL, the simulation's own arguments) into `plan` and g_run. Without --seed or
 *  --seeds the run totals $WK_SIM_STEPS steps (default `default_total_steps`).
 *  Sets g_run.seed_steps. On a bad argument prints `usage` (one or more lines,
 *  without the trailing newline) on stderr and exits 2. */
void sim_parse_args(int argc, char **argv, uint64_t default_total_steps,
                    uint64_t default_seed_steps, const char *usage, sim_extra_arg_fn extra,
                    sim_plan *plan);

/** Parses a decimal u64 or prints "NAME: bad WHAT 'S'" and exits 2. */
uint64_t sim_parse_u64(const char *s, const char *what);

/** Monotonic seconds, for the run's own timing report only (never for the model). */
double sim_mono_s(void);

#endif
