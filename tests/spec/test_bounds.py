"""The contracts and the search bounds stay apart: every limit that only keeps CrossHair's
search small is a ``search_...`` predicate of ``kvpool.spec.bounds``, called as a whole
``pre:`` line; no other ``pre:`` line caps a size with a number, and the transitions run
far beyond the bounds."""

from __future__ import annotations

import inspect
import re

from kvpool.spec import (
    FreeBlocks,
    GetNewBlocks,
    PoolConfig,
    bounds,
    flat,
    get_profile,
    initial_state,
    keys,
    run,
)
from kvpool.spec.manager import flat as manager_flat

#: An upper bound written as a number: ``x <= 64``, ``< 2**32`` excepted (a key's 4 bytes).
NUMERIC_CAP = re.compile(r"<=?\s*\d+(?!\s*\*\*)")


def pre_lines() -> list[tuple[str, str]]:
    out = []
    for module in (flat, keys, manager_flat):
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if function.__module__ != module.__name__:
                continue
            for line in inspect.cleandoc(function.__doc__ or "").splitlines():
                if line.strip().startswith("pre:"):
                    out.append((f"{module.__name__}.{name}", line.strip()[4:].strip()))
    return out


def test_no_contract_line_caps_a_size_with_a_number() -> None:
    lines = pre_lines()
    assert len(lines) > 40
    capped = [f"{where}: {line}" for where, line in lines if NUMERIC_CAP.search(line)]
    assert not capped
    bounds_used = {line for _, line in lines if line.startswith("search_")}
    assert len(bounds_used) >= 8
    for line in bounds_used:
        assert re.fullmatch(r"search_\w+\(.*\)", line), f"a bound shares its line: {line}"


def test_the_check_finds_a_bound_written_into_the_contract() -> None:
    assert NUMERIC_CAP.search("1 <= hash_block_size <= 8 and 1 <= block_size")
    assert NUMERIC_CAP.search("1 <= num_groups <= 3")
    assert not NUMERIC_CAP.search("0 <= group_id < 2**32")


def test_every_bound_is_a_search_predicate_with_its_limit_named() -> None:
    predicates = [n for n, f in inspect.getmembers(bounds, inspect.isfunction)]
    assert predicates and all(n.startswith("search_") for n in predicates)
    limits = [n for n in vars(bounds) if n.startswith("MAX_SEARCH_")]
    assert len(limits) >= 8


def test_the_spec_runs_far_beyond_the_search_bounds() -> None:
    size = bounds.MAX_SEARCH_BLOCKS * 100
    state = initial_state(PoolConfig(size), get_profile("seed"))
    taken = tuple(range(1, size))
    state = run(state, GetNewBlocks(size - 1), FreeBlocks(taken))
    assert len(state.free_queue) == size - 1
