"""Every failure a user can cause is a NickSimError.

A NickSimError carries three parts — what went wrong, where (a file and line, a flag,
a variable) and what would have been valid — and renders them as one line. The command
line prints that line and exits with status 2; library callers catch the class.
"""
from __future__ import annotations

import sys

__all__ = [
    "NickSimError",
    "UsageError",
    "TopologyError",
    "UnknownNameError",
    "ParamError",
    "RanksFailed",
    "print_line",
]


class NickSimError(Exception):
    """A failure caused by input: one line, naming what, where and what would be valid."""

    kind = "error"

    def __init__(self, what: str, where: str | None = None, valid: str | None = None):
        self.what = what
        self.where = where
        self.valid = valid
        super().__init__(self.line())

    def line(self) -> str:
        text = f"{self.where}: {self.what}" if self.where else self.what
        if self.valid:
            text += f" (valid: {self.valid})"
        return _one_line(text)


def print_line(text: str, stream=None) -> None:
    """`text` and its newline in one write (stderr by default): processes that share a stream
    never cut into each other's lines, even where it is unbuffered (PYTHONUNBUFFERED), in which
    `print` writes the text and the newline apart."""
    stream = sys.stderr if stream is None else stream
    stream.write(text + "\n")
    stream.flush()


def _one_line(text: str) -> str:
    """Control characters a user typed (a newline pasted into a value) shown escaped, so the
    message stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class UsageError(NickSimError):
    """A command-line flag or value that cannot be used."""

    kind = "usage"


class TopologyError(NickSimError):
    """A topology file, or a system built from one, that cannot be read or completed."""

    kind = "topology"


class UnknownNameError(NickSimError):
    """A name (system, GPU model, fabric, collective) that is not in the catalog."""

    kind = "unknown-name"


class ParamError(NickSimError):
    """An NCCL_* / NICKSIM_* setting given in a form nicksim cannot take at all."""

    kind = "param"


class RanksFailed(NickSimError):
    """Rank processes of a real run ended with `status`; each already said why on stderr, so the
    command line ends with that status and adds nothing."""

    kind = "ranks-failed"

    def __init__(self, status: int):
        self.status = status
        super().__init__(f"rank processes ended with status {status} (their errors are on stderr)", "real")
