"""What each rank runs on each channel: the primitive programs of a Plan.

`rank_programs(plan, rings, trees, rank, nvls, collnet)` turns a plan into the primitive sequence
the device code runs for that rank on each channel (all_reduce.h, all_gather.h, reduce_scatter.h,
broadcast.h, reduce.h of NCCL 2.30: ring, tree split up/down, NVLS scatter/reduce/gather,
NVLSTree; PAT through plan.pat, CollNet and NVLS across nodes through plan.collnet).
`job_programs(job, plan, ranks)` is the one place a job's topology (rings, trees, NVLS heads,
CollNet heads) meets a plan: every engine that runs programs (the DES, the real backend, the
checker) takes them from it, point-to-point calls included.

Element offsets are in the call's element space: the vector for all_reduce, broadcast and
reduce; the concatenation of all ranks' pieces (rank r owns [r*count, (r+1)*count)) for
all_gather and reduce_scatter.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from ..calls import Call
from ..errors import UsageError
from .chunking import ChannelPart, Plan, align_count, align_up, div_up
from .collnet import (COLLNET_SWITCH, CollNetLayout, collnet_chain_allreduce, collnet_direct_allgather,
                      collnet_direct_allreduce, collnet_direct_reducescatter, nvls_collnet_allgather,
                      nvls_collnet_reducescatter)
from .pat import PatSlots, pat_ops

__all__ = ["Prim", "Stream", "ChannelProgram", "NVLS_SWITCH", "rank_programs", "nvls_tree_links"]


class Prim(NamedTuple):
    """One device primitive: `op` over `nelem` elements at `offset` of the call's element space,
    receiving from `recv_from` and sending to `send_to` (ranks; -2 is the NVLS multicast switch,
    -3 the CollNet switch) over connection `conn` of each peer.
    nelem may be 0: NCCL still runs the step (it carries no data but keeps the FIFOs in step).
    PAT primitives (patReduce, patCopy) also carry their step-buffer coordinates in `pat`.
    `steps` is how many of NCCL's consecutive ring steps it stands for: 1 as NCCL runs them; the
    DES merges long runs of ring steps (engine.coarse_steps).
    Immutable like the other stages' records, but a named tuple: a large call's programs hold
    hundreds of thousands of them, and a tuple is made in less than half a frozen dataclass's time."""

    op: str
    offset: int
    nelem: int
    recv_from: tuple[int, ...] = ()
    send_to: tuple[int, ...] = ()
    pat: PatSlots | None = None
    conn: int = 0  # connIndex: CollNet Direct scatters and reduces on connection 1, gathers and broadcasts on 0
    steps: int = 1


class Stream(NamedTuple):
    """A thread group's sequence of primitives (tree split and NVLS run several per channel);
    `protocol` is set where it differs from the plan's (point-to-point transfers choose their own).
    A named tuple, as Prim is: an alltoall on a thousand GPUs makes a million of them."""

    name: str
    prims: tuple[Prim, ...]
    protocol: str | None = None


@dataclass(frozen=True)
class ChannelProgram:
    """What one rank runs on one channel."""

    channel: int
    streams: tuple[Stream, ...]


NVLS_SWITCH = -2


def _last_chunk_align(plan: Plan, nbytes: int) -> int:
    """What a loop's last, smaller chunk is rounded up to (elements): 2.20-2.21 give it in
    lastChunkCount at the alignment of the channel's work (computeCollLastChunkInfo), later
    kernels round it to `nbytes` themselves."""
    elem = plan.call.elem_nbytes
    if plan.rules.last_chunk_host_aligned:
        return align_count(plan.protocol, plan.n_threads, elem)
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
    nbytes = call.nbytes
    loop_nbytes = plan.n_channels * per_loop * chunk * d
    last = div_up(nbytes % loop_nbytes, plan.n_channels * per_loop)
    return align_up(last, plan.n_threads * 8) // d


def _striped_ring_chunk(plan: Plan, rest: int, chunk: int, ways: int, d: int, ll_last: int) -> int:
    """realChunkSize of one loop of a 2.18-2.19 ring kernel (device elements): what is left shared
    `ways` ways (the channels, times the ranks for all_reduce), at most `chunk`, rounded for Simple
    to the copy threads' 8 B, for LL128 (and LL in all_reduce) to whole minimum chunks; other LL
    rings take the host's lastChunkSize for their last loop."""
    nt, coll = plan.n_threads, plan.call.collective
    if plan.protocol == "Simple":
        return align_up(min(chunk, div_up(rest, ways)), (nt - 32) * 8 // d)
    if plan.protocol == "LL" and coll != "all_reduce":
        return ll_last if rest < ways * chunk else chunk
    if plan.protocol == "LL":
        least = nt * (8 // d)
    elif coll in ("broadcast", "reduce"):
        least = nt * (60 // d)  # LL128 calcBytePerGrain: 8 x 15 x 8 / 16 = 60 B a thread
    else:
        least = nt * (60 // d) // 2
    return min(chunk, div_up(rest, ways * least) * least)


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
            chunk = div_up(size, n_ch * least) * least
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
            chunk_count = align_up(div_up(rem, n), _last_chunk_align(plan, 16))
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
    last_chunk = align_up(div_up(part.count % (n_heads * part.chunk_count), n_heads), _last_chunk_align(plan, 16384))
    loops, scatter, gather = _nvls_loops(part.offset, part.count, part.chunk_count, n_heads, last_chunk)
    if rank not in heads or not loops:
        return scatter, gather
    mine = heads.index(rank)
    switch = (NVLS_SWITCH,)
    reduce = tuple(Prim("nvlsReduceMulticast", *pieces[mine], switch, switch) for pieces in loops)
    return scatter, gather, Stream("reduce", reduce)


@lru_cache(maxsize=256)
def _nvls_loops(offset: int, count: int, chunk: int, n_heads: int, last_chunk: int
                ) -> tuple[tuple[tuple[tuple[int, int], ...], ...], Stream, Stream]:
    """Single-node NVLS's loops, each its pieces (offset, nelem) one per head, and the scatter and
    gather streams they make: the same for every rank of the call, so made once."""
    loop = n_heads * chunk
    loops = []
    off = 0
    while off < count:
        if count - off < loop:
            chunk = last_chunk
        loops.append(tuple((offset + off + h * chunk, max(0, min(chunk, count - off - h * chunk)))
                           for h in range(n_heads)))
        off += loop
    pieces = [piece for each in loops for piece in each]
    switch = (NVLS_SWITCH,)
    scatter = tuple(Prim("nvlsScatter", o, n, (), switch) for o, n in pieces)
    gather = tuple(Prim("nvlsGather", o, n, switch) for o, n in pieces)
    return tuple(loops), Stream("scatter", scatter), Stream("gather", gather)


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
        last_chunk = align_up(div_up(rem, n_heads), _last_chunk_align(plan, 16))
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
    from ..graph.trees import dtree
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
            if len(ring) == 1:  # one rank: NCCL copies the input to the output (enqueue.cc ncclLaunchOneRank)
                programs.append(ChannelProgram(c, (Stream("ring", tuple(Prim("copy", o, n)
                                                                        for o, n in _chunks(plan, part))),)))
                continue
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
