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

import importlib
import json
import os
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from .constants import DEFAULT_VERSION, MODELLED_VERSIONS, parse_version
from .errors import NickSimError, RanksFailed, UsageError, print_line
from .formats.tables import Records
from .params import Params, read_params

if TYPE_CHECKING:  # what __getattr__ imports on first use (_LAZY), for type checkers and linters
    from .calls import COLLECTIVES, Call, collective_name, dtype_name, redop_name
    from .engines import ENGINE_ALIASES, ENGINES, CallResult, Engine, canonical_engine
    from .formats.joblog import JobLogger, job_logger
    from .formats.report import (NCCL_TESTS_LATEST, TIME_FORMAT, RunSetup, claim_json_path, flag_release, format_row,
                                 nccl_tests_json, nccl_tests_release, nccl_version_code, preamble, results_json,
                                 run_header, step_text, table_footer, table_header)
    from .formats.trace import real_trace
    from .job import Job, JobSpec, load_job
    from .plan import ChannelProgram, Plan
    from .progress import Progress
    from .studies import figures
    from .studies.perf import (ALL_REDOPS, Perf, PerfOptions, all_dtypes, measured_table, parse_size, release_at_least,
                               run_perf)
    from .studies.views import Drawing, Heads, PathMatrix, WaitEdge
    from .realhw.host import HostDescription, copy_gbps, describe_host
    from .topology.catalog import DEFAULT_SYSTEM, HOST_SYSTEM, LOCAL_SYSTEM
    from .topology.hardware import FABRICS, GPU_MODELS

# The names this module offers from the modules that define them, imported on first use (PEP 562
# __getattr__ below): a command loads what it runs and no more (`nicksim search` answered from the
# graph cache loads neither the engines nor the studies, NumPy nor networkx).
_LAZY: dict[str, str] = {
    **dict.fromkeys(("COLLECTIVES", "Call", "call_for_size", "collective_name", "dtype_name", "redop_name"), ".calls"),
    **dict.fromkeys(("ENGINE_ALIASES", "ENGINES", "CallResult", "Engine", "canonical_engine", "engine_named"),
                    ".engines"),
    "read_input": ".files",
    **dict.fromkeys(("JobLogger", "job_logger"), ".formats.joblog"),
    **dict.fromkeys(("read_results", "results_json", "run_header", "step_text", "table_footer", "table_header",
                     "format_row", "NCCL_TESTS_LATEST", "TIME_FORMAT", "RunSetup", "claim_json_path", "flag_release",
                     "nccl_version_code", "preamble", "nccl_tests_json", "nccl_tests_release"), ".formats.report"),
    **dict.fromkeys(("chrome_trace", "format_link_report", "real_trace"), ".formats.trace"),
    "format_cluster": ".graph.cluster",
    **dict.fromkeys(("format_nccl_paths", "format_paths"), ".graph.paths"),
    "graphs_xml": ".graph.graphs",
    **dict.fromkeys(("Job", "JobSpec", "load_job"), ".job"),
    **dict.fromkeys(("ChannelProgram", "Plan", "call_plan", "check_programs", "job_programs"), ".plan"),
    "Progress": ".progress",
    **dict.fromkeys(("Perf", "PerfOptions", "compare", "format_comparison", "measured_table", "parse_size", "run_perf",
                     "sweep_sizes", "ALL_REDOPS", "all_dtypes", "release_at_least"), ".studies.perf"),
    **dict.fromkeys(("CATALOG", "DEFAULT_SYSTEM", "HOST_SYSTEM", "LOCAL_SYSTEM"), ".topology.catalog"),
    **dict.fromkeys(("describe_host", "HostDescription", "copy_gbps"), ".realhw.host"),
    **dict.fromkeys(("FABRICS", "GPU_MODELS"), ".topology.hardware"),
    "format_system": ".topology.system",
    **dict.fromkeys(("TopoXml", "dump_topo_xml"), ".topology.xml"),
    **dict.fromkeys(("Drawing", "Heads", "PathMatrix", "WaitEdge"), ".studies.views"),
}

__all__ = [
    # names the front ends offer
    "SYSTEMS", "LOCAL_SYSTEM", "VERSION", "DEFAULT_SYSTEM", "GPU_MODELS", "FABRICS", "NCCL_VERSIONS",
    "DEFAULT_NCCL_VERSION", "COLLECTIVES",
    "ENGINES", "ENGINE_ALIASES", "des_parameters", "fit_parameters",
    # errors
    "NickSimError", "UsageError", "RanksFailed", "print_line",
    # names and values as nccl-tests and NCCL spell them
    "collective_name", "dtype_name", "redop_name", "canonical_engine", "release_line",
    # jobs
    "Job", "JobSpec", "Params", "settings", "load", "load_job", "call",
    # what NCCL decides
    "topology_lines", "topology_xml", "topology_provenance", "PROVENANCE_SUFFIX", "search_lines", "plan", "programs",
    "check", "write_topology", "write_graphs",
    # engines and runs
    "Engine", "CallResult", "engine", "Perf", "PerfOptions", "perf", "run_perf", "sizes", "parse_size",
    "job_logger", "JobLogger", "link_report", "trace_doc", "compare_lines", "nccl_tests_lines",
    "run_header", "step_text", "table_header", "table_footer", "format_row", "results_json", "write_json",
    "write_text", "write_bytes", "check_output",
    "NCCL_TESTS_LATEST", "nccl_tests_release", "release_at_least", "flag_release", "nccl_tests_json",
    "nccl_version_code", "all_dtypes", "ALL_REDOPS", "RunSetup", "preamble", "claim_json_path", "TIME_FORMAT",
    "measured_table", "real_trace", "read_calibration",
    # studies
    "Table", "sweep", "read_grid", "rows_csv", "fit_lines", "calibration_text", "validate", "Validation",
    "leave_one_source_out", "check_loso", "loso_lines",
    "calibrate_measured", "calibration_lines", "calibration_file_text", "calibrated_tuner", "describe_host",
    "calibration_points", "calibration_parameters",
    "HostDescription", "copy_gbps",
    "Progress", "validation_head", "validation_case_line", "validation_tail", "calibrate", "knobs", "knob_lines",
    "alphabeta_lines",
    # hangs
    "scenarios", "replay", "diagnose", "diagnosis_lines",
    # the real backend on this host
    "run_ranks", "HOST_SYSTEM",
    # pictures: what they show as values, and the figures
    "Drawing", "PathMatrix", "Heads", "WaitEdge", "node_drawing", "fabric_drawing", "fabric_links", "path_matrix",
    "ring_orders", "tree_drawing", "heads", "priced", "curves", "link_table", "timeline", "measured", "replay_timeline",
    "waits", "case", "case_points", "tuner", "tuner_csv", "figures", "sweep_series", "PLOT_FORMATS", "need_matplotlib",
    "check_plot", "plot_perf", "plot_sweep",
    # the dashboard
    "DASHBOARD_APP", "dashboard_command",
]


@lru_cache(maxsize=None)
def _installed_version() -> str:
    """nicksim's version as installed (pyproject.toml's), "unknown" where it runs uninstalled."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("nicksim")
    except PackageNotFoundError:
        return "unknown"


SYSTEMS: tuple[str, ...]  # the catalog's names, and
VERSION: str  # nicksim's installed version: both computed on first use (__getattr__)
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
    from .job import JobSpec, load_job
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
    from .calls import call_for_size, collective_name, dtype_name, redop_name
    from .studies.perf import parse_size
    size = parse_size(nbytes, "nbytes") if isinstance(nbytes, str) else nbytes
    return call_for_size(collective_name(collective), size, dtype_name(dtype), redop_name(op), root, job.nranks)


# --- what NCCL decides -------------------------------------------------------------------------

def topology_lines(job: Job, paths: bool = False, links: bool = False) -> list[str]:
    """The system as NCCL's GRAPH subsystem prints it for the job's rank (after trimming it to the
    rank's domain); the cluster for several nodes; with `paths` NCCL's path lines, the path matrix
    and transports; with `links` every directed link of the job's fabric as the DES names them."""
    from .graph.cluster import format_cluster
    from .graph.paths import format_nccl_paths, format_paths
    from .topology.system import format_system
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
    from .formats import joblog
    return joblog.search_lines(job, print_tuning)


def topology_xml(job: Job) -> str:
    """The job's node as NCCL_TOPO_DUMP_FILE holds it, as text: completed, in NCCL's dump layout,
    nothing before `<system>` (topology_provenance says where it came from)."""
    from .topology.xml import TopoXml, dump_topo_xml
    return dump_topo_xml(TopoXml(job.filled.doc.root))


def topology_provenance(job: Job) -> str:
    """Where topology_xml's document came from, as text: nicksim's version, the system and the
    options it was made for, what completing it assumed, and the comments of its source file."""
    spec = job.spec
    options = [f"{f.name}={getattr(spec, f.name)}" for f in fields(spec)
               if f.name not in ("system", "nccl_version", "where") and getattr(spec, f.name) != f.default]
    out = [f"nicksim {_installed_version()}: the node of {job.system_name} in NCCL_TOPO_DUMP_FILE's form "
           f"(NCCL {job.system.rules.version.line})" + (f", with {' '.join(options)}" if options else "")]
    notes = list(getattr(job.filled, "notes", ()))
    out += ["completing it assumed:"] + [f"  {note}" for note in notes] if notes else ["nothing was assumed"]
    comments = [c.strip("\n") for c in job.filled.doc.comments]
    if comments:
        out += ["the source file's comments:"] + comments
    return "\n".join(out) + "\n"


# The file beside a topology dump that says where the dump came from (NCCL's dumps carry no comment).
PROVENANCE_SUFFIX = ".nicksim.txt"


def write_topology(job: Job, path: str | Path) -> Path | None:
    """The job's node written to `path` as NCCL_TOPO_DUMP_FILE holds it (topology_xml), and, where
    `path` is a regular file, topology_provenance to `path` + PROVENANCE_SUFFIX, whose path is
    returned (None where `path` is a device or a pipe)."""
    path = Path(path)
    write_text(path, topology_xml(job))
    if not path.is_file():
        return None
    side = path.with_name(path.name + PROVENANCE_SUFFIX)
    write_text(side, topology_provenance(job))
    return side


def write_graphs(job: Job, path: str | Path) -> None:
    """The job's searched graphs as NCCL_GRAPH_DUMP_FILE holds them."""
    from .graph.graphs import graphs_xml
    write_text(path, graphs_xml(job.paths, job.graphs))


def plan(job: Job, the_call: Call) -> Plan:
    """NCCL's plan of one call: algorithm, protocol, channels, threads, chunking per channel."""
    from .plan import call_plan
    return call_plan(job, the_call)


def programs(job: Job, the_plan: Plan, ranks: Iterable[int] | None = None) -> dict[int, tuple[ChannelProgram, ...]]:
    """What each rank (or each of `ranks`) runs for `the_plan`, channel by channel: the programs
    the DES and the real backend run."""
    from .plan import job_programs
    return job_programs(job, the_plan, ranks)


def check(job: Job, the_plan: Plan) -> None:
    """Run every rank's programs symbolically; raises PlanCheckError where an output byte would
    be lost, doubled or wrongly reduced."""
    from .plan import check_programs, job_programs
    check_programs(the_plan.call, job_programs(job, the_plan), len(job.paths.node_system.gpus()))


# --- engines and runs --------------------------------------------------------------------------

def engine(name: str = "nccl", **options) -> Engine:
    """An engine by name (ENGINES; "model" is nccl's former name) with its options."""
    from .engines import engine_named
    return engine_named(name, **options)


def des_parameters() -> dict[str, tuple[str, ...]]:
    """What the DES's `overrides` (perf --set) take: its parameters, the link kinds whose
    bandwidth can be set, and every name `set` accepts."""
    from .model.hwparams import LINK_KINDS, PARAM_NAMES, SET_NAMES
    return {"parameters": tuple(PARAM_NAMES), "link_kinds": tuple(LINK_KINDS), "names": tuple(SET_NAMES)}


def sizes(min_nbytes: int | str = 8, max_nbytes: int | str = 8 << 30, factor: int | None = 2,
          step_nbytes: int | str | None = None) -> list[int]:
    """nccl-tests' sizes from -b to -e, multiplying by -f or adding -i ("1M", "8G" work)."""
    from .studies.perf import parse_size, sweep_sizes
    def size(v, flag):
        return parse_size(v, flag) if isinstance(v, str) else v
    return sweep_sizes(size(min_nbytes, "-b"), size(max_nbytes, "-e"), factor,
                       None if step_nbytes is None else size(step_nbytes, "-i"))


def perf(job: Job, collective: str = "all_reduce", sizes: Sequence[int] = (1 << 20, 1 << 30),
         engine: str | Engine = "nccl", dtype: str = "float", op: str = "sum", root: int = 0,
         emit: Callable[[str], None] | None = None, **options) -> Perf:
    """An nccl-tests run of `collective` over `sizes` answered by `engine` (a name with its
    `options`, or an Engine); `emit` receives nccl-tests' text line by line as sizes complete."""
    from .calls import collective_name, dtype_name, redop_name
    from .engines import engine_named
    from .studies.perf import PerfOptions, run_perf
    the_engine = engine_named(engine, **options) if isinstance(engine, str) else engine
    run = PerfOptions(collective_name(collective), tuple(sizes), dtype_name(dtype), redop_name(op), root,
                      min_nbytes=min(sizes, default=0), max_nbytes=max(sizes, default=0))
    return run_perf(job, the_engine, run, emit or (lambda line: None))


def link_report(result: CallResult) -> list[str]:
    """The busiest links of a DES run (bytes, busy share, rate, load); nothing for other engines."""
    from .formats.trace import format_link_report
    return format_link_report(result.detail) if result.estimate == "des" else []


def trace_doc(result: CallResult) -> dict | None:
    """A run's Chrome trace (opens in Perfetto): the DES's spans and link rates, or the real
    backend's passes over connection slots; None where the engine recorded none."""
    from .formats.trace import chrome_trace, real_trace
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
    from .studies.perf import compare, format_comparison, measured_table
    table = measured_table(measured_file, run.collective, run.nranks)
    return format_comparison(compare(list(run.rows), table), run.engine)


def nccl_tests_lines(text: str, where: str = "text") -> list:
    """Every nccl-tests table in `text` (any layout since v2.13, its JSON, or CSV blocks)."""
    from .formats.report import read_results
    return read_results(text, where)


def write_text(path: str | Path, text: str) -> None:
    """`text` written to `path` whole or not at all: a regular file (or a new one) is written as a
    temporary file beside it, then renamed over it, so a kill or a full disk never leaves the
    previous file cut short; anything else (/dev/stdout, a pipe) is written to as it is. An
    unwritable path is a UsageError."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | Path, data: bytes) -> None:
    """`data` written to `path` whole or not at all, as write_text writes text."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():  # a device or pipe, maybe through a link: never replaced
            with open(path, "wb") as out:
                out.write(data)
            return
        part = path.with_name(f".{path.name}.{os.getpid()}.part")
        try:
            part.write_bytes(data)
            os.replace(part, path)
        finally:
            part.unlink(missing_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write: {exc.strerror}", str(path), "a writable file path") from None


def check_output(path: str | Path, flag: str) -> None:
    """A UsageError now, before any work, where `path` could not be written later: its folder is
    missing or not writable, or it is a folder itself."""
    path = Path(path)
    if path.is_dir():
        raise UsageError("is a folder", str(path), f"a file path for {flag}")
    if path.exists() and not path.is_file():  # /dev/stdout, a pipe: written to as it is
        if not os.access(path, os.W_OK):
            raise UsageError("cannot write to it", str(path), f"a writable file for {flag}")
        return
    folder = path.resolve().parent
    if not folder.is_dir():
        raise UsageError(f"no folder {folder}", str(path), f"a file path in an existing folder for {flag}")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"cannot write in {folder}", str(path), f"a file path in a writable folder for {flag}")


def write_json(path: str | Path, doc: dict) -> None:
    """`doc` written as indented JSON, whole or not at all (write_text)."""
    write_text(path, json.dumps(doc, indent=2) + "\n")


def run_ranks(collective: str, sizes: Sequence[int], dtype: str, op: str, root: int, iters: int, warmup_iters: int,
              check: int, nccl_version: str, trace: bool, params: Params, nranks: int | None, argv: Sequence[str],
              header: str, emit: Callable[[str], None], on_trace=None, tests_version: str | None = None):
    """`nicksim run`: this host's ranks run a collective for real, each host planned as a node of
    GPUs that join by shared memory, its text as nccl-tests `tests_version` (None: NCCL_TESTS_LATEST) prints it
    (realhw.runner.run_command; its RunDone)."""
    from .calls import collective_name, dtype_name, redop_name
    from .formats.report import NCCL_TESTS_LATEST
    from .realhw.runner import RunOptions, run_command
    options = RunOptions(collective_name(collective), tuple(sizes), dtype_name(dtype), redop_name(op), root, iters,
                         warmup_iters, check, nccl_version, trace)
    return run_command(options, params, nranks, argv, header, emit, on_trace, tests_version or NCCL_TESTS_LATEST)


# --- studies -----------------------------------------------------------------------------------

def read_calibration(path: str | Path, engine: str = "des") -> dict[str, float]:
    """A calibration file's values for `engine`: the DES's [set] table, or NCCL's time model's
    [nccl] table ("nccl"); empty where the file has none for it."""
    from .studies.validate import read_calibration as read
    return read(path, engine)


def calibrate_measured(measured: Sequence[str | Path], *, system: str | None = None, nodes: int | None = None,
                       gpu: str | None = None, gpus_per_node: int | None = None, fabric: str | None = None,
                       nics_per_node: int | None = None, nic_gbps: float | None = None,
                       oversubscription: float = 1.0, hosts_per_leaf: int = 32, rail_optimized: bool = True,
                       switch_lat_us: float | None = None, sharp: bool = False, nccl_version: str | None = None,
                       env: Sequence[str] = (), params: Params | None = None, engines: Sequence[str] = ("nccl", "des"),
                       holdout: Sequence[str] = (), fixed: Mapping[str, float] | None = None, min_nbytes: int = 0,
                       max_nbytes: int = 1 << 62, collective: str | None = None,
                       progress: Callable[[str], None] | None = None, job: Job | None = None,
                       processes: int = 1):
    """Both engines (or those named) fitted jointly to measured runs (studies.fit.Calibration).

    `measured`: nccl-tests output as pasted, its JSON, nicksim's own, or validation case files.
    The system is the SYSTEM options as `load` takes them; the NCCL version, network and node
    count a log states fill in what is not given, and the settings it says NCCL read apply (`env`
    wins). `holdout` as `--holdout` spells it (alternate, size=..., collective=..., nodes=...,
    ranks=...); `fixed` DES values (`--set` names) are kept, not fitted, and written with the fit.
    `job` instead of the SYSTEM options: that system exactly, its settings under the log's. The
    DES's runs for each step of the fit go to `processes` processes."""
    from .calls import collective_name as coll_name
    from .engines import canonical_engine
    from .job import JobSpec
    from .model.hwparams import check_override
    from .studies.fit import FIT_ENGINES, calibrate as fit, parse_holdout
    from .studies.measured import jobs_for, read_measured
    from .studies.perf import parse_size
    wanted = [canonical_engine(e) for e in engines]
    for engine in wanted:
        if engine not in FIT_ENGINES:
            raise UsageError(f"engine '{engine}' cannot be calibrated", "--engine", ", ".join(FIT_ENGINES))
    for name, value in (fixed or {}).items():
        check_override(name, float(value), "--set")
    if fixed and "des" not in wanted:
        raise UsageError("--set needs the DES engine", "--set", "--engine des (its values are the DES's)")
    given_values = dict(system=system, nodes=nodes, gpu=gpu, gpus_per_node=gpus_per_node, fabric=fabric,
                        nics_per_node=nics_per_node, nic_gbps=nic_gbps, switch_lat_us=switch_lat_us,
                        nccl_version=nccl_version)
    given = frozenset(k for k, v in given_values.items() if v is not None)
    if job is not None:  # a system already made (the dashboard's sidebar): every field of it given
        given, params = frozenset(given_values), job.params
    base = job.spec if job is not None else JobSpec(
        system=system, nodes=nodes or 1, nccl_version=nccl_version or DEFAULT_NCCL_VERSION, gpu=gpu,
        gpus_per_node=gpus_per_node, fabric=fabric, nics_per_node=nics_per_node, nic_gbps=nic_gbps,
        oversubscription=oversubscription, hosts_per_leaf=hosts_per_leaf, rail_optimized=rail_optimized,
        switch_lat_us=switch_lat_us, sharp=sharp)
    hold = parse_holdout(list(holdout), lambda t: parse_size(t, "--holdout"), coll_name)
    runs = read_measured([str(m) for m in measured], coll_name(collective) if collective else None)
    jobs = jobs_for(runs, base, given, params if params is not None else settings(), tuple(env))
    return fit(runs, jobs, tuple(dict.fromkeys(wanted)), hold, dict(fixed or {}), min_nbytes, max_nbytes, progress,
               max(1, processes))


def calibration_points(cal) -> Table:
    """A joint calibration's observations: per engine and size, measured, before and after (times,
    bus bandwidths, errors), held out or not, and the plan."""
    from .studies.fit import point_records
    return Table(tuple(point_records(cal)))


def calibration_parameters(cal) -> Table:
    """A joint calibration's parameters: per engine, NCCL's value, the fitted one and its 1-sigma, or
    why it was left."""
    from .studies.fit import parameter_records
    return Table(tuple(parameter_records(cal)))


def calibration_lines(cal) -> list[str]:
    """A joint calibration for people: each parameter before and after, each size's error."""
    from .studies.fit import format_calibration
    return format_calibration(cal)


def calibration_file_text(cal) -> str:
    """A joint calibration as the file `--calibration` reads ([set], [nccl], the report as comments)."""
    from .studies.fit import calibration_text as text
    return text(cal)


def calibrated_tuner(cal, progress: Callable[[int, int], None] | None = None) -> tuple[Table, list[str]]:
    """The fastest algorithm and protocol per collective and size range by the calibrated engine
    (NCCL's time model where it was fitted, else the DES), for NCCL's example tuner plugin
    (tuner_csv writes them); and what could not be written, with why."""
    from .studies.tuner import calibrated_rows
    rows, skipped = calibrated_rows(cal, progress)
    return Table(tuple(rows)), skipped


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
    from .files import read_input
    from .studies.sweep import read_grid as parse_grid
    try:
        text = read_input(path, "a readable GRID.toml").decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("not UTF-8 text", str(path), "a GRID.toml (UTF-8)") from None
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
        need_matplotlib(str(folder))
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


def _cases(cases) -> list:
    """Cases from a folder or file of case files (default the project's validation/), or as given
    (Case objects, e.g. from `case`)."""
    from .studies.validate import default_dir, find_cases
    if isinstance(cases, (list, tuple)):
        return list(cases)
    return find_cases(cases or default_dir())


def validate(cases: str | Path | None = None, engines: Sequence[str] = ("nccl",),
             calibration: str | Path | Mapping[str, float] | None = None,
             on_case: Callable[[str, Any, int, int], None] | None = None) -> Validation:
    """The validation cases (a folder of case files, one case file; default the project's
    validation/) answered by each engine ("nccl", "des"), each with its values in `calibration` (a
    calibration file, or a mapping of DES parameters); `on_case(engine, result, done, total)` hears
    of each case as it finishes, engine by engine."""
    from .engines import canonical_engine
    from .studies.validate import read_calibration, run_case
    found = _cases(cases)
    names = list(dict.fromkeys(canonical_engine(e) for e in engines))
    if isinstance(calibration, (str, Path)):
        values = {engine: read_calibration(calibration, engine) for engine in names}
        if not any(values.values()):
            raise UsageError(f"the calibration has no values for {' or '.join(names)}", str(calibration),
                             "--engine des for its [set] table, nccl for its [nccl] table")
    else:
        values = {"des": dict(calibration)} if calibration is not None else {}
        if values and "des" not in names:
            raise UsageError("a calibration sets DES parameters", "--calibration", "with --engine des")
    results: dict[str, tuple] = {}
    total = len(found) * len(names)
    for engine in names:
        done = []
        for case in found:
            done.append(run_case(case, engine, values.get(engine) or None))
            if on_case is not None:
                on_case(engine, done[-1], sum(map(len, results.values())) + len(done), total)
        results[engine] = tuple(done)
    return Validation(results)


def leave_one_source_out(name: str, values: Sequence[float], cases: str | Path | None = None,
                         on_run: Callable[[int, int], None] | None = None):
    """Whether DES parameter `name`'s best value among `values`, chosen on the other sources' cases,
    helps each source's own (studies/loso.py): a SourceStudy."""
    from .studies.loso import check_study, leave_one_source_out as study
    check_study(name, values)
    return study(_cases(cases), name, values, on_run=on_run)


def check_loso(name: str, values: Sequence[float]) -> None:
    """A UsageError unless `name` is a DES parameter `values` may be given to."""
    from .studies.loso import check_study
    check_study(name, values)


def loso_lines(study) -> list[str]:
    """A leave-one-source-out study as `nicksim validate --loso` prints it."""
    from .studies.loso import format_loso
    return format_loso(study)


def validation_head(engine: str) -> list[str]:
    """The validate report's first lines for one engine (before its case lines)."""
    from .studies.validate import report_head
    return report_head(engine)


def validation_case_line(result) -> str:
    """One case's summary line in the validate report, printable as soon as the case is done."""
    from .studies.validate import case_line
    return case_line(result)


def validation_tail(results: Sequence) -> list[str]:
    """The validate report after one engine's case lines: each case's sizes, then the overall figures."""
    from .studies.validate import report_tail
    return report_tail(list(results))


def fit_parameters() -> dict:
    """What `calibrate` can fit, and the candidate values it tries by default."""
    from .studies.calibrate import DEFAULT_VALUES, FIT_NAMES
    return {"names": tuple(FIT_NAMES), "values": tuple(DEFAULT_VALUES)}


def calibrate(cases: str | Path | Sequence | None = None, name: str = "step_lat.scale", values: Sequence[float] | None = None,
              jobs: int | None = None):
    """One DES parameter fitted to the validation cases (studies.calibrate.Fit: the value, its
    error, and each source left out in turn)."""
    from .studies.calibrate import DEFAULT_VALUES, default_jobs, fit
    return fit(_cases(cases), name, tuple(values or DEFAULT_VALUES), jobs or default_jobs())


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


def diagnose(files: Sequence[str | Path], job: Job | None = None, strict: bool = False):
    """What went wrong, on which rank, in which collective, from the logs and dumps people have
    (forensics.Diagnosis); with the `job` they ran, where each blocked rank waits. `strict`: files
    of which not one line is NCCL's, PyTorch's or a Flight Recorder dump's are a UsageError (else
    the diagnosis is "unknown", asking for such logs)."""
    from .forensics import diagnose as weigh, read_evidence, with_waits
    evidence = read_evidence(files)
    recognised = (evidence.counts, evidence.versions, evidence.settings, evidence.nranks, evidence.init_complete,
                  evidence.timeouts, evidence.work)
    if strict and not any(recognised):
        names = ", ".join(Path(f).name for f in files)
        raise UsageError(f"no line of NCCL's, PyTorch's or nccl-tests' found ({evidence.lines_read} lines read)",
                         names, "NCCL_DEBUG=INFO logs, PyTorch watchdog output, nccl_trace_rank_* Flight Recorder dumps")
    found = weigh(evidence)
    return with_waits(found, evidence, job) if job is not None else found


def diagnosis_lines(diagnosis) -> list[str]:
    from .forensics import format_diagnosis
    return format_diagnosis(diagnosis)


# --- pictures ----------------------------------------------------------------------------------
# What the dashboard draws, as values (studies.views); `figures` draws them (matplotlib Figures).

def node_drawing(job: Job) -> Drawing:
    """The job's node laid out for drawing: CPUs, the PCIe tree, GPUs and NICs, NETs, NVSwitches;
    edges with NCCL's link kind and GB/s."""
    from .studies.views import node_drawing as draw
    return draw(job)


def fabric_drawing(job: Job, max_nodes: int = 8) -> Drawing:
    """The cluster's leaves, spines and NICs for the first `max_nodes` nodes."""
    from .studies.views import fabric_drawing as draw
    return draw(job, max_nodes)


def fabric_links(job: Job) -> tuple[str, ...]:
    """Every directed link of the job's fabric as the DES names them (what `faults` take)."""
    from .model.fabric import build_fabric
    return tuple(link.name for link in build_fabric(job.cluster).links)


def path_matrix(job: Job) -> PathMatrix:
    """NCCL's path type and GB/s between the rank's GPUs and NICs."""
    from .studies.views import path_matrix as matrix
    return matrix(job)


def ring_orders(job: Job) -> tuple[tuple[int, ...], ...]:
    """Per channel, node 0's ranks in the order the channel's ring visits them."""
    from .studies.views import ring_orders as orders
    return orders(job)


def tree_drawing(job: Job, channel: int = 0) -> Drawing:
    """The tree of `channel` over the job's nodes (channel n/2 holds the other tree of the pair)."""
    if not 0 <= channel < job.channels.n_channels:
        raise UsageError(f"channel {channel}", "channel", f"0..{job.channels.n_channels - 1}")
    from .studies.views import tree_drawing as draw
    return draw(job, channel)


def heads(job: Job) -> Heads:
    """The NVLS and CollNet heads inside a node."""
    from .studies.views import heads as found
    return found(job)


def priced(job: Job, the_call: Call) -> Table:
    """Every algorithm x protocol NCCL prices for the call: time, busbw, channels, threads, and
    `chosen` on NCCL's pick."""
    from .studies.views import priced_rows
    return Table(tuple(priced_rows(job, the_call)))


def curves(job: Job, collective: str = "all_reduce", sizes: Sequence[int] = (1 << 20,), dtype: str = "float",
           op: str = "sum", root: int = 0) -> Table:
    """NCCL's time model over `sizes` for every pair it prices, `chosen` marking its pick per size."""
    from .calls import collective_name, dtype_name, redop_name
    from .studies.views import size_curves
    return Table(tuple(size_curves(job, collective_name(collective), list(sizes), dtype_name(dtype), redop_name(op),
                                   root)))


def link_table(result: CallResult, top: int = 20) -> Table:
    """A DES run's busiest links as records (bytes, busy share, rate, capacity, load); empty for
    other engines."""
    from .studies.views import link_rows
    return Table(tuple(link_rows(result.detail, top))) if result.estimate == "des" and result.detail else Table(())


def timeline(result_or_trace: CallResult | dict, max_spans: int = 4000, ranks: Sequence[int] | None = None) -> Table:
    """The spans of a run recorded with a trace (or of a Chrome trace document): rank, lane, op,
    start and duration in us; those of `ranks` (default every rank)."""
    from .engines import CallResult
    from .studies.views import timeline_rows
    doc = trace_doc(result_or_trace) if isinstance(result_or_trace, CallResult) else result_or_trace
    return Table(tuple(timeline_rows(doc or {}, max_spans, ranks)))


def measured(text: str, collective: str, nranks: int | None = None, where: str = "measured") -> Table:
    """The rows of the first nccl-tests table in `text` (pasted output, its JSON or CSV blocks) for
    `collective` on `nranks` ranks: size, time and bus bandwidth. No such table is a UsageError."""
    from .calls import collective_name
    from .formats.report import read_results
    from .studies.views import measured_rows
    name = collective_name(collective)
    tables = read_results(text, where)
    fitting = [t for t in tables if t.collective in (None, name) and (nranks is None or t.nranks in (None, nranks))]
    if not fitting:
        found = ", ".join(f"{t.collective} with {t.nranks} ranks" for t in tables) or "no nccl-tests table"
        raise UsageError(f"no {name} table for {nranks or 'any number of'} ranks (found {found})", where,
                         "nccl-tests output with a matching table")
    return Table(tuple(measured_rows(fitting[0])))


def replay_timeline(the_replay, max_spans: int = 4000, ranks: Sequence[int] | None = None) -> Table:
    """The per-rank spans of a replayed hang (its trace.json); empty where the scenario has none."""
    trace = next((f for f in the_replay.files if f.endswith("trace.json")), None)
    if trace is None:
        return Table(())
    return timeline(json.loads(Path(trace).read_text(encoding="utf-8")), max_spans, ranks)


def waits(replay_or_diagnosis, nranks: int | None = None) -> tuple[WaitEdge, ...]:
    """Who waits on whom: from a replay, each blocked rank's first stream that waits on a peer;
    from a diagnosis alone, every rank (of `nranks`, else those its evidence names) on its culprits."""
    from .studies.views import diagnosis_waits, replay_waits
    if hasattr(replay_or_diagnosis, "blocked"):
        return replay_waits(replay_or_diagnosis.blocked, replay_or_diagnosis.standing)
    return diagnosis_waits(replay_or_diagnosis, nranks)


def case(measured_file: str | Path, job: Job, collective: str, name: str | None = None,
         env: Mapping[str, object] | None = None):
    """A validation case (studies.validate.Case) from a measured nccl-tests file and the job it
    ran on: what `validate`, `calibrate` and `case_points` take."""
    from .calls import collective_name
    from .studies.validate import Case
    path = Path(measured_file)
    return Case(name=name or path.stem, path=str(path), title=f"{job.system_name}, {job.nranks} ranks",
                source=str(path), spec=job.spec, env=tuple((str(k), str(v)) for k, v in (env or {}).items()),
                collective=collective_name(collective), measured=str(path), nranks=job.nranks, table=1, dtype=None,
                in_place=False, gap="", expect=())


def case_points(the_case, engine: str = "nccl", calibration: Mapping[str, float] | None = None) -> Table:
    """One case answered by `engine` (the DES with `calibration`'s parameters): measured and
    predicted busbw per size. A case that cannot run is a UsageError saying why."""
    from .studies.validate import run_case
    result = run_case(the_case, engine, dict(calibration) if calibration else None)
    if result.error:
        raise UsageError(result.error, the_case.name, "a case whose measurements and system load")
    return Table(tuple({"nbytes": p.nbytes, "measured_busbw_gbps": p.measured_busbw_gbps,
                        "busbw_gbps": p.predicted_busbw_gbps, "error_pct": p.error_pct, "algorithm": p.algorithm,
                        "protocol": p.protocol} for p in result.points))


def sweep_series(rows: Sequence[dict]) -> dict[str, list[dict]]:
    """A sweep's rows as series to draw: one per grid point, named by the options that differ from
    point to point, in size order; rows with an error or a hang left out (studies.views)."""
    from .studies.views import sweep_series as series
    return series(list(rows))


# The picture formats `plot_perf` and `plot_sweep` write, by the file's extension.
PLOT_FORMATS = ("png", "svg")


def need_matplotlib(where: str, extra: str = "plot") -> None:
    """A UsageError where matplotlib cannot be imported (it comes with nicksim's `extra`); nothing else."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        raise UsageError("matplotlib is not installed", where, f"pip install 'nicksim[{extra}]'") from None


def _figures():
    """studies.figures, or a UsageError where matplotlib is missing."""
    need_matplotlib("plot")
    from .studies import figures
    return figures


def check_plot(path: str | Path, flag: str) -> None:
    """A UsageError now, before any work, where a picture could not be written to `path`: its
    extension is not one of PLOT_FORMATS, matplotlib is missing, or check_output refuses it."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        raise UsageError(f"'{path}' is not a picture format nicksim writes", flag,
                         " or ".join(f"a .{f} file" for f in PLOT_FORMATS))
    need_matplotlib(flag)
    check_output(path, flag)


def _save(fig, path: str | Path) -> Path:
    """A figure written to `path` in the format its extension names, whole or not at all."""
    import io
    check_plot(path, "plot")
    out = io.BytesIO()
    fig.savefig(out, format=Path(path).suffix.lower().lstrip("."), dpi=110)
    write_bytes(path, out.getvalue())
    return Path(path)


def plot_perf(run: Perf, path: str | Path, measured_file: str | None = None) -> Path:
    """`run` drawn to `path` (.png or .svg, figures.draw_perf): bus bandwidth and time over sizes,
    the algorithm/protocol of each size marked, the rows of `measured_file` (what `compare_lines`
    reads) overlaid."""
    from .studies.perf import measured_table
    from .studies.views import measured_rows
    measured_records = measured_rows(measured_table(measured_file, run.collective, run.nranks)) \
        if measured_file else []
    title = f"{run.collective} on {run.system}, {run.nranks} ranks, NCCL {run.nccl_version}"
    return _save(_figures().draw_perf({run.engine: run.records()}, measured_records, title), path)


def plot_sweep(rows: Sequence[dict], path: str | Path, title: str = "") -> Path:
    """A sweep's rows drawn to `path` (.png or .svg, figures.draw_sweep): bus bandwidth over sizes,
    a line per grid point (sweep_series), the algorithm/protocol of each size marked; the title
    names the collective, system and engine where every point shares them, then `title`."""
    series = sweep_series(rows)
    if not series:
        raise UsageError("no row without an error to draw", str(path), "a sweep with at least one answered row")

    def shared(key: str) -> str | None:
        values = {str(row.get(key)) for row in rows}
        return values.pop() if len(values) == 1 else None

    head = " on ".join(w for w in (shared("collective"), shared("system")) if w)
    if shared("engine"):
        head = f"{head}, engine {shared('engine')}" if head else f"engine {shared('engine')}"
    return _save(_figures().draw_sweep(series, f"{head} ({title})" if head and title else head or title), path)


_TUNER_SIZES = [1 << k for k in range(10, 31, 3)]  # 1 KiB to 1 GiB, x8


def tuner(job: Job, collective: str = "all_reduce", sizes: Sequence[int] = (), engine: str | Engine = "des",
          progress: Callable[[int, int], None] | None = None, **options) -> Table:
    """The fastest algorithm/protocol per size range by `engine`'s own times (every pair NCCL
    prices, forced in turn), beside NCCL's own pick: what `tuner_csv` writes for NCCL's example
    tuner plugin."""
    from .calls import collective_name
    from .engines import engine_named
    from .studies.tuner import tuner_rows
    the_engine = engine_named(engine, **options) if isinstance(engine, str) else engine
    return Table(tuple(tuner_rows(job, collective_name(collective), list(sizes) or _TUNER_SIZES, the_engine,
                                  progress)))


def tuner_csv(table: Table) -> str:
    """A tuner table as NCCL's example tuner plugin reads it (nccl_tuner.conf, 2.26+)."""
    from .studies.tuner import tuner_csv as to_csv
    return to_csv(list(table.rows))


# --- the dashboard -----------------------------------------------------------------------------

DASHBOARD_APP = Path(__file__).resolve().parent / "dashboard" / "app.py"


def dashboard_command(host: str = "localhost", port: int = 8501) -> list[str]:
    """The command that serves the dashboard headless on host:port (Streamlit, no browser opened,
    no usage statistics sent). Streamlit missing, or the port taken, is a UsageError."""
    import importlib.util
    import socket
    import sys
    if importlib.util.find_spec("streamlit") is None:
        raise UsageError("Streamlit is not installed", "nicksim dashboard", "pip install 'nicksim[dashboard]'")
    need_matplotlib("nicksim dashboard", "dashboard")  # its pictures are matplotlib's
    if not 1 <= port <= 65535:
        raise UsageError(f"port {port}", "--port", "1..65535")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}", "--host/--port",
                         "a free port on an address of this host") from None
    return [sys.executable, "-m", "streamlit", "run", str(DASHBOARD_APP), "--server.headless", "true",
            "--server.address", host, "--server.port", str(port), "--browser.gatherUsageStats", "false",
            "--server.fileWatcherType", "none", "--global.developmentMode", "false", "--logger.level", "error",
            "--client.toolbarMode", "viewer"]


def __getattr__(name: str):
    """The names of _LAZY, SYSTEMS and VERSION, imported or computed on first use (then kept as
    attributes); `figures` (matplotlib drawings) too: a run that draws nothing does not pay for
    matplotlib."""
    if name == "figures":
        need_matplotlib("nicksim.api.figures")
        from .studies import figures
        return figures
    if name == "SYSTEMS":
        from .topology.catalog import CATALOG
        value: Any = tuple(CATALOG)
    elif name == "VERSION":
        value = _installed_version()
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __package__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "SYSTEMS", "VERSION"})
