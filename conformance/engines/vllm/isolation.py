"""Running a few files of a vLLM release without importing vLLM.

The release's block-pool modules are executed under their own names (``vllm.v1.core.
block_pool``, ..., or a fork's: ``aphrodite.v1.core.block_pool``) while a meta-path finder
is installed for that top-level package only (:mod:`.package`).
Every other ``vllm.*`` module they import becomes an inert placeholder module whose
attributes are inert placeholder objects: callable, subclassable, subscriptable, usable in
annotations and ``isinstance`` (never true), falsy, empty when iterated. When loading is
done, every ``vllm*`` entry is taken out of ``sys.modules`` again and whatever was there
before (a real installed vLLM, say) is put back, so the rest of the process never sees the
loaded files and two releases can live side by side. The loaded modules are handed out
keyed by vLLM's names, so an adapter reads a fork exactly as it reads vLLM.

Third-party packages the files import (msgspec, pyzmq, cbor2, xxhash if present) are
imported normally. torch is never imported: if a pool file needs it, loading fails and says
so. The KV cache manager's files (loaded for ``--manager vllm`` only) import torch for the
``dtype`` annotations of ``kv_cache_interface.py``; there ``torch`` is an inert placeholder
module too (the manager never computes a page size, the one place a dtype is read).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ...targets.isolated_files import import_isolated
from .followed import followed_modules
from .manager_request import RequestStatus
from .package import VLLM, files_in_tree, in_package, own_name, own_path, role_of
from .releases import (
    MANAGER_MODULES,
    MANAGER_REQUIRED,
    MODULES,
    PUBLISHER_MODULES,
    ReleaseError,
)
from .request_keys import mm_features_in_window, tensor_data

#: The logger every ``init_logger`` of a loaded release hands out children of. It has a
#: NullHandler so that a release's warnings (a refused reset, say) never reach the
#: terminal through logging's last-resort handler; configure it to see them.
LOGGER_NAME = "kvpool.vllm"
logging.getLogger(LOGGER_NAME).addHandler(logging.NullHandler())

#: Third-party modules a release must never pull in.
FORBIDDEN = ("torch",)


class IsolationError(ImportError):
    """A release's files could not be loaded in isolation; the message says which and why."""


class PlaceholderUsed(AttributeError):
    """The release's code used a placeholder after loading: it needs a module the suite
    could not load. A loading error (exit 2), never a finding: the message names the module,
    why it is a placeholder, and the release's line that used it."""


@dataclass
class PlaceholderLog:
    """Which placeholders a release touched: while loading (expected: decorators, base
    classes, annotations) and afterwards, while its pool ran, which is refused: the first
    such use raises :class:`PlaceholderUsed`, and is kept so that the adapter can raise it
    again if the release swallowed it."""

    loading: bool = True
    at_load: set[str] = field(default_factory=set)
    after_load: list[str] = field(default_factory=list)
    #: The release's version and its files (path on disk -> path inside the release), for
    #: the message; set when loading is done.
    version: str = ""
    files: dict[str, str] = field(default_factory=dict)
    #: Modules of the release that were followed but could not load, with why.
    fell_back: dict[str, str] = field(default_factory=dict)
    #: The placeholder modules made while loading.
    modules: set[str] = field(default_factory=set)
    #: The first use after loading, as raised.
    used: PlaceholderUsed | None = None

    def note(self, name: str, placeholder: object = None) -> None:
        if self.loading:
            self.at_load.add(name)
            return
        self.after_load.append(name)
        error = PlaceholderUsed(self._message(name), name=name, obj=placeholder)
        if self.used is None:
            self.used = error
        raise error

    def raise_if_used(self) -> None:
        """Raise the first use after loading again (a release that caught it)."""
        if self.used is not None:
            raise PlaceholderUsed(str(self.used), name=self.used.name, obj=self.used.obj)

    def _message(self, name: str) -> str:
        module = self._module_of(name)
        why = self.fell_back.get(module)
        reason = (
            f"importing it from the release failed ({why})"
            if why
            else "the suite does not load it (it needs torch, CUDA or the engine)"
        )
        return (
            f"vLLM {self.version or '(unknown release)'} uses {name} at {self._caller()}, "
            f"but {module} is a placeholder: {reason}. The suite cannot run this release "
            "(a loading error, not a finding)"
        )

    def _module_of(self, name: str) -> str:
        """The placeholder module ``name`` belongs to (``vllm.utils.gc_utils`` of
        ``vllm.utils.gc_utils.gc_untrack()``)."""
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            prefix = ".".join(parts[:end])
            if prefix in self.modules:
                return prefix
        return name

    def _caller(self) -> str:
        frame = sys._getframe(1)
        while frame is not None:
            inside = self.files.get(frame.f_code.co_filename)
            if inside is not None:
                return f"{inside} line {frame.f_lineno} ({frame.f_code.co_name})"
            frame = frame.f_back  # type: ignore[assignment]
        return "a place outside the release's files"


class Placeholder:
    """An inert stand-in for anything a loaded file imports from the rest of vLLM."""

    __slots__ = ("__weakref__", "_kvpool_class", "_kvpool_log", "_kvpool_name")
    _kvpool_name: str
    _kvpool_log: PlaceholderLog
    _kvpool_class: type | None

    def __init__(self, name: str, log: PlaceholderLog) -> None:
        object.__setattr__(self, "_kvpool_name", name)
        object.__setattr__(self, "_kvpool_log", log)
        object.__setattr__(self, "_kvpool_class", None)

    def __repr__(self) -> str:
        return f"<vLLM placeholder {self._kvpool_name}>"

    def __getattr__(self, name: str) -> Placeholder:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        self._kvpool_log.note(f"{self._kvpool_name}.{name}", self)
        return Placeholder(f"{self._kvpool_name}.{name}", self._kvpool_log)

    def __setattr__(self, name: str, value: object) -> None:
        self._kvpool_log.note(f"{self._kvpool_name}.{name} = ...", self)

    def _used(self, how: str) -> None:
        """Note a use past loading (which raises)."""
        if not self._kvpool_log.loading:
            self._kvpool_log.note(f"{self._kvpool_name}{how}", self)

    def __call__(self, *args: object, **kwargs: object) -> Any:
        self._kvpool_log.note(f"{self._kvpool_name}()", self)
        # Used as a decorator, a placeholder leaves the function or class as it is.
        if (
            len(args) == 1
            and not kwargs
            and (inspect.isfunction(args[0]) or inspect.isclass(args[0]))
        ):
            return args[0]
        return Placeholder(f"{self._kvpool_name}()", self._kvpool_log)

    def __getitem__(self, item: object) -> Placeholder:
        self._used("[...]")
        return self

    def __mro_entries__(self, bases: tuple[object, ...]) -> tuple[type, ...]:
        """Subclassing a placeholder subclasses one plain class made for it."""
        if self._kvpool_class is None:
            module, _, name = self._kvpool_name.rpartition(".")
            made = type(
                name, (), {"__module__": module, "__doc__": f"placeholder for {self._kvpool_name}"}
            )
            object.__setattr__(self, "_kvpool_class", made)
            return (made,)
        return (self._kvpool_class,)

    def __instancecheck__(self, instance: object) -> bool:
        self._used(" in isinstance()")
        cls = self._kvpool_class
        return cls is not None and isinstance(instance, cls)

    def __subclasscheck__(self, subclass: type) -> bool:
        self._used(" in issubclass()")
        cls = self._kvpool_class
        return cls is not None and isinstance(subclass, type) and issubclass(subclass, cls)

    def __or__(self, other: object) -> Placeholder:
        return self

    def __ror__(self, other: object) -> Placeholder:
        return self

    def __bool__(self) -> bool:
        self._used(" as a truth value")
        return False

    def __len__(self) -> int:
        self._used(" in len()")
        return 0

    def __iter__(self) -> Iterator[Any]:
        self._used(" iterated")
        return iter(())

    def __contains__(self, item: object) -> bool:
        self._used(" in an 'in' test")
        return False

    def __eq__(self, other: object) -> bool:
        self._used(" compared")
        return self is other

    def __ne__(self, other: object) -> bool:
        self._used(" compared")
        return self is not other

    __hash__ = object.__hash__


class VllmLogger:
    """What ``vllm.logger.init_logger`` returns: a logger with vLLM's ``*_once`` methods."""

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(f"{LOGGER_NAME}.{name}")
        self._said: set[tuple[str, str]] = set()

    def __getattr__(self, name: str) -> Any:
        if name.endswith("_once"):
            return self._once(name.removesuffix("_once"))
        return getattr(self.logger, name)

    def _once(self, level: str) -> Callable[..., None]:
        def log_once(msg: str, *args: object, **kwargs: object) -> None:
            if (level, msg) not in self._said:
                self._said.add((level, msg))
                getattr(self.logger, level)(msg, *args)

        return log_once


def init_logger(name: str) -> VllmLogger:
    return VllmLogger(name)


def ceiling_division(a: int, b: int) -> int:
    """What ``vllm.utils.cdiv`` computes: ``a / b`` rounded up. Releases before 0.11 import
    it from ``vllm/utils/__init__.py``, which pulls in most of vLLM and is never loaded;
    their KV cache managers call it on every allocation."""
    return -(-a // b)


def config_class(cls: type) -> type:
    """What ``vllm.config.utils.config`` does to a configuration class, without pydantic:
    a dataclass (keyword construction, defaults, ``__post_init__``, ``asdict``)."""
    return dataclasses.dataclass(cls)


#: Attributes a placeholder module must really provide (the two from :mod:`.request_keys`
#: serve the hashing of a request's prompt embeddings and multimodal features).
SPECIAL: dict[str, dict[str, object]] = {
    "vllm.logger": {"init_logger": init_logger},
    "vllm.utils": {"cdiv": ceiling_division},
    "vllm.config.utils": {"config": config_class},
    "vllm.v1.utils": {"tensor_data": tensor_data},
    "vllm.multimodal.utils": {"get_mm_features_in_window": mm_features_in_window},
    "vllm.v1.request": {"RequestStatus": RequestStatus},
}


class PlaceholderModule(ModuleType):
    """A ``vllm.*`` module that is not loaded: every attribute is a placeholder, except the
    names of real submodules (so that ``from vllm import envs`` imports the real file)."""

    def __init__(
        self, name: str, log: PlaceholderLog, real: frozenset[str], package: str = VLLM
    ) -> None:
        super().__init__(name, f"placeholder for {name} (not loaded by kvpool)")
        self.__path__: list[str] = []
        self._kvpool_log = log
        self._kvpool_real = real
        special = SPECIAL.get(role_of(name, package), {}) if in_package(name, package) else {}
        for attr, value in special.items():
            setattr(self, attr, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if f"{self.__name__}.{name}" in self._kvpool_real:
            raise AttributeError(name)
        self._kvpool_log.note(f"{self.__name__}.{name}", self)
        value = Placeholder(f"{self.__name__}.{name}", self._kvpool_log)
        setattr(self, name, value)
        return value


class _PlaceholderLoader(importlib.abc.Loader):
    def __init__(self, log: PlaceholderLog, real: frozenset[str], package: str) -> None:
        self.log = log
        self.real = real
        self.package = package

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return PlaceholderModule(spec.name, self.log, self.real, self.package)

    def exec_module(self, module: ModuleType) -> None:
        self.log.note(module.__name__)
        self.log.modules.add(module.__name__)


class _FollowedLoader(importlib.abc.Loader):
    """Runs a followed module of the release (:mod:`.followed`); when it fails to load
    (a third-party module missing here, a torch import further in), the module becomes a
    placeholder, and the log keeps why (a use of it then names the reason)."""

    def __init__(self, path: Path, log: PlaceholderLog, real: frozenset[str], package: str) -> None:
        self.path = path
        self.log = log
        self.real = real
        self.package = package

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        try:
            code = compile(self.path.read_bytes(), str(self.path), "exec")
            exec(code, module.__dict__)
        except Exception as exc:
            name = module.__name__
            self.log.fell_back[name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            self.log.modules.add(name)
            for attr in [a for a in module.__dict__ if not a.startswith("__")]:
                del module.__dict__[attr]
            module.__class__ = PlaceholderModule
            PlaceholderModule.__init__(module, name, self.log, self.real, self.package)  # type: ignore[arg-type]


class _ReleaseFinder(importlib.abc.MetaPathFinder):
    """Resolves the release's package (``vllm`` and ``vllm.*``, or a fork's) while one
    release is being loaded."""

    def __init__(
        self,
        files: Mapping[str, Path],
        log: PlaceholderLog,
        torch_placeholder: bool = False,
        package: str = VLLM,
        followed: Mapping[str, Path] | None = None,
    ) -> None:
        self.files = dict(files)
        self.followed = dict(followed or {})
        self.log = log
        self.real = frozenset(files) | frozenset(self.followed)
        self.placeholders = _PlaceholderLoader(log, self.real, package)
        self.torch_placeholder = torch_placeholder
        self.package = package

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in FORBIDDEN:
            if self.torch_placeholder:
                return importlib.machinery.ModuleSpec(fullname, self.placeholders, is_package=True)
            raise IsolationError(
                f"a vLLM block-pool file imports {fullname}; the suite never imports it"
            )
        if not in_package(fullname, self.package):
            return None
        file = self.files.get(fullname)
        if file is not None:
            return importlib.util.spec_from_file_location(fullname, file)
        followed = self.followed.get(fullname)
        if followed is not None:
            loader = _FollowedLoader(followed, self.log, self.real, self.package)
            return importlib.util.spec_from_file_location(fullname, followed, loader=loader)
        return importlib.machinery.ModuleSpec(fullname, self.placeholders, is_package=True)


@dataclass(frozen=True)
class Release:
    """One vLLM release's block-pool modules, loaded in isolation."""

    version: str
    root: Path
    #: Module name -> module, real and placeholder alike, as the release's files saw them,
    #: keyed by vLLM's names (``vllm.v1.core.block_pool`` for a fork's too).
    modules: Mapping[str, ModuleType]
    #: Names (vLLM's) of the modules loaded from the release's files.
    real: frozenset[str]
    placeholders: PlaceholderLog
    seconds: float
    #: The top-level package the files live in and import (``vllm``, ``aphrodite``).
    package: str = VLLM

    @property
    def block_pool(self) -> ModuleType:
        return self.modules["vllm.v1.core.block_pool"]

    @property
    def kv_cache_utils(self) -> ModuleType:
        return self.modules["vllm.v1.core.kv_cache_utils"]

    @property
    def kv_events(self) -> ModuleType:
        return self.modules["vllm.distributed.kv_events"]

    @property
    def BlockPool(self) -> type:
        pool: type = self.block_pool.BlockPool
        return pool

    @property
    def has_manager(self) -> bool:
        """Whether the KV cache manager's files were loaded too (``manager=True``)."""
        return "vllm.v1.core.kv_cache_manager" in self.real

    def placeholder_modules(self) -> list[str]:
        return sorted(name for name, m in self.modules.items() if isinstance(m, PlaceholderModule))


def loading_check(modules: Mapping[str, ModuleType]) -> Callable[[], None] | None:
    """What raises again a placeholder's first use after loading, for the release whose
    ``modules`` these are (``None``: not loaded in isolation). The adapters call it when
    they read the pool, so a use the release's own code caught still stops the run."""
    for module in modules.values():
        if isinstance(module, PlaceholderModule):
            log: PlaceholderLog = module._kvpool_log
            return log.raise_if_used
    return None


def load_release(
    root: Path,
    version: str,
    extra: dict[str, str] | None = None,
    manager: bool = False,
    package: str = VLLM,
) -> Release:
    """Load the block-pool modules of the release under ``root`` (which holds ``vllm/``, or
    a fork's ``package/``), the ``extra`` modules (module -> path) found there, and with
    ``manager`` its KV cache manager's too (``torch`` then a placeholder).

    Raises :class:`~.releases.ReleaseError` if ``root`` lacks a required file and
    :class:`IsolationError` if a file fails to run (naming the file and the error).
    """
    files = files_in_tree(root, package, extra, manager)
    followed = followed_in_tree(root, files, package)
    log = PlaceholderLog(version=version)
    finder = _ReleaseFinder(
        files, log, torch_placeholder=manager, package=package, followed=followed
    )
    start = time.perf_counter()
    pool = own_name("vllm.v1.core.block_pool", package)
    try:
        # the pool first, then the optional files it did not import itself
        loaded = import_isolated(finder, lambda n: _is_owned(n, package), [pool, *files])
    except (ReleaseError, IsolationError):
        raise
    except Exception as exc:
        where = _failing_file(exc, files, package)
        raise IsolationError(
            f"vLLM {version}: loading {where} failed: {type(exc).__name__}: {exc}"
        ) from exc
    log.loading = False
    log.files = {
        str(path): str(path.relative_to(root)) for path in [*files.values(), *followed.values()]
    }
    return Release(
        version=version,
        root=root,
        modules={_role(name, package): m for name, m in loaded.items()},
        real=frozenset(role_of(name, package) for name in files),
        placeholders=log,
        seconds=time.perf_counter() - start,
        package=package,
    )


def not_followed(package: str) -> list[str]:
    """The modules never followed (:mod:`.followed`): those the suite stands in for, and
    the files of the manager and the publisher it names itself, loaded only when asked for
    (their helpers, ``math_utils`` say, are followed like any other)."""
    named = [*SPECIAL, *MANAGER_REQUIRED, *PUBLISHER_MODULES]
    return [own_name(role, package) for role in named]


def followed_in_tree(root: Path, files: Mapping[str, Path], package: str) -> dict[str, Path]:
    """The modules followed from ``files`` (:mod:`.followed`) that ``root`` holds, by their
    own names: loaded from the release when imported."""

    def read(paths: frozenset[str]) -> dict[str, bytes]:
        return {p: (root / p).read_bytes() for p in paths if (root / p).is_file()}

    roots = [(name, path.read_bytes()) for name, path in files.items()]
    skip = not_followed(package)
    found = followed_modules(read, roots, package, skip)
    return {name: root / path for name, path in found.items()}


def _role(name: str, package: str) -> str:
    return role_of(name, package) if in_package(name, package) else name


def _is_owned(name: str, package: str) -> bool:
    """A module name the loading owns: the package's, and ``torch*`` (only ever a
    placeholder here, and hidden from the loaded files if the process has imported the
    real one)."""
    return any(in_package(name, top) for top in (package, *FORBIDDEN))


def _failing_file(exc: BaseException, files: Mapping[str, Path], package: str) -> str:
    """The release file nearest to where ``exc`` was raised (its path inside the release)."""
    every = {**MODULES, **MANAGER_MODULES}
    paths = {
        str(p): own_path(every.get(role_of(name, package), name), package)
        for name, p in files.items()
    }
    tb = exc.__traceback__
    where = "the block pool"
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name in paths:
            where = f"{paths[name]} line {tb.tb_lineno}"
        tb = tb.tb_next
    return where
