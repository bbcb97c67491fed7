"""The job's fabric as the DES engine sees it: every physical link, one entry per direction.

`build_fabric(cluster)` lists, for each node copy, every directed link of the node's System (NVLink
to GPUs and NVSwitches, PCIe, C2C, the CPU interconnect, NIC to NET) at NCCL's bandwidth, then every
cable of the inter-node network (NIC port, leaf and spine switches) in both directions, a switch's
latency counted on the cables entering it; after them, a trunk per leaf and direction (its cables
to or from every spine as one link, for connections spread evenly over the spines). Routes are
tuples of link ids, so that concurrent transfers can share what they cross (flows.py):
`node_route` follows NCCL's own path between two nodes of one node copy (paths.py), `net_route`
goes from a GPU through its NIC, the network and the peer's NIC to the peer GPU. Links are named
`node0:GPU/0->NVS/0` (the k-th node of its kind in NCCL's order) and `nic(0,1)->leaf(1,0)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..graph.cluster import Cluster, fabric_route_hops
from ..errors import UsageError

__all__ = ["FabricLink", "Trunk", "Fabric", "build_fabric", "node_route", "cable_route", "cable_routes", "net_route",
           "trunk_route", "format_fabric"]


@dataclass(frozen=True)
class FabricLink:
    """One direction of a physical link: its name, kind (NVL, PCI, C2C, SYS, NET, LOC or CABLE),
    capacity in GB/s and latency in microseconds."""

    name: str
    kind: str
    bw_gbps: float
    lat_us: float


@dataclass(frozen=True)
class Trunk:
    """A leaf's cables to every spine (`up`) or from every spine, as one link. Where a connection
    between two leaves spreads its bytes evenly over every spine route (adaptive routing, ib.py),
    each of those S cables carries exactly 1/S of what crosses them together at every moment, so
    for max-min fairness they act as one link of S times a cable's capacity crossed whole: the
    division and every route see two links where they saw 2 x S at a share each."""

    name: str
    leaf: tuple
    up: bool
    members: tuple[int, ...]  # cable ids, by spine


@dataclass(frozen=True)
class Fabric:
    """Every directed link of the job. Node copy n owns ids [n * per_node, (n + 1) * per_node) in the
    order of its System's nodes and their links; the network's cables follow, then the trunks (ids
    from len(links) on; not links of their own: no fault names them, no report lists them)."""

    cluster: Cluster
    links: tuple[FabricLink, ...]
    per_node: int
    local: Mapping[tuple[int, int], int]     # (System node index, link position) -> id within a node copy
    cables: Mapping[tuple, int]              # (from, to) cluster graph nodes -> id
    trunks: tuple[Trunk, ...] = ()           # none where a leaf's spine cables are not all alike
    # leaf-spine cable id -> its trunk's id
    trunk_of: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def nodes(self) -> int:
        return self.cluster.spec.nodes


def _label(system, index: int) -> str:
    kind = system.nodes[index].kind
    return f"{kind}/{system.of_kind(kind).index(index)}"


def _cable_label(key) -> str:
    return f"{key[0]}({','.join(str(k) for k in key[1:])})"


def build_fabric(cluster: Cluster) -> Fabric:
    """All directed links of `cluster`: node links per node copy, then the network's cables."""
    system = cluster.paths.system
    # The rank's view may lack the node's NICs (a one-node communicator before 2.27 drops them),
    # but its GPUs must be the node's: a host split into domains runs as a node per domain (job.py).
    if len(system.gpus()) != len(cluster.paths.node_system.gpus()):
        raise UsageError("the fabric is only modelled when every GPU of a node is in one P2P/SHM domain",
                         "model", "a node whose GPUs all reach each other")
    local: dict[tuple[int, int], int] = {}
    node_links: list[tuple[str, str, float]] = []
    for index, node in enumerate(system.nodes):
        for pos, link in enumerate(node.links):
            local[(index, pos)] = len(node_links)
            node_links.append((f"{_label(system, index)}->{_label(system, link.dst)}", link.kind, link.bw_gbps))
    links = [FabricLink(f"node{n}:{name}", kind, bw, 0.0)
             for n in range(cluster.spec.nodes) for name, kind, bw in node_links]
    graph = cluster.graph
    cables: dict[tuple, int] = {}
    for u, v, data in graph.edges(data=True):
        for a, b in ((u, v), (v, u)):
            cables[(a, b)] = len(links)
            lat = data["lat_us"] + graph.nodes[b].get("lat_us", 0.0)
            links.append(FabricLink(f"{_cable_label(a)}->{_cable_label(b)}", "CABLE", data["bw_gbps"], lat))
    trunks = _trunks(cables, links, cluster.spines)
    trunk_of = {cable: len(links) + i for i, trunk in enumerate(trunks) for cable in trunk.members}
    return Fabric(cluster, tuple(links), len(node_links), MappingProxyType(local), MappingProxyType(cables),
                  trunks, MappingProxyType(trunk_of))


def _trunks(cables: Mapping[tuple, int], links: list[FabricLink], spines: int) -> tuple[Trunk, ...]:
    """Every leaf's trunk up and down, ordered by leaf; none unless every leaf reaches every spine over
    cables alike (capacity and latency), which is what makes a trunk exact."""
    groups: dict[tuple, list[int]] = {}
    for (a, b), link in cables.items():
        if a[0] == "leaf" and b[0] == "spine":
            groups.setdefault((a, True), []).append(link)
        elif a[0] == "spine" and b[0] == "leaf":
            groups.setdefault((b, False), []).append(link)
    alike = lambda members: len({(links[x].bw_gbps, links[x].lat_us) for x in members}) == 1  # noqa: E731
    if spines < 2 or any(len(m) != spines or not alike(m) for m in groups.values()):
        return ()
    return tuple(Trunk(f"{_cable_label(leaf)}->spines" if up else f"spines->{_cable_label(leaf)}", leaf, up,
                       tuple(sorted(members))) for (leaf, up), members in sorted(groups.items()))


def node_route(fabric: Fabric, node: int, src: int, dst: int) -> tuple[int, ...]:
    """The links NCCL's path from System node `src` to `dst` crosses inside node copy `node`."""
    path = fabric.cluster.paths.path(src, dst)
    if path is None:
        system = fabric.cluster.paths.system
        raise UsageError(f"no path from {_label(system, src)} to {_label(system, dst)}", "model",
                         "nodes NCCL computes paths between (GPUs, NICs, CPUs)")
    base = node * fabric.per_node
    return tuple(base + fabric.local[hop] for hop in path.links)


def cable_route(fabric: Fabric, src: tuple[int, int], dst: tuple[int, int]) -> tuple[int, ...]:
    """The cables from NIC port (node, port) to NIC port (node, port), a port being the NET's
    position in the node's NETs."""
    return cable_routes(fabric, src, dst)[0]


def cable_routes(fabric: Fabric, src: tuple[int, int], dst: tuple[int, int]) -> tuple[tuple[int, ...], ...]:
    """The cables of every route from NIC port `src` to NIC port `dst` through a distinct spine,
    cable_route's first (cluster.py fabric_routes); one route where no spine offers a choice."""
    (n1, p1), (n2, p2) = src, dst
    routes = fabric_route_hops(fabric.cluster, src, dst)
    if not routes:
        raise UsageError(f"NIC port {p1} of node {n1} does not reach NIC port {p2} of node {n2}", "model",
                         "ports both nodes have, on a connected network")
    cables = fabric.cables
    if len(routes[0]) == 5:  # NIC, leaf, spine, leaf, NIC: the NICs' cables are every route's, looked up once
        nic_a, leaf_a, _, leaf_b, nic_b = routes[0]
        up, down = cables[(nic_a, leaf_a)], cables[(leaf_b, nic_b)]
        return tuple((up, cables[(leaf_a, spine)], cables[(spine, leaf_b)], down) for _, _, spine, _, _ in routes)
    return tuple(tuple(cables[(a, b)] for a, b in zip(hops, hops[1:])) for hops in routes)


def trunk_route(fabric: Fabric, cables: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """cable_routes' routes between two NIC ports crossed evenly together, as one route over the
    leaves' trunks (Trunk): the first route with each leaf-spine cable replaced by its trunk."""
    trunk_of = fabric.trunk_of
    return tuple(trunk_of.get(link, link) for link in cables[0])


def net_route(fabric: Fabric, src: tuple[int, int, int], dst: tuple[int, int, int]) -> tuple[int, ...]:
    """From GPU (node, local rank) through its NIC `port` to the peer GPU behind NIC `port`:
    `src` and `dst` are (node, local rank, port)."""
    system = fabric.cluster.paths.system
    nets = system.nets()
    (n1, r1, p1), (n2, r2, p2) = src, dst
    cables = cable_route(fabric, (n1, p1), (n2, p2))  # first: it says which port does not exist
    return (node_route(fabric, n1, system.gpu_by_rank(r1), nets[p1]) + cables
            + node_route(fabric, n2, nets[p2], system.gpu_by_rank(r2)))


def format_fabric(fabric: Fabric) -> list[str]:
    """Every directed link, one per line: name, kind, GB/s and latency (the names --fault takes)."""
    lines = [f"=== Fabric : {len(fabric.links)} directed links ({fabric.per_node} per node copy, "
             f"{len(fabric.links) - fabric.per_node * fabric.nodes} network) ==="]
    width = max((len(link.name) for link in fabric.links), default=0)
    lines += [f"{link.name:<{width}}  {link.kind:<5} {link.bw_gbps:8.1f} GB/s {link.lat_us:6.2f} us"
              for link in fabric.links]
    return lines
