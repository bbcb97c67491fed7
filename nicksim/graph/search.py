"""Graph search: how NCCL finds its rings, trees and NVLS heads (search.cc, ncclTopoCompute).

`search_graph(paths, params, pattern, ...)` runs NCCL's search on the rank's view of the system
(Paths.system): a depth-first search over GPUs (from a NIC when the job spans nodes) that
reserves bandwidth on every link a channel crosses and gives it back on backtrack, under a step
budget; a first pass relaxes the constraints in NCCL's order (same channels, simpler tree,
farther path types intra then inter, cross-NIC, lower speed on the speed ladder of the GPU
generation), channels are duplicated, and a second pass raises the speed. The result is a frozen
Graph with NCCL's fields (pattern, crossNic, nChannels, bwIntra/bwInter, typeIntra/typeInter,
sameChannels, per channel the GPU ranks and NICs), printed by `format_graph` as
ncclTopoPrintGraph does (both live in graphs.py, which a cached run reads without this module; they
are re-exported here).

Bandwidths are float32 as in NCCL, so that the search takes the same branches. What changed
between releases comes from the release's rules (constants/rules.py). The recursion runs on an
explicit stack (`_run`), as deep as NCCL's, whatever Python's recursion limit.
Checked line for line against NCCL 2.18.6, 2.19.4 and 2.22.3 to 2.30.7 (every release line but
2.20 and 2.21, which take the rules of their neighbours) on the catalog systems
(tests/golden/nccl-search).
"""
from __future__ import annotations

import math

import numpy as np

from ..constants.rules import ReleaseRules, rules
from ..constants.versions import DEFAULT_VERSION
from ..params import Params
from .graphs import (BALANCED_TREE, COLLNET_DIRECT, NVLS, RING, SPLIT_TREE, TREE, Graph, collnet_enabled,
                     format_graph, graphs_xml)
from .paths import Paths, _get_local, _local_gpu_of_net, _local_net, _table
from ..topology.system import CPU_ARCH, CPU_VENDOR, System

__all__ = [
    "nvls_initialised",
    "Graph",
    "RING",
    "BALANCED_TREE",
    "SPLIT_TREE",
    "TREE",
    "NVLS",
    "COLLNET_DIRECT",
    "search_graph",
    "search_graphs",
    "format_graph",
    "graphs_xml",
    "load_graph",
    "SPEEDS",
    "search_ladder",
]

# MAXCHANNELS, NCCL_TOPO_MAX_NODES (graph->intra holds MAXCHANNELS of them), NCCL_MAX_NVLS_ARITY and
# NCCL_SEARCH_GLOBAL_TIMEOUT changed between releases: they are ReleaseRules fields.
DIRECT_ARITY = 7          # device.h NCCL_MAX_DIRECT_ARITY (2.18-2.30)
TIMEOUT = 1 << 14         # NCCL_SEARCH_TIMEOUT (and _TREE)
TIMEOUT_SAMECHANNELS = 1 << 8
FORCED_ORDER_PCI, FORCED_ORDER_REPLAY = 1, 2

_f = np.float32
# search.cc speed ladders (GB/s per channel) of GPUs before SM90, unchanged 2.18-2.30; intra for one
# node, inter across nodes. The SM90 and SM100 ladders grew over the releases (ReleaseRules).
_SPEEDS_PRE_SM90 = {
    "intra": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "inter": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12),
}
_NEWEST = rules(DEFAULT_VERSION)
# The ladders of the newest modelled release, by SM generation.
SPEEDS = {kind: {0: _SPEEDS_PRE_SM90[kind], 90: getattr(_NEWEST, f"search_speeds_sm90_{kind}"),
                 100: getattr(_NEWEST, f"search_speeds_sm100_{kind}")} for kind in ("intra", "inter")}


class _G:
    """The mutable ncclTopoGraph the search fills (a copy is the best graph found so far)."""

    def __init__(self, gid: int, pattern: int, min_ch: int, max_ch: int, ngpus: int, maxchannels: int,
                 collnet: int = 0):
        self.id, self.pattern, self.collnet = gid, pattern, collnet
        self.min_channels, self.max_channels = min_ch, max_ch
        self.cross_nic = 0
        self.n_channels = 0
        self.bw_intra = self.bw_inter = _f(0)
        self.latency_inter = _f(0)
        self.type_intra = self.type_inter = 0
        self.same_channels = 0
        self.n_hops = 0
        self.intra = [0] * (maxchannels * max(ngpus, 1))
        self.inter = [0] * (maxchannels * 2)

    def copy(self) -> "_G":
        other = _G.__new__(_G)
        other.__dict__.update(self.__dict__)
        other.intra = list(self.intra)
        other.inter = list(self.inter)
        return other


_THOUSAND = _f(1000)


def _sub_round(a: np.float32, b: np.float32) -> np.float32:
    """search.cc SUB_ROUND: a = roundf((a - b) * 1000) / 1000, in float32 (roundf: half away from 0)."""
    x = float((a - b) * _THOUSAND)
    t = math.trunc(x)
    if abs(x - t) >= 0.5:
        t += 1 if x > 0 else -1
    return _f(t) / _THOUSAND


class _Search:
    """One ncclTopoCompute: live link and NIC bandwidths, GPU use flags, and the recursive search."""

    def __init__(self, paths: Paths, params: Params):
        self.paths = paths
        self.s: System = paths.system
        s = self.s
        self.rules = s.rules
        self.release: ReleaseRules = s.rules.release
        self.code = self.rules.path_code
        self.params = params
        self.inter = paths.inter
        self.gpus = list(s.gpus())
        self.nets = list(s.nets())
        self.nvs = list(s.of_kind("NVS"))
        self.devs = list(s.of_kind(s.device_kind))
        self.ngpus = len(self.gpus)
        # live bandwidths, float32, per node and link position (NCCL edits link->bw in place)
        self.bw = [[_f(l.bw_gbps) for l in node.links] for node in s.nodes]
        self.net_bw = {n: _f(s.nodes[n].net.bw_gbps) for n in self.nets}
        self.used = [0] * self.ngpus
        self.table = _table(paths)
        self.gpu_pos = {g: k for k, g in enumerate(self.gpus)}
        self.net_pos = {n: k for k, n in enumerate(self.nets)}
        self.local_gpu = {n: _local_gpu_of_net(self.table, s, n) for n in self.nets}
        self._local_gpus: dict[int, list[int]] = {}
        self._twins: dict[int, list[int]] = {}
        self._net_of_id = {}
        for n in reversed(self.nets):  # the first NIC with an id, as a scan finds it
            self._net_of_id[s.nodes[n].id] = n
        self.rank_of = [s.nodes[g].gpu.rank for g in self.gpus]
        cpus = s.of_kind("CPU")
        self.amd = bool(cpus) and s.nodes[cpus[0]].cpu.arch == CPU_ARCH["x86_64"] \
            and s.nodes[cpus[0]].cpu.vendor == CPU_VENDOR["AuthenticAMD"]
        self._codes = {name: i for i, name in enumerate(self.rules.path_names)}
        self._dis = self._codes["DIS"]
        self._paths: dict[tuple[int, int], object] = {}
        self._hops: dict[tuple[int, int], tuple] = {}
        self._plain_hops: dict[tuple[int, int], tuple] = {}  # (node, link position, PCI) per hop
        self._candidate_sets: dict[tuple, frozenset] = {}
        self._nets_for: dict[tuple[int, int], list[int]] = {}
        self._pairs: dict[tuple[int, int], tuple] = {}
        self._candidates: dict[tuple[int, int | None], list[tuple]] = {}
        self._sub_memo: dict = {}  # SUB_ROUND results: few distinct bandwidths meet again and again
        self._pci_links: dict[int, tuple[int, int, int, int] | None] = {}
        # search.cc until 2.22: crossNic 1 as "any NIC" and the NIC checks of that era (checked
        # against NCCL 2.19.4 and 2.22.3); 2.23 brought rails, planes and crossNic 2.
        self.legacy = self.release.cross_nic_search != "alternate"

    # -- paths as NCCL indexes them (cached: the paths never change during a search)
    def path(self, src: int, dst: int):
        key = (src, dst)
        found = self._paths.get(key)
        if found is None and key not in self._paths:
            found = self._paths[key] = self.paths.path(src, dst)
        return found

    def _pair(self, src: int, dst: int) -> tuple:
        """(path, both ends GPU/NVS, path type code, reverse path type code) — fixed during a search."""
        key = (src, dst)
        found = self._pairs.get(key)
        if found is None:
            p = self.path(src, dst)
            kinds = (self.s.nodes[src].kind, self.s.nodes[dst].kind)
            intra = kinds[0] in ("GPU", "NVS") and kinds[1] in ("GPU", "NVS")
            found = self._pairs[key] = (p, intra, self.ptype(p), self.ptype(self.path(dst, src)))
        return found

    def ptype(self, p) -> int:
        return self._codes[p.type] if p is not None else self._dis

    def hops(self, src: int, dst: int, p) -> tuple:
        """Per hop: (node, link position, link kind, far node is a pre-Ampere DEV/GPU, far node is a
        POWER CPU reached over NVLink), plus whether an Intel CPU on a PHB path charges the PCIe
        overhead — everything followPath reads that does not change during the search."""
        key = (src, dst)
        found = self._hops.get(key)
        if found is not None:
            return found
        nodes = self.s.nodes
        intel = False
        steps = []
        for (node, pos) in p.links:
            link = nodes[node].links[pos]
            rem = nodes[link.dst]
            if rem.kind == "CPU" and p.type == "PHB" and nodes[src].kind == "GPU" \
                    and rem.cpu.arch == CPU_ARCH["x86_64"] and rem.cpu.vendor == CPU_VENDOR["GenuineIntel"]:
                intel = True
            old_gpu = (rem.kind == self.s.device_kind and rem.gpu is not None and rem.gpu.sm < 80
                       and nodes[src].kind != "GPU")
            # search.cc 2.18.6 followPath charges the way back on any CPU reached over NVLink and
            # findRevLink takes the first link back whatever its type (2.19 adds both checks).
            checked = self.release.follow_path_power_only
            power = rem.kind == "CPU" and link.kind == "NVL" and (not checked or rem.cpu.arch == CPU_ARCH["ppc64"])
            rev = self._rev(node, link.dst, link.kind if checked else None) if (old_gpu or power) else None
            steps.append((node, pos, link.kind == "PCI", old_gpu, power, rev))
        found = self._hops[key] = (tuple(steps), intel)
        if not any(old_gpu or power for _, _, _, old_gpu, power, _ in steps):
            self._plain_hops[key] = tuple(step[:3] for step in steps)
        return found

    # -- followPath / ncclTopoFollowPath
    def _follow(self, p, start: int, dst: int, max_steps: int, bw: np.float32) -> int:
        steps, intel = self._hops.get((start, dst)) or self.hops(start, dst, p)
        pci_bw = _f(bw * 6 / 5) if intel else bw  # topo.h INTEL_P2P_OVERHEAD
        live = self.bw
        memo = self._sub_memo
        plain = self._plain_hops.get((start, dst))
        if plain is not None:  # no hop charges a way back: the common case, kept lean
            for step, (node, pos, is_pci) in enumerate(plain[:max_steps]):
                fw = pci_bw if is_pci else bw
                row = live[node]
                cur = row[pos]
                if cur < fw:
                    return step
                value = memo.get((cur, fw))
                if value is None:
                    value = memo[(cur, fw)] = _sub_round(cur, fw)
                row[pos] = value
            return max_steps
        for step in range(max_steps):
            node, pos, is_pci, old_gpu, power, rev = steps[step]
            fw = pci_bw if is_pci else bw
            rev_bw = _f(0)
            if old_gpu:
                rev_bw = rev_bw + fw / 8
            if power:
                rev_bw = rev_bw + fw
            if live[node][pos] < fw or (rev_bw and live[rev[0]][rev[1]] < rev_bw):
                return step
            key = (live[node][pos], fw)
            value = memo.get(key)
            if value is None:
                value = memo[key] = _sub_round(*key)
            live[node][pos] = value
            if rev_bw:
                live[rev[0]][rev[1]] = _sub_round(live[rev[0]][rev[1]], rev_bw)
        return max_steps

    def _rev(self, a: int, b: int, kind: str | None) -> tuple[int, int]:
        for pos, link in enumerate(self.s.nodes[b].links):
            if link.dst == a and (kind is None or link.kind == kind):
                return b, pos
        raise RuntimeError("no reverse link")  # build_system refuses such systems

    def follow_path(self, g: _G, src: int | None, dst: int, mult: float) -> int | None:
        """ncclTopoFollowPath: reserve (mult>0) or give back (<0) bw on src->dst; the node or None."""
        if src is None:
            return dst
        p, intra, ptype, rev_type = self._pairs.get((src, dst)) or self._pair(src, dst)
        if self.release.empty_path_follows and (p is None or not p.links):
            return dst  # until 2.20 an empty path succeeds at once
        bw = g.bw_intra if intra else g.bw_inter
        limit = g.type_intra if intra else g.type_inter
        if ptype >= self._dis:
            return None
        if mult == 1 and ptype > limit:
            return None
        if mult == 1 and g.pattern in (BALANCED_TREE, TREE, SPLIT_TREE) and rev_type > limit:
            return None
        whole = mult in (1, -1, 2, -2)
        if mult != 1:
            bw = -bw if mult == -1 else _f(bw * _f(mult))
        count = len(p.links)
        step = self._follow(p, src, dst, count, bw)
        if step < count:
            self._follow(p, src, dst, step, -bw)
            return None
        if whole:
            g.n_hops += int(mult) * count
        else:
            # graph->nHops += mult*path->count: float arithmetic truncated back to int (CollNet
            # Direct's fractional shares drift it down when given back)
            g.n_hops = int(_f(_f(g.n_hops) + _f(_f(mult) * count)))
        return dst

    # -- GPU ordering (ncclTopoSearchNextGpuSort)
    def _gpu_pci_bw(self, gpu: int) -> int:
        if gpu not in self._pci_links:
            self._pci_links[gpu] = self._find_pci_link(gpu)
        found = self._pci_links[gpu]
        if found is None:
            return -1
        dev, pos, pci, back = found
        return int(min(self.bw[dev][pos], self.bw[pci][back]))

    def _find_pci_link(self, gpu: int) -> tuple[int, int, int, int] | None:
        """The GPU's (or its DEV's) first PCI uplink and the link back, as positions into self.bw."""
        dev = self.s.device_of(gpu)
        for pos, link in enumerate(self.s.nodes[dev].links):
            if link.kind != "PCI":
                continue
            pci = link.dst
            for back, blink in enumerate(self.s.nodes[pci].links):
                if blink.dst == dev:
                    return dev, pos, pci, back
        return None

    def next_gpus(self, g: _G, k: int, sort_net: int) -> list[int]:
        flag = 1 << g.n_channels
        net = self.net_id_to_node(g.inter[g.n_channels * 2]) if sort_net else None
        used = self.used
        neighbours = self.release.nvswitch_neighbours
        if self.nvs and neighbours == "only":
            # Only the NVSwitch neighbours are tried (see below); the sort cannot change which, and
            # each is moved to the front in turn, so they come out in reverse.
            first = self._nvs_neighbours(g.pattern, k)
            cands = self._candidate_set(k, net)
            return [f for f in reversed(first) if f in cands and not used[f] & flag]
        if net is None:
            scores = [(0, 0, 0, p_bw, p_len, i, j) for j, i, _, _, p_bw, p_len in self._gpu_candidates(k, None)
                      if not used[j] & flag]
        else:
            scores = [(neg_bw, -self._gpu_pci_bw(self.gpus[j]), hops, p_bw, p_len, i, j)
                      for j, i, neg_bw, hops, p_bw, p_len in self._gpu_candidates(k, net) if not used[j] & flag]
        scores.sort()
        order = [s[-1] for s in scores]
        if sort_net == -1 and len({(s[3], s[4]) for s in scores}) <= 1:
            order.reverse()
        count = len(order)
        if self.nvs and neighbours is not None:  # search.cc 2.19.4 adds "NVSwitches prefer ... neighbors first"
            prev_gpu, next_gpu = (k - 1 + self.ngpus) % self.ngpus, (k + 1) % self.ngpus
            if g.pattern == RING:
                first = [next_gpu, prev_gpu]
            elif g.pattern in (SPLIT_TREE, BALANCED_TREE):
                first = [prev_gpu, next_gpu]
            else:
                first = [next_gpu]
            if next_gpu == prev_gpu and len(first) == 2 and neighbours == "only":
                first = first[:1]
            real = 0
            for f in first:
                if f in order:
                    order.remove(f)
                    order.insert(0, f)
                    real += 1
            if neighbours == "only":
                count = real  # from 2.21 only the neighbours are tried behind an NVSwitch
        return order[:count]

    def _nvs_neighbours(self, pattern: int, k: int) -> list[int]:
        prev_gpu, next_gpu = (k - 1 + self.ngpus) % self.ngpus, (k + 1) % self.ngpus
        if pattern == RING:
            first = [next_gpu, prev_gpu]
        elif pattern in (SPLIT_TREE, BALANCED_TREE):
            first = [prev_gpu, next_gpu]
        else:
            first = [next_gpu]
        if next_gpu == prev_gpu and len(first) == 2:
            first = first[:1]
        return first

    def _candidate_set(self, k: int, net: int | None) -> frozenset:
        key = (k, net)
        found = self._candidate_sets.get(key)
        if found is None:
            found = self._candidate_sets[key] = frozenset(c[0] for c in self._gpu_candidates(k, net))
        return found

    def _gpu_candidates(self, k: int, net: int | None) -> list[tuple]:
        """The GPUs a search may move to from GPU k, with what ncclTopoSearchNextGpuSort ranks them
        by that never changes: (j, i, -NIC path bw, NIC path hops, -GPU path bw, GPU path hops)."""
        key = (k, net)
        found = self._candidates.get(key)
        if found is None:
            gpu = self.gpus[k]
            found = []
            for i in range(1, self.ngpus):
                j = (k + i) % self.ngpus
                p = self.path(gpu, self.gpus[j])
                if p is None or not p.links:
                    continue
                inter_bw = inter_hops = 0
                if net is not None:
                    np_ = self.path(net, self.gpus[j])
                    inter_hops, inter_bw = len(np_.links), int(np_.bw_gbps)
                found.append((j, i, -inter_bw, inter_hops, -int(p.bw_gbps), len(p.links)))
            self._candidates[key] = found
        return found

    def local_gpus(self, net: int) -> list[int]:
        """The GPUs closest to `net` (ncclTopoGetLocal): the static paths fix them for the whole search."""
        if net not in self._local_gpus:
            self._local_gpus[net] = _get_local(self.table, self.s, net, "GPU")
        return self._local_gpus[net]

    def net_id_to_node(self, net_id: int) -> int:
        return self._net_of_id[net_id]

    # -- NIC choice (ncclTopoSelectNets, ncclTopoSearchCheckNet)
    def select_nets(self, type_inter: int, gpu_k: int) -> list[int]:
        key = (type_inter, gpu_k)
        found = self._nets_for.get(key)
        if found is None:
            found = self._nets_for[key] = self._select_nets(type_inter, gpu_k)
        return found

    def _select_nets(self, type_inter: int, gpu_k: int) -> list[int]:
        s = self.s
        nets: list[int] = []
        if len(s.host_hashes) > 1:
            self._pref_nets_gpu_first(gpu_k, nets)
        else:
            self._pref_nets_channel_first(gpu_k, nets)
        for t in range(type_inter + 1):
            for k, gpu in enumerate(self.gpus):
                if gpu_k != -1 and gpu_k != k:
                    continue
                for n in (self.nets[:self.release.maxchannels] if self.release.select_nets_capped else self.nets):
                    if self.ptype(self.path(gpu, n)) == t and n not in nets:
                        nets.append(n)
        return nets

    def _local_nets_of(self, gpu: int) -> list[int]:
        found = []
        for c in range(self.release.maxchannels):
            n = _local_net(self.table, self.s, gpu, c)
            if found and n == found[0]:
                break
            found.append(n)
        return found

    def _pref_nets_channel_first(self, gpu_k: int, nets: list[int]) -> None:
        for k, gpu in enumerate(self.gpus):
            if gpu_k != -1 and gpu_k != k:
                continue
            for n in self._local_nets_of(gpu):
                if n is not None and n not in nets:
                    nets.append(n)

    def _pref_nets_gpu_first(self, gpu_k: int, nets: list[int]) -> None:
        ids = list(range(self.ngpus)) if gpu_k == -1 else [gpu_k]
        firsts: dict[int, int] = {}
        active = set(range(len(ids)))
        for c in range(self.release.maxchannels):
            for i, k in enumerate(ids):
                if i not in active:
                    continue
                n = _local_net(self.table, self.s, self.gpus[k], c)
                if c == 0:
                    firsts[i] = n
                elif firsts[i] == n:
                    active.discard(i)
                    continue
                if n is not None and n not in nets:
                    nets.append(n)
            if not active:
                break

    def check_net(self, g: _G, start: int, n: int, step: int) -> bool:
        net, first = self.s.nodes[n], self.s.nodes[start]
        if self.legacy:
            if g.pattern == TREE and net.id != first.id:
                return False
            if g.cross_nic != 1 and (net.net.asic != first.net.asic or net.net.port != first.net.port):
                return False
            if self.release.cross_nic_pairs_channels and g.cross_nic and g.n_channels & 1 \
                    and net.id != g.inter[(g.n_channels - 1) * 2]:
                return False
            return not (g.pattern == BALANCED_TREE and step != 0 and net.id != g.inter[g.n_channels * 2 + 1])
        if net.net.plane != -1 and first.net.plane != -1 and net.net.plane != first.net.plane:
            return False
        if g.pattern == TREE and net.id != first.id:
            return False
        if g.pattern == RING and g.cross_nic == 2:
            if g.n_channels & 1 and net.id != g.inter[(g.n_channels - 1) * 2]:
                return False
        elif g.cross_nic == 0:
            if net.net.rail != -1 and first.net.rail != -1:
                if net.net.rail != first.net.rail:
                    return False
            elif net.net.asic != first.net.asic or net.net.port != first.net.port:
                return False
        if g.pattern == BALANCED_TREE and step != 0 and net.id != g.inter[g.n_channels * 2 + 1]:
            return False
        return True

    # -- the recursion (ncclTopoSearchRec*, ncclTopoSearchTry*). The steps that recurse are generators:
    # `yield step(...)` is NCCL's call, run to its end by `_run` before the caller goes on.
    def compare(self, g: _G, best: _G) -> bool:
        if g.n_channels < g.min_channels:
            return False
        if g.pattern == NVLS:
            better = g.n_channels > best.n_channels and g.n_channels <= self.ngpus
            if not self.release.nvls_compare_bw:  # search.cc 2.18.6 ncclTopoCompareGraphs: channel count only
                return better
            return better or _f(g.n_channels * g.bw_inter) > _f(best.n_channels * best.bw_inter)
        mine, theirs = _f(g.n_channels * g.bw_intra), _f(best.n_channels * best.bw_intra)
        if self.release.compare_cross_nic_bonus:
            # until 2.19: a 15% bonus for channels that do not cross NICs
            target = _f(1.0 - (best.cross_nic - g.cross_nic) * 0.15)
            theirs = _f(theirs * target)
        if mine > theirs:
            return True
        if mine < theirs:
            return False
        return g.pattern == best.pattern and g.cross_nic == best.cross_nic and g.n_hops < best.n_hops

    def try_gpu(self, g, best, step, back_net, back_first, forced, time, src, k):
        flag = 1 << g.n_channels
        gpu = self.follow_path(g, src, self.gpus[k], 1)
        if gpu is not None:
            self.used[k] ^= flag
            yield self.rec_gpu(g, best, k, step, back_net, back_first, forced, time)
            self.used[k] ^= flag
            self.follow_path(g, src, self.gpus[k], -1)

    def _reserve_each(self, g, links: list[tuple[int, int, float]]) -> int:
        """followPath on each (src, dst, mult) in turn, stopping at the first that fails: how many
        were reserved (all of them when it equals len(links))."""
        done = 0
        for src, dst, mult in links:
            if self.follow_path(g, src, dst, mult) is None:
                break
            done += 1
        return done

    def _release_first(self, g, links: list[tuple[int, int, float]], done: int) -> None:
        """Give back the first `done` reservations, last first, as search.cc's unwinding loops do."""
        for src, dst, mult in reversed(links[:done]):
            self.follow_path(g, src, dst, -mult)

    def _try_both_ways(self, g, best, time, forward, backward, before_rec=None) -> None:
        """Reserve every forward path, then every backward one; with all of them, record the rest
        of the channel and recurse; then give everything back (TryNvls / TryCollnetDirect)."""
        fwd = self._reserve_each(g, forward)
        if fwd == len(forward):
            bwd = self._reserve_each(g, backward)
            if bwd == len(backward):
                if before_rec is not None:
                    before_rec()
                yield self.rec_gpu(g, best, None, self.ngpus, -1, -1, 0, time)
            self._release_first(g, backward, bwd)
        self._release_first(g, forward, fwd)

    def try_nvls(self, g, best, k, time):
        """ncclTopoSearchTryNvls: the NVSwitch reaches every GPU and every GPU reaches it, the head k
        carrying twice the bandwidth."""
        nvs = self.nvs[0]
        forward = [(nvs, gpu, 2 if d == k else 1) for d, gpu in enumerate(self.gpus)]
        backward = [(gpu, nvs, 2 if d == k else 1) for d, gpu in enumerate(self.gpus)]
        yield self._try_both_ways(g, best, time, forward, backward)

    def try_collnet_direct(self, g, best, k, time):
        """ncclTopoSearchTryCollnetDirect: the head k reaches every GPU and every GPU reaches it,
        each path carrying 1/(nGPUs-1) of the bandwidth; the other GPUs follow in index order."""
        count = self.ngpus
        mul = _f(1.0 / _f(count - 1))
        head = self.gpus[k]
        forward = [(head, gpu, mul) for gpu in self.gpus]
        backward = [(gpu, head, mul) for gpu in self.gpus]

        def list_the_others():
            others = [self.rank_of[i] for i in range(count) if i != k]
            g.intra[g.n_channels * count + 1:g.n_channels * count + count] = others
        yield self._try_both_ways(g, best, time, forward, backward, list_the_others)

    def rec_gpu(self, g, best, k, step, back_net, back_first, forced, time):
        if time[0] <= 0:
            return
        time[0] -= 1
        ngpus = self.ngpus
        if step == ngpus:
            g.n_channels += 1
            if self.compare(g, best):
                best.__dict__.update(g.copy().__dict__)
                if g.n_channels == g.max_channels:
                    time[0] = -1
            if g.n_channels < g.max_channels:
                yield self.rec(g, best, time)
            g.n_channels -= 1
            return
        g.intra[g.n_channels * ngpus + step] = self.rank_of[k]
        gpu = self.gpus[k]
        if step == back_net:
            if self.inter:
                start = self.net_id_to_node(g.inter[g.n_channels * 2])
                for n in self.select_nets(g.type_inter, k):
                    if not self.check_net(g, start, n, step):
                        continue
                    next_back = -1
                    saved = g.bw_inter
                    if g.pattern == BALANCED_TREE:
                        if step == 0:
                            next_back = 1
                        g.bw_inter = _f(g.bw_inter / 2)
                    net = self.follow_path(g, gpu, n, 1)
                    g.bw_inter = saved
                    if net is not None:
                        g.inter[g.n_channels * 2 + 1] = self.s.nodes[n].id
                        yield self.rec_gpu(g, best, k, step, next_back, back_first, forced, time)
                        if g.pattern == BALANCED_TREE:
                            g.bw_inter = _f(g.bw_inter / 2)
                        self.follow_path(g, gpu, n, -1)
                        g.bw_inter = saved
        elif g.pattern == NVLS:
            yield self.try_nvls(g, best, k, time)
        elif g.pattern == COLLNET_DIRECT:
            yield self.try_collnet_direct(g, best, k, time)
        elif step < ngpus - 1:
            if forced == FORCED_ORDER_PCI:
                order = [step + 1]
            elif forced == FORCED_ORDER_REPLAY:
                order = [self._replay_gpu(g, step)]
            else:
                sort_net = 0 if back_net == -1 else 1 if back_net == step + 1 else -1
                order = self.next_gpus(g, k, sort_net)
            for j in order:
                yield self.try_gpu(g, best, step + 1, back_net, back_first, forced, time, gpu, j)
        elif step == back_first:
            first_rank = g.intra[g.n_channels * ngpus]
            p = self.rank_of.index(first_rank)
            ok = self.follow_path(g, gpu, self.gpus[p], 1)
            if ok is not None:
                yield self.rec_gpu(g, best, p, step + 1, back_net, -1, forced, time)
                self.follow_path(g, gpu, self.gpus[p], -1)
        else:
            yield self.rec_gpu(g, best, k, ngpus, -1, -1, forced, time)

    def _replay_gpu(self, g: _G, step: int) -> int:
        rank = g.intra[(g.n_channels - 1) * self.ngpus + step + 1]
        return self.rank_of.index(rank)

    def rec_net(self, g, best, back_net, back_first, time):
        style = self.release.search_rec_net
        if style in ("2.18", "2.19", "2.22"):
            yield self._rec_net_legacy(g, best, back_net, back_first, time)
            return
        bw = int(g.bw_inter)
        nets = self.select_nets(g.type_inter, -1)
        found = False
        for i in range(len(nets)):
            if g.pattern in (NVLS, COLLNET_DIRECT) and found:
                break
            n = nets[(g.n_channels + i) % len(nets)]
            twins = self._take_net(g, n, bw)
            if twins is None:
                continue
            if g.pattern in (NVLS, COLLNET_DIRECT):
                if g.n_channels < len(nets):
                    local = self.local_gpu[n]
                    if local is not None:
                        k = self.gpu_pos[local]
                        heads = [g.intra[c * self.ngpus] for c in range(g.n_channels)]
                        if self.rank_of[k] not in heads:
                            yield self.try_gpu(g, best, 0, back_net, back_first, 0, time, n, k)
                            found = True
            elif style == "2.23":
                # search.cc 2.23.4-2.26.6 ncclTopoSearchRecNet: replay the last channel whenever there is
                # one, then (first channel or different channels) the PCI order and the GPUs closest to
                # the NIC, rotated by channel; 2.27.7 replaces these with net.localGpu and ncclTopoGetLocal.
                yield self._replay_pci_closest(g, best, back_net, back_first, time, n, bw, zero_hops_count=False)
            elif g.n_channels > 0 and g.same_channels == 1:
                yield self.try_gpu(g, best, 0, back_net, back_first, FORCED_ORDER_REPLAY, time, n,
                                   self._replay_gpu(g, -1))
            else:
                if g.n_channels == 0 and not self.nvs:
                    t = [1 << 10]
                    yield self.try_gpu(g, best, 0, back_net, back_first, FORCED_ORDER_PCI, t, n, 0)
                    if t[0] == -1:
                        time[0] = -1
                local = self.local_gpu[n]
                if local is not None:
                    yield self.try_gpu(g, best, 0, back_net, back_first, 0, time, n, self.gpu_pos[local])
                locals_ = self.local_gpus(n)
                if not locals_:
                    continue  # search.cc skips this NIC without giving its bandwidth back
                for k in locals_:
                    if local is not None and k == self.gpu_pos[local]:
                        continue
                    yield self.try_gpu(g, best, 0, back_net, back_first, 0, time, n, k)
            for m in twins:
                self.net_bw[m] = _f(self.net_bw[m] + bw)

    def _take_net(self, g, n: int, bw: int) -> list[int] | None:
        """Start a channel at NIC n: None if NCCL skips it, else the NICs sharing its port (whose
        bandwidth is now reserved, to give back when the channel is abandoned)."""
        net = self.s.nodes[n]
        if g.collnet and net.net.coll == 0:
            return None
        if self.net_bw[n] < bw:
            return None
        odd_channel = g.n_channels & 1 and net.id != g.inter[(g.n_channels - 1) * 2 + 1]
        if self.legacy:
            if self.release.cross_nic_pairs_channels and g.cross_nic and odd_channel:
                return None
        elif g.pattern == RING and g.cross_nic == 2 and odd_channel:
            return None
        g.inter[g.n_channels * 2] = net.id
        g.latency_inter = _f(net.net.latency_us)
        twins = self._twins.get(n)
        if twins is None:  # the NICs of one port share its bandwidth
            twins = self._twins[n] = [m for m in self.nets if self.s.nodes[m].net.asic == net.net.asic
                                      and self.s.nodes[m].net.port == net.net.port]
        for m in twins:
            self.net_bw[m] = _f(self.net_bw[m] - bw)
        return twins

    def _rec_net_legacy(self, g, best, back_net, back_first, time):
        style = self.release.search_rec_net
        if style == "2.18":
            yield self._rec_net_218(g, best, back_net, back_first, time)
            return
        bw = int(g.bw_inter)
        nets = self.select_nets(g.type_inter, -1)
        found = False
        for i in range(len(nets)):
            if style == "2.22" and g.pattern in (NVLS, COLLNET_DIRECT) and found:
                continue
            if style == "2.19" and g.pattern == NVLS and i > 0:
                continue
            n = nets[(g.n_channels + i) % len(nets)]
            twins = self._take_net(g, n, bw)
            if twins is None:
                continue
            if g.pattern in (NVLS, COLLNET_DIRECT):
                if g.n_channels < len(nets):
                    local = self.local_gpu[n]
                    k = self.gpu_pos[local] if local is not None else -1
                    heads = [g.intra[c * self.ngpus] for c in range(g.n_channels)]
                    if k != -1 and self.rank_of[k] in heads:
                        continue  # 2.22 skips a duplicate head without giving the NIC bandwidth back
                    if k != -1:
                        yield self.try_gpu(g, best, 0, back_net, back_first, 0, time, n, k)
                    found = True
            else:
                yield self._replay_pci_closest(g, best, back_net, back_first, time, n, bw, zero_hops_count=True)
            for m in twins:
                self.net_bw[m] = _f(self.net_bw[m] + bw)

    def _replay_pci_closest(self, g, best, back_net, back_first, time, n: int, bw, zero_hops_count: bool) -> None:
        """ncclTopoSearchRecNet's GPU choice under NIC n (2.23.4-2.26.6, and 2.30.7's): replay the last
        channel's GPU, then, for a first channel or when channels may differ, the PCI order (no
        NVSwitch) and the GPUs closest to the NIC — highest bandwidth, then fewest hops — rotated by
        channel. From 2.23 to 2.26 a path of no hops does not set the fewest hops."""
        if g.n_channels > 0:
            yield self.try_gpu(g, best, 0, back_net, back_first, FORCED_ORDER_REPLAY, time, n, self._replay_gpu(g, -1))
        if g.n_channels and g.same_channels:
            return
        if g.n_channels == 0 and not self.nvs:
            t = [1 << 10]
            yield self.try_gpu(g, best, 0, back_net, back_first, FORCED_ORDER_PCI, t, n, 0)
            if t[0] == -1:
                time[0] = -1
        max_bw, min_hops = self._closest_to_net(n, zero_hops_count)
        if max_bw >= bw:
            for j in range(self.ngpus):
                k = (g.n_channels + j) % self.ngpus
                p = self.path(n, self.gpus[k])
                if _f(p.bw_gbps) == max_bw and len(p.links) == min_hops:
                    yield self.try_gpu(g, best, 0, back_net, back_first, 0, time, n, k)

    def _closest_to_net(self, n: int, zero_hops_count: bool) -> tuple:
        """(bandwidth, hops) of the GPUs closest to NIC n: the highest path bandwidth, then the
        fewest hops (where `zero_hops_count` is False, a path of no hops does not count)."""
        max_bw, min_hops = _f(0), 0xFFFFFFF
        for gpu in self.gpus:
            p = self.path(n, gpu)
            pbw = _f(p.bw_gbps)
            if pbw > max_bw:
                max_bw, min_hops = pbw, len(p.links)
            elif pbw == max_bw and (zero_hops_count or len(p.links) > 0) and len(p.links) < min_hops:
                min_hops = len(p.links)
        return max_bw, min_hops

    def _rec_net_218(self, g, best, back_net, back_first, time):
        """search.cc 2.18.6 ncclTopoSearchRecNet: NICs in ncclTopoSelectNets order (no rotation by
        channel); NVLS tries, under every NIC, the GPU local to nets[nChannels] without a path from
        the NIC; the first channel tries the PCI order even behind an NVSwitch; the closest GPUs are
        tried in index order, first those whose PCI link still has bandwidth (tryGpuBidir)."""
        bw = int(g.bw_inter)
        nets = self.select_nets(g.type_inter, -1)
        for n in nets:
            twins = self._take_net(g, n, bw)
            if twins is None:
                continue
            if g.pattern == NVLS:
                if g.n_channels < len(nets):
                    local = self.local_gpu[nets[g.n_channels]]
                    if local is not None:
                        yield self.try_gpu(g, best, 0, back_net, back_first, 0, time, None, self.gpu_pos[local])
            else:
                if g.n_channels > 0:
                    yield self.try_gpu(g, best, 0, back_net, back_first, FORCED_ORDER_REPLAY, time, n,
                                       self._replay_gpu(g, -1))
                if g.n_channels == 0 or g.same_channels == 0:
                    if g.n_channels == 0:
                        t = [1 << 10]
                        yield self.try_gpu(g, best, 0, back_net, back_first, FORCED_ORDER_PCI, t, n, 0)
                        if t[0] == -1:
                            time[0] = -1
                    max_bw, min_hops = self._closest_to_net(n, True)
                    if max_bw >= bw:
                        for bidir in (0, 1):
                            for k in range(self.ngpus):
                                p = self.path(n, self.gpus[k])
                                if _f(p.bw_gbps) == max_bw and len(p.links) == min_hops:
                                    if bidir == (0 if self._gpu_pci_bw(self.gpus[k]) > 0 else 1):
                                        yield self.try_gpu(g, best, 0, back_net, back_first, 0, time, n, k)
            for m in twins:
                self.net_bw[m] = _f(self.net_bw[m] + bw)

    def params_for(self, pattern: int) -> tuple[int, int]:
        if self.inter:
            back_net = self.ngpus - 1 if pattern == RING else 1 if pattern == SPLIT_TREE else 0
            return back_net, -1
        return -1, (self.ngpus - 1 if pattern == RING else -1)

    def rec(self, g, best, time):
        back_net, back_first = self.params_for(g.pattern)
        if self.inter:
            yield self.rec_net(g, best, back_net, back_first, time)
            return
        if g.pattern == NVLS:
            yield self.try_gpu(g, best, 0, back_net, back_first, 0, time, None, g.n_channels)
            return
        if g.n_channels == 0:
            yield self.try_gpu(g, best, 0, back_net, back_first, FORCED_ORDER_PCI, time, None, 0)
        else:
            yield self.try_gpu(g, best, 0, back_net, back_first, FORCED_ORDER_REPLAY, time, None,
                               self._replay_gpu(g, -1))
        if g.same_channels == 0 or g.n_channels == 0:
            for k in range(self.ngpus):
                yield self.try_gpu(g, best, 0, back_net, back_first, 0, time, None, k)


def _cc_min(system: System) -> int:
    return min(system.nodes[g].gpu.sm for g in system.gpus())


def _min_max_path(search: _Search, kind: str) -> tuple[int, int]:
    lo, hi = search.code("SYS"), search.code("LOC")
    targets = search.gpus if kind == "GPU" else search.nets
    for a in search.gpus:
        for b in targets:
            if kind == "GPU" and a == b:
                continue
            p = search.path(a, b)
            if p is None:
                continue
            t = search.ptype(p)
            lo, hi = min(lo, t), max(hi, t)
    return lo, hi


def _split_nvlink(search: _Search) -> bool:
    n = search.ngpus
    domain = list(range(n))
    for a in range(n):
        for b in range(a + 1, n):
            if search.path(search.gpus[a], search.gpus[b]).type == "NVL":
                domain[b] = domain[a]
    counts = [domain.count(d) for d in range(n)]
    return sum(1 for c in counts if c > 1) == 2


def search_ladder(release: ReleaseRules, cc_min: int, inter: bool) -> tuple[float, ...]:
    """The speed ladder a search of the release line starts from: SM100 ladders exist from 2.25
    (before, Blackwell took the SM90 one); the SM90 and SM100 ladders grew over the releases."""
    if cc_min >= 100 and release.search_speeds_sm100_intra is not None:
        return release.search_speeds_sm100_inter if inter else release.search_speeds_sm100_intra
    if cc_min >= 90:
        return release.search_speeds_sm90_inter if inter else release.search_speeds_sm90_intra
    return _SPEEDS_PRE_SM90["inter" if inter else "intra"]


def _run(call) -> None:
    """Run one call of the search's recursion to its end. The recursive steps (rec, rec_gpu,
    try_gpu, ...) are generators that yield the call they make next and resume when it returns, so
    the search goes as deep as NCCL's recursion (once per GPU per channel) on an explicit stack,
    without Python's recursion limit or a thread of its own."""
    stack = [call]
    while stack:
        try:
            stack.append(next(stack[-1]))
        except StopIteration:
            stack.pop()


def search_graph(paths: Paths, params: Params, pattern: int, gid: int, min_channels: int,
                 max_channels: int, collnet: int = 0) -> Graph:
    """ncclTopoCompute for one graph on the rank's view of the system."""
    search = _Search(paths, params)
    s = search.s
    r = search.release
    code = search.code
    ngpus = search.ngpus
    g = _G(gid, pattern, min_channels, max_channels, ngpus, r.maxchannels, collnet)
    cc_min = _cc_min(s)
    ndevs = len(search.devs)
    cross_param = params.get("NCCL_CROSS_NIC")
    cross = cross_param if (len(search.nets) > 1 and pattern in (RING, BALANCED_TREE, SPLIT_TREE)) else 0
    g.cross_nic = 1 if cross == 1 else 0
    if r.cross_nic_search == "2.18":
        # search.cc 2.18.6 ncclTopoCompute: graph->crossNic = NCCL_CROSS_NIC (2 -> 0) whatever the
        # pattern; "crossNic" (relax to 1) is any non-zero value for rings and trees on several NICs.
        g.cross_nic = 1 if cross_param == 1 else 0
        cross = 1 if cross else 0
    min_intra, min_inter = code("LOC"), code("PIX")
    max_intra = max_inter = code("SYS")
    if not r.search_types_from_paths:
        # Until 2.24 the search always starts at NVL (LOC for one GPU) and PIX, up to SYS.
        min_intra = code("LOC") if ngpus == 1 else code("NVL")
    else:
        if ngpus > 1:
            min_intra, max_intra = _min_max_path(search, "GPU")
        if search.inter:
            min_inter, max_inter = _min_max_path(search, "NET")
            max_intra = max_inter
        if cc_min < 90 and r.search_inter_sys_below_sm90:
            max_inter = code("SYS")
    g.type_intra, g.type_inter = min_intra, min_inter
    try_same = 0 if pattern == NVLS else 1
    g.same_channels = try_same
    notes: list[str] = []
    if r.search_unverified:  # every other line is checked against NCCL (tests/golden/nccl-search)
        notes.append(f"the graph search of NCCL {search.rules.version.line} is modelled from the changes known "
                     "between 2.19 and 2.22 and has not been checked against NCCL itself")
    if pattern == NVLS and (not search.nvs or cc_min < 90):
        return _freeze(g, search, notes)
    heads_cap = r.search_heads_cap
    if pattern == NVLS and heads_cap is not None:  # 2.18.6 keeps init.cc's MAXCHANNELS ("ngpus heads at most": 2.19)
        g.max_channels = min(r.nvls_arity, ngpus) if heads_cap == "arity" else ngpus
    if pattern == COLLNET_DIRECT:
        g.max_channels = min(DIRECT_ARITY + 1, ngpus) if heads_cap == "arity" else ngpus
    if ngpus == 1 and pattern != RING:
        g.pattern = pattern = TREE
    if not search.inter and pattern == NVLS:
        if heads_cap is None:  # search.cc 2.18.6: "minChannels = maxChannels = system->nodes[GPU].count"
            g.max_channels = ngpus
        g.min_channels = g.max_channels
    maxchannels = r.maxchannels
    if g.max_channels > maxchannels:
        if not search.inter and g.max_channels * ngpus <= maxchannels * r.topo_max_nodes:
            # One node: the search only writes graph->intra[MAXCHANNELS*NCCL_TOPO_MAX_NODES] (graph.h), which
            # holds them, so NCCL's graph is exact (NVLS on NVL72: 72 heads, before 2.25's arity cap).
            notes.append(f"NCCL {search.rules.version.line} asks for up to {g.max_channels} channels here, more "
                         f"than its {maxchannels}-channel arrays hold after the search (it overruns them)")
            g.intra = g.intra + [0] * ((g.max_channels - maxchannels) * ngpus)
            g.inter = g.inter + [0] * ((g.max_channels - maxchannels) * 2)  # one node: never read
        else:
            notes.append(f"NCCL {search.rules.version.line} asks for up to {g.max_channels} channels here, more "
                         f"than its {maxchannels}-channel arrays hold (it overruns them); nicksim searches "
                         f"{maxchannels}")
            g.max_channels = maxchannels
    if pattern == RING and r.search_split_nvlink_two_channels and _split_nvlink(search) and g.max_channels >= 2 \
            and g.min_channels == 1:
        g.min_channels = 2

    best = g  # the graph NCCL returns; every better solution is copied into it
    tmp = g.copy()
    speeds = search_ladder(r, cc_min, bool(search.inter))
    max_bw, total_bw = _f(paths.max_bw), _f(paths.total_bw)
    if not r.search_total_bw_per_dev:
        # search.cc 2.18.6: "if (ngpus == 1 || pattern != RING) totalBw *= ngpus*1.0/(ngpus-1)"
        if ngpus == 1 or pattern != RING:
            total_bw = _f(float(total_bw) * (ngpus / (ngpus - 1))) if ngpus > 1 else _f(math.inf)
    elif ndevs > 1 and pattern != RING:
        total_bw = _f(float(total_bw) * (ndevs * 1.0 / (ndevs - 1)))
    idx = 0
    while (_f(speeds[idx]) > max_bw or _f(speeds[idx]) * tmp.min_channels > total_bw) and idx < len(speeds) - 1:
        idx += 1
    tmp.bw_intra = tmp.bw_inter = _f(speeds[idx])
    full_timeout = r.search_global_timeout
    global_timeout = full_timeout
    pass_ = 1
    while True:
        time = [TIMEOUT_SAMECHANNELS if tmp.same_channels else TIMEOUT]
        tmp.n_channels = 0
        global_timeout -= time[0]
        _run(search.rec(tmp, best, time))
        done = time[0] == -1 or _f(best.n_channels * best.bw_inter) >= _f(paths.total_bw)
        if not done and pass_ == 1:
            # Try different channels, except through AMD CPUs at SYS
            # (the AMD exception is 2.19's)
            if tmp.same_channels == 1 and not (search.amd and tmp.type_intra == code("SYS")
                                               and r.search_amd_sys_same_channels):
                tmp.same_channels = 0
                continue
            tmp.same_channels = try_same
            if time[0] != -1:
                global_timeout += time[0]
            else:
                global_timeout = full_timeout
            if not (global_timeout < 0 and best.n_channels):
                if cc_min >= 90 and tmp.pattern == BALANCED_TREE:
                    tmp.pattern = TREE
                    continue
                tmp.pattern = best.pattern
                max_i = tmp.type_inter if search.inter else max_intra
                if tmp.type_intra < max_i and (best.n_channels == 0 or tmp.type_intra < best.type_intra):
                    tmp.type_intra += 1
                    if tmp.type_intra < code("DIS") or not r.search_types_stop_before_dis:
                        continue
                tmp.type_intra = min_intra
                if search.inter and tmp.type_inter < max_inter and (
                        best.n_channels == 0 or tmp.type_inter < best.type_inter or tmp.type_inter < code("PXN")):
                    tmp.type_inter += 1
                    if tmp.type_inter < code("DIS") or not r.search_types_stop_before_dis:
                        continue
                tmp.type_inter = min_inter
                if r.cross_nic_search == "2.18":
                    if cross and tmp.cross_nic == 0:
                        tmp.cross_nic = 1
                        continue
                    tmp.cross_nic = 0
                elif search.legacy and cross == 2 and tmp.cross_nic == 0:
                    tmp.cross_nic = 1  # until 2.22 "try another NIC" was crossNic 1
                    continue
                elif not search.legacy and cross == 2 and tmp.cross_nic == 0 and best.pattern in (RING, BALANCED_TREE):
                    tmp.cross_nic = 2
                    continue
                else:
                    tmp.cross_nic = 1 if cross == 1 else 0
                if idx < len(speeds) - 1 and (best.n_channels == 0 or
                                              _f(speeds[idx + 1]) / best.bw_inter > _f(0.49)):
                    idx += 1
                    tmp.bw_inter = tmp.bw_intra = _f(speeds[idx])
                    continue
                idx = 0
                while _f(speeds[idx]) > max_bw and idx < len(speeds) - 1:
                    idx += 1
                tmp.bw_intra = tmp.bw_inter = _f(speeds[idx])
        if pass_ == 1:
            time[0] = -1
            if r.search_dup_after_pass1:  # 2.18.6 duplicates the channels at the very end, after pass 2
                _dup_channels(best, cc_min, ngpus)
            tmp = best.copy()
            idx = 0
            while _f(speeds[idx]) > best.bw_inter and idx < len(speeds) - 1:
                idx += 1
            tmp.bw_intra = tmp.bw_inter = _f(speeds[idx])
            tmp.min_channels = best.n_channels
            pass_ = 2
        if pass_ == 2:
            if not r.search_pass2_ring_nvls:
                # search.cc 2.18.6 pass 2 only raises bwIntra of trees (and NVLS): no ring or NVLS bwInter step
                if time[0] != 0 and idx > 0 and best.pattern != RING and tmp.bw_intra == best.bw_intra \
                        and tmp.bw_intra < tmp.bw_inter * 2:
                    idx -= 1
                    tmp.bw_intra = _f(speeds[idx])
                    continue
                break
            if time[0] != 0 and idx > 0:
                if best.pattern == RING:
                    idx -= 1
                    tmp.bw_intra = tmp.bw_inter = _f(speeds[idx])
                    continue
                if best.pattern == NVLS and tmp.bw_inter == best.bw_inter and tmp.bw_inter < tmp.bw_intra * 2:
                    tmp.min_channels = tmp.max_channels = best.n_channels
                    idx -= 1
                    tmp.bw_inter = _f(speeds[idx])
                    continue
                if tmp.bw_intra == best.bw_intra and tmp.bw_intra < tmp.bw_inter * 2:
                    idx -= 1
                    tmp.bw_intra = _f(speeds[idx])
                    continue
            break
    fallback = False
    if not r.search_fallback_nets and best.n_channels == 0 and best.collnet == 0 and best.pattern != NVLS:
        # search.cc 2.18.6: the simple order with inter {0, 0}, bw 0.1/0.1, type SYS/SYS
        fallback = True
        notes.append(f"NCCL INFO Could not find a path for pattern {pattern}, falling back to simple order")
        for i, rank in enumerate(search.rank_of):
            best.intra[i] = rank
        best.inter[0] = best.inter[1] = 0
        best.bw_intra = best.bw_inter = _f(0.1)
        best.type_intra = best.type_inter = code("SYS")
        best.n_channels = 1
    if not r.search_dup_after_pass1:
        _dup_channels(best, cc_min, ngpus)  # 2.18.6: at the end of ncclTopoCompute
        return _freeze(best, search, notes, fallback)
    if best.n_channels == 0 and best.collnet == 0 and best.pattern != NVLS:
        fallback = True
        notes.append(f"NCCL INFO Could not find a path for pattern {pattern}, falling back to simple order")
        for i, rank in enumerate(search.rank_of):
            best.intra[i] = rank
        best.bw_intra = _f(0.1)
        best.type_intra = code("SYS")
        first = search.select_nets(-1, 0) if search.nets else []
        last = search.select_nets(-1, ngpus - 1) if search.nets else []
        best.inter[0] = s.nodes[first[0]].id if first else -1
        best.inter[1] = s.nodes[last[0]].id if last else -1
        if best.inter[0] != -1 and best.inter[1] != -1:
            best.bw_inter, best.type_inter = _f(0.1), code("SYS")
        else:
            best.inter[0] = best.inter[1] = -1
            best.bw_inter, best.type_inter = _f(0), code("DIS")
        best.n_channels = 1
    return _freeze(best, search, notes, fallback)


def _dup_channels(g: _G, cc_min: int, ngpus: int) -> None:
    """ncclTopoDupChannels: double the channels (halving their bw) where NCCL finds it pays."""
    if g.n_channels == 0 or g.pattern == NVLS:
        return
    if g.bw_intra < 25.0:
        return
    if cc_min > 80 and g.bw_intra < 50.0 and g.n_channels > 4:
        return
    dup = min(g.n_channels * 2, g.max_channels)
    for i in range((dup - g.n_channels) * ngpus):
        g.intra[g.n_channels * ngpus + i] = g.intra[i]
    for i in range((dup - g.n_channels) * 2):
        g.inter[g.n_channels * 2 + i] = g.inter[i]
    factor = -(-dup // g.n_channels)
    g.bw_intra = _f(g.bw_intra / factor)
    g.bw_inter = _f(g.bw_inter / factor)
    g.n_channels = dup


def _freeze(g: _G, search: _Search, notes: list[str], fallback: bool = False) -> Graph:
    n = search.ngpus
    names = search.rules.path_names
    intra = tuple(tuple(g.intra[c * n:(c + 1) * n]) for c in range(g.n_channels))
    inter = tuple((g.inter[2 * c], g.inter[2 * c + 1]) for c in range(g.n_channels))
    return Graph(g.id, g.pattern, g.cross_nic, g.n_channels, float(g.bw_intra), float(g.bw_inter),
                 float(g.latency_inter), names[g.type_intra], names[g.type_inter], g.same_channels, g.n_hops,
                 intra, inter, search.inter, fallback, tuple(notes))


def _collnet_wanted(paths: Paths, params: Params) -> bool:
    # The plugin is judged on the whole node: one-node jobs of releases that trim the NICs away
    # still search the CollNet graphs (inside the node).
    return collnet_enabled(paths.node_system, params)


def nvls_initialised(system: System, params: Params) -> bool:
    """ncclNvlsInit's early returns (transport/nvls.cc): NVLS is off with NCCL_NVLS_ENABLE=0 and for
    two GPUs or fewer (fewer than two from 2.28); 2.20 also turns it off across an MNNVL domain.
    Whether the GPUs can multicast at all (SM90+ behind an NVSwitch) the NVLS search itself decides."""
    if params.get("NCCL_NVLS_ENABLE") == 0:
        return False
    release = system.rules.release
    if release.nvls_off_across_hosts and len(system.host_hashes) > 1:
        return False
    return len(system.gpus()) >= release.nvls_min_gpus


def search_graphs(paths: Paths, params: Params) -> dict[str, Graph]:
    """The graphs NCCL's init searches, in its order: ring, tree, the CollNet chain (pattern 3 on
    CollNet NICs) and CollNet direct graphs where CollNet is enabled, then NVLS where it can run.
    With NCCL_GRAPH_FILE, a graph the file holds (same id, channels > 0) replaces the search."""
    graph_file = params.get("NCCL_GRAPH_FILE")
    doc = _read_graph_file(graph_file) if graph_file else None

    def compute(pattern: int, gid: int, low: int, high: int, collnet: int = 0) -> Graph:
        if doc is not None:
            loaded = load_graph(paths, params, doc, gid, graph_file)
            if loaded is not None and loaded.n_channels > 0:
                return loaded
        return search_graph(paths, params, pattern, gid, low, high, collnet)

    release = paths.system.rules.release
    ring = compute(RING, 0, 1, release.maxchannels // 2)
    tree = compute(BALANCED_TREE, 1, ring.n_channels, ring.n_channels)
    graphs = {"ring": ring, "tree": tree}
    if _collnet_wanted(paths, params):
        graphs["collnet_chain"] = compute(TREE, 2, ring.n_channels, ring.n_channels, 1)
        direct_id = release.collnet_direct_graph_id  # one CollNet graph (id 2) for both algorithms until 2.21
        if direct_id is not None:
            graphs["collnet_direct"] = compute(COLLNET_DIRECT, direct_id, 1, release.maxchannels, 1)
    if nvls_initialised(paths.system, params):
        nvls = compute(NVLS, 3, 1, release.maxchannels)
        if nvls.n_channels:
            graphs["nvls"] = nvls
    return graphs


def _read_graph_file(path: str):
    from ..errors import TopologyError, UsageError
    from ..files import read_input
    from ..topology.xml import parse_graph_xml
    try:
        data = read_input(path, "an NCCL graph XML (NCCL_GRAPH_FILE)")
    except UsageError as err:
        raise TopologyError(err.what, err.where, err.valid) from None
    return parse_graph_xml(data, path)


def load_graph(paths: Paths, params: Params, doc, gid: int, source: str = "<graph file>") -> Graph | None:
    """ncclTopoGetGraphFromXml: the <graph id=gid> of a graph document, or None when there is none
    (or it is a cross-NIC graph and NCCL_CROSS_NIC is 0). `dev` attributes are hexadecimal: a GPU's
    NCCL id (system id << 56 | dev), a NIC's node id (search.cc, 2.22.3)."""
    from ..errors import TopologyError
    s = paths.system
    names = s.rules.path_names
    for xml_graph in doc.findall("graph"):
        where = f"{source}:{xml_graph.line}"

        def attr(key: str, conv, default=None):
            text = xml_graph.get(key)
            if text is None:
                if default is not None:
                    return default
                raise TopologyError(f"<graph> has no {key}", where, f'{key}="..." as NCCL_GRAPH_DUMP_FILE writes it')
            try:
                return conv(text)
            except ValueError:
                raise TopologyError(f'{key}="{text}" is not valid', where, "a number or path type") from None

        if attr("id", int) != gid:
            continue
        cross_nic = attr("crossnic", int)
        if params.get("NCCL_CROSS_NIC") == 0 and cross_nic == 1:
            return None
        kinds = {}
        for key in ("typeintra", "typeinter"):
            value = xml_graph.get(key) or ""
            if value not in names:
                raise TopologyError(f'{key}="{value}" is not a path type', where, ", ".join(n for n in names if n))
            kinds[key] = value
        by_id = {(s.nodes[g].system_id << 56) + s.nodes[g].gpu.dev: s.nodes[g].gpu.rank for g in s.gpus()}
        nets = {s.nodes[n].id for n in s.nets()}
        intra, inter = [], []
        for channel in xml_graph.findall("channel"):
            ranks, ends = [], []
            for sub in channel.children:
                try:
                    dev = int(sub.get("dev") or "", 16)
                except ValueError:
                    raise TopologyError(f'<{sub.tag}> dev="{sub.get("dev")}" is not hexadecimal',
                                        f"{source}:{sub.line}", 'dev="0x..." as NCCL writes it') from None
                if sub.tag == "net":
                    if dev not in nets:
                        raise TopologyError(f"net dev {dev:#x} is not a NIC of this system", f"{source}:{sub.line}",
                                            ", ".join(f"{n:#x}" for n in sorted(nets)) or "no NICs here")
                    ends.append(dev)
                elif sub.tag == "gpu":
                    if dev not in by_id:
                        raise TopologyError(f"XML Import Channel : dev {dev} not found", f"{source}:{sub.line}",
                                            "a GPU of this system")
                    ranks.append(by_id[dev])
            # NCCL's intra array starts zeroed; a channel naming fewer GPUs (NVLS heads) keeps rank 0 after them.
            intra.append(tuple(ranks + [0] * (len(s.gpus()) - len(ranks))))
            inter.append((ends[0], ends[-1]) if ends else (-1, -1))
        n_channels = attr("nchannels", int)
        if n_channels > len(intra):
            raise TopologyError(f"nchannels={n_channels} but {len(intra)} <channel> elements", where,
                                "as many channels as nchannels says")
        return Graph(gid, attr("pattern", int), cross_nic, n_channels, attr("speedintra", float),
                     attr("speedinter", float), attr("latencyinter", float, 0.0), kinds["typeintra"],
                     kinds["typeinter"], attr("samechannels", int), 0, tuple(intra[:n_channels]),
                     tuple(inter[:n_channels]), any(e != (-1, -1) for e in inter), False,
                     (f"Search {gid} : {len(intra)} channels loaded from XML graph",))
    return None
