"""The `nicksim` command line.

Every failure a user can cause ends in one line on stderr — what, where, what would be valid
— and exit status 2; `--debug` shows the traceback instead. The environment is read here, once,
through params.read_params, and passed down.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from .alphabeta import alphabeta_table, format_alphabeta, scenario_tables
from .calls import COLLECTIVES, call_for_size, collective_name, dtype_name, redop_name
from .catalog import CATALOG, DEFAULT_SYSTEM
from .cluster import format_cluster
from .constants import DEFAULT_VERSION, MODELLED_VERSIONS, tuning_tables
from .engines import ENGINES, engine_result
from .errors import NickSimError, UsageError
from .hardware import FABRICS, GPU_MODELS
from .job import Job, JobSpec, load_job
from .joblog import JobLogger
from .logs import LogSink, debug_config
from .model.fabric import build_fabric, format_fabric
from .model.hwparams import LINK_KINDS, PARAM_NAMES, SET_NAMES
from .params import KNOBS, Params, debug_ranks, read_params
from .paths import format_nccl_paths, format_paths
from .perf import compare, format_comparison, measured_table, parse_size, perf_rows, sweep_sizes
from .report import format_row, format_table, results_json, table_footer, table_header
from .constants.tuning_tables import PROTOCOLS
from .connect import (format_channel_counts, format_channels, format_nvls_heads, nvls_heads, p2p_channels,
                      p2p_chunk_nbytes)
from .search import format_graph, graphs_xml
from .topo import format_system
from .trace import chrome_trace, format_link_report, real_trace
from .transports import connection_lines, ring_links, tree_links
from .tuning import format_thread_thresholds, format_tuning_table, thread_thresholds
from .xml import write_topo_xml

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int_at_least(name: str, minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} '{text}' is not an integer (valid: {minimum} or more)") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name} {value} (valid: {minimum} or more)")
        return value
    return parse


def _positive_float(name: str, minimum: float = 0.0, inclusive: bool = False):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} '{text}' is not a number") from None
        ok = value >= minimum if inclusive else value > minimum
        if not ok or value != value or value in (float("inf"),):
            bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
            raise argparse.ArgumentTypeError(f"{name} {text} (valid: a number {bound})")
        return value
    return parse


def _add_system_options(p: argparse.ArgumentParser, positional: bool = True) -> None:
    g = p.add_argument_group("system")
    what = (f"catalog name ({', '.join(CATALOG)}) or an NCCL topology .xml file; "
            f"default: NCCL_TOPO_FILE if set, else {DEFAULT_SYSTEM}")
    if positional:
        g.add_argument("system", nargs="?", metavar="SYSTEM", help=what)
    else:
        p.set_defaults(system=None)
    g.add_argument("--system", dest="system_opt", metavar="NAME|FILE", help="same as SYSTEM" if positional else what)
    g.add_argument("--gpu", metavar="MODEL", help=f"complete partial files with this GPU ({', '.join(GPU_MODELS)})")
    g.add_argument("--nodes", type=_int_at_least("--nodes", 1), default=1, help="number of nodes (default 1)")
    g.add_argument("--gpus-per-node", type=_int_at_least("--gpus-per-node", 1), help="use the first G GPUs of each node")
    g.add_argument("--fabric", metavar="NAME", help=f"inter-node network: {', '.join(FABRICS)}")
    g.add_argument("--nics-per-node", type=_int_at_least("--nics-per-node", 0), help="NIC ports per node")
    g.add_argument("--nic-gbps", type=_positive_float("--nic-gbps"), help="speed of every NIC, Gbit/s")
    g.add_argument("--oversubscription", type=_positive_float("--oversubscription", 1.0, True), default=1.0,
                   help="leaf uplink oversubscription, e.g. 2 for 2:1 (default 1)")
    g.add_argument("--hosts-per-leaf", type=_int_at_least("--hosts-per-leaf", 1), default=32,
                   help="nodes per leaf switch and rail (default 32)")
    g.add_argument("--no-rail-optimized", dest="rail", action="store_false",
                   help="plug each node's NICs into shared leaves instead of one leaf per rail")
    g.add_argument("--sharp", action="store_true",
                   help="the fabric's switches reduce in the network (SHARP) and a CollNet plugin serves every "
                        "NIC; NCCL uses it with NCCL_COLLNET_ENABLE=1")
    g.add_argument("--switch-lat-us", type=_positive_float("--switch-lat-us", 0.0, True),
                   help="latency of one switch hop, us (default: the fabric's)")
    g.add_argument("--nccl-version", default=str(DEFAULT_VERSION.line), metavar="V",
                   help=f"NCCL release line to model ({MODELLED_VERSIONS[0].line} .. {DEFAULT_VERSION.line}; "
                        f"default {DEFAULT_VERSION.line})")
    g.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="an NCCL_*/NICKSIM_* setting (repeatable; wins over the environment)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nicksim", description="NCCL's decisions, reproduced and simulated.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    topo = sub.add_parser("topo", help="print the system as NCCL's GRAPH subsystem does")
    _add_system_options(topo)
    topo.add_argument("--dump-xml", metavar="FILE", help="write the completed topology XML (as NCCL_TOPO_DUMP_FILE)")
    topo.add_argument("--paths", action="store_true", help="print path types, bandwidths and transports")
    topo.add_argument("--links", action="store_true",
                      help="list every directed link of the job's fabric as the DES names them (for --fault)")
    topo.add_argument("--rank", type=_int_at_least("--rank", 0), default=0,
                      help="print the system as this rank sees it (NCCL trims it to the rank's domain; default 0)")
    topo.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    topo.set_defaults(run=_run_topo)
    search = sub.add_parser("search", help="run NCCL's graph search and print its Pattern/channel lines")
    _add_system_options(search)
    search.add_argument("--rank", type=_int_at_least("--rank", 0), default=0,
                        help="the rank whose channels and trees to print (default 0)")
    search.add_argument("--dump-graph", metavar="FILE",
                        help="write the graphs as NCCL_GRAPH_DUMP_FILE does (also read from that variable)")
    search.add_argument("--print-tuning", action="store_true",
                        help="print NCCL's TUNING table (as NCCL_DEBUG_SUBSYS=TUNING does)")
    search.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    search.set_defaults(run=_run_search)
    _add_perf_parser(sub)
    _add_run_parser(sub)
    _add_sweep_parser(sub)
    _add_validate_parser(sub)
    _add_calibrate_parser(sub)
    _add_alphabeta_parser(sub)
    _add_hang_parser(sub)
    _add_env_parser(sub)
    return parser


def _add_env_parser(sub) -> None:
    env = sub.add_parser("env", help="every NCCL_* knob nicksim reads: value and source, default, releases, and "
                                     "its effect in each engine")
    env.add_argument("names", nargs="*", metavar="NAME", help="only these knobs (a prefix works: NCCL_IB)")
    env.add_argument("--system", dest="system_opt", metavar="NAME|FILE.xml",
                     help="say which knobs this system's job reads, with its release's defaults")
    env.add_argument("--nccl-version", default=str(DEFAULT_VERSION.line), metavar="V",
                     help=f"the release whose defaults and knobs to show (default {DEFAULT_VERSION.line})")
    env.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="a setting, as elsewhere")
    env.add_argument("--set-only", action="store_true", help="only the knobs that are set")
    env.add_argument("--json", metavar="FILE", help="write the table as JSON")
    env.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    env.set_defaults(run=_run_env)


def _run_env(args, params: Params) -> int:
    from .constants import parse_version
    from .constants.knobs import ENGINE_NAMES
    minor = parse_version(args.nccl_version).minor
    on_job: dict[str, str] = {}
    if args.system_opt:  # the job loads: a bad system or file says so here
        job = load_job(JobSpec(system=args.system_opt, nccl_version=args.nccl_version), params)
        _warn(job.params.notes)
        on_job = _job_values(job)
    wanted = [n.upper() for n in args.names]
    unknown = [n for n in wanted if not any(k.startswith(n) for k in KNOBS)]
    if unknown:
        raise UsageError(f"no knob named {', '.join(unknown)}", "nicksim env",
                         "a name or prefix of one `nicksim env` lists")
    versioned = params.for_version(minor)
    rows = []
    for name, knob in KNOBS.items():
        if wanted and not any(name.startswith(n) for n in wanted):
            continue
        is_set = name in params.raw and params.raw[name] != ""
        if args.set_only and not is_set:
            continue
        until = f"-{knob.until}" if knob.until else "+" if name.startswith("NCCL_") else ""
        release = f"{knob.since}{until}" if name.startswith("NCCL_") else "-"
        used = "" if knob.read_by(minor) else f" (not read by 2.{minor})"
        if is_set and name not in params.values:
            state = "ignored: invalid"
        elif is_set and name not in versioned.values:
            state = "ignored" + used
        else:
            state = ""
        rows.append({"name": name, "value": params.raw.get(name) if is_set else None,
                     "source": params.sources.get(name) if is_set else None, "state": state,
                     "default": knob.default_for(minor), "on_system": on_job.get(name),
                     "releases": release, "doc": knob.doc,
                     **{engine: knob.effect(engine) for engine in ENGINE_NAMES}})
    print(f"# nicksim env: {len(rows)} knob(s), NCCL 2.{minor} defaults; effects per engine (model, des, real)")
    for row in rows:
        value = f"{row['value']} ({row['source']}{', ' + row['state'] if row['state'] else ''})" \
            if row["value"] is not None else "unset"
        here = f"; on {args.system_opt}: {row['on_system']}" if row["on_system"] is not None else ""
        print(f"{row['name']} = {value}; default {_env_default(row['default'])}{here}; NCCL {row['releases']}")
        print(f"    {row['doc']}")
        for engine in ENGINE_NAMES:
            print(f"    {engine + ':':<6} {row[engine]}")
    if args.json:
        _write_json(args.json, {"nccl_version": f"2.{minor}", "knobs": rows})
    return 0


def _job_values(job: Job) -> dict[str, str]:
    """What the job actually uses where a knob's default is computed from the machine: buffers,
    channels, NVLS channels and chunk, the network overhead and the IB transport's settings."""
    from .model.ib import ib_transport
    from .tuning import net_overhead_us
    comm, ib = job.comm, ib_transport(job)
    values = {"NCCL_LL_BUFFSIZE": comm.buff_nbytes[0], "NCCL_LL128_BUFFSIZE": comm.buff_nbytes[1],
              "NCCL_BUFFSIZE": comm.buff_nbytes[2], "NCCL_MAX_CTAS": f"{job.channels.n_channels} channels",
              "NCCL_NVLS_NCHANNELS": comm.nvls_channels, "NCCL_NVLS_CHUNKSIZE": comm.nvls_chunk_nbytes,
              "NCCL_NET_OVERHEAD": f"{net_overhead_us(comm.inputs, job.params):g} us"}
    if ib.verbs:
        values.update({"NCCL_IB_ADAPTIVE_ROUTING": int(ib.adaptive), "NCCL_IB_QPS_PER_CONNECTION": ib.qps,
                       "NCCL_IB_TIMEOUT": ib.timeout, "NCCL_IB_RETRY_CNT": ib.retry_cnt})
    return {name: str(value) for name, value in values.items()}


def _env_default(value) -> str:
    return "unset" if value is None else str(value)


def _size(name: str):
    """perf.parse_size as an argparse type."""
    def parse(text: str) -> int:
        try:
            return parse_size(text, name)
        except NickSimError as exc:
            raise argparse.ArgumentTypeError(exc.line()) from None
    return parse


def _add_nccl_tests_flags(parser, check_help: str):
    """nccl-tests' own flags, with its defaults; the group, for a command's flags of its own."""
    g = parser.add_argument_group("nccl-tests flags")
    g.add_argument("-b", "--minbytes", type=_size("-b"), default=8, help="smallest size (default 8)")
    g.add_argument("-e", "--maxbytes", type=_size("-e"), default=8 << 30, help="largest size (default 8G)")
    step = g.add_mutually_exclusive_group()
    step.add_argument("-f", "--stepfactor", type=_int_at_least("-f", 2), help="multiply the size by this (default 2)")
    step.add_argument("-i", "--stepbytes", type=_size("-i"), help="add this many bytes per step")
    g.add_argument("-n", "--iters", type=_int_at_least("-n", 1), default=20, help="timed iterations (default 20)")
    g.add_argument("-w", "--warmup_iters", type=_int_at_least("-w", 0), default=1, help="warm-up iterations")
    g.add_argument("-c", "--check", type=_int_at_least("-c", 0), default=1, help=check_help)
    g.add_argument("-d", "--datatype", default="float", help="data type (default float)")
    g.add_argument("-o", "--op", default="sum", help="reduction (default sum)")
    g.add_argument("-r", "--root", type=_int_at_least("-r", 0), default=0, help="root rank (default 0)")
    g.add_argument("-z", "--blocking", type=_int_at_least("-z", 0), default=0, help="blocking collectives")
    # nccl-tests' process-layout and reporting flags: accepted so a pasted command line runs; the ranks
    # come from the system options or -np, and there are no graphs to capture.
    for flag, name, what in (("-t", "--nthreads", "threads per process"), ("-g", "--ngpus", "GPUs per thread"),
                             ("-a", "--average", "how ranks' times are combined"),
                             ("-m", "--agg_iters", "operations aggregated per iteration"),
                             ("-N", "--run_cycles", "run cycles"), ("-G", "--cudagraph", "CUDA graph launches"),
                             ("-C", "--report_cputime", "report CPU time"), ("-R", "--local_register", "registration")):
        g.add_argument(flag, name, type=_int_at_least(flag, 0), default=None, help=f"{what} (accepted; no effect)")
    return g


def _add_run_parser(sub) -> None:
    run = sub.add_parser("run", help="the collective run for real by ranks on this host (shared memory), "
                                     "reported as nccl-tests does")
    run.add_argument("collective", metavar="COLL", help=f"{', '.join(COLLECTIVES)} (or the _perf names)")
    run.add_argument("-np", dest="nranks", type=_int_at_least("-np", 1), default=None,
                     help="ranks to start (without a launcher; under torchrun, mpirun or srun the launcher's)")
    run.add_argument("--nccl-version", default=str(DEFAULT_VERSION.line), metavar="V",
                     help=f"the NCCL release whose plans run (default {DEFAULT_VERSION.line})")
    run.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="an NCCL_* / NICKSIM_* setting")
    _add_nccl_tests_flags(run, "check every element (#wrong)")
    run.add_argument("-J", "--output-json", dest="json", metavar="FILE", help="write the results as JSON")
    run.add_argument("--trace", metavar="FILE", help="write one more call of the largest size, every pass over "
                     "connection slots per rank, channel and peer, as Chrome trace JSON (opens in Perfetto)")
    run.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    run.set_defaults(run=_run_real)


def _add_perf_parser(sub) -> None:
    perf = sub.add_parser("perf", help="an nccl-tests run (all_reduce_perf ...) answered by an engine")
    perf.add_argument("collective", metavar="COLL", help=f"{', '.join(COLLECTIVES)} (or the _perf names)")
    _add_system_options(perf, positional=False)
    g = _add_nccl_tests_flags(perf, "check results (the model moves no data: #wrong prints N/A)")
    perf.add_argument("--engine", default="model", choices=(*ENGINES, "real"),
                      help="model: NCCL's time model; des: the discrete-event simulation of the fabric; real: "
                           "the job's plans run by a process per rank on this host (nicksim run), moving and "
                           "checking real data")
    perf.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                      help=f"a DES parameter for this run ({', '.join(PARAM_NAMES)}) or the bandwidth of "
                           f"every fabric link of a kind ({', '.join(LINK_KINDS)}); repeatable")
    perf.add_argument("--calibration", metavar="FILE",
                      help="DES parameters from a calibration file (nicksim calibrate -o); --set overrides them")
    perf.add_argument("--link-report", action="store_true",
                      help="after the table, the busiest links of the largest size (des): bytes, busy time, rate")
    perf.add_argument("--trace", metavar="FILE",
                      help="write the largest size's run as Chrome trace JSON (des, real; opens in Perfetto)")
    perf.add_argument("--fault", action="append", default=[], metavar="SPEC",
                      help="des: link-down:LINK@TIME or degrade:LINK:FACTOR (LINK as `nicksim topo --links` "
                           "prints it; repeatable)")
    perf.add_argument("--straggler", action="append", default=[], metavar="RANK:DELAY",
                      help="des: this rank's kernels start DELAY late (us, or 5ms, 1s; repeatable)")
    g.add_argument("-T", "--timeout", type=_positive_float("-T"), default=600.0,
                   help="des: the watchdog limit in seconds of simulated time (default 600, PyTorch's)")
    perf.add_argument("-J", "--output-json", dest="json", metavar="FILE", help="write the results as JSON")
    perf.add_argument("--plan", action="store_true",
                      help="append NCCL's choice (algorithm, protocol, channels, threads) to each row")
    perf.add_argument("--print-tuning", action="store_true",
                      help="print NCCL's TUNING table (latency/bandwidth per collective, algorithm, protocol) first")
    perf.add_argument("--compare", metavar="FILE",
                      help="measured nccl-tests output (text, JSON or a case file) to set beside the model")
    perf.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    perf.set_defaults(run=_run_perf)


def _add_sweep_parser(sub) -> None:
    sw = sub.add_parser("sweep", help="run a grid of what-ifs (GRID.toml) into one CSV or JSON table")
    sw.add_argument("grid", metavar="GRID.toml", help="a [sweep] table of options, each a value or a list")
    sw.add_argument("-o", "--output", metavar="FILE", help="write the table here (.json for JSON, else CSV); "
                                                          "default: CSV on stdout")
    sw.add_argument("-j", "--workers", type=_int_at_least("--workers", 1), default=os.cpu_count() or 1,
                    help="local worker processes (default: one per CPU)")
    sw.add_argument("--dask", metavar="tcp://HOST:PORT", help="run the points on this Dask scheduler instead")
    sw.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    sw.set_defaults(run=_run_sweep)


def _run_sweep(args, params: Params) -> int:
    from .sweep import read_grid, rows_csv, run_sweep
    try:
        text = Path(args.grid).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read: {exc.strerror}", args.grid, "a readable GRID.toml") from None
    points = read_grid(text, args.grid)
    tty = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        width = 30
        bar = "#" * (width * done // total) + "-" * (width - width * done // total)
        end = "\n" if done == total or not tty else ""
        print(f"{chr(13) if tty else ''}nicksim sweep [{bar}] {done}/{total} points", end=end, file=sys.stderr,
              flush=True)

    rows = run_sweep(points, args.workers, args.dask, progress)
    if args.output and args.output.endswith(".json"):
        _write_json(args.output, {"grid": args.grid, "rows": rows})
    elif args.output:
        try:
            Path(args.output).write_text(rows_csv(rows), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write: {exc.strerror}", args.output, "a writable file path") from None
    else:
        print(rows_csv(rows), end="")
    failed = sum(1 for row in rows if row.get("error"))
    if failed:
        _warn([f"{failed} of {len(rows)} rows have an error (see the error column)"])
    return 0


def _add_validate_parser(sub) -> None:
    va = sub.add_parser("validate", help="compare an engine with real nccl-tests runs (validation cases)")
    va.add_argument("cases", nargs="?", metavar="DIR",
                    help="a folder of case files (*.toml) or one case file (default: the project's validation/)")
    va.add_argument("--engine", action="append", choices=["model", "des"],
                    help="the engine to validate (repeatable; default model)")
    va.add_argument("--calibration", metavar="FILE",
                    help="DES parameters to use: a TOML [set] table of --set names (nicksim calibrate -o)")
    va.add_argument("-J", "--output-json", metavar="FILE", help="write every case's points and errors as JSON")
    va.add_argument("--plots", metavar="DIR", help="write one PNG per case here: measured and predicted busbw")
    va.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    va.set_defaults(run=_run_validate)


def _run_validate(args, params: Params) -> int:
    from .validate import (default_dir, find_cases, format_report, plot_case, read_calibration, report_json,
                           run_case)
    cases = find_cases(args.cases or default_dir())
    engines = list(dict.fromkeys(args.engine or ["model"]))
    calibration = read_calibration(args.calibration) if args.calibration else None
    if calibration is not None and "des" not in engines:
        raise UsageError("a calibration sets DES parameters", "--calibration", "with --engine des")
    if args.plots:
        try:
            Path(args.plots).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot make the folder: {exc.strerror}", args.plots, "a writable folder") from None
    by_engine = {engine: [run_case(case, engine, calibration) for case in cases] for engine in engines}
    for i, (engine, results) in enumerate(by_engine.items()):
        if i:
            print()
        print("\n".join(format_report(results, engine)))
    if args.output_json:
        _write_json(args.output_json, {"engines": [report_json(results, engine) for engine, results in by_engine.items()]})
    if args.plots:
        for k, case in enumerate(cases):
            plot_case([results[k] for results in by_engine.values()], Path(args.plots) / f"{case.name}.png")
    return 0


def _add_calibrate_parser(sub) -> None:
    from .calibrate import DEFAULT_VALUES, FIT_NAMES
    ca = sub.add_parser("calibrate", help="fit a DES parameter to measured runs (validation cases), with "
                                          "its error on sources left out")
    ca.add_argument("cases", nargs="?", metavar="DIR",
                    help="a folder of case files (*.toml) or one case file (default: the project's validation/)")
    ca.add_argument("--fit", default="step_lat.scale", choices=list(FIT_NAMES), help="the parameter to fit")
    ca.add_argument("--values", type=_values(), default=DEFAULT_VALUES, metavar="V,V,...",
                    help="the candidate values (default: " + ",".join(f"{v:g}" for v in DEFAULT_VALUES) + ")")
    ca.add_argument("-j", "--jobs", type=_int_at_least("-j", 1), default=None,
                    help="processes running the DES (default: the CPUs, at most 8)")
    ca.add_argument("-o", "--output", metavar="FILE", help="write the calibration file ([set], for --calibration)")
    ca.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    ca.set_defaults(run=_run_calibrate)


def _values():
    def parse(text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not numbers separated by commas") from None
        if not values or any(not v > 0 for v in values):
            raise argparse.ArgumentTypeError(f"'{text}': every value must be above 0")
        return values
    return parse


def _run_calibrate(args, params: Params) -> int:
    from .calibrate import calibration_text, default_jobs, fit, format_fit
    from .validate import default_dir, find_cases
    cases = find_cases(args.cases or default_dir())
    result = fit(cases, args.fit, args.values, args.jobs or default_jobs())
    print("\n".join(format_fit(result)))
    if args.output:
        try:
            Path(args.output).write_text(calibration_text(result), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write: {exc.strerror}", args.output, "a writable file") from None
    return 0


def _add_alphabeta_parser(sub) -> None:
    ab = sub.add_parser("alphabeta", help="the alpha-beta model: ring vs double binary tree allreduce, crossover")
    ab.add_argument("--p", type=int, help="ranks (with --bw and --lat; default: the three built-in scenarios)")
    ab.add_argument("--bw", type=float, help="link bandwidth, GB/s")
    ab.add_argument("--lat", type=float, help="latency per step, us")
    ab.add_argument("-b", "--minbytes", type=_size("-b"), default=8, help="smallest size (default 8)")
    ab.add_argument("-e", "--maxbytes", type=_size("-e"), default=8 << 30, help="largest size (default 8G)")
    ab.add_argument("-f", "--stepfactor", type=_int_at_least("-f", 2), default=2, help="size factor (default 2)")
    ab.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    ab.set_defaults(run=_run_alphabeta)


def _warn(lines: Sequence[str]) -> None:
    for line in lines:
        print(f"nicksim: {line}", file=sys.stderr)


def _job_spec(args) -> JobSpec:
    if args.system and args.system_opt and args.system != args.system_opt:
        raise UsageError(f"two systems given ('{args.system}' and '{args.system_opt}')", "SYSTEM / --system",
                         "one of them")
    return JobSpec(system=args.system or args.system_opt, nodes=args.nodes, nccl_version=args.nccl_version,
                   gpu=args.gpu, gpus_per_node=args.gpus_per_node, fabric=args.fabric,
                   nics_per_node=args.nics_per_node, nic_gbps=args.nic_gbps, oversubscription=args.oversubscription,
                   hosts_per_leaf=args.hosts_per_leaf, rail_optimized=args.rail, switch_lat_us=args.switch_lat_us,
                   sharp=args.sharp, rank=getattr(args, "rank", 0))


def _load(args, params: Params, searched: bool = True) -> Job:
    """The job the SYSTEM options describe, with the topology's notes said on stderr (and, for the
    commands that search, why CollNet is off where it was asked for)."""
    job = load_job(_job_spec(args), params)
    _warn(job.params.notes)
    _warn(job.system.notes)
    _warn(job.paths.notes)
    _warn(_collnet_notes(job, params, searched))
    return job


def _collnet_notes(job: Job, params: Params, searched: bool) -> list[str]:
    wanted = params.get("NCCL_COLLNET_ENABLE") == 1
    if job.spec.sharp and not wanted:
        return ["--sharp: the CollNet plugin serves every NIC, but NCCL uses it only with NCCL_COLLNET_ENABLE=1"]
    if wanted and not job.spec.sharp:
        return ["NCCL_COLLNET_ENABLE=1: no CollNet plugin serves these NICs (--sharp adds one), so CollNet stays off"]
    if not (wanted and searched) or job.collnet.enabled:
        return []
    threshold = params.get("NCCL_COLLNET_NODE_THRESHOLD")
    if job.nodes < threshold:  # init.cc's own words
        return [f"NCCL INFO Communicator has {job.nodes} nodes which is less than CollNet node threshold "
                f"{threshold}, disabling CollNet"]
    return ["CollNet stays off: the CollNet chain graph found no channel"]


def _run_search(args, params: Params) -> int:
    job = _load(args, params)
    paths, graphs = job.paths, job.graphs
    logger = _job_logger(job, params)  # NCCL_DEBUG: what the job's ranks would log during init
    logger.init()
    logger.sink.close()
    # A note that applies to every graph (e.g. an unchecked release) is said once.
    _warn(list(dict.fromkeys(note for graph in graphs.values() for note in graph.notes)))
    for graph in graphs.values():
        print("\n".join(format_graph(paths, graph)))
    if len(paths.system.gpus()) == len(paths.node_system.gpus()):
        channels = job.channels
        per_node = len(paths.node_system.gpus())
        heads = nvls_heads(graphs, args.nodes, per_node)
        print("\n".join(format_nvls_heads(heads, args.nodes, args.rank // per_node)
                        + format_channels(channels, paths.system.rules.version.minor)))
        tables = tuning_tables(paths.system.rules.version)
        subsystems = debug_config(params, tables.version.minor).subsystems  # NCCL_DEBUG_SUBSYS, as debug.cc reads it
        if (args.print_tuning or "TUNING" in subsystems) and args.rank == 0:
            print("\n".join(format_tuning_table(job.comm.table)))
        print(f"P2P Chunksize set to {p2p_chunk_nbytes(paths, args.nodes, params)}")
        print(format_thread_thresholds(thread_thresholds(tables, channels.nranks, params)))
        p2p = p2p_channels(paths, channels.n_channels, args.nodes, params, args.rank)
        print(format_channel_counts(tables.version.minor, channels.n_channels, channels.nvls_channels, p2p,
                                    job.collnet.enabled))
        # Connections as NCCL sets them up eagerly (NCCL_RUNTIME_CONNECT=0): rings, then trees.
        print("\n".join(connection_lines(paths, graphs["ring"], ring_links(channels), args.rank, args.nodes)
                        + ["Connected all rings"]
                        + connection_lines(paths, graphs["tree"], tree_links(channels), args.rank, args.nodes)
                        + ["Connected all trees"]))
    else:
        _warn([f"rank {args.rank} sees {len(paths.system.gpus())} of the node's {len(paths.node_system.gpus())} "
               "GPUs (NCCL splits the node into domains); channels across such domains are not modelled yet"])
    _dump_files(job, params, graph_file=args.dump_graph)
    return 0


def _dump_files(job: Job, params: Params, topo_file: str | None = None, graph_file: str | None = None) -> None:
    """What rank 0 of NCCL writes during init: the topology (NCCL_TOPO_DUMP_FILE, after detection
    and fill-in) and the searched graphs (NCCL_GRAPH_DUMP_FILE); the command's own flags win."""
    topo = topo_file or params.get("NCCL_TOPO_DUMP_FILE")
    if topo:
        write_topo_xml(job.filled.doc, topo)
    dump = graph_file or params.get("NCCL_GRAPH_DUMP_FILE")
    if dump:
        try:
            Path(dump).write_text(graphs_xml(job.paths, job.graphs), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write: {exc.strerror}", dump, "a writable file path") from None


def _run_real(args, params: Params, spec: JobSpec | None = None) -> int:
    """nicksim run (the host planned as a CPU-only node per host), or perf --engine real (`spec`'s
    job planned, every rank a process here)."""
    from .realhw.cuda_kernels import gpu_unavailable
    from .realhw.launch import rank_env, root_address
    from .realhw.verbs import verbs_unavailable
    from .realhw.runner import (HOST_SYSTEM, MAX_RANKS_PER_HOST, MAX_SPAWNED_RANKS, RunOptions, check_job_runnable,
                                 run_device, run_rank, spawn)
    collective = collective_name(args.collective)
    dtype, redop = dtype_name(args.datatype), redop_name(args.op)
    env = rank_env(os.environ)
    nranks = getattr(args, "nranks", None)
    version = spec.nccl_version if spec is not None else args.nccl_version
    sizes = tuple(sweep_sizes(args.minbytes, args.maxbytes, args.stepfactor or 2, args.stepbytes))
    options = RunOptions(collective, sizes, dtype, redop, args.root, args.iters, args.warmup_iters, args.check,
                         version, bool(args.trace), spec)
    if env is None:
        run_device(params)  # a device that cannot be used is said once, before any rank starts
    if env is None and spec is not None:  # perf --engine real: a process per rank of the job
        job = load_job(spec, params)
        if job.nranks > MAX_SPAWNED_RANKS:
            raise UsageError(f"the job has {job.nranks} ranks, each a process on this host", "--engine real",
                             f"a job of at most {MAX_SPAWNED_RANKS} ranks (--nodes, --gpus-per-node)")
        check_job_runnable(job, options)
        _dump_files(job, params)  # rank 0's files, written once for the job
        return spawn(args.argv, job.nranks, os.environ, float(params.get("NICKSIM_TIMEOUT")))
    if env is None:  # no launcher: start the ranks here, each of them joining as under one
        if args.nranks is None:
            raise UsageError("no launcher started this process and -np is not given", "nicksim run",
                             "-np N, or run under torchrun, mpirun or srun")
        if args.nranks > MAX_RANKS_PER_HOST:
            raise UsageError(f"-np {args.nranks} ranks on this host", "-np", f"at most {MAX_RANKS_PER_HOST}: a host "
                             f"is planned as {HOST_SYSTEM}, whose GPUs join by shared memory")
        return spawn(args.argv, args.nranks, os.environ, float(params.get("NICKSIM_TIMEOUT")))
    root = root_address(params, os.environ)
    if root is None:
        raise UsageError(f"rank {env.rank} of {env.size} ({env.launcher}) has no root to join", "nicksim run",
                         "NICKSIM_COMM_ID=host:port, or MASTER_ADDR and MASTER_PORT")
    if nranks is not None and nranks != env.size:
        raise UsageError(f"-np {nranks} under {env.launcher}, which started {env.size} ranks", "-np",
                         f"{env.size}, or leave -np out")
    step = f"{args.stepbytes}(bytes)" if args.stepbytes is not None else f"{args.stepfactor or 2}(factor)"

    def joined(layout: str):  # nccl-tests prints its header once every rank is up, then each row as it completes
        print(f"# nicksim {'run' if spec is None else 'perf'} {collective}: {layout}, NCCL {version} plans")
        unused = [] if str(params.get("NICKSIM_DEVICE")).strip().lower() == "gpu" else \
            [f"GPU kernels and CUDA IPC ({gpu_unavailable()})"]
        no_verbs = verbs_unavailable(params.get("NCCL_IB_HCA"), int(params.get("NCCL_IB_DISABLE")))
        if no_verbs:
            unused.append(f"IB verbs ({no_verbs})")
        if unused:
            print(f"# not used here: {'; '.join(unused)}")
        print(f"# nThread 1 nGpus 1 minBytes {args.minbytes} maxBytes {args.maxbytes} step: {step} warmup iters: "
              f"{args.warmup_iters} iters: {args.iters} agg iters: 1 validation: {args.check} graph: 0")
        print("\n".join(table_header()), flush=True)

    printed = []

    def row_done(row):
        print(format_row(row, index=len(printed)), flush=True)
        printed.append(row)

    def traced(row, spans):
        other = {"bytes": row.nbytes, "collective": collective, "nranks": env.size, **row.plan,
                 "time_us": row.out_of_place.time_us}
        _write_json(args.trace, real_trace(spans, other))

    rows = run_rank(env, root, options, params, joined, row_done, traced if args.trace else None)
    if env.rank == 0:
        print("\n".join(table_footer(collective, rows, threads=1)), flush=True)
        if args.json:
            run = {"engine": "real", "system": HOST_SYSTEM if spec is None else spec.system, "nranks": env.size,
                   "nccl_version": version}
            Path(args.json).write_text(json.dumps(results_json(collective, rows, run), indent=1) + "\n")
    return 0


def _run_perf(args, params: Params) -> int:
    if args.engine == "real":
        _check_des_flags(args)
        for flag, given in (("--plan", args.plan), ("--print-tuning", args.print_tuning), ("--compare", args.compare)):
            if given:
                raise UsageError(f"{flag} is for the model and DES engines", flag, "--engine model or des")
        return _run_real(args, params, _job_spec(args))
    collective = collective_name(args.collective)
    dtype, redop = dtype_name(args.datatype), redop_name(args.op)
    sizes = sweep_sizes(args.minbytes, args.maxbytes, args.stepfactor or 2, args.stepbytes)
    job = _load(args, params)
    if args.nthreads or args.ngpus:
        per_process = (args.nthreads or 1) * (args.ngpus or 1)
        _warn([f"-t/-g describe nccl-tests' processes ({per_process} GPU(s) each); the job has {job.nranks} ranks "
               "from the system options (--nodes, --gpus-per-node)"])
    measured = measured_table(args.compare, collective, job.nranks) if args.compare else None
    _check_des_flags(args)
    des = _des_setup(job, args) if args.engine == "des" else None
    pairs = perf_rows(job, collective, sizes, dtype, redop, args.root, args.engine, des)
    hang_run = pairs.pop()[1].detail if pairs and pairs[-1][0] is None else None
    hang = hang_run.hang if hang_run is not None else None
    rows = [row for row, _ in pairs]
    if args.check == 0 or args.engine == "model":
        rows = [_unchecked(row) for row in rows]
    step = f"{args.stepbytes}(bytes)" if args.stepbytes is not None else f"{args.stepfactor or 2}(factor)"
    print(f"# nicksim perf {collective}: engine {args.engine}, {job.system_name}, "
          f"{job.nranks} ranks ({job.nodes} node{'s' if job.nodes > 1 else ''} x "
          f"{len(job.paths.node_system.gpus())} GPUs), NCCL {job.system.rules.version.line}")
    print(f"# nThread 1 nGpus 1 minBytes {args.minbytes} maxBytes {args.maxbytes} step: {step} warmup iters: "
          f"{args.warmup_iters} iters: {args.iters} agg iters: 1 validation: {args.check} graph: 0")
    if args.print_tuning and collective in _PRICED:
        print("\n".join(format_tuning_table(job.comm.table)))
    table = format_table(collective, rows)
    algo_index = {name: i for i, name in enumerate(job.comm.table.algorithms)} if collective in _PRICED else {}

    def decision(result) -> str | None:
        # enqueue.cc (2.22): rank 0 logs each decision under NCCL_DEBUG_SUBSYS=TUNING.
        if result.estimate != "nccl" or result.algorithm not in algo_index:
            return None
        return (f"{result.call.nbytes} Bytes -> Algo {algo_index[result.algorithm]} proto "
                f"{PROTOCOLS.index(result.protocol)} time {result.time_us:f}")

    logger = _job_logger(job, params)
    logger.init()
    _dump_files(job, params)
    _log_warmup(logger, job, collective, dtype, redop, args)
    body_start = 4
    for i, line in enumerate(table):
        k = i - body_start
        if 0 <= k < len(pairs):
            row, result = pairs[k]
            calls = 1 + args.iters * (args.agg_iters or 1) + (1 if args.check else 0)  # BenchTime's calls
            for in_place in (False, True):
                for _ in range(calls):
                    logger.call(result.call, result.algorithm, in_place, decision(result))
            if args.plan:
                line += (f"  # {result.algorithm}/{result.protocol} {result.n_channels}ch {result.n_threads}t"
                         + ("" if result.estimate == "nccl" else f" ({result.estimate})"))
        print(line)
    apart = [result for _, result in pairs if result.detail is not None and not getattr(result.detail, "exact", True)]
    if apart:
        print(f"# des: on {len(apart)} size(s) each channel's nodes were collapsed on their own (docs/des.md: close "
              "to, not exactly, the full simulation); --set des.exact_nodes=N simulates up to N node classes exactly")
    if hang is not None:
        print("\n".join(f"# {line}" for line in hang.lines()))
    last = pairs[-1][1].detail if pairs and pairs[-1][1].detail is not None else None
    if hang is not None:
        last = hang_run
    if args.link_report and last is not None:
        print("\n".join(format_link_report(last)))
    if args.trace and last is not None:
        _write_json(args.trace, chrome_trace(last))
    if measured is not None:
        print("\n".join(format_comparison(compare(rows, measured), args.engine)))
    if args.json:
        run = {"engine": args.engine, "system": job.system_name, "nranks": job.nranks,
               "nccl_version": job.system.rules.version.line}
        _write_json(args.json, results_json(collective, rows, run))
    logger.destroy()
    logger.sink.close()
    return 1 if hang is not None else 0


def _job_logger(job: Job, params: Params) -> JobLogger:
    """The NCCL_DEBUG output of a simulated job: the ranks NICKSIM_DEBUG_RANKS names (all by default)."""
    config = debug_config(params, job.system.rules.version.minor)
    _warn(config.warnings)
    return JobLogger(job, LogSink(config), debug_ranks(params, job.nranks))


def _log_warmup(logger: JobLogger, job: Job, collective: str, dtype: str, redop: str, args) -> None:
    """nccl-tests' warm-up (common.cu): warmup_iters calls of every size from -b to -e by factors of 2."""
    if not logger.active:
        return
    size = max(args.minbytes, 1)
    while size <= args.maxbytes:
        call = call_for_size(collective, size, dtype, redop, args.root, job.nranks)
        algorithm = engine_result(job, call, "model").algorithm
        for _ in range(args.warmup_iters):
            logger.call(call, algorithm)
        size *= 2


def _des_setup(job: Job, args):
    from .model.engine import des_setup  # SimPy loads only for the DES
    return des_setup(job, _des_params(job, args), args.fault, args.straggler, args.timeout * 1e6, bool(args.trace))


def _check_des_flags(args) -> None:
    if args.engine == "des":
        return
    for flag, given in (("--set", args.sets), ("--calibration", args.calibration),
                        ("--link-report", args.link_report), ("--trace", args.trace if args.engine != "real" else None),
                        ("--fault", args.fault), ("--straggler", args.straggler)):
        if given:
            raise UsageError(f"{flag} needs the DES engine", flag, "--engine des")


def _des_params(job: Job, args):
    """The DES parameter set for the job, with the calibration file's values and then --set applied."""
    from .model.engine import default_params
    from .model.hwparams import with_overrides
    from .validate import read_calibration
    values = read_calibration(args.calibration) if args.calibration else {}
    for item in args.sets:
        key, sep, text = item.partition("=")
        try:
            values[key.strip()] = float(text)
        except ValueError:
            raise UsageError(f"'{item}' is not KEY=NUMBER", "--set", ", ".join(SET_NAMES)) from None
        if not sep:
            raise UsageError(f"'{item}' is not KEY=NUMBER", "--set", ", ".join(SET_NAMES))
    return with_overrides(default_params(job), values)


_PRICED = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")


def _unchecked(row):
    """The model moves no data, so like nccl-tests with -c 0 it cannot count wrong elements."""
    return replace(row, out_of_place=replace(row.out_of_place, nwrong=None),
                   in_place=replace(row.in_place, nwrong=None) if row.in_place else None)


def _add_hang_parser(sub) -> None:
    hang = sub.add_parser("hang", help="hangs: replay the classic ones on the DES, diagnose real logs")
    verbs = hang.add_subparsers(dest="hang_command", metavar="list|replay|diagnose", parser_class=_Parser)
    verbs.required = True
    ls = verbs.add_parser("list", help="the scenarios replay knows")
    ls.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    ls.set_defaults(run=_run_hang_list)
    rp = verbs.add_parser("replay", help="run a scenario on the DES, write what its people would have seen, "
                                         "and diagnose it")
    rp.add_argument("name", metavar="NAME", help="a scenario (nicksim hang list)")
    rp.add_argument("--out", metavar="DIR", help="keep the logs, Flight Recorder dumps and trace here")
    rp.add_argument("--json", metavar="FILE", help="write the diagnosis as JSON")
    rp.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="an NCCL_DEBUG*, TORCH_NCCL_* or NICKSIM_PG_TIMEOUT setting for the replayed job (repeatable)")
    rp.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    rp.set_defaults(run=_run_hang_replay)
    di = verbs.add_parser("diagnose", help="say what went wrong, on which rank, in which collective, from log files")
    di.add_argument("files", nargs="+", metavar="FILE", help="logs of all ranks or some: any mix, in any order")
    di.add_argument("--json", metavar="FILE", help="write the diagnosis as JSON")
    _add_system_options(di, positional=False)
    di.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    di.set_defaults(run=_run_hang_diagnose)


def _run_hang_list(args, params: Params) -> int:
    from .scenarios import SCENARIOS
    width = max(len(name) for name in SCENARIOS)
    for name, scenario in SCENARIOS.items():
        print(f"{name:<{width}}  {scenario.title} ({scenario.nranks} ranks on {scenario.system}; diagnosed as "
              f"{scenario.expect})")
    return 0


def _run_hang_replay(args, params: Params) -> int:
    import tempfile
    from .forensics import format_diagnosis
    from .scenarios import replay, scenario_named
    from .scenarios.replay import TorchSettings
    scenario = scenario_named(args.name)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or tmp
        try:
            debug = debug_config(params) if params.get("NCCL_DEBUG") else None  # else the scenario's INFO
            done = replay(scenario, out, debug, TorchSettings.from_params(params))
        except OSError as exc:
            raise UsageError(f"cannot write: {exc.strerror}", args.out or out, "a writable folder") from None
        print(f"# {scenario.name}: {scenario.title}")
        print(f"# {scenario.story}")
        print("\n".join(f"# {line}" for line in done.hang_lines))
        if args.out:
            print(f"# wrote {len(done.files)} file(s) to {args.out}: " + ", ".join(Path(f).name for f in done.files[:6])
                  + (" ..." if len(done.files) > 6 else ""))
        print("\n".join(format_diagnosis(done.diagnosis)))
    if args.json:
        _write_json(args.json, {"scenario": scenario.name, **done.diagnosis.to_json()})
    return 0


def _run_hang_diagnose(args, params: Params) -> int:
    from .forensics import diagnose, format_diagnosis, read_evidence, with_waits
    evidence = read_evidence(args.files)
    found = diagnose(evidence)
    if args.system_opt:  # the system is known: where each blocked rank waits, by the recomputed plan
        found = with_waits(found, evidence, _load(args, params))
    print("\n".join(format_diagnosis(found)))
    if args.json:
        _write_json(args.json, found.to_json())
    return 0


def _write_json(path: str, doc: dict) -> None:
    try:
        Path(path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write: {exc.strerror}", path, "a writable file path") from None


def _run_alphabeta(args, params: Params) -> int:
    sizes = sweep_sizes(args.minbytes, args.maxbytes, args.stepfactor)
    given = [v is not None for v in (args.p, args.bw, args.lat)]
    if any(given) and not all(given):
        raise UsageError("--p, --bw and --lat go together", "alphabeta", "all three, or none for the scenarios")
    if all(given):
        tables = [alphabeta_table(args.p, args.bw, args.lat, sizes)]
    else:
        tables = list(scenario_tables(sizes).values())
    for i, table in enumerate(tables):
        if i:
            print()
        print("\n".join(format_alphabeta(table)))
    return 0


def _run_topo(args, params: Params) -> int:
    job = _load(args, params, searched=False)
    paths, cluster = job.paths, job.cluster
    dump = args.dump_xml or params.get("NCCL_TOPO_DUMP_FILE")
    if dump:
        write_topo_xml(job.filled.doc, dump)
    # NCCL prints the system as the rank sees it, after trimming it to the rank's domain.
    print("\n".join(format_system(paths.system, paths.max_bw, paths.total_bw)))
    if args.nodes > 1:
        print("\n".join(format_cluster(cluster)))
    if args.paths:
        print("\n".join(format_nccl_paths(paths)))
        print("\n".join(format_paths(paths)))
    if args.links:
        print("\n".join(format_fabric(build_fabric(cluster))))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = argv  # `nicksim run -np N` starts its ranks with the same command line
        params = read_params(os.environ, getattr(args, "env", []))
        _warn(params.warnings)
        return args.run(args, params)
    except NickSimError as exc:
        if debug:
            traceback.print_exc()
        print(f"nicksim: error: {exc.line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nicksim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug in nicksim, not bad input
        if debug:
            traceback.print_exc()
        else:
            print(f"nicksim: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
                  file=sys.stderr)
        return 70


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
