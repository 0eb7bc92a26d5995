"""What the suite infers from a vLLM-API pool's names, said out loud, and switched off on
the pool's word.

A pool with vLLM's ``BlockPool`` API declares nothing: the adapter reads its signatures
and its objects' attributes, and each thing it finds switches a part of the check on (a
``ref_cnt`` on its blocks: their counts are compared; an ``evict_first`` parameter: frees
are drawn with it). A name can mean something else in someone else's pool, so every
inference is a :class:`Feature` with where it was found, printed in the run's header, and
a pool can declare any of them off with an attribute of its factory (the class, when the
factory is the pool class):

.. code-block:: python

    def make_pool(**kwargs):
        return MyPool(**kwargs)

    make_pool.kvpool_features_off = {"foreign_pool"}

A feature declared off is not checked: its arguments are never drawn, its fields never
compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

#: The factory attribute naming the features a pool declares off.
OFF_ATTRIBUTE = "kvpool_features_off"

#: Every feature the adapter may infer, and what it switches on.
FEATURES: Mapping[str, str] = MappingProxyType(
    {
        "evict_first": "frees drawn with evict_first=True (or vLLM 0.23's prepend)",
        "block_mask": "cache_full_blocks drawn with a block_mask",
        "replace_existing_hashes": "cache_partial_block drawn with replace_existing_hashes",
        "foreign_pool": "a second pool built beside it, and its blocks freed through this one",
        "free_queue": "the free queue's order compared after every step",
        "ref_cnt": "every block's reference count compared",
        "block_hash": "every block's key compared",
        "index": "the prefix-cache index compared (read whole, or probed by lookups)",
        "linked_free_list": "the free list's links checked (structure problems)",
    }
)


@dataclass(frozen=True)
class Feature:
    """One thing inferred from the pool's names: what, and where it was found."""

    name: str
    where: str


class FeatureDeclarationError(ValueError):
    """A factory's ``kvpool_features_off`` that is not a set of known feature names."""


def declared_off(factory: object) -> frozenset[str]:
    """The features ``factory`` declares off (:data:`OFF_ATTRIBUTE`), each one of
    :data:`FEATURES`; :class:`FeatureDeclarationError` naming the known ones otherwise."""
    value = getattr(factory, OFF_ATTRIBUTE, None)
    if value is None:
        return frozenset()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise FeatureDeclarationError(
            f"{OFF_ATTRIBUTE} is a set of feature names, e.g. {{'foreign_pool'}}"
        )
    names = list(value)
    unknown = sorted(str(n) for n in names if n not in FEATURES)
    if unknown:
        raise FeatureDeclarationError(
            f"{OFF_ATTRIBUTE} names unknown feature(s) {', '.join(unknown)}; known: "
            f"{', '.join(FEATURES)}"
        )
    return frozenset(names)


def header_lines(
    features: Iterable[Feature], off: Iterable[str], notes: Iterable[str] = ()
) -> list[str]:
    """The run header's lines: each feature found and where, those declared off, and
    what was seen but not taken as a feature (``notes``)."""
    found = list(features)
    lines = ["inferred from the pool's names (declare any off: see the extension API page):"]
    lines += [f"  {f.name}: {f.where}" for f in found]
    if not found:
        lines.append("  nothing beyond the methods it has")
    declared = sorted(off)
    if declared:
        lines.append(f"  declared off ({OFF_ATTRIBUTE}): {', '.join(declared)}")
    lines += [f"  not inferred: {note}" for note in notes]
    return lines


def summary_lines(
    features: Iterable[Feature], off: Iterable[str], notes: Iterable[str] = ()
) -> list[str]:
    """:func:`header_lines` in short, for kvpool's own pools, whose names hold no
    surprise: the features found on one line (where each was found: ``--plan``), then those
    declared off and the notes, as in full."""
    names = ", ".join(f.name for f in features) or "nothing beyond the methods it has"
    lines = [f"inferred from the pool's names (where each was found: --plan): {names}"]
    declared = sorted(off)
    if declared:
        lines.append(f"  declared off ({OFF_ATTRIBUTE}): {', '.join(declared)}")
    lines += [f"  not inferred: {note}" for note in notes]
    return lines


#: The engines whose pools are kvpool's own: their names hold no surprise, so the header
#: says in one line what was inferred (``--plan`` says where).
OWN_POOLS = frozenset({"impl", "spec"})


def inferred_lines(target: object, *, engine: str = "", in_full: bool = False) -> list[str]:
    """The header lines of a target that infers its features from a pool's names (one
    with ``header_lines``, the vLLM-API adapter); none for a target that declares them.
    For kvpool's own pools (``engine`` in :data:`OWN_POOLS`) and not ``in_full``, the
    adapter's ``summary_lines``; for every other pool each feature and where it was found."""
    short = engine in OWN_POOLS and not in_full
    lines = getattr(target, "summary_lines" if short else "header_lines", None)
    if not callable(lines):
        lines = getattr(target, "header_lines", None)
    return list(lines()) if callable(lines) else []
