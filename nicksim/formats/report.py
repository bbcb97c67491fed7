"""nccl-tests' result tables, written and read.

This module promises nccl-tests' own output for rows that were measured or modelled: the text
table (header, one line per size, footer) character for character as a given nccl-tests release
prints it (src/util.cu; src/common.cu before v2.17.3), its `-J` JSON, and the bus-bandwidth
factors and size conventions of each *_perf binary (src/<collective>.cu). The reader takes back
what nccl-tests printed: text output in the v2.13-v2.17.2 and v2.17.3+ layouts, with
`mpirun --tag-output` and hostname prefixes and NCCL INFO lines in between; nccl-tests' JSON and
our own; and the `# collective=` CSV blocks of the validation cases. Bad input is one
UsageError naming the line.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from ..calls import COLLECTIVE_TABLE, COLLECTIVES, DTYPES, call_for_size, collective_name, dtype_name, known_collective
from ..errors import UsageError

__all__ = [
    "run_header",
    "step_text",
    "NCCL_TESTS_LATEST",
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


# Layout changes, as nccl-tests tags them.
_V_FIRST = (2, 13, 0)  # before: per-collective headers with an `error` column
_V_CONCLUDED = (2, 16, 7)  # `# Collective test concluded:` line
_V_WIDE = (2, 17, 3)  # util.cu: getFloatStr for all three numbers, #wrong in 6 columns
_V_FIT = (2, 19, 6)  # getFloatStr keeps the most decimals that fit, instead of counting digits


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
    (its column header, first row, or `# collective=` comment; 1 for JSON) and the average bus
    bandwidth the source printed in its footer, in GB/s."""

    collective: str | None
    nranks: int | None
    dtype: str | None
    redop: str | None
    rows: tuple[ResultRow, ...]
    source_line: int
    avg_busbw_gbps: float | None = None


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
    return version


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


def format_row(row: ResultRow, version: str = NCCL_TESTS_LATEST, *, index: int | None = None) -> str:
    """One table line as nccl-tests `version` prints it: size, count, type, redop, root, then
    out-of-place and in-place time, algbw, busbw and #wrong (N/A when not checked). A row
    without in-place prints the out-of-place part only (nccl-tests itself always prints both)."""
    v = _version(version)
    where = f"row {index}" if index is not None else "row"
    for name in ("nbytes", "count", "dtype", "redop", "root"):
        if getattr(row, name) is None:
            raise UsageError(f"a row without {name} cannot be printed", where, "rows with every column")
    text = f"{row.nbytes:12d}  {row.count:12d}  {row.dtype:>8}  {row.redop:>6}  {row.root:6d}"
    text += _measurement_text(row.out_of_place, v, where)
    if row.in_place is not None:
        text += _measurement_text(row.in_place, v, where)
    return text


def _header(v: tuple[int, int, int]) -> list[str]:
    blank = f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}"
    title = blank + "           out-of-place                       in-place          "
    names = f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
    units = f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
    half_names = f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}"
    half_units = f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}"
    if v >= _V_WIDE:  # trailing blank: the empty timestamp column (" %*s")
        names += f"{half_names}  {'#wrong':>6}{half_names}  {'#wrong':>6} "
        units += f"{half_units}  {'':>6}{half_units}  {'':>6} "
    else:
        names += f"{half_names} {'#wrong':>6}{half_names} {'#wrong':>6}"
        units += f"{half_units}  {'':>5}{half_units}  {'':>5}"
    return ["#", title, names, units]


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
               check: int) -> str:
    """nccl-tests' line about the run before its table (common.cu, one thread and one GPU per
    process): `# nThread 1 nGpus 1 minBytes ... step: 2(factor) ... graph: 0`."""
    return (f"# nThread 1 nGpus 1 minBytes {min_nbytes} maxBytes {max_nbytes} step: {step} warmup iters: "
            f"{warmup_iters} iters: {iters} agg iters: {agg_iters} validation: {check} graph: 0")


def step_text(step_factor: int | None, step_nbytes: int | None) -> str:
    """How nccl-tests prints its size step: `2(factor)` for -f, `1024(bytes)` for -i."""
    return f"{step_nbytes}(bytes)" if step_nbytes is not None else f"{step_factor or 2}(factor)"


def table_header(version: str = NCCL_TESTS_LATEST) -> list[str]:
    """The table's first four lines (format_table's), for a run that prints rows as they come."""
    return _header(_version(version))


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
                         _common(r.dtype for r in rows), _common(r.redop for r in rows), rows, table.line, table.avg)


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
                run = new_run()
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
        tokens = _strip_prefixes(line.split())
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
        if item.get("plan") is not None and not isinstance(item.get("plan"), dict):
            raise UsageError(f"plan {item.get('plan')!r}", where, "an object")
        out = _json_measurement(item.get("out_of_place"), where) or Measurement(None, None, None, None)
        rows.append(ResultRow(size, count, item.get("type"), item.get("redop"), root, out,
                              _json_measurement(item.get("in_place"), where), item.get("plan")))
    collective = data.get("collective")
    if collective is None and isinstance(data.get("args"), list) and data["args"]:
        collective = data["args"][0]  # nccl-tests: argv[0], the binary
    collective = known_collective(collective) if isinstance(collective, str) else None
    nranks = data.get("nranks")
    config = data.get("config")
    if not isinstance(nranks, int) and isinstance(config, dict):
        devices, threads, gpus = config.get("devices"), config.get("nthreads"), config.get("ngpus")
        # nccl-tests lists one device per process (its first), each running threads x gpus ranks.
        nranks = len(devices) * threads * gpus if isinstance(devices, list) and isinstance(threads, int) \
            and isinstance(gpus, int) and devices else None
    if isinstance(nranks, bool) or not isinstance(nranks, int):
        nranks = None
    avg = data.get("average_bus_bandwidth")
    avg = avg.get("bandwidth") if isinstance(avg, dict) else None
    avg = float(avg) if isinstance(avg, (int, float)) and not isinstance(avg, bool) else None
    rows = tuple(rows)
    return [MeasuredTable(collective, nranks, _common(r.dtype for r in rows), _common(r.redop for r in rows),
                          rows, 1, avg)]


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
