"""vLLM's own ``KVCacheManager`` as a manager target (``--manager vllm``).

The release's manager, coordinator and single-type managers run as they are, over the
release's ``BlockPool``, built from a ``KVCacheConfig`` the suite writes for the drawn
setup: one ``FullAttentionSpec`` group per full-attention group, one
``SlidingWindowSpec`` per sliding-window group. The request actions become the calls
vLLM's scheduler makes:

- admit / resume: ``get_computed_blocks`` then ``allocate_slots`` for every token not hit
  (``delay_cache_blocks=True``: the blocks are registered once the tokens are computed,
  see ``commit``), then ``take_kv_cache_block_copies`` for the copy-on-write of a partial
  hit; ``copies_done`` frees the blocks those copies retained, as the scheduler does once
  the step that ran them is over;
- append: the request's tokens grow (its block hashes with them) and ``allocate_slots``
  covers the new ones;
- commit (after the forward pass): ``cache_blocks`` up to every token, then
  ``remove_skipped_blocks`` (the sliding windows' frees, which vLLM makes at the request's
  next ``allocate_slots``);
- preempt: ``free`` (the request then waits with no computed tokens); finish: ``free``;
  reset: ``reset_prefix_cache``.

Sizes: a spec sliding window of ``w`` tokens (``sliding_window_blocks * block_size +
sliding_window_rest``) is vLLM's ``sliding_window = w`` (then both null the same table
entries and need the same blocks for a hit).
The manager is built with ``hash_block_size == block_size``: vLLM's single-group
coordinator requires it, and a hybrid with a finer hash registers every prompt's tail as a
partial entry, a policy the spec's manager has only on request (``cache_partial``).

Keys: the release hashes with its own ``sha256`` and ``NONE_HASH``, so its block hashes
are not the spec's. Each request's hashes are paired with the spec's for the same tokens
and attributes, under the profile's ``key_attributes`` (:mod:`...manager.key_pairing`),
and what the pool shows (keys, index, lookups) is read back through that pairing, so the
pools are compared key for key.

Attributes: a request's LoRA adapter, multimodal features and (where the release hashes
them) prompt embeddings reach the release's own hashing through the stand-ins of
:mod:`.request_keys`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

from kvpool.spec import Event, Profile
from kvpool.spec.manager import (
    INCREMENTAL,
    NO_EXTRA,
    REPORT_MODES,
    EvictCached,
    ExtraKeys,
    RequestAction,
    Scheduled,
)

from ...machines.pool.target import PoolView
from ...machines.requests.key_pairing import KeyPairing
from ...machines.requests.target import ManagerTarget, RequestSetup
from ..vllm_api.adapter import VllmApiTarget
from .isolation import loading_check
from .manager_api import ManagerApi, hash_function
from .manager_build import Modules, build_manager
from .manager_request import PREEMPTED, RUNNING, ManagerRequest
from .request_keys import LoraIds, request_fields, tensor_data

_UNTAGGED = nullcontext()


def _untagged() -> AbstractContextManager[None]:
    """No tagging: the one reusable null context."""
    return _UNTAGGED


def fit_setup(setup: RequestSetup, calls: ManagerApi) -> RequestSetup:
    """``setup`` as vLLM's manager can be built for it: ``hash_block_size`` equal to the
    block size (see the module docstring), and one full-attention group only where the
    release's coordinator cannot take two."""
    bs = setup.manager.block_size
    if setup.pool.hash_block_size != bs:
        setup = replace(setup, pool=replace(setup.pool, hash_block_size=bs))
    groups = setup.manager.groups
    full = [i for i, g in enumerate(groups) if not g.is_sliding]
    if not calls.two_full_groups and len(full) > 1:
        kept = tuple(g for i, g in enumerate(groups) if g.is_sliding or i == full[0])
        setup = replace(setup, manager=replace(setup.manager, groups=kept))
    return setup


class VllmManagerTarget:
    """A release's ``KVCacheManager``, driven as vLLM's scheduler drives it."""

    def __init__(
        self,
        modules: Modules,
        api: Any,
        calls: ManagerApi,
        setup: RequestSetup,
        profile: Profile,
        name: str,
    ) -> None:
        self.name = name
        self.setup = setup
        self.calls = calls
        utils = modules["vllm.v1.core.kv_cache_utils"]
        #: The release's hash function (its ``sha256``; see :func:`.manager_api.hash_function`).
        self.hash_function = hash_function(modules)
        utils.init_none_hash(self.hash_function)
        self._utils: Any = utils
        self._block_hasher = utils.get_request_block_hasher
        self.hasher: Callable[[Any], list[Any]] = self._block_hasher(
            setup.pool.hash_block_size, self.hash_function
        )
        self.manager = build_manager(modules, setup, not calls.identical_groups)
        pool = self.manager.block_pool
        self.pool = VllmApiTarget(lambda **_: pool, setup.pool, profile, name, api=api)
        self.pool.loading_check = loading_check(modules)
        self.observes = self.pool.observes
        self.requests: dict[str, ManagerRequest] = {}
        #: What each request was given beside its tokens and salt.
        self.extras: dict[str, ExtraKeys] = {}
        self.lora_ids = LoraIds()
        #: Blocks a copy-on-write retained until its copy is made, per request.
        self.retained: dict[str, list[Any]] = {}
        #: The release's block hashes -> the spec's.
        self.pairing = KeyPairing(setup.pool.hash_block_size, profile.key_attributes)
        #: Requests whose hashes changed since the pool was last looked at (paired then),
        #: with their attributes.
        self.unpaired: dict[str, tuple[ManagerRequest, ExtraKeys]] = {}
        #: The attributes besides the salt a request is given (prompt embeddings only where
        #: the release hashes them).
        self.extra_keys_taken = extra_keys_taken(modules)
        #: The report modes a request is given (``"full"`` only where the release reads it).
        self.report_modes_taken = report_modes_taken(modules)
        #: Whether the pool publishes events: only then are the hashes their integers stand
        #: for remembered (with events off, as ``kvpool bench`` runs, the timed steps do
        #: only what vLLM's scheduler does).
        self.events_on = setup.pool.enable_kv_cache_events
        #: The pool adapter's tagging of the events the release's calls queue, where they
        #: need it (events on, a release whose events name no group); no wrapping otherwise.
        self.calls_above: Callable[[], AbstractContextManager[None]] = (
            self.pool.calls_made_above
            if self.events_on and not self.pool.api.events_carry_group
            else _untagged
        )

    # --- keys ---------------------------------------------------------------------------

    def use_hash_function(self, hash_fn: Callable[[Any], bytes]) -> None:
        """Hash the requests admitted from now on with ``hash_fn`` in the release's block
        hasher (``NONE_HASH`` stays the release's ``sha256`` one): ``kvpool bench`` hands
        in digests it computed beforehand, to time the manager without the hashing."""
        self.hasher = self._block_hasher(self.setup.pool.hash_block_size, hash_fn)

    @property
    def none_hash(self) -> bytes:
        """The release's ``NONE_HASH`` now (random per process in some releases)."""
        return bytes(self._utils.NONE_HASH)

    def pin_none_hash(self, value: bytes) -> None:
        """Set the release's ``NONE_HASH`` (its ``init_none_hash`` ran when this target was
        built; vLLM's engine runs it once per process): the bench keeps one per run."""
        self._utils.NONE_HASH = bytes(value)

    def _pair_hashes(self) -> None:
        """Pair the hashes of every request whose tokens changed since the last look with
        the spec's for the same tokens and attributes. Done only when the pool is looked at,
        so driving the manager (``kvpool bench --manager vllm`` times it) pays nothing."""
        for request, extra in self.unpaired.values():
            self.pairing.pair(
                request.block_hashes, request.all_token_ids, request.cache_salt, extra
            )
        self.unpaired.clear()

    # --- scheduling ---------------------------------------------------------------------

    def _tables(self, request_id: str) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(ids) for ids in self.manager.get_block_ids(request_id))

    def _schedule(self, request: ManagerRequest) -> Scheduled | None:
        """A waiting request: its cached prefix, then slots for every other token."""
        with self.calls_above():
            return self._schedule_now(request)

    def _schedule_now(self, request: ManagerRequest) -> Scheduled | None:
        found = self.manager.get_computed_blocks(request)
        blocks, num_hit = found[0], found[1]
        request.shared_prefix_boundary = found[2] if len(found) > 2 else 0
        new = self.manager.allocate_slots(
            request,
            request.num_tokens - num_hit,
            num_new_computed_tokens=num_hit,
            new_computed_blocks=blocks,
            delay_cache_blocks=True,
        )
        if new is None:
            return None
        request.num_computed_tokens = num_hit
        request.status = RUNNING
        pairs: tuple[tuple[int, int], ...] = ()
        if self.calls.copies:
            copies, retained = self.manager.take_kv_cache_block_copies()
            self.retained[request.request_id] = list(retained)
            pairs = tuple((int(c.src_block_id), int(c.dst_block_id)) for c in copies)
        return Scheduled(num_hit, self._tables(request.request_id), pairs)

    def admit(
        self,
        request_id: str,
        tokens: tuple[int, ...],
        salt: str | None,
        extra: ExtraKeys = NO_EXTRA,
        report_mode: str = INCREMENTAL,
    ) -> Scheduled | None:
        fields = request_fields(extra, self.lora_ids)
        request = ManagerRequest(request_id, tokens, salt, self.hasher, fields, report_mode)
        if self.events_on:
            self.pool.int_hashes.remember(request.block_hashes)
        self.extras[request_id] = extra
        result = self._schedule(request)
        if result is not None:
            self.requests[request_id] = request
            self.unpaired[request_id] = (request, extra)
        else:
            del self.extras[request_id]
        return result

    def resume(self, request_id: str) -> Scheduled | None:
        return self._schedule(self.requests[request_id])

    def append(self, request_id: str, tokens: tuple[int, ...]) -> Scheduled | None:
        request = self.requests[request_id]
        grown = len(tokens)
        request.append(tokens)
        if self.events_on:
            self.pool.int_hashes.remember(request.block_hashes)
        with self.calls_above():
            new = self.manager.allocate_slots(
                request, request.num_tokens - request.num_computed_tokens, delay_cache_blocks=True
            )
        if new is None:
            del request.all_token_ids[-grown:]  # the scheduler keeps them for a later step
            del request.block_hashes[
                len(request.all_token_ids) // self.setup.pool.hash_block_size :
            ]
            return None
        self.unpaired[request_id] = (request, self.extras.get(request_id, NO_EXTRA))
        return Scheduled(request.num_computed_tokens, self._tables(request_id))

    def prepare_write(self, request_id: str) -> Scheduled | None:
        request = self.requests[request_id]
        return Scheduled(request.num_computed_tokens, self._tables(request_id))

    def copies_done(self, request_id: str) -> None:
        with self.calls_above():
            self._free_retained(request_id)

    def _free_retained(self, request_id: str) -> None:
        retained = self.retained.pop(request_id, [])
        if retained:
            self.manager.block_pool.free_blocks(retained)

    def commit(self, request_id: str, cache_partial: bool) -> Scheduled:
        request = self.requests[request_id]
        request.num_computed_tokens = request.num_tokens
        with self.calls_above():
            self.manager.cache_blocks(request, request.num_computed_tokens)
            if self.events_on:
                self._remember_keys_of(request_id)
        with self.calls_above():
            self._remove_skipped(request)
        return Scheduled(request.num_computed_tokens, self._tables(request_id))

    def _remove_skipped(self, request: ManagerRequest) -> None:
        """The sliding windows' frees after a forward pass, as the release makes them."""
        request_id = request.request_id
        if self.calls.skipped_take_prompt:
            self.manager.remove_skipped_blocks(
                request_id, request.num_computed_tokens, num_prompt_tokens=request.num_prompt_tokens
            )
        elif self.calls.skipped_on_manager:
            self.manager.remove_skipped_blocks(request_id, request.num_computed_tokens)
        else:  # the call allocate_slots makes at the request's next step
            self.manager.coordinator.remove_skipped_blocks(request_id, request.num_computed_tokens)

    def _remember_keys_of(self, request_id: str) -> None:
        """What the pool keyed the request's blocks by, for reading the integers its events
        publish (the pool adapter's one mapping, :meth:`.IntHashes.remember_blocks`: a
        block spanning several hash blocks is keyed by more than its last fine hash)."""
        blocks = self.manager.block_pool.blocks
        for ids in self.manager.get_block_ids(request_id):
            self.pool.int_hashes.remember_blocks(
                (blocks[i] for i in ids),
                self.setup.manager.block_size,
                self.setup.pool.hash_block_size,
            )

    def preempt(self, request_id: str) -> None:
        request = self.requests[request_id]
        with self.calls_above():
            self._free_retained(request_id)
            self.manager.free(request)
        request.status = PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1

    def finish(self, request_id: str) -> None:
        request = self.requests.pop(request_id)
        self.extras.pop(request_id, None)
        with self.calls_above():
            self._free_retained(request_id)
            self.manager.free(request)

    def reset_prefix_cache(self) -> bool:
        with self.calls_above():
            return bool(self.manager.reset_prefix_cache())

    def allows(self, action: RequestAction) -> bool:
        """A release without ``evict_blocks`` cannot be asked to evict."""
        return self.calls.evicts or not isinstance(action, EvictCached)

    def evict_cached(self, block_ids: tuple[int, ...]) -> None:
        with self.calls_above():
            self.manager.evict_blocks(set(block_ids))

    def is_block_writable(self, block: int) -> bool:
        """The pool's answer; a release without ``is_block_writable`` (before 0.30) is
        taken to allow a write into a block held once with no key, which the write-guard
        property checks on the pool's own counts and keys anyway."""
        pool = self.manager.block_pool
        it = pool.blocks[block]
        if callable(getattr(pool, "is_block_writable", None)):
            return bool(pool.is_block_writable(it))
        return bool(it.ref_cnt == 1 and it.block_hash is None)

    # --- events -------------------------------------------------------------------------

    def take_events(self) -> tuple[Event, ...] | None:
        """The manager's KV events since the last call (its ``take_events``), in the spec's
        vocabulary and keys (``None`` for a manager without ``take_events``). vLLM publishes
        a hash's low 64 bits: the pool adapter's one mapping turns them back into the
        release's hashes (the requests' fine hashes remembered at admission and append, the
        coarse keys at every commit), then the pairing gives the spec's. A release whose
        events name no group (before 0.23) has each event tagged by the pool adapter when
        the manager's call queued it (:meth:`.VllmApiTarget.calls_made_above`)."""
        take = getattr(self.manager, "take_events", None)
        if take is None:
            return None
        self._pair_hashes()
        return self.pairing.events(self.pool.taken_events(take()))

    # --- looking inside -----------------------------------------------------------------

    def view(self) -> PoolView:
        self._pair_hashes()
        return self.pairing.view(self.pool.view())

    def structure_problems(self) -> list[str]:
        return self.pool.structure_problems()


def report_modes_taken(modules: Modules) -> frozenset[str]:
    """Both report modes where the release's ``get_computed_blocks`` reads a request's
    ``kv_cache_report_mode`` and publishes its hits again in the ``"full"`` one (0.33 on);
    none besides the default otherwise (an older release has no such field)."""
    manager = getattr(modules["vllm.v1.core.kv_cache_manager"], "KVCacheManager", None)
    try:
        source = inspect.getsource(manager.get_computed_blocks)  # type: ignore[union-attr]
    except (AttributeError, OSError, TypeError):
        return frozenset()
    reads = "kv_cache_report_mode" in source and '"full"' in source
    return frozenset(REPORT_MODES) if reads else frozenset()


def extra_keys_taken(modules: Modules) -> frozenset[str]:
    """The attributes besides the salt a request of this release can carry: a LoRA
    adapter and multimodal features always (since 0.10.1), prompt embeddings where its
    hashing reads them through the suite's ``tensor_data`` (an isolated release: an
    installed vLLM's needs a torch tensor)."""
    taken = {"lora-name", "lora-path", "mm-identifier", "mm-offset"}
    utils = modules["vllm.v1.core.kv_cache_utils"]
    if callable(getattr(utils, "_gen_prompt_embeds_extra_hash_keys", None)) and (
        getattr(utils, "tensor_data", None) is tensor_data
    ):
        taken.add("prompt-embeds")
    return frozenset(taken)


def manager_factory(
    modules: Modules, api: Any, calls: ManagerApi, name: str
) -> Callable[[RequestSetup, Profile], ManagerTarget]:
    """The factory of manager targets for ``--manager vllm`` over a release's modules."""

    def fit(setup: RequestSetup) -> RequestSetup:
        return fit_setup(setup, calls)

    def factory(setup: RequestSetup, profile: Profile) -> ManagerTarget:
        return VllmManagerTarget(modules, api, calls, fit(setup), profile, name)

    factory.fit_setup = fit  # type: ignore[attr-defined]
    return factory
