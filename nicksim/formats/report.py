"""nccl-tests' result tables and the run around them, written and read.

This module promises nccl-tests' own output for rows that were measured or modelled: the text
table (header, one line per size, footer) character for character as a given nccl-tests release
prints it (src/util.cu; src/common.cu before v2.17.3), the lines before it (version, starting
line, the nThread line, one device line per rank, "Reducing maxBytes") and after it, its `-J`
JSON, and the bus-bandwidth factors and size conventions of each *_perf binary
(src/<collective>.cu). Text nicksim adds is marked so that a diff against a real log shows
numbers only: every line of nicksim's own starts with "# nicksim", and what it appends to a row
(perf --plan) comes after nccl-tests' last column, from "  #" on; delete those lines, cut rows
there, and the rest is nccl-tests' text with only numbers (and names it made up: hosts) apart.
The reader takes back what nccl-tests printed: text output in the v2.13-v2.17.2 and v2.17.3+
layouts, with `mpirun --tag-output` and hostname prefixes and NCCL INFO lines in between;
nccl-tests' JSON and our own; and the `# collective=` CSV blocks of the validation cases. Bad
input is one UsageError naming the line.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field

from ..calls import COLLECTIVE_TABLE, COLLECTIVES, DTYPES, call_for_size, collective_name, dtype_name, known_collective
from ..errors import UsageError

__all__ = [
    "DEVICE_LINE",
    "run_header",
    "step_text",
    "NCCL_TESTS_LATEST",
    "nccl_tests_release",
    "flag_release",
    "TIME_FORMAT",
    "IterStats",
    "RankDevice",
    "RunSetup",
    "nccl_version_code",
    "device_line",
    "preamble",
    "memory_max_nbytes",
    "reduced_sizes",
    "reducing_lines",
    "closing_lines",
    "nccl_tests_json",
    "claim_json_path",
    "COLLECTIVES",
    "DTYPE_NBYTES",
    "Measurement",
    "ResultRow",
    "MeasuredTable",
    "collective_name",
    "bus_factor",
    "size_and_count",
    "measurement",
    "result_row",
    "format_number",
    "format_row",
    "format_table",
    "table_header",
    "table_footer",
    "average_busbw",
    "results_json",
    "read_results",
]

# The newest nccl-tests release whose output is written by default.
NCCL_TESTS_LATEST = "2.19.6"

# nccl-tests' type names and sizes, with the `char`/`int` spellings of old logs.
DTYPE_NBYTES: dict[str, int] = {**DTYPES, "char": 1, "int": 4}


# Layout changes, as nccl-tests tags them (src/common.cu, from v2.17.3 src/util.cu).
_V_FIRST = (2, 13, 0)  # before: per-collective headers with an `error` column
_V_GROUP = (2, 13, 4)  # device lines name the Group; the last NCCL error (a blank line) after the footer
_V_PCI_BUS_ID = (2, 14, 1)  # device lines: [%04x:%02x:%02x] instead of [0x%02x]
_V_FP8 = (2, 15, 0)  # -d all includes f8e4m3 and f8e5m2 (NCCL 2.24+ on sm_90+)
_V_RESERVE = (2, 16, 6)  # memory rule keeps 1 GiB per 16 GiB (at most 4) back; minBytes follows maxBytes
_V_CONCLUDED = (2, 16, 7)  # `# Collective test starting:` / `concluded:` lines
_V_WIDE = (2, 17, 3)  # util.cu: getFloatStr for all three numbers, #wrong in 6 columns; -J
_V_VERSION_LINE = (2, 17, 4)  # `# nccl-tests version X nccl-headers=N nccl-library=N`
_V_TIMESTAMPS = (2, 17, 6)  # -S; the header's timestamp column (" %20s")
_V_TS_PAD = (2, 17, 7)  # header " %*s"; -M; `#` before the closing blank line
_V_JSON_SPELLING = (2, 17, 9)  # JSON "average_bus_bandwidth" (before: "average_bus_bandwidith")
_V_NO_BARRIER = (2, 18, 1)  # -z 2
_V_UNALIGN_SHOWN = (2, 18, 2)  # ` unalign: N` on the nThread line
_V_PER_ITER = (2, 19, 2)  # -I, -z 3, the blocking lines reworded; JSON version 2
_V_FIT = (2, 19, 6)  # getFloatStr keeps the most decimals that fit; -K; JSON version 3

# The flags later releases added (their getopt strings, src/common.cu); -t -g -b -e -i -f -n -m
# -w -p -c -o -d -r -z -G -a are in every release since 2.13.0.
_FLAG_SINCE = {"-y": (2, 13, 4), "-T": (2, 13, 4), "-C": (2, 13, 4), "-N": (2, 13, 10), "-R": (2, 13, 10),
               "-x": (2, 17, 0), "-D": (2, 17, 0), "-V": (2, 17, 0), "-J": _V_WIDE, "-S": _V_TIMESTAMPS,
               "-M": _V_TS_PAD, "-u": (2, 18, 0), "-I": _V_PER_ITER, "-K": _V_FIT}


@dataclass(frozen=True)
class Measurement:
    """One placement (out-of-place or in-place) of one row: time in microseconds, algorithm and
    bus bandwidth in GB/s (1e9 bytes/s), and the number of wrong elements, None where the data
    was not checked (nccl-tests prints N/A). Values a source did not give are None."""

    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    nwrong: int | None = None


@dataclass(frozen=True)
class ResultRow:
    """One line of an nccl-tests table: the size column in bytes (the whole buffer: for
    all_gather, reduce_scatter and alltoall the per-rank count times nranks), nccl-tests' count
    column (per rank for those three), type and reduction names as printed (`none` where nothing
    is reduced), the root (-1 for rootless collectives), both placements, and optionally the
    plan that produced a modelled row (algorithm, protocol, nchannels, nthreads). Fields a source
    did not give are None; `in_place` is None when the row has no in-place measurement."""

    nbytes: int
    count: int | None
    dtype: str | None
    redop: str | None
    root: int | None
    out_of_place: Measurement
    in_place: Measurement | None
    plan: dict | None = None


@dataclass(frozen=True)
class MeasuredTable:
    """One table found by read_results: the collective (None if the source does not name it),
    the rank count (None if unknown), the type and reduction shared by all rows (None if they
    differ or are not given), the rows in source order, the 1-based line where the table starts
    (its column header, first row, or `# collective=` comment; 1 for JSON), the average bus
    bandwidth the source printed in its footer, in GB/s, and the GPUs each thread drove (nccl-tests
    -g: `nGpus`, None where the source does not say)."""

    collective: str | None
    nranks: int | None
    dtype: str | None
    redop: str | None
    rows: tuple[ResultRow, ...]
    source_line: int
    avg_busbw_gbps: float | None = None
    ngpus: int | None = None


# ---------------------------------------------------------------------------------------------
# Names, factors and sizes


def _ranks(nranks) -> int:
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise UsageError(f"{nranks!r} ranks", "nranks", "an integer >= 1")
    return nranks


def _dtype_nbytes(dtype: str) -> int:
    if dtype not in DTYPE_NBYTES:
        raise UsageError(f"unknown data type '{dtype}'", "dtype", ", ".join(DTYPE_NBYTES))
    return DTYPE_NBYTES[dtype]


def bus_factor(collective: str, nranks: int) -> float:
    """busbw / algbw as nccl-tests computes it (doc/PERFORMANCE.md, <coll>GetBw): 2(n-1)/n for
    all_reduce; (n-1)/n for all_gather, reduce_scatter and alltoall; 1 otherwise."""
    return COLLECTIVE_TABLE[collective_name(collective)].bus_factor(_ranks(nranks))


def size_and_count(collective: str, requested_nbytes: int, dtype: str, nranks: int) -> tuple[int, int]:
    """The (size, count) columns nccl-tests prints for a requested size (-b/-e/-f step).

    count = requested / type size; for all_gather, reduce_scatter and alltoall the per-rank
    count is count / nranks rounded down to a multiple of 16 bytes' worth of elements
    (GetCollByteCount) and the size column is that times nranks times the type size; for the
    others the size column is count times the type size.
    """
    name = collective_name(collective)
    n = _ranks(nranks)
    _dtype_nbytes(dtype)  # an unknown type is a UsageError naming the valid ones
    if isinstance(requested_nbytes, bool) or not isinstance(requested_nbytes, int) or requested_nbytes < 0:
        raise UsageError(f"size {requested_nbytes!r}", "nbytes", "a whole number of bytes >= 0")
    call = call_for_size(name, requested_nbytes, dtype_name(dtype), "sum", 0, n)
    return call.nbytes, call.count


def measurement(collective: str, nranks: int, nbytes: int, time_us: float,
                nwrong: int | None = None) -> Measurement:
    """A placement timed at `time_us` for a row whose size column is `nbytes`: algbw =
    nbytes / 1e9 / seconds and busbw = algbw x bus_factor, computed in nccl-tests' order."""
    factor = bus_factor(collective, nranks)
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise UsageError(f"size {nbytes!r}", "nbytes", "a whole number of bytes >= 0")
    if not isinstance(time_us, (int, float)) or not math.isfinite(time_us) or time_us <= 0:
        raise UsageError(f"time {time_us!r} us", "time_us", "a finite number > 0 (us)")
    if nwrong is not None and (isinstance(nwrong, bool) or not isinstance(nwrong, int) or nwrong < 0):
        raise UsageError(f"{nwrong!r} wrong elements", "nwrong", "None or an integer >= 0")
    algbw = nbytes / 1.0e9 / (time_us / 1.0e6)
    return Measurement(float(time_us), algbw, algbw * factor, nwrong)


def result_row(collective: str, nranks: int, requested_nbytes: int, dtype: str, time_us: float,
               inplace_time_us: float | None = None, *, redop: str = "sum", root: int = 0,
               nwrong: int | None = None, plan: dict | None = None) -> ResultRow:
    """The row nccl-tests prints for a requested size timed at `time_us` (and `inplace_time_us`):
    size and count by size_and_count, `none` as the reduction of all_gather, broadcast and
    alltoall, root -1 unless the collective is broadcast or reduce."""
    name = collective_name(collective)
    nbytes, count = size_and_count(name, requested_nbytes, dtype, nranks)
    out = measurement(name, nranks, nbytes, time_us, nwrong)
    inp = measurement(name, nranks, nbytes, inplace_time_us, nwrong) if inplace_time_us is not None else None
    info = COLLECTIVE_TABLE[name]
    return ResultRow(nbytes, count, dtype, redop if info.prints_redop else "none", root if info.rooted else -1, out,
                     inp, plan)


# ---------------------------------------------------------------------------------------------
# Writing text


def _version(text: str) -> tuple[int, int, int]:
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?", str(text).strip())
    if not match:
        raise UsageError(f"nccl-tests version '{text}'", "version", f"a release such as {NCCL_TESTS_LATEST}")
    version = (int(match[1]), int(match[2]), int(match[3] or 0))
    if version < _V_FIRST:
        raise UsageError(f"nccl-tests {text} prints per-collective tables with an 'error' column",
                         "version", "2.13.0 or later")
    if version > _version_tuple(NCCL_TESTS_LATEST):
        raise UsageError(f"nccl-tests {text} is newer than the releases nicksim knows", "version",
                         f"2.13.0 .. {NCCL_TESTS_LATEST}")
    return version


def _version_tuple(text: str) -> tuple[int, int, int]:
    major, minor, patch = (int(part) for part in text.split("."))
    return major, minor, patch


def nccl_tests_release(text: str, where: str = "--nccl-tests-version") -> str:
    """An nccl-tests release as X.Y.Z ('2.17' is 2.17.0), or a UsageError naming `where`: nicksim
    writes the layouts of 2.13.0 .. NCCL_TESTS_LATEST."""
    try:
        return ".".join(str(part) for part in _version(text))
    except UsageError as exc:
        raise UsageError(exc.what, where, exc.valid) from None


def flag_release(flag: str) -> str | None:
    """The first nccl-tests release that takes `flag` (src/common.cu's getopt string), None for
    the flags every release since 2.13.0 takes."""
    since = _FLAG_SINCE.get(flag)
    return ".".join(str(part) for part in since) if since else None


def _float_str(value: float, width: int, fit: bool) -> str:
    """getFloatStr (src/util.cu) for one column `width` characters wide."""
    if fit:  # 2.19.6+: the most decimals (2, 1, 0) whose text fits, else exponent form cut to width
        for decimals in (2, 1, 0):
            text = f"{value:{width}.{decimals}f}"
            if len(text) <= width:
                return text
        return f"{value:{width}.{1 if width >= 7 else 0}e}"[:width]
    power = 0  # 2.17.3-2.19.5: count the integer digits, then choose the decimals
    if math.isfinite(value):
        step = 1
        while value >= step:
            power += 1
            step *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.{1 if width >= 7 else 0}e}"


def format_number(value: float, width: int, version: str = NCCL_TESTS_LATEST) -> str:
    """A time (width 7) or bandwidth (width 6) as nccl-tests v2.17.3+ prints it.

    From v2.19.6 the text keeps 2 decimals while it fits the width, else 1, else 0, else the
    exponent form (1 decimal at width 7, none below) cut to the width. v2.17.3-v2.19.5 chose
    by the number of integer digits instead, so a value that rounds up to one more digit
    (9999.996 at width 7) comes out one character too wide; otherwise the two agree.
    """
    return _float_str(float(value), width, _version(version) >= _V_FIT)


def _g(value: float, width: int = 0) -> str:
    """C's %g (%6g, %5g)."""
    return f"{value:{width}g}" if width else f"{value:g}"


def _measurement_text(m: Measurement, version: tuple[int, int, int], where: str) -> str:
    if m.time_us is None or m.algbw_gbps is None or m.busbw_gbps is None:
        raise UsageError("a measurement without time, algbw or busbw cannot be printed", where,
                         "rows with both times and bandwidths")
    if version >= _V_WIDE:
        fit = version >= _V_FIT
        text = (f"  {_float_str(m.time_us, 7, fit)}  {_float_str(m.algbw_gbps, 6, fit)}"
                f"  {_float_str(m.busbw_gbps, 6, fit)}")
        return text + (f"  {_g(float(m.nwrong), 6)}" if m.nwrong is not None else "    N/A")
    time = m.time_us  # common.cu v2.13-v2.17.2: fixed decimals by magnitude, %6.2f bandwidths
    decimals = 0 if time >= 10000.0 else 1 if time >= 100.0 else 2
    text = f"  {time:7.{decimals}f}  {m.algbw_gbps:6.2f}  {m.busbw_gbps:6.2f}"
    return text + (f"  {_g(float(m.nwrong), 5)}" if m.nwrong is not None else "    N/A")


@dataclass(frozen=True)
class IterStats:
    """-I's summary of one placement's iterations (util.cu computeIterStats, times in
    microseconds): the printed min, max, p99 and coefficient of variation (%), with the mean,
    p50, p95, standard deviation, every iteration's time and, for runs of several processes,
    each process's times (per_process_max_times_us) that the JSON carries."""

    min_us: float
    max_us: float
    avg_us: float
    p50_us: float
    p95_us: float
    p99_us: float
    stdev_us: float
    cv_pct: float
    times_us: tuple[float, ...]
    per_process_us: tuple[tuple[float, ...], ...] = ()


def _iter_text(stats: IterStats, version: tuple[int, int, int]) -> str:
    fit = version >= _V_FIT  # writePerIterReport: "  %7s  %7s  %7s  %7s" of getFloatStr(.., 7)
    return "".join(f"  {_float_str(value, 7, fit)}" for value in (stats.min_us, stats.max_us, stats.p99_us,
                                                                    stats.cv_pct))


def format_row(row: ResultRow, version: str = NCCL_TESTS_LATEST, *, index: int | None = None,
               per_iter: tuple[IterStats, IterStats] | None = None, timestamp: str | None = None) -> str:
    """One table line as nccl-tests `version` prints it: size, count, type, redop, root, then
    out-of-place and in-place time, algbw, busbw and #wrong (N/A when not checked), each
    placement followed by its -I columns where `per_iter` gives them, and -S's `timestamp`
    ("%21s") at the end. A row without in-place prints the out-of-place part only (nccl-tests
    itself always prints both)."""
    v = _version(version)
    where = f"row {index}" if index is not None else "row"
    for name in ("nbytes", "count", "dtype", "redop", "root"):
        if getattr(row, name) is None:
            raise UsageError(f"a row without {name} cannot be printed", where, "rows with every column")
    text = f"{row.nbytes:12d}  {row.count:12d}  {row.dtype:>8}  {row.redop:>6}  {row.root:6d}"
    text += _measurement_text(row.out_of_place, v, where)
    if per_iter is not None:
        text += _iter_text(per_iter[0], v)
    if row.in_place is not None:
        text += _measurement_text(row.in_place, v, where)
        if per_iter is not None:
            text += _iter_text(per_iter[1], v)
    if timestamp is not None:
        text += f"{timestamp:>21}"
    return text


_TITLE = "           out-of-place                       in-place          "
_TITLE_PER_ITER = ("              out-of-place (+ per-iteration)                                in-place "
                   "(+ per-iteration)")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # util.cu TIME_STRING_FORMAT


def _header(v: tuple[int, int, int], cputime: bool, timestamps: bool, per_iter: bool) -> list[str]:
    """writeResultHeader (util.cu; common.cu before v2.17.3): `#` and the three header lines."""
    time = "cputime" if cputime else "time"
    lead = "# %10s  %12s  %8s  %6s  %6s"
    blank = lead % ("", "", "", "", "")
    key = ("size", "count", "type", "redop", "root")
    unit = ("(B)", "(elements)", "", "", "")
    label, fmt, pad = ("timestamp", TIME_FORMAT, 19) if timestamps else ("", "", 0)
    if per_iter:  # v2.19.2+
        cells = "  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s" * 2 + " %*s"
        names = (lead + cells) % (*key, time, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%",
                                  time, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", pad, label)
        units = (lead + cells) % (*unit, "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)",
                                  "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", pad, fmt)
        return ["#", blank + _TITLE_PER_ITER, names, units]
    name_cells = (time, "algbw", "busbw", "#wrong", time, "algbw", "busbw", "#wrong")
    unit_cells = ("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
    if v < _V_WIDE:  # common.cu: one space before #wrong, its unit cell 5 wide
        names = (lead + "  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s") % (*key, *name_cells)
        units = (lead + "  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s") % (*unit, *unit_cells)
    elif v < _V_TIMESTAMPS:  # util.cu 2.17.3-2.17.5: two spaces, the unit cell still 5 wide
        names = (lead + "  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s") % (*key, *name_cells)
        units = (lead + "  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s") % (*unit, *unit_cells)
    elif v < _V_TS_PAD:  # 2.17.6: the timestamp column always 20 wide
        cells = "  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %20s"
        names = (lead + cells) % (*key, *name_cells, label)
        units = (lead + cells) % (*unit, *unit_cells, fmt)
    else:  # 2.17.7+: " %*s", one blank without -S
        cells = "  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
        names = (lead + cells) % (*key, *name_cells, pad, label)
        units = (lead + cells) % (*unit, *unit_cells, pad, fmt)
    return ["#", blank + _TITLE, names, units]


def average_busbw(rows) -> float | None:
    """The footer's `Avg bus bandwidth`: the mean of every printed busbw, out-of-place and
    in-place, summed in print order (nccl-tests adds each BenchTime's busBw and divides by
    their number); None when no row has one."""
    total, count = 0.0, 0
    for row in rows:
        for m in (row.out_of_place, row.in_place):
            if m is not None and m.busbw_gbps is not None:
                total += m.busbw_gbps
                count += 1
    return total / count if count else None


def _wrong_measurements(rows) -> int:
    return sum(1 for row in rows for m in (row.out_of_place, row.in_place) if m is not None and m.nwrong)


def format_table(collective: str, rows, *, version: str = NCCL_TESTS_LATEST, threads: int = 1) -> list[str]:
    """The lines nccl-tests prints from its result header to its result footer, without line
    ends: `#`, the three header lines, one line per row, `# Out of bounds values`, `# Avg bus
    bandwidth` (average_busbw, %g), `#` and, from v2.16.7, `# Collective test concluded:
    <collective>_perf`. nccl-tests counts each wrong measurement once per thread of every
    process; `threads` is that number (processes x -t)."""
    rows = list(rows)
    return (table_header(version) + [format_row(row, version, index=i) for i, row in enumerate(rows)]
            + table_footer(collective, rows, version=version, threads=threads))


def run_header(min_nbytes: int, max_nbytes: int, step: str, warmup_iters: int, iters: int, agg_iters: int,
               check: int, *, version: str = NCCL_TESTS_LATEST, graph: int = 0, unalign: int = 0,
               nthreads: int = 1, ngpus: int = 1) -> str:
    """nccl-tests' line about the run before its table (util.cu writeDeviceReport; common.cu
    before v2.17.3): `# nThread 1 nGpus 1 minBytes ... step: 2(factor) ... graph: 0`, and from
    v2.18.2 ` unalign: N`."""
    text = (f"# nThread {nthreads} nGpus {ngpus} minBytes {min_nbytes} maxBytes {max_nbytes} step: {step} "
            f"warmup iters: {warmup_iters} iters: {iters} agg iters: {agg_iters} validation: {check} graph: {graph}")
    return text + (f" unalign: {unalign}" if _version(version) >= _V_UNALIGN_SHOWN else "")


def step_text(step_factor: int | None, step_nbytes: int | None) -> str:
    """How nccl-tests prints its size step: `2(factor)` for -f, `1024(bytes)` for -i."""
    return f"{step_nbytes}(bytes)" if step_nbytes is not None else f"{step_factor or 2}(factor)"


def table_header(version: str = NCCL_TESTS_LATEST, *, cputime: bool = False, timestamps: bool = False,
                 per_iter: bool = False) -> list[str]:
    """The table's first four lines (format_table's), for a run that prints rows as they come:
    `cputime` for -C 1, `timestamps` for -S 1 (v2.17.6+), `per_iter` for -I 1 (v2.19.2+)."""
    v = _version(version)
    if timestamps and v < _V_TIMESTAMPS:
        raise UsageError(f"nccl-tests {version} has no -S", "-S", f"nccl-tests {flag_release('-S')} or later")
    if per_iter and v < _V_PER_ITER:
        raise UsageError(f"nccl-tests {version} has no -I", "-I", f"nccl-tests {flag_release('-I')} or later")
    return _header(v, cputime, timestamps, per_iter)


def table_footer(collective: str, rows, *, version: str = NCCL_TESTS_LATEST, threads: int = 1) -> list[str]:
    """The table's closing lines (format_table's) after `rows`."""
    name = collective_name(collective)
    v = _version(version)
    rows = list(rows)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise UsageError(f"{threads!r} threads", "threads", "an integer >= 1")
    lines = []
    errors = _wrong_measurements(rows) * threads
    avg = average_busbw(rows)
    lines.append(f"# {'Out of bounds values':<20} : {errors} {'FAILED' if errors else 'OK'}")
    # An empty table divides 0 by 0, which glibc prints as -nan.
    lines.append(f"# {'Avg bus bandwidth':<20} : {_g(avg) if avg is not None else '-nan'} ")
    lines.append("#")
    if v >= _V_CONCLUDED:
        lines.append(f"# Collective test concluded: {name}_perf")
    return lines


# ---------------------------------------------------------------------------------------------
# The run around the table: what nccl-tests prints before its header and after its footer


@dataclass(frozen=True)
class RankDevice:
    """One line of nccl-tests' device list (util.cu writeDeviceReport): the rank, its
    NCCL_TESTS_SPLIT group, the process id and host name, the CUDA device number, the PCI bus
    id ("0000:1b:00.0") and CUDA's name for the GPU."""

    rank: int
    group: int
    pid: int
    host: str
    cuda_dev: int
    bus_id: str
    name: str

    def bus(self) -> tuple[int, int, int]:
        """(pciDomainID, pciBusID, pciDeviceID) of the bus id."""
        parts = self.bus_id.replace(".", ":").split(":")
        try:
            domain, bus, device = (int(part, 16) for part in parts[:3])
        except ValueError:
            raise UsageError(f"bus id '{self.bus_id}'", f"rank {self.rank}", "a PCI bus id such as 0000:1b:00.0") \
                from None
        return domain, bus, device


@dataclass(frozen=True)
class RunSetup:
    """What nccl-tests prints of its command line and machine around the table: the program
    (`all_reduce_perf`), NCCL_VERSION_CODE of the headers it was built with and of the library
    (22902 for NCCL 2.29.2), -t and -g, the sizes and step as given (before any reduction for
    memory), -w -n -m -c -G -u -z -p -I -K, and the devices, one tuple per process in rank
    order (each process prints its own -t x -g lines)."""

    program: str
    nccl_code: int
    min_nbytes: int
    max_nbytes: int
    step_factor: int | None = 2
    step_nbytes: int | None = None
    warmup_iters: int = 1
    iters: int = 20
    agg_iters: int = 1
    check: int = 1
    graph: int = 0
    unalign: int = 0
    blocking: int = 0
    parallel_init: int = 0
    per_iter: int = 0
    per_iter_skip: int = 0
    nthreads: int = 1
    ngpus: int = 1
    processes: tuple[tuple[RankDevice, ...], ...] = ()


def nccl_version_code(major: int, minor: int, patch: int) -> int:
    """NCCL_VERSION(X,Y,Z) as nccl.h defines it: X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z
    before (2.29.2 is 22902), what nccl-tests prints as nccl-headers and nccl-library."""
    if (major, minor) >= (2, 9):
        return major * 10000 + minor * 100 + patch
    return major * 1000 + minor * 100 + patch


def device_line(device: RankDevice, version: str = NCCL_TESTS_LATEST) -> str:
    """One `#  Rank` line: "#   Rank %2d Pid %6d on %10s device %2d [0x%02x] %s" before v2.13.4,
    with "Group %2d" from v2.13.4, and the bus id as [%04x:%02x:%02x] (domain, bus, device)
    instead of the bus number [0x%02x] from v2.14.1 (src/common.cu, then src/util.cu)."""
    v = _version(version)
    domain, bus, dev = device.bus()
    where = f"[{domain:04x}:{bus:02x}:{dev:02x}]" if v >= _V_PCI_BUS_ID else f"[0x{bus:02x}]"
    head = (f"#  Rank {device.rank:2d} Group {device.group:2d}" if v >= _V_GROUP
            else f"#   Rank {device.rank:2d}")
    return f"{head} Pid {device.pid:6d} on {device.host:>10} device {device.cuda_dev:2d} {where} {device.name}"


_MAX_LINE = 2048  # writeDeviceReport's per-process buffer (MAX_LINE)


def _process_lines(devices: tuple[RankDevice, ...], version: str) -> list[str]:
    """A process's device lines, cut as nccl-tests cuts a buffer that outgrows MAX_LINE: its first
    2043 characters and "...\\n" (snprintf stops at the buffer's end, then strcpy(line+MAX_LINE-5))."""
    text = "".join(device_line(d, version) + "\n" for d in devices)
    if len(text) >= _MAX_LINE:
        text = text[:_MAX_LINE - 5] + "...\n"
    return text.splitlines()


def _blocking_line(blocking: int, v: tuple[int, int, int]) -> str | None:
    if not blocking:
        return None
    if v >= _V_PER_ITER:  # v2.19.2: three modes
        return {1: "# Blocking Enabled: wait and barrier after each inner iteration (-m) ",
                2: "# Blocking Enabled: wait after each inner iteration (-m), no barrier ",
                3: "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier "
                }.get(blocking)
    if v >= _V_NO_BARRIER and blocking > 1:  # v2.18.1: -z 2 waits without a barrier
        return "# Blocking Enabled: wait for completion after each collective (no barrier) "
    return "# Blocking Enabled: wait for completion and barrier after each collective "


def preamble(setup: RunSetup, version: str = NCCL_TESTS_LATEST) -> list[str]:
    """What nccl-tests `version` prints before any "Reducing maxBytes" line and its table:
    `# nccl-tests version X nccl-headers=N nccl-library=N` (v2.17.4+), `# Collective test
    starting: <program>` (v2.16.7+), the `# nThread` line (run_header), the -z, -I and -p lines
    where they are on, `#`, `# Using devices` and every process's device lines."""
    v = _version(version)
    lines = []
    if v >= _V_VERSION_LINE:
        lines.append(f"# nccl-tests version {'.'.join(map(str, v))} nccl-headers={setup.nccl_code} "
                     f"nccl-library={setup.nccl_code}")
    if v >= _V_CONCLUDED:
        lines.append(f"# Collective test starting: {setup.program}")
    lines.append(run_header(setup.min_nbytes, setup.max_nbytes, step_text(setup.step_factor, setup.step_nbytes),
                            setup.warmup_iters, setup.iters, setup.agg_iters, setup.check, version=version,
                            graph=setup.graph, unalign=setup.unalign, nthreads=setup.nthreads, ngpus=setup.ngpus))
    blocking = _blocking_line(setup.blocking, v)
    if blocking:
        lines.append(blocking)
    if setup.per_iter:
        skip = f"; summary skips first {setup.per_iter_skip} iterations" if setup.per_iter_skip and v >= _V_FIT \
            else ""
        lines.append(f"# Per-Iteration Report: CUDA event timing; i_* uses max over process rows{skip} ")
    if setup.parallel_init:
        lines.append("# Parallel Init Enabled: threads call into NcclInitRank concurrently ")
    lines += ["#", "# Using devices"]
    for devices in setup.processes:
        lines += _process_lines(devices, version)
    return lines


def memory_max_nbytes(total_global_mem: int, check: int, version: str = NCCL_TESTS_LATEST) -> int:
    """The largest size nccl-tests keeps on GPUs of `total_global_mem` bytes (src/common.cu run()):
    room for send, receive and (with -c) expected buffers after 1 GiB for the rest and, from
    v2.16.6, a reserve of 1 GiB per 16 GiB installed, at most 4 GiB; sizes above it are
    dropped after `# Reducing maxBytes to N due to memory limitation`. C's size_t arithmetic:
    a GPU smaller than what is set aside wraps around and reduces nothing."""
    gib = 1 << 30
    reserve = min(-(-total_global_mem // (16 * gib)) * gib, 4 * gib) if _version(version) >= _V_RESERVE else 0
    return ((total_global_mem - reserve - gib) % (1 << 64)) // (3 if check else 2)


def reduced_sizes(min_nbytes: int, max_nbytes: int, limit: int, version: str = NCCL_TESTS_LATEST
                  ) -> tuple[int, int] | None:
    """(minBytes, maxBytes) after nccl-tests' memory rule where maxBytes is over `limit`
    (memory_max_nbytes): maxBytes becomes the limit and, from v2.16.6, minBytes at most that;
    None where nothing is reduced."""
    if max_nbytes <= limit:
        return None
    return (min(min_nbytes, limit) if _version(version) >= _V_RESERVE else min_nbytes), limit


def reducing_lines(max_nbytes: int) -> list[str]:
    """nccl-tests' two lines where the memory rule lowered maxBytes (src/common.cu, every release)."""
    return ["#", f"# Reducing maxBytes to {max_nbytes} due to memory limitation"]


def closing_lines(version: str = NCCL_TESTS_LATEST, memory_line: str | None = None) -> list[str]:
    """What nccl-tests prints after table_footer's lines: nothing before v2.13.4; then the last
    NCCL error ("%s\\n" of ncclGetLastError, an empty line when there is none); from v2.17.7
    -M's memory line where given, `#` (finalizeFooter), then that empty line (writeErrors)."""
    v = _version(version)
    if v < _V_GROUP:
        return []
    if v < _V_TS_PAD:
        return [""]
    return ([memory_line] if memory_line else []) + ["#", ""]


# ---------------------------------------------------------------------------------------------
# Writing JSON

_JSON_KEYS = {"collective", "results", "out_of_bounds", "average_bus_bandwidth"}


def _measurement_json(m: Measurement | None) -> dict | None:
    if m is None:
        return None
    return {"time": m.time_us, "alg_bw": m.algbw_gbps, "bus_bw": m.busbw_gbps, "nwrong": m.nwrong}


def results_json(collective: str, rows, run: dict | None = None) -> dict:
    """The rows as a JSON object shaped like nccl-tests' `-J` file: `results` holds one object
    per row (size, count, type, redop, root -- a string "%6i" as nccl-tests writes it --
    out_of_place and in_place with time, alg_bw, bus_bw, nwrong, and `plan` where the row has
    one), then `out_of_bounds` {count, okay} and `average_bus_bandwidth` {bandwidth, okay};
    `collective` names the collective and every key of `run` (engine, system, nranks,
    nccl_version, ...) is copied to the top level."""
    name = collective_name(collective)
    rows = list(rows)
    doc: dict = {"collective": name}
    for key, value in (run or {}).items():
        if key in _JSON_KEYS:
            raise UsageError(f"run field '{key}' would replace the table's own", "run",
                             "keys other than " + ", ".join(sorted(_JSON_KEYS)))
        doc[key] = value
    results = []
    for row in rows:
        item = {"size": row.nbytes, "count": row.count, "type": row.dtype, "redop": row.redop,
                "root": f"{row.root:6d}" if row.root is not None else None,
                "out_of_place": _measurement_json(row.out_of_place),
                "in_place": _measurement_json(row.in_place)}
        if row.plan is not None:
            item["plan"] = dict(row.plan)
        results.append(item)
    doc["results"] = results
    errors = _wrong_measurements(rows)
    doc["out_of_bounds"] = {"count": errors, "okay": errors == 0}
    doc["average_bus_bandwidth"] = {"bandwidth": average_busbw(rows), "okay": "unchecked"}
    return doc


def _json_double(value: float | None):
    """jsonDouble: NaN as the string "nan"."""
    if value is None:
        return None
    return "nan" if value != value else float(value)


def _tests_measurement(m: Measurement, cputime: bool) -> dict:
    return {"cpu_time" if cputime else "time": _json_double(m.time_us), "alg_bw": _json_double(m.algbw_gbps),
            "bus_bw": _json_double(m.busbw_gbps), "nwrong": float(m.nwrong) if m.nwrong is not None else None}


def _per_iter_json(stats: IterStats, skipped: int, v: tuple[int, int, int]) -> dict:
    out: dict = {"skipped_iterations": skipped} if v >= _V_FIT else {}
    out.update({"min_us": stats.min_us, "max_us": stats.max_us, "avg_us": stats.avg_us, "p50_us": stats.p50_us,
                "p95_us": stats.p95_us, "p99_us": stats.p99_us, "stdev_us": stats.stdev_us,
                "cv_pct": stats.cv_pct, "times_us": list(stats.times_us)})
    if len(stats.per_process_us) > 1:
        out["per_process_max_times_us"] = [list(times) for times in stats.per_process_us]
    return out


def nccl_tests_json(setup: RunSetup, rows, *, version: str = NCCL_TESTS_LATEST, args=(), env=(),
               start_time: str = "", end_time: str = "", cputime: bool = False, per_iter=None,
               threads: int = 1, extra: dict | None = None) -> dict:
    """nccl-tests' -J document as release `version` writes it (src/util.cu, v2.17.3+): version
    (JSON_FILE_VERSION: 1, 2 from v2.19.2, 3 from v2.19.6), start_time, args, env, nccl_version
    (an int), config (the run's settings and one device per process, the first line of each),
    results (one object per row; nwrong a double, null when unchecked; actual_iterations and
    experiment_name ""), out_of_bounds, average_bus_bandwidth (spelled "bandwidith" before
    v2.17.9), errors, end_time; booleans as the strings "true" and "false" (jsonBool).
    `per_iter` gives each row's (out-of-place, in-place) IterStats for -I; `extra` goes under
    the key "nicksim", after everything nccl-tests writes."""
    v = _version(version)
    if v < _V_WIDE:
        raise UsageError(f"nccl-tests {version} has no -J", "-J", f"nccl-tests {flag_release('-J')} or later")
    rows = list(rows)

    def flag(value) -> str:
        return "true" if value else "false"

    config: dict = {"nthreads": setup.nthreads, "ngpus": setup.ngpus, "minimum_bytes": setup.min_nbytes,
                    "maximum_bytes": setup.max_nbytes}
    if setup.step_nbytes is None:
        config["step_factor"] = setup.step_factor or 2
    else:
        config["step_bytes"] = setup.step_nbytes
    config.update({"warmup_iters": setup.warmup_iters, "iterations": setup.iters,
                   "aggregated_iterations": setup.agg_iters, "validation": setup.check, "graph": setup.graph,
                   "blocking_collectives": flag(setup.blocking)})
    if v >= _V_PER_ITER:
        config["per_iter_timing"] = flag(setup.per_iter)
    if v >= _V_FIT:
        config["per_iter_skip"] = setup.per_iter_skip
    config["parallel_init"] = flag(setup.parallel_init)
    devices = []
    for process in setup.processes:  # parseRankInfo reads the first line of each process's buffer
        if process:
            d = process[0]
            domain, bus, dev = d.bus()
            devices.append({"rank": d.rank, "group": d.group, "pid": d.pid, "hostname": d.host.split()[0],
                            "device": d.cuda_dev, "device_hex": f"{domain:04x}:{bus:02x}:{dev:02x}",
                            "device_info": d.name})
    config["devices"] = devices
    results = []
    for index, row in enumerate(rows):
        item = {"size": row.nbytes, "count": row.count, "type": row.dtype, "redop": row.redop,
                "root": f"{row.root:6d}"}
        stats = per_iter[index] if per_iter is not None else None
        item["out_of_place"] = _tests_measurement(row.out_of_place, cputime)
        if stats is not None:
            item["out_of_place_per_iter"] = _per_iter_json(stats[0], setup.per_iter_skip, v)
        if row.in_place is not None:
            item["in_place"] = _tests_measurement(row.in_place, cputime)
            if stats is not None:
                item["in_place_per_iter"] = _per_iter_json(stats[1], setup.per_iter_skip, v)
        item["actual_iterations"] = setup.iters
        item["experiment_name"] = ""
        results.append(item)
    errors = _wrong_measurements(rows) * threads
    avg = average_busbw(rows)
    average, bandwidth = ("average_bus_bandwidth", "bandwidth") if v >= _V_JSON_SPELLING \
        else ("average_bus_bandwidith", "bandwidith")
    doc = {"version": 3 if v >= _V_FIT else 2 if v >= _V_PER_ITER else 1, "start_time": start_time,
           "args": list(args), "env": list(env), "nccl_version": setup.nccl_code, "config": config,
           "results": results, "out_of_bounds": {"count": errors, "okay": flag(errors == 0)},
           average: {bandwidth: _json_double(avg if avg is not None else math.nan), "okay": "unchecked"},
           # writeErrors lists ncclGetLastError(NULL), which NCCL returns as "" when nothing failed
           "errors": [""], "end_time": end_time}
    if extra is not None:
        doc["nicksim"] = extra
    return doc


def claim_json_path(path: str) -> tuple[str | None, str]:
    """The file nccl-tests' -J writes and the line it prints about it (util.cu jsonOutputInit): it
    never overwrites, so where `path` exists it tries `path.0`, `path.1`, ... and takes the first
    it can create (created here, empty, so that no other run takes it); (that path, "# Writing JSON
    output to PATH"), or (None, "# skipping json output; PATH not accessible") where a file cannot
    be made there. Unlike nccl-tests, a device or pipe that is there (/dev/stdout) is written to
    as it is, and a name need not end in .json (nccl-tests writes nothing for any other name)."""
    if os.path.exists(path) and not os.path.isfile(path):
        return str(path), f"# Writing JSON output to {path}"
    attempt, count = str(path), 0
    while True:
        try:
            os.close(os.open(attempt, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            attempt, count = f"{path}.{count}", count + 1
            continue
        except OSError:
            return None, f"# skipping json output; {attempt} not accessible"
        return attempt, f"# Writing JSON output to {attempt}"


# ---------------------------------------------------------------------------------------------
# Reading

_VALID = "nccl-tests text output (v2.13 or later), its -J JSON, or `# collective=` CSV blocks"
_ROW_SHAPE = "size count type redop root, then time algbw busbw #wrong out-of-place and in-place"
_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")  # mpirun --tag-output, possibly several per line
_NCCL_LOG = re.compile(r"\bNCCL (?:INFO|WARN|TRACE|ABORT)\b")
_NCCL_HEAD = re.compile(r"[A-Za-z][\w.-]*:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE|ABORT)\b")  # host:pid:tid [dev]
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf)", re.IGNORECASE)
_INT = re.compile(r"-?[0-9]+")
_UINT = re.compile(r"[0-9]+")
_NAME = re.compile(r"[A-Za-z][\w.]*")
_COLUMNS = re.compile(r"#\s+size\s+count\s+type\b")
_NTHREAD = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_NICKSIM = re.compile(r"#\s*nicksim \w+ \w+: .*?\b(\d+) ranks\b")  # perf/run's first line (engines.describe)
_DEVICE = re.compile(r"#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\b")
# A whole device line: "#  Rank  0 Group  0 Pid  1234 on host device  0 [0x01] NVIDIA A100" (Group since
# 2.13, Pid since 2.7): rank, host, device, the GPU's name.
DEVICE_LINE = re.compile(r"#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+(\d+)\s+"
                         r"\[[^\]]*\]\s+(.+)")
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_CONCLUDED_LINE = re.compile(r"#\s*Collective test concluded:\s*(\S+)")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\S+)")
_CASE = re.compile(r"#\s*collective=")
_CASE_KEY = re.compile(r"\b(collective|nranks|dtype|redop)=([^\s,;()]+)")

_CSV_FIELDS = {
    "time_us": ("out", "time_us"), "algbw_GBps": ("out", "algbw_gbps"), "busbw_GBps": ("out", "busbw_gbps"),
    "nwrong": ("out", "nwrong"),
    "inplace_time_us": ("in", "time_us"), "inplace_algbw_GBps": ("in", "algbw_gbps"),
    "inplace_busbw_GBps": ("in", "busbw_gbps"), "inplace_nwrong": ("in", "nwrong"),
}


def _strip_prefixes(tokens: list[str]) -> list[str]:
    """Drop launcher prefixes (`0:`, `host:`, `[default0]:`) in front of a line's content."""
    while tokens and tokens[0][-1] in ":>]|":
        tokens = tokens[1:]
    return tokens


def _comment(line: str) -> str | None:
    """The line from its `#` on, if everything before the `#` is launcher prefixes."""
    at = line.find("#")
    if at < 0 or _strip_prefixes(line[:at].split()):
        return None
    return line[at:]


def _float(token: str) -> float | None:
    return float(token) if _NUMBER.fullmatch(token) else None


@dataclass
class _Run:
    collective: str | None = None
    nthreads: int | None = None
    ngpus: int | None = None
    ranks: set = field(default_factory=set)
    tables: int = 0
    declared: int | None = None  # the ranks nicksim's own first line names

    def nranks(self) -> int | None:
        if self.ranks:
            return len(self.ranks)
        if self.declared:  # nicksim's own output: its ranks are simulated, in one process
            return self.declared
        if self.nthreads and self.ngpus:  # no device lines: one process assumed
            return self.nthreads * self.ngpus
        return None


@dataclass
class _Table:
    run: _Run
    line: int
    group: int = 4  # tokens per placement (8 with -I per-iteration columns)
    timestamps: bool = False
    rows: list = field(default_factory=list)
    collective: str | None = None  # from the `concluded` line that follows the table
    avg: float | None = None


def _parse_row(tokens: list[str], table: _Table | None) -> ResultRow | None:
    if len(tokens) < 5 or not (_UINT.fullmatch(tokens[0]) and _UINT.fullmatch(tokens[1])
                               and _NAME.fullmatch(tokens[2]) and _NAME.fullmatch(tokens[3])
                               and _INT.fullmatch(tokens[4])):
        return None
    group = table.group if table else 4
    rest = tokens[5:]
    if table is not None and table.timestamps and len(rest) > 2 * group:
        rest = rest[:2 * group]
    if len(rest) != 2 * group:
        return None
    placements = []
    for start in (0, group):
        time, alg, bus, wrong = rest[start:start + 4]
        values = [_float(time), _float(alg), _float(bus)]
        if None in values:
            return None
        if wrong == "N/A":
            nwrong = None
        elif _float(wrong) is not None and math.isfinite(float(wrong)):
            nwrong = int(float(wrong))
        else:
            return None
        placements.append(Measurement(values[0], values[1], values[2], nwrong))
    return ResultRow(int(tokens[0]), int(tokens[1]), tokens[2], tokens[3], int(tokens[4]),
                     placements[0], placements[1])


def _common(values) -> str | None:
    found = {v for v in values}
    return found.pop() if len(found) == 1 else None


def _finish(table: _Table) -> MeasuredTable:
    rows = tuple(table.rows)
    return MeasuredTable(table.collective or table.run.collective, table.run.nranks(),
                         _common(r.dtype for r in rows), _common(r.redop for r in rows), rows, table.line, table.avg,
                         table.run.ngpus)


class _CaseBlock:
    """A `# collective=...` comment, its `size_bytes,...` header and its rows."""

    def __init__(self, comment: str, line: int, source: str):
        self.meta = {key: value for key, value in reversed(_CASE_KEY.findall(comment))}
        self.line = line
        self.source = source
        self.columns: list[str] | None = None
        self.rows: list[ResultRow] = []
        self.avg: float | None = None

    def feed(self, text: str, lineno: int) -> bool:
        """Take one line; False when the line is not part of the block (the block has ended)."""
        stripped = text.strip()
        where = f"{self.source}:{lineno}"
        if self.columns is None:
            if not stripped or stripped.startswith("#"):
                return True
            if not stripped.startswith("size_bytes"):
                raise UsageError("a `# collective=` comment not followed by a CSV header", where,
                                 "size_bytes,time_us,algbw_GBps,busbw_GBps[,inplace_time_us,...]")
            self.columns = [c.strip() for c in stripped.split(",")]
            return True
        if stripped.startswith("#"):
            match = _AVG.match(stripped)
            if match and _float(match[1]) is not None:
                self.avg = float(match[1])
            return True
        if "," not in stripped:
            return False
        cells = [c.strip() for c in stripped.split(",")]
        if len(cells) != len(self.columns):
            raise UsageError(f"{len(cells)} values in a CSV row", where,
                             f"{len(self.columns)} values: {','.join(self.columns)}")
        if not _UINT.fullmatch(cells[0]):
            raise UsageError(f"size '{cells[0]}' in a CSV row", where, "a whole number of bytes")
        values: dict = {"out": {}, "in": {}}
        count = None
        for column, cell in zip(self.columns[1:], cells[1:]):
            if column == "count" and cell:
                if not _UINT.fullmatch(cell):
                    raise UsageError(f"count '{cell}' in a CSV row", where, "a whole number of elements")
                count = int(cell)
            if column not in _CSV_FIELDS or not cell:
                continue
            number = _float(cell)
            if number is None:
                raise UsageError(f"'{cell}' in column {column}", where, "a number or nothing")
            placement, name = _CSV_FIELDS[column]
            values[placement][name] = int(number) if name == "nwrong" else number
        out = Measurement(**{k: values["out"].get(k) for k in ("time_us", "algbw_gbps", "busbw_gbps", "nwrong")})
        has_in = any(_CSV_FIELDS.get(c, ("",))[0] == "in" for c in self.columns)
        inp = (Measurement(**{k: values["in"].get(k) for k in ("time_us", "algbw_gbps", "busbw_gbps", "nwrong")})
               if has_in and values["in"] else None)
        self.rows.append(ResultRow(int(cells[0]), count, self.meta.get("dtype"), self.meta.get("redop"),
                                   None, out, inp))
        return True

    def table(self) -> MeasuredTable:
        if self.columns is None:
            raise UsageError("a `# collective=` comment not followed by a CSV header",
                             f"{self.source}:{self.line}", "size_bytes,time_us,algbw_GBps,busbw_GBps")
        nranks = self.meta.get("nranks")
        return MeasuredTable(known_collective(self.meta.get("collective", "")),
                             int(nranks) if nranks and _UINT.fullmatch(nranks) else None,
                             self.meta.get("dtype"), self.meta.get("redop"), tuple(self.rows), self.line, self.avg)


def _read_text(text: str, source: str) -> list[MeasuredTable]:
    tables: list[_Table] = []
    found: list[tuple[int, MeasuredTable]] = []  # (first line, table), CSV blocks as they end
    run = _Run()
    table: _Table | None = None  # the open table (rows still coming)
    last: _Table | None = None  # the latest table, open or closed (footers refer to it)
    block: _CaseBlock | None = None
    carry = ""  # the start of a row that NCCL's own log lines cut (they share rank 0's stdout)
    lines = text.splitlines()

    def new_run() -> _Run:
        nonlocal table
        table = None
        return _Run()

    for lineno, raw in enumerate(lines, 1):
        line = _TAG.sub("", raw)
        if block is not None:
            if block.feed(line, lineno):
                continue
            found.append((block.line, block.table()))
            block = None
        if _NCCL_LOG.search(line):
            head = _NCCL_HEAD.search(line)
            if head and table is not None and line[:head.start()].strip() and _comment(line[:head.start()]) is None:
                carry += line[:head.start()]
            continue
        if carry:
            joined, carry = carry + line, ""
            if _parse_row(_strip_prefixes(joined.split()), table) is not None:
                line = joined
        comment = _comment(line)
        if comment is not None:
            if _CASE.match(comment):
                block = _CaseBlock(comment, lineno, source)
            elif comment.startswith("# nccl-tests version"):
                if run.collective or run.tables or run.nthreads or run.ranks:
                    run = new_run()  # (nicksim's own first line comes before it and belongs to it)
            elif (match := _STARTING.match(comment)):
                if run.collective or run.tables or run.nthreads:
                    run = new_run()
                run.collective = known_collective(match[1])
            elif (match := _NTHREAD.match(comment)):
                if run.nthreads or run.tables:
                    run = new_run()
                run.nthreads, run.ngpus = int(match[1]), int(match[2])
            elif (match := _DEVICE.match(comment)):
                run.ranks.add(int(match[1]))
            elif (match := _NICKSIM.match(comment)):
                if run.nthreads or run.tables or run.declared:
                    run = new_run()
                run.declared = int(match[1])
            elif _COLUMNS.match(comment):
                if "#wrong" not in comment and "error" in comment.split():
                    raise UsageError("nccl-tests output from before v2.13 (an 'error' column, no '#wrong')",
                                     f"{source}:{lineno}", _VALID)
                table = last = _Table(run, lineno, group=8 if "i_min" in comment else 4,
                                      timestamps="timestamp" in comment)
                run.tables += 1
                tables.append(table)
            elif comment.startswith("# Out of bounds values"):
                table = None
            elif (match := _AVG.match(comment)):
                if last is not None and _float(match[1]) is not None:
                    last.avg = float(match[1])
            elif (match := _CONCLUDED_LINE.match(comment)):
                name = known_collective(match[1])
                if last is not None and last.run is run:
                    last.collective = name
                run.collective = run.collective or name
            continue
        # A note after a row's columns (nicksim's --plan) is not part of the row.
        tokens = _strip_prefixes(line.partition("#")[0].split())
        if len(tokens) < 2 or not (_UINT.fullmatch(tokens[0]) and _UINT.fullmatch(tokens[1])):
            continue
        row = _parse_row(tokens, table)
        if row is None:
            if table is None:
                continue  # stray numbers outside any table
            shown = " ".join(tokens)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise UsageError(f"malformed nccl-tests row '{shown}'", f"{source}:{lineno}",
                             _ROW_SHAPE)
        if table is None:  # rows without a header (transcribed logs): a table starts here
            table = last = _Table(run, lineno)
            run.tables += 1
            tables.append(table)
        table.rows.append(row)
    if block is not None:
        found.append((block.line, block.table()))
    found.extend((t.line, _finish(t)) for t in tables)
    if not found:
        raise UsageError(f"no nccl-tests results found in {len(lines)} lines", source, _VALID)
    return [t for _, t in sorted(found, key=lambda item: item[0])]


def _json_measurement(obj, where: str) -> Measurement | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise UsageError("a placement that is not an object", where, "{time, alg_bw, bus_bw, nwrong}")
    values = []
    for key in (("time", "cpu_time"), ("alg_bw",), ("bus_bw",), ("nwrong",)):
        value = next((obj[k] for k in key if k in obj), None)
        if isinstance(value, str) and _NUMBER.fullmatch(value):
            value = float(value)  # nccl-tests writes NaN as "nan"
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UsageError(f"{key[0]} {value!r}", where, "a number or null")
        values.append(value)
    nwrong = values[3]
    return Measurement(values[0], values[1], values[2],
                       int(nwrong) if nwrong is not None and math.isfinite(nwrong) else None)


def _read_json(text: str, source: str) -> list[MeasuredTable]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"not valid JSON ({exc.msg})", f"{source}:{exc.lineno}", _VALID) from None
    except (ValueError, RecursionError):
        raise UsageError("JSON nested too deeply or holding an unreadable number", f"{source}:1", _VALID) from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise UsageError("JSON without a 'results' list", f"{source}:1", _VALID)
    rows = []
    for index, item in enumerate(data["results"]):
        where = f"{source}: results[{index}]"
        if not isinstance(item, dict):
            raise UsageError("a result that is not an object", where, _ROW_SHAPE)
        size, count, root = item.get("size"), item.get("count"), item.get("root")
        if isinstance(root, str) and _INT.fullmatch(root.strip()):
            root = int(root)  # nccl-tests writes the root as "%6i"
        for name, value in (("size", size), ("count", count), ("root", root)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise UsageError(f"{name} {value!r}", where, "an integer")
        if size is None:
            raise UsageError("a result without size", where, _ROW_SHAPE)
        for name in ("type", "redop"):
            if item.get(name) is not None and not isinstance(item.get(name), str):
                raise UsageError(f"{name} {item.get(name)!r}", where, "a name such as float or sum")
        own = item.get("nicksim") if isinstance(item.get("nicksim"), dict) else {}
        plan = own.get("plan", item.get("plan"))
        if plan is not None and not isinstance(plan, dict):
            raise UsageError(f"plan {plan!r}", where, "an object")
        out = _json_measurement(item.get("out_of_place"), where) or Measurement(None, None, None, None)
        rows.append(ResultRow(size, count, item.get("type"), item.get("redop"), root, out,
                              _json_measurement(item.get("in_place"), where), plan))
    own = data.get("nicksim") if isinstance(data.get("nicksim"), dict) else {}
    collective = own.get("collective", data.get("collective"))
    if collective is None and isinstance(data.get("args"), list) and data["args"]:
        collective = data["args"][0]  # nccl-tests: argv[0], the binary
    collective = known_collective(collective) if isinstance(collective, str) else None
    nranks = own.get("nranks", data.get("nranks"))
    config = data.get("config")
    if not isinstance(nranks, int) and isinstance(config, dict):
        devices, threads, gpus = config.get("devices"), config.get("nthreads"), config.get("ngpus")
        # nccl-tests lists one device per process (its first), each running threads x gpus ranks.
        nranks = len(devices) * threads * gpus if isinstance(devices, list) and isinstance(threads, int) \
            and isinstance(gpus, int) and devices else None
    if isinstance(nranks, bool) or not isinstance(nranks, int):
        nranks = None
    avg = data.get("average_bus_bandwidth", data.get("average_bus_bandwidith"))  # spelled so before 2.17.9
    avg = avg.get("bandwidth", avg.get("bandwidith")) if isinstance(avg, dict) else None
    avg = float(avg) if isinstance(avg, (int, float)) and not isinstance(avg, bool) else None
    rows = tuple(rows)
    gpus = config.get("ngpus") if isinstance(config, dict) else None
    gpus = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 1 else None
    return [MeasuredTable(collective, nranks, _common(r.dtype for r in rows), _common(r.redop for r in rows),
                          rows, 1, avg, gpus)]


def read_results(text: str, source: str = "<input>") -> list[MeasuredTable]:
    """Every results table in `text`, in source order.

    JSON (nccl-tests -J, or results_json) is one table. Text is nccl-tests' output in the
    v2.13-v2.17.2 or v2.17.3+ layout, including -I per-iteration and -S timestamp columns,
    with `[1,0]<stdout>:` tags anywhere on a line, launcher prefixes such as `host:` or `0:`,
    and NCCL INFO/WARN lines between (also those that cut a row: NCCL logs to the same stdout);
    plus `# collective=... nranks=... dtype=... redop=...`
    comments followed by `size_bytes,...` CSV rows (columns it does not know are skipped).
    The collective comes from `# Collective test starting/concluded:` or the CSV comment; the
    rank count from the device lines, else from nicksim's own first line (`# nicksim perf ...: ...
    N ranks`), else nThread x nGpus (one process assumed). `source`
    names the input in errors: a malformed row, a CSV row of the wrong width, output older
    than v2.13, or no table at all is a UsageError naming the line.
    """
    if not isinstance(text, str):
        raise UsageError(f"{type(text).__name__} given", source, "text")
    if text.lstrip("\ufeff \t\r\n").startswith("{"):
        return _read_json(text.lstrip("\ufeff"), source)
    return _read_text(text, source)
