"""Loading the two pools of a diff: any two ``--target`` values, each with its profile."""

from __future__ import annotations

from dataclasses import dataclass

from kvpool.spec import PoolConfig, get_profile

from ...machines.pool.target import TargetFactory
from ...targets.description import TargetDescription
from ...targets.loading import TargetLoadError, choose_profile, described, load_target
from .common import CommonGround, Side, common_ground, offered


@dataclass(frozen=True)
class Pair:
    """Pool A and pool B: how to build each, and what they share."""

    a: Side
    b: Side
    build_a: TargetFactory
    build_b: TargetFactory
    common: CommonGround


def _side(
    letter: str, target: TargetDescription | str, profile: str | None
) -> tuple[Side, TargetFactory, frozenset[str]]:
    spec = described(target)
    chosen = get_profile(profile or choose_profile(spec).name)
    factory, _ = load_target(spec)
    try:
        probe = factory(PoolConfig(2), chosen)
    except Exception as exc:  # the target cannot even build a pool
        raise TargetLoadError(
            f"{letter} ({spec.text}) could not build a pool: {type(exc).__name__}: {exc}"
        ) from exc
    side = Side(
        letter,
        spec.text,
        chosen,
        offered(probe, chosen),
        frozenset(probe.observes),
        getattr(probe, "version", None),
    )
    return side, factory, frozenset(probe.operations)


def load_pair(
    spec_a: TargetDescription | str,
    spec_b: TargetDescription | str,
    profile_a: str | None = None,
    profile_b: str | None = None,
    shared_only: bool = False,
) -> Pair:
    """Load both targets (a vLLM release is fetched once into the cache).

    Each side is held to its own profile when actions are drawn (``None``: the target's
    default, e.g. ``vllm-0.24`` for ``vllm==0.24.0``, else ``seed``). Raises
    :class:`~..targets.loading.TargetLoadError` or ``KeyError`` (an unknown profile).
    ``shared_only`` leaves out the operations only one side's pool takes (by default they
    are drawn, and taking one is a difference).
    """
    a, build_a, ops_a = _side("A", spec_a, profile_a)
    b, build_b, ops_b = _side("B", spec_b, profile_b)
    return Pair(a, b, build_a, build_b, common_ground(a, b, ops_a, ops_b, shared_only))
