/* sim_harness.c: the fail/replay prelude every simulation shares (sim_harness.h). */
#define _POSIX_C_SOURCE 200809L

#include "sim_harness.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

sim_run g_run = {.name = "sim"};

void sim_fail(const char *fmt, ...) {
  fflush(stdout);
  fprintf(stderr, "%s: FAILED seed=%" PRIu64 " step=%" PRIu64 ": ", g_run.name, g_run.seed,
          g_run.step);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  uint64_t steps = g_run.in_drain ? g_run.seed_steps : g_run.step;
  fprintf(stderr, "\n%s: replay: %s --seed %" PRIu64 " --steps %" PRIu64 " --verbose\n", g_run.name,
          g_run.name, g_run.seed, steps);
  exit(1);
}

void vlog(const char *fmt, ...) {
  if (!g_run.verbose) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
}

void sim_begin_seed(uint64_t seed) {
  g_run.seed = seed;
  g_run.step = 0;
  g_run.in_drain = false;
}

/* ---- counting allocator ------------------------------------------------------------ */

/* Each block carries its size in front, so a free naming another size is caught. */
typedef union alloc_hdr {
  size_t size;
  max_align_t align;
} alloc_hdr;

static void *sim_alloc_fn(void *ud, size_t size) {
  sim_alloc *a = ud;
  alloc_hdr *h = malloc(sizeof *h + size);
  if (!h) return NULL;
  h->size = size;
  a->live_bytes += size;
  a->allocs++;
  return h + 1;
}

static void sim_free_fn(void *ud, void *ptr, size_t size) {
  sim_alloc *a = ud;
  alloc_hdr *h = (alloc_hdr *)ptr - 1;
  CHECK(h->size == size, "freed %zu bytes with size %zu", h->size, size);
  CHECK(a->live_bytes >= size, "allocator: more bytes freed than allocated");
  a->live_bytes -= size;
  a->frees++;
  free(h);
}

wk_allocator sim_allocator(sim_alloc *a) { return (wk_allocator){sim_alloc_fn, sim_free_fn, a}; }

/* ---- the command line ------------------------------------------------------------ */

uint64_t sim_parse_u64(const char *s, const char *what) {
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (!s[0] || !end || *end) {
    fprintf(stderr, "%s: bad %s '%s'\n", g_run.name, what, s);
    exit(2);
  }
  return (uint64_t)v;
}

void sim_parse_args(int argc, char **argv, uint64_t default_total_steps,
                    uint64_t default_seed_steps, const char *usage, sim_extra_arg_fn extra,
                    sim_plan *plan) {
  uint64_t seed = 1, seeds = 0, steps = default_seed_steps;
  bool seed_given = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
      seed = sim_parse_u64(argv[++i], "seed");
      seed_given = true;
    } else if (!strcmp(argv[i], "--seeds") && i + 1 < argc) {
      seeds = sim_parse_u64(argv[++i], "seed count");
    } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = sim_parse_u64(argv[++i], "steps");
    } else if (!strcmp(argv[i], "--verbose")) {
      g_run.verbose = true;
    } else if (!extra || !extra(argc, argv, &i)) {
      fprintf(stderr, "%s\n", usage);
      exit(2);
    }
  }
  if (seeds == 0) {
    if (seed_given) {
      seeds = 1;
    } else {
      uint64_t total = default_total_steps;
      const char *env = getenv("WK_SIM_STEPS");
      if (env && env[0]) total = sim_parse_u64(env, "WK_SIM_STEPS");
      seeds = steps ? (total + steps - 1) / steps : 1;
      if (seeds == 0) seeds = 1;
    }
  }
  plan->first_seed = seed;
  plan->seeds = seeds;
  plan->steps = steps;
  g_run.seed_steps = steps;
}

double sim_mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
