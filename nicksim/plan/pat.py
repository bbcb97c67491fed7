"""PAT programs: the step schedule of NCCL's Parallel Aggregated Trees for all_gather and reduce_scatter.

PAT (NCCL 2.23+, one GPU per node unless NCCL_PAT_ENABLE forces it) connects each rank to the
ranks at distance 2^d, one connection per dimension d, and moves a channel's part chunk by chunk
through a binomial pattern in which pieces bound for one peer are aggregated into one buffer step
(`postFreq` pieces per step, written at `sendOffset`) before the step is posted. NCCL computes
the schedule on one thread (collectives.h PatRSAlgorithm / PatAGAlgorithm::getNextOp) and hands
steps round-robin to `parallelFactor` worker groups (reduce_scatter.h / all_gather.h), which run
prims_simple.h patReduce / patCopy. This module generates the same step sequence and turns it into
plan.py's primitives; plan.py's checker executes them against per-connection step buffers with
NCCL's accumulate-or-overwrite rule (accSize), so a wrong offset, step or post shows up as lost,
doubled or stuck data.

Modelled: the parallel schedule of NCCL 2.26-2.30 (its generator did not change over those
releases). 2.23-2.25 ran a sequential schedule with other step rules and are refused.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..constants.rules import releases_where, rules_for_minor
from ..errors import UsageError

__all__ = ["PAT_MAX_ROUND", "PatStep", "PatSlots", "PatShape", "PatOp", "pat_shape", "pat_rs_steps", "pat_ag_steps", "pat_ops"]

PAT_MAX_ROUND = 16  # NCCL_PAT_NWORKERS / WARP_SIZE: at most this many steps per round

NCCL_STEPS = 8
PAT_NWORKERS = 512  # collectives.h NCCL_PAT_NWORKERS (2.26-2.30)
WARP_SIZE = 32


@dataclass(frozen=True)
class PatStep:
    """One entry of NCCL's ncclPatStep ring: receive on dimension `recv_dim` (-1: none) at
    `recv_offset` of the step buffer, send on `send_dim` (-1: none, write the output) at
    `send_offset`, `step_offset` steps ahead of the connection's step; `inp_ix`/`out_ix` index the
    user buffers as NCCL's inpIx/outIx do. Skipped steps only keep the worker groups in lockstep."""

    recv_dim: int
    send_dim: int
    recv_offset: int
    send_offset: int
    step_offset: int
    post_recv: bool
    post_send: bool
    nelem: int
    inp_ix: int
    out_ix: int
    skipped: bool
    last: int


@dataclass(frozen=True)
class PatSlots:
    """The buffer coordinates a PAT primitive carries besides its peers: offsets inside a step of
    the receive and send connections, the step offset, whether it posts either side, and the
    index into the rank's own buffer (reduce_scatter: output, all_gather: input). Steps of one
    `round` (parallelFactor consecutive steps, one per worker group) run together between two
    barriers of all groups: they all see the connection steps and accSize values as the round
    found them, and their posts land after it."""

    round: int
    recv_offset: int
    send_offset: int
    step_offset: int
    post_recv: bool
    post_send: bool
    local_ix: int
    step_elems: int


@dataclass(frozen=True)
class PatShape:
    """The constants a PAT generator derives from the part it runs (PatRSAlgorithm's constructor)."""

    nranks_pow2: int
    agg_factor: int
    agg_delta: int
    post_freq: int
    parallel_factor: int


def _log2_up(n: int) -> int:
    return (n - 1).bit_length() if n > 1 else 0


def _first_bit(i: int, none: int) -> int:
    """Index of the lowest set bit of i; `none` when i is 0 (ffs - 1)."""
    return (i & -i).bit_length() - 1 if i else none


def _mirror(i: int, limit: int, inverted: bool) -> int:
    """Bit-reverse i within log2(limit) bits; `inverted` reverses the complement (mirrorInvert)."""
    out, mask, imask = 0, 1, limit // 2
    while mask < limit:
        if bool(i & mask) != inverted:
            out += imask
        mask <<= 1
        imask >>= 1
    return out


def _new_peer(i: int, pow2: int) -> bool:
    """True when only the upper bits of i are set within pow2 (8, 12, 14, 15 for 16)."""
    return bin((i ^ (pow2 - 1)) + 1).count("1") == 1


def pat_shape(chunk_count: int, elem_nbytes: int, part_count: int, nranks: int,
              max_parallel: int = PAT_NWORKERS // WARP_SIZE) -> PatShape:
    """Aggregation of small parts: while two parts' worth still fit a chunk, aggregate twice as many
    peers per step (postFreq), then deepen aggregation over the NCCL_STEPS buffer steps."""
    agg_delta = pow2 = 1 << _log2_up(nranks)
    agg = 1
    step_nbytes = chunk_count * elem_nbytes
    while step_nbytes // (part_count * elem_nbytes * agg) >= 2 and agg < nranks // 2:
        agg *= 2
        agg_delta //= 2
    post_freq = agg
    parallel = min(max_parallel, post_freq)
    depth = NCCL_STEPS
    while depth > 1 and agg < nranks // 2:
        depth //= 2
        agg *= 2
        agg_delta //= 2
    return PatShape(pow2, agg, agg_delta, post_freq, parallel)


class _RsSchedule:
    """PatRSAlgorithm's state machine: phases 0 (send own data), 1 (receive, reduce, forward),
    2-3 (the aggregated tail), 4 (receive the result into the output)."""

    def __init__(self, shape: PatShape, offset: int, end: int, count: int, chunk_count: int, rank: int, nranks: int):
        self.s = shape
        self.offset, self.end, self.count, self.chunk = offset, end, count, chunk_count
        self.rank, self.nranks = rank, nranks
        self._reset()

    def _reset_a(self):
        self.a = 0
        self.send_skipped = self.step_offset = 0
        self.last_a = self.s.agg_factor
        if self.phase >= 2:
            self.last_a //= 2 * self.scale
        if self.phase == 4:
            self.last_a = 1

    def _reset(self):
        self.nelem = min(self.chunk, self.end - self.offset)
        self.phase, self.scale = 0, 1
        self.as_ = self.s.agg_delta - 1
        self._reset_a()

    def _closes_post(self, a: int) -> bool:
        return (a % self.s.post_freq) + 1 >= self.s.post_freq or a == self.last_a - 1

    def next(self) -> PatStep:
        s_, n, a, nelem, pf = self.s, self.nranks, self.a, self.nelem, self.s.post_freq
        f = dict(recv_dim=-1, send_dim=-1, recv_offset=-1, send_offset=-1, step_offset=self.step_offset,
                 post_recv=False, post_send=False, nelem=nelem, inp_ix=0, out_ix=self.offset)
        skip = False
        if a >= self.last_a:
            skip = True
        elif self.phase == 0:
            s = _mirror(a, self.last_a, True) * s_.agg_delta + self.as_
            skip = s >= n
            f.update(send_dim=0, out_ix=0, inp_ix=((self.rank + s) % n) * self.count + self.offset,
                     send_offset=(a % pf) * nelem, post_send=self._closes_post(a))
        elif self.phase == 1:
            s = _mirror(a, self.last_a, True) * s_.agg_delta + self.as_
            skip = s >= n
            recv_dim = _first_bit(s, s_.nranks_pow2)
            closes = self._closes_post(a)
            f.update(recv_dim=recv_dim, send_offset=(a % pf) * nelem, recv_offset=(a % pf) * nelem,
                     post_send=recv_dim == 0 and closes, post_recv=closes)
            s -= 1 << recv_dim
            f["inp_ix"] = ((self.rank + n + s) % n) * self.count + self.offset
            f["send_dim"] = _first_bit(s, s_.nranks_pow2) if s else -1
            if f["send_dim"] == -1:
                f["send_offset"] = -1
            elif self.as_ - (1 << recv_dim) == 0:
                if _new_peer(a, s_.agg_factor):
                    self.send_skipped = a
                    f["step_offset"] = self.step_offset = 0
                f["send_offset"] = ((a - self.send_skipped) % pf) * nelem
            if s < n and skip:
                f.update(recv_dim=-1, recv_offset=-1, post_recv=False)
                skip = False
            if recv_dim > 0 and ((a - self.send_skipped) % pf) + 1 >= pf and not skip:
                self.step_offset += 1
        elif self.phase == 2:
            s = (2 * _mirror(a, self.last_a, True) + 1) * self.scale * s_.agg_delta + 1
            skip = s >= n
            f.update(recv_dim=0, post_send=a == self.last_a - 1)
            s -= 1
            if s < n and skip:
                f.update(recv_dim=-1, recv_offset=-1)
                skip = False
            elif not skip:
                fo = a + s_.agg_factor - s_.agg_factor // self.scale
                f["post_recv"] = (fo + 1) % pf == 0
                f["recv_offset"] = (fo % pf) * nelem
            f["inp_ix"] = ((self.rank + n + s) % n) * self.count + self.offset
            f["send_dim"] = _first_bit(s, s_.nranks_pow2) if s else -1
            f["post_send"] = f["post_send"] or (a + 1) % pf == 0
            f["send_offset"] = (a % pf) * nelem
        elif self.phase == 3:
            s = (2 * _mirror(a, self.last_a, True) + 1) * self.scale * s_.agg_delta
            skip = s >= n
            recv_dim = _first_bit(s, s_.nranks_pow2)
            f.update(recv_dim=recv_dim, post_recv=a == self.last_a - 1 or (a + 1) % pf == 0,
                     recv_offset=(a % pf) * nelem)
            s -= 1 << recv_dim
            f["inp_ix"] = ((self.rank + n + s) % n) * self.count + self.offset
            f["send_dim"] = _first_bit(s, s_.nranks_pow2) if s else -1
            if s < n and skip:
                f.update(recv_dim=-1, recv_offset=-1, post_recv=False)
                skip = False
            if _new_peer(a, s_.agg_factor // (2 * self.scale)):
                self.send_skipped = a
                f["step_offset"] = self.step_offset = 0
            fo = a - self.send_skipped
            if (fo % pf) + 1 >= pf and not skip:
                self.step_offset += 1
            f["send_offset"] = (fo % pf) * nelem if f["send_dim"] >= 0 else -1
        elif self.phase == 4:
            f.update(recv_dim=0, inp_ix=self.rank * self.count + self.offset,
                     recv_offset=((s_.agg_factor - 1) % pf) * nelem, post_recv=True)
            self.offset += self.chunk
        last = self._advance()
        return PatStep(skipped=skip, last=last, **f)

    def _advance(self) -> int:
        self.a += 1
        if self.a >= self.last_a and self.a >= self.s.parallel_factor:
            p = self.phase
            if p == 1:
                self.as_ -= 1
            if p == 3:
                self.scale *= 2
            if p == 0:
                self.phase = (2 if self.s.agg_factor > 1 else 4) if self.as_ == 1 else 1
            elif p == 1:
                self.phase = 0 if self.as_ % 2 == 1 else 1
            elif p == 2:
                self.phase = 3
            elif p == 3:
                self.phase = 2 if self.scale < self.s.agg_factor else 4
            else:
                self.phase = 5
            if p == 4:
                if self.offset >= self.end:
                    return 2
                self._reset()
            else:
                self._reset_a()
        elif self.phase == 4 and self.offset >= self.end:
            return 1
        return 0


class _AgSchedule:
    """PatAGAlgorithm's state machine: phase 2 (the aggregated head), 1 (receive and forward),
    0 (receive the last pieces)."""

    def __init__(self, shape: PatShape, offset: int, end: int, count: int, chunk_count: int, rank: int, nranks: int):
        self.s = shape
        self.offset, self.end, self.count, self.chunk = offset, end, count, chunk_count
        self.rank, self.nranks = rank, nranks
        self.as_dim = _log2_up(shape.agg_delta)
        self._reset()

    def _reset_a(self):
        self.a = 0
        self.last_a = self.s.agg_factor
        if self.phase >= 2:
            self.last_a //= 2 * self.scale

    def _reset(self):
        self.nelem = min(self.chunk, self.end - self.offset)
        self.scale = self.s.agg_factor // 2
        self.phase = 2 if self.scale else 1
        self.v = 0
        self.bit_count = [self.as_dim - i for i in range(self.as_dim)]
        self.bit_zero_step = [1] * self.as_dim
        self.as_ = self._next_as()
        self._reset_a()

    def _next_as(self) -> int:
        """The next aggregated step: a Gray-code-like walk over the low asDim bits (nextAs)."""
        for d in range(self.as_dim):
            p = 1 << d
            self.bit_count[d] -= 1
            if self.bit_count[d] == 0:
                self.v ^= p
                self.bit_count[d] = p
                if self.v & p == 0:
                    self.bit_count[d] += _first_bit(self.bit_zero_step[d], self.as_dim) - 1
                    if self.bit_count[d] == 0:
                        self.v ^= p
                        self.bit_count[d] = p
                    self.bit_zero_step[d] += 1
        return self.v

    def next(self) -> PatStep:
        s_, n, a, nelem, pf = self.s, self.nranks, self.a, self.nelem, self.s.post_freq
        f = dict(recv_dim=-1, send_dim=-1, recv_offset=-1, send_offset=-1, step_offset=0,
                 post_recv=False, post_send=False, nelem=nelem, inp_ix=self.offset, out_ix=0)
        skip = False
        if a >= self.last_a:
            skip = True
        elif self.phase == 0:
            s = a * s_.agg_delta + self.as_
            skip = s >= n
            f.update(out_ix=((self.rank + s) % n) * self.count + self.offset, recv_dim=0, inp_ix=0,
                     recv_offset=(a % pf) * nelem,
                     post_recv=a % pf == pf - 1 or (a + 1) * s_.agg_delta + self.as_ >= n)
        elif self.phase == 1:
            s = a * s_.agg_delta + self.as_
            skip = s >= n
            send_dim = _first_bit(s, s_.nranks_pow2)
            s -= 1 << send_dim
            f["out_ix"] = ((self.rank + n + s) % n) * self.count + self.offset
            recv_dim = _first_bit(s, s_.nranks_pow2) if s else -1
            f.update(send_dim=send_dim, recv_dim=recv_dim, send_offset=(a % pf) * nelem,
                     recv_offset=(a % pf) * nelem,
                     post_send=a % pf == pf - 1 or (a + 1) * s_.agg_delta + self.as_ >= n,
                     post_recv=send_dim == 0 and (a % pf == pf - 1 or (a + 1) * s_.agg_delta + self.as_ - 1 >= n),
                     step_offset=0 if send_dim == 0 else a // pf)
            if recv_dim == -1:
                f.update(recv_offset=-1, post_recv=False)
            elif self.as_ - (1 << send_dim) == 0:
                fo = (a * s_.agg_delta) >> (recv_dim + 1)
                f.update(recv_offset=(fo % pf) * nelem,
                         post_recv=send_dim == 0 and (fo % pf == pf - 1 or (((fo + 1) * 2) + 1) << recv_dim >= n),
                         step_offset=0 if send_dim == 0 else fo // pf)
            if s < n and send_dim == 0 and skip:
                f.update(send_dim=-1, send_offset=-1, post_send=False)  # still receive once
                skip = False
        elif self.phase == 2:
            s = (2 * a + 1) * self.scale * s_.agg_delta
            skip = s >= n
            send_dim = _first_bit(s, s_.nranks_pow2)
            s -= 1 << send_dim
            f.update(send_dim=send_dim, send_offset=(a % pf) * nelem, step_offset=a // pf,
                     post_send=a % pf == pf - 1 or (2 * (a + 1) + 1) * self.scale * s_.agg_delta >= n,
                     out_ix=((self.rank + n + s) % n) * self.count + self.offset)
            recv_dim = _first_bit(s, s_.nranks_pow2) if s else -1
            f["recv_dim"] = recv_dim
            if recv_dim >= 0:
                fo = (a * 2 * self.scale * s_.agg_delta) >> (recv_dim + 1)
                f.update(recv_offset=(fo % pf) * nelem, step_offset=fo // pf)
        last = self._advance()
        return PatStep(skipped=skip, last=last, **f)

    def _advance(self) -> int:
        self.a += 1
        pf = self.s.parallel_factor
        if self.a >= self.last_a and self.a >= pf:
            p = self.phase
            if p == 2:
                self.scale //= 2
                self.phase = 2 if self.scale else 1
            elif p == 1:
                self.phase = 0 if self.as_ % 2 == 1 else 1
            else:
                self.phase = 1
            if p == 0 or (p == 1 and self.as_ % 2 == 0):
                self.as_ = self._next_as()
            if p == 0 and self.as_ == self.s.agg_delta // 2:
                self.offset += self.chunk
                if self.offset >= self.end:
                    return 2
                self._reset()
            else:
                self._reset_a()
        elif (self.phase == 0 and self.as_ == 1 and self.offset + self.chunk >= self.end
              and self.a - 1 >= ((self.last_a - 1) // pf) * pf):
            return 1
        return 0


def _steps(schedule) -> list[PatStep]:
    steps = []
    while True:
        step = schedule.next()
        steps.append(step)
        if step.last == 2:
            return steps


def pat_rs_steps(chunk_count: int, elem_nbytes: int, offset: int, part_count: int, count: int, rank: int,
                 nranks: int) -> tuple[PatShape, list[PatStep]]:
    """Every step PatRSAlgorithm hands out for one channel's part, skipped ones included."""
    shape = pat_shape(chunk_count, elem_nbytes, part_count, nranks)
    return shape, _steps(_RsSchedule(shape, offset, offset + part_count, count, chunk_count, rank, nranks))


def pat_ag_steps(chunk_count: int, elem_nbytes: int, offset: int, part_count: int, count: int, rank: int,
                 nranks: int) -> tuple[PatShape, list[PatStep]]:
    """Every step PatAGAlgorithm hands out for one channel's part, skipped ones included."""
    shape = pat_shape(chunk_count, elem_nbytes, part_count, nranks)
    return shape, _steps(_AgSchedule(shape, offset, offset + part_count, count, chunk_count, rank, nranks))


@dataclass(frozen=True)
class PatOp:
    """One non-skipped step as a primitive: `op` (patReduce or patCopy) over `nelem` elements at
    `offset` of the call's element space, from `recv_from`, to `send_to`, with its buffer
    coordinates."""

    op: str
    offset: int
    nelem: int
    recv_from: tuple[int, ...]
    send_to: tuple[int, ...]
    slots: PatSlots


def pat_ops(call, part, step_nbytes: int, rank: int, version_minor: int) -> list[PatOp]:
    """The primitives `rank` runs for `part` of a PAT plan of `call`, in schedule order. Worker
    group g runs steps g, g + parallelFactor, ... and every step ends on a barrier of all groups
    (prims_simple.h patBarrier), so step i belongs to round i // parallelFactor. Skipped steps
    are dropped, as they move nothing."""
    if not rules_for_minor(version_minor).pat_programs_modelled:
        raise UsageError(f"PAT programs of NCCL 2.{version_minor} are not modelled", "--nccl-version",
                         f"{releases_where('pat_programs_modelled')} (2.23-2.25 ran an older PAT schedule)")
    n = call.nranks
    rs = call.collective == "reduce_scatter"
    steps_of = pat_rs_steps if rs else pat_ag_steps
    shape, steps = steps_of(part.chunk_count, call.elem_nbytes, part.offset, part.count, call.count, rank, n)
    step_elems = step_nbytes // call.elem_nbytes
    ops = []
    for i, st in enumerate(steps):
        if st.skipped:
            continue
        if rs:  # receive from rank - 2^d, send to rank + 2^d (prims_simple.h primsModePatRs)
            recv = ((rank - (1 << st.recv_dim)) % n,) if st.recv_dim >= 0 else ()
            send = ((rank + (1 << st.send_dim)) % n,) if st.send_dim >= 0 else ()
            op, offset, local = "patReduce", st.inp_ix, st.out_ix
        else:  # all_gather: receive from rank + 2^d, send to rank - 2^d
            recv = ((rank + (1 << st.recv_dim)) % n,) if st.recv_dim >= 0 else ()
            send = ((rank - (1 << st.send_dim)) % n,) if st.send_dim >= 0 else ()
            op, offset, local = "patCopy", st.out_ix, st.inp_ix
        slots = PatSlots(i // shape.parallel_factor, st.recv_offset, st.send_offset, st.step_offset, st.post_recv and bool(recv),
                         st.post_send and bool(send), local, step_elems)
        ops.append(PatOp(op, offset, max(0, st.nelem), recv, send, slots))
    return ops
