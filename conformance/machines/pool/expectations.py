"""A target's known findings, read from a file: the run goes on past each one.

Web-platform-tests keeps one expectations file per implementation; so does kvpool. Each
entry names the rule a known finding breaks (its rule, invariant or property id, or the
kind of difference the finding reports, e.g. ``after free_blocks: free queue order``), the
situation in words, and the upstream link. A step whose first difference (its root: the
other differences of that step follow from it) matches an entry is reported as expected:
the spec takes the target's behaviour for that one rule (it adopts the target's free queue
and reference counts, as the safety level adopts its choice of blocks) and the test case
goes on, so a second bug behind the first is still found. A state the spec cannot adopt
(hidden, or breaking the spec's invariants) ends that test case, counted as such. An entry
that no run meets, and every finding no entry matches, fail the run.

The file is data (TOML or JSON, chosen by its suffix), read by a total reader: any input
gives either expectations or one :class:`ExpectationsError` naming the entry and field.

.. code-block:: toml

    target = "vllm==0.10.2"              # what the file describes (shown, not checked)

    [[expected]]
    rule = "free-held"                   # the rule id (or the finding's kind)
    operation = "free_blocks"            # optional: only on this operation
    level = "robustness"                 # optional: only at this level
    text = "but held 1"                  # optional: a pattern the message holds (* any run)
    rare = false                         # optional: true if a run may not meet it
    situation = "free_blocks([b, b]) on a block held once queues it twice"
    upstream = "https://github.com/vllm-project/vllm/issues/42571"
"""

from __future__ import annotations

import json
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvpool.spec.files import UnreadableFile, read_regular_text

from .signature import signature

#: Bounds of what the reader accepts: a file of known findings is small.
MAX_BYTES = 1_000_000
MAX_ENTRIES = 1_000
MAX_TEXT = 2_000
#: Patterns in one entry's ``text``, and ``*`` in one pattern.
MAX_PATTERNS = 16
MAX_STARS = 16

FIELDS = ("rule", "situation", "upstream", "operation", "level", "text")
#: A flag: the finding is rare at the usual settings, so a run that does not meet it passes.
FLAGS = ("rare",)
REQUIRED = ("rule", "situation", "upstream")

_NAMED = re.compile(r"(?:rule|invariant|property) '([a-z0-9-]+)'")


class ExpectationsError(Exception):
    """An expectations file that cannot be read; the message names the file and the entry."""


@dataclass(frozen=True)
class Expectation:
    """One known finding of a target."""

    rule: str
    situation: str
    upstream: str
    operation: str | None = None
    level: str | None = None
    #: Patterns, one of which the finding's message must hold, to tell one situation from
    #: another under the same rule (``maps to blocks [*, 0]*, expected``: the null block in
    #: the index): each is literal text in which ``*`` stands for any run of characters
    #: (:func:`holds`); never a regular expression, so no pattern can make a match slow.
    text: tuple[str, ...] | None = None
    #: Rare at the usual settings: a run that does not meet it still passes (like a
    #: web-platform-tests expectation of several statuses).
    rare: bool = False

    def matches(self, message: str, level: str) -> bool:
        """Whether the finding ``message`` at ``level`` is this one: its first named rule
        (the root, reported first) or its kind is :attr:`rule`, on :attr:`operation`."""
        if self.level is not None and self.level != level:
            return False
        if self.text is not None and not any(holds(message, p) for p in self.text):
            return False
        kind = signature(message)
        if self.operation is not None and not re.match(
            rf"(after )?{re.escape(self.operation)}\b", kind
        ):
            return False
        named = _NAMED.search(message)
        return (named is not None and named.group(1) == self.rule) or kind == self.rule


@dataclass
class Expectations:
    """The known findings of one target, with how often each run met each one."""

    entries: tuple[Expectation, ...]
    source: str = "expectations"
    #: Times each entry was met, by its place in :attr:`entries`.
    met: Counter[int] = field(default_factory=Counter)

    def match(self, message: str, level: str) -> Expectation | None:
        """The entry the finding ``message`` at ``level`` is (counted as met), if any."""
        for number, entry in enumerate(self.entries):
            if entry.matches(message, level):
                self.met[number] += 1
                return entry
        return None

    def unmet(self, levels_run: set[str]) -> list[Expectation]:
        """The entries no run met, among those the runs at ``levels_run`` could meet."""
        return [
            e
            for n, e in enumerate(self.entries)
            if not self.met[n] and not e.rare and (e.level is None or e.level in levels_run)
        ]


def read_expectations(path: Path) -> Expectations:
    """The expectations in ``path`` (``.toml`` or ``.json``); :class:`ExpectationsError`
    for anything else, naming what is wrong and where."""
    try:
        text = read_regular_text(path, MAX_BYTES, "expectations file")
    except UnreadableFile as exc:
        raise ExpectationsError(str(exc)) from None
    data = _parse(path, text)
    return Expectations(_entries(path, data), source=str(path))


def _parse(path: Path, text: str) -> object:
    if path.suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ExpectationsError(f"{path}: not valid TOML: {exc}") from None
        except RecursionError:  # tomllib parses nested arrays and tables recursively
            raise ExpectationsError(f"{path}: nests arrays or tables too deeply") from None
        except ValueError as exc:  # an integer past Python's int-string limit
            raise ExpectationsError(f"{path}: a value out of bounds: {str(exc)[:120]}") from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ExpectationsError(f"{path}: not valid JSON: {exc}") from None
    raise ExpectationsError(f"{path}: an expectations file ends in .toml or .json")


def _entries(path: Path, data: object) -> tuple[Expectation, ...]:
    if not isinstance(data, dict):
        raise ExpectationsError(f"{path}: the file holds a table with an 'expected' list")
    unknown = sorted(set(data) - {"target", "expected"})
    if unknown:
        raise ExpectationsError(f"{path}: unknown top-level key(s) {', '.join(unknown)}")
    listed = data.get("expected", [])
    if not isinstance(listed, list):
        raise ExpectationsError(f"{path}: 'expected' is a list of entries ([[expected]])")
    if len(listed) > MAX_ENTRIES:
        raise ExpectationsError(f"{path}: {len(listed)} entries, more than {MAX_ENTRIES}")
    return tuple(_entry(path, n, e) for n, e in enumerate(listed, 1))


def _string(where: str, name: str, value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ExpectationsError(f"{where}: '{name}' must be a non-empty string")
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise ExpectationsError(f"{where}: '{name}' is longer than {MAX_TEXT} characters")
    return value


def _patterns(where: str, value: object) -> tuple[str, ...] | None:
    """The ``text`` field: one pattern or a list of at most :data:`MAX_PATTERNS`."""
    if value is None:
        return None
    listed = value if isinstance(value, list) else [value]
    if not listed or len(listed) > MAX_PATTERNS:
        raise ExpectationsError(f"{where}: 'text' is a pattern or a list of 1 to {MAX_PATTERNS}")
    patterns = tuple(_string(where, "text", p) or "" for p in listed)
    for pattern in patterns:
        if "\\" in pattern or pattern.startswith("^") or pattern.endswith("$"):
            raise ExpectationsError(
                f"{where}: 'text' is literal text in which * stands for any run of "
                "characters, not a regular expression (it holds a backslash or an anchor)"
            )
        if pattern.count("*") > MAX_STARS:
            raise ExpectationsError(f"{where}: 'text' has more than {MAX_STARS} *")
    return patterns


def holds(message: str, pattern: str) -> bool:
    """Whether ``message`` holds ``pattern`` somewhere, ``*`` in it standing for any run of
    characters: its literal parts found in order, each at its first place after the
    previous one (the first place is always a right one, so a match costs a few
    ``str.find``s, never a search that backtracks)."""
    at = 0
    for part in pattern.split("*"):
        found = message.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return True


def _entry(path: Path, number: int, entry: Any) -> Expectation:
    where = f"{path}: entry {number}"
    if not isinstance(entry, dict):
        raise ExpectationsError(f"{where} is not a table of {', '.join(FIELDS)}")
    unknown = sorted(str(k) for k in set(entry) - set(FIELDS) - set(FLAGS))
    if unknown:
        raise ExpectationsError(f"{where}: unknown field(s) {', '.join(unknown)}")
    rare = entry.get("rare", False)
    if not isinstance(rare, bool):
        raise ExpectationsError(f"{where}: 'rare' must be true or false")
    values: dict[str, str | None] = {}
    for name in FIELDS:
        value = entry.get(name)
        if value is None and name in REQUIRED:
            raise ExpectationsError(f"{where}: '{name}' is missing")
        if name == "text":
            continue
        values[name] = _string(where, name, value)
    text = _patterns(where, entry.get("text"))
    upstream = values["upstream"] or ""
    if not upstream.startswith(("https://", "http://")):
        raise ExpectationsError(f"{where}: 'upstream' must be a link (https://...)")
    return Expectation(
        rule=values["rule"] or "",
        situation=values["situation"] or "",
        upstream=upstream,
        operation=values["operation"],
        level=values["level"],
        text=text,
        rare=rare,
    )
