/* wk_config_validate.c: checking values (ranges, lengths, choices, cross-field rules,
 * paths) and the table itself. See wk_config.h. */
#include "app/wk_config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/wk_config_int.h"
#include "app/wk_admission.h"
#include "app/wk_deploy_acl.h"
#include "app/wk_executor_env.h"
#include "app/wk_executor_user.h"
#include "lib/wk_alloc.h"

typedef struct vctx {
  const wk_app_config *cfg;
  const wk_config_sources *sources;
  wk_config__errs *e;
} vctx;

/* vfail's "no setting": a row index no table has. */
#define NO_ITEM SIZE_MAX

/* One problem about settings a (and b, unless NO_ITEM), naming their sources. */
__attribute__((format(printf, 4, 5))) static void vfail(vctx *v, size_t a, size_t b,
                                                        const char *fmt, ...) {
  char msg[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!v->sources || a >= wk_config_count()) {
    wk_config__fail(v->e, "%s", msg);
    return;
  }
  char sa[300] = "default", sb[300] = "default";
  const wk_config_source *src_a = &v->sources->item[a];
  if (src_a->origin != WK_CONFIG_FROM_DEFAULT) {
    snprintf(sa, sizeof sa, "from ");
    wk_config__source_text(src_a, sa + 5, sizeof sa - 5);
  }
  if (b >= wk_config_count()) {
    wk_config__fail(v->e, "%s (%s)", msg, sa);
    return;
  }
  const wk_config_source *src_b = &v->sources->item[b];
  if (src_b->origin != WK_CONFIG_FROM_DEFAULT) {
    snprintf(sb, sizeof sb, "from ");
    wk_config__source_text(src_b, sb + 5, sizeof sb - 5);
  }
  wk_config__fail(v->e, "%s (%s %s, %s %s)", msg, wk_config_item_at(a)->name, sa,
                  wk_config_item_at(b)->name, sb);
}

static void check_range(vctx *v, size_t i) {
  const wk_config_item *it = wk_config_item_at(i);
  const void *f = wk_config__cfield(v->cfg, it);
  switch (it->type) {
    case WK_CONFIG_UINT: {
      uint64_t x = wk_config__get_uint(f, it->size);
      if (x < (uint64_t)it->min || x > (uint64_t)it->max) {
        vfail(v, i, NO_ITEM, "%s must be between %" PRId64 " and %" PRId64 ", got %" PRIu64,
              it->name, it->min, it->max, x);
      }
      return;
    }
    case WK_CONFIG_MS: {
      int64_t x = wk_config__get_i64(f);
      if (x < it->min || x > it->max) {
        vfail(v, i, NO_ITEM, "%s must be between %" PRId64 " and %" PRId64 " ms, got %" PRId64,
              it->name, it->min, it->max, x);
      }
      return;
    }
    case WK_CONFIG_BYTES: {
      uint64_t x = wk_config__get_uint(f, it->size);
      if (x < (uint64_t)it->min || x > (uint64_t)it->max) {
        vfail(v, i, NO_ITEM, "%s must be between %" PRId64 " and %" PRId64 " bytes, got %" PRIu64,
              it->name, it->min, it->max, x);
      }
      return;
    }
    case WK_CONFIG_BOOL: return;
    case WK_CONFIG_STRING:
    case WK_CONFIG_ENUM: {
      const char *s = f;
      size_t n = strnlen(s, it->size);
      if (n == it->size) {
        vfail(v, i, NO_ITEM, "%s is not terminated", it->name);
      } else if (it->type == WK_CONFIG_ENUM) {
        if (!wk_config__enum_has(it->choices ? it->choices : "", s)) {
          char list[128];
          wk_config__enum_list(it->choices ? it->choices : "", list, sizeof list);
          vfail(v, i, NO_ITEM, "%s must be one of %s, got '%.80s'", it->name, list, s);
        }
      } else if (n == 0 && it->min > 0) {
        vfail(v, i, NO_ITEM, "%s must not be empty", it->name);
      } else if ((int64_t)n < it->min || (int64_t)n > it->max) {
        vfail(v, i, NO_ITEM, "%s must be %" PRId64 " to %" PRId64 " bytes long, got %zu", it->name,
              it->min, it->max, n);
      }
      return;
    }
  }
}

/* NULL if addr is host:port, [v6]:port or unix:PATH; else why not. */
static const char *listen_problem(const char *addr) {
  if (strncmp(addr, "unix:", 5) == 0) return addr[5] ? NULL : "unix: needs a path";
  if (strncmp(addr, "unix-abstract:", 14) == 0)
    return addr[14] ? NULL : "unix-abstract: needs a name";
  const char *colon = strrchr(addr, ':');
  if (!colon) return "no ':port'";
  size_t host_len = (size_t)(colon - addr);
  if (host_len == 0) return "no host (0.0.0.0 or [::] listens on every address)";
  if (addr[0] == '[') {
    if (host_len < 3 || addr[host_len - 1] != ']') return "an IPv6 host is written [::1]";
  } else if (memchr(addr, ':', host_len)) {
    return "an IPv6 host needs brackets: [::1]:7070";
  }
  const char *port = colon + 1;
  size_t pn = strlen(port);
  if (pn == 0 || pn > 5 || strspn(port, "0123456789") != pn) return "the port must be a number";
  if (atol(port) > 65535) return "the port must be at most 65535";
  return NULL;
}

static void check_dir(vctx *v, const char *name) {
  size_t i = wk_config__index_of(name);
  if (i >= wk_config_count()) return;
  const char *path = wk_config__cfield(v->cfg, wk_config_item_at(i));
  if (!path[0]) return; /* empty: reported by the range check, or allowed */
  struct stat st;
  if (stat(path, &st) != 0) {
    vfail(v, i, NO_ITEM, "%s must be an existing directory, got '%.200s' (%s)", name, path,
          strerror(errno));
  } else if (!S_ISDIR(st.st_mode)) {
    vfail(v, i, NO_ITEM, "%s must be an existing directory, got '%.200s' (not a directory)", name,
          path);
  }
}

static void check_file(vctx *v, const char *name, int mode, const char *what) {
  size_t i = wk_config__index_of(name);
  if (i >= wk_config_count()) return;
  const char *path = wk_config__cfield(v->cfg, wk_config_item_at(i));
  if (!path[0]) return;
  struct stat st;
  if (stat(path, &st) != 0) {
    vfail(v, i, NO_ITEM, "%s must be %s, got '%.200s' (%s)", name, what, path, strerror(errno));
  } else if (S_ISDIR(st.st_mode)) {
    vfail(v, i, NO_ITEM, "%s must be %s, got '%.200s' (a directory)", name, what, path);
  } else if (access(path, mode) != 0) {
    vfail(v, i, NO_ITEM, "%s must be %s, got '%.200s' (%s)", name, what, path, strerror(errno));
  }
}

static int validate(const wk_app_config *c, const wk_config_sources *sources, wk_config__errs *e) {
  vctx v = {.cfg = c, .sources = sources, .e = e};
  int before = e->n;
  for (size_t i = 0; i < wk_config_count(); i++) check_range(&v, i);

  if (c->default_slot_ttl_ms > c->max_slot_ttl_ms) {
    vfail(&v, wk_config__index_of("default_slot_ttl_ms"), wk_config__index_of("max_slot_ttl_ms"),
          "default_slot_ttl_ms (%" PRId64 ") must not exceed max_slot_ttl_ms (%" PRId64 ")",
          c->default_slot_ttl_ms, c->max_slot_ttl_ms);
  }
  if (c->default_task_timeout_ms > c->max_task_timeout_ms) {
    vfail(&v, wk_config__index_of("default_task_timeout_ms"),
          wk_config__index_of("max_task_timeout_ms"),
          "default_task_timeout_ms (%" PRId64 ") must not exceed max_task_timeout_ms (%" PRId64 ")",
          c->default_task_timeout_ms, c->max_task_timeout_ms);
  }
  if (c->task_window_initial > c->task_window_max) {
    vfail(&v, wk_config__index_of("task_window_initial"), wk_config__index_of("task_window_max"),
          "task_window_initial (%" PRIu32 ") must not exceed task_window_max (%" PRIu32 ")",
          c->task_window_initial, c->task_window_max);
  }
  if (c->executors_max != 0 && c->executors_max < c->executors) {
    vfail(&v, wk_config__index_of("executors_max"), wk_config__index_of("executors"),
          "executors_max (%" PRIu32 ") must be 0 or at least executors (%" PRIu32 ")",
          c->executors_max, c->executors);
  }
  if (c->executor_heartbeat_timeout_ms <= c->executor_heartbeat_interval_ms) {
    vfail(&v, wk_config__index_of("executor_heartbeat_timeout_ms"),
          wk_config__index_of("executor_heartbeat_interval_ms"),
          "executor_heartbeat_timeout_ms (%" PRId64
          ") must exceed executor_heartbeat_interval_ms (%" PRId64 ")",
          c->executor_heartbeat_timeout_ms, c->executor_heartbeat_interval_ms);
  }
  if (c->listen_addr[0] && strnlen(c->listen_addr, sizeof c->listen_addr) < sizeof c->listen_addr) {
    const char *why = listen_problem(c->listen_addr);
    if (why) {
      vfail(&v, wk_config__index_of("listen_addr"), NO_ITEM,
            "listen_addr must be host:port or unix:PATH, got '%.200s' (%s)", c->listen_addr, why);
    }
  }
  char env_why[300];
  wk_mem_floor floor;
  char floor_why[300];
  if (wk_mem_floor_parse(c->admission_memory_floor, &floor, floor_why, sizeof floor_why) != 0) {
    vfail(&v, wk_config__index_of("admission_memory_floor"), NO_ITEM, "admission_memory_floor: %s",
          floor_why);
  }
  wk_deploy_acl *acl = wk_xmalloc(sizeof *acl);
  if (wk_deploy_acl_parse(c->deploy_allowed_clients, acl, env_why, sizeof env_why) != 0) {
    vfail(&v, wk_config__index_of("deploy_allowed_clients"), NO_ITEM, "%s", env_why);
  }
  free(acl);
  if (wk_executor_env_check(c->executor_env, env_why, sizeof env_why) != 0) {
    vfail(&v, wk_config__index_of("executor_env"), NO_ITEM, "%s", env_why);
  }
  uint32_t exec_uid, exec_gid;
  if (wk_executor_user_resolve(c->executor_user, geteuid(), &exec_uid, &exec_gid, env_why,
                               sizeof env_why) != 0) {
    vfail(&v, wk_config__index_of("executor_user"), NO_ITEM, "%s", env_why);
  }
  check_dir(&v, "code_root");
  check_dir(&v, "scratch_root");
  check_file(&v, "python", X_OK, "an executable file");
  check_file(&v, "executor_script", R_OK, "a readable file");
  return e->n - before;
}

int wk_config_validate(const wk_app_config *cfg, char *err, size_t len) {
  wk_config__errs e = wk_config__errs_init(err, len);
  return validate(cfg, NULL, &e);
}

int wk_config_validate_sources(const wk_app_config *cfg, const wk_config_sources *sources,
                               char *err, size_t len) {
  wk_config__errs e = wk_config__errs_init(err, len);
  return validate(cfg, sources, &e);
}

/* ---- the table checks itself --------------------------------------------------------- */

static size_t type_align(const wk_config_item *it) {
  switch (it->type) {
    case WK_CONFIG_STRING:
    case WK_CONFIG_ENUM: return 1;
    case WK_CONFIG_UINT:
    case WK_CONFIG_BYTES:
      return it->size == sizeof(uint32_t) ? _Alignof(uint32_t) : _Alignof(uint64_t);
    case WK_CONFIG_MS: return _Alignof(int64_t);
    case WK_CONFIG_BOOL: return _Alignof(bool);
  }
  return 1;
}

static bool size_fits(const wk_config_item *it) {
  switch (it->type) {
    case WK_CONFIG_STRING:
    case WK_CONFIG_ENUM: return it->size >= 2 && it->max <= (int64_t)it->size - 1;
    case WK_CONFIG_UINT:
    case WK_CONFIG_BYTES:
      if (it->size == sizeof(uint32_t)) return it->max <= (int64_t)UINT32_MAX;
      return it->size == sizeof(uint64_t);
    case WK_CONFIG_MS: return it->size == sizeof(int64_t);
    case WK_CONFIG_BOOL: return it->size == sizeof(bool);
  }
  return false;
}

int wk_config_check_table(char *err, size_t len) {
  wk_config__errs e = wk_config__errs_init(err, len);
  size_t order[WK_CONFIG_MAX_ITEMS];
  for (size_t i = 0; i < wk_config_count(); i++) {
    const wk_config_item *it = wk_config_item_at(i);
    order[i] = i;
    if (strspn(it->name, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(it->name)) {
      wk_config__fail(&e, "%s: not snake_case", it->name);
    }
    if (!it->help || !it->help[0]) wk_config__fail(&e, "%s: no description", it->name);
    if (!size_fits(it))
      wk_config__fail(&e, "%s: a %s does not fit the field's %zu bytes", it->name,
                      wk_config__type_name(it->type), it->size);
    if (it->min > it->max) wk_config__fail(&e, "%s: min above max", it->name);
    if ((it->type == WK_CONFIG_ENUM) != (it->choices != NULL)) {
      wk_config__fail(&e, "%s: choices go with enum only", it->name);
    }
    for (size_t j = 0; j < i; j++) {
      const wk_config_item *o = wk_config_item_at(j);
      char d[160];
      if (strcmp(o->name, it->name) == 0) wk_config__fail(&e, "%s: two rows", it->name);
      if (it->alias) {
        wk_config__flag_name(o->name, d, sizeof d);
        if (strcmp(d, it->alias) == 0 || (o->alias && strcmp(o->alias, it->alias) == 0)) {
          wk_config__fail(&e, "%s: alias --%s taken", it->name, it->alias);
        }
      }
      if (o->alias) {
        wk_config__flag_name(it->name, d, sizeof d);
        if (strcmp(d, o->alias) == 0)
          wk_config__fail(&e, "%s: its flag is %s's alias", it->name, o->name);
      }
    }
    if (size_fits(it)) {
      wk_app_config c;
      char msg[256];
      memset(&c, 0, sizeof c);
      if (wk_config_parse_value(it, it->def, wk_config__field(&c, it), msg, sizeof msg) != 0) {
        wk_config__fail(&e, "%s: default '%s' does not parse: %s", it->name, it->def, msg);
      } else {
        wk_config__errs quiet = wk_config__errs_init(NULL, 0);
        vctx v = {.cfg = &c, .e = &quiet};
        check_range(&v, i);
        if (quiet.n) wk_config__fail(&e, "%s: default '%s' out of range", it->name, it->def);
      }
    }
  }
  /* coverage: sorted by offset, each row starts where the one before ends (plus the
   * padding its alignment needs), and the struct ends after the last */
  for (size_t i = 1; i < wk_config_count(); i++) {
    for (size_t j = i;
         j > 0 && wk_config_item_at(order[j - 1])->offset > wk_config_item_at(order[j])->offset;
         j--) {
      size_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  }
  size_t end = 0;
  const char *prev = "the start";
  for (size_t k = 0; k < wk_config_count(); k++) {
    const wk_config_item *it = wk_config_item_at(order[k]);
    size_t a = type_align(it);
    size_t want = (end + a - 1) / a * a;
    if (it->offset < end) wk_config__fail(&e, "%s overlaps %s", it->name, prev);
    if (it->offset > want) {
      wk_config__fail(&e, "a field of wk_app_config between %s and %s has no row", prev, it->name);
    }
    end = it->offset + it->size;
    prev = it->name;
  }
  size_t tail =
      (end + _Alignof(wk_app_config) - 1) / _Alignof(wk_app_config) * _Alignof(wk_app_config);
  if (tail != sizeof(wk_app_config)) {
    wk_config__fail(&e, "a field of wk_app_config after %s has no row", prev);
  }
  return e.n;
}
