"""Drawing the engine machine's test cases: an engine setup, then the clients' and the
model's actions, each drawn from what the run has seen so far.

The clients send new prompts, prompts opening with one of a few shared system prompts, the
next turns of finished sessions (their prompt and answer, then a new message), long
prompts, repeats under another salt, bursts of several at once, and aborts at any point;
the model stops a request early now and then. Bursts of long prompts on a small cache are
what make an engine preempt.
"""

from __future__ import annotations

from ...search.choices import Choices
from .actions import Abort, Arrive, EngineAction, Flush, RunStep
from .driver import EngineSetup
from .engine_run import EngineRun

#: Engines are drawn with at least this many blocks (the null block included).
ENGINE_MIN_BLOCKS = 8
#: The shared system prompts a prompt may open with.
SYSTEM_PROMPTS = ((5, 6, 7, 8, 5, 6, 7, 8, 9), (9, 8, 7, 6, 5, 9, 8))
SALTS = (None, None, "s1", "s2")
VOCABULARY = (1, 2, 3, 4)


def engine_setup(choices: Choices, max_blocks: int) -> EngineSetup:
    """A KV cache and a batch budget."""
    block_size = choices.choice((2, 4), "block size")
    num_blocks = choices.integer(ENGINE_MIN_BLOCKS, max(ENGINE_MIN_BLOCKS, max_blocks), "blocks")
    batch_tokens = choices.choice((2 * block_size, 4 * block_size, 32), "batch tokens")
    batch_size = choices.integer(1, 4, "batch size")
    return EngineSetup(num_blocks, block_size, batch_tokens, batch_size)


def next_actions(choices: Choices, run: EngineRun) -> list[EngineAction]:
    """The next action (several for a burst of arrivals), weighted by the run's state."""
    live = len(run.clients)
    kinds = [
        ("arrive", 4 if live < 4 else 1),
        ("burst", 1),
        ("step", 8 if live else 1),
        ("abort", 1 if live and "abort" in run.can else 0),
        ("flush", 1 if not live and "flush" in run.can else 0),
    ]
    kind = choices.weighted(kinds, "engine action")
    if kind == "arrive":
        return [arrival(choices, run, 0)]
    if kind == "burst":
        count = choices.integer(2, 4, "burst size")
        return [arrival(choices, run, i) for i in range(count)]
    if kind == "abort":
        return [Abort(choices.choice(sorted(run.clients), "aborted"))]
    if kind == "flush":
        return [Flush()]
    running = sorted(r for r, c in run.clients.items() if c.status == "running")
    stops = choices.items(running, 0, 1, "stops") if choices.integer(0, 3, "stop?") == 0 else []
    return [RunStep(tuple(stops))]


def arrival(choices: Choices, run: EngineRun, offset: int) -> Arrive:
    """One request: its prompt (of a kind drawn), salt and answer length; ``offset``
    numbers the arrivals of one burst."""
    setup = run.setup
    room = (setup.num_blocks - 1) * setup.block_size
    max_new = choices.integer(1, 5, "max new tokens")
    longest = max(2, room - max_new - setup.block_size)
    kind = choices.weighted(
        [("new", 3), ("system", 3), ("session", 3 if run.finished else 0), ("long", 1)],
        "prompt kind",
    )
    salt = choices.choice(SALTS, "salt") if "salts" in run.can else None
    if kind == "session":
        previous, salt = choices.choice(run.finished, "session")  # the session's salt
        prompt = previous + fresh_tokens(choices, 1, setup.block_size + 1)
    elif kind == "system":
        system = choices.choice(SYSTEM_PROMPTS, "system prompt")
        prompt = system + fresh_tokens(choices, 1, 2 * setup.block_size)
    elif kind == "long":
        prompt = fresh_tokens(choices, room // 2, longest)
    else:
        prompt = fresh_tokens(choices, 1, 3 * setup.block_size)
    rid = f"r{len(run.sent) + offset + 1}"
    return Arrive(rid, prompt[:longest], salt, max_new)


def fresh_tokens(choices: Choices, low: int, high: int) -> tuple[int, ...]:
    """Between ``low`` and ``high`` tokens of the model's small vocabulary."""
    length = choices.integer(low, max(low, high), "prompt length")
    return tuple(choices.items(VOCABULARY, length, length, "tokens"))
