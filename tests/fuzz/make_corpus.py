#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into corpus/<name>/ beside this script.

  frame     executor frames, built here with struct, independently of the C encoder, so
            replaying the corpus (fuzz_frame -runs=0 corpus/frame) also checks that the
            C decoder agrees with docs/specs/executor-protocol.md
  validate  a method byte, then a gRPC request message (protobuf wire format, encoded
            here by hand from proto/worker/v1/worker.proto and health.proto)
  config    config files (YAML)
  etcd      an operation byte, a knobs byte, then etcd JSON-gateway answers
  reflection  a mode byte, then a ServerReflectionRequest or a FileDescriptorSet
  journal   core journal files, built here with struct and a CRC-32C of our own,
            independently of the C writer (src/adapters/wk_journal.h)
            (input formats: the comments at the top of fuzz_<name>.c)

Usage: make_corpus.py [name ...]   (no name: every corpus). Files are only written,
never deleted, so crash reproducers copied into a corpus directory stay. Re-run after a
protocol or format change and commit the files.
"""
import base64
import json
import os
import struct
import sys

HELLO, CALL, RESULT, CANCEL, PING, PONG, SHUTDOWN = range(1, 8)
SUBCALLS, SUBCALLS_RESULT, STACK_REQUEST, STACK, RECALL = range(8, 13)


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
    # version 3: calls given back before they started
    "recall": frame(RECALL, struct.pack("<Q", 8)),
    "result_not_started": result(8, status=3, out=b""),
    "subcalls_result_not_started_child": subcalls_result(1, [child(status=3)]),
    "worker_stream_recall": call(1) + call(2) + frame(RECALL, struct.pack("<Q", 2))
                            + frame(CANCEL, struct.pack("<Q", 1)) + frame(SHUTDOWN),
}


# ---- validate: gRPC requests ---------------------------------------------------------
# First byte: the method (low 3 bits, plus 8 when bit 4 is set: 0 RequestTaskSlot,
# 1 SubmitTask, 2 GetTaskResult, 3 WatchTasks, 4 CancelTask, 5 Health.Check,
# 6 Health.Watch, 7 ListTasks, 8 GetTaskLogs, 9 DeployCode, 10 SetCurrentEpoch, 11 and
# up unknown), bit 3: tight limits
# (timeout 1000 ms, 4 watched tasks).
SLOT, SUBMIT, GET, WATCH, CANCEL, HEALTH_CHECK, HEALTH_WATCH, LIST = range(8)
LOGS = 0x10
DEPLOY = 0x11
SETCUR = 0x12
UNKNOWN = 0x17
TIGHT = 8


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_varint(field, n):
    return varint(field << 3) + varint(n)


def pb_bytes(field, b):
    if isinstance(b, str):
        b = b.encode()
    return varint(field << 3 | 2) + varint(len(b)) + b


def pb_double(field, x):
    return varint(field << 3 | 1) + struct.pack("<d", x)


def pb_map(field, pairs):
    return b"".join(pb_bytes(field, pb_bytes(1, k) + pb_bytes(2, v)) for k, v in pairs)


def req(method, body=b""):
    return bytes([method]) + body


def function(name="echo", type_="", entrypoint="", args=b"", ctype=0, epoch=0, options=()):
    body = b""
    if type_:
        body += pb_bytes(1, type_)
    if name is not None:
        body += pb_bytes(2, name)
    if epoch:
        body += pb_varint(3, epoch)
    if entrypoint:
        body += pb_bytes(4, entrypoint)
    if args:
        body += pb_bytes(5, args)
    if ctype:
        body += pb_varint(6, ctype)
    return body + pb_map(7, options)


def submit(task_id="task-1", fn=None, extra=b""):
    return pb_bytes(1, task_id) + pb_bytes(3, function() if fn is None else fn) + extra


SUBMIT_FULL = (pb_bytes(1, "task-7f3a") + pb_varint(2, 12)
               + pb_bytes(3, function("resize.images", "map", "main:handler", b"[1,2,3]", 0, 3,
                                      [("chunk", "4"), ("order", "keep")]))
               + pb_bytes(4, pb_bytes(1, "file") + pb_map(2, [("path", "/tmp/out.jsonl")]))
               + pb_varint(5, 60000)
               + pb_bytes(6, pb_varint(1, 1) + pb_varint(2, 3))
               + pb_bytes(7, pb_varint(1, 3) + pb_varint(2, 100) + pb_varint(3, 1000)
                          + pb_double(4, 2.0) + pb_varint(5, 1) + pb_varint(6, 1))
               + pb_map(8, [("team", "ml"), ("env", "prod")])
               + pb_varint(9, 5000))

VALIDATE_SEEDS = {
    "slot_ok": req(SLOT, pb_bytes(1, "task-1") + pb_varint(2, 30000)),
    "slot_empty": req(SLOT),
    "slot_ttl_too_long": req(SLOT, pb_bytes(1, "task-1") + pb_varint(2, 1 << 41)),
    "slot_id_space": req(SLOT, pb_bytes(1, "task 1")),
    "slot_id_129": req(SLOT, pb_bytes(1, "t" * 129)),
    "submit_full": req(SUBMIT, SUBMIT_FULL),
    "submit_minimal": req(SUBMIT, submit()),
    "submit_tight_timeout": req(SUBMIT | TIGHT, submit(extra=pb_varint(5, 5000))),
    "submit_no_function": req(SUBMIT, pb_bytes(1, "task-1")),
    "submit_name_dot": req(SUBMIT, submit(fn=function(".hidden"))),
    "submit_name_bad_byte": req(SUBMIT, submit(fn=function("a/b"))),
    "submit_type_upper": req(SUBMIT, submit(fn=function(type_="Map"))),
    "submit_entrypoint_bad": req(SUBMIT, submit(fn=function(entrypoint="main:"))),
    "submit_entrypoint_dotted": req(SUBMIT, submit(fn=function(entrypoint="pkg.mod:Cls.run"))),
    "submit_content_type_5": req(SUBMIT, submit(fn=function(ctype=5))),
    "submit_name_utf8_bad": req(SUBMIT, submit(fn=pb_bytes(2, b"ech\xff"))),
    "submit_label_nul": req(SUBMIT, submit(extra=pb_map(8, [(b"k\x00", "v")]))),
    "submit_label_utf8": req(SUBMIT, submit(extra=pb_map(8, [("k", "\u00e9\u4e2d\U0001f600")]))),
    "submit_labels_65": req(SUBMIT, submit(extra=pb_map(8, [("k%d" % i, "v") for i in range(65)]))),
    "submit_failure_mode_9": req(SUBMIT, submit(extra=pb_bytes(6, pb_varint(1, 9)))),
    "submit_retry_nan": req(SUBMIT, submit(extra=pb_bytes(7, pb_double(4, float("nan"))))),
    "submit_retry_backoff_order": req(SUBMIT, submit(extra=pb_bytes(7, pb_varint(2, 500) + pb_varint(3, 100)))),
    "submit_result_handler_bad": req(SUBMIT, submit(extra=pb_bytes(4, pb_bytes(1, "File!")))),
    "submit_unknown_fields": req(SUBMIT, submit(extra=pb_varint(99, 1) + pb_bytes(100, b"\xff\x00")
                                                 + varint(101 << 3 | 5) + b"\x01\x02\x03\x04")),
    "submit_function_twice": req(SUBMIT, submit(extra=pb_bytes(3, function(entrypoint="m:f")))),
    "submit_truncated": req(SUBMIT, SUBMIT_FULL[:57]),
    "submit_group_wiretype": req(SUBMIT, submit() + varint(20 << 3 | 3) + varint(20 << 3 | 4)),
    "submit_overlong_varint": req(SUBMIT, pb_bytes(1, "task-1") + varint(5 << 3) + b"\xff" * 10 + b"\x01"),
    # field number 0 in an overlong tag (0x80 0x00): protobuf-c accepts it, the scan must not
    "slot_field0_overlong": req(SLOT, pb_bytes(1, "task-1") + b"\x80\x00" + varint(1)),
    "health_field0_overlong": req(HEALTH_CHECK, b"\x80\x80\x00\x00"),
    "submit_field0_nested": req(SUBMIT, submit(fn=function() + b"\x80\x00\x05")),
    "get_ok": req(GET, pb_bytes(1, "task-1")),
    "get_wrong_wiretype": req(GET, pb_varint(1, 7)),
    "watch_three": req(WATCH, b"".join(pb_bytes(1, "task-%d" % i) for i in range(3))),
    "watch_dup": req(WATCH, b"".join(pb_bytes(1, t) for t in ["a", "b", "c", "b", "a"])),
    "watch_none": req(WATCH),
    "watch_tight_5": req(WATCH | TIGHT, b"".join(pb_bytes(1, "t%d" % i) for i in range(5))),
    "cancel_ok": req(CANCEL, pb_bytes(1, "task-1") + pb_bytes(2, "user asked")),
    "cancel_reason_1025": req(CANCEL, pb_bytes(1, "task-1") + pb_bytes(2, "r" * 1025)),
    "health_check": req(HEALTH_CHECK, pb_bytes(1, "worker.v1.WorkerService")),
    "health_check_empty": req(HEALTH_CHECK),
    "health_watch_long": req(HEALTH_WATCH, pb_bytes(1, "s" * 257)),
    "unknown_method": req(UNKNOWN, pb_bytes(1, "task-1")),
    "deploy_ok": req(DEPLOY, pb_bytes(1, "fn") + pb_varint(2, 7) + pb_bytes(3, "ab" * 32)
                     + pb_bytes(4, pb_bytes(1, "main.py") + pb_bytes(2, "x = 1\n"))
                     + pb_varint(5, 1) + pb_bytes(6, "main:handler")),
    "deploy_bad_digest": req(DEPLOY, pb_bytes(1, "fn") + pb_bytes(3, "AB" * 32)),
    "deploy_bad_entrypoint": req(DEPLOY, pb_bytes(1, "fn") + pb_bytes(3, "ab" * 32)
                                 + pb_bytes(6, "no colon")),
    "setcur_ok": req(SETCUR, pb_bytes(1, "fn") + pb_varint(2, 3) + pb_bytes(3, "0f" * 32)),
    "setcur_zero": req(SETCUR, pb_bytes(1, "fn")),
    "list_empty": req(LIST),
    "list_full": req(LIST, pb_varint(1, 50) + pb_bytes(2, "s123") + pb_varint(3, 2)
                     + pb_varint(3, 4) + pb_map(4, [("team", "data"), ("env", "prod")])),
    "list_page_too_big": req(LIST, pb_varint(1, 1001)),
    "list_bad_token": req(LIST, pb_bytes(2, "s0123")),
    "list_bad_state": req(LIST, pb_varint(3, 9)),
    "logs_ok": req(LOGS, pb_bytes(1, "task-1")),
    "logs_one_call": req(LOGS, pb_bytes(1, "task-1") + pb_varint(2, 1) + pb_varint(3, 7)),
    "logs_call_without_one": req(LOGS, pb_bytes(1, "task-1") + pb_varint(3, 7)),
}

# ---- config: YAML files ---------------------------------------------------------------

CONFIG_SEEDS = {
    "full.yaml": b"""# a Worker's settings
listen_addr: "0.0.0.0:7070"
task_slots: 32
code_root: /srv/worker/code
scratch_root: ""
executors: 4
executors_max: 8
pipeline_depth: 16
executor_idle_timeout_ms: 5m
max_calls_per_executor: 100000
max_executor_rss_mb: 2048
executor_heartbeat_interval_ms: 2s
executor_heartbeat_timeout_ms: 10s
executor_rlimit_as_mb: 0
executor_rlimit_nofile: 4096
executor_rlimit_cpu_s: 0
python: /usr/bin/python3
executor_script: python/worker_executor.py
python_path: python
result_retention_ms: 10m
max_retained_results: 10000
max_retained_bytes: 256MiB
watch_disconnect_grace_ms: 10s
default_slot_ttl_ms: 30s
max_slot_ttl_ms: 10m
default_task_timeout_ms: 10m
max_task_timeout_ms: 1h
drain_timeout_ms: 30s
cancel_grace_ms: 2000ms
tick_ms: 500
max_message_bytes: 4MiB
max_inline_output_bytes: 4194304B
max_calls_per_task: 1000000
task_window_max: 256
subcall_max_depth: 4
max_calls_in_flight: 65536
etcd_endpoints: "http://10.0.0.5:2379,http://10.0.0.6:2379"
registry_prefix: /workers/
advertise_addr: "10.0.0.9:7070"
etcd_lease_ttl_s: 10
heartbeat_interval_ms: 1s
shadow_target_addr: ""
shadow_sample_percent: 0
builder_concurrency: 4
scan_concurrency: 4
executor_concurrency: 4
plugin_concurrency: 4
log_level: info
""",
    "minimal.yaml": b"task_slots: 8\n",
    "empty.yaml": b"",
    "comments_only.yaml": b"# nothing set\n\n# here\n",
    "null_document.yaml": b"---\n~\n...\n",
    "problems.yaml": b"""task_slot: 4
executors: "2"
pipeline_depth: [1, 2]
tick_ms: {a: 1}
drain_timeout_ms:
log_level: loud
task_slots: many
task_slots: 3
max_message_bytes: 4MB
max_task_timeout_ms: 1d
max_retained_results: -1
executor_rlimit_nofile: 99999999999999999999
cancel_grace_ms: -5s
? [complex, key]
: 1
""",
    "syntax_error.yaml": b"task_slots: [1, 2\nexecutors: 2\n",
    "syntax_error_indent.yaml": b"task_slots: 4\n  executors: 2\n",
    "tab_indent.yaml": b"task_slots:\n\t4\n",
    "two_documents.yaml": b"---\ntask_slots: 4\n---\nexecutors: 2\n",
    "scalar_root.yaml": b"just some text\n",
    "list_root.yaml": b"- task_slots\n- 4\n",
    "flow_mapping.yaml": b"{task_slots: 4, executors: 2, log_level: debug}\n",
    "anchor_alias.yaml": b"task_slots: &n 4\nexecutors: *n\n",
    "tags.yaml": b"task_slots: !!int 4\ncode_root: !!str /srv/code\n",
    "block_scalars.yaml": b"python_path: |\n  /a\n  /b\ncode_root: >-\n  /srv\n  code\n",
    "quoted_escapes.yaml": b'python: "/usr/bin/py\\x41"\ncode_root: \'/srv/it\'\'s\'\n',
    "nul_escape.yaml": b'python: "/usr/bin/\\0python3"\n',
    "newline_in_value.yaml": b'log_level: "in\\nfo"\n',
    "bad_utf8.yaml": b"code_root: /srv/\xff\xfe\n",
    "utf8_bom.yaml": b"\xef\xbb\xbftask_slots: 4\n",
    "utf16le.yaml": b"\xff\xfe" + "task_slots: 4\nlog_level: warn\n".encode("utf-16-le"),
    "too_long.yaml": b"listen_addr: " + b"a" * 300 + b":1\n",
    "limits.yaml": b"max_retained_bytes: 1TiB\nmax_calls_per_executor: 18446744073709551615\n"
                   b"executor_idle_timeout_ms: 9223372036854775807\nmax_message_bytes: 0B\n",
    "nulls.yaml": b"scratch_root: ~\nregistry_prefix: null\nadvertise_addr:\n",
}

# ---- etcd: JSON-gateway answers -------------------------------------------------------
# byte 0: operation; byte 1: knobs (bit 0: two endpoints; bits 1-7: body chunk size);
# then answers separated by "\n--\n", each an outcome digit and the body:
# 0 HTTP 200, 1 400, 2 404, 3 500, 4 503, 5 no status, 6 refused, 7 timeout after the body.
(E_WORKER_PARSE, E_B64, E_GRANT, E_KEEPALIVE, E_REVOKE, E_TTL, E_PUT, E_GET, E_RANGE,
 E_DELETE, E_DELETE_IF_LEASE, E_LIST_WORKERS) = range(12)
TWO_ENDPOINTS = 1


def chunks(n):
    return n << 1


def etcd(op, knobs=0, *answers):
    return bytes([op, knobs]) + b"\n--\n".join(a.encode() if isinstance(a, str) else a for a in answers)


def j(obj):
    return json.dumps(obj, separators=(",", ":"))


HEADER = {"cluster_id": "14841639068965178418", "member_id": "10276657743932975437",
          "revision": "12", "raft_term": "2"}
LEASE_NOT_FOUND = j({"error": "etcdserver: requested lease not found", "code": 5,
                     "message": "etcdserver: requested lease not found"})
UNAVAILABLE = j({"error": "etcdserver: leader changed", "code": 14, "message": "etcdserver: leader changed"})


def b64(s):
    return base64.b64encode(s if isinstance(s, bytes) else s.encode()).decode()


def worker_value(addr, free=13, ready=True, draining=False, **extra):
    v = {"address": addr, "task_slots": 16, "reserved_slots": 1,
         "running_tasks": 16 - free - 1 if isinstance(free, int) else 2, "free_slots": free, "ready": ready, "draining": draining, "deployment": "prod",
         "service": "worker", "version": "0.1.0", "updated_unix_ms": 1700000000000}
    v.update(extra)
    return j(v)


def kv(key, value, lease="7587862074529284868", rev="12"):
    return {"key": b64(key), "value": b64(value), "create_revision": "3", "mod_revision": rev,
            "version": "1", "lease": lease}


RANGE_WORKERS = j({"header": HEADER, "kvs": [
    kv("/workers/10.0.0.1:7070", worker_value("10.0.0.1:7070", free=3)),
    kv("/workers/10.0.0.2:7070", worker_value("", free=9)),
    kv("/workers/10.0.0.3:7070", worker_value("10.0.0.3:7070", draining=True)),
    kv("/workers/10.0.0.4:7070", "not json"),
    kv("/workers/10.0.0.5:7070", worker_value("10.0.0.5:7070", free=9, running_tasks=0)),
], "count": "5"})

ETCD_SEEDS = {
    "worker_valid": etcd(E_WORKER_PARSE, 0, worker_value("10.0.0.1:7070")),
    "worker_no_address": etcd(E_WORKER_PARSE, 0, worker_value("")),
    "worker_null_prefix": etcd(E_WORKER_PARSE, 1, worker_value("")),
    "worker_key_outside_prefix": etcd(E_WORKER_PARSE, 2, worker_value("")),
    "worker_string_numbers": etcd(E_WORKER_PARSE, 0, worker_value("a:1", free="13", updated_unix_ms="17")),
    "worker_negative": etcd(E_WORKER_PARSE, 0, worker_value("a:1", free=-1)),
    "worker_u32_overflow": etcd(E_WORKER_PARSE, 0, worker_value("a:1", task_slots=4294967296)),
    "worker_ready_string": etcd(E_WORKER_PARSE, 0, worker_value("a:1", ready="yes")),
    "worker_missing_slots": etcd(E_WORKER_PARSE, 0, j({"address": "a:1", "ready": True})),
    "worker_not_json": etcd(E_WORKER_PARSE, 0, "{\"address\": "),
    "worker_array": etcd(E_WORKER_PARSE, 0, "[1,2]"),
    "worker_nul_inside": etcd(E_WORKER_PARSE, 0, b'{"address":"a\x00b"}'),
    "worker_escaped_nul": etcd(E_WORKER_PARSE, 0, '{"address":"a\\u0000b","deployment":"\\u00e9"}'),
    "b64_padded": etcd(E_B64, 0, "aGVsbG8gd29ybGQ="),
    "b64_unpadded": etcd(E_B64, 0, "aGVsbG8"),
    "b64_urlsafe": etcd(E_B64, 0, "-_-_AA=="),
    "b64_bad_length": etcd(E_B64, 0, "aGVsb"),
    "b64_bad_char": etcd(E_B64, 0, "aGV*bG8="),
    "b64_only_padding": etcd(E_B64, 0, "===="),
    "grant_ok": etcd(E_GRANT, 0, "0" + j({"header": HEADER, "ID": "7587862074529284868", "TTL": "10"})),
    "grant_numbers": etcd(E_GRANT, 0, "0" + j({"ID": 7587862074529284868, "TTL": 10})),
    "grant_error_field": etcd(E_GRANT, 0, "0" + j({"ID": "1", "TTL": "10", "error": "etcdserver: too many leases"})),
    "grant_zero_ttl": etcd(E_GRANT, 0, "0" + j({"ID": "1", "TTL": "0"})),
    "grant_bad_id": etcd(E_GRANT, 0, "0" + j({"ID": "12x", "TTL": "10"})),
    "grant_failover": etcd(E_GRANT, TWO_ENDPOINTS, "4" + UNAVAILABLE, "0" + j({"ID": "5", "TTL": "10"})),
    "keepalive_ok": etcd(E_KEEPALIVE, 0, "0" + j({"result": {"header": HEADER, "ID": "7", "TTL": "10"}})),
    "keepalive_gone": etcd(E_KEEPALIVE, 0, "0" + j({"result": {"header": HEADER, "ID": "7"}})),
    "keepalive_error": etcd(E_KEEPALIVE, 0, "0" + j({"error": {"grpc_code": 5, "http_code": 404, "code": 5,
                                                             "message": "etcdserver: requested lease not found"}})),
    "keepalive_result_not_object": etcd(E_KEEPALIVE, 0, '0{"result":[]}'),
    "keepalive_chunked": etcd(E_KEEPALIVE, chunks(3), "0" + j({"result": {"ID": "7", "TTL": "9"}})),
    "revoke_ok": etcd(E_REVOKE, 0, "0" + j({"header": HEADER})),
    "revoke_not_found": etcd(E_REVOKE, 0, "2" + LEASE_NOT_FOUND),
    "ttl_ok": etcd(E_TTL, 0, "0" + j({"header": HEADER, "ID": "7", "TTL": "5", "grantedTTL": "10"})),
    "ttl_gone": etcd(E_TTL, 0, "0" + j({"ID": "7", "TTL": "-1"})),
    "ttl_malformed": etcd(E_TTL, 0, "0" + j({"TTL": True})),
    "put_ok": etcd(E_PUT, 0, "0" + j({"header": HEADER})),
    "put_lease_not_found": etcd(E_PUT, 0, "1" + LEASE_NOT_FOUND),
    "put_refused_then_ok": etcd(E_PUT, TWO_ENDPOINTS, "6", "0{}"),
    "put_500_no_body_twice": etcd(E_PUT, TWO_ENDPOINTS, "3", "3"),
    "put_500_text": etcd(E_PUT, 0, "3upstream connect error"),
    "put_timeout_partial": etcd(E_PUT, 0, '7{"header":'),
    "put_no_status": etcd(E_PUT, 0, "5"),
    "put_not_json": etcd(E_PUT, 0, "0<html>hello</html>"),
    "put_empty_200": etcd(E_PUT, 0, "0"),
    "put_array_200": etcd(E_PUT, 0, "0[]"),
    "get_found": etcd(E_GET, 0, "0" + j({"header": HEADER, "kvs": [kv("/workers/k", "v")], "count": "1"})),
    "get_absent": etcd(E_GET, 0, "0" + j({"header": HEADER})),
    "get_empty_value": etcd(E_GET, 0, "0" + j({"header": HEADER, "kvs": [{"key": b64("/workers/k")}]})),
    "get_binary_value": etcd(E_GET, 0, "0" + j({"kvs": [kv("/workers/k", b"\x00\xff\x01")]})),
    "range_workers": etcd(E_RANGE, 0, "0" + RANGE_WORKERS),
    "range_bad_b64": etcd(E_RANGE, 0, "0" + j({"header": HEADER, "kvs": [{"key": "!!", "value": "dg=="}]})),
    "range_kvs_not_array": etcd(E_RANGE, 0, "0" + j({"header": HEADER, "kvs": {"key": "a2V5"}})),
    "range_entry_not_object": etcd(E_RANGE, 0, "0" + j({"kvs": [kv("/workers/a", "1"), 5]})),
    "range_bad_revision": etcd(E_RANGE, 0, "0" + j({"header": {"revision": "x"}, "kvs": []})),
    "range_chunked_failover": etcd(E_RANGE, TWO_ENDPOINTS | chunks(7), "7" + RANGE_WORKERS[:40], "0" + RANGE_WORKERS),
    "delete_ok": etcd(E_DELETE, 0, "0" + j({"header": HEADER, "deleted": "1"})),
    "delete_malformed": etcd(E_DELETE, 0, "0" + j({"deleted": "one"})),
    "delete_if_lease_ok": etcd(E_DELETE_IF_LEASE, 0, "0" + j({"header": HEADER, "succeeded": True, "responses": [
        {"response_delete_range": {"header": HEADER, "deleted": "1"}}]})),
    "delete_if_lease_other": etcd(E_DELETE_IF_LEASE, 0, "0" + j({"header": HEADER, "succeeded": False})),
    "delete_if_lease_odd": etcd(E_DELETE_IF_LEASE, 0, "0" + j({"succeeded": True, "responses": {}})),
    "list_workers": etcd(E_LIST_WORKERS, 0, "0" + RANGE_WORKERS),
    "list_workers_failover": etcd(E_LIST_WORKERS, TWO_ENDPOINTS, "1" + j({"code": 4, "message": "context deadline exceeded"}),
                                  "0" + RANGE_WORKERS),
    "list_workers_empty": etcd(E_LIST_WORKERS, 0, "0" + j({"header": HEADER})),
}

# ---- builders: byte 0 the builder (0 single, 1 map, 2 range; +4 bytes), byte 1 max_calls,
# then the args ------------------------------------------------------------------------

def builder(kind, max_sel, args):
    return bytes([kind, max_sel]) + args.encode()


BUILDERS_SEEDS = {
    "single": builder(0, 2, '{"a":1}'),
    "single_bytes": builder(4, 2, "\x00\x01"),
    "map_small": builder(1, 2, '[1, {"b": [2, 3]}, "x", null]'),
    "map_items_option": builder(1 | 8, 2, '{"data": [1, 2], "other": 3}'),
    "map_items_missing": builder(1 | 8, 2, '{"other": [1]}'),
    "range_unknown_option": builder(2 | 16, 2, '{"stop": 5}'),
    "map_too_many": builder(1, 1, "[1,2,3,4]"),
    "map_not_array": builder(1, 2, '{"a":1}'),
    "map_truncated": builder(1, 2, "[1, 2,"),
    "map_bytes": builder(5, 2, "[1]"),
    "range_chunks": builder(2, 2, '{"start":0,"stop":10,"step":2,"chunk":2}'),
    "range_lazy": builder(2, 3, '{"stop":10000000,"chunk":1000}'),
    "range_span_overflow": builder(2, 4, '{"start":0,"stop":1152921504606846976,"step":1099511627775,'
                                         '"chunk":1000000000}'),
    "range_widest": builder(2, 4, '{"start":-1152921504606846976,"stop":1152921504606846976,'
                                  '"step":1099511627775,"chunk":8388608}'),
    "range_negative": builder(2, 2, '{"start":-7,"stop":-1,"step":3}'),
    "range_empty": builder(2, 2, '{"start":5,"stop":5}'),
    "range_unknown_field": builder(2, 2, '{"stop":5,"stpe":1}'),
    "range_limits": builder(2, 4, '{"start":-9223372036854775808,"stop":9223372036854775807,'
                                  '"step":9223372036854775807,"chunk":9223372036854775807}'),
}

# fuzz_reflection: byte 0 bit 0 clear, then a ServerReflectionRequest for the embedded
# descriptors; bit 0 set, then a FileDescriptorSet to index (asked list_services).
def refl(*fields, mode=0):
    return bytes([mode]) + b"".join(fields)


def fds_file(name, package=b"", body=b""):
    return pb_bytes(1, pb_bytes(1, name) + (pb_bytes(2, package) if package else b"") + body)


REFLECTION_SEEDS = {
    "list_services": refl(pb_bytes(1, b"localhost"), pb_bytes(7, b"*")),
    "file_by_filename": refl(pb_bytes(3, b"worker/v1/worker.proto")),
    "file_by_filename_missing": refl(pb_bytes(3, b"nope.proto")),
    "symbol_service": refl(pb_bytes(4, b"worker.v1.WorkerService")),
    "symbol_method": refl(pb_bytes(4, b"grpc.health.v1.Health.Watch")),
    "symbol_message_dot": refl(pb_bytes(4, b".worker.v1.TaskResult")),
    "symbol_enum_value": refl(pb_bytes(4, b"worker.v1.TASK_STATE_SUCCEEDED")),
    "symbol_missing": refl(pb_bytes(4, b"no.Such")),
    "extension": refl(pb_bytes(5, pb_bytes(1, b"worker.v1.TaskResult") + pb_varint(2, 100))),
    "extension_numbers": refl(pb_bytes(6, b"worker.v1.TaskResult")),
    "nothing": refl(pb_bytes(1, b"h")),
    "not_a_request": refl(b"\xff\xff\xff\xff"),
    "set_one_file": refl(fds_file(b"a.proto", b"p", pb_bytes(6, pb_bytes(1, b"S") + pb_bytes(
        2, pb_bytes(1, b"M") + pb_bytes(2, b".p.T") + pb_bytes(3, b".p.T"))) + pb_bytes(
        4, pb_bytes(1, b"T") + pb_bytes(3, pb_bytes(1, b"Inner")))), mode=1),
    "set_with_import": refl(fds_file(b"a.proto", b"p") + fds_file(
        b"b.proto", b"q", pb_bytes(3, b"a.proto") + pb_bytes(3, b"missing.proto")), mode=1),
    "set_nameless_file": refl(pb_bytes(1, pb_bytes(2, b"p")), mode=1),
    "set_bad_tag": refl(b"\x12\x00", mode=1),
}


# ---- journal: core journal files (src/adapters/wk_journal.h) -------------------------

def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def jrec(payload):
    return struct.pack("<II", len(payload), crc32c(payload)) + payload


def jheader(task_slots=4, decisions=1, first_seq=0, retained=16, grace=500):
    return jrec(struct.pack("<BBHIQQqqII", 1, decisions, 0, 0, 0x1234, first_seq,
                            1764768000000, 1000, 4242, task_slots)
                + struct.pack("<qqqqqq", 1000, 5000, 10000, 60000, grace, 60000)
                + struct.pack("<IIQ", retained, 4096, 1 << 20) + b"0.1.0".ljust(32, b"\0"))


def jinput(kind, seq, now, fields=b"", task=b"", msg=b"", flags=0):
    return jrec(struct.pack("<BBBBHHIIQq", 2, kind, flags, 0, len(task), 0, len(msg), 0, seq, now)
                + fields + task + msg)


def stats(total=1, ok=1, failed=0):
    return struct.pack("<8Q", total, ok, failed, 0, 0, 10, 5, 7)


def jfile(*records):
    return b"WKJOURNL" + struct.pack("<HHI", 1, 0, 0) + b"".join(records)


def journal_lifecycle():
    slot = (1 << 32) | 0
    recs = [jheader(),
            jinput(1, 0, 0, flags=1),                                          # set_ready
            jinput(4, 1, 1000, struct.pack("<q", 300), b"lease-1"),           # request_slot
            jinput(5, 2, 1001, struct.pack("<QQQqIIIIqqII", 0, 7, 0, 0, 0, 0, 1, 2000, 0, 0, 0, 0),
                   b"t-1"),                                                   # submit
            jinput(6, 3, 1002, struct.pack("<QQ", (1 << 32) | 1, 3), b"t-1"),  # activation_prepared
            jinput(12, 4, 1002, task=b"t-1"),                                  # watch_attached
            jinput(8, 5, 1003, struct.pack("<IIQ", 1, 0, 0) + stats() + struct.pack("<qq", 1002, 1003),
                   b"t-1", flags=2),                                          # builder ok
            jinput(9, 6, 0, stats(3, 2, 0), b"t-1"),                           # call_progress
            jinput(8, 7, 1010, struct.pack("<IIQ", 2, 0, 16) + stats() + struct.pack("<qq", 0, 0),
                   b"t-1", flags=2),                                          # calls ok, 16 B
            jrec(struct.pack("<B7xQ", 3, 7) + b"#7 decision line"),
            jinput(14, 8, 1011, task=b"t-1"),                                  # watch_disconnected
            jinput(8, 9, 1012, struct.pack("<IIQ", 3, 8, 0) + stats() + struct.pack("<qq", 0, 0),
                   b"t-1", b"writer said no"),                                # writer failed
            jinput(16, 10, 1400, struct.pack("<Q", slot)),                     # slot_lease_expired
            jinput(5, 11, 1401, struct.pack("<QQQqIIIIqqII", 0, 9, 0, 50, 1, 3, 1, 0, 0, 0, 1, 0),
                   b"t-2"),
            jinput(10, 12, 1500, task=b"t-2"),                                 # task_timed_out
            jinput(7, 13, 1501, struct.pack("<II", 1, 0), b"t-2", b"no epoch"), # activation_failed
            jinput(11, 14, 1502, struct.pack("<II", 11, 0), b"t-3", b"cancel"), # abort
            jinput(15, 15, 2000, task=b"t-1"),                                 # watch_grace_expired
            jinput(3, 16, 0, msg=b"memory"),                                   # set_paused
            jinput(2, 17, 0, flags=1),                                         # set_draining
            jinput(17, 18, 70000)]                                             # purge
    return jfile(*recs)


JOURNAL_SEEDS = {
    "lifecycle": journal_lifecycle(),
    "truncated": journal_lifecycle()[:-13],
    "lost": jfile(jheader(), jinput(1, 0, 0, flags=1), jrec(struct.pack("<B7xQQ", 4, 1, 5))),
    "mid_run": jfile(jheader(first_seq=500), jinput(13, 500, 9000, task=b"t-9"),
                     jinput(8, 501, 9001, struct.pack("<IIQ", 2, 0, 0) + stats() +
                            struct.pack("<qq", 0, 0), b"t-9", flags=8)),
    "bad_config": jfile(jheader(task_slots=0)),
    "empty": jfile(),
}

# ---- deploy: DeployCode's files and deploy_allowed_clients ----------------------------
# Byte 0 even: files (byte 1: limits, low nibble max files, high nibble log2 max bytes;
# then a DeployCodeRequest); odd: the ACL ("spec\npeer\nidentities").


def code_file(path, content=b"", exe=False):
    return pb_bytes(4, pb_bytes(1, path) + pb_bytes(2, content) + (pb_varint(3, 1) if exe else b""))


DEPLOY_SEEDS = {
    "files_ok": b"\x00\x00" + code_file("main.py", b"x = 1\n") + code_file("lib/u.py", b"u")
                + code_file("run.sh", b"#!/bin/sh\n", True),
    "files_tight": b"\x00\x32" + code_file("a", b"12345") + code_file("b/c", b"1"),
    "files_traversal": b"\x00\x00" + code_file("../x") + code_file("/abs") + code_file("a//b"),
    "files_dots": b"\x00\x00" + code_file("a/./b") + code_file("a/.."),
    "files_dup": b"\x00\x00" + code_file("a") + code_file("a"),
    "files_file_and_dir": b"\x00\x00" + code_file("a") + code_file("a-b") + code_file("a/b"),
    "files_pycache": b"\x00\x00" + code_file("__pycache__/m.pyc"),
    "acl_nets": b"\x01127.0.0.1, 10.0.0.0/8, ::1, fd00::/8\nipv4:10.1.2.3:5555\n",
    "acl_names": b"\x01deployer, 192.168.0.0/16\nipv6:[::1]:80\nclient\ndeployer",
    "acl_bad_prefix": b"\x0110.0.0.0/33\nipv4:10.0.0.1:1\n",
    "acl_empty": b"\x01\nunix:/tmp/x\n",
}


CORPORA = {
    "builders": BUILDERS_SEEDS,
    "reflection": REFLECTION_SEEDS,
    "frame": SEEDS,
    "validate": VALIDATE_SEEDS,
    "config": CONFIG_SEEDS,
    "etcd": ETCD_SEEDS,
    "journal": JOURNAL_SEEDS,
    "deploy": DEPLOY_SEEDS,
}


def main():
    names = sys.argv[1:] or sorted(CORPORA)
    for name in names:
        if name not in CORPORA:
            sys.exit("make_corpus.py: no corpus named %r (have: %s)" % (name, ", ".join(sorted(CORPORA))))
        out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", name)
        os.makedirs(out, exist_ok=True)
        seeds = CORPORA[name]
        for seed, data in sorted(seeds.items()):
            with open(os.path.join(out, seed), "wb") as f:
                f.write(data)
        print("wrote %d seeds to %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
