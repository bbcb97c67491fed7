"""Plans: how one call is cut over channels and chunks, and what each rank does on each channel.

`plan_call(comm, call)` takes NCCL's choice for the call (choose.py) and applies enqueue.cc's
scheduler: the call's elements are cut into 16-byte cells and spread over channels by traffic
(scheduleCollTasksToPlan: a low, middle and high part, `cbd`), and each part gets its chunk size
from calcCollChunking. `rank_programs(plan, rings, trees, rank)` turns a plan into the primitive
sequence the device code runs for that rank on each channel (all_reduce.h, all_gather.h,
reduce_scatter.h, broadcast.h, reduce.h of NCCL 2.30: ring, tree split up/down, NVLS
scatter/reduce/gather, NVLSTree), and `check_programs` executes every rank's programs symbolically:
each connection is a FIFO, each reduction tracks which ranks contributed, and the check fails
unless every byte of every rank's output is produced exactly once with the right contributions.

Element offsets are in the call's element space: the vector for all_reduce, broadcast and
reduce; the concatenation of all ranks' pieces (rank r owns [r*count, (r+1)*count)) for
all_gather and reduce_scatter.

Modelled: NCCL 2.22+ channel partition, 2.20-2.21's even split with its own chunking, and
2.18-2.19's striped plans (every channel is given the whole count; the kernels cut each loop into
per-channel chunks, enqueue.cc computeColl and src/collectives/device/*.h of 2.18.5 and
src/device/*.h of 2.19.4); ring programs for the five
collectives, tree all_reduce, single-node NVLS all_reduce, NVLS all_reduce across nodes, NVLSTree
all_reduce, PAT all_gather / reduce_scatter (plan_pat.py, 2.26+), CollNet Direct all_reduce /
all_gather / reduce_scatter and CollNet Chain all_reduce (plan_collnet.py); across nodes NVLS and
CollNet go through the CollNet switch.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .calls import Call
from .choose import Choice, CommState, choose
from .errors import NickSimError, UsageError
from .plan_collnet import (COLLNET_SWITCH, CollNetLayout, collnet_chain_allreduce, collnet_chunk_nbytes,
                           collnet_direct_allgather, collnet_direct_allreduce, collnet_direct_reducescatter,
                           nvls_collnet_allgather, nvls_collnet_reducescatter)
from .plan_pat import PatSlots, pat_ops

__all__ = ["ChannelPart", "Plan", "Prim", "Stream", "ChannelProgram", "PlanCheckError", "plan_call", "rank_programs",
           "check_programs", "proto_grain_nbytes", "collnet_scheduled", "PAT_MAX_ROUND"]

NCCL_STEPS = 8


def proto_grain_nbytes(protocol: str) -> int:
    """device.h ncclProtoGrainSize: LL 16 B; LL128 32 threads x 8 elems / 16 x 15 x 8 B = 1920 B; Simple 512 B."""
    return {"LL": 16, "LL128": 1920, "Simple": 512}[protocol]


@dataclass(frozen=True)
class ChannelPart:
    """One channel's share of a call: `count` elements from `offset` (both in per-rank count units,
    cbd partOffset/partCount) moved in chunks of `chunk_count` elements."""

    channel: int
    offset: int
    count: int
    chunk_nbytes: int
    chunk_count: int


@dataclass(frozen=True)
class Plan:
    """Everything NCCL decides for one call before the kernel runs.

    `parts` lists the channels the call uses (nChannels = len(parts)); `step_nbytes` is the
    connection buffer slot (buffSize / NCCL_STEPS); Simple ring transfers move `slice_steps`
    slots per primitive step and `chunk_steps` per chunk. In a `striped` plan every part holds
    the whole count and the kernel takes channel c's chunks from each loop over all channels
    (CollNet and NVLS across nodes in every release, everything before 2.20).
    """

    call: Call
    algorithm: str
    protocol: str
    n_threads: int
    max_channels: int
    time_us: float
    step_nbytes: int
    chunk_steps: int
    slice_steps: int
    parts: tuple[ChannelPart, ...]
    nvls_heads: int
    version_minor: int
    striped: bool = False

    @property
    def n_channels(self) -> int:
        return len(self.parts)


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def _log2i(n: int) -> int:
    return n.bit_length() - 1 if n > 0 else 0


def _chunk_nbytes(comm: CommState, call: Call, choice: Choice, nbytes: int, n_channels: int = 1) -> int:
    """calcCollChunking for `n_channels` channels holding `nbytes` of global (not traffic) bytes
    (one channel's part, or every channel of a CollNet-scheduled call); before 2.20, computeColl's
    chunkSize, or lastChunkSize where the kernel reads it (Tree, NVLS, NVLSTree, CollNet)."""
    algorithm, protocol = choice.algorithm, choice.protocol
    minor = comm.table.version.minor
    p = ("LL", "LL128", "Simple").index(protocol)
    step = comm.buff_nbytes[p] // NCCL_STEPS
    ring_simple = protocol == "Simple" and algorithm == "Ring"
    chunk_steps = _chunk_steps(call)[0] if ring_simple else 1
    chunk = step * chunk_steps
    if protocol == "LL":
        chunk //= 2
    if protocol == "LL128":
        chunk = (chunk // 16) * 15  # NCCL_LL128_LINEELEMS / NCCL_LL128_DATAELEMS
    if algorithm.startswith("CollNet"):
        return collnet_chunk_nbytes(algorithm, nbytes, n_channels, comm.collnet_direct_heads, comm.local_ranks,
                                    step, comm.buff_nbytes[2] // NCCL_STEPS)
    if algorithm == "NVLS":
        limit = comm.nvls_chunk_nbytes
        if minor >= 19 and comm.n_nodes > 1 and comm.table.bw("AllReduce", "NVLS", "Simple") < 150:
            limit = 32768
        chunk = min(chunk, limit)
        ops = n_channels * comm.nvls_heads
        for factor, floor in ((64, 65536), (8, 32768), (2, 16384)):
            if nbytes < factor * ops * chunk and chunk > floor:
                chunk = floor
    elif algorithm == "NVLSTree":
        ops = n_channels * comm.nvls_heads
        # 2.18-2.20 start from a whole Simple step where 2.21 starts from the NVLS chunk (enqueue.cc).
        start = step if minor <= 20 else comm.nvls_chunk_nbytes
        chunk = min(start, comm.nvls_tree_max_chunk_nbytes)
        for factor, floor in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
            if nbytes < factor * ops * chunk and chunk > floor:
                chunk = floor
    elif algorithm == "Tree" and protocol == "LL128":
        ppn = comm.nranks / comm.n_nodes
        steps = 1 + _log2i(comm.n_nodes) + 0.1 * ppn
        # 2.18-2.19 halve the whole LL128 step and keep its data (15/16) afterwards; later releases halve the data.
        raw = step if minor < 20 else chunk
        while nbytes // (n_channels * raw) < steps * 64 / ppn and raw > 131072:
            raw //= 2
        while nbytes // (n_channels * raw) < steps * 16 / ppn and raw > 32768:
            raw //= 2
        chunk = raw * 15 // 16 if minor < 20 else raw
    elif algorithm == "Tree" and protocol == "Simple" and minor < 20:
        # computeColl 2.18-2.19: fewer than 8, 4, 1 chunks a channel per tree level halve the
        # chunk (down to 128, 64, 32 KiB); the depth is connect.cc's nRanks/nNodes - 1 + log2i(nNodes).
        depth = comm.nranks // comm.n_nodes - 1 + _log2i(comm.n_nodes)
        for factor, floor in ((8, 131072), (4, 65536), (1, 32768)):
            while nbytes // (n_channels * chunk) < depth * factor and chunk > floor:
                chunk //= 2
    elif algorithm == "PAT":
        factor = 32 if call.collective == "all_gather" else 16
        while chunk * factor > nbytes and chunk > 65536:
            chunk //= 2
    return chunk


def collnet_scheduled(algorithm: str, n_nodes: int) -> bool:
    """enqueue.cc `isCollnet`: CollNet algorithms, and NVLS across nodes (which runs over CollNet);
    every channel of such a plan takes the whole count and strides through it by channel."""
    return algorithm.startswith("CollNet") or (algorithm == "NVLS" and n_nodes > 1)


def _chunk_steps(call: Call) -> tuple[int, int]:
    """collectives.h: (chunkSteps, sliceSteps) of Simple rings: 4/2 for all_reduce, all_gather and
    reduce_scatter (NCCL_STEPS/2, NCCL_STEPS/4), 1/1 for broadcast and reduce."""
    if call.collective in ("broadcast", "reduce"):
        return 1, 1
    return NCCL_STEPS // 2, NCCL_STEPS // 4


def _partition(comm: CommState, call: Call, choice: Choice) -> list[tuple[int, int, int]]:
    """scheduleCollTasksToPlan for a call alone in its plan: [(channel, offset, count)]."""
    minor = comm.table.version.minor
    elem = call.elem_nbytes
    nvls = choice.algorithm in ("NVLS", "NVLSTree")
    kind_max = comm.nvls_channels if nvls else comm.n_channels  # nMaxChannels[collnet=0][nvls]
    n_ch = min(choice.max_channels, kind_max)
    traffic_per_byte = call.traffic_per_byte
    traffic = call.count * elem * traffic_per_byte
    # From 2.26 LL counts four bytes of traffic per byte (16-byte lines carry 8 data bytes), both in
    # the task's traffic (ncclPrepareTasks) and per cell.
    ll4 = 4 if (choice.protocol == "LL" and minor >= 26) else 1
    traffic *= ll4
    if minor >= 23:
        # MinTrafficPerChannel: 16 KiB in 2.23-2.28, 32 KiB from 2.29 (which also rounds to 16 bytes).
        min_traffic = (32 << 10) if minor >= 29 else (16 << 10)
        traffic = max(min_traffic, traffic)
        if minor >= 29:
            per_channel = _div_up(traffic // n_ch, 16) * 16
        else:
            per_channel = max(min_traffic, traffic // n_ch)
        traffic_per_byte *= ll4
        cell = _div_up(_div_up(min_traffic, traffic_per_byte), 16) * 16
    else:
        per_channel = max(512, traffic // n_ch)  # 2.22.3: MinTrafficPerChannel 512, 16-byte cells
        cell = 16
    elems_per_cell = cell // elem
    cells = _div_up(call.count * elem, cell)
    traffic_per_cell = cell * traffic_per_byte
    cells_per_channel = min(cells, _div_up(per_channel, traffic_per_cell))
    if kind_max == 1:
        cells_lo = cells
    elif minor >= 23:
        cells_lo = min(cells, _div_up(per_channel, traffic_per_cell))
    else:
        cells_lo = min(cells, per_channel // traffic_per_cell)
    n_mid = (cells - cells_lo) // cells_per_channel if cells_per_channel else 0
    cells_hi = (cells - cells_lo) % cells_per_channel if cells_per_channel else 0
    used = (1 if cells_lo else 0) + n_mid + (1 if cells_hi else 0)
    channel = 0
    if kind_max < used:  # overflowed the channels: spread the rest over what is left
        n_mid = kind_max - 2
        cells_per_channel = (cells - cells_lo) // (n_mid + 1)
        cells_hi = cells_per_channel + (cells - cells_lo) % (n_mid + 1)
    if cells_hi == 0 and n_mid != 0:
        cells_hi = cells_per_channel
        n_mid -= 1
    if cells_lo == 0:
        channel += 1
        if n_mid == 0:
            cells_lo, cells_hi = cells_hi, 0
        else:
            cells_lo = cells_per_channel
            n_mid -= 1
    count_mid = cells_per_channel * elems_per_cell if n_mid else 0
    count_lo = cells_lo * elems_per_cell
    count_hi = cells_hi * elems_per_cell
    excess = cells * elems_per_cell - call.count
    if count_hi:
        count_hi -= excess
    else:
        count_lo -= excess
    parts = [(channel, 0, count_lo)] if count_lo else []
    offset = count_lo
    for i in range(n_mid):
        parts.append((channel + len(parts), offset, count_mid))
        offset += count_mid
    if cells_hi:
        parts.append((channel + len(parts), offset, count_hi))
    return parts


def _usable_channels(comm: CommState, choice: Choice) -> int:
    """The channels a call alone in its plan may use: its tuned count within the kind's maximum."""
    kind_max = comm.nvls_channels if choice.algorithm in ("NVLS", "NVLSTree") else comm.n_channels
    return min(choice.max_channels, kind_max)


def _even_parts(call: Call, choice: Choice, n_channels: int) -> list[tuple[int, int, int]]:
    """addCBDCollToPlan (enqueue.cc 2.20-2.21) for a call alone in its plan: [(channel, offset,
    count)]. Every channel gets the same bytes (16-byte aligned, maxBytesPerChannel), each share
    rounded up to whole alignment units (computeCollAlignCount), so the last channels may get
    less, or nothing."""
    elem = call.elem_nbytes
    align = _align_count(choice.protocol, choice.n_threads, elem)
    per_channel = _div_up(_div_up(call.count * elem, n_channels), 16) * 16
    parts, offset, left = [], 0, call.count
    for channel in range(n_channels):
        if left == 0:
            break
        count = min(_div_up(_div_up(min(per_channel, left * elem), elem), align) * align, left)
        parts.append((channel, offset, count))
        offset += count
        left -= count
    return parts


def plan_call(comm: CommState, call: Call, choice: Choice | None = None) -> Plan:
    """The plan NCCL makes for `call` on `comm` (its own choice unless `choice` is given)."""
    minor = comm.table.version.minor
    choice = choice or choose(comm, call)
    elem = call.elem_nbytes
    grain = proto_grain_nbytes(choice.protocol)
    global_per_elem = elem * (call.nranks if call.collective in ("all_gather", "reduce_scatter") else 1)
    parts = []
    striped = collnet_scheduled(choice.algorithm, comm.n_nodes) or minor < 20
    if collnet_scheduled(choice.algorithm, comm.n_nodes):
        # Every channel takes the whole count; the kernel strides through it by channel.
        n_ch = choice.max_channels
        chunk = _chunk_nbytes(comm, call, choice, global_per_elem * call.count, n_ch) // grain * grain
        parts = [ChannelPart(c, 0, call.count, chunk, chunk // elem) for c in range(n_ch)]
    elif call.count > 0 and minor < 20:
        # addCollToPlan (2.18-2.19) gives each of the call's channels the whole work element.
        n_ch = _usable_channels(comm, choice)
        chunk = _chunk_nbytes(comm, call, choice, global_per_elem * call.count, n_ch)
        parts = [ChannelPart(c, 0, call.count, chunk, chunk // elem) for c in range(n_ch)]
    elif call.count > 0 and minor < 22:
        n_ch = _usable_channels(comm, choice)
        chunk = _chunk_nbytes(comm, call, choice, global_per_elem * call.count, n_ch)
        parts = [ChannelPart(channel, offset, count, chunk, chunk // elem)
                 for channel, offset, count in _even_parts(call, choice, n_ch)]
    elif call.count > 0:
        for channel, offset, count in _partition(comm, call, choice):
            chunk = _chunk_nbytes(comm, call, choice, global_per_elem * count)
            parts.append(ChannelPart(channel, offset, count, chunk, (chunk // grain) * (grain // elem)))
    p = ("LL", "LL128", "Simple").index(choice.protocol)
    ring_simple = choice.protocol == "Simple" and choice.algorithm == "Ring"
    chunk_steps, slice_steps = _chunk_steps(call) if ring_simple else (1, 1)
    return Plan(call, choice.algorithm, choice.protocol, choice.n_threads, choice.max_channels, choice.time_us,
                comm.buff_nbytes[p] // NCCL_STEPS, chunk_steps, slice_steps, tuple(parts), comm.nvls_heads,
                minor, striped)


# --- primitive programs --------------------------------------------------------------------------

@dataclass(frozen=True)
class Prim:
    """One device primitive: `op` over `nelem` elements at `offset` of the call's element space,
    receiving from `recv_from` and sending to `send_to` (ranks; -2 is the NVLS multicast switch,
    -3 the CollNet switch) over connection `conn` of each peer.
    nelem may be 0: NCCL still runs the step (it carries no data but keeps the FIFOs in step).
    PAT primitives (patReduce, patCopy) also carry their step-buffer coordinates in `pat`."""

    op: str
    offset: int
    nelem: int
    recv_from: tuple[int, ...] = ()
    send_to: tuple[int, ...] = ()
    pat: PatSlots | None = None
    conn: int = 0  # connIndex: CollNet Direct scatters and reduces on connection 1, gathers and broadcasts on 0


@dataclass(frozen=True)
class Stream:
    """A thread group's sequence of primitives (tree split and NVLS run several per channel);
    `protocol` is set where it differs from the plan's (point-to-point transfers choose their own)."""

    name: str
    prims: tuple[Prim, ...]
    protocol: str | None = None


@dataclass(frozen=True)
class ChannelProgram:
    """What one rank runs on one channel."""

    channel: int
    streams: tuple[Stream, ...]


NVLS_SWITCH = -2


def _align_up(a: int, b: int) -> int:
    return _div_up(a, b) * b


def _align_count(protocol: str, n_threads: int, elem_nbytes: int) -> int:
    """computeCollAlignCount (enqueue.cc, 2.20-2.21), in elements: Simple NCCL_SIMPLE_ALIGNMENT
    (32 x 8 x 16 = 4096 B), LL128 480 B a warp, LL 8 B a thread."""
    if protocol == "Simple":
        return 4096 // elem_nbytes
    if protocol == "LL128":
        return 480 // elem_nbytes * (n_threads // 32)
    return 8 // elem_nbytes * n_threads


def _last_chunk_align(plan: Plan, nbytes: int) -> int:
    """What a loop's last, smaller chunk is rounded up to (elements): 2.20-2.21 give it in
    lastChunkCount at the alignment of the channel's work (computeCollLastChunkInfo), later
    kernels round it to `nbytes` themselves."""
    elem = plan.call.elem_nbytes
    if plan.version_minor < 22:
        return _align_count(plan.protocol, plan.n_threads, elem)
    return nbytes // elem


# --- 2.18-2.19: every channel holds the whole count, each loop is cut over all channels ----------

def _device_elem(call: Call) -> int:
    """The element size the 2.18-2.19 kernels count in: all_gather and broadcast run on bytes
    (info.h ncclInfoSetDerived turns them into ncclInt8)."""
    return 1 if call.collective in ("all_gather", "broadcast") else call.elem_nbytes


def _ll_last_chunk(plan: Plan, chunk: int, d: int) -> int:
    """computeColl's LL lastChunkSize (device elements of `d` bytes): the bytes left after whole
    loops of nChannels x nchunksPerLoop slices of `chunk`, shared out and rounded up to 8 B a thread."""
    call = plan.call
    per_loop = 1 if call.collective in ("broadcast", "reduce") else call.nranks
    nbytes = call.count * call.elem_nbytes * (call.nranks if call.collective in ("all_gather", "reduce_scatter")
                                              else 1)
    loop_nbytes = plan.n_channels * per_loop * chunk * d
    last = _div_up(nbytes % loop_nbytes, plan.n_channels * per_loop)
    return _align_up(last, plan.n_threads * 8) // d


def _striped_ring_chunk(plan: Plan, rest: int, chunk: int, ways: int, d: int, ll_last: int) -> int:
    """realChunkSize of one loop of a 2.18-2.19 ring kernel (device elements): what is left shared
    `ways` ways (the channels, times the ranks for all_reduce), at most `chunk`, rounded for Simple
    to the copy threads' 8 B, for LL128 (and LL in all_reduce) to whole minimum chunks; other LL
    rings take the host's lastChunkSize for their last loop."""
    nt, coll = plan.n_threads, plan.call.collective
    if plan.protocol == "Simple":
        return _align_up(min(chunk, _div_up(rest, ways)), (nt - 32) * 8 // d)
    if plan.protocol == "LL" and coll != "all_reduce":
        return ll_last if rest < ways * chunk else chunk
    if plan.protocol == "LL":
        least = nt * (8 // d)
    elif coll in ("broadcast", "reduce"):
        least = nt * (60 // d)  # LL128 calcBytePerGrain: 8 x 15 x 8 / 16 = 60 B a thread
    else:
        least = nt * (60 // d) // 2
    return min(chunk, _div_up(rest, ways * least) * least)


def _striped_chunks(plan: Plan, part: ChannelPart) -> list[tuple[int, int]]:
    """(offset, nelem) of channel `part.channel`'s chunk in each loop of a 2.18-2.19 ring (not
    all_reduce) or tree kernel, in the call's elements; nelem is 0 where the loop ends first."""
    call, bid, n_ch = plan.call, part.channel, plan.n_channels
    d = _device_elem(call)
    size, chunk = call.count * call.elem_nbytes // d, part.chunk_nbytes // d
    loop = n_ch * chunk
    out = []
    if plan.algorithm == "Tree":
        # runTreeSplit: a call smaller than one loop shrinks the chunk to whole minimum chunks.
        nt = plan.n_threads
        least = {"Simple": (nt - 64) * 8 * (8 // d), "LL": nt * (8 // d), "LL128": nt * (60 // d) // 8}[plan.protocol]
        if loop > size:
            chunk = _div_up(size, n_ch * least) * least
        for grid in range(0, size, loop):
            off = grid + bid * chunk
            out.append((off, max(0, min(chunk, size - off))))
    else:
        ll_last = _ll_last_chunk(plan, chunk, d) if plan.protocol == "LL" else 0
        for grid in range(0, size, loop):
            real = _striped_ring_chunk(plan, size - grid, chunk, n_ch, d, ll_last)
            off = grid + bid * real
            out.append((off, max(0, min(real, size - off))))
    return [(off * d // call.elem_nbytes, nelem * d // call.elem_nbytes) for off, nelem in out]


def _ring_allreduce_loops(plan: Plan, part: ChannelPart, n: int):
    """Each loop of a ring all_reduce on one channel, as a function from a chunk index (0..n-1)
    to its (offset, nelem). 2.20+: the channel's own part in chunks of chunk_count, the last loop's
    shared by the ranks; 2.18-2.19: all channels' loop, Simple giving each channel n contiguous
    chunks, LL and LL128 interleaving the channels chunk by chunk (all_reduce.h calcOffset)."""
    if plan.striped:
        bid, n_ch, size = part.channel, plan.n_channels, plan.call.count
        chunk = part.chunk_count
        for grid in range(0, size, n_ch * n * chunk):
            real = _striped_ring_chunk(plan, size - grid, chunk, n_ch * n, plan.call.elem_nbytes, 0)
            if plan.protocol == "Simple":
                base, step = grid + bid * n * real, real
            else:
                base, step = grid + bid * real, n_ch * real
            yield lambda c, base=base, step=step, real=real: (base + c * step,
                                                             max(0, min(real, size - base - c * step)))
        return
    chunk_count = part.chunk_count
    loop = n * chunk_count
    for off in range(0, part.count, loop):
        rem = part.count - off
        if rem < loop:
            chunk_count = _align_up(_div_up(rem, n), _last_chunk_align(plan, 16))
        yield lambda c, off=off, rem=rem, cc=chunk_count: (part.offset + off + c * cc, max(0, min(cc, rem - c * cc)))


def _ring_allreduce(plan: Plan, part: ChannelPart, ring: tuple[int, ...], rank: int, index: int) -> list[Prim]:
    n = len(ring)
    prev, nxt = ring[-1], ring[1]
    prims = []

    def mod(r: int) -> int:
        return r - n if r >= n else r

    for at in _ring_allreduce_loops(plan, part, n):
        prims.append(Prim("send", *at(mod(index + n - 1)), send_to=(nxt,)))
        for j in range(2, n):
            prims.append(Prim("recvReduceSend", *at(mod(index + n - j)), recv_from=(prev,), send_to=(nxt,)))
        prims.append(Prim("recvReduceCopySend", *at(index), recv_from=(prev,), send_to=(nxt,)))
        for j in range(1, n - 1):
            prims.append(Prim("recvCopySend", *at(mod(index + n - j)), recv_from=(prev,), send_to=(nxt,)))
        prims.append(Prim("recv", *at(mod(index + 1)), recv_from=(prev,)))
    return prims


def _chunks(plan: Plan, part: ChannelPart):
    """(offset, nelem) of each of the channel's chunks (ring collectives other than all_reduce, tree)."""
    if plan.striped:
        yield from _striped_chunks(plan, part)
        return
    off = 0
    while off < part.count:
        yield part.offset + off, min(part.chunk_count, part.count - off)
        off += part.chunk_count


def _ring_allgather(plan: Plan, part: ChannelPart, ring: tuple[int, ...]) -> list[Prim]:
    n, count = len(ring), plan.call.count
    prev, nxt = ring[-1], ring[1]
    prims = []
    for data, nelem in _chunks(plan, part):
        prims.append(Prim("copySend", data + ring[0] * count, nelem, send_to=(nxt,)))
        for j in range(1, n - 1):
            prims.append(Prim("recvCopySend", data + ring[n - j] * count, nelem, recv_from=(prev,), send_to=(nxt,)))
        prims.append(Prim("recv", data + ring[1] * count, nelem, recv_from=(prev,)))
    return prims


def _ring_reducescatter(plan: Plan, part: ChannelPart, ring: tuple[int, ...]) -> list[Prim]:
    n, count = len(ring), plan.call.count
    prev, nxt = ring[-1], ring[1]
    prims = []
    for data, nelem in _chunks(plan, part):
        prims.append(Prim("send", data + ring[n - 1] * count, nelem, send_to=(nxt,)))
        for j in range(2, n):
            prims.append(Prim("recvReduceSend", data + ring[n - j] * count, nelem, recv_from=(prev,), send_to=(nxt,)))
        prims.append(Prim("recvReduceCopy", data + ring[0] * count, nelem, recv_from=(prev,)))
    return prims


def _ring_broadcast(plan: Plan, part: ChannelPart, ring: tuple[int, ...]) -> list[Prim]:
    root, rank, nxt, prev = plan.call.root, ring[0], ring[1], ring[-1]
    prims = []
    for off, nelem in _chunks(plan, part):
        if rank == root:
            prims.append(Prim("copySend", off, nelem, send_to=(nxt,)))
        elif nxt == root:
            prims.append(Prim("recv", off, nelem, recv_from=(prev,)))
        else:
            prims.append(Prim("recvCopySend", off, nelem, recv_from=(prev,), send_to=(nxt,)))
    return prims


def _ring_reduce(plan: Plan, part: ChannelPart, ring: tuple[int, ...]) -> list[Prim]:
    root, rank, nxt, prev = plan.call.root, ring[0], ring[1], ring[-1]
    prims = []
    for off, nelem in _chunks(plan, part):
        if prev == root:
            prims.append(Prim("send", off, nelem, send_to=(nxt,)))
        elif rank == root:
            prims.append(Prim("recvReduceCopy", off, nelem, recv_from=(prev,)))
        else:
            prims.append(Prim("recvReduceSend", off, nelem, recv_from=(prev,), send_to=(nxt,)))
    return prims


def _tree_allreduce(plan: Plan, part: ChannelPart, up: int, down: tuple[int, ...]) -> tuple[Stream, ...]:
    """runTreeSplit (SM80+): the root reduces and broadcasts in one pass; other ranks run an
    up group (reduce towards the root) and a down group (broadcast from it) concurrently."""
    children = tuple(d for d in down if d >= 0)
    chunks = list(_chunks(plan, part))
    if up < 0:
        if not children:
            return (Stream("root", tuple(Prim("copy", o, n) for o, n in chunks)),)
        return (Stream("root", tuple(Prim("recvReduceCopySend", o, n, recv_from=children, send_to=children)
                                     for o, n in chunks)),)
    if not children:
        upward = tuple(Prim("send", o, n, send_to=(up,)) for o, n in chunks)
        downward = tuple(Prim("recv", o, n, recv_from=(up,)) for o, n in chunks)
    else:
        upward = tuple(Prim("recvReduceSend", o, n, recv_from=children, send_to=(up,)) for o, n in chunks)
        downward = tuple(Prim("recvCopySend", o, n, recv_from=(up,), send_to=children) for o, n in chunks)
    return Stream("up", upward), Stream("down", downward)


def _nvls_allreduce(plan: Plan, part: ChannelPart, rank: int, heads: tuple[int, ...]) -> tuple[Stream, ...]:
    """Single-node NVLS (all_reduce.h): scatter the loop's n_heads chunks into the multicast
    buffers, the head of each chunk reduces it through the switch and multicasts the result,
    every rank gathers all n_heads results. Where the NVLS domain has more GPUs than heads (an
    NVL72 rack: 32 heads, NCCL_MAX_NVLS_ARITY), the other ranks only scatter and gather."""
    n_heads = len(heads)
    chunk = part.chunk_count
    loop = n_heads * chunk
    rem = part.count % loop
    last_chunk = _align_up(_div_up(rem, n_heads), _last_chunk_align(plan, 16384))
    scatter, gather, reduce = [], [], []
    off = 0
    while off < part.count:
        if part.count - off < loop:
            chunk = last_chunk
        pieces = [(part.offset + off + h * chunk, max(0, min(chunk, part.count - off - h * chunk)))
                  for h in range(n_heads)]
        scatter += [Prim("nvlsScatter", o, n, send_to=(NVLS_SWITCH,)) for o, n in pieces]
        if rank in heads:
            o, n = pieces[heads.index(rank)]
            reduce.append(Prim("nvlsReduceMulticast", o, n, recv_from=(NVLS_SWITCH,), send_to=(NVLS_SWITCH,)))
        gather += [Prim("nvlsGather", o, n, recv_from=(NVLS_SWITCH,)) for o, n in pieces]
        off += loop
    streams = [Stream("scatter", tuple(scatter)), Stream("gather", tuple(gather))]
    if reduce:
        streams.append(Stream("reduce", tuple(reduce)))
    return tuple(streams)


def _nvls_striped_allreduce(plan: Plan, part: ChannelPart, rank: int, per_node: int,
                            heads_local: tuple[int, ...]) -> tuple[Stream, ...]:
    """NVLS all_reduce striped over the channels (all_reduce.h: across nodes in every release,
    within a node before 2.20): every rank scatters chunk h of a loop of channels x heads chunks
    into its node's multicast buffer and gathers chunk h back; head h reduces it through the
    switch and multicasts it (one node), or sends it to the CollNet switch, receives the sum over
    all nodes and multicasts that."""
    n_heads = len(heads_local)
    local = rank % per_node
    head = heads_local.index(local) if local in heads_local else -1
    across = plan.call.nranks > per_node
    key = (part.count, part.chunk_count, n_heads, part.channel, plan.n_channels)
    rounds = _nvls_striped_rounds(*key)
    reduce, bcast = [], []
    for pieces in rounds if head >= 0 else ():
        o, n = pieces[head]
        if across:
            reduce.append(Prim("nvlsReduceSend", o, n, recv_from=(NVLS_SWITCH,), send_to=(COLLNET_SWITCH,)))
            bcast.append(Prim("nvlsRecvMulticast", o, n, recv_from=(COLLNET_SWITCH,), send_to=(NVLS_SWITCH,)))
        else:
            reduce.append(Prim("nvlsReduceMulticast", o, n, recv_from=(NVLS_SWITCH,), send_to=(NVLS_SWITCH,)))
    streams = list(_nvls_scatter_gather(_nvls_striped_rounds, key))
    if reduce:
        streams.append(Stream("reduce", tuple(reduce)))
    if bcast:
        streams.append(Stream("bcast", tuple(bcast)))
    return tuple(streams)


@lru_cache(maxsize=256)
def _nvls_striped_rounds(count: int, chunk: int, n_heads: int, bid: int, n_channels: int
                         ) -> tuple[tuple[tuple[int, int], ...], ...]:
    """(offset, count) of each head's piece, loop by loop, for channel `bid` of a striped NVLS
    plan: a loop covers n_channels x n_heads chunks, channel bid's from bid x n_heads x chunk."""
    rounds = []
    for grid in range(0, count, n_channels * n_heads * chunk):
        offset = grid + bid * n_heads * chunk
        rounds.append(tuple((offset + h * chunk, max(0, min(chunk, count - offset - h * chunk)))
                            for h in range(n_heads)))
    return tuple(rounds)


def _nvls_tree_allreduce(plan: Plan, part: ChannelPart, head: int, n_heads: int, up: int,
                         children: tuple[int, ...]) -> tuple[Stream, ...]:
    """NVLSTree all_reduce (all_reduce.h): every rank scatters into its node's multicast buffers and
    gathers the results; the rank heading chunk h reduces it through the switch together with its
    child nodes' heads and sends it up the tree across nodes; the root multicasts the total into
    its node and back down, and every other head receives it from above, multicasts it into its
    node and passes it down (the broadcast stream)."""
    chunk = part.chunk_count
    if plan.striped:
        rounds_of, key = _nvls_striped_rounds, (part.count, chunk, n_heads, part.channel, plan.n_channels)
    else:
        rem = part.count % (n_heads * chunk)
        last_chunk = _align_up(_div_up(rem, n_heads), _last_chunk_align(plan, 16))
        rounds_of, key = _nvls_tree_rounds, (part.offset, part.count, chunk, last_chunk, n_heads)
    rounds = rounds_of(*key)
    reduce, bcast = [], []
    for pieces in rounds if head >= 0 else ():
        o, n = pieces[head]
        if up < 0:
            reduce.append(Prim("nvlsReduceMulticast", o, n, recv_from=(NVLS_SWITCH,) + children,
                               send_to=(NVLS_SWITCH,) + children))
        else:
            reduce.append(Prim("nvlsReduceSend", o, n, recv_from=(NVLS_SWITCH,) + children, send_to=(up,)))
            bcast.append(Prim("nvlsRecvMulticast", o, n, recv_from=(up,), send_to=(NVLS_SWITCH,) + children))
    streams = list(_nvls_scatter_gather(rounds_of, key))
    if reduce:
        streams.append(Stream("reduce", tuple(reduce)))
    if bcast:
        streams.append(Stream("broadcast", tuple(bcast)))
    return tuple(streams)


@lru_cache(maxsize=256)
def _nvls_tree_rounds(offset: int, count: int, chunk: int, last_chunk: int, n_heads: int
                      ) -> tuple[tuple[tuple[int, int], ...], ...]:
    """(offset, count) of each head's piece, round by round (the last round's chunk is smaller)."""
    loop, rounds, off = n_heads * chunk, [], 0
    while off < count:
        if count - off < loop:
            chunk = last_chunk
        rounds.append(tuple((offset + off + h * chunk, max(0, min(chunk, count - off - h * chunk)))
                            for h in range(n_heads)))
        off += loop
    return tuple(rounds)


@lru_cache(maxsize=256)
def _nvls_scatter_gather(rounds_of, key: tuple[int, ...]) -> tuple[Stream, Stream]:
    """Every rank's scatter and gather streams of one channel, over the pieces `rounds_of(*key)`
    gives: the same on every rank, so built once."""
    pieces = [p for r in rounds_of(*key) for p in r]
    return (Stream("scatter", tuple(Prim("nvlsScatter", o, n, send_to=(NVLS_SWITCH,)) for o, n in pieces)),
            Stream("gather", tuple(Prim("nvlsGather", o, n, recv_from=(NVLS_SWITCH,)) for o, n in pieces)))


def _pat_streams(plan: Plan, part: ChannelPart, rank: int) -> tuple[Stream, ...]:
    """PAT's steps (plan_pat.py) as one stream; `Prim.pat.round` groups the steps that run together."""
    ops = pat_ops(plan.call, part, plan.step_nbytes, rank, plan.version_minor)
    return (Stream("pat", tuple(Prim(op.op, op.offset, op.nelem, op.recv_from, op.send_to, op.slots) for op in ops)),)


def nvls_tree_links(n_nodes: int, per_node: int, heads_local: tuple[int, ...], rank: int, channel: int) \
        -> tuple[int, int, tuple[int, ...]]:
    """(head index, tree parent, tree children) of `rank` on an NVLSTree channel: the double binary
    tree over nodes (tree c % 2) joining the ranks that head the same chunk (connect.cc connectNvls)."""
    from .trees import dtree
    node, local = divmod(rank, per_node)
    if local not in heads_local:
        return -1, -1, ()
    h = heads_local.index(local)
    trees = dtree(n_nodes, node)
    links = trees.tree0 if channel % 2 == 0 else trees.tree1
    to_rank = lambda n: n * per_node + heads_local[h]  # noqa: E731
    up = -1 if links.up == -1 else to_rank(links.up)
    return h, up, tuple(to_rank(n) for n in links.children)


def _streams(groups: dict[str, list]) -> tuple[Stream, ...]:
    """Named thread groups (plan_collnet.py's builders) as Streams."""
    return tuple(Stream(name, tuple(prims)) for name, prims in groups.items())


def rank_programs(plan: Plan, rings: tuple[tuple[int, ...], ...], trees: dict, rank: int,
                  nvls: tuple[int, tuple[int, ...]] | None = None,
                  collnet: CollNetLayout | None = None) -> tuple[ChannelProgram, ...]:
    """The primitive programs `rank` runs for `plan`, one per channel the plan uses.

    `rings[c]` is channel c's ring as rank 0 prints it (starting at rank 0); `trees[c]` maps a
    rank to (up, (down0, down1, down2)) on channel c (only needed for Tree); `nvls` is (GPUs per
    node, the local ranks heading NVLS chunks in head order), needed for NVLSTree; `collnet` is
    the CollNet heads and chains (plan_collnet.py), needed for CollNet.
    """
    call, algorithm = plan.call, plan.algorithm
    programs = []
    for part in plan.parts:
        c = part.channel
        if algorithm == "Ring":
            ring0 = rings[c % len(rings)]
            pos = ring0.index(rank)
            ring = ring0[pos:] + ring0[:pos]
            builders = {"all_reduce": lambda: _ring_allreduce(plan, part, ring, rank, pos),
                        "all_gather": lambda: _ring_allgather(plan, part, ring),
                        "reduce_scatter": lambda: _ring_reducescatter(plan, part, ring),
                        "broadcast": lambda: _ring_broadcast(plan, part, ring),
                        "reduce": lambda: _ring_reduce(plan, part, ring)}
            streams = (Stream("ring", tuple(builders[call.collective]())),)
        elif algorithm == "Tree" and call.collective == "all_reduce":
            up, down = trees[c][rank]
            streams = _tree_allreduce(plan, part, up, down)
        elif algorithm == "NVLS" and call.collective == "all_reduce" and plan.striped \
                and (nvls is not None or plan.nvls_heads == call.nranks):
            streams = _nvls_striped_allreduce(plan, part, rank, *(nvls or (call.nranks, tuple(range(call.nranks)))))
        elif algorithm == "NVLS" and call.collective == "all_reduce" and plan.nvls_heads == call.nranks:
            streams = _nvls_allreduce(plan, part, rank, tuple(range(plan.nvls_heads)))
        elif algorithm == "NVLS" and call.collective == "all_reduce" and nvls is not None and nvls[0] == call.nranks:
            streams = _nvls_allreduce(plan, part, rank, nvls[1])  # one NVLS domain, fewer heads than GPUs
        elif algorithm == "NVLS" and call.collective in ("all_gather", "reduce_scatter") and nvls is not None \
                and call.nranks > nvls[0]:
            build = nvls_collnet_allgather if call.collective == "all_gather" else nvls_collnet_reducescatter
            streams = _streams(build(Prim, part.count, c, plan.n_channels, part.chunk_count, nvls[0], nvls[1], rank,
                                     call.nranks // nvls[0], NVLS_SWITCH))
        elif algorithm == "NVLSTree" and call.collective == "all_reduce" and nvls is not None:
            per_node, heads_local = nvls
            head, up, children = nvls_tree_links(call.nranks // per_node, per_node, heads_local, rank, c)
            streams = _nvls_tree_allreduce(plan, part, head, len(heads_local), up, children)
        elif algorithm == "PAT" and call.collective in ("all_gather", "reduce_scatter"):
            streams = _pat_streams(plan, part, rank)
        elif algorithm == "CollNetDirect" and call.collective in ("all_gather", "reduce_scatter") \
                and collnet is not None:
            build = collnet_direct_allgather if call.collective == "all_gather" else collnet_direct_reducescatter
            streams = _streams(build(Prim, part.count, c, plan.n_channels, part.chunk_count, collnet, rank,
                                     call.nranks // collnet.per_node))
        elif algorithm in ("CollNetDirect", "CollNetChain") and call.collective == "all_reduce" \
                and collnet is not None:
            if algorithm == "CollNetDirect":
                groups = collnet_direct_allreduce(Prim, part.count, c, plan.n_channels, part.chunk_count, collnet, rank)
            else:
                groups = collnet_chain_allreduce(Prim, part.count, c, plan.n_channels, part.chunk_count, collnet,
                                                 rank, c)
            streams = _streams(groups)
        else:
            raise UsageError(f"primitive programs for {algorithm} {call.collective} are not modelled yet",
                             "plan", "Ring (all collectives), Tree all_reduce, NVLS and NVLSTree all_reduce, "
                             "PAT all_gather and reduce_scatter, CollNet, NVLS across nodes")
        programs.append(ChannelProgram(c, streams))
    return tuple(programs)


# --- symbolic execution --------------------------------------------------------------------------

class PlanCheckError(NickSimError):
    """A plan whose programs would lose, duplicate or double-count data, or never finish."""

    def __init__(self, what: str):
        super().__init__(what, "plan", "programs that produce every output byte exactly once")


def _expected(call: Call, rank: int) -> list[tuple[int, int, frozenset]]:
    """(offset, nelem, contributors) each rank's output must hold."""
    n, count, everyone = call.nranks, call.count, frozenset(range(call.nranks))
    if call.collective == "all_reduce":
        return [(0, count, everyone)]
    if call.collective == "all_gather":
        return [(r * count, count, frozenset((r,))) for r in range(n)]
    if call.collective == "reduce_scatter":
        return [(rank * count, count, everyone)]
    if call.collective == "broadcast":
        return [(0, count, frozenset((call.root,)))]
    if call.collective == "reduce":
        return [(0, count, everyone)] if rank == call.root else []
    per = count * call.elem_nbytes  # point-to-point moves bytes (plan_p2p.py)
    if call.collective == "alltoall":
        return [((src * n + rank) * per, per, frozenset((src,))) for src in range(n)]
    if call.collective == "sendrecv":
        src = (rank - 1) % n
        return [(src * per, per, frozenset((src,)))]
    raise UsageError(f"no output rule for {call.collective}", "plan")


def _has_input(call: Call, rank: int, offset: int, nelem: int) -> bool:
    if call.collective == "all_gather":
        return rank * call.count <= offset and offset + nelem <= (rank + 1) * call.count
    if call.collective == "broadcast":
        return rank == call.root
    per = call.count * call.elem_nbytes
    if call.collective == "alltoall":
        return per and rank * call.nranks * per <= offset and offset + nelem <= (rank + 1) * call.nranks * per
    if call.collective == "sendrecv":
        return rank * per <= offset and offset + nelem <= (rank + 1) * per
    return True


PAT_MAX_ROUND = 16  # NCCL_PAT_NWORKERS / WARP_SIZE: at most this many steps per round


class _PatConn:
    """One PAT connection: steps posted by the sender (tail) and released by the receiver (head),
    the pieces each unreleased step holds ({step: {offset: [element, nelem, ranks, reads]}}), and
    the accSize high-water marks of the sending and the receiving side."""

    def __init__(self):
        self.tail = self.head = 0
        self.slots: dict[int, dict[int, list]] = {}
        self.send_acc = self.recv_acc = 0


class _Executor:
    def __init__(self, call: Call, programs: dict[int, tuple[ChannelProgram, ...]], per_node: int):
        self.call = call
        self.per_node = per_node
        self.fifos: dict[tuple, list] = {}
        self.outputs: dict[int, list] = {r: [] for r in programs}
        self.switch: dict[tuple, set] = {}
        self.multicast: dict[tuple, frozenset] = {}
        self.n_nodes = max(1, len(programs) // per_node)
        self.collnet: dict[tuple, dict[int, frozenset]] = {}  # (channel, offset, nelem) -> {node: partial sum}
        self.streams = [(rank, prog.channel, stream.name, list(stream.prims))
                        for rank, progs in programs.items() for prog in progs for stream in prog.streams]
        self.local = per_node
        self.pat_conns: dict[tuple, _PatConn] = {}
        self.pat_local_acc: dict[tuple, int] = {}
        self.pat_rs_out: dict[tuple, list] = {}
        self.pat_written: set = set()
        self.pat_pending: list = []
        self.pat_posted: set = set()

    def _fail(self, rank, channel, prim, what):
        raise PlanCheckError(f"rank {rank} channel {channel} {prim.op}@{prim.offset}+{prim.nelem}: {what}")

    def _input(self, rank, channel, prim) -> frozenset:
        if prim.nelem and not _has_input(self.call, rank, prim.offset, prim.nelem):
            self._fail(rank, channel, prim, "reads input the rank does not have")
        return frozenset((rank,))

    def _key(self, rank, channel, prim) -> tuple:
        """A chunk of one node's multicast buffer on one channel."""
        return rank // self.per_node, channel, prim.offset, prim.nelem

    def _ready(self, rank, channel, prim) -> bool:
        peers = [src for src in prim.recv_from if src not in (NVLS_SWITCH, COLLNET_SWITCH)]
        if COLLNET_SWITCH in prim.recv_from:
            # The switch reduces a chunk once every node has sent it; it gathers a piece from its one owner.
            wanted = 1 if self.call.collective == "all_gather" else self.n_nodes
            if len(self.collnet.get((channel, prim.offset, prim.nelem), ())) != wanted:
                return False
        if NVLS_SWITCH in prim.recv_from and prim.op != "nvlsGather":
            if len(self.switch.get(self._key(rank, channel, prim), ())) != self.local:
                return False
        if prim.op == "nvlsGather":
            return self._key(rank, channel, prim) in self.multicast
        return all(self.fifos.get((channel, src, rank, prim.conn)) for src in peers)

    def _pop(self, rank, channel, prim) -> frozenset:
        value: frozenset = frozenset()
        for src in prim.recv_from:
            if src == NVLS_SWITCH:
                continue
            if src == COLLNET_SWITCH:  # the switch's sum over every node's head
                got = frozenset().union(*self.collnet[(channel, prim.offset, prim.nelem)].values())
                if value & got:
                    self._fail(rank, channel, prim, f"ranks {sorted(value & got)} would be reduced twice")
                value |= got
                continue
            offset, nelem, got = self.fifos[(channel, src, rank, prim.conn)].pop(0)
            if (offset, nelem) != (prim.offset, prim.nelem):
                self._fail(rank, channel, prim, f"received {offset}+{nelem} from rank {src}")
            if value & got:
                self._fail(rank, channel, prim, f"ranks {sorted(value & got)} would be reduced twice")
            value |= got
        return value

    def _add(self, rank, channel, prim, value, own):
        if value & own:
            self._fail(rank, channel, prim, "its own input would be reduced twice")
        return value | own

    def _step(self, rank, channel, prim) -> None:
        op = prim.op
        key = self._key(rank, channel, prim)
        if op == "nvlsScatter":
            if prim.nelem and not _has_input(self.call, rank, prim.offset, prim.nelem):
                self._fail(rank, channel, prim, "reads input the rank does not have")
            if rank in self.switch.setdefault(key, set()):
                self._fail(rank, channel, prim, "scattered twice")
            self.switch[key].add(rank)
            return
        if op in ("nvlsReduceMulticast", "nvlsReduceSend", "nvlsRecvMulticast"):
            value = self._pop(rank, channel, prim)
            if op != "nvlsRecvMulticast":  # the switch adds up the node's scattered inputs
                local = frozenset(self.switch[key])
                if value & local:
                    self._fail(rank, channel, prim, f"ranks {sorted(value & local)} would be reduced twice")
                value |= local
            if NVLS_SWITCH in prim.send_to:
                if key in self.multicast:
                    self._fail(rank, channel, prim, "multicast twice")
                self.multicast[key] = value
            self._deliver(rank, channel, prim, value)
            return
        if op == "nvlsGather":
            self.outputs[rank].append((prim.offset, prim.nelem, self.multicast[key]))
            return
        if op in ("send", "copySend", "copy"):
            value = self._input(rank, channel, prim)
        elif op in ("recvReduceSend", "recvReduceCopySend", "recvReduceCopy"):
            value = self._add(rank, channel, prim, self._pop(rank, channel, prim), self._input(rank, channel, prim))
        elif op in ("recvCopySend", "recv"):
            value = self._pop(rank, channel, prim)
        else:
            self._fail(rank, channel, prim, "unknown primitive")
        if op in ("copySend", "copy", "recvReduceCopySend", "recvReduceCopy", "recvCopySend", "recv"):
            self.outputs[rank].append((prim.offset, prim.nelem, value))
        self._deliver(rank, channel, prim, value)

    def _deliver(self, rank, channel, prim, value) -> None:
        """Hand `value` to every destination: a peer's FIFO on the connection, or the CollNet switch
        (the NVLink switch's multicast is recorded by the caller)."""
        for dst in prim.send_to:
            if dst == COLLNET_SWITCH:
                self._collnet_in(rank, channel, prim, value)
            elif dst != NVLS_SWITCH:
                self.fifos.setdefault((channel, rank, dst, prim.conn), []).append((prim.offset, prim.nelem, value))

    def _collnet_in(self, rank, channel, prim, value) -> None:
        """A head hands its node's partial sum of a chunk to the CollNet switch (one per node)."""
        node = rank // self.per_node
        sums = self.collnet.setdefault((channel, prim.offset, prim.nelem), {})
        if node in sums:
            self._fail(rank, channel, prim, f"node {node} sent this chunk to the CollNet switch twice")
        if any(value & other for other in sums.values()):
            self._fail(rank, channel, prim, "the CollNet switch would reduce a rank twice")
        sums[node] = value

    # PAT: per-connection step buffers, filled at offsets and posted by step (prims_simple.h patReduce/patCopy)

    def _conn(self, channel, src, dst) -> _PatConn:
        return self.pat_conns.setdefault((channel, src, dst), _PatConn())

    def _pat_ready(self, rank, channel, prim) -> bool:
        rs, sl = prim.op == "patReduce", prim.pat
        if prim.recv_from:
            conn = self._conn(channel, prim.recv_from[0], rank)
            if conn.tail < conn.head + (0 if rs else sl.step_offset) + 1:
                return False
        if prim.send_to:
            conn = self._conn(channel, rank, prim.send_to[0])
            if conn.head + NCCL_STEPS < conn.tail + (sl.step_offset if rs else 0) + 1:
                return False
        return True

    def _pat_read(self, rank, channel, prim, conn, step) -> frozenset:
        piece = conn.slots.get(step, {}).get(prim.pat.recv_offset)
        if piece is None:
            self._fail(rank, channel, prim, f"step {step} offset {prim.pat.recv_offset} from rank "
                                            f"{prim.recv_from[0]} holds nothing")
        if (piece[0], piece[1]) != (prim.offset, prim.nelem):
            self._fail(rank, channel, prim, f"step {step} holds elements {piece[0]}+{piece[1]}")
        piece[3] += 1
        return piece[2]

    def _pat_own(self, rank, channel, prim) -> frozenset:
        if prim.nelem and not _has_input(self.call, rank, prim.offset, prim.nelem):
            self._fail(rank, channel, prim, "reads input the rank does not have")
        return frozenset((rank,))

    def _pat_local_new(self, rank, channel, prim) -> bool:
        """localAccSize: a write below the high-water mark accumulates into what is there."""
        end = prim.pat.local_ix + prim.nelem
        acc = self.pat_local_acc.get((rank, channel), 0)
        self._later(lambda: self.pat_local_acc.__setitem__(
            (rank, channel), max(self.pat_local_acc.get((rank, channel), 0), end)))
        return acc < end

    def _pat_step(self, rank, channel, prim) -> None:
        sl, rs = prim.pat, prim.op == "patReduce"
        if sl.send_offset + prim.nelem > sl.step_elems or sl.recv_offset + prim.nelem > sl.step_elems:
            self._fail(rank, channel, prim, "overflows the connection's step buffer")
        recv = self._conn(channel, prim.recv_from[0], rank) if prim.recv_from else None
        send = self._conn(channel, rank, prim.send_to[0]) if prim.send_to else None
        if rs:
            value = self._pat_read(rank, channel, prim, recv, recv.head) if recv else frozenset()
            if send:
                value = self._pat_accumulate(rank, channel, prim, send, value)
            else:
                self._pat_output_rs(rank, channel, prim, value)
        else:
            if recv:
                step = recv.head + sl.step_offset
                value = self._pat_read(rank, channel, prim, recv, step)
                end = sl.recv_offset + prim.nelem + step * sl.step_elems
                fresh = recv.recv_acc < end
                self._later(lambda: setattr(recv, "recv_acc", max(recv.recv_acc, end)))
            else:
                value = self._pat_own(rank, channel, prim)
                if prim.offset != rank * self.call.count + sl.local_ix:
                    self._fail(rank, channel, prim, f"own input {sl.local_ix} is not this element")
                fresh = self._pat_local_new(rank, channel, prim)
            self._pat_output_ag(rank, channel, prim, value, fresh)
            if send:
                slot = send.slots.setdefault(send.tail, {})
                if sl.send_offset in slot:
                    self._fail(rank, channel, prim, "overwrites data not yet posted")
                slot[sl.send_offset] = [prim.offset, prim.nelem, value, 0]
        if sl.post_send:
            self._post(rank, channel, prim, send, "tail")
        if sl.post_recv:
            self._post(rank, channel, prim, recv, "head")

    def _later(self, update) -> None:
        self.pat_pending.append(update)

    def _post(self, rank, channel, prim, conn, side) -> None:
        """Advance the connection's tail (a posted send) or head (a released receive) after the round."""
        key = (id(conn), side)
        if key in self.pat_posted:
            self._fail(rank, channel, prim, f"posts the same {side} twice in one round")
        self.pat_posted.add(key)

        def apply():
            if side == "tail":
                conn.tail += 1
                return
            freed = conn.slots.pop(conn.head, {})
            unread = [off for off, piece in freed.items() if piece[3] == 0]
            if unread:
                self._fail(rank, channel, prim, f"releases step {conn.head} with unread data at {unread[0]}")
            conn.head += 1
        self._later(apply)

    def _pat_round(self, rank, channel, prims) -> None:
        """Run one round: every step sees the state the round found; updates land after it."""
        self.pat_pending, self.pat_posted = [], set()
        for prim in prims:
            self._pat_step(rank, channel, prim)
        for update in self.pat_pending:
            update()

    def _pat_accumulate(self, rank, channel, prim, conn, value) -> frozenset:
        """patReduce's send: new data adds the rank's own input, data already in the slot is reduced into."""
        sl = prim.pat
        step = conn.tail + sl.step_offset
        end = sl.send_offset + prim.nelem + step * sl.step_elems
        slot = conn.slots.setdefault(step, {})
        if conn.send_acc < end:
            if sl.send_offset in slot:
                self._fail(rank, channel, prim, f"overwrites step {step} offset {sl.send_offset}")
            value = self._add(rank, channel, prim, value, self._pat_own(rank, channel, prim))
        else:
            piece = slot.get(sl.send_offset)
            if piece is None or (piece[0], piece[1]) != (prim.offset, prim.nelem):
                self._fail(rank, channel, prim, f"accumulates into step {step} offset {sl.send_offset}, "
                                                "which does not hold this data")
            if value & piece[2]:
                self._fail(rank, channel, prim, f"ranks {sorted(value & piece[2])} would be reduced twice")
            value = value | piece[2]
        slot[sl.send_offset] = [prim.offset, prim.nelem, value, 0]
        self._later(lambda: setattr(conn, "send_acc", max(conn.send_acc, end)))
        return value

    def _pat_output_rs(self, rank, channel, prim, value) -> None:
        if prim.offset != rank * self.call.count + prim.pat.local_ix:
            self._fail(rank, channel, prim, f"output {prim.pat.local_ix} is not this element")
        out = self.pat_rs_out.setdefault(rank, {})
        if self._pat_local_new(rank, channel, prim):
            if prim.offset in out:
                self._fail(rank, channel, prim, "overwrites its output")
            out[prim.offset] = (prim.nelem, self._add(rank, channel, prim, value, self._pat_own(rank, channel, prim)))
        else:
            nelem, had = out.get(prim.offset, (None, frozenset()))
            if nelem != prim.nelem:
                self._fail(rank, channel, prim, "accumulates into output it never wrote")
            if value & had:
                self._fail(rank, channel, prim, f"ranks {sorted(value & had)} would be reduced twice")
            out[prim.offset] = (nelem, had | value)

    def _pat_output_ag(self, rank, channel, prim, value, fresh) -> None:
        key = (rank, prim.offset, prim.nelem)
        if fresh:
            if key in self.pat_written:
                self._fail(rank, channel, prim, "writes its output twice")
            self.pat_written.add(key)
            self.outputs[rank].append((prim.offset, prim.nelem, value))
        elif key not in self.pat_written:
            self._fail(rank, channel, prim, "skips output that was never written")

    def run(self) -> None:
        progress = True
        while progress:
            progress = False
            for rank, channel, _, prims in self.streams:
                while prims and prims[0].pat is not None:
                    batch = [p for p in prims[:PAT_MAX_ROUND] if p.pat.round == prims[0].pat.round]
                    if not all(self._pat_ready(rank, channel, p) for p in batch):
                        break
                    self._pat_round(rank, channel, batch)
                    del prims[:len(batch)]
                    progress = True
                while prims and prims[0].pat is None and self._ready(rank, channel, prims[0]):
                    self._step(rank, channel, prims.pop(0))
                    progress = True
        stuck = [(rank, channel, name, prims[0]) for rank, channel, name, prims in self.streams if prims]
        if stuck:
            rank, channel, name, prim = stuck[0]
            raise PlanCheckError(f"{len(stuck)} streams never finish; first: rank {rank} channel {channel} "
                                 f"{name} waits in {prim.op}@{prim.offset}+{prim.nelem} on {prim.recv_from}")
        left = [key for key, queue in self.fifos.items() if queue]
        left += [key for key, conn in self.pat_conns.items() if conn.slots or conn.head != conn.tail]
        if left:
            raise PlanCheckError(f"data left unreceived on connection channel/src/dst {left[0]}")
        for rank, out in self.pat_rs_out.items():
            self.outputs[rank] += [(offset, nelem, value) for offset, (nelem, value) in out.items()]


def _covered(pieces: list[tuple[int, int, frozenset]], expected, rank: int) -> None:
    wanted = []
    for offset, nelem, value in expected:
        wanted.append((offset, offset + nelem, value))
    got = sorted((o, o + n, v) for o, n, v in pieces if n > 0)
    for (a0, a1, _), (b0, _, _) in zip(got, got[1:]):
        if b0 < a1:
            raise PlanCheckError(f"rank {rank}: output elements {b0}..{a1 - 1} are written twice")
    for start, end, value in wanted:
        pos = start
        for o0, o1, v in got:
            if o1 <= start or o0 >= end:
                continue
            if o0 != pos:
                raise PlanCheckError(f"rank {rank}: output elements {pos}..{o0 - 1} are never written")
            if v != value:
                raise PlanCheckError(f"rank {rank}: output {o0}..{o1 - 1} holds ranks {sorted(v)}, "
                                     f"expected {sorted(value)}")
            pos = o1
        if pos < end:
            raise PlanCheckError(f"rank {rank}: output elements {pos}..{end - 1} are never written")
    inside = sum(min(o1, w1) - max(o0, w0) for o0, o1, _ in got for w0, w1, _ in wanted if o0 < w1 and o1 > w0)
    if inside != sum(o1 - o0 for o0, o1, _ in got):
        raise PlanCheckError(f"rank {rank}: writes outside its output")


def check_programs(call: Call, programs: dict[int, tuple[ChannelProgram, ...]], per_node: int | None = None) -> None:
    """Run every rank's programs symbolically; raise PlanCheckError unless each rank's output is
    written exactly once, everywhere, with exactly the contributions the collective promises.
    `per_node` (default: every rank in one node) groups ranks under one NVLS switch."""
    executor = _Executor(call, programs, per_node or len(programs))
    executor.run()
    for rank in programs:
        _covered(executor.outputs[rank], _expected(call, rank), rank)
