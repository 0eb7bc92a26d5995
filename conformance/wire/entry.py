"""``exec:CMD ARGS...``: a pool (``--target``) or a KV cache manager (``--manager``) in any
language, a program the suite starts and speaks to over the wire protocol (the docs' "The
wire protocol" page).

The program is the one the command line names (a trace file never starts one). It is
started once per command: the profile it names in its handshake judges it unless
``--profile`` says otherwise, and every test case's pool is a fresh ``init`` in it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from types import MappingProxyType

from kvpool.spec import PROFILES, Action, PoolConfig, Profile
from kvpool.spec.manager import ManagerConfig

from ..bounds import WIRE_REPLY_TIMEOUT
from ..machines.pool.target import Target, TargetFactory
from ..machines.requests.target import ManagerTargetFactory, RequestSetup
from ..targets.description import Form, TargetDescription
from ..targets.errors import TargetLoadError, TargetUsageError
from ..targets.registry import EngineEntry, ProfileChoice
from .child import WireError
from .manager import MANAGER_OFFERS, WireManagerFactory
from .session import Ahead, Session
from .target import WireTarget

#: The options an ``exec`` form takes before its colon.
OPTIONS = {"timeout": f"seconds to wait for each reply (default {WIRE_REPLY_TIMEOUT:g})"}


class WireFactory:
    """Builds each test case's pool in one running program."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.first: Sequence[Action] = ()
        #: The pools said to come after the next one (:meth:`plan_next`), in order.
        self.then: deque[Ahead] = deque()

    def plan_first(self, actions: Sequence[Action]) -> None:
        """The actions the next pool built applies first: sent with its ``init``."""
        self.first = actions

    def plan_next(self, config: PoolConfig, profile: Profile, actions: Sequence[Action]) -> None:
        """A pool built later, the next or after those said before (its config, profile
        and first actions): each pool built starts those said after it in the program
        once it has sent what it was told, so the program computes them while the suite
        judges it. A pool built with first actions that were not said ends what was
        said."""
        self.then.append((config, profile.name, tuple(actions)))

    def __call__(self, config: PoolConfig, profile: Profile) -> Target:
        first, self.first = self.first, ()
        built = (config, profile.name, tuple(first))
        if built in self.then:  # those said before it were not built: left
            while self.then.popleft() != built:
                pass
        elif first:  # a pool not said: those said are no longer the run's
            self.then.clear()
        return WireTarget(self.session, config, profile, first, tuple(self.then))


def session_for(described: TargetDescription) -> Session:
    """A session with the program ``described`` names (started by its first message)."""
    return Session(described.command, timeout_of(described))


def timeout_of(described: TargetDescription) -> float:
    text = described.option("timeout")
    if text is None:
        return WIRE_REPLY_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 86_400:
        raise TargetUsageError(f"{described.text!r}: timeout={text} is not a number of seconds")
    return seconds


class ExecEntry(EngineEntry):
    """The ``exec:`` form: not a registered engine, but loaded the same way."""

    name = "exec"
    summary = "a pool in any language: a program speaking the wire protocol"
    forms = MappingProxyType(
        {
            "exec:CMD ARGS...": "a program the suite starts, one JSON message per line",
            "exec,timeout=S:CMD ARGS...": "the same, waiting S seconds for each reply",
        }
    )
    accepted = frozenset({Form.EXEC})

    def parse(self, described: TargetDescription) -> TargetDescription:
        unknown = [key for key, _ in described.options if key not in OPTIONS]
        if unknown:
            raise TargetUsageError(
                f"{described.text!r}: exec takes the options {', '.join(OPTIONS)}, "
                f"not {', '.join(unknown)}"
            )
        timeout_of(described)
        return described

    def load_pool(self, described: TargetDescription) -> tuple[TargetFactory, str]:
        """A factory of pools in one program of its own (two loads of the same program,
        as ``kvpool diff`` makes of one program against itself, run two), started now."""
        session = session_for(self.parse(described))
        name, _ = self.handshake(session)
        return WireFactory(session), name

    def profile(self, described: TargetDescription) -> ProfileChoice:
        session = session_for(self.parse(described))
        try:
            name, profile = self.handshake(session)
        finally:
            session.close()
        if profile not in PROFILES:
            raise TargetLoadError(
                f"program {name!r} names the profile {profile!r} in its handshake, which "
                f"kvpool does not know (the profiles are {', '.join(sorted(PROFILES))}); "
                "give --profile, or answer with one of those"
            )
        return ProfileChoice(profile, f"the profile program {name!r} names in its handshake")

    def handshake(self, session: Session) -> tuple[str, str]:
        """The program's name and profile, asked with a two-block pool (``profile``
        ``null``: the suite has not chosen one yet)."""
        try:
            hello, _ = session.init(PoolConfig(2), None)
        except WireError as exc:
            raise TargetLoadError(str(exc)) from None
        return hello.name, hello.profile

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory, str]:
        """A factory of managers in one program of its own, started now (its handshake
        says what it offers beyond the protocol's methods)."""
        session = session_for(self.parse(described))
        probe = RequestSetup(ManagerConfig(block_size=1), PoolConfig(4))
        try:
            hello, _ = session.init(probe, None, MANAGER_OFFERS)
        except WireError as exc:
            raise TargetLoadError(str(exc)) from None
        # named by its text: a trace records the manager by this name and replays it so
        return WireManagerFactory(session, hello.operations), described.text


EXEC = ExecEntry()

__all__ = ["EXEC", "OPTIONS", "WireFactory", "WireTarget"]
