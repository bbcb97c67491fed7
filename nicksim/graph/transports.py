"""The transport of every ring and tree connection, as NCCL's INIT lines print them.

`connection_lines(paths, graph, links, rank, nodes)` lists one rank's connections the way
transport.cc ncclTransportP2pSetup sets them up — peers by distance (rank-i receives, rank+i
sends, i = 1..n-1), channels in order, receives before sends — and prints what each transport's
setup prints: P2P only on the sending side (`Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`), SHM on
the sending side without the connection index (`Channel 00 : ... via SHM/direct/direct`), NET
on both (`[send] via NET/IB/0/GDRDMA`, `[receive] ...`), with the NIC the graph put on that
channel and, for PXN, the proxy rank in parentheses (p2p.cc, shm.cc, net.cc; 2.18.6-2.30.7).
"""
from __future__ import annotations

from .paths import Paths
from .graphs import Graph

__all__ = ["ring_links", "tree_links", "connection_lines", "channel_net"]


def ring_links(channels) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Per channel: (ranks received from, ranks sent to) of the rank on the ring."""
    return {c: ((channels.ring_prev[c],), (channels.ring_next[c],)) for c in range(channels.n_channels)}


def tree_links(channels) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Per channel: tree connections both ways (init.cc connects down->up, then up->down)."""
    out = {}
    for c in range(channels.n_channels):
        up = channels.tree_up[c]
        down = tuple(d for d in channels.tree_down[c] if d >= 0)
        peers = down + ((up,) if up >= 0 else ())
        out[c] = (peers, peers)
    return out


def _gpu(paths: Paths, rank: int) -> int:
    return paths.system.gpu_by_rank(rank % len(paths.node_system.gpus()))


def _dev(paths: Paths, rank: int) -> int:
    return paths.system.nodes[_gpu(paths, rank)].gpu.dev


_PATTERN_NVLS = 5  # NCCL_TOPO_PATTERN_NVLS


def channel_net(paths: Paths, graph: Graph, channel: int, rank: int) -> int | None:
    """search.cc ncclTopoGetNetDev with a graph: the channel's first NIC if the rank heads the
    channel in its node, else its last."""
    per_node = len(paths.node_system.gpus())
    c = channel % graph.n_channels
    index = 0 if graph.intra[c][0] == rank % per_node else 1
    net_id = graph.inter[c][index]
    if graph.pattern == _PATTERN_NVLS:  # search.cc getNvlsNetDev: the NICs of the channels the rank heads
        own = [inter[0] for intra, inter in zip(graph.intra, graph.inter) if intra[0] == rank % per_node]
        net_id = own[channel % len(own)] if own else -1
    s = paths.system
    return next((n for n in s.nets() if s.nodes[n].id == net_id), None)


def _net_text(paths: Paths, graph: Graph, channel: int, rank: int, send: bool) -> str:
    release = paths.system.rules.release
    net = channel_net(paths, graph, channel, rank)
    if net is None:
        return f"NET/{paths.net_plugin}"
    local = rank % len(paths.node_system.gpus())
    gdr = (paths.gdr_send if send else paths.gdr_recv).get((local, net))
    text = f"NET/{paths.net_plugin}/{paths.system.nodes[net].net.dev}"
    if send and gdr is not None and gdr.proxy_rank != local:
        text += f"({gdr.proxy_rank + rank - local})"
    if gdr is not None and gdr.enabled and paths.net_plugin != "Socket":
        text += "/GDRDMA"
        if release.net_text_gdr_pci and gdr.mode == "PCI":
            text += "(PCI)"
    return text


def _local_text(paths: Paths, a: int, b: int) -> tuple[str, str] | None:
    """(kind, detail) of the connection a -> b inside one node."""
    per_node = len(paths.node_system.gpus())
    t = paths.transports.get((a % per_node, b % per_node))
    if t is None:
        return None
    if t.kind == "SHM" and paths.system.rules.release.shm_text_direct:
        return "SHM", "SHM/direct"
    return t.kind, t.detail


def connection_lines(paths: Paths, graph: Graph, links: dict, rank: int, nodes: int) -> list[str]:
    """NCCL's lines for one rank's connections over `links` ({channel: (recv from, send to)})."""
    per_node = len(paths.node_system.gpus())
    nranks = nodes * per_node
    lines = []
    for i in range(1, nranks):
        recv_peer, send_peer = (rank - i) % nranks, (rank + i) % nranks
        for c in sorted(links):
            if recv_peer not in links[c][0]:
                continue
            head = f"{recv_peer}[{_dev(paths, recv_peer)}] -> {rank}[{_dev(paths, rank)}]"
            if recv_peer // per_node != rank // per_node:
                lines.append(f"Channel {c:02d}/0 : {head} [receive] via {_net_text(paths, graph, c, rank, False)}")
            elif (_local_text(paths, recv_peer, rank) or ("",))[0] == "NET":
                lines.append(f"Channel {c:02d}/0 : {head} [receive] via {_local_text(paths, recv_peer, rank)[1]}")
        for c in sorted(links):
            if send_peer not in links[c][1]:
                continue
            head = f"{rank}[{_dev(paths, rank)}] -> {send_peer}[{_dev(paths, send_peer)}]"
            if send_peer // per_node != rank // per_node:
                lines.append(f"Channel {c:02d}/0 : {head} [send] via {_net_text(paths, graph, c, rank, True)}")
                continue
            local = _local_text(paths, rank, send_peer)
            if local is None:
                continue
            kind, detail = local
            if kind == "SHM":
                lines.append(f"Channel {c:02d} : {head} via {detail}")
            elif kind == "NET":
                lines.append(f"Channel {c:02d}/0 : {head} [send] via {detail}")
            else:
                lines.append(f"Channel {c:02d}/0 : {head} via {detail}")
    return lines
