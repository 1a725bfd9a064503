"""Checking a function's code before it is published (`workerctl deploy` runs
`worker_executor.py --check-code DIR --entrypoint M:A`): every *.py file compiles, and
the entry point loads exactly as an executor loads it (loader.Loader, so the same rules
apply: a callable defined in the function's own code)."""

from __future__ import annotations

import os
import sys

from .loader import Loader


def check(code_dir: str, entrypoint: str) -> str | None:
    """None when `code_dir` is fit to publish with `entrypoint`; else why not (one line)."""
    code_dir = os.path.abspath(code_dir)
    for base, dirs, files in os.walk(code_dir):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(base, name)
            rel = os.path.relpath(path, code_dir)
            try:
                with open(path, "rb") as f:
                    compile(f.read(), rel, "exec", dont_inherit=True)
            except SyntaxError as e:
                return f"{rel} does not compile: line {e.lineno}: {e.msg}"
            except (OSError, ValueError) as e:
                return f"{rel} cannot be compiled: {e}"
    try:
        Loader().load(code_dir, entrypoint)
    except BaseException as e:  # importing user code may raise anything, SystemExit too
        msg = " ".join(str(e).split())
        return f"entrypoint {entrypoint} does not load: {type(e).__name__}: {msg}"
    return None


def main(code_dir: str, entrypoint: str) -> int:
    """Prints the reason on stderr and returns 1 when the code is unfit, else 0."""
    sys.dont_write_bytecode = True
    why = check(code_dir, entrypoint)
    if why:
        print(why, file=sys.stderr, flush=True)
        return 1
    return 0
