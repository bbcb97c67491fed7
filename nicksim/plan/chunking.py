"""How one call is cut over channels and chunks (enqueue.cc's scheduler).

`plan_call(comm, call)` takes NCCL's choice for the call (tuning.choose) and applies enqueue.cc's
scheduler: the call's elements are cut into 16-byte cells and spread over channels by traffic
(scheduleCollTasksToPlan: a low, middle and high part, `cbd`), and each part gets its chunk size
from calcCollChunking. The result is a frozen `Plan`.

Modelled: NCCL 2.22+ channel partition, 2.20-2.21's even split with its own chunking, and
2.18-2.19's striped plans (every channel is given the whole count; the kernels cut each loop into
per-channel chunks, enqueue.cc computeColl of 2.18.5 and 2.19.4).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..calls import Call
from ..constants.rules import ReleaseRules, rules_for_minor
from ..tuning.choose import Choice, CommState, choose
from .collnet import collnet_chunk_nbytes

__all__ = ["NCCL_STEPS", "ChannelPart", "Plan", "plan_call", "proto_grain_nbytes", "collnet_scheduled", "div_up", "align_up", "align_count"]

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

    @property
    def rules(self) -> ReleaseRules:
        """The rules of the release the plan was made for."""
        return rules_for_minor(self.version_minor)


def div_up(a: int, b: int) -> int:
    return -(-a // b)


def align_up(a: int, b: int) -> int:
    return div_up(a, b) * b


def align_count(protocol: str, n_threads: int, elem_nbytes: int) -> int:
    """computeCollAlignCount (enqueue.cc, 2.20-2.21), in elements: Simple NCCL_SIMPLE_ALIGNMENT
    (32 x 8 x 16 = 4096 B), LL128 480 B a warp, LL 8 B a thread."""
    if protocol == "Simple":
        return 4096 // elem_nbytes
    if protocol == "LL128":
        return 480 // elem_nbytes * (n_threads // 32)
    return 8 // elem_nbytes * n_threads


def _log2i(n: int) -> int:
    return n.bit_length() - 1 if n > 0 else 0


def _chunk_nbytes(comm: CommState, call: Call, choice: Choice, nbytes: int, n_channels: int = 1) -> int:
    """calcCollChunking for `n_channels` channels holding `nbytes` of global (not traffic) bytes
    (one channel's part, or every channel of a CollNet-scheduled call); before 2.20, computeColl's
    chunkSize, or lastChunkSize where the kernel reads it (Tree, NVLS, NVLSTree, CollNet)."""
    algorithm, protocol = choice.algorithm, choice.protocol
    release = rules_for_minor(comm.table.version.minor)
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
        if release.nvls_multinode_chunk_32k and comm.n_nodes > 1 and comm.table.bw("AllReduce", "NVLS", "Simple") < 150:
            limit = 32768
        chunk = min(chunk, limit)
        ops = n_channels * comm.nvls_heads
        for factor, floor in ((64, 65536), (8, 32768), (2, 16384)):
            if nbytes < factor * ops * chunk and chunk > floor:
                chunk = floor
    elif algorithm == "NVLSTree":
        ops = n_channels * comm.nvls_heads
        # 2.18-2.20 start from a whole Simple step where 2.21 starts from the NVLS chunk (enqueue.cc).
        start = comm.nvls_chunk_nbytes if release.nvlstree_chunk_from_nvls_chunk else step
        chunk = min(start, comm.nvls_tree_max_chunk_nbytes)
        for factor, floor in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
            if nbytes < factor * ops * chunk and chunk > floor:
                chunk = floor
    elif algorithm == "Tree" and protocol == "LL128":
        ppn = comm.nranks / comm.n_nodes
        steps = 1 + _log2i(comm.n_nodes) + 0.1 * ppn
        # 2.18-2.19 halve the whole LL128 step and keep its data (15/16) afterwards; later releases halve the data.
        halves_step = release.tree_ll128_halves_step
        raw = step if halves_step else chunk
        while nbytes // (n_channels * raw) < steps * 64 / ppn and raw > 131072:
            raw //= 2
        while nbytes // (n_channels * raw) < steps * 16 / ppn and raw > 32768:
            raw //= 2
        chunk = raw * 15 // 16 if halves_step else raw
    elif algorithm == "Tree" and protocol == "Simple" and release.tree_simple_depth_chunking:
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
    release = rules_for_minor(comm.table.version.minor)
    elem = call.elem_nbytes
    nvls = choice.algorithm in ("NVLS", "NVLSTree")
    kind_max = comm.nvls_channels if nvls else comm.n_channels  # nMaxChannels[collnet=0][nvls]
    n_ch = min(choice.max_channels, kind_max)
    traffic_per_byte = call.traffic_per_byte
    traffic = call.count * elem * traffic_per_byte
    # From 2.26 LL counts four bytes of traffic per byte (16-byte lines carry 8 data bytes), both in
    # the task's traffic (ncclPrepareTasks) and per cell.
    ll4 = 4 if (choice.protocol == "LL" and release.ll_traffic_x4) else 1
    traffic *= ll4
    # MinTrafficPerChannel: 512 B in 2.22, 16 KiB in 2.23-2.28, 32 KiB from 2.29 (which also rounds to 16 bytes).
    min_traffic = release.min_traffic_per_channel_nbytes
    if release.cells_from_min_traffic:
        traffic = max(min_traffic, traffic)
        if release.per_channel_traffic_16:
            per_channel = div_up(traffic // n_ch, 16) * 16
        else:
            per_channel = max(min_traffic, traffic // n_ch)
        traffic_per_byte *= ll4
        cell = div_up(div_up(min_traffic, traffic_per_byte), 16) * 16
    else:
        per_channel = max(min_traffic, traffic // n_ch)  # 2.22.3: 16-byte cells
        cell = 16
    elems_per_cell = cell // elem
    cells = div_up(call.count * elem, cell)
    traffic_per_cell = cell * traffic_per_byte
    cells_per_channel = min(cells, div_up(per_channel, traffic_per_cell))
    if kind_max == 1:
        cells_lo = cells
    elif release.cells_from_min_traffic:
        cells_lo = min(cells, div_up(per_channel, traffic_per_cell))
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
    align = align_count(choice.protocol, choice.n_threads, elem)
    per_channel = div_up(div_up(call.count * elem, n_channels), 16) * 16
    parts, offset, left = [], 0, call.count
    for channel in range(n_channels):
        if left == 0:
            break
        count = min(div_up(div_up(min(per_channel, left * elem), elem), align) * align, left)
        parts.append((channel, offset, count))
        offset += count
        left -= count
    return parts


def plan_call(comm: CommState, call: Call, choice: Choice | None = None) -> Plan:
    """The plan NCCL makes for `call` on `comm` (its own choice unless `choice` is given)."""
    minor = comm.table.version.minor
    split = rules_for_minor(minor).coll_split
    choice = choice or choose(comm, call)
    elem = call.elem_nbytes
    grain = proto_grain_nbytes(choice.protocol)
    global_per_elem = elem * (call.nranks if call.info.per_rank else 1)
    parts = []
    striped = collnet_scheduled(choice.algorithm, comm.n_nodes) or split == "whole"
    if collnet_scheduled(choice.algorithm, comm.n_nodes):
        # Every channel takes the whole count; the kernel strides through it by channel.
        n_ch = choice.max_channels
        chunk = _chunk_nbytes(comm, call, choice, global_per_elem * call.count, n_ch) // grain * grain
        parts = [ChannelPart(c, 0, call.count, chunk, chunk // elem) for c in range(n_ch)]
    elif call.count > 0 and split == "whole":
        # addCollToPlan (2.18-2.19) gives each of the call's channels the whole work element.
        n_ch = _usable_channels(comm, choice)
        chunk = _chunk_nbytes(comm, call, choice, global_per_elem * call.count, n_ch)
        parts = [ChannelPart(c, 0, call.count, chunk, chunk // elem) for c in range(n_ch)]
    elif call.count > 0 and split == "even":
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

