"""Time NCCL's graph search (ring, tree, NVLS) per catalog system, as a ratio to a peer in the same run.

The peer is building the same node's System and Paths (topology + paths), so the ratio says how
much the search costs on top of what `nicksim topo` does. The search runs once per node type
whatever the node count (nodes are identical), so its cost does not grow with the cluster. `cached s`
is a second search of the same system, answered from the graph cache (graph/cache.py) that the
first filled. `cli s` is what a user waits for: the CPU seconds (user + sys) of a second `nicksim
search --system NAME --nodes N` in a fresh process (imports included, the bar: under 0.2 s), beside
those of `python -c pass` measured in the same run (the interpreter's own start). Run:

    python benchmarks/bench_search.py [--systems dgx-h100 dgx-a100 ...] [--nodes 1 2] [--repeat 2]
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
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


def child_cpu(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + sys) of one child process running `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def cli_search_cpu(name: str, nodes: int, folder: str, repeat: int) -> tuple[float, float]:
    """(a second `nicksim search` of the system, `python -c pass`): CPU seconds in fresh processes,
    best of `repeat` each, the cache in `folder` filled by a first search."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "NICKSIM_"))},
           "NICKSIM_CACHE": folder}
    search = [sys.executable, "-m", "nicksim", "search", "--system", name, "--nodes", str(nodes)]
    child_cpu(search, env)  # fills the cache
    return (min(child_cpu(search, env) for _ in range(repeat)),
            min(child_cpu([sys.executable, "-c", "pass"], env) for _ in range(repeat)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=[n for n in CATALOG if n != "gb200-nvl72"])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    params = read_params({})
    print(f"# NCCL {DEFAULT_VERSION} search; best of {args.repeat}")
    print(f"# {'system':<20} {'nodes':>5} {'topo+paths s':>13} {'search s':>9} {'ratio':>7} {'cached s':>9} "
          f"{'ratio':>6} {'cli s':>6} {'pass s':>6} {'ratio':>5}  graphs")
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
            cli, bare = cli_search_cpu(name, nodes, folder, args.repeat)
            summary = " ".join(f"{k}:{g.n_channels}x{g.bw_intra:g}" for k, g in graphs.items())
            print(f"  {name:<20} {nodes:>5} {peer:>13.4f} {cost:>9.3f} {cost / peer:>7.0f} {again:>9.4f} "
                  f"{again / peer:>6.2f} {cli:>6.3f} {bare:>6.3f} {cli / bare:>5.1f}  {summary}")


if __name__ == "__main__":
    main()
