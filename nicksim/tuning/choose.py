"""The per-call decision: algorithm, protocol, channels and threads (enqueue.cc getAlgoInfo).

`comm_state(...)` gathers what NCCL's enqueue path reads from an initialised communicator —
the cost table, the runtime channel counts, NVLS support and its channel count, thread limits
and thresholds. `choose(comm, call)` then prices every enabled algorithm x protocol with
ncclTopoGetAlgoTime, keeps the cheapest (first in NCCL's order on a tie), and sizes the channel
and thread counts as topoGetAlgoInfo does. The estimate it returns is what
ncclGroupSimulateEnd reports for the call alone.

Modelled: every release whose time model is (2.18-2.30), as enqueue.cc of each tag chooses
(2.20 and 2.21 size channels and threads in getChannnelThreadInfo, by the same rule); no tuner
plugin, no user buffer registration (so no CTA-policy or registered-NVLS shortcuts). CollNet is
chosen where a CollNet (SHARP) plugin serves the job and NCCL keeps it on (collnet.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..calls import Call
from ..graph.collnet import COLLNET_OFF, CollNetSetup, collnet_supported, graph_heads
from ..constants.rules import rules
from ..constants.tuning_tables import PROTOCOLS, tuning_tables
from ..constants.versions import MODELLED_VERSIONS
from ..errors import UsageError
from ..params import Params
from ..graph.connect import nvls_channels
from ..graph.graphs import Graph
from ..constants.device import NCCL_MAX_NTHREADS, WARP_SIZE
from .cost import (FUNCTIONS, CostTable, ThreadThresholds, TuneInputs, algo_time,
                   thread_thresholds, time_model_modelled, tune_inputs, tune_model)

__all__ = ["CommState", "Choice", "Priced", "comm_state", "choose", "forced_choice", "priced", "nvls_supported"]

# src/include/device.h NCCL_MAX_DIRECT_ARITY (7, 2.18-2.30); NCCL_MAX_NVLS_ARITY changed (ReleaseRules.nvls_arity).
NCCL_MAX_DIRECT_ARITY = 7
# transport/nvls.cc NVLS_NCHANNELS_SM90 / _SM100 (2.25+) / _SM100_NVL (2.27+); NCCL_NVLS_NCHANNELS default 16 before.
_NVLS_CHUNK_NBYTES = 128 * 1024  # NCCL_NVLS_CHUNKSIZE default
_FP8 = ("f8e4m3", "f8e5m2")


@dataclass(frozen=True)
class CommState:
    """What enqueue.cc reads from one rank's communicator when it plans a call.

    `n_channels` is comm->nChannels (rings and trees after connect), `nvls_channels` is
    comm->nvlsChannels (0 without NVLS), `nvls_heads` the NVLS graph's head count.
    """

    table: CostTable
    inputs: TuneInputs
    thresholds: ThreadThresholds
    n_channels: int
    nvls_support: bool
    nvls_channels: int
    nvls_heads: int
    nvls_chunk_nbytes: int
    nvls_tree_max_chunk_nbytes: int
    local_ranks: int
    buff_nbytes: tuple[int, int, int]  # LL, LL128, Simple (comm->buffSizes)
    ring_chunk_steps: int
    ring_slice_steps: int
    collnet: CollNetSetup = COLLNET_OFF
    # connect.cc connectCollNet: the distinct heads of the CollNet Direct graph (channels[0].collnetDirect.nHeads).
    collnet_direct_heads: int = 0

    @property
    def nranks(self) -> int:
        return self.inputs.n_ranks

    @property
    def n_nodes(self) -> int:
        return self.inputs.n_nodes


@dataclass(frozen=True)
class Choice:
    """NCCL's decision for one call: algorithm, protocol, the most channels the call may use
    (nMaxChannels), threads per CTA, and the estimated time in microseconds."""

    algorithm: str
    protocol: str
    max_channels: int
    n_threads: int
    time_us: float
    backup: bool = False


def _buff(params: Params, name: str, default: int) -> int:
    """init.cc computeBuffSizes: NCCL_LL_BUFFSIZE / NCCL_LL128_BUFFSIZE replace the computed size
    unless left at -2 (or set to a value NCCL could not use)."""
    value = params.get(name)
    return int(value) if value is not None and value > 0 else default


def comm_state(paths, graphs: dict[str, Graph], n_channels: int, n_nodes: int, params: Params,
               collnet: CollNetSetup = COLLNET_OFF) -> CommState:
    """The communicator of a job of `n_nodes` copies of the node `paths` describes, with
    `n_channels` runtime channels (connect's result) and the CollNet set-up (collnet.py)."""
    version = paths.system.rules.version
    if not time_model_modelled(version):
        raise UsageError(f"NCCL {version.line}'s time model is not modelled yet", "--nccl-version",
                         ", ".join(v.line for v in MODELLED_VERSIONS))
    tables = tuning_tables(version)
    inputs = tune_inputs(paths, graphs, n_nodes, collnet)
    table = tune_model(tables, inputs, params)
    local = len(paths.node_system.gpus())
    direct = graphs.get("collnet_direct", graphs.get("collnet_chain"))
    direct_heads = 0
    release = rules(version)
    if collnet.enabled and direct is not None and (not release.collnet_heads_local_limit
                                                   or local <= NCCL_MAX_DIRECT_ARITY + 1):
        direct_heads = len(graph_heads(direct, local))
    nvls = graphs.get("nvls")
    nvls_ch = nvls_channels(paths.system, graphs, n_nodes, params)
    # NCCL_NVLSTREE_MAX_CHUNKSIZE default (-2): 64 KiB from 4 nodes, else the chunk NVLS Tree starts
    # from: the NVLS chunk (enqueue.cc 2.21-2.22, nvls.cc 2.30; the SM100 multi-node retuning of 2.30
    # is not modelled), a whole Simple step in 2.18-2.20 (enqueue.cc computeColl, v2.20.5
    # computeCollChunkInfo). 2.19 hard-codes the 64 KiB from 4 nodes; 2.18 has no limit.
    # NCCL_NVLS_CHUNKSIZE is read from 2.21 (transport/nvls.cc); earlier releases hard-code 128 KiB.
    chunk = (params.get("NCCL_NVLS_CHUNKSIZE") if release.nvls_chunksize_knob else None) or _NVLS_CHUNK_NBYTES
    buff_simple = params.get("NCCL_BUFFSIZE") or (4 << 20)
    start = chunk if release.nvlstree_chunk_from_nvls_chunk else buff_simple // 8
    tree_env = params.get("NCCL_NVLSTREE_MAX_CHUNKSIZE") if release.nvlstree_max_chunksize_knob else None
    four_nodes = n_nodes >= 4 and release.nvlstree_64k_from_4_nodes
    tree_max = tree_env if tree_env is not None and tree_env != -2 else (65536 if four_nodes else start)
    return CommState(
        table=table, inputs=inputs, thresholds=thread_thresholds(tables, inputs.n_ranks, params),
        n_channels=n_channels, nvls_support=nvls is not None, nvls_channels=nvls_ch,
        nvls_heads=nvls.n_channels if nvls is not None else 0, nvls_chunk_nbytes=chunk,
        nvls_tree_max_chunk_nbytes=tree_max, local_ranks=local,
        # comm->buffSizes (init.cc computeBuffSizes): LL = 8 lines x 512 threads x 8 steps x 16 B,
        # LL128 = 120 elems x 640 threads x 8 steps x 8 B (NCCL_LL128_ELEMS_PER_THREAD), Simple = NCCL_BUFFSIZE.
        buff_nbytes=(_buff(params, "NCCL_LL_BUFFSIZE", 512 * 1024), _buff(params, "NCCL_LL128_BUFFSIZE", 4_915_200),
                     buff_simple),
        ring_chunk_steps=4, ring_slice_steps=2, collnet=collnet, collnet_direct_heads=direct_heads,
    )


def _threshold(comm: CommState, algorithm: str, protocol: str) -> int:
    p = PROTOCOLS.index(protocol)
    if algorithm == "Tree":
        return comm.thresholds.tree[p]
    if algorithm == "Ring":
        return comm.thresholds.ring[p]
    if algorithm in ("CollNetDirect", "CollNetChain") and protocol == "Simple":
        return comm.thresholds.collnet_direct_simple
    return tables_default(comm, protocol)


def tables_default(comm: CommState, protocol: str) -> int:
    t = tuning_tables(comm.table.version)
    return (t.ll_thread_threshold, t.ll128_thread_threshold, t.simple_thread_threshold)[PROTOCOLS.index(protocol)]


def nvls_supported(redop: str, dtype: str) -> bool:
    """device.h ncclNvlsSupported: multimem reductions exist for sum (and min/max on integers and
    16-bit floats); float and double only sum; 8-bit types none. avg and prod never."""
    if dtype in ("int32", "uint32", "int64", "uint64", "half", "bfloat16"):
        return redop in ("sum", "min", "max")
    if dtype in ("float", "double"):
        return redop == "sum"
    return False


def _nvls_skipped(comm: CommState, call: Call, algorithm: str) -> bool:
    """Whether updateCollCostTable (topoGetAlgoInfo before 2.22) leaves NVLS or NVLS Tree unpriced.

    The multimem check is NCCL_NVLS_SUPPORTS(type, op) alone in 2.18; from 2.19 the caller's nvlsSupport,
    comm->nvlsSupport and ncclNvlsSupported(op, type), which from 2.22 also holds for any AllGather."""
    release = rules(comm.table.version)
    func = call.func
    if algorithm == "NVLS" and comm.n_nodes > 1:
        if not collnet_supported(comm.collnet, func, call.redop, call.dtype):
            return True  # NVLS across nodes runs over CollNet
        if release.nvls_ag_rs_single_node_only and func in ("AllGather", "ReduceScatter"):
            return True  # "we only support single-node NVLS allgather and reducescatter"
    style = release.nvls_filter
    if style == "op-type":
        return not nvls_supported(call.redop, call.dtype)
    supported = nvls_supported(call.redop, call.dtype)
    if style in ("comm-ag-exempt", "comm"):
        support = comm.nvls_support and supported
        if style == "comm-ag-exempt" and algorithm == "NVLS":
            return not support and func != "AllGather"  # 2.19.4 lets NVLS AllGather through
        return not support  # 2.19.4 NVLS Tree, 2.20.5-2.21.5 both
    support = comm.nvls_support and (supported or func == "AllGather")
    if style in ("comm-or-ag", "comm-or-ag-32-ranks"):
        if algorithm == "NVLS" and func in ("AllGather", "ReduceScatter") and style == "comm-or-ag-32-ranks" \
                and comm.nranks > release.nvls_arity:
            return True  # 2.25-2.26: single-node NVLS AllGather/ReduceScatter up to 32 ranks
        return not support and func != "AllGather"
    return not support or (func != "AllReduce" and comm.local_ranks > release.nvls_arity)


def _candidates(comm: CommState, call: Call) -> list[tuple[str, str]]:
    """updateCollCostTable's filter: which algorithm x protocol pairs are priced at all."""
    release = rules(comm.table.version)
    out = []
    for algorithm in comm.table.algorithms:
        if algorithm in ("CollNetDirect", "CollNetChain"):
            if not collnet_supported(comm.collnet, call.func, call.redop, call.dtype):
                continue
            limited = release.collnet_direct_local_limit if algorithm == "CollNetDirect" \
                else release.collnet_chain_local_limit
            if comm.local_ranks > NCCL_MAX_DIRECT_ARITY + 1 and limited:
                continue  # CollNet Direct (2.23+) and Chain (2.28+) serve at most 8 local GPUs
        if algorithm in ("NVLS", "NVLSTree") and _nvls_skipped(comm, call, algorithm):
            continue
        if algorithm == "PAT" and call.collective == "reduce_scatter" and call.redop == "avg" \
                and release.pat_rs_avg_skipped:
            continue  # PAT reduce-scatter cannot scale (PreMulSum / SumPostDiv)
        out.extend((algorithm, protocol) for protocol in PROTOCOLS)
    return out


def choose(comm: CommState, call: Call) -> Choice:
    """NCCL's algorithm, protocol, channel and thread choice for `call` (getAlgoInfo)."""
    if call.func not in FUNCTIONS:
        raise UsageError(f"{call.collective} is point-to-point; NCCL has no algorithm choice for it", "COLL",
                         ", ".join(f for f in FUNCTIONS))
    if call.dtype in _FP8 and not rules(comm.table.version).fp8_types:
        raise UsageError(f"{call.dtype} needs NCCL 2.24 or later (this job models {comm.table.version.line})", "-d",
                         "a type this release has")
    nbytes = call.nbytes
    if comm.nranks == 1:
        return Choice("Ring", "Simple", 1, _final_threads(comm, "Ring", "Simple", comm.table.max_threads[
            comm.table.algorithms.index("Ring")][2], nbytes, 1), 0.0)
    best, best_time, backup_best, backup_time = None, float("inf"), None, float("inf")
    for algorithm, protocol in _candidates(comm, call):
        t = algo_time(comm.table, comm.inputs, call.func, algorithm, protocol, nbytes, comm.n_channels)
        time_us = t.time_us
        if call.dtype in _FP8 and algorithm == "Ring" and comm.nranks > 8 and time_us >= 0:
            time_us *= 1024.0  # deep fp8 rings lose precision: least preferred (enqueue.cc, 2.24+)
        if t.backup:
            if 0 <= time_us < backup_time:
                backup_best, backup_time = (algorithm, protocol), time_us
            continue
        if 0 <= time_us < best_time:
            best, best_time = (algorithm, protocol), time_us
    used_backup = False
    if best is None:
        if backup_best is None:
            raise UsageError(f"no algorithm/protocol available for {call.func} with datatype {call.dtype}",
                             "NCCL_ALGO / NCCL_PROTO", "a setting that leaves one algorithm and protocol enabled")
        best, best_time, used_backup = backup_best, backup_time, True
    algorithm, protocol = best
    return _size(comm, call, algorithm, protocol, nbytes, best_time, used_backup)


def forced_choice(comm: CommState, call: Call, algorithm: str, protocol: str) -> Choice:
    """What NCCL does when NCCL_ALGO/NCCL_PROTO leave only `algorithm`/`protocol`: its channels and
    threads for the call, and the time ncclTopoGetAlgoTime gives the pair (-1 where it cannot run)."""
    if algorithm not in comm.table.algorithms or protocol not in PROTOCOLS:
        raise UsageError(f"{algorithm}/{protocol} is not an algorithm/protocol of NCCL {comm.table.version.line}",
                         "NCCL_ALGO / NCCL_PROTO", ", ".join(comm.table.algorithms) + " / " + ", ".join(PROTOCOLS))
    t = algo_time(comm.table, comm.inputs, call.func, algorithm, protocol, call.nbytes, comm.n_channels)
    return _size(comm, call, algorithm, protocol, call.nbytes, t.time_us, t.backup)


@dataclass(frozen=True)
class Priced:
    """One algorithm x protocol pair NCCL prices for a call: its estimated time (-1 where
    ncclTopoGetAlgoTime says it cannot run), whether it is only a backup (the ring NCCL falls back
    to), the channels and threads it would get, and whether it is the one NCCL picks."""

    algorithm: str
    protocol: str
    time_us: float
    backup: bool
    max_channels: int
    n_threads: int
    chosen: bool


def priced(comm: CommState, call: Call) -> tuple[Priced, ...]:
    """Every pair updateCollCostTable prices for `call`, in NCCL's order, `chosen` marking the
    one `choose` keeps: the alternatives behind NCCL's decision, side by side."""
    pick = choose(comm, call)
    out = []
    for algorithm, protocol in _candidates(comm, call):
        c = forced_choice(comm, call, algorithm, protocol)
        out.append(Priced(algorithm, protocol, c.time_us, c.backup, c.max_channels, c.n_threads,
                          (algorithm, protocol) == (pick.algorithm, pick.protocol)))
    return tuple(out)


def _size(comm: CommState, call: Call, algorithm: str, protocol: str, nbytes: int, time_us: float,
          backup: bool) -> Choice:
    """topoGetAlgoInfo's channel and thread sizing for the chosen pair."""
    a = comm.table.algorithms.index(algorithm)
    nt = comm.table.max_threads[a][PROTOCOLS.index(protocol)]
    threshold = _threshold(comm, algorithm, protocol)
    nc = comm.n_channels
    if algorithm == "CollNetDirect":
        nc, threshold = _collnet_direct_channels(nbytes, nc, nt, comm.collnet_direct_heads, threshold)
    elif algorithm in ("NVLS", "NVLSTree"):
        nc = comm.nvls_channels
        if rules(comm.table.version).nvls_multinode_channels_in_rings and comm.n_nodes > 1 and algorithm == "NVLS":
            nc = min(comm.nvls_channels, comm.n_channels)  # multi-node NVLS (CollNet) within the rings (2.28+)
    else:
        while nbytes < nc * nt * threshold and nc >= 2:
            nc -= 1
        while nbytes < nc * nt * threshold and nt % 128 == 0:
            nt //= 2
    return Choice(algorithm, protocol, nc, _final_threads(comm, algorithm, protocol, nt, nbytes, nc), time_us,
                  backup)


def _collnet_direct_channels(nbytes: int, nc: int, nt: int, heads: int, threshold: int) -> tuple[int, int]:
    """CollNet Direct channel tuning: drop channels while the bytes do not fill nc x nt x heads x threshold,
    stopping at 16, 8, 4, 2, 1 in turn; the threshold halves at 24, 12, 6, 3 channels."""
    nc_switch, short = 16, True
    while nc_switch >= 1 and short:
        while True:
            short = nbytes < nc * nt * heads * threshold
            if not (short and nc > nc_switch):
                break
            if nc == nc_switch + nc_switch // 2:
                threshold //= 2
            nc -= 1
        nc_switch //= 2
    return nc, threshold


def _final_threads(comm: CommState, algorithm: str, protocol: str, nt: int, nbytes: int, nc: int) -> int:
    if protocol == "Simple":
        if algorithm == "Ring":
            nt += WARP_SIZE  # an extra warp for synchronisation
        if algorithm == "Tree":
            nt += 4 * WARP_SIZE  # split thread model
    nt = 3 * WARP_SIZE if nt // WARP_SIZE < 3 else nt
    if (algorithm == "Tree" and rules(comm.table.version).tree_all_threads) or algorithm == "PAT":
        nt = NCCL_MAX_NTHREADS  # tree (from 2.22) and PAT (2.23+) always use every thread
    return nt
