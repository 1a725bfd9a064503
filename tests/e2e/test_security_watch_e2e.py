"""Attack (issue 11 §6, slow consumers): WatchTasks streams that are never read.

Events carry full task results. A client that opens WatchTasks and stops reading must
not make the worker hold those results for it without bound: each stream's unsent
bytes are bounded (`watch_stream_max_bytes`), so are all streams' together
(`watch_total_max_bytes`), an event is encoded once and shared by every stream that
sends it, and a stream over its bound is ended RESOURCE_EXHAUSTED and counts as a
disconnected watcher (its tasks fail OWNER_LOST after the grace when nobody else
watches them).

The attacking client speaks HTTP/2 on a raw socket: it sends the connection preface,
its SETTINGS, and one HEADERS + DATA pair per WatchTasks stream, and never reads the
socket again (so it never sends a WINDOW_UPDATE either). The worker's memory is its
VmRSS in /proc."""

import os
import socket
import struct
import threading
import time

import grpc
import pytest

from conftest import pb

BIG = ("import time\n"
       "def handler(args, ctx):\n"
       "    time.sleep(args.get('sleep', 0))\n"
       "    return 'x' * args['n']\n")

MiB = 1 << 20


def rss_mb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


# ---- a raw HTTP/2 client that never reads ---------------------------------------------


def _hpack_int(value, prefix_bits, first_byte_flags=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte_flags | value])
    out = [first_byte_flags | limit]
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_literal(name, value):
    """A header as 'literal without indexing, new name', no Huffman coding."""
    name, value = name.encode(), value.encode()
    return (b"\x00" + _hpack_int(len(name), 7) + name + _hpack_int(len(value), 7) + value)


def _frame(kind, flags, stream_id, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream_id) + payload


class SilentClient(object):
    """One TCP connection carrying `len(requests)` WatchTasks streams; after sending them
    it never reads a byte."""

    def __init__(self, port, requests):
        self.sock = socket.create_connection(("127.0.0.1", port))
        # a small receive buffer: the kernel holds little of what the worker sends
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        out = [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", _frame(0x4, 0, 0, b"")]
        headers = b"".join(_hpack_literal(k, v) for k, v in (
            (":method", "POST"), (":scheme", "http"),
            (":path", "/worker.v1.WorkerService/WatchTasks"),
            (":authority", "127.0.0.1:%d" % port), ("content-type", "application/grpc"),
            ("te", "trailers")))
        for i, req in enumerate(requests):
            sid = 2 * i + 1
            body = req.SerializeToString()
            out.append(_frame(0x1, 0x4, sid, headers))                       # END_HEADERS
            out.append(_frame(0x0, 0x1, sid, b"\x00" + struct.pack(">I", len(body)) + body))
        self.sock.sendall(b"".join(out))

    def read_all(self, timeout=5):
        """What the worker sent (for looking for a status message in its trailers)."""
        self.sock.setblocking(False)
        data = bytearray()
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
            except BlockingIOError:
                time.sleep(0.05)
        return bytes(data)

    def close(self):
        self.sock.close()


def peak_rss_mb(pid, seconds, stop=None):
    peak = 0.0
    deadline = time.time() + seconds
    while time.time() < deadline and not (stop and stop()):
        peak = max(peak, rss_mb(pid))
        time.sleep(0.05)
    return max(peak, rss_mb(pid))


def assert_rss_bounded(w, base, bound_mb, done, seconds=20):
    """Samples the worker's RSS until done() (or `seconds`), then 1.5 s more; its peak
    stays within base + bound_mb."""
    peak = max(peak_rss_mb(w.proc.pid, seconds, done), peak_rss_mb(w.proc.pid, 1.5))
    print("RSS %.0f MB -> peak %.0f MB" % (base, peak))
    assert peak - base < bound_mb, "worker RSS grew by %.0f MB (from %.0f MB)" % (peak - base, base)


def run_big(w, ids, n):
    """Runs tasks returning n bytes each, 8 at a time (within the default task_slots)."""
    for at in range(0, len(ids), 8):
        for tid in ids[at:at + 8]:
            w.submit(tid, "big", {"n": n})
        for tid in ids[at:at + 8]:
            r = w.wait_terminal(tid, timeout=60)
            assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message


def served_normally(w, tid):
    """A well-behaved client: submits, watches to the end, reads every event."""
    w.submit(tid, "big", {"n": 1000})
    events = list(w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), timeout=30))
    assert events[-1].kind == pb.TaskEvent.KIND_TERMINAL
    assert events[-1].result.state == pb.TASK_STATE_SUCCEEDED
    return events


def ended_streams(w, setting):
    return [e for e in w.events("watch_stream_ended") if e.get("setting") == setting]


# ---- the attacks ------------------------------------------------------------------------


def test_never_read_streams_hold_bounded_memory(worker_factory):
    """16 tasks with 3 MB results; 8 connections each watch all of them and never read.
    Unbounded, each stream queues 32 events of 3 MB (about 770 MB in all); bounded by
    watch_stream_max_bytes (8 MiB by default) each stream is ended after a few."""
    w = worker_factory("--max-retained-bytes", "128MiB")
    w.wait_serving()
    w.deploy("big", BIG)
    ids = ["big-%02d" % i for i in range(16)]
    run_big(w, ids, 3 * MiB)
    base = rss_mb(w.proc.pid)
    clients = [SilentClient(w.port, [pb.WatchTasksRequest(task_ids=ids)]) for _ in range(8)]
    try:
        assert_rss_bounded(w, base, 120,
                           lambda: len(ended_streams(w, "watch_stream_max_bytes")) >= 8)
        # every attacking stream was ended for its bound, and says which setting
        ended = ended_streams(w, "watch_stream_max_bytes")
        assert len(ended) == 8, w.events("watch_stream_ended")
        # ... with RESOURCE_EXHAUSTED naming the setting, in the trailers it was sent
        seen = clients[0].read_all(timeout=2)
        assert b"watch_stream_max_bytes" in seen
        # a well-behaved client is served meanwhile
        served_normally(w, "polite")
    finally:
        for c in clients:
            c.close()


def test_a_slow_grpc_client_gets_resource_exhausted(worker_factory):
    """A real gRPC client with a small flow-control window that stops reading its stream
    gets RESOURCE_EXHAUSTED naming watch_stream_max_bytes once it reads again."""
    w = worker_factory("--watch-stream-max-bytes", "4MiB")
    w.wait_serving()
    w.deploy("big", BIG)
    ids = ["slow-%d" % i for i in range(4)]
    run_big(w, ids, 2 * MiB)
    ch = grpc.insecure_channel(w.addr, options=[("grpc.http2.bdp_probe", 0),
                                                ("grpc.http2.lookahead_bytes", 1024)])
    try:
        stub = __import__("conftest").pb_grpc.WorkerServiceStub(ch)
        stream = stub.WatchTasks(pb.WatchTasksRequest(task_ids=ids), timeout=30)
        deadline = time.time() + 20
        while time.time() < deadline and not ended_streams(w, "watch_stream_max_bytes"):
            time.sleep(0.05)
        with pytest.raises(grpc.RpcError) as e:
            for _ in stream:
                pass
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
        assert "watch_stream_max_bytes" in e.value.details()
    finally:
        ch.close()


def test_an_ended_stream_is_a_disconnected_watcher(worker_factory):
    """The stream watches a running task and big finished ones; it overflows and is
    ended, so the running task has lost its only watcher: OWNER_LOST after the grace."""
    w = worker_factory("--watch-grace-ms", "300")
    w.wait_serving()
    w.deploy("big", BIG)
    ids = ["done-%d" % i for i in range(6)]
    run_big(w, ids, 3 * MiB)
    w.submit("orphan", "big", {"n": 10, "sleep": 60})
    c = SilentClient(w.port, [pb.WatchTasksRequest(task_ids=["orphan"] + ids)])
    try:
        r = w.wait_terminal("orphan", timeout=20)
        assert r.state == pb.TASK_STATE_FAILED
        assert r.failure_code == pb.FAILURE_CODE_OWNER_LOST
        assert ended_streams(w, "watch_stream_max_bytes")
    finally:
        c.close()


def test_a_thousand_idle_streams_share_one_event(worker_factory):
    """1,000 streams (10 connections) watch one task whose 3.5 MB result comes after they
    attached, and never read: the TERMINAL event is encoded once and shared (about 3.5 GB
    if each stream held its own copy)."""
    w = worker_factory()
    w.wait_serving()
    w.deploy("big", BIG)
    w.submit("shared", "big", {"n": 3 * MiB + MiB // 2, "sleep": 3})
    base = rss_mb(w.proc.pid)
    req = pb.WatchTasksRequest(task_ids=["shared"])
    clients = [SilentClient(w.port, [req] * 100) for _ in range(10)]
    try:
        w.wait_terminal("shared", timeout=60)
        assert_rss_bounded(w, base, 250, lambda: False, seconds=3)
        # within their bounds (3.5 MB each, 3.5 MB in all): none was ended
        assert not w.events("watch_stream_ended"), w.events("watch_stream_ended")[:3]
        served_normally(w, "polite")
    finally:
        for c in clients:
            c.close()


def test_total_bound_over_many_streams(worker_factory):
    """Streams on different big tasks do not share: the total over all streams
    (watch_total_max_bytes) ends the ones that would push it over."""
    w = worker_factory("--watch-total-max-bytes", "24MiB", "--max-retained-bytes", "128MiB")
    w.wait_serving()
    w.deploy("big", BIG)
    ids = ["tot-%02d" % i for i in range(20)]
    run_big(w, ids, 3 * MiB)
    base = rss_mb(w.proc.pid)
    clients = [SilentClient(w.port, [pb.WatchTasksRequest(task_ids=[tid]) for tid in ids])]
    try:
        assert_rss_bounded(w, base, 100, lambda: len(w.events("watch_stream_ended")) >= 12)
        ended = ended_streams(w, "watch_total_max_bytes")
        assert len(ended) >= 12, w.events("watch_stream_ended")
        served_normally(w, "polite")
    finally:
        for c in clients:
            c.close()
