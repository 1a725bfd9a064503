#!/usr/bin/env python3
"""Unit tests of the Python executor's pure parts (python/wk_executor): the frame codec
against docs/specs/executor-protocol.md (frames built here with struct, independently of the
code under test), the loader, and the capture streams. The executor as a process is
tested by tests/integration/test_executor_*.c.

Run: /usr/bin/python3 tests/unit/test_wk_executor.py (ctest: unit.py_wk_executor).
"""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
sys.path.insert(0, PYTHON_DIR)

import worker  # noqa: E402
from wk_executor import protocol as p  # noqa: E402
from wk_executor.capture import Capture  # noqa: E402
from wk_executor.loader import FunctionLoadError, Loader  # noqa: E402
from wk_executor.subcalls import encode_args, outcomes, split_args  # noqa: E402


def s(b):
    return struct.pack("<I", len(b)) + b


def frame(t, body=b""):
    return struct.pack("<IB", len(body) + 1, t) + body


def call_body(cid=7, task=b"task-1", fn=b"echo", epoch=3, code_dir=b"/code/echo/3",
              ep=b"main:handler", ctype=0, index=2, deadline_ms=1500, scratch=b"/scratch/t",
              tp=b"00-ab-cd-01", args=b"[1,2]"):
    return (struct.pack("<Q", cid) + s(task) + s(fn) + struct.pack("<Q", epoch) + s(code_dir)
            + s(ep) + struct.pack("<BII", ctype, index, deadline_ms) + s(scratch) + s(tp)
            + s(args))


def parse_body(parser, body, *extra):
    """Runs a body parser the way the inbox does: on a memoryview of a buffer holding the
    frame, with more bytes after it (a parser must stop at the frame's end)."""
    buf = bytearray(b"\xee" * 5 + body + b"\xff" * 64)
    with memoryview(buf) as mv:
        return parser(mv, 5, 5 + len(body), *extra)


class Encode(unittest.TestCase):
    """The examples of docs/specs/executor-protocol.md §2, byte for byte."""

    def test_hello(self):
        self.assertEqual(p.encode_hello(0x01020304).hex(" "),
                         "09 00 00 00 01 05 00 00 00 04 03 02 01")

    def test_pong(self):
        self.assertEqual(p.encode_u64_frame(p.PONG, 0x0807060504030201),
                         bytes.fromhex("09000000 06 0102030405060708"))

    def test_stack(self):
        self.assertEqual(p.encode_stack(7, b"ab").hex(" "),
                         "0f 00 00 00 0b 07 00 00 00 00 00 00 00 02 00 00 00 61 62")

    def test_scratch(self):
        # SCRATCH call=7 request=2: the first use of ctx.scratch_dir (§5.1)
        self.assertEqual(p.encode_scratch(7, 2),
                         bytes.fromhex("11000000 0d 0700000000000000 0200000000000000"))

    def test_subcalls(self):
        want = bytes.fromhex(
            "2c000000 08 0500000000000000 0100000000000000 02000000 7371 00000000 00"
            " 02000000 01000000 31 03000000 5b325d")
        got = p.encode_subcalls(5, 1, b"sq", b"", p.CONTENT_JSON, [b"1", b"[2]"])
        self.assertEqual(got, want)

    def test_subcalls_head_size(self):
        for fn, ep in ((b"", b""), (b"square", b"main:handler")):
            whole = p.encode_subcalls(1, 2, fn, ep, p.CONTENT_BYTES, [b"x"])
            self.assertEqual(p.subcalls_head_size(fn, ep), len(whole) - 4 - 1)  # one 1-byte arg

    def test_result(self):
        got = p.encode_result(9, p.STATUS_RETRYABLE, p.CONTENT_BYTES, b"\x00\xff", b"E", b"msg",
                              b"tb", 1500, 20480, b"out", b"err")
        body = (struct.pack("<QBB", 9, 2, 1) + s(b"\x00\xff") + s(b"E") + s(b"msg") + s(b"tb")
                + struct.pack("<QQ", 1500, 20480) + s(b"out") + s(b"err"))
        self.assertEqual(got, frame(p.RESULT, body))
        self.assertEqual(len(frame(p.RESULT, struct.pack("<QBB", 0, 0, 0) + s(b"") * 4
                                   + struct.pack("<QQ", 0, 0) + s(b"") * 2)), 55)  # §2 sizes

    def test_error_result(self):
        got = p.encode_error_result(4, "Cancelled", "cancelled before it started")
        body = (struct.pack("<QBB", 4, 1, 0) + s(b"") + s(b"Cancelled")
                + s(b"cancelled before it started") + s(b"") + struct.pack("<QQ", 0, 0)
                + s(b"") + s(b""))
        self.assertEqual(got, frame(p.RESULT, body))

    def test_cap_text(self):
        self.assertEqual(p.cap_text("short é"), "short é".encode())
        capped = p.cap_text("x" * (p.ERROR_TEXT_MAX + 10))
        self.assertEqual(len(capped), p.ERROR_TEXT_MAX)
        self.assertTrue(capped.endswith(b"\n[... truncated]"))


class JsonShortPaths(unittest.TestCase):
    """json_value and json_bytes are json.loads and compact json.dumps, errors included."""

    def test_json_value_is_json_loads(self):
        docs = [b"0.01", b"null", b"true", b"-3", b"1e400", b"NaN", b"-Infinity", b'"\\u00e9"',
                '"é"'.encode(), b'{"a":[1,{"b":null}],"a":2}', b"[]", b"{}",
                b" 1", b"1 ", b"\n[1]\t", b"  {\"k\": \"v\"}  "]
        for doc in docs:
            with self.subTest(doc=doc):
                want, got = json.loads(doc.decode("utf-8")), p.json_value(doc)
                self.assertEqual(repr(got), repr(want))

    def test_json_value_fails_as_json_loads_does(self):
        for doc in (b"", b" ", b"1 2", b"[1,]", b"{'a':1}", b"\xef\xbb\xbf1", b"tru",
                    b'"abc', b"\xff", b"01", b"[" * 100000):
            with self.subTest(doc=doc[:20]):
                try:
                    json.loads(doc.decode("utf-8"))
                except (ValueError, RecursionError) as e:
                    want = e
                else:
                    self.fail(f"json.loads accepted {doc[:20]!r}")
                with self.assertRaises(type(want)) as got:
                    p.json_value(doc)
                self.assertEqual(str(got.exception), str(want))

    def test_json_bytes_is_compact_dumps(self):
        for value in (None, True, 0, -1.5, "é\n", [1, None, {"k": [2]}], {}, ()):
            with self.subTest(value=value):
                self.assertEqual(p.json_bytes(value), json.dumps(
                    value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode())
        for bad in (float("nan"), {1j}, object()):
            with self.assertRaises((ValueError, TypeError)):
                p.json_bytes(bad)


class DecodeCall(unittest.TestCase):
    def test_fields(self):
        c = parse_body(p.parse_call, call_body(), 100.0)
        self.assertEqual((c.call_id, c.task_id, c.function, c.epoch, c.code_dir, c.entrypoint),
                         (7, "task-1", "echo", 3, "/code/echo/3", "main:handler"))
        self.assertEqual((c.content_type, c.call_index, c.scratch_dir, c.traceparent, c.args),
                         (0, 2, "/scratch/t", "00-ab-cd-01", b"[1,2]"))
        self.assertAlmostEqual(c.deadline, 101.5)
        self.assertFalse(c.cancelled)
        self.assertIsInstance(c.args, bytes)

    def test_no_deadline_bytes_args_and_bad_utf8(self):
        c = parse_body(p.parse_call, call_body(deadline_ms=0, ctype=1, args=b"\x00\xff",
                                               task=b"t\xff"), 5.0)
        self.assertEqual(c.deadline, math.inf)
        self.assertEqual((c.content_type, c.args), (1, b"\x00\xff"))
        self.assertEqual(c.task_id.encode("utf-8", "surrogateescape"), b"t\xff")

    def test_every_truncation(self):
        body = call_body()
        for n in range(len(body)):
            with self.subTest(n=n), self.assertRaises(p.ProtocolError):
                parse_body(p.parse_call, body[:n], 0.0)

    def test_truncated_at_the_buffers_end(self):
        body = call_body()
        for n in (3, 20, len(body) - 1):
            buf = bytearray(body[:n])
            with self.subTest(n=n), memoryview(buf) as mv, self.assertRaises(p.ProtocolError):
                p.parse_call(mv, 0, n, 0.0)

    def test_trailing_bytes(self):
        with self.assertRaisesRegex(p.ProtocolError, "bytes left"):
            parse_body(p.parse_call, call_body() + b"\x00", 0.0)

    def test_content_type_out_of_range(self):
        with self.assertRaisesRegex(p.ProtocolError, "content_type 2 out of range"):
            parse_body(p.parse_call, call_body(ctype=2), 0.0)


class DecodeOthers(unittest.TestCase):
    def test_u64_bodies(self):
        self.assertEqual(parse_body(p.parse_u64_body, struct.pack("<Q", 2**64 - 1), "PING"),
                         2**64 - 1)
        for body in (b"", b"\x01" * 7, b"\x01" * 9):
            with self.assertRaisesRegex(p.ProtocolError, f"CANCEL body is {len(body)} bytes"):
                parse_body(p.parse_u64_body, body, "CANCEL")

    def test_subcalls_result_example(self):
        # SUBCALLS_RESULT request=1 [ok JSON "1"; error "E" "m"] from §2
        whole = bytes.fromhex(
            "34000000 09 0100000000000000 02000000"
            " 00 00 01000000 31 00000000 00000000 00000000"
            " 01 00 00000000 01000000 45 01000000 6d 00000000")
        self.assertEqual(whole[4], p.SUBCALLS_RESULT)
        req, kids = parse_body(p.parse_subcalls_result, whole[5:])
        self.assertEqual(req, 1)
        self.assertEqual(kids, [(0, 0, b"1", b"", b"", b""), (1, 0, b"", b"E", b"m", b"")])

    def test_scratch_result(self):
        whole = bytes.fromhex("11000000 0e 0300000000000000 04000000 6e6f7065")
        self.assertEqual(whole[4], p.SCRATCH_RESULT)
        self.assertEqual(parse_body(p.parse_scratch_result, whole[5:]), (3, "nope"))
        self.assertEqual(parse_body(p.parse_scratch_result, struct.pack("<QI", 3, 0)), (3, ""))
        for body in (struct.pack("<Q", 3), struct.pack("<QI", 3, 0) + b"x",
                     struct.pack("<QI", 3, 5) + b"ab"):
            with self.subTest(body=body), self.assertRaises(p.ProtocolError):
                parse_body(p.parse_scratch_result, body)

    def kid(self, status=0, ctype=0, out=b"", etype=b"", msg=b"", tb=b""):
        return struct.pack("<BB", status, ctype) + s(out) + s(etype) + s(msg) + s(tb)

    def test_subcalls_result_errors(self):
        bad = {
            "count 0": struct.pack("<QI", 1, 0),
            "status 3": struct.pack("<QI", 1, 1) + self.kid(status=3),
            "content_type 2": struct.pack("<QI", 1, 1) + self.kid(ctype=2),
            "hostile count": struct.pack("<QI", 1, 0xFFFFFFFF) + self.kid(),
            "truncated": (struct.pack("<QI", 1, 1) + self.kid(out=b"abc"))[:-2],
            "trailing": struct.pack("<QI", 1, 1) + self.kid() + b"\x00",
            "no count": struct.pack("<Q", 1),
        }
        for name, body in bad.items():
            with self.subTest(name), self.assertRaises(p.ProtocolError):
                parse_body(p.parse_subcalls_result, body)


class Subcalls(unittest.TestCase):
    def test_encode_args(self):
        self.assertEqual(encode_args([b"a", bytearray(b"b"), memoryview(b"c")]),
                         (p.CONTENT_BYTES, [b"a", b"b", b"c"]))
        ctype, args = encode_args([{"k": "é"}, [1.5], None])
        self.assertEqual((ctype, args), (p.CONTENT_JSON, ['{"k":"é"}'.encode(), b"[1.5]", b"null"]))
        with self.assertRaises(ValueError):
            encode_args([math.nan])

    def test_split_args(self):
        head = p.subcalls_head_size(b"f", b"")
        limit = 4 + 1024
        one = b"x" * (limit - head - 4)  # exactly one frame
        self.assertEqual(split_args([one], head, 1024), [[one]])
        self.assertEqual(split_args([one, b"", b"y"], head, 1024), [[one], [b"", b"y"]])
        with self.assertRaisesRegex(ValueError, "subcall argument 1 is"):
            split_args([b"a", one + b"z"], head, 1024)
        frames = [p.encode_subcalls(1, 1, b"f", b"", 1, c) for c in split_args([one, b"y"], head, 1024)]
        self.assertTrue(all(len(f) - 4 <= 1024 for f in frames))

    def test_outcomes(self):
        got = outcomes([(0, 0, b'{"a":1}', b"", b"", b""), (0, 1, b"\x00", b"", b"", b""),
                        (0, 0, b"{", b"", b"", b""), (2, 0, b"", b"E", b"m\xff", b"tb")])
        self.assertEqual(got[0], (True, {"a": 1}))
        self.assertEqual(got[1], (True, b"\x00"))
        self.assertFalse(got[2][0])
        self.assertEqual(got[2][1].type, "OutputDecodeError")
        ok, e = got[3]
        self.assertFalse(ok)
        self.assertIsInstance(e, worker.SubcallError)
        self.assertEqual((e.type, e.message, e.traceback, e.retryable), ("E", "m\ufffd", "tb", True))
        self.assertEqual(str(e), "E: m\ufffd")


class LoaderTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.path0 = list(sys.path)

    def tearDown(self):
        self.tmp.cleanup()
        self.assertEqual(sys.path, self.path0)  # code_dir left sys.path

    def epoch(self, n, files):
        d = os.path.join(self.root, "fn", str(n))
        os.makedirs(d)
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        return d

    def test_epochs_are_isolated(self):
        dirs = [self.epoch(n, {"helper.py": f"VERSION = {n}\n",
                               "main.py": "import helper\n"
                                          "def handler(args, ctx):\n"
                                          "    return helper.VERSION\n"})
                for n in (1, 2)]
        loader = Loader()
        fns = [loader.load(d, "main:handler") for d in dirs]
        self.assertEqual([f(None, None) for f in fns], [1, 2])
        self.assertIsNot(fns[0].__globals__, fns[1].__globals__)
        self.assertNotIn("helper", sys.modules)  # a sibling imported plainly is not kept
        self.assertIs(loader.load(dirs[0], "main:handler"), fns[0])  # cached

    def test_dotted_entrypoint(self):
        d = self.epoch(1, {"pkg_mod.py": "class K:\n    @staticmethod\n    def run(a, c):\n"
                                         "        return a * 2\n"})
        self.assertEqual(Loader().load(d, "pkg_mod:K.run")(21, None), 42)

    def test_errors(self):
        d = self.epoch(1, {"main.py": "handler = 5\n"})
        loader = Loader()
        cases = [(d, "main"), (d, "main:"), (d, "1main:handler"), (d, "main:handler:x"),
                 ("relative/dir", "main:handler"), (os.path.join(self.root, "nope"), "main:handler"),
                 (d, "main:missing"), (d, "main:handler")]
        for code_dir, ep in cases:
            with self.subTest(ep=ep, code_dir=code_dir), self.assertRaises(FunctionLoadError):
                loader.load(code_dir, ep)

    def test_only_callables_of_the_code_itself_are_entry_points(self):
        d = self.epoch(1, {
            "helper.py": "def helped(a, c):\n    return 'helped'\n",
            "main.py": ("import functools, os, shutil\n"
                        "from os import getenv\n"
                        "from helper import helped\n"
                        "def handler(a, c):\n    return 'own'\n"
                        "def deco(f):\n"
                        "    @functools.wraps(f)\n"
                        "    def w(*a):\n        return f(*a)\n"
                        "    return w\n"
                        "decorated = deco(handler)\n"
                        "class K:\n    def __call__(self, a, c):\n        return 'k'\n"
                        "k = K()\n"
                        "lam = lambda a, c: 'lam'\n"
                        "rm = functools.partial(shutil.rmtree, '/')\n"
                        "wrapped_rm = deco(shutil.rmtree)\n"
                        "dumps = __import__('json').dumps\n")})
        loader = Loader()
        for ep in ("main:handler", "main:helped", "main:decorated", "main:K", "main:k",
                   "main:lam", "helper:helped"):
            with self.subTest(ep=ep):
                self.assertTrue(callable(loader.load(d, ep)))
        for ep in ("main:shutil.rmtree", "main:os.getenv", "main:getenv", "main:os.remove",
                   "main:os.system", "main:rm", "main:wrapped_rm", "main:dumps", "main:os.path.join",
                   "main:functools.partial", "main:os.PathLike"):
            with self.subTest(ep=ep):
                with self.assertRaises(FunctionLoadError) as e:
                    loader.load(d, ep)
                self.assertIn("not defined in the function's own code", str(e.exception))

    def test_import_error_propagates(self):
        d = self.epoch(1, {"main.py": "import no_such_module_wk\n"})
        with self.assertRaises(ImportError):
            Loader().load(d, "main:handler")


class CaptureTest(unittest.TestCase):
    def test_nesting_and_cap(self):
        out = Capture(64)
        out.write("dropped between calls")
        out.push()
        out.write("outer ")
        out.push()
        out.buffer.write(b"inner")
        self.assertEqual(out.pop(), b"inner")
        print("more", file=out)
        self.assertEqual(out.pop(), b"outer more\n")
        out.push()
        out.write("é" * 100)
        value = out.pop()
        self.assertLessEqual(len(value), 64)
        self.assertTrue(value.endswith(b" of 200 bytes dropped]\n"))
        with self.assertRaises(TypeError):
            out.write(b"bytes")


class ContextDeadline(unittest.TestCase):
    """ctx.deadline is wall-clock Unix seconds (comparable with time.time()), and
    ctx.remaining() counts down on the monotonic clock (issue 13 §6)."""

    def test_deadline_is_wall_clock(self):
        import time
        from wk_executor.context import Context
        c = parse_body(p.parse_call, call_body(deadline_ms=5000), time.monotonic())
        ctx = Context(c, Capture(64), None)
        self.assertAlmostEqual(ctx.deadline, time.time() + 5, delta=1.0)
        self.assertGreater(ctx.deadline, 1e9)  # not a monotonic value near boot time
        self.assertAlmostEqual(ctx.remaining(), 5, delta=1.0)
        self.assertLessEqual(ctx.remaining(), 5)

    def test_no_deadline(self):
        from wk_executor.context import Context
        c = parse_body(p.parse_call, call_body(deadline_ms=0), 0.0)
        ctx = Context(c, Capture(64), None)
        self.assertEqual(ctx.deadline, math.inf)
        self.assertEqual(ctx.remaining(), math.inf)


class Descendants(unittest.TestCase):
    """end_descendants finds what a call left behind: a child of the main thread, one
    forked from another thread, and an orphan the subreaper inherits, in a hardened
    (non-dumpable) process, from the kernel's children files and from the /proc walk."""

    SCRIPT = r"""
import os, subprocess, sys, threading, time
sys.path.insert(0, sys.argv[1])
from wk_executor import procs
assert procs.harden()
me = os.getpid()
main_child = subprocess.Popen(["sleep", "300"])
from_thread, started, listed = [], threading.Event(), threading.Event()
def fork_and_stay():  # the child is the live thread's, listed in its own children file
    from_thread.append(subprocess.Popen(["sleep", "300"]))
    started.set()
    listed.wait()
t = threading.Thread(target=fork_and_stay)
t.start()
started.wait()
# the shell's `sleep` is orphaned when the shell exits: it comes back to this subreaper
subprocess.run(["sh", "-c", "sleep 300 & echo $! > " + sys.argv[2]], check=True)
orphan = int(open(sys.argv[2]).read())
want = sorted([main_child.pid, from_thread[0].pid, orphan])
deadline = time.monotonic() + 30
while sorted(procs._children_files(me)) != want and time.monotonic() < deadline:
    time.sleep(0.01)  # the orphan is handed over when the shell is gone
files, walk = sorted(procs._children_files(me)), sorted(procs._children_walk(me))
listed.set()
t.join()
killed = procs.end_descendants()
left = procs._children_walk(me)
print(files == want, walk == want, killed, left, flush=True)
"""

    def test_every_child_is_found_and_ended(self):
        with tempfile.TemporaryDirectory() as d:
            out = subprocess.run([sys.executable, "-c", self.SCRIPT, PYTHON_DIR,
                                  os.path.join(d, "pid")],
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["True", "True", "3", "[]"], out.stderr)


class Shim(unittest.TestCase):
    def test_script_runs_the_package(self):
        script = os.path.join(PYTHON_DIR, "worker_executor.py")
        r = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--rlimit-cpu-s", r.stdout)
        # an fd that is not open, then one that is not a socket: it says so and exits 1
        r = subprocess.run([sys.executable, script, "--channel-fd", "97"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"^worker_executor\[\d+\]: cannot use --channel-fd 97")
        with open(script, "rb") as f:
            r = subprocess.run([sys.executable, script, "--channel-fd", str(f.fileno())],
                               capture_output=True, text=True, timeout=60, pass_fds=(f.fileno(),))
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot use --channel-fd", r.stderr)

    def test_deploy_check_imports_only_the_check(self):
        """`--check-code DIR --entrypoint M:A`, as the Worker and workerctl run it, skips
        the executor's own modules and answers exactly as the full command line does
        (any other order of the flags)."""
        script = os.path.join(PYTHON_DIR, "worker_executor.py")
        probe = ("import runpy, sys\n"
                 "sys.path.insert(0, %r)\n"
                 "sys.argv = [%r] + sys.argv[1:]\n"
                 "try:\n"
                 "    runpy.run_path(%r, run_name='__main__')\n"
                 "except SystemExit as e:\n"
                 "    print(e.code, 'argparse' in sys.modules, 'wk_executor.cli' in sys.modules)\n"
                 % (PYTHON_DIR, script, script))
        with tempfile.TemporaryDirectory() as d:
            good, bad = os.path.join(d, "good"), os.path.join(d, "bad")
            for path, text in ((good, "def handler(args, ctx):\n    return args\n"),
                               (bad, "def handler(args, ctx:\n")):
                os.mkdir(path)
                with open(os.path.join(path, "main.py"), "w") as f:
                    f.write(text)
            for code_dir, status in ((good, "0"), (bad, "1")):
                fast = subprocess.run([sys.executable, "-B", "-c", probe, "--check-code", code_dir,
                                       "--entrypoint", "main:handler"],
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual(fast.stdout.split(), [status, "False", "False"], fast.stderr)
                full = subprocess.run([sys.executable, "-B", "-c", probe, "--entrypoint",
                                       "main:handler", "--check-code", code_dir],
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual(full.stdout.split(), [status, "True", "True"], full.stderr)
                self.assertEqual(fast.stderr, full.stderr)
            self.assertIn("main.py does not compile", fast.stderr)


if __name__ == "__main__":
    unittest.main()
