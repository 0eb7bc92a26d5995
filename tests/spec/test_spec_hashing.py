"""The spec's chained hash and canonical encoding, and byte-for-byte agreement with the impl."""

from __future__ import annotations

from collections.abc import Iterator

import kvpool.impl.hashing as impl
import pytest
from kvpool.spec import hashing as spec
from kvpool.spec.keys import (
    blocks_viewable,
    group_of,
    hash_at_block_size,
    hash_of,
    make_key,
)


@pytest.fixture(autouse=True)
def default_impl_none_hash() -> Iterator[None]:
    """The impl's NONE_HASH is module state another test may re-seed: pin it, then restore."""
    saved = impl.get_none_hash()
    impl.init_none_hash(impl.DEFAULT_NONE_HASH_SEED)
    yield
    impl.NONE_HASH = saved


# --- encode -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, b"N"),
        (True, b"T"),
        (False, b"F"),
        (0, b"I\x00\x00\x00\x010"),
        (12, b"I\x00\x00\x00\x0212"),
        (-3, b"I\x00\x00\x00\x02-3"),
        ("", b"S\x00\x00\x00\x00"),
        ("é", b"S\x00\x00\x00\x02\xc3\xa9"),
        (b"ab", b"B\x00\x00\x00\x02ab"),
        ((), b"L\x00\x00\x00\x00"),
        ((1, None), b"L\x00\x00\x00\x02I\x00\x00\x00\x011N"),
        ([b"", ("x",)], b"L\x00\x00\x00\x02B\x00\x00\x00\x00L\x00\x00\x00\x01S\x00\x00\x00\x01x"),
    ],
)
def test_encode_each_type(value: spec.HashInput, expected: bytes) -> None:
    assert spec.encode(value) == expected


def test_encode_keeps_types_apart() -> None:
    assert spec.encode(True) != spec.encode(1)
    assert spec.encode("1") != spec.encode(1) != spec.encode(b"1")
    assert spec.encode((1, 2)) == spec.encode([1, 2])
    assert spec.encode(((1,), 2)) != spec.encode((1, (2,)))


def test_encode_refuses_other_types() -> None:
    with pytest.raises(TypeError):
        spec.encode(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        spec.encode({1: 2})  # type: ignore[arg-type]


def test_sha256_hash_is_sha256_of_the_encoding() -> None:
    import hashlib

    assert spec.sha256_hash((1, "a")) == hashlib.sha256(spec.encode((1, "a"))).digest()
    assert len(spec.sha256_hash(None)) == 32


# --- request_block_hashes -----------------------------------------------------------------


def test_request_block_hashes_chain_over_the_prefix() -> None:
    tokens = list(range(10))
    hashes = spec.request_block_hashes(tokens, 4)
    assert len(hashes) == 2  # the partial tail of 2 tokens has no hash
    assert hashes[0] == spec.hash_block_tokens(None, tokens[0:4])
    assert hashes[1] == spec.hash_block_tokens(hashes[0], tokens[4:8])
    assert hashes[0] == spec.sha256_hash((spec.none_hash(), tuple(tokens[0:4]), None))


def test_shared_prefix_gives_equal_leading_hashes_only() -> None:
    a = spec.request_block_hashes([1, 2, 3, 4, 5, 6, 7, 8], 2)
    b = spec.request_block_hashes([1, 2, 3, 4, 5, 0, 7, 8], 2)
    assert a[:2] == b[:2]
    assert a[2] != b[2]
    assert a[3] != b[3]  # equal tokens, different parent


@pytest.mark.parametrize(
    ("extra_keys", "seed"),
    [
        (("salt-a",), spec.DEFAULT_NONE_HASH_SEED),
        (("lora", 3), spec.DEFAULT_NONE_HASH_SEED),
        (None, "other-seed"),
    ],
)
def test_salt_extra_keys_or_seed_change_every_hash(
    extra_keys: tuple[spec.HashInput, ...] | None, seed: str
) -> None:
    tokens = [5, 6, 7, 8]
    plain = spec.request_block_hashes(tokens, 2)
    other = spec.request_block_hashes(tokens, 2, extra_keys, seed)
    assert len(other) == len(plain) == 2
    assert all(x != y for x, y in zip(plain, other, strict=True))


def test_different_salts_differ() -> None:
    tokens = [5, 6, 7, 8]
    assert spec.request_block_hashes(tokens, 2, ("a",)) != spec.request_block_hashes(
        tokens, 2, ("b",)
    )


def test_fine_hashes_viewed_at_a_coarser_block_size() -> None:
    tokens = list(range(12))
    fine = spec.request_block_hashes(tokens, 2)
    assert hash_at_block_size(fine, 2, 4, 0) == fine[1]
    assert hash_at_block_size(fine, 2, 4, 2) == fine[5]
    assert hash_at_block_size(fine, 2, 2, 3) == fine[3]
    assert blocks_viewable(len(fine), 2, 4) == 3
    assert blocks_viewable(len(fine), 2, 8) == 1


def test_key_is_hash_followed_by_four_byte_big_endian_group() -> None:
    h = spec.sha256_hash("x")
    key = make_key(h, 258)
    assert key == h + b"\x00\x00\x01\x02"
    assert hash_of(key) == h
    assert group_of(key) == 258


# --- agreement with kvpool.impl.hashing ---------------------------------------------------

VALUES: list[spec.HashInput] = [
    None,
    True,
    False,
    0,
    -7,
    2**70,
    "",
    "héllo",
    b"",
    b"\x00\xff",
    (),
    [],
    (1, [2, (3, None)], "s", b"b", False),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_spec_and_impl_encode_and_hash_agree(value: spec.HashInput) -> None:
    assert spec.encode(value) == impl.encode(value)
    assert spec.sha256_hash(value) == impl.sha256_hash(value)


def test_spec_and_impl_none_hash_agree() -> None:
    assert spec.none_hash() == impl.get_none_hash()
    assert spec.DEFAULT_NONE_HASH_SEED == impl.DEFAULT_NONE_HASH_SEED


@pytest.mark.parametrize("extra_keys", [None, ("salt",), ("mm", 1, b"\x01")])
def test_spec_and_impl_hash_block_tokens_agree_with_none_parent(
    extra_keys: tuple[spec.HashInput, ...] | None,
) -> None:
    tokens = [11, 12, 13]
    first = spec.hash_block_tokens(None, tokens, extra_keys)
    assert first == impl.hash_block_tokens(impl.sha256_hash, None, tokens, extra_keys)
    second = spec.hash_block_tokens(first, [14], extra_keys)
    assert second == impl.hash_block_tokens(impl.sha256_hash, first, [14], extra_keys)


@pytest.mark.parametrize(
    ("n_tokens", "size", "extra_keys"),
    [(0, 1, None), (7, 1, None), (9, 4, ("salt",)), (16, 16, None), (33, 8, ("lora", 2))],
)
def test_spec_and_impl_request_block_hashes_agree(
    n_tokens: int, size: int, extra_keys: tuple[spec.HashInput, ...] | None
) -> None:
    tokens = [(i * 7919) % 50000 for i in range(n_tokens)]
    ours = spec.request_block_hashes(tokens, size, extra_keys)
    theirs = impl.request_block_hashes(tokens, size, extra_keys)
    assert list(ours) == list(theirs)
    assert len(ours) == n_tokens // size


def test_spec_and_impl_keys_agree() -> None:
    h = spec.sha256_hash("k")
    for group in (0, 1, 2**32 - 1):
        key = make_key(h, group)
        assert key == impl.make_block_hash_with_group_id(h, group)
        assert impl.get_block_hash(key) == hash_of(key)
        assert impl.get_group_id(key) == group_of(key)
