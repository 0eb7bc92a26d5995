"""Profiles: the policy knobs that real pools disagree on, and the files that state them.

The contract (the docs' "The contract in plain words") is the ``seed`` profile (upstream
vLLM at the seed's commit): every field of :class:`Profile` at its default. Released pools
differ in a few places (where a freed block goes, which API exists, which inputs a caching
call accepts); each such difference is one field, a *knob*, so a profile is a readable
list of choices.

A profile is a short document of what it changes: a TOML file naming its ``base`` profile,
a one-line ``description``, and under ``[knobs.NAME]`` each knob that differs from the
base, with its ``value`` (for a set of names: ``add``/``remove`` lists) and a one-line
``reason``. The built-in profiles are such files, shipped in ``spec/profiles/`` and read
at import (``vllm-0.33.toml`` is profile ``vllm-0.33``; its ``releases`` list the vLLM
releases from which it is chosen); a user's file is read by :func:`get_profile` given its
path (``--profile my-pool.toml``), and that path is its name. The ``vllm-*`` profiles were
measured by running each released wheel's ``BlockPool`` (CPU only) against the spec and by
reading its code (``kvpool profile derive`` repeats the measurement). A knob that narrows
the caller's contract makes the spec refuse such input (a
:class:`~kvpool.spec.errors.ContractViolation`) instead of modelling what the release does
with it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .actions import ALL_ACTIONS
from .files import UnreadableFile, read_regular_text
from .versions import Version, VersionError, parse_version


@dataclass(frozen=True)
class Profile:
    """Where a profile's pool departs from the seed, field by field."""

    name: str
    description: str
    #: A block with no key reaching ref_cnt 0 goes to the queue's front (LIFO reuse).
    unkeyed_free_to_front: bool = True
    #: With caching off, every freed block goes to the front.
    caching_off_free_to_front: bool = True
    #: ``free_blocks`` has the ``evict_first`` argument (every freed block to the front;
    #: vLLM 0.23 calls it ``prepend``).
    has_evict_first: bool = True
    #: Operations this pool offers (by ``Action.operation``).
    operations: frozenset[str] = frozenset(a.operation for a in ALL_ACTIONS)
    #: The pool knows ``hash_block_size``; without it the request's hashes are taken at
    #: ``block_size``, so every caching call needs ``block_size == hash_block_size``.
    has_hash_block_size: bool = True
    #: A block spanning several hash blocks is keyed by the concatenation of their hashes
    #: (vLLM 0.12-0.23) instead of the last one (which already chains over the prefix).
    coarse_hash_concatenates: bool = False
    #: ``cache_full_blocks`` has the ``block_mask`` argument.
    has_block_mask: bool = True
    #: A block whose key covers fewer tokens may be cached again as a full block (partial
    #: entry promoted); without it every new full block must have no key at all.
    cache_promotes_partial: bool = True
    #: With events on, ``BlockStored``'s parent hash is read off the key of
    #: ``blocks[num_cached_blocks - 1]``, which must then have one (else the request's hash).
    parent_hash_from_block: bool = False
    #: ``cache_partial_block`` registers an entry at any hash-block boundary; without it
    #: only strictly inside a block (``block_size > hash_block_size`` and ``num_tokens`` not
    #: a multiple of ``block_size``), unless existing hashes are being replaced.
    partial_at_boundary: bool = True
    #: ``cache_partial_block`` has the ``replace_existing_hashes`` argument.
    has_replace_existing_hashes: bool = True
    #: The release does not maintain the null block's ``ref_cnt``: touching it counts up
    #: (vLLM 0.10-0.32, vllm-mlx) and freeing it counts down (vLLM 0.10-0.32). Nothing
    #: reads that count, so where it moves it is not compared; where it does not (the
    #: seed, 0.33) it must stay 0 and is compared like every other block's.
    null_ref_cnt_moves: bool = False
    #: A partial entry's ``BlockStored`` describes only the last hash block before
    #: ``num_tokens``, its parent the fine hash before it, which no event may have named
    #: (vLLM 0.24 on); else it describes the entry's block from its start, its parent the
    #: block before.
    partial_parent_fine_hash: bool = False
    #: A block holds its pool strongly (``KVCacheBlock.pool``, vLLM 0.30 on): the pool
    #: lives as long as its blocks, so a block freed through another pool always reaches
    #: its owner; with the seed's weak link the owner may be gone, and freeing such a block
    #: breaks rule ``foreign-route``.
    strong_pool_reference: bool = False
    #: A block's keys die when its last reference is freed (a pool with a slower tier
    #: behind it: the contents live on there, not in this pool's prefix cache): each key is
    #: removed and published, and the block is freed as one without a key.
    keys_die_on_free: bool = False
    #: A sliding-window group's manager frees the blocks it drops (from the window, or the
    #: whole table on finish and preempt) in two calls: the keyed ones as usual, then the
    #: ones without a key with ``evict_first`` (vLLM 0.23's ``SlidingWindowManager``:
    #: scratch blocks are reused first, prefix-cache entries stay behind them). Needs
    #: ``has_evict_first``.
    window_unkeyed_free_first: bool = False
    #: The pool refuses a call outside its contract by returning ``False`` (``None`` from
    #: ``get_new_blocks``) and changing nothing, instead of raising; a call it takes returns
    #: ``True`` or ``None``.
    refuses_by_return: bool = False
    #: An allocation that would evict a cached block first drops the keys of every free
    #: block (a flush of the whole cache no request holds, each removal published), instead
    #: of evicting one block at a time; the free queue keeps its order.
    flushes_under_pressure: bool = False
    #: For a manager that keys a block when it schedules it: the key may be hit by another
    #: request before the block is written (both run in the same forward pass, which writes
    #: it), but a key whose request left before its forward pass wrote the block is stale.
    scheduled_keys_within_pass: bool = False
    #: KV events name a key by the 64-bit integer of its hash, and a coarse block keyed by
    #: concatenated hashes (``coarse_hash_concatenates``) publishes its last fine hash's
    #: integer: a consumer cannot tell the two apart, so its events are judged as naming the
    #: key of that last fine hash.
    coarse_events_name_fine_hash: bool = False
    #: The consumer model (:mod:`kvpool.spec.consumer`: ``count`` or ``set``) the release
    #: promises its KV event subscribers, ``None`` where it promises none in writing. What
    #: it promises, not what it emits: the events level measures one against the other.
    consumer_contract: str | None = "count"
    #: The request attributes its block hashes carry as extra keys, so that requests
    #: differing in one never share a block (:data:`kvpool.spec.manager.ATTRIBUTES`);
    #: measured on each release's own ``generate_block_hash_extra_keys``.
    key_attributes: frozenset[str] = frozenset(
        {"cache-salt", "lora-name", "lora-path", "mm-identifier", "mm-offset", "prompt-embeds"}
    )
    #: Where that promise is written (or why there is none).
    consumer_contract_source: str = (
        "kvpool's own contract (docs: The KV events contract): every copy of a hash is "
        "stored and removed, the counting consumer vLLM documents"
    )

    #: The profile this one is written against, and the reason its file gives for each
    #: knob it sets (``None`` and empty for a profile built in code).
    base: str | None = field(default=None, compare=False)
    reasons: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def offers(self, operation: str) -> bool:
        """Whether this profile's pool has ``operation``."""
        return operation in self.operations


#: Where the built-in profiles live (shipped with the package).
BUILT_IN_DIR = Path(__file__).with_name("profiles")
#: Fields a file sets at its top level, not as knobs.
_NOT_KNOBS = frozenset({"name", "description", "base", "reasons"})
#: The knobs whose value may be absent (``"none"`` in a file, as TOML has no null).
_OPTIONAL = frozenset({"consumer_contract"})


class ProfileFileError(KeyError):
    """A profile file that cannot be read as one; the message names the file and the key.

    A ``KeyError``, as an unknown profile name is: every ``--profile`` reports both alike.
    """

    def __str__(self) -> str:
        return str(self.args[0])


def knob_names() -> tuple[str, ...]:
    """Every knob a profile file may set, in :class:`Profile`'s order."""
    return tuple(f.name for f in fields(Profile) if f.name not in _NOT_KNOBS)


def _knob_value(where: str, knob: str, entry: object, base: Profile) -> object:
    """The value ``[knobs.KNOB]`` gives, checked against the type of the base's value."""
    if not isinstance(entry, dict):
        raise ProfileFileError(f"{where}: knobs.{knob} must be a table with value and reason")
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ProfileFileError(f"{where}: knobs.{knob} needs a one-line reason")
    current = getattr(base, knob)
    extra = sorted(set(entry) - {"value", "add", "remove", "reason"})
    if extra:
        raise ProfileFileError(f"{where}: knobs.{knob} has unknown keys {', '.join(extra)}")
    if isinstance(current, frozenset):
        return _set_value(where, knob, entry, current)
    if "value" not in entry or {"add", "remove"} & set(entry):
        raise ProfileFileError(f"{where}: knobs.{knob} takes value (not add/remove)")
    value = entry["value"]
    if knob in _OPTIONAL and value == "none":
        return None
    expected = bool if isinstance(current, bool) else str
    if knob in _OPTIONAL:
        expected = str
    if not isinstance(value, expected):
        raise ProfileFileError(
            f"{where}: knobs.{knob}: value {value!r} is not a {expected.__name__}"
        )
    return value


def _set_value(where: str, knob: str, entry: dict[str, Any], current: frozenset[str]) -> object:
    """A set knob: the whole ``value``, or the base's with ``add`` and ``remove`` applied."""
    lists = {k: entry[k] for k in ("value", "add", "remove") if k in entry}
    if not lists or ("value" in lists and len(lists) > 1):
        raise ProfileFileError(f"{where}: knobs.{knob} takes value, or add and/or remove")
    for key, names in lists.items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ProfileFileError(f"{where}: knobs.{knob}.{key} must be a list of names")
    if "value" in lists:
        return frozenset(lists["value"])
    missing = sorted(set(lists.get("remove", [])) - current)
    if missing:
        raise ProfileFileError(
            f"{where}: knobs.{knob} removes {', '.join(missing)}, which the base does not have"
        )
    return (current | frozenset(lists.get("add", []))) - frozenset(lists.get("remove", []))


def profile_from_document(
    name: str, document: dict[str, Any], known: dict[str, Profile], where: str
) -> Profile:
    """The profile a parsed file states: its base (one of ``known``) with its knobs."""
    extra = sorted(set(document) - {"base", "description", "releases", "knobs"})
    if extra:
        raise ProfileFileError(
            f"{where}: unknown top-level keys {', '.join(extra)} (a profile file has base, "
            "description, releases and [knobs.NAME] tables)"
        )
    description = document.get("description")
    if not isinstance(description, str) or not description.strip():
        raise ProfileFileError(f"{where}: needs a one-line description")
    base_name = document.get("base")
    if base_name is None:
        base = Profile(name=name, description=description)
    elif isinstance(base_name, str) and base_name in known:
        base = known[base_name]
    else:
        raise ProfileFileError(
            f"{where}: base {base_name!r} is not a known profile ({', '.join(sorted(known))})"
        )
    knobs = document.get("knobs", {})
    if not isinstance(knobs, dict):
        raise ProfileFileError(f"{where}: knobs must be tables: [knobs.NAME]")
    unknown = sorted(set(knobs) - set(knob_names()))
    if unknown:
        raise ProfileFileError(
            f"{where}: unknown knobs {', '.join(unknown)}; known: {', '.join(knob_names())}"
        )
    changes: dict[str, Any] = {
        knob: _knob_value(where, knob, entry, base) for knob, entry in knobs.items()
    }
    reasons = tuple((knob, str(entry["reason"]).strip()) for knob, entry in knobs.items())
    profile = replace(
        base, name=name, description=description, base=base_name, reasons=reasons, **changes
    )
    if profile.window_unkeyed_free_first and not profile.has_evict_first:
        raise ProfileFileError(
            f"{where}: knobs.window_unkeyed_free_first frees with evict_first, which this "
            "profile's pool does not have (has_evict_first is false)"
        )
    return profile


#: The largest profile file read (a bound of the reader, not a rule of any pool): the
#: built-in ones are about 2 KB.
MAX_PROFILE_BYTES = 1 << 20


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(read_regular_text(path, MAX_PROFILE_BYTES, "profile file"))
    except UnreadableFile as exc:
        raise ProfileFileError(str(exc)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileFileError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ProfileFileError(f"{path}: nests arrays or tables too deeply") from None
    except ValueError as exc:  # an integer past Python's int-string limit (4,300 digits)
        raise ProfileFileError(f"{path}: a value out of bounds: {str(exc)[:120]}") from None


def _releases(where: str, document: dict[str, Any]) -> list[tuple[int, int, int]]:
    firsts = []
    for text in document.get("releases", []):
        try:
            version = parse_version(text) if isinstance(text, str) else None
        except VersionError:
            version = None
        if version is None or len(version.release) != 3:
            raise ProfileFileError(f"{where}: releases: {text!r} is not a release like 0.33.0")
        major, minor, patch = version.release
        firsts.append((major, minor, patch))
    return firsts


def _built_in() -> tuple[dict[str, Profile], list[tuple[tuple[int, int, int], Profile]]]:
    """Every file of :data:`BUILT_IN_DIR`, each read after its base."""
    documents = {path.stem: (path, _read(path)) for path in sorted(BUILT_IN_DIR.glob("*.toml"))}
    profiles: dict[str, Profile] = {}
    releases: list[tuple[tuple[int, int, int], Profile]] = []
    while len(profiles) < len(documents):
        ready = [
            name
            for name, (_, doc) in documents.items()
            if name not in profiles and doc.get("base", name) in {name, *profiles}
        ]
        if not ready:
            left = sorted(set(documents) - set(profiles))
            raise ProfileFileError(f"built-in profiles with a missing or circular base: {left}")
        for name in ready:
            path, doc = documents[name]
            profiles[name] = profile_from_document(name, doc, profiles, str(path))
            releases += [(first, profiles[name]) for first in _releases(str(path), doc)]
    return profiles, sorted(releases, key=lambda row: row[0])


_FILES, _RELEASES = _built_in()
_CHOSEN_FOR = [p.name for _, p in _RELEASES]
#: Every built-in profile by name: the seed, the vLLM releases' in release order, the rest.
PROFILES: dict[str, Profile] = {
    name: _FILES[name] for name in dict.fromkeys(["seed", *_CHOSEN_FOR, *sorted(_FILES)])
}
SEED = PROFILES["seed"]
#: vllm-mlx 0.6.0's ``PagedCacheManager`` and LMDeploy's ``LogicalAllocator``.
VLLM_MLX = PROFILES["vllm-mlx"]
LMDEPLOY = PROFILES["lmdeploy"]

#: (first release, profile): the profile of a release is the last row at or before it.
VLLM_RELEASES: tuple[tuple[tuple[int, int, int], Profile], ...] = tuple(_RELEASES)


def load_profile_file(path: Path) -> Profile:
    """The profile a user's file states (its base a built-in profile), named by its path."""
    if not path.is_file():
        raise ProfileFileError(f"{path}: no such profile file")
    document = _read(path)
    if "releases" in document:
        raise ProfileFileError(f"{path}: releases is for the built-in profiles only")
    return profile_from_document(str(path), document, PROFILES, str(path))


def get_profile(name: str) -> Profile:
    """The built-in profile called ``name``, or the profile of the file at path ``name``
    (``*.toml``); ``KeyError`` names the known ones, :class:`ProfileFileError` says what is
    wrong with a file."""
    if name in PROFILES:
        return PROFILES[name]
    if name.endswith(".toml"):
        return load_profile_file(Path(name).expanduser())
    known = ", ".join(sorted(PROFILES))
    raise KeyError(f"unknown profile {name!r}; known profiles: {known}, or a file NAME.toml")


def built_in_profile(name: str) -> Profile:
    """The built-in profile called ``name``: all a field of a trace or a vector may name (a
    field of a file is never read as a path; a profile file of the user's own comes from
    the command line). ``KeyError`` otherwise, naming the known profiles: the error does
    not repeat what the file holds."""
    if name in PROFILES:
        return PROFILES[name]
    raise KeyError(
        "the file names a profile that is not built in (a trace or vector names one of "
        f"{', '.join(sorted(PROFILES))}; a profile file of your own is named on the command "
        "line)"
    )


def profile_for_version(version: str) -> Profile:
    """The profile of vLLM release ``version`` (``"0.27.1"``, ``"0.34.0.dev118+g4ba787ec9"``).

    The last row of :data:`VLLM_RELEASES` at or before ``version`` in PEP 440's order, so a
    pre-release or development build of X.Y.Z is judged by the newest profile below X.Y.Z,
    and releases newer than the last measured one get the newest profile. ``ValueError``
    for a string PEP 440 does not write, or a release older than 0.10.1.
    """
    parsed = parse_version(version)
    chosen = None
    for first, profile in VLLM_RELEASES:
        if Version(".".join(map(str, first)), first).key() <= parsed.key():
            chosen = profile
    if chosen is None:
        raise ValueError(f"vLLM {version} is older than 0.10.1, the oldest release with a profile")
    return chosen
