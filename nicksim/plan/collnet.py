"""CollNet programs: what each rank runs for CollNet Direct (all_reduce, all_gather, reduce_scatter),
CollNet Chain all_reduce, and NVLS all_gather / reduce_scatter across nodes (src/device/*.h of
2.30.7; the all_reduce ones are the same from 2.22.3 without user-buffer registration).

A CollNet call is not split over channels by the planner: every channel gets the whole count and
the kernel strides through it, channel `bid` of `nChannels` taking chunk `bid` of each loop
(enqueue.cc scheduleCollTasksToPlan, `isCollnet`). The network side is a CollNet (SHARP) switch,
NCCL's peer `nRanks`: each node's head sends its node's partial sum of a chunk and receives the
sum over all nodes.

CollNet Direct: every rank scatters chunk h of a loop to head h of its node; head h reduces what
its node sent with its own input and sends it to the switch; it receives the result and copies it
to its output and to every other rank of the node, which gathers chunk h from head h. Chunk h of
each loop is the head's own (`headRank`), and senders start with head `local rank % nHeads` so
that they do not all hit the same head first (`shift`).

CollNet Chain: the node's GPUs form a chain (the CollNet chain graph's channel order); partial sums
travel up to its first GPU, which talks to the switch; the result travels back down.

CollNet Direct AllGather / ReduceScatter (all_gather.h, reduce_scatter.h; one head per GPU): head r
serves rail r, the pieces of the ranks with head index r on every node, laid end to end node after
node (nNodes x count elements). Channel `bid` takes chunk `bid` of each loop over that rail space.
AllGather: each rank sends its own piece of the chunk to the switch, receives the whole chunk from
it and forwards it to the node's other heads, and receives their rails from them. ReduceScatter:
each rank sends every other head its input for that head's rail, adds what it receives to its own
input for its rail and sends the node's sum to the switch, which returns each node its own piece.
A chunk that spans two nodes' pieces is two pieces here (NCCL copies it in one step). NVLS across
nodes uses the same rails with the NVLink switch's multicast in place of the copies between heads.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError

__all__ = ["COLLNET_SWITCH", "CollNetLayout", "collnet_chunk_nbytes", "collnet_direct_allreduce",
           "collnet_chain_allreduce", "collnet_direct_allgather", "collnet_direct_reducescatter",
           "nvls_collnet_allgather", "nvls_collnet_reducescatter"]

# The CollNet switch: NCCL's rank nRanks (direct->out, collnetChain.up of the chain's first GPU).
COLLNET_SWITCH = -3


@dataclass(frozen=True)
class CollNetLayout:
    """Where CollNet runs inside each node, in local ranks: the CollNet Direct heads in head order
    with the order of the direct graph channel each heads (its `down` peers), and the chain order
    of each CollNet chain graph channel (runtime channel c uses graph channel c mod their count)."""

    per_node: int
    heads: tuple[int, ...]
    head_orders: tuple[tuple[int, ...], ...]
    chains: tuple[tuple[int, ...], ...]


def collnet_chunk_nbytes(algorithm: str, nbytes: int, n_channels: int, n_heads: int, per_node: int,
                         step_nbytes: int, simple_step_nbytes: int) -> int:
    """calcCollChunking for CollNet: Direct starts from one Simple step and halves (down to 128, 64,
    then 32 KiB) while a channel's share per head gives fewer than 64, 8, 8 chunks per tree depth
    (1 at one GPU per node, else 2); Chain starts from min(256 KiB, one Simple step) and halves while
    a channel's share gives fewer than 64, 8, 1 chunks per GPU of the chain."""
    if algorithm == "CollNetDirect":
        chunk, depth = step_nbytes, 1 if per_node == 1 else 2
        for factor, floor in ((64, 131072), (8, 65536), (8, 32768)):
            while nbytes // (n_channels * n_heads * chunk) < depth * factor and chunk > floor:
                chunk //= 2
        return chunk
    chunk, depth = min(256 * 1024, simple_step_nbytes), per_node
    for factor, floor in ((64, 131072), (8, 65536), (1, 32768)):
        while nbytes // (n_channels * chunk) < depth * factor and chunk > floor:
            chunk //= 2
    return chunk


def _loops(count: int, loop: int):
    grid = 0
    while grid < count:
        yield grid
        grid += loop


def _clip(count: int, offset: int, most: int) -> int:
    return max(0, min(most, count - offset))


def collnet_direct_allreduce(prim, count: int, bid: int, n_channels: int, chunk: int, layout: CollNetLayout,
                             rank: int) -> dict[str, list]:
    """The four thread groups of one rank on one channel: scatter, reduce, gather, bcast (those the rank
    has: a rank that heads no chunk neither reduces nor broadcasts; with one head nobody scatters)."""
    node, local = divmod(rank, layout.per_node)
    base = node * layout.per_node
    heads = [base + h for h in layout.heads]
    n_heads = len(heads)
    head_rank = heads.index(rank) if rank in heads else -1
    up = [h for h in heads if h != rank]
    down = [base + r for r in layout.head_orders[head_rank] if base + r != rank] if head_rank >= 0 else []
    shift = local % n_heads
    loop = n_channels * n_heads * chunk
    streams: dict[str, list] = {}
    if up:
        scatter, gather = [], []
        for grid in _loops(count, loop):
            offset = grid + bid * n_heads * chunk
            nelem = min(n_heads * chunk, count - offset)
            for j in range(len(up)):
                i = (j + shift) % len(up)
                peer_offset = i * chunk + (chunk if 0 <= head_rank <= i else 0)  # skip the rank's own chunk
                piece = (offset + peer_offset, max(0, min(chunk, nelem - peer_offset)))
                scatter.append(prim("send", *piece, send_to=(up[i],), conn=1))
                gather.append(prim("recv", *piece, recv_from=(up[i],)))
        streams["scatter"], streams["gather"] = scatter, gather
    if head_rank >= 0:
        reduce, bcast = [], []
        for grid in _loops(count, loop):
            offset = grid + (bid * n_heads + head_rank) * chunk
            piece = (offset, _clip(count, offset, chunk))
            if down:
                reduce.append(prim("recvReduceSend", *piece, recv_from=tuple(down), send_to=(COLLNET_SWITCH,),
                                   conn=1))
                bcast.append(prim("recvCopySend", *piece, recv_from=(COLLNET_SWITCH,), send_to=tuple(down)))
            else:
                reduce.append(prim("send", *piece, send_to=(COLLNET_SWITCH,), conn=1))
                bcast.append(prim("recv", *piece, recv_from=(COLLNET_SWITCH,)))
        streams["reduce"], streams["bcast"] = reduce, bcast
    return streams


def collnet_chain_allreduce(prim, count: int, bid: int, n_channels: int, chunk: int, layout: CollNetLayout,
                            rank: int, channel: int) -> dict[str, list]:
    """Reduce up the chain to the switch, broadcast the result back down (two thread groups)."""
    node = rank // layout.per_node
    order = [node * layout.per_node + r for r in layout.chains[channel % len(layout.chains)]]
    i = order.index(rank)
    up = COLLNET_SWITCH if i == 0 else order[i - 1]
    down = order[i + 1] if i + 1 < len(order) else None
    reduce, bcast = [], []
    for grid in _loops(count, n_channels * chunk):
        offset = grid + bid * chunk
        piece = (offset, _clip(count, offset, chunk))
        if down is None:
            reduce.append(prim("send", *piece, send_to=(up,), conn=1))
            bcast.append(prim("recv", *piece, recv_from=(up,)))
        else:
            reduce.append(prim("recvReduceSend", *piece, recv_from=(down,), send_to=(up,), conn=1))
            bcast.append(prim("recvCopySend", *piece, recv_from=(up,), send_to=(down,)))
    return {"reduce": reduce, "bcast": bcast}


def _rail_pieces(per_node: int, heads: tuple[int, ...], count: int, rail: int, begin: int, end: int):
    """The element ranges of rail `rail`'s [begin, end): one per node piece it touches (rail r of node n
    is the rank with local rank heads[r]: collNetDenseToUserRank)."""
    pieces = []
    node = begin // count if count else 0
    pos = begin
    while pos < end:
        node_end = (node + 1) * count
        delta = min(end, node_end) - pos
        owner = node * per_node + heads[rail]
        pieces.append((owner * count + pos - node * count, delta))
        pos += delta
        node += 1
    return pieces


def _rails(per_node: int, heads: tuple[int, ...], rank: int, count: int, what: str = "CollNet Direct"):
    """The rank's view of the rails: its head index, the other heads' indices in NCCL's order (the
    next head first), those heads' ranks, and where its node's pieces sit in the rail space."""
    local = rank % per_node
    n = len(heads)
    if n != per_node:
        raise UsageError(f"{what} AllGather/ReduceScatter needs a head per GPU ({n} heads for "
                         f"{per_node} GPUs per node)", "plan", "as many NICs as GPUs per node")
    me = heads.index(local)
    others = [(me + k) % n for k in range(1, n)]
    node = rank // per_node
    peers = tuple(node * per_node + heads[r] for r in others)
    return me, others, peers, (node * count, (node + 1) * count)


def _own_piece(rank: int, count: int, own: tuple[int, int], begin: int, end: int):
    """The part of [begin, end) of the rank's rail that is its own node's piece (None if empty)."""
    lo, hi = max(begin, own[0]), min(end, own[1])
    return (rank * count + lo - own[0], hi - lo) if hi > lo else None


def _rail_chunks(count: int, n_nodes: int, bid: int, n_channels: int, chunk: int):
    total = n_nodes * count
    for grid in _loops(total, n_channels * chunk):
        begin = min(grid + bid * chunk, total)
        yield begin, min(begin + chunk, total)


def collnet_direct_allgather(prim, count: int, bid: int, n_channels: int, chunk: int, layout: CollNetLayout,
                             rank: int, n_nodes: int) -> dict[str, list]:
    """Send the rank's own piece to the switch; receive the rail's chunk, forward it to the other heads;
    receive theirs."""
    me, others, peers, own = _rails(layout.per_node, layout.heads, rank, count)
    send, net, gather = [], [], []
    for begin, end in _rail_chunks(count, n_nodes, bid, n_channels, chunk):
        piece = _own_piece(rank, count, own, begin, end)
        if piece:
            send.append(prim("send", *piece, send_to=(COLLNET_SWITCH,), conn=1))
        for piece in _rail_pieces(layout.per_node, layout.heads, count, me, begin, end):
            if peers:
                net.append(prim("recvCopySend", *piece, recv_from=(COLLNET_SWITCH,), send_to=peers))
            else:
                net.append(prim("recv", *piece, recv_from=(COLLNET_SWITCH,)))
        for rail, peer in zip(others, peers):
            gather += [prim("recv", *piece, recv_from=(peer,))
                       for piece in _rail_pieces(layout.per_node, layout.heads, count, rail, begin, end)]
    return {"send": send, "net": net, "gather": gather}


def collnet_direct_reducescatter(prim, count: int, bid: int, n_channels: int, chunk: int, layout: CollNetLayout,
                                 rank: int, n_nodes: int) -> dict[str, list]:
    """Send each other head its rail's input; reduce the rank's rail from them and its own input into the
    switch; receive the rank's own piece of the sum over nodes."""
    me, others, peers, own = _rails(layout.per_node, layout.heads, rank, count)
    scatter, reduce, net = [], [], []
    for begin, end in _rail_chunks(count, n_nodes, bid, n_channels, chunk):
        for rail, peer in zip(others, peers):
            scatter += [prim("send", *piece, send_to=(peer,), conn=1)
                        for piece in _rail_pieces(layout.per_node, layout.heads, count, rail, begin, end)]
        for piece in _rail_pieces(layout.per_node, layout.heads, count, me, begin, end):
            if peers:
                reduce.append(prim("recvReduceSend", *piece, recv_from=peers, send_to=(COLLNET_SWITCH,), conn=1))
            else:
                reduce.append(prim("send", *piece, send_to=(COLLNET_SWITCH,), conn=1))
        piece = _own_piece(rank, count, own, begin, end)
        if piece:
            net.append(prim("recv", *piece, recv_from=(COLLNET_SWITCH,)))
    return {"scatter": scatter, "reduce": reduce, "net": net}


def nvls_collnet_allgather(prim, count: int, bid: int, n_channels: int, chunk: int, per_node: int,
                           heads: tuple[int, ...], rank: int, n_nodes: int, nvls_switch: int) -> dict[str, list]:
    """NVLS AllGather across nodes (all_gather.h, 2.27+): send the rank's own piece to the CollNet switch;
    head r receives rail r's chunk and stores it through the NVLink switch's multicast; every rank reads
    every rail from the multicast buffers."""
    me, _, _, own = _rails(per_node, heads, rank, count, "NVLS")
    send, bcast, gather = [], [], []
    for begin, end in _rail_chunks(count, n_nodes, bid, n_channels, chunk):
        piece = _own_piece(rank, count, own, begin, end)
        if piece:
            send.append(prim("send", *piece, send_to=(COLLNET_SWITCH,), conn=1))
        bcast += [prim("nvlsRecvMulticast", *p, recv_from=(COLLNET_SWITCH,), send_to=(nvls_switch,))
                  for p in _rail_pieces(per_node, heads, count, me, begin, end)]
        for rail in range(len(heads)):
            gather += [prim("nvlsGather", *p, recv_from=(nvls_switch,))
                       for p in _rail_pieces(per_node, heads, count, rail, begin, end)]
    return {"send": send, "bcast": bcast, "gather": gather}


def nvls_collnet_reducescatter(prim, count: int, bid: int, n_channels: int, chunk: int, per_node: int,
                               heads: tuple[int, ...], rank: int, n_nodes: int, nvls_switch: int) -> dict[str, list]:
    """NVLS ReduceScatter across nodes (reduce_scatter.h, 2.27+): every rank scatters each rail's input
    into the multicast buffers; head r reduces rail r through the NVLink switch and sends the node's sum
    to the CollNet switch; each rank receives its own piece of the sum over nodes."""
    me, _, _, own = _rails(per_node, heads, rank, count, "NVLS")
    scatter, reduce, net = [], [], []
    for begin, end in _rail_chunks(count, n_nodes, bid, n_channels, chunk):
        for rail in range(len(heads)):
            scatter += [prim("nvlsScatter", *p, send_to=(nvls_switch,))
                        for p in _rail_pieces(per_node, heads, count, rail, begin, end)]
        reduce += [prim("nvlsReduceSend", *p, recv_from=(nvls_switch,), send_to=(COLLNET_SWITCH,))
                   for p in _rail_pieces(per_node, heads, count, me, begin, end)]
        piece = _own_piece(rank, count, own, begin, end)
        if piece:
            net.append(prim("recv", *piece, recv_from=(COLLNET_SWITCH,)))
    return {"scatter": scatter, "reduce": reduce, "net": net}
