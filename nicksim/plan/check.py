"""The symbolic check of a plan's programs.

`check_programs(call, programs)` executes every rank's programs symbolically: each connection is
a FIFO, each reduction tracks which ranks contributed, and the check fails unless every byte of
every rank's output is produced exactly once with the right contributions.
"""
from __future__ import annotations

from ..calls import Call
from ..errors import NickSimError, UsageError
from .chunking import NCCL_STEPS
from .collnet import COLLNET_SWITCH
from .pat import PAT_MAX_ROUND
from .programs import NVLS_SWITCH, ChannelProgram

__all__ = ["PlanCheckError", "check_programs"]


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
