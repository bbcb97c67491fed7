"""An nccl-tests run answered by an engine: sizes, rows, and the comparison with a measured run.

`sweep_sizes` steps sizes as nccl-tests does (-b/-e with -f or -i); `perf_rows(job, ...)` asks
the engine for each size and returns nccl-tests ResultRows carrying the plan; `compare(rows,
measured)` pairs model rows with measured rows of the same size and says, per row and per size
band, how far apart their bus bandwidths are.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..calls import COLLECTIVE_TABLE, call_for_size
from ..constants.tuning_tables import PROTOCOLS
from ..engines import CallResult, Engine, engine_named
from ..errors import UsageError
from ..files import read_input
from ..job import Job
from ..formats.report import (MeasuredTable, ResultRow, format_row, measurement, read_results, results_json,
                              run_header, table_footer, table_header)
from ..formats.tables import Records
from ..tuning.cost import format_tuning_table

__all__ = ["parse_size", "sweep_sizes", "MAX_SIZES", "perf_rows", "result_row_of", "PerfOptions", "Perf", "run_perf", "Comparison", "compare", "format_comparison", "size_band",
           "measured_table"]


def parse_size(text, where: str) -> int:
    """nccl-tests' size grammar: a byte count with an optional K, M, G or T (powers of 1024)."""
    t = str(text).strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        value = int(float(t[:-1] if scale != 1 else t) * scale)
    except (ValueError, OverflowError):  # words, and inf or nan, are no size
        raise UsageError(f"'{text}' is not a size", where, "bytes like 8, 64K, 256M, 8G") from None
    if value < 0:
        raise UsageError(f"size {text}", where, "a size >= 0")
    return value


# The most sizes one run answers: a bound on time and memory (nccl-tests has none; -i 1 over a
# range of megabytes would never end).
MAX_SIZES = 10_000


def sweep_sizes(min_nbytes: int, max_nbytes: int, step_factor: int | None = 2, step_nbytes: int | None = None) \
        -> list[int]:
    """nccl-tests' size loop: from -b to -e, multiplying by -f or adding -i."""
    if max_nbytes < min_nbytes:
        raise UsageError(f"-e {max_nbytes} is below -b {min_nbytes}", "-b/-e", "-e at least -b")
    if step_nbytes:
        count = (max_nbytes - min_nbytes) // step_nbytes + 1
        if count > MAX_SIZES:
            raise UsageError(f"-b {min_nbytes} to -e {max_nbytes} by -i {step_nbytes} is {count} sizes", "-i",
                             f"a step that gives at most {MAX_SIZES} sizes")
    sizes, size = [], min_nbytes
    while size <= max_nbytes:
        sizes.append(size)
        if step_nbytes is not None:
            if step_nbytes == 0:
                break
            size += step_nbytes
        else:
            if size == 0:
                break
            size *= step_factor or 2
    return sizes


def perf_rows(job: Job, collective: str, sizes: list[int], dtype: str = "float", redop: str = "sum",
              root: int = 0, engine: Engine | str = "nccl",
              on_row: Callable[[ResultRow | None, CallResult], None] | None = None, prepared=None
              ) -> list[tuple[ResultRow | None, CallResult]]:
    """One nccl-tests row per size, answered by `engine` (a name, or an Engine made with its
    options), with the engine's plan attached; `on_row(row, result)` hears of each as it is ready.
    A run that hangs ends the list with (None, its result); `prepared` is the engine's set-up of
    the job where it was made already."""
    engine = engine_named(engine) if isinstance(engine, str) else engine
    job.graphs  # a job without GPUs says so before anything else does
    if not 0 <= root < job.nranks:
        raise UsageError(f"root {root} is not a rank of this job", "-r", f"0..{job.nranks - 1}")
    out: list[tuple[ResultRow | None, CallResult]] = []

    def done(result: CallResult) -> None:
        row = None if result.hang is not None else result_row_of(result)
        out.append((row, result))
        if on_row is not None:
            on_row(row, result)

    engine.run_many(job, [call_for_size(collective, size, dtype, redop, root, job.nranks) for size in sizes], done,
                    prepared)
    return out


def result_row_of(result: CallResult) -> ResultRow:
    """The nccl-tests row of one answered call: out of place and in place (the same call to an
    engine that prices one; a zero-byte call still costs a launch in nccl-tests)."""
    call = result.call
    out = measurement(call.collective, call.nranks, call.nbytes, max(result.time_us, 1e-3), result.nwrong[0])
    inp = out if result.in_place_time_us is None else measurement(
        call.collective, call.nranks, call.nbytes, max(result.in_place_time_us, 1e-3), result.nwrong[1])
    return ResultRow(call.nbytes, call.count, call.dtype, call.redop, call.root, out, inp, result.plan_dict())


@dataclass(frozen=True)
class PerfOptions:
    """nccl-tests' flags for one run: the collective, the sizes (-b/-e with -f or -i), type, reduction,
    root, iterations, warm-up, check and aggregation, and whether to append NCCL's choice to each
    row (--plan) and print the TUNING table first."""

    collective: str
    sizes: tuple[int, ...]
    dtype: str = "float"
    redop: str = "sum"
    root: int = 0
    iters: int = 20
    warmup_iters: int = 1
    check: int = 1
    agg_iters: int = 1
    min_nbytes: int = 8
    max_nbytes: int = 8 << 30
    step: str = "2(factor)"
    annotate: bool = False
    print_tuning: bool = False


@dataclass(frozen=True)
class Perf(Records):
    """A finished nccl-tests run: which engine answered, on what, and a row and a result per size
    (`hang`: the DES's HangReport where the run hung, its last size then has no row)."""

    collective: str
    engine: str
    system: str
    nranks: int
    nccl_version: str
    rows: tuple[ResultRow, ...]
    results: tuple[CallResult, ...]
    hang: object = None

    def records(self) -> list[dict]:
        """One plain record per answered size: the call, the plan, time, algbw and busbw."""
        out = []
        for row, result in zip(self.rows, self.results):
            m = row.out_of_place
            out.append({**result.record(), "engine": self.engine, "system": self.system,
                        "algbw_gbps": m.algbw_gbps, "busbw_gbps": m.busbw_gbps,
                        "in_place_busbw_gbps": row.in_place.busbw_gbps if row.in_place else None})
        return out

    def json_doc(self) -> dict:
        """nccl-tests' -J document with nicksim's run fields."""
        return results_json(self.collective, self.rows, {"engine": self.engine, "system": self.system,
                                                          "nranks": self.nranks, "nccl_version": self.nccl_version})


def _decision(job: Job, result: CallResult) -> str | None:
    """enqueue.cc (2.22): the decision rank 0 logs for each call under NCCL_DEBUG_SUBSYS=TUNING."""
    if result.estimate != "nccl" or result.algorithm not in job.comm.table.algorithms:
        return None
    return (f"{result.call.nbytes} Bytes -> Algo {job.comm.table.algorithms.index(result.algorithm)} proto "
            f"{PROTOCOLS.index(result.protocol)} time {result.time_us:f}")


def _plan_note(result: CallResult) -> str:
    """--plan's note after a row: NCCL's choice, and where the time comes from if not its formula."""
    return (f"  # {result.algorithm}/{result.protocol} {result.n_channels}ch {result.n_threads}t"
            + ("" if result.estimate == "nccl" else f" ({result.estimate})"))


def _log_warmup(logger, job: Job, options: PerfOptions) -> None:
    """nccl-tests' warm-up (common.cu): warmup_iters calls of every size from -b to -e by factors of 2,
    each logged with the algorithm NCCL's time model picks for it."""
    if logger is None or not logger.active:
        return
    model = engine_named("nccl")
    size = max(options.min_nbytes, 1)
    while size <= options.max_nbytes:
        call = call_for_size(options.collective, size, options.dtype, options.redop, options.root, job.nranks)
        algorithm = model.run(job, call).algorithm
        for _ in range(options.warmup_iters):
            logger.call(call, algorithm)
        size *= 2


def run_perf(job: Job, engine: Engine | str, options: PerfOptions, emit: Callable[[str], None] = lambda line: None,
             logger=None, on_ready: Callable[[], None] | None = None) -> Perf:
    """An nccl-tests run answered by `engine`, its text written line by line to `emit` as each size
    completes: nicksim's header, nccl-tests' own header, the TUNING table where asked, a row per
    size (with NCCL's choice where `options.annotate`), the footer, then what the engine says of the
    run (the DES's collapsed nodes, a hang). `logger` (formats.joblog.JobLogger) writes the
    NCCL_DEBUG lines every rank would: init, the warm-up, each call, destroy. `on_ready()` is
    called once the engine has accepted the job (a refusal is then the only thing said)."""
    engine = engine_named(engine) if isinstance(engine, str) else engine
    logger = None if engine.ranks_log else logger  # a real run's ranks write their own
    collective = options.collective
    job.graphs  # a job without GPUs says so before anything else does
    if not 0 <= options.root < job.nranks:
        raise UsageError(f"root {options.root} is not a rank of this job", "-r", f"0..{job.nranks - 1}")
    calls = [call_for_size(collective, size, options.dtype, options.redop, options.root, job.nranks)
             for size in options.sizes]
    prepared = engine.prepare(job, calls)  # a set-up that cannot work says so before the header
    if on_ready is not None:
        on_ready()
    priced = not COLLECTIVE_TABLE[collective].p2p
    emit(f"# nicksim perf {collective}: {engine.describe(job)}")
    for note in engine.notes(job):
        emit(f"# {note}")
    emit(run_header(options.min_nbytes, options.max_nbytes, options.step, options.warmup_iters, options.iters,
                    options.agg_iters, options.check))
    if options.print_tuning and priced:
        for line in format_tuning_table(job.comm.table):
            emit(line)
    if logger is not None:
        logger.init()
    _log_warmup(logger, job, options)
    for line in table_header():
        emit(line)
    rows: list[ResultRow] = []
    results: list[CallResult] = []

    def row_done(row: ResultRow | None, result: CallResult) -> None:
        results.append(result)
        if row is None:
            return
        calls = 1 + options.iters * options.agg_iters + (1 if options.check else 0)  # BenchTime's calls
        if logger is not None:
            decision = _decision(job, result) if priced else None
            for in_place in (False, True):
                for _ in range(calls):
                    logger.call(result.call, result.algorithm, in_place, decision)
        emit(format_row(row, index=len(rows)) + (_plan_note(result) if options.annotate else ""))
        rows.append(row)

    perf_rows(job, collective, list(options.sizes), options.dtype, options.redop, options.root, engine, row_done,
              prepared)
    for line in table_footer(collective, rows):
        emit(line)
    apart = [r for r in results if r.detail is not None and not getattr(r.detail, "exact", True)]
    if apart:
        emit(f"# des: on {len(apart)} size(s) each channel's nodes were collapsed on their own (docs/des.md: close "
             "to, not exactly, the full simulation); --set des.exact_nodes=N simulates up to N node classes exactly")
    hang = results[-1].hang if results else None
    if hang is not None:
        for line in hang.lines():
            emit(f"# {line}")
    if logger is not None:
        logger.destroy()
    return Perf(collective, engine.name, job.system_name, job.nranks, job.system.rules.version.line, tuple(rows),
                tuple(results), hang)


def size_band(nbytes: int) -> str:
    """The size bands validation reports by: < 64 KiB, 64 KiB - 16 MiB, >= 16 MiB."""
    if nbytes < 64 << 10:
        return "<64K"
    return "64K-16M" if nbytes < 16 << 20 else ">=16M"


@dataclass(frozen=True)
class Comparison:
    """A model row beside the measured row of the same size; `error_pct` is the busbw error of
    the model relative to the measurement, from the times where the measurement has one (busbw
    columns are rounded to 0.01 GB/s, which erases small sizes), else from busbw."""

    nbytes: int
    model_time_us: float
    measured_time_us: float | None
    model_busbw_gbps: float
    measured_busbw_gbps: float | None

    @property
    def error_pct(self) -> float | None:
        if self.measured_time_us:
            return 100.0 * (self.measured_time_us / self.model_time_us - 1.0)
        if not self.measured_busbw_gbps:
            return None
        return 100.0 * (self.model_busbw_gbps - self.measured_busbw_gbps) / self.measured_busbw_gbps


def _measured_busbw(row: ResultRow) -> tuple[float | None, float | None]:
    """Out-of-place time and busbw, falling back to in-place where a table has only that."""
    for m in (row.out_of_place, row.in_place):
        if m is not None and m.busbw_gbps is not None:
            return m.time_us, m.busbw_gbps
    return None, None


def measured_table(path: str, collective: str, nranks: int | None = None, index: int = 1) -> MeasuredTable:
    """The `index`-th table of a measured file (nccl-tests text or JSON, or CSV blocks) that is for
    `collective` on `nranks` ranks (any rank count if None), tables that do not say counting as fitting."""
    text = read_input(path, "a readable nccl-tests output file").decode("utf-8", errors="replace")
    tables = read_results(text, path)
    fitting = [t for t in tables if t.collective in (None, collective) and (nranks is None or t.nranks in (None, nranks))]
    if len(fitting) < index:
        found = ", ".join(f"{t.collective} with {t.nranks} ranks" for t in tables) or "no tables"
        wanted = f"{collective} table" + (f" #{index}" if index > 1 else "")
        raise UsageError(f"no {wanted} for {nranks or 'any number of'} ranks (found {found})", path,
                         "a file with a matching nccl-tests table")
    return fitting[index - 1]


def compare(rows: list[ResultRow], measured: MeasuredTable) -> list[Comparison]:
    """Pairs of model and measured rows with the same size, in size order."""
    by_size = {r.nbytes: r for r in measured.rows}
    out = []
    for row in rows:
        other = by_size.get(row.nbytes)
        if other is None:
            continue
        time_us, busbw = _measured_busbw(other)
        out.append(Comparison(row.nbytes, row.out_of_place.time_us, time_us, row.out_of_place.busbw_gbps, busbw))
    return out


def format_comparison(pairs: list[Comparison], engine: str = "nccl") -> list[str]:
    """A `#`-commented block, one line per size, then median and worst absolute error per band;
    `engine` names the side that was computed."""
    lines = [f"# {engine} vs measured (busbw error = {engine} / measured - 1)",
             f"# {'size':>12}  {engine + '_us':>10}  {'meas_us':>10}  {engine + '_busbw':>11}  {'meas_busbw':>10}  "
             f"{'error%':>8}"]
    for p in pairs:
        meas_t = f"{p.measured_time_us:10.2f}" if p.measured_time_us is not None else f"{'N/A':>10}"
        meas_b = f"{p.measured_busbw_gbps:10.2f}" if p.measured_busbw_gbps is not None else f"{'N/A':>10}"
        err = f"{p.error_pct:8.1f}" if p.error_pct is not None else f"{'N/A':>8}"
        lines.append(f"# {p.nbytes:>12}  {p.model_time_us:10.2f}  {meas_t}  {p.model_busbw_gbps:11.2f}  {meas_b}  "
                     f"{err}")
    for band in ("<64K", "64K-16M", ">=16M"):
        errs = sorted(abs(p.error_pct) for p in pairs if size_band(p.nbytes) == band and p.error_pct is not None)
        if errs:
            median = errs[len(errs) // 2] if len(errs) % 2 else (errs[len(errs) // 2 - 1] + errs[len(errs) // 2]) / 2
            lines.append(f"# band {band:>8}: {len(errs)} sizes, median |error| {median:.1f}%, worst {errs[-1]:.1f}%")
    return lines
