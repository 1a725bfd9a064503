"""Loading a function's code: one namespace per code_dir (per epoch), entry points cached
(docs/specs/executor-protocol.md §4.1)."""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import types
from collections.abc import Callable

_DOTTED = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class FunctionLoadError(Exception):
    """The entry point is malformed, its code_dir is missing, it is not callable, or it
    is not defined in the function's own code."""


class Loader:
    """Imports each code_dir in its own namespace and caches the entrypoints.

    Every code_dir becomes a synthetic package named _wk_code_<hash of the path>, whose
    __path__ is [code_dir]; entrypoint "mod.sub:attr" imports <package>.mod.sub. The
    code_dir is on sys.path only while the entry module is imported, so plain
    `import helper` of a sibling module at the module's top level works too; such
    modules are then removed from sys.modules so that another epoch gets its own copy.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Callable] = {}

    def load(self, code_dir: str, entrypoint: str) -> Callable:
        """The callable `entrypoint` ("module:attr") of `code_dir` (an absolute path).
        Raises FunctionLoadError, or whatever importing the module raises."""
        key = (code_dir, entrypoint)
        fn = self._entries.get(key)
        if fn is not None:
            return fn
        modname, sep, attr = entrypoint.partition(":")
        if not sep or not _DOTTED.match(modname) or not _DOTTED.match(attr):
            raise FunctionLoadError(f"entrypoint {entrypoint!r} is not of the form 'module:attr' "
                                    "(dotted Python identifiers, e.g. main:handler)")
        if os.path.isabs(code_dir) and not os.access(code_dir, os.R_OK | os.X_OK):
            try:
                os.stat(code_dir)
                why = "cannot read it"
            except PermissionError:
                why = "cannot reach it (a parent directory is closed to it)"
            except OSError:
                why = ""
            if why:
                raise FunctionLoadError(
                    f"code_dir {code_dir!r}: the executor's user (uid {os.getuid()}) {why}; "
                    "the code root and its parent directories must be readable by the account "
                    "executors run as (executor_user)")
        if not os.path.isabs(code_dir) or not os.path.isdir(code_dir):
            raise FunctionLoadError(f"code_dir {code_dir!r} is not an absolute path to a directory")
        pkg = package_name(code_dir)
        mod = _import(code_dir, pkg + "." + modname)
        obj = mod
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise FunctionLoadError(f"module {modname!r} of {code_dir} has no attribute "
                                        f"{attr!r}") from None
        if not callable(obj):
            raise FunctionLoadError(f"{entrypoint} in {code_dir} is not callable")
        where = defined_in(obj)
        if where is None or not _inside(where, code_dir):
            raise FunctionLoadError(
                f"entrypoint {entrypoint} is not defined in the function's own code "
                f"({'it comes from ' + where if where else 'it is not Python code'}): only "
                "callables defined in the code directory may be entry points")
        self._entries[key] = obj
        return obj


def defined_in(obj) -> str | None:
    """The file where the callable `obj` is defined: a function's (or method's, or a
    decorated function's, through __wrapped__) code file; a class's module file, else
    the file of a function defined in its body; a callable instance's class's. None for
    what is not Python source (builtins, functools.partial, C types)."""
    if isinstance(obj, functools.partial):
        return None  # its arguments are bound by whoever made it: never an entry point
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    obj = _unwrap(obj)
    if obj is None:  # a __wrapped__ cycle
        return None
    if isinstance(obj, types.FunctionType):
        return obj.__code__.co_filename
    cls = obj if isinstance(obj, type) else type(obj)
    mod = sys.modules.get(cls.__module__)
    f = getattr(mod, "__file__", None)
    if f:
        return f
    for v in vars(cls).values():  # a sibling module removed from sys.modules after import
        v = getattr(v, "__func__", v)
        if isinstance(v, types.FunctionType):
            return v.__code__.co_filename
    return None


def _unwrap(obj):
    """inspect.unwrap without importing inspect (its ast, dis and tokenize cost an
    executor ~4 MB): follows __wrapped__; None for a cycle."""
    seen = {id(obj)}
    while hasattr(obj, "__wrapped__"):
        obj = obj.__wrapped__
        if id(obj) in seen or len(seen) > sys.getrecursionlimit():
            return None
        seen.add(id(obj))
    return obj


def _inside(path: str, code_dir: str) -> bool:
    root = os.path.join(os.path.realpath(code_dir), "")
    return os.path.realpath(path).startswith(root)


def _path_hash(code_dir: str) -> str:
    """16 hex digits of blake2b over the path: hashlib's own blake2b, without importing
    hashlib (which loads OpenSSL's libcrypto, ~5 MB of an executor's memory)."""
    try:
        from _blake2 import blake2b
    except ImportError:  # a Python built without it
        from hashlib import blake2b
    return blake2b(os.fsencode(code_dir), digest_size=8).hexdigest()


def package_name(code_dir: str) -> str:
    """The synthetic package of `code_dir` (_wk_code_<hash>), created on first use."""
    name = "_wk_code_" + _path_hash(code_dir)
    if name not in sys.modules:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [code_dir]
        pkg = importlib.util.module_from_spec(spec)
        pkg.__path__ = [code_dir]
        sys.modules[name] = pkg
    return name


def _import(code_dir: str, fullname: str):
    importlib.invalidate_caches()
    before = set(sys.modules)
    sys.path.insert(0, code_dir)
    try:
        return importlib.import_module(fullname)
    finally:
        try:
            sys.path.remove(code_dir)
        except ValueError:
            pass
        prefix = os.path.join(code_dir, "")
        pkg = fullname.split(".", 1)[0]
        for name in set(sys.modules) - before:
            if name == pkg or name.startswith(pkg + "."):
                continue
            f = getattr(sys.modules.get(name), "__file__", None) or ""
            if f.startswith(prefix):
                del sys.modules[name]
