"""The `nicksim` command line.

Every failure a user can cause ends in one line on stderr — what, where, what would be valid
— and exit status 2; `--debug` shows the traceback instead. The environment is read here, once,
through params.read_params, and passed down.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import Sequence

from .catalog import CATALOG, DEFAULT_SYSTEM, load_node
from .cluster import ClusterSpec, build_cluster, format_cluster
from .constants import DEFAULT_VERSION, MODELLED_VERSIONS, parse_version, topo_rules, tuning_tables
from .errors import NickSimError, UsageError
from .fill import FillOptions
from .hardware import FABRICS, GPU_MODELS, fabric, gpu_model
from .params import Params, read_params
from .paths import compute_paths, format_nccl_paths, format_paths
from .connect import connect, format_channels
from .search import format_graph, graphs_xml, search_graphs
from .topo import build_system, format_system
from .tuning import (format_thread_thresholds, format_tuning_table, thread_thresholds, time_model_modelled,
                     tune_inputs, tune_model)
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


def _add_system_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("system")
    g.add_argument("system", nargs="?", metavar="SYSTEM",
                   help=f"catalog name ({', '.join(CATALOG)}) or an NCCL topology .xml file; "
                        f"default: NCCL_TOPO_FILE if set, else {DEFAULT_SYSTEM}")
    g.add_argument("--system", dest="system_opt", metavar="NAME|FILE", help="same as SYSTEM")
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
    search.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    search.set_defaults(run=_run_search)
    return parser


def _warn(lines: Sequence[str]) -> None:
    for line in lines:
        print(f"nicksim: {line}", file=sys.stderr)


def _system_spec(args, params: Params) -> tuple[str, str]:
    if args.system and args.system_opt and args.system != args.system_opt:
        raise UsageError(f"two systems given ('{args.system}' and '{args.system_opt}')", "SYSTEM / --system",
                         "one of them")
    if args.system or args.system_opt:
        return args.system or args.system_opt, "SYSTEM"
    topo_file = params.get("NCCL_TOPO_FILE")
    if topo_file:
        return topo_file, "NCCL_TOPO_FILE"
    return DEFAULT_SYSTEM, "SYSTEM"


def _prepare(args, params: Params):
    """System, paths and cluster for the SYSTEM options, as rank --rank sees them."""
    version = parse_version(args.nccl_version)
    rules = topo_rules(version)
    spec, where = _system_spec(args, params)
    fab = fabric(args.fabric) if args.fabric else None
    model = gpu_model(args.gpu) if args.gpu else None
    options = FillOptions(gpu=model, gpus_per_node=args.gpus_per_node, nics_per_node=args.nics_per_node,
                          nic_gbps=args.nic_gbps, fabric=fab)
    filled, entry = load_node(spec, options, where)
    if fab is None:
        fab = fabric(entry.fabric) if entry else FABRICS["ib"]
    system = build_system(filled.doc, rules, notes=filled.notes)
    nranks = args.nodes * len(system.gpus())
    ranks = sorted(system.nodes[g].gpu.rank for g in system.gpus())
    if ranks and args.rank >= nranks:
        raise UsageError(f"rank {args.rank} is not in a job of {nranks} ranks", "--rank", f"0..{nranks - 1}")
    # Nodes are identical: rank R sees its node as local rank R mod (GPUs per node) sees node 0.
    local = ranks[args.rank % len(ranks)] if ranks else None
    paths = compute_paths(system, params, nranks=nranks, rank=local, net_plugin=fab.net_plugin)
    cluster = build_cluster(system, paths, ClusterSpec(
        nodes=args.nodes, fabric=fab, rail_optimized=args.rail, hosts_per_leaf=args.hosts_per_leaf,
        oversubscription=args.oversubscription, switch_lat_us=args.switch_lat_us))
    _warn(system.notes)
    _warn(paths.notes)
    return filled, system, paths, cluster


def _run_search(args, params: Params) -> int:
    _, _, paths, _ = _prepare(args, params)
    graphs = search_graphs(paths, params)
    # A note that applies to every graph (e.g. an unchecked release) is said once.
    _warn(list(dict.fromkeys(note for graph in graphs.values() for note in graph.notes)))
    for graph in graphs.values():
        print("\n".join(format_graph(paths, graph)))
    if len(paths.system.gpus()) == len(paths.node_system.gpus()):
        channels = connect(paths, graphs, params, args.nodes, args.rank)
        print("\n".join(format_channels(channels)))
        tables = tuning_tables(paths.system.rules.version)
        if _debug_subsys(params, "TUNING") and args.rank == 0:
            if time_model_modelled(tables.version):
                table = tune_model(tables, tune_inputs(paths, graphs, args.nodes), params)
                print("\n".join(format_tuning_table(table)))
            else:
                _warn([f"the TUNING table of NCCL {tables.version.line} is not modelled yet "
                       "(2.19, 2.20, 2.21, 2.22 and 2.30 are)"])
        print(format_thread_thresholds(thread_thresholds(tables, channels.nranks, params)))
    else:
        _warn([f"rank {args.rank} sees {len(paths.system.gpus())} of the node's {len(paths.node_system.gpus())} "
               "GPUs (NCCL splits the node into domains); channels across such domains are not modelled yet"])
    dump = args.dump_graph or params.get("NCCL_GRAPH_DUMP_FILE")
    if dump:
        try:
            Path(dump).write_text(graphs_xml(paths, graphs), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write: {exc.strerror}", dump, "a writable file path") from None
    return 0


def _debug_subsys(params: Params, name: str) -> bool:
    """Whether NCCL_DEBUG_SUBSYS selects a subsystem (NCCL's default is INIT,BOOTSTRAP,ENV)."""
    text = params.get("NCCL_DEBUG_SUBSYS") or "INIT,BOOTSTRAP,ENV"
    chosen = {s.strip().upper() for s in text.lstrip("^").split(",")}
    hit = name in chosen or "ALL" in chosen
    return not hit if text.startswith("^") else hit


def _run_topo(args, params: Params) -> int:
    filled, system, paths, cluster = _prepare(args, params)
    dump = args.dump_xml or params.get("NCCL_TOPO_DUMP_FILE")
    if dump:
        write_topo_xml(filled.doc, dump)
    # NCCL prints the system as the rank sees it, after trimming it to the rank's domain.
    print("\n".join(format_system(paths.system, paths.max_bw, paths.total_bw)))
    if args.nodes > 1:
        print("\n".join(format_cluster(cluster)))
    if args.paths:
        print("\n".join(format_nccl_paths(paths)))
        print("\n".join(format_paths(paths)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        params = read_params(os.environ, args.env)
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
