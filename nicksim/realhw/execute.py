"""One rank's part of a collective: its channel programs run over its connections on real data.

`open_links(programs, rank, tag, protocol, step_nbytes, timeout_s, barrier, net)` sets up a
connection for every peer a rank's programs receive from or send to: shared memory inside a node
(each rank makes the segments it receives on, waits at `barrier` for every rank to have done so,
maps the segments it sends on, waits again, and drops the names: nothing remains under /dev/shm),
sockets or IB verbs to other nodes (net.py, net_ib.py). Each is laid out for its protocol: Simple's
slots, LL's and LL128's flagged lines (shm.py).

`run_programs(call, programs, rank, links, sendbuf, recvbuf, timeout_s)` runs the primitives of
plan.py's programs as the device code does (prims_simple.h, prims_ll.h, prims_ll128.h): a
primitive moves its elements in steps of at most the data a connection's slot carries; a rank
adds its own input to what it receives (the operator's pre-step on its input, kernels.py), writes
the output where the primitive copies, and forwards what it sends. One thread runs every channel
and stream of the rank in turn, each as far as its connections allow, as a GPU's CTAs would
proceed side by side; a rank that can move nothing for `timeout_s` raises ExecuteError naming the
stream and the peer it waits on.

Element offsets are the call's element space (plan.py): all_gather's output and reduce_scatter's
input are the concatenation of every rank's piece; sendrecv and alltoall move bytes, at the
offsets plan_p2p.py gives each piece.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..calls import Call
from ..errors import NickSimError, UsageError
from ..plan.programs import ChannelProgram, Prim
from .kernels import combine, post_op, pre_op, storage_dtype
from .net import NetPeers, ProxiedEnd, fifo_name
from .shm import ShmRing, segment_name

__all__ = ["ExecuteError", "HostOps", "HOST_OPS", "open_links", "run_programs", "links_of", "link_protocols", "check_runnable"]

_READS_INPUT = {"send", "copySend", "copy", "recvReduceSend", "recvReduceCopySend", "recvReduceCopy"}
_WRITES_OUTPUT = {"copySend", "copy", "recvReduceCopySend", "recvReduceCopy", "recvCopySend", "recv"}
_FINAL = {"copy", "recvReduceCopySend", "recvReduceCopy"}  # where a reduction's result is complete (postOp)
_KNOWN = _READS_INPUT | _WRITES_OUTPUT | {"recvCopySend"}
# Slots moved in one pass when that many are ready: fewer Python calls per byte, while half the
# FIFO still lets the peer work on the other half.
_BATCH_STEPS = 4
_ALIVE_EVERY_S = 0.02  # how often a waiting rank asks whether the job lost a rank

class ExecuteError(NickSimError):
    """A rank could not run its part: a peer stopped moving, or a program it cannot run."""

    kind = "execute"


def links_of(programs: tuple[ChannelProgram, ...], rank: int) -> tuple[set, set]:
    """The (channel, src, dst, conn) connections `rank` receives on and sends on."""
    recv, send = set(), set()
    for prog in programs:
        for stream in prog.streams:
            for prim in stream.prims:
                recv |= {(prog.channel, src, rank, prim.conn) for src in prim.recv_from if src >= 0}
                send |= {(prog.channel, rank, dst, prim.conn) for dst in prim.send_to if dst >= 0}
    return recv, send


def check_runnable(programs: tuple[ChannelProgram, ...], algorithm: str = "") -> None:
    """Raise UsageError where a program has a primitive the real backend cannot run: one that
    reaches a switch (NVLS, CollNet) rather than a rank, or one it does not know."""
    for prog in programs:
        for stream in prog.streams:
            for prim in stream.prims:
                if prim.op not in _KNOWN or any(p < 0 for p in prim.recv_from + prim.send_to):
                    what = f"{algorithm}'s " if algorithm else ""
                    raise UsageError(f"the real backend cannot run {what}{prim.op} on channel {prog.channel}: it "
                                     "reaches a switch (NVLink SHARP or CollNet), not a rank", "plan",
                                     "ring, tree and point-to-point plans (NCCL_ALGO=Ring or Tree)")


def link_protocols(programs: tuple[ChannelProgram, ...], rank: int, protocol: str) -> dict[tuple, str]:
    """The protocol of each (side, channel, src, dst, conn) connection: its streams' own, else the
    plan's `protocol` (a point-to-point transfer picks LL or Simple for itself)."""
    out = {}
    for prog in programs:
        for stream in prog.streams:
            for prim in stream.prims:
                for src in prim.recv_from:
                    out[("recv", prog.channel, src, rank, prim.conn)] = stream.protocol or protocol
                for dst in prim.send_to:
                    out[("send", prog.channel, rank, dst, prim.conn)] = stream.protocol or protocol
    return out


def _label(key: tuple) -> str:
    channel, src, dst, conn = key
    return f"channel {channel}, rank {src} -> rank {dst}" + (f" (connection {conn})" if conn else "")


def open_links(programs: tuple[ChannelProgram, ...], rank: int, tag: str, protocol: str, step_nbytes: dict[str, int],
               timeout_s: float, barrier, net: NetPeers | None = None, gpu=None) -> dict[tuple, ShmRing | ProxiedEnd]:
    """This rank's connections by ("recv" or "send", channel, src, dst, conn) — a rank sending to
    itself holds both ends — each a ShmRing laid out for its protocol (`link_protocols`; slots of
    step_nbytes[protocol]) on the same node, or a link to another node through `net` (sockets,
    or IB verbs where `net.ib` is set);
    `barrier()` returns once every rank has called it. With `gpu` (cuda_ipc.GpuRuntime), the
    rings on the node are CudaIpcRings in the GPUs' memory."""
    recv_keys, send_keys = links_of(programs, rank)
    protocols = link_protocols(programs, rank, protocol)

    def layout(side: str, key: tuple) -> tuple[int, str]:
        proto = protocols[(side, *key)]
        return step_nbytes[proto], proto

    def local(key: tuple) -> bool:
        return net is None or net.nodes[key[1]] == net.nodes[key[2]]

    links: dict[tuple, ShmRing | ProxiedEnd] = {}
    try:
        for key in sorted(k for k in recv_keys if local(k)):
            nbytes, proto = layout("recv", key)
            make = gpu.ring_create if gpu is not None else ShmRing.create
            links[("recv", *key)] = make(segment_name(tag, *key), nbytes, _label(key), proto)
        barrier()
        for key in sorted(send_keys):
            nbytes, proto = layout("send", key)
            if local(key):
                attach = gpu.ring_attach if gpu is not None else ShmRing.attach
                links[("send", *key)] = attach(segment_name(tag, *key), nbytes, _label(key), timeout_s, proto)
            else:
                links[("send", *key)] = net.connect_link(fifo_name(tag, key, "send"), nbytes, proto, _label(key),
                                                         tag, key, timeout_s)
        remote = {k for k in recv_keys if not local(k)}
        if remote:
            accepted = net.accept_links(tag, remote, timeout_s)
            for key in sorted(accepted):
                nbytes, proto = layout("recv", key)
                links[("recv", *key)] = net.receiving_link(fifo_name(tag, key, "recv"), nbytes, proto, _label(key),
                                                           accepted[key], timeout_s)
        for link in links.values():
            if isinstance(link, ProxiedEnd):
                link.finish()
        barrier()
    except BaseException:
        # A peer that dies while connections are made must leave no segment behind: this rank's
        # own, nor the ones the dead peer made for this rank to send on.
        for ring in links.values():
            ring.close()
        for key in send_keys:
            _unlink_quietly(segment_name(tag, *key))
        raise
    for key in recv_keys:
        links[("recv", *key)].unlink()
    return links


class HostOps:
    """A primitive's arithmetic on host buffers, with numpy (kernels.py). The GPU's counterpart,
    cuda_ipc.CudaOps, has the same methods over device buffers."""

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)

    def pre(self, own: np.ndarray, op: str, dtype: str, nranks: int) -> np.ndarray:
        return pre_op(own, op, dtype, nranks)

    def combine(self, a: np.ndarray, b: np.ndarray, op: str, dtype: str, out: np.ndarray) -> None:
        combine(a, b, op, dtype, out=out)

    def post(self, dest: np.ndarray, op: str, dtype: str, nranks: int) -> None:
        result = post_op(dest, op, dtype, nranks)
        if result is not dest:  # only an integer avg divides
            dest[:] = result

    def empty(self, n: int, storage) -> np.ndarray:
        return np.empty(n, storage)

    def fence(self) -> None:
        """Every write issued so far is visible to the peers (numpy's already are)."""


HOST_OPS = HostOps()


def _step_data_nbytes(channel: int, stream, rank: int, links: dict) -> int:
    """The data one step of `stream` carries: its connections' (they share the stream's protocol);
    a stream with none (a local copy) takes any step, so one of the largest."""
    for prim in stream.prims:
        for src in prim.recv_from:
            return links[("recv", channel, src, rank, prim.conn)].data_nbytes
        for dst in prim.send_to:
            return links[("send", channel, rank, dst, prim.conn)].data_nbytes
    return 1 << 22


def _unlink_quietly(name: str) -> None:
    try:
        os.unlink(f"/dev/shm/{name}")
    except FileNotFoundError:
        pass


@dataclass
class _Stream:
    """Where one stream stands: its channel, name, primitives, the one it is in and that one's step."""

    channel: int
    name: str
    prims: tuple[Prim, ...]
    step_elems: int
    index: int = 0
    step: int = 0


class _Buffers:
    """The call's element space over a rank's send and receive buffers."""

    def __init__(self, call: Call, rank: int, sendbuf: np.ndarray, recvbuf: np.ndarray):
        self.sendbuf, self.recvbuf = sendbuf, recvbuf
        own = rank * call.count
        self.in_base = own if call.collective == "all_gather" else 0
        self.out_base = own if call.collective == "reduce_scatter" else 0

    def input(self, offset: int, n: int) -> np.ndarray:
        return self.sendbuf[offset - self.in_base:offset - self.in_base + n]

    def output(self, offset: int, n: int) -> np.ndarray:
        return self.recvbuf[offset - self.out_base:offset - self.out_base + n]


class _P2pBuffers(_Buffers):
    """sendrecv's and alltoall's byte space (plan_p2p.py): the piece src -> dst sits at
    (src x nranks + dst) x piece for alltoall, src x piece for sendrecv; a rank sends from its
    input's piece for dst and receives into its output's piece for src. Both buffers are bytes."""

    def __init__(self, call: Call, sendbuf: np.ndarray, recvbuf: np.ndarray):
        self.sendbuf, self.recvbuf = sendbuf.view(np.uint8), recvbuf.view(np.uint8)
        self.piece = call.count * call.elem_nbytes
        self.alltoall = call.collective == "alltoall"
        self.nranks = call.nranks

    def _split(self, offset: int) -> tuple[int, int, int]:
        piece, within = divmod(offset, self.piece) if self.piece else (0, 0)
        src, dst = divmod(piece, self.nranks) if self.alltoall else (piece, 0)
        return src, dst, within

    def input(self, offset: int, n: int) -> np.ndarray:
        _, dst, within = self._split(offset)
        start = (dst * self.piece if self.alltoall else 0) + within
        return self.sendbuf[start:start + n]

    def output(self, offset: int, n: int) -> np.ndarray:
        src, _, within = self._split(offset)
        start = (src * self.piece if self.alltoall else 0) + within
        return self.recvbuf[start:start + n]


def run_programs(call: Call, programs: tuple[ChannelProgram, ...], rank: int, links: dict[tuple, ShmRing],
                 sendbuf: np.ndarray, recvbuf: np.ndarray, timeout_s: float,
                 spans: list | None = None, ops: HostOps = HOST_OPS, alive: Callable[[], None] | None = None) -> None:
    """Run `rank`'s programs for `call` to the end (see the module's docstring), the arithmetic
    done by `ops` (numpy here; CuPy kernels over device buffers and rings: cuda_ipc.py). Where
    `spans` is a list, each pass over slots appends (channel, stream, primitive, recv_from,
    send_to, first step, steps, start, end), times from time.perf_counter in seconds. While it
    waits on its peers it calls `alive()`, which raises where the job has lost a rank."""
    if call.info.p2p:  # moved as bytes, reduced never
        dtype, op, reducing, bufs = "uint8", "sum", False, _P2pBuffers(call, sendbuf, recvbuf)
    else:
        dtype, op, reducing = call.dtype, (call.redop if call.redop != "none" else "sum"), call.redop != "none"
        bufs = _Buffers(call, rank, sendbuf, recvbuf)
    elem = np.dtype(storage_dtype(dtype)).itemsize
    check_runnable(programs)
    streams = [_Stream(prog.channel, s.name, s.prims, max(1, _step_data_nbytes(prog.channel, s, rank, links) // elem))
               for prog in programs for s in prog.streams]
    progress = threading.Event()
    for link in links.values():
        if isinstance(link, ProxiedEnd):
            link.watch(progress)
    idle_since, idle_rounds, checked = time.monotonic(), 0, time.monotonic()
    while True:
        moved, active, local_wait = False, False, False
        progress.clear()  # before looking: a step the proxies hand over from here on sets it
        for stream in streams:
            while stream.index < len(stream.prims):
                active = True
                prim = stream.prims[stream.index]
                recvs = [links[("recv", stream.channel, src, rank, prim.conn)] for src in prim.recv_from]
                sends = [links[("send", stream.channel, rank, dst, prim.conn)] for dst in prim.send_to]
                step_elems = stream.step_elems
                prim_steps = max(1, -(-prim.nelem // step_elems))
                ready, free = [r.ready_steps() for r in recvs], [s.free_steps() for s in sends]
                steps = min([prim_steps - stream.step, _BATCH_STEPS] + ready + free)
                if steps <= 0:  # what blocked it, from the same look: a peer may post in between
                    local_wait = local_wait or _waits_on_a_peer_directly(recvs, ready, sends, free)
                    break
                start = time.perf_counter()
                _run_steps(prim, stream.step, steps, step_elems, recvs, sends, bufs, dtype, op, reducing,
                           call.nranks, timeout_s, ops)
                if spans is not None:
                    spans.append((stream.channel, stream.name, prim.op, prim.recv_from, prim.send_to,
                                  stream.step, steps, start, time.perf_counter()))
                moved = True
                stream.step += steps
                if stream.step >= prim_steps:
                    stream.index, stream.step = stream.index + 1, 0
        if not active:
            return
        if moved:
            idle_since, idle_rounds = time.monotonic(), 0
        elif time.monotonic() - idle_since > timeout_s:
            raise ExecuteError(_stuck(streams, rank, links, timeout_s), "run")
        else:
            idle_rounds += 1
            if not local_wait:
                progress.wait(_ALIVE_EVERY_S)  # every wait is on a proxy, which says when it moves
            elif idle_rounds < 2000:
                # A peer rank writes the slots directly and says nothing: it is usually a step
                # away, so give it the CPU first, then sleep as the wait grows.
                os.sched_yield()
            else:
                time.sleep(1e-4)
            if alive is not None and time.monotonic() - checked > _ALIVE_EVERY_S:
                checked = time.monotonic()
                alive()


def _waits_on_a_peer_directly(recvs: list, ready: list[int], sends: list, free: list[int]) -> bool:
    """Whether a blocked primitive waits on a connection no proxy serves (shared memory, CUDA IPC),
    by the readiness it was found blocked with (`ready`, `free`): read again, a peer that posted
    in the meantime would hide the wait, and the executor would sleep on a proxy's event that no
    proxy sets."""
    return any(not isinstance(r, ProxiedEnd) and not n for r, n in zip(recvs, ready)) or \
        any(not isinstance(s, ProxiedEnd) and not n for s, n in zip(sends, free))


def _run_steps(prim: Prim, step: int, steps: int, step_elems: int, recvs: list[ShmRing], sends: list[ShmRing],
               bufs: _Buffers, dtype: str, op: str, reducing: bool, nranks: int, timeout_s: float,
               ops: HostOps = HOST_OPS) -> None:
    """`steps` consecutive slots' worth of `prim` from its step `step`, in one pass: the result
    lands once, in the output where the primitive writes one, else straight in the first send's
    slots; the other sends copy it from there. The slots are posted, and the received ones given
    back, only once `ops.fence()` says the pass's writes are done."""
    lo = min(prim.nelem, step * step_elems)
    n = min(prim.nelem, lo + steps * step_elems) - lo
    offset = prim.offset + lo
    storage = storage_dtype(dtype)
    itemsize = np.dtype(storage).itemsize
    sources = []
    for ring in recvs:
        got = ring.recv(timeout_s, steps, n * itemsize).view(storage)
        if got.size != n:
            raise ExecuteError(f"{ring.label}: a step of {got.size} elements where {prim.op} at {offset} expects {n} "
                               "(the ranks run different plans)", "run")
        sources.append(got)
    if prim.op in _READS_INPUT and n:
        own = bufs.input(offset, n)
        sources.append(ops.pre(own, op, dtype, nranks) if reducing else own)
    in_slot = not (prim.op in _WRITES_OUTPUT and n) and bool(sends)
    if in_slot:
        dest = sends[0].reserve(n * itemsize, steps).view(storage)
    elif prim.op in _WRITES_OUTPUT and n:
        dest = bufs.output(offset, n)
    else:
        dest = ops.empty(n, storage)
    if n and sources:
        if len(sources) == 1:
            ops.copy(dest, sources[0])
        else:
            ops.combine(sources[0], sources[1], op, dtype, dest)
            for more in sources[2:]:
                ops.combine(dest, more, op, dtype, dest)
        if reducing and prim.op in _FINAL:
            ops.post(dest, op, dtype, nranks)
    for ring in sends[1 if in_slot else 0:]:
        if n:
            ops.copy(ring.reserve(n * itemsize, steps).view(storage), dest)
    ops.fence()
    for ring in sends:
        ring.post(n * itemsize, steps)
    for ring in recvs:
        ring.release(steps)


def _stuck(streams: list[_Stream], rank: int, links: dict[tuple, ShmRing], timeout_s: float) -> str:
    for stream in streams:
        if stream.index >= len(stream.prims):
            continue
        prim = stream.prims[stream.index]
        waits = [f"rank {src} to send" for src in prim.recv_from
                 if not links[("recv", stream.channel, src, rank, prim.conn)].can_recv()]
        waits += [f"rank {dst} to free a slot" for dst in prim.send_to
                  if not links[("send", stream.channel, rank, dst, prim.conn)].can_send()]
        return (f"rank {rank} moved nothing for {timeout_s:g} s: channel {stream.channel} {stream.name} stream, "
                f"{prim.op} of {prim.nelem} elements at {prim.offset}, waiting for {' and '.join(waits)}")
    return f"rank {rank} moved nothing for {timeout_s:g} s"
