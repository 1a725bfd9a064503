/* wk_send_budget.h: the byte bounds on streams' unsent messages (issue 11 §6).
 *
 * A stream's unsent messages are those queued for it and the one gRPC has not yet
 * taken (in flight). Each message is `own` bytes that belong to it alone (an event's
 * small head) plus, optionally, a `body` shared with other messages (wk_shared: an
 * encoded task result, one buffer for every stream that sends it). Two bounds:
 *
 *  - per stream (`stream_max`): the bytes this stream keeps alive. A body counts in
 *    full on every stream that holds it, since that stream alone would keep it alive;
 *    it counts once per stream when consecutive messages of the stream share it (a
 *    SNAPSHOT and the TERMINAL of a finished task carry the same result). A stream
 *    with nothing unsent takes one message whatever its size, so the bound is never
 *    below one message.
 *  - in all (`total_max`): the bytes held unsent by any stream, each body counted
 *    once however many streams hold it (the memory it really takes), plus every
 *    message's own bytes. No exception: a message that would push the total over is
 *    refused.
 *
 * Not thread-safe: the caller serialises every call on one budget (the gRPC server
 * holds its budget lock), and bodies' `held` counts are changed only here. */
#ifndef WK_SEND_BUDGET_H
#define WK_SEND_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/wk_shared.h"

typedef struct wk_send_budget {
  size_t stream_max; /* 0 = unbounded */
  size_t total_max;  /* 0 = unbounded */
  size_t total;      /* bytes held unsent now, shared bodies once */
} wk_send_budget;

/* One stream's part. Zero-initialise. */
typedef struct wk_send_stream {
  size_t bytes;               /* charged to this stream */
  uint32_t unsent;            /* messages charged and not yet released */
  const wk_shared *last_body; /* body of the newest unsent message (valid while unsent) */
} wk_send_stream;

/* One message's charge. Fill own and body; the budget sets body_charged. */
typedef struct wk_send_charge {
  size_t own;
  wk_shared *body;   /* not owned here: the message holds a reference */
  bool body_charged; /* this message carries its stream's charge for body */
} wk_send_charge;

typedef enum wk_send_verdict {
  WK_SEND_FITS = 0,
  WK_SEND_OVER_STREAM, /* the stream would exceed stream_max */
  WK_SEND_OVER_TOTAL,  /* all streams together would exceed total_max */
} wk_send_verdict;

/** Charges message `c` as the newest unsent message of stream `st`, or refuses it
 * (nothing changes) when a bound would be exceeded. */
wk_send_verdict wk_send_budget_add(wk_send_budget *b, wk_send_stream *st, wk_send_charge *c);

/** Releases the oldest unsent message `c` of `st` (sent, or dropped); `next` is the
 * message after it on the stream, or NULL. When `next` shares c's body, the stream
 * keeps the body's charge and `next` carries it from now on. */
void wk_send_budget_release(wk_send_budget *b, wk_send_stream *st, wk_send_charge *c,
                            wk_send_charge *next);

#endif
