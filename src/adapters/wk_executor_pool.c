/* wk_executor_pool.c: executor processes, their connections and the call queue.
 * See wk_executor_pool.h for the contract. */
#include "adapters/wk_executor_pool.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/wk_log.h"

#define READ_CHUNK 65536u
#define RESPAWN_DELAY_MIN_MS 50u
#define RESPAWN_DELAY_MAX_MS 5000u

typedef struct wk_executor wk_executor;

struct wk_pool_call {
  wk_pool_call *prev, *next; /* in the pool's queue while waiting */
  void *ctx;
  uint64_t call_id;
  uint8_t *frame; /* encoded CALL */
  size_t frame_len;
  uint64_t bytes_in;
  wk_executor *exec; /* while running */
  bool cancelled;
};

/* A connection from an executor; identified by the pid in its HELLO. */
typedef struct wk_conn {
  uv_pipe_t pipe;
  wk_pool *pool;
  wk_executor *exec; /* NULL until HELLO */
  wk_frame_buf rbuf;
  bool closing;
} wk_conn;

struct wk_executor {
  wk_executor *next; /* in the pool's list */
  wk_pool *pool;
  uv_process_t proc;
  uv_timer_t kill_timer;
  wk_conn *conn;
  int pid;
  bool running;     /* process alive */
  bool proc_closed; /* handle closed */
  bool timer_closed;
  wk_pool_call *call; /* in flight */
};

struct wk_pool {
  uv_loop_t *loop;
  wk_pool_config cfg;
  char *python, *script, *python_path;
  wk_exec_result_cb cb;
  void *ud;
  char dir[64];
  char sock_path[128];
  uv_pipe_t listener;
  bool listener_closed;
  uv_timer_t respawn_timer;
  bool respawn_timer_closed;
  uint32_t respawn_delay_ms;
  wk_executor *executors;
  uint32_t n_executors; /* structs alive (running or closing) */
  uint32_t n_running;
  uint32_t n_ready;
  uint64_t spawned_total;
  uint64_t next_call_id;
  wk_pool_call *queue_head, *queue_tail;
  bool stopping;
  uv_timer_t stop_timer;
  void (*stop_done)(void *);
  void *stop_arg;
};

static void dispatch(wk_pool *pool);
static void on_respawn_timer(uv_timer_t *t);
static void maybe_finish_stop(wk_pool *pool);

/* ---- writes ------------------------------------------------------------------ */

typedef struct wk_write {
  uv_write_t req;
  size_t len;
  uint8_t data[];
} wk_write;

static void on_write(uv_write_t *req, int status) {
  (void)status; /* a failed write shows up as a read error / exit as well */
  free(req->data);
}

static void conn_write(wk_conn *c, const uint8_t *bytes, size_t len) {
  if (c->closing) return;
  wk_write *w = malloc(sizeof *w + len);
  if (!w) abort();
  memcpy(w->data, bytes, len);
  w->len = len;
  w->req.data = w;
  uv_buf_t buf = uv_buf_init((char *)w->data, (unsigned)len);
  if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, on_write) != 0) free(w);
}

static void conn_write_frame(wk_conn *c, const wk_frame *f, uint32_t max_frame) {
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  if (wk_frame_encode(&b, f, max_frame) == WK_FRAME_OK) {
    conn_write(c, wk_frame_buf_bytes(&b), wk_frame_buf_size(&b));
  }
  wk_frame_buf_free(&b);
}

/* ---- connections ------------------------------------------------------------ */

static void on_conn_closed(uv_handle_t *h) {
  wk_conn *c = h->data;
  wk_pool *pool = c->pool;
  wk_frame_buf_free(&c->rbuf);
  free(c);
  maybe_finish_stop(pool);
}

static void kill_executor(wk_executor *e, const char *reason) {
  if (!e->running) return;
  wk_log(WK_LOG_WARN, "executor_killed", "killing executor pid %d: %s", e->pid, reason);
  uv_process_kill(&e->proc, SIGKILL);
}

static void conn_close(wk_conn *c) {
  if (c->closing) return;
  c->closing = true;
  if (c->exec) {
    if (c->exec->conn == c) c->exec->conn = NULL;
    if (c->pool->n_ready && c->exec->running) c->pool->n_ready--;
    /* while stopping, executors hang up on their way out; the stop timer kills stragglers */
    if (!c->pool->stopping) kill_executor(c->exec, "its connection closed");
    c->exec = NULL;
  }
  uv_read_stop((uv_stream_t *)&c->pipe);
  uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
}

static void finish_call(wk_pool_call *call) {
  free(call->frame);
  free(call);
}

static void handle_result(wk_conn *c, const wk_frame_result *r) {
  wk_executor *e = c->exec;
  wk_pool_call *call = e->call;
  if (!call || call->call_id != r->call_id) {
    kill_executor(e, "RESULT for a call it was not running");
    return;
  }
  e->call = NULL;
  uv_timer_stop(&e->kill_timer);
  if (!call->cancelled) {
    wk_call_outcome o = {
        .status = (wk_call_status)r->status,
        .content_type = r->content_type,
        .output = r->output,
        .error_type = r->error_type,
        .error_message = r->error_message,
        .traceback = r->traceback,
        .stdout_bytes = r->stdout_bytes,
        .stderr_bytes = r->stderr_bytes,
        .cpu_us = r->cpu_us,
        .bytes_in = call->bytes_in,
    };
    c->pool->cb(c->pool->ud, call->ctx, &o);
  }
  finish_call(call);
}

static void handle_frame(wk_conn *c, const wk_frame *f) {
  wk_pool *pool = c->pool;
  if (!c->exec) {
    if (f->type != WK_FRAME_HELLO) {
      wk_log(WK_LOG_WARN, "executor_protocol", "first frame was %s, not HELLO",
             wk_frame_type_name(f->type));
      conn_close(c);
      return;
    }
    for (wk_executor *e = pool->executors; e; e = e->next) {
      if (e->running && e->pid == (int)f->hello.pid && !e->conn) {
        c->exec = e;
        e->conn = c;
        pool->n_ready++;
        pool->respawn_delay_ms = 0;
        return;
      }
    }
    wk_log(WK_LOG_WARN, "executor_protocol", "HELLO from unknown pid %u", f->hello.pid);
    conn_close(c);
    return;
  }
  switch (f->type) {
    case WK_FRAME_RESULT: handle_result(c, &f->result); break;
    case WK_FRAME_PING: {
      wk_frame pong = {.type = WK_FRAME_PONG, .ping = f->ping};
      conn_write_frame(c, &pong, pool->cfg.max_frame);
      break;
    }
    case WK_FRAME_PONG: break;
    case WK_FRAME_HELLO:
    case WK_FRAME_CALL:
    case WK_FRAME_CANCEL:
    case WK_FRAME_SHUTDOWN:
      kill_executor(c->exec, "it sent a frame only the worker may send");
      break;
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  wk_conn *c = h->data;
  buf->base = (char *)wk_frame_buf_reserve(&c->rbuf, READ_CHUNK);
  buf->len = READ_CHUNK;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  wk_conn *c = s->data;
  if (nread < 0) {
    conn_close(c);
    return;
  }
  wk_frame_buf_commit(&c->rbuf, (size_t)nread);
  for (;;) {
    wk_frame f;
    size_t used = 0;
    wk_frame_rc rc = wk_frame_decode(wk_frame_buf_bytes(&c->rbuf), wk_frame_buf_size(&c->rbuf),
                                     c->pool->cfg.max_frame, &f, &used);
    if (rc == WK_FRAME_NEED_MORE) break;
    if (rc != WK_FRAME_OK) {
      wk_log(WK_LOG_WARN, "executor_protocol", "malformed frame from executor: %s",
             wk_frame_rc_describe(rc));
      if (c->exec) kill_executor(c->exec, "malformed frame");
      conn_close(c);
      return;
    }
    handle_frame(c, &f);
    wk_frame_buf_consume(&c->rbuf, used);
    if (c->closing) return;
  }
  if (wk_frame_buf_size(&c->rbuf) == 0) wk_frame_buf_clear(&c->rbuf);
  dispatch(c->pool);
}

static void on_connection(uv_stream_t *server, int status) {
  wk_pool *pool = server->data;
  if (status < 0) return;
  wk_conn *c = calloc(1, sizeof *c);
  if (!c) abort();
  c->pool = pool;
  wk_frame_buf_init(&c->rbuf, NULL);
  uv_pipe_init(pool->loop, &c->pipe, 0);
  c->pipe.data = c;
  if (uv_accept(server, (uv_stream_t *)&c->pipe) != 0) {
    c->closing = true;
    uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
    return;
  }
  uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
}

/* ---- processes --------------------------------------------------------------- */

static void executor_maybe_free(wk_executor *e) {
  if (!e->proc_closed || !e->timer_closed) return;
  wk_pool *pool = e->pool;
  for (wk_executor **p = &pool->executors; *p; p = &(*p)->next) {
    if (*p == e) {
      *p = e->next;
      break;
    }
  }
  pool->n_executors--;
  free(e);
  maybe_finish_stop(pool);
}

static void on_proc_closed(uv_handle_t *h) {
  wk_executor *e = h->data;
  e->proc_closed = true;
  executor_maybe_free(e);
}

static void on_timer_closed(uv_handle_t *h) {
  wk_executor *e = h->data;
  e->timer_closed = true;
  executor_maybe_free(e);
}

static void on_process_exit(uv_process_t *proc, int64_t exit_status, int term_signal) {
  wk_executor *e = proc->data;
  wk_pool *pool = e->pool;
  e->running = false;
  pool->n_running--;
  if (e->conn) {
    wk_conn *c = e->conn;
    e->conn = NULL;
    c->exec = NULL;
    if (pool->n_ready) pool->n_ready--;
    conn_close(c);
  }
  if (!pool->stopping) {
    wk_log_json(WK_LOG_WARN, "executor_exited",
                json_pack("{s:i,s:I,s:i}", "pid", e->pid, "exit_status", (json_int_t)exit_status,
                          "signal", term_signal));
  }
  wk_pool_call *call = e->call;
  e->call = NULL;
  if (call) {
    if (!call->cancelled) {
      static const char type[] = "ExecutorLost";
      char msg[160];
      int n = snprintf(msg, sizeof msg, "the executor (pid %d) running this call exited (status %lld, signal %d)",
                       e->pid, (long long)exit_status, term_signal);
      wk_call_outcome o = {
          .status = WK_CALL_EXECUTOR_LOST,
          .error_type = {(const uint8_t *)type, (uint32_t)(sizeof type - 1)},
          .error_message = {(const uint8_t *)msg, (uint32_t)(n > 0 ? n : 0)},
          .bytes_in = call->bytes_in,
      };
      pool->cb(pool->ud, call->ctx, &o);
    }
    finish_call(call);
  }
  uv_timer_stop(&e->kill_timer);
  uv_close((uv_handle_t *)&e->kill_timer, on_timer_closed);
  uv_close((uv_handle_t *)proc, on_proc_closed);
  if (!pool->stopping) {
    /* back off when executors die young (bad interpreter, broken code path) */
    pool->respawn_delay_ms = pool->respawn_delay_ms ? pool->respawn_delay_ms * 2 : RESPAWN_DELAY_MIN_MS;
    if (pool->respawn_delay_ms > RESPAWN_DELAY_MAX_MS) pool->respawn_delay_ms = RESPAWN_DELAY_MAX_MS;
    if (!uv_is_active((uv_handle_t *)&pool->respawn_timer)) {
      uv_timer_start(&pool->respawn_timer, on_respawn_timer, pool->respawn_delay_ms, 0);
    }
  }
  dispatch(pool);
}

static void free_handle_owner(uv_handle_t *h) { free(h->data); }

static int spawn_one(wk_pool *pool, char *err, size_t err_len) {
  wk_executor *e = calloc(1, sizeof *e);
  if (!e) abort();
  e->pool = pool;
  char pythonpath[4200];
  snprintf(pythonpath, sizeof pythonpath, "PYTHONPATH=%s", pool->python_path);
  char home[128];
  snprintf(home, sizeof home, "HOME=%s", pool->dir);
  /* a scrubbed environment: nothing of the worker's leaks into user code */
  static char path_var[] = "PATH=/usr/local/bin:/usr/bin:/bin";
  static char lang_var[] = "LANG=C.UTF-8";
  static char nobytecode_var[] = "PYTHONDONTWRITEBYTECODE=1";
  static char unbuffered_var[] = "PYTHONUNBUFFERED=1";
  static char socket_flag[] = "--socket";
  char *env[] = {path_var, pythonpath, home, lang_var, nobytecode_var, unbuffered_var, NULL};
  char *args[] = {pool->python, pool->script, socket_flag, pool->sock_path, NULL};
  uv_stdio_container_t stdio[3] = {
      {.flags = UV_IGNORE},
      {.flags = UV_INHERIT_FD, .data.fd = STDERR_FILENO},
      {.flags = UV_INHERIT_FD, .data.fd = STDERR_FILENO},
  };
  uv_process_options_t opt = {
      .exit_cb = on_process_exit,
      .file = pool->python,
      .args = args,
      .env = env,
      .stdio_count = 3,
      .stdio = stdio,
  };
  e->proc.data = e;
  int rc = uv_spawn(pool->loop, &e->proc, &opt);
  if (rc != 0) {
    snprintf(err, err_len, "cannot start executor %s %s: %s", pool->python, pool->script,
             uv_strerror(rc));
    /* uv_spawn failure still requires closing the handle */
    uv_close((uv_handle_t *)&e->proc, free_handle_owner);
    return -1;
  }
  uv_timer_init(pool->loop, &e->kill_timer);
  e->kill_timer.data = e;
  e->pid = e->proc.pid;
  e->running = true;
  e->next = pool->executors;
  pool->executors = e;
  pool->n_executors++;
  pool->n_running++;
  pool->spawned_total++;
  return 0;
}

static void spawn_missing(wk_pool *pool);

static void on_respawn_timer(uv_timer_t *t) { spawn_missing(t->data); }

static void spawn_missing(wk_pool *pool) {
  char err[256];
  while (!pool->stopping && pool->n_running < pool->cfg.executors) {
    if (spawn_one(pool, err, sizeof err) != 0) {
      wk_log(WK_LOG_ERROR, "executor_spawn_failed", "%s", err);
      uv_timer_start(&pool->respawn_timer, on_respawn_timer, RESPAWN_DELAY_MAX_MS, 0);
      return;
    }
  }
}

/* ---- dispatch ---------------------------------------------------------------- */

static void on_kill_timer(uv_timer_t *t) {
  wk_executor *e = t->data;
  if (e->call && e->call->cancelled) kill_executor(e, "a cancelled call outlived the cancel grace");
}

static void dispatch(wk_pool *pool) {
  if (pool->stopping) return;
  for (wk_executor *e = pool->executors; e && pool->queue_head; e = e->next) {
    if (!e->running || !e->conn || e->conn->closing || e->call) continue;
    wk_pool_call *call = pool->queue_head;
    pool->queue_head = call->next;
    if (pool->queue_head) {
      pool->queue_head->prev = NULL;
    } else {
      pool->queue_tail = NULL;
    }
    call->next = call->prev = NULL;
    call->exec = e;
    e->call = call;
    conn_write(e->conn, call->frame, call->frame_len);
  }
}

wk_pool_call *wk_pool_submit(wk_pool *pool, const wk_call_spec *spec, void *call_ctx) {
  wk_pool_call *call = calloc(1, sizeof *call);
  if (!call) abort();
  call->ctx = call_ctx;
  call->call_id = ++pool->next_call_id;
  wk_frame f = {.type = WK_FRAME_CALL};
  f.call = (wk_frame_call){
      .call_id = call->call_id,
      .task_id = wk_frame_bytes_cstr(spec->task_id),
      .function = wk_frame_bytes_cstr(spec->function),
      .epoch = spec->epoch,
      .code_dir = wk_frame_bytes_cstr(spec->code_dir),
      .entrypoint = wk_frame_bytes_cstr(spec->entrypoint),
      .content_type = spec->content_type,
      .call_index = spec->call_index,
      .deadline_ms = spec->deadline_ms,
      .scratch_dir = wk_frame_bytes_cstr(spec->scratch_dir),
      .traceparent = wk_frame_bytes_cstr(spec->traceparent),
      .args = spec->args,
  };
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  wk_frame_rc rc = wk_frame_encode(&b, &f, pool->cfg.max_frame);
  if (rc != WK_FRAME_OK) {
    /* too large to send: fail it as a call error right away */
    wk_frame_buf_free(&b);
    static const char type[] = "ArgsTooLarge";
    static const char msg[] = "the call's arguments exceed the executor frame limit";
    wk_call_outcome o = {
        .status = WK_CALL_ERROR,
        .error_type = {(const uint8_t *)type, (uint32_t)(sizeof type - 1)},
        .error_message = {(const uint8_t *)msg, (uint32_t)(sizeof msg - 1)},
    };
    free(call);
    pool->cb(pool->ud, call_ctx, &o);
    return NULL;
  }
  call->frame_len = wk_frame_buf_size(&b);
  call->frame = malloc(call->frame_len);
  if (!call->frame) abort();
  memcpy(call->frame, wk_frame_buf_bytes(&b), call->frame_len);
  wk_frame_buf_free(&b);
  call->bytes_in = spec->args.len;
  call->prev = pool->queue_tail;
  if (pool->queue_tail) {
    pool->queue_tail->next = call;
  } else {
    pool->queue_head = call;
  }
  pool->queue_tail = call;
  dispatch(pool);
  return call;
}

void wk_pool_cancel(wk_pool *pool, wk_pool_call *call) {
  if (!call || call->cancelled) return;
  call->cancelled = true;
  wk_executor *e = call->exec;
  if (!e) { /* still queued */
    if (call->prev) {
      call->prev->next = call->next;
    } else {
      pool->queue_head = call->next;
    }
    if (call->next) {
      call->next->prev = call->prev;
    } else {
      pool->queue_tail = call->prev;
    }
    finish_call(call);
    return;
  }
  if (e->conn) {
    wk_frame f = {.type = WK_FRAME_CANCEL, .cancel = {.call_id = call->call_id}};
    conn_write_frame(e->conn, &f, pool->cfg.max_frame);
  }
  uv_timer_start(&e->kill_timer, on_kill_timer, (uint64_t)pool->cfg.cancel_grace_ms, 0);
}

uint32_t wk_pool_ready_executors(const wk_pool *pool) { return pool->n_ready; }
uint64_t wk_pool_spawned_total(const wk_pool *pool) { return pool->spawned_total; }

/* ---- start and stop --------------------------------------------------------- */

wk_pool *wk_pool_start(uv_loop_t *loop, const wk_pool_config *cfg, wk_exec_result_cb cb,
                       void *ud, char *err, size_t err_len) {
  if (access(cfg->python, X_OK) != 0) {
    snprintf(err, err_len, "python interpreter %s is not executable: %s", cfg->python,
             strerror(errno));
    return NULL;
  }
  if (access(cfg->executor_script, R_OK) != 0) {
    snprintf(err, err_len, "executor script %s is not readable: %s", cfg->executor_script,
             strerror(errno));
    return NULL;
  }
  wk_pool *pool = calloc(1, sizeof *pool);
  if (!pool) abort();
  pool->loop = loop;
  pool->cfg = *cfg;
  pool->python = strdup(cfg->python);
  pool->script = strdup(cfg->executor_script);
  pool->python_path = strdup(cfg->python_path ? cfg->python_path : "");
  pool->cb = cb;
  pool->ud = ud;
  const char *tmp = getenv("TMPDIR");
  snprintf(pool->dir, sizeof pool->dir, "%s/wk-exec-XXXXXX",
           (tmp && strlen(tmp) < 40) ? tmp : "/tmp");
  if (!mkdtemp(pool->dir)) { /* mkdtemp makes it 0700 */
    snprintf(err, err_len, "cannot create the executor socket directory %s: %s", pool->dir,
             strerror(errno));
    free(pool->python);
    free(pool->script);
    free(pool->python_path);
    free(pool);
    return NULL;
  }
  snprintf(pool->sock_path, sizeof pool->sock_path, "%s/exec.sock", pool->dir);
  uv_pipe_init(loop, &pool->listener, 0);
  pool->listener.data = pool;
  int rc = uv_pipe_bind(&pool->listener, pool->sock_path);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&pool->listener, 128, on_connection);
  uv_timer_init(loop, &pool->respawn_timer);
  pool->respawn_timer.data = pool;
  uv_timer_init(loop, &pool->stop_timer);
  pool->stop_timer.data = pool;
  if (rc != 0) {
    snprintf(err, err_len, "cannot listen on %s: %s", pool->sock_path, uv_strerror(rc));
    pool->stopping = true;
    wk_pool_stop(pool, NULL, NULL);
    return NULL;
  }
  for (uint32_t i = 0; i < cfg->executors; i++) {
    if (spawn_one(pool, err, err_len) != 0) {
      wk_pool_stop(pool, NULL, NULL);
      return NULL;
    }
  }
  return pool;
}

static void on_pool_handle_closed(uv_handle_t *h) {
  wk_pool *pool = h->data;
  if (h == (uv_handle_t *)&pool->listener) pool->listener_closed = true;
  if (h == (uv_handle_t *)&pool->respawn_timer) pool->respawn_timer_closed = true;
  if (h == (uv_handle_t *)&pool->stop_timer) {
    /* last of the three to close (closed in this order) */
    unlink(pool->sock_path);
    rmdir(pool->dir);
    void (*done)(void *) = pool->stop_done;
    void *arg = pool->stop_arg;
    free(pool->python);
    free(pool->script);
    free(pool->python_path);
    free(pool);
    if (done) done(arg);
  }
}

static int conns_open(wk_pool *pool) {
  /* connections not yet matched to an executor are closed by the walk in stop */
  (void)pool;
  return 0;
}

static void maybe_finish_stop(wk_pool *pool) {
  if (!pool->stopping || pool->n_executors > 0 || conns_open(pool)) return;
  if (uv_is_closing((uv_handle_t *)&pool->listener)) return;
  uv_close((uv_handle_t *)&pool->listener, on_pool_handle_closed);
  uv_close((uv_handle_t *)&pool->respawn_timer, on_pool_handle_closed);
  uv_close((uv_handle_t *)&pool->stop_timer, on_pool_handle_closed);
}

static void on_stop_timer(uv_timer_t *t) {
  wk_pool *pool = t->data;
  for (wk_executor *e = pool->executors; e; e = e->next) kill_executor(e, "shutdown grace over");
}

static void close_unmatched(uv_handle_t *h, void *arg) {
  wk_pool *pool = arg;
  if (h->type != UV_NAMED_PIPE || h == (uv_handle_t *)&pool->listener || uv_is_closing(h)) return;
  wk_conn *c = h->data;
  if (c && c->pool == pool && !c->exec) conn_close(c);
}

void wk_pool_stop(wk_pool *pool, void (*done)(void *arg), void *arg) {
  pool->stopping = true;
  pool->stop_done = done;
  pool->stop_arg = arg;
  uv_timer_stop(&pool->respawn_timer);
  while (pool->queue_head) {
    wk_pool_call *call = pool->queue_head;
    pool->queue_head = call->next;
    finish_call(call);
  }
  pool->queue_tail = NULL;
  uv_walk(pool->loop, close_unmatched, pool);
  wk_frame bye = {.type = WK_FRAME_SHUTDOWN};
  for (wk_executor *e = pool->executors; e; e = e->next) {
    if (e->call) e->call->cancelled = true;
    if (e->conn) {
      conn_write_frame(e->conn, &bye, pool->cfg.max_frame);
    } else {
      kill_executor(e, "shutdown before it connected");
    }
  }
  uv_timer_start(&pool->stop_timer, on_stop_timer, (uint64_t)pool->cfg.shutdown_grace_ms, 0);
  maybe_finish_stop(pool);
}

static void *adapter_submit(void *impl, const wk_call_spec *spec, void *call_ctx) {
  return wk_pool_submit(impl, spec, call_ctx);
}

static void adapter_cancel(void *impl, void *handle) { wk_pool_cancel(impl, handle); }

wk_exec_adapter wk_pool_adapter(wk_pool *pool) {
  return (wk_exec_adapter){.impl = pool, .submit = adapter_submit, .cancel = adapter_cancel};
}
