"""The SGLang adapter runs the release's own ``RadixCache.cache_unfinished_req`` and
``cache_finished_req``: a one-line fault planted in either, in a copy of the release's
files loaded as ``sglang@PATH``, is caught by the rule the fault breaks. (Had the adapter
restated those functions, as it once did, the planted line would never run.)

Needs torch and numpy (``pip install -e '.[sglang]'``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

for _module in ("torch", "numpy"):
    pytest.importorskip(
        _module, reason=f"SGLang's allocator needs {_module}: pip install -e '.[sglang]'"
    )

from engine_managers import first_difference, loaded  # noqa: E402  (this folder is on sys.path)
from kvpool.conformance.machines.requests.target import RequestSetup  # noqa: E402
from kvpool.conformance.targets.loading import load_manager  # noqa: E402
from kvpool.spec import PoolConfig  # noqa: E402
from kvpool.spec.manager import Admit, Compute, Finish, ManagerConfig  # noqa: E402

SETUP = RequestSetup(ManagerConfig(1), PoolConfig(9, True, 1))
RADIX = Path("sglang") / "srt" / "mem_cache" / "radix_cache.py"


def _planted(tmp_path: Path, function: str, line: str, replacement: str) -> object:
    """The release's files with ``line`` of ``function`` replaced, loaded from a copy."""
    release = loaded("sglang==0.4.6.post5").release
    tree = tmp_path / "sglang-planted"
    shutil.copytree(release.origin, tree)
    path = tree / RADIX
    source = path.read_text(encoding="utf-8")
    start = source.index(f"    def {function}(")
    end = source.index("\n    def ", start + 1)
    body = source[start:end]
    assert body.count(line) == 1, (function, line)
    path.write_text(source[:start] + body.replace(line, replacement) + source[end:], "utf-8")
    factory, _ = load_manager(f"sglang@{tree}", "impl")
    return factory


SERVED = (Admit("a", (1, 2, 3), None), Compute("a"), Finish("a"))
#: Two requests of one prompt computed side by side: the second's prefill finds the
#: first's tokens in the tree, and cache_unfinished_req must free its duplicate slots.
TWINS = (Admit("a", (1, 2, 3), None), Admit("b", (1, 2, 3), None), Compute("a"), Compute("b"))


def test_the_unplanted_release_passes_both_sequences() -> None:
    factory = loaded("sglang==0.4.6.post5")
    assert first_difference(factory, SETUP, *SERVED) is None
    assert first_difference(factory, SETUP, *TWINS, Finish("a"), Finish("b")) is None


def test_a_lock_kept_by_cache_finished_req_is_caught(tmp_path: Path) -> None:
    factory = _planted(tmp_path, "cache_finished_req", "self.dec_lock_ref(req.last_node)", "pass")
    found = first_difference(factory, SETUP, *SERVED)
    assert found is not None and "property 'refcounts-match-tables' broken" in found, found


def test_a_duplicate_kept_by_cache_unfinished_req_is_caught(tmp_path: Path) -> None:
    factory = _planted(
        tmp_path,
        "cache_unfinished_req",
        "kv_indices[len(req.prefix_indices) : new_prefix_len]",
        "kv_indices[new_prefix_len:new_prefix_len]",
    )
    found = first_difference(factory, SETUP, *TWINS)
    assert found is not None and "invariant 'pages-accounted'" in found, found
