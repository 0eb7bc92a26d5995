"""A target for any pool with vLLM's ``BlockPool`` API: ours, a user's, vLLM's own.

The adapter turns ids into the pool's block objects, builds the few request fields the pool
reads, records reuse-watcher firings, and reads events back into the spec's vocabulary. It
looks at what the pool offers (methods, ``evict_first``, events, block fields) and declares
only that, so a 20-line pool with ``get_new_blocks``/``free_blocks``/``touch``/
``get_cached_block``/``get_num_free_blocks`` and a ``blocks`` list is already a target.

It also speaks every released vLLM's calling conventions (:class:`~.detection.PoolApi`, read
off the signatures): constructor arguments, ``touch`` per group, ``prepend``, missing
``block_mask`` or ``replace_existing_hashes``; event hashes published as 64-bit integers are
mapped back to the bytes the adapter handed out, and events without a group id get the group
from the pool's own keys (:mod:`.events`).
"""

from __future__ import annotations

import dataclasses
import gc
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from kvpool.spec import Action, Event, Observation, PoolConfig, Profile
from kvpool.spec.keys import group_of, hash_of

from ...machines.pool import operations as table
from ...machines.pool.pool_call import is_set, keyword_parameter
from ...machines.pool.target import FINE_EVENT_HASHES, Index, Lookups, PoolView
from ...targets.free_list import free_list_order, free_list_problems, sentinels
from ...targets.hash_index import read_index
from ...targets.index_probe import IndexProbe
from .calls import Call, call_for
from .detection import PoolApi, PoolFactory, build_pool, detect_api
from .events import EventReader
from .features import Feature, declared_off, header_lines, summary_lines
from .int_hashes import IntHashes
from .mismatch import described
from .requests import FakeRequest
from .views import Probe, key_pairs, keys_named, pool_view


class VllmApiTarget:
    """Drives a pool with vLLM's ``BlockPool`` API (any release's calling conventions)."""

    #: The release of the pool under test, when known (shown in traces and tables).
    version: str | None = None

    def __init__(
        self,
        factory: PoolFactory,
        config: PoolConfig,
        profile: Profile,
        name: str = "pool",
        check_structure: bool = True,
        api: PoolApi | None = None,
    ) -> None:
        self.name = name
        self.factory = factory
        self.config = config
        self.profile = profile
        #: The features the pool declares off (:mod:`.features`).
        self.features_off = declared_off(factory)
        self.pool = build_pool(factory, config, config.num_gpu_blocks, api)
        self.api = _without(
            api if api is not None else detect_api(factory, self.pool), self.features_off
        )
        self.peer = (
            build_pool(factory, config, config.peer_blocks, self.api)
            if config.peer_blocks
            else None
        )
        self._fired: list[tuple[int, str]] = []
        self._check_structure = check_structure
        self._events = EventReader(profile.coarse_events_name_fine_hash)
        #: The keys the pool was shown, looked up after every step (see :mod:`.index_probe`).
        self._probe = IndexProbe()
        self._index_readable = (
            read_index(getattr(self.pool, "cached_block_hash_to_block", None)) is not None
        )
        #: Each operation's call on this pool (by its action type), worked out when first
        #: made.
        self._calls: dict[type[Action], Call] = {}
        self.operations = self._detect_operations()
        #: What was inferred from the pool's names, and where (the run's header prints it).
        self.features = self._features()
        self.observes = self._detect_observables()

    # --- what this pool offers ----------------------------------------------------------

    def takes(self, action: Action) -> bool:
        """Whether the pool's call takes this action's optional arguments: a
        ``block_mask`` or ``replace_existing_hashes`` it has no parameter for is never
        drawn (the pool is judged on what it offers)."""
        untaken = self._call(action).untaken
        return not untaken or not any(is_set(getattr(action, field)) for field in untaken)

    def _detect_operations(self) -> frozenset[str]:
        """The operations whose method the pool has (a peer's, when its blocks name their
        pool), and ``method:keyword`` for each optional keyword offered that way."""
        ops = set()
        for op in table.POOL_OPERATIONS:
            call = op.call
            if call.on_peer and self.api.foreign_pool is None:
                continue
            if not callable(getattr(self.pool, call.method, None)):
                continue
            ops.add(op.name)
            ops.update(
                f"{op.name}:{k.parameter}"
                for k in call.keywords
                if k.offered_as_operation and keyword_parameter(k, self.api) is not None
            )
        return frozenset(ops)

    def _features(self) -> tuple[Feature, ...]:
        """Every feature inferred from the pool's names, with where, less those it
        declares off."""
        found: list[Feature] = []
        api, block = self.api, self.pool.blocks[0]
        if api.evict_first_arg is not None and "free_blocks" in self.operations:
            found.append(Feature("evict_first", f"free_blocks({api.evict_first_arg}=...)"))
        if api.block_mask and "cache_full_blocks" in self.operations:
            found.append(Feature("block_mask", "cache_full_blocks(block_mask=...)"))
        if api.replace_existing_hashes and "cache_partial_block" in self.operations:
            found.append(
                Feature(
                    "replace_existing_hashes",
                    "cache_partial_block(replace_existing_hashes=...)",
                )
            )
        if api.foreign_pool is not None:
            found.append(Feature("foreign_pool", api.foreign_pool))
        queue = getattr(self.pool, "free_block_queue", None)
        if queue is not None and free_list_order(queue, len(self.pool.blocks)) is not None:
            found.append(Feature("free_queue", "free_block_queue, walked by its links"))
        elif queue is not None and hasattr(queue, "get_all_free_blocks"):
            found.append(Feature("free_queue", "free_block_queue.get_all_free_blocks()"))
        if hasattr(block, "ref_cnt"):
            found.append(Feature("ref_cnt", "blocks[i].ref_cnt"))
        if hasattr(block, "block_hash"):
            found.append(Feature("block_hash", "blocks[i].block_hash"))
        if self._index_readable:
            found.append(Feature("index", "cached_block_hash_to_block, read whole"))
        elif "get_cached_block" in self.operations:
            found.append(Feature("index", "probed through get_cached_block"))
        if self._check_structure and queue is not None and sentinels(queue) is not None:
            found.append(Feature("linked_free_list", "free_block_queue's sentinels and links"))
        return tuple(f for f in found if f.name not in self.features_off)

    def header_lines(self) -> list[str]:
        """What was inferred from the pool's names and where, for the run's header."""
        return header_lines(self.features, self.features_off, self._notes())

    def summary_lines(self) -> list[str]:
        """:meth:`header_lines` in short (kvpool's own pools): the features on one line."""
        return summary_lines(self.features, self.features_off, self._notes())

    def _notes(self) -> list[str]:
        note = self.api.foreign_pool_note
        return [] if note is None else [f"foreign_pool: {note}"]

    def _detect_observables(self) -> frozenset[str]:
        seen = set()
        inferred = {f.name for f in self.features}
        if "free_queue" in inferred:
            seen.add("free_queue")
        if "ref_cnt" in inferred:
            seen.add("ref_cnt")
        if "block_hash" in inferred:
            seen.add("keys")
        if "index" in inferred:
            seen.add("index")  # read whole, or probed through the pool's lookups
        if "take_events" in self.operations and (self.api.events_carry_group or "keys" in seen):
            seen.add("events")
            if self.profile.coarse_events_name_fine_hash:
                seen.add(FINE_EVENT_HASHES)  # read as a consumer of its integers reads them
        if "unpin_blocks" in self.operations:
            seen.add("watchers")
        if "peer_get_new_blocks" in self.operations:
            seen.add("peer")
        if "linked_free_list" in inferred:
            seen.add("structure")
        return frozenset(seen)

    # --- translating ids ----------------------------------------------------------------

    def pool_blocks(self, ids: tuple[int, ...]) -> list[Any]:
        """The pool's blocks of these ids."""
        return [self.pool.blocks[i] for i in ids]

    def foreign_blocks(self, ids: tuple[int, ...]) -> list[Any]:
        """The peer pool's blocks of these ids (a gone pool's, without a peer)."""
        if self.peer is not None:
            return [self.peer.blocks[i] for i in ids]
        return [self._orphan_block(i) for i in ids]

    def _orphan_block(self, block_id: int) -> Any:
        """A held block of a pool that no longer exists."""
        gone = build_pool(self.factory, self.config, max(2, block_id + 1), self.api)
        gone.get_new_blocks(block_id)
        block = gone.blocks[block_id]
        try:
            alive: Callable[[], object] | None = weakref.ref(gone)
        except TypeError:  # a pool that takes no weak reference: collect everything
            alive = None
        del gone
        if alive is None:
            gc.collect()
            return block
        # the youngest generations first: a whole collection (of the suite's heap) took
        # a tenth of a robustness run, and the pool just built is almost always young
        for generation in (0, 1, 2):
            if alive() is None:
                break
            gc.collect(generation)
        return block

    def request(self, block_hashes: tuple[bytes, ...]) -> Any:
        """A request object with these chained block hashes, as the pool reads one."""
        tokens = list(range(len(block_hashes) * self.config.hash_block_size))
        hashes = list(block_hashes)
        self._events.int_hashes.remember(hashes)
        if self.api.request is not None:
            return self.api.request(hashes, tokens)
        return FakeRequest(block_hashes=hashes, all_token_ids=tokens)

    def watcher(self, name: str) -> Callable[[Any], None]:
        """The ``on_reuse`` callback named ``name``: its firings are recorded."""

        def on_reuse(block: Any) -> None:
            self._fired.append((block.block_id, name))

        return on_reuse

    # --- the actions --------------------------------------------------------------------

    def apply(self, action: Action) -> Observation:
        self._fired = []
        call = self._call(action)
        tagging = not self.api.events_carry_group and call.tags_events
        queue_before = len(getattr(self.pool, "kv_event_queue", ())) if tagging else 0
        keys_before = self._key_pairs() if tagging else Counter()
        if not self._index_readable:
            self._probe.remember(keys_named(action))
        try:
            result = call.invoke(self, action)
            if call.names_coarse_keys:
                self._remember_coarse_keys(action)
        except (AttributeError, TypeError) as exc:
            said = described(exc, self._release_name())
            if said is not None:
                raise said from exc
            raise
        finally:
            if tagging:
                self._tag_new_events(action, queue_before, keys_before)
        fired = tuple(self._fired)
        if call.fires_in_any_order:
            fired = tuple(sorted(fired))
        return Observation(result, fired)

    def _call(self, action: Action) -> Call:
        """The call ``action`` makes on this pool (from the operation table), worked out
        when first made."""
        found = self._calls.get(type(action))
        if found is None:
            operation = table.of(action)
            found = call_for(operation, self.api, self.profile.refuses_by_return)
            self._calls[type(action)] = found
        return found

    def _remember_coarse_keys(self, action: Any) -> None:
        """The keys a ``cache_full_blocks`` gave its new blocks, which the pool's events may
        name by a 64-bit integer."""
        new = action.blocks[action.num_cached_blocks : action.num_full_blocks]
        self.int_hashes.remember_blocks(
            self.pool_blocks(new), action.block_size, self.config.hash_block_size
        )

    # --- events -------------------------------------------------------------------------

    #: Whether the release's events name hashes by 64-bit integers by default, when its
    #: loader knows (an isolated vLLM release is run with whole hashes all the same).
    int_hashes_by_default: bool | None = None

    @property
    def publishes_int_hashes(self) -> bool | None:
        """Whether the pool's events name hashes by 64-bit integers where it runs as
        released (``None``: not known, and no hash read yet)."""
        if self.int_hashes_by_default is not None:
            return self.int_hashes_by_default
        return self._events.saw_ints

    @property
    def int_hashes(self) -> IntHashes:
        """What the 64-bit integers events publish stand for: the hashes of the requests
        this adapter built and the keys of the coarse blocks it cached; a manager adapter
        over the same pool adds its own requests' and caching calls' (the mapping is this
        adapter's own, so additions count)."""
        return self._events.int_hashes

    def taken_events(self, taken: Iterable[Any]) -> list[Event]:
        """The events the pool's ``take_events`` returned (``taken``), in the spec's
        vocabulary: each with the group its pool published, else the one it was tagged with
        when it was queued (by :meth:`apply`, or :meth:`calls_made_above`)."""
        raw = list(taken)
        tags: list[int | None] = [None] * len(raw)
        if not self.api.events_carry_group:
            tags, self._events.groups = self._events.groups, []
            if len(tags) != len(raw):
                raise RuntimeError(f"the pool returned {len(raw)} events but queued {len(tags)}")
        return [
            e
            for event, g in zip(raw, tags, strict=True)
            for e in self._events.spec_events(event, g)
        ]

    @contextmanager
    def calls_made_above(self) -> Iterator[None]:
        """Tag the events the pool queues while something above it (a release's KV cache
        manager) calls it directly, for a pool whose events name no group: a store gets the
        group of the keys its blocks gained, a removal that of the key lost."""
        if self.api.events_carry_group or not self.config.enable_kv_cache_events:
            yield
            return
        queue_before = len(getattr(self.pool, "kv_event_queue", ()))
        keys_before = self._key_pairs()
        try:
            yield
        finally:
            new = getattr(self.pool, "kv_event_queue", [])[queue_before:]
            if new:
                keys_after = self._key_pairs()
                lost = list((keys_before - keys_after).elements())
                gained = list((keys_after - keys_before).elements())
                self._events.tag(new, lost, gained=gained)

    def _key_pairs(self) -> Counter[tuple[int, bytes]]:
        """Every (block, key) of the pool now."""
        return key_pairs(self._view_of(self.pool, with_peer=False))

    def _tag_new_events(
        self, action: Action, queue_before: int, keys_before: Counter[tuple[int, bytes]]
    ) -> None:
        """Give each event this action queued the group its pool did not publish."""
        queue = getattr(self.pool, "kv_event_queue", [])
        new = queue[queue_before:]
        if not new:
            return
        lost = list((keys_before - self._key_pairs()).elements())
        self._events.tag(new, lost, store_group=getattr(action, "group_id", None))

    # --- looking inside -----------------------------------------------------------------

    #: Raises again a use of a module the loader could not load that the pool's own code
    #: swallowed (:func:`~..vllm.isolation.loading_check`): a loading error, not a finding.
    loading_check: Callable[[], None] | None = None

    def view(self) -> PoolView:
        if self.loading_check is not None:
            self.loading_check()
        probe = self._probe_index if "index" in self.observes else None
        try:
            return self._view_of(self.pool, with_peer=True, probe=probe)
        except (AttributeError, TypeError) as exc:
            said = described(exc, self._release_name())
            if said is not None:
                raise said from exc
            raise

    def _release_name(self) -> str:
        """The pool under test as messages name it: its target, and its release if known."""
        if self.version and self.version not in self.name:
            return f"{self.name} (release {self.version})"
        return self.name

    def _probe_index(
        self, index: Index | None, keys: tuple[frozenset[bytes], ...] | None
    ) -> Lookups:
        """What the pool's lookups answer for the keys probed, its ``index`` and ``keys``
        read just before."""
        if self._index_readable and index is None:
            # a layout the readers do not know (:mod:`..hash_index`): from now on the index
            # is read through the lookups, of the keys it held and every key seen since
            self._index_readable = False
        if self._index_readable:
            # the index is read whole; a lookup of a key that left it must miss
            in_index = [key for key, _ in index or ()]
            self._probe.remember(in_index)
            return self._probe.probe(self._lookup, skip=in_index)
        self._probe.remember(key for block_keys in keys or () for key in block_keys)
        return self._probe.probe(self._lookup)

    def _lookup(self, key: bytes) -> int | None:
        """The block the pool's lookup returns for ``key`` alone (``None``: a miss)."""
        hits = self.pool.get_cached_block(hash_of(key), [group_of(key)])
        return int(hits[0].block_id) if hits else None

    def _view_of(self, pool: Any, with_peer: bool, probe: Probe | None = None) -> PoolView:
        with_peer = with_peer and self.peer is not None and "peer" in self.observes
        return pool_view(
            pool, self.observes, self._index_readable, self.peer if with_peer else None, probe
        )

    def structure_problems(self) -> list[str]:
        if "structure" not in self.observes:
            return []
        problems = free_list_problems(self.pool.free_block_queue, self.pool.blocks)
        if self.peer is not None:
            peer_problems = free_list_problems(self.peer.free_block_queue, self.peer.blocks)
            problems += [f"peer pool: {p}" for p in peer_problems]
        return problems


def _without(api: PoolApi, off: frozenset[str]) -> PoolApi:
    """``api`` with the optional arguments and the routing a pool declares off."""
    changes: dict[str, Any] = {}
    if "evict_first" in off:
        changes["evict_first_arg"] = None
    if "block_mask" in off:
        changes["block_mask"] = False
    if "replace_existing_hashes" in off:
        changes["replace_existing_hashes"] = False
    if "foreign_pool" in off:
        changes["foreign_pool"] = None
    return dataclasses.replace(api, **changes) if changes else api
