"""Time topology + paths + cluster assembly against node count, as a ratio to a peer in the same run.

The peer is networkx itself: building a plain graph with the same number of nodes and edges as
the cluster's fabric graph (add_nodes_from/add_edges_from, no attributes). The ratio says what
nicksim adds on top of the graph library it stores the fabric in; the growth exponent (slope of
log time over log nodes) says how cost grows with cluster size. Run:

    python benchmarks/bench_topology.py [--nodes 1 8 64 256 1024] [--repeat 3]
"""
from __future__ import annotations

import argparse
import math
import os
import time

import networkx as nx

from nicksim.topology.catalog import load_node
from nicksim.graph.cluster import ClusterSpec, build_cluster
from nicksim.constants import DEFAULT_VERSION, topo_rules
from nicksim.topology.fill import FillOptions
from nicksim.topology.hardware import fabric
from nicksim.params import read_params
from nicksim.graph.paths import compute_paths
from nicksim.topology.system import build_system


def nicksim_once(nodes: int) -> tuple[float, int, int]:
    start = time.perf_counter()
    filled, _ = load_node("dgx-h100", FillOptions())
    system = build_system(filled.doc, topo_rules(DEFAULT_VERSION))
    paths = compute_paths(system, read_params({}), nranks=nodes * len(system.gpus()))
    cluster = build_cluster(system, paths, ClusterSpec(nodes=nodes, fabric=fabric("ib")))
    return time.perf_counter() - start, cluster.graph.number_of_nodes(), cluster.graph.number_of_edges()


def peer_once(n_nodes: int, n_edges: int) -> float:
    start = time.perf_counter()
    g = nx.Graph()
    g.add_nodes_from(range(n_nodes))
    g.add_edges_from((i % max(n_nodes, 1), (i * 7 + 1) % max(n_nodes, 1)) for i in range(n_edges))
    return time.perf_counter() - start


def best(fn, repeat: int):
    results = [fn() for _ in range(repeat)]
    return min(results, key=lambda r: r[0] if isinstance(r, tuple) else r)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 8, 64, 256, 1024])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"# dgx-h100 nodes, NCCL {DEFAULT_VERSION}, {os.cpu_count()} CPUs; best of {args.repeat}")
    print(f"# {'nodes':>6} {'GPUs':>6} {'graph n/e':>13} {'nicksim s':>10} {'peer s':>9} {'ratio':>7}")
    rows = []
    for nodes in args.nodes:
        elapsed, n, e = best(lambda nodes=nodes: nicksim_once(nodes), args.repeat)
        peer = best(lambda n=n, e=e: peer_once(n, e), args.repeat)
        rows.append((nodes, elapsed))
        ratio = elapsed / peer if peer > 0 else float("inf")
        print(f"  {nodes:>6} {nodes * 8:>6} {f'{n}/{e}':>13} {elapsed:>10.4f} {peer:>9.4f} {ratio:>7.1f}")
    big = [r for r in rows if r[0] >= 64]
    if len(big) >= 2:
        (n0, t0), (n1, t1) = big[0], big[-1]
        slope = math.log(t1 / t0) / math.log(n1 / n0)
        per_node_us = (t1 - t0) / (n1 - n0) * 1e6
        print(f"# growth: time ~ nodes^{slope:.2f} between {n0} and {n1} nodes; {per_node_us:.0f} us per added node "
              f"on top of {rows[0][1] * 1e3:.1f} ms for the node itself (its paths are computed once; "
              "the fabric graph is linear in nodes)")


if __name__ == "__main__":
    main()
