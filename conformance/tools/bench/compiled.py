"""The optional compiled build of our pool: ``kvpool.impl``'s pool modules compiled by mypyc.

mypyc compiles typed Python as it is written, so the compiled pool is the very source of
``kvpool.impl`` (the pure-Python pool stays the reference, and the one the tests, the
mutants and the mutmut score judge). The build copies ``impl/`` into a package of its own,
``kvpool_compiled``, compiles the pool's modules (:data:`COMPILED`) there, and deletes
their ``.py`` copies, so that an import can only load the compiled code; the other modules
(hashing, requests, events) stay interpreted. It lives under
``~/.cache/kvpool/compiled/<key>/``, the key a digest of the sources, the Python and the
mypy version: an unchanged tree is built once.

    python -m kvpool.conformance.tools.bench.compiled        # build (if needed), print the path
    kvpool bench --compiled                            # time it beside ours and vLLM's
    PYTHONPATH=$(python -m kvpool.conformance.tools.bench.compiled) \\
        kvpool conform --target kvpool_compiled.block_pool:BlockPool

It needs mypy (``[test]`` has it) and a C compiler; without them :func:`build` raises
:class:`CompiledBuildUnavailable` with the reason.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import kvpool.impl

#: The package the compiled copy is built as (its modules' names are baked into the build).
PACKAGE = "kvpool_compiled"
#: The modules of ``kvpool.impl`` compiled: the pool's. The others are copied as they are.
COMPILED = ("block", "block_pool", "free_queue", "hash_map")
#: Every module the pool's modules import, copied beside them.
COPIED = ("errors", "events", "hashing", "request")


class CompiledBuildUnavailable(RuntimeError):
    """The compiled build cannot be made here (no mypyc, no C compiler, or it failed)."""


def _impl_dir() -> Path:
    return Path(kvpool.impl.__file__).resolve().parent


def _sources() -> list[Path]:
    impl = _impl_dir()
    return [impl / f"{name}.py" for name in (*COMPILED, *COPIED)]


def _mypy_version() -> str:
    try:
        from mypy.version import __version__
    except ImportError:
        raise CompiledBuildUnavailable(
            "the compiled build needs mypyc: pip install mypy (the [test] extra has it)"
        ) from None
    return str(__version__)


def build_key() -> str:
    """A digest of what the build depends on: the sources, Python and mypy."""
    digest = hashlib.sha256()
    digest.update(sys.version.encode())
    digest.update(_mypy_version().encode())
    for path in _sources():
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get("KVPOOL_CACHE", Path.home() / ".cache" / "kvpool")) / "compiled"


def _suffix() -> str:
    return str(sysconfig.get_config_var("EXT_SUFFIX"))


def is_built(where: Path) -> bool:
    """Whether ``where`` holds a finished build (every compiled module, no source)."""
    package = where / PACKAGE
    return all(
        (package / f"{name}{_suffix()}").is_file() and not (package / f"{name}.py").exists()
        for name in COMPILED
    )


def build(where: Path | None = None, plant: tuple[str, str, str] | None = None) -> Path:
    """Build the compiled pool (once per :func:`build_key`); the directory to put on
    ``sys.path``. ``plant`` is ``(module, old, new)``: one text replacement made in the
    copy before compiling it (the tests plant a fault to show the build is what runs)."""
    if shutil.which(os.environ.get("CC", "cc")) is None and shutil.which("gcc") is None:
        raise CompiledBuildUnavailable("the compiled build needs a C compiler (cc or gcc)")
    if where is None:
        where = cache_root() / build_key()
    if is_built(where):
        return where
    staging = where.with_name(where.name + f".building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    package = staging / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        '"""kvpool.impl\'s pool, compiled by mypyc (kvpool.conformance.tools.bench.compiled)."""\n'
    )
    for path in _sources():
        text = path.read_text()
        if plant is not None and path.stem == plant[0]:
            if plant[1] not in text:
                raise ValueError(f"the planted text is not in {path.name}: {plant[1]!r}")
            text = text.replace(plant[1], plant[2], 1)
        (package / path.name).write_text(text)
    command = [
        sys.executable,
        "-m",
        "mypyc",
        *(f"{PACKAGE}/{name}.py" for name in COMPILED),
    ]
    _mypy_version()
    done = subprocess.run(command, cwd=staging, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-20:]
        shutil.rmtree(staging, ignore_errors=True)
        raise CompiledBuildUnavailable("mypyc failed:\n" + "\n".join(tail))
    for name in COMPILED:
        (package / f"{name}.py").unlink()  # only the compiled module can be imported
    shutil.rmtree(staging / "build", ignore_errors=True)
    if not is_built(staging):
        shutil.rmtree(staging, ignore_errors=True)
        raise CompiledBuildUnavailable(f"mypyc left no {PACKAGE} modules in {staging}")
    try:
        staging.rename(where)  # atomic: another process's finished build is kept as it is
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not is_built(where):
            raise CompiledBuildUnavailable(f"{where} exists but holds no finished build") from None
    return where


def load(where: Path | None = None) -> ModuleType:
    """``kvpool_compiled.block_pool`` from the build (made first if needed)."""
    where = build(where)
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    module = importlib.import_module(f"{PACKAGE}.block_pool")
    found = Path(str(module.__file__)).resolve()
    if found.parent != (where / PACKAGE).resolve() or not found.name.endswith(_suffix()):
        raise CompiledBuildUnavailable(f"{PACKAGE}.block_pool was loaded from {found}")
    return module


def main() -> None:
    try:
        print(build())
    except CompiledBuildUnavailable as exc:
        print(f"kvpool: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
