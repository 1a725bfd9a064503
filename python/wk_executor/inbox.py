"""Frames from the Worker: split the received bytes into frames and act on each, in
order (docs/specs/executor-protocol.md §1, §6, §7): CALLs are queued, CANCEL flags or
answers, RECALL gives a queued call back, PING is answered, SHUTDOWN queues the end, EOF
cancels."""

from __future__ import annotations

import time

from .protocol import (CALL, CANCEL, PING, PONG, RECALL, SCRATCH_RESULT, SHUTDOWN, STACK_REQUEST,
                       SUBCALLS_RESULT, TO_WORKER_ONLY, U32, Call, ProtocolError, encode_error_result,
                       encode_not_started, encode_stack, encode_u64_frame, parse_call,
                       parse_scratch_result, parse_subcalls_result, parse_u64_body)
from .state import SHUTDOWN_ITEM, State


class Inbox(State):
    """Runs on whichever thread reads (channel.Channel.feed). Uses send_quietly() of
    channel.Channel, deliver() and deliver_scratch() of subcalls.Subcalls and format_stack() of
    watchdog.Watchdog."""

    def dispatch(self, buf: bytearray, n: int) -> int:
        """Handles every complete frame in buf[:n]; returns the bytes they took. Parsed
        frames keep no reference into buf. Raises ProtocolError."""
        off = 0
        calls = []
        replies = []
        now = time.monotonic()
        with memoryview(buf) as mv:
            while n - off >= 4:
                (length,) = U32.unpack_from(mv, off)
                if length > self.max_frame:
                    raise ProtocolError(f"frame length {length} above the limit {self.max_frame}")
                if length == 0:
                    raise ProtocolError("frame length 0")
                if n - off - 4 < length:
                    break
                ftype = mv[off + 4]
                body, end = off + 5, off + 4 + length
                off = end
                if ftype == CALL:
                    calls.append(parse_call(mv, body, end, now))
                    continue
                if calls:  # keep order: CALLs before this frame are queued first
                    self.enqueue(calls, replies)
                    calls = []
                if ftype == CANCEL:
                    self.cancel(parse_u64_body(mv, body, end, "CANCEL"), replies)
                elif ftype == RECALL:
                    self.recall(parse_u64_body(mv, body, end, "RECALL"), replies)
                elif ftype == PING:
                    replies.append(encode_u64_frame(PONG, parse_u64_body(mv, body, end, "PING")))
                elif ftype == PONG:
                    parse_u64_body(mv, body, end, "PONG")
                elif ftype == SUBCALLS_RESULT:
                    self.deliver(*parse_subcalls_result(mv, body, end))
                elif ftype == SCRATCH_RESULT:
                    self.deliver_scratch(*parse_scratch_result(mv, body, end))
                elif ftype == STACK_REQUEST:
                    call_id = parse_u64_body(mv, body, end, "STACK_REQUEST")
                    replies.append(encode_stack(call_id, self.format_stack(call_id)))
                elif ftype == SHUTDOWN:
                    if end != body:
                        raise ProtocolError("SHUTDOWN has a body")
                    with self.cv:
                        if not self.shutdown_seen:
                            self.shutdown_seen = True
                            self.queue.append(SHUTDOWN_ITEM)
                            self.cv.notify()
                elif ftype in TO_WORKER_ONLY:
                    raise ProtocolError(f"frame type {ftype} travels executor -> worker only")
                else:
                    raise ProtocolError(f"unknown frame type {ftype}")
        if calls:
            self.enqueue(calls, replies)
        if replies:
            self.send_quietly(b"".join(replies))
        return off

    def enqueue(self, calls: list[Call], replies: list[bytes]) -> None:
        """Queues received CALLs (after SHUTDOWN: answers them ShuttingDown). Raises
        ProtocolError for a CALL whose id is queued or running already: two RESULTs with
        one id would answer the Worker's single call twice."""
        with self.cv:
            ids = {c.call_id for c in calls}
            if (len(ids) != len(calls) or not ids.isdisjoint(self.pending)
                    or any(r.call_id in ids for r in self.running)):
                raise ProtocolError("a CALL whose id is queued or running already")
            if self.shutdown_seen:
                for c in calls:
                    replies.append(encode_error_result(c.call_id, "ShuttingDown",
                                                       "CALL after SHUTDOWN: not run"))
                return
            for c in calls:
                self.pending[c.call_id] = c
                self.queue.append(c)
            self.cv.notify()

    def cancel(self, call_id: int, replies: list[bytes]) -> None:
        """CANCEL: flags a running call, answers a queued one, ignores an unknown one."""
        with self.cv:
            for cur in self.running:
                if cur.call_id == call_id:
                    # cooperative: ctx.cancelled / ctx.check_cancelled(); a call waiting
                    # for subcalls stops waiting (raises worker.Cancelled)
                    cur.cancelled = True
                    self.cv.notify()
                    return
            c = self.pending.pop(call_id, None)
            if c is None:
                return  # finished already: its RESULT is on the way
            c.cancelled = True  # the main thread skips it
        replies.append(encode_error_result(call_id, "Cancelled", "cancelled before it started"))

    def recall(self, call_id: int, replies: list[bytes]) -> None:
        """RECALL: gives a queued call back (RESULT NOT_STARTED); ignores one that started
        or finished (its RESULT comes as usual). The answer is written before the lock is
        let go, so the call is never skipped while its answer could still be lost (the
        Worker reads the started file after a death: §7)."""
        if replies:  # keep order: answers decided before this one go out first
            self.send_quietly(b"".join(replies))
            del replies[:]
        with self.cv:
            c = self.pending.pop(call_id, None)
            if c is None:
                return
            c.cancelled = True  # the main thread skips it
            self.send_quietly(encode_not_started(call_id))

    def mark_closed(self) -> None:
        """The Worker hung up: running calls are cancelled, queued ones dropped."""
        with self.cv:
            self.closed = True
            for c in self.running:
                c.cancelled = True
            self.queue.clear()
            self.pending.clear()
            self.cv.notify()
