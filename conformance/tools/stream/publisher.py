"""vLLM's own event publisher, loaded from a release wheel, and a target's events in that
release's event classes.

:func:`load_publisher` loads ``vllm/distributed/kv_events.py`` of a release in isolation
(:mod:`kvpool.conformance.engines.vllm.isolation`; the wheel's files are cached apart from
the pool's, in ``~/.cache/kvpool/vllm-publisher/X.Y.Z``): the real ``ZmqEventPublisher``,
``KVEventBatch``, ``BlockStored``, ``BlockRemoved`` and ``AllBlocksCleared``, and the real
``KVEventsConfig`` (``vllm/config/kv_events.py``, whose pydantic decorator becomes a plain
dataclass). ``vllm.logger`` is the suite's logger stand-in; ``vllm.utils.network_utils``
(it needs psutil) stays a placeholder: the publisher reaches it only to bind
``tcp://*:0``, which :func:`check_endpoint` refuses. After a run,
``release.placeholders.after_load`` lists any placeholder the publisher touched (none, in
every run so far).

:class:`EventTranslator` turns the spec-vocabulary events a target reports back into the
release's classes: one ``BlockStored`` per caching call (hashes through the release's own
``maybe_convert_block_hash``, so published as vLLM publishes them: the low 64 bits as an
integer unless ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` is off), one ``BlockRemoved`` per
key, as vLLM 0.33 emits them, and ``AllBlocksCleared``. ``token_ids`` are the request's
tokens behind the stored blocks, found in the spec manager's requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvpool.spec import events as spec_events
from kvpool.spec.manager.state import RequestState, block_hashes

from ...engines.vllm.distribution import PUBLISHER_CACHE, cached_release
from ...engines.vllm.isolation import Release, load_release
from ...engines.vllm.releases import PUBLISHER_MEMBERS, PUBLISHER_MODULES, version_in_tree

if TYPE_CHECKING:
    from ...targets.description import TargetDescription

#: The medium vLLM's GPU block pool publishes.
MEDIUM = "GPU"
#: The release whose publisher ``kvpool publish`` uses unless told otherwise.
DEFAULT_RELEASE = "0.33.0"
INT_HASHES_SETTING = "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"


class PublisherError(ValueError):
    """The publisher cannot be loaded or started as asked; the message says why."""


def publisher_source(target: TargetDescription | str) -> str:
    """Whose publisher ``kvpool publish --target TARGET`` uses unless ``--publisher`` says:
    the target's own (``vllm==X.Y.Z``: that release; ``vllm@TREE``: that tree, so a working
    copy publishes through its own code), else :data:`DEFAULT_RELEASE`."""
    from ...targets.description import Form
    from ...targets.loading import described

    target = described(target)
    if target.engine != "vllm":
        return DEFAULT_RELEASE
    if target.form is Form.RELEASE and target.version:
        return target.version
    if target.form is Form.PATH and target.path is not None and target.path.expanduser().is_dir():
        return f"vllm@{target.path}"
    return DEFAULT_RELEASE


def load_publisher(source: str, int_hashes: bool | None = None) -> Release:
    """The event module of release ``source`` (a version: its wheel's files, downloaded
    once) or of the tree ``vllm@TREE``, loaded in isolation. ``int_hashes`` overrides the
    release's hash setting."""
    if source.startswith("vllm@"):
        root = Path(source.removeprefix("vllm@")).expanduser()
        version = version_in_tree(root)
    else:
        root = cached_release(source, folder=PUBLISHER_CACHE, members=PUBLISHER_MEMBERS)
        version = source
    release = load_release(root, version, PUBLISHER_MODULES)
    events = release.kv_events
    missing = [
        name
        for name in ("ZmqEventPublisher", "KVEventBatch", "BlockStored", "BlockRemoved")
        if not hasattr(events, name)
    ]
    if missing:
        raise PublisherError(f"vLLM {source}'s kv_events.py has no {', '.join(missing)}")
    envs = release.modules.get("vllm.envs")
    if int_hashes is not None and envs is not None:
        setattr(envs, INT_HASHES_SETTING, int_hashes)
    return release


def check_endpoint(endpoint: str, what: str) -> None:
    """Refuse what the isolated publisher cannot do: ``tcp://*:0`` needs vLLM's network
    utilities (not loaded); any other ZMQ address is the publisher's to bind or connect."""
    if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
        raise PublisherError(f"{what} {endpoint}: give a port (port 0 is not supported)")
    if "://" not in endpoint:
        raise PublisherError(f"{what} {endpoint!r} is not a ZMQ address like tcp://*:5557")


#: Where ``kvpool publish`` binds a wildcard endpoint unless told otherwise: loopback.
LOOPBACK = "127.0.0.1"
#: ``--bind`` for every interface, as vLLM binds ``tcp://*:PORT``.
ALL_INTERFACES = "*"


def on_interface(endpoint: str, host: str) -> str:
    """A wildcard endpoint ``tcp://*:PORT`` on one interface (``tcp://HOST:PORT``); any
    other endpoint, and every endpoint when ``host`` is ``*``, as it is."""
    if host == ALL_INTERFACES or not endpoint.startswith("tcp://*:"):
        return endpoint
    return f"tcp://{host}:{endpoint.removeprefix('tcp://*:')}"


def bind_host(bind: str) -> tuple[str, str | None]:
    """``--bind`` read: ``HOST`` (``127.0.0.1``, ``*``) or ``tcp://HOST:PORT`` (the PUB
    endpoint itself, bound on that interface). Returns the host and that endpoint (or
    ``None``); :class:`PublisherError` for anything else."""
    if bind.startswith("tcp://"):
        host, colon, port = bind.removeprefix("tcp://").rpartition(":")
        if not colon or not host or not port.isdigit() or int(port) == 0:
            raise PublisherError(
                f"--bind {bind!r}: give tcp://HOST:PORT, e.g. tcp://127.0.0.1:5557"
            )
        return host, bind
    if not bind or "/" in bind or ":" in bind.replace("::", ""):
        raise PublisherError(f"--bind {bind!r}: give a host (127.0.0.1, *) or tcp://HOST:PORT")
    return bind, None


def start_publisher(
    release: Release,
    endpoint: str,
    replay_endpoint: str | None,
    topic: str,
    rank: int = 0,
    buffer_steps: int = 10_000,
    bind: str | None = None,
) -> Any:
    """The release's ``ZmqEventPublisher``, bound (``tcp://*:PORT``) or connected.

    With ``bind`` (a host), wildcard endpoints are bound on that interface only
    (``tcp://127.0.0.1:PORT``); vLLM would connect to such an address, so the publisher
    is the release's class with one decision changed: its PUB endpoint is bound. Framing,
    sequence numbers, the replay socket and the thread stay the release's own.
    """
    publisher_class = release.kv_events.ZmqEventPublisher
    one_interface = bind is not None and bind != ALL_INTERFACES
    wildcard = endpoint.startswith("tcp://*:")
    if one_interface and wildcard and not hasattr(publisher_class, "_is_bind_endpoint"):
        raise PublisherError(
            f"vLLM {release.version}'s publisher binds only wildcard addresses (it has no "
            "_is_bind_endpoint to tell it otherwise): --bind '*' binds every interface, "
            "or publish through a newer release's publisher (--publisher 0.33.0)"
        )
    if bind is not None and bind != ALL_INTERFACES:
        endpoint = on_interface(endpoint, bind)
        if replay_endpoint is not None:
            replay_endpoint = on_interface(replay_endpoint, bind)
        publisher_class = _bound(publisher_class)
    check_endpoint(endpoint, "endpoint")
    if replay_endpoint is not None:
        check_endpoint(replay_endpoint, "replay endpoint")
    try:
        return publisher_class(
            data_parallel_rank=rank,
            endpoint=endpoint,
            replay_endpoint=replay_endpoint,
            buffer_steps=buffer_steps,
            topic=topic,
        )
    except Exception as exc:  # zmq.ZMQError (address in use, bad address) and the like
        raise PublisherError(f"vLLM's publisher could not start on {endpoint}: {exc}") from None


def _bound(publisher_class: Any) -> Any:
    """The release's publisher class, binding its PUB endpoint whatever its form."""
    return type(
        publisher_class.__name__,
        (publisher_class,),
        {"_is_bind_endpoint": staticmethod(lambda endpoint: True)},
    )


class EventTranslator:
    """Spec events -> one ``KVEventBatch`` of the release's classes."""

    def __init__(self, release: Release, hash_block_size: int) -> None:
        self.module = release.kv_events
        self.convert = release.kv_cache_utils.maybe_convert_block_hash
        self.hash_block_size = hash_block_size
        self.stored_fields = set(self.module.BlockStored.__struct_fields__)
        self.removed_fields = set(self.module.BlockRemoved.__struct_fields__)
        #: Stored hashes whose tokens were not found in any live request.
        self.tokens_unknown = 0

    def batch(
        self,
        events: Iterable[spec_events.Event],
        requests: Mapping[str, RequestState],
        ts: float,
    ) -> Any:
        tokens = _TokenIndex(requests, self.hash_block_size)
        out = [self._event(e, tokens) for e in events]
        return self.module.KVEventBatch(ts=ts, events=out)

    def _event(self, event: spec_events.Event, tokens: _TokenIndex) -> Any:
        m = self.module
        if isinstance(event, spec_events.BlockStored):
            token_ids: list[int] = []
            for h in event.block_hashes:
                found = tokens.of(h, event.block_size)
                if found is None:
                    self.tokens_unknown += 1
                else:
                    token_ids.extend(found)
            fields: dict[str, Any] = {
                "block_hashes": [self.convert(h) for h in event.block_hashes],
                "parent_block_hash": None
                if event.parent_block_hash is None
                else self.convert(event.parent_block_hash),
                "token_ids": token_ids,
                "block_size": event.block_size,
                "lora_id": None,
                "medium": MEDIUM,
                "lora_name": None,
                "group_idx": event.group_id,
            }
            return m.BlockStored(**{k: v for k, v in fields.items() if k in self.stored_fields})
        if isinstance(event, spec_events.BlockRemoved):
            fields = {
                "block_hashes": [self.convert(event.block_hash)],
                "medium": MEDIUM,
                "group_idx": event.group_id,
            }
            return m.BlockRemoved(**{k: v for k, v in fields.items() if k in self.removed_fields})
        return m.AllBlocksCleared()


class _TokenIndex:
    """Which tokens each hash of the live requests covers (built on first use)."""

    def __init__(self, requests: Mapping[str, RequestState], hash_block_size: int) -> None:
        self.requests = requests
        self.hash_block_size = hash_block_size
        self.index: dict[tuple[bytes, int], tuple[int, ...]] | None = None

    def of(self, block_hash: bytes, block_size: int) -> tuple[int, ...] | None:
        """The tokens of the block ``block_hash`` ends, in blocks of ``block_size``."""
        if self.index is None:
            self.index = {}
        key = (block_hash, block_size)
        if key not in self.index:
            self._fill(block_size)
        return self.index.get(key)

    def _fill(self, block_size: int) -> None:
        assert self.index is not None
        step = self.hash_block_size
        for request in self.requests.values():
            for i, h in enumerate(block_hashes(request, step)):
                end = (i + 1) * step
                start = (end - 1) // block_size * block_size
                self.index.setdefault((h, block_size), request.tokens[start:end])
