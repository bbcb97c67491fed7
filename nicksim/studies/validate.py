"""Accuracy against real runs: validation cases, their busbw errors by size band, a report and plots.

A case (a TOML file, `validation/*.toml`) states what a real nccl-tests run ran on — the system as
`nicksim perf`'s options name it (catalog name or topology file, nodes, fabric, NIC speed, NCCL
version), the NCCL environment, the collective and data type — and its measured rows: inline
(`rows`, the numbers as published, with their `source`), or in a file beside it (`measured`: an
nccl-tests output, JSON, or a case file of CSV blocks; a relative path is taken from the case
file's folder). The project's own cases carry their rows inline and name catalog systems, so a
clone validates with nothing beside it. `load_case(path)` promises a Case or a UsageError naming
the file and key; `run_case(case, engine)` asks an engine for every measured size and promises a
CaseResult (one Point per size: measured and predicted bus bandwidth, the algorithm and protocol
chosen), or one that says why the case could not run. Errors are predicted / measured - 1,
reported by size band and summarised, as the targets are stated, as the median and worst absolute
error over sizes of at least 1 MiB. A case may say why it cannot be met (`gap`) and what NCCL is
known to have chosen at some sizes (`[expect]`), which the report checks.

Schema (`collective`, `[system]`'s `system`, and one of `rows` and `measured` are required):

    title = "Lambda: 2 nodes x 8 B200, InfiniBand"
    source = "github.com/dstackai/dstack mkdocs/docs/examples/clusters/lambda.md @ d2fdd17"
    collective = "all_reduce"
    rows = '''           # the measured table: nccl-tests output, or a `# collective=` CSV block
    # collective=all_reduce nranks=16 dtype=float redop=sum
    size_bytes,time_us,algbw_GBps,busbw_GBps
    1048576,36.5,28.73,53.86
    '''
    measured = "runs/lambda.log"  # instead of rows: a file holding the table
    nranks = 16          # which table of the rows or file (with the collective); `table = 2`: the 2nd
    dtype = "float"      # default: the table's
    in_place = false     # compare the in-place columns
    ngpus = 1            # nccl-tests -g: GPUs one thread drives (default: the output's nGpus, else 1)
    gap = ""             # why the case cannot be met, where it cannot
    [system]             # JobSpec fields: system nodes nccl_version gpu gpus_per_node fabric nics_per_node
    system = "dgx-b200"  #   nic_gbps oversubscription hosts_per_leaf rail_optimized switch_lat_us sharp
    nodes = 2
    nccl_version = "2.26.2"
    [env]
    NCCL_IB_HCA = "^mlx5_0"
    [expect]             # size -> ALGO or ALGO/PROTO that the case shows NCCL chose
    "1G" = "NVLS"
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..calls import collective_name, dtype_name
from ..engines import canonical_engine, engine_named
from ..errors import NickSimError, UsageError
from ..files import read_input
from ..job import SPEC_FIELDS, JobSpec, load_job
from ..params import read_params
from .perf import measured_table_of, parse_size, perf_rows

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["Case", "Point", "CaseResult", "BANDS", "SCORED_MIN_NBYTES", "load_case", "find_cases", "default_dir",
           "run_case", "VALIDATED_ENGINES", "band_of", "summary", "format_report", "report_head", "case_line",
           "report_tail",
           "report_json", "plot_case", "read_calibration"]

MiB = 1 << 20
# The engines that price another system's runs (the real backend measures this host).
VALIDATED_ENGINES = ("nccl", "des")
# The bands the report splits errors by; the targets are stated over sizes of at least 1 MiB.
BANDS = (("<64K", 0, 64 << 10), ("64K-16M", 64 << 10, 16 * MiB), ("16M-256M", 16 * MiB, 256 * MiB),
         (">=256M", 256 * MiB, math.inf))
SCORED_MIN_NBYTES = 1 * MiB

_CASE_KEYS = {"title", "source", "measured", "rows", "collective", "nranks", "table", "dtype", "in_place", "gap",
              "system", "env", "expect", "name", "ngpus"}


@dataclass(frozen=True)
class Case:
    """One real run to compare against: the system and call it states and where its rows are."""

    name: str
    path: str
    title: str
    source: str
    spec: JobSpec
    env: tuple[tuple[str, str], ...]
    collective: str
    measured: str | None
    nranks: int | None = None
    table: int = 1
    dtype: str | None = None
    in_place: bool = False
    gap: str = ""
    expect: tuple[tuple[int, str], ...] = ()
    rows: str | None = None
    ngpus: int | None = None

    @property
    def origin(self) -> str:
        """Where the measured table is read from, for error messages: the file, or the case's rows."""
        return self.measured if self.measured is not None else f"{self.path}: rows"

    def measured_text(self) -> str:
        """The measured table's text: the case's rows, or the file's content."""
        if self.rows is not None:
            return self.rows
        return read_input(self.measured, "a readable nccl-tests output file").decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Point:
    """One size: measured and predicted bus bandwidth (GB/s) and what the engine's plan chose."""

    nbytes: int
    measured_busbw_gbps: float
    predicted_busbw_gbps: float
    algorithm: str
    protocol: str
    n_channels: int
    expected: str | None = None

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_busbw_gbps / self.measured_busbw_gbps - 1.0)

    @property
    def expected_ok(self) -> bool | None:
        if self.expected is None:
            return None
        algo, _, proto = self.expected.partition("/")
        return algo == self.algorithm and (not proto or proto == self.protocol)


@dataclass(frozen=True)
class CaseResult:
    """A case run by one engine: its points in size order, or `error` saying why it did not run."""

    case: Case
    engine: str
    points: tuple[Point, ...] = ()
    error: str | None = None
    nranks: int | None = None

    def scored(self, band: str | None = None) -> list[float]:
        """Absolute errors (%) of the sizes the targets count (>= 1 MiB), or of one band."""
        if band is not None:
            return [abs(p.error_pct) for p in self.points if band_of(p.nbytes) == band]
        return [abs(p.error_pct) for p in self.points if p.nbytes >= SCORED_MIN_NBYTES]

    def bias(self) -> float | None:
        """The median signed error (%) over the scored sizes: > 0 predicts faster than measured."""
        signed = [p.error_pct for p in self.points if p.nbytes >= SCORED_MIN_NBYTES]
        return statistics.median(signed) if signed else None

    def scored_large(self) -> list[float]:
        return [abs(p.error_pct) for p in self.points if p.nbytes >= 256 * MiB]


def band_of(nbytes: int) -> str:
    return next(name for name, low, high in BANDS if low <= nbytes < high)


def default_dir() -> Path:
    """The project's own cases: `validation/` beside the package."""
    return Path(__file__).resolve().parents[2] / "validation"


# --- reading cases ----------------------------------------------------------------------------

def _typed(value, kind: type, where: str):
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UsageError(f"{value!r} is not a {kind.__name__}", where, f"a {kind.__name__}")
    return value


def _read_toml(path: Path, what: str) -> dict:
    """The TOML document in `path`, or a UsageError saying why not (unreadable, not UTF-8, not
    TOML) and that `what` was wanted."""
    try:
        return tomllib.loads(read_input(path, f"{what}, readable").decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError("not UTF-8 text", str(path), f"{what} (UTF-8)") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"not TOML: {exc}", str(path), what) from None


def load_case(path: str | Path) -> Case:
    """The case a TOML file states (see the module docstring for its keys)."""
    path = Path(path)
    doc = _read_toml(path, "a TOML case file")
    where = str(path)
    unknown = sorted(set(doc) - _CASE_KEYS)
    if unknown:
        raise UsageError(f"unknown key '{unknown[0]}'", where, ", ".join(sorted(_CASE_KEYS)))
    for key in ("collective", "system"):
        if key not in doc:
            raise UsageError(f"no '{key}'", where, "a case with collective, [system], and rows or measured")
    if ("rows" in doc) == ("measured" in doc):
        raise UsageError("both 'rows' and 'measured'" if "rows" in doc else "no 'rows' or 'measured'", where,
                         "a case with the measured table inline (rows) or in a file (measured), not both")
    system = doc["system"]
    if not isinstance(system, dict) or "system" not in system:
        raise UsageError("[system] names no system", where, "a [system] table with system = NAME or FILE")
    spec_args = {}
    for key, value in system.items():
        if key not in SPEC_FIELDS:
            raise UsageError(f"unknown key '{key}' in [system]", where, ", ".join(SPEC_FIELDS))
        spec_args[key] = _typed(value, SPEC_FIELDS[key], f"{where}: [system] {key}")
    if "/" in spec_args["system"] or spec_args["system"].endswith(".xml"):
        spec_args["system"] = str((path.parent / spec_args["system"]).resolve())
    env = doc.get("env", {})
    if not isinstance(env, dict):
        raise UsageError("[env] is not a table", where, "NCCL_NAME = \"value\" pairs")
    try:
        collective = collective_name(_typed(doc["collective"], str, f"{where}: collective"))
    except NickSimError as exc:
        raise UsageError(exc.what, f"{where}: collective", exc.valid) from None
    if not isinstance(doc.get("expect", {}), dict):
        raise UsageError("[expect] is not a table", where, "SIZE = \"ALGO\" or \"ALGO/PROTO\" pairs")
    expect = []
    for size, choice in doc.get("expect", {}).items():
        expect.append((parse_size(size, f"{where}: [expect]"), _typed(choice, str, f"{where}: [expect] {size}")))
    measured = _typed(doc["measured"], str, f"{where}: measured") if "measured" in doc else None
    return Case(
        name=_typed(doc.get("name", path.stem), str, f"{where}: name"), path=where,
        title=_typed(doc.get("title", ""), str, f"{where}: title"),
        source=_typed(doc.get("source", ""), str, f"{where}: source"),
        spec=JobSpec(**spec_args, where=where), env=tuple((str(k), str(v)) for k, v in env.items()),
        collective=collective, measured=str((path.parent / measured).resolve()) if measured is not None else None,
        rows=_typed(doc["rows"], str, f"{where}: rows") if "rows" in doc else None,
        nranks=_typed(doc["nranks"], int, f"{where}: nranks") if "nranks" in doc else None,
        table=_typed(doc.get("table", 1), int, f"{where}: table"),
        dtype=_case_dtype(doc["dtype"], f"{where}: dtype") if "dtype" in doc else None,
        in_place=_typed(doc.get("in_place", False), bool, f"{where}: in_place"),
        gap=_typed(doc.get("gap", ""), str, f"{where}: gap"), expect=tuple(sorted(expect)),
        ngpus=_ngpus(doc["ngpus"], where) if "ngpus" in doc else None)


def _ngpus(value, where: str) -> int:
    """A case's nccl-tests -g: a whole number of GPUs, at least 1."""
    ngpus = _typed(value, int, f"{where}: ngpus")
    if ngpus < 1:
        raise UsageError(f"ngpus = {ngpus}", where, "nccl-tests' -g: 1 or more GPUs per thread")
    return ngpus


def _case_dtype(value, where: str) -> str:
    """A case's data type, as nccl-tests' -d names it."""
    try:
        return dtype_name(_typed(value, str, where))
    except NickSimError as exc:
        raise UsageError(exc.what, where, exc.valid) from None


def find_cases(directory: str | Path) -> list[Case]:
    """Every case in a folder (its *.toml files, by name) or the one case a file is."""
    directory = Path(directory)
    if directory.is_file():
        return [load_case(directory)]
    if not directory.is_dir():
        what = "is not a regular file or a folder" if directory.exists() else "no such file or folder"
        raise UsageError(what, str(directory), "a folder of case files, or one case file")
    files = sorted(directory.glob("*.toml"))
    if not files:
        raise UsageError("no case files (*.toml)", str(directory), "a folder of case files")
    return [load_case(f) for f in files]


def read_calibration(path: str | Path, engine: str = "des") -> dict[str, float]:
    """`engine`'s values in a calibration file (nicksim calibrate -o): the DES's `[set]` table of
    `--set` names, NCCL's time model's `[nccl]` table (tuning/calibrated.py); empty where the file
    has none for the engine."""
    from .fit import engine_values
    doc = _read_toml(Path(path), "a calibration file: TOML with a [set] or [nccl] table")
    return engine_values(doc, str(path))[canonical_engine(engine)]


# --- running ----------------------------------------------------------------------------------

def _measured_busbw(row, in_place: bool) -> float | None:
    m = row.in_place if in_place else row.out_of_place
    return m.busbw_gbps if m is not None else None


def run_case(case: Case, engine: str = "nccl", calibration: dict[str, float] | None = None) -> CaseResult:
    """The case's measured sizes answered by `engine` (with `calibration`'s values for it)."""
    engine = canonical_engine(engine)
    if engine not in VALIDATED_ENGINES:
        raise UsageError(f"engine '{engine}'", "--engine", ", ".join(VALIDATED_ENGINES))
    try:
        table = measured_table_of(case.measured_text(), case.origin, case.collective, case.nranks, case.table)
        job = load_job(case.spec, read_params({}, [f"{k}={v}" for k, v in case.env]))
        ngpus = case.ngpus or table.ngpus or 1  # the case's word, else what the output printed (nGpus)
        if (job.nranks // job.spec.nodes) % ngpus:
            raise UsageError(f"ngpus = {ngpus}: a node's {job.nranks // job.spec.nodes} GPUs do not split into "
                             f"threads of {ngpus}", case.path, "an ngpus dividing the GPUs of a node")
        if table.nranks is not None and table.nranks != job.nranks:
            raise UsageError(f"the system has {job.nranks} ranks, the measurements {table.nranks}", case.path,
                             "a [system] with as many GPUs as the measured run")
        measured = [(row.nbytes, _measured_busbw(row, case.in_place)) for row in table.rows]
        measured = [(n, b) for n, b in measured if b]  # rows too small to show a bandwidth say nothing
        if not measured:
            placement = "in-place" if case.in_place else "out-of-place"
            raise UsageError(f"nothing to compare: no measured row has an {placement} bus bandwidth above 0",
                             case.origin, "measured rows with busbw")
        dtype = case.dtype or table.dtype or "float"
        answer = engine_named(engine, overrides=calibration or {}) if engine == "des" else \
            engine_named(engine, calibration=calibration or {})
        rows = perf_rows(job, case.collective, [n for n, _ in measured], dtype, table.redop or "sum", 0, answer,
                         gpus_per_thread=ngpus)
    except NickSimError as exc:
        return CaseResult(case, engine, error=exc.line())
    expect = dict(case.expect)
    points = []
    for (nbytes, busbw), (row, result) in zip(measured, rows):
        if row is None:
            return CaseResult(case, engine, error=f"the {engine} run hangs at {nbytes} bytes")
        points.append(Point(nbytes, busbw, row.out_of_place.busbw_gbps, result.algorithm, result.protocol,
                            result.n_channels, expect.get(nbytes)))
    return CaseResult(case, engine, tuple(points), nranks=job.nranks)


# --- summaries --------------------------------------------------------------------------------

def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


GEOMEAN_FLOOR_PCT = 0.01  # an exact match would zero a geometric mean; count it as 0.01%


def _geomean(values: list[float]) -> float | None:
    return statistics.geometric_mean([max(v, GEOMEAN_FLOOR_PCT) for v in values]) if values else None


def summary(results: list[CaseResult]) -> dict:
    """Overall figures: the median absolute error of every scored size of every case that ran,
    at >= 256 MiB alone, and the cases that meet the targets (<= 10% and <= 5% at >= 256 MiB);
    also the geometric and arithmetic means of |error|, the figures other simulators publish
    (ASTRA-sim a geomean over its sizes, SimAI an average alignment)."""
    ran = [r for r in results if r.error is None and r.points]
    scored = [e for r in ran for e in r.scored()]
    every = [abs(p.error_pct) for r in ran for p in r.points]
    large = [e for r in ran for e in r.scored_large()]
    meeting = [r.case.name for r in ran if _meets(r)]
    expected = [p.expected_ok for r in ran for p in r.points if p.expected is not None]
    # Each case counted once, however many sizes it has: a case of 30 sizes does not outvote two of 10.
    per_case = [m for m in (_median(r.scored()) for r in ran) if m is not None]
    per_case_large = [m for m in (_median(r.scored_large()) for r in ran) if m is not None]
    return {"cases": len(results), "ran": len(ran), "points": len(scored),
            "median_pct": _median(scored), "median_ge256m_pct": _median(large),
            "case_median_pct": _median(per_case), "case_median_ge256m_pct": _median(per_case_large),
            "geomean_pct": _geomean(scored), "geomean_every_size_pct": _geomean(every),
            "mean_pct": statistics.fmean(scored) if scored else None,
            "worst_pct": max(scored) if scored else None, "meeting_targets": meeting,
            "expected_choices": len(expected), "expected_matched": sum(1 for ok in expected if ok)}


def _meets(result: CaseResult) -> bool:
    med, large = _median(result.scored()), _median(result.scored_large())
    return med is not None and med <= 10.0 and (large is None or large <= 5.0)


def _pct(value: float | None, width: int = 7) -> str:
    return f"{value:{width}.1f}" if value is not None else f"{'-':>{width}}"


def _size(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


def _choices(result: CaseResult) -> str:
    """The plans the engine chose, as runs of sizes: `Ring/LL <=512K, NVLS/Simple >=1M`."""
    runs: list[list] = []
    for p in result.points:
        plan = f"{p.algorithm}/{p.protocol}"
        if runs and runs[-1][0] == plan:
            runs[-1][2] = p.nbytes
        else:
            runs.append([plan, p.nbytes, p.nbytes])
    return ", ".join(f"{plan} {_size(lo)}" + (f"-{_size(hi)}" if hi != lo else "") for plan, lo, hi in runs)


def report_head(engine: str) -> list[str]:
    """The report's first lines: what the figures are, and the per-case columns."""
    band_names = [name for name, _, _ in BANDS]
    return [f"# nicksim validate --engine {engine}: busbw error = predicted / measured - 1, "
            f"median and worst of |error| and median error (bias) over sizes >= 1 MiB, medians by size band",
            f"# {'case':<22} {'collective':<14} {'ranks':>5} {'median%':>7} {'bias%':>7} {'worst%':>7} {'>=256M%':>7} "
            + " ".join(f"{b:>8}" for b in band_names) + "  target"]


def case_line(r: CaseResult) -> str:
    """One case's summary line, as the report lists it (printable as soon as the case is done)."""
    if r.error is not None:
        return f"  {r.case.name:<22} {r.case.collective:<14} {'':>5} not run: {r.error}"
    med, worst = _median(r.scored()), max(r.scored(), default=None)
    bands = " ".join(_pct(_median(r.scored(b)), 8) for b, _, _ in BANDS)
    return (f"  {r.case.name:<22} {r.case.collective:<14} {r.nranks:>5} {_pct(med)} {_pct(r.bias())} {_pct(worst)} "
            f"{_pct(_median(r.scored_large()))} {bands}  {'met' if _meets(r) else 'MISSED'}")


def format_report(results: list[CaseResult], engine: str, unexpressed: list[str] = ()) -> list[str]:
    """The text report: one summary line per case, then each case's sizes, then the overall line."""
    return report_head(engine) + [case_line(r) for r in results] + report_tail(results, unexpressed)


def report_tail(results: list[CaseResult], unexpressed: list[str] = ()) -> list[str]:
    """The report after the case lines: each case's sizes, then the overall figures."""
    lines: list[str] = []
    for r in results:
        if r.error is not None:
            continue
        lines += ["", f"## {r.case.name}: {r.case.title}", f"# source: {r.case.source}",
                  f"# system: {_spec_text(r.case)}", f"# chose: {_choices(r)}"]
        if r.case.gap:
            lines.append(f"# why not met: {r.case.gap}")
        lines.append(f"# {'size':>12} {'measured':>9} {'predicted':>9} {'error%':>7}  plan")
        for p in r.points:
            check = "" if p.expected is None else f"  (NCCL chose {p.expected}: {'ok' if p.expected_ok else 'DIFFERS'})"
            lines.append(f"  {p.nbytes:>12} {p.measured_busbw_gbps:>9.2f} {p.predicted_busbw_gbps:>9.2f} "
                         f"{p.error_pct:>7.1f}  {p.algorithm}/{p.protocol} {p.n_channels}ch{check}")
    s = summary(results)
    lines += ["", f"# overall: {s['ran']} of {s['cases']} cases ran, {s['points']} sizes >= 1 MiB: median |error| "
              f"{_pct(s['median_pct'], 0)}%, at >= 256 MiB {_pct(s['median_ge256m_pct'], 0)}%, worst "
              f"{_pct(s['worst_pct'], 0)}%; targets (median <= 10%, <= 5% at >= 256 MiB) met by "
              f"{len(s['meeting_targets'])} of {s['ran']}",
              f"# over cases: the median of each case's median |error| {_pct(s['case_median_pct'], 0)}%, at "
              f">= 256 MiB {_pct(s['case_median_ge256m_pct'], 0)}%",
              f"# means of |error|: geometric {_pct(s['geomean_pct'], 0)}% over sizes >= 1 MiB "
              f"({_pct(s['geomean_every_size_pct'], 0)}% over every size), arithmetic {_pct(s['mean_pct'], 0)}%"]
    if s["expected_choices"]:
        lines.append(f"# NCCL's known choices matched: {s['expected_matched']} of {s['expected_choices']}")
    for name in unexpressed:
        lines.append(f"# not expressed: {name} (no case file states its system)")
    return lines


def _spec_text(case: Case) -> str:
    spec = case.spec
    parts = [Path(spec.system).name if spec.system else "default", f"{spec.nodes} node(s)", f"NCCL {spec.nccl_version}"]
    for key in ("gpu", "gpus_per_node", "fabric", "nics_per_node", "nic_gbps", "sharp"):
        value = getattr(spec, key)
        if value:
            parts.append(f"{key}={value}")
    if case.ngpus and case.ngpus > 1:
        parts.append(f"-g {case.ngpus}")
    parts += [f"{k}={v}" for k, v in case.env]
    return ", ".join(parts)


def report_json(results: list[CaseResult], engine: str) -> dict:
    cases = []
    for r in results:
        entry = {"name": r.case.name, "title": r.case.title, "source": r.case.source, "file": r.case.path,
                 "collective": r.case.collective, "system": _spec_text(r.case), "gap": r.case.gap or None,
                 "error": r.error}
        if r.error is None:
            entry.update(nranks=r.nranks, median_pct=_median(r.scored()), bias_pct=r.bias(),
                         worst_pct=max(r.scored(), default=None),
                         median_ge256m_pct=_median(r.scored_large()), meets_targets=_meets(r),
                         geomean_pct=_geomean(r.scored()),
                         geomean_every_size_pct=_geomean([abs(p.error_pct) for p in r.points]),
                         bands={b: _median(r.scored(b)) for b, _, _ in BANDS},
                         points=[{"nbytes": p.nbytes, "measured_busbw_gbps": p.measured_busbw_gbps,
                                  "predicted_busbw_gbps": round(p.predicted_busbw_gbps, 4),
                                  "error_pct": round(p.error_pct, 3), "algorithm": p.algorithm,
                                  "protocol": p.protocol, "nchannels": p.n_channels, "expected": p.expected}
                                 for p in r.points])
        cases.append(entry)
    return {"engine": engine, "summary": summary(results), "cases": cases}


def plot_case(results: list[CaseResult], path: str | Path) -> None:
    """Measured and predicted busbw against size (one line per engine), and the error below."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [r for r in results if r.error is None and r.points]
    if not ran:
        return
    case = ran[0].case
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    sizes = [p.nbytes for p in ran[0].points]
    top.plot(sizes, [p.measured_busbw_gbps for p in ran[0].points], "ko-", label="measured", markersize=4)
    for r, style in zip(ran, ("s--", "^:", "d-.")):
        top.plot([p.nbytes for p in r.points], [p.predicted_busbw_gbps for p in r.points], style,
                 label=f"{r.engine} (median |err| {_pct(_median(r.scored()), 0)}%)", markersize=4)
        bottom.plot([p.nbytes for p in r.points], [p.error_pct for p in r.points], style, markersize=4, label=r.engine)
    top.set_xscale("log", base=2)
    top.set_ylabel("busbw (GB/s)")
    top.set_title(f"{case.name}: {case.title}", fontsize=9)
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    bottom.axhline(0, color="k", linewidth=0.8)
    for edge in (-10, 10):
        bottom.axhline(edge, color="grey", linewidth=0.5, linestyle="--")
    bottom.set_ylabel("error %")
    bottom.set_xlabel("size (bytes)")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
