"""Loading a function's code: one namespace per code_dir (per epoch), entry points cached
(docs/specs/executor-protocol.md §4.1)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Callable

_DOTTED = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class FunctionLoadError(Exception):
    """The entry point is malformed, its code_dir is missing, or it is not callable."""


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
        self._entries[key] = obj
        return obj


def package_name(code_dir: str) -> str:
    """The synthetic package of `code_dir` (_wk_code_<hash>), created on first use."""
    name = "_wk_code_" + hashlib.sha1(os.fsencode(code_dir)).hexdigest()[:16]
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
