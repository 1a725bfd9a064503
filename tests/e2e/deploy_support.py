"""Helpers of the DeployCode tests (test_deploy_rpc_e2e.py, test_security_deploy_e2e.py):
the code store's digest rule in Python, requests, and a snapshot of a code root."""

import hashlib
import os

from conftest import pb


def tree_digest(files):
    """sha256 hex of a tree by the code store's rule (src/adapters/wk_code_store.c):
    the walk's order (each directory's entries by name, '/' below every other byte),
    "D dir\\0" as a directory is entered, "F path\\0" "x|- size\\0" content per file.
    `files` maps path -> bytes, or path -> (bytes, executable)."""
    norm = {}
    for path, v in files.items():
        content, exe = v if isinstance(v, tuple) else (v, False)
        norm[path] = (content if isinstance(content, bytes) else content.encode(), exe)
    order = sorted(norm, key=lambda p: p.encode().replace(b"/", b"\x01"))
    h = hashlib.sha256()
    prev = None
    for path in order:
        parts = path.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if prev is not None and prev.startswith(d + "/"):
                continue
            h.update(b"D " + d.encode() + b"\0")
        content, exe = norm[path]
        h.update(b"F " + path.encode() + b"\0")
        h.update(("%s %d" % ("x" if exe else "-", len(content))).encode() + b"\0")
        h.update(content)
        prev = path
    return h.hexdigest()


def deploy_request(function, files, epoch=0, make_current=True, digest=None, entrypoint=""):
    """A DeployCodeRequest for files (path -> text/bytes or (content, executable))."""
    cf = []
    for path, v in files.items():
        content, exe = v if isinstance(v, tuple) else (v, False)
        cf.append(pb.CodeFile(path=path, content=content if isinstance(content, bytes)
                              else content.encode(), executable=exe))
    return pb.DeployCodeRequest(function=function, epoch=epoch,
                                digest=digest if digest is not None else tree_digest(files),
                                files=cf, make_current=make_current, entrypoint=entrypoint)


def snapshot(root):
    """Every path under root with its mode, and each file's size and mtime: equal
    snapshots, nothing changed (a directory's own mtime moves with a staging directory
    made and removed again)."""
    out = {}
    for base, dirs, names in os.walk(root):
        for n in dirs + names:
            p = os.path.join(base, n)
            st = os.lstat(p)
            is_dir = os.path.isdir(p) and not os.path.islink(p)
            out[os.path.relpath(p, root)] = ((st.st_mode,) if is_dir else
                                            (st.st_mode, st.st_size, st.st_mtime_ns))
    return out


def version(n):
    """A function whose result names its version."""
    return "def handler(args, ctx):\n    return {'version': %d, 'epoch': ctx.epoch}\n" % n
