"""Channels: NCCL's rings and trees over the whole job (connect.cc ncclTopoPreset/Postset).

`connect(paths, graphs, params, nodes, rank)` joins the per-node ring and tree graphs of `nodes`
identical nodes the way NCCL's init does: each node contributes its channel orders (ranks offset
by node); rings are chained node to node (odd nodes swap channel pairs when the ring search used
a second NIC, to stay on rails); the inter-node tree is the double binary tree over nodes, hung off
each node's chain head; channels are then doubled, doubled again for SM90+ multi-node rings faster
than 45 GB/s with fewer than 16 channels, and bounded by NCCL_MIN/MAX_NCHANNELS and
NCCL_MIN/MAX_CTAS. The result, Channels, is one rank's view; `format_channels` prints NCCL's
`Channel 00/16 :` ring lines and its `Trees [0] ...` line.

Modelled: jobs whose nodes are identical and whose rank view holds the whole node; the CollNet
and NVLS channel adjustments are not applied yet.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError
from .params import Params
from .paths import Paths
from .search import SPLIT_TREE, TREE, Graph
from .trees import dtree

__all__ = ["Channels", "connect", "format_channels", "nvls_heads", "format_nvls_heads"]

MAXCHANNELS = 64


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
    minor = view.rules.version.minor
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
    swap = _swaps_rings(ring, minor) and n_ch % 2 == 0
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
    total = min(MAXCHANNELS, n_ch * 2)
    prev, nxt, up, down = prev[:total], nxt[:total], up[:total], down[:total]

    def copy_to(target: int) -> None:
        start = len(prev)
        for c in range(start, min(target, MAXCHANNELS)):
            prev.append(prev[c - start])
            nxt.append(nxt[c - start])
            up.append(up[c - start])
            down.append(list(down[c - start]))

    cc_min = min(view.nodes[g].gpu.sm for g in view.gpus())
    fast_sm90 = cc_min >= 90 if minor >= 25 else cc_min == 90
    if fast_sm90 and nodes > 1 and ring.bw_intra > 45.0 and len(prev) < 16:
        copy_to(2 * len(prev))  # "4 compute channels per search channel"
    max_ch = min(_max_channels(params), len(prev), params.get("NCCL_MAX_CTAS") or MAXCHANNELS)
    del prev[max_ch:], nxt[max_ch:], up[max_ch:], down[max_ch:]
    copy_to(max(_min_channels(params), params.get("NCCL_MIN_CTAS") or 0))

    rings = []
    for c in range(len(prev)):
        order = [rank]
        current = nxt[c][rank]
        while current != rank and len(order) <= nranks:
            order.append(current)
            current = nxt[c][current]
        rings.append(tuple(order))
    return Channels(rank, nranks, nodes, len(prev), tuple(rings), tuple(p[rank] for p in prev),
                    tuple(n[rank] for n in nxt), tuple(up), tuple(tuple(d) for d in down))


def _swaps_rings(ring: Graph, minor: int) -> bool:
    """Whether odd nodes exchange ring channel pairs: never until 2.20, any cross-NIC ring in
    2.21-2.25, rings searched with crossNic 2 from 2.26."""
    if minor <= 20:
        return False
    if minor <= 25:
        return bool(ring.cross_nic)
    return ring.cross_nic == 2


def _add_child(slots: list[int], child: int) -> None:
    for i, value in enumerate(slots):
        if value < 0:
            slots[i] = child
            return
    raise UsageError("a tree node would get a fourth child", "connect")


def _max_channels(params: Params) -> int:
    value = params.get("NCCL_MAX_NCHANNELS")
    value = value if value and value > 0 else MAXCHANNELS
    return max(1, min(value, MAXCHANNELS))


def _min_channels(params: Params) -> int:
    value = params.get("NCCL_MIN_NCHANNELS") or 0
    return max(0, min(value, MAXCHANNELS))


def format_channels(channels: Channels) -> list[str]:
    """NCCL's lines for one rank: `Channel 00/16 :    0   7 ...` (rings.cc dumpLine, at most 20
    ranks per line, printed by rank 0) and `Trees [0] d0/d1/d2->rank->up ...` (init.cc)."""
    lines = []
    if channels.rank == 0:
        for c, ring in enumerate(channels.rings):
            lines.append(f"Channel {c:02d}/{channels.n_channels:02d} : " + "".join(f" {r:3d}" for r in ring[:20]))
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
    local = list(dict.fromkeys(channel[0] for channel in nvls.intra))
    return tuple(tuple(n * per_node + head for n in range(nodes)) for head in local)


def format_nvls_heads(heads: tuple[tuple[int, ...], ...], nodes: int, rank_node: int = 0) -> list[str]:
    """`NVLS Head  0:  0  8` lines: printed by node 0's ranks of multi-node jobs only (connectNvls
    returns before printing on one node), at most 20 nodes per line."""
    if nodes == 1 or rank_node != 0:
        return []
    return [f"NVLS Head {h:2d}:" + "".join(f" {r:2d}" for r in ranks[:20]) for h, ranks in enumerate(heads)]
