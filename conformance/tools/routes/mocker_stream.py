"""Dynamo's mocker's stream for route-check: the mocker's own process and its own publisher.

``--target dynamo-mocker`` starts NVIDIA Dynamo's mocker (``python -m dynamo.mocker``,
vLLM backend, extra ``[dynamo-mocker]``) on loopback, with the block size and pool of the
check, by the validate driver's :class:`~kvpool.conformance.tools.validate.dynamo_mocker.Mocker`
(one place starts and stops it). The scenario's workload is scheduled by the spec's manager
(:class:`~.planner.Planner`: it answers the workload's admissions, growth and preemptions, as the
target's manager does on vLLM's streams); each prompt it admits is sent to the mocker's
request endpoint as one request (one generated token), one at a time, and the messages the
mocker publishes until its stream is quiet are that request's. The consumers read the
mocker's ZMQ stream themselves (its publisher and replay ports are the scenario's wire);
only those that hash tokens themselves can be asked (``dynamo-indexer``: the mocker's block
hashes are its own, not the spec's).

The truth for a prompt prefix is what a lookup hits on the spec's manager (profile
``vllm-0.33``) replaying the same prompts, one request at a time, as the mocker ran them
(:class:`~kvpool.conformance.tools.validate.spec_side.SpecReplay`, the replay ``kvpool validate``
judges the mocker against: their prefix sets agree after every request; their stores differ
per copy). The mocker binds every interface, so this runs only inside route-check's
loopback-only network namespace. A mocker that exits, or fails a request, is a
:class:`~kvpool.conformance.tools.validate.dynamo_mocker.MockerError` holding its log's tail.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from kvpool.spec import get_profile
from kvpool.spec.consumer import served_blocks
from kvpool.spec.manager import Admit, ManagerResult, RequestAction, Scheduled

from ..stream.wire import MalformedFrame, decode_message
from ..validate.dynamo_mocker import INSTALL, Mocker, MockerError, installed
from ..validate.request_log import LoggedRequest, RequestLog
from ..validate.spec_side import SpecReplay
from .planner import Planner

#: The target naming the mocker.
MOCKER = "dynamo-mocker"
#: The profile of the engine the mocker's vLLM backend simulates, whose replay is the truth.
PROFILE = "vllm-0.33"
#: Why only the indexer is asked on the mocker's stream.
MOCKER_CONSUMERS = (
    "the mocker's block hashes are its own, not the spec's; the indexer hashes tokens itself"
)
#: The scenarios the mocker cannot run, and why.
NOT_ON_MOCKER = {
    "resets": "the mocker's request endpoint cannot reset its prefix cache",
    "data-parallel": "the route-check mocker runs one rank",
}


def is_mocker(target: str) -> bool:
    """Whether ``target`` names Dynamo's mocker."""
    return target == MOCKER


def mocker_problem() -> str | None:
    """Why the mocker cannot be run here (``None``: it can)."""
    return None if installed() else f"Dynamo's mocker is not installed: {INSTALL}"


class MockerEngine:
    """One mocker process: each prompt the workload admits sent to it, its messages taken,
    the same prompt replayed by the spec's manager for the truth."""

    def __init__(self, block_size: int, blocks: int, port: int, replay_port: int) -> None:
        profile = get_profile(PROFILE)
        self.block_size = block_size
        self.planner = Planner(block_size, blocks, profile)
        # vLLM's pool of ``blocks`` holds one null block: the mocker is given the rest
        self.truth = SpecReplay(RequestLog(MOCKER, block_size, blocks, ()), profile)
        # the mocker's log: removed at shutdown, kept when the mocker failed (its error
        # names it)
        self._folder = Path(tempfile.mkdtemp(prefix="kvpool-route-mocker-"))
        self.failed = False
        self.mocker = Mocker(
            self._folder / "mocker.log",
            events_port=port,
            replay_port=replay_port,
            block_size=block_size,
            usable_blocks=blocks - 1,
        )
        try:
            self.mocker.start()
        except MockerError:
            self.failed = True  # its log is kept: the error names it
            raise
        except BaseException:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise
        self.sent = 0

    def apply(
        self, action: RequestAction
    ) -> tuple[ManagerResult, tuple[bytes, ...] | None, list[dict[str, int]]]:
        """Schedule ``action``; an admitted prompt is run on the mocker and replayed by the
        spec. The result, the prompt's block hashes (``None``: nothing was sent) and the
        events of each message the mocker published, by type."""
        result = self.planner.apply(action)
        if not (isinstance(action, Admit) and isinstance(result, Scheduled)):
            return result, None, []
        self.sent += 1
        try:
            batches = self._run(action)
        except MockerError:
            self.failed = True
            raise
        replayed = self.truth.run(LoggedRequest(action.request_id, action.tokens))
        return result, replayed.block_hashes, batches

    def _run(self, admitted: Admit) -> list[dict[str, int]]:
        """Run an admitted prompt on the mocker; the events of each message it published,
        by type."""
        self.mocker.send(admitted.request_id, admitted.tokens, 1)
        batches: list[dict[str, int]] = []
        for frames in self.mocker.settled():
            try:
                message = decode_message(frames)
            except MalformedFrame as exc:
                what = f"the mocker published a message that does not decode: {exc}"
                raise MockerError(f"{what}\n{self.mocker.tail()}") from None
            kinds: dict[str, int] = {}
            for event in message.batch.events:
                kinds[event.kind] = kinds.get(event.kind, 0) + 1
            batches.append(kinds)
        return batches

    def held_blocks(self, hashes: tuple[bytes, ...]) -> int:
        """The leading blocks of a prefix a lookup hits on the spec's replay."""
        return served_blocks(self.truth.pool, hashes, 0)

    def shutdown(self) -> None:
        try:
            self.mocker.stop()
        finally:
            if not self.failed:
                shutil.rmtree(self._folder, ignore_errors=True)
