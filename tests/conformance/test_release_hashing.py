"""Our manager's release-matching hashing (``KVCacheManager(hashing=vllm_hashing(...))``)
gives, block for block, the bytes each checked vLLM release's own block hasher gives.

Each release's ``get_request_block_hasher`` runs from its wheel (the pool's cached files:
``kv_cache_utils.py`` and ``utils/hashing.py``) on the same requests our manager admits
and grows, with each of the release's hash algorithms; a byte changed in our encoding is
caught here and by the bench's verification (``kvpool bench --manager vllm``), and the
request machine passes on our manager with the option.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kvpool.conformance.engines.builtin.impl_manager import vllm_hashed_manager_target
from kvpool.conformance.engines.vllm.distribution import cached_release
from kvpool.conformance.engines.vllm.isolation import load_release
from kvpool.conformance.engines.vllm.manager_request import ManagerRequest
from kvpool.conformance.engines.vllm.request_keys import LoraIds, request_fields
from kvpool.conformance.machines.pool.levels import REQUEST_MIN_BLOCKS
from kvpool.conformance.machines.requests.runner import ON_MANAGER, manager_builder, run_requests
from kvpool.conformance.tools.bench import managers
from kvpool.impl import KVCacheManager, kv_cache_manager, release_hashing
from kvpool.impl.release_hashing import CHECKED, KeyLayout, ReleaseHashing, vllm_hashing
from kvpool.spec.manager import ExtraKeys, LoraAdapter, MultiModalFeature
from kvpool.spec.profile import SEED

RELEASES = ("0.12.0", "0.19.0", "0.24.0", "0.30.0", "0.31.0", "0.33.0")
BLOCK = 16


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, Any]]]:
    version = request.param
    yield version, dict(load_release(cached_release(version), version).modules)


def _algorithms(modules: dict[str, Any]) -> list[tuple[str, Callable[[Any], bytes]]]:
    found = []
    for name in release_hashing.ALGORITHMS:
        try:
            found.append((name, modules["vllm.utils.hashing"].get_hash_fn_by_name(name)))
        except ValueError:  # not in this release
            continue
    return found


#: A request's tokens, salt and attributes; appends (token runs) come after admission.
Case = tuple[tuple[int, ...], str | None, ExtraKeys, list[tuple[int, ...]]]


def _cases(seed: int) -> list[Case]:
    """Drawn requests: salted or not (an empty salt too), with a LoRA adapter, with a
    multimodal feature, with prompt embeddings, growing by appends where every release
    resumes hashing alike (no multimodal feature: see the module docstring of
    ``kvpool.impl.release_hashing``)."""
    rng = random.Random(seed)
    cases: list[Case] = []
    for i in range(12):
        n = rng.randrange(1, 6 * BLOCK)
        tokens = tuple(rng.randrange(0, 150_000) for _ in range(n))
        salt = rng.choice([None, "", "tenant", "é"])
        lora = LoraAdapter(rng.choice(["a", "b"]), rng.choice(["/x", "/y"])) if i % 3 == 1 else None
        mm: tuple[MultiModalFeature, ...] = ()
        if i % 4 == 2 and n > 3:
            offset = rng.randrange(0, n - 2)
            mm = (MultiModalFeature("img", offset, rng.randrange(1, n - offset)),)
        embeds = tuple(rng.randrange(-50, 50) for _ in tokens) if i % 5 == 3 else None
        appends = [] if mm or embeds is not None else [
            tuple(rng.randrange(0, 150_000) for _ in range(rng.randrange(1, 2 * BLOCK)))
            for _ in range(rng.randrange(0, 4))
        ]  # fmt: skip
        cases.append((tokens, salt, ExtraKeys(lora=lora, mm=mm, embeds=embeds), appends))
    return cases


def first_mismatch(
    modules: dict[str, Any], algorithm: str, hashing: ReleaseHashing, cases: list[Case]
) -> str | None:
    """The first request (and step) whose hashes differ between the release's hasher and
    our manager under ``hashing``, or ``None``."""
    utils = modules["vllm.v1.core.kv_cache_utils"]
    function = modules["vllm.utils.hashing"].get_hash_fn_by_name(algorithm)
    for n, (tokens, salt, extra, appends) in enumerate(cases):
        theirs = ManagerRequest(
            "r", tokens, salt, utils.get_request_block_hasher(BLOCK, function),
            request_fields(extra, LoraIds()),
        )  # fmt: skip
        ours = KVCacheManager(64, BLOCK, hash_block_size=BLOCK, hashing=hashing)
        lora = None if extra.lora is None else (extra.lora.name, extra.lora.path)
        features = [(f.identifier, f.offset, f.length) for f in extra.mm]
        ours.admit("r", tokens, salt, lora=lora, mm_features=features, prompt_embeds=extra.embeds)
        for step, grown in enumerate([(), *appends]):
            if grown:
                theirs.append(grown)
                ours.append("r", grown)
            expected = list(map(bytes, theirs.block_hashes))
            got = ours.requests["r"].request.block_hashes
            if got != expected:
                return f"case {n} step {step}: {len(got)} vs {len(expected)} hashes"
    return None


def test_every_algorithm_of_every_checked_release_gives_its_bytes(
    release: tuple[str, dict[str, Any]],
) -> None:
    version, modules = release
    utils = modules["vllm.v1.core.kv_cache_utils"]
    algorithms = _algorithms(modules)
    assert [a for a, _ in algorithms] == list(CHECKED[(0, int(version.split(".")[1]))].algorithms)
    for algorithm, function in algorithms:
        utils.init_none_hash(function)
        hashing = vllm_hashing(version, algorithm, none_hash=bytes(utils.NONE_HASH))
        for seed in (1, 2, 3):
            assert first_mismatch(modules, algorithm, hashing, _cases(seed)) is None, (
                version,
                algorithm,
                seed,
            )


def test_where_the_release_derives_none_hash_ours_derives_the_same(
    release: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    version, modules = release
    utils = modules["vllm.v1.core.kv_cache_utils"]
    for seed in (None, "42"):
        if seed is None:
            monkeypatch.delenv("PYTHONHASHSEED", raising=False)
        else:
            monkeypatch.setenv("PYTHONHASHSEED", seed)
        for algorithm, function in _algorithms(modules):
            utils.init_none_hash(function)
            random_here = seed is None and (
                CHECKED[(0, int(version.split(".")[1]))].random_none_hash
                or algorithm.startswith("xxhash")
            )
            if random_here:
                with pytest.raises(ValueError, match="random per process"):
                    vllm_hashing(version, algorithm)
            else:
                assert vllm_hashing(version, algorithm).none_hash == utils.NONE_HASH


def _flip_last_byte(dumps: Callable[..., bytes]) -> Callable[..., bytes]:
    def planted(value: Any, *args: Any, **kwargs: Any) -> bytes:
        data = dumps(value, *args, **kwargs)
        return data[:-1] + bytes([data[-1] ^ 1])

    return planted


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_byte_changed_in_our_encoding_is_caught(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    version = "0.33.0"
    modules = dict(load_release(cached_release(version), version).modules)
    utils = modules["vllm.v1.core.kv_cache_utils"]
    cases = _cases(seed)
    for algorithm, function in _algorithms(modules)[:2]:  # the pickle and the CBOR path
        utils.init_none_hash(function)
        hashing = vllm_hashing(version, algorithm)
        assert first_mismatch(modules, algorithm, hashing, cases) is None
        with monkeypatch.context() as patch:
            # one byte of each block's encoding: the pickle (inlined in the manager for
            # every block after the first), or CBOR's
            patch.setattr(kv_cache_manager, "_dumps", _flip_last_byte(kv_cache_manager._dumps))
            patch.setattr(release_hashing, "_pickled", _flip_last_byte(release_hashing._pickled))
            patch.setattr(release_hashing, "_cbor", _flip_last_byte(release_hashing._cbor))
            found = first_mismatch(modules, algorithm, hashing, cases)
        assert found is not None and found.startswith(_first_full_block(cases)), found


def _first_full_block(cases: list[Case]) -> str:
    """Where the first full block of the cases is hashed: ``case N step S``."""
    for n, (tokens, _, _, appends) in enumerate(cases):
        count = len(tokens)
        for step, grown in enumerate([(), *appends]):
            count += len(grown)
            if count >= BLOCK:
                return f"case {n} step {step}:"
    raise AssertionError("no case has a full block")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_bench_verification_catches_a_byte_changed_in_our_encoding(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    vllm = managers.vllm("vllm==0.33.0")
    contenders = [managers.ours(vllm.profile, vllm.hashing), vllm.contender]
    prog = managers.record(200, 300, seed=seed)
    assert managers.verify(prog, contenders) is None
    with monkeypatch.context() as patch:
        patch.setattr(kv_cache_manager, "_dumps", _flip_last_byte(kv_cache_manager._dumps))
        patch.setattr(release_hashing, "_pickled", _flip_last_byte(release_hashing._pickled))
        found = managers.verify(prog, contenders)
        # the same planted manager hashing the spec's way is not judged on hashes
        spec = managers.ours(vllm.profile)
        assert managers.verify(prog, [spec, vllm.contender]) is None
    assert found is not None and found.what == "block hashes", found
    assert "block 0 hash" in found.describe()
    # at the first step whose request has a full block
    first = next(i for i, a in enumerate(prog.actions) if len(getattr(a, "tokens", ())) >= 16)
    assert found.index == first, found.describe()


def test_versions_between_checked_releases_that_differ_are_refused() -> None:
    assert vllm_hashing("0.32.1").layout is KeyLayout.TAGGED  # between 0.31 and 0.33
    assert vllm_hashing("0.21.0", none_hash=b"n").layout is KeyLayout.OFFSETS
    for version in ("0.15.0", "0.27.0", "0.40.0", "0.9.0"):
        with pytest.raises(ValueError, match="was not checked"):
            vllm_hashing(version, none_hash=b"n")
    with pytest.raises(ValueError, match="no hash algorithm"):
        vllm_hashing("0.33.0", "md5")
    with pytest.raises(ValueError, match="has no hash algorithm 'xxhash'"):
        vllm_hashing("0.12.0", "xxhash", none_hash=b"n")
    told = vllm_hashing("0.27.0", none_hash=b"n" * 32, layout=KeyLayout.OFFSETS)
    assert told.none_hash == b"n" * 32 and told.layout is KeyLayout.OFFSETS


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_request_machine_passes_on_our_manager_hashing_as_a_release(seed: int) -> None:
    result = run_requests(
        manager_builder(vllm_hashed_manager_target, SEED), ON_MANAGER, seed=seed,
        max_examples=150, steps=40, max_blocks=REQUEST_MIN_BLOCKS,
    )  # fmt: skip
    assert result.failure is None, result.failure
