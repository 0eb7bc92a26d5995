"""The optional hooks of a pool target, a manager target and a manager factory, each
declared once with its signature and meaning, and the check of a target against them.

A hook is read off a target by its name, so a misspelt one (``swap_in_cached``) would be
silently ignored: the suite would judge the target without the relaxation its author
meant. :func:`hook_problems` refuses that when the target is loaded (a usage error, exit 2,
naming the attribute): a hook declared with another signature or of another kind, and a
public attribute that is a near miss of a hook's name. A target that declares ``hooks``
(the names of the hooks it implements) is held to that list instead of the near-miss rule:
each name there must be a hook.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from typing import Any

#: How close (difflib's ratio) a public attribute's name must be to a hook's to be taken
#: for a misspelling of it.
NEAR_MISS = 0.85
#: The attribute a target may declare listing the hooks it implements.
DECLARED = "hooks"


@dataclass(frozen=True)
class Hook:
    """One optional hook."""

    name: str
    #: What the suite does with it (the extension API's words).
    meaning: str
    #: The arguments the suite calls it with, for a method; ``None`` for a value.
    called_with: tuple[str, ...] | None = None
    #: The types a value may have (``None`` is always allowed: the hook left unset).
    value_types: tuple[type, ...] = ()


POOL_TARGET = (
    Hook(
        "takes",
        "takes(action) -> bool: whether the pool's calls take this action's optional "
        "arguments (block_mask, replace_existing_hashes, ...); actions it does not take are "
        "never drawn for it",
        called_with=("action",),
    ),
    Hook(
        "version",
        "version: str: the release under test, written into traces and tables",
        value_types=(str,),
    ),
    Hook(
        "header_lines",
        "header_lines() -> list[str]: what the target inferred from the pool's names and "
        "where, printed in the run's header (the vLLM-API adapter's; a target that declares "
        "its operations and observables needs none)",
        called_with=(),
    ),
    Hook(
        "summary_lines",
        "summary_lines() -> list[str]: header_lines in short, printed for kvpool's own pools "
        "(impl, spec), whose names hold no surprise (--plan shows header_lines in full)",
        called_with=(),
    ),
    Hook(
        "plan",
        "plan(actions) -> None: the actions the runner applies next, when it knows them "
        "(a replay, a shrinking attempt, the steps a drawn test case draws ahead from the "
        "spec's predictions), so a target that can take several at once (the wire "
        "protocol's batches) sends them together; each still comes by apply, and the runner "
        "may apply others instead (None: the target takes one action at a time, and no step "
        "is drawn ahead for it)",
        called_with=("actions",),
    ),
)

#: What the factory of a pool with vLLM's ``BlockPool`` API may declare (``--target
#: module:factory``; the class, when the factory is the pool class).
POOL_FACTORY = (
    Hook(
        "kvpool_features_off",
        "kvpool_features_off: set[str]: features the suite would infer from the pool's "
        "names (foreign_pool, evict_first, ref_cnt, ...: "
        "kvpool.conformance.engines.vllm_api.features.FEATURES) declared off: never drawn "
        "or compared",
        value_types=(set, frozenset),
    ),
    Hook(
        "plan_first",
        "plan_first(actions) -> None: the actions the next pool it builds applies first (a "
        "replay's), so that a target taking several at once sends them with what starts its "
        "pool (the wire protocol's init)",
        called_with=("actions",),
    ),
    Hook(
        "plan_next",
        "plan_next(config, profile, actions) -> None: a pool it builds later, the next or "
        "after those said before (a replay of many sequences: its config, profile and first "
        "actions), so that a program can compute it while the suite judges those before "
        "(the wire protocol's init and first batch sent ahead)",
        called_with=("config", "profile", "actions"),
    ),
)

MANAGER_TARGET = (
    Hook(
        "allows",
        "allows(action) -> bool: whether the manager takes this request action (an older "
        "API without evict_blocks, say); actions it refuses are never drawn",
        called_with=("action",),
    ),
    Hook(
        "extra_keys_taken",
        "extra_keys_taken: frozenset[str]: the request attributes besides the salt it takes "
        "(only those are drawn)",
        value_types=(frozenset, set),
    ),
    Hook(
        "report_modes_taken",
        "report_modes_taken: frozenset[str]: the KV-cache report modes it takes with a request "
        "as admit(..., report_mode=...) ('incremental' and 'full': a full request's hits are "
        "published again at every lookup); only the default is drawn unless it says so",
        value_types=(frozenset, set),
    ),
    Hook(
        "registers_when_scheduled",
        "registers_when_scheduled: bool: it keys a block when it schedules it, before the "
        "engine writes it (a key then does not forbid the write)",
        value_types=(bool,),
    ),
    Hook(
        "swaps_in_cached",
        "swaps_in_cached: bool: it may replace a full table entry with the cached block of "
        "the same prefix (append-only lets exactly that pass)",
        value_types=(bool,),
    ),
    Hook(
        "keyed_tokens",
        "keyed_tokens(request_id) -> int: how many leading tokens of a request it has keyed, "
        "for a manager that keys decoded tokens only when a request finishes",
        called_with=("request_id",),
    ),
    Hook(
        "resets_only_without_requests",
        "resets_only_without_requests: bool: it refuses reset_prefix_cache while any request "
        "is live (idle-pool-free waits for none)",
        value_types=(bool,),
    ),
    Hook(
        "take_events",
        "take_events() -> list: the KV events it published since the last call (the events "
        "level judges them; a manager without it publishes none)",
        called_with=(),
    ),
)

MANAGER_FACTORY = (
    Hook("name", "name: str: how tables and traces name the manager", value_types=(str,)),
    Hook(
        "checked_by_properties",
        "checked_by_properties: bool: judge the manager by the request-level properties "
        "alone, not step by step against the spec's manager (for by-design differences: keys "
        "at scheduling time, a hit over the whole prompt, ...)",
        value_types=(bool,),
    ),
    Hook(
        "supported_setup",
        "supported_setup(setup) -> RequestSetup: the setup its managers are built for, "
        "narrowed from the drawn one (a property-checked manager's)",
        called_with=("setup",),
    ),
    Hook(
        "fit_setup",
        "fit_setup(setup) -> RequestSetup: the same for a manager checked step by step (the "
        "spec's manager is then built for the fitted setup too)",
        called_with=("setup",),
    ),
)


#: What an engine driver's factory may declare (``--machine engine --target
#: module:factory``).
ENGINE_FACTORY = (
    Hook(
        "block_size",
        "block_size: int: the block size every engine it builds has (an engine built for "
        "one page size): the machine draws its test cases with it",
        value_types=(int,),
    ),
)


#: What a consumer (protocol 2 router, :mod:`.consumers.router`) may declare beyond its
#: ``name``, ``protocol`` and ``credited(prompt)``.
ROUTER = (
    Hook(
        "feeds",
        "feeds: str: 'process' (the suite calls apply) or 'wire' (it subscribes to the "
        "publisher and replay endpoints start is given)",
        value_types=(str,),
    ),
    Hook(
        "resets",
        "resets: str: how it is emptied between test cases: 'clear' (an AllBlocksCleared on "
        "the stream) or 'new-worker' (closed and started on a new worker)",
        value_types=(str,),
    ),
    Hook(
        "ranks",
        "ranks: str: 'per-rank' (a view per data-parallel rank), 'one-worker' (ranks are "
        "endpoints of one worker, compared with the best rank) or 'picks-rank' (it credits "
        "the one rank it routes a prompt to)",
        value_types=(str,),
    ),
    Hook(
        "groups",
        "groups: tuple[int, ...]: the groups its lookups name (a token-only router asks one "
        "group); prefixes of other groups are not asked",
        value_types=(tuple, frozenset),
    ),
    Hook(
        "start",
        "start(wire) -> None: called once before the stream, with the Wire (publisher and "
        "replay endpoints per rank, block size, model)",
        called_with=("wire",),
    ),
    Hook(
        "apply",
        "apply(events, rank) -> None: the next events of rank's stream, in order (fed in "
        "process only)",
        called_with=("events", "rank"),
    ),
    Hook(
        "applied",
        "applied() -> Mapping[int, int]: per rank, the sequence number of the last batch "
        "it applied (the watermark the suite waits on before it asks)",
        called_with=(),
    ),
    Hook(
        "close",
        "close() -> None: called once after the stream; stops what it started",
        called_with=(),
    ),
)


def hook_problems(
    obj: object, hooks: tuple[Hook, ...], members: frozenset[str], what: str
) -> list[str]:
    """What is wrong with ``obj`` (a target, its class, or a factory) against ``hooks``:
    each message names the attribute. ``members`` are the names its protocol defines (never
    taken for hooks); ``what`` says what ``obj`` is, for the messages."""
    known = {hook.name: hook for hook in hooks}
    problems = []
    for hook in hooks:
        if hasattr(obj, hook.name):
            problem = _hook_problem(obj, hook)
            if problem is not None:
                problems.append(f"{what}'s hook {hook.name}: {problem}; it is {hook.meaning}")
    declared = getattr(obj, DECLARED, None)
    if declared is not None:
        for name in sorted(set(declared) - set(known)):
            problems.append(f"{what} declares the hook {name!r}, which is no hook: {_hooks(known)}")
        return problems
    for name in sorted(_public_names(obj) - set(known) - members - {DECLARED}):
        close = difflib.get_close_matches(name, known, n=1, cutoff=NEAR_MISS)
        if close:
            problems.append(
                f"{what} has {name!r}, which is no hook: did you mean {close[0]!r}? (a "
                f"misspelt hook is never read; list the hooks it implements in {DECLARED!r} "
                "if the name is meant)"
            )
    return problems


def _hooks(known: dict[str, Hook]) -> str:
    return "the hooks are " + ", ".join(known)


def _public_names(obj: object) -> set[str]:
    names = set(dir(obj))
    if not isinstance(obj, type):
        names |= set(getattr(obj, "__dict__", {}))
    return {n for n in names if not n.startswith("_")}


def _hook_problem(obj: object, hook: Hook) -> str | None:
    """Why ``obj``'s ``hook`` is not what the suite reads, or ``None``."""
    raw = inspect.getattr_static(obj, hook.name, None)
    if isinstance(raw, property):
        return None  # read on an instance, not on its class
    value = getattr(obj, hook.name)
    if hook.called_with is None:
        if callable(value) and not isinstance(value, type):
            return "it is a method, but the suite reads it as a value"
        if value is None or not hook.value_types or isinstance(value, hook.value_types):
            return None
        kinds = " or ".join(t.__name__ for t in hook.value_types)
        return f"it is a {type(value).__name__}, but the suite reads a {kinds}"
    if not callable(value):
        return f"it is a {type(value).__name__}, but the suite calls it"
    arguments: tuple[object, ...] = hook.called_with
    if isinstance(obj, type) and inspect.isfunction(raw):
        arguments = ("self", *arguments)  # a method read off its class: unbound
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return None  # a signature that cannot be read is taken on trust
    try:
        signature.bind(*arguments)
    except TypeError as exc:
        call = f"{hook.name}({', '.join(hook.called_with)})"
        return f"its signature is {hook.name}{signature}, but the suite calls {call} ({exc})"
    return None


def _members(protocol: type) -> frozenset[str]:
    """The public names a protocol class defines (its attributes and methods)."""
    names = set(vars(protocol)) | set(getattr(protocol, "__annotations__", {}))
    return frozenset(n for n in names if not n.startswith("_"))


def pool_target_problems(target: object) -> list[str]:
    """``target`` (a built pool target) against the pool target's hooks."""
    from .machines.pool.target import Target

    what = f"the Target {type(target).__name__}"
    return hook_problems(target, POOL_TARGET, _members(Target), what)


def manager_target_problems(target: object) -> list[str]:
    """``target`` (a built manager target) against the manager target's hooks."""
    from .machines.requests.target import ManagerTarget

    what = f"the manager target {type(target).__name__}"
    return hook_problems(target, MANAGER_TARGET, _members(ManagerTarget), what)


def manager_factory_problems(factory: Any) -> list[str]:
    """``factory`` (what ``--manager`` loaded) against the factory's hooks; a class that is
    its own factory against the manager target's too."""
    from .machines.requests.target import ManagerTarget

    if isinstance(factory, type):
        what = f"the manager target class {factory.__name__}"
        hooks = (*MANAGER_TARGET, *MANAGER_FACTORY)
        return hook_problems(factory, hooks, _members(ManagerTarget), what)
    what = f"the manager factory {getattr(factory, '__name__', type(factory).__name__)}"
    return hook_problems(factory, MANAGER_FACTORY, frozenset(), what)


def engine_factory_problems(factory: object) -> list[str]:
    """What is wrong with an engine driver's factory against :data:`ENGINE_FACTORY`."""
    return hook_problems(factory, ENGINE_FACTORY, frozenset(), "the engine factory")


def router_problems(router: object) -> list[str]:
    """``router`` (a built protocol 2 consumer) against the router's hooks."""
    members = frozenset({"name", "protocol", "credited"})
    return hook_problems(router, ROUTER, members, f"the router {type(router).__name__}")
