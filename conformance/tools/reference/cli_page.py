"""``reference/cli.md``: every ``kvpool`` command's ``--help``, as the command prints it."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import click

from .markdown import GENERATED, fence

#: The width help text is wrapped at, so the page does not depend on the terminal.
HELP_WIDTH = 92


def kvpool_group(main: click.Group) -> click.Group:
    """The ``kvpool`` command ``main`` with every subcommand loaded (the CLI imports most of
    them only when they are run), as a plain group the pages can walk and run. The command
    is handed in by whoever builds the pages (the ``docs`` command, the mkdocs hook), since
    the command line itself holds the command that builds them."""
    ctx = click.Context(main, info_name="kvpool")
    commands: dict[str, click.Command] = {}
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        if command is not None:
            commands[name] = command
    return click.Group(
        name=main.name,
        commands=commands,
        help=main.help,
        context_settings=main.context_settings,
    )


def walk(
    command: click.Command, path: tuple[str, ...], parent: click.Context | None
) -> Iterator[tuple[tuple[str, ...], str]]:
    """``(command path, help text)`` for ``command`` and, for a group, its subcommands in
    alphabetical order.

    Each command is read through a shallow copy whose help option is unsettled: click
    settles a command's help option by the first context that asks for it, so a command
    once run outside ``kvpool`` (as ``docs build`` is in a test) would otherwise show
    ``--help`` where ``kvpool`` gives ``-h, --help``, and the page would depend on what
    ran before it. The top command's own context settings (``kvpool``'s ``-h``) apply, as
    they do when it runs."""
    command = copy.copy(command)
    command._help_option = None
    settings = {} if parent is not None else dict(command.context_settings)
    settings.update(terminal_width=HELP_WIDTH, max_content_width=HELP_WIDTH)
    ctx = click.Context(command, info_name=path[-1], parent=parent, **settings)
    yield path, command.get_help(ctx)
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            yield from walk(command.commands[name], (*path, name), ctx)


def cli_page(main: click.Group) -> str:
    """The page for the ``kvpool`` command ``main``: one section per command, its help in a
    text block."""
    out = [
        GENERATED,
        "# Command line\n",
        "Every `kvpool` command and its `--help`, generated from the commands themselves "
        f"(wrapped at {HELP_WIDTH} columns).\n",
    ]
    for path, text in walk(kvpool_group(main), ("kvpool",), None):
        level = "#" * min(len(path) + 1, 4)
        out.append(f"{level} {' '.join(path)}\n")
        out.append(fence(text, "text"))
    return "\n".join(out)
