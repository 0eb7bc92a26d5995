"""Running a few files of an engine's package without importing the package.

``load_isolated("lmdeploy", files, stand_ins)`` executes each file of ``files`` under its
own module name while a meta-path finder answers for that package only: a name in
``files`` is the real file, a name in ``stand_ins`` a small module holding exactly the
attributes given (a placeholder class the pool file names in an annotation, say), a parent
of either an empty package, and any other name of the package an ``ImportError`` naming it
(nothing else of the engine is ever run). When loading is done every name of the package
is taken out of ``sys.modules`` again and what was there before is put back, so an
installed copy of the engine and the loaded files never meet. Third-party modules the
files import (numpy, xxhash) are imported normally; torch is refused unless the caller
allows it (SGLang's allocator keeps its free list in a torch tensor), and ``outside`` gives
stand-ins for third-party modules a file imports but the pool never runs (triton's kernel
decorators, say).
"""

from __future__ import annotations

import _imp
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType

#: Third-party modules a pool file must never pull in.
FORBIDDEN = ("torch",)


class IsolatedLoadError(ImportError):
    """The files could not be loaded on their own; the message says which and why."""


class _StandIn(importlib.abc.Loader):
    def __init__(self, attributes: Mapping[str, object]) -> None:
        self.attributes = attributes

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = ModuleType(spec.name, f"stand-in for {spec.name} (not loaded by kvpool)")
        for name, value in self.attributes.items():
            setattr(module, name, value)
        return module

    def exec_module(self, module: ModuleType) -> None:
        return None


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(
        self,
        package: str,
        files: Mapping[str, Path],
        stand_ins: Mapping[str, Mapping[str, object]],
        outside: Mapping[str, Mapping[str, object]],
        allow: frozenset[str],
    ) -> None:
        self.package = package
        self.files = files
        self.stand_ins = {**stand_ins, **outside}
        self.outside = outside
        self.allow = allow
        named = [*files, *stand_ins, *outside]
        self.parents = {n.rsplit(".", i)[0] for n in named for i in range(1, n.count(".") + 1)}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top = fullname.split(".")[0]
        if top in FORBIDDEN and top not in self.allow:
            raise IsolatedLoadError(f"a {self.package} pool file imports {fullname}")
        outside = any(fullname == n or n.startswith(fullname + ".") for n in self.outside)
        if not outside and fullname != self.package and not fullname.startswith(self.package + "."):
            return None
        if fullname in self.files:
            file = self.files[fullname]
            # a package's __init__.py: its submodules are found by this finder, not a path
            inner: list[str] | None = [] if file.name == "__init__.py" else None
            return importlib.util.spec_from_file_location(
                fullname, file, submodule_search_locations=inner
            )
        if fullname in self.stand_ins:
            loader = _StandIn(self.stand_ins[fullname])
            package = fullname in self.parents  # triton, when triton.language stands in too
            return importlib.machinery.ModuleSpec(fullname, loader, is_package=package)
        if fullname in self.parents:
            return importlib.machinery.ModuleSpec(fullname, _StandIn({}), is_package=True)
        raise IsolatedLoadError(
            f"a {self.package} pool file imports {fullname}, which the suite does not load"
        )


def _ours(package: str, name: str) -> bool:
    return name == package or name.startswith(package + ".")


def load_isolated(
    package: str,
    files: Mapping[str, Path],
    stand_ins: Mapping[str, Mapping[str, object]] | None = None,
    *,
    outside: Mapping[str, Mapping[str, object]] | None = None,
    allow: frozenset[str] = frozenset(),
) -> dict[str, ModuleType]:
    """Load ``files`` (module name -> file) of ``package`` in isolation; the loaded modules
    by name. ``outside`` stands in for third-party modules (they too are taken out of
    ``sys.modules`` afterwards); ``allow`` names forbidden modules this package may import.
    :class:`IsolatedLoadError` names the file and the error when one fails."""
    finder = _Finder(package, files, stand_ins or {}, outside or {}, allow)
    tops = {package, *(n.split(".")[0] for n in outside or {})}
    started: list[str] = []  # the file being imported is the last one started

    def each() -> Iterator[str]:
        for name in files:
            started.append(name)
            yield name

    try:
        return import_isolated(finder, lambda n: any(_ours(t, n) for t in tops), each())
    except IsolatedLoadError:
        raise
    except Exception as exc:
        name = started[-1]
        raise IsolatedLoadError(
            f"loading {name} ({files[name]}) failed: {type(exc).__name__}: {exc}"
        ) from exc


def import_isolated(
    finder: importlib.abc.MetaPathFinder, owned: Callable[[str], bool], names: Iterable[str]
) -> dict[str, ModuleType]:
    """Import ``names`` with ``finder`` first on the meta path and every module name
    ``owned`` says is the loading's out of ``sys.modules``; the modules it left there by
    name. Afterwards (also when an import raises, which propagates) ``sys.modules`` holds
    exactly what it held before for those names, so an installed copy of the engine and
    the loaded files never meet. The one isolated loader every engine target uses: the
    finder is the engine's policy for names it does not load."""
    _imp.acquire_lock()  # no other thread may import while the package's names are ours
    saved = {n: m for n, m in sys.modules.items() if owned(n)}
    loaded: dict[str, ModuleType] = {}
    try:
        for name in saved:
            del sys.modules[name]
        sys.meta_path.insert(0, finder)
        try:
            for name in names:
                importlib.import_module(name)
        finally:
            sys.meta_path.remove(finder)
            loaded = {n: m for n, m in sys.modules.items() if owned(n)}
            for name in loaded:
                del sys.modules[name]
            sys.modules.update(saved)
    finally:
        _imp.release_lock()
    return loaded
