"""The alpha-beta demo: textbook ring allreduce against NCCL's double binary tree.

This module promises the classic cost model, not NCCL's tuning model (that is tuning.py): an
allreduce of m bytes over p ranks, each link B GB/s (1 GB = 1e9 B) and each step a us, costs
T_ring(m) = 2(p-1)/p * m/B + 2(p-1)*a on a ring and T_tree(m) = 2*d*(m/(2B) + a) on the double
binary tree (two trees, each carrying half the data, pipelined; d = ceil(log2 p) the depth). Both
are straight lines in m, so the size m* where they cost the same is solved in closed form: below
m* the tree wins (fewer latency steps), above it the ring wins (bandwidth-optimal). Edge cases:
p=1 has no communication (both 0 us, no crossover); p=2 makes both formulas the same line
(m/B + 2a, no crossover, every size a tie); p=3, or a=0, makes the lines meet only at m=0, so
the ring is never slower at any m > 0 (no crossover). `alphabeta_table` prices a list of sizes,
`format_alphabeta` prints it, `SCENARIOS` / `scenario_tables` are three built-in machines.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from types import MappingProxyType
from typing import NamedTuple

from ..errors import UsageError

__all__ = [
    "DEFAULT_SIZES_NBYTES",
    "SCENARIOS",
    "AlphaBetaRow",
    "AlphaBetaTable",
    "CostLine",
    "alphabeta_table",
    "format_alphabeta",
    "human_size",
    "meeting_nbytes",
    "ring_line",
    "scenario_tables",
    "tree_depth",
    "tree_line",
]

# nccl-tests' `-b 8 -e 8G -f 2` sweep: 8 B, 16 B, ..., 8 GiB (31 sizes).
DEFAULT_SIZES_NBYTES: tuple[int, ...] = tuple(8 << k for k in range(31))

# name -> (p, bw_gbps, lat_us, description). Read-only; the values and where they come from:
#
# nvlink-h100x8 — one DGX H100 node, 8 GPUs on NVSwitch.
#   B = 360 GB/s: the ring bandwidth NCCL itself finds on this node, 12 channels x 30 GB/s
#   (`Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000` in
#   tests/golden/nccl-search/2.30.7.dgx-h100.1node.txt, which `nicksim search dgx-h100` reproduces;
#   /work/shared/reference/nccl-facts.md §7 item 9: Simple ring busBw 360 GB/s), just under the
#   370.8 GB/s of the 18 NVLinks x 20.6 GB/s per GPU (nccl-facts.md §7 item 1).
#   a = 3.4 us: NCCL 2.30.7 hwLat[NVLINK][RING][SIMPLE], the per-step latency of the protocol
#   that reaches that bandwidth (nccl-facts.md §7 item 5). baseLat (8.4 us Simple, the same for
#   ring and tree) is a per-call constant that shifts both lines alike and is left out.
# ib-64-nodes — 64 nodes, one rank per node behind a 400 Gb/s NIC (think of one rail).
#   B = 50 GB/s: NCCL's NET bandwidth for a 400000 Mbps NIC, speed/8000 (nccl-facts.md §3.1, §7 item 1).
#   a = 14 us: NCCL 2.30.7 hwLat[NET][RING][SIMPLE] (and TREE SIMPLE), nccl-facts.md §7 item 5.
# ib-1024-nodes — the same fabric at 1024 nodes: NCCL's table has one NET latency whatever the
#   scale, so B and a are those of ib-64-nodes and only p (and with it d = 10) changes.
SCENARIOS: Mapping[str, tuple[int, float, float, str]] = MappingProxyType({
    "nvlink-h100x8": (8, 360.0, 3.4, ("one NVLink node of 8 H100 (NVSwitch): NCCL's 12 x 30 GB/s ring, "
                                      "NVLink Simple hwLat 3.4 us")),
    "ib-64-nodes": (64, 50.0, 14.0, "64 nodes, one 400 Gb/s IB NIC (50 GB/s) per rank, NET Simple hwLat 14 us"),
    "ib-1024-nodes": (1024, 50.0, 14.0, ("1024 nodes, one 400 Gb/s IB NIC (50 GB/s) per rank, "
                                         "NET Simple hwLat 14 us")),
})

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


@dataclass(frozen=True)
class CostLine:
    """A time that is a straight line in the message size: lat_us + us_per_byte * nbytes."""

    lat_us: float
    us_per_byte: float

    def time_us(self, nbytes: float) -> float:
        """The time, in us, of a message of `nbytes` bytes."""
        return self.lat_us + self.us_per_byte * nbytes


class AlphaBetaRow(NamedTuple):
    """One message size: its ring and tree times (us) and the winner ('ring', 'tree' or 'tie')."""

    nbytes: int
    ring_us: float
    tree_us: float
    winner: str


@dataclass(frozen=True)
class AlphaBetaTable:
    """The inputs (p ranks, bw_gbps per link, lat_us per step), one row per size in the order
    given, and the crossover size m* in bytes (None when no positive size has the two equal)."""

    p: int
    bw_gbps: float
    lat_us: float
    rows: tuple[AlphaBetaRow, ...]
    crossover_nbytes: float | None
    title: str = ""

    @property
    def tree_depth(self) -> int:
        """d = ceil(log2 p), the depth of each of the two trees."""
        return tree_depth(self.p)

    @property
    def ring(self) -> CostLine:
        """T_ring of these inputs as a CostLine."""
        return ring_line(self.p, self.bw_gbps, self.lat_us)

    @property
    def tree(self) -> CostLine:
        """T_tree of these inputs as a CostLine."""
        return tree_line(self.p, self.bw_gbps, self.lat_us)


def _check(p, bw_gbps, lat_us) -> None:
    if isinstance(p, bool) or not isinstance(p, Integral) or p < 1:
        raise UsageError(f"{p!r} ranks", "--p", "an integer >= 1")
    if isinstance(bw_gbps, bool) or not isinstance(bw_gbps, Real) or not (0 < bw_gbps < math.inf):
        raise UsageError(f"link bandwidth {bw_gbps!r} GB/s", "--bw", "a finite number > 0 (GB/s)")
    if isinstance(lat_us, bool) or not isinstance(lat_us, Real) or not (0 <= lat_us < math.inf):
        raise UsageError(f"step latency {lat_us!r} us", "--lat", "a finite number >= 0 (us)")


def tree_depth(p: int) -> int:
    """d = ceil(log2 p) for p >= 1, exactly (0 for p=1, 1 for p=2, 10 for p=1024)."""
    if isinstance(p, bool) or not isinstance(p, Integral) or p < 1:
        raise UsageError(f"{p!r} ranks", "--p", "an integer >= 1")
    return (int(p) - 1).bit_length()


def ring_line(p: int, bw_gbps: float, lat_us: float) -> CostLine:
    """T_ring(m) = 2(p-1)/p * m/B + 2(p-1)*a as a CostLine (m in bytes, B in GB/s, a and T in us)."""
    _check(p, bw_gbps, lat_us)
    return CostLine(2 * (p - 1) * lat_us, (2 * (p - 1) / p) / (bw_gbps * 1e3))


def tree_line(p: int, bw_gbps: float, lat_us: float) -> CostLine:
    """T_tree(m) = 2*d*(m/(2B) + a) = d*m/B + 2*d*a, d = ceil(log2 p), as a CostLine."""
    _check(p, bw_gbps, lat_us)
    d = tree_depth(p)
    return CostLine(2 * d * lat_us, d / (bw_gbps * 1e3))


def meeting_nbytes(first: CostLine, second: CostLine) -> float | None:
    """The size m > 0 (bytes) where the two lines cost the same, solved in closed form; None when
    they are parallel (equal slopes: the same line, or one always above the other) or meet only
    at m <= 0 (so one of them is never slower at any positive size)."""
    slope = second.us_per_byte - first.us_per_byte
    if slope == 0:
        return None
    m = (first.lat_us - second.lat_us) / slope
    return m if m > 0 else None


def _winner(ring_us: float, tree_us: float) -> str:
    return "tree" if tree_us < ring_us else "ring" if ring_us < tree_us else "tie"


def alphabeta_table(p: int, bw_gbps: float, lat_us: float, sizes_nbytes: Iterable[int], *,
                    title: str = "") -> AlphaBetaTable:
    """Ring and tree times of an allreduce of every size in `sizes_nbytes` (whole bytes >= 0,
    kept in order) over p ranks, links of bw_gbps GB/s and steps of lat_us us, with the crossover.
    Bad input raises UsageError naming --p, --bw, --lat or --sizes."""
    _check(p, bw_gbps, lat_us)
    sizes = tuple(sizes_nbytes)
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, Integral) or n < 0:
            raise UsageError(f"message size {n!r}", "--sizes", "whole numbers of bytes >= 0")
    ring, tree = ring_line(p, bw_gbps, lat_us), tree_line(p, bw_gbps, lat_us)
    rows = []
    for n in sizes:
        r, t = ring.time_us(n), tree.time_us(n)
        rows.append(AlphaBetaRow(int(n), r, t, _winner(r, t)))
    return AlphaBetaTable(int(p), float(bw_gbps), float(lat_us), tuple(rows), meeting_nbytes(ring, tree), title)


def human_size(nbytes: float) -> str:
    """A size in binary units the way nccl-tests' sizes read: '8 B', '64 KiB', '256 MiB'; a size
    that is not a whole number of its unit gets up to two decimals ('7.47 MiB')."""
    value, unit = float(nbytes), 0
    while abs(value) >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    if value == int(value):
        return f"{int(value)} {_UNITS[unit]}"
    return f"{value:.2f}".rstrip("0").rstrip(".") + f" {_UNITS[unit]}"


def _crossover_line(table: AlphaBetaTable) -> str:
    m = table.crossover_nbytes
    if m is not None:
        return f"crossover m* = {m:.0f} B ({human_size(m)}): the tree is faster below, the ring above"
    if table.p == 1:
        why = "p=1: no communication, both take 0 us"
    elif table.ring == table.tree:
        why = f"p={table.p}: ring and tree are the same line, a tie at every size"
    else:
        why = "the ring is never slower at any size > 0"
    return f"crossover m* = none ({why})"


def format_alphabeta(table: AlphaBetaTable) -> list[str]:
    """The table as text lines: a header with the inputs and both formulas, one fixed-width row
    per size (size, ring us, tree us, ring/tree ratio, winner), then the crossover line."""
    d = table.tree_depth
    lines = []
    if table.title:
        lines.append(f"# {table.title}")
    lines += [
        (f"# allreduce, alpha-beta model: p={table.p} ranks, B={table.bw_gbps:g} GB/s per link, "
         f"a={table.lat_us:g} us per step, d=ceil(log2 p)={d}"),
        "#   ring: T(m) = 2(p-1)/p * m/B + 2(p-1)*a",
        "#   tree: T(m) = 2*d*(m/(2B) + a)   (double binary tree: two trees, half the data each, pipelined)",
        f"# {'size':>10}  {'ring (us)':>14}  {'tree (us)':>14}  {'ring/tree':>9}  winner",
    ]
    for row in table.rows:
        ratio = f"{row.ring_us / row.tree_us:9.3f}" if row.tree_us > 0 else f"{'-':>9}"
        lines.append(f"  {human_size(row.nbytes):>10}  {row.ring_us:14.2f}  {row.tree_us:14.2f}  {ratio}  {row.winner}")
    lines.append(_crossover_line(table))
    return lines


def scenario_tables(sizes_nbytes: Iterable[int] = DEFAULT_SIZES_NBYTES) -> dict[str, AlphaBetaTable]:
    """One table per built-in scenario, in SCENARIOS order, each titled '<name>: <description>'."""
    sizes = tuple(sizes_nbytes)
    return {name: alphabeta_table(p, bw, lat, sizes, title=f"{name}: {desc}")
            for name, (p, bw, lat, desc) in SCENARIOS.items()}
