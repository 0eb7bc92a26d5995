"""The two ways naming a target can fail: it names nothing (a usage error), or what it
names cannot be loaded. Both messages say what to fix; the command line turns either into
exit status 2."""

from __future__ import annotations


class TargetLoadError(Exception):
    """``--target`` or ``--manager`` names nothing that can be loaded; the message says
    what to fix."""


class TargetUsageError(TargetLoadError):
    """The text fits no target form, or names an engine or option nobody registered."""
