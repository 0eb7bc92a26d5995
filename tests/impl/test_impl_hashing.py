"""The canonical encoding, the chained block hash and the key layout."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from kvpool.impl import hashing
from kvpool.impl.hashing import (
    DEFAULT_NONE_HASH_SEED,
    encode,
    get_block_hash,
    get_group_id,
    get_none_hash,
    hash_block_tokens,
    init_none_hash,
    make_block_hash_with_group_id,
    request_block_hashes,
    sha256_hash,
)


@pytest.fixture(autouse=True)
def _restore_none_hash() -> Iterator[None]:
    yield
    init_none_hash(DEFAULT_NONE_HASH_SEED)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, b"N"),
        (True, b"T"),
        (False, b"F"),
        (0, b"I\x00\x00\x00\x010"),
        (42, b"I\x00\x00\x00\x0242"),
        (-7, b"I\x00\x00\x00\x02-7"),
        ("", b"S\x00\x00\x00\x00"),
        ("hé", b"S\x00\x00\x00\x03h\xc3\xa9"),
        (b"\x00\xff", b"B\x00\x00\x00\x02\x00\xff"),
        ((), b"L\x00\x00\x00\x00"),
        ((1, None), b"L\x00\x00\x00\x02I\x00\x00\x00\x011N"),
        ([True, "a"], b"L\x00\x00\x00\x02TS\x00\x00\x00\x01a"),
    ],
)
def test_encode_each_type(value: object, expected: bytes) -> None:
    assert encode(value) == expected


def test_encode_bool_is_not_int() -> None:
    assert encode(True) != encode(1)
    assert encode(False) != encode(0)


def test_encode_tuple_and_list_are_the_same() -> None:
    assert encode((1, (2, "x"))) == encode([1, [2, "x"]])


def test_encode_nesting_is_unambiguous() -> None:
    assert encode(((1,), 2)) != encode((1, (2,)))
    assert encode(("ab", "c")) != encode(("a", "bc"))


@pytest.mark.parametrize("value", [1.5, {1: 2}, {1}, object(), bytearray(b"x")])
def test_encode_refuses_other_types_naming_them(value: object) -> None:
    with pytest.raises(TypeError, match=type(value).__name__):
        encode(value)


def test_sha256_hash_is_sha256_of_encoding() -> None:
    assert sha256_hash((1, 2)) == hashlib.sha256(encode((1, 2))).digest()
    assert len(sha256_hash(None)) == 32


def test_none_hash_defaults_to_hash_of_seed() -> None:
    assert get_none_hash() == sha256_hash("kvpool-none-hash")
    assert get_none_hash() == hashing.NONE_HASH


def test_init_none_hash_reseeds_the_chain_root() -> None:
    before = hash_block_tokens(sha256_hash, None, [1, 2])
    init_none_hash("other-seed")
    assert get_none_hash() == sha256_hash("other-seed")
    after = hash_block_tokens(sha256_hash, None, [1, 2])
    assert after != before
    assert after == sha256_hash((sha256_hash("other-seed"), (1, 2), None))


def test_init_none_hash_refuses_non_str() -> None:
    with pytest.raises(TypeError):
        init_none_hash(b"x")  # type: ignore[arg-type]


def test_first_block_chains_on_none_hash() -> None:
    h = hash_block_tokens(sha256_hash, None, [5, 6, 7])
    assert h == sha256_hash((get_none_hash(), (5, 6, 7), None))


def test_block_hash_chains_on_parent_and_extra_keys() -> None:
    parent = b"p" * 32
    h = hash_block_tokens(sha256_hash, parent, [1], ("salt",))
    assert h == sha256_hash((parent, (1,), ("salt",)))
    assert h != hash_block_tokens(sha256_hash, parent, [1], ("pepper",))
    assert h != hash_block_tokens(sha256_hash, parent, [1])


def test_key_is_hash_plus_group_big_endian() -> None:
    key = make_block_hash_with_group_id(b"abc", 258)
    assert key == b"abc\x00\x00\x01\x02"
    assert get_block_hash(key) == b"abc"
    assert get_group_id(key) == 258


@pytest.mark.parametrize("group", [-1, 1 << 32])
def test_key_group_out_of_range_is_refused(group: int) -> None:
    with pytest.raises(ValueError):
        make_block_hash_with_group_id(b"h", group)


def test_request_block_hashes_chain_full_blocks_only() -> None:
    tokens = list(range(10))
    hashes = request_block_hashes(tokens, 4)
    assert len(hashes) == 2
    h0 = hash_block_tokens(sha256_hash, None, [0, 1, 2, 3])
    h1 = hash_block_tokens(sha256_hash, h0, [4, 5, 6, 7])
    assert hashes == [h0, h1]


def test_request_block_hashes_share_prefix_and_apply_extra_keys() -> None:
    a = request_block_hashes([1, 2, 3, 4, 5, 6], 2)
    b = request_block_hashes([1, 2, 3, 4, 9, 9], 2)
    assert a[:2] == b[:2] and a[2] != b[2]
    salted = request_block_hashes([1, 2, 3, 4], 2, extra_keys=("tenant",))
    assert salted[0] == hash_block_tokens(sha256_hash, None, [1, 2], ("tenant",))
    assert salted[1] == hash_block_tokens(sha256_hash, salted[0], [3, 4], ("tenant",))
    assert salted[0] != a[0]


def test_request_block_hashes_refuses_bad_block_size() -> None:
    with pytest.raises(ValueError):
        request_block_hashes([1, 2], 0)
