/* wk_digest.h: the idempotency digest of a SubmitTaskRequest. A retried submission
 * must be recognised as the same request however its client encoded it, so the digest
 * is taken over a canonical form, never over the bytes that arrived. Pure. */
#ifndef WK_DIGEST_H
#define WK_DIGEST_H

#include <stdint.h>

#include "worker/v1/worker.pb-c.h"

/** The 64-bit digest (wk_hash64 of function.args, seeded with the wk_hash64 of the
 * protobuf encoding of the rest of req's canonical form, so the args are never copied):
 * slot_id cleared (a retry may carry the slot it was given, or none), and the entries
 * of every map field (labels, function.options, result_handler.options) in byte order
 * of their keys, one per key, the last one received winning (protobuf's map
 * semantics). Fields are encoded in field-number order, as protobuf-c always does.
 * Two requests that protobuf says are equal get the same digest, whatever order their
 * map entries arrived in (Go's encoder randomises it). Borrows req; allocates only
 * temporarily. */
uint64_t wk_submit_digest(const Worker__V1__SubmitTaskRequest *req);

#endif
