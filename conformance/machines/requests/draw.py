"""Drawing request actions from the spec manager's current state.

Prompts start with a shared "system prompt" more often than not and use a tiny alphabet,
so requests hit each other's blocks, partial entries get hit, and pools run short (which
brings eviction, refused admissions and preemption). Every drawn action is inside the
scheduler's contract.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kvpool.spec import PoolConfig
from kvpool.spec.manager import (
    FULL,
    FULL_ATTENTION,
    INCREMENTAL,
    REPORT_MODES,
    Admit,
    Append,
    Compute,
    EvictCached,
    ExtraKeys,
    Finish,
    KVGroup,
    LoraAdapter,
    ManagerConfig,
    ManagerState,
    MultiModalFeature,
    Preempt,
    RequestAction,
    RequestState,
    ResetCache,
    Resume,
)

from ...search.choices import Choices
from .target import RequestSetup

#: The shared start of most prompts.
SYSTEM_PROMPT = (7, 1, 7, 2, 7, 3, 7, 4, 7, 5, 7, 6)
SALTS = (None, None, None, "tenant-b")
#: LoRA adapters: mostly none; two names, one of them loaded from two paths.
LORAS: tuple[LoraAdapter | None, ...] = (
    None,
    None,
    None,
    LoraAdapter("sql", "/adapters/sql-v1"),
    LoraAdapter("sql", "/adapters/sql-v2"),
    LoraAdapter("chat", "/adapters/chat"),
)
#: Multimodal identifiers and their lengths (an identifier hashes the content, so it
#: always spans the same number of placeholder tokens).
IMAGES = {"img-a": 2, "img-b": 3}
#: KV-cache group layouts: one or two full-attention groups, a hybrid, a sliding window
#: (each window's tokens past its whole blocks drawn with the block size: :func:`windows`).
LAYOUTS: tuple[tuple[KVGroup, ...], ...] = (
    (FULL_ATTENTION,),
    (FULL_ATTENTION,),
    (FULL_ATTENTION, FULL_ATTENTION),
    (FULL_ATTENTION, KVGroup(sliding_window_blocks=1)),
    (KVGroup(sliding_window_blocks=2),),
)


def windows(data: Choices, groups: tuple[KVGroup, ...], block_size: int) -> tuple[KVGroup, ...]:
    """``groups`` with each sliding window's size drawn: any token count from 2 up to one
    block past the layout's ``sliding_window_blocks`` (a window of ``w`` tokens is
    ``(w - 1) // block_size`` whole blocks and the rest). Real windows are any token count
    (4096 tokens over 16-token blocks is a whole number of blocks), and a window's block
    counts (the blocks a hit needs, the blocks it skips) are where rounding goes wrong.

    A window of at most one block frees a block's parent before the block is full, so its
    ``BlockStored`` may name a parent the stream already removed, as vLLM's does: the
    request machine judges ``events-parent-known`` only on the other groups
    (:meth:`~kvpool.spec.manager.ManagerConfig.parent_known_groups`)."""
    drawn = []
    for g in groups:
        if g.is_sliding:
            top = (g.sliding_window_blocks + 1) * block_size
            whole, rest = divmod(data.integer(2, top, "window tokens") - 1, block_size)
            g = replace(g, sliding_window_blocks=whole, sliding_window_rest=rest + 1)
        drawn.append(g)
    return tuple(drawn)


def request_setup(data: Choices, max_blocks: int) -> RequestSetup:
    """A small manager over a small pool."""
    hbs = data.choice([1, 2], "hash_block_size")
    block_size = hbs * data.choice([2, 2, 3], "hash blocks per block")
    groups = windows(data, data.choice(LAYOUTS, "groups"), block_size)
    pool = PoolConfig(
        num_gpu_blocks=data.integer(5, max(5, max_blocks), "num_gpu_blocks"),
        enable_caching=data.choice([True, True, True, False], "caching"),
        hash_block_size=hbs,
        enable_kv_cache_events=data.boolean("events"),
    )
    return RequestSetup(ManagerConfig(block_size, groups), pool)


@dataclass
class RequestContext:
    """What the drawing remembers beyond the spec state: the next request id, and the
    blocks that were the first of some request's table (to evict a prefix's head)."""

    next_id: int = 1
    #: Request id -> the first block of each of its tables, when it last had tables.
    heads: dict[str, set[int]] = field(default_factory=dict)
    #: The attributes besides the salt the run under test takes (the only ones drawn).
    extra_keys: frozenset[str] = frozenset()
    #: The report modes besides the default the run under test takes (the only ones drawn).
    report_modes: frozenset[str] = frozenset()

    def new_id(self) -> str:
        rid = f"r{self.next_id}"
        self.next_id += 1
        return rid

    def remember(self, state: ManagerState) -> None:
        """Note the first block of every running request's tables."""
        for rid, r in state.requests.items():
            if r.running:
                self.heads[rid] = {t[0] for t in r.tables if t and t[0]}


def running(state: ManagerState) -> list[str]:
    return sorted(rid for rid, r in state.requests.items() if r.running)


def preempted(state: ManagerState) -> list[str]:
    return sorted(rid for rid, r in state.requests.items() if not r.running)


def prompt(data: Choices) -> tuple[int, ...]:
    shared = data.choice([0, 3, 4, 6, 7], "shared prefix")
    rest = data.items([1, 2], 0, 4, "own tokens")
    tokens = SYSTEM_PROMPT[:shared] + tuple(rest)
    return tokens or (1,)


Drawer = Callable[[Choices, ManagerState, RequestContext], RequestAction]


def features(data: Choices, num_tokens: int) -> tuple[MultiModalFeature, ...]:
    """None, one or two images placed inside the prompt (disjoint, by offset); the same
    image often at the same place, so requests agree as often as they differ."""
    placed: list[MultiModalFeature] = []
    at = 0
    for _ in range(data.choice([0, 0, 1, 1, 2], "images")):
        image = data.choice(sorted(IMAGES), "image")
        length = IMAGES[image]
        if at + length > num_tokens:
            break
        offset = data.integer(at, min(at + 2, num_tokens - length), "offset")
        placed.append(MultiModalFeature(image, offset, length))
        at = offset + length
    return tuple(placed)


def extra_keys(data: Choices, tokens: tuple[int, ...], taken: frozenset[str]) -> ExtraKeys:
    """The request's LoRA adapter, images and prompt embeddings, as far as ``taken``:
    none at all for half the requests (so plain requests still share)."""
    if not data.boolean("extra keys"):
        return ExtraKeys()
    lora = data.choice(LORAS, "lora") if "lora-name" in taken else None
    mm = features(data, len(tokens)) if "mm-identifier" in taken else ()
    embeds = None
    if "prompt-embeds" in taken:
        shift = data.choice([None, None, 0, 10], "embeddings")
        embeds = None if shift is None else tuple(t + shift for t in tokens)
    return ExtraKeys(lora, mm, embeds)


def moved(
    data: Choices, mm: tuple[MultiModalFeature, ...], num_tokens: int, hash_block_size: int
) -> tuple[MultiModalFeature, ...]:
    """``mm`` with its last image at another place among ``num_tokens`` tokens: where
    there is one, a place covering the same hash blocks (the same image among the same
    placeholder blocks, which only the image's offset tells apart), else one token later
    (or earlier, where no later place fits)."""
    last = mm[-1]
    before = mm[-2].offset + mm[-2].length if len(mm) > 1 else 0

    def spans(offset: int) -> tuple[int, int]:
        return offset // hash_block_size, (offset + last.length - 1) // hash_block_size

    places = [
        o
        for o in range(before, num_tokens - last.length + 1)
        if o != last.offset and spans(o) == spans(last.offset)
    ]
    if places:
        offset = data.choice(places, "image place")
    else:
        offset = min(last.offset + 1, num_tokens - last.length)
        if offset == last.offset and last.offset > before:
            offset = last.offset - 1
    return (*mm[:-1], MultiModalFeature(last.identifier, offset, last.length))


def like(
    data: Choices, model: RequestState, taken: frozenset[str], hash_block_size: int
) -> tuple[tuple[int, ...], str | None, ExtraKeys]:
    """A prompt agreeing with ``model`` over a drawn prefix of its tokens, with its salt and
    attributes, or (half the time) with exactly one of them changed. An image is moved
    within the prefix kept, which then holds the model's last image (a shorter one would
    drop every image and leave nothing to move)."""
    changeable = ["cache-salt", *sorted(taken & {"lora-name", "mm-offset", "prompt-embeds"})]
    change = data.choice([None, *changeable], "attribute changed")
    extra = model.extra
    least = extra.mm[-1].offset + extra.mm[-1].length if change == "mm-offset" and extra.mm else 1
    keep = data.integer(least, len(model.tokens), "tokens kept")
    rest = data.items([1, 2], 0, 2, "own tokens")
    tokens = model.tokens[:keep] + tuple(rest)
    shift = None if extra.embeds is None else extra.embeds[0] - model.tokens[0]
    mm = tuple(f for f in extra.mm if f.offset + f.length <= len(tokens))
    salt, lora = model.salt, extra.lora
    if change == "cache-salt":
        salt = None if salt is not None else "tenant-b"
    elif change == "lora-name":
        lora = data.choice([a for a in LORAS if a != lora], "lora")
    elif change == "mm-offset" and mm:
        mm = moved(data, mm, len(tokens), hash_block_size)
    elif change == "prompt-embeds":
        shift = 10 if shift is None or shift == 0 else 0
    embeds = None if shift is None else tuple(t + shift for t in tokens)
    return tokens, salt, ExtraKeys(lora, mm, embeds)


def report_mode(data: Choices, ctx: RequestContext) -> str:
    """The request's report mode: either, where the run takes ``"full"``."""
    if FULL not in ctx.report_modes:
        return INCREMENTAL
    return data.choice(REPORT_MODES, "report mode")


def draw_admit(data: Choices, state: ManagerState, ctx: RequestContext) -> RequestAction:
    """A new request: half the time (where the run takes attributes) like a live one, so
    that requests agree in every attribute, or differ in exactly one, over a shared prefix;
    in either report mode where the run takes both."""
    models = sorted(state.requests)
    if ctx.extra_keys and models and data.boolean("like another"):
        model = state.requests[data.choice(models, "model")]
        tokens, salt, extra = like(data, model, ctx.extra_keys, state.pool_config.hash_block_size)
        return Admit(ctx.new_id(), tokens, salt, extra, report_mode(data, ctx))
    salt = data.choice(SALTS, "salt")
    tokens = prompt(data)
    extra = extra_keys(data, tokens, ctx.extra_keys) if ctx.extra_keys else ExtraKeys()
    return Admit(ctx.new_id(), tokens, salt, extra, report_mode(data, ctx))


def draw_append(data: Choices, state: ManagerState, ctx: RequestContext) -> RequestAction:
    rid = data.choice(running(state), "request")
    tokens = data.items([1, 2], 1, 3, "tokens")
    return Append(rid, tuple(tokens))


def draw_compute(data: Choices, state: ManagerState, ctx: RequestContext) -> RequestAction:
    rid = data.choice(running(state), "request")
    partial = not state.config.has_sliding_window and data.boolean("partial")
    return Compute(rid, cache_partial=partial)


def draw_preempt(data: Choices, state: ManagerState, ctx: RequestContext) -> RequestAction:
    return Preempt(data.choice(running(state), "request"))


def draw_resume(data: Choices, state: ManagerState, ctx: RequestContext) -> RequestAction:
    return Resume(data.choice(preempted(state), "request"))


def draw_finish(data: Choices, state: ManagerState, ctx: RequestContext) -> RequestAction:
    return Finish(data.choice(sorted(state.requests), "request"))


def draw_reset(data: Choices, state: ManagerState, ctx: RequestContext) -> RequestAction:
    return ResetCache()


def evictable(state: ManagerState) -> list[int]:
    """Blocks no request holds that were written (so likely still cached): a prefix's head
    among them leaves its later blocks cached behind a miss."""
    return sorted(set(state.contents) - state.held_blocks() - {0})


def draw_evict(data: Choices, state: ManagerState, ctx: RequestContext) -> RequestAction:
    """Half the time a block that was the head of a request's table, a preempted request's
    first (its resume looks the prefix up again), else the lowest (a fresh pool hands
    blocks out in id order): its loss must end every hit on that prefix there, although
    the prefix's later blocks stay cached."""
    candidates = evictable(state)
    if data.boolean("a head"):
        waiting = {b for rid in preempted(state) for b in ctx.heads.get(rid, ())}
        known = {b for blocks in ctx.heads.values() for b in blocks}
        heads = [b for b in candidates if b in waiting] or [b for b in candidates if b in known]
        heads = heads or candidates[:1]
        return EvictCached(block_ids=(data.choice(heads, "head"),))
    blocks = data.items(candidates, 1, 2, "blocks", unique=True)
    return EvictCached(block_ids=tuple(blocks))


def busy(state: ManagerState) -> bool:
    """Enough requests live that admitting more mostly meets a full pool."""
    return len(state.requests) >= 3
