"""``exec:CMD ARGS...``: a pool in any language, a program the suite starts and speaks to
over the wire protocol (the docs' "The wire protocol" page).

The program is the one the command line names (a trace file never starts one). It is
started once per command: the profile it names in its handshake judges it unless
``--profile`` says otherwise, and every test case's pool is a fresh ``init`` in it.
"""

from __future__ import annotations

from types import MappingProxyType

from kvpool.spec import PROFILES, PoolConfig, Profile

from ..bounds import WIRE_REPLY_TIMEOUT
from ..engine.target import Target, TargetFactory
from ..targets.description import Form, TargetDescription
from ..targets.errors import TargetLoadError, TargetUsageError
from ..targets.registry import EngineEntry, ProfileChoice
from .child import WireError
from .session import Session
from .target import WireTarget

#: The options an ``exec`` form takes before its colon.
OPTIONS = {"timeout": f"seconds to wait for each reply (default {WIRE_REPLY_TIMEOUT:g})"}


class WireFactory:
    """Builds each test case's pool in one running program."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def __call__(self, config: PoolConfig, profile: Profile) -> Target:
        return WireTarget(self.session, config, profile)


#: One session per program and timeout, shared by the profile's question and the runs.
_SESSIONS: dict[tuple[tuple[str, ...], float], Session] = {}


def session_for(described: TargetDescription) -> Session:
    """The session with the program ``described`` names (started on its first message)."""
    key = (described.command, timeout_of(described))
    session = _SESSIONS.get(key)
    if session is None or session.broken is not None:
        session = _SESSIONS[key] = Session(*key)
    return session


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
        name, _ = self.handshake(self.parse(described))
        return WireFactory(session_for(described)), name

    def profile(self, described: TargetDescription) -> ProfileChoice:
        name, profile = self.handshake(self.parse(described))
        if profile not in PROFILES:
            raise TargetLoadError(
                f"program {name!r} names the profile {profile!r} in its handshake, which "
                f"kvpool does not know (the profiles are {', '.join(sorted(PROFILES))}); "
                "give --profile, or answer with one of those"
            )
        return ProfileChoice(profile, f"the profile program {name!r} names in its handshake")

    def handshake(self, described: TargetDescription) -> tuple[str, str]:
        """The program's name and profile, asked with a two-block pool (``profile``
        ``null``: the suite has not chosen one yet)."""
        try:
            hello, _ = session_for(described).init(PoolConfig(2), None)
        except WireError as exc:
            raise TargetLoadError(str(exc)) from None
        return hello.name, hello.profile

    def load_manager(self, described: TargetDescription) -> tuple[None, str]:
        raise TargetLoadError(
            f"{described.text}: the wire protocol drives pools; a manager over it is not "
            "built yet (give --manager none, or a Python manager)"
        )


EXEC = ExecEntry()

__all__ = ["EXEC", "OPTIONS", "WireFactory", "WireTarget"]
