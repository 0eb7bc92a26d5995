"""Runs SGLang's paged allocation kernels in triton's interpreter and prints what they
hand out (a child process of ``test_sglang_paged_kernels``: ``TRITON_INTERPRET`` must be
set before anything imports triton, and torch imports it early).

    python sglang_kernels.py ORIGIN PAGE CASES

``CASES`` is JSON: ``[free list, before, n, last slot]`` per case (a decode step when
``n == 1`` and ``before > 0``, else an extend). Prints a JSON list of ``[slots handed
out, free list after]``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from kvpool.conformance.targets.isolated_files import load_isolated

    origin, page = Path(sys.argv[1]), int(sys.argv[2])
    cases = json.loads(sys.argv[3])
    helpers = {
        "get_bool_env_var": lambda name, default="false": False,
        "next_power_of_2": lambda n: 1 << max(0, int(n) - 1).bit_length(),
    }
    modules = load_isolated(
        "sglang",
        {
            "sglang.srt.mem_cache.paged_allocator": origin
            / "sglang/srt/mem_cache/paged_allocator.py"
        },
        {"sglang.srt.mem_cache.memory_pool": {"KVCache": object}, "sglang.srt.utils": helpers},
        allow=frozenset({"torch"}),
    )
    allocator_class = modules["sglang.srt.mem_cache.paged_allocator"].PagedTokenToKVPoolAllocator
    results = []
    for free, before, n, last in cases:
        allocator = allocator_class(len(free) * page, page, torch.float16, "cpu", None)
        allocator.free_pages = torch.tensor(free, dtype=torch.int64)
        last_loc = torch.tensor([last])
        if n == 1 and before > 0:
            out = allocator.alloc_decode(torch.tensor([before + 1]), last_loc)
        else:
            prefix, total = torch.tensor([before]), torch.tensor([before + n])
            out = allocator.alloc_extend(prefix, total, last_loc, n)
        results.append([out.tolist(), allocator.free_pages.tolist()])
    print(json.dumps(results))


if __name__ == "__main__":
    main()
