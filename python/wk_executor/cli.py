"""The executor's start: command line, resource limits, the inherited channel and HELLO, the two
threads (docs/specs/executor-protocol.md §1, §7)."""

from __future__ import annotations

import argparse
import mmap
import os
import resource
import signal
import socket
import sys
import threading

from . import procs
from .capture import DEFAULT_CAPTURE_MAX
from .protocol import DEFAULT_MAX_FRAME, encode_hello
from .runner import Executor
from .state import DEFAULT_MAX_NESTING, log

THREAD_STACK = 512 << 10  # the executor's own threads (matters under --rlimit-as-mb)


def _set_rlimit(which: int, value: int, flag: str) -> bool:
    """Sets soft and hard limit `which` to `value` (not above the current hard limit,
    which an unprivileged process cannot raise). False, after a log line, on failure."""
    try:
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY and value > hard:
            log(f"{flag} {value} is above the hard limit {hard}; using {hard}")
            value = hard
        resource.setrlimit(which, (value, value))
        return True
    except (ValueError, OSError) as e:
        log(f"cannot apply {flag}: {e}")
        return False


def main(argv: list[str] | None = None) -> int:
    """Runs the executor with the command line `argv` (default sys.argv[1:]); returns the
    exit status: 0 after SHUTDOWN or EOF, 1 when it cannot start (limits, connect,
    HELLO). A protocol error exits the process with status 2 from where it is found."""
    ap = argparse.ArgumentParser(description="Python executor of the Worker")
    ap.add_argument("--channel-fd", type=int, default=None,
                    help="the inherited file descriptor of this executor's end of the socket "
                         "pair the Worker created for it (required unless --check-code)")
    ap.add_argument("--check-code", metavar="DIR",
                    help="do not run: check that every *.py file under DIR compiles and that "
                         "--entrypoint loads, exit 1 with the reason on stderr if not "
                         "(workerctl deploy's check)")
    ap.add_argument("--entrypoint", default="main:handler",
                    help="the entry point --check-code loads (default main:handler)")
    ap.add_argument("--max-frame", type=int, default=DEFAULT_MAX_FRAME,
                    help="largest frame accepted or sent, bytes after the length prefix")
    ap.add_argument("--capture-max", type=int, default=DEFAULT_CAPTURE_MAX,
                    help="bytes of stdout and of stderr kept per call")
    ap.add_argument("--pycache-prefix", default=None,
                    help="directory for compiled bytecode; without it none is written, so "
                         "the code store is never modified")
    ap.add_argument("--max-nesting", type=int, default=DEFAULT_MAX_NESTING,
                    help="most calls running at once (calls waiting for subcalls run other "
                         "calls nested); a CALL beyond it is answered NestingTooDeep")
    ap.add_argument("--started-file", default=None,
                    help="a file of at least 8 bytes the Worker maps: the id of each call "
                         "is written there before the call starts (u64, little-endian)")
    ap.add_argument("--rlimit-as-mb", type=int, default=0,
                    help="RLIMIT_AS (address space) in MiB; 0 leaves it unchanged")
    ap.add_argument("--rlimit-nofile", type=int, default=0,
                    help="RLIMIT_NOFILE (open files); 0 leaves it unchanged")
    ap.add_argument("--rlimit-cpu-s", type=int, default=0,
                    help="RLIMIT_CPU (CPU seconds over the executor's life); 0 leaves it "
                         "unchanged")
    ap.add_argument("--rlimit-nproc", type=int, default=0,
                    help="RLIMIT_NPROC (processes and threads of the executor's user, all "
                         "together; root is exempt); 0 leaves it unchanged")
    opts = ap.parse_args(argv)
    if opts.check_code:
        from . import check  # only the check needs it
        return check.main(opts.check_code, opts.entrypoint)
    if opts.channel_fd is None or opts.channel_fd < 3:
        ap.error("--channel-fd is required (3 or above)")
    if opts.pycache_prefix:
        sys.pycache_prefix = opts.pycache_prefix
    else:
        sys.dont_write_bytecode = True
    if not (1024 <= opts.max_frame <= 0xFFFFFFFF) or opts.capture_max < 64:
        ap.error("--max-frame must be 1024..4294967295 and --capture-max at least 64")
    if not (1 <= opts.max_nesting <= 100):
        ap.error("--max-nesting must be 1..100")
    if min(opts.rlimit_as_mb, opts.rlimit_nofile, opts.rlimit_cpu_s, opts.rlimit_nproc) < 0:
        ap.error("--rlimit-* values must be 0 (unchanged) or positive")
    for value, which, unit, flag in ((opts.rlimit_as_mb, resource.RLIMIT_AS, 1 << 20, "--rlimit-as-mb"),
                                     (opts.rlimit_nofile, resource.RLIMIT_NOFILE, 1, "--rlimit-nofile"),
                                     (opts.rlimit_cpu_s, resource.RLIMIT_CPU, 1, "--rlimit-cpu-s"),
                                     (opts.rlimit_nproc, resource.RLIMIT_NPROC, 1, "--rlimit-nproc")):
        if value and not _set_rlimit(which, value * unit, flag):
            return 1
    # before any user code: non-dumpable, a subreaper for what calls start, no core dumps
    if not procs.harden():
        return 1

    # The Worker owns our lifetime (SHUTDOWN, EOF, SIGTERM/SIGKILL): a terminal Ctrl-C
    # aimed at the Worker must not kill calls under it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    # The channel is the socket pair the Worker made for this executor alone: no path,
    # nothing to connect to. Not inherited further: processes the user's code starts
    # do not get it.
    try:
        sock = socket.socket(fileno=opts.channel_fd)
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            raise OSError(f"not a Unix stream socket (family {sock.family}, type {sock.type})")
        os.set_inheritable(sock.fileno(), False)
    except OSError as e:
        log(f"cannot use --channel-fd {opts.channel_fd}: {e}")
        return 1
    ex = Executor(sock, opts.max_frame, opts.capture_max, opts.max_nesting)
    if opts.started_file:
        try:
            with open(opts.started_file, "r+b") as f:
                ex.started = mmap.mmap(f.fileno(), 8)
        except (OSError, ValueError) as e:
            log(f"cannot map --started-file {opts.started_file}: {e}")
            return 1
    try:
        ex.send(encode_hello(os.getpid()))
    except OSError as e:
        log(f"cannot send HELLO: {e}")
        return 1
    # small stacks for our own threads (the default 8 MiB counts against RLIMIT_AS);
    # threads the user's code starts get the default again
    old_stack = threading.stack_size(THREAD_STACK)
    try:
        threading.Thread(target=ex.watchdog, name="wk-watchdog", daemon=True).start()
    finally:
        threading.stack_size(old_stack)
    rc = ex.run()
    procs.end_descendants()  # SHUTDOWN or EOF: nothing a call started outlives us
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
    return rc
