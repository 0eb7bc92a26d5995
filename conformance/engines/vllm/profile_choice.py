"""Which profile a vLLM target is judged by, and why: from its version, or from its code.

A release, post-release or pre-release names its version (``vllm/_version.py``, a wheel's
name, the installed distribution): the profile table in :mod:`kvpool.spec.profile` picks
the newest profile at or before it (PEP 440's order, so ``0.34.0.dev118`` and ``0.34.0rc1``
are judged as ``vllm-0.33``, ``0.33.0rc1`` as ``vllm-0.32``). A plain clone names none; its
code is measured instead (:mod:`kvpool.conformance.profiles.probes`, and the request
attributes its block hashes carry) and the profile is the built-in vLLM profile that
agrees with every knob measured. No guess is silent: the choice carries its reason, which
``kvpool conform`` prints under its header and ``kvpool targets --explain`` prints with
the measurements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvpool.spec.profile import PROFILES, VLLM_RELEASES, Profile, profile_for_version
from kvpool.spec.versions import parse_version

from .releases import ReleaseError

if TYPE_CHECKING:
    from ...profiles.probes import Measurement
    from .target import VllmRelease


@dataclass(frozen=True)
class ProfileChoice:
    """The profile chosen for a vLLM target, the one-line reason, and what was measured
    (empty when the version decided)."""

    profile: str
    reason: str
    measured: tuple[Measurement, ...] = field(default=())


def _newest() -> tuple[tuple[int, int, int], Profile]:
    return VLLM_RELEASES[-1]


def choice_for_version(version: str) -> ProfileChoice:
    """The profile of ``version`` and why; :class:`ReleaseError` when it has none."""
    try:
        parsed = parse_version(version)
        profile = profile_for_version(version)
    except ValueError as exc:
        raise ReleaseError(str(exc)) from None
    if beyond_table(version):
        return ProfileChoice(
            profile.name, f"{version}: newer than every known release; judged as {profile.name}"
        )
    if parsed.is_prerelease:
        return ProfileChoice(
            profile.name,
            f"{version}: a pre-release of {parsed.base}, which comes before it; judged as "
            f"{profile.name}, the newest profile below it",
        )
    return ProfileChoice(
        profile.name, f"{version}: a release the table covers; judged as {profile.name}"
    )


def beyond_table(version: str) -> bool:
    """Whether release ``version`` is of a minor version newer than every known release
    (then no profile was measured on it: it is judged by the newest)."""
    first, _ = _newest()
    return bool(parse_version(version).release[:2] > first[:2])


def vllm_profiles() -> list[Profile]:
    """The built-in profiles of vLLM releases, oldest first."""
    return [p for p in PROFILES.values() if p.name.startswith("vllm-0.")]


def measure_release(release: VllmRelease) -> list[Measurement]:
    """Every knob the probes measure on ``release``'s pool, and the request attributes its
    block hashes carry (when its modules are at hand)."""
    from ...profiles.probes import Measurement, measure
    from .key_partitions import measure_key_attributes

    found = measure(release.target_factory(f"vllm ({release.version})"))
    modules = release.release.modules if release.release is not None else None
    if modules is None:
        found.append(Measurement("key_attributes", None, "the release's modules are not at hand"))
        return found
    try:
        attributes = measure_key_attributes(modules)
    except Exception as exc:  # the release's hasher could not be run, whatever it raised
        found.append(
            Measurement("key_attributes", None, f"not measured: {type(exc).__name__}: {exc}")
        )
        return found
    found.append(
        Measurement(
            "key_attributes",
            attributes,
            "block hashes carry " + (", ".join(sorted(attributes)) or "no request attribute"),
        )
    )
    return found


def differences(profile: Profile, measured: list[Measurement]) -> list[str]:
    """The knobs where ``profile`` says otherwise than was measured (undecided ones skipped)."""
    return [m.knob for m in measured if m.value is not None and getattr(profile, m.knob) != m.value]


def choice_from_code(release: VllmRelease, where: str) -> ProfileChoice:
    """The built-in vLLM profile that agrees with every knob measured on ``release``;
    :class:`ReleaseError`, naming the nearest profiles and their differences, when none
    does."""
    measured = measure_release(release)
    undecided = [m.knob for m in measured if m.value is None]
    matching = [p for p in vllm_profiles() if not differences(p, measured)]
    if not matching:
        nearest = sorted(vllm_profiles(), key=lambda p: len(differences(p, measured)))[:3]
        near = "; ".join(
            f"{p.name} differs in {', '.join(differences(p, measured))}" for p in nearest
        )
        raise ReleaseError(
            f"{where} names no version, and its code matches no known vLLM profile: {near}. "
            "Write a profile for it (kvpool profile derive --target ... --out my.toml) and "
            "pass --profile my.toml"
        )
    chosen = matching[-1]
    also = [p.name for p in matching[:-1]]
    reason = (
        f"{where} names no version (no vllm/_version.py, no dist-info): its code matches "
        f"{chosen.name} in every one of {len(measured) - len(undecided)} measured knobs"
    )
    if undecided:
        reason += f" ({', '.join(undecided)} undecided)"
    if also:
        reason += f"; also matches {', '.join(also)}, judged as the newest"
    return ProfileChoice(chosen.name, reason, tuple(measured))


_CHOSEN: dict[str, ProfileChoice] = {}


def choose_profile(
    spec: str, version: str | None, load: Callable[[], VllmRelease]
) -> ProfileChoice:
    """The profile of vLLM target ``spec`` (its version, else its code, loaded by ``load``);
    remembered per target, so the header and the run agree and the code is measured once."""
    if spec not in _CHOSEN:
        if version is not None:
            _CHOSEN[spec] = choice_for_version(version)
        else:
            _CHOSEN[spec] = choice_from_code(load(), spec.removeprefix("vllm@"))
    return _CHOSEN[spec]


def chosen_reason(spec: str) -> str | None:
    """Why ``spec``'s default profile was chosen, once :func:`choose_profile` chose it."""
    choice = _CHOSEN.get(spec)
    return None if choice is None else choice.reason
