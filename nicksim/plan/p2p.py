"""Point-to-point plans: how sendrecv and alltoall are cut over channels, as NCCL 2.22-2.30 do it.

NCCL orders a rank's peers into rounds (init.cc p2pSchedule), gives each round a base channel
(channel.h ncclP2pChannelBaseForRound) and spreads each transfer over up to p2pnChannelsPerPeer
parts on channels counted from that base (device.h ncclP2pChannelForPart). enqueue.cc
addP2pToPlan picks per direction the protocol, the step and chunk size (NCCL_P2P_*_CHUNKSIZE,
quartered or halved for small transfers over the network, rounded to NCCL's 8-bit float) and the
number of parts; the device moves each part in chunks (sendrecv.h). `p2p_programs` returns those
per rank and channel in plan.py's primitive form, so `check_programs` can run them.

What changed between releases:
- 2.22-2.27: node deltas, then local deltas, each enumerated by the quadratic sequence
  (x*x+x)/2 over the next power of two; the round's base channel as is, parts at bit-reversed
  offsets from it; LL while the bytes fit nChannelsMax x 16 KiB, parts sized by the protocol's step.
- 2.28: ranks form groups of NCCL_P2P_SCHEDULE_GROUP_SIZE (8, or the node when there is one
  node; the gcd with the node size when it does not divide it); group deltas follow the quadratic
  sequence and local deltas run 0, 1, 2, ... inside a group; the base channel is bit-reversed and
  parts take the channels after it.
- 2.29-2.30: parts are sized by the Simple step first, and LL is used while the bytes fit the
  parts x 16 KiB.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial
from math import gcd
from typing import NamedTuple

from ..calls import Call
from ..constants.rules import releases_where, rules_for_minor
from ..errors import UsageError
from ..graph.connect import p2p_channels, p2p_chunk_nbytes
from ..params import KNOBS
from ..tuning.p2p import p2p_ll_threshold_nbytes
from .chunking import NCCL_STEPS, Plan
from .programs import ChannelProgram, Prim, Stream

__all__ = ["p2p_schedule", "p2p_group_size", "P2pTransfer", "p2p_transfers", "p2p_programs", "p2p_stream_chunks",
           "transfers_programs", "transfers_stream_chunks", "u32fp8_round", "P2pSetup", "p2p_setup", "p2p_summary"]

# NCCL_P2P_LL_THRESHOLD's default, from the knob table
_LL_THRESHOLD_NBYTES = KNOBS["NCCL_P2P_LL_THRESHOLD"].default
MAX_DEV_WORK_P2P_PER_BATCH = 8  # device.h NCCL_MAX_DEV_WORK_P2P_PER_BATCH
# A Prim from all its fields at C speed, without the named tuple's keyword handling: an alltoall's
# programs hold a million of them. A send or receive leaves the fields after send_to at Prim's defaults.
_prim = partial(tuple.__new__, Prim)
_PRIM_TAIL = tuple(Prim._field_defaults[name] for name in Prim._fields[Prim._fields.index("send_to") + 1:])


def _pow2_up(v: int) -> int:
    p = 1
    while p < v:
        p <<= 1
    return p


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def p2p_schedule(rank: int, nodes: int, per_node: int, version_minor: int, group_size: int = 8) \
        -> list[tuple[int, int]]:
    """(send rank, receive rank) per round for `rank` (init.cc p2pSchedule of the release);
    `group_size` is NCCL_P2P_SCHEDULE_GROUP_SIZE (2.28+)."""
    if rules_for_minor(version_minor).p2p_schedule == "node-deltas":
        return _node_schedule(rank, nodes, per_node)
    return _group_schedule(rank, nodes, per_node, p2p_group_size(nodes, per_node, group_size))


def _quadratic(n: int):
    """The deltas (x*x+x)/2 mod pow2Up(n) that fall below n: 0, 1, 3, 6, 10, 15, 5, 12, ... for 16."""
    pow2, step, delta = _pow2_up(n), 0, 0
    while True:
        if delta < n:
            yield delta
        step += 1
        delta = (delta + step) & (pow2 - 1)
        if step == pow2:
            return


def _node_schedule(rank: int, nodes: int, per_node: int) -> list[tuple[int, int]]:
    node, local = divmod(rank, per_node)
    out = []
    for node_delta in _quadratic(nodes):
        send_node, recv_node = (node + node_delta) % nodes, (node - node_delta) % nodes
        for local_delta in _quadratic(per_node):
            send_local, recv_local = (local + local_delta) % per_node, (local - local_delta) % per_node
            out.append((send_node * per_node + send_local, recv_node * per_node + recv_local))
    return out


def p2p_group_size(nodes: int, per_node: int, wanted: int) -> int:
    """2.28+: the schedule's group size: NCCL_P2P_SCHEDULE_GROUP_SIZE across nodes, the node on
    one node, reduced to its gcd with the node size when that does not divide evenly."""
    size = wanted if nodes > 1 else per_node
    if per_node % size or per_node < size:
        size = gcd(size, per_node)
    return size


def _group_schedule(rank: int, nodes: int, per_node: int, size: int) -> list[tuple[int, int]]:
    per_node_groups = per_node // size
    n_groups = nodes * per_node_groups
    node, local_rank = divmod(rank, per_node)
    group, local = node * per_node_groups + local_rank // size, local_rank % size

    def first_rank(g: int) -> int:
        return (g // per_node_groups) * per_node + (g % per_node_groups) * size

    out = []
    for group_delta in _quadratic(n_groups):
        send_group, recv_group = (group + group_delta) % n_groups, (group - group_delta) % n_groups
        for delta in range(size):
            out.append((first_rank(send_group) + (local + delta) % size,
                        first_rank(recv_group) + (local - delta) % size))
    return out


@lru_cache(maxsize=64)
def _channel_bases(n_rounds: int, nodes: int, per_node: int, n_p2p_channels: int, version_minor: int,
                   group_size: int) -> tuple[int, ...]:
    """`_channel_base` of every round: the same for every rank, which asks for all of them."""
    return tuple(_channel_base(round_, nodes, per_node, n_p2p_channels, version_minor, group_size)
                 for round_ in range(n_rounds))


@lru_cache(maxsize=4096)
def _part_channels(n_p2p_channels: int, base: int, parts: int, version_minor: int) -> tuple[int, ...]:
    """The channels of a transfer's parts from its round's base."""
    return tuple(_channel_for_part(n_p2p_channels, base, p, version_minor) for p in range(parts))


def _channel_base(round_: int, nodes: int, per_node: int, n_p2p_channels: int, version_minor: int,
                  group_size: int) -> int:
    if rules_for_minor(version_minor).p2p_schedule == "node-deltas":
        if nodes > 1:
            node_delta, local_delta = divmod(round_, per_node)
            base = node_delta * _div_up(per_node, MAX_DEV_WORK_P2P_PER_BATCH) + local_delta // MAX_DEV_WORK_P2P_PER_BATCH
            return base & 0xFF
        return round_ & 0xFF
    if nodes > 1:
        group_delta, local_delta = divmod(round_, group_size)
        base = group_delta * _div_up(group_size, MAX_DEV_WORK_P2P_PER_BATCH) + local_delta // MAX_DEV_WORK_P2P_PER_BATCH
    else:
        base = round_
    return _reverse_bits(base, (n_p2p_channels - 1).bit_length()) & 0xFF


def _reverse_bits(value: int, nbits: int) -> int:
    out = 0
    for i in range(nbits):
        if value & (1 << i):
            out |= 1 << (nbits - 1 - i)
    return out


def _channel_for_part(n_p2p_channels: int, base: int, part: int, version_minor: int) -> int:
    if rules_for_minor(version_minor).p2p_schedule == "node-deltas":  # parts at bit-reversed offsets from the base
        return (base + _reverse_bits(part, (n_p2p_channels - 1).bit_count())) & (n_p2p_channels - 1)
    return (base + part) & (n_p2p_channels - 1)


def u32fp8_round(x: int) -> int:
    """bitops.h u32fp8Encode then Decode: x kept to its top 4 significant bits."""
    log2x = (x | 1).bit_length() - 1
    mantissa = (x >> (log2x - 3 if log2x >= 3 else 0)) & 0x7
    exponent = log2x - 2 if log2x >= 3 else 0
    mantissa |= 0x8 if exponent else 0
    return mantissa << (exponent - 1 if exponent else 0)


class P2pTransfer(NamedTuple):
    """One direction of one round: `nbytes` to or from `peer`, in `n_parts` parts of `chunk_nbytes`
    chunks (data bytes) on the channels NCCL assigns, with `protocol`. A tuple: an alltoall's ranks
    make one per peer each, millions on a thousand GPUs."""

    round: int
    peer: int
    send: bool
    nbytes: int
    protocol: str
    chunk_nbytes: int
    channels: tuple[int, ...]


def _parts(nbytes: int, step: int, nodes: int, fewest: int, most: int) -> int:
    """How many channels one direction's bytes are split over: at least half a step (an eighth on
    one node) per part, doubled while a part exceeds a step (32 steps on one node)."""
    if nbytes == 0:
        return 1
    low = step // 2 if nodes > 1 else step // 8
    high = step if nodes > 1 else step * 32
    parts = min(fewest, _div_up(nbytes, low))
    size = max(low, _div_up(nbytes, parts))
    while size > high and parts <= most // 2:
        parts *= 2
        size = _div_up(nbytes, parts)
    return parts


def p2p_transfers(call: Call, rank: int, nodes: int, per_node: int, n_p2p_channels: int, per_peer: int,
                  p2p_chunk_nbytes: int, version_minor: int, group_size: int = 8,
                  ll_buff_nbytes: int = 512 * 1024,
                  ll_threshold_nbytes: int = _LL_THRESHOLD_NBYTES) -> list[P2pTransfer]:
    """The transfers `rank` makes for a sendrecv (to rank+1, from rank-1) or an alltoall; LL while
    a peer's bytes fit `ll_threshold_nbytes` per part (NCCL_P2P_LL_THRESHOLD), in LL slots of
    `ll_buff_nbytes` / NCCL_STEPS (the LL buffer, NCCL_LL_BUFFSIZE)."""
    _check_release(version_minor)
    parts_first = rules_for_minor(version_minor).p2p_parts_first
    group_size = p2p_group_size(nodes, per_node, group_size)
    n = call.nranks
    peer_nbytes = call.count * call.elem_nbytes
    most = per_peer
    fewest = most
    while fewest * n > n_p2p_channels and fewest > 1:
        fewest //= 2

    def shape(self_send: bool, network: bool) -> tuple[str, int, int]:
        """(protocol, data bytes per chunk, parts) of a peer's bytes: the same for every peer alike."""
        if not parts_first:  # LL while the bytes fit nChannelsMax x 16 KiB
            protocol = "LL" if (not self_send and peer_nbytes <= most * ll_threshold_nbytes) else "Simple"
        else:  # parts first, by the Simple step; LL while the bytes fit them x 16 KiB
            parts = _parts(peer_nbytes, p2p_chunk_nbytes, nodes, fewest, most)
            protocol = "LL" if (not self_send and peer_nbytes <= parts * ll_threshold_nbytes) else "Simple"
        step = ll_buff_nbytes // NCCL_STEPS if protocol == "LL" else p2p_chunk_nbytes
        chunk = step
        if network:
            if protocol == "Simple" and peer_nbytes < step:
                chunk //= 4
            elif peer_nbytes < 8 * step:
                chunk //= 2
        data = u32fp8_round(chunk // 2 if protocol == "LL" else chunk)
        if not parts_first:
            parts = _parts(peer_nbytes, step, nodes, fewest, most)
        return protocol, data, parts

    shapes: dict[tuple[bool, bool], tuple[str, int, int]] = {}  # an alltoall asks for three, n times each
    schedule = p2p_schedule(rank, nodes, per_node, version_minor, group_size)
    bases = _channel_bases(len(schedule), nodes, per_node, n_p2p_channels, version_minor, group_size)
    out = []
    for round_, (send_rank, recv_rank) in enumerate(schedule):
        wanted = []
        if call.collective == "alltoall":
            wanted = [(True, send_rank), (False, recv_rank)]
        else:  # sendrecv: nccl-tests sends to rank+1 and receives from rank-1
            if send_rank == (rank + 1) % n:
                wanted.append((True, send_rank))
            if recv_rank == (rank - 1) % n:
                wanted.append((False, recv_rank))
        base = bases[round_]
        for send, peer in wanted:
            key = (peer == rank, peer // per_node != rank // per_node)
            got = shapes.get(key)
            if got is None:
                got = shapes[key] = shape(*key)
            protocol, data, parts = got
            channels = _part_channels(n_p2p_channels, base, parts, version_minor)
            out.append(P2pTransfer(round_, peer, send, peer_nbytes, protocol, data, channels))
    return out


def _part_bounds(n_parts: int, part: int, nbytes: int) -> tuple[int, int]:
    """device.h ncclP2pPartBounds: parts of ceil(bytes / parts) rounded up to 4 KiB."""
    size = _div_up(_div_up(nbytes, n_parts), 4096) * 4096
    return min(part * size, nbytes), min((part + 1) * size, nbytes)


def _segments(call: Call):
    """Where the src -> dst piece sits in the call's element space (bytes: p2p moves int8), as a
    function of (src, dst), the call's sizes read once."""
    per, nranks = call.count * call.elem_nbytes, call.nranks
    if call.collective == "alltoall":
        return lambda src, dst: (src * nranks + dst) * per
    return lambda src, dst: src * per


def _check_release(version_minor: int) -> None:
    if not rules_for_minor(version_minor).p2p_plans_modelled:
        raise UsageError(f"point-to-point plans of NCCL 2.{version_minor} are not modelled", "--nccl-version",
                         releases_where("p2p_plans_modelled"))


def p2p_stream_chunks(call: Call, rank: int, nodes: int, per_node: int, n_p2p_channels: int, per_peer: int,
                      p2p_chunk_nbytes: int, version_minor: int, group_size: int = 8, ll: tuple[int, int] | None = None
                      ) -> list[int]:
    """How many chunks each of `rank`'s point-to-point streams moves (p2p_programs' stream order);
    `ll` is (LL buffer, LL threshold) where they are not NCCL's defaults."""
    return transfers_stream_chunks(p2p_transfers(call, rank, nodes, per_node, n_p2p_channels, per_peer,
                                                 p2p_chunk_nbytes, version_minor, group_size, *(ll or ())), rank)


def transfers_stream_chunks(transfers: list[P2pTransfer], rank: int) -> list[int]:
    """p2p_stream_chunks of `rank`'s transfers as p2p_transfers gives them."""
    out = []
    bounds = _Bounds()
    chunks: dict[tuple[int, int, int], list[int]] = {}  # a rank's transfers to its peers are mostly alike
    for t in transfers:
        if t.peer == rank:  # one copy per part, by the send alone (p2p_programs)
            out += [1] * len(t.channels) if t.send else []
            continue
        key = (len(t.channels), t.nbytes, t.chunk_nbytes)
        got = chunks.get(key)
        if got is None:
            got = chunks[key] = [max(1, _div_up(end - beg, t.chunk_nbytes)) for beg, end in bounds(key[0], t.nbytes)]
        out += got
    return out


class _Bounds(dict):
    """_part_bounds of every part of a transfer, worked out once per parts and size (a rank's
    transfers to its peers are mostly alike)."""

    def __call__(self, n_parts: int, nbytes: int) -> tuple[tuple[int, int], ...]:
        got = self.get((n_parts, nbytes))
        if got is None:
            got = self[(n_parts, nbytes)] = tuple(_part_bounds(n_parts, part, nbytes) for part in range(n_parts))
        return got


def p2p_programs(call: Call, rank: int, nodes: int, per_node: int, n_p2p_channels: int, per_peer: int,
                 p2p_chunk_nbytes: int, version_minor: int, group_size: int = 8,
                 chunks_per_prim: int = 1, ll: tuple[int, int] | None = None) -> tuple[ChannelProgram, ...]:
    """The primitive programs `rank` runs for a sendrecv or alltoall: per channel, one stream per
    transfer part (NCCL runs up to 8 p2p works of a channel side by side), a primitive per chunk —
    or per `chunks_per_prim` consecutive chunks, as one primitive over their bytes."""
    return transfers_programs(call, rank, p2p_transfers(call, rank, nodes, per_node, n_p2p_channels, per_peer,
                                                        p2p_chunk_nbytes, version_minor, group_size, *(ll or ())),
                              chunks_per_prim)


def transfers_programs(call: Call, rank: int, transfers: list[P2pTransfer], chunks_per_prim: int = 1
                       ) -> tuple[ChannelProgram, ...]:
    """p2p_programs from `rank`'s transfers as p2p_transfers gives them: a function of the transfers
    and, through the buffer offsets alone, of the ranks (translation.py relies on it)."""
    streams: dict[int, list[Stream]] = {}
    bounds = _Bounds()
    segment = _segments(call)
    for t in transfers:
        peer, send = t.peer, t.send
        origin = segment(rank, peer) if send else segment(peer, rank)
        parts = zip(t.channels, bounds(len(t.channels), t.nbytes))
        if peer == rank:
            # sendrecv.h runSend: a send to itself is one copy of the send buffer into the receive
            # buffer by the send's work (none where they are the same); the receive does nothing.
            if send:
                for part, (channel, (beg, end)) in enumerate(parts):
                    streams.setdefault(channel, []).append(
                        Stream(f"copy r{t.round} self part {part}", (Prim("copy", origin + beg, end - beg),),
                               t.protocol))
            continue
        chunk = t.chunk_nbytes * chunks_per_prim
        op, ends = ("send", ((), (peer,))) if send else ("recv", ((peer,), ()))
        for part, (channel, (beg, end)) in enumerate(parts):
            # A primitive per chunk, the last one short; one of no bytes where the part has none.
            prims = tuple([_prim((op, origin + at, min(chunk, end - at), *ends, *_PRIM_TAIL))
                           for at in range(beg, end, chunk)]) if end > beg else (Prim(op, origin + beg, 0, *ends),)
            streams.setdefault(channel, []).append(Stream(f"{op} r{t.round} peer {peer} part {part}", prims,
                                                          t.protocol))
    return tuple(ChannelProgram(c, tuple(s)) for c, s in sorted(streams.items()))


@dataclass(frozen=True)
class P2pSetup:
    """What a communicator fixes for its point-to-point plans: nodes and ranks per node, the
    p2p channels and channels per peer, the p2p chunk (a Simple slot) and the release's rules."""

    nodes: int
    per_node: int
    n_channels: int
    per_peer: int
    chunk_nbytes: int
    version_minor: int
    group_size: int
    ll_buff_nbytes: int = 512 * 1024
    ll_threshold_nbytes: int = _LL_THRESHOLD_NBYTES

    @property
    def _ll(self) -> tuple[int, int]:
        return self.ll_buff_nbytes, self.ll_threshold_nbytes

    def programs(self, call: Call, rank: int, chunks_per_prim: int = 1,
                 transfers: list[P2pTransfer] | None = None) -> tuple[ChannelProgram, ...]:
        """p2p_programs (from `transfers` where they are at hand)."""
        return transfers_programs(call, rank, self.transfers(call, rank) if transfers is None else transfers,
                                  chunks_per_prim)

    def stream_chunks(self, call: Call, rank: int, transfers: list[P2pTransfer] | None = None) -> list[int]:
        """p2p_stream_chunks (from `transfers` where they are at hand)."""
        return transfers_stream_chunks(self.transfers(call, rank) if transfers is None else transfers, rank)

    def peer_pattern(self, call: Call, rank: int) -> tuple:
        """What `rank`'s transfers depend on of the rank: per round, its send and receive peers as far
        on from it as they are, and whether each is on another node. Ranks with equal patterns make
        transfers alike but for their peers, each as far on from its own rank (p2p_transfers reads the
        rank through nothing else), and the pattern costs a fraction of the transfers."""
        n, per_node = call.nranks, self.per_node
        node = rank // per_node
        return tuple(((send - rank) % n, (recv - rank) % n, send // per_node != node, recv // per_node != node)
                     for send, recv in p2p_schedule(rank, self.nodes, per_node, self.version_minor, self.group_size))

    def transfers(self, call: Call, rank: int) -> list[P2pTransfer]:
        return p2p_transfers(call, rank, self.nodes, self.per_node, self.n_channels, self.per_peer,
                             self.chunk_nbytes, self.version_minor, self.group_size, *self._ll)

    def plan_record(self, call: Call, programs: tuple[ChannelProgram, ...]) -> Plan:
        """A Plan standing for the call: algorithm "P2P", Simple where any stream of `programs`
        is Simple (else LL), the p2p chunk as the slot; its parts are per rank, so none."""
        protocols = [s.protocol for prog in programs for s in prog.streams if s.protocol]
        protocol = "Simple" if "Simple" in protocols or not protocols else "LL"
        return Plan(call, "P2P", protocol, 640, self.n_channels, 0.0, self.chunk_nbytes, 1, 1, (), 0,
                    self.version_minor)


def p2p_setup(job) -> P2pSetup:
    """The job's point-to-point setup (connect.py's channel counts and chunk, NCCL_P2P_SCHEDULE_GROUP_SIZE)."""
    p2p = p2p_channels(job.paths, job.channels.n_channels, job.nodes, job.params)
    return P2pSetup(job.nodes, len(job.paths.node_system.gpus()), p2p.n_channels, p2p.per_peer,
                    p2p_chunk_nbytes(job.paths, job.nodes, job.params), job.system.rules.version.minor,
                    int(job.params.get("NCCL_P2P_SCHEDULE_GROUP_SIZE")), job.comm.buff_nbytes[0],
                    p2p_ll_threshold_nbytes(job.params))


def p2p_summary(job, call: Call) -> tuple[str, int]:
    """The protocol and channel count that stand for a point-to-point call: rank 0's largest
    transfer to a peer as NCCL 2.22-2.30 plan it (the self-copy of alltoall never uses LL, so the
    peers' transfers say what the call looks like); before 2.22, LL up to NCCL_P2P_LL_THRESHOLD and
    the p2p channels per peer."""
    setup = p2p_setup(job)
    if rules_for_minor(setup.version_minor).p2p_plans_modelled:
        transfers = setup.transfers(call, 0)
        biggest = max((t for t in transfers if t.peer != 0), key=lambda t: len(t.channels), default=None)
        if biggest is not None:
            return biggest.protocol, len(biggest.channels)
    nbytes = call.count * call.elem_nbytes
    return ("LL" if nbytes <= setup.ll_threshold_nbytes else "Simple"), setup.per_peer
