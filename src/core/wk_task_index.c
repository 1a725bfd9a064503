/* wk_task_index.c: the task index, an open-addressing hash table from task id to
 * task record. Linear probing keeps lookups in one or two cache lines; deletion
 * shifts entries back instead of leaving tombstones, so churn never degrades it. */
#include <string.h>

#include "core/wk_core_int.h"
#include "lib/wk_assert.h"

/* The record of an entry; WK_NONE when it is empty. */
static inline uint32_t record_of(const wk_index_entry *e) { return ~e->not_record; }

void wk_core__index_init(wk_task_index *ix, uint32_t records, const wk_allocator *a) {
  uint32_t cap = 16;
  while (cap < records * 2u) cap <<= 1;                           /* load factor <= 0.5 */
  ix->entries = wk_allocator_calloc(a, cap, sizeof *ix->entries); /* zeroed: all empty */
  ix->mask = cap - 1;
  ix->count = 0;
  ix->recent = WK_NONE;
}

void wk_core__index_free(wk_task_index *ix, const wk_allocator *a) {
  wk_allocator_free(a, ix->entries, ((size_t)ix->mask + 1) * sizeof *ix->entries);
  ix->entries = NULL;
}

static bool same_id(const wk_task *t, const char *id, size_t len, uint64_t hash) {
  return t->hash == hash && t->id_len == len && memcmp(t->id, id, len) == 0;
}

uint32_t wk_core__index_find(const wk_core *core, const char *id, size_t len, uint64_t hash) {
  const wk_task_index *ix = &core->index;
  uint32_t h32 = (uint32_t)hash;
  for (uint32_t i = h32 & ix->mask;; i = (i + 1) & ix->mask) {
    const wk_index_entry *e = &ix->entries[i];
    uint32_t r = record_of(e);
    if (r == WK_NONE) return WK_NONE;
    if (e->hash32 != h32) continue;
    /* a tag match is the task but for a 2^-32 chance: fetch all of its record now,
     * so the lines the event reads next arrive with the one the id compare waits on */
    wk_task_prefetch(core, r);
    if (same_id(&core->tasks[r], id, len, hash)) return r;
  }
}

void wk_core__index_insert(wk_core *core, uint32_t t) {
  wk_task_index *ix = &core->index;
  WK_ASSERT(ix->count < ix->mask); /* never full: capacity is twice the records */
  uint32_t h32 = (uint32_t)core->tasks[t].hash;
  uint32_t i = h32 & ix->mask;
  while (record_of(&ix->entries[i]) != WK_NONE) {
    WK_ASSERT(record_of(&ix->entries[i]) != t);
    i = (i + 1) & ix->mask;
  }
  ix->entries[i] = (wk_index_entry){.not_record = ~t, .hash32 = h32};
  ix->count++;
}

void wk_core__index_remove(wk_core *core, uint32_t t) {
  wk_task_index *ix = &core->index;
  if (ix->recent == t) ix->recent = WK_NONE;
  uint32_t i = (uint32_t)core->tasks[t].hash & ix->mask;
  while (record_of(&ix->entries[i]) != t) {
    WK_ASSERT(record_of(&ix->entries[i]) != WK_NONE);
    i = (i + 1) & ix->mask;
  }
  /* backward-shift deletion: move later entries of the cluster into the hole when
   * their home position does not lie cyclically in (hole, j] */
  uint32_t hole = i;
  for (uint32_t j = (hole + 1) & ix->mask; record_of(&ix->entries[j]) != WK_NONE;
       j = (j + 1) & ix->mask) {
    uint32_t home = ix->entries[j].hash32 & ix->mask;
    bool home_in_range = (hole <= j) ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!home_in_range) {
      ix->entries[hole] = ix->entries[j];
      hole = j;
    }
  }
  ix->entries[hole].not_record = ~WK_NONE;
  ix->count--;
}
