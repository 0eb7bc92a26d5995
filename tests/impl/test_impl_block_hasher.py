"""The manager's block hasher (``hash_token_blocks``) gives the spec's bytes, block by block.

The spec's hashing (``kvpool.spec.hashing``) is written plainly and separately; the impl's
fast path looks each token's encoding up in a table it fills as it goes. These tests
compare the two over drawn prompts, parents and extra keys, and show the comparison
fails when one token's kept encoding is wrong.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvpool.impl import KVCacheManager, hashing
from kvpool.impl.hashing import (
    DEFAULT_NONE_HASH_SEED,
    hash_block_tokens,
    hash_token_blocks,
    init_none_hash,
    request_block_hashes,
    sha256_hash,
)
from kvpool.spec import hashing as spec_hashing

tokens_st = st.lists(st.integers(0, 300_000), max_size=80)
salts_st = st.none() | st.tuples(st.text(max_size=6))
lora_st = st.none() | st.tuples(
    st.tuples(st.just("lora-name"), st.text(max_size=4)),
    st.tuples(st.just("lora-path"), st.text(max_size=4)),
)


@pytest.fixture(autouse=True)
def _restore_none_hash() -> Iterator[None]:
    yield
    init_none_hash(DEFAULT_NONE_HASH_SEED)


@settings(max_examples=150, deadline=None)
@given(tokens=tokens_st, block_size=st.integers(1, 17), keys=salts_st | lora_st)
def test_block_hasher_gives_the_specs_hashes(
    tokens: list[int], block_size: int, keys: tuple[object, ...] | None
) -> None:
    expected = spec_hashing.request_block_hashes(tokens, block_size, keys)  # type: ignore[arg-type]
    assert tuple(hash_token_blocks(None, tokens, block_size, keys)) == expected
    assert tuple(request_block_hashes(tokens, block_size, keys)) == expected


@settings(max_examples=60, deadline=None)
@given(
    tokens=tokens_st,
    block_size=st.integers(1, 9),
    parent=st.binary(min_size=32, max_size=32) | st.binary(max_size=40),
)
def test_block_hasher_chains_on_any_parent(
    tokens: list[int], block_size: int, parent: bytes
) -> None:
    """A parent of 32 bytes (a digest) or of any other length (another hash function's)."""
    chained: list[bytes] = []
    last = parent
    for start in range(0, len(tokens) - block_size + 1, block_size):
        last = spec_hashing.hash_block_tokens(last, tokens[start : start + block_size])
        chained.append(last)
    assert hash_token_blocks(parent, tokens, block_size) == chained


def test_block_hasher_follows_the_none_hash_seed() -> None:
    init_none_hash("another-seed")
    want = spec_hashing.request_block_hashes([1, 2, 3, 4], 2, seed="another-seed")
    assert tuple(hash_token_blocks(None, [1, 2, 3, 4], 2)) == want


def test_large_and_negative_ints_are_encoded_not_kept() -> None:
    big = (1 << 70) + 3
    for value in (big, -5):
        assert hashing.encode(value) == spec_hashing.encode(value)
        assert value not in hashing._INT_ENCODINGS
    assert hash_token_blocks(None, [big, -5], 2) == [
        spec_hashing.hash_block_tokens(None, [big, -5])
    ]


def test_bools_in_tokens_take_the_plain_path() -> None:
    """``request_block_hashes`` hands a list holding a bool to the per-value encoder, so
    True is not hashed as the int 1."""
    with_bool = request_block_hashes([True, 2], 2)
    assert with_bool == [hash_block_tokens(sha256_hash, None, (True, 2))]
    assert with_bool != request_block_hashes([1, 2], 2)


def test_manager_hashes_its_requests_as_the_spec_does() -> None:
    tokens = list(range(1000, 1000 + 70))
    manager = KVCacheManager(64, 16, hash_block_size=4, enable_kv_cache_events=False)
    assert manager.admit("r", tokens, "salt") is not None
    manager.append("r", [7] * 9)
    req = manager.requests["r"].request
    want = spec_hashing.request_block_hashes([*tokens, *[7] * 9], 4, ("salt",))
    assert tuple(req.block_hashes) == want


def test_a_wrong_kept_encoding_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted fault: one token's kept encoding is another's. The comparison with the
    spec, as the tests above make it, fails for a prompt holding that token."""
    table = hashing._INT_ENCODINGS
    tokens = [11, 12, 13, 14]
    hash_token_blocks(None, tokens, 2)  # fills the table
    monkeypatch.setitem(table, 13, table[14])
    expected = spec_hashing.request_block_hashes(tokens, 2)
    got = tuple(hash_token_blocks(None, tokens, 2))
    assert got[0] == expected[0]
    assert got[1] != expected[1]
