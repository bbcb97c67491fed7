"""Input files opened without waiting on them.

`read_input(path)` gives a file's bytes, read whole; `open_input(path)` a binary stream to read
it by parts (a pipe's bytes are read whole into memory, so the stream can always seek). A named pipe (FIFO) with no writer would
block open() forever, so every input is opened non-blocking and then read as usual: a pipe that
has a writer is read until the writer closes it (`cmd | nicksim hang diagnose /dev/stdin`), one
that has none reads as empty. A folder, a missing or unreadable path is a UsageError that names it.
"""
from __future__ import annotations

import fcntl
import io
import os
import stat
from pathlib import Path
from typing import BinaryIO

from .errors import UsageError

__all__ = ["read_input", "open_input"]


def open_input(path: str | Path, valid: str = "a readable file") -> BinaryIO:
    """A seekable binary stream of the file at `path` (see the module docstring)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UsageError("no such file", str(path), valid) from None
    except IsADirectoryError:
        raise UsageError("is a directory", str(path), valid) from None
    except OSError as err:
        raise UsageError(f"cannot read: {err.strerror}", str(path), valid) from None
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise UsageError("is a directory", str(path), valid)
        stream = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    if stream.seekable():
        return stream
    with stream:  # a pipe or a device: what it gives, read whole
        try:
            return io.BytesIO(stream.read())
        except OSError as err:
            raise UsageError(f"cannot read: {err.strerror}", str(path), valid) from None


def read_input(path: str | Path, valid: str = "a readable file") -> bytes:
    """The bytes of the file at `path` (see the module docstring); `valid` says what was wanted."""
    with open_input(path, valid) as stream:
        try:
            return stream.read()
        except OSError as err:
            raise UsageError(f"cannot read: {err.strerror}", str(path), valid) from None
