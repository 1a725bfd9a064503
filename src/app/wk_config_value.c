/* wk_config_value.c: a setting's value: parsing text with its units (ms, bytes),
 * reading and writing the field in wk_app_config, formatting it back. See wk_config.h. */
#include "app/wk_config.h"
#include "lib/wk_assert.h"
#include "lib/wk_err.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "app/wk_config_int.h"
#include "lib/wk_mask.h"

void *wk_config__field(wk_app_config *cfg, const wk_config_item *it) {
  WK_ASSERT(it->offset < sizeof *cfg);
  WK_ASSERT(it->offset + it->size <= sizeof *cfg);
  return (char *)cfg + it->offset;
}

const void *wk_config__cfield(const wk_app_config *cfg, const wk_config_item *it) {
  WK_ASSERT(it->offset < sizeof *cfg);
  WK_ASSERT(it->offset + it->size <= sizeof *cfg);
  return (const char *)cfg + it->offset;
}

uint64_t wk_config__get_uint(const void *field, size_t size) {
  if (size == sizeof(uint32_t)) {
    uint32_t v;
    memcpy(&v, field, sizeof v);
    return v;
  }
  uint64_t v;
  memcpy(&v, field, sizeof v);
  return v;
}

int64_t wk_config__get_i64(const void *field) {
  int64_t v;
  memcpy(&v, field, sizeof v);
  return v;
}

static void set_uint(void *field, size_t size, uint64_t v) {
  if (size == sizeof(uint32_t)) {
    uint32_t v32 = (uint32_t)v;
    memcpy(field, &v32, sizeof v32);
  } else {
    memcpy(field, &v, sizeof v);
  }
}

bool wk_config__get_bool(const void *field) {
  bool v;
  memcpy(&v, field, sizeof v);
  return v;
}

/* Parses leading decimal digits (at least one) into *v; returns the rest, or NULL on no
 * digit or overflow past `limit` (*overflow set). */
static const char *digits(const char *s, uint64_t limit, uint64_t *v, bool *overflow) {
  *v = 0;
  *overflow = false;
  if (!isdigit((unsigned char)*s)) return NULL;
  for (; isdigit((unsigned char)*s); s++) {
    uint64_t d = (uint64_t)(*s - '0');
    if (*v > (limit - d) / 10) {
      *overflow = true;
      return NULL;
    }
    *v = *v * 10 + d;
  }
  return s;
}

typedef struct unit {
  const char *suffix;
  uint64_t mult;
} unit;

static const unit no_units[] = {{"", 1}, {NULL, 0}};
static const unit ms_units[] = {{"", 1},      {"ms", 1},      {"s", 1000},
                                {"m", 60000}, {"h", 3600000}, {NULL, 0}};
static const unit byte_units[] = {{"", 1},
                                  {"B", 1},
                                  {"KiB", 1024},
                                  {"MiB", 1048576},
                                  {"GiB", 1073741824},
                                  {"TiB", 1099511627776},
                                  {NULL, 0}};

/* A whole number with an optional unit; *neg when it starts with '-' (if allowed).
 * Returns 0, -1 (syntax) or -2 (too large for limit). */
static int number_with_unit(const char *s, const unit *units, bool allow_neg, uint64_t limit,
                            uint64_t *out, bool *neg) {
  *neg = false;
  if (allow_neg && *s == '-') {
    *neg = true;
    s++;
  }
  uint64_t v;
  bool overflow;
  const char *rest = digits(s, UINT64_MAX, &v, &overflow);
  if (!rest) return overflow ? -2 : -1;
  for (const unit *u = units; u->suffix; u++) {
    if (strcmp(rest, u->suffix) == 0) {
      if (v > limit / u->mult) return -2;
      *out = v * u->mult;
      return 0;
    }
  }
  return -1;
}

bool wk_config__enum_has(const char *choices, const char *s) {
  size_t n = strlen(s);
  for (const char *p = choices; *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && n > 0 && strncmp(p, s, n) == 0) return true;
    if (!bar) break;
    p = bar + 1;
  }
  return false;
}

/* "debug|info" -> "debug, info" */
void wk_config__enum_list(const char *choices, char *out, size_t len) {
  size_t i = 0;
  for (const char *p = choices; *p && i + 3 < len; p++) {
    if (*p == '|') {
      out[i++] = ',';
      out[i++] = ' ';
    } else {
      out[i++] = *p;
    }
  }
  out[i < len ? i : len - 1] = '\0';
}

const char *wk_config__type_name(wk_config_type t) {
  switch (t) {
    case WK_CONFIG_STRING: return "string";
    case WK_CONFIG_UINT: return "uint";
    case WK_CONFIG_MS: return "ms";
    case WK_CONFIG_BYTES: return "bytes";
    case WK_CONFIG_BOOL: return "bool";
    case WK_CONFIG_ENUM: return "enum";
  }
  return "?";
}

const char *wk_config__type_meta(const wk_config_item *it) {
  if (it->meta) return it->meta;
  switch (it->type) {
    case WK_CONFIG_STRING: return "TEXT";
    case WK_CONFIG_UINT: return "N";
    case WK_CONFIG_MS: return "MS";
    case WK_CONFIG_BYTES: return "BYTES";
    case WK_CONFIG_BOOL: return "BOOL";
    case WK_CONFIG_ENUM: return "NAME";
  }
  return "VALUE";
}

/* What a value of this type looks like, for error messages. */
void wk_config__expected(const wk_config_item *it, char *out, size_t len) {
  switch (it->type) {
    case WK_CONFIG_UINT: snprintf(out, len, "a whole number"); return;
    case WK_CONFIG_MS:
      snprintf(out, len, "milliseconds (30000, or with a unit: 500ms, 30s, 5m, 1h)");
      return;
    case WK_CONFIG_BYTES:
      snprintf(out, len, "a byte count (4194304, or with a unit: 64KiB, 4MiB, 1GiB)");
      return;
    case WK_CONFIG_BOOL: snprintf(out, len, "true or false"); return;
    case WK_CONFIG_ENUM: {
      char list[128];
      wk_config__enum_list(it->choices ? it->choices : "", list, sizeof list);
      snprintf(out, len, "one of %.100s", list);
      return;
    }
    case WK_CONFIG_STRING: snprintf(out, len, "text"); return;
  }
  snprintf(out, len, "a value");
}

/* The problem line of a failed number_with_unit (rc -2: over the limit; else malformed). */
static int number_problem(int rc, const char *text, const char *exp, char *err, size_t len) {
  if (rc == -2) {
    wk_errf(err, len, "'%.80s' is too large", text);
  } else {
    wk_errf(err, len, "expected %s, got '%.80s'", exp, text);
  }
  return -1;
}

int wk_config_parse_value(const wk_config_item *it, const char *text, void *field, char *err,
                          size_t len) {
  WK_ASSERT(it != NULL && text != NULL && field != NULL);
  WK_ASSERT(it->size > 0);
  char exp[128];
  wk_config__expected(it, exp, sizeof exp);
  if (err && len) err[0] = '\0';
  switch (it->type) {
    case WK_CONFIG_STRING:
    case WK_CONFIG_ENUM: {
      size_t n = strlen(text);
      if (it->size == 0 || n > it->size - 1) {
        wk_errf(err, len, "longer than %zu bytes", it->size ? it->size - 1 : 0);
        return -1;
      }
      if (it->type == WK_CONFIG_ENUM &&
          !wk_config__enum_has(it->choices ? it->choices : "", text)) {
        wk_errf(err, len, "expected %s, got '%.80s'", exp, text);
        return -1;
      }
      memcpy(field, text, n + 1);
      return 0;
    }
    case WK_CONFIG_UINT: {
      uint64_t limit = it->size == sizeof(uint32_t) ? UINT32_MAX : UINT64_MAX;
      uint64_t v;
      bool neg;
      int rc = number_with_unit(text, no_units, true, limit, &v, &neg);
      if (rc == 0 && neg) rc = -1;
      if (rc == -2) {
        wk_errf(err, len, "'%.80s' is too large (at most %" PRIu64 ")", text, limit);
        return -1;
      }
      if (rc != 0) {
        wk_errf(err, len, "expected %s%s, got '%.80s'", exp,
                text[0] == '-' ? " (not negative)" : "", text);
        return -1;
      }
      set_uint(field, it->size, v);
      return 0;
    }
    case WK_CONFIG_MS: {
      uint64_t v;
      bool neg;
      int rc = number_with_unit(text, ms_units, true, (uint64_t)INT64_MAX, &v, &neg);
      if (rc != 0) return number_problem(rc, text, exp, err, len);
      int64_t s = neg ? -(int64_t)v : (int64_t)v;
      memcpy(field, &s, sizeof s);
      return 0;
    }
    case WK_CONFIG_BYTES: {
      uint64_t v;
      bool neg;
      uint64_t limit = it->size == sizeof(uint32_t) ? UINT32_MAX : UINT64_MAX;
      int rc = number_with_unit(text, byte_units, false, limit, &v, &neg);
      if (rc != 0) return number_problem(rc, text, exp, err, len);
      set_uint(field, it->size, v);
      return 0;
    }
    case WK_CONFIG_BOOL: {
      static const char *const yes[] = {"true", "yes", "on", "1"};
      static const char *const no[] = {"false", "no", "off", "0"};
      for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(text, yes[i]) == 0 || strcasecmp(text, no[i]) == 0) {
          bool b = strcasecmp(text, yes[i]) == 0;
          memcpy(field, &b, sizeof b);
          return 0;
        }
      }
      wk_errf(err, len, "expected %s, got '%.80s'", exp, text);
      return -1;
    }
  }
  wk_errf(err, len, "unknown type");
  return -1;
}

const char *wk_config_format_value(const wk_app_config *cfg, const wk_config_item *it, char *buf,
                                   size_t len) {
  const void *f = wk_config__cfield(cfg, it);
  switch (it->type) {
    case WK_CONFIG_STRING:
    case WK_CONFIG_ENUM: snprintf(buf, len, "%.*s", (int)it->size, (const char *)f); break;
    case WK_CONFIG_UINT: snprintf(buf, len, "%" PRIu64, wk_config__get_uint(f, it->size)); break;
    case WK_CONFIG_MS: snprintf(buf, len, "%" PRId64, wk_config__get_i64(f)); break;
    case WK_CONFIG_BYTES: snprintf(buf, len, "%" PRIu64, wk_config__get_uint(f, it->size)); break;
    case WK_CONFIG_BOOL: snprintf(buf, len, "%s", wk_config__get_bool(f) ? "true" : "false"); break;
  }
  return buf;
}

const char *wk_config_format_shown(const wk_app_config *cfg, const wk_config_item *it, char *buf,
                                   size_t len) {
  if (it->secret == WK_CONFIG_PUBLIC) return wk_config_format_value(cfg, it, buf, len);
  char value[2048];
  wk_config_format_value(cfg, it, value, sizeof value);
  if (!value[0]) {
    snprintf(buf, len, "%s", ""); /* unset: nothing to hide, and it says so */
  } else if (it->secret == WK_CONFIG_SECRET_CREDS) {
    wk_mask_credentials(value, buf, len);
  } else {
    snprintf(buf, len, "%s", WK_MASK);
  }
  memset(value, 0, sizeof value);
  return buf;
}
