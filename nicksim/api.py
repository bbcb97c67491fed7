"""nicksim from Python: the one API the command line, the dashboard and notebooks call.

A session starts from a job — a system and its cluster options, the NCCL release, the knobs:

    >>> from nicksim import api
    >>> job = api.load("dgx-h100", nodes=2, env={"NCCL_ALGO": "Ring,Tree"})
    >>> run = api.perf(job, "all_reduce", sizes=api.sizes("1M", "1G", 4))
    >>> run.to_pandas()[["nbytes", "algorithm", "protocol", "busbw_gbps"]]

Everything a command prints comes from a function here: `topology_lines`, `search_lines`,
`perf` (any engine: "nccl", NCCL's own time model; "des", the discrete-event simulation; "real",
the real backend), `plan` and `programs` of one call, `sweep`, `replay` and `diagnose` for hangs,
`validate` and `calibrate` against measurements, `knobs`. Results are frozen dataclasses;
the tabular ones have `records()` (plain dicts) and `to_pandas()`. Bad input raises NickSimError
(its `line()` is the one line the command line prints). Settings are read like NCCL reads them:
`env` (a dict or KEY=VALUE strings) over `environ` (a mapping such as os.environ; none by default,
so a notebook's shell does not leak into its answers).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from .calls import COLLECTIVES, Call, call_for_size, collective_name, dtype_name, redop_name
from .constants import DEFAULT_VERSION, MODELLED_VERSIONS, parse_version
from .engines import ENGINE_ALIASES, ENGINES, CallResult, Engine, canonical_engine, engine_named
from .errors import NickSimError, RanksFailed, UsageError
from .formats.tables import Records
from .formats.joblog import JobLogger, job_logger, search_lines as _search_lines
from .formats.report import read_results, results_json, run_header, step_text, table_footer, table_header, \
    format_row
from .formats.trace import chrome_trace, format_link_report, real_trace
from .graph.cluster import format_cluster
from .graph.paths import format_nccl_paths, format_paths
from .graph.search import graphs_xml
from .job import Job, JobSpec, load_job
from .params import Params, read_params
from .plan import ChannelProgram, Plan, call_plan, check_programs, job_programs
from .studies.perf import (Perf, PerfOptions, compare, format_comparison, measured_table, parse_size, run_perf,
                           sweep_sizes)
from .topology.catalog import CATALOG, DEFAULT_SYSTEM, HOST_SYSTEM
from .topology.hardware import FABRICS, GPU_MODELS
from .topology.system import format_system
from .topology.xml import write_topo_xml

__all__ = [
    # names the front ends offer
    "SYSTEMS", "DEFAULT_SYSTEM", "GPU_MODELS", "FABRICS", "NCCL_VERSIONS", "DEFAULT_NCCL_VERSION", "COLLECTIVES",
    "ENGINES", "ENGINE_ALIASES", "des_parameters", "fit_parameters",
    # errors
    "NickSimError", "UsageError", "RanksFailed",
    # names and values as nccl-tests and NCCL spell them
    "collective_name", "dtype_name", "redop_name", "canonical_engine", "release_line",
    # jobs
    "Job", "JobSpec", "Params", "settings", "load", "load_job", "call",
    # what NCCL decides
    "topology_lines", "search_lines", "plan", "programs", "check", "write_topology", "write_graphs",
    # engines and runs
    "Engine", "CallResult", "engine", "Perf", "PerfOptions", "perf", "run_perf", "sizes", "parse_size",
    "job_logger", "JobLogger", "link_report", "trace_doc", "compare_lines", "nccl_tests_lines",
    "run_header", "step_text", "table_header", "table_footer", "format_row", "results_json", "write_json",
    "measured_table", "real_trace", "read_calibration",
    # studies
    "Table", "sweep", "read_grid", "rows_csv", "fit_lines", "calibration_text", "validate", "Validation", "calibrate", "knobs", "knob_lines", "alphabeta_lines",
    # hangs
    "scenarios", "replay", "diagnose", "diagnosis_lines",
    # the real backend on this host
    "run_ranks", "HOST_SYSTEM",
]

SYSTEMS: tuple[str, ...] = tuple(CATALOG)
NCCL_VERSIONS: tuple[str, ...] = tuple(v.line for v in MODELLED_VERSIONS)
DEFAULT_NCCL_VERSION: str = DEFAULT_VERSION.line


# --- tables ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Table(Records):
    """Rows that are already plain records (a sweep, the knob report, validation points)."""

    rows: tuple[dict, ...]

    def records(self) -> list[dict]:
        return [dict(row) for row in self.rows]


# --- settings and jobs -------------------------------------------------------------------------

def settings(env: Mapping[str, object] | Sequence[str] = (), environ: Mapping[str, str] | None = None) -> Params:
    """The NCCL_*, NICKSIM_* and TORCH_NCCL_* settings: `env` (a dict, or KEY=VALUE strings) over
    `environ` (e.g. os.environ; none by default), read and checked as NCCL reads them."""
    items = [f"{k}={v}" for k, v in env.items()] if isinstance(env, Mapping) else list(env)
    return read_params(environ or {}, items)


def load(system: str | None = None, *, nodes: int = 1, gpus_per_node: int | None = None, fabric: str | None = None,
         nics_per_node: int | None = None, nic_gbps: float | None = None, oversubscription: float = 1.0,
         hosts_per_leaf: int = 32, rail_optimized: bool = True, switch_lat_us: float | None = None,
         sharp: bool = False, gpu: str | None = None, nccl_version: str | None = None, rank: int = 0,
         env: Mapping[str, object] | Sequence[str] = (), environ: Mapping[str, str] | None = None,
         params: Params | None = None) -> Job:
    """A job: `system` (a catalog name, SYSTEMS, or an NCCL topology file; None: NCCL_TOPO_FILE,
    else DEFAULT_SYSTEM) as `nodes` identical nodes on the cluster the options describe, for NCCL
    release `nccl_version` (default the newest modelled), with the settings `env` over `environ`
    (or `params` already read), as rank `rank` sees it. The search and the communicator follow
    lazily from the job."""
    spec = JobSpec(system=system, nodes=nodes, nccl_version=nccl_version or DEFAULT_NCCL_VERSION, gpu=gpu,
                   gpus_per_node=gpus_per_node, fabric=fabric, nics_per_node=nics_per_node, nic_gbps=nic_gbps,
                   oversubscription=oversubscription, hosts_per_leaf=hosts_per_leaf,
                   rail_optimized=rail_optimized, switch_lat_us=switch_lat_us, sharp=sharp, rank=rank)
    return load_job(spec, params if params is not None else settings(env, environ))


def release_line(text: str) -> str:
    """The NCCL release line a version names ("2.30.7" -> "2.30"), or a UsageError."""
    return parse_version(text).line


def call(job: Job, collective: str, nbytes: int | str, dtype: str = "float", op: str = "sum", root: int = 0) -> Call:
    """The call nccl-tests makes for a row of `nbytes` (its size column; "64M" works) on `job`."""
    size = parse_size(nbytes, "nbytes") if isinstance(nbytes, str) else nbytes
    return call_for_size(collective_name(collective), size, dtype_name(dtype), redop_name(op), root, job.nranks)


# --- what NCCL decides -------------------------------------------------------------------------

def topology_lines(job: Job, paths: bool = False, links: bool = False) -> list[str]:
    """The system as NCCL's GRAPH subsystem prints it for the job's rank (after trimming it to the
    rank's domain); the cluster for several nodes; with `paths` NCCL's path lines, the path matrix
    and transports; with `links` every directed link of the job's fabric as the DES names them."""
    out = format_system(job.paths.system, job.paths.max_bw, job.paths.total_bw)
    if job.spec.nodes > 1:
        out += format_cluster(job.cluster)
    if paths:
        out += format_nccl_paths(job.paths) + format_paths(job.paths)
    if links:
        from .model.fabric import build_fabric, format_fabric  # the DES's own names for the links
        out += format_fabric(build_fabric(job.cluster))
    return out


def search_lines(job: Job, print_tuning: bool = False) -> tuple[list[str], list[str]]:
    """(notes, lines) of NCCL's graph search and the rank's init view (formats.joblog.search_lines)."""
    return _search_lines(job, print_tuning)


def write_topology(job: Job, path: str | Path) -> None:
    """The job's node as NCCL_TOPO_DUMP_FILE holds it (completed, in NCCL's dump layout)."""
    write_topo_xml(job.filled.doc, path)


def write_graphs(job: Job, path: str | Path) -> None:
    """The job's searched graphs as NCCL_GRAPH_DUMP_FILE holds them."""
    try:
        Path(path).write_text(graphs_xml(job.paths, job.graphs), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write: {exc.strerror}", str(path), "a writable file path") from None


def plan(job: Job, the_call: Call) -> Plan:
    """NCCL's plan of one call: algorithm, protocol, channels, threads, chunking per channel."""
    return call_plan(job, the_call)


def programs(job: Job, the_plan: Plan, ranks: Iterable[int] | None = None) -> dict[int, tuple[ChannelProgram, ...]]:
    """What each rank (or each of `ranks`) runs for `the_plan`, channel by channel: the programs
    the DES and the real backend run."""
    return job_programs(job, the_plan, ranks)


def check(job: Job, the_plan: Plan) -> None:
    """Run every rank's programs symbolically; raises PlanCheckError where an output byte would
    be lost, doubled or wrongly reduced."""
    check_programs(the_plan.call, job_programs(job, the_plan), len(job.paths.node_system.gpus()))


# --- engines and runs --------------------------------------------------------------------------

def engine(name: str = "nccl", **options) -> Engine:
    """An engine by name (ENGINES; "model" is nccl's former name) with its options."""
    return engine_named(name, **options)


def des_parameters() -> dict[str, tuple[str, ...]]:
    """What the DES's `overrides` (perf --set) take: its parameters, the link kinds whose
    bandwidth can be set, and every name `set` accepts."""
    from .model.hwparams import LINK_KINDS, PARAM_NAMES, SET_NAMES
    return {"parameters": tuple(PARAM_NAMES), "link_kinds": tuple(LINK_KINDS), "names": tuple(SET_NAMES)}


def sizes(min_nbytes: int | str = 8, max_nbytes: int | str = 8 << 30, factor: int | None = 2,
          step_nbytes: int | str | None = None) -> list[int]:
    """nccl-tests' sizes from -b to -e, multiplying by -f or adding -i ("1M", "8G" work)."""
    def size(v, flag):
        return parse_size(v, flag) if isinstance(v, str) else v
    return sweep_sizes(size(min_nbytes, "-b"), size(max_nbytes, "-e"), factor,
                       None if step_nbytes is None else size(step_nbytes, "-i"))


def perf(job: Job, collective: str = "all_reduce", sizes: Sequence[int] = (1 << 20, 1 << 30),
         engine: str | Engine = "nccl", dtype: str = "float", op: str = "sum", root: int = 0,
         emit: Callable[[str], None] | None = None, **options) -> Perf:
    """An nccl-tests run of `collective` over `sizes` answered by `engine` (a name with its
    `options`, or an Engine); `emit` receives nccl-tests' text line by line as sizes complete."""
    the_engine = engine_named(engine, **options) if isinstance(engine, str) else engine
    run = PerfOptions(collective_name(collective), tuple(sizes), dtype_name(dtype), redop_name(op), root,
                      min_nbytes=min(sizes, default=0), max_nbytes=max(sizes, default=0))
    return run_perf(job, the_engine, run, emit or (lambda line: None))


def link_report(result: CallResult) -> list[str]:
    """The busiest links of a DES run (bytes, busy share, rate, load); nothing for other engines."""
    return format_link_report(result.detail) if result.estimate == "des" else []


def trace_doc(result: CallResult) -> dict | None:
    """A run's Chrome trace (opens in Perfetto): the DES's spans and link rates, or the real
    backend's passes over connection slots; None where the engine recorded none."""
    if result.estimate == "des" and result.detail is not None:
        return chrome_trace(result.detail)
    if result.estimate == "real" and result.detail:
        call_ = result.call
        other = {"bytes": call_.nbytes, "collective": call_.collective, "nranks": call_.nranks, **result.plan_dict(),
                 "time_us": result.time_us}
        return real_trace(result.detail, other)
    return None


def compare_lines(run: Perf, measured_file: str) -> list[str]:
    """The run beside a measured one (nccl-tests text or JSON, or a case's CSV): per size and per
    size band, how far apart the bus bandwidths are."""
    table = measured_table(measured_file, run.collective, run.nranks)
    return format_comparison(compare(list(run.rows), table), run.engine)


def nccl_tests_lines(text: str, where: str = "text") -> list:
    """Every nccl-tests table in `text` (any layout since v2.13, its JSON, or CSV blocks)."""
    return read_results(text, where)


def write_json(path: str | Path, doc: dict) -> None:
    """`doc` written as indented JSON; an unwritable path is a UsageError."""
    try:
        Path(path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write: {exc.strerror}", str(path), "a writable file path") from None


def run_ranks(collective: str, sizes: Sequence[int], dtype: str, op: str, root: int, iters: int, warmup_iters: int,
              check: int, nccl_version: str, trace: bool, params: Params, nranks: int | None, argv: Sequence[str],
              header: str, emit: Callable[[str], None], on_trace=None):
    """`nicksim run`: this host's ranks run a collective for real, each host planned as a node of
    GPUs that join by shared memory (realhw.runner.run_command; its RunDone)."""
    from .realhw.runner import RunOptions, run_command
    options = RunOptions(collective_name(collective), tuple(sizes), dtype_name(dtype), redop_name(op), root, iters,
                         warmup_iters, check, nccl_version, trace)
    return run_command(options, params, nranks, argv, header, emit, on_trace)


# --- studies -----------------------------------------------------------------------------------

def read_calibration(path: str | Path) -> dict[str, float]:
    """A calibration file's DES parameters (its [set] table)."""
    from .studies.validate import read_calibration as read
    return read(path)


def rows_csv(rows: Sequence[dict]) -> str:
    """A sweep's rows as CSV."""
    from .studies.sweep import rows_csv as to_csv
    return to_csv(list(rows))


def fit_lines(result) -> list[str]:
    """A calibration fit for people: the value, its error, and each source left out."""
    from .studies.calibrate import format_fit
    return format_fit(result)


def calibration_text(result) -> str:
    """A calibration fit as the file `--calibration` reads ([set], the figures as comments)."""
    from .studies.calibrate import calibration_text as text
    return text(result)


def read_grid(path: str | Path) -> list[dict]:
    """The points of a sweep grid file (GRID.toml)."""
    from .studies.sweep import read_grid as parse_grid
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read: {exc.strerror}", str(path), "a readable GRID.toml") from None
    return parse_grid(text, str(path))


def sweep(points: Sequence[dict], workers: int = 1, dask: str | None = None,
          progress: Callable[[int, int], None] | None = None) -> Table:
    """A grid of what-ifs (read_grid's points) run on `workers` local processes or a Dask
    scheduler: a row per point and size."""
    from .studies.sweep import run_sweep
    return Table(tuple(run_sweep(list(points), workers, dask, progress)))


@dataclass(frozen=True)
class Validation(Records):
    """Every case run by every engine asked for: `results[engine]` is its CaseResults."""

    results: Mapping[str, tuple]

    def records(self) -> list[dict]:
        return [{"engine": engine, "case": r.case.name, "nbytes": p.nbytes, "measured_busbw_gbps": p.measured_busbw_gbps,
                 "predicted_busbw_gbps": p.predicted_busbw_gbps, "error_pct": p.error_pct, "algorithm": p.algorithm,
                 "protocol": p.protocol}
                for engine, results in self.results.items() for r in results for p in r.points]

    def report_lines(self) -> list[str]:
        from .studies.validate import format_report
        out: list[str] = []
        for i, (engine, results) in enumerate(self.results.items()):
            out += ([""] if i else []) + format_report(list(results), engine)
        return out

    def json_doc(self) -> dict:
        from .studies.validate import report_json
        return {"engines": [report_json(list(results), engine) for engine, results in self.results.items()]}

    def plot(self, folder: str | Path) -> list[Path]:
        """One PNG per case: measured and predicted busbw, and the error."""
        from .studies.validate import plot_case
        folder = Path(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot make the folder: {exc.strerror}", str(folder), "a writable folder") from None
        by_case = list(zip(*self.results.values()))
        written = []
        for per_engine in by_case:
            path = folder / f"{per_engine[0].case.name}.png"
            plot_case(list(per_engine), path)
            written.append(path)
        return written


def validate(cases: str | Path | None = None, engines: Sequence[str] = ("nccl",),
             calibration: str | Path | Mapping[str, float] | None = None) -> Validation:
    """The validation cases (a folder of case files, one case file; default the project's
    validation/) answered by each engine ("nccl", "des"), the DES with `calibration`'s parameters."""
    from .studies.validate import default_dir, find_cases, read_calibration, run_case
    found = find_cases(cases or default_dir())
    names = list(dict.fromkeys(canonical_engine(e) for e in engines))
    values = read_calibration(calibration) if isinstance(calibration, (str, Path)) else calibration
    if values is not None and "des" not in names:
        raise UsageError("a calibration sets DES parameters", "--calibration", "with --engine des")
    return Validation({e: tuple(run_case(case, e, values if e == "des" else None) for case in found) for e in names})


def fit_parameters() -> dict:
    """What `calibrate` can fit, and the candidate values it tries by default."""
    from .studies.calibrate import DEFAULT_VALUES, FIT_NAMES
    return {"names": tuple(FIT_NAMES), "values": tuple(DEFAULT_VALUES)}


def calibrate(cases: str | Path | None = None, name: str = "step_lat.scale", values: Sequence[float] | None = None,
              jobs: int | None = None):
    """One DES parameter fitted to the validation cases (studies.calibrate.Fit: the value, its
    error, and each source left out in turn)."""
    from .studies.calibrate import DEFAULT_VALUES, default_jobs, fit
    from .studies.validate import default_dir, find_cases
    return fit(find_cases(cases or default_dir()), name, tuple(values or DEFAULT_VALUES), jobs or default_jobs())


def knobs(names: Sequence[str] = (), nccl_version: str | None = None, system: str | None = None,
          params: Params | None = None, set_only: bool = False, job: Job | None = None) -> Table:
    """Every knob nicksim reads (or those named, prefixes work): value, source, the release's
    default, what `system`'s job (or `job`) uses, the releases that read it, its effect per engine."""
    from .studies.knobs import knob_rows
    params = params if params is not None else settings()
    version = nccl_version or DEFAULT_NCCL_VERSION
    if job is None and system:
        job = load(system, nccl_version=version, params=params)
    return Table(tuple(knob_rows(params, parse_version(version).minor, list(names), set_only, job)))


def knob_lines(table: Table, nccl_version: str | None = None, system: str | None = None) -> list[str]:
    from .studies.knobs import format_knobs
    return format_knobs(list(table.rows), parse_version(nccl_version or DEFAULT_NCCL_VERSION).minor, system)


def alphabeta_lines(sizes_nbytes: Sequence[int], p: int | None = None, bw_gbps: float | None = None,
                    lat_us: float | None = None) -> list[str]:
    """The alpha-beta ring vs tree tables: for p ranks at bw_gbps and lat_us, or the three
    built-in scenarios when none is given."""
    from .studies.alphabeta import alphabeta_table, format_alphabeta, scenario_tables
    given = [v is not None for v in (p, bw_gbps, lat_us)]
    if any(given) and not all(given):
        raise UsageError("--p, --bw and --lat go together", "alphabeta", "all three, or none for the scenarios")
    tables = [alphabeta_table(p, bw_gbps, lat_us, sizes_nbytes)] if all(given) else \
        list(scenario_tables(sizes_nbytes).values())
    out: list[str] = []
    for i, table in enumerate(tables):
        out += ([""] if i else []) + format_alphabeta(table)
    return out


# --- hangs -------------------------------------------------------------------------------------

def scenarios() -> dict:
    """The replayable hangs by name (scenarios.Scenario: title, ranks, system, expected verdict)."""
    from .scenarios import SCENARIOS
    return dict(SCENARIOS)


def replay(name: str, out_dir: str | Path, params: Params | None = None):
    """Scenario `name` run on the DES, what its people would have had written to `out_dir`, and
    its diagnosis (scenarios.Replay). NCCL_DEBUG* and TORCH_NCCL_* settings in `params` apply."""
    from .formats.logs import debug_config
    from .scenarios import replay as run_replay, scenario_named
    from .scenarios.replay import TorchSettings
    params = params if params is not None else settings()
    scenario = scenario_named(name)
    debug = debug_config(params) if params.get("NCCL_DEBUG") else None  # else the scenario's INFO
    try:
        return run_replay(scenario, out_dir, debug, TorchSettings.from_params(params))
    except OSError as exc:
        raise UsageError(f"cannot write: {exc.strerror}", str(out_dir), "a writable folder") from None


def diagnose(files: Sequence[str | Path], job: Job | None = None):
    """What went wrong, on which rank, in which collective, from the logs and dumps people have
    (forensics.Diagnosis); with the `job` they ran, where each blocked rank waits."""
    from .forensics import diagnose as weigh, read_evidence, with_waits
    evidence = read_evidence(files)
    found = weigh(evidence)
    return with_waits(found, evidence, job) if job is not None else found


def diagnosis_lines(diagnosis) -> list[str]:
    from .forensics import format_diagnosis
    return format_diagnosis(diagnosis)
