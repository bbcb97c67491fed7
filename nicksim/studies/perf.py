"""An nccl-tests run answered by an engine: sizes, rows, and the comparison with a measured run.

`sweep_sizes` steps sizes as nccl-tests does (-b/-e with -f or -i); `perf_rows(job, ...)` asks
the engine for each size and returns nccl-tests ResultRows carrying the plan; `compare(rows,
measured)` pairs model rows with measured rows of the same size and says, per row and per size
band, how far apart their bus bandwidths are.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .calls import call_for_size
from .engines import ENGINES, EngineResult, engine_result
from .errors import UsageError
from .job import Job
from .report import MeasuredTable, ResultRow, measurement, read_results

__all__ = ["parse_size", "sweep_sizes", "perf_rows", "Comparison", "compare", "format_comparison", "size_band",
           "measured_table"]


def parse_size(text, where: str) -> int:
    """nccl-tests' size grammar: a byte count with an optional K, M, G or T (powers of 1024)."""
    t = str(text).strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        value = int(float(t[:-1] if scale != 1 else t) * scale)
    except ValueError:
        raise UsageError(f"'{text}' is not a size", where, "bytes like 8, 64K, 256M, 8G") from None
    if value < 0:
        raise UsageError(f"size {text}", where, "a size >= 0")
    return value


def sweep_sizes(min_nbytes: int, max_nbytes: int, step_factor: int | None = 2, step_nbytes: int | None = None) \
        -> list[int]:
    """nccl-tests' size loop: from -b to -e, multiplying by -f or adding -i."""
    if max_nbytes < min_nbytes:
        raise UsageError(f"-e {max_nbytes} is below -b {min_nbytes}", "-b/-e", "-e at least -b")
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
              root: int = 0, engine: str = "model", setup=None) -> list[tuple[ResultRow | None, EngineResult]]:
    """One nccl-tests row per size, timed by `engine`, with the engine's plan attached (`setup`:
    the DES setup). A DES run that hangs ends the list with (None, its result)."""
    if engine not in ENGINES:
        raise UsageError(f"engine '{engine}' is not available", "--engine", ", ".join(ENGINES))
    job.graphs  # a job without GPUs says so before anything else does
    if not 0 <= root < job.nranks:
        raise UsageError(f"root {root} is not a rank of this job", "-r", f"0..{job.nranks - 1}")
    out = []
    for size in sizes:
        call = call_for_size(collective, size, dtype, redop, root, job.nranks)
        result = engine_result(job, call, engine, setup)
        if getattr(result.detail, "hang", None) is not None:
            out.append((None, result))
            break
        nbytes = call.nbytes
        time_us = max(result.time_us, 1e-3)  # a zero-byte call still costs a launch in nccl-tests
        m = measurement(collective, job.nranks, nbytes, time_us)
        row = ResultRow(nbytes, call.count, dtype, call.redop, call.root, m, m, result.plan_dict())
        out.append((row, result))
    return out


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
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read: {exc.strerror}", path, "a readable nccl-tests output file") from None
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


def format_comparison(pairs: list[Comparison], engine: str = "model") -> list[str]:
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
