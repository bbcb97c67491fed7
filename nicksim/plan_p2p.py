"""Point-to-point plans: how sendrecv and alltoall are cut over channels, as NCCL 2.22-2.27 do it.

NCCL orders a rank's peers into rounds (init.cc p2pSchedule: node deltas, then local deltas, each
enumerated by the quadratic sequence (x*x+x)/2 over the next power of two), gives each round a
base channel (channel.h ncclP2pChannelBaseForRound) and spreads each transfer over up to
p2pnChannelsPerPeer parts at bit-reversed offsets from that base (device.h
ncclP2pChannelForPart). enqueue.cc addP2pToPlan picks per direction the protocol (LL up to 16 KiB
per channel allowed), the step and chunk size (NCCL_P2P_*_CHUNKSIZE, quartered or halved for
small transfers over the network, rounded to NCCL's 8-bit float) and the number of parts; the
device moves each part in chunks (sendrecv.h). `p2p_programs` returns those per rank and
channel in plan.py's primitive form, so `check_programs` can run them.

Modelled: 2.22-2.27 (2.28 changed the channel base, 2.29 the protocol and part rules).
"""
from __future__ import annotations

from dataclasses import dataclass

from .calls import Call
from .errors import UsageError
from .plan import ChannelProgram, Prim, Stream

__all__ = ["p2p_schedule", "P2pTransfer", "p2p_transfers", "p2p_programs", "u32fp8_round"]

NCCL_STEPS = 8
P2P_LL_THRESHOLD_NBYTES = 16384  # NCCL_P2P_LL_THRESHOLD
MAX_DEV_WORK_P2P_PER_BATCH = 8  # device.h NCCL_MAX_DEV_WORK_P2P_PER_BATCH


def _pow2_up(v: int) -> int:
    p = 1
    while p < v:
        p <<= 1
    return p


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def p2p_schedule(rank: int, nodes: int, per_node: int) -> list[tuple[int, int]]:
    """(send rank, receive rank) per round for `rank` (init.cc, 2.22.3-2.27.7)."""
    node, local = divmod(rank, per_node)
    out = []
    node_round, node_delta = 0, 0
    nodes_pow2, locals_pow2 = _pow2_up(nodes), _pow2_up(per_node)
    while True:
        if node_delta < nodes:
            send_node, recv_node = (node + node_delta) % nodes, (node - node_delta) % nodes
            local_round, local_delta = 0, 0
            while True:
                if local_delta < per_node:
                    send_local, recv_local = (local + local_delta) % per_node, (local - local_delta) % per_node
                    out.append((send_node * per_node + send_local, recv_node * per_node + recv_local))
                local_round += 1
                local_delta = (local_delta + local_round) & (locals_pow2 - 1)
                if local_round == locals_pow2:
                    break
        node_round += 1
        node_delta = (node_delta + node_round) & (nodes_pow2 - 1)
        if node_round == nodes_pow2:
            break
    return out


def _channel_base(round_: int, nodes: int, per_node: int) -> int:
    if nodes > 1:
        node_delta, local_delta = divmod(round_, per_node)
        base = node_delta * _div_up(per_node, MAX_DEV_WORK_P2P_PER_BATCH) + local_delta // MAX_DEV_WORK_P2P_PER_BATCH
        return base & 0xFF
    return round_ & 0xFF


def _reverse_bits(value: int, nbits: int) -> int:
    out = 0
    for i in range(nbits):
        if value & (1 << i):
            out |= 1 << (nbits - 1 - i)
    return out


def _channel_for_part(n_p2p_channels: int, base: int, part: int) -> int:
    nbits = (n_p2p_channels - 1).bit_count()
    return (base + _reverse_bits(part, nbits)) & (n_p2p_channels - 1)


def u32fp8_round(x: int) -> int:
    """bitops.h u32fp8Encode then Decode: x kept to its top 4 significant bits."""
    log2x = (x | 1).bit_length() - 1
    mantissa = (x >> (log2x - 3 if log2x >= 3 else 0)) & 0x7
    exponent = log2x - 2 if log2x >= 3 else 0
    mantissa |= 0x8 if exponent else 0
    return mantissa << (exponent - 1 if exponent else 0)


@dataclass(frozen=True)
class P2pTransfer:
    """One direction of one round: `nbytes` to or from `peer`, in `n_parts` parts of `chunk_nbytes`
    chunks (data bytes) on the channels NCCL assigns, with `protocol`."""

    round: int
    peer: int
    send: bool
    nbytes: int
    protocol: str
    chunk_nbytes: int
    channels: tuple[int, ...]


def p2p_transfers(call: Call, rank: int, nodes: int, per_node: int, n_p2p_channels: int, per_peer: int,
                  p2p_chunk_nbytes: int, ll_buff_nbytes: int = 512 * 1024) -> list[P2pTransfer]:
    """The transfers `rank` makes for a sendrecv (to rank+1, from rank-1) or an alltoall."""
    n = call.nranks
    peer_nbytes = call.count * call.elem_nbytes
    most = per_peer
    fewest = most
    while fewest * n > n_p2p_channels and fewest > 1:
        fewest //= 2
    out = []
    for round_, (send_rank, recv_rank) in enumerate(p2p_schedule(rank, nodes, per_node)):
        wanted = []
        if call.collective == "alltoall":
            wanted = [(True, send_rank), (False, recv_rank)]
        else:  # sendrecv: nccl-tests sends to rank+1 and receives from rank-1
            if send_rank == (rank + 1) % n:
                wanted.append((True, send_rank))
            if recv_rank == (rank - 1) % n:
                wanted.append((False, recv_rank))
        base = _channel_base(round_, nodes, per_node)
        for send, peer in wanted:
            self_send = peer == rank
            network = peer // per_node != rank // per_node
            protocol = "LL" if (not self_send and peer_nbytes <= most * P2P_LL_THRESHOLD_NBYTES) else "Simple"
            step = ll_buff_nbytes // NCCL_STEPS if protocol == "LL" else p2p_chunk_nbytes
            chunk = step
            if network:
                if protocol == "Simple" and peer_nbytes < step:
                    chunk //= 4
                elif peer_nbytes < 8 * step:
                    chunk //= 2
            data = u32fp8_round(chunk // 2 if protocol == "LL" else chunk)
            if peer_nbytes == 0:
                parts = 1
            else:
                low = step // 2 if nodes > 1 else step // 8
                high = step if nodes > 1 else step * 32
                parts = min(fewest, _div_up(peer_nbytes, low))
                size = max(low, _div_up(peer_nbytes, parts))
                while size > high and parts <= most // 2:
                    parts *= 2
                    size = _div_up(peer_nbytes, parts)
            channels = tuple(_channel_for_part(n_p2p_channels, base, p) for p in range(parts))
            out.append(P2pTransfer(round_, peer, send, peer_nbytes, protocol, data, channels))
    return out


def _part_bounds(n_parts: int, part: int, nbytes: int) -> tuple[int, int]:
    """device.h ncclP2pPartBounds: parts of ceil(bytes / parts) rounded up to 4 KiB."""
    size = _div_up(_div_up(nbytes, n_parts), 4096) * 4096
    return min(part * size, nbytes), min((part + 1) * size, nbytes)


def _segment(call: Call, src: int, dst: int) -> int:
    """Where the src -> dst piece sits in the call's element space (bytes: p2p moves int8)."""
    per = call.count * call.elem_nbytes
    return (src * call.nranks + dst) * per if call.collective == "alltoall" else src * per


def p2p_programs(call: Call, rank: int, nodes: int, per_node: int, n_p2p_channels: int, per_peer: int,
                 p2p_chunk_nbytes: int, version_minor: int) -> tuple[ChannelProgram, ...]:
    """The primitive programs `rank` runs for a sendrecv or alltoall: per channel, one stream per
    transfer part (NCCL runs up to 8 p2p works of a channel side by side)."""
    if not 22 <= version_minor <= 27:
        raise UsageError(f"point-to-point plans of NCCL 2.{version_minor} are not modelled", "--nccl-version",
                         "2.22 to 2.27")
    streams: dict[int, list[Stream]] = {}
    for t in p2p_transfers(call, rank, nodes, per_node, n_p2p_channels, per_peer, p2p_chunk_nbytes):
        src, dst = (rank, t.peer) if t.send else (t.peer, rank)
        origin = _segment(call, src, dst)
        for part, channel in enumerate(t.channels):
            beg, end = _part_bounds(len(t.channels), part, t.nbytes)
            prims, cursor = [], beg
            while True:
                n = min(t.chunk_nbytes, end - cursor)
                prims.append(Prim("send", origin + cursor, n, send_to=(t.peer,)) if t.send
                             else Prim("recv", origin + cursor, n, recv_from=(t.peer,)))
                cursor += n
                if cursor >= end:
                    break
            name = f"{'send' if t.send else 'recv'} r{t.round} peer {t.peer} part {part}"
            streams.setdefault(channel, []).append(Stream(name, tuple(prims)))
    return tuple(ChannelProgram(c, tuple(s)) for c, s in sorted(streams.items()))
