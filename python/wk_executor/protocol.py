"""The executor's side of the frame codec (docs/specs/executor-protocol.md §2; the C side is
src/adapters/wk_frame.c): frame types and enums, the encoders of the frames the
executor sends, and the parsers of the bodies it receives. Pure: no I/O, no state
beyond a small text cache.

Encoders return the whole frame, length prefix included. Parsers take a memoryview, the
body's start and its end (the frame's end) and raise ProtocolError on anything the
protocol calls malformed; splitting a byte stream into frames is the inbox's loop
(inbox.py), which checks the length prefix itself.
"""

from __future__ import annotations

import json
import math
import struct
import sys

PROTOCOL_VERSION = 5

HELLO, CALL, RESULT, CANCEL, PING, PONG, SHUTDOWN = 1, 2, 3, 4, 5, 6, 7
SUBCALLS, SUBCALLS_RESULT, STACK_REQUEST, STACK, RECALL = 8, 9, 10, 11, 12
SCRATCH, SCRATCH_RESULT = 13, 14
TO_WORKER_ONLY = (HELLO, RESULT, SUBCALLS, STACK, SCRATCH)  # a protocol error when received

CONTENT_JSON, CONTENT_BYTES = 0, 1
STATUS_OK, STATUS_ERROR, STATUS_RETRYABLE = 0, 1, 2
STATUS_NOT_STARTED = 3  # RESULT only: a RECALLed call given back before it started

DEFAULT_MAX_FRAME = 16 << 20
ERROR_TEXT_MAX = 64 << 10  # cap on error message, traceback and stack text, each
DEFAULT_ENTRYPOINT = "main:handler"

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
_QI = struct.Struct("<QI")
_BIII = struct.Struct("<BIII")
_RESULT_START = struct.Struct("<IBQBBI")  # prefix, type, call_id, status, content_type, len(output)
_QQI = struct.Struct("<QQI")
_PREFIX_TYPE = struct.Struct("<IB")
_SUBCALLS_HEAD = struct.Struct("<QQ")
_SUBCALLS_COUNT = struct.Struct("<BI")
_CHILD_HEAD = struct.Struct("<BB")

# compact JSON, no NaN/Infinity (== json.dumps(v, ensure_ascii=False, allow_nan=False,
# separators=(",", ":")), without building an encoder per call)
json_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
_scan_json = json.JSONDecoder().scan_once  # json.loads's own scanner, without its regexes

# A call's JSON goes through these two once each way. After a call that slept or waited
# the caches are cold and every line of code touched costs (measured here after a 10 ms
# sleep: json.loads("0.01") 43 us, its scanner alone 14 us; encoding None 38 us, 1.4 us
# warm), so the common shapes take the shortest path; the results are json's own.


def json_bytes(value: object) -> bytes:
    """The compact UTF-8 JSON of `value` (json_encode); raises what json_encode raises."""
    if value is None:  # what a function run for its effects returns
        return b"null"
    return json_encode(value).encode("utf-8")


def json_value(data: bytes) -> object:
    """json.loads(data.decode("utf-8")): the same value, and the same error when `data`
    is not UTF-8 JSON. A document without surrounding whitespace is read by json's
    scanner alone; anything else goes to json.loads."""
    text = data.decode("utf-8")
    try:
        value, end = _scan_json(text, 0)
        if end == len(text):
            return value
    except (StopIteration, ValueError):
        pass  # json.loads says why, in its own words
    return json.loads(text)


class ProtocolError(Exception):
    """The Worker sent bytes that are not a valid frame: the stream cannot be trusted."""


# ---- encoding (executor -> worker) ------------------------------------------------


def _frame(ftype: int, body: bytes) -> bytes:
    return _PREFIX_TYPE.pack(len(body) + 1, ftype) + body


def _bstr(b: bytes) -> bytes:
    return U32.pack(len(b)) + b


def encode_hello(pid: int) -> bytes:
    """HELLO {PROTOCOL_VERSION, pid} (pid truncated to 32 bits)."""
    return _frame(HELLO, U32.pack(PROTOCOL_VERSION) + U32.pack(pid & 0xFFFFFFFF))


def encode_u64_frame(ftype: int, value: int) -> bytes:
    """A frame whose body is one u64 (PING, PONG, CANCEL, STACK_REQUEST)."""
    return _frame(ftype, U64.pack(value))


def encode_result(call_id: int, status: int, content_type: int, output: bytes,
                  error_type: bytes, error_message: bytes, tb: bytes, cpu_us: int,
                  max_rss_kb: int, out: bytes, err: bytes) -> bytes:
    """RESULT; every text field is already encoded bytes."""
    u32 = U32.pack
    length = (1 + 8 + 2 + 16 + 4 * 6 + len(output) + len(error_type) + len(error_message)
              + len(tb) + len(out) + len(err))
    return b"".join((
        _RESULT_START.pack(length, RESULT, call_id, status, content_type, len(output)), output,
        u32(len(error_type)), error_type, u32(len(error_message)), error_message,
        u32(len(tb)), tb, _QQI.pack(cpu_us, max_rss_kb, len(out)), out, u32(len(err)), err,
    ))


def encode_error_result(call_id: int, error_type: str, message: str) -> bytes:
    """A RESULT of status 1 from the executor itself (a call it did not run)."""
    return encode_result(call_id, STATUS_ERROR, CONTENT_JSON, b"", error_type.encode(),
                         message.encode("utf-8", "replace"), b"", 0, 0, b"", b"")


def encode_not_started(call_id: int) -> bytes:
    """The RESULT of a RECALLed call given back before it started (status 3)."""
    return encode_result(call_id, STATUS_NOT_STARTED, CONTENT_JSON, b"", b"", b"", b"", 0, 0,
                         b"", b"")


def subcalls_head_size(function: bytes, entrypoint: bytes) -> int:
    """Bytes of a SUBCALLS frame before its args (length prefix included)."""
    return 5 + 16 + 4 + len(function) + 4 + len(entrypoint) + 5


def encode_subcalls(parent_call_id: int, request_id: int, function: bytes, entrypoint: bytes,
                    content_type: int, args: list[bytes]) -> bytes:
    """SUBCALLS: one child call per item of `args` (at least one)."""
    body = b"".join((
        _SUBCALLS_HEAD.pack(parent_call_id, request_id), _bstr(function), _bstr(entrypoint),
        _SUBCALLS_COUNT.pack(content_type, len(args)),
        b"".join(_bstr(a) for a in args),
    ))
    return _frame(SUBCALLS, body)


def encode_scratch(call_id: int, request_id: int) -> bytes:
    """SCRATCH: call `call_id` uses ctx.scratch_dir for the first time."""
    return _frame(SCRATCH, _SUBCALLS_HEAD.pack(call_id, request_id))


def encode_stack(call_id: int, text: bytes) -> bytes:
    """STACK, the answer to STACK_REQUEST `call_id` (text empty: not running)."""
    return _frame(STACK, U64.pack(call_id) + _bstr(text))


def cap_text(s: str) -> bytes:
    """`s` as UTF-8, cut to ERROR_TEXT_MAX bytes with a marker at the end."""
    b = s.encode("utf-8", "replace")
    if len(b) <= ERROR_TEXT_MAX:
        return b
    marker = b"\n[... truncated]"
    return b[:ERROR_TEXT_MAX - len(marker)] + marker


# ---- decoding (worker -> executor) ------------------------------------------------


class Call:
    """A CALL frame as received, plus its run state (`cancelled`; `nested_cpu`, the CPU
    seconds of the calls nested in it while it waited for subcalls)."""

    __slots__ = ("call_id", "task_id", "function", "epoch", "code_dir", "entrypoint",
                 "content_type", "call_index", "deadline", "scratch_dir", "traceparent",
                 "args", "cancelled", "nested_cpu")

    call_id: int
    task_id: str
    function: str
    epoch: int
    code_dir: str
    entrypoint: str
    content_type: int
    call_index: int
    deadline: float  # absolute time.monotonic() value; math.inf for none
    scratch_dir: str
    traceparent: str
    args: bytes
    cancelled: bool
    nested_cpu: float


def _take(pos: int, end: int, n: int) -> int:
    if n > end - pos:
        raise ProtocolError("a field runs past the end of its frame")
    return pos + n


def _get_bytes(mv: memoryview, pos: int, end: int) -> tuple[bytes, int]:
    p = _take(pos, end, 4)
    (n,) = U32.unpack_from(mv, pos)
    q = _take(p, end, n)
    return bytes(mv[p:q]), q


_TEXT_CACHE: dict[tuple[bytes, str], str] = {}  # CALL text fields repeat call after call
_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


def _text(b: bytes, encoding: str = "utf-8") -> str:
    key = (b, encoding)
    t = _TEXT_CACHE.get(key)
    if t is None:
        t = b.decode(encoding, "surrogateescape" if encoding == "utf-8" else _FS_ERRORS)
        if len(_TEXT_CACHE) >= 4096:
            _TEXT_CACHE.clear()
        _TEXT_CACHE[key] = t
    return t


def parse_call(mv: memoryview, pos: int, end: int, now: float) -> Call:
    """A CALL body at mv[pos:end], received at time.monotonic() `now`. Offsets are
    computed first and checked once against the frame's end: a read past `end` (but
    inside the buffer) only yields garbage that the final check rejects; one past the
    buffer raises struct.error."""
    u32 = U32.unpack_from
    try:
        call_id, n = _QI.unpack_from(mv, pos)
        p = pos + 12
        task_id = mv[p:p + n]
        p += n
        (n,) = u32(mv, p)
        p += 4
        function = mv[p:p + n]
        p += n
        epoch, n = _QI.unpack_from(mv, p)
        p += 12
        code_dir = mv[p:p + n]
        p += n
        (n,) = u32(mv, p)
        p += 4
        entrypoint = mv[p:p + n]
        p += n
        ctype, call_index, deadline_ms, n = _BIII.unpack_from(mv, p)
        p += 13
        scratch_dir = mv[p:p + n]
        p += n
        (n,) = u32(mv, p)
        p += 4
        traceparent = mv[p:p + n]
        p += n
        (n,) = u32(mv, p)
        p += 4
        args = mv[p:p + n]
        p += n
    except struct.error:
        p = end + 1
    if p > end:
        raise ProtocolError("a field runs past the end of its frame")
    if p != end:
        raise ProtocolError("bytes left in the CALL frame after its last field")
    if ctype > CONTENT_BYTES:
        raise ProtocolError(f"CALL content_type {ctype} out of range")
    c = Call()
    c.call_id = call_id
    c.task_id = _text(bytes(task_id))
    c.function = _text(bytes(function))
    c.epoch = epoch
    c.code_dir = _text(bytes(code_dir), _FS_ENCODING)
    c.entrypoint = _text(bytes(entrypoint))
    c.content_type = ctype
    c.call_index = call_index
    c.deadline = now + deadline_ms / 1000.0 if deadline_ms else math.inf
    c.scratch_dir = _text(bytes(scratch_dir), _FS_ENCODING)
    c.traceparent = _text(bytes(traceparent))
    c.args = bytes(args)
    c.cancelled = False
    return c


def parse_u64_body(mv: memoryview, pos: int, end: int, name: str) -> int:
    """The u64 body of CANCEL, PING, PONG or STACK_REQUEST (`name`, for the error)."""
    if end - pos != 8:
        raise ProtocolError(f"{name} body is {end - pos} bytes, not 8")
    return U64.unpack_from(mv, pos)[0]


def parse_scratch_result(mv: memoryview, pos: int, end: int) -> tuple[int, str]:
    """(request_id, error): error "" when the scratch directory exists."""
    p = _take(pos, end, 8)
    (request_id,) = U64.unpack_from(mv, pos)
    error, p = _get_bytes(mv, p, end)
    if p != end:
        raise ProtocolError("bytes left in the SCRATCH_RESULT frame after its last field")
    return request_id, error.decode("utf-8", "replace")


def parse_subcalls_result(mv: memoryview, pos: int, end: int) -> tuple[int, list[tuple]]:
    """(request_id, [(status, content_type, output, error_type, error_message, traceback)])"""
    p = _take(pos, end, 12)
    (request_id,) = U64.unpack_from(mv, pos)
    (count,) = U32.unpack_from(mv, pos + 8)
    if count > (end - p) // 18:  # every child takes at least 18 bytes
        raise ProtocolError("a field runs past the end of its frame")
    children = []
    bad = False
    for _ in range(count):
        q = _take(p, end, 2)
        status, ctype = _CHILD_HEAD.unpack_from(mv, p)
        if status > STATUS_RETRYABLE or ctype > CONTENT_BYTES:
            bad = True
        output, q = _get_bytes(mv, q, end)
        etype, q = _get_bytes(mv, q, end)
        emsg, q = _get_bytes(mv, q, end)
        tb, p = _get_bytes(mv, q, end)
        children.append((status, ctype, output, etype, emsg, tb))
    if bad or count == 0:
        raise ProtocolError("SUBCALLS_RESULT with a status or content_type out of range, or no children")
    if p != end:
        raise ProtocolError("bytes left in the SUBCALLS_RESULT frame after its last field")
    return request_id, children
