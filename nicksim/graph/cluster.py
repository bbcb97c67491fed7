"""Multi-node clusters: identical nodes joined by an explicit network graph.

A Cluster is N copies of one node System (its paths computed once, since the copies are
identical) plus the inter-node fabric as a networkx graph: every NIC port of every node, the
leaf switches it plugs into and the spine above them. Rail-optimized by default (NIC i of
every node on rail i's leaf switches); leaves hold `hosts_per_leaf` nodes each, and their
uplinks carry the downlink bandwidth divided by `oversubscription`. Edges carry `bw_gbps`
(GB/s per direction) and `lat_us`; switches carry their own `lat_us`. NCCL's own view of the
network stays what it is in the node System: NET nodes with a speed. The graph is built (and
networkx loaded) on first use: NCCL's decisions never read it, only the DES and the routes do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..topology.hardware import Fabric
from .paths import Paths, local_net, p2p_net
from ..topology.system import System

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["ClusterSpec", "Cluster", "build_cluster", "fabric_route", "fabric_routes", "fabric_route_hops",
           "spine_position", "Route", "format_cluster"]


@dataclass(frozen=True)
class ClusterSpec:
    """How nodes are wired: count, fabric, rails, leaf size, oversubscription, cable latency."""

    nodes: int = 1
    fabric: Fabric | None = None
    rail_optimized: bool = True
    hosts_per_leaf: int = 32
    oversubscription: float = 1.0
    switch_lat_us: float | None = None
    cable_lat_us: float = 0.05

    def check(self) -> None:
        if self.nodes < 1:
            raise UsageError(f"{self.nodes} nodes", "--nodes", "1 or more")
        if self.hosts_per_leaf < 1:
            raise UsageError(f"{self.hosts_per_leaf} hosts per leaf", "--hosts-per-leaf", "1 or more")
        if not self.oversubscription >= 1.0:
            raise UsageError(f"oversubscription {self.oversubscription}", "--oversubscription",
                             "1 (non-blocking) or more, e.g. 2 for 2:1")


@dataclass(frozen=True)
class Cluster:
    """N identical nodes (one System, and the Paths of one rank's view of it), the switches of the
    fabric, and the fabric graph (built on first use)."""

    spec: ClusterSpec
    node: System
    paths: Paths
    leaves: int
    spines: int

    @cached_property
    def graph(self) -> nx.Graph:
        """The fabric graph (frozen): NIC ports, leaves and spines, with `bw_gbps` and `lat_us`."""
        return _fabric_graph(self.node, self.spec)

    @property
    def gpus_per_node(self) -> int:
        return len(self.node.gpus())

    @property
    def nranks(self) -> int:
        return self.spec.nodes * self.gpus_per_node


def _nic_key(node: int, port: int) -> tuple:
    """A NIC port of a node: `port` is the NET's position in System.nets() (dev repeats across the
    hosts of one NVLink domain, the position does not)."""
    return ("nic", node, port)


def build_cluster(system: System, paths: Paths, spec: ClusterSpec) -> Cluster:
    """The cluster of `spec.nodes` copies of `system`; its fabric graph is assembled on first use."""
    spec.check()
    leaves, spines = _switch_counts(spec, len(system.nets()))
    return Cluster(spec, system, paths, leaves, spines)


def _switch_counts(spec: ClusterSpec, nics: int) -> tuple[int, int]:
    """(leaves, spines) of the fabric _wire_switches builds for nodes of `nics` NIC ports."""
    if spec.nodes < 2 or not nics:
        return 0, 0
    if spec.rail_optimized:
        leaves = nics * math.ceil(spec.nodes / spec.hosts_per_leaf)
    else:
        leaves = math.ceil(spec.nodes * nics / (spec.hosts_per_leaf * nics))
    return (1, 0) if leaves == 1 else (leaves, max(1, min(spec.hosts_per_leaf, leaves)))


def _fabric_graph(system: System, spec: ClusterSpec) -> nx.Graph:
    """The fabric graph of `spec.nodes` copies of `system`."""
    import networkx as nx
    graph = nx.Graph()
    nets = [system.nodes[n].net for n in system.nets()]
    switch_lat = spec.switch_lat_us if spec.switch_lat_us is not None else (
        spec.fabric.switch_lat_us if spec.fabric else 0.13)
    for node in range(spec.nodes):
        for port, net in enumerate(nets):
            graph.add_node(_nic_key(node, port), kind="nic", node=node, dev=net.dev, name=net.name,
                           bw_gbps=net.bw_gbps)
    if spec.nodes > 1 and nets:
        _wire_switches(graph, spec, nets, switch_lat)
    return nx.freeze(graph)


def _wire_switches(graph: nx.Graph, spec: ClusterSpec, nets, switch_lat: float) -> tuple[int, int]:
    per_leaf = spec.hosts_per_leaf
    groups = math.ceil(spec.nodes / per_leaf)
    leaf_ids = []
    if spec.rail_optimized:
        for rail, net in enumerate(nets):
            for group in range(groups):
                leaf = ("leaf", rail, group)
                graph.add_node(leaf, kind="leaf", lat_us=switch_lat)
                leaf_ids.append(leaf)
            for node in range(spec.nodes):
                graph.add_edge(_nic_key(node, rail), ("leaf", rail, node // per_leaf),
                               bw_gbps=net.bw_gbps, lat_us=spec.cable_lat_us)
    else:
        ports = per_leaf * len(nets)
        count = math.ceil(spec.nodes * len(nets) / ports)
        for index in range(count):
            leaf = ("leaf", -1, index)
            graph.add_node(leaf, kind="leaf", lat_us=switch_lat)
            leaf_ids.append(leaf)
        for node in range(spec.nodes):
            for k, net in enumerate(nets):
                graph.add_edge(_nic_key(node, k), ("leaf", -1, (node * len(nets) + k) // ports),
                               bw_gbps=net.bw_gbps, lat_us=spec.cable_lat_us)
    if len(leaf_ids) == 1:
        return 1, 0
    # Uplink capacity of a leaf is its downlink capacity / oversubscription, spread over the spines.
    down_gbps = max(sum(graph.edges[e]["bw_gbps"] for e in graph.edges(leaf)) for leaf in leaf_ids)
    spines = max(1, min(per_leaf, len(leaf_ids)))
    up_each = down_gbps / spec.oversubscription / spines
    for s in range(spines):
        spine = ("spine", s)
        graph.add_node(spine, kind="spine", lat_us=switch_lat)
        for leaf in leaf_ids:
            graph.add_edge(leaf, spine, bw_gbps=up_each, lat_us=spec.cable_lat_us)
    return len(leaf_ids), spines


@dataclass(frozen=True)
class Route:
    """A route through the fabric between two NIC ports: hops, bottleneck GB/s, latency."""

    nodes: tuple
    bw_gbps: float
    lat_us: float

    @property
    def switches(self) -> int:
        return sum(1 for n in self.nodes if n[0] in ("leaf", "spine"))


def fabric_route(cluster: Cluster, src: tuple[int, int], dst: tuple[int, int]) -> Route | None:
    """Shortest route from NIC port (node, port) to (node, port); None if they are not connected.

    A port is the NET's position in the node's System.nets(), which is also its rail. Between
    leaves the route climbs to the spine a fat tree's destination-based routing gives it (D-mod-K,
    as InfiniBand's ftree routing programs the switches): the destination's position among its
    leaf's ports modulo the spines, so that the ports under one leaf come down distinct spines and
    traffic to different destinations does not pile onto one uplink."""
    routes = fabric_routes(cluster, src, dst)
    return routes[0] if routes else None


def fabric_routes(cluster: Cluster, src: tuple[int, int], dst: tuple[int, int]) -> tuple[Route, ...]:
    """Every route from NIC port `src` to NIC port `dst` through a distinct spine, the one
    fabric_route takes (D-mod-K) first, then spine (that + k) mod spines for k = 1, 2, ...; a
    single route where the two ports share a leaf or the fabric has fewer than two spines; none
    where they are not connected. Flows spread over several of them where the fabric or the
    transport asks for it (ECMP over a connection's queue pairs, adaptive routing: model/ib.py)."""
    g = cluster.graph
    return tuple(_route_of(g, hops) if len(hops) > 1 else Route(hops, g.nodes[hops[0]]["bw_gbps"], 0.0)
                 for hops in fabric_route_hops(cluster, src, dst))


def fabric_route_hops(cluster: Cluster, src: tuple[int, int], dst: tuple[int, int]) -> tuple[tuple, ...]:
    """The hops of fabric_routes, worked out from the fabric's two levels without a search: a NIC
    hangs from one leaf, and every leaf reaches every spine."""
    g = cluster.graph
    a, b = _nic_key(*src), _nic_key(*dst)
    if a not in g or b not in g:
        return ()
    if a == b:
        return ((a,),)
    leaf_a, leaf_b = _leaf_of(g, a), _leaf_of(g, b)
    if leaf_a is None or leaf_b is None:
        return ()
    if leaf_a == leaf_b:
        return ((a, leaf_a, b),)
    if cluster.spines < 1:
        return ()
    first = spine_position(cluster, dst) % cluster.spines
    return tuple((a, leaf_a, ("spine", (first + k) % cluster.spines), leaf_b, b) for k in range(cluster.spines))


def _leaf_of(g: nx.Graph, nic: tuple) -> tuple | None:
    """The leaf a NIC port plugs into (None where it plugs into none: a single node)."""
    return next(iter(g.neighbors(nic)), None)


def spine_position(cluster: Cluster, dst: tuple[int, int]) -> int:
    """D-mod-K (fabric_route): the position of NIC port `dst` among its leaf's ports, whose value
    modulo the spines is the spine that routes down to it."""
    spec = cluster.spec
    node, port = dst
    if spec.rail_optimized:
        return node % spec.hosts_per_leaf
    return (node * len(cluster.node.nets()) + port) % (spec.hosts_per_leaf * len(cluster.node.nets()))


def _route_of(g: nx.Graph, hops) -> Route:
    bw = min(g.edges[u, v]["bw_gbps"] for u, v in zip(hops, hops[1:]))
    lat = sum(g.edges[u, v]["lat_us"] for u, v in zip(hops, hops[1:]))
    lat += sum(g.nodes[n].get("lat_us", 0.0) for n in hops if n[0] != "nic")
    return Route(tuple(hops), bw, lat)


def format_cluster(cluster: Cluster) -> list[str]:
    """A summary of the cluster and one inter-node route per local GPU (channel 0)."""
    spec = cluster.spec
    system = cluster.node
    nets = [system.nodes[n].net for n in system.nets()]
    speeds = sorted({round(n.bw_gbps * 8, 1) for n in nets})
    fab = spec.fabric.name if spec.fabric else "ib"
    lines = [f"=== Cluster : {spec.nodes} nodes x {cluster.gpus_per_node} GPUs = {cluster.nranks} ranks, "
             f"fabric {fab} ({cluster.paths.net_plugin}), {len(nets)} NICs/node at "
             f"{'/'.join(f'{s:g}' for s in speeds) or '-'} Gbit/s, "
             f"{'rail-optimized' if spec.rail_optimized else 'not rail-optimized'}, "
             f"{cluster.leaves} leaf + {cluster.spines} spine switches, "
             f"oversubscription {spec.oversubscription:g}:1 ==="]
    if spec.nodes < 2:
        return lines
    # Paths are NCCL's view of one rank (its P2P/SHM domain); indices below are in that view.
    system = cluster.paths.system
    if not system.gpus():
        lines.append("No GPUs in the node, so no routes: a partial file is completed with --gpu MODEL")
        return lines
    for g in sorted(system.gpus(), key=lambda i: system.nodes[i].gpu.rank):
        rank = system.nodes[g].gpu.rank
        net = local_net(cluster.paths, rank, 0)
        if net is None:
            lines.append(f"GPU{rank}: no NIC reachable")
            continue
        dev = system.nodes[net].net.dev
        port = system.nets().index(net)
        route = fabric_route(cluster, (0, port), (1, port))
        inside = cluster.paths.path(g, net)
        if route is None:
            lines.append(f"GPU{rank} -> node 1: NET{dev} has no route")
            continue
        bw = min(inside.bw_gbps, route.bw_gbps)
        lines.append(f"GPU{rank}@node0 -> GPU{rank}@node1: NET via NET{dev} ({inside.type}/{inside.bw_gbps:.1f}), "
                     f"{route.switches} switch hop(s), fabric {route.bw_gbps:.1f} GB/s, {route.lat_us:.2f} us "
                     f"-> {bw:.1f} GB/s")
    first = min(system.gpus(), key=lambda i: system.nodes[i].gpu.rank)
    rank0 = system.nodes[first].gpu.rank
    hops = []
    for g in sorted(system.gpus(), key=lambda i: system.nodes[i].gpu.dev):
        peer_dev = system.nodes[g].gpu.dev
        net, proxy = p2p_net(cluster.paths, rank0, peer_dev)
        if net is not None:
            via = "" if proxy == rank0 else f" via rank {proxy}"
            hops.append(f"GPU{peer_dev}: NET{system.nodes[net].net.dev}{via}")
    if hops:
        lines.append(f"Send/recv from GPU{rank0}@node0 to node 1 (NCCL_P2P_PXN_LEVEL {cluster.paths.p2p_pxn_level}"
                     f"{'' if cluster.paths.pxn_enabled else ', PXN disabled'}): " + ", ".join(hops))
    return lines
