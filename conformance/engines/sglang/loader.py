"""What the loaders of both SGLang generations (:mod:`.release`, :mod:`.release_0_5`)
share: the error they raise, the check for the ``sglang`` extra, the files of a release
from the cache, the isolated load of a tree's files, the stand-ins both need and the
version a tree says it is."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from ...install import extra_hint
from ...targets.isolated_files import IsolatedLoadError, load_isolated
from ...targets.releases.files import ReleaseFiles, ReleaseFilesError, cached_files

INSTALL_LINE = extra_hint("sglang")


class SglangUnavailable(Exception):
    """The radix cache cannot be loaded; the message says what to install or fix."""


class Placeholder:
    """A name a loaded file imports (annotations, base classes) but nothing that runs here
    builds."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("a stand-in of kvpool's SGLang loader was called")


class MemorySaver:
    """Stand-in for ``TorchMemorySaverAdapter`` as ``ReqToTokenPool`` uses it, disabled:
    ``create(enable=False)`` and a ``region(...)`` that changes nothing."""

    @classmethod
    def create(cls, enable: bool) -> MemorySaver:
        if enable:
            raise RuntimeError("kvpool's SGLang loader has no torch memory saver")
        return cls()

    @contextmanager
    def region(self, *_: object) -> Iterator[None]:
        yield


def unchanged(fn: Callable[..., Any] | None = None, **_: object) -> Any:
    """A decorator that leaves the function as it is (``triton.jit``, ``debug_timing``)."""
    if fn is None:
        return unchanged
    return fn


def next_power_of_2(n: int) -> int:
    """SGLang's ``utils.next_power_of_2``: the smallest power of two not below ``n``."""
    return 1 << max(0, int(n) - 1).bit_length()


def env_flag_off(name: str, default: str = "false") -> bool:
    """SGLang's ``utils.get_bool_env_var`` with every flag at its default: off."""
    return False


def triton_stand_ins() -> dict[str, dict[str, object]]:
    """Triton as the loaded files import it: decorators that leave the kernels as they are
    (never launched: they need a GPU) and the two helpers read at import."""
    return {
        "triton": {"jit": unchanged, "cdiv": lambda a, b: -(-a // b)},
        "triton.language": {"constexpr": int},
    }


def module_name(rel: str) -> str:
    """``srt/mem_cache/radix_cache.py`` -> ``sglang.srt.mem_cache.radix_cache`` (a
    package's ``__init__.py`` -> the package)."""
    name = f"sglang.{rel.removesuffix('.py').replace('/', '.')}"
    return name.removesuffix(".__init__")


def require_files(root: Path, paths: Iterable[Path], layout: str = "") -> None:
    """:class:`SglangUnavailable` naming those of ``paths`` that are not files under
    ``root`` (``layout``: which generation's tree was expected)."""
    absent = [str(p) for p in paths if not p.is_file()]
    if absent:
        raise SglangUnavailable(
            f"{root} lacks {', '.join(absent)}: not an SGLang checkout's python/ folder or "
            f"an unpacked sglang wheel{layout}"
        )


def load_files(
    label: str,
    files: Mapping[str, Path],
    stand_ins: Mapping[str, Mapping[str, object]],
    outside: Mapping[str, Mapping[str, object]],
) -> dict[str, ModuleType]:
    """``files`` (module name -> path) loaded alone, torch allowed (the allocators keep
    their free lists in torch tensors); :class:`SglangUnavailable` if they cannot be."""
    try:
        return load_isolated(
            "sglang", files, stand_ins, outside=outside, allow=frozenset({"torch"})
        )
    except IsolatedLoadError as exc:
        raise SglangUnavailable(f"{label}: {exc}") from exc


def cached_root(files: ReleaseFiles, version: str) -> Path:
    """The folder holding ``sglang==version``'s ``files``, from the cache or downloaded
    into it once."""
    try:
        return cached_files(files, version)
    except ReleaseFilesError as exc:
        raise SglangUnavailable(str(exc)) from exc


def require_extra(modules: Iterable[str], why: str) -> None:
    """:class:`SglangUnavailable` naming the install line when any of ``modules`` is
    absent (``why``: what of SGLang needs them)."""
    missing = [m for m in modules if not importable(m)]
    if missing:
        raise SglangUnavailable(f"{why}; {' and '.join(missing)} not installed: {INSTALL_LINE}")


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # a module set to None in sys.modules
        return False


#: ``__version__ = '0.4.6.post5'``, or a built wheel's ``__version__ = version = '0.5.23'``.
VERSION = re.compile(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)")


def version_from(root: Path, names: Iterable[str]) -> str:
    """What a tree says it is: the version in the first of ``names`` (files of
    ``sglang/``) that holds one."""
    for name in names:
        path = root / "sglang" / name
        if path.is_file():
            found = VERSION.search(path.read_text("utf-8", errors="replace"))
            if found:
                return f"sglang {found.group(1)} at {root}"
    return f"sglang at {root}"
