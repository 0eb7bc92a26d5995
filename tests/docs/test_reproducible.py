"""The site builds the same twice: a build under another ``PYTHONHASHSEED`` (so every set
and frozenset iterates in another order) is byte-for-byte the session's build, every page
and the search index. The session's build runs in this process, whose string hashes are
seeded otherwise (or at random), so one more build in a fresh process is enough."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from docs_build import BUILD_EPOCH, CONFIG

#: Builds the site in a fresh interpreter, as ``kvpool docs build`` does.
BUILD = (
    "import sys; from kvpool.conformance.cli import main; "
    "main(['docs', 'build', '--config', sys.argv[1], '--out', sys.argv[2]])"
)


def other_seed() -> str:
    """A hash seed that is not this process's."""
    return "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"


def build_in_fresh_process(out: Path, seed: str) -> Path:
    env = {**os.environ, "PYTHONHASHSEED": seed, "SOURCE_DATE_EPOCH": BUILD_EPOCH}
    result = subprocess.run(
        [sys.executable, "-c", BUILD, str(CONFIG), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"the build failed:\n{result.stdout}\n{result.stderr}"
    return out


def tree_differences(a: Path, b: Path) -> list[str]:
    """Every file path (relative) that is in only one tree or differs in its bytes."""
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    out = [f"only in the first: {p}" for p in sorted(files_a - files_b)]
    out += [f"only in the second: {p}" for p in sorted(files_b - files_a)]
    out += [
        f"differs: {p}"
        for p in sorted(files_a & files_b)
        if (a / p).read_bytes() != (b / p).read_bytes()
    ]
    return out


def test_a_build_under_another_hash_seed_is_byte_identical(
    built_site: Path, tmp_path: Path
) -> None:
    again = build_in_fresh_process(tmp_path / "site", other_seed())
    assert not tree_differences(built_site, again)


def test_the_seeds_do_change_set_order() -> None:
    """The test above has teeth: under the two seeds it uses, a profile's set-valued field
    iterates in another order (so a page that printed it as a repr would differ)."""
    show = "from kvpool.spec.profile import SEED; print(repr(SEED.key_attributes))"
    seen = {
        subprocess.run(
            [sys.executable, "-c", show],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(seen) == 2, seen


def test_a_changed_or_missing_file_is_a_difference(tmp_path: Path) -> None:
    a = tmp_path / "a"
    (a / "reference" / "profiles").mkdir(parents=True)
    (a / "reference" / "profiles" / "index.html").write_text("<p>{'x', 'y'}</p>")
    (a / "index.html").write_text("<p>home</p>")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert tree_differences(a, b) == []
    (b / "reference" / "profiles" / "index.html").write_text("<p>{'y', 'x'}</p>")
    (b / "index.html").unlink()
    assert tree_differences(a, b) == [
        "only in the first: index.html",
        f"differs: {Path('reference/profiles/index.html')}",
    ]


def test_the_cli_page_does_not_depend_on_what_ran_before() -> None:
    """Running ``docs build --help`` outside ``kvpool`` first (click then settles its help
    option as ``--help`` alone) does not change the page: it shows what ``kvpool docs
    build -h`` prints."""
    from click.testing import CliRunner
    from kvpool.conformance.cli import main
    from kvpool.conformance.tools.reference.cli_page import cli_page
    from kvpool.conformance.tools.reference.command import docs

    assert CliRunner().invoke(docs, ["build", "--help"]).exit_code == 0
    page = cli_page(main)
    section = page.split("## kvpool docs build", 1)[1].split("\n#", 1)[0]
    assert "-h, --help" in section, section


def test_a_set_valued_profile_change_names_the_members_added_and_removed() -> None:
    from kvpool.conformance.tools.reference.profile_values import change, shown

    before = frozenset({"mm-offset", "cache-salt", "lora-path"})
    after = frozenset({"cache-salt", "prompt-embeds"})
    assert change(before, after) == ("adds `'prompt-embeds'`; removes `'lora-path'`, `'mm-offset'`")
    assert shown(before) == "{`'cache-salt'`, `'lora-path'`, `'mm-offset'`}"
    assert shown(frozenset()) == "`{}`"
    assert change(True, False) == "`True` becomes `False`"


def test_the_release_pages_show_key_attribute_changes_by_member(built_site: Path) -> None:
    text = (built_site / "reference" / "releases" / "index.html").read_text()
    assert "frozenset(" not in text
    assert "removes <code>'lora-path'</code>" in text
