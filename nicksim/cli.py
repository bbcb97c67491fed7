"""The `nicksim` command line: it parses, prints and calls nicksim.api, nothing else.

Every failure a user can cause ends in one line on stderr — what, where, what would be valid
— and exit status 2; `--debug` shows the traceback instead. The environment is read here, once,
through api.settings, and passed down.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from . import api

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit status 2. A command's parser is made with `fill`, which
    adds its arguments the first time the command is parsed or its help shown: a command builds (and
    imports what builds) its own arguments, not every other command's."""

    def __init__(self, *args, fill: Callable[[argparse.ArgumentParser], None] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._fill = fill

    def _filled(self) -> None:
        fill, self._fill = self._fill, None
        if fill is not None:
            fill(self)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self._filled()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._filled()
        return super().format_usage()

    def format_help(self) -> str:
        self._filled()
        return super().format_help()

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Version(argparse._VersionAction):
    """--version: the installed version, looked up when it is asked for."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        self.version = f"nicksim {api.VERSION}"
        super().__call__(parser, namespace, values, option_string)


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
    what = (f"catalog name ({', '.join(api.SYSTEMS)}), {api.LOCAL_SYSTEM} (this host, detected through NVML "
            f"and sysfs) or an NCCL topology .xml file; "
            f"default: NCCL_TOPO_FILE if set, else {api.DEFAULT_SYSTEM}")
    if positional:
        g.add_argument("system", nargs="?", metavar="SYSTEM", help=what)
    else:
        p.set_defaults(system=None)
    g.add_argument("--system", dest="system_opt", metavar="NAME|FILE", help="same as SYSTEM" if positional else what)
    g.add_argument("--gpu", metavar="MODEL", help=f"complete partial files with this GPU ({', '.join(api.GPU_MODELS)})")
    g.add_argument("--nodes", type=_int_at_least("--nodes", 1), default=1, help="number of nodes (default 1)")
    g.add_argument("--gpus-per-node", type=_int_at_least("--gpus-per-node", 1), help="use the first G GPUs of each node")
    g.add_argument("--fabric", metavar="NAME", help=f"inter-node network: {', '.join(api.FABRICS)}")
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
    g.add_argument("--nccl-version", default=api.DEFAULT_NCCL_VERSION, metavar="V",
                   help=f"NCCL release line to model ({api.NCCL_VERSIONS[0]} .. {api.DEFAULT_NCCL_VERSION}; "
                        f"default {api.DEFAULT_NCCL_VERSION})")
    g.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="an NCCL_*/NICKSIM_* setting (repeatable; wins over the environment)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nicksim", description="NCCL's decisions, reproduced and simulated.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    sub.add_parser("topo", help="print the system as NCCL's GRAPH subsystem does", fill=_topo_arguments)
    sub.add_parser("search", help="run NCCL's graph search and print its Pattern/channel lines",
                   fill=_search_arguments)
    _add_perf_parser(sub)
    _add_run_parser(sub)
    _add_sweep_parser(sub)
    _add_validate_parser(sub)
    _add_calibrate_parser(sub)
    _add_alphabeta_parser(sub)
    _add_hang_parser(sub)
    _add_dashboard_parser(sub)
    _add_env_parser(sub)
    return parser


def _topo_arguments(topo) -> None:
    _add_system_options(topo)
    topo.add_argument("--dump-xml", metavar="FILE",
                      help="write the completed topology XML as NCCL_TOPO_DUMP_FILE does (nothing before <system>); "
                           "where it came from (the source file's comments, what completing it assumed) goes to "
                           f"FILE{api.PROVENANCE_SUFFIX}")
    topo.add_argument("--paths", action="store_true", help="print path types, bandwidths and transports")
    topo.add_argument("--links", action="store_true",
                      help="list every directed link of the job's fabric as the DES names them (for --fault)")
    topo.add_argument("--rank", type=_int_at_least("--rank", 0), default=0,
                      help="print the system as this rank sees it (NCCL trims it to the rank's domain; default 0)")
    topo.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    topo.set_defaults(run=_run_topo)


def _search_arguments(search) -> None:
    _add_system_options(search)
    search.add_argument("--rank", type=_int_at_least("--rank", 0), default=0,
                        help="the rank whose channels and trees to print (default 0)")
    search.add_argument("--dump-graph", metavar="FILE",
                        help="write the graphs as NCCL_GRAPH_DUMP_FILE does (also read from that variable)")
    search.add_argument("--print-tuning", action="store_true",
                        help="print NCCL's TUNING table (as NCCL_DEBUG_SUBSYS=TUNING does)")
    search.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    search.set_defaults(run=_run_search)


def _add_env_parser(sub) -> None:
    sub.add_parser("env", help="every NCCL_* knob nicksim reads: value and source, default, releases, and its "
                               "effect in each engine", fill=_env_arguments)


def _env_arguments(env) -> None:
    env.add_argument("names", nargs="*", metavar="NAME", help="only these knobs (a prefix works: NCCL_IB)")
    env.add_argument("--system", dest="system_opt", metavar="NAME|FILE.xml",
                     help="say which knobs this system's job reads, with its release's defaults")
    env.add_argument("--nccl-version", default=api.DEFAULT_NCCL_VERSION, metavar="V",
                     help=f"the release whose defaults and knobs to show (default {api.DEFAULT_NCCL_VERSION})")
    env.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="a setting, as elsewhere")
    env.add_argument("--set-only", action="store_true", help="only the knobs that are set")
    env.add_argument("--json", metavar="FILE", help="write the table as JSON")
    env.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    env.set_defaults(run=_run_env)


def _size(name: str):
    """api.parse_size as an argparse type."""
    def parse(text: str) -> int:
        try:
            return api.parse_size(text, name)
        except api.NickSimError as exc:
            raise argparse.ArgumentTypeError(exc.line()) from None
    return parse


def _add_nccl_tests_flags(parser, check_help: str):
    """nccl-tests' own flags (src/common.cu's getopt, README.md), with its long names and defaults
    where nicksim keeps them; each help says what the flag does here, and "no effect" where it
    changes nothing nicksim prints or prices. The group, for a command's flags of its own."""
    g = parser.add_argument_group("nccl-tests flags")
    g.add_argument("-b", "--minbytes", type=_size("-b"), default=8, help="smallest size (default 8)")
    g.add_argument("-e", "--maxbytes", type=_size("-e"), default=8 << 30,
                   help="largest size (default 8G); lowered as nccl-tests lowers it where the GPUs' memory "
                        "cannot hold its buffers (# Reducing maxBytes)")
    step = g.add_mutually_exclusive_group()
    step.add_argument("-f", "--stepfactor", type=_int_at_least("-f", 2), help="multiply the size by this (default 2)")
    step.add_argument("-i", "--stepbytes", type=_size("-i"), help="add this many bytes per step")
    g.add_argument("-n", "--iters", type=_int_at_least("-n", 1), default=20, help="timed iterations (default 20)")
    g.add_argument("-w", "--warmup_iters", type=_int_at_least("-w", 0), default=1, help="warm-up iterations")
    g.add_argument("-c", "--check", type=_int_at_least("-c", 0), default=1, help=check_help)
    g.add_argument("-d", "--datatype", default="float",
                   help="data type, or all: every type in nccl-tests' order (default float)")
    g.add_argument("-o", "--op", default="sum", help="reduction, or all: every reduction (default sum)")
    g.add_argument("-r", "--root", type=_root, default=0,
                   help="root rank, or all (also -1, what nccl-tests' parser takes): every rank in turn "
                        "(default 0)")
    g.add_argument("-z", "--blocking", type=_int_in("-z", 0, 3), default=0,
                   help="blocking mode 0-3: printed as nccl-tests prints it; no effect on the times")
    g.add_argument("-t", "--nthreads", type=_int_at_least("-t", 1), default=None,
                   help="threads per process: with -g, how nccl-tests' processes hold the ranks (nThread, the "
                        "device lines' pids, JSON); the ranks come from the system options (default 1)")
    g.add_argument("-g", "--ngpus", type=_int_at_least("-g", 1), default=None, help="GPUs per thread (default 1)")
    g.add_argument("-N", "--run_cycles", type=_int_at_least("-N", 1), default=None,
                   help="print the sizes this many times (each cycle is priced alike; 0, forever, is refused)")
    g.add_argument("-m", "--agg_iters", type=_int_at_least("-m", 1), default=None,
                   help="operations aggregated per iteration: printed; no effect (each call is priced alone)")
    g.add_argument("-G", "--cudagraph", type=_int_at_least("-G", 0), default=None,
                   help="CUDA graph launches: printed (graph: N); no effect (launches are priced without graphs)")
    g.add_argument("-p", "--parallel_init", type=_int_in("-p", 0, 1), default=None,
                   help="printed as nccl-tests prints it; no effect")
    g.add_argument("-u", "--unalign", type=_int_at_least("-u", 0), default=None,
                   help="misalignment in elements: printed (unalign: N); no effect (alignment is not modelled)")
    g.add_argument("-I", "--per_iter_timing", type=_int_in("-I", 0, 1), default=None,
                   help="per-iteration columns i_min i_max i_p99 i_cv%% (every priced iteration takes the same "
                        "time)")
    g.add_argument("-K", "--per_iter_skip", type=_int_at_least("-K", 0), default=None,
                   help="leading iterations -I's summary leaves out (0 .. -n minus 1)")
    g.add_argument("-S", "--report_timestamps", type=_int_in("-S", 0, 1), default=None,
                   help="a timestamp (the time each row is printed) at the end of each row")
    g.add_argument("-M", "--memory", type=_int_in("-M", 0, 1), default=None,
                   help="memory report: GPU memory use is not modelled, a note says so where nccl-tests prints it")
    g.add_argument("-C", "--report_cputime", type=_int_in("-C", 0, 1), default=None,
                   help="0 only: the CPU time of launching (-C 1) is not modelled")
    g.add_argument("-D", "--device_implementation", type=_int_at_least("-D", 0), default=None,
                   help="0 only: NCCL's device-API kernels (-D > 0) are not modelled")
    for flag, name, what in (("-a", "--average", "how ranks' times are combined 0-3 (every rank has the same time)"),
                             ("-R", "--local_register", "buffer registration 0-2 (registration is not modelled)"),
                             ("-x", "--cta_policy", "NCCL's CTA policy 0-2 (not modelled)"),
                             ("-V", "--device_cta_count", "CTAs of -D's kernels"),
                             ("-y", "--stream_null", "the default stream 0/1")):
        g.add_argument(flag, name, type=_int_at_least(flag, 0), default=None, help=f"{what}: accepted; no effect")
    g.add_argument("--nccl-tests-version", dest="tests_version", type=_tests_version, default=api.NCCL_TESTS_LATEST,
                   metavar="X.Y.Z", help=f"the nccl-tests release whose text to write (2.13.0 .. "
                                         f"{api.NCCL_TESTS_LATEST}; default {api.NCCL_TESTS_LATEST})")
    return g


def _int_in(name: str, low: int, high: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} '{text}' is not an integer (valid: {low} .. {high})") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} {value} (valid: {low} .. {high})")
        return value
    return parse


def _root(text: str) -> int:
    """-r: a rank, or all / -1 (every rank: README.md documents `all`, common.cu's strtol reads -1)."""
    if text.strip().lower() in ("all", "-1"):
        return -1
    return _int_at_least("-r", 0)(text)


def _tests_version(text: str) -> str:
    try:
        return api.nccl_tests_release(text)
    except api.NickSimError as exc:
        raise argparse.ArgumentTypeError(exc.line()) from None


# The flags given (not None) that change what nicksim does only in the ways its help says.
_TESTS_FLAGS = ("-t nthreads", "-g ngpus", "-N run_cycles", "-m agg_iters", "-G cudagraph", "-p parallel_init",
                "-u unalign", "-I per_iter_timing", "-K per_iter_skip", "-S report_timestamps", "-M memory",
                "-C report_cputime", "-D device_implementation", "-a average", "-R local_register",
                "-x cta_policy", "-V device_cta_count", "-y stream_null", "-T timeout", "-J json")


def _check_tests_flags(args) -> None:
    """Each nccl-tests flag given is one the chosen release takes, and one nicksim can honour: a
    UsageError naming it otherwise (nccl-tests itself warns and goes on for some of these)."""
    version = args.tests_version
    for spec in _TESTS_FLAGS:
        flag, name = spec.split()
        first = api.flag_release(flag)
        given = getattr(args, name, None)
        if flag == "-T" and given == 600.0:  # perf's own default for the DES watchdog
            continue
        if given is not None and first is not None and not api.release_at_least(version, first):
            raise api.UsageError(f"nccl-tests {version} has no {flag} (it came in {first})", flag,
                                 f"--nccl-tests-version {first} or later, or no {flag}")
    if args.report_cputime:
        raise api.UsageError("-C 1 reports the host's time to launch the calls, which nicksim does not model",
                             "-C", "-C 0")
    if args.device_implementation:
        raise api.UsageError(f"-D {args.device_implementation}: NCCL's device-API kernels are not modelled", "-D",
                             "-D 0 (NCCL's own kernels)")
    if args.blocking == 3 and not api.release_at_least(version, "2.19.2"):
        raise api.UsageError(f"nccl-tests {version} has no -z 3 (it came in 2.19.2)", "-z", "0, 1 or 2")
    if args.cudagraph and (args.per_iter_timing or args.blocking == 3):
        flag = "-I 1" if args.per_iter_timing else "-z 3"
        raise api.UsageError(f"{flag} does not go with CUDA graphs (-G {args.cudagraph})", flag.split()[0],
                             "-G 0, or leave it out")
    if args.per_iter_skip and not args.per_iter_timing:
        raise api.UsageError(f"-K {args.per_iter_skip} needs -I 1", "-K", "-I 1 with -K")
    if args.per_iter_skip and args.per_iter_skip >= args.iters:
        raise api.UsageError(f"-K {args.per_iter_skip} skips every one of -n {args.iters} iterations", "-K",
                             f"0 .. {args.iters - 1}")


def _perf_options(args, job, collective: str):
    """PerfOptions from the nccl-tests flags (checked by _check_tests_flags), for `job`."""
    def every(text: str) -> bool:
        return text.strip().lower() == "all"
    dtypes = api.all_dtypes(job, args.tests_version) if every(args.datatype) else ()
    redops = api.ALL_REDOPS if every(args.op) else ()
    roots = tuple(range(job.nranks)) if args.root == -1 else ()
    dtype = "float" if dtypes else api.dtype_name(args.datatype)
    redop = "sum" if redops else api.redop_name(args.op)
    return api.PerfOptions(
        collective, tuple(api.sizes(args.minbytes, args.maxbytes, args.stepfactor or 2, args.stepbytes)), dtype,
        redop, max(args.root, 0), args.iters, args.warmup_iters, args.check, args.agg_iters or 1, args.minbytes,
        args.maxbytes, api.step_text(args.stepfactor, args.stepbytes), args.plan, args.print_tuning,
        tests_version=args.tests_version, step_factor=None if args.stepbytes is not None else args.stepfactor or 2,
        step_nbytes=args.stepbytes, dtypes=dtypes, redops=redops, roots=roots, nthreads=args.nthreads or 1,
        ngpus=args.ngpus or 1, graph=args.cudagraph or 0, unalign=args.unalign or 0, blocking=args.blocking,
        parallel_init=args.parallel_init or 0, per_iter=args.per_iter_timing or 0,
        per_iter_skip=args.per_iter_skip or 0, timestamps=args.report_timestamps or 0, memory_report=args.memory or 0,
        run_cycles=args.run_cycles or 1, json_path=args.json,
        argv=tuple(getattr(args, "argv", ())))


def _add_run_parser(sub) -> None:
    sub.add_parser("run", help="the collective run for real by ranks on this host (shared memory), reported as "
                               "nccl-tests does", fill=_run_arguments)


def _run_arguments(run) -> None:
    run.add_argument("collective", metavar="COLL", help=f"{', '.join(api.COLLECTIVES)} (or the _perf names)")
    run.add_argument("-np", dest="nranks", type=_int_at_least("-np", 1), default=None,
                     help="ranks to start (without a launcher; under torchrun, mpirun or srun the launcher's)")
    run.add_argument("--nccl-version", default=api.DEFAULT_NCCL_VERSION, metavar="V",
                     help=f"the NCCL release whose plans run (default {api.DEFAULT_NCCL_VERSION})")
    run.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="an NCCL_* / NICKSIM_* setting")
    _add_nccl_tests_flags(run, "check every element (#wrong)")
    run.add_argument("-J", "--output_file", "--output-json", dest="json", metavar="FILE",
                     help="write the results as nccl-tests' JSON; a file that is there is never overwritten (FILE.0, "
                          "FILE.1, ... instead)")
    run.add_argument("--trace", metavar="FILE", help="write one more call of the largest size, every pass over "
                     "connection slots per rank, channel and peer, as Chrome trace JSON (opens in Perfetto)")
    run.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    run.set_defaults(run=_run_real)


PERF_EXAMPLES = """examples:
  nicksim perf all_reduce                                  # one DGX H100, 8 B .. 8 GiB, NCCL's time model
  nicksim perf all_reduce -b 1M -e 1G --nodes 16 --engine des
  nicksim perf all_gather --system gb200-nvl72 --nccl-version 2.27 --env NCCL_ALGO=Ring
  nicksim perf reduce_scatter --system topo.xml --nodes 4 --fabric roce --oversubscription 2
  nicksim perf all_reduce --compare measured.log           # against an nccl-tests log, size by size"""


def _add_perf_parser(sub) -> None:
    sub.add_parser("perf", help="an nccl-tests run (all_reduce_perf ...) answered by an engine", epilog=PERF_EXAMPLES,
                   formatter_class=argparse.RawDescriptionHelpFormatter, fill=_perf_arguments)


def _perf_arguments(perf) -> None:
    perf.add_argument("collective", metavar="COLL", help=f"{', '.join(api.COLLECTIVES)} (or the _perf names)")
    _add_system_options(perf, positional=False)
    g = _add_nccl_tests_flags(perf, "check results; the model and the DES move no data, so nothing is checked: they "
                                    "print validation: 0 and #wrong N/A, as nccl-tests -c 0 (default 1)")
    perf.add_argument("--engine", default="nccl", choices=(*api.ENGINES, *api.ENGINE_ALIASES),
                      help="; ".join(f"{name}: {cls.doc}" for name, cls in api.ENGINES.items())
                           + " (model: nccl's former name)")
    perf.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                      help=f"a DES parameter for this run ({', '.join(api.des_parameters()['parameters'])}) or the bandwidth of "
                           f"every fabric link of a kind ({', '.join(api.des_parameters()['link_kinds'])}); repeatable")
    perf.add_argument("--calibration", metavar="FILE",
                      help="a calibration file (nicksim calibrate -o): the DES's parameters ([set]; --set overrides "
                           "them) or NCCL's time model's constants ([nccl])")
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
    perf.add_argument("-J", "--output_file", "--output-json", dest="json", metavar="FILE",
                      help="write the results as nccl-tests' JSON, nicksim's own fields under \"nicksim\"; a file "
                           "that is there is never overwritten (FILE.0, FILE.1, ... instead)")
    perf.add_argument("--plan", action="store_true",
                      help="append NCCL's choice (algorithm, protocol, channels, threads) to each row")
    perf.add_argument("--print-tuning", action="store_true",
                      help="print NCCL's TUNING table (latency/bandwidth per collective, algorithm, protocol) first")
    perf.add_argument("--compare", metavar="FILE",
                      help="measured nccl-tests output (text, JSON or a case file) to set beside the model")
    perf.add_argument("--plot", metavar="FILE",
                      help="draw busbw and time against size to FILE (.png or .svg), each size's algorithm/protocol "
                           "marked, --compare's rows overlaid (needs matplotlib: pip install 'nicksim[plot]')")
    perf.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    perf.set_defaults(run=_run_perf)


def _add_sweep_parser(sub) -> None:
    sub.add_parser("sweep", help="run a grid of what-ifs (GRID.toml) into one CSV or JSON table",
                   fill=_sweep_arguments)


def _sweep_arguments(sw) -> None:
    sw.add_argument("grid", metavar="GRID.toml", help="a [sweep] table of options, each a value or a list")
    sw.add_argument("-o", "--output", metavar="FILE", help="write the table here (.json for JSON, else CSV); "
                                                          "default: CSV on stdout")
    sw.add_argument("-j", "--workers", type=_int_at_least("--workers", 1), default=os.cpu_count() or 1,
                    help="local worker processes (default: one per CPU)")
    sw.add_argument("--dask", metavar="tcp://HOST:PORT", help="run the points on this Dask scheduler instead")
    sw.add_argument("--plot", metavar="FILE",
                    help="draw busbw against size to FILE (.png or .svg), a line per grid point named by the options "
                         "that vary, each size's algorithm/protocol marked (needs matplotlib: pip install "
                         "'nicksim[plot]')")
    sw.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    sw.set_defaults(run=_run_sweep)


def _add_validate_parser(sub) -> None:
    sub.add_parser("validate", help="compare an engine with real nccl-tests runs (validation cases)",
                   fill=_validate_arguments)


def _validate_arguments(va) -> None:
    va.add_argument("cases", nargs="?", metavar="DIR",
                    help="a folder of case files (*.toml) or one case file (default: the project's validation/)")
    va.add_argument("--engine", action="append", choices=["nccl", "des", "model"],
                    help="the engine to validate (repeatable; default nccl, NCCL's time model; model is its former name)")
    va.add_argument("--calibration", metavar="FILE",
                    help="a calibration file (nicksim calibrate -o): each engine takes its own table ([set] the "
                         "DES, [nccl] NCCL's time model)")
    va.add_argument("-J", "--output-json", metavar="FILE", help="write every case's points and errors as JSON")
    va.add_argument("--plots", metavar="DIR", help="write one PNG per case here: measured and predicted busbw")
    va.add_argument("--loso", action="append", default=[], metavar="NAME=V1,V2,...",
                    help="leave one source out: run the DES at each value of a parameter (and its own) and say, "
                         "for each publisher's cases, whether the value the others' cases pick helps them "
                         "(repeatable; instead of the report)")
    va.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    va.set_defaults(run=_run_validate)


def _add_calibrate_parser(sub) -> None:
    sub.add_parser("calibrate", help="fit both engines to measured runs (nccl-tests output, JSON, case files), "
                                     "with the error on what the fit did not see", fill=_calibrate_arguments)


def _calibrate_arguments(ca) -> None:
    fitting = api.fit_parameters()
    ca.add_argument("measured", nargs="*", metavar="MEASURED",
                    help="nccl-tests output as pasted (NCCL_DEBUG lines and mpirun tags welcome), its -J JSON, "
                         "nicksim's own, or validation case files (*.toml, or a folder of them)")
    _add_system_options(ca, positional=False)
    ca.set_defaults(nodes=None, nccl_version=None)  # unset: the log's own node count and NCCL version
    ca.add_argument("--collective", metavar="COLL", help="the collective of tables that do not name theirs "
                                                         "(nccl-tests before 2.17 prints none)")
    ca.add_argument("--engine", action="append", choices=["nccl", "des", "model"],
                    help="the engine to fit (repeatable; default both)")
    ca.add_argument("--holdout", action="append", default=[], metavar="SPEC",
                    help="keep out of the fit, and report the error on: alternate (every other size), "
                         "size=2M,8M, collective=all_gather, nodes=N, ranks=N (repeatable)")
    ca.add_argument("-b", "--minbytes", type=_size("-b"), default=0, help="fit sizes from this one (e.g. 1M)")
    ca.add_argument("-e", "--maxbytes", type=_size("-e"), default=1 << 62, help="fit sizes up to this one")
    ca.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE",
                    help="a DES value known, not fitted (a link's bandwidth, say); written with the fit")
    ca.add_argument("--tuner", metavar="FILE",
                    help="write the calibrated choice per collective and size range as NCCL's example tuner "
                         "plugin's CSV (NCCL_TUNER_CONFIG_FILE)")
    ca.add_argument("--fit", choices=list(fitting["names"]),
                    help="instead: one DES parameter over validation cases, on a grid of values, with each "
                         "source left out in turn")
    ca.add_argument("--values", type=_values(), default=None, metavar="V,V,...",
                    help="--fit's candidate values (default: " + ",".join(f"{v:g}" for v in fitting["values"]) + ")")
    ca.add_argument("-j", "--jobs", type=_int_at_least("-j", 1), default=None,
                    help="processes running the DES (default: the CPUs, at most 8)")
    ca.add_argument("-o", "--output", metavar="FILE",
                    help="write the calibration file ([set] for the DES, [nccl] for NCCL's time model), "
                         "for --calibration")
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


def _add_alphabeta_parser(sub) -> None:
    sub.add_parser("alphabeta", help="the alpha-beta model: ring vs double binary tree allreduce, crossover",
                   fill=_alphabeta_arguments)


def _alphabeta_arguments(ab) -> None:
    ab.add_argument("--p", type=int, help="ranks (with --bw and --lat; default: the three built-in scenarios)")
    ab.add_argument("--bw", type=float, help="link bandwidth, GB/s")
    ab.add_argument("--lat", type=float, help="latency per step, us")
    ab.add_argument("-b", "--minbytes", type=_size("-b"), default=8, help="smallest size (default 8)")
    ab.add_argument("-e", "--maxbytes", type=_size("-e"), default=8 << 30, help="largest size (default 8G)")
    ab.add_argument("-f", "--stepfactor", type=_int_at_least("-f", 2), default=2, help="size factor (default 2)")
    ab.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    ab.set_defaults(run=_run_alphabeta)


def _add_dashboard_parser(sub) -> None:
    sub.add_parser("dashboard", help="serve the Streamlit dashboard (System, Plans, Performance, Hangs, "
                                     "Calibration) and print its URL", fill=_dashboard_arguments)


def _dashboard_arguments(dash) -> None:
    dash.add_argument("--host", default="localhost", help="address to listen on (default localhost; 0.0.0.0 for "
                                                          "every interface)")
    dash.add_argument("--port", type=_int_at_least("--port", 1), default=8501, help="port (default 8501)")
    dash.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    dash.set_defaults(run=_run_dashboard)


def _add_hang_parser(sub) -> None:
    sub.add_parser("hang", help="hangs: replay the classic ones on the DES, diagnose real logs",
                   fill=_hang_arguments)


def _hang_arguments(hang) -> None:
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




def _warn(lines: Sequence[str]) -> None:
    for line in lines:
        api.print_line(f"nicksim: {line}")


def _say(line: str) -> None:
    print(line, flush=True)


def _job_options(args) -> dict:
    if args.system and args.system_opt and args.system != args.system_opt:
        raise api.UsageError(f"two systems given ('{args.system}' and '{args.system_opt}')", "SYSTEM / --system",
                             "one of them")
    return dict(system=args.system or args.system_opt, nodes=args.nodes, nccl_version=args.nccl_version,
                gpu=args.gpu, gpus_per_node=args.gpus_per_node, fabric=args.fabric, nics_per_node=args.nics_per_node,
                nic_gbps=args.nic_gbps, oversubscription=args.oversubscription, hosts_per_leaf=args.hosts_per_leaf,
                rail_optimized=args.rail, switch_lat_us=args.switch_lat_us, sharp=args.sharp,
                rank=getattr(args, "rank", 0))


def _load(args, params, searched: bool = True, quiet: bool = False):
    """The job the SYSTEM options describe, with what loading it says on stderr (unless `quiet`:
    the caller says it when the job is sure to run)."""
    job = api.load(params=params, **_job_options(args))
    if not quiet:
        _warn(job.notes(searched))
    return job


def _dump_files(job, params, topo_file: str | None = None, graph_file: str | None = None) -> None:
    """What rank 0 of NCCL writes during init: the topology (NCCL_TOPO_DUMP_FILE) and the graphs
    (NCCL_GRAPH_DUMP_FILE); the command's own flags win."""
    topo = topo_file or params.get("NCCL_TOPO_DUMP_FILE")
    if topo:
        api.write_topology(job, topo)
    graphs = graph_file or params.get("NCCL_GRAPH_DUMP_FILE")
    if graphs:
        api.write_graphs(job, graphs)


def _logger(job, params):
    logger = api.job_logger(job, params)
    _warn(logger.warnings)
    return logger


def _run_env(args, params) -> int:
    job = api.load(args.system_opt, nccl_version=args.nccl_version, params=params) if args.system_opt else None
    if job is not None:  # the job loads: a bad system or file says so here
        _warn(job.params.notes)
    table = api.knobs(args.names, args.nccl_version, params=params, set_only=args.set_only, job=job)
    print("\n".join(api.knob_lines(table, args.nccl_version, args.system_opt)))
    if args.json:
        api.write_json(args.json, {"nccl_version": api.release_line(args.nccl_version), "knobs": table.records()})
    return 0


def _run_topo(args, params) -> int:
    job = _load(args, params, searched=False)
    dump = args.dump_xml or params.get("NCCL_TOPO_DUMP_FILE")
    if dump:
        api.write_topology(job, dump)
    print("\n".join(api.topology_lines(job, paths=args.paths, links=args.links)))
    return 0


def _run_search(args, params) -> int:
    with api.Progress("nicksim search") as progress:
        progress.phase("topology and graph search")
        job = _load(args, params)
        logger = _logger(job, params)  # NCCL_DEBUG: what the job's ranks would log during init
        logger.init()
        logger.sink.close()
        notes, lines = api.search_lines(job, args.print_tuning)
    _warn(notes)
    print("\n".join(lines))
    _dump_files(job, params, graph_file=args.dump_graph)
    return 0


def _check_engine_flags(args, engine: str) -> None:
    if engine != "des":
        if args.calibration and engine != "nccl":
            raise api.UsageError("--calibration is for the nccl and DES engines", "--calibration",
                                 "--engine nccl or des")
        for flag, given in (("--set", args.sets), ("--link-report", args.link_report),
                            ("--trace", args.trace if engine != "real" else None),
                            ("--fault", args.fault), ("--straggler", args.straggler)):
            if given:
                raise api.UsageError(f"{flag} needs the DES engine", flag, "--engine des")
    if engine == "real":
        for flag, given in (("--plan", args.plan), ("--print-tuning", args.print_tuning), ("--compare", args.compare)):
            if given:
                raise api.UsageError(f"{flag} is for the model and DES engines", flag, "--engine model or des")


def _key_numbers(items, flag: str) -> dict[str, float]:
    """--set's KEY=NUMBER items as a dict (the last of a key wins)."""
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        try:
            out[key.strip()] = float(text)
        except ValueError:
            sep = ""
        if not sep:
            raise api.UsageError(f"'{item}' is not KEY=NUMBER", flag, ", ".join(api.des_parameters()["names"]))
    return out


def _engine(args, name: str):
    """The engine the flags ask for, with its options."""
    if args.calibration and not api.read_calibration(args.calibration, name):
        table = "[set]" if name == "des" else "[nccl]"
        raise api.UsageError(f"the calibration has no {table} table for the {name} engine", args.calibration,
                             "a file nicksim calibrate wrote with --engine " + name)
    if name == "des":
        overrides = api.read_calibration(args.calibration) if args.calibration else {}
        overrides.update(_key_numbers(args.sets, "--set"))
        return api.engine("des", overrides=overrides, faults=args.fault, stragglers=args.straggler,
                          timeout_us=args.timeout * 1e6, trace=bool(args.trace))
    if name == "nccl" and args.calibration:
        return api.engine("nccl", calibration=api.read_calibration(args.calibration, "nccl"))
    if name == "real":
        return api.engine("real", iters=args.iters, warmup_iters=args.warmup_iters, check=args.check,
                          trace=bool(args.trace))
    return api.engine(name)


def _run_perf(args, params) -> int:
    name = api.canonical_engine(args.engine)
    _check_engine_flags(args, name)
    if args.plot:
        api.check_plot(args.plot, "--plot")
    _check_tests_flags(args)
    with api.Progress("nicksim perf") as progress:
        progress.phase("the system and its graphs")
        run = _perf(args, params, name, progress)
    last = run.results[-1] if run.results else None
    if args.link_report and last is not None:
        print("\n".join(api.link_report(last)))
    if args.trace and last is not None:
        doc = api.trace_doc(last)
        if doc is not None:
            api.write_json(args.trace, doc)
    if args.compare:
        print("\n".join(api.compare_lines(run, args.compare)))
    if run.json_path:  # the file nccl-tests' rule claimed (-J: never one that was there)
        api.write_json(run.json_path, run.json_doc())
    if args.plot:
        api.plot_perf(run, args.plot, args.compare)
    return 1 if run.hang is not None else 0


def _perf(args, params, name: str, progress):
    """The perf run itself, its lines printed as they come (a row as each size is answered)."""
    job = _load(args, params, quiet=True)

    def ready() -> None:  # the engine took the job: what loading it said, then the run
        _warn(job.notes())
        progress.phase("sizes")

    def say(line: str) -> None:
        progress.say(line)
        if line.strip() and not line.startswith("#"):  # a row: one more size answered
            progress.advance()
    collective = api.collective_name(args.collective)
    options = _perf_options(args, job, collective)
    if args.compare:  # a measurement that cannot be read says so before anything runs
        api.measured_table(args.compare, collective, job.nranks)
    engine = _engine(args, name)
    logger = None if engine.ranks_log else _logger(job, params)  # else each rank writes its own
    _dump_files(job, params)
    progress.phase(f"setting up the {name} engine")
    run = api.run_perf(job, engine, options, say, logger, ready)
    if logger is not None:
        logger.sink.close()
    return run


def _run_real(args, params) -> int:
    """nicksim run: the host planned as a CPU-only node per host, its ranks here or the launcher's."""
    _check_tests_flags(args)
    _check_run_flags(args)
    collective = api.collective_name(args.collective)
    sizes = api.sizes(args.minbytes, args.maxbytes, args.stepfactor or 2, args.stepbytes)
    json_path = args.json
    setup = _run_setup(args, collective)
    header = "\n".join(_run_preamble(setup, args.tests_version))
    start = _now()

    def traced(row, spans, nranks):
        other = {"bytes": row.nbytes, "collective": collective, "nranks": nranks, **row.plan,
                 "time_us": row.out_of_place.time_us}
        api.write_json(args.trace, api.real_trace(spans, other))

    with api.Progress("nicksim run") as progress:
        progress.phase("the ranks")
        done = api.run_ranks(collective, sizes, args.datatype, args.op, args.root, args.iters, args.warmup_iters,
                             args.check, args.nccl_version, bool(args.trace), params, args.nranks, args.argv, header,
                             progress.say, traced if args.trace else None, args.tests_version)
    if done.rows and json_path:  # rank 0, once it knows it is rank 0: the path is claimed after the table
        claimed, line = api.claim_json_path(json_path)
        _say(line)
        if claimed:
            env = [f"{k}={v}" for k, v in sorted(params.raw.items())
                   if params.sources.get(k) in ("environment", "--env")]
            api.write_json(claimed, api.nccl_tests_json(
                setup, done.rows, version=args.tests_version, args=("nicksim", *args.argv), env=env, start_time=start,
                end_time=_now(), extra={"collective": collective, "engine": "real", "system": api.HOST_SYSTEM,
                                        "nranks": done.nranks, "nccl_version": args.nccl_version}))
    return done.status


# nicksim run's ranks run one type, reduction and root with nccl-tests' defaults for the rest.
_PERF_ONLY = (("-t", "nthreads", 1), ("-g", "ngpus", 1), ("-N", "run_cycles", 1), ("-I", "per_iter_timing", 0),
              ("-S", "report_timestamps", 0), ("-M", "memory", 0))


def _check_run_flags(args) -> None:
    """nicksim run takes the nccl-tests flags that describe one run of its ranks; the others are
    nicksim perf's (a UsageError naming the flag)."""
    given = [flag for flag, name, default in _PERF_ONLY if getattr(args, name) not in (None, default)]
    given += [flag for flag, value in (("-d", args.datatype), ("-o", args.op)) if value.strip().lower() == "all"]
    given += ["-r"] if args.root == -1 else []
    if given:
        raise api.UsageError("nicksim run runs one type, reduction and root, a process per rank; this flag is nicksim "
                             "perf's", given[0], "leave it out here, or use nicksim perf")


def _run_setup(args, collective: str):
    """What nccl-tests prints of a `nicksim run` before its devices (it lists none: its ranks are
    processes here, not the planned GPUs)."""
    version = api.parse_version(args.nccl_version)
    return api.RunSetup(f"{collective}_perf", api.nccl_version_code(version.major, version.minor, version.patch),
                          args.minbytes, args.maxbytes, None if args.stepbytes is not None else args.stepfactor or 2,
                          args.stepbytes, args.warmup_iters, args.iters, args.agg_iters or 1, args.check,
                          args.cudagraph or 0, args.unalign or 0, args.blocking, args.parallel_init or 0)


def _run_preamble(setup, version: str) -> list[str]:
    """nccl-tests' preamble up to its device list, which nicksim run leaves out (a note says why)."""
    lines = api.preamble(setup, version)
    return lines[:-2] + ["# nicksim: no device lines: the ranks are processes on this host (the first line says "
                         "where), not the planned GPUs"]


def _now() -> str:
    """The local time as nccl-tests' JSON writes it (util.cu TIME_STRING_FORMAT)."""
    import time
    return time.strftime(api.TIME_FORMAT)


def _run_hang_list(args, params) -> int:
    found = api.scenarios()
    width = max(len(name) for name in found)
    for name, scenario in found.items():
        print(f"{name:<{width}}  {scenario.title} ({scenario.nranks} ranks on {scenario.system}; diagnosed as "
              f"{scenario.expect})")
    return 0


def _run_hang_replay(args, params) -> int:
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        with api.Progress("nicksim hang replay") as progress:
            progress.phase(f"{args.name}: running its ranks and diagnosing")
            done = api.replay(args.name, args.out or tmp, params)
        scenario = done.scenario
        print(f"# {scenario.name}: {scenario.title}")
        print(f"# {scenario.story}")
        print("\n".join(f"# {line}" for line in done.hang_lines))
        if args.out:
            print(f"# wrote {len(done.files)} file(s) to {args.out}: " + ", ".join(Path(f).name for f in done.files[:6])
                  + (" ..." if len(done.files) > 6 else ""))
        print("\n".join(api.diagnosis_lines(done.diagnosis)))
    if args.json:
        api.write_json(args.json, {"scenario": scenario.name, **done.diagnosis.to_json()})
    return 0


def _run_hang_diagnose(args, params) -> int:
    # the system is known: where each blocked rank waits, by the recomputed plan
    job = _load(args, params) if args.system_opt else None
    found = api.diagnose(args.files, job)
    print("\n".join(api.diagnosis_lines(found)))
    if args.json:
        api.write_json(args.json, found.to_json())
    return 0


def _run_sweep(args, params) -> int:
    if args.plot:
        api.check_plot(args.plot, "--plot")
    points = api.read_grid(args.grid)
    with api.Progress("nicksim sweep", total=len(points)) as progress:
        progress.phase("points")
        table = api.sweep(points, args.workers, args.dask, lambda done, total: progress.advance())
    rows = table.records()
    if args.output and args.output.endswith(".json"):
        api.write_json(args.output, {"grid": args.grid, "rows": rows})
    elif args.output:
        api.write_text(args.output, api.rows_csv(rows))
    else:
        print(api.rows_csv(rows), end="")
    failed = sum(1 for row in rows if row.get("error"))
    if failed:
        _warn([f"{failed} of {len(rows)} rows have an error (see the error column)"])
    if args.plot:
        api.plot_sweep(rows, args.plot, title=Path(args.grid).name)
    return 0


def _loso_spec(text: str) -> tuple[str, list[float]]:
    name, sep, values = text.partition("=")
    try:
        numbers = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        numbers = []
    if not sep or not numbers:
        raise api.UsageError(f"'{text}'", "--loso", "NAME=V1,V2,... (a DES parameter and numbers)")
    return name.strip(), numbers


def _run_loso(args) -> int:
    if args.engine and set(args.engine) != {"des"}:
        raise api.UsageError("--loso studies DES parameters", "--engine", "--engine des or none")
    specs = [_loso_spec(text) for text in args.loso]
    for name, values in specs:  # every study said wrong before any runs
        api.check_loso(name, values)
    with api.Progress("nicksim validate --loso") as progress:
        for name, values in specs:
            progress.phase(f"{name}: every case at each value")

            def ran(done: int, total: int) -> None:
                progress.total(total)
                progress.advance()
            study = api.leave_one_source_out(name, values, args.cases, ran)
            for line in api.loso_lines(study):
                progress.say(line)
    return 0


def _run_validate(args, params) -> int:
    if args.loso:
        return _run_loso(args)
    if args.plots:  # said before the cases run
        api.need_matplotlib("--plots")
    shown: dict[str, list] = {}  # engine -> its results so far: the report is printed as cases finish

    with api.Progress("nicksim validate") as progress:
        def finish(engine: str) -> None:
            for line in api.validation_tail(shown[engine]):
                progress.say(line)

        def case_done(engine, result, done: int, total: int) -> None:
            if engine not in shown:
                if shown:
                    finish(list(shown)[-1])
                    progress.say("")
                for line in api.validation_head(engine):
                    progress.say(line)
                shown[engine] = []
            shown[engine].append(result)
            progress.total(total)
            progress.say(api.validation_case_line(result))
            progress.advance()

        result = api.validate(args.cases, args.engine or ["nccl"], args.calibration, case_done)
        finish(list(shown)[-1])
    if args.output_json:
        api.write_json(args.output_json, result.json_doc())
    if args.plots:
        result.plot(args.plots)
    failed = [r for results in result.results.values() for r in results if r.error is not None]
    if failed:  # a case that cannot be compared is an input error, not a result
        raise api.UsageError(f"{len(failed)} case(s) did not run, first {failed[0].case.name}: {failed[0].error}",
                             failed[0].case.path, "cases whose system and measured rows nicksim can read")
    return 0


def _run_calibrate(args, params) -> int:
    if args.fit or args.values:
        return _run_grid_fit(args)
    if not args.measured:
        raise api.UsageError("no measurements given", "MEASURED",
                             "nccl-tests output, its JSON or case files (or --fit over validation cases)")
    fixed = _key_numbers(args.sets, "--set")
    options = {k: v for k, v in _job_options(args).items() if k != "rank"}
    with api.Progress("nicksim calibrate") as progress:
        progress.phase("reading the measurements and the system")
        cal = api.calibrate_measured(args.measured, **options, env=args.env, params=params,
                                     engines=args.engine or ["nccl", "des"], holdout=args.holdout, fixed=fixed,
                                     min_nbytes=args.minbytes, max_nbytes=args.maxbytes, collective=args.collective,
                                     progress=progress.phase, processes=args.jobs or max(1, min(8, os.cpu_count() or 1)))
        table, skipped = api.calibrated_tuner(cal) if args.tuner else (None, [])
    print("\n".join(api.calibration_lines(cal)))
    for line in skipped:
        print(f"# tuner: not written for {line}")
    for f in cal.fits:
        if f.over_fitted:
            api.print_line(f"nicksim calibrate: warning: the {f.engine} fit is over-fitted: better on the sizes it "
                           f"saw, worse on those held out")
    if args.output:
        api.write_text(args.output, api.calibration_file_text(cal))
    if args.tuner:
        api.write_text(args.tuner, api.tuner_csv(table))
    return 0


def _run_grid_fit(args) -> int:
    if len(args.measured) > 1:
        raise api.UsageError("--fit takes one folder or case file", "MEASURED", "a folder of case files")
    with api.Progress("nicksim calibrate") as progress:
        progress.phase(f"fitting {args.fit} over the cases")
        result = api.calibrate(args.measured[0] if args.measured else None, args.fit or "step_lat.scale",
                               args.values, args.jobs)
    print("\n".join(api.fit_lines(result)))
    if args.output:
        api.write_text(args.output, api.calibration_text(result))
    return 0


def _run_dashboard(args, params) -> int:
    import signal
    import subprocess
    command = api.dashboard_command(args.host, args.port)
    shown = "localhost" if args.host in ("0.0.0.0", "::") else args.host
    print(f"nicksim dashboard: http://{shown}:{args.port} (Ctrl-C stops it)", flush=True)
    stopped = []

    def stop(signum, _frame):  # SIGTERM (a service manager, `kill`) stops the server as Ctrl-C does
        stopped.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with subprocess.Popen(command, stdout=subprocess.DEVNULL) as server:
            try:
                return server.wait()
            except KeyboardInterrupt:
                server.terminate()
                server.wait()
                return 128 + (stopped[0] if stopped else signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_alphabeta(args, params) -> int:
    print("\n".join(api.alphabeta_lines(api.sizes(args.minbytes, args.maxbytes, args.stepfactor), args.p, args.bw,
                                        args.lat)))
    return 0


# The flags that name a file to write, by their argparse names.
_OUTPUTS = (("json", "-J/--json"), ("trace", "--trace"), ("dump_xml", "--dump-xml"), ("dump_graph", "--dump-graph"),
            ("output", "-o/--output"), ("output_json", "--json"))


def _print_traceback() -> None:
    """The exception being handled, as Python prints it (--debug)."""
    import traceback
    traceback.print_exc()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = argv  # `nicksim run -np N` starts its ranks with the same command line
        params = api.settings(getattr(args, "env", []), os.environ)
        _warn(params.warnings)
        for name, flag in _OUTPUTS:  # an output that could not be written is said before the work
            if isinstance(getattr(args, name, None), str):
                api.check_output(getattr(args, name), flag)
        return args.run(args, params)
    except api.RanksFailed as exc:  # each rank has said why
        return exc.status
    except api.NickSimError as exc:
        if debug:
            _print_traceback()
        api.print_line(f"nicksim: error: {exc.line()}")
        return 2
    except KeyboardInterrupt:
        api.print_line("nicksim: interrupted")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug in nicksim, not bad input
        if debug:
            _print_traceback()
        else:
            api.print_line(f"nicksim: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the "
                           "traceback)")
        return 70


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
