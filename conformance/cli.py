"""The ``kvpool`` command.

Every command lives in its own module, imported only when that command runs: the group
lists the commands from :data:`COMMANDS` (a name, a module, a one-line help), so that
``kvpool --help`` and ``kvpool --version`` load neither the spec nor the engine nor
Hypothesis nor rich. How a command ends is :mod:`.exits`' policy, applied in
:meth:`LazyGroup.invoke` to whatever escapes a command.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, NamedTuple, NoReturn

import click

from .ending import interrupted_by_user, raised_by_target, watching_interrupts
from .exits import EXIT_FINDING, EXIT_INTERRUPTED, help_block


class CommandEntry(NamedTuple):
    """Where a command is defined, and the line ``kvpool --help`` shows for it."""

    where: str  # "module:attribute", relative to this package
    short_help: str


#: Every command, by name (a test keeps each line the start of the command's own help).
COMMANDS: dict[str, CommandEntry] = {
    "bench": CommandEntry(".tools.bench.command:bench", "Benchmark our BlockPool against vLLM's."),
    "conform": CommandEntry(
        ".tools.conform.command:conform", "Run the lockstep conformance suite."
    ),
    "crosshair": CommandEntry(
        ".tools.crosshair.command:crosshair", "Search the spec's contracts with CrossHair."
    ),
    "diff": CommandEntry(".tools.diff.command:diff", "Run two pools A and B in lockstep."),
    "docs": CommandEntry(".tools.reference.command:docs", "The documentation site."),
    "fuzz": CommandEntry(".tools.fuzz.command:fuzz", "Fuzz TARGET against the spec on every core."),
    "monitor": CommandEntry(
        ".tools.stream.monitor_command:monitor", "Check a KV-event stream against a consumer model."
    ),
    "mutants": CommandEntry(
        ".tools.mutants.command:mutants", "Run the suite against every mutant of kvpool.impl."
    ),
    "profile": CommandEntry(".profiles.command:profile", "Profiles as files."),
    "prove": CommandEntry(
        ".tools.proofs.command:prove", "Prove the block pool's invariants with Z3."
    ),
    "publish": CommandEntry(
        ".tools.stream.publish_command:publish",
        "Publish a pool's KV events through vLLM's publisher.",
    ),
    "replay": CommandEntry(".trace.replay_command:replay", "Replay TRACE_FILE against its target."),
    "route-check": CommandEntry(
        ".tools.routes.command:route_check", "Measure how well routers know a live worker's cache."
    ),
    "rules": CommandEntry(
        ".tools.reference.rules_command:rules", "Explain every rule, invariant and property."
    ),
    "show": CommandEntry(".trace.show_command:show_trace", "Render TRACE_FILE as it was recorded."),
    "targets": CommandEntry(".targets.command:targets", "The targets that can be checked."),
    "validate": CommandEntry(
        ".tools.validate.command:validate_command",
        "Validate an engine's KV-event stream against the spec.",
    ),
    "vectors": CommandEntry(
        ".tools.vectors.command:vectors", "Test vectors: the contract as data."
    ),
    "workload": CommandEntry(
        ".machines.requests.workload_command:workload", "Run a seeded serving workload in lockstep."
    ),
}


def load_command(name: str) -> click.Command:
    """The command ``name`` (a key of :data:`COMMANDS`), its module imported now."""
    module, _, attribute = COMMANDS[name].where.partition(":")
    command = getattr(importlib.import_module(module, __package__), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{COMMANDS[name].where} is not a click command")
    return command


class LazyGroup(click.Group):
    """A command group that imports a command's module only when that command runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, its ``--help`` ending with the exit-status policy."""
        if cmd_name not in COMMANDS:
            return None
        command = load_command(cmd_name)
        if command.epilog is None:
            command.epilog = help_block()
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and their lines, from :data:`COMMANDS` (no module imported)."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name].short_help) for name in sorted(COMMANDS)])

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command under :mod:`.exits`' policy: an exception none of its checks
        expects is a finding when the target's code raised it (a crash, ``SystemExit``,
        ``KeyboardInterrupt``), a bug of kvpool otherwise (exit 4, with the command and the
        traceback); the user's Ctrl-C exits 130."""
        words = ["kvpool", *getattr(ctx, "_protected_args", ()), *ctx.args]
        try:
            with watching_interrupts():
                return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except SystemExit as exc:
            if raised_by_target(exc):
                _target_ended(exc)
            raise
        except KeyboardInterrupt as exc:
            if not interrupted_by_user() and raised_by_target(exc):
                _target_ended(exc)
            click.echo("interrupted (Ctrl-C)", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except Exception as exc:
            if raised_by_target(exc):
                _target_ended(exc)
            from rich.console import Console

            from .usage import fail_bug, invoked_command

            fail_bug(Console(stderr=True), exc, invoked_command(words))


def _target_ended(exc: BaseException) -> NoReturn:
    """A finding no check caught: the target's own code raised ``exc`` (a crash, or it
    tried to end the process) outside the steps the suite judges one by one."""
    import traceback

    click.echo(
        f"Nonconformance: the target's own code raised {type(exc).__name__}"
        f"{f': {exc}' if str(exc) else ''} (a target that crashes or ends the process is a "
        "finding)",
        err=True,
    )
    click.echo("".join(traceback.format_exception(exc)), err=True, nl=False)
    sys.exit(EXIT_FINDING)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=help_block(),
)
@click.version_option(version=None, package_name="kvpool-spec", message="kvpool %(version)s")
def main() -> None:
    """kvpool: the reference spec and conformance suite for paged KV-cache block pools.

    \b
    Start here:
      kvpool conform                         check the built-in pool at every level
      kvpool conform --target mypkg.pool:make_pool
                                             check your own vLLM-style pool
      kvpool targets                         what can be checked, and the profiles
    """
