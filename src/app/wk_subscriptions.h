/* wk_subscriptions.h: the SubscriptionManager. One subscriber per WatchTasks stream;
 * many streams may watch one task and one stream may watch many. A stream is an owner
 * (the default) or an observer (WatchTasksRequest.observe): only owners count for the
 * core. It translates the first owner's attach, the last owner's detach and an owner's
 * broken stream into the core's watch events; observers never start, stop or extend
 * a task's watch grace (OWNER_LOST),
 * sends a SNAPSHOT per task first, then PHASE_CHANGED events, then the TERMINAL
 * event, and ends the stream OK once every watched task's terminal event is sent.
 *
 * Phase changes coalesce: wk_subs_on_phase only marks the task, and
 * wk_subs_flush_phases (the orchestrator calls it once per loop turn, after the turn's
 * callbacks) sends one PHASE_CHANGED with the task's phase at that moment. A watcher
 * thus misses phases a task entered and left within one turn (e.g. BUILDER when a
 * "single" builder ran at once, WRITER when the task converged in the same turn), but
 * never its SNAPSHOT nor its TERMINAL event, which go out at once.
 *
 * Each event is encoded once: its TaskResult into a wk_shared body that every stream
 * sending it references (the gRPC server never copies it), behind a small per-kind
 * head. A stream the server refuses an event for (over watch_stream_max_bytes or
 * watch_total_max_bytes, or too many queued events) is ended at once with
 * RESOURCE_EXHAUSTED naming the bound (a "watch_stream_ended" log line says which),
 * and when it closes it counts as a disconnected watcher: the tasks it alone watched
 * start their grace (OWNER_LOST), as when a client goes away.
 * Runs on the actor thread. */
#ifndef WK_SUBSCRIPTIONS_H
#define WK_SUBSCRIPTIONS_H

#include <stdbool.h>

#include "adapters/wk_grpc_server.h"
#include "core/wk_core.h"

typedef struct wk_subs wk_subs;

/** Creates the manager over `core` (not owned). */
wk_subs *wk_subs_create(wk_core *core);
/** The watch-disconnect grace every SNAPSHOT tells its watcher (owner_grace_ms). */
void wk_subs_set_owner_grace(wk_subs *subs, uint64_t ms);
/** Ends every open stream with UNAVAILABLE, releases every rpc, frees the manager. */
void wk_subs_destroy(wk_subs *subs);

/** Starts a WatchTasks stream (takes the rpc's reference). Unknown task ids end it
 * NOT_FOUND before anything is attached. */
void wk_subs_watch(wk_subs *subs, wk_rpc *rpc, int64_t now_ms, int64_t wall_offset_ms);
/** A task entered a new phase: its watchers get a PHASE_CHANGED at the next
 * wk_subs_flush_phases (one, with the phase then), unless it converges first. */
void wk_subs_on_phase(wk_subs *subs, const wk_task_result *r);
/** Sends the PHASE_CHANGED events due (each task's latest phase, encoded once for all
 * of its watchers; none for a task that converged or was forgotten since). Returns
 * how many tasks were due. */
size_t wk_subs_flush_phases(wk_subs *subs, int64_t wall_offset_ms);
/** True when a PHASE_CHANGED waits for wk_subs_flush_phases. */
bool wk_subs_phases_pending(const wk_subs *subs);
/** The calls of a task moved on: PROGRESS (calls done, failed, retried, total) to its
 * watchers that asked for it (WatchTasksRequest.progress), encoded once when any does.
 * The caller bounds the rate. */
void wk_subs_on_progress(wk_subs *subs, const wk_task_result *r, int64_t wall_offset_ms);
/** True when a watcher of task `id` (len bytes) asked for PROGRESS events. O(1). */
bool wk_subs_progress_wanted(const wk_subs *subs, const char *id, size_t len);
/** A task converged: TERMINAL to its watchers; streams with nothing left end OK. */
void wk_subs_on_terminal(wk_subs *subs, const wk_task_result *r, int64_t wall_offset_ms);
/** The client side of a stream closed; `cancelled` when it went away early. Tasks it
 * still watched lose a watcher (WatchDisconnected when it was the last). */
void wk_subs_on_closed(wk_subs *subs, wk_rpc *rpc, bool cancelled, int64_t now_ms);
/** True when `rpc` is one of the manager's streams. */
bool wk_subs_owns(const wk_subs *subs, const wk_rpc *rpc);
/** Number of open streams. */
uint32_t wk_subs_streams(const wk_subs *subs);
/** Timer: forgets cached encodings of terminal results that no stream holds any more
 * (a finished task's result is encoded once for every stream that attaches while an
 * earlier one still holds it unsent). */
void wk_subs_tick(wk_subs *subs);
/** Number of cached terminal-result encodings (at most 64). */
uint32_t wk_subs_cached_bodies(const wk_subs *subs);

#endif
