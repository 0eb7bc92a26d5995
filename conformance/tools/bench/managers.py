"""The request workload through two KV cache managers: ours beside a vLLM release's own.

``kvpool bench --manager vllm`` benchmarks the manager, not only the pool under it. The
suite's serving workload (shared system prompts, multi-turn sessions, preemption) is
written down once as request actions (:func:`record`, run through our manager), then the
very same actions are replayed on a fresh manager of each kind:

- ours: :class:`kvpool.impl.KVCacheManager` (through the suite's manager adapter);
- vLLM's: the release's ``KVCacheManager`` with its coordinator and single-type manager,
  driven with the calls vLLM's scheduler makes (:mod:`..targets.vllm.manager_target`).

Both are built for one full-attention group with ``block_size == hash_block_size`` (16),
the one shape every vLLM release's single-group coordinator takes. Both sides hash the
tokens (ours inside ``admit`` / ``append``; vLLM's in its request, with the release's own
block hasher, as vLLM's engine does when a request arrives or grows), and both answer
each scheduling call with the request's block tables, so the timed work is the same on
each side: everything between the scheduler's decision and the tables it sends to the
workers.

:func:`verify` replays the actions on both side by side and compares every answer (block
tables, computed tokens, copies) and the free block count after every step; the first
step where they differ is returned, naming the step and the request. Only verified
programs are timed (:func:`time_once`), as the pool bench does: a fresh manager per run,
built and compiled untimed, the garbage collector off, the process's CPU time as clock.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvpool.spec import PoolConfig, Profile
from kvpool.spec.manager import (
    Admit,
    Append,
    ManagerConfig,
    ManagerResult,
    RequestAction,
    Scheduled,
)

from ...machines.requests.operations import named
from ...machines.requests.target import ManagerTarget, RequestSetup
from .measure import collector_off

if TYPE_CHECKING:
    from kvpool.impl.release_hashing import ReleaseHashing

    from ...targets.description import TargetDescription

#: The managers' block size; vLLM's single-group coordinator needs the hash block size
#: equal to it.
BLOCK_SIZE = 16
#: The two timings of each program: every step as it is, and with each manager's block
#: digests computed beforehand (a dict lookup per block hash), which leaves the manager's
#: own work (and its walk over the blocks to hash).
WORKLOAD = "requests"
PRECOMPUTED = "requests, prehashed"
#: The long-prompt workload (8k to 128k tokens, shared 8k-token prefixes), where hashing
#: is most of the work; it runs only on pools its longest prompt fits in.
LONG = "long prompts"
LONG_PRECOMPUTED = "long prompts, prehashed"
#: Ours hashing with the spec's canonical encoding (its default) against vLLM hashing its
#: own way: the reference path, reported beside the like-for-like rows.
SPEC_HASHED = "requests, ours on the spec's hashing"
LONG_SPEC_HASHED = "long prompts, ours on the spec's hashing"
#: Each program (the workload it runs) and the labels of its timings: both managers
#: hashing with the release's function, both prehashed, ours on the spec's hashing.
PROGRAMS = {
    WORKLOAD: (WORKLOAD, PRECOMPUTED, SPEC_HASHED),
    LONG: (LONG, LONG_PRECOMPUTED, LONG_SPEC_HASHED),
}
WORKLOADS = (WORKLOAD, PRECOMPUTED, SPEC_HASHED, LONG, LONG_PRECOMPUTED, LONG_SPEC_HASHED)
#: The smallest pool the long prompts run on: room for the longest prompt and its output.
LONG_MIN_BLOCKS = 8_200
#: The long prompts' steps are this fraction of ``--ops`` (each admission hashes up to
#: 8,192 blocks).
LONG_STEPS_DIVISOR = 20
#: What the report says it timed.
TIMING = (
    "request steps (admit, resume, append, compute, preempt, finish) per CPU second, "
    "each step's answer being the request's block tables; 'requests' and 'long prompts' "
    "include hashing the tokens with the release's default hash function, byte for byte "
    "the same block hashes on both sides (ours in admit/append, vLLM's in its request's "
    "block hasher); '..., prehashed' hands each manager its own block digests, computed "
    "beforehand, from a dict; '..., ours on the spec's hashing' times ours hashing with "
    "the spec's canonical encoding against vLLM hashing its own way"
)

#: What a step answers: the request's tables, or ``None`` (no room; nothing changed); the
#: workload has no reset, so never a reset's verdict.
Answer = ManagerResult
#: A compiled step: a function and its arguments (the target first).
Compiled = tuple[Callable[..., Answer], tuple[Any, ...]]


@dataclass
class RequestProgram:
    """The request workload as request actions, replayable on any manager target."""

    num_gpu_blocks: int
    block_size: int = BLOCK_SIZE
    actions: list[RequestAction] = field(default_factory=list)
    workload: str = WORKLOAD

    @property
    def setup(self) -> RequestSetup:
        """The manager both sides build: one full-attention group, caching on, no events."""
        pool = PoolConfig(
            self.num_gpu_blocks,
            enable_caching=True,
            hash_block_size=self.block_size,
            enable_kv_cache_events=False,
        )
        return RequestSetup(ManagerConfig(self.block_size), pool)

    def fingerprint(self) -> str:
        """A digest of every action (equal programs have equal fingerprints)."""
        digest = hashlib.sha256()
        for action in self.actions:
            digest.update(repr(action).encode())
        return digest.hexdigest()[:16]


#: A block hash function: the hash input (parent hash, tokens, extra keys) -> its digest.
HashFunction = Callable[[Any], bytes]


def _no_hashes(target: Any, request_id: str) -> list[bytes] | None:
    return None


@dataclass(frozen=True)
class ManagerContender:
    """A KV cache manager to measure: how to build one for a setup (with its own hash
    function, or with the one given), how to read its pool's free block count cheaply
    (verification reads it after every step) and a request's block hashes (compared after
    every step between contenders of one ``hashing``)."""

    name: str
    make: Callable[[RequestSetup, HashFunction | None], ManagerTarget]
    #: The hash function it uses unless given another.
    hash_function: HashFunction
    free_count: Callable[[ManagerTarget], int] = field(
        default=lambda target: target.view().free_count
    )
    #: Which block hashes it computes (``vllm-0.33.0:sha256``, say): contenders with the
    #: same one must compute the same bytes; ``None`` compares none.
    hashing: str | None = None
    block_hashes: Callable[[Any, str], list[bytes] | None] = _no_hashes


def pool_free_count(target: Any) -> int:
    """The free count of the pool under a target that keeps its manager as ``manager``
    (both of the bench's), without building a whole view."""
    return int(target.manager.block_pool.get_num_free_blocks())


def our_hashes(target: Any, request_id: str) -> list[bytes] | None:
    """The block hashes of a request our manager holds (``None`` if it holds none)."""
    held = target.manager.requests.get(request_id)
    return None if held is None else list(held.request.block_hashes)


def vllm_hashes(target: Any, request_id: str) -> list[bytes] | None:
    """The block hashes of a request vLLM's manager target holds."""
    held = target.requests.get(request_id)
    return None if held is None else list(map(bytes, held.block_hashes))


def ours(profile: Profile, hashing: ReleaseHashing | None = None) -> ManagerContender:
    """Our ``KVCacheManager`` (its pool read under ``profile``, outside any timing),
    hashing as the spec does, or as ``hashing`` (a vLLM release's) says."""
    from ...engines.builtin.impl_manager import ManagerApiTarget, build_impl_manager

    def make(setup: RequestSetup, hash_function: HashFunction | None) -> ManagerTarget:
        from kvpool.impl import KVCacheManager

        manager = build_impl_manager(KVCacheManager, setup, hashing)
        if hash_function is not None:
            manager.hash_function = hash_function
        return ManagerApiTarget(manager, setup, profile, "ours")

    from kvpool.impl.hashing import sha256_hash

    if hashing is None:
        return ManagerContender(
            "ours KVCacheManager, spec's hashing",
            make,
            sha256_hash,
            pool_free_count,
            "spec",
            our_hashes,
        )
    return ManagerContender(
        "ours KVCacheManager", make, hashing.digest, pool_free_count, hashing.name, our_hashes
    )


@dataclass(frozen=True)
class VllmManager:
    """A vLLM release's manager to measure, its profile, and the release's block hashing
    as our manager computes it (:func:`~kvpool.impl.release_hashing.vllm_hashing`)."""

    contender: ManagerContender
    profile: Profile
    hashing: ReleaseHashing


def release_version(spec: TargetDescription | str, profile: Profile) -> str:
    """The release ``spec`` names (``vllm==X.Y.Z``); for a tree, its profile's (``0.33``)."""
    from ...targets.description import read_target_text

    described = read_target_text(spec) if isinstance(spec, str) else spec
    if described.version:
        return described.version
    return profile.name.removeprefix("vllm-")


def vllm(spec: TargetDescription | str) -> VllmManager:
    """The ``KVCacheManager`` of the vLLM release ``spec`` names (``vllm==X.Y.Z``,
    ``vllm@PATH``, ``vllm``), loaded as ``kvpool conform --manager vllm`` loads it, the
    release's profile (both sides' pools are read under it) and its hashing. One
    ``NONE_HASH`` serves every manager built (vLLM's engine sets it once per process)."""
    from kvpool.impl.release_hashing import vllm_hashing
    from kvpool.spec import get_profile

    from ...engines.vllm.manager_api import HASH_ALGORITHM
    from ...engines.vllm.manager_target import VllmManagerTarget
    from ...targets.loading import choose_profile, load_manager

    factory, _ = load_manager("vllm", spec)
    assert factory is not None
    profile = get_profile(choose_profile(spec).name)
    fit = getattr(factory, "fit_setup", lambda setup: setup)
    pinned: list[bytes] = []

    def make(setup: RequestSetup, hash_function: HashFunction | None) -> ManagerTarget:
        if fit(setup) != setup:  # the bench's setup is one every release builds as it is
            raise ValueError(f"vLLM's manager cannot be built for {setup} as it is")
        target = factory(setup, profile)
        assert isinstance(target, VllmManagerTarget)
        if pinned:
            target.pin_none_hash(pinned[0])
        if hash_function is not None:
            target.use_hash_function(hash_function)
        return target

    probe = make(RequestProgram(64).setup, None)
    assert isinstance(probe, VllmManagerTarget)
    pinned.append(probe.none_hash)
    version = release_version(spec, profile)
    try:  # derived as the release derives it, where it can be
        hashing = vllm_hashing(version, HASH_ALGORITHM)
    except ValueError:  # random per process (or a release not checked): the release's own
        hashing = vllm_hashing(version, HASH_ALGORITHM, none_hash=probe.none_hash)
    contender = ManagerContender(
        probe.name, make, probe.hash_function, pool_free_count, hashing.name, vllm_hashes
    )
    return VllmManager(contender, profile, hashing)


class Digests:
    """A contender's block digests, recorded while a program runs (:meth:`recording`),
    then handed back by a dict lookup (:meth:`lookup`): the same program runs again with
    the hashing done beforehand, so its time is the manager's own."""

    def __init__(self, hash_function: HashFunction) -> None:
        self.hash_function = hash_function
        self.known: dict[Any, bytes] = {}

    def recording(self, value: Any) -> bytes:
        digest = self.known[value] = self.hash_function(value)
        return digest

    @property
    def lookup(self) -> HashFunction:
        return self.known.__getitem__


# ------------------------------------------------------------------ one step, per action


def compile_action(target: ManagerTarget, action: RequestAction) -> Compiled:
    """``action`` as one function call on ``target`` (the calls a scheduler step makes: its
    record's ``bare`` drive in the request table)."""
    bare = named(action.operation).bare
    if bare is None:
        raise ValueError(f"the request workload has no {action.operation} step")
    return bare, (target, action)


def step(target: ManagerTarget, action: RequestAction) -> Answer:
    """Run one request action on ``target``; what it answers."""
    fn, args = compile_action(target, action)
    return fn(*args)


# ------------------------------------------------------------------ the workload


def record(
    num_gpu_blocks: int,
    ops: int,
    seed: int = 0,
    contender: ManagerContender | None = None,
    workload: str = WORKLOAD,
) -> RequestProgram:
    """The first ``ops`` request actions of ``workload`` (the serving workload, or
    :data:`LONG`), as decided by running it on ``contender`` (our manager, under the seed
    profile, unless told otherwise)."""
    from kvpool.conformance.machines.requests.workload import Workload
    from kvpool.spec import get_profile

    from .programs import long_prompt_workload, request_workload

    if workload not in PROGRAMS:
        raise ValueError(f"no manager workload {workload!r}: one of {sorted(PROGRAMS)}")
    prog = RequestProgram(num_gpu_blocks, workload=workload)
    chosen = contender if contender is not None else ours(get_profile("seed"))
    target = chosen.make(prog.setup, None)
    # The pool bench's request workload, with no partial entries: with the hash block as
    # large as a block, a block's tail is never a whole hash block, so there are none.
    if workload == LONG:
        params = long_prompt_workload(seed)
    else:
        params = request_workload(seed, partial_entries=False)

    class Done(Exception):
        pass

    def apply(action: RequestAction) -> Answer:
        prog.actions.append(action)
        result = step(target, action)
        if len(prog.actions) >= ops:
            raise Done
        return result

    with contextlib.suppress(Done):
        Workload(params).run(apply)
    return prog


# ------------------------------------------------------------------ verification


def show(answer: Answer | str) -> str:
    if isinstance(answer, Scheduled):
        tables = " | ".join(str(list(t)) for t in answer.tables)
        copies = f", copies {list(answer.copies)}" if answer.copies else ""
        return f"{answer.num_computed_tokens} tokens computed, tables {tables}{copies}"
    return repr(answer)


def _describe(action: RequestAction) -> str:
    detail = ""
    if isinstance(action, Admit | Append):
        detail = f" ({len(action.tokens)} tokens)"
    return f"{action.operation} of request {action.request_id!r}{detail}"


@dataclass(frozen=True)
class StepDisagreement:
    """The first step at which the managers answered differently."""

    num_gpu_blocks: int
    #: The step's index in the program (0-based) and its action.
    index: int
    action: RequestAction
    #: What each manager answered (tables, ``None``, the free count or an exception).
    answers: dict[str, str]
    what: str = "answers"
    workload: str = WORKLOAD

    def describe(self) -> str:
        shown = "; ".join(f"{name} -> {answer}" for name, answer in self.answers.items())
        return (
            f"{self.workload} (managers) @ {self.num_gpu_blocks} blocks, step {self.index} "
            f"{_describe(self.action)}: {self.what} differ: {shown}"
        )


def _answer(target: ManagerTarget, action: RequestAction) -> Answer | str:
    try:
        return step(target, action)
    except Exception as exc:  # a manager refusing a step the other takes
        return f"raised {type(exc).__name__}: {exc}"


#: The parts of the pools' views compared once the program has run (where both show them).
END_VIEW = ("free_queue", "ref_cnt", "keys")


def verify(
    prog: RequestProgram,
    contenders: Sequence[ManagerContender],
    digests: Sequence[Digests | None] | None = None,
) -> StepDisagreement | None:
    """Replay ``prog`` on a fresh manager of each contender, step by step, side by side;
    the first step whose answers (block tables, computed tokens, copies), free block
    counts or, between contenders of one ``hashing``, the step's request's block hashes
    differ, or ``None``. Once every step has run, the pools' free queues, reference counts
    and keys are compared too (where both show them). With ``digests`` (one per contender,
    or ``None``) each contender's hashing is recorded on the way."""
    hashing: list[HashFunction | None] = [
        None if d is None else d.recording for d in (digests or [None] * len(contenders))
    ]
    targets = [c.make(prog.setup, h) for c, h in zip(contenders, hashing, strict=True)]
    named = list(zip(contenders, targets, strict=True))
    alike = [
        [(c, t) for c, t in named if c.hashing == label]
        for label in dict.fromkeys(c.hashing for c in contenders if c.hashing is not None)
    ]
    alike = [group for group in alike if len(group) > 1]
    for i, action in enumerate(prog.actions):
        answers = [_answer(t, action) for t in targets]
        if any(a != answers[0] for a in answers[1:]):
            said = {c.name: show(a) for c, a in zip(contenders, answers, strict=True)}
            return StepDisagreement(prog.num_gpu_blocks, i, action, said, workload=prog.workload)
        free = [c.free_count(t) for c, t in zip(contenders, targets, strict=True)]
        if any(f != free[0] for f in free[1:]):
            counts = {c.name: str(f) for c, f in zip(contenders, free, strict=True)}
            return StepDisagreement(
                prog.num_gpu_blocks, i, action, counts, "free block counts", prog.workload
            )
        for group in alike:
            hashes = [c.block_hashes(t, action.request_id) for c, t in group]
            if None in hashes or all(h == hashes[0] for h in hashes[1:]):
                continue
            first = hashes[0]
            assert first is not None
            shown = {
                c.name: _first_hash_difference(h or [], first)
                for (c, _), h in zip(group, hashes, strict=True)
            }
            return StepDisagreement(
                prog.num_gpu_blocks, i, action, shown, "block hashes", prog.workload
            )
    views = [t.view() for t in targets]
    for part in END_VIEW:
        shown_parts = [getattr(v, part) for v in views]
        if None not in shown_parts and any(s != shown_parts[0] for s in shown_parts[1:]):
            last = len(prog.actions) - 1
            different = {
                c.name: _first_difference(s, shown_parts[0])
                for c, s in zip(contenders, shown_parts, strict=True)
            }
            return StepDisagreement(
                prog.num_gpu_blocks,
                last,
                prog.actions[last],
                different,
                f"pools' {part}",
                prog.workload,
            )
    return None


def _first_hash_difference(hashes: Sequence[bytes], first: Sequence[bytes]) -> str:
    """Where a request's block hashes first differ from ``first``: the block and its hash."""
    for i, (h, f) in enumerate(zip(hashes, first, strict=False)):
        if h != f:
            return f"block {i} hash {h.hex()[:16]}..."
    return f"{len(hashes)} hashes"


def _first_difference(values: Sequence[Any], first: Sequence[Any]) -> str:
    """Where ``values`` first differs from ``first``: the index and the value there."""
    for i, (v, f) in enumerate(zip(values, first, strict=False)):
        if v != f:
            return f"[{i}] = {v!r}"
    return f"{len(values)} entries"


# ------------------------------------------------------------------ timing


def time_once(
    prog: RequestProgram, contender: ManagerContender, hash_function: HashFunction | None = None
) -> float:
    """CPU seconds for ``prog``'s steps on a fresh manager (built and compiled untimed),
    hashing with ``hash_function`` (:attr:`Digests.lookup`, say) if given."""
    with collector_off():
        target = contender.make(prog.setup, hash_function)
        calls = [compile_action(target, action) for action in prog.actions]
        clock = time.process_time
        start = clock()
        for fn, args in calls:
            fn(*args)
        elapsed = clock() - start
        del target, calls
    return elapsed
