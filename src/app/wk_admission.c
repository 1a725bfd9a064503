/* wk_admission.c: the memory floor and its hysteresis. See wk_admission.h. */
#include "app/wk_admission.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/wk_config.h"
#include "lib/wk_err.h"

int wk_mem_floor_parse(const char *text, wk_mem_floor *out, char *err, size_t err_len) {
  *out = (wk_mem_floor){0};
  size_t n = strlen(text);
  if (n == 0) return 0;
  if (text[n - 1] == '%') {
    char *end;
    unsigned long p = strtoul(text, &end, 10);
    if (end != text + n - 1 || end == text || p < 1 || p > 99) {
      wk_errf(err, err_len, "expected a percentage from 1%% to 99%%, got '%.40s'", text);
      return -1;
    }
    out->percent = (uint32_t)p;
    return 0;
  }
  /* a byte count, parsed as every BYTES setting is */
  const wk_config_item bytes = {
      .name = "admission_memory_floor", .type = WK_CONFIG_BYTES, .size = sizeof(uint64_t)};
  uint64_t v = 0;
  char why[256];
  if (wk_config_parse_value(&bytes, text, &v, why, sizeof why) != 0) {
    wk_errf(err, err_len, "%s, or a percentage such as 10%%", why);
    return -1;
  }
  out->bytes = v;
  return 0;
}

uint64_t wk_mem_floor_bytes(const wk_mem_floor *floor, uint64_t total) {
  if (floor->percent) return total / 100u * floor->percent;
  return floor->bytes;
}

bool wk_mem_pressure_paused(bool paused, uint64_t available, uint64_t floor) {
  if (floor == 0) return false;
  if (!paused) return available < floor;
  uint64_t resume = floor + floor / 8u;
  if (resume < floor) resume = UINT64_MAX; /* overflow */
  return available < resume;
}
