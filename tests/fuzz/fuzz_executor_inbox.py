"""A coverage-guided fuzzer for the executor's frame reader: the Python side of the
executor protocol (python/wk_executor: channel.Channel.feed -> inbox.Inbox.dispatch ->
protocol.parse_*), the bytes a Worker sends to an executor.

There is no atheris on Debian 12, so this is a small libFuzzer-like loop in Python:
inputs from a seed corpus are mutated (bit flips, interesting lengths at u32 offsets,
inserts, deletes, splices); an input that reaches a line transition of wk_executor's
code not seen before joins the corpus. Each input is a byte stream fed to a real
runner.Executor (over a real socketpair, whose peer collects the answers) in chunks
whose sizes the input itself picks, so frames split across reads are exercised too.

Properties checked for every input, beyond "no exception but ProtocolError":
  - the reader never keeps more than one frame's worth of unparsed bytes
    (len(rbuf) <= max_frame + 4);
  - every queued call is in `pending` under its id, or was answered;
  - every answer the executor writes is a well-formed executor -> worker frame
    (length prefix consistent, a type the executor may send);
  - after a ProtocolError the executor would exit (cli.py); the input ends there.

Usage:
  fuzz_executor_inbox.py --replay DIR [DIR...]           replay the corpora (no mutation)
  fuzz_executor_inbox.py --seconds N [--seed S] DIR...   mutate for N seconds from the seeds
A failing input is written to --artifacts (default ./artifacts) and the exit status is 1;
replay it with --replay FILE. The same --seed replays the same run (on the same corpus).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import struct
import sys
import time
import traceback
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.realpath(os.path.join(HERE, "..", "..", "python")))

from wk_executor import protocol  # noqa: E402
from wk_executor.protocol import ProtocolError  # noqa: E402
from wk_executor.runner import Executor  # noqa: E402
from wk_executor.subcalls import Request, Wait  # noqa: E402

PKG_DIR = os.path.dirname(os.path.realpath(protocol.__file__))
MAX_LEN = 4096
SMALL_MAX_FRAME = 256
EXECUTOR_SENDS = (protocol.HELLO, protocol.RESULT, protocol.PONG, protocol.SUBCALLS, protocol.STACK)
INTERESTING_U32 = (0, 1, 7, 8, 9, 12, 18, 255, 256, SMALL_MAX_FRAME + 1, 0x7FFFFFFF, 0xFFFFFFFF,
                   protocol.DEFAULT_MAX_FRAME, protocol.DEFAULT_MAX_FRAME + 1)


class Failure(Exception):
    """A property of the reader did not hold."""


def make_call(call_id: int) -> protocol.Call:
    c = protocol.Call()
    c.call_id, c.task_id, c.function, c.epoch = call_id, "t", "f", 1
    c.code_dir, c.entrypoint, c.content_type, c.call_index = "/nonexistent", "", 0, 0
    c.deadline, c.scratch_dir, c.traceparent, c.args = float("inf"), "", "", b"[]"
    c.cancelled, c.nested_cpu = False, 0.0
    return c


def check_answers(data: bytes) -> None:
    off = 0
    while off < len(data):
        if len(data) - off < 5:
            raise Failure(f"answer bytes end inside a frame prefix at {off}")
        (length,) = struct.unpack_from("<I", data, off)
        if length == 0 or len(data) - off - 4 < length:
            raise Failure(f"answer frame at {off} claims {length} bytes, {len(data) - off - 4} follow")
        if data[off + 4] not in EXECUTOR_SENDS:
            raise Failure(f"answer frame type {data[off + 4]} is not one an executor sends")
        off += 4 + length


def run_one(data: bytes) -> None:
    """Feeds `data` to a fresh executor; raises Failure (or any unexpected exception)."""
    knobs = zlib.crc32(data)
    max_frame = SMALL_MAX_FRAME if knobs & 1 else protocol.DEFAULT_MAX_FRAME
    chunk_rng = random.Random(knobs)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        b.setblocking(False)
        ex = Executor(a, max_frame, 1 << 16)
        # something for RECALL, CANCEL, STACK_REQUEST and SUBCALLS_RESULT to find
        running = make_call(7)
        ex.running.append(running)
        wait = Wait(running, 2)
        ex.requests[1] = Request(1, 1, wait)
        ex.requests[2] = Request(2, 2, wait)
        answers = bytearray()
        pos = 0
        try:
            while pos < len(data):
                n = min(len(data) - pos, chunk_rng.choice((1, 3, 5, 13, 64, 4096)))
                ex.rspace[:n] = data[pos:pos + n]
                pos += n
                ex.feed(n)
                if len(ex.rbuf) > max_frame + 4:
                    raise Failure(f"{len(ex.rbuf)} unparsed bytes kept (max_frame {max_frame})")
                while True:
                    try:
                        got = b.recv(1 << 16)
                    except BlockingIOError:
                        break
                    if not got:
                        break
                    answers += got
        except ProtocolError:
            pass  # the executor exits on it (cli.py): the stream ends here
        for c in ex.queue:
            if isinstance(c, protocol.Call) and not c.cancelled and ex.pending.get(c.call_id) is not c:
                raise Failure(f"queued call {c.call_id} is not pending under its id")
        check_answers(bytes(answers))
    finally:
        a.close()
        b.close()


class Coverage:
    """Line transitions (file, previous line, line) reached inside wk_executor."""

    def __init__(self) -> None:
        self.seen: set = set()
        self.new = 0

    def local(self, frame, event, arg):
        if event == "line":
            key = (frame.f_code.co_filename, frame.f_lineno, self.prev)
            self.prev = frame.f_lineno
            if key not in self.seen:
                self.seen.add(key)
                self.new += 1
        return self.local

    def global_(self, frame, event, arg):
        if frame.f_code.co_filename.startswith(PKG_DIR):
            self.prev = -1
            return self.local
        return None

    def run(self, data: bytes) -> int:
        """Runs one input under tracing; returns how many new transitions it reached."""
        self.new = 0
        self.prev = -1
        sys.settrace(self.global_)
        try:
            run_one(data)
        finally:
            sys.settrace(None)
        return self.new


def mutate(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    d = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4))):
        op = rng.randrange(7)
        if op == 0 and d:
            i = rng.randrange(len(d))
            d[i] ^= 1 << rng.randrange(8)
        elif op == 1 and d:
            d[rng.randrange(len(d))] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op == 2 and len(d) >= 4:
            i = rng.randrange(len(d) - 3)
            struct.pack_into("<I", d, i, rng.choice(INTERESTING_U32 + (len(d) - i,)))
        elif op == 3:
            i = rng.randrange(len(d) + 1)
            d[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif op == 4 and d:
            i = rng.randrange(len(d))
            del d[i:i + rng.randrange(1, 17)]
        elif op == 5 and d:
            i = rng.randrange(len(d))
            j = min(len(d), i + rng.randrange(1, 65))
            d[i:i] = d[i:j]
        elif op == 6:
            other = rng.choice(corpus)
            i = rng.randrange(len(d) + 1)
            j = rng.randrange(len(other) + 1)
            d = d[:i] + other[j:]
    return bytes(d[:MAX_LEN])


def load(paths: list[str]) -> list[tuple[str, bytes]]:
    out = []
    for p in paths:
        names = sorted(os.listdir(p)) if os.path.isdir(p) else [None]
        for n in names:
            f = os.path.join(p, n) if n else p
            with open(f, "rb") as fh:
                out.append((f, fh.read()))
    return out


def fail(artifacts: str, data: bytes, what: str) -> int:
    os.makedirs(artifacts, exist_ok=True)
    path = os.path.join(artifacts, "crash-" + format(zlib.crc32(data), "08x"))
    with open(path, "wb") as f:
        f.write(data)
    print(f"FAILED: {what}\ninput written to {path} (replay: {sys.argv[0]} --replay {path})", flush=True)
    return 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="seed corpus directories or files")
    ap.add_argument("--replay", action="store_true", help="run the inputs once, no mutation")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--artifacts", default="artifacts")
    opts = ap.parse_args()
    inputs = load(opts.paths)
    if not inputs:
        print("no inputs", file=sys.stderr)
        return 2
    cov = Coverage()
    corpus = []
    for name, data in inputs:
        try:
            cov.run(data)
        except Exception:
            return fail(opts.artifacts, data, f"{name}:\n{traceback.format_exc()}")
        corpus.append(data)
    if opts.replay:
        print(f"replayed {len(inputs)} inputs, {len(cov.seen)} line transitions covered")
        return 0
    seed = opts.seed if opts.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed} (replay this run with --seed {seed})", flush=True)
    rng = random.Random(seed)
    runs = 0
    stop = time.monotonic() + opts.seconds
    while time.monotonic() < stop:
        data = mutate(rng, rng.choice(corpus), corpus)
        runs += 1
        try:
            if cov.run(data):
                corpus.append(data)
        except Exception:
            return fail(opts.artifacts, data, traceback.format_exc())
    print(f"{runs} runs, corpus {len(corpus)}, {len(cov.seen)} line transitions covered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
