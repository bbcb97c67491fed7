"""CollNet programs: what each rank runs for CollNet Direct and CollNet Chain all_reduce
(src/device/all_reduce.h, identical from 2.22.3 to 2.30.7 without user-buffer registration).

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
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COLLNET_SWITCH", "CollNetLayout", "collnet_chunk_nbytes", "collnet_direct_allreduce",
           "collnet_chain_allreduce"]

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
