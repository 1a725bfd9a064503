#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_frame into corpus/frame/ beside this script.

The frames are built here with struct, independently of the C encoder, so replaying
the corpus (fuzz_frame -runs=0 corpus/frame) also checks that the C decoder agrees
with docs/executor-protocol.md. Re-run after a protocol change and commit the files.
"""
import os
import struct

HELLO, CALL, RESULT, CANCEL, PING, PONG, SHUTDOWN = range(1, 8)
SUBCALLS, SUBCALLS_RESULT, STACK_REQUEST, STACK = range(8, 12)


def s(b):
    return struct.pack("<I", len(b)) + b


def frame(t, body=b""):
    return struct.pack("<IB", len(body) + 1, t) + body


def call(cid, args=b"[1,2]", ctype=0, deadline=30000):
    return frame(CALL, struct.pack("<Q", cid) + s(b"task-1") + s(b"echo") + struct.pack("<Q", 3)
                 + s(b"/code/echo/3") + s(b"main:handler") + struct.pack("<BII", ctype, cid, deadline)
                 + s(b"/scratch/task-1") + s(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
                 + s(args))


def result(cid, status=0, ctype=0, out=b'{"ok":true}', etype=b"", msg=b"", tb=b"", so=b"", se=b""):
    return frame(RESULT, struct.pack("<QBB", cid, status, ctype) + s(out) + s(etype) + s(msg) + s(tb)
                 + struct.pack("<QQ", 1500, 20480) + s(so) + s(se))


def subcalls(parent, req, args, fn=b"", ep=b"", ctype=0, count=None):
    n = len(args) if count is None else count
    return frame(SUBCALLS, struct.pack("<QQ", parent, req) + s(fn) + s(ep)
                 + struct.pack("<BI", ctype, n) + b"".join(s(a) for a in args))


def child(status=0, ctype=0, out=b"", etype=b"", msg=b"", tb=b""):
    return struct.pack("<BB", status, ctype) + s(out) + s(etype) + s(msg) + s(tb)


def subcalls_result(req, kids, count=None):
    n = len(kids) if count is None else count
    return frame(SUBCALLS_RESULT, struct.pack("<QI", req, n) + b"".join(kids))


SEEDS = {
    "hello": frame(HELLO, struct.pack("<II", 1, 4242)),
    "call_json": call(1),
    "call_bytes": call(2, args=bytes(range(16)), ctype=1, deadline=0),
    "result_ok": result(1, so=b"printed\n"),
    "result_error": result(2, status=1, out=b"", etype=b"ValueError", msg=b"bad input",
                           tb=b"Traceback (most recent call last):\n  File \"main.py\", line 2\nValueError: bad input\n",
                           se=b"log line\n"),
    "result_retryable_bytes": result(3, status=2, ctype=1, out=b"\x00\xff", etype=b"Retryable"),
    "cancel": frame(CANCEL, struct.pack("<Q", 7)),
    "ping_pong": frame(PING, struct.pack("<Q", 0x1122334455667788)) + frame(PONG, struct.pack("<Q", 9)),
    "shutdown": frame(SHUTDOWN),
    "batch": b"".join(call(i) for i in range(8)) + frame(CANCEL, struct.pack("<Q", 3)) + frame(SHUTDOWN),
    "truncated_call": call(5)[:40],
    "empty_frame": struct.pack("<I", 0),
    "unknown_type": frame(0x42, b"xyz"),
    "oversized_prefix": struct.pack("<IB", 0xFFFFFFF0, CALL),
    # version 2: subcalls and stack capture
    "subcalls_json": subcalls(1, 1, [b"1", b"[2,3]", b'{"k":"v"}']),
    "subcalls_bytes_other_fn": subcalls(7, 2, [b"\x00\x01", b""], fn=b"resize", ep=b"main:resize", ctype=1),
    "subcalls_result_mixed": subcalls_result(1, [
        child(out=b"4"),
        child(status=1, etype=b"ValueError", msg=b"bad", tb=b"Traceback (most recent call last):\n"),
        child(status=2, ctype=1, out=b"\xff", etype=b"Retryable"),
    ]),
    "stack_request": frame(STACK_REQUEST, struct.pack("<Q", 12)),
    "stack": frame(STACK, struct.pack("<Q", 12) + s(b'  File "main.py", line 3, in handler\n    while True: pass\n')),
    "stack_empty": frame(STACK, struct.pack("<Q", 13) + s(b"")),
    "subcalls_count0": subcalls(1, 1, [], count=0),
    "subcalls_result_count0": subcalls_result(1, [], count=0),
    "subcalls_result_bad_status": subcalls_result(1, [child(status=3)]),
    "subcalls_hostile_count": subcalls(1, 1, [b"x"], count=0xFFFFFFFF),
    "subcalls_trailing": subcalls(1, 1, [b"x", b"y"], count=1),
    "worker_stream_nested": call(1) + subcalls_result(1, [child(out=b"1")]) + call(2)
                            + frame(STACK_REQUEST, struct.pack("<Q", 1)) + frame(PING, struct.pack("<Q", 3))
                            + frame(CANCEL, struct.pack("<Q", 2)) + frame(SHUTDOWN),
    "executor_stream_nested": frame(HELLO, struct.pack("<II", 2, 4242)) + subcalls(1, 1, [b"1", b"2"])
                              + result(2) + result(3) + frame(STACK, struct.pack("<Q", 1) + s(b"stack"))
                              + frame(PONG, struct.pack("<Q", 3)) + result(1),
}


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "frame")
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(SEEDS.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(SEEDS), out))


if __name__ == "__main__":
    main()
