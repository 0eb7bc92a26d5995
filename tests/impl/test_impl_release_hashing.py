"""Our manager under a release's hashing (``hashing=vllm_hashing(...)``): its fast path
(the pickle inlined, one tuple of tokens sliced per block) gives the plain chain of the
release's digest over ``(parent, tokens, keys)``, block by block, admitted or grown.
Byte-identity with the releases themselves: tests/conformance/test_release_hashing.py."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st
from kvpool.impl import KVCacheManager
from kvpool.impl.release_hashing import KeyLayout, ReleaseHashing, vllm_hashing

BLOCK = 4


def plain_chain(
    hashing: ReleaseHashing, tokens: list[int], salt: str | None, lora: tuple[str, str] | None
) -> list[bytes]:
    parent, out = hashing.none_hash, []
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        keys = hashing.block_keys(start, start + BLOCK, salt, lora)
        parent = hashing.digest((parent, tuple(tokens[start : start + BLOCK]), keys))
        out.append(parent)
    return out


@settings(max_examples=80, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 2**40), min_size=1, max_size=40),
    grown=st.lists(st.lists(st.integers(0, 70_000), min_size=1, max_size=9), max_size=3),
    salt=st.none() | st.text(max_size=3),
    lora=st.none() | st.tuples(st.text(max_size=2), st.text(max_size=2)),
    version=st.sampled_from(["0.33.0", "0.30.0"]),
    algorithm=st.sampled_from(["sha256", "sha256_cbor"]),
)
def test_the_fast_path_is_the_plain_chain(
    prompt: list[int],
    grown: list[list[int]],
    salt: str | None,
    lora: tuple[str, str] | None,
    version: str,
    algorithm: str,
) -> None:
    hashing = vllm_hashing(version, algorithm)
    m = KVCacheManager(64, BLOCK, hash_block_size=BLOCK, hashing=hashing)
    assert m.admit("r", prompt, salt, lora=lora) is not None
    tokens = list(prompt)
    for more in grown:
        m.append("r", more)
        tokens += more
        assert m.requests["r"].request.block_hashes == plain_chain(hashing, tokens, salt, lora)


def test_the_layouts_key_a_block_as_their_releases_do() -> None:
    def keys(layout: KeyLayout, start: int) -> object:
        h = vllm_hashing("x", none_hash=b"n", layout=layout)
        return h.block_keys(start, start + 4, "s", ("name", "/p"), [("img", 2, 4)], [1, 2] * 4)

    rows = (1).to_bytes(8, "big", signed=True) + (2).to_bytes(8, "big", signed=True)
    digest = hashlib.sha256(rows * 2).digest()
    assert keys(KeyLayout.BARE, 0) == ("name", "img", "s", rows * 2)
    assert keys(KeyLayout.OFFSETS, 4) == ("name", ("img", -2), digest)
    assert keys(KeyLayout.TAGGED, 0) == (
        ("lora", "name", "/p"),
        ("mm", "img", 2),
        ("cache_salt", "s"),
        ("prompt_embeds", digest),
    )
    # the feature [2, 6) is out of the block [8, 12), no salt after the first block, and
    # past the embeddings the release still keys the (empty) rows' digest
    empty = hashlib.sha256(b"").digest()
    assert keys(KeyLayout.TAGGED, 8) == (("lora", "name", "/p"), ("prompt_embeds", empty))


def test_the_spec_hashing_stays_the_default() -> None:
    spec = KVCacheManager(16, 4, hash_block_size=4)
    like = KVCacheManager(16, 4, hash_block_size=4, hashing=vllm_hashing("0.33.0"))
    for m in (spec, like):
        m.admit("r", list(range(8)), "s")
    assert spec.hashing is None and like.hashing is not None
    ours, theirs = (m.requests["r"].request.block_hashes for m in (spec, like))
    assert len(ours) == len(theirs) == 2 and set(ours).isdisjoint(theirs)
