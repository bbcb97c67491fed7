"""Engines turn calls into measured-looking results: `model` is NCCL's own time model, `des` the
discrete-event simulation of the fabric (model/engine.py).

`model_result(job, call)` answers one call the way ncclGroupSimulateEnd would: NCCL's algorithm,
protocol, channel and thread choice and its estimated time. Collectives are priced by NCCL's
formula (choose.py); NCCL has no time model for point-to-point calls, so alltoall and sendrecv
are priced by nicksim's own estimate (`p2p_time_us`), which the Result says in `estimate`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .calls import Call
from .choose import choose
from .constants.tuning_tables import tuning_tables
from .connect import p2p_channels, p2p_chunk_nbytes, p2p_net_channel_bw_gbps
from .job import Job
from .paths import local_nets
from .plan_p2p import p2p_ll_threshold_nbytes, p2p_transfers

__all__ = ["EngineResult", "model_result", "des_result", "engine_result", "p2p_time_us", "ENGINES"]

ENGINES: tuple[str, ...] = ("model", "des")

# NCCL_P2P_LL_THRESHOLD default (enqueue.cc): point-to-point transfers up to 16 KiB use LL.
P2P_LL_THRESHOLD_NBYTES = 16384


@dataclass(frozen=True)
class EngineResult:
    """One call's answer: time in microseconds (out-of-place and in-place are the same call to the
    model), and the plan summary nccl-tests' JSON carries (`algorithm protocol nchannels nthreads`).
    `estimate` names where the time comes from: "nccl" (NCCL's formula), "nicksim-p2p" or "des";
    `detail` is the engine's own record of the call (the DES run: link use, hang), if any."""

    call: Call
    time_us: float
    algorithm: str
    protocol: str
    n_channels: int
    n_threads: int
    estimate: str = "nccl"
    detail: object = None

    def plan_dict(self) -> dict:
        return {"algorithm": self.algorithm, "protocol": self.protocol, "nchannels": self.n_channels,
                "nthreads": self.n_threads}


def _net_bw_per_gpu_gbps(job: Job) -> float:
    """The node's NIC bandwidth shared by its GPUs (GB/s per GPU)."""
    system = job.paths.node_system
    nets = [system.nodes[n].net for n in system.of_kind("NET")]
    total = sum(net.bw_gbps for net in nets if net is not None)
    return total / max(1, len(system.gpus()))


def _net_channels_bw_gbps(job: Job, n_peers: int) -> float:
    """What the point-to-point channels a rank drives at once towards `n_peers` network peers move:
    each peer gets its p2p channels per peer, never more than the p2p channels in all, and each
    channel moves what NCCL expects of it across the network (connect.p2p_net_channel_bw_gbps)."""
    p2p = p2p_channels(job.paths, job.channels.n_channels, job.nodes, job.params)
    return min(n_peers * p2p.per_peer, p2p.n_channels) * p2p_net_channel_bw_gbps(job.paths, job.nodes, job.params)


def p2p_time_us(job: Job, call: Call) -> float:
    """nicksim's estimate for alltoall and sendrecv (NCCL prices no point-to-point call).

    One step at NCCL's own latencies (Ring base + hardware latency of the path, LL up to the
    16 KiB P2P LL threshold, else Simple), then the rank's bytes over its bottleneck: peers in
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
    protocol = "LL" if peer_nbytes <= P2P_LL_THRESHOLD_NBYTES else "Simple"
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


def _busiest_link_us(job: Job, call: Call, peer_nbytes: float, efficiency: float) -> float:
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


def _p2p_plan_summary(job: Job, call: Call) -> tuple[str, int]:
    """Protocol and channel count of rank 0's largest transfer, as NCCL 2.22-2.30 plan it; older
    releases: LL up to the 16 KiB threshold, and the p2p channels per peer."""
    per_node = len(job.paths.node_system.gpus())
    p2p = p2p_channels(job.paths, job.channels.n_channels, job.nodes, job.params)
    minor = job.system.rules.version.minor
    if minor >= 22:
        transfers = p2p_transfers(call, 0, job.nodes, per_node, p2p.n_channels, p2p.per_peer,
                                  p2p_chunk_nbytes(job.paths, job.nodes, job.params), minor,
                                  job.params.get("NCCL_P2P_SCHEDULE_GROUP_SIZE"), job.comm.buff_nbytes[0],
                                  p2p_ll_threshold_nbytes(job.params))
        # the self-copy of alltoall never uses LL; the peers' transfers say what the call looks like
        biggest = max((t for t in transfers if t.peer != 0), key=lambda t: len(t.channels), default=None)
        if biggest is not None:
            return biggest.protocol, len(biggest.channels)
    nbytes = call.count * call.elem_nbytes
    return ("LL" if nbytes <= P2P_LL_THRESHOLD_NBYTES else "Simple"), p2p.per_peer


def model_result(job: Job, call: Call) -> EngineResult:
    """NCCL's decision and estimated time for `call` on `job`."""
    if call.collective in ("alltoall", "sendrecv"):
        protocol, n_channels = _p2p_plan_summary(job, call)
        return EngineResult(call, p2p_time_us(job, call), "P2P", protocol, n_channels, 640, "nicksim-p2p")
    choice = choose(job.comm, call)
    return EngineResult(call, choice.time_us, choice.algorithm, choice.protocol, choice.max_channels,
                        choice.n_threads)


def des_result(job: Job, call: Call, setup=None) -> EngineResult:
    """`call` simulated by the DES engine on NCCL's own plan (`setup`: a model.engine.DesSetup with
    parameters and faults; defaults for the job when None). A hang comes back in `detail.hang`."""
    from .model.engine import des_setup, simulate  # the DES and SimPy load only when asked for
    run = simulate(setup or des_setup(job), call)
    plan = run.plan
    return EngineResult(call, run.time_us, plan.algorithm, plan.protocol, plan.max_channels, plan.n_threads,
                        "des", run)


def engine_result(job: Job, call: Call, engine: str = "model", setup=None) -> EngineResult:
    """`call` answered by the named engine (`setup`: the DES setup)."""
    if engine == "des":
        return des_result(job, call, setup)
    return model_result(job, call)
