"""What-if faults for the DES engine: links that fail or slow down, and ranks that start late.

`parse_fault(text, fabric)` promises a Fault for one `--fault` value:
- `link-down:WHERE@TIME` — the link stops carrying anything at TIME (us unless suffixed us, ms or
  s); transfers on it stall, and the run ends in a HangReport;
- `degrade:WHERE:FACTOR` — the link carries FACTOR (0 < FACTOR) of its capacity from the start.
WHERE names a fabric link as `nicksim topo --links` prints it: `node0:GPU/0->NVS/0` is one
direction, `node0:GPU/0-NVS/0` (one dash) both; `nic(0,1)->leaf(1,0)` for cables. A name that
matches nothing is an error that lists the nearest names. `parse_straggler(text, nranks)` reads
`--straggler RANK:DELAY` (the rank's kernels start DELAY later, us unless suffixed).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from ..errors import UsageError
from .fabric import Fabric

__all__ = ["Fault", "parse_fault", "parse_straggler", "parse_duration_us", "resolve_links"]

_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}


@dataclass(frozen=True)
class Fault:
    """A change to links: `kind` "link-down" (capacity 0 from `at_us`) or "degrade" (capacity x
    `factor` from the start); `links` are fabric link ids, `where` the name the user gave."""

    kind: str
    where: str
    links: tuple[int, ...]
    at_us: float = 0.0
    factor: float = 1.0


def parse_duration_us(text: str, where: str) -> float:
    """A time like 50, 50us, 2.5ms or 1s, in microseconds."""
    t = text.strip().lower()
    unit = next((u for u in ("us", "ms", "s") if t.endswith(u)), "us")
    number = t[: -len(unit)] if t.endswith(unit) else t
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise UsageError(f"'{text}' is not a time", where, "a number with an optional us, ms or s") from None
    if not value >= 0 or value == float("inf"):
        raise UsageError(f"time {text}", where, "a time >= 0")
    return value


def resolve_links(fabric: Fabric, where: str, flag: str = "--fault") -> tuple[int, ...]:
    """The link ids a WHERE names: `A->B` one direction, `A-B` both."""
    names = {link.name: i for i, link in enumerate(fabric.links)}
    if where in names:
        return (names[where],)
    if "->" not in where and "-" in where:
        prefix, _, rest = where.rpartition(":")
        a, sep, b = rest.partition("-")
        head = f"{prefix}:" if prefix else ""
        both = [f"{head}{a}->{b}", f"{head}{b}->{a}"]
        if all(name in names for name in both):
            return tuple(names[name] for name in both)
    near = difflib.get_close_matches(where, list(names), n=4, cutoff=0.5)
    hint = ", ".join(near) if near else "a link name from `nicksim topo --links`"
    raise UsageError(f"no link named '{where}'", flag, hint)


def parse_fault(text: str, fabric: Fabric) -> Fault:
    """One --fault value (see the module docstring)."""
    kind, sep, rest = text.partition(":")
    if kind == "link-down" and sep:
        where, at, when = rest.rpartition("@")
        if not at:
            raise UsageError(f"'{text}' has no @TIME", "--fault", "link-down:WHERE@TIME")
        return Fault("link-down", where, resolve_links(fabric, where), parse_duration_us(when, "--fault"))
    if kind == "degrade" and sep:
        where, colon, factor_text = rest.rpartition(":")
        try:
            factor = float(factor_text)
        except ValueError:
            factor = -1.0
        if not colon or not factor > 0 or factor == float("inf"):
            raise UsageError(f"'{text}' needs a factor above 0", "--fault", "degrade:WHERE:FACTOR, e.g. 0.5")
        return Fault("degrade", where, resolve_links(fabric, where), 0.0, factor)
    raise UsageError(f"unknown fault '{text}'", "--fault", "link-down:WHERE@TIME or degrade:WHERE:FACTOR")


def parse_straggler(text: str, nranks: int) -> tuple[int, float]:
    """(rank, delay in us) from RANK:DELAY."""
    rank_text, sep, delay = text.partition(":")
    try:
        rank = int(rank_text)
    except ValueError:
        rank = -1
    if not sep or not 0 <= rank < nranks:
        raise UsageError(f"'{text}'", "--straggler", f"RANK:DELAY with RANK in 0..{nranks - 1}")
    return rank, parse_duration_us(delay, "--straggler")
