"""``pool_calls.json``: the operation table's calls as plain data, for runners outside
kvpool.

The standalone runner (:mod:`.runner`, which imports nothing from kvpool) reads it to call
a pool, and a runner in another language can read the same file. It is generated from
:data:`~..engine.operations.POOL_OPERATIONS`; a test fails when the checked-in file is not
what the table gives. Regenerate with ``python -m kvpool.conformance.tools.vectors.call_table``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ...machines.pool.operations import POOL_OPERATIONS, PoolOperation
from ...machines.pool.pool_call import call_table

#: Where the runner reads it.
PATH = Path(__file__).with_name("pool_calls.json")


def rendered(operations: Iterable[PoolOperation] = POOL_OPERATIONS) -> str:
    """The file's text for ``operations``."""
    table = call_table({op.name: op.call for op in operations})
    return json.dumps(table, indent=1) + "\n"


if __name__ == "__main__":
    PATH.write_text(rendered(), encoding="utf-8")
