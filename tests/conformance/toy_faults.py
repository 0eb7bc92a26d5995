"""The toy scheduler with one planted fault each (see ``toy_engine``), as engine drivers."""

from toy_driver import ToyDriver  # pytest puts this folder on sys.path


class SaltBlind(ToyDriver):
    """Keys leave the salt out: a request hits a block another salt wrote."""

    fault = "salt-blind"


class LeakOnPreempt(ToyDriver):
    """A preempted request's blocks are never given back."""

    fault = "leak-on-preempt"


#: Each fault and the property that must catch it.
CAUGHT_BY = {SaltBlind: "own-contents", LeakOnPreempt: "refcounts-match-tables"}
