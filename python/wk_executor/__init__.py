"""wk_executor: the Python executor process of the Worker (started by the script
python/worker_executor.py; the wire format is in docs/specs/executor-protocol.md, the C side
in src/adapters/wk_frame.c).

Its channel is the socket inherited at --channel-fd (its end of a socket pair the Worker
made for it alone); it sends HELLO on it, then runs the CALL frames
it receives, one at a time and in order, answering each with exactly one RESULT frame.

Threads: the main thread runs calls (user code sees an ordinary main thread) and, between
calls, reads the socket itself: a burst of short calls costs no thread switch. RESULTs
are buffered and written in batches, and written early, once more than half of the calls
the executor holds have run (so the Worker sends the next ones while the rest run: the
pipeline never drains), when the buffer passes FLUSH_BYTES, and when the main thread runs
out of calls. A watchdog thread ticks every WATCH_PERIOD_S while calls run: it writes
RESULTs that a long call would hold back, and when one call has been running for a whole
tick it takes over the socket's read side until the call ends, so PING is answered,
CANCEL is noted and STACK_REQUEST is answered even while a call runs (or loops). A call
that waits for its subcalls (ctx.call / ctx.map) keeps running the CALLs that arrive
meanwhile, nested on the main thread. Writes are serialised by a lock, reads by another.

Modules, one concept each:
    protocol   frame types, encoders and parsers (pure)
    capture    per-call capture of sys.stdout / sys.stderr
    context    ctx, what a function sees
    loader     code loading: one namespace per code_dir (epoch), entry points cached
    state      the executor's shared state and its locks; diagnostics to fd 2
    channel    the socket: batched writes, reads
    inbox      received frames: queue, CANCEL, PING, SHUTDOWN, EOF
    subcalls   ctx.call / ctx.map: SUBCALLS out, wait, SUBCALLS_RESULT in
    watchdog   the second thread: liveness while a call runs, stack capture
    runner     the main loop: take, execute, RESULT; Executor assembles the parts
    cli        command line, resource limits, connect, HELLO, threads: main()

The package is named wk_executor, not worker_executor (the script's name, which a
package beside it would shadow on import) nor anything under `worker` (the module user
functions import: the executor's internals stay out of their namespace).

Exit status: 0 after SHUTDOWN (once every call sent before it has its RESULT) or when
the Worker closes the socket; 2 on a protocol error from the Worker; 1 when the socket
cannot be reached at start-up.

Standard library only; Python 3.9 or later.
"""
