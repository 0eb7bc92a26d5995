"""``kvpool docs``: build or serve the documentation site, or write its generated pages.

Importing this module runs nothing; the CLI registers :data:`docs` with
``main.add_command(docs)``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from ...extras import require
from ...usage import EXIT_FINDING, EXIT_UNDECIDED

#: The repository root when kvpool runs from a checkout (an editable install).
CHECKOUT = Path(__file__).resolve().parents[3]

HELP = """The documentation site: build it, preview it, or write its generated pages.

\b
The site is mkdocs-material, configured by mkdocs.yml at the repository root. The
hand-written pages live in docs/; the reference pages (docs/reference/...: every
operation, rule, invariant, property, profile, proof and command) are generated from
the spec each time the site is built and never committed, so they cannot drift from
the oracle. Hand-written pages can include generated fragments with a marker on a line
of its own, <!-- kvpool:NAME -->; `kvpool docs generate --list-markers` lists them.

\b
Examples:
  kvpool docs build                     strict build into site/ (any warning fails)
  kvpool docs build --out /tmp/site     somewhere else
  kvpool docs serve --port 8001         preview at http://127.0.0.1:8001
  kvpool docs generate --out /tmp/ref   only the reference pages, as Markdown
  kvpool docs examples                  console examples whose output drifted
  kvpool docs examples --refresh        rewrite them with what the commands print
"""


def find_config(config: Path | None) -> Path:
    """The mkdocs.yml to use: the one given, else ./mkdocs.yml, else the checkout's."""
    if config is not None:
        return config
    for candidate in (Path.cwd() / "mkdocs.yml", CHECKOUT / "mkdocs.yml"):
        if candidate.is_file():
            return candidate
    raise click.UsageError(
        "no mkdocs.yml here or in the kvpool checkout; run from the repository root or "
        "pass --config PATH"
    )


def _show_mkdocs_log() -> logging.Handler:
    """Print mkdocs' messages (warnings name the page and the problem) while it runs."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)-7s %(message)s"))
    handler.setLevel(logging.INFO)
    logger = logging.getLogger("mkdocs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return handler


CONFIG_OPTION = click.option(
    "--config",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="The mkdocs.yml [default: ./mkdocs.yml, else the checkout's].",
)


@click.group(name="docs", help=HELP)
def docs() -> None:
    pass


def build_site(config: Path, out: Path | None) -> None:
    """Build the site strictly from ``config`` into ``out`` (default: its ``site_dir``).

    Raises ``mkdocs.exceptions.MkDocsException`` (``Abort`` for warnings in strict mode).
    """
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    site_dir = str(out.resolve()) if out is not None else None
    build(load_config(str(config), strict=True, site_dir=site_dir))


@docs.command(name="build")
@CONFIG_OPTION
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the site goes [default: site/ beside mkdocs.yml].",
)
def docs_build(config: Path | None, out: Path | None) -> None:
    """Build the site with `mkdocs build --strict`: a broken link, a page missing from the
    nav, an unknown marker or any other warning fails the build (exit 5: undecided, the
    site's checks did not all run)."""
    require("mkdocs", "mkdocs-material", "kvpool docs build")
    from mkdocs.exceptions import MkDocsException

    path = find_config(config)
    handler = _show_mkdocs_log()
    try:
        build_site(path, out)
    except MkDocsException as exc:
        click.echo(f"error: the site did not build: {exc}", err=True)
        sys.exit(EXIT_UNDECIDED)
    finally:
        logging.getLogger("mkdocs").removeHandler(handler)
    where = out if out is not None else path.parent / "site"
    click.echo(f"site built in {where}")


@docs.command(name="serve")
@CONFIG_OPTION
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
def docs_serve(config: Path | None, port: int, host: str) -> None:
    """Preview the site at http://HOST:PORT, rebuilt when a page or mkdocs.yml changes.
    The reference pages are regenerated on each rebuild from the spec as it was imported:
    restart to see a change to spec/. Ctrl-C stops it."""
    require("mkdocs", "mkdocs-material", "kvpool docs serve")
    from mkdocs.commands.serve import serve
    from mkdocs.exceptions import MkDocsException

    path = find_config(config)
    handler = _show_mkdocs_log()
    try:
        serve(str(path), dev_addr=f"{host}:{port}")
    except MkDocsException as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_UNDECIDED)
    finally:
        logging.getLogger("mkdocs").removeHandler(handler)


@docs.command(name="generate")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory to write the pages into, as OUT/reference/... (required unless "
    "--list-markers).",
)
@click.option("--list-markers", is_flag=True, help="List the fragment markers and exit.")
def docs_generate(out: Path | None, list_markers: bool) -> None:
    """Write the generated reference pages as Markdown (what the site's build inserts), to
    read or diff them without building the site."""
    if list_markers:
        from .fragments import FRAGMENTS

        for name, (what, _) in FRAGMENTS.items():
            click.echo(f"<!-- kvpool:{name} -->  {what}")
        return
    if out is None:
        raise click.UsageError("--out DIR is required (or --list-markers)")
    from .pages import reference_pages

    root = click.get_current_context().find_root().command
    assert isinstance(root, click.Group)
    pages = reference_pages(root)
    for relative, text in pages.items():
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    click.echo(f"{len(pages)} reference pages in {out / 'reference'}")


@docs.command(name="examples")
@click.argument("pages", nargs=-1, type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "--refresh",
    is_flag=True,
    help="Rewrite each drifted output with what its command prints today.",
)
def docs_examples(pages: tuple[Path, ...], refresh: bool) -> None:
    """Run the console examples of PAGES (default: every page under docs/) as the docs
    tests do, and list each command whose shown output is no longer what it prints (masked
    as the tests mask it), with the difference; exit 1 if any. With --refresh, rewrite
    those outputs in place (an output that ends with another exit status than the page
    expects is reported, not rewritten)."""
    from .cli_page import kvpool_group
    from .refresh_examples import refresh as refresh_page

    main = click.get_current_context().find_root().command
    assert isinstance(main, click.Group)
    root = kvpool_group(main)
    docs_dir = find_config(None).parent / "docs"
    chosen = list(pages) or sorted(docs_dir.rglob("*.md"))
    drifted = 0
    for page in chosen:
        where = page.resolve()
        name = (
            str(where.relative_to(docs_dir.parent))
            if where.is_relative_to(docs_dir.parent)
            else str(page)
        )
        for drift in refresh_page(page, name, root, write=refresh):
            drifted += 1
            done = " (rewritten)" if refresh and drift.printed is not None else ""
            click.echo(f"{drift.where}: `{drift.command}` drifted{done}")
            if drift.note:
                click.echo(f"  {drift.note}")
            if not refresh:
                click.echo(drift.diff)
    click.echo(f"{drifted} drifted command(s) in {len(chosen)} page(s)")
    if drifted and not refresh:
        sys.exit(EXIT_FINDING)
