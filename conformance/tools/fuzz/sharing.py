"""How a worker uses the shared example database.

Two things differ from a plain Hypothesis run:

- A worker that already reported a kind of failure drops test cases that run into it again
  (so it looks for new kinds), and Hypothesis deletes a replayed example that no longer
  fails. Such an example still fails for every other worker, so while a worker knows a
  failure, its deletes are kept from the database (:attr:`SharedExamples.keep_failures`).
- A backend that stops answering (Redis gone, a disk full) must not end the campaign, nor
  read as a failure of the pool under test: each backend is :class:`Tolerant`, its errors
  are counted, and the others go on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hypothesis.database import ExampleDatabase

from ...bounds import MAX_EXAMPLE_BYTES, MAX_EXAMPLES_PER_KEY


class SharedExamples(ExampleDatabase):
    """A worker's view of the campaign's database (see the module docstring)."""

    def __init__(self, backend: ExampleDatabase) -> None:
        super().__init__()
        self.backend = backend
        #: Set while this worker knows a failure: deletes are dropped.
        self.keep_failures = False

    def __repr__(self) -> str:
        return f"SharedExamples({self.backend!r})"

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.backend.fetch(key)

    def save(self, key: bytes, value: bytes) -> None:
        self.backend.save(key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        if not self.keep_failures:
            self.backend.delete(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        if self.keep_failures:
            self.backend.save(dest, value)
        else:
            self.backend.move(src, dest, value)


@dataclass
class DatabaseErrors:
    """The errors of a worker's database backends: how many, and the latest."""

    count: int = 0
    last: str | None = None


class Tolerant(ExampleDatabase):
    """One backend whose errors are counted in ``errors`` instead of raised: a fetch that
    fails finds nothing, a save that fails is lost. What a fetch reads is data from
    outside: an example above ``MAX_EXAMPLE_BYTES`` is dropped and counted, and at most
    ``MAX_EXAMPLES_PER_KEY`` are taken (Hypothesis reads what comes back as a choice
    sequence, and one that does not parse is skipped)."""

    def __init__(self, backend: ExampleDatabase, name: str, errors: DatabaseErrors) -> None:
        super().__init__()
        self.backend = backend
        self.name = name
        self.errors = errors

    def __repr__(self) -> str:
        return f"Tolerant({self.backend!r})"

    def fetch(self, key: bytes) -> Iterable[bytes]:
        taken: list[bytes] = []
        try:
            for value in self.backend.fetch(key):
                if len(value) > MAX_EXAMPLE_BYTES:
                    self._refused(f"an example of {len(value)} bytes (at most {MAX_EXAMPLE_BYTES})")
                    continue
                taken.append(value)
                if len(taken) == MAX_EXAMPLES_PER_KEY:
                    break
        except Exception as exc:  # whatever the backend raises: the campaign goes on
            self._failed("fetch", exc)
        return taken

    def save(self, key: bytes, value: bytes) -> None:
        try:
            self.backend.save(key, value)
        except Exception as exc:  # see fetch
            self._failed("save", exc)

    def delete(self, key: bytes, value: bytes) -> None:
        try:
            self.backend.delete(key, value)
        except Exception as exc:  # see fetch
            self._failed("delete", exc)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        try:
            self.backend.move(src, dest, value)
        except Exception as exc:  # see fetch
            self._failed("move", exc)

    def _failed(self, operation: str, exc: Exception) -> None:
        self._refused(f"{operation}: {type(exc).__name__}: {exc}")

    def _refused(self, what: str) -> None:
        self.errors.count += 1
        self.errors.last = f"{self.name} {what}"
