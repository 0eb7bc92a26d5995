"""A Z3 model shown as the pool's blocks and keys, not as raw arrays."""

from __future__ import annotations

from typing import Any

import z3  # type: ignore[import-untyped]

from .encoding import Expr, State, carries


def _value(model: Any, term: Expr) -> str:
    v = model.eval(term, model_completion=True)
    if z3.is_true(v):
        return "yes"
    if z3.is_false(v):
        return "no"
    return str(v)


def _block_line(model: Any, s: State, b: Expr, keys: list[Expr]) -> str:
    carried = sorted(
        {_value(model, k) for k in keys if z3.is_true(model.eval(carries(s, b, k), True))}
    )
    mapped = sorted({_value(model, k) for k in keys if z3.is_true(model.eval(s.mm(k, b), True))})
    primary = (
        f"primary key {_value(model, s.pkey(b))}"
        if z3.is_true(model.eval(s.hasp(b), True))
        else "no primary key"
    )
    return (
        f"block {_value(model, b)}: ref_cnt {_value(model, s.ref(b))}, "
        f"free {_value(model, s.free(b))}, {primary}, keys {carried or '-'}, "
        f"map has it under {mapped or '-'}"
    )


def render_model(
    model: Any,
    pre: State | None,
    post: State | None,
    blocks: list[Expr],
    keys: list[Expr],
    extra: dict[str, Expr],
) -> list[str]:
    """Lines describing a counterexample: N, then each shown block before and after."""
    lines: list[str] = []
    for s, when in ((pre, "before"), (post, "after")):
        if s is None:
            continue
        if when == "before" or pre is None:
            lines.append(f"N = {_value(model, s.n)}, caching {_value(model, s.caching)}")
        seen: set[str] = set()
        for b in blocks:
            name = _value(model, b)
            if name in seen:
                continue
            seen.add(name)
            lines.append(f"  {when}: " + _block_line(model, s, b, keys))
    for label, term in extra.items():
        lines.append(f"  {label} = {_value(model, term)}")
    return lines
