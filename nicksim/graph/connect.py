"""Channels: NCCL's rings and trees over the whole job (connect.cc ncclTopoPreset/Postset).

`connect(paths, graphs, params, nodes, rank)` joins the per-node ring and tree graphs of `nodes`
identical nodes the way NCCL's init does: each node contributes its channel orders (ranks offset
by node); rings are chained node to node (odd nodes swap channel pairs when the ring search used
a second NIC, to stay on rails); the inter-node tree is the double binary tree over nodes, hung off
each node's chain head; channels are then doubled, raised by half when CollNet runs and its chain
is faster inside the node than across, doubled again for SM90+ multi-node rings faster than
45 GB/s with fewer than 16 channels, and bounded by NCCL_MIN/MAX_NCHANNELS and NCCL_MIN/MAX_CTAS.
The result, Channels, is one rank's view; `format_channels` prints NCCL's `Channel 00/16 :` ring
lines and its `Trees [0] ...` line.

Modelled: jobs whose nodes are identical and whose rank view holds the whole node.
"""
from __future__ import annotations

from dataclasses import dataclass

from .collnet import collnet_setup, graph_heads
from ..constants.rules import ReleaseRules, rules_for_minor
from ..constants.topo_rules import NET_STEP_US, P2P_NET_CHUNK_DEFAULT, P2P_PER_CHANNEL_NET_BW
from ..errors import UsageError
from ..params import Params
from .paths import Paths, local_net, local_nets
from .graphs import SPLIT_TREE, TREE, Graph
from .trees import dtree

__all__ = ["Channels", "connect", "format_channels", "nvls_heads", "format_nvls_heads", "P2pChannels",
           "p2p_channels", "format_channel_counts", "all_nvlink", "p2p_chunk_nbytes", "p2p_net_channel_bw_gbps",
           "nvls_channel_count", "nvls_channels"]

# MAXCHANNELS (32 until 2.24, 64 from 2.25) bounds every channel count here: ReleaseRules.maxchannels.


@dataclass(frozen=True)
class Channels:
    """One rank's channels: ring order from the rank, ring neighbours, tree parent and children."""

    rank: int
    nranks: int
    n_nodes: int
    n_channels: int
    rings: tuple[tuple[int, ...], ...]
    ring_prev: tuple[int, ...]
    ring_next: tuple[int, ...]
    tree_up: tuple[int, ...]
    tree_down: tuple[tuple[int, int, int], ...]
    nvls_channels: int = 0


# comm->nvlsChannels defaults (transport/nvls.cc; nvls.cc ncclNvlsTuning from 2.27): SM90, SM100 across nodes, SM100 in one NVLink domain.
_NVLS_CH_SM90, _NVLS_CH_SM100, _NVLS_CH_SM100_NVL = 16, 32, 24


def nvls_channel_count(version_minor: int, compcap: int, min_compcap: int, n_nodes: int, params: Params) -> int:
    """comm->nvlsChannels before the CTA clamp (transport/nvls.cc ncclNvlsInit; nvls.cc ncclNvlsTuning in 2.30).

    Until 2.24 NCCL_NVLS_NCHANNELS, default 16. 2.25-2.26: 32 on SM100, else 16; NCCL_NVLS_NCHANNELS
    (default -2) overrides when >= 0. From 2.27 SM100 takes 24 in one NVLink domain and 32 across nodes;
    NCCL_NVLS_NCHANNELS (config.nvlsCTAs) overrides when > 0."""
    env = params.get("NCCL_NVLS_NCHANNELS")
    style = rules_for_minor(version_minor).nvls_channels_default
    if style == "16":
        return _NVLS_CH_SM90 if env is None else env
    if style == "sm100-32":
        if env is not None and env >= 0:
            return env
        return _NVLS_CH_SM100 if compcap >= 100 else _NVLS_CH_SM90
    if env is not None and env > 0:
        return env
    if compcap >= 100:
        return _NVLS_CH_SM100 if n_nodes > 1 else _NVLS_CH_SM100_NVL
    return _NVLS_CH_SM90


def nvls_channels(system, graphs: dict[str, Graph], n_nodes: int, params: Params) -> int:
    """comm->nvlsChannels: 0 without an NVLS graph, else the release's count (nvls_channel_count)
    within NCCL_MIN_CTAS / NCCL_MAX_CTAS."""
    if "nvls" not in graphs:
        return 0
    sms = [system.nodes[g].gpu.sm for g in system.gpus()]
    wanted = nvls_channel_count(system.rules.version.minor, max(sms), min(sms), n_nodes, params)
    maxchannels = system.rules.release.maxchannels  # config.maxCTAs defaults to MAXCHANNELS (init.cc)
    return max(params.get("NCCL_MIN_CTAS") or 1, min(params.get("NCCL_MAX_CTAS") or maxchannels, wanted))


def _offset(ranks, node: int, per_node: int) -> list[int]:
    return [node * per_node + r for r in ranks]


def connect(paths: Paths, graphs: dict[str, Graph], params: Params, nodes: int, rank: int = 0) -> Channels:
    """Channels of `rank` in a job of `nodes` copies of the node `paths` describes."""
    view = paths.system
    gpus_per_node = len(paths.node_system.gpus())
    local = sorted(view.nodes[g].gpu.rank for g in view.gpus())
    if local != list(range(gpus_per_node)):
        raise UsageError("channels are only modelled when every GPU of a node is in one P2P/SHM domain "
                         f"(this node splits into domains: rank 0 sees ranks {local})", "connect")
    release = view.rules.release
    maxchannels = release.maxchannels
    per_node = gpus_per_node
    nranks = nodes * per_node
    if not 0 <= rank < nranks:
        raise UsageError(f"rank {rank} is not in the job", "--rank", f"0..{nranks - 1}")
    ring, tree = graphs["ring"], graphs["tree"]
    n_ch = min(ring.n_channels, tree.n_channels)
    my_node = rank // per_node

    # ncclTopoPreset, for every rank: ring entry/exit per node, intra-node neighbours, tree chain.
    ring_recv = [[0] * nodes for _ in range(n_ch)]
    ring_send = [[0] * nodes for _ in range(n_ch)]
    ring_prev = [[-1] * nranks for _ in range(n_ch)]
    ring_next = [[-1] * nranks for _ in range(n_ch)]
    tree_parent = [[0] * nodes for _ in range(n_ch)]
    tree_child0 = [[0] * nodes for _ in range(n_ch)]
    tree_child1 = [[0] * nodes for _ in range(n_ch)]
    my_up = [-1] * n_ch
    my_down = [[-1, -1, -1] for _ in range(n_ch)]
    swap = _swaps_rings(ring, release, nodes) and n_ch % 2 == 0
    for node in range(nodes):
        for c in range(n_ch):
            # Odd nodes exchange channel c with c^1 so that consecutive nodes meet on the same rail.
            src = c ^ 1 if (swap and node % 2 == 1) else c
            r_intra = _offset(ring.intra[src], node, per_node)
            ring_recv[c][node], ring_send[c][node] = r_intra[0], r_intra[-1]
            for i, r in enumerate(r_intra):
                ring_prev[c][r] = -1 if i == 0 else r_intra[i - 1]
                ring_next[c][r] = -1 if i == len(r_intra) - 1 else r_intra[i + 1]
            t_intra = _offset(tree.intra[c], node, per_node)
            tree_parent[c][node] = t_intra[0]
            tree_child0[c][node] = t_intra[0 if tree.pattern == TREE else 1] if len(t_intra) > 1 else t_intra[0]
            tree_child1[c][node] = t_intra[1 if tree.pattern == SPLIT_TREE else 0]
            if node == my_node and rank in t_intra:
                i = t_intra.index(rank)
                my_up[c] = -1 if i == 0 else t_intra[i - 1]
                my_down[c][0] = -1 if i == len(t_intra) - 1 else t_intra[i + 1]

    # ncclTopoPostset: chain the rings node to node, hang the double binary tree off the chains.
    for c in range(n_ch):
        for n in range(nodes):
            ring_prev[c][ring_recv[c][n]] = ring_send[c][(n - 1) % nodes]
            ring_next[c][ring_send[c][n]] = ring_recv[c][(n + 1) % nodes]
    up = my_up + list(my_up)
    down = [list(d) for d in my_down] + [list(d) for d in my_down]
    trees = dtree(nodes, my_node)
    for c in range(n_ch):
        ttp, ttc0, ttc1 = tree_parent[c], tree_child0[c], tree_child1[c]
        for half, links in ((0, trees.tree0), (1, trees.tree1)):
            k = c + half * n_ch
            if rank == ttp[my_node] and links.up != -1:
                up[k] = (ttc0 if links.child_type == 0 else ttc1)[links.up]
            if rank == ttc0[my_node] and links.down0 != -1:
                _add_child(down[k], ttp[links.down0])
            if rank == ttc1[my_node] and links.down1 != -1:
                _add_child(down[k], ttp[links.down1])
    prev = ring_prev + ring_prev
    nxt = ring_next + ring_next
    total = min(maxchannels, n_ch * 2)
    prev, nxt, up, down = prev[:total], nxt[:total], up[:total], down[:total]

    def copy_to(target: int) -> None:
        start = len(prev)
        for c in range(start, min(target, maxchannels)):
            prev.append(prev[c - start])
            nxt.append(nxt[c - start])
            up.append(up[c - start])
            down.append(list(down[c - start]))

    chain = graphs.get("collnet_chain")
    if collnet_setup(paths, graphs, nodes, params).enabled and chain.bw_intra > chain.bw_inter and nranks > nodes:
        copy_to(len(prev) + len(prev) // 2)  # CollNet: more channels to saturate the NVLinks (not at 1 GPU/node)
    cc_min = min(view.nodes[g].gpu.sm for g in view.gpus())
    fast_sm90 = cc_min >= 90 if release.channels_x2_sm90_plus else cc_min == 90
    if fast_sm90 and nodes > 1 and ring.bw_intra > 45.0 and len(prev) < 16:
        copy_to(2 * len(prev))  # "4 compute channels per search channel"
    max_ch = min(_max_channels(params, maxchannels), len(prev), params.get("NCCL_MAX_CTAS") or maxchannels)
    del prev[max_ch:], nxt[max_ch:], up[max_ch:], down[max_ch:]
    copy_to(max(_min_channels(params, maxchannels), params.get("NCCL_MIN_CTAS") or 0))
    nvls_ch = nvls_channels(view, graphs, nodes, params)
    if release.coll_channels_cover_nvls and nvls_ch:
        copy_to(nvls_ch)  # 2.20-2.27 give collectives as many channels as NVLS has

    rings = []
    for c in range(len(prev)):
        order = [rank]
        current = nxt[c][rank]
        while current != rank and len(order) <= nranks:
            order.append(current)
            current = nxt[c][current]
        rings.append(tuple(order))
    return Channels(rank, nranks, nodes, len(prev), tuple(rings), tuple(p[rank] for p in prev),
                    tuple(n[rank] for n in nxt), tuple(up), tuple(tuple(d) for d in down), nvls_ch)


def _swaps_rings(ring: Graph, release: ReleaseRules, nodes: int) -> bool:
    """Whether odd nodes exchange ring channel pairs (connect.cc): never until 2.19; from 2.20 for
    cross-NIC rings when the node count is even, from 2.21 for any cross-NIC ring, from 2.26 for
    rings searched with crossNic 2."""
    style = release.ring_swap_odd_nodes
    if style is None:
        return False
    if style == "cross-nic-even-nodes":
        return bool(ring.cross_nic) and nodes % 2 == 0
    if style == "cross-nic":
        return bool(ring.cross_nic)
    return ring.cross_nic == 2


def _add_child(slots: list[int], child: int) -> None:
    for i, value in enumerate(slots):
        if value < 0:
            slots[i] = child
            return
    raise UsageError("a tree node would get a fourth child", "connect")


def _max_channels(params: Params, maxchannels: int) -> int:
    value = params.get("NCCL_MAX_NCHANNELS")
    value = value if value and value > 0 else maxchannels
    return max(1, min(value, maxchannels))


def _min_channels(params: Params, maxchannels: int) -> int:
    value = params.get("NCCL_MIN_NCHANNELS") or 0
    return max(0, min(value, maxchannels))


def _ring_dump(prefix: str, ring: tuple[int, ...], nranks: int, style: str) -> str:
    """rings.cc dumpLine: to 2.22, " %3d" for at most 20 ranks; from 2.23, each rank as wide as the
    largest, the line cut at 127 characters and ended with "..." when longer."""
    if style == "3-wide-20":
        return prefix + " " + "".join(f" {r:3d}" for r in ring[:20])
    width = len(str(nranks - 1))
    line = prefix + "".join(f" {r:{width}d}" for r in ring)
    return line if len(line) <= 127 else line[:124] + "..."


def format_channels(channels: Channels, minor: int) -> list[str]:
    """NCCL's lines for one rank, as release 2.`minor` prints them: `Channel 00/16 : ...` rings
    (rings.cc dumpLine, printed by rank 0) and `Trees [0] d0/d1/d2->rank->up ...` (init.cc)."""
    lines = []
    style = rules_for_minor(minor).ring_dump_style
    if channels.rank == 0:
        for c, ring in enumerate(channels.rings):
            lines.append(_ring_dump(f"Channel {c:02d}/{channels.n_channels:02d} :", ring, channels.nranks, style))
    trees = "".join(f" [{c}] {d[0]}/{d[1]}/{d[2]}->{channels.rank}->{u}"
                    for c, (u, d) in enumerate(zip(channels.tree_up, channels.tree_down)))
    lines.append("Trees" + trees)
    return lines


def nvls_heads(graphs: dict[str, Graph], nodes: int, per_node: int) -> tuple[tuple[int, ...], ...]:
    """NCCL's NVLS heads: per head h, the rank that heads it on each node (connect.cc: the first
    GPU of each NVLS channel, duplicates dropped, in channel order; node n offsets the ranks)."""
    nvls = graphs.get("nvls")
    if nvls is None:
        return ()
    local = graph_heads(nvls, per_node)
    return tuple(tuple(n * per_node + head for n in range(nodes)) for head in local)


def format_nvls_heads(heads: tuple[tuple[int, ...], ...], nodes: int, rank_node: int = 0) -> list[str]:
    """`NVLS Head  0:  0  8` lines: printed by node 0's ranks of multi-node jobs only (connectNvls
    returns before printing on one node), at most 20 nodes per line."""
    if nodes == 1 or rank_node != 0:
        return []
    return [f"NVLS Head {h:2d}:" + "".join(f" {r:2d}" for r in ranks[:20]) for h, ranks in enumerate(heads)]


@dataclass(frozen=True)
class P2pChannels:
    """comm->p2pnChannels and comm->p2pnChannelsPerPeer (paths.cc ncclTopoComputeP2pChannels)."""

    n_channels: int
    per_peer: int


def _pow2_up(v: int) -> int:
    p = 1
    while p < v:
        p <<= 1
    return p


def _local_peer_channels(paths: Paths, rank: int, peer: int, release: ReleaseRules) -> int:
    """ncclTopoGetNchannels for a peer in the node: 2 per NVLink's worth of path bandwidth
    (NVB paths too from 2.30), else 2."""
    path = paths.gpu_path(rank, peer)
    nvlink = path.type == "NVL" or (release.p2p_nvb_is_nvlink and path.type == "NVB")
    if not nvlink:
        return 2
    s = paths.system
    nvl_bw = s.rules.nvlink_bw(s.nodes[s.gpu_by_rank(rank)].gpu.sm)
    return 2 * max(1, int(path.bw_gbps / nvl_bw))


def _gpu_cpu_bw(paths: Paths, rank: int, release: ReleaseRules) -> float:
    """The GPU's bandwidth towards the host: its own link to a CPU (0 behind a PCIe switch) until
    2.28, the path to its local CPU from 2.29 (topo.cc getLocalNetCountByBw)."""
    s = paths.system
    gpu = s.gpu_by_rank(rank)
    if release.net_peer_channels != "net-bw":
        return next((l.bw_gbps for l in s.nodes[gpu].links if s.nodes[l.dst].kind == "CPU"), 0.0)
    cpus = [c for c in s.of_kind("CPU") if paths.path(gpu, c) is not None]
    return max((paths.path(gpu, c).bw_gbps for c in cpus), default=0.0)


def _net_peer_channels(paths: Paths, rank: int, nranks: int, p2p_n: int, params: Params,
                       release: ReleaseRules) -> int:
    """ncclTopoGetNchannels for a peer on another node."""
    env = params.get("NCCL_NCHANNELS_PER_NET_PEER")
    if release.net_peer_channels == "2":
        return env if env and env > 0 else 2
    if env is not None and env > 0:
        return env
    s = paths.system
    gpu_bw = _gpu_cpu_bw(paths, rank, release)
    gpu = s.gpu_by_rank(rank)
    if release.net_peer_channels == "nics":
        # Enough NICs to match the GPU's host bandwidth, and 2 channels halved while 8+ ops would share one.
        count, total = 0, 0.0
        for net in local_nets(paths, rank):
            if total >= gpu_bw:
                break
            total += paths.path(gpu, net).bw_gbps
            count += 1
        most = 2
        while most * nranks > p2p_n * 4 and most > 1:
            most //= 2
        return max(count, most)
    count, total, first = 0, 0.0, None
    for c in range(release.maxchannels):
        net = local_net(paths, rank, c)
        if net is None:
            break
        if c == 0:
            first = net
        elif net == first:
            break
        total += paths.path(gpu, net).bw_gbps
        count += 1
        if total >= gpu_bw:
            break
    per_channel = params.get("NCCL_P2P_PER_CHANNEL_NET_BW") or P2P_PER_CHANNEL_NET_BW
    return max(count, -(-int(total) // int(per_channel))) if count else 2


def p2p_channels(paths: Paths, n_channels: int, nodes: int, params: Params, rank: int = 0) -> P2pChannels:
    """The point-to-point channel counts NCCL prints after init, for `rank`'s communicator.

    p2pnChannels: the collective channel count within NCCL_MIN/MAX_P2P_NCHANNELS, rounded up to a
    power of two. Per peer: the fewest channels any peer needs (every local GPU's view until 2.28,
    this rank's from 2.29), rounded up to a power of two; from 2.29 halved across nodes while one
    round of 8-peer batches would not fit (paths.cc, 2.19.4 / 2.22.3 / 2.29.7 / 2.30.7).
    """
    release = paths.system.rules.release
    maxchannels = release.maxchannels  # NCCL_MAX_P2P_NCHANNELS defaults to MAXCHANNELS (paths.cc)
    per_node = len(paths.node_system.gpus())
    nranks = nodes * per_node
    p2p_n = min(n_channels, params.get("NCCL_MAX_P2P_NCHANNELS") or maxchannels)
    p2p_n = max(p2p_n, params.get("NCCL_MIN_P2P_NCHANNELS") or 1)
    local_ranks = sorted(paths.system.nodes[g].gpu.rank for g in paths.system.gpus())
    me = rank % per_node
    own_view = release.p2p_channels_own_view
    viewers = [me] if own_view else local_ranks
    fewest = maxchannels if own_view else p2p_n
    for g in viewers:
        for peer in range(nranks):
            if peer == g:
                continue
            if peer < per_node:
                need = _local_peer_channels(paths, g, peer, release)
            else:
                need = _net_peer_channels(paths, g, nranks, p2p_n, params, release)
            fewest = min(fewest, need)
    per_peer, p2p_n = _pow2_up(fewest), _pow2_up(p2p_n)
    if release.p2p_per_peer_batch_fit and nodes > 1 and not params.get("NCCL_NCHANNELS_PER_NET_PEER"):
        while per_peer * -(-nranks // 8) > p2p_n and per_peer > 1:  # NCCL_MAX_DEV_WORK_P2P_PER_BATCH 8
            per_peer //= 2
    elif release.p2p_per_peer_capped:
        per_peer = min(per_peer, p2p_n)
    return P2pChannels(p2p_n, per_peer)


def format_channel_counts(minor: int, n_channels: int, nvls_channels: int, p2p: P2pChannels,
                          collnet: bool = False) -> str:
    """init.cc's summary line: collnet channels appear from 2.20 (comm->collNetChannels in 2.20, the
    channels CollNet was set up on, else 0; the collective channel count from 2.21)."""
    style = rules_for_minor(minor).channel_counts_collnet
    if style is None:
        return (f"{n_channels} coll channels, {nvls_channels} nvls channels, {p2p.n_channels} p2p channels, "
                f"{p2p.per_peer} p2p channels per peer")
    collnet_n = n_channels if style == "coll" or collnet else 0
    return (f"{n_channels} coll channels, {collnet_n} collnet channels, {nvls_channels} nvls channels, "
            f"{p2p.n_channels} p2p channels, {p2p.per_peer} p2p channels per peer")


_ARCH_ARM = 3  # NCCL_TOPO_CPU_ARCH_ARM


def p2p_net_channel_bw_gbps(paths: Paths, nodes: int, params: Params) -> float:
    """What one point-to-point channel moves to another node (GB/s): one network chunk per
    NET_STEP_US, the step cost behind NCCL's 14 GB/s a channel at its default 128 KiB chunk
    (NCCL_P2P_PER_CHANNEL_NET_BW, paths.cc 2.29): a connection's steps cost about the same time
    whatever their size (NVIDIA/nccl#2409)."""
    chunk = p2p_chunk_nbytes(paths, nodes, params) if nodes > 1 else P2P_NET_CHUNK_DEFAULT
    return chunk / (NET_STEP_US * 1e3)


def all_nvlink(paths: Paths) -> bool:
    """comm->isAllNvlink, ncclTopoPathAllNVLink on the rank's view of its node (paths.cc).

    Until 2.24 it takes the best GPU pair, starting from PATH_DIS (v2.18.6-1 paths.cc:755-765,
    v2.24.3-1 paths.cc:831-841: `minPath = std::min(minPath, paths[j].type)`, then `minPath >=
    PATH_PIX ? 0 : 1`): one NVLink pair is enough, and a lone GPU has none, so it is false. From
    2.25 ncclTopoGetGpuMaxPath takes the worst pair, starting from PATH_LOC (v2.25.1-1
    paths.cc:845-864): every pair must be NVLink, and a lone GPU passes. (2.30 also ANDs it over
    the ranks, init.cc; the ranks of one node share their view here.)"""
    s = paths.system
    code = s.rules.path_code
    ranks = sorted(s.nodes[g].gpu.rank for g in s.gpus())
    types = [code(paths.gpu_path(a, b).type) for a in ranks for b in ranks if a != b]
    if s.rules.release.all_nvlink_test == "best-pair":
        return min(types, default=code("DIS")) < code("PIX")
    return max(types, default=code("LOC")) < code("PIX")


def p2p_chunk_nbytes(paths: Paths, nodes: int, params: Params) -> int:
    """comm->p2pChunkSize (init.cc computeBuffSizes, `P2P Chunksize set to N`): NCCL_P2P_NET_CHUNKSIZE
    across nodes (doubled from 2.29 on ARM hosts with SM100+ GPUs), NCCL_P2P_NVL_CHUNKSIZE on one
    node where `all_nvlink` holds, else NCCL_P2P_PCI_CHUNKSIZE; from 2.19 at most one Simple step
    (NCCL_BUFFSIZE / 8; v2.18.6-1 init.cc:525-535 has no such bound, v2.19.4-1 init.cc:549-550 adds it)."""
    s = paths.node_system
    release = s.rules.release
    if nodes > 1:
        cpus = s.of_kind("CPU")
        arm = bool(cpus) and s.nodes[cpus[0]].cpu.arch == _ARCH_ARM
        sm = min(s.nodes[g].gpu.sm for g in s.gpus())
        chunk = params.get("NCCL_P2P_NET_CHUNKSIZE") * (2 if release.p2p_net_chunk_x2_arm_sm100 and arm and sm >= 100
                                                       else 1)
    else:
        chunk = params.get("NCCL_P2P_NVL_CHUNKSIZE") if all_nvlink(paths) else params.get("NCCL_P2P_PCI_CHUNKSIZE")
    if release.p2p_chunk_capped_by_step:
        chunk = min(chunk, params.get("NCCL_BUFFSIZE") // 8)
    return chunk
