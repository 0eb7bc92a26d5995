"""No page of :data:`PAGES` carries a measured figure typed by hand: every figure on them
is rendered from a record under ``docs/data`` or printed by a console example the docs
tests re-run."""

from __future__ import annotations

from kvpool.conformance.tools.reference.fragments import DOCS
from kvpool.conformance.tools.reference.page_figures import PAGES, page_figures, typed_figures


def test_the_pages_carry_no_typed_figure() -> None:
    assert page_figures(DOCS) == []


def test_every_page_checked_exists() -> None:
    assert all((DOCS / page).is_file() for page in PAGES)


def test_a_figure_typed_into_prose_is_caught() -> None:
    text = (DOCS / "guide/levels.md").read_text(encoding="utf-8")
    planted = text.replace(
        "What made steps cheaper:", "What made steps cheaper (1,268 µs a step, 1.37\u00d7 faster):"
    )
    assert planted != text
    assert typed_figures(planted, "guide/levels.md") != []


def test_figures_are_caught_in_prose_tables_and_shown_blocks() -> None:
    page = (
        "A run took 7.61 s, or 920 µs a step, 69% of it drawing; 9,500 a CPU second; "
        "ratios 1.69\u20132.03.\n"
        "\n"
        "| workload | blocks | ours µs/call |\n|---|---|---|\n| churn | `1000` | 1.416 |\n"
        "\n"
        "```text\n│ pool/safety │ pass │ 157 │ 11.6s │\n```\n"
        "\n"
        "Caught by 6 of 16 runs.\n"
    )
    found = [line.split(": ", 1)[1] for line in typed_figures(page, "p.md")]
    assert found == ["7.61 s", "920 µs", "69%", "9,500 a CPU second", "1.69\u20132.03", "1.416",
                     "11.6s", "6 of 16"]  # fmt: skip


def test_what_is_not_a_figure_passes() -> None:
    page = (
        "vLLM 0.33.0 and SGLang 0.4 at commit `a1e4763`, with `--sizes 1000,100000`, seed 1, "
        "150 test cases of 40 actions.\n"
        "\n"
        "| generation | checked on |\n|---|---|\n| `0.4` | 0.4.6.post5 |\n"
        "\n"
        "<!-- figures: a format example; its numbers are made up -->\n"
        "\n"
        '```json\n{"started": 1796100307.03}\n```\n'
        "\n"
        "```console\n$ kvpool conform --max-examples 3\n│ pool/safety │ 0.7s │ 13,137 │\n```\n"
    )
    assert typed_figures(page, "p.md") == []


def test_a_shown_block_without_the_marker_is_caught() -> None:
    page = '```json\n{"started": 1796100307.03}\n```\n'
    assert typed_figures(page, "p.md") == ["p.md:2: 1796100307.03"]
