"""Measuring which request attributes a vLLM release's block hashes partition by.

For each attribute of :data:`kvpool.spec.manager.ATTRIBUTES`, two requests with the same
tokens that differ in that attribute alone are hashed by the release's own
``get_request_block_hasher`` (its ``generate_block_hash_extra_keys`` inside): the release
partitions by the attribute when their block hashes differ. Two requests that agree in
everything must hash alike (else the measurement says nothing). The profiles'
``key_attributes`` are these measurements; ``tests/conformance/test_key_partitions.py``
measures every release again and compares.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from kvpool.spec.manager import ExtraKeys, LoraAdapter, MultiModalFeature

from .manager_api import hash_function
from .manager_request import ManagerRequest
from .request_keys import LoraIds, request_fields

#: The requests' tokens: two blocks of :data:`BLOCK_SIZE`.
TOKENS = (7, 1, 7, 2, 7, 3, 7, 4)
BLOCK_SIZE = 4
_SQL = LoraAdapter("sql", "/adapters/sql-v1")
_IMAGE = MultiModalFeature("img-a", 0, 2)

#: attribute -> two requests' ``(salt, extra)`` that differ in it alone.
PAIRS: dict[str, tuple[tuple[str | None, ExtraKeys], tuple[str | None, ExtraKeys]]] = {
    "cache-salt": ((None, ExtraKeys()), ("tenant-b", ExtraKeys())),
    "lora-name": ((None, ExtraKeys(_SQL)), (None, ExtraKeys(LoraAdapter("chat", _SQL.path)))),
    "lora-path": (
        (None, ExtraKeys(_SQL)),
        (None, ExtraKeys(LoraAdapter(_SQL.name, "/adapters/sql-v2"))),
    ),
    "mm-identifier": (
        (None, ExtraKeys(mm=(_IMAGE,))),
        (None, ExtraKeys(mm=(MultiModalFeature("img-b", 0, 2),))),
    ),
    "mm-offset": (
        (None, ExtraKeys(mm=(_IMAGE,))),
        (None, ExtraKeys(mm=(MultiModalFeature("img-a", 1, 2),))),
    ),
    "prompt-embeds": (
        (None, ExtraKeys(embeds=TOKENS)),
        (None, ExtraKeys(embeds=(*TOKENS[:3], 9, *TOKENS[4:]))),
    ),
}


class MeasurementError(AssertionError):
    """The release's hashing did not behave as a measurement needs."""


def measure_key_attributes(modules: Mapping[str, ModuleType]) -> frozenset[str]:
    """The attributes the release's block hashes partition by."""
    utils = modules["vllm.v1.core.kv_cache_utils"]
    hash_fn = hash_function(modules)
    utils.init_none_hash(hash_fn)  # once: a release may draw NONE_HASH at random
    hasher = utils.get_request_block_hasher(BLOCK_SIZE, hash_fn)

    def hashes(salt: str | None, extra: ExtraKeys, ids: LoraIds) -> list[Any]:
        fields = request_fields(extra, ids)
        return list(ManagerRequest("measured", TOKENS, salt, hasher, fields).block_hashes)

    found = set()
    for attribute, ((salt_a, a), (salt_b, b)) in PAIRS.items():
        ids = LoraIds()  # one server: one lora_int_id per adapter name
        first = hashes(salt_a, a, ids)
        if first != hashes(salt_a, a, ids):
            raise MeasurementError(f"{attribute}: one request hashed twice gave two hashes")
        if len(first) != len(TOKENS) // BLOCK_SIZE:
            raise MeasurementError(f"{attribute}: {len(first)} block hashes for two blocks")
        if first != hashes(salt_b, b, ids):
            found.add(attribute)
    return frozenset(found)
