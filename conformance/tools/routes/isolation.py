"""Loopback only: the run inside a private network namespace whose one interface is lo.

Dynamo's indexer (1.6.1) serves HTTP on every interface (``0.0.0.0``; it has no option to
choose one). ``kvpool route-check`` therefore re-runs itself in a new network namespace
(``unshare --net``, with a user namespace when not root) where loopback is the only
interface: every socket the check opens, the indexer's included, is reachable from this
machine's loopback of that namespace and from nowhere else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable

#: Set inside the namespace, so the check does not re-run itself again.
INSIDE = "KVPOOL_LOOPBACK_NAMESPACE"


class IsolationError(RuntimeError):
    """No private network namespace could be made; the message says why."""


def inside() -> bool:
    return os.environ.get(INSIDE) == "1"


def run_isolated(argv: list[str]) -> int:
    """Run ``argv`` (a ``kvpool`` command line) in a new network namespace with lo up;
    its exit status. :class:`IsolationError` when ``unshare`` or ``ip`` is missing or
    namespaces are not allowed here."""
    kvpool = [sys.executable, "-c", "from kvpool.conformance.cli import main; main()"]
    return run_in_namespace([*kvpool, *argv], "route-check runs the indexer")


def namespace_problem(who: str) -> str | None:
    """Why no private network namespace can be made here (``None``: one can), for a
    program that ``who`` runs in one because it binds every interface."""
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        return (
            f"{who} in a private network namespace (it binds every interface) and needs "
            "unshare and ip (util-linux, iproute2)"
        )
    probe = subprocess.run(
        [unshare, "--net", *_user(), "true"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return (
            f"{who} in a private network namespace (it binds every interface), and "
            f"unshare --net failed here: {probe.stderr.strip()}"
        )
    return None


def run_in_namespace(
    command: list[str], who: str, preexec_fn: Callable[[], None] | None = None
) -> int:
    """Run ``command`` in a new network namespace with lo up (``preexec_fn`` called in
    its process first); its exit status. :class:`IsolationError` naming ``who`` when
    none can be made."""
    problem = namespace_problem(who)
    if problem is not None:
        raise IsolationError(problem)
    script = f'{shutil.which("ip")} link set lo up && exec "$@"'
    wrapped = [str(shutil.which("unshare")), "--net", *_user(), "sh", "-c", script, "sh"]
    env = {**os.environ, INSIDE: "1"}
    return subprocess.run(
        [*wrapped, *command], env=env, preexec_fn=preexec_fn, check=False
    ).returncode


def _user() -> list[str]:
    return [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
