"""Time NCCL's graph search (ring, tree, NVLS) per catalog system, as a ratio to a peer in the same run.

The peer is building the same node's System and Paths (topology + paths), so the ratio says how
much the search costs on top of what `nicksim topo` does. The search runs once per node type
whatever the node count (nodes are identical), so its cost does not grow with the cluster. `cached s`
is a second search of the same system, answered from the graph cache (graph/cache.py) that the
first filled (the bar: under 0.2 s). Run:

    python benchmarks/bench_search.py [--systems dgx-h100 dgx-a100 ...] [--nodes 1 2] [--repeat 2]
"""
from __future__ import annotations

import argparse
import tempfile
import time

from nicksim.topology.catalog import CATALOG, load_node
from nicksim.constants import DEFAULT_VERSION, topo_rules
from nicksim.topology.fill import FillOptions
from nicksim.params import read_params
from nicksim.graph.paths import compute_paths
from nicksim.graph.cache import cached_search_graphs
from nicksim.graph.search import search_graphs
from nicksim.topology.system import build_system


def topo_and_paths(name: str, nodes: int):
    filled, _ = load_node(name, FillOptions())
    system = build_system(filled.doc, topo_rules(DEFAULT_VERSION))
    return compute_paths(system, read_params({}), nranks=nodes * len(system.gpus()))


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=[n for n in CATALOG if n != "gb200-nvl72"])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    params = read_params({})
    print(f"# NCCL {DEFAULT_VERSION} search; best of {args.repeat}")
    print(f"# {'system':<20} {'nodes':>5} {'topo+paths s':>13} {'search s':>9} {'ratio':>7} {'cached s':>9} "
          f"{'ratio':>6}  graphs")
    folder = tempfile.mkdtemp(prefix="nicksim-bench-cache-")
    for name in args.systems:
        for nodes in args.nodes:
            peer, paths = min((timed(lambda: topo_and_paths(name, nodes)) for _ in range(args.repeat)),
                              key=lambda r: r[0])
            cost, graphs = min((timed(lambda: search_graphs(paths, params)) for _ in range(args.repeat)),
                               key=lambda r: r[0])
            cached_search_graphs(paths, params, folder)  # fills the cache
            again, found = min((timed(lambda: cached_search_graphs(paths, params, folder))
                                for _ in range(args.repeat)), key=lambda r: r[0])
            assert found == graphs, f"{name}: the cache answered other graphs than the search"
            summary = " ".join(f"{k}:{g.n_channels}x{g.bw_intra:g}" for k, g in graphs.items())
            print(f"  {name:<20} {nodes:>5} {peer:>13.4f} {cost:>9.3f} {cost / peer:>7.0f} {again:>9.4f} "
                  f"{again / peer:>6.2f}  {summary}")


if __name__ == "__main__":
    main()
