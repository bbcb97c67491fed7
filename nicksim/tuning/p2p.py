"""nicksim's time estimate for point-to-point calls, where NCCL has no time model.

NCCL prices collectives (cost.py, choose.py) but not sendrecv or alltoall: `p2p_time_us(job,
call)` is nicksim's own estimate for them, built from NCCL's numbers (its Ring latencies per
protocol, its path bandwidths, the point-to-point channels connect.py counts), and
`p2p_ll_threshold_nbytes(params)` is NCCL_P2P_LL_THRESHOLD, the knob that picks a transfer's
protocol. `job` is a nicksim.job.Job (read, never imported).
"""
from __future__ import annotations

from ..calls import Call
from ..constants.tuning_tables import tuning_tables
from ..graph.connect import p2p_channels, p2p_net_channel_bw_gbps
from ..graph.paths import local_nets
from ..params import KNOBS, Params

__all__ = ["p2p_time_us", "p2p_ll_threshold_nbytes"]


def p2p_ll_threshold_nbytes(params: Params) -> int:
    """NCCL_P2P_LL_THRESHOLD (enqueue.cc; its default in the knob table): a point-to-point part of at
    most this many bytes goes LL, a larger one Simple."""
    value = params.get("NCCL_P2P_LL_THRESHOLD")
    return KNOBS["NCCL_P2P_LL_THRESHOLD"].default_for(params.version_minor) if value is None or value < 0 else int(value)


def _net_bw_per_gpu_gbps(job) -> float:
    """The node's NIC bandwidth shared by its GPUs (GB/s per GPU)."""
    system = job.paths.node_system
    nets = [system.nodes[n].net for n in system.of_kind("NET")]
    total = sum(net.bw_gbps for net in nets if net is not None)
    return total / max(1, len(system.gpus()))


def _net_channels_bw_gbps(job, n_peers: int) -> float:
    """What the point-to-point channels a rank drives at once towards `n_peers` network peers move:
    each peer gets its p2p channels per peer, never more than the p2p channels in all, and each
    channel moves what NCCL expects of it across the network (connect.p2p_net_channel_bw_gbps)."""
    p2p = p2p_channels(job.paths, job.channels.n_channels, job.nodes, job.params)
    return min(n_peers * p2p.per_peer, p2p.n_channels) * p2p_net_channel_bw_gbps(job.paths, job.nodes, job.params)


def p2p_time_us(job, call: Call) -> float:
    """nicksim's estimate for alltoall and sendrecv (NCCL prices no point-to-point call).

    One step at NCCL's own latencies (Ring base + hardware latency of the path, LL up to
    NCCL_P2P_LL_THRESHOLD, else Simple), then the rank's bytes over its bottleneck: peers in
    the node over the GPU-GPU path bandwidth, peers on other nodes over the GPU's share of the
    node's NICs or what its point-to-point channels move across the network, if less; the two
    kinds of traffic run concurrently, and no link of the node carries more than its bandwidth
    allows with every rank's traffic on it (a socket link, a PCIe-only GPU's own link shared by
    its node and network peers).
    """
    n, per_node = call.nranks, len(job.paths.node_system.gpus())
    peer_nbytes = call.count * call.elem_nbytes
    if call.collective == "sendrecv":
        # Every rank sends to the next; the slowest pair sets the time: the one that leaves the
        # node when there are several, else rank 0 -> 1.
        peers = ([per_node] if n > per_node else [1]) if n > 1 else []
    else:
        peers = [r for r in range(n) if r != 0]
    if not peers:
        return 0.0
    protocol = "LL" if peer_nbytes <= p2p_ll_threshold_nbytes(job.params) else "Simple"
    tables = tuning_tables(job.paths.system.rules.version)
    intra = [p for p in peers if p // per_node == 0]
    inter = [p for p in peers if p // per_node != 0]
    hw = "NET" if inter else ("NVLINK" if intra and job.paths.gpu_path(0, intra[0]).type == "NVL" else "PCI")
    lat = tables.base_lat("Ring", protocol) + tables.hw_lat(hw, "Ring", protocol)
    efficiency = 0.5 if protocol == "LL" else 1.0  # LL carries 8 data bytes per 16
    intra_us = sum(peer_nbytes / (1e3 * job.paths.gpu_path(0, p).bw_gbps * efficiency) for p in intra)
    net_bw = min(_net_bw_per_gpu_gbps(job), _net_channels_bw_gbps(job, len(inter))) * efficiency
    inter_us = len(inter) * peer_nbytes / (1e3 * net_bw) if inter and net_bw > 0 else 0.0
    return lat + max(intra_us, inter_us, _busiest_link_us(job, call, peer_nbytes, efficiency))


def _busiest_link_us(job, call: Call, peer_nbytes: float, efficiency: float) -> float:
    """The time the busiest link of node 0 needs for what every rank of the node moves at once:
    each pair inside the node along NCCL's GPU-GPU path, each rank's bytes for other nodes along
    its path to its nearest NIC (links that pairs share — a socket link, a PCIe-only GPU's own
    link — carry all of them)."""
    paths = job.paths
    system = paths.system
    per_node, n = len(paths.node_system.gpus()), call.nranks
    if call.collective == "sendrecv":
        pairs = [(r, (r + 1) % n) for r in range(per_node) if (r + 1) % n < per_node and n > 1]
        egress = [(per_node - 1, peer_nbytes)] if n > per_node else []
    else:
        pairs = [(a, b) for a in range(per_node) for b in range(per_node) if a != b]
        egress = [(r, (n - per_node) * peer_nbytes) for r in range(per_node)] if n > per_node else []
    load: dict[tuple[int, int], float] = {}
    for a, b in pairs:
        for hop in paths.gpu_path(a, b).links:
            load[hop] = load.get(hop, 0.0) + peer_nbytes
    for r, nbytes in egress:
        nets = local_nets(paths, r)
        if nets:
            for hop in paths.path(system.gpu_by_rank(r), nets[0]).links:
                load[hop] = load.get(hop, 0.0) + nbytes
    return max((nbytes / (1e3 * system.nodes[node].links[pos].bw_gbps * efficiency)
                for (node, pos), nbytes in load.items()), default=0.0)
