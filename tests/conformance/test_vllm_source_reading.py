"""What the loader reads off a release's source before running it: the request fields on
the calls the adapter makes (:mod:`...vllm.request_reads`), and the modules the pool's
files import that load on a CPU (:mod:`...vllm.followed`). Synthetic sources: each reader
is shown telling the cases apart."""

from __future__ import annotations

from pathlib import Path

from kvpool.conformance.engines.vllm.followed import followed_modules, imported, imports_heavy
from kvpool.conformance.engines.vllm.request_reads import request_reads

POOL = """
from vllm.v1.core.helpers import hash_extra

class BlockPool:
    def cache_full_blocks(self, request, blocks, n, m, size, group):
        tokens = request.all_token_ids
        self._event(request, size)
        salt = getattr(request, "cache_salt", None)
        return hash_extra(req=request)

    def _event(self, req, size):
        return req.lora_request

    def unrelated(self, request):
        return request.never_reached
"""

HELPERS = """
def hash_extra(req):
    return req.mm_features

def frontend_block_hashes(request):
    return request.prompt_token_ids
"""


def test_only_the_fields_read_on_the_adapters_calls_are_asked_for(tmp_path: Path) -> None:
    (tmp_path / "pool.py").write_text(POOL)
    (tmp_path / "helpers.py").write_text(HELPERS)
    reads = request_reads(
        {"vllm.pool": tmp_path / "pool.py", "vllm.helpers": tmp_path / "helpers.py"}
    )
    assert reads.fields == {"all_token_ids", "lora_request", "mm_features"}
    assert reads.required["lora_request"] == "pool.BlockPool._event"
    assert reads.required["mm_features"] == "helpers.hash_extra"  # passed by keyword
    assert reads.optional == {"cache_salt": "pool.BlockPool.cache_full_blocks"}
    # neither a method the adapter never calls nor a function the pool never reaches
    assert "never_reached" not in reads.required and "prompt_token_ids" not in reads.required


def test_the_imports_followed_skip_type_checking_and_name_submodules() -> None:
    source = b"""
from typing import TYPE_CHECKING
from vllm import envs
from vllm.utils.gc_utils import gc_untrack
from . import sibling
if TYPE_CHECKING:
    from vllm.v1.request import Request
def f():
    import vllm.late.module
"""
    found = imported(source, "vllm.v1.core.block_pool", "vllm")
    assert {"vllm.envs", "vllm.utils.gc_utils", "vllm.v1.core.sibling", "vllm.late.module"} <= found
    assert not any(name.startswith("vllm.v1.request") for name in found)


def test_a_module_importing_torch_at_its_top_is_not_followed() -> None:
    assert imports_heavy(b"import torch\n")
    assert imports_heavy(b"from triton import jit\n")
    assert not imports_heavy(b"def f():\n    import torch\n")
    files = {
        "vllm/utils/light.py": b"from vllm.utils.deeper import x\n",
        "vllm/utils/deeper.py": b"x = 1\n",
        "vllm/utils/heavy.py": b"import torch\nfrom vllm.utils.behind import y\n",
        "vllm/utils/behind.py": b"y = 2\n",
    }

    def read(paths: frozenset[str]) -> dict[str, bytes]:
        return {p: files[p] for p in paths if p in files}

    roots = [("vllm.pool", b"from vllm.utils import light, heavy, stood_in\n")]
    found = followed_modules(read, roots, "vllm", skip=["vllm.utils.stood_in"])
    assert found == {
        "vllm.utils.light": "vllm/utils/light.py",
        "vllm.utils.deeper": "vllm/utils/deeper.py",
    }
