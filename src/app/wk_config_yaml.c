/* wk_config_yaml.c: the configuration file, a YAML mapping of setting: value read with
 * libyaml. See wk_config.h. */
#include "app/wk_config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "app/wk_config_int.h"

typedef struct yaml_ctx {
  yaml_parser_t parser;
  const char *path;
  wk_config__errs *e;
  bool broken; /* a syntax error: the parser cannot go on */
} yaml_ctx;

static bool next_event(yaml_ctx *y, yaml_event_t *ev) {
  if (y->broken) return false;
  if (yaml_parser_parse(&y->parser, ev)) return true;
  y->broken = true;
  size_t line = y->parser.problem_mark.line + 1;
  if (y->parser.error == YAML_READER_ERROR) {
    wk_config__fail(y->e, "%s: YAML error: %s (byte %zu)", y->path,
                    y->parser.problem ? y->parser.problem : "cannot read",
                    y->parser.problem_offset);
  } else if (y->parser.context) {
    size_t from = y->parser.context_mark.line + 1;
    if (from != line) {
      wk_config__fail(y->e, "%s:%zu: YAML syntax error: %s %s (started on line %zu)", y->path, line,
                      y->parser.problem ? y->parser.problem : "?", y->parser.context, from);
    } else {
      wk_config__fail(y->e, "%s:%zu: YAML syntax error: %s %s", y->path, line,
                      y->parser.problem ? y->parser.problem : "?", y->parser.context);
    }
  } else {
    wk_config__fail(y->e, "%s:%zu: YAML syntax error: %s", y->path, line,
                    y->parser.problem ? y->parser.problem : "?");
  }
  return false;
}

/* Skips the rest of a node whose start event was `ev` (a scalar or alias is whole). */
static void skip_node(yaml_ctx *y, const yaml_event_t *ev) {
  if (ev->type != YAML_SEQUENCE_START_EVENT && ev->type != YAML_MAPPING_START_EVENT) return;
  int depth = 1;
  while (depth > 0) {
    yaml_event_t e;
    if (!next_event(y, &e)) return;
    if (e.type == YAML_SEQUENCE_START_EVENT || e.type == YAML_MAPPING_START_EVENT) depth++;
    if (e.type == YAML_SEQUENCE_END_EVENT || e.type == YAML_MAPPING_END_EVENT) depth--;
    yaml_event_delete(&e);
  }
}

static bool is_null_scalar(const yaml_event_t *ev) {
  if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
  const char *v = (const char *)ev->data.scalar.value;
  return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
         strcmp(v, "NULL") == 0;
}

static const char *node_kind(yaml_event_type_t t) {
  switch (t) {
    case YAML_SEQUENCE_START_EVENT: return "a list";
    case YAML_MAPPING_START_EVENT: return "a mapping";
    case YAML_ALIAS_EVENT: return "an alias";
    case YAML_NO_EVENT:
    case YAML_STREAM_START_EVENT:
    case YAML_STREAM_END_EVENT:
    case YAML_DOCUMENT_START_EVENT:
    case YAML_DOCUMENT_END_EVENT:
    case YAML_SCALAR_EVENT:
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: break;
  }
  return "something else";
}

/* The tail of a long path, so that "PATH:LINE" keeps the line. */
static const char *path_tail(const char *path) {
  size_t n = strlen(path);
  return n > 200 ? path + n - 200 : path;
}

/* One value event for setting i. */
static void file_value(yaml_ctx *y, wk_app_config *cfg, wk_config_sources *sources, size_t i,
                       const yaml_event_t *ev) {
  const wk_config_item *it = wk_config_item_at(i);
  size_t line = ev->start_mark.line + 1;
  char exp[128];
  wk_config__expected(it, exp, sizeof exp);
  if (ev->type != YAML_SCALAR_EVENT) {
    skip_node(y, ev);
    if (!y->broken) { /* a syntax error inside says enough */
      wk_config__fail(y->e, "%s:%zu: %s: expected %s, got %s", y->path, line, it->name, exp,
                      node_kind(ev->type));
    }
    return;
  }
  const char *text = (const char *)ev->data.scalar.value;
  if (strlen(text) != ev->data.scalar.length) {
    wk_config__fail(y->e, "%s:%zu: %s: the value contains a NUL byte", y->path, line, it->name);
    return;
  }
  bool stringy = it->type == WK_CONFIG_STRING || it->type == WK_CONFIG_ENUM;
  if (is_null_scalar(ev)) {
    if (!stringy) {
      wk_config__fail(y->e, "%s:%zu: %s: expected %s, got no value", y->path, line, it->name, exp);
      return;
    }
    text = "";
  } else if (!stringy && ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
    wk_config__fail(y->e,
                    "%s:%zu: %s: expected %s, got the quoted string \"%.80s\" (write it unquoted)",
                    y->path, line, it->name, exp, text);
    return;
  }
  char msg[256];
  if (wk_config_parse_value(it, text, wk_config__field(cfg, it), msg, sizeof msg) != 0) {
    wk_config__fail(y->e, "%s:%zu: %s: %s", y->path, line, it->name, msg);
    return;
  }
  wk_config__set_source(sources, i, WK_CONFIG_FROM_FILE, "%s:%zu", path_tail(y->path), line);
}

/* The root mapping, after its MAPPING_START. */
static void file_mapping(yaml_ctx *y, wk_app_config *cfg, wk_config_sources *sources) {
  size_t first_line[WK_CONFIG_MAX_ITEMS] = {0};
  for (;;) {
    yaml_event_t key;
    if (!next_event(y, &key)) return;
    if (key.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&key);
      return;
    }
    size_t line = key.start_mark.line + 1;
    size_t idx = 0;
    const wk_config_item *it = NULL;
    if (key.type != YAML_SCALAR_EVENT) {
      wk_config__fail(y->e, "%s:%zu: a setting name must be a word, got %s", y->path, line,
                      node_kind(key.type));
      skip_node(y, &key);
    } else {
      const char *name = (const char *)key.data.scalar.value;
      it = wk_config_find(name, &idx);
      if (!it) {
        const wk_config_item *s = wk_config__suggest(name, strlen(name));
        if (s) {
          wk_config__fail(y->e, "%s:%zu: unknown setting '%.80s' (did you mean %s?)", y->path, line,
                          name, s->name);
        } else {
          wk_config__fail(y->e, "%s:%zu: unknown setting '%.80s'", y->path, line, name);
        }
      } else if (first_line[idx]) {
        wk_config__fail(y->e, "%s:%zu: duplicate setting '%s' (first set on line %zu)", y->path,
                        line, it->name, first_line[idx]);
        it = NULL;
      } else {
        first_line[idx] = line;
      }
    }
    yaml_event_delete(&key);
    yaml_event_t val;
    if (!next_event(y, &val)) return;
    if (it) {
      file_value(y, cfg, sources, idx, &val); /* skips a collection */
    } else {
      skip_node(y, &val);
    }
    yaml_event_delete(&val);
  }
}

static void file_stream(yaml_ctx *y, wk_app_config *cfg, wk_config_sources *sources) {
  yaml_event_t ev;
  if (!next_event(y, &ev)) return; /* STREAM_START */
  yaml_event_delete(&ev);
  int docs = 0;
  for (;;) {
    if (!next_event(y, &ev)) return;
    yaml_event_type_t t = ev.type;
    size_t line = ev.start_mark.line + 1;
    yaml_event_delete(&ev);
    if (t == YAML_STREAM_END_EVENT) return;
    if (t != YAML_DOCUMENT_START_EVENT) continue;
    if (++docs > 1) {
      wk_config__fail(y->e, "%s:%zu: only one YAML document is allowed", y->path, line);
      return;
    }
    yaml_event_t root;
    if (!next_event(y, &root)) return;
    if (root.type == YAML_MAPPING_START_EVENT) {
      file_mapping(y, cfg, sources);
    } else if (!(root.type == YAML_SCALAR_EVENT && is_null_scalar(&root))) {
      wk_config__fail(y->e, "%s:%zu: the file must be a mapping of setting: value, got %s", y->path,
                      root.start_mark.line + 1,
                      root.type == YAML_SCALAR_EVENT ? "a single value" : node_kind(root.type));
      skip_node(y, &root);
    }
    yaml_event_delete(&root);
    if (!next_event(y, &ev)) return; /* DOCUMENT_END */
    yaml_event_delete(&ev);
  }
}

int wk_config__load_file(wk_app_config *cfg, const char *path, wk_config_sources *sources,
                         wk_config__errs *e) {
  int before = e->n;
  FILE *f = fopen(path, "rb");
  if (!f) {
    wk_config__fail(e, "%s: cannot read: %s", path, strerror(errno));
    return e->n - before;
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    wk_config__fail(e, "%s: cannot read: %s", path, strerror(EISDIR));
    fclose(f);
    return e->n - before;
  }
  /* two passes: the syntax of the whole file first, so that a syntax error is the only
   * line reported for a broken file (and nothing of it applied); then the settings */
  for (int pass = 0; pass < 2 && e->n == before; pass++) {
    yaml_ctx y = {.path = path, .e = e};
    if (!yaml_parser_initialize(&y.parser)) {
      wk_config__fail(e, "%s: out of memory", path);
      break;
    }
    rewind(f);
    yaml_parser_set_input_file(&y.parser, f);
    if (pass == 0) {
      yaml_event_t ev;
      bool end = false;
      while (!end && next_event(&y, &ev)) {
        end = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
      }
    } else {
      file_stream(&y, cfg, sources);
    }
    yaml_parser_delete(&y.parser);
  }
  fclose(f);
  return e->n - before;
}

int wk_config_load_file(wk_app_config *cfg, const char *path, wk_config_sources *sources, char *err,
                        size_t len) {
  wk_config__errs e = wk_config__errs_init(err, len);
  return wk_config__load_file(cfg, path, sources, &e);
}
