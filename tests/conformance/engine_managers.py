"""What the tests of the engine managers judged by the properties (nano-vllm, LMDeploy)
share: loading one by its ``--target`` form, and the first difference a property run
reports for a given action sequence."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvpool.conformance.machines.pool.lockstep import Nonconformance, RunRecord
from kvpool.conformance.machines.requests.property_run import PropertyRun
from kvpool.conformance.machines.requests.target import RequestSetup
from kvpool.conformance.targets.loading import load_manager
from kvpool.conformance.targets.manager_factory import ReleaseManagerFactory
from kvpool.spec import SEED


def loaded(spec: str) -> ReleaseManagerFactory[Any, Any]:
    """The manager factory ``--target spec`` loads."""
    factory, _ = load_manager(spec, spec)
    assert isinstance(factory, ReleaseManagerFactory)
    return factory


def first_difference(
    factory: Any, setup: RequestSetup, *actions: object, consumer: str | None = None
) -> str | None:
    """The first difference a property run of ``actions`` on ``setup`` reports (``None``:
    none); with ``consumer``, the manager's KV events are judged by that model too."""
    if consumer is not None:  # events on, as the events level builds it
        setup = replace(setup, pool=replace(setup.pool, enable_kv_cache_events=True))
    run = PropertyRun(factory, SEED, setup, RunRecord(), consumer)
    for action in actions:
        try:
            run.apply(action)  # type: ignore[arg-type]
        except Nonconformance as exc:
            return str(exc)
    return None
