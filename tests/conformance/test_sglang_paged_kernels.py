"""The SGLang adapter's paged allocation against the release's own triton kernels.

With pages, SGLang allocates a prefill's and a decode step's slots with two triton kernels
(``alloc_extend_kernel``, ``alloc_decode_kernel`` in ``paged_allocator.py``) that need a
GPU; the adapter makes their one-request result from the allocator's ``alloc`` instead
(see :mod:`kvpool.conformance.engines.sglang.manager`). Here the real kernels run in
triton's interpreter (``TRITON_INTERPRET=1``, on the CPU) on the same free list, for
every prefix length and growth over three pages, and must hand out the same slots and
leave the same free list.

Needs torch, numpy and triton (the triton wheel is large and only this check uses it:
``pip install triton``); without triton the test is skipped and says so.
"""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

for _module in ("torch", "numpy"):
    pytest.importorskip(
        _module, reason=f"SGLang's allocator needs {_module}: pip install -e '.[sglang]'"
    )
if importlib.util.find_spec("triton") is None:
    pytest.skip(
        "the paged kernels run only in triton's interpreter: pip install triton",
        allow_module_level=True,
    )

from engine_managers import loaded  # noqa: E402  (this folder is on sys.path)
from kvpool.conformance.engines.sglang.manager import SglangManagerTarget  # noqa: E402
from kvpool.conformance.machines.requests.target import RequestSetup  # noqa: E402
from kvpool.spec import SEED, PoolConfig  # noqa: E402
from kvpool.spec.manager import ManagerConfig  # noqa: E402

PAGES = 40
KERNELS = Path(__file__).with_name("sglang_kernels.py")


@pytest.mark.parametrize("page", [2, 4])
def test_the_adapter_allocates_what_the_kernels_allocate(page: int) -> None:
    factory = loaded(f"sglang,page={page}")
    setup = RequestSetup(ManagerConfig(page), PoolConfig(PAGES + 1, True, page))
    free = random.Random(page).sample(range(1, PAGES + 1), PAGES)
    cases, ours = [], []
    for before in range(2 * page + 1):
        for n in range(1, page + 2):
            adapter: SglangManagerTarget = factory(setup, SEED)
            adapter.allocator.free_pages = adapter._tensor(free)
            slots = adapter._grow([], before, decode=False) or []
            start = adapter._free_pages()
            got = adapter._grow(slots, n, decode=n == 1 and before > 0)
            cases.append([start, before, n, slots[-1] if slots else -1])
            ours.append([got, adapter._free_pages()])
    argv = [sys.executable, str(KERNELS), str(factory.release.origin), str(page)]
    done = subprocess.run([*argv, json.dumps(cases)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout)
    for case, mine, kernel in zip(cases, ours, theirs, strict=True):
        assert mine == kernel, case[1:]
    assert len(theirs) == (2 * page + 1) * (page + 1)


def test_a_page_size_that_is_no_power_of_two_cannot_run_the_kernels() -> None:
    """Why ``page=N`` takes powers of two only: the kernels' ``tl.arange(0, page_size)``
    needs one, so SGLang cannot allocate pages of 3 tokens."""
    factory = loaded("sglang,page=2")
    argv = [sys.executable, str(KERNELS), str(factory.release.origin), "3"]
    done = subprocess.run(
        [*argv, json.dumps([[[1, 2, 3], 0, 2, -1]])], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0 and "power of 2" in done.stderr, done.stderr[-2000:]
