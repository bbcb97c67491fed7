"""NCCL's time model (src/graph/tuning.cc), one phase after channels are connected.

This module promises the decisions ncclTopoTuneModel makes from the tuning tables of the
release being modelled: per collective, algorithm and protocol a latency (us) and a bandwidth
(GB/s of algorithm bandwidth, 0 where NCCL would not use the pair), the maximum threads, the
thread thresholds, and NCCL's own `NCCL_DEBUG_SUBSYS=TUNING` table and `threadThresholds` line.
The cost table follows tuning.cc of every modelled release, 2.18 to 2.30: the tables come from
constants/tuning_tables.py, the formulas that changed between releases from `TimeModelRules`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from ..graph.collnet import COLLNET_OFF, CollNetSetup
from ..constants.device import (NCCL_LL128_MAX_NTHREADS, NCCL_LL_MAX_NTHREADS, NCCL_MAX_NTHREADS,
                                NCCL_SIMPLE_MAX_NTHREADS, WARP_SIZE)
from ..constants.tuning_tables import (NET_OVERHEAD_SIMPLE_POSTS, PROTOCOLS, TimeModelRules, TuningTables,
                                       time_model_rules, tuning_tables)
from ..constants.versions import MODELLED_VERSIONS, NcclVersion
from ..errors import UsageError
from ..params import Params
from ..graph.paths import Paths
from ..graph.graphs import Graph

__all__ = [
    "FUNCTIONS",
    "TuneInputs",
    "tune_inputs",
    "CostTable",
    "tune_model",
    "time_model_modelled",
    "TimeModelRules",
    "time_model_rules",
    "latency_intra_steps",
    "format_tuning_table",
    "AlgoTime",
    "algo_time",
    "AlgoTerms",
    "algo_terms",
    "ThreadThresholds",
    "thread_thresholds",
    "format_thread_thresholds", "net_overhead_us"]

# ncclFuncStr (init.cc): the collectives the time model prices (NCCL_NUM_FUNCTIONS 5).
FUNCTIONS: tuple[str, ...] = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")

PCI_BW_GBPS = 12.0  # graph/topo.h PCI_BW (Gen3 x16)

# topo.cc CPU enums, as nicksim.topo stores them.
_ARCH_POWER, _VENDOR_INTEL, _VENDOR_AMD, _ARCH_X86 = 2, 1, 2, 1
_VENDOR_MIXED = -2  # more than one vendor among the job's hosts (init.cc NCCL_TOPO_CPU_VENDOR_MIXED)


@dataclass(frozen=True)
class ThreadThresholds:
    """Bytes per thread below which NCCL shrinks the thread count, per algorithm and protocol.

    `tree` and `ring` are (LL, LL128, Simple); CollNet Direct and Chain only run Simple.
    """

    tree: tuple[int, int, int]
    ring: tuple[int, int, int]
    collnet_direct_simple: int
    collnet_chain_simple: int


def _env_thresholds(text: str) -> list[int]:
    """The leading integers of NCCL_THREAD_THRESHOLDS, read the way sscanf("%ld ...") reads them."""
    values = []
    for token in text.split()[:6]:
        match = re.match(r"^[+-]?\d+", token)
        if not match:
            break
        values.append(int(match.group()))
        if match.end() != len(token):
            break  # sscanf stops at the first character that is not part of a number
    return values


def thread_thresholds(tables: TuningTables, n_ranks: int, params: Params) -> ThreadThresholds:
    """NCCL's defaults (Ring LL scaled by the rank count), then NCCL_THREAD_THRESHOLDS.

    The variable holds up to six integers, Tree then Ring, LL/LL128/Simple each; a negative
    value keeps the default, as in tuning.cc.
    """
    base = [tables.ll_thread_threshold, tables.ll128_thread_threshold, tables.simple_thread_threshold]
    tree, ring = list(base), list(base)
    ring[0] *= n_ranks
    text = params.get("NCCL_THREAD_THRESHOLDS")
    if text:
        for index, value in enumerate(_env_thresholds(text)):
            if value >= 0:
                (tree if index < 3 else ring)[index % 3] = value
    return ThreadThresholds(
        tree=tuple(tree), ring=tuple(ring),
        collnet_direct_simple=tables.collnet_thread_threshold,
        collnet_chain_simple=tables.collnet_thread_threshold,
    )


def format_thread_thresholds(thresholds: ThreadThresholds) -> str:
    """NCCL's INFO line: `threadThresholds 8/8/64 | 128/8/64 | 512 | 512`."""
    tree = "/".join(str(v) for v in thresholds.tree)
    ring = "/".join(str(v) for v in thresholds.ring)
    return (f"threadThresholds {tree} | {ring} | {thresholds.collnet_direct_simple} | "
            f"{thresholds.collnet_chain_simple}")


@dataclass(frozen=True)
class TuneInputs:
    """What ncclTopoTuneModel reads from the communicator.

    `graphs` maps ring/tree/collnet_chain/collnet_direct/nvls to the searched graphs after init's
    cross-rank reduction (ring and tree share the smaller channel count); a graph NCCL did not
    search is absent. `path_rank` orders path names as the release's PATH_* enum does; `collnet`
    is the CollNet set-up (off unless a CollNet plugin serves the job and NCCL kept it on).
    """

    n_ranks: int
    n_nodes: int
    min_compcap: int
    max_compcap: int
    cpu_arch: int
    cpu_vendor: int
    nvs_count: int
    graphs: dict
    path_rank: dict
    max_tree_pattern: int
    collnet: CollNetSetup = COLLNET_OFF


def tune_inputs(paths: Paths, graphs: dict[str, Graph], n_nodes: int,
                collnet: CollNetSetup = COLLNET_OFF) -> TuneInputs:
    """The communicator as init.cc hands it to the time model: ring and tree cut to the
    smaller of their channel counts, CPU type of the first CPU, the job's SM range."""
    system = paths.node_system
    sms = [system.nodes[g].gpu.sm for g in system.gpus()]
    cpus = system.of_kind("CPU")
    cpu = system.nodes[cpus[0]].cpu if cpus else None
    n_channels = min(graphs["ring"].n_channels, graphs["tree"].n_channels)
    reduced = dict(graphs)
    reduced["ring"] = replace(graphs["ring"], n_channels=n_channels)
    reduced["tree"] = replace(graphs["tree"], n_channels=n_channels)
    names = system.rules.path_names
    return TuneInputs(
        n_ranks=n_nodes * len(sms), n_nodes=n_nodes, min_compcap=min(sms), max_compcap=max(sms),
        cpu_arch=cpu.arch if cpu else 0, cpu_vendor=cpu.vendor if cpu else 0,
        nvs_count=len(system.of_kind("NVS")), graphs=reduced,
        path_rank={name: i for i, name in enumerate(names)}, max_tree_pattern=graphs["tree"].pattern,
        collnet=collnet)


@dataclass(frozen=True)
class CostTable:
    """comm->latencies, comm->bandwidths and comm->maxThreads as NCCL fills them.

    `lat_us[f][a][p]` and `bw_gbps[f][a][p]` are indexed by FUNCTIONS, the release's
    algorithms and PROTOCOLS; a bandwidth of 0 means NCCL never picks that combination.
    """

    algorithms: tuple[str, ...]
    lat_us: tuple[tuple[tuple[float, ...], ...], ...]
    bw_gbps: tuple[tuple[tuple[float, ...], ...], ...]
    max_threads: tuple[tuple[int, ...], ...]
    version: NcclVersion
    # 2.19-2.23 keep the ring's bandwidth per collective and protocol (comm->ringbdw) as a backup
    # for a collective whose enabled algorithms are all gone; None in the other releases.
    ring_backup_gbps: tuple[tuple[float, float, float], ...] | None = None

    def lat(self, func: str, algorithm: str, protocol: str) -> float:
        return self.lat_us[FUNCTIONS.index(func)][self.algorithms.index(algorithm)][PROTOCOLS.index(protocol)]

    def bw(self, func: str, algorithm: str, protocol: str) -> float:
        return self.bw_gbps[FUNCTIONS.index(func)][self.algorithms.index(algorithm)][PROTOCOLS.index(protocol)]


_NO_GRAPH = Graph(id=-1, pattern=0, cross_nic=0, n_channels=0, bw_intra=0.0, bw_inter=0.0, latency_inter=0.0,
                  type_intra="LOC", type_inter="LOC", same_channels=0, n_hops=0, intra=(), inter=())


def _algo_graphs(inputs: TuneInputs) -> dict[str, Graph]:
    """init.cc's graphs[] array: {tree, ring, collNetDirect, collNetChain, nvls, nvls, tree}; until
    2.21 one CollNet graph serves both CollNet algorithms. Graphs never searched are all zero."""
    g = inputs.graphs
    nvls = g.get("nvls", _NO_GRAPH)
    chain = g.get("collnet_chain", _NO_GRAPH)
    return {"Tree": g["tree"], "Ring": g["ring"], "CollNetDirect": g.get("collnet_direct", chain),
            "CollNetChain": chain, "NVLS": nvls, "NVLSTree": nvls, "PAT": g["tree"]}


def _n_threads(value: int, low: int, high: int, default: int) -> int:
    """getNthreads: a multiple of the warp size within [low, high], else NCCL's fallback."""
    if value <= 0:
        return default
    if value % WARP_SIZE != 0 or value > high:
        return high
    return max(value, low)


def _max_threads(inputs: TuneInputs, params: Params, algorithms) -> tuple[tuple[int, ...], ...]:
    ring = inputs.graphs["ring"]
    nthreads = params.get("NCCL_NTHREADS") or -2
    ll128_nthreads = params.get("NCCL_LL128_NTHREADS") or -2
    simple_default = 256 if ring.bw_intra * ring.n_channels <= PCI_BW_GBPS else NCCL_SIMPLE_MAX_NTHREADS
    ll = _n_threads(nthreads, 2 * WARP_SIZE, NCCL_LL_MAX_NTHREADS, NCCL_LL_MAX_NTHREADS)
    ll128 = _n_threads(ll128_nthreads, NCCL_LL128_MAX_NTHREADS // 4,
                       NCCL_LL128_MAX_NTHREADS, NCCL_LL128_MAX_NTHREADS)
    table = {a: [0, 0, 0] for a in algorithms}
    table["Ring"] = [ll, ll128, _n_threads(nthreads, 2 * WARP_SIZE, NCCL_SIMPLE_MAX_NTHREADS,
                                           simple_default)]
    table["Tree"] = [ll, ll128, _n_threads(nthreads, 2 * WARP_SIZE, NCCL_SIMPLE_MAX_NTHREADS,
                                           NCCL_SIMPLE_MAX_NTHREADS)]
    for a in ("CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"):
        table[a][2] = NCCL_MAX_NTHREADS
    return tuple(tuple(table[a]) for a in algorithms)


def _skipped(rules: TimeModelRules, func: str, algo: str, proto: str, pat_enabled: bool) -> bool:
    """Combinations tuning.cc never prices (their latency and bandwidth stay 0)."""
    if func in ("Broadcast", "Reduce") and algo != "Ring":
        return True
    if func in ("ReduceScatter", "AllGather") and algo not in rules.ag_rs_algorithms:
        return True
    if func == "AllReduce" and algo == "PAT":
        return True
    if algo in ("NVLS", "NVLSTree") and proto != "Simple":
        return True
    return func in ("ReduceScatter", "AllGather") and algo == "PAT" and (proto != "Simple" or not pat_enabled)


def _pat_enabled(rules: TimeModelRules, inputs: TuneInputs, params: Params) -> bool:
    """ncclPatEnable: NCCL_PAT_ENABLE, else one GPU per node (the net device is always the host's)."""
    value = params.get("NCCL_PAT_ENABLE")
    if rules.pat_needs_sm60 and inputs.min_compcap < 60:
        return False
    if value is not None and value != 2:
        return bool(value)
    return inputs.n_nodes == inputs.n_ranks


def net_overhead_us(inputs: TuneInputs, params: Params) -> float:
    """tuning.cc getNetOverhead: the proxy's cost per network step (NCCL_NET_OVERHEAD in ns, else
    2 us on AMD x86 hosts and 1 us elsewhere)."""
    value = params.get("NCCL_NET_OVERHEAD")
    if value is not None and value != -2:
        return value * 0.001
    if inputs.cpu_arch == _ARCH_X86 and inputs.cpu_vendor == _VENDOR_AMD:
        return 2.0
    return 1.0


def _tree_protocol_cap(bus: float, proto: str, n_nodes: int, n_channels: int, ll_max: float,
                       ch_tree_ll128: float) -> float:
    """Tree LL runs at 1/3.8 of Simple under the LL cap; LL128 at 7/9 (one node) or 120/128."""
    if proto == "LL":
        return min(bus / 3.8, ll_max)
    if proto == "LL128":
        return min(bus * (7.0 / 9.0 if n_nodes == 1 else 120.0 / 128.0), n_channels * ch_tree_ll128)
    return bus


def _nvls_graph_bw(rules: TimeModelRules, inputs: TuneInputs, g: Graph, func: str, algo: str, caps) -> float:
    """The per-channel bandwidth NVLS and NVLS Tree are priced at; -1 where 2.28+ skip the pair."""
    n_nodes = inputs.n_nodes
    ppn = inputs.n_ranks / n_nodes
    if rules.nvls_bw == "efficiency":
        ch_nvls_tree, nvls_eff = caps[4], caps[5]
        if g.n_channels < 2:
            return -1.0  # NVLS needs two channels: tuning.cc skips the pair entirely
        intra = g.bw_intra * nvls_eff * (g.n_channels - 1) / g.n_channels
        intra *= 2.0 if func == "AllReduce" else (ppn - 1) / ppn
        inter = g.bw_inter * (2 if n_nodes <= 2 and algo == "NVLSTree" else 1)
        return min(intra, inter, ch_nvls_tree if algo == "NVLSTree" else math.inf)
    if rules.nvls_bw == "graph":
        return g.bw_intra if n_nodes <= 2 else g.bw_inter
    if algo == "NVLSTree":
        return min(g.bw_intra, g.bw_inter if n_nodes <= 2 else g.bw_inter / 2)
    if rules.nvls_bw == "min_ag_rs" and func != "AllReduce":
        return min(g.bw_intra * (ppn - 1.0) / ppn, g.bw_inter * 0.9)
    return min(g.bw_intra, g.bw_inter)


def _bus_bw(rules: TimeModelRules, inputs: TuneInputs, g: Graph, func: str, algo: str, proto: str, caps) -> float:
    """Bus bandwidth of one combination before the conversion to algorithm bandwidth (-1: not priced)."""
    ll_max, ch_tree, ch_ring_ll128, ch_tree_ll128 = caps[:4]
    n_nodes = inputs.n_nodes
    ppn = inputs.n_ranks / n_nodes
    bw = g.bw_intra if n_nodes <= 2 or algo.startswith("CollNet") else g.bw_inter
    if algo in ("NVLS", "NVLSTree"):
        bw = _nvls_graph_bw(rules, inputs, g, func, algo, caps)
        if bw < 0:
            return -1.0
    bus = g.n_channels * bw
    if algo == "Ring" and proto == "LL":
        factor = 0.5
        if rules.ring_ll_quarter:
            factor = 0.25 if (n_nodes > 1 or func in ("AllReduce", "Reduce")) else 1.0 / 3.0
        bus = min(ll_max, bus * factor)
    if algo == "Ring" and proto == "LL128":
        factor = 0.7 if rules.ring_ll128_one_gpu_penalty and ppn < 2 else 0.92
        bus = min(bus * factor, g.n_channels * ch_ring_ll128)
    if algo == "Tree" and func == "AllReduce":  # Tree is only priced for AllReduce
        bus = min(bus * 0.92, g.n_channels * ch_tree)
    if algo == "Tree":
        bus = _tree_protocol_cap(bus, proto, n_nodes, g.n_channels, ll_max, ch_tree_ll128)
    if algo == "Tree" and inputs.max_tree_pattern == 3:  # NCCL_TOPO_PATTERN_TREE (the graph's own before 2.26)
        bus *= 0.85
    if algo == "PAT":
        bus *= rules.pat_bw_factor
    if algo.startswith("CollNet"):
        bus = _collnet_bus_bw(rules, inputs, g, func, algo, proto, bus) if proto == "Simple" else 0.0
    if rules.collnet_ag_rs_bw == "min" and algo in ("NVLS", "CollNetDirect") and n_nodes > 1 \
            and func in ("AllGather", "ReduceScatter") and not _collnet_gathers(inputs, func):
        bus = 0.0  # across nodes these run on the CollNet heads, one per local rank
    return bus


def _collnet_gathers(inputs: TuneInputs, func: str) -> bool:
    """Whether AllGather/ReduceScatter may use CollNet across nodes: the plugin has the collective and
    every local rank has a head of its own (AllGather/ReduceScatter need one NIC per GPU)."""
    cn = inputs.collnet
    has_op = cn.iallgather if func == "AllGather" else cn.ireducescatter
    return cn.enabled and has_op and inputs.n_ranks // inputs.n_nodes <= cn.n_heads


def _collnet_bus_bw(rules: TimeModelRules, inputs: TuneInputs, g: Graph, func: str, algo: str, proto: str,
                    bus: float) -> float:
    """CollNet Simple bus bandwidth (the chain keeps nChannels x bwIntra)."""
    if algo != "CollNetDirect" or g.n_channels == 0:
        return bus  # (never searched: NCCL divides by zero here, then disables the algorithm)
    ppn = inputs.n_ranks / inputs.n_nodes
    if func in ("AllGather", "ReduceScatter"):
        if rules.collnet_ag_rs_bw == "min":
            return ppn * min(g.bw_intra, g.bw_inter * 0.9)
        bus = ppn * g.bw_intra
        if inputs.n_nodes > 1 and not _collnet_gathers(inputs, func):
            bus = 0.0
        w = (ppn - 1) / (8 - 1)  # measured at one and eight GPUs per node, interpolated
        return bus * (w * 0.85 + (1 - w) * 0.95)
    # Full speed needs a NIC per GPU: discount by the GPU/NIC ratio, halfway.
    factor = ppn / g.n_channels
    factor -= (factor - 1) / 2
    bus /= factor
    return bus * 0.85 if inputs.min_compcap >= 90 else bus


def _algo_bw(rules: TimeModelRules, inputs: TuneInputs, func: str, algo: str, bus: float) -> float:
    """Bus bandwidth to algorithm bandwidth: ring (and NVLS from 2.28) x nRanks/nsteps, NVLS x5/6 before,
    others x0.5; CollNet Direct AllGather/ReduceScatter stay as they are, and from 2.23 every algorithm
    but the ring's AllGather/ReduceScatter."""
    if (rules.ag_rs_convert_ring_only or algo == "CollNetDirect") and algo != "Ring" \
            and func in ("AllGather", "ReduceScatter"):
        return bus  # 2.20-2.22 keep CollNet Direct's AllGather/ReduceScatter bus bandwidth too
    n_ranks, n_nodes = inputs.n_ranks, inputs.n_nodes
    if algo == "Ring" or (algo in ("NVLS", "NVLSTree") and rules.nvls_bw == "efficiency"):
        return bus * n_ranks / _ring_steps(func, n_ranks)
    if algo == "NVLSTree" and rules.nvls_bw == "graph":
        # 2.18: 0.7 nNodes / (2 (nNodes - 1)), infinite on one node where NVLS Tree is disabled anyway
        return bus * (0.7 * n_nodes / (2 * (n_nodes - 1))) if n_nodes > 1 else 0.0
    if algo in ("NVLS", "NVLSTree"):
        return bus * 5.0 / 6.0
    return bus * 0.5


def _latency(rules: TimeModelRules, t: TuningTables, inputs: TuneInputs, g: Graph, func: str, algo: str,
             proto: str, params: Params, hw: str, intra_hw: str) -> float:
    """comm->latencies of one combination."""
    n_ranks, n_nodes = inputs.n_ranks, inputs.n_nodes
    ppn = n_ranks / n_nodes
    nsteps = _ring_steps(func, n_ranks)
    lat = t.base_lat(algo, proto)
    intra = t.hw_lat(intra_hw, algo, proto)
    inter = t.hw_lat("NET", "Tree" if ppn == 1 and rules.tree_net_latency_at_one_gpu else algo, proto)
    inter += g.latency_inter
    if proto == "Simple":
        inter += g.latency_inter  # the flush after each receive
    per_node = n_ranks // n_nodes
    if algo == "Ring":
        step = t.hw_lat(hw, algo, proto)
        if func in ("Reduce", "Broadcast"):
            if g.same_channels:
                return lat + step
            if proto == "Simple":
                step = t.hw_lat(hw, "Tree", proto)
            return lat + nsteps * step
        overhead = 0.0
        if n_nodes > 1:
            overhead = net_overhead_us(inputs, params) * (NET_OVERHEAD_SIMPLE_POSTS if proto == "Simple" else 1)
        intra = max(intra, overhead)
        inter_steps = nsteps - latency_intra_steps(rules, func, algo, n_ranks, n_nodes)
        return lat + (nsteps - inter_steps) * intra + inter_steps * inter
    if algo == "Tree":
        if func == "AllReduce":
            lat += latency_intra_steps(rules, func, algo, n_ranks, n_nodes) * intra + 2 * _log2i(n_nodes) * inter
        return lat
    if algo == "CollNetDirect":
        return lat + 2 * (min(1, per_node - 1) * intra + (per_node - 1) * rules.collnet_arity_us) + inter
    if algo == "CollNetChain":
        return lat + 2 * (per_node - 1) * intra + inter
    if algo == "NVLS":
        if rules.nvls_base_latency:
            return lat + (t.hw_lat("NET", algo, proto) if n_nodes > 1 else 0.0)
        return intra + (inter if n_nodes > 1 else 0.0)
    if algo == "NVLSTree":
        if rules.nvls_base_latency:
            return lat + 2 * (n_nodes - 1) * t.hw_lat("NET", algo, proto)
        return lat + intra + 2 * _log2i(n_nodes) * inter
    if algo == "PAT" and func in ("AllGather", "ReduceScatter"):
        base = 8.0 if rules.pat_literal_base else lat
        return base + _log2i(n_nodes) * (inter / 3.5) + n_ranks * 2.8
    return lat


def latency_intra_steps(rules: TimeModelRules, func: str, algo: str, n_ranks: int, n_nodes: int) -> int:
    """The steps within a node that NCCL's latency charges a Ring or Tree AllReduce/AllGather/
    ReduceScatter (tuning.cc: a ring's nsteps less its inter-node steps, 2n or 2(n-1) for AllReduce by
    release; a tree's 2 x (ranks per node - 1) for AllReduce); 0 for anything else."""
    if algo == "Tree":
        return 2 * (n_ranks // n_nodes - 1) if func == "AllReduce" else 0
    if algo != "Ring" or func not in ("AllReduce", "AllGather", "ReduceScatter"):
        return 0
    if rules.ring_allreduce_inter_steps_2n:
        inter_steps = (2 * n_nodes if n_nodes > 1 else 0) if func == "AllReduce" else n_nodes - 1
    else:
        inter_steps = 0 if n_nodes == 1 else 2 * (n_nodes - 1) if func == "AllReduce" else n_nodes - 1
    return _ring_steps(func, n_ranks) - inter_steps


def _ring_steps(func: str, n_ranks: int) -> int:
    """Steps of a ring collective (tuning.cc nsteps): AllReduce 2(n-1), AllGather/ReduceScatter n-1, else n."""
    if func == "AllReduce":
        return 2 * (n_ranks - 1)
    return n_ranks - 1 if func in ("ReduceScatter", "AllGather") else n_ranks


def _log2i(n: int) -> int:
    return n.bit_length() - 1 if n > 0 else 0


def time_model_modelled(version) -> bool:
    """Release lines whose ncclTopoTuneModel is reproduced: every modelled line (MODELLED_VERSIONS)."""
    return version in MODELLED_VERSIONS


def tune_model(tables: TuningTables, inputs: TuneInputs, params: Params) -> CostTable:
    """ncclTopoTuneModel: the latency and bandwidth of every collective x algorithm x protocol."""
    if not time_model_modelled(tables.version):
        raise UsageError(f"the time model of NCCL {tables.version.line} is not modelled yet", "--nccl-version",
                         ", ".join(v.line for v in MODELLED_VERSIONS))
    rules = time_model_rules(tables.version)
    algorithms = tables.algorithms
    graphs = _algo_graphs(inputs)
    max_threads = _max_threads(inputs, params, algorithms)
    n_f, n_a = len(FUNCTIONS), len(algorithms)
    lat = [[[0.0] * 3 for _ in range(n_a)] for _ in range(n_f)]
    bw = [[[0.0] * 3 for _ in range(n_a)] for _ in range(n_f)]
    backup = [[0.0] * 3 for _ in range(n_f)] if rules.ring_backup else None
    if inputs.n_ranks > 1:
        _fill(rules, tables, inputs, params, graphs, lat, bw)
        _apply_enables(rules, tables, inputs, params, graphs, bw, backup)
    freeze = lambda m: tuple(tuple(tuple(p) for p in a) for a in m)  # noqa: E731
    return CostTable(algorithms=algorithms, lat_us=freeze(lat), bw_gbps=freeze(bw), max_threads=max_threads,
                     version=tables.version,
                     ring_backup_gbps=tuple(tuple(row) for row in backup) if backup is not None else None)


def ll_max_bw_gbps(tables: TuningTables, inputs: TuneInputs) -> float:
    """llMaxBws as NCCL indexes it for this job: the most LL moves per rank (GB/s of data)."""
    return _caps(time_model_rules(tables.version), tables, inputs)[0]


def _caps(rules: TimeModelRules, tables: TuningTables, inputs: TuneInputs):
    """The caps of this job's row and column; multi-node LL caps go by CPU vendor (AMD row 1, and
    hosts of mixed vendors from 2.24)."""
    cc = tables.compcap_row(inputs.min_compcap)
    col = tables.nodes_column(inputs.n_nodes)
    if inputs.n_nodes == 1:
        ll_row = cc
    else:
        amd = (_VENDOR_AMD, _VENDOR_MIXED) if rules.mixed_vendor_as_amd else (_VENDOR_AMD,)
        ll_row = 1 if inputs.cpu_vendor in amd else 0
    nvls_tree = tables.per_ch_max_nvls_tree_bw_gbps
    return (tables.ll_max_bw_gbps[ll_row][col], tables.per_ch_max_tree_bw_gbps[cc][col],
            tables.per_ch_max_ring_ll128_bw_gbps[cc][col], tables.per_ch_max_tree_ll128_bw_gbps[cc][col],
            nvls_tree[cc][col] if nvls_tree else 0.0, tables.nvls_efficiency[cc] if tables.nvls_efficiency else 0.0)


def _fill(rules, tables, inputs, params, graphs, lat, bw) -> None:
    caps = _caps(rules, tables, inputs)
    pat = _pat_enabled(rules, inputs, params) if "PAT" in tables.algorithms else False
    if inputs.cpu_arch == _ARCH_POWER:
        tables = _power_tables(tables)
    for f, func in enumerate(FUNCTIONS):
        for a, algo in enumerate(tables.algorithms):
            g = graphs[algo]
            intra_hw = "NVLINK" if g.type_intra == "NVL" else "PCI"
            hw = intra_hw if inputs.n_nodes == 1 else "NET"
            for p, proto in enumerate(PROTOCOLS):
                if _skipped(rules, func, algo, proto, pat):
                    continue
                bus = _bus_bw(rules, inputs, g, func, algo, proto, caps)
                if bus < 0:
                    continue
                bw[f][a][p] = _algo_bw(rules, inputs, func, algo, bus)
                lat[f][a][p] = _latency(rules, tables, inputs, g, func, algo, proto, params, hw, intra_hw)


def _power_tables(tables: TuningTables) -> TuningTables:
    """POWER hosts price PCI Tree/Simple like PCI Ring/Simple, to favour Tree (tuning.cc)."""
    pci = list(tables.hw_lat_us[1])
    tree, ring = tables.algorithms.index("Tree"), tables.algorithms.index("Ring")
    pci[tree] = (pci[tree][0], pci[tree][1], pci[ring][2])
    return replace(tables, hw_lat_us=(tables.hw_lat_us[0], tuple(pci), tables.hw_lat_us[2]))


def _touched(setting, func: str) -> bool:
    """Whether an NCCL_ALGO/NCCL_PROTO value names this function (parseList rewrites its row)."""
    return setting is not None and any(p is None or p.lower() == func.lower() for p, _, _ in setting.entries)


def _flat_list(setting, names) -> list[int]:
    """parseList until 2.23: one list for every function; `^` negates; unknown tokens ignored."""
    text = setting.text
    negate = text.startswith("^")
    state = [1 if negate else 0] * len(names)
    for token in (text[1:] if negate else text).split(","):
        for i, name in enumerate(names):
            if token.lower() == name.lower():
                state[i] = 0 if negate else 1
    return state


def _enable_lists(rules, algorithms, inputs, params) -> tuple[list[list[int]], list[list[int]]]:
    """protoEnable and algoEnable per function: 2 marks LL128 left to its default scope."""
    proto_setting, algo_setting = params.get("NCCL_PROTO"), params.get("NCCL_ALGO")
    protos, algos = [], []
    for func in FUNCTIONS:
        if not rules.per_function_lists:
            proto_on = _flat_list(proto_setting, PROTOCOLS) if proto_setting is not None else [1, 2, 1]
            algo_on = _flat_list(algo_setting, algorithms) if algo_setting is not None else [1] * len(algorithms)
        else:
            proto_on = [1, 2, 1]
            if _touched(proto_setting, func):
                proto_on = [int(v) for v in proto_setting.enabled(func, PROTOCOLS).values()]
            algo_on = [1] * len(algorithms)
            if algo_setting is not None:
                algo_on = [int(v) for v in algo_setting.enabled(func, algorithms).values()]
        index = {a: i for i, a in enumerate(algorithms)}
        if inputs.n_nodes == 1:
            algo_on[index["NVLSTree"]] = 0
        collnet = inputs.collnet
        if not collnet.enabled:
            algo_on[index["CollNetDirect"]] = algo_on[index["CollNetChain"]] = 0
            if inputs.n_nodes > 1:
                algo_on[index["NVLS"]] = 0  # NVLS across nodes runs over CollNet
            if rules.collnet_only_fallback and not any(algo_on[index[a]]
                                                       for a in ("Ring", "Tree", "NVLS", "NVLSTree")):
                algo_on[index["Ring"]] = algo_on[index["Tree"]] = 1  # NCCL_ALGO=COLLNET alone is ignored
        if inputs.nvs_count == 0:
            algo_on[index["CollNetDirect"]] = 0  # CollNet Direct needs an NVSwitch
        if collnet.enabled and not collnet.chain_support:
            algo_on[index["CollNetChain"]] = 0  # chain heads without CollNet resources (2.30)
        protos.append(proto_on)
        algos.append(algo_on)
    return protos, algos


def _ll128_auto(rules: TimeModelRules, inputs: TuneInputs, params: Params, g: Graph) -> bool:
    """LL128 where NCCL enables it by default: NVLink-class paths inside a node, up to PXB (PXN on
    SM90+) across nodes, one SM model (or SM90+ in 2.30), and the SMs each release lists."""
    rank = inputs.path_rank
    cc_min, cc_max = inputs.min_compcap, inputs.max_compcap
    if rules.ll128_sms is None:
        c2c = params.get("NCCL_LL128_C2C")
        c2c = 1 if c2c is None else c2c
        ok = rank[g.type_inter] <= rank["PXN" if c2c and cc_min >= 90 else "PXB"]
        ok = ok and cc_min >= 70
    else:
        ok = rank[g.type_inter] <= rank["PXB"] or (cc_min >= 90 and rank[g.type_inter] <= rank["PXN"])
        ok = ok and cc_min in rules.ll128_sms
    ok = ok and rank[g.type_intra] <= rank["NVB"]
    return ok and (cc_min == cc_max or (rules.ll128_mixed_sm90 and cc_min >= 90))


def _apply_enables(rules, tables, inputs, params, graphs, bw, backup) -> None:
    """NCCL_PROTO / NCCL_ALGO, LL128's default scope, the algorithms this job cannot run, and (2.19-2.23)
    the ring kept as a backup for a collective left with nothing."""
    algorithms = tables.algorithms
    protos, algos = _enable_lists(rules, algorithms, inputs, params)
    ring = algorithms.index("Ring")
    if backup is not None:
        for f in range(len(FUNCTIONS)):
            backup[f] = [bw[f][ring][p] for p in range(3)]
    for f, func in enumerate(FUNCTIONS):
        for a, algo in enumerate(algorithms):
            for p in range(3):
                enabled = protos[f][p]
                if enabled == 2:
                    enabled = _ll128_auto(rules, inputs, params, graphs[algo])
                if not enabled:
                    bw[f][a][p] = 0.0
                    if algo == "Ring" and backup is not None and rules.ring_backup_follows_proto:
                        backup[f][p] = 0.0
                if algo == "Ring" and func != "AllReduce" and rules.ring_kept_outside_allreduce:
                    continue
                if not algos[f][a]:
                    bw[f][a][p] = 0.0
    if backup is not None:
        for f in range(len(FUNCTIONS)):
            if not any(bw[f][a][p] for a in range(len(algorithms)) for p in range(3)):
                for p in range(3):  # at least keep the ring available
                    bw[f][ring][p] = backup[f][p]


@dataclass(frozen=True)
class AlgoTime:
    """ncclTopoGetAlgoTime's answer for one operation: `time_us` is -1 where NCCL would not use the
    combination; `backup` says the time came from the ring backup bandwidth (2.19-2.23)."""

    time_us: float
    backup: bool = False


def algo_time(table: CostTable, inputs: TuneInputs, func: str, algorithm: str, protocol: str, nbytes: int,
              n_channels: int) -> AlgoTime:
    """ncclTopoGetAlgoTime for a single operation (numPipeOps 1): latency plus bytes over bandwidth,
    with the tree correction per log2(nbytes/64) bucket and the ring Simple plateau factor.

    `n_channels` is the communicator's runtime channel count (after connect's doubling)."""
    terms = algo_terms(table, inputs, func, algorithm, protocol, nbytes, n_channels)
    if terms.bw_gbps == 0.0:
        return AlgoTime(-1.0, terms.backup)
    return AlgoTime(terms.lat_us + nbytes / (1000 * terms.bw_gbps), terms.backup)


@dataclass(frozen=True)
class AlgoTerms:
    """The two terms of ncclTopoGetAlgoTime for one operation: the latency (us) and the bandwidth
    (GB/s, 0 where NCCL would not use the pair) after every size-dependent correction."""

    lat_us: float
    bw_gbps: float
    backup: bool = False


def algo_terms(table: CostTable, inputs: TuneInputs, func: str, algorithm: str, protocol: str, nbytes: int,
               n_channels: int) -> AlgoTerms:
    """The latency and bandwidth algo_time adds up (see there)."""
    f, a, p = FUNCTIONS.index(func), table.algorithms.index(algorithm), PROTOCOLS.index(protocol)
    bw, lat = table.bw_gbps[f][a][p], table.lat_us[f][a][p]
    backup = False
    if table.ring_backup_gbps is not None and algorithm == "Ring" and bw == 0.0:
        bw, backup = table.ring_backup_gbps[f][p], True
    if bw == 0.0:
        return AlgoTerms(lat, 0.0, backup)
    log_size = _log2i(nbytes >> 6)
    factors = tuning_tables(table.version).tree_correction_factor
    # Tree is only priced for AllReduce; from 2.23 tuning.cc also says so in the test.
    if algorithm == "Tree" and func == "AllReduce" and 0 <= log_size < 23:
        bw *= factors[p][log_size]
    if (algorithm == "NVLSTree" and time_model_rules(table.version).nvls_tree_correction and func == "AllReduce"
            and 0 <= log_size < 24 and inputs.min_compcap >= 100 and inputs.cpu_arch == _ARCH_X86):
        bw *= factors[p][log_size]
    if (algorithm == "Ring" and protocol == "Simple" and inputs.n_nodes > 1 and func == "AllReduce"
            and nbytes // (n_channels * inputs.n_ranks) >= 64):
        lat *= 1.9 if inputs.min_compcap < 80 else 1.4  # the ring's plateau
    return AlgoTerms(lat, bw, backup)


def format_tuning_table(table: CostTable) -> list[str]:
    """NCCL's TUNING lines (rank 0): three algorithms per block, `%8.1f/%6.1f` latency/bandwidth."""
    lines = []
    algorithms = table.algorithms
    for start in range(0, len(algorithms), 3):
        block = range(start, min(start + 3, len(algorithms)))
        head = "  Algorithm   |" + "".join(f" {'':>14}   {algorithms[a]:>14}   {'':>14} |" for a in block)
        protos = "  Protocol    |" + "".join(f" {p:>14} |" for _ in range(3) for p in PROTOCOLS)
        threads = " Max NThreads |" + "".join(f" {table.max_threads[a][p]:>14d} |" for a in block for p in range(3))
        lines += [head, protos, threads]
        for f, func in enumerate(FUNCTIONS):
            lines.append(f"{func:>13} |" + "".join(
                f"{table.lat_us[f][a][p]:8.1f}/{table.bw_gbps[f][a][p]:6.1f} |" for a in block for p in range(3)))
    return lines
