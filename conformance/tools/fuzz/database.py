"""The example database a campaign shares, and the key each job stores its failures under.

Hypothesis keeps every failing example it finds in an example database and replays those
first the next time the same test runs. A campaign points all its workers at one database:
a directory on this machine (``--db-dir``), and with ``--redis URL`` also a Redis server
(:class:`hypothesis.extra.redis.RedisExampleDatabase`) that workers on other machines use
too. Both together are a :class:`~hypothesis.database.MultiplexedDatabase`: what is found
anywhere lands in Redis and in the local directory, so it also outlives the Redis server.

Hypothesis would key a state machine's examples by a digest of the machine class; ours are
built at run time and named by level only, so two targets would share a key. Every job's
key is set explicitly instead (:func:`database_key`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    MultiplexedDatabase,
)
from kvpool.spec.files import UnreadableFile, read_regular_file

from ...bounds import MAX_EXAMPLE_BYTES
from ...install import extra_hint
from .plan import CampaignPlan, DatabaseSpec, JobSpec
from .sharing import DatabaseErrors, Tolerant

#: Bumped when what a stored example means changes (the machines draw differently).
KEY_FORMAT = 2
#: Redis keys start with this (Hypothesis's own default), then the job's key.
REDIS_PREFIX = b"hypothesis-example:"
FUZZ_EXTRA = extra_hint("fuzz")


class DatabaseError(Exception):
    """The example database cannot be opened; the message says what to fix."""


def database_key(plan: CampaignPlan, job: JobSpec) -> bytes:
    """The key a job's failing examples are stored under, the same in every worker on every
    machine of a campaign and in every later campaign with the same settings:
    ``kvpool-fuzz/v2/TARGET/PROFILE/MACHINE/LEVEL/blocks=N`` (and ``manager=M`` for the
    request machine on a manager). A stored example is the seed of a test case's drawing:
    it means the same test case only for the same target, profile, machine, level and pool
    sizes."""
    parts = [
        f"kvpool-fuzz/v{KEY_FORMAT}",
        plan.target,
        plan.profile,
        job.machine,
        job.level,
        f"blocks={plan.max_blocks(job)}",
    ]
    if job.machine == "requests" and job.level == "manager":
        parts.append(f"manager={plan.manager}")
    return "/".join(parts).encode()


def open_database(spec: DatabaseSpec, errors: DatabaseErrors) -> ExampleDatabase:
    """The directory database, multiplexed with Redis when ``spec`` names a server; each
    backend's errors are counted in ``errors`` rather than raised (see :mod:`.sharing`)."""
    local = Tolerant(RegularFilesDatabase(spec.directory, errors), spec.directory, errors)
    if spec.redis_url is None:
        return local
    shared = Tolerant(redis_database(spec.redis_url), spec.redis_url, errors)
    return MultiplexedDatabase(local, shared)


class RegularFilesDatabase(DirectoryBasedExampleDatabase):
    """Hypothesis's directory database, whose examples are read as every kvpool reader
    reads a file (:mod:`kvpool.spec.files`): regular files only, at most
    ``MAX_EXAMPLE_BYTES`` each. A FIFO, a device or an oversized file stored under a key is
    skipped and counted in ``errors``, never waited on (a FIFO would hang the worker until
    the campaign killed it, and the campaign would then have judged nothing)."""

    def __init__(self, path: str, errors: DatabaseErrors) -> None:
        super().__init__(path)
        self.errors = errors

    def fetch(self, key: bytes) -> Iterable[bytes]:
        folder = self._key_path(key)
        try:
            names = sorted(os.listdir(folder)) if folder.is_dir() else []
        except OSError:  # the folder went away meanwhile: nothing stored
            return
        for name in names:
            try:
                yield read_regular_file(folder / name, MAX_EXAMPLE_BYTES, "stored example")
            except UnreadableFile as exc:
                self.errors.count += 1
                self.errors.last = str(exc)


def redis_database(url: str) -> ExampleDatabase:
    """Hypothesis's Redis database on the server at ``url``, checked to answer."""
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError as exc:
        raise DatabaseError(
            f"kvpool fuzz --redis needs the redis client (redis-py): {FUZZ_EXTRA} ({exc})"
        ) from None
    try:
        client: Any = redis.Redis.from_url(url)
        client.ping()
    except ValueError as exc:
        raise DatabaseError(f"--redis {url!r} is not a Redis URL: {exc}") from None
    except redis.RedisError as exc:
        raise DatabaseError(f"cannot reach Redis at {url}: {exc}") from None
    return RedisExampleDatabase(client, key_prefix=REDIS_PREFIX)
