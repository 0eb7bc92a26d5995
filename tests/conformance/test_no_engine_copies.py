"""No adapter restates an engine's code: every file of the suite's engine adapters
(``conformance/engines/`` and ``conformance/targets/``, and the engine helpers of the tests)
is compared, token by token, with every engine source file the suite loads (the cached files
of each engine's release: vLLM's pool and manager, Aphrodite's pool and manager, vllm-mlx,
LMDeploy's allocator and both manager generations, both nano-vllm distributions, SGLang
0.4.6.post5's scheduler and its cache files, 0.5.23's radix cache and scheduler: of a file the suite
reads only a few definitions of, those definitions) and with
the release modules an adapter mirrors or calls into without loading them
(:data:`MIRRORED`: SGLang 0.5.23's scheduler, schedule batch and schedule policy,
nano-vllm's engine loop and model runner; LMDeploy's ``paging/scheduler.py`` is loaded, 0.18.0's
and 0.16.0's), two ways:

- **as written**: Python's own tokens (``tokenize``) less layout and comments; any run of
  :data:`MIN_RUN` (40) or more shared tokens fails, naming both places. Calls into an
  engine's API share short runs (``seq.state.activate()`` is 7 tokens); a copied function
  body is long: the LMDeploy adapter's ``_roll_back_match`` (commit ``b2422f7``) shared 63
  tokens with 0.18.0's ``_TentativePrefixMatch._reset_to_unmatched``.
- **renamed**: the same tokens with every identifier erased (a placeholder), every string
  and number normalised, import statements left out (a list of imported names is no
  code); an adapter folder is compared with its own engine's files (:data:`ENGINES_OF`;
  a file outside an engine's folder with every engine). A renamed copy keeps its token
  sequence, so any run of :data:`MIN_RENAMED_RUN` (60) or more fails. The threshold is
  chosen from the data: the longest renamed run any adapter shares is 40 tokens (a
  settings list of vLLM's ``envs.py``; the report test prints and bounds it), a 15-line
  function is 80 to 150 tokens, and :func:`test_a_planted_renamed_copy_is_caught` plants a
  15-line function of each engine, every name and string changed, and sees it caught.

Needs the engines' files (downloaded into the cache once; the extras are not needed to
read them).
"""

from __future__ import annotations

import ast
import functools
import io
import keyword
import textwrap
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kvpool.conformance.engines.aphrodite import entry as APHRODITE
from kvpool.conformance.engines.lmdeploy import manager_release
from kvpool.conformance.engines.lmdeploy import release as lmdeploy_release
from kvpool.conformance.engines.nanovllm import release as nanovllm_release
from kvpool.conformance.engines.sglang import release_0_5 as sglang_release_0_5
from kvpool.conformance.engines.sglang import scheduler_release as sglang_scheduler
from kvpool.conformance.engines.sglang import scheduler_release_0_4 as sglang_scheduler_0_4
from kvpool.conformance.engines.sglang.entry import DEFAULT_VERSION, NEWEST_CHECKED
from kvpool.conformance.engines.vllm.distribution import MANAGER_CACHE, cached_release
from kvpool.conformance.engines.vllm.releases import MANAGER_WHEEL_MEMBERS
from kvpool.conformance.engines.vllm_mlx.pool import load_paged_cache
from kvpool.conformance.targets.releases.files import ReleaseFiles, cached_files

#: The shortest shared run that fails: above what a call into an engine's API shares (the
#: longest such run in the adapters as they are is printed by the report test), below a
#: copied function body.
MIN_RUN = 40
#: The shortest shared run of renamed tokens that fails (see the module docstring).
MIN_RENAMED_RUN = 60
#: Release modules an adapter mirrors or calls into but the suite does not load, by
#: engine: (what they are, the release).
MIRRORED: dict[str, list[tuple[ReleaseFiles, str]]] = {
    "SGLang": [
        (
            ReleaseFiles(
                "sglang-mirrored",
                "sglang",
                frozenset(
                    f"sglang/srt/managers/{name}.py"
                    for name in ("schedule_batch", "scheduler", "schedule_policy")
                ),
                label="SGLang",
            ),
            NEWEST_CHECKED,
        )
    ],
    "nano-vllm": [
        (
            ReleaseFiles(
                "nanovllm-mirrored",
                "nano-vllm-npu",
                frozenset(
                    f"nanovllmnpu/engine/{name}.py" for name in ("llm_engine", "model_runner")
                ),
                label="nano-vllm",
            ),
            nanovllm_release.DISTRIBUTIONS["nanovllm"][1],
        )
    ],
}
#: Each engine plugin folder of ``conformance/engines/`` and the engines its files are
#: compared with by renamed tokens (a file elsewhere: every engine). TokenSpeed's
#: scheduler is C++: its Python package only re-exports the compiled bindings, so there
#: is no Python code of it to compare.
EVERY_ENGINE = ("vLLM", "Aphrodite", "vllm-mlx", "LMDeploy", "nano-vllm", "SGLang")
ENGINES_OF: dict[str, tuple[str, ...]] = {
    "aphrodite": ("Aphrodite", "vLLM"),
    "lmdeploy": ("LMDeploy",),
    "nanovllm": ("nano-vllm",),
    "builtin": EVERY_ENGINE,  # kvpool's own pools
    "sglang": ("SGLang",),
    "tokenspeed": (),
    "vllm": ("vLLM", "Aphrodite"),
    "vllm_api": ("vLLM", "Aphrodite"),
    "vllm_mlx": EVERY_ENGINE,
}

REPO = Path(__file__).resolve().parents[2]
#: Our files that drive engines: the adapters and the tests' engine helpers.
OURS = sorted(
    [
        *(REPO / "conformance" / "engines").rglob("*.py"),
        *(REPO / "conformance" / "targets").rglob("*.py"),
        *(REPO / "tests" / "conformance").glob("*sglang*.py"),
        REPO / "tests" / "conformance" / "engine_managers.py",
    ]
)
SKIPPED = frozenset(
    {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENDMARKER,
        tokenize.ENCODING,
    }
)


@dataclass(frozen=True)
class Token:
    text: str
    line: int


class Tokens:
    """A file's tokens, with where each window of ``n`` tokens starts indexed once per
    ``n``: every adapter is compared with every engine file, so an engine file's index
    is built once per run length, not once per adapter (the windows are keyed by their
    hash; a hit is compared token by token)."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.texts = [t.text for t in tokens]
        self._hashes: dict[int, list[int]] = {}
        self._starts: dict[int, dict[int, list[int]]] = {}

    def __len__(self) -> int:
        return len(self.tokens)

    def hashes(self, n: int) -> list[int]:
        """The hash of the window of ``n`` tokens at each start."""
        if n not in self._hashes:
            texts = self.texts
            self._hashes[n] = [hash(tuple(texts[j : j + n])) for j in range(len(texts) - n + 1)]
        return self._hashes[n]

    def starts(self, n: int) -> dict[int, list[int]]:
        """Where the windows of ``n`` tokens start, by their hash."""
        if n not in self._starts:
            starts: dict[int, list[int]] = {}
            for j, h in enumerate(self.hashes(n)):
                starts.setdefault(h, []).append(j)
            self._starts[n] = starts
        return self._starts[n]


#: Every engine file the check reads and its tokens, by engine.
Sources = dict[str, list[tuple[Path, Tokens]]]


def tokens_of(source: str) -> Tokens:
    """``source``'s tokens less layout and comments (an unreadable file: no tokens)."""
    found: list[Token] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type not in SKIPPED:
                found.append(Token(tok.string, tok.start[0]))
    except (tokenize.TokenError, SyntaxError):
        pass
    return Tokens(found)


def renamed_tokens_of(source: str) -> Tokens:
    """``source``'s tokens as :func:`tokens_of` reads them, less import statements and
    docstrings (a statement of one string), with every identifier (a name that is no
    keyword) as ``N``, every string as ``S`` and every number as ``0``: what a copy keeps
    when its names are changed."""
    found: list[Token] = []
    statement: list[tokenize.TokenInfo] = []

    def flush() -> None:
        first = statement[0] if statement else None
        lone_string = len(statement) == 1 and first is not None and first.type == tokenize.STRING
        imports = (
            first is not None
            and first.type == tokenize.NAME
            and first.string
            in (
                "import",
                "from",
            )
        )
        if not lone_string and not imports:
            found.extend(_folded([Token(renamed_text(tok), tok.start[0]) for tok in statement]))
        statement.clear()

    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.NEWLINE:
                flush()
            elif tok.type not in SKIPPED:
                statement.append(tok)
    except (tokenize.TokenError, SyntaxError):
        pass
    flush()
    return Tokens(found)


def _folded(tokens: list[Token]) -> list[Token]:
    """``tokens`` with each list of strings (``S , S , S ...``) cut to its first two
    entries: a list of names (``__slots__``, keys to ignore) has the same shape in any two
    files whatever it names, so its length says nothing of a copy."""
    kept: list[Token] = []
    i = 0
    while i < len(tokens):
        j = i
        while j < len(tokens) and tokens[j].text == ("S" if (j - i) % 2 == 0 else ","):
            j += 1
        if j - i > 3:  # S , S , S ...: keep S , S
            kept += tokens[i : i + 3]
            i = j
        else:
            kept.append(tokens[i])
            i += 1
    return kept


def renamed_text(tok: tokenize.TokenInfo) -> str:
    """A token as a renamed copy keeps it: ``N`` for an identifier, ``S`` for a string,
    ``0`` for a number, else itself (keywords and operators)."""
    if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
        return "N"
    if tok.type == tokenize.STRING:
        return "S"
    if tok.type == tokenize.NUMBER:
        return "0"
    return tok.string


@dataclass(frozen=True)
class SharedRun:
    """A run of tokens two files share: where it starts in each and how long it is."""

    ours: Path
    our_line: int
    theirs: Path
    their_line: int
    length: int

    def __str__(self) -> str:
        return (
            f"{self.ours.relative_to(REPO)}:{self.our_line} shares {self.length} tokens "
            f"with {self.theirs}:{self.their_line}"
        )


def shared_runs(
    ours: Path, mine: Tokens, theirs: Path, their: Tokens, at_least: int
) -> Iterator[SharedRun]:
    """Every maximal run of ``at_least`` or more tokens of ``mine`` found in ``their``."""
    if len(mine) < at_least or len(their) < at_least:
        return
    starts = their.starts(at_least)
    hashes = mine.hashes(at_least)
    if starts.keys().isdisjoint(hashes):
        return
    texts, my_texts = their.texts, mine.texts
    i = 0
    while i <= len(mine) - at_least:
        window = my_texts[i : i + at_least]
        found = [j for j in starts.get(hashes[i], ()) if texts[j : j + at_least] == window]
        if not found:
            i += 1
            continue
        best, where = 0, 0
        for j in found:
            n = at_least
            while i + n < len(mine) and j + n < len(their) and my_texts[i + n] == texts[j + n]:
                n += 1
            if n > best:
                best, where = n, j
        yield SharedRun(ours, mine.tokens[i].line, theirs, their.tokens[where].line, best)
        i += best


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if p.is_file())


def engine_sources() -> dict[str, list[Path]]:
    """Every engine source file the suite loads, by engine (downloaded once if need be)."""
    lmdeploy = [
        lmdeploy_release.release_root(lmdeploy_release.FILES, lmdeploy_release.DEFAULT_VERSION),
        lmdeploy_release.release_root(manager_release.FILES, lmdeploy_release.DEFAULT_VERSION),
        lmdeploy_release.release_root(manager_release.SCHEDULER_FILES, "0.16.0"),
    ]
    nanovllm = [
        cached_files(nanovllm_release.files_of(name), version)
        for name, (_, version, _) in nanovllm_release.DISTRIBUTIONS.items()
    ]
    sglang = [
        cached_files(sglang_release_0_5.files_of(), NEWEST_CHECKED),
        cached_files(sglang_scheduler.scheduler_files(), NEWEST_CHECKED),
        cached_files(sglang_scheduler_0_4.scheduler_files(), DEFAULT_VERSION),
    ]
    vllm = [cached_release("0.33.0", folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS)]
    aphrodite = cached_release(
        APHRODITE.KNOWN, folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS,
        dist=APHRODITE.ENTRY.dist,
    )  # fmt: skip
    vllm_mlx = load_paged_cache().__file__
    assert vllm_mlx is not None
    mirrored = {
        engine: [f for files, version in wanted for f in _files(cached_files(files, version))]
        for engine, wanted in MIRRORED.items()
    }
    found = {
        "vLLM": [f for root in vllm for f in _files(root)],
        "Aphrodite": _files(aphrodite),
        "vllm-mlx": [Path(vllm_mlx)],
        "LMDeploy": [f for root in lmdeploy for f in _files(root)],
        "nano-vllm": [f for root in nanovllm for f in _files(root)],
        "SGLang": [f for root in sglang for f in _files(root)],
    }
    return {engine: files + mirrored.get(engine, []) for engine, files in found.items()}


@functools.cache
def definitions_only() -> dict[Path, tuple[str, ...]]:
    """The files the suite reads only a few definitions of, by path: those names (a file
    of the same name in another cache, a mirrored ``schedule_batch.py`` say, is whole)."""
    loaders = (
        (sglang_release_0_5.files_of(), sglang_release_0_5.DEFINED, NEWEST_CHECKED),
        (sglang_scheduler.scheduler_files(), sglang_scheduler.SCHEDULER_DEFINED, NEWEST_CHECKED),
        (
            sglang_scheduler_0_4.scheduler_files(),
            sglang_scheduler_0_4.DEFINED,
            DEFAULT_VERSION,
        ),
    )
    return {
        cached_files(files, version) / "sglang" / rel: names
        for files, defined, version in loaders
        for rel, names in defined.items()
    }


def loaded_text(path: Path) -> str:
    """What the suite runs of ``path``: the whole file, or of a file it reads only a few
    definitions of (SGLang 0.5's ``memory_pool.py``, say), those definitions."""
    text = path.read_text(encoding="utf-8", errors="replace")
    names = definitions_only().get(path)
    if names is not None:
        tree = ast.parse(text)
        kept = [n for n in tree.body if getattr(n, "name", None) in names]
        return "\n\n".join(ast.get_source_segment(text, n) or "" for n in kept)
    return text


@pytest.fixture(scope="module")
def sources() -> Sources:
    return {
        engine: [(f, tokens_of(loaded_text(f))) for f in files]
        for engine, files in engine_sources().items()
    }


def copies(ours: Path, mine: Tokens, sources: Sources, n: int) -> list[SharedRun]:
    return [
        run
        for files in sources.values()
        for theirs, their in files
        for run in shared_runs(ours, mine, theirs, their, n)
    ]


def test_every_engine_has_sources(sources: Sources) -> None:
    """The comparison reads something of every engine (a loader that found no file would
    make the check pass vacuously)."""
    for engine, files in sources.items():
        assert files and sum(len(t) for _, t in files) > 1000, engine


@pytest.mark.parametrize("ours", OURS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_adapter_shares_a_long_run_with_an_engine(ours: Path, sources: Sources) -> None:
    found = copies(ours, tokens_of(ours.read_text(encoding="utf-8")), sources, MIN_RUN)
    assert not found, "code restated from an engine:\n" + "\n".join(map(str, found))


def _longest_function(source: str) -> str:
    """The longest top-level or method ``def`` of ``source``, as written."""
    lines = source.splitlines()
    best: list[str] = []
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if not stripped.startswith("def "):
            continue
        indent = len(line) - len(stripped)
        body = [line]
        for nxt in lines[i + 1 :]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt)
        if len(body) > len(best):
            best = body
    return textwrap.dedent("\n".join(best))


def _shortest_copyable_body(files: list[tuple[Path, Tokens]]) -> tuple[Path, str]:
    """Of each engine file's longest function, the one with the fewest tokens but at least
    :data:`MIN_RUN` plus ten: a short copied body."""
    candidates = []
    for path, _ in files:
        body = _longest_function(path.read_text(encoding="utf-8", errors="replace"))
        n = len(tokens_of(body))
        if n >= MIN_RUN + 10:
            candidates.append((n, path, body))
    assert candidates
    _, path, body = min(candidates, key=lambda c: c[0])
    return path, body


@pytest.mark.parametrize(
    "engine", ["vLLM", "Aphrodite", "vllm-mlx", "LMDeploy", "nano-vllm", "SGLang"]
)
def test_a_planted_copy_is_caught(engine: str, sources: Sources) -> None:
    """A function body of the engine pasted into an adapter (as a method, re-indented:
    layout does not hide it) is found, with where it came from."""
    path, body = _shortest_copyable_body(sources[engine])
    adapter = REPO / "conformance" / "engines" / "lmdeploy" / "manager.py"
    planted = (
        adapter.read_text(encoding="utf-8") + "\n\nclass Planted:\n" + textwrap.indent(body, "    ")
    )
    found = copies(adapter, tokens_of(planted), sources, MIN_RUN)
    assert any(run.theirs == path for run in found), (engine, path)


def test_the_lmdeploy_rollback_once_restated_is_caught(
    sources: Sources,
) -> None:
    """The body the LMDeploy adapter once restated (``_reset_to_unmatched`` of 0.18.0's
    prefill scheduler, less its SSM lines) is longer than :data:`MIN_RUN`: had it stayed,
    this check would have failed."""
    prefill = next((p, t) for p, t in sources["LMDeploy"] if p.name == "prefill_scheduler.py")
    text = prefill[0].read_text(encoding="utf-8")
    start = text.index("        if seq.num_blocks > 0 or seq.logical_state >= 0:")
    end = text.index("    def _clear(self)")
    restated = "def _roll_back_match(self, seq):\n" + textwrap.dedent(text[start:end])
    found = [
        run
        for run in shared_runs(Path("planted.py"), tokens_of(restated), prefill[0], prefill[1], 1)
        if run.length >= MIN_RUN
    ]
    assert found and max(r.length for r in found) >= MIN_RUN


def test_the_longest_run_an_adapter_shares_is_short(
    sources: Sources,
) -> None:
    """The margin: the adapters' longest shared run today is well under :data:`MIN_RUN`
    (12 or more tokens, as API calls are, found and reported: the measure itself works)."""
    longest = 0
    for ours in OURS:
        for run in copies(ours, tokens_of(ours.read_text(encoding="utf-8")), sources, 12):
            longest = max(longest, run.length)
    assert 12 <= longest < MIN_RUN, longest


# --- renamed copies ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def renamed_sources() -> Sources:
    return {
        engine: [(f, renamed_tokens_of(loaded_text(f))) for f in files]
        for engine, files in engine_sources().items()
    }


def engines_for(ours: Path) -> tuple[str, ...]:
    """The engines ``ours`` is compared with by renamed tokens (:data:`ENGINES_OF`)."""
    parts = ours.relative_to(REPO).parts
    if parts[:2] == ("conformance", "engines") and len(parts) > 3:
        return ENGINES_OF[parts[2]]
    if "sglang" in ours.name:
        return ("SGLang",)
    return EVERY_ENGINE


def renamed_copies(ours: Path, mine: Tokens, sources: Sources, n: int) -> list[SharedRun]:
    return [
        run
        for engine in engines_for(ours)
        for theirs, their in sources[engine]
        for run in shared_runs(ours, mine, theirs, their, n)
    ]


def test_every_engine_folder_is_compared_with_its_engine(renamed_sources: Sources) -> None:
    """A new engine folder under ``conformance/engines/`` must say which engine's files its
    code is compared with; each engine named has files, the mirrored ones among them."""
    folders = {p.name for p in (REPO / "conformance" / "engines").iterdir() if p.is_dir()}
    assert folders - {"__pycache__"} == set(ENGINES_OF)
    for engine in {e for engines in ENGINES_OF.values() for e in engines}:
        assert renamed_sources[engine], engine
    for engine, wanted in MIRRORED.items():
        names = {p.name for p, _ in renamed_sources[engine]}
        assert {m.rsplit("/", 1)[1] for files, _ in wanted for m in files.members} <= names


@pytest.mark.parametrize("ours", OURS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_adapter_shares_a_long_renamed_run_with_its_engine(
    ours: Path, renamed_sources: Sources
) -> None:
    mine = renamed_tokens_of(ours.read_text(encoding="utf-8"))
    found = renamed_copies(ours, mine, renamed_sources, MIN_RENAMED_RUN)
    assert not found, "code restated (renamed) from an engine:\n" + "\n".join(map(str, found))


def renamed(source: str) -> str:
    """``source`` with every identifier replaced by a fresh one (the same name the same
    way), every one-line string and every number changed, its layout kept: a copy as a
    renamer writes it."""
    names: dict[str, str] = {}
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        (row, col), (end_row, end) = tok.start, tok.end
        if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
            edits.append((row, col, end, names.setdefault(tok.string, f"renamed_{len(names)}")))
        elif tok.type == tokenize.STRING and row == end_row:
            edits.append((row, col, end, repr(f"changed {len(edits)}")))
        elif tok.type == tokenize.NUMBER:
            edits.append((row, col, end, str(len(edits) + 7)))
    for row, col, end, text in reversed(edits):  # right to left: columns stay valid
        line = lines[row - 1]
        lines[row - 1] = line[:col] + text + line[end:]
    return "".join(lines)


def identifiers(source: str) -> set[str]:
    return {
        tok.string
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string)
    }


def code_lines(text: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The lines of ``node``'s code: its source less its docstring, comments and blanks."""
    lines = text.splitlines()[node.lineno - 1 : node.end_lineno]
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        skip = range(
            first.lineno - node.lineno, (first.end_lineno or first.lineno) - node.lineno + 1
        )
        lines = [line for i, line in enumerate(lines) if i not in skip]
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _fifteen_line_function(files: list[tuple[Path, Tokens]]) -> tuple[Path, str]:
    """The first 15 lines of code of a function (the first found, files in order, whose
    first 15 lines close every bracket they open), as code only: of what the check reads
    of each file (:func:`loaded_text`)."""
    for path, _ in sorted(files):
        text = loaded_text(path)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = code_lines(text, node)
                head = textwrap.dedent("\n".join(lines[:15]) + "\n")
                if len(lines) >= 15 and _whole(head):
                    return path, head
    raise AssertionError("no function of 15 lines of code")


def _whole(source: str) -> bool:
    try:
        list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    return True


@pytest.mark.parametrize(
    "engine", ["vLLM", "Aphrodite", "vllm-mlx", "LMDeploy", "nano-vllm", "SGLang"]
)
def test_a_planted_renamed_copy_is_caught(engine: str, renamed_sources: Sources) -> None:
    """A 15-line function of the engine, every name, string and number changed, pasted
    into an adapter as a method is found, with where it came from; the exact-token check
    does not see it."""
    path, body = _fifteen_line_function(renamed_sources[engine])
    copy = renamed(body)
    assert len(copy.splitlines()) == 15 and not identifiers(copy) & identifiers(body)
    adapter = REPO / "conformance" / "engines" / "lmdeploy" / "manager.py"
    planted = (
        adapter.read_text(encoding="utf-8") + "\n\nclass Planted:\n" + textwrap.indent(copy, "    ")
    )
    found = [
        run
        for files in renamed_sources.values()
        for theirs, their in files
        for run in shared_runs(adapter, renamed_tokens_of(planted), theirs, their, MIN_RENAMED_RUN)
    ]
    assert any(run.theirs == path for run in found), (engine, path, copy)
    exact = [
        run
        for run in copies(adapter, tokens_of(planted), {engine: [(path, tokens_of(body))]}, MIN_RUN)
    ]
    assert not exact, "the renaming left a run the exact check sees"


def test_the_longest_renamed_run_an_adapter_shares_is_short(renamed_sources: Sources) -> None:
    """The margin: the adapters' longest renamed run today is well under
    :data:`MIN_RENAMED_RUN` (20 or more tokens found and reported: the measure works)."""
    longest: dict[str, int] = {}
    for ours in OURS:
        mine = renamed_tokens_of(ours.read_text(encoding="utf-8"))
        for run in renamed_copies(ours, mine, renamed_sources, 20):
            key = str(ours.relative_to(REPO))
            longest[key] = max(longest.get(key, 0), run.length)
    print("longest renamed run per adapter file:", sorted(longest.items(), key=lambda i: -i[1]))
    assert 20 <= max(longest.values()) <= MIN_RENAMED_RUN * 2 // 3, longest
