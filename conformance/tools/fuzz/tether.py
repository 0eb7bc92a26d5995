"""A worker dies with its supervisor, however the supervisor ends.

A supervisor that ends normally stops its workers itself (SIGINT, then SIGTERM and
SIGKILL). One killed outright (``kill -9``, the OOM killer) cannot, and a worker left
behind would go on running the pool past the campaign's deadline, writing traces nobody
reads. So each worker, as it starts:

- asks Linux to send it SIGKILL when its parent ends (``prctl(PR_SET_PDEATHSIG)``, through
  ctypes; elsewhere nothing is asked, and the supervisor's own ending is all there is);
- checks that its parent is still the supervisor that started it (if the supervisor died
  before the request was made, the signal would never come);
- moves into a process group of its own (``setpgid``), so that what the pool under test
  starts is ended with it (:func:`end_group`), and a terminal's Ctrl-C reaches only the
  supervisor, which forwards it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from contextlib import suppress

#: ``PR_SET_PDEATHSIG`` from ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1


def tether(supervisor: int) -> None:
    """Make this process die with ``supervisor`` (its parent), and lead its own group."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != supervisor:  # the supervisor died before the request took hold
        os._exit(1)
    with suppress(OSError):  # already a group leader: nothing to move
        os.setpgid(0, 0)


def end_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group worker ``pid`` leads (the worker and anything the
    pool under test started), or to the worker alone if it leads none yet."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
            return
    except ProcessLookupError:
        return
    with suppress(ProcessLookupError):
        os.kill(pid, sig)
