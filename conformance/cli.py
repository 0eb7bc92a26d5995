"""The ``kvpool`` command."""

from __future__ import annotations

import importlib
from typing import Any

import click
from rich.console import Console

from .conform_command import conform
from .manager.workload_command import workload
from .reference.rules_command import rules
from .targets.command import targets
from .trace.replay_command import replay
from .trace.show_command import show_trace
from .usage import fail_bug, invoked_command
from .vectors.command import vectors

#: The commands imported only when they are run or listed, so that ``kvpool conform``
#: starts without loading what the others need: name -> "module:attribute".
LAZY_COMMANDS = {
    "mutants": ".mutants.command:mutants",
    "prove": ".proofs.command:prove",
    "crosshair": ".crosshair.command:crosshair",
    "bench": ".bench.command:bench",
    "diff": ".diff.command:diff",
    "docs": ".reference.command:docs",
    "fuzz": ".fuzz.command:fuzz",
    "publish": ".stream.publish_command:publish",
    "monitor": ".stream.monitor_command:monitor",
    "profile": ".profiles.command:profile",
    "route-check": ".routes.command:route_check",
}


class LazyGroup(click.Group):
    """A command group that imports the commands of :data:`LAZY_COMMANDS` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in LAZY_COMMANDS:
            return super().get_command(ctx, cmd_name)
        module, _, attribute = LAZY_COMMANDS[cmd_name].partition(":")
        command = getattr(importlib.import_module(module, __package__), attribute)
        assert isinstance(command, click.Command)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an exception none of its checks expects is a bug of kvpool,
        not a finding: it exits 4 with the command and the traceback (:func:`fail_bug`)."""
        words = ["kvpool", *getattr(ctx, "_protected_args", ()), *ctx.args]
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            fail_bug(Console(stderr=True), exc, invoked_command(words))


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """kvpool: the reference spec and conformance suite for paged KV-cache block pools.

    \b
    Start here:
      kvpool conform                         check the built-in pool at every level
      kvpool conform --target mypkg.pool:make_pool
                                             check your own vLLM-style pool
      kvpool targets                         what can be checked, and the profiles

    \b
    Exit status (every command): 0 conformant, 1 a finding, 2 a usage or loading
    error, 3 too few valid test cases, 4 a bug in kvpool (printed with its traceback).
    """


for command in (conform, targets, workload, rules, replay, show_trace, vectors):
    main.add_command(command)
