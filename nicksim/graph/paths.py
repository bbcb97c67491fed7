"""Paths between the nodes of a System, and the transports NCCL picks over them.

`compute_paths(system, params)` reproduces ncclTopoComputePaths for the system's NCCL
release line: a breadth-first search from every CPU, (DEV,) GPU, NET and NVSwitch node that
gives every node its path type (LOC ... DIS), bottleneck bandwidth and hop list towards it;
then the rewrites NCCL applies — traffic diverted through the CPU where P2P is not allowed
(NCCL_P2P_LEVEL / NCCL_P2P_DISABLE / the driver's P2P status), peers reachable only over
the network, P2C for NICs behind a Grace C2C link, PXN through an NVLink peer
(NCCL_PXN_DISABLE, NCCL_PXN_C2C) and host bounce where GPUDirect RDMA is not possible
(NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_C2C). On top of the paths it decides, per GPU pair, the
transport ladder P2P -> SHM -> NET, and per GPU and NIC whether GDR is used.

The result, Paths, is immutable and holds everything later stages ask of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from ..constants.topo_rules import LOC_BW, TopoRules
from ..params import Params
from ..topology.system import CPU_ARCH, CPU_VENDOR, System, f32

__all__ = ["ib_hca_selects", 
    "Path",
    "Transport",
    "Gdr",
    "Paths",
    "compute_paths",
    "local_nets",
    "local_net",
    "p2p_net",
    "format_paths",
    "format_nccl_paths",
    "PATH_LEGEND",
]


@dataclass(frozen=True)
class Path:
    """From a node towards a destination: NCCL path type, bottleneck GB/s, and the nodes passed."""

    type: str
    bw_gbps: float
    nodes: tuple[int, ...]  # node indices after the source, ending with the destination
    links: tuple[tuple[int, int], ...] = ()  # (node, position in its links) of every hop, in order

    @property
    def hops(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True)
class Transport:
    """How one GPU sends to another inside a node: P2P, SHM or NET, as NCCL's log names it."""

    kind: str
    detail: str
    intermediate_rank: int = -1
    read: bool = False


@dataclass(frozen=True)
class Gdr:
    """GPUDirect RDMA between a GPU and a NIC: on or off, NCCL's mode, the distance that decided it."""

    enabled: bool
    mode: str          # Disabled | Default | PCI
    distance: str      # path type the decision was made on
    proxy_rank: int    # the rank whose GPU talks to the NIC (itself unless PXN)


@dataclass(frozen=True)
class Paths:
    """Every path towards every endpoint node, plus transports, GDR and the search bandwidths."""

    system: System                               # the rank's view, after ncclTopoTrimSystem
    node_system: System                          # the whole node (or NVLink domain) before trimming
    rank: int
    nranks: int
    to: Mapping[int, tuple[Path | None, ...]]   # destination index -> path per source node
    transports: Mapping[tuple[int, int], Transport]
    gdr_send: Mapping[tuple[int, int], Gdr]     # (rank, NET node index) -> GDR for sends (read)
    gdr_recv: Mapping[tuple[int, int], Gdr]     # (rank, NET node index) -> GDR for receives
    p2p_level: str
    gdr_level: str
    pxn_enabled: bool
    pxn_c2c: bool
    p2p_pxn_level: int
    cross_nic: int
    net_plugin: str
    inter: bool
    max_bw: float
    total_bw: float
    notes: tuple[str, ...] = ()

    def path(self, src: int, dst: int) -> Path | None:
        row = self.to.get(dst)
        return row[src] if row is not None else None

    def gpu_path(self, rank_a: int, rank_b: int) -> Path:
        s = self.system
        return self.path(s.gpu_by_rank(rank_a), s.gpu_by_rank(rank_b))


# ---------------------------------------------------------------------------------------------
# Breadth-first search (ncclTopoSetPaths)


class _P:
    __slots__ = ("type", "bw", "nodes", "links")

    def __init__(self, type_: int, bw: float, nodes: tuple[int, ...], links: tuple[tuple[int, int], ...] = ()):
        self.type, self.bw, self.nodes, self.links = type_, bw, nodes, links


_LINK_TO_PATH = {"LOC": "LOC", "NVL": "NVL", "C2C": "C2C", "PCI": "PIX", "SYS": "SYS", "NET": "LOC"}


def _reverse_links(system: System) -> list[dict[tuple[int, str], int]]:
    """Per node: (neighbour, link kind) -> position of the link to it (NCCL's "reverse link")."""
    table = []
    for node in system.nodes:
        positions: dict[tuple[int, str], int] = {}
        for pos, link in enumerate(node.links):
            positions.setdefault((link.dst, link.kind), pos)
        table.append(positions)
    return table


def _bfs(system: System, base: int, rules: TopoRules, nvb_disable: bool) -> list[_P | None]:
    nodes = system.nodes
    code = rules.path_code
    LOC, NVL, NVB, PXB, PHB, DIS = (code(n) for n in ("LOC", "NVL", "NVB", "PXB", "PHB", "DIS"))
    link_code = {k: code(v) for k, v in _LINK_TO_PATH.items() if rules.has_path(v)}
    has_dev = bool(system.of_kind("DEV"))
    base_kind = nodes[base].kind
    if has_dev:
        max_len = 2 if base_kind == "GPU" else 1
        base_dev = system.device_of(base) if base_kind == "GPU" else base
        relay_kind = "DEV"
    else:
        max_len = 1
        base_dev = base
        relay_kind = "GPU"

    paths: list[_P | None] = [None] * len(nodes)
    paths[base] = _P(LOC, LOC_BW, ())
    reverse = _reverse_links(system)
    current = [base]
    while current:
        upcoming: list[int] = []
        for node in current:
            p = paths[node]
            kind = nodes[node].kind
            count = len(p.nodes)
            for link in nodes[node].links:
                rem = link.dst
                rem_kind = nodes[rem].kind
                # Route through a GPU (DEV) only as one NVLink hop, unless it is where we start.
                if node != base_dev and kind == relay_kind:
                    if has_dev and link.kind == "LOC" and rem_kind == "GPU":
                        pass
                    elif nvb_disable or link.kind != "NVL" or rem_kind != relay_kind or count > max_len:
                        continue
                bw = min(p.bw, link.bw_gbps)
                t = link_code[link.kind]
                if kind == "PCI" and rem_kind == "PCI":
                    t = PXB
                if link.kind == "PCI" and (kind == "CPU" or rem_kind == "CPU"):
                    t = PHB
                if kind == relay_kind and p.type == NVL and t == NVL:
                    if (has_dev and count == max_len) or (not has_dev and count + 1 > 1):
                        t = NVB
                new_type = max(p.type, t)
                r = paths[rem]
                if rules.paths_type_first:
                    r_type = r.type if r else DIS
                    r_bw = r.bw if r else 0.0
                    better = (new_type < r_type or (new_type == r_type and r_bw < bw)
                              or (new_type == r_type and r_bw == bw and r is not None and len(r.nodes) > count + 1))
                else:
                    r_bw = r.bw if r else 0.0
                    better = (r is None or r_bw == 0 or len(r.nodes) > count) and r_bw < bw
                if better:
                    back = (rem, reverse[rem][(node, link.kind)])
                    paths[rem] = _P(new_type, bw, (node,) + p.nodes, (back,) + p.links)
                    if rem not in upcoming:
                        upcoming.append(rem)
        current = upcoming
    return paths


# ---------------------------------------------------------------------------------------------
# Local NICs / GPUs (ncclTopoGetLocal, ncclTopoGetLocalNet, ncclTopoGetLocalGpu)


def _get_local(to: dict, system: System, src: int, result_kind: str) -> list[int]:
    """Indices (into system.of_kind(result_kind)) of the best-bw, then best-type, nodes from src."""
    best_bw, best_type, found = 0.0, system.rules.path_code("DIS"), []
    for k, dst in enumerate(system.of_kind(result_kind)):
        p = to[dst][src]
        if p is None:
            continue
        if p.bw > best_bw or (p.bw == best_bw and p.type < best_type):
            best_bw, best_type, found = p.bw, p.type, []
        if p.bw == best_bw and p.type == best_type:
            found.append(k)
    return found


def _mirror_bits(value: int, pow2: int) -> int:
    mirror, b, mb = 0, 1, pow2 >> 1
    while b < pow2:
        if value & b:
            mirror |= mb
        b <<= 1
        mb >>= 1
    return mirror


def _local_net(to: dict, system: System, gpu: int, channel: int) -> int | None:
    nets = _get_local(to, system, gpu, "NET")
    if not nets:
        return None
    net_nodes = system.of_kind("NET")
    gpus = _get_local(to, system, net_nodes[nets[0]], "GPU")
    n_local = len(nets)
    n_gpus = max(1, len(gpus))
    dev = system.nodes[gpu].gpu.dev
    start = dev % n_gpus if system.rules.local_net_mod_gpus else dev
    if n_local & (n_local - 1) == 0:
        start = _mirror_bits(start, n_local)
    start += channel % (-(-n_local // n_gpus))
    return net_nodes[nets[start % n_local]]


def _local_gpu_of_net(to: dict, system: System, net: int) -> int | None:
    gpu_nodes = system.of_kind("GPU")
    candidates = [gpu_nodes[k] for k in _get_local(to, system, net, "GPU")]
    for channel in range(64):
        for g in candidates:
            if _local_net(to, system, g, channel) == net:
                return g
    return None


# ---------------------------------------------------------------------------------------------
# ncclTopoComputePaths


class _Compute:
    def __init__(self, system: System, params: Params, net_plugin: str):
        self.s = system
        self.rules = system.rules
        self.params = params
        self.inter = False
        self.net_plugin = net_plugin
        self.notes: list[str] = []
        self.code = self.rules.path_code
        nvb_disable = bool(params.get("NCCL_NVB_DISABLE"))
        kinds = ("CPU", "DEV", "GPU", "NET", "NVS")
        self.to: dict[int, list[_P | None]] = {}
        dis = self.code("DIS")
        for kind in kinds:
            bases = system.of_kind(kind)
            for base in bases:
                self.to[base] = _bfs(system, base, self.rules, nvb_disable)
            # A node reached from any node of this kind gets a path entry (PATH_DIS, no bandwidth) for
            # every node of the kind, as NCCL allocates node->paths[kind] whole; others get none.
            reached = {i for base in bases for i, p in enumerate(self.to[base]) if p is not None}
            for base in bases:
                row = self.to[base]
                for i in reached:
                    if row[i] is None:
                        row[i] = _P(dis, 0.0, ())
        self.p2p_level = self._p2p_level()
        self.gdr_level = self._gdr_level()

    # -- levels
    def _level_param(self, name: str) -> str | None:
        value = self.params.get(name)
        if value is None:
            return None
        if not self.rules.has_path(value) or self.code(value) > self.code("SYS"):
            self.notes.append(f"NCCL WARN {name}={value} is not a path type in NCCL {self.rules.version.line}; ignored")
            return None
        return value

    def _first_cpu(self):
        cpus = self.s.of_kind("CPU")
        return self.s.nodes[cpus[0]].cpu if cpus else None

    def _p2p_level(self) -> str:
        if self.params.get("NCCL_P2P_DISABLE") == 1:
            return "LOC"
        user = self._level_param("NCCL_P2P_LEVEL")
        if user:
            return user
        cpu = self._first_cpu()
        arch = cpu.arch if cpu else -1
        vendor = cpu.vendor if cpu else -1
        if self.rules.p2p_level_default == "sys-unless-intel-arm":
            intel_or_zhaoxin = vendor in (CPU_VENDOR["GenuineIntel"], CPU_VENDOR["CentaurHauls"])
            if arch == CPU_ARCH["arm64"] or (arch == CPU_ARCH["x86_64"] and intel_or_zhaoxin):
                return "PXB"
            return "SYS"
        devices = len(self.s.of_kind(self.s.device_kind))
        if arch == CPU_ARCH["x86_64"] and vendor == CPU_VENDOR["AuthenticAMD"] and devices <= 2:
            return "SYS"
        return "PXB"

    def _gdr_c2c(self) -> bool:
        value = self.params.get("NCCL_NET_GDR_C2C")
        return bool(self.rules.gdr_c2c_default if value is None else value)

    def _gdr_level(self) -> str:
        user = self._level_param("NCCL_NET_GDR_LEVEL")
        if user:
            return user
        if self.rules.release.gdr_level_p2c_with_c2c and self._gdr_c2c():
            return "P2C"
        return "PXB"

    # -- helpers over the mutable path table
    def p(self, src: int, dst: int) -> _P:
        """The path src -> dst; a node no search reached has no path at all, read as PATH_DIS."""
        found = self.to[dst][src]
        return found if found is not None else _P(self.code("DIS"), 0.0, ())

    def set_p(self, src: int, dst: int, path: _P) -> None:
        self.to[dst][src] = path

    def merge(self, t0: int, t1: int) -> int:
        hi, lo = max(t0, t1), min(t0, t1)
        if self.rules.has_p2c and hi == self.code("PHB") and lo == self.code("C2C"):
            return self.code("P2C")
        return hi

    def add_inter_step(self, via: int, src: int, dst: int, pxn: bool = False) -> None:
        """addInterStep: src -> via -> dst, replacing the path src -> dst."""
        a, b = self.p(src, via), self.p(via, dst)
        dis = self.code("DIS")
        if a.type == dis or b.type == dis:
            return
        t = self.code("PXN") if pxn else self.merge(a.type, b.type)
        self.set_p(src, dst, _P(t, min(a.bw, b.bw), a.nodes + b.nodes, a.links + b.links))

    def local_cpu(self, gpu: int) -> int | None:
        cpus = self.s.of_kind("CPU")
        found = _get_local(self.to, self.s, gpu, "CPU")
        if not found:
            return None
        best = cpus[found[0]]
        for k in found[1:]:
            if len(self.p(gpu, cpus[k]).nodes) < len(self.p(gpu, best).nodes):
                best = cpus[k]
        return best

    def gpu_rank(self, gpu: int) -> int:
        return self.s.nodes[gpu].gpu.rank

    # -- P2P (ncclTopoCheckP2p)
    def check_p2p(self, g1: int, g2: int) -> tuple[bool, bool, int]:
        """(p2p allowed, read, intermediate rank) for g1 -> g2."""
        path = self.p(g1, g2)
        if path is None:
            return False, False, -1
        nodes = self.s.nodes
        intermediate = -1
        has_dev = bool(self.s.of_kind("DEV"))
        if has_dev and len(path.nodes) == 4 and nodes[path.nodes[1]].kind == "DEV":
            intermediate = nodes[path.nodes[1]].gpu.rank
        elif not has_dev and len(path.nodes) == 2 and nodes[path.nodes[0]].kind == "GPU":
            intermediate = nodes[path.nodes[0]].gpu.rank
        p2p = path.type <= self.code(self.p2p_level)
        ignore = self.params.get("NCCL_IGNORE_DISABLED_P2P")
        if p2p and g1 != g2 and ignore != 2:
            hops = [g1] + ([self.s.gpu_by_rank(intermediate)] if intermediate >= 0 else []) + [g2]
            for a, b in zip(hops, hops[1:]):
                if nodes[a].gpu.cuda_p2p and nodes[b].gpu.cuda_p2p:
                    continue
                if not ignore:
                    ra, rb = nodes[a].gpu.dev, nodes[b].gpu.dev
                    if path.type <= self.code("NVB"):
                        self.notes.append(f"NCCL WARN P2P is disabled between NVLINK connected GPUs {ra} and {rb}.")
                    elif path.type < self.code("SYS"):
                        self.notes.append(f"NCCL INFO P2P is disabled between connected GPUs {ra} and {rb}. "
                                          "You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.")
                p2p = False
        read = (path.type == self.code("NVL") and nodes[g1].gpu.sm == nodes[g2].gpu.sm == 80)
        return p2p, read, intermediate

    # -- NET inside the node (ncclTopoCheckNet)
    def check_net(self, g1: int, g2: int) -> bool:
        if self.params.get("NCCL_NET_DISABLE_INTRA") == 1:
            return False
        speed = self.p(g1, g2).bw
        pxb = self.code("PXB")
        best1 = best2 = 0.0
        for net in self.s.nets():
            a, b = self.p(g1, net), self.p(g2, net)
            if a and a.type <= pxb and a.bw > best1:
                best1 = a.bw
            if b and b.type <= pxb and b.bw > best2:
                best2 = b.bw
        return best1 > speed and best2 > speed

    # -- GDR (ncclTopoCheckGdr)
    def check_gdr(self, gpu: int, net: int, read: bool) -> Gdr:
        nodes = self.s.nodes
        g, n = nodes[gpu].gpu, nodes[net].net
        rank = g.rank
        off = lambda why: Gdr(False, "Disabled", why, rank)  # noqa: E731
        if not n.gdr or not g.gdr:
            return off("no GDR support")
        if read:
            gdr_read = self.params.get("NCCL_NET_GDR_READ")
            if gdr_read == 0:
                return off("NCCL_NET_GDR_READ=0")
            if gdr_read < 0 and g.sm < 80:
                others = [o for o in self.s.gpus() if o != gpu]
                nvlink = not others or any(self.p(gpu, o).type == self.code("NVL") for o in others)
                if not nvlink:
                    return off("pre-Ampere GPU without NVLink peer")
        distance = self.p(gpu, net).type
        proxy = gpu
        if distance == self.code("PXN") and self.rules.has_path("PXN"):
            proxy = self._pxn_proxy(gpu, net)
            distance = self.p(proxy, net).type
        name = self.rules.path_names[distance]
        level = self.code(self.gdr_level)
        c2c_ok = (self.rules.has_p2c and self.rules.release.gdr_c2c_allows_p2c and self._gdr_c2c()
                  and distance == self.code("P2C"))
        if distance > level and not c2c_ok:
            return Gdr(False, "Disabled", name, nodes[proxy].gpu.rank)
        cpu = self.local_cpu(proxy)
        mode = "Default"
        if cpu is not None and self.rules.has_path("C2C") and self.p(proxy, cpu).type == self.code("C2C") \
                and (not self.rules.has_p2c or distance != self.code("P2C")):
            mode = "PCI"
        return Gdr(True, mode, name, nodes[proxy].gpu.rank)

    def _pxn_proxy(self, gpu: int, net: int) -> int:
        """ncclTopoGetIntermediateRank: the first GPU after the NVSwitches on a PXN path."""
        nodes = self.p(gpu, net).nodes
        # From 2.30 the path starts GPU -> own DEV -> NVS ..., so the walk starts one hop later.
        for node in nodes[1:] if self.s.of_kind("DEV") else nodes:
            kind = self.s.nodes[node].kind
            if kind == "NVS":
                continue
            if kind == "DEV":
                return next(l.dst for l in self.s.nodes[node].links
                            if l.kind == "LOC" and self.s.nodes[l.dst].kind == "GPU")
            return node
        return gpu

    # -- the passes
    def divert_non_p2p(self) -> dict[tuple[int, int], tuple[bool, bool, int]]:
        gpus = self.s.gpus()
        decisions = {}
        shm_disable = self.params.get("NCCL_SHM_DISABLE") == 1
        for g in gpus:
            for p in gpus:
                ok, read, inter = self.check_p2p(p, g)
                decisions[(p, g)] = (ok, read, inter)
                if not ok:
                    cpu = self.local_cpu(g)
                    if cpu is not None:
                        self.add_inter_step(cpu, p, g)
            for p in gpus:
                if p == g:
                    continue
                ok, _, _ = decisions[(p, g)]
                same_host = self.s.nodes[p].system_id == self.s.nodes[g].system_id
                can_p2p = ok and self.s.nodes[p].gpu.cuda_p2p and self.s.nodes[g].gpu.cuda_p2p and \
                    not self.check_net(p, g)
                can_shm = not shm_disable and same_host and not self.check_net(p, g)
                if not can_p2p and not can_shm:
                    old = self.p(p, g)
                    self.set_p(p, g, _P(self.code("NET"), old.bw, old.nodes, old.links))
        return decisions

    def p2c_fixup(self) -> None:
        if not self.rules.has_p2c:
            return
        p2c = self.code("P2C")
        nets = self.s.nets()
        for g in self.s.gpus():
            c = self.local_cpu(g)
            if c is None:
                continue
            for k in _get_local(self.to, self.s, g, "NET"):
                n = nets[k]
                if self.merge(self.p(g, c).type, self.p(n, c).type) == p2c:
                    gp, np_ = self.p(g, n), self.p(n, g)
                    self.set_p(g, n, _P(min(p2c, gp.type), gp.bw, gp.nodes, gp.links))
                    self.set_p(n, g, _P(min(p2c, np_.type), np_.bw, np_.nodes, np_.links))

    def pxn_c2c(self) -> bool:
        value = self.params.get("NCCL_PXN_C2C")
        return bool(self.rules.pxn_c2c_default if value is None else value) and self.rules.has_p2c

    def pxn_and_gdr(self) -> bool:
        pxn_enabled = self.params.get("NCCL_PXN_DISABLE") != 1
        pxn_c2c = self.pxn_c2c()
        code = self.code
        for net in self.s.nets():
            peer = _local_gpu_of_net(self.to, self.s, net) if pxn_enabled else None
            for g in self.s.gpus():
                if pxn_enabled and self.rules.has_path("PXN"):
                    if peer is not None and peer != g:
                        # NCCL_PXN_C2C lets the relay reach its NIC over P2C (2.27+, where P2C exists)
                        limit = code("P2C") if (self.rules.has_p2c and pxn_c2c) else code("PXB")
                        peer_net, mine = self.p(peer, net), self.p(g, net)
                        gdr_ok = (not self.rules.pxn_requires_gdr) or self.check_gdr(peer, net, True).enabled
                        if (peer_net.type <= limit and gdr_ok
                                and self.p(peer, g).type <= code("NVL")
                                and self.s.nodes[peer].system_id == self.s.nodes[g].system_id
                                and (peer_net.bw > mine.bw or mine.type > code(self.rules.pxn_cpu_avoid_above))):
                            self.add_inter_step(peer, g, net, pxn=True)
                mine = self.p(g, net)
                if not self.rules.gdr_check_below_phb_only or mine.type < code("PHB"):
                    if not self.check_gdr(g, net, False).enabled:
                        cpu = self.local_cpu(g)
                        if cpu is not None:
                            self.add_inter_step(cpu, net, g)
                            self.add_inter_step(cpu, g, net)
        return pxn_enabled

    def transports(self, decisions) -> dict[tuple[int, int], Transport]:
        result = {}
        shm_disable = self.params.get("NCCL_SHM_DISABLE") == 1
        cumem = self.params.get("NCCL_CUMEM_ENABLE") != 0 and self.rules.release.cumem_by_default
        nodes = self.s.nodes
        for (p, g), (ok, read, inter) in decisions.items():
            if p == g:
                continue
            ra, rb = nodes[p].gpu.rank, nodes[g].gpu.rank
            if self.p(p, g).type == self.code("NET") or (not ok and shm_disable):
                result[(ra, rb)] = Transport("NET", self._net_detail(p))
                continue
            cuda = nodes[p].gpu.cuda_p2p and nodes[g].gpu.cuda_p2p
            if ok and cuda and not self.check_net(p, g):
                detail = "P2P/CUMEM" if cumem else "P2P/IPC"
                result[(ra, rb)] = Transport("P2P", detail + ("/read" if read else ""), inter, read)
            elif not shm_disable and not self.check_net(p, g):
                result[(ra, rb)] = Transport("SHM", "SHM/direct/direct")
            else:
                result[(ra, rb)] = Transport("NET", self._net_detail(p))
        return result

    def _net_detail(self, gpu: int) -> str:
        net = _local_net(self.to, self.s, gpu, 0)
        if net is None:
            return f"NET/{self.net_plugin}"
        dev = self.s.nodes[net].net.dev
        gdr = self.check_gdr(gpu, net, True).enabled and self.net_plugin != "Socket"
        return f"NET/{self.net_plugin}/{dev}" + ("/GDRDMA" if gdr else "")

    def gdr_tables(self) -> tuple[dict, dict]:
        send, recv = {}, {}
        plugin_gdr = self.net_plugin != "Socket"
        for g in self.s.gpus():
            for n in self.s.nets():
                key = (self.gpu_rank(g), n)
                s, r = self.check_gdr(g, n, True), self.check_gdr(g, n, False)
                if not plugin_gdr:
                    s = Gdr(False, "Disabled", s.distance, s.proxy_rank)
                    r = Gdr(False, "Disabled", r.distance, r.proxy_rank)
                send[key], recv[key] = s, r
        return send, recv

    def search_bw(self) -> tuple[float, float]:
        """ncclTopoSearchInit: maxBw (best GPU->NET, or GPU->GPU path) and totalBw (injection)."""
        devices = self.s.of_kind(self.s.device_kind)
        if not self.inter and len(self.s.gpus()) == 1:
            return LOC_BW, LOC_BW
        max_bw = total_bw = 0.0
        targets = self.s.nets() if self.inter else devices
        for d in devices:
            for t in targets:
                p = self.p(d, t)
                if p is not None and p.nodes:
                    max_bw = max(max_bw, p.bw)
            nvl = sum(l.bw_gbps for l in self.s.nodes[d].links if l.kind == "NVL")
            pci = 0.0
            for l in self.s.nodes[d].links:
                if l.kind == "PCI":
                    pci = l.bw_gbps
            total_bw = max(total_bw, nvl, pci)
        return max_bw, total_bw

    def run(self) -> tuple[dict, bool]:
        """ncclTopoComputePaths' passes, in NCCL's order."""
        decisions = self.divert_non_p2p()
        self.p2c_fixup()
        return decisions, self.pxn_and_gdr()

    def domains_to_trim(self, rank: int) -> set[int]:
        """ncclTopoTrimSystem: GPUs outside `rank`'s P2P/SHM domain (paths worse than NET cut it)."""
        gpus = self.s.gpus()
        domain = {}
        mine = 0
        net = self.code("NET")
        for k, g in enumerate(gpus):
            domain[k] = k
            for q in range(k):
                if self.p(g, gpus[q]).type < net:
                    domain[k] = min(domain[k], domain[q])
            if self.s.nodes[g].gpu.rank == rank:
                mine = domain[k]
        return {g for k, g in enumerate(gpus) if domain[k] != mine}

    def freeze(self, decisions, pxn_enabled, transports, node_system: System, rank: int, nranks: int) -> Paths:
        names = self.rules.path_names
        to = {}
        for dst, row in self.to.items():
            to[dst] = tuple(Path(names[p.type], p.bw, p.nodes, p.links) if p is not None else None for p in row)
        max_bw, total_bw = self.search_bw()
        send, recv = self.gdr_tables()
        return Paths(
            system=self.s, node_system=node_system, rank=rank, nranks=nranks,
            to=MappingProxyType(to), transports=MappingProxyType(transports),
            gdr_send=MappingProxyType(send), gdr_recv=MappingProxyType(recv),
            p2p_level=self.p2p_level, gdr_level=self.gdr_level, pxn_enabled=pxn_enabled, pxn_c2c=self.pxn_c2c(),
            p2p_pxn_level=int(self.params.get("NCCL_P2P_PXN_LEVEL")),
            cross_nic=int(self.params.get("NCCL_CROSS_NIC")), net_plugin=self.net_plugin,
            inter=self.inter, max_bw=max_bw, total_bw=total_bw, notes=tuple(dict.fromkeys(self.notes)),
        )


def compute_paths(system: System, params: Params, *, nranks: int | None = None, rank: int | None = None,
                  net_plugin: str = "IB") -> Paths:
    """NCCL's paths and transport decisions for `system` as rank `rank` of `nranks` sees them.

    Follows NCCL's init: compute paths, trim the system to the rank's P2P/SHM domain
    (ncclTopoTrimSystem — until 2.27 a one-node communicator also drops its NETs), compute the
    paths again; `inter` (multi-node, which decides what maxBw measures) is "fewer GPUs than
    ranks" from 2.28 and "NETs left" before. `nranks` defaults to the system's GPUs (one node);
    `net_plugin` is the name NCCL prints for the network ("IB", "Socket", "AWS Libfabric");
    NCCL_IB_DISABLE turns IB into sockets. Transports cover every GPU pair of the node.
    """
    if params.get("NCCL_IB_DISABLE") == 1 and net_plugin == "IB":
        net_plugin = "Socket"
    if params.get("NCCL_IB_HCA") and net_plugin == "IB" and system.nets():
        unused = {n for n in system.nets() if not ib_hca_selects(params.get("NCCL_IB_HCA"), system.nodes[n].net.name,
                                                                  system.nodes[n].net.port)}
        if len(unused) == len(system.nets()):
            net_plugin = "Socket"  # net_ib/init.cc: "NET/IB : No device found.", then the Socket transport
        elif unused:
            system = system.without(unused)
    gpus = system.gpus()
    nranks = nranks if nranks is not None else len(gpus)
    if rank is None:
        rank = min((system.nodes[g].gpu.rank for g in gpus), default=0)
    first = _Compute(system, params, net_plugin)
    decisions, pxn = first.run()
    transports = first.transports(decisions)
    removed = first.domains_to_trim(rank) if gpus else set()
    view = system.without(removed) if removed else system
    if system.rules.trim_removes_nets and len(view.gpus()) == nranks and view.nets():
        view = view.without(set(view.nets()))
    final = first
    if view is not system:
        final = _Compute(view, params, net_plugin)
        decisions, pxn = final.run()
    if system.rules.trim_removes_nets:
        final.inter = bool(view.nets())
    else:
        final.inter = len(view.gpus()) != nranks
    return final.freeze(decisions, pxn, transports, system, rank, nranks)


def local_nets(paths: Paths, rank: int) -> tuple[int, ...]:
    """Indices of the NET nodes closest to a rank's GPU (ncclTopoGetLocal GPU -> NET)."""
    s = paths.system
    gpu = s.gpu_by_rank(rank)
    nets = s.nets()
    return tuple(nets[k] for k in _get_local(_table(paths), s, gpu, "NET"))


def local_net(paths: Paths, rank: int, channel: int = 0) -> int | None:
    """The NET node a rank uses on `channel` (ncclTopoGetLocalNet)."""
    return _local_net(_table(paths), paths.system, paths.system.gpu_by_rank(rank), channel)


def ib_hca_selects(setting: str, name: str, port: int) -> bool:
    """Whether NCCL_IB_HCA `setting` keeps device `name` port `port` (misc/utils.cc matchIfList: a
    leading '^' excludes, then '=' asks exact names, else each entry is a prefix; ':N' a port)."""
    exclude = setting.startswith("^")
    body = setting[1:] if exclude else setting
    exact = body.startswith("=")
    body = body[1:] if exact else body
    hit = False
    for entry in (e for e in body.split(",") if e):
        ref, _, port_text = entry.partition(":")
        ref_port = int(port_text.split(":")[0]) if port_text.split(":")[0].isdigit() else -1
        named = name == ref if exact else name.startswith(ref)
        if named and (ref_port == -1 or port == ref_port):
            hit = True
            break
    return hit != exclude


def p2p_net(paths: Paths, rank: int, peer_dev: int, channel: int = 0) -> tuple[int | None, int]:
    """(NET node, proxy rank) a rank uses to send to or receive from a peer GPU `peer_dev` on another
    node, as search.cc ncclTopoGetNetDev does for point-to-point without a graph: its own NIC, or —
    with NCCL_P2P_PXN_LEVEL 1/2 or NCCL_CROSS_NIC=0 — the NIC matching the peer's GPU, reached
    through the NVLink peer that sits next to it (PXN)."""
    s = paths.system
    table = _table(paths)
    gpu = s.gpu_by_rank(rank)
    net = _local_net(table, s, gpu, channel)
    proxy = rank
    level = paths.p2p_pxn_level if paths.pxn_enabled else 0
    if net is None or not (paths.cross_nic == 0 or level != 0):
        return net, proxy
    twin = next((g for g in s.gpus() if s.nodes[g].gpu.dev == peer_dev
                 and s.nodes[g].system_id == s.nodes[gpu].system_id), None)
    if twin is None:
        return net, proxy
    peer_net = _local_net(table, s, twin, channel)
    if paths.cross_nic == 0:
        net = peer_net
    code = s.rules.path_code
    if peer_net is None:
        return net, proxy
    if level == 1 and s.rules.has_path("PXN"):
        if code(paths.path(gpu, peer_net).type) <= code("PXN"):
            return peer_net, paths.gdr_send[(rank, peer_net)].proxy_rank
    elif level == 2:
        relay = _local_gpu_of_net(table, s, peer_net)
        if relay is not None:
            limit = code("P2C") if paths.pxn_c2c else code("PXB")
            relay_rank = s.nodes[relay].gpu.rank
            if (code(paths.path(relay, gpu).type) <= code("NVL")
                    and code(paths.path(relay, peer_net).type) <= limit
                    and paths.gdr_recv[(relay_rank, peer_net)].enabled):
                return peer_net, relay_rank
    return net, proxy


class _TypedRow:
    """Adapts frozen Path rows to the integer-typed view the local-net helpers read."""

    __slots__ = ("row", "code")

    def __init__(self, row, code):
        self.row, self.code = row, code

    def __getitem__(self, i):
        p = self.row[i]
        return None if p is None else _P(self.code(p.type), p.bw_gbps, p.nodes, p.links)


def _table(paths: Paths) -> dict:
    code = paths.system.rules.path_code
    return {dst: _TypedRow(row, code) for dst, row in paths.to.items()}


# ---------------------------------------------------------------------------------------------
# Printing

PATH_LEGEND = (
    "LOC = same device; NVL = NVLink; NVB = NVLink through an intermediate GPU; C2C = Grace C2C; "
    "PIX = at most one PCIe bridge; PXB = several PCIe bridges, no host bridge; P2C = C2C then PCIe; "
    "PXN = through an NVLink peer to its NIC; PHB = through a CPU host bridge; SYS = across CPUs (QPI/UPI/xGMI); "
    "NET = only over the network; DIS = disconnected"
)


def _short(transport: Transport | None) -> str:
    if transport is None:
        return "X"
    text = transport.kind + ("/read" if transport.read else "")
    return text + (f"@{transport.intermediate_rank}" if transport.intermediate_rank >= 0 else "")


def _cell(path: Path | None) -> str:
    return "-" if path is None else f"{path.type}/{path.bw_gbps:.1f}"


_PRINT_ORDER = ("GPU", "PCI", "NVS", "CPU", "NIC", "NET", "DEV")  # topo.h node type order
MATRIX_LIMIT = 16


def format_nccl_paths(paths: Paths) -> list[str]:
    """The per-GPU and per-NET path lines NCCL prints after the system (paths.cc printNodePaths)."""
    s = paths.system
    style = s.rules.print_style

    def label(index: int, header: bool) -> str:
        node = s.nodes[index]
        if style == 218 or (style in (221, 222) and header):
            return f"{node.kind}/{node.id:X}"
        return f"{node.kind}/{node.system_id:x}-{node.local_id:x}"

    out = []
    for src in s.gpus() + s.nets():
        line = label(src, True) + " :"
        for kind in _PRINT_ORDER:
            for dst in s.of_kind(kind):
                p = paths.path(src, dst)
                if p is None:
                    continue
                # 2.18-2.20 print the float path bandwidth with %f (370.800018 for 18 x 20.6)
                bw = f"{f32(p.bw_gbps):f}" if style == 218 else f"{p.bw_gbps:.1f}"
                line += f"{label(dst, False)} ({p.hops}/{bw}/{p.type}) "
        out.append(line)
    return out


def format_paths(paths: Paths) -> list[str]:
    """Path types and GB/s as a GPU x (GPU, NET) matrix, transports, and each GPU's NIC and GDR."""
    s = paths.system
    gpus = sorted(s.gpus(), key=lambda g: s.nodes[g].gpu.rank)
    shown = gpus[:MATRIX_LIMIT]
    hosts = {s.nodes[g].system_id for g in shown}
    nets = [n for n in s.nets() if s.nodes[n].system_id in hosts]
    heads = [f"GPU{s.nodes[g].gpu.rank}" for g in shown] + [f"NET{s.nodes[n].net.dev}" for n in nets]
    cols = shown + nets
    width = max([11] + [len(h) + 1 for h in heads])
    out = [f"Paths, NCCL {s.rules.version} (type/bottleneck GB/s, row to column):",
           " " * 8 + "".join(h.ljust(width) for h in heads)]
    for g in shown:
        cells = [_cell(paths.path(g, c)) if c != g else "X" for c in cols]
        out.append(f"GPU{s.nodes[g].gpu.rank}".ljust(8) + "".join(c.ljust(width) for c in cells))
    for n in nets:
        cells = [_cell(paths.path(n, c)) if c != n else "X" for c in cols]
        out.append(f"NET{s.nodes[n].net.dev}".ljust(8) + "".join(c.ljust(width) for c in cells))
    if len(gpus) > len(shown):
        out.append(f"({len(gpus) - len(shown)} more GPUs not shown)")
    out.append("")
    out.append(f"P2P level {paths.p2p_level}, GDR level {paths.gdr_level}, PXN {'on' if paths.pxn_enabled else 'off'}"
               f" (NCCL_P2P_PXN_LEVEL {paths.p2p_pxn_level}), network {paths.net_plugin}")
    if paths.transports:
        details = sorted({t.detail for t in paths.transports.values()})
        out.append(f"Transports, row sends to column ({', '.join(details)}; @R = through rank R):")
        ranks = [s.nodes[g].gpu.rank for g in shown]
        out.append(" " * 8 + "".join(f"GPU{r}".ljust(width) for r in ranks))
        for a in ranks:
            cells = [_short(paths.transports.get((a, b))) for b in ranks]
            out.append(f"GPU{a}".ljust(8) + "".join(c.ljust(width) for c in cells))
    if nets:
        out.append("GPU -> NIC on channel 0 (path; GPUDirect RDMA for send / recv):")
        for g in shown:
            rank = s.nodes[g].gpu.rank
            n = local_net(paths, rank, 0)
            if n is None:
                continue
            send, recv = paths.gdr_send[(rank, n)], paths.gdr_recv[(rank, n)]
            proxy = f", PXN via rank {send.proxy_rank}" if send.proxy_rank != rank else ""
            out.append(f"  GPU{rank} -> NET{s.nodes[n].net.dev} ({s.nodes[n].net.name}): {_cell(paths.path(g, n))}, "
                       f"GDR {'on' if send.enabled else 'off'} / {'on' if recv.enabled else 'off'} "
                       f"({send.distance}){proxy}")
    out.append("Legend: " + PATH_LEGEND)
    return out
