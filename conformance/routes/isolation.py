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
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        raise IsolationError(
            "route-check runs the indexer in a private network namespace (it binds every "
            "interface) and needs unshare and ip (util-linux, iproute2)"
        )
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    script = f'{ip} link set lo up && exec "$@"'
    kvpool = [sys.executable, "-c", "from kvpool.conformance.cli import main; main()"]
    command = [unshare, "--net", *user, "sh", "-c", script, "sh", *kvpool, *argv]
    env = {**os.environ, INSIDE: "1"}
    probe = subprocess.run(
        [unshare, "--net", *user, "true"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        raise IsolationError(
            "route-check runs the indexer in a private network namespace (it binds every "
            f"interface), and unshare --net failed here: {probe.stderr.strip()}"
        )
    return subprocess.run(command, env=env, check=False).returncode
