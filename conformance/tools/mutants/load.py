"""Building a mutant: the patched impl source compiled into a fresh module, so the real
``kvpool.impl`` is never touched and any number of mutants live side by side."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from .corpus import Mutant


class MutantError(Exception):
    """A mutant's patch no longer applies to the impl source (the source moved on)."""


def impl_dir() -> Path:
    import kvpool.impl

    return Path(kvpool.impl.__file__).parent


def mutated_source(mutant: Mutant) -> str:
    """The impl file with the mutant's snippet replaced; the snippet must occur once."""
    text = (impl_dir() / mutant.file).read_text(encoding="utf-8")
    count = text.count(mutant.old)
    if count != 1:
        raise MutantError(
            f"mutant {mutant.name!r}: its snippet occurs {count} times in impl/{mutant.file}"
        )
    return text.replace(mutant.old, mutant.new)


def _module(name: str, file: str, source: str) -> ModuleType:
    module = ModuleType(name)
    module.__file__ = str(impl_dir() / file)
    module.__package__ = "kvpool.impl"  # relative imports reach the real impl modules
    sys.modules[name] = module
    exec(compile(source, f"<mutant {name}: impl/{file}>", "exec"), module.__dict__)
    return module


def mutant_pool_class(mutant: Mutant) -> Any:
    """The ``BlockPool`` class with the mutant's bug."""
    tag = mutant.name.replace("-", "_")
    source = mutated_source(mutant)
    if mutant.file == "block_pool.py":
        return _module(f"kvpool.impl._mutant_{tag}", mutant.file, source).BlockPool
    patched = _module(f"kvpool.impl._mutant_{tag}_{mutant.file[:-3]}", mutant.file, source)
    real = (impl_dir() / "block_pool.py").read_text(encoding="utf-8")
    pool = _module(f"kvpool.impl._mutant_{tag}", "block_pool.py", real)
    for name, value in vars(patched).items():
        if not name.startswith("_") and isinstance(value, type) and name in vars(pool):
            setattr(pool, name, value)  # the pool builds its parts from the patched classes
    return pool.BlockPool
