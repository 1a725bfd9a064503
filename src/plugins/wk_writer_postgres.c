/* wk_writer_postgres.c: the "postgres" writer. A task's records are copied into a
 * table with COPY ... FROM STDIN inside one transaction: all of them or none. A
 * connection per write (libpq connections are not shared between threads). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "lib/wk_dl.h"
#include "lib/wk_mask.h"
#include "plugins/wk_writers_int.h"

/* libpq is opened on a writer's first connection (lib/wk_dl.h), not at start-up: a
 * worker without postgres_dsn never maps it and Kerberos, LDAP, ... under it. */
/* clang-format off */
#define PQ_FNS(X) \
  X(PQconnectdbParams) X(PQstatus) X(PQfinish) \
  X(PQerrorMessage) X(PQsetNoticeProcessor) X(PQexec) \
  X(PQexecParams) X(PQresultStatus) X(PQresultErrorField) \
  X(PQntuples) X(PQgetvalue) X(PQcmdStatus) \
  X(PQclear) X(PQputCopyData) X(PQputCopyEnd) \
  X(PQgetResult) X(PQconninfoParse) X(PQconndefaults) \
  X(PQconninfoFree) X(PQfreemem)
/* clang-format on */
static struct { PQ_FNS(WK_DL_FIELD) } pq_fns;
static const char *const pq_names[] = {PQ_FNS(WK_DL_NAME)};
static wk_dl_lib pq_lib = WK_DL_LIB("libpq.so.5", pq_names, pq_fns);
#define PQconnectdbParams (pq_fns.PQconnectdbParams)
#define PQstatus (pq_fns.PQstatus)
#define PQfinish (pq_fns.PQfinish)
#define PQerrorMessage (pq_fns.PQerrorMessage)
#define PQsetNoticeProcessor (pq_fns.PQsetNoticeProcessor)
#define PQexec (pq_fns.PQexec)
#define PQexecParams (pq_fns.PQexecParams)
#define PQresultStatus (pq_fns.PQresultStatus)
#define PQresultErrorField (pq_fns.PQresultErrorField)
#define PQntuples (pq_fns.PQntuples)
#define PQgetvalue (pq_fns.PQgetvalue)
#define PQcmdStatus (pq_fns.PQcmdStatus)
#define PQclear (pq_fns.PQclear)
#define PQputCopyData (pq_fns.PQputCopyData)
#define PQputCopyEnd (pq_fns.PQputCopyEnd)
#define PQgetResult (pq_fns.PQgetResult)
#define PQconninfoParse (pq_fns.PQconninfoParse)
#define PQconndefaults (pq_fns.PQconndefaults)
#define PQconninfoFree (pq_fns.PQconninfoFree)
#define PQfreemem (pq_fns.PQfreemem)

#define DEFAULT_TABLE "worker_outputs"
#define IDENT_MAX_BYTES 63 /* PostgreSQL's NAMEDATALEN - 1 */
#define FLUSH_BYTES 65536

static const char *dsn_of(const wk_writer_settings *s) {
  return s && s->postgres_dsn ? s->postgres_dsn : "";
}

/* Error text of a failed result: the server's primary message, else libpq's. */
static int result_err(PGconn *c, const PGresult *r, const char *what, char *err, size_t len) {
  const char *m = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
  if (!m || !m[0]) m = PQerrorMessage(c);
  if (!m || !m[0]) m = "unexpected answer";
  if (what) return wk_werr(err, len, "postgres: %s: %s", what, m);
  return wk_werr(err, len, "postgres: %s", m);
}

/* Server notices ("relation ... already exists, skipping") are not errors: dropped
 * rather than printed on the worker's stderr by libpq's default processor. */
static void ignore_notice(void *arg, const char *message) { (void)arg, (void)message; }

/* libpq's text for a DSN it cannot parse quotes the offending token ("invalid
 * percent-encoded token: \"pw%zz\"", "missing \"=\" after \"pw\""), which may be the
 * password: every quoted token that is not a connection keyword is masked. Returns 0
 * when the DSN parses, else -1 with the message in err. */
static int dsn_parse_error(const char *dsn, char *err, size_t len) {
  char *msg = NULL;
  PQconninfoOption *opts = PQconninfoParse(dsn, &msg);
  if (opts) {
    PQconninfoFree(opts);
    return 0;
  }
  if (!msg) return wk_werr(err, len, "postgres: postgres_dsn cannot be parsed");
  PQconninfoOption *known = PQconndefaults();
  char out[512];
  size_t o = 0;
  for (const char *p = msg; *p && o + 8 < sizeof out;) {
    const char *close = *p == '"' ? strchr(p + 1, '"') : NULL;
    if (!close) {
      out[o++] = *p++;
      continue;
    }
    size_t n = (size_t)(close - p - 1);
    bool keyword = n == 1 && p[1] == '='; /* missing "=" after ... */
    for (PQconninfoOption *k = known; k && k->keyword && !keyword; k++) {
      keyword = strlen(k->keyword) == n && strncmp(k->keyword, p + 1, n) == 0;
    }
    const char *shown = keyword ? p : "\"" WK_MASK "\"";
    size_t sn = keyword ? n + 2 : strlen(WK_MASK) + 2;
    if (o + sn >= sizeof out) break;
    memcpy(out + o, shown, sn);
    o += sn;
    p = close + 1;
  }
  out[o] = '\0';
  if (known) PQconninfoFree(known);
  PQfreemem(msg);
  return wk_werr(err, len, "postgres: postgres_dsn: %s", out);
}

/* Connects. libpq's connect_timeout is in whole seconds (at least 2); the I/O bound is
 * the server's statement_timeout plus tcp_user_timeout (unacknowledged data) on our
 * side. The DSN's own settings win over these defaults (keywords later in the list
 * override earlier ones, and the expanded dbname comes last). Returns the connection,
 * or NULL with a message. */
static PGconn *connect_pg(const char *dsn, uint32_t timeout_ms, uint32_t io_ms, char *err,
                          size_t len) {
  if (!dsn[0]) {
    wk_werr(err, len, "postgres: postgres_dsn is not set");
    return NULL;
  }
  char why[256];
  if (!wk_dl_load(&pq_lib, why, sizeof why)) {
    wk_werr(err, len, "postgres: %s", why);
    return NULL;
  }
  if (dsn_parse_error(dsn, err, len) != 0) return NULL;
  char ct[16], opts[64], tcp[16];
  uint32_t s = (timeout_ms + 999) / 1000;
  snprintf(ct, sizeof ct, "%u", s < 2 ? 2u : s);
  snprintf(opts, sizeof opts, "-c statement_timeout=%u", io_ms);
  snprintf(tcp, sizeof tcp, "%u", io_ms);
  const char *const kw[] = {"connect_timeout",  "application_name", "options",
                            "tcp_user_timeout", "dbname",           NULL};
  const char *const val[] = {ct, "worker", opts, tcp, dsn, NULL};
  PGconn *c = PQconnectdbParams(kw, val, 1);
  if (!c) {
    wk_werr(err, len, "postgres: cannot allocate a connection");
    return NULL;
  }
  if (PQstatus(c) != CONNECTION_OK) {
    wk_werr(err, len, "postgres: %s", PQerrorMessage(c));
    PQfinish(c);
    return NULL;
  }
  PQsetNoticeProcessor(c, ignore_notice, NULL);
  return c;
}

/* Runs sql; 0 when it returned `want`, else -1 with a message. */
static int exec_expect(PGconn *c, const char *sql, ExecStatusType want, char *err, size_t len) {
  PGresult *r = PQexec(c, sql);
  int rc = 0;
  if (PQresultStatus(r) != want) rc = result_err(c, r, NULL, err, len);
  PQclear(r);
  return rc;
}

static int pg_validate(const wk_writer_settings *s, char *err, size_t len) {
  uint32_t t = wk_connect_timeout_ms(s);
  if (t > WK_WRITER_VALIDATE_TIMEOUT_MS) t = WK_WRITER_VALIDATE_TIMEOUT_MS;
  PGconn *c = connect_pg(dsn_of(s), t, t, err, len);
  if (!c) return -1;
  int rc = exec_expect(c, "SELECT 1", PGRES_TUPLES_OK, err, len);
  PQfinish(c);
  return rc;
}

/* An identifier part: [A-Za-z_][A-Za-z0-9_]*, 1..63 bytes. */
static bool ident_ok(const char *s, size_t n) {
  if (n == 0 || n > IDENT_MAX_BYTES) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

static int check_table(const char *t, char *err, size_t len) {
  const char *dot = strchr(t, '.');
  bool ok = dot ? ident_ok(t, (size_t)(dot - t)) && ident_ok(dot + 1, strlen(dot + 1))
                : ident_ok(t, strlen(t));
  if (!ok) {
    return wk_werr(err, len,
                   "postgres: option table must be an identifier or schema.identifier "
                   "([A-Za-z_][A-Za-z0-9_]*, at most %d bytes each), got '%.100s'",
                   IDENT_MAX_BYTES, t);
  }
  return 0;
}

static int pg_check_options(const wk_writer_option *options, size_t n, char *err, size_t len) {
  if (wk_check_option_keys("postgres", options, n, "table", err, len) != 0) return -1;
  const char *table = wk_option_get(options, n, "table");
  return table ? check_table(table, err, len) : 0;
}

/* "a" -> "\"a\"", "s.a" -> "\"s\".\"a\"" (checked names: nothing to escape). */
static void quote_table(const char *t, char *out, size_t n) {
  const char *dot = strchr(t, '.');
  if (dot) {
    snprintf(out, n, "\"%.*s\".\"%s\"", (int)(dot - t), t, dot + 1);
  } else {
    snprintf(out, n, "\"%s\"", t);
  }
}

/* Creates the table unless it exists. Creating it only when to_regclass finds nothing
 * keeps a role without CREATE on the schema working with an existing table; a
 * concurrent creation by another task is not an error: PostgreSQL reports it as a
 * unique violation on its catalog (23505), a duplicate table (42P07) or, when the two
 * collide on the table's row type, a duplicate object (42710: type "t" already exists). */
static int ensure_table(PGconn *c, const char *quoted, char *err, size_t len) {
  const char *params[] = {quoted};
  PGresult *r =
      PQexecParams(c, "SELECT to_regclass($1) IS NOT NULL", 1, NULL, params, NULL, NULL, 0);
  if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
    int rc = result_err(c, r, NULL, err, len);
    PQclear(r);
    return rc;
  }
  bool exists = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
  PQclear(r);
  if (exists) return 0;
  char sql[512];
  snprintf(sql, sizeof sql,
           "CREATE TABLE IF NOT EXISTS %s (task_id text NOT NULL, idx integer NOT NULL, "
           "record jsonb NOT NULL, written_at timestamptz NOT NULL DEFAULT now())",
           quoted);
  r = PQexec(c, sql);
  int rc = 0;
  if (PQresultStatus(r) != PGRES_COMMAND_OK) {
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    bool raced = state && (strcmp(state, "23505") == 0 || strcmp(state, "42P07") == 0 ||
                           strcmp(state, "42710") == 0);
    if (!raced) rc = result_err(c, r, NULL, err, len);
  }
  PQclear(r);
  return rc;
}

/* Appends s (n bytes) escaped for COPY's text format. */
static void put_copy_text(wk_buf *b, const uint8_t *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    switch (s[i]) {
      case '\\': wk_buf_append(b, "\\\\", 2); break;
      case '\t': wk_buf_append(b, "\\t", 2); break;
      case '\n': wk_buf_append(b, "\\n", 2); break;
      case '\r': wk_buf_append(b, "\\r", 2); break;
      default: wk_buf_append(b, s + i, 1);
    }
  }
}

static int put_copy(PGconn *c, wk_buf *chunk, char *err, size_t len) {
  if (chunk->len == 0) return 0;
  if (chunk->len > (size_t)0x7fffffff ||
      PQputCopyData(c, (const char *)chunk->data, (int)chunk->len) != 1) {
    return wk_werr(err, len, "postgres: COPY: %s", PQerrorMessage(c));
  }
  wk_buf_clear(chunk);
  return 0;
}

/* Streams the records as COPY rows and ends the COPY. Returns 0, or -1 with a message
 * (the COPY is then aborted or failed). */
static int copy_rows(PGconn *c, const wk_writer_task *t, uint64_t *records, uint64_t *bytes,
                     char *err, size_t len) {
  const char *task_id = t->task_id ? t->task_id : "";
  wk_buf rec = {0}, chunk = {0};
  wk_output_iter it;
  wk_output_iter_init(&it, t);
  uint32_t index;
  int more, rc = 0;
  while ((more = wk_output_iter_next(&it, &rec, &index, err, len)) == 1) {
    char idx[16];
    int il = snprintf(idx, sizeof idx, "\t%u\t", index);
    put_copy_text(&chunk, (const uint8_t *)task_id, strlen(task_id));
    wk_buf_append(&chunk, idx, (size_t)il);
    put_copy_text(&chunk, rec.data, rec.len);
    wk_buf_append(&chunk, "\n", 1);
    (*records)++;
    *bytes += rec.len;
    if (chunk.len >= FLUSH_BYTES && (rc = put_copy(c, &chunk, err, len)) != 0) break;
  }
  if (rc == 0 && more < 0) rc = -1; /* err says what */
  if (rc == 0) rc = put_copy(c, &chunk, err, len);
  wk_buf_free(&rec);
  wk_buf_free(&chunk);
  if (PQputCopyEnd(c, rc == 0 ? NULL : "the writer gave up") != 1 && rc == 0) {
    return wk_werr(err, len, "postgres: COPY: %s", PQerrorMessage(c));
  }
  PGresult *r;
  bool first = true;
  while ((r = PQgetResult(c)) != NULL) {
    if (first && rc == 0 && PQresultStatus(r) != PGRES_COMMAND_OK) {
      rc = result_err(c, r, NULL, err, len);
    }
    first = false;
    PQclear(r);
  }
  return rc;
}

static int pg_write(const wk_writer *w, const wk_writer_task *t, wk_buf *plugin_results, char *err,
                    size_t len) {
  (void)w;
  if (pg_check_options(t->options, t->n_options, err, len) != 0) return -1;
  const char *table = wk_option_get(t->options, t->n_options, "table");
  if (!table) table = DEFAULT_TABLE;
  char quoted[2 * IDENT_MAX_BYTES + 8];
  quote_table(table, quoted, sizeof quoted);

  PGconn *c = connect_pg(dsn_of(t->settings), wk_connect_timeout_ms(t->settings),
                         wk_io_timeout_ms(t->settings), err, len);
  if (!c) return -1;
  int rc = -1;
  uint64_t records = 0, bytes = 0;
  char sql[256];
  if (ensure_table(c, quoted, err, len) != 0) goto out;
  if (exec_expect(c, "BEGIN", PGRES_COMMAND_OK, err, len) != 0) goto out;
  snprintf(sql, sizeof sql, "COPY %s (task_id, idx, record) FROM STDIN", quoted);
  if (exec_expect(c, sql, PGRES_COPY_IN, err, len) != 0) goto out;
  if (copy_rows(c, t, &records, &bytes, err, len) != 0) goto out;
  PGresult *r = PQexec(c, "COMMIT");
  /* COMMIT of a failed transaction answers "ROLLBACK": check which it was. */
  if (PQresultStatus(r) != PGRES_COMMAND_OK || strcmp(PQcmdStatus(r), "COMMIT") != 0) {
    if (PQresultStatus(r) == PGRES_COMMAND_OK) {
      wk_werr(err, len, "postgres: the transaction was rolled back");
    } else {
      result_err(c, r, "COMMIT", err, len);
    }
    PQclear(r);
    goto out;
  }
  PQclear(r);
  wk_put_plugin_result(plugin_results, "postgres", table, records, bytes);
  rc = 0;
out:
  PQfinish(c); /* an open transaction is rolled back by the server */
  return rc;
}

void wk_postgres_mask_secrets(const wk_writer_settings *s, char *text) {
  const char *dsn = dsn_of(s);
  /* without libpq no connection was made: its messages cannot hold the password */
  if (!dsn[0] || !wk_dl_load(&pq_lib, NULL, 0)) return;
  PQconninfoOption *opts = PQconninfoParse(dsn, NULL);
  for (PQconninfoOption *o = opts; o && o->keyword; o++) {
    if (o->val && strcmp(o->keyword, "password") == 0) wk_mask_value(text, o->val);
  }
  if (opts) PQconninfoFree(opts);
}

const wk_writer wk_writer_postgres = {
    .name = "postgres",
    .setting = "postgres_dsn",
    .validate = pg_validate,
    .check_options = pg_check_options,
    .write = pg_write,
};
