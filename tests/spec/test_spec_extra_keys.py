"""The request attributes that partition the prefix cache, and the two properties on them."""

from __future__ import annotations

import pytest
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.manager import (
    ALL_ATTRIBUTES,
    ATTRIBUTES,
    NO_EXTRA,
    ExtraKeys,
    LoraAdapter,
    MultiModalFeature,
    Signature,
)
from kvpool.spec.manager.extra_keys import differing, partitioned_block_hashes
from kvpool.spec.manager.properties import PROPERTIES, keys_partitioned, keys_shared
from kvpool.spec.profile import PROFILES

TOKENS = (7, 1, 7, 2, 7, 3, 7, 4)
IMAGE = MultiModalFeature("img", 4, 2)
#: attribute -> a request's (salt, extra) differing from ``BASE`` in it alone.
BASE = ("s", ExtraKeys(LoraAdapter("sql", "/a"), (IMAGE,), TOKENS))
ONE_OFF = {
    "cache-salt": ("t", BASE[1]),
    "lora-name": ("s", ExtraKeys(LoraAdapter("chat", "/a"), (IMAGE,), TOKENS)),
    "lora-path": ("s", ExtraKeys(LoraAdapter("sql", "/b"), (IMAGE,), TOKENS)),
    "mm-identifier": ("s", ExtraKeys(BASE[1].lora, (MultiModalFeature("pic", 4, 2),), TOKENS)),
    "mm-offset": ("s", ExtraKeys(BASE[1].lora, (MultiModalFeature("img", 5, 2),), TOKENS)),
    "prompt-embeds": ("s", ExtraKeys(BASE[1].lora, (IMAGE,), (*TOKENS[:5], 0, *TOKENS[6:]))),
}


def test_every_attribute_has_a_case() -> None:
    assert set(ONE_OFF) == set(ATTRIBUTES) == ALL_ATTRIBUTES


@pytest.mark.parametrize("attribute", sorted(ATTRIBUTES))
def test_the_hashes_part_exactly_where_the_partitions_name_the_attribute(attribute: str) -> None:
    salt, extra = ONE_OFF[attribute]
    for partitions in (ALL_ATTRIBUTES, ALL_ATTRIBUTES - {attribute}):
        a = partitioned_block_hashes(TOKENS, 4, BASE[0], BASE[1], partitions)
        b = partitioned_block_hashes(TOKENS, 4, salt, extra, partitions)
        assert (a != b) == (attribute in partitions), partitions
    # the block before the one an image or embedding differs in is still shared
    if attribute in ("mm-identifier", "mm-offset", "prompt-embeds"):
        a = partitioned_block_hashes(TOKENS, 4, BASE[0], BASE[1], ALL_ATTRIBUTES)
        b = partitioned_block_hashes(TOKENS, 4, salt, extra, ALL_ATTRIBUTES)
        assert a[0] == b[0] and a[1] != b[1]


@pytest.mark.parametrize("attribute", sorted(ATTRIBUTES))
def test_differing_names_the_one_attribute_from_where_it_differs(attribute: str) -> None:
    salt, extra = ONE_OFF[attribute]
    base, other = Signature(TOKENS, *BASE), Signature(TOKENS, salt, extra)
    assert differing(base, other, 8, 4) == {attribute}
    late = attribute in ("mm-identifier", "mm-offset", "prompt-embeds")
    assert differing(base, other, 4, 4) == (set() if late else {attribute})


def test_an_image_moved_across_a_block_boundary_changes_the_blocks_it_is_in() -> None:
    moved = Signature(TOKENS, "s", ExtraKeys(BASE[1].lora, (MultiModalFeature("img", 5, 2),)))
    here = Signature(TOKENS, "s", ExtraKeys(BASE[1].lora, (IMAGE,)))
    assert differing(here, moved, 8, 2) == {"mm-identifier", "mm-offset"}


def test_a_salt_alone_hashes_as_it_always_did() -> None:
    for salt in (None, "tenant-b"):
        old = request_block_hashes(TOKENS, 2, None if salt is None else (salt,))
        assert partitioned_block_hashes(TOKENS, 2, salt, NO_EXTRA, ALL_ATTRIBUTES) == old


def test_features_must_be_sorted_and_disjoint() -> None:
    with pytest.raises(ValueError, match="disjoint"):
        ExtraKeys(mm=(MultiModalFeature("a", 0, 3), MultiModalFeature("b", 2, 1)))
    with pytest.raises(ValueError, match="offset"):
        MultiModalFeature("a", -1, 2)


def test_every_profile_partitions_by_known_attributes_and_the_seed_by_all() -> None:
    assert PROFILES["seed"].key_attributes == ALL_ATTRIBUTES
    for profile in PROFILES.values():
        assert profile.key_attributes <= ALL_ATTRIBUTES, profile.name
        assert "cache-salt" in profile.key_attributes


def test_both_properties_are_named() -> None:
    assert {"keys-partitioned", "keys-shared"} <= set(PROPERTIES)


def test_keys_partitioned_flags_a_hit_written_under_another_partitioning_attribute() -> None:
    reader = Signature(TOKENS, "s", BASE[1])
    same = Signature((*TOKENS, 9), "s", BASE[1])  # a longer request, same prefix
    other = Signature(TOKENS, "t", BASE[1])
    tables = ((3, 4, 5),)
    writers = {3: same, 4: same, 5: other}
    broken = keys_partitioned("r", tables, 6, reader, writers.get, 2, 2, ALL_ATTRIBUTES)
    assert [(b.property, b.block) for b in broken] == [("keys-partitioned", 5)]
    assert "cache-salt" in broken[0].detail
    # the same hit is allowed where the profile does not partition by the salt
    assert not keys_partitioned(
        "r", tables, 6, reader, writers.get, 2, 2, ALL_ATTRIBUTES - {"cache-salt"}
    )
    # a block beyond what was read, or written by nobody known, is not judged
    assert not keys_partitioned("r", tables, 4, reader, writers.get, 2, 2, ALL_ATTRIBUTES)
    assert not keys_partitioned("r", tables, 6, reader, {}.get, 2, 2, ALL_ATTRIBUTES)


def test_keys_shared_wants_the_cached_prefix_short_of_the_last_token() -> None:
    assert keys_shared("r", 4, cached_blocks=2, num_tokens=8, block_size=2) == []
    assert keys_shared("r", 6, cached_blocks=4, num_tokens=8, block_size=2) == []
    (broken,) = keys_shared("r", 2, cached_blocks=2, num_tokens=8, block_size=2)
    assert broken.property == "keys-shared" and "4 tokens" in broken.detail
