"""How the plugin wraps modules that are not imported yet: a `sys.meta_path` finder, and an import-free check
that a module exists.

The wrapped classes live in modules (runners, speculators) that a process may import long after the plugin's
`register()` runs, or never (the API server never imports the model runner; a V1 run never imports the V2
runner). So the plugin wraps at once what is already imported, and puts `PatchOnImport` at the front of
`sys.meta_path`: for the table's module names only, it lets the normal finders find the module and wraps the
attributes right after the module's code has run (before any importer gets the module back, so no instance is
ever created from an unwrapped class). The finder is removed once every watched module is done.

Patching on import was chosen over "retry on first use" because there is no first use to hook without already
wrapping something, and over importing the modules eagerly because that would drag the model runner and torch
into the API server at plugin-load time. A forked child inherits the wrapped classes; a spawned one calls
`register()` itself.

Runs inside vLLM's processes: standard library only.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.profiling.wrapping import Profiler


class PatchOnImport:
    """A sys.meta_path finder that wraps the watched modules' attributes right after their code has run."""

    def __init__(self, prof: Profiler):
        self.prof = prof
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if self.prof.deferred:
            self.prof.retry_deferred()
        if fullname not in self.prof.waiting or getattr(self._busy, "on", False):
            return None
        spec = self._find_with_the_other_finders(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        self._hook_exec_module(spec.loader, fullname)
        return spec

    def _find_with_the_other_finders(self, fullname: str, path: Any, target: Any) -> Any:
        self._busy.on = True  # the other finders may import; do not recurse into ourselves
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    return spec
            return None
        finally:
            self._busy.on = False

    def _hook_exec_module(self, loader: Any, fullname: str) -> None:
        """Make the loader call back once the module's code has run, then take the hook off again."""
        original = loader.exec_module
        own = getattr(loader, "__dict__", {}).get("exec_module")

        def unhook() -> None:
            try:
                if own is None:
                    del loader.exec_module
                else:
                    loader.exec_module = own
            except AttributeError:
                pass

        def exec_module(module: ModuleType) -> None:
            if module.__name__ != fullname:  # a loader shared by several modules (zip): not ours
                return original(module)
            try:
                original(module)
            finally:
                unhook()
            self.prof.module_loaded(module)  # only when the module's code ran without error

        # A loader that refuses attributes: the module loads unwrapped and its rows stay waiting.
        with contextlib.suppress(AttributeError, TypeError):
            loader.exec_module = exec_module


def module_exists(name: str) -> bool:
    """Whether `name` can be imported, decided without importing it or its parent packages (their
    __init__ may be heavy): walk the top package's __path__ on the file system."""
    parts = name.split(".")
    paths = _top_package_paths(parts[0])
    if paths is None:
        return False
    if len(parts) == 1:
        return True
    for i, part in enumerate(parts[1:], start=1):
        last = i == len(parts) - 1
        nxt = []
        for base in paths:
            pkg = Path(base, part)
            if (pkg / "__init__.py").is_file() or (pkg.is_dir() and not last):
                nxt.append(str(pkg))
            elif last and any(Path(base, part + suffix).is_file() for suffix in importlib.machinery.all_suffixes()):
                return True
        if not nxt:
            return False
        if last:
            return True
        paths = nxt
    return False


def _top_package_paths(top_name: str) -> list[str] | None:
    """The search path of a top-level package (empty for a plain module), or None when it does not exist."""
    top = sys.modules.get(top_name)
    if top is not None:
        return list(getattr(top, "__path__", []) or [])
    try:
        spec = importlib.util.find_spec(top_name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return list(spec.submodule_search_locations or [])
