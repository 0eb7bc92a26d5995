"""The one reader of a file that comes from outside: a trace, a vector, a recording, an
expectations file, a profile file, a route-check record, an example of the fuzz database.

Such a file is data a person named (on the command line, or as the folder a command
scans), and reading it must not hurt: :func:`read_regular_file` opens regular files only
and reads at most a bound, and anything else is one :class:`UnreadableFile` naming the
file and why. It lives beside the spec because the spec's own profile reader uses it; it
needs nothing but the standard library.

- A FIFO, a device (``/dev/zero``, ``/dev/urandom``), a socket or a folder is refused
  before a byte is read: the file is opened without blocking (``O_NONBLOCK``, so opening a
  FIFO with no writer returns at once) and the *opened* descriptor is checked
  (``fstat``), so nothing can be swapped in between a check and the read.
- The read is bounded: at most ``limit + 1`` bytes are read, whatever the size the file
  claims (a file under ``/proc`` claims 0), and more than ``limit`` is refused.
- Symlinks are followed: a link is something the user's own file system holds, and the
  file it names is checked as above (a link to ``/dev/zero`` is a device). No field
  inside a file is ever used as a path, so a file cannot name another file to read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


class UnreadableFile(ValueError):
    """A file that is not read: missing, not a regular file, over its bound, or failing to
    read. The message names the file and says why."""


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def open_regular_file(path: str | os.PathLike[str], what: str = "file") -> BinaryIO:
    """The regular file at ``path``, opened for reading in binary (its reads then block as
    a regular file's do, never on a writer); :class:`UnreadableFile` naming ``what`` and
    the path for a file that cannot be opened or is not a regular file. The caller bounds
    what it reads (:func:`read_regular_file` reads a whole file to a bound)."""
    name = f"{what} {Path(path)}"
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise UnreadableFile(f"{name}: cannot be opened: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(f"{name}: is {file_kind(mode)}; only regular files are read")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: str | os.PathLike[str], limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them.

    :class:`UnreadableFile` (naming ``what`` and the path) for a file that cannot be
    opened, is not a regular file, or holds more than ``limit`` bytes.
    """
    name = f"{what} {Path(path)}"
    with open_regular_file(path, what) as file:
        try:
            data = file.read(limit + 1)
        except OSError as exc:
            raise UnreadableFile(f"{name}: cannot be read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise UnreadableFile(f"{name}: more than {limit} bytes; at most {limit} are read")
    return data


def read_regular_text(path: str | os.PathLike[str], limit: int, what: str = "file") -> str:
    """:func:`read_regular_file` decoded as UTF-8 (:class:`UnreadableFile` if it is not)."""
    data = read_regular_file(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(f"{what} {Path(path)}: not UTF-8 (byte {exc.start})") from None
