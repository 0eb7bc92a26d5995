"""``--consumer NAME``: which consumer judges a stream.

Built in: ``count`` and ``set`` (the spec's models), ``dynamo`` (Dynamo's radix tree in
process; the extra ``[dynamo]``), ``vllm-router`` (the Rust router as a process reading
the wire; the extra ``[vllm-router]``). Anything else is a plugin, ``module:factory``: a
factory taking no argument that returns a protocol 2 router (:mod:`.router`) or a
protocol 1 :class:`~.protocol.Consumer` (adapted). :func:`make_router` builds any of them
as a router; :func:`make_consumer` builds one fed in process as a protocol 1 consumer (the
judge's, the monitor's); a router that reads the wire is refused there. A plugin is loaded only
when the user names it on the command line (:func:`parse_consumer`); a name read from a
trace file is looked up among the built-ins and the plugins already named, never imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from kvpool.spec.consumer import CONSUMER_MODELS, MODEL_DESCRIPTIONS

from .protocol import Consumer, ConsumerError
from .router import FromProtocol1, InProcess, Router, as_router, feeds, is_protocol1

#: Built-in consumers that are not spec models, with one line each.
ROUTERS: dict[str, str] = {
    "dynamo": "NVIDIA Dynamo's radix-tree index (ai-dynamo-runtime's RadixTree), in process: "
    "the suite translates each event into Dynamo's schema",
}
#: Built-in routers that read the wire themselves (route-check only).
WIRE_ROUTERS: dict[str, str] = {
    "vllm-router": "vllm-router's kv_aware policy (the Rust router, vllm-router==0.1.17) as "
    "a process: it subscribes to the publisher itself and is asked with prompts",
}
ROUTERS.update(WIRE_ROUTERS)
BUILT_IN: tuple[str, ...] = (*CONSUMER_MODELS, *ROUTERS)
DESCRIPTIONS: dict[str, str] = {**MODEL_DESCRIPTIONS, **ROUTERS}

#: Plugins named on this command line: name -> factory.
_plugins: dict[str, Callable[[], object]] = {}


def _built(name: str) -> object:
    """What the factory of the plugin ``name`` returns."""
    factory = _plugins.get(name)
    if factory is None:
        raise ConsumerError(
            f"unknown consumer {name!r}: built in are {', '.join(BUILT_IN)}; a plugin is "
            "named module:factory on the command line (--consumer), never read from a file"
        )
    try:
        return factory()
    except Exception as exc:  # the plugin's own factory failed
        raise ConsumerError(
            f"consumer {name!r} could not be built: {type(exc).__name__}: {exc}"
        ) from exc


def make_router(name: str) -> Router:
    """A fresh protocol 2 router called ``name``: a built-in, or a plugin named on the
    command line (a protocol 1 one adapted); :class:`ConsumerError` says why not."""
    if name in WIRE_ROUTERS:
        from .vllm_router import VllmRouter

        return VllmRouter()
    if name in CONSUMER_MODELS or name in ROUTERS:
        return FromProtocol1(lambda: _build(name), name)
    return as_router(_built(name), name, lambda: _built(name))


def _build(name: str) -> Consumer:
    if name in WIRE_ROUTERS:
        from .on_wire import OnTheWire

        return OnTheWire(name, lambda: make_router(name))
    if name in CONSUMER_MODELS:
        from .models import ModelConsumer

        return ModelConsumer(name)
    if name == "dynamo":
        from .dynamo import DynamoConsumer

        return DynamoConsumer()
    built = _built(name)
    if not is_protocol1(built):
        router = as_router(built, name, lambda: _built(name))
        if feeds(router) == "wire":
            from .on_wire import OnTheWire

            return OnTheWire(name, lambda: make_router(name))
        return InProcess(router)
    missing = [
        m for m in ("apply", "held_blocks", "residency") if not callable(getattr(built, m, None))
    ]
    if missing or not isinstance(getattr(built, "name", None), str):
        what = ", ".join(missing) if missing else "a str name"
        raise ConsumerError(f"consumer {name!r} built {built!r}, which lacks {what}")
    return built  # type: ignore[return-value]


def make_consumer(name: str) -> Consumer:
    """A fresh consumer called ``name`` (built in, or a plugin named on the command line);
    :class:`ConsumerError` says why not."""
    return _build(name)


def parse_consumer(name: str) -> str:
    """A ``--consumer`` value checked: a built-in name as it is; ``module:factory``
    imported and registered (the one place a plugin is loaded). One consumer is built
    to show it can be. :class:`ConsumerError` for anything else."""
    if name not in BUILT_IN:
        module_name, colon, attribute = name.partition(":")
        if not colon or not module_name or not attribute:
            raise ConsumerError(
                f"unknown consumer {name!r}: built in are {', '.join(BUILT_IN)}, or a "
                "plugin as module:factory"
            )
        try:
            module = importlib.import_module(module_name)
            factory = getattr(module, attribute)
        except (ImportError, AttributeError) as exc:
            raise ConsumerError(f"consumer {name!r} could not be loaded: {exc}") from exc
        if not callable(factory):
            raise ConsumerError(f"consumer {name!r} names {factory!r}, which is not callable")
        _plugins[name] = factory
        make_router(name)
    elif name in WIRE_ROUTERS:
        from .vllm_router import find_binary

        find_binary()
    else:
        make_consumer(name)
    return name


def is_registered(name: str) -> bool:
    """Whether the plugin ``name`` was named (and loaded) on this command line."""
    return name in _plugins


def is_model(name: str | None) -> bool:
    """Whether ``name`` is one of the spec's models (judged by its replay alone)."""
    return name in CONSUMER_MODELS
