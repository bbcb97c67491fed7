"""One job through the core pipeline: topology -> paths -> search -> connect -> communicator.

`JobSpec` says what a user names on the command line (a system, how many nodes, the NCCL
release, the network); `load_job(spec, params)` runs every core phase once and returns a `Job`
holding each phase's immutable result. Nodes are identical, so a node is searched once and
rank R sees its node as local rank R mod G sees node 0 — which is what keeps jobs of thousands
of GPUs instant.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from .topology.catalog import DEFAULT_SYSTEM, load_node
from .graph.collnet import CollNetSetup, collnet_setup, graph_heads
from .graph.cluster import Cluster, ClusterSpec, build_cluster
from .graph.connect import Channels, connect, nvls_heads
from .constants import DEFAULT_VERSION, parse_version, topo_rules
from .errors import UsageError
from .topology.fill import FillOptions
from .topology.hardware import FABRICS, fabric, gpu_model
from .params import Params
from .graph.paths import Paths, compute_paths
from .graph.cache import cache_folder, cached_search_graphs
from .graph.graphs import Graph
from .topology.system import System, build_system

if TYPE_CHECKING:  # loaded where they are used: a job that only searches needs neither
    from .plan.collnet import CollNetLayout
    from .tuning.choose import CommState

__all__ = ["JobSpec", "Job", "SPEC_FIELDS", "MIN_NIC_GBPS", "MAX_NIC_GBPS", "check_spec", "load_job", "load_node_paths"]


@dataclass(frozen=True)
class JobSpec:
    """A job as the SYSTEM options describe it. `system` is a catalog name or a topology file;
    None means NCCL_TOPO_FILE, else the default system."""

    system: str | None = None
    nodes: int = 1
    nccl_version: str = str(DEFAULT_VERSION.line)
    gpu: str | None = None
    gpus_per_node: int | None = None
    fabric: str | None = None
    nics_per_node: int | None = None
    nic_gbps: float | None = None
    oversubscription: float = 1.0
    hosts_per_leaf: int = 32
    rail_optimized: bool = True
    switch_lat_us: float | None = None
    sharp: bool = False
    rank: int = 0
    where: str = "SYSTEM"


# The JobSpec fields a file may set (sweep grids, validation cases), with their types, in the
# order tables list them.
SPEC_FIELDS: dict[str, type] = {
    "system": str, "nodes": int, "gpus_per_node": int, "fabric": str, "nics_per_node": int, "nic_gbps": float,
    "oversubscription": float, "hosts_per_leaf": int, "rail_optimized": bool, "switch_lat_us": float,
    "sharp": bool, "nccl_version": str, "gpu": str,
}


@dataclass(frozen=True)
class Job:
    """Every core phase's result for one job, as rank `rank` sees it. Channels and the
    communicator are computed on first use (the topology alone needs neither)."""

    spec: JobSpec
    system_name: str
    filled: object
    system: System
    paths: Paths
    cluster: Cluster
    params: Params
    domains: int = 1  # P2P/SHM domains per host, each a node to NCCL (split_domains)

    @property
    def nodes(self) -> int:
        """NCCL's nodes: hosts, times the P2P/SHM domains each host splits into."""
        return self.spec.nodes * self.domains

    @property
    def nranks(self) -> int:
        return self.nodes * len(self.paths.node_system.gpus())

    @cached_property
    def graphs(self) -> dict[str, Graph]:
        if not self.paths.node_system.gpus():
            raise UsageError(f"{self.system_name} has no GPUs (NCCL fills them in from the live machine)",
                             self.spec.where, "--gpu MODEL to place them, or a file with <gpu> elements")
        return cached_search_graphs(self.paths, self.params, cache_folder(self.params))

    @cached_property
    def channels(self) -> Channels:
        return connect(self.paths, self.graphs, self.params, self.nodes, self.spec.rank)

    def channels_of(self, rank: int) -> Channels:
        """Channels as `rank` sees them (its own tree links; rings are the same cycles)."""
        if rank == self.spec.rank:
            return self.channels
        return connect(self.paths, self.graphs, self.params, self.nodes, rank)

    def tree_links(self) -> dict[int, dict[int, tuple[int, tuple[int, ...]]]]:
        """Every rank's tree parent and children per channel: {channel: {rank: (up, down)}}."""
        views = [self.channels_of(r) for r in range(self.nranks)]
        return {c: {r: (v.tree_up[c], v.tree_down[c]) for r, v in enumerate(views)}
                for c in range(views[0].n_channels)}

    def nvls_layout(self) -> tuple[int, tuple[int, ...]] | None:
        """(GPUs per node, the local ranks that head NVLS chunks, in head order), None without NVLS."""
        per_node = len(self.paths.node_system.gpus())
        heads = nvls_heads(self.graphs, 1, per_node)
        return (per_node, tuple(h[0] for h in heads)) if heads else None

    @cached_property
    def collnet(self) -> CollNetSetup:
        return collnet_setup(self.paths, self.graphs, self.nodes, self.params)

    def collnet_layout(self) -> CollNetLayout | None:
        """CollNet's heads and chains inside a node (connect.cc connectCollNet and the chain preset),
        None while CollNet is off."""
        if not self.collnet.enabled:
            return None
        from .plan.collnet import CollNetLayout
        per_node = len(self.paths.node_system.gpus())
        chain = self.graphs["collnet_chain"]
        direct = self.graphs.get("collnet_direct", chain)
        local = [tuple(r % per_node for r in channel) for channel in direct.intra]
        heads = graph_heads(direct, per_node)
        # Head i connects to the GPUs of graph channel i (not necessarily the channel it heads first).
        return CollNetLayout(per_node, heads, tuple(local[i] for i in range(len(heads))),
                             tuple(tuple(r % per_node for r in channel) for channel in chain.intra))

    @cached_property
    def comm(self) -> CommState:
        from .tuning.choose import comm_state
        return comm_state(self.paths, self.graphs, self.channels.n_channels, self.nodes, self.params, self.collnet)

    def notes(self, searched: bool = True) -> list[str]:
        """What loading the job has to say: knobs its release does not read, the topology's
        assumptions, the paths' notes and, where CollNet was asked for (`searched`: the graphs
        were searched), why it is off."""
        return [*self.params.notes, *self.system.notes, *self.paths.notes, *self._collnet_notes(searched)]

    def _collnet_notes(self, searched: bool) -> list[str]:
        wanted = self.params.get("NCCL_COLLNET_ENABLE") == 1
        if self.spec.sharp and not wanted:
            return ["--sharp: the CollNet plugin serves every NIC, but NCCL uses it only with NCCL_COLLNET_ENABLE=1"]
        if wanted and not self.spec.sharp:
            return ["NCCL_COLLNET_ENABLE=1: no CollNet plugin serves these NICs (--sharp adds one), so CollNet stays "
                    "off"]
        if not (wanted and searched) or self.collnet.enabled:
            return []
        threshold = self.params.get("NCCL_COLLNET_NODE_THRESHOLD")
        if self.nodes < threshold:  # init.cc's own words
            return [f"NCCL INFO Communicator has {self.nodes} nodes which is less than CollNet node threshold "
                    f"{threshold}, disabling CollNet"]
        return ["CollNet stays off: the CollNet chain graph found no channel"]


def load_node_paths(spec: JobSpec, params: Params):
    """(system name, filled document, system, paths, fabric) of one node as `spec.rank` sees it."""
    version = parse_version(spec.nccl_version)
    rules = topo_rules(version)
    name, where = spec.system, spec.where
    if not name:
        name, where = (params.get("NCCL_TOPO_FILE"), "NCCL_TOPO_FILE") if params.get("NCCL_TOPO_FILE") \
            else (DEFAULT_SYSTEM, "SYSTEM")
    fab = fabric(spec.fabric) if spec.fabric else None
    model = gpu_model(spec.gpu) if spec.gpu else None
    options = FillOptions(gpu=model, gpus_per_node=spec.gpus_per_node, nics_per_node=spec.nics_per_node,
                          nic_gbps=spec.nic_gbps, fabric=fab, sharp=spec.sharp)
    filled, entry = load_node(name, options, where)
    if fab is None:
        fab = fabric(entry.fabric) if entry else FABRICS["ib"]
    system = build_system(filled.doc, rules, notes=filled.notes)
    nranks = spec.nodes * len(system.gpus())
    ranks = sorted(system.nodes[g].gpu.rank for g in system.gpus())
    if ranks and spec.rank >= nranks:
        raise UsageError(f"rank {spec.rank} is not in a job of {nranks} ranks", "--rank", f"0..{nranks - 1}")
    # Nodes are identical: rank R sees its node as local rank R mod (GPUs per node) sees node 0.
    local = ranks[spec.rank % len(ranks)] if ranks else None
    paths = compute_paths(system, params, nranks=nranks, rank=local, net_plugin=fab.net_plugin)
    return name, filled, system, paths, fab


def split_domains(spec: JobSpec, params: Params, system: System, paths: Paths, net_plugin: str
                  ) -> tuple[System, Paths, int]:
    """A host whose GPUs NCCL splits into P2P/SHM domains (ncclTopoTrimSystem cuts the GPUs a rank
    reaches only through the network, e.g. across sockets where a NIC beats the CPU link,
    ncclTopoCheckNet) is several nodes to NCCL: init.cc counts a node per first rank of the ring
    graph. Where the domains are alike in size and consecutive in rank, every domain runs as a
    node of its own, the system as rank 0's domain sees it: (that system, its paths, domains per
    host). Otherwise the host is left whole (connect says why it cannot run)."""
    host_gpus, view = len(system.gpus()), paths.system
    size = len(view.gpus())
    if not size or size == host_gpus or host_gpus % size:
        return system, paths, 1
    domains = host_gpus // size
    for first in range(0, host_gpus, size):
        seen = compute_paths(system, params, nranks=host_gpus, rank=first, net_plugin=net_plugin).system
        if sorted(seen.nodes[g].gpu.rank for g in seen.gpus()) != list(range(first, first + size)):
            return system, paths, 1
    nranks = spec.nodes * host_gpus
    local = spec.rank % size
    return view, compute_paths(view, params, nranks=nranks, rank=local, net_plugin=net_plugin), domains


# ncclNetProperties_t.speed is an int of Mbps (net.h): the slowest and fastest NIC NCCL can be told of, in Gb/s.
MIN_NIC_GBPS, MAX_NIC_GBPS = 1 / 1000, (2**31 - 1) / 1000


def check_spec(spec: JobSpec) -> None:
    """Every SYSTEM option in range, wherever it came from (the command line, a sweep grid, a
    case file, the dashboard): a UsageError naming the field otherwise."""
    def bad(name: str, value, valid: str) -> UsageError:
        return UsageError(f"{name} = {value}", f"{spec.where}: {name}" if spec.where != "SYSTEM" else f"--{name}"
                          .replace("_", "-"), valid)
    for name in ("nodes", "hosts_per_leaf", "gpus_per_node", "nics_per_node"):
        value = getattr(spec, name)
        if value is not None and not (isinstance(value, int) and value >= 1):
            raise bad(name, value, "a whole number, 1 or more")
    if spec.nic_gbps is not None and not MIN_NIC_GBPS <= spec.nic_gbps <= MAX_NIC_GBPS:
        raise bad("nic_gbps", spec.nic_gbps, f"{MIN_NIC_GBPS:g} to {MAX_NIC_GBPS:g} Gb/s (NCCL's speed is an int of Mbps)")
    if not 1.0 <= spec.oversubscription < math.inf:
        raise bad("oversubscription", spec.oversubscription, "1 (non-blocking) or more, e.g. 2 for 2:1")
    if spec.switch_lat_us is not None and not 0.0 <= spec.switch_lat_us < math.inf:
        raise bad("switch_lat_us", spec.switch_lat_us, "a latency of 0 us or more")


def load_job(spec: JobSpec, params: Params) -> Job:
    """Run topology, paths and the cluster build for `spec`; search, connect and the
    communicator follow lazily from the returned Job. The settings are taken as the release
    reads them (Params.for_version: its defaults; knobs it does not read dropped, with a note)."""
    check_spec(spec)
    params = params.for_version(parse_version(spec.nccl_version).minor)
    name, filled, system, paths, fab = load_node_paths(spec, params)
    plugin_env = fab.plugin_env_for(min((system.nodes[g].gpu.sm for g in system.gpus()), default=0))
    if plugin_env:  # the network plugin sets these before NCCL reads them, unless the user did
        params = params.with_defaults(plugin_env, f"{fab.net_plugin} plugin")
    system, paths, domains = split_domains(spec, params, system, paths, fab.net_plugin)
    cluster = build_cluster(system, paths, ClusterSpec(
        nodes=spec.nodes * domains, fabric=fab, rail_optimized=spec.rail_optimized,
        hosts_per_leaf=spec.hosts_per_leaf * domains, oversubscription=spec.oversubscription,
        switch_lat_us=spec.switch_lat_us))
    return Job(spec, name, filled, system, paths, cluster, params, domains)
