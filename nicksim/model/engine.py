"""The DES engine: a plan's primitive programs executed over the modelled fabric, in simulated time.

`simulate(des_setup(job, ...), call)` promises the time NCCL's kernel would take for `call` on
`job` if the machine were the fabric (fabric.py), the costs the parameter set (hwparams.py) and the
faults and stragglers those of the setup (faults.py): every rank runs, on
every channel the plan uses, the primitive streams `rank_programs` gives (one SimPy process per
stream, all starting after the kernel launch); each primitive moves its chunk in slices (Simple
ring: chunkSteps / sliceSteps of them, one otherwise); a slice waits for its data from each peer
and for a free slot in each peer's buffer (NCCL_STEPS slots of the step size, so at most NCCL_STEPS
/ sliceSteps slices in flight per connection), then crosses, as one transfer, the CTA's link and
every link its transport uses (routes.py), carrying the protocol's wire bytes, plus the hop's step
latency. NVLS chunks go through the NVSwitch: a head's in-switch reduction reads the chunk from
every GPU of the node and its multicast writes it to all of them, at `nvls_efficiency` of the
ports; CollNet chunks go up a head's NIC to the first switch, which reduces once every node's head
has sent it, and come back down. Every step a rank sends over the network is first posted by its
one proxy thread, and taken by the receiver's before the receiving GPU sees it (proxy.py).
Point-to-point calls run plan_p2p.py's programs the same way.

Large calls are simulated in coarser chunks (at most `max_chunks` per channel, the chunk grown by
a whole factor): the bottleneck and the overlap stay, the event count stays bounded. A ring longer
than `max_steps` steps per loop runs them in blocks (coarse_steps): a block moves its steps' bytes,
pays each step's latency, posts and takes one after the other as a chain of steps would; close to,
not exactly, every step: the chain's ends differ (docs/des.md). Channels that
move in lockstep are simulated once, and so are nodes that behave alike (symmetry.py); both are
exact, and `merge=False` / `collapse=False` turn them off. When a run ends with streams still
waiting, or at the watchdog limit, the result carries a HangReport naming each blocked stream, the
primitive it is in and what it waits for, and the transfers stalled on dead links.

Where NCCL's IB transport carries the network (ib.py), a connection's bytes take the spine routes
its queue pairs or adaptive routing give them (a share of each), and a connection whose data got
stuck on a dead network link errors out as its queue pair would (status 12, retry exceeded)
NCCL_IB_RETRY_CNT + 1 local ACK timeouts later: NCCL then aborts, so the run ends there (when that
comes before the watchdog limit) and the HangReport names each such connection and when it failed.
"""
from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import wraps
from itertools import chain
from operator import attrgetter
from typing import NamedTuple

import numpy as np
import simpy

from ..calls import NCCL_FUNC, Call
from ..errors import UsageError
from ..constants.tuning_tables import tuning_tables
from ..plan.build import call_plan, job_programs
from ..plan.chunking import NCCL_STEPS, Plan, plan_call
from ..plan.collnet import COLLNET_SWITCH
from ..plan.p2p import p2p_setup
from ..plan.pat import PAT_MAX_ROUND
from ..plan.programs import NVLS_SWITCH
from ..tuning.cost import latency_intra_steps, ll_max_bw_gbps, net_overhead_us, time_model_rules
from .fabric import Fabric, build_fabric, trunk_route
from .clock import run_until
from .faults import Fault, parse_fault, parse_straggler
from .hwparams import DesParams, des_params, wire_nbytes
from .ib import ERROR_LINK_KINDS, ib_transport
from .mirrors import Asymmetric, Mirrors
from .network import FluidNetwork
from .proxy import ProxyThreads
from .routes import HW_NET, HW_NVLINK, HW_PCI, NET_CONN_SLOTS, Router
from .symmetry import COLLAPSIBLE, Collapse, node_classes
from .translation import Translation, node_shift, transfers_key, transfers_shift

__all__ = ["DesSetup", "DesRun", "Blocked", "Stall", "NetError", "HangReport", "des_setup", "simulate",
           "simulate_sequences", "coarse_plan", "coarse_steps", "default_params", "WATCHDOG_US"]

WATCHDOG_US = 600e6  # PyTorch's default process-group timeout, 600 s

_GRAPH_OF = {"Ring": "ring", "Tree": "tree", "NVLS": "nvls", "NVLSTree": "nvls",
             "CollNetDirect": "collnet_direct", "CollNetChain": "collnet_chain", "P2P": "p2p"}
_REDUCING_NVLS = ("nvlsReduceMulticast", "nvlsReduceSend")
_LINE_NBYTES = {"LL": 16, "LL128": 128}  # a line: data and flag arrive together
# A primitive but its offset (what channels in lockstep share), and what its route depends on.
_PRIM_SHAPE = attrgetter("op", "nelem", "recv_from", "send_to", "conn", "pat", "steps")
_PRIM_KIND = attrgetter("op", "recv_from", "send_to")


@dataclass(frozen=True)
class DesSetup:
    """What stays fixed across the calls of one DES run: the job, its fabric, the parameter set,
    the faults, the ranks that start late (rank -> us), the watchdog limit, and whether to
    record a trace."""

    job: object
    fabric: Fabric
    params: DesParams
    faults: tuple[Fault, ...] = ()
    stragglers: tuple[tuple[int, float], ...] = ()
    timeout_us: float = WATCHDOG_US
    trace: bool = False
    # What is derived once per setup and reused by every call (node classes per algorithm and channels).
    derived: dict = field(default_factory=dict, compare=False, repr=False)


def des_setup(job, params: DesParams | None = None, faults: Sequence[str] = (), stragglers: Sequence[str] = (),
              timeout_us: float = WATCHDOG_US, trace: bool = False) -> DesSetup:
    """The setup for `job`: default parameters unless given, `--fault` and `--straggler` texts parsed
    against its fabric."""
    fabric = build_fabric(job.cluster)
    parsed = tuple(parse_fault(text, fabric) for text in faults)
    late = tuple(parse_straggler(text, job.nranks) for text in stragglers)
    return DesSetup(job, fabric, params or default_params(job), parsed, late, timeout_us, trace)


@dataclass(frozen=True)
class Blocked:
    """One stream that could not go on: where it stands and what it waits for."""

    rank: int
    channel: int
    stream: str
    prim_index: int
    op: str
    offset: int
    nelem: int
    slice_index: int
    waits_for: str
    call_index: int = 0    # the call's place in the rank's own sequence (NCCL's opCount)
    collective: str = ""
    nbytes: int = 0


@dataclass(frozen=True)
class Stall:
    """A transfer that stopped on a link of no capacity: who sent it to whom, on which channel."""

    src: int
    dst: tuple[int, ...]
    channel: int
    link: str


@dataclass(frozen=True)
class NetError:
    """A network connection whose queue pair gave up, as NCCL's IB transport reports it ("NET/IB :
    Got completion from peer ... with status=12", IBV_WC_RETRY_EXC_ERR): the sending rank, its peer
    and channel, the dead link its data got stuck on and since when, when the error comes (us), and
    the NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT that timed it (ib.py)."""

    rank: int
    peer: int
    channel: int
    link: str
    stuck_us: float
    time_us: float
    timeout: int
    retry_cnt: int


@dataclass(frozen=True)
class HangReport:
    """Nothing could progress, or the watchdog limit passed: the streams left blocked and the
    transfers stalled on dead links, at the simulated time it became clear. `ranks` are the ranks
    on both sides of the stalled transfers (where a fault is the cause)."""

    time_us: float
    blocked: tuple[Blocked, ...]
    stalls: tuple[Stall, ...] = ()
    watchdog: bool = False
    last_progress_us: float = 0.0
    done_ranks: tuple[int, ...] = ()  # ranks that finished every call they made
    # Connections stuck on a dead network link, with when their queue pairs error out: those that
    # did by `time_us` (NCCL aborted there), else those that would have after it.
    net_errors: tuple[NetError, ...] = ()

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted({r for s in self.stalls for r in (s.src, *s.dst)}))

    @property
    def aborted(self) -> bool:
        """Whether a queue pair's completion error ended the run (before the watchdog limit)."""
        return any(e.time_us <= self.time_us for e in self.net_errors)

    def lines(self, per_rank: int = 1) -> list[str]:
        """The report for people: stalled transfers by link and pair (their channels listed), the
        connections whose queue pairs errored out (status 12), then per blocked rank how many
        streams wait and what the first `per_rank` of them wait for."""
        why = "the watchdog limit passed" if self.watchdog else \
            "NCCL aborted on a NET/IB completion error" if self.aborted else "nothing can progress"
        ranks = sorted({b.rank for b in self.blocked})
        out = [f"hang: {len(self.blocked)} stream(s) of {len(ranks)} rank(s) blocked; last progress at "
               f"{self.last_progress_us:.1f} us, reported at {self.time_us:.1f} us ({why})"]
        pairs: dict[tuple, list[int]] = {}
        for stall in self.stalls:
            pairs.setdefault((stall.link, stall.src, stall.dst), []).append(stall.channel)
        for (link, src, dst), channels in sorted(pairs.items()):
            out.append(f"  stalled on {link} (carries nothing): rank {src} -> rank {', '.join(map(str, dst))}, "
                       f"channels {', '.join(map(str, sorted(channels)))}")
        out += self._error_lines()
        for rank in ranks:
            mine = sorted((b for b in self.blocked if b.rank == rank), key=_telling)
            for b in mine[:per_rank]:
                out.append(f"  rank {rank}: call {b.call_index} ({b.collective}, {b.nbytes} bytes), {len(mine)} "
                           f"stream(s) blocked, e.g. channel {b.channel} {b.stream}: {b.op} #{b.prim_index} "
                           f"(elements {b.offset}+{b.nelem}) waits for {b.waits_for}")
        if self.done_ranks:
            out.append(f"  done with all their calls: rank {', '.join(map(str, self.done_ranks))}")
        return out

    def _error_lines(self) -> list[str]:
        """One line per sender and peer whose connections' queue pairs errored out (or would have,
        after the watchdog limit): the first such error, the channels, where the data got stuck."""
        reached = [e for e in self.net_errors if e.time_us <= self.time_us]
        pairs: dict[tuple[int, int], list[NetError]] = {}
        for e in reached or self.net_errors:
            pairs.setdefault((e.rank, e.peer), []).append(e)
        out = []
        for (rank, peer), errors in sorted(pairs.items(), key=lambda kv: (min(e.time_us for e in kv[1]), kv[0])):
            first = min(errors, key=lambda e: (e.time_us, e.channel))
            when = f"at {first.time_us / 1e6:.6g} s" if reached else \
                f"would come at {first.time_us / 1e6:.6g} s, after the watchdog limit"
            channels = ", ".join(map(str, sorted({e.channel for e in errors})))
            out.append(f"  rank {rank}: NET/IB completion error status=12 (retry exceeded) on the connection to "
                       f"rank {peer} {when} (NCCL_IB_TIMEOUT={first.timeout}, NCCL_IB_RETRY_CNT={first.retry_cnt}; "
                       f"channels {channels}; stuck on {first.link} since {first.stuck_us:.1f} us)")
        return out


class _PrimSetup(NamedTuple):
    """What every slice of one primitive shares (`_Sim._prim_setup`)."""

    targets: list[int]                 # the ranks it sends to (the switches left out)
    route: tuple[int, ...]
    hw: str                            # the hardware row that prices its steps
    route_lat: float | None
    shares: tuple[tuple[int, float], ...]
    net_out: set[int]                  # stand-ins of the peers it reaches over the network
    posts: tuple[int, ...]             # the proxy threads that post its network steps
    by_message: bool                   # its route moves on per message (round-robin queue pairs)
    peers_out: tuple[int, ...]
    costly: tuple[tuple[int, float], ...]  # multimem links and what a byte costs on them
    lat: float                         # its step latency
    peers_in: tuple[int, ...]          # last: the one field that depends on the senders (_out_setup)


@dataclass(frozen=True)
class _Shape:
    """What `_Sim._route` reads of a primitive."""

    op: str
    recv_from: tuple[int, ...]
    send_to: tuple[int, ...]
    steps: int = 1


def _telling(blocked: Blocked) -> int:
    """Streams stuck on the network first, then on a peer, then on anything else."""
    what = blocked.waits_for
    return 0 if what == "its transfer" else 1 if "rank" in what else 2


@dataclass(frozen=True)
class DesRun:
    """One simulated call: its plan as run, the time to the last stream's end, the bytes, busy time
    and capacity of every link that carried anything (name -> value), the hang if there was one,
    and the factor the chunks were grown by (coarse_plan)."""

    plan: Plan
    time_us: float
    link_nbytes: dict[str, float]
    link_busy_us: dict[str, float]
    link_bw_gbps: dict[str, float]
    hang: HangReport | None = None
    chunk_factor: int = 1
    channel_end_us: dict[int, float] = field(default_factory=dict)
    spans: tuple = ()  # (rank, channel, stream, op, start_us, end_us) per slice, with DesSetup.trace
    link_series: tuple = ()  # (time_us, link name, GB/s) at every change, with DesSetup.trace
    n_transfers: int = 0     # slices moved (the event count grows with it)
    n_streams: int = 0       # streams simulated (after merging channels in lockstep)
    n_node_classes: int = 0  # nodes simulated (after collapsing nodes that behave alike)
    exact: bool = True       # False where each channel's nodes were collapsed on their own (symmetry.py)
    n_events: int = 0        # events the SimPy loop scheduled (what a bare loop of as many would cost)
    step_factor: int = 1     # ring steps run as one (coarse_steps); 1 where every step ran


def default_params(job) -> DesParams:
    """The parameter set for `job`'s GPUs and NCCL release."""
    system = job.paths.system
    sm = min(system.nodes[g].gpu.sm for g in system.gpus())
    tables = tuning_tables(system.rules.version)
    net_latency_us = max((g.latency_inter for g in job.graphs.values()), default=0.0)
    return des_params(tables, sm, net_overhead_us(job.comm.inputs, job.params),
                      ll_max_bw_gbps(tables, job.comm.inputs), float(net_latency_us))


def coarse_steps(programs: dict[int, tuple], max_steps: int) -> tuple[dict[int, tuple], int]:
    """`programs` with every run of consecutive primitives that differ only in their offset (a
    ring's n-2 steps of one loop) cut into blocks of one whole number k of them, each block one
    primitive over k steps' elements that stands for k steps (Prim.steps), k the least so that no
    run keeps more than `max_steps` blocks; and k (1, programs unchanged, when no run is longer).
    Every rank's runs are cut alike, so a connection's blocks still pair sender and receiver."""
    k = _step_factor(programs, max_steps)
    return (programs, 1) if k == 1 else (_cut(programs, k), k)


def _step_factor(programs: dict[int, tuple], max_steps: int) -> int:
    runs = [length for progs in programs.values() for prog in progs for stream in prog.streams
            for length in _run_lengths(stream.prims)]
    return max(1, -(-max(runs, default=0) // max(1, max_steps)))


def _cut(programs: dict[int, tuple], k: int) -> dict[int, tuple]:
    return {rank: tuple(replace(prog, streams=tuple(stream._replace(prims=_blocks(stream.prims, k))
                                                    for stream in prog.streams))
                        for prog in progs)
            for rank, progs in programs.items()}


def _blocked_programs(job, plan: Plan, ranks, keep, max_steps: int) -> tuple[dict[int, tuple], int]:
    """coarse_steps over the programs of `ranks` (those `keep` leaves of each), built and cut one
    rank at a time: a ring of 8192 ranks runs 8190 steps a loop on each of 32 channels, and every
    rank's primitives built at once before cutting them would take gigabytes."""
    k = 1
    while True:
        programs = {}
        for rank in ranks:
            progs = {rank: keep(rank, job_programs(job, plan, [rank])[rank])}
            need = _step_factor(progs, max_steps)
            if need > k:  # a longer run than the ranks before had: cut them all anew
                break
            programs.update(_cut(progs, k) if k > 1 else progs)
        else:
            return programs, k
        k = need


def _run_lengths(prims) -> list[int]:
    lengths, last = [], None
    for prim in prims:
        shape = _PRIM_SHAPE(prim)
        if shape == last:
            lengths[-1] += 1
        else:
            lengths.append(1)
            last = shape
    return lengths


def _blocks(prims, k: int) -> tuple:
    out, index = [], 0
    for length in _run_lengths(prims):
        for start in range(index, index + length, k):
            n = min(k, index + length - start)
            first = prims[start]
            out.append(first if n == 1 else first._replace(nelem=first.nelem * n, steps=n))
        index += length
    return tuple(out)


def coarse_plan(plan: Plan, max_chunks: int) -> tuple[Plan, int]:
    """`plan` with its chunks grown by one whole factor so that no channel runs more than
    `max_chunks` of them, and that factor (1 when the plan is small enough)."""
    stride = plan.n_channels if plan.striped else 1
    most = max((-(-part.count // (part.chunk_count * stride)) for part in plan.parts if part.chunk_count), default=0)
    factor = max(1, -(-most // max_chunks))
    if factor == 1:
        return plan, 1
    parts = tuple(replace(p, chunk_count=p.chunk_count * factor, chunk_nbytes=p.chunk_nbytes * factor)
                  for p in plan.parts)
    return replace(plan, parts=parts), factor


class _Task:
    """A generator driven by the events it yields: resumed once each has fired, the first time by
    `start` (a pending event). Unlike a simpy.Process it is not an event itself, so nothing can wait
    for its end, and it costs no event to start or to end: the streams of one call, of which a
    large alltoall has hundreds of thousands, wait for nothing but their launch."""

    __slots__ = ("_send",)

    def __init__(self, generator, start: simpy.Event):
        self._send = generator.send
        start.callbacks.append(self._resume)

    def _resume(self, _event) -> None:
        send = self._send
        try:
            event = send(None)
            while event.callbacks is None:  # fired already: go on at once, as a Process would
                event = send(None)
        except StopIteration:
            return
        event.callbacks.append(self._resume)


def _both(env: simpy.Environment, first: simpy.Event, second: simpy.Event) -> simpy.Event:
    """An event fired once `first` and `second` both have, as env.all_of([first, second]) would
    be, without the condition's bookkeeping of values."""
    both = simpy.Event(env)
    left = [(first.callbacks is not None) + (second.callbacks is not None)]  # those not yet processed
    if not left[0]:
        both.succeed()
        return both

    def one_in(_event) -> None:
        left[0] -= 1
        if not left[0]:
            both.succeed()

    for event in (first, second):
        if event.callbacks is not None:
            event.callbacks.append(one_in)
    return both


class _Conn:
    """One direction of one channel's connection: slices posted by the sender (the events of each
    one's first step arriving, `heads`, and of all of it arriving, `dones`, kept until the receiver
    takes it), slices taken by the receiver and slots it freed."""

    __slots__ = ("posted", "heads", "dones", "taken", "freed", "credits", "msgs")

    def __init__(self, credits: int):
        self.heads: dict[int, simpy.Event] = {}
        self.dones: dict[int, simpy.Event] = {}
        self.posted = self.taken = self.freed = 0
        self.credits = credits
        self.msgs = 0  # network messages sent so far (a coarse slice stands for several): the next QP

    def post(self, head: simpy.Event, done: simpy.Event) -> None:
        self.heads[self.posted], self.dones[self.posted] = head, done
        self.posted += 1


class _CallRun:
    """One call as the DES runs it: its place in the rank's sequence, its plan (chunks grown by
    `factor`), the routes of its algorithm's graph, its slices per chunk and slots per connection,
    what a receiver needs of a slice before it starts on it, and its launch cost."""

    def __init__(self, sim: "_Sim", index: int, plan: Plan, factor: int, comm: int = 0):
        self.index, self.plan, self.factor, self.comm = index, plan, factor, comm
        self.call: Call = plan.call
        self.router = sim.router_for(plan.algorithm)
        ring_simple = plan.protocol == "Simple" and plan.algorithm == "Ring"
        self.slices = max(1, plan.chunk_steps // plan.slice_steps) if ring_simple else 1
        self.credits = NCCL_STEPS // plan.slice_steps if ring_simple else NCCL_STEPS
        # What a receiver must have before it starts on a slice: LL and LL128 flag every line, so
        # the first line; Simple posts whole slices, so the first real slice of a coarse one.
        self.head_share = 1.0 / factor
        # Point-to-point prims count bytes (plan_p2p.py); collectives count elements.
        self.elem_nbytes = 1 if plan.algorithm == "P2P" else self.call.elem_nbytes
        # A ring's or tree's hops within a node pay their step latency once per call at its start (chain_us),
        # where NCCL's latency counts them; the rest pay it step by step.
        chain_us = sim.chain_us(plan)
        self.chained = chain_us > 0
        self.launch_us = sim.params.launch_us(plan.algorithm, plan.protocol) + chain_us
        # A point-to-point stream is one peer's: its primitives' setups and routes recur in no other
        # stream, so keeping them would only fill memory (an alltoall has a stream per pair of ranks).
        self.keeps_setups = plan.algorithm != "P2P"


class _Sim:
    def __init__(self, setup: DesSetup, n_channels: int, first_algorithm: str = "Ring", merge_links: bool = True):
        job, params = setup.job, setup.params
        self.setup, self.job, self.params = setup, job, params
        self.per_node = len(job.paths.node_system.gpus())
        self.nodes = job.nodes
        self.fabric = setup.fabric
        self.n_channels = max(1, n_channels)
        self._routers: dict[str, Router] = {}
        self.ib = ib_transport(job)
        # Whether a connection's bytes may take several spine routes (queue pairs, adaptive routing).
        self.multipath = self.ib.multipath and self.fabric.cluster.spines > 1
        self.dead: dict[int, float] = {}                     # link -> when it went down
        self.stuck: dict[tuple, tuple[float, int]] = {}      # (src, dst, channel) -> (since, dead link)
        self.abort_at = float("inf")
        # CTA, LL and network connection links are numbered alike by every graph's router.
        self.router = self.router_for(first_algorithm)
        n_fabric = len(self.fabric.links)
        kind_bw, share = dict(params.link_bw_gbps), dict(params.link_efficiency)
        capacity = ([kind_bw.get(link.kind, link.bw_gbps) * share.get(link.kind, 1.0) for link in self.fabric.links]
                    + [params.cta_bw_gbps] * (self.router.n_links - n_fabric))
        for rank in range(job.nranks):
            capacity[self.router.ll(rank)] = 2 * params.ll_max_bw_gbps  # on the wire, LL doubles the data
            for channel in range(self.router.n_channels):
                for slot in range(NET_CONN_SLOTS):  # 1 GB/s: a step of t us is t x 1000 bytes
                    capacity[self.router.net_conn(rank, channel, slot)] = 1.0
        for fault in setup.faults:
            if fault.kind == "degrade":
                for link in fault.links:
                    capacity[link] *= fault.factor
        latency = [link.lat_us for link in self.fabric.links] + [0.0] * (len(capacity) - n_fabric)
        for i, trunk in enumerate(self.fabric.trunks):
            capacity[n_fabric + i] = sum(capacity[cable] for cable in trunk.members)
            latency[n_fabric + i] = latency[trunk.members[0]]
        # Connections spread evenly over every spine cross the leaves' trunks (fabric.py Trunk) unless
        # a fault makes one of a trunk's cables unlike the others.
        faulty = {link for fault in setup.faults for link in fault.links}
        self.trunked = self.multipath and self.ib.spreads_evenly and bool(self.fabric.trunks) \
            and not faulty.intersection(self.fabric.trunk_of)
        self.env = simpy.Environment()
        self.net = FluidNetwork(self.env, capacity, latency, record=setup.trace, hold=params.hold,
                                merge_links=merge_links)
        self.proxy = ProxyThreads(self.env)
        self.conns: dict[tuple, _Conn] = {}
        self.waiting: dict[tuple, simpy.Event] = {}
        self.nvls_in: dict[tuple, list] = {}
        self.nvls_out: dict[tuple, tuple] = {}
        self.collnet_in: dict[tuple, list] = {}
        self.state: dict[tuple, list] = {}
        self.finished = 0
        self.n_streams = 0
        self.end_us = 0.0
        self.nvls_eff = params.nvls_efficiency
        self.nvs_links = self.router.nvs_links()  # where multimem traffic pays nvls_efficiency
        self.conn_base = self.router.net_conn(0, 0, 0)  # network connection links come last
        self._conns: dict[tuple, tuple[int, ...]] = {}  # route -> the network connections it crosses
        self._bare: dict[tuple, tuple[int, ...]] = {}   # route -> itself without them (LL, LL128)
        self._proxy_threads: dict[tuple[int, int], tuple[int, ...]] = {}
        self.channel_end: dict[int, float] = {}
        self.spans: list = [] if setup.trace else None
        self.late = dict(setup.stragglers)
        self.weight: dict[int, int] = {}
        self.groups: dict[int, list[int]] = {}
        self.collapse: Collapse | None = None  # set before run() where nodes behave alike
        self.mirrors: Mirrors | None = None    # with a collapse: twins' links left out of the division
        self.translation: Translation | None = None  # with a collapse by a shift: the shift of links
        self.simulated: frozenset[int] = frozenset()  # with a collapse: the ranks that run a channel
        self.routes: dict[tuple, tuple] = {}
        self._stand_ins_of: dict[tuple, tuple[int, ...]] = {}
        self._trunk_routes: dict[tuple, tuple[int, ...]] = {}
        self._class_parts: dict[tuple[int, ...], list[list[int]]] = {}
        self._shares: dict[tuple[int, float], tuple[int, float]] = {}
        self._link_ids: np.ndarray | None = None
        self._fabric_routes: dict[tuple, tuple[int, ...]] = {}
        self._prim_setups: dict[tuple, _PrimSetup] = {}
        self._out_setups: dict[tuple, tuple] = {}
        self.pat_conns: dict[tuple, list[int]] = {}
        self.last_progress = 0.0
        self.done_ranks: set[int] = set()

    def chain_us(self, plan: Plan) -> float:
        """What a ring or tree collective's hops within a node cost it once per call: the chain NCCL's
        time model counts (tuning.cc: baseLat + nsteps x hwLat, the hops within a node at the NVLink or
        PCI row), each hop's step latency paid one after the other. Measured calls pay it whole even
        where the pipeline would hide a per-step latency behind the data (docs/des.md, "The hop chain");
        the network's hops keep their own latency per step."""
        algorithm, call = plan.algorithm, plan.call
        if algorithm not in ("Ring", "Tree") or self.per_node < 2:
            return 0.0
        rules = time_model_rules(self.params.tables.version)
        hops = latency_intra_steps(rules, NCCL_FUNC[call.collective], algorithm, call.nranks,
                                   max(1, call.nranks // self.per_node))
        return max(0, hops) * self.params.step_lat_us(self._intra_hw(algorithm), algorithm, plan.protocol)

    def _intra_hw(self, algorithm: str) -> str:
        """The hwLat row of the hops within a node of `algorithm`'s graph (tuning.cc: NVLINK where the
        graph's intra-node links are NVLink, else PCI)."""
        graph = self.job.graphs.get("tree" if algorithm == "Tree" else "ring")
        return HW_NVLINK if graph is None or graph.type_intra == "NVL" else HW_PCI

    def router_for(self, algorithm: str) -> Router:
        """The routes of `algorithm`'s graph: worked out once per setup (a sweep's every size shares
        them), since they depend only on the job, its fabric, the graph and the channel count."""
        graph = _GRAPH_OF.get(algorithm, "ring")
        if graph not in self._routers:
            key = ("router", graph, self.n_channels)
            if key not in self.setup.derived:
                self.setup.derived[key] = Router(self.job, self.fabric, graph, self.n_channels)
            self._routers[graph] = self.setup.derived[key]
        return self._routers[graph]

    # --- waiting ------------------------------------------------------------------------------

    def _wait(self, key: tuple) -> simpy.Event:
        event = self.waiting.get(key)
        if event is None:
            event = self.waiting[key] = self.env.event()
        return event

    def _notify(self, key: tuple) -> None:
        event = self.waiting.pop(key, None)
        if event is not None:
            event.succeed()

    def _conn(self, c: _CallRun, channel: int, src: int, dst: int, index) -> _Conn:
        """A connection persists across calls, as NCCL's connectors do (the first call's slots);
        `index` is the connection's (`_conn_id`: each communicator has its own)."""
        key = (channel, src, dst, index)
        conn = self.conns.get(key)
        if conn is None:
            conn = self.conns[key] = _Conn(c.credits)
        return conn

    # --- one stream ---------------------------------------------------------------------------

    def run(self, c: _CallRun, programs: dict[int, tuple], merge: bool = True) -> None:
        """One call on every rank (channels in lockstep merged unless `merge` is off)."""
        self.groups = self._channel_groups(c, programs) if merge else {ch: [ch] for ch in self._channels(programs)}
        self._fabric_routes.clear()  # the grouping's alone
        for rep, members in self.groups.items():
            self.weight[rep] = len(members)
            for rank in range(self.job.nranks):  # stand-ins' transfers cross their members' CTA links too
                self.net.capacity[self.router.cta(rank, rep)] *= len(members)
                for slot in range(NET_CONN_SLOTS):
                    self.net.capacity[self.router.net_conn(rank, rep, slot)] *= len(members)
        # One launch event per launch time, which every stream starting then waits on: its
        # processes resume in the order their own timeouts would have fired, and nothing can come
        # between them (no stream starts a process), for one event instead of one per stream.
        launches: dict[float, simpy.Event] = {}
        for rank, progs in programs.items():
            for prog in progs:
                if prog.channel not in self.groups:
                    continue
                at = c.launch_us + self.late.get(rank, 0.0)
                launch = launches.get(at)
                if launch is None:
                    launch = launches[at] = self.env.timeout(at)
                for stream in prog.streams:
                    self.n_streams += 1
                    _Task(self._stream_body(c, rank, prog.channel, stream), launch)
        self._run_to_the_end()

    def run_sequences(self, sequences: dict[int, list[tuple[_CallRun, tuple]]]) -> None:
        """Each rank's own calls, one after the other as kernels on one CUDA stream: a call's streams
        start once every stream of the rank's previous call has ended. Every channel in full detail."""
        self.groups = {ch: [ch] for ch in range(self.n_channels)}
        self.weight = {ch: 1 for ch in range(self.n_channels)}
        for rank, calls in sequences.items():
            self.n_streams += sum(len(prog.streams) for _, progs in calls for prog in progs)
            self.env.process(self._rank_calls(rank, calls))
        self._run_to_the_end()

    def _rank_calls(self, rank: int, calls: list[tuple[_CallRun, tuple]]):
        late = self.late.get(rank, 0.0)
        for c, progs in calls:
            streams = [self.env.process(self._stream(c, rank, prog.channel, stream, c.launch_us + late))
                       for prog in progs for stream in prog.streams]
            late = 0.0
            yield simpy.AllOf(self.env, streams)
        self.done_ranks.add(rank)

    def _run_to_the_end(self) -> None:
        for fault in self.setup.faults:
            if fault.kind == "link-down":
                self.env.process(self._link_down(fault))
        run_until(self.env, self.setup.timeout_us)

    @staticmethod
    def _channels(programs: dict[int, tuple]) -> list[int]:
        return sorted({prog.channel for progs in programs.values() for prog in progs})

    def _channel_groups(self, c: _CallRun, programs: dict[int, tuple]) -> dict[int, list[int]]:
        """Channels that run the same primitives between the same ranks over the same links move in
        lockstep: each group is simulated once, its flows counting once per member on every link
        (max-min fairness gives identical flows identical rates, so this is exact). The links are
        compared only between channels whose ranks run alike streams of alike primitives: a
        point-to-point channel's streams are named by their peers, and an alltoall's routes, one per
        pair of ranks, are worked out when they first move."""
        names_of: dict[int, list] = {}  # channel -> (rank, stream name)
        for rank, progs in programs.items():
            for prog in progs:
                names_of.setdefault(prog.channel, []).extend((rank, stream.name) for stream in prog.streams)
        names = {channel: tuple(named) for channel, named in names_of.items()}
        n_named = Counter(names.values())
        maybe = {channel for channel, named in names.items() if n_named[named] > 1}
        streams_of: dict[int, list] = {}  # channel -> (rank, stream name, its primitives' shapes)
        kinds_of: dict[int, list] = {}    # channel -> (rank, node, local rank, its primitives' kinds)
        for rank, progs in programs.items():
            node, local = divmod(rank, self.per_node)
            for prog in progs:
                if prog.channel not in maybe:  # no other channel's streams are named alike
                    continue
                named = streams_of.setdefault(prog.channel, [])
                kinds = kinds_of.setdefault(prog.channel, [])
                for stream in prog.streams:
                    named.append((rank, stream.name, tuple(map(_PRIM_SHAPE, stream.prims))))
                    kinds.append((rank, node, local, set(map(_PRIM_KIND, stream.prims))))
        alike = {channel: tuple(named) for channel, named in streams_of.items()}
        n_alike = Counter(alike.values())
        by_sig: dict[tuple, list[int]] = {}
        for channel in sorted(names):
            if channel not in alike:
                by_sig[("alone", channel)] = [channel]
                continue
            sig = ("alone", alike[channel])
            if n_alike[alike[channel]] > 1:
                sig = ("links", alike[channel], tuple(
                    tuple(sorted((kind, self._links_but_ctas(c, _Shape(*kind), rank, channel, node, local))
                                 for kind in kinds))
                    for rank, node, local, kinds in kinds_of[channel]))
            by_sig.setdefault(sig, []).append(channel)
        return {members[0]: members for members in by_sig.values()}

    def _links_but_ctas(self, c: _CallRun, prim, rank: int, channel: int, node: int, local: int
                        ) -> tuple[int, ...]:
        """The fabric links of `prim`'s route (the CTA links differ by channel by construction): the
        same on every channel of one routing key (Router.channel_key) and, where nodes are collapsed,
        of one kind (Collapse.channel_kind), so worked out once per key and kind."""
        where = c.router.channel_key(channel)
        if self.collapse is not None:  # members and their peers depend on the channel's kind as well
            where = (where, self.collapse.channel_kind(channel))
        key = (c, prim.op, prim.recv_from, prim.send_to, rank, where)
        links = self._fabric_routes.get(key)
        if links is None:
            route = self._route(c, prim, rank, channel, node, local, [d for d in prim.send_to if d >= 0])[0]
            # Fabric links and trunks: ids below the CTA links'.
            links = self._fabric_routes[key] = tuple(link for link in route if link < self.router.cta_base)
        return links

    def _link_down(self, fault: Fault):
        yield self.env.timeout(fault.at_us)
        for link in fault.links:
            self.net.set_capacity(link, 0.0)
            self.dead.setdefault(link, self.env.now)
        for tag, link in self.net.stalled():  # what was moving on them is stuck from now
            self._stuck(tag, link)

    def _watch(self, tag: tuple, route: tuple[int, ...]) -> None:
        """A transfer just started: stuck from now if it crosses a link that is down."""
        for link in set(route):
            if link in self.dead and self.net.capacity[link] <= 0:
                self._stuck(tag, link)

    def _stuck(self, tag: tuple, link: int) -> None:
        """A network transfer stopped on a dead `link`: each connection it is on errors out as its queue
        pair would (ib.py), counted from its first transfer that got stuck; the run ends at the first
        error, where NCCL aborts (the proxy returns ncclSystemError, the framework tears the job down)."""
        after = self.ib.retry_exceeded_us
        if after is None or link >= len(self.fabric.links) or self.fabric.links[link].kind not in ERROR_LINK_KINDS:
            return
        src, dsts, channel, router = tag
        for dst in self._stuck_peers(router, channel, src, dsts, link):
            key = (src, dst, channel)
            if key in self.stuck:
                continue
            self.stuck[key] = (self.env.now, link)
            at = self.env.now + after
            if at < min(self.abort_at, self.setup.timeout_us):
                self.abort_at = at
                self.env.timeout(after).callbacks.append(simpy.core.StopSimulation.callback)

    def _stuck_peers(self, router: Router, channel: int, src: int, dsts, link: int) -> list[int]:
        """The peers on other nodes whose connection from `src` crosses `link` (all of them where a
        rank's transfer stands for other ranks' and none of its own routes does)."""
        peers = [d for d in dsts if d >= 0 and d // self.per_node != src // self.per_node]
        on = [d for d in peers if any(link in path for path in router.peer_paths(channel, src, d))]
        return on or peers

    def _stream(self, c: _CallRun, rank: int, channel: int, stream, launch_us: float):
        """One stream of a rank's channel program as a process, from `launch_us` on."""
        body = self._stream_body(c, rank, channel, stream)
        yield self.env.timeout(launch_us)
        yield from body

    def _stream_body(self, c: _CallRun, rank: int, channel: int, stream):
        """One stream of a rank's channel program, from its launch: a generator of the events it
        waits for, which ends the stream (`_stream_ended`) when it returns."""
        # [prim index, prim, slice, what it waits for (a text, or a text to format and its fields), call]
        state = self.state[(rank, channel, stream.name)] = [0, None, 0, "the kernel launch", c]
        protocol = stream.protocol or c.plan.protocol
        if stream.prims and stream.prims[0].pat is not None:
            return self._pat_stream(c, rank, channel, stream, state, protocol)
        return self._prim_stream(c, rank, channel, stream, state, protocol)

    def _stream_ended(self, channel: int, state: list) -> None:
        state[3] = None
        self.finished += 1
        self.end_us = max(self.end_us, self.env._now)
        for member in self.groups[channel]:
            self.channel_end[member] = max(self.channel_end.get(member, 0.0), self.env._now)

    def _prim_stream(self, c: _CallRun, rank: int, channel: int, stream, state: list, protocol: str):
        """The primitives one after the other, each slice waiting for its inputs and slots."""
        node, local = divmod(rank, self.per_node)
        elem = c.elem_nbytes
        line = _LINE_NBYTES.get(protocol)
        posting = self.params.net_overhead_us > 0
        weight = self.weight[channel]
        env, net, notify, dead, spans = self.env, self.net, self._notify, self.dead, self.spans  # read per slice
        kind = conn_id = sized = None
        for index, prim in enumerate(stream.prims):
            state[0], state[1] = index, prim
            # What every slice of the primitive shares (a slice's route changes only by message), kept
            # while the primitives that follow are of the same kind, size and connection (a stream of
            # point-to-point chunks, say).
            if _PRIM_KIND(prim) != kind:
                kind, conn_id, sized = _PRIM_KIND(prim), None, None
                (targets, route, hw, route_lat, shares, net_out, posts, by_message, peers_out, costly, lat,
                 peers_in) = self._prim_setup(c, prim, rank, channel, node, local, protocol)
                switched_in = (prim.op == "nvlsGather" or NVLS_SWITCH in prim.recv_from
                               or COLLNET_SWITCH in prim.recv_from)
                switched_out = (prim.op == "nvlsScatter" or NVLS_SWITCH in prim.send_to
                                or COLLNET_SWITCH in prim.send_to)
                tag = (rank, tuple(peers_out), channel, c.router)
                # What the slice sends on is waited for by its receivers; a slice that sends on to no one
                # (a receive's copy out of its buffer) fires only its end at the sender.
                arrivals = bool(peers_out) or switched_out
            if prim.conn != conn_id:
                conn_id = prim.conn
                cid = (c.comm, conn_id)  # each communicator has connections of its own
                ins = [(src, self._conn(c, channel, src, rank, cid)) for src in peers_in]  # with their peers
                # A freed slot reaches the sender a hop's step latency later (the head flag it polls);
                # on a chained hop, the one place that latency is still paid step by step.
                credit_lat = [self._credit_lat(c, rank, src, protocol) for src in peers_in]
                outs = None  # looked up once the first slice's inputs are in: the first call there sets its slots
            if (prim.nelem, prim.steps) != sized:
                sized = (prim.nelem, prim.steps)
                nbytes = prim.nelem * elem / c.slices
                wire = wire_nbytes(protocol, nbytes)
                steps = prim.steps
                msgs = c.factor * steps  # network messages a slice stands for
                first = min(wire, line if line is not None else wire * c.head_share / steps)
                moved, costs, block_lat = self._slice_route(c, route, route_lat, shares, costly, lat, wire,
                                                            protocol, steps)
            for s in range(c.slices):
                state[2] = s
                if switched_in or switched_out:
                    key = (c.comm, c.index, node, channel, prim.offset, prim.nelem, s)
                upstream = []  # the events of everything this slice reads, all of which must be in
                for src, conn in ins:
                    while conn.posted <= conn.taken:
                        state[3] = ("data from rank {} (connection {})", src, prim.conn)
                        yield self._wait(("data", channel, src, rank, cid))
                    state[3] = ("the first step from rank {} (connection {})", src, prim.conn)
                    first_step = conn.heads.pop(conn.taken)
                    upstream.append(conn.dones.pop(conn.taken))
                    conn.taken += 1
                    if first_step.callbacks is not None:  # not processed yet
                        yield first_step
                if switched_in:
                    got = yield from self._switch_inputs(c, prim, channel, key, state)
                    upstream += got
                if outs is None:
                    outs = [(dst, self._conn(c, channel, rank, dst, cid)) for dst in peers_out]
                for dst, conn in outs:
                    while conn.posted - conn.freed >= conn.credits:
                        state[3] = ("a free slot at rank {} (connection {})", dst, prim.conn)
                        yield self._wait(("slot", channel, rank, dst, cid))
                if posts and posting:  # the rank's proxy thread posts the slice's network steps
                    state[3] = "its proxy thread"
                    posted = simpy.Event(env)
                    self._book(posts, channel, posted, steps)
                    yield posted
                if by_message and outs:
                    sent_msgs = next((conn.msgs for dst, conn in outs if dst in net_out), 0)
                    route, hw, route_lat, shares = self._route(c, prim, rank, channel, node, local, targets,
                                                               sent_msgs)
                    moved, costs, block_lat = self._slice_route(c, route, route_lat, shares, costly, lat, wire,
                                                                protocol, steps)
                start = env._now  # the clock without its property's call: read per slice, millions of times
                head, done, sent = net.transfer2(moved, wire, block_lat, first, tag, weight, route_lat, costs,
                                                 arrivals)
                if dead:
                    self._watch(tag, moved)
                for dst, conn in outs:
                    conn.post(*(self._received(dst, channel, head, done, steps) if dst in net_out else (head, done)))
                    conn.msgs += msgs
                    notify(("data", channel, rank, dst, cid))
                if switched_out:
                    self._switch_outputs(c, prim, channel, node, key, head, done)
                state[3] = "its transfer"
                yield sent
                self.last_progress = env._now
                if spans is not None:
                    spans.append((rank, channel, stream.name, prim.op, start, env._now))
                for up in upstream:
                    if up.callbacks is not None:  # not processed yet
                        state[3] = "the rest of its input"
                        yield up
                for (src, conn), delay in zip(ins, credit_lat):
                    if delay:
                        self._free_later(conn, ("slot", channel, src, rank, cid), delay)
                    else:
                        conn.freed += 1
                        notify(("slot", channel, src, rank, cid))
        self._stream_ended(channel, state)

    def _credit_lat(self, c: _CallRun, rank: int, src: int, protocol: str) -> float:
        """How late a slot freed on the connection from `src` reaches it: a hop's step latency where
        the hop is a chained one within a node (its data pays none, chain_us), else nothing (a network
        hop's data already carries its step latency)."""
        if not c.chained or src < 0 or src // self.per_node != rank // self.per_node:
            return 0.0
        return self.params.step_lat_us(self._intra_hw(c.plan.algorithm), c.plan.algorithm, protocol)

    def _free_later(self, conn: _Conn, key: tuple, delay: float) -> None:
        def free(_event, conn=conn, key=key):
            conn.freed += 1
            self._notify(key)
        self.env.timeout(delay).callbacks.append(free)

    def _prim_setup(self, c: _CallRun, prim, rank: int, channel: int, node: int, local: int, protocol: str
                    ) -> _PrimSetup:
        """What every slice of `prim` shares, whatever its size: its route (links, hardware row,
        latency, shares), the peers it reads from and writes to (their stand-ins), which of those
        are over the network and the proxy threads that post to them, and its multimem costs and step
        latency. The same for every primitive of that shape on that rank and channel: worked out once
        and kept, but for a point-to-point call's, whose shapes (one per peer) recur in no other stream."""
        key = (c, rank, channel, prim.op, prim.recv_from, prim.send_to, protocol)
        got = self._prim_setups.get(key)
        if got is None:
            out = self._out_setup(c, prim, rank, channel, node, local, protocol)
            got = _PrimSetup(*out, self._stand_ins(prim.recv_from, channel))
            if c.keeps_setups:
                self._prim_setups[key] = got
        return got

    def _out_setup(self, c: _CallRun, prim, rank: int, channel: int, node: int, local: int, protocol: str) -> tuple:
        """`_prim_setup` but the peers it reads from: what it reads from matters to the rest only where
        a switch sends it (as to `_route`), so an alltoall's receives, one per sender, share one."""
        key = (c, rank, channel, prim.op, COLLNET_SWITCH in prim.recv_from, prim.send_to, protocol)
        got = self._out_setups.get(key)
        if got is not None:
            return got
        targets = [dst for dst in prim.send_to if dst >= 0]
        route, hw, route_lat, shares = self._route(c, prim, rank, channel, node, local, targets)
        net_out = [d for d in targets if c.router.crosses_network(rank, d)]
        posts = self._proxies(rank, channel) if net_out else ()
        # Round-robin queue pairs: each message takes the next one, so the route moves on per slice.
        by_message = self.multipath and self.ib.round_robin and bool(net_out)
        # Connections run between the ranks simulated: a peer's stand-in, once per primitive.
        peers_out = self._stand_ins(prim.send_to, channel)
        net_out = set(self._stand_ins(net_out, channel))
        # Multimem traffic moves at nvls_efficiency of the NVSwitch ports' rate: on those links
        # each byte costs 1/efficiency; the rest of the route (a NIC, say) carries it as it is.
        multimem = prim.op in _REDUCING_NVLS or NVLS_SWITCH in prim.send_to and prim.op != "nvlsScatter"
        costly = (tuple((x, 1.0 / self.nvls_eff) for x in sorted(set(route)) if x in self.nvs_links)
                  if multimem else ())
        chained = hw != HW_NET and c.chained  # its step latency is in the call's chain (chain_us)
        lat = self.params.step_lat_us(hw, c.plan.algorithm, protocol) if hw and not chained else 0.0
        got = (targets, route, hw, route_lat, shares, net_out, posts, by_message, peers_out, costly, lat)
        if c.keeps_setups or not targets:  # a receive's is shared whoever sends
            self._out_setups[key] = got
        return got

    def _slice_route(self, c: _CallRun, route: tuple[int, ...], route_lat: float | None, shares: tuple, costly: tuple,
                     lat: float, wire: float, protocol: str, steps: int
                     ) -> tuple[tuple[int, ...], tuple[tuple[int, float], ...], float]:
        """A slice's links, what its bytes count as on those that cost more than a byte (multimem,
        network steps, a share of a spread connection) and its latency."""
        moved, step_costs = self._with_step_costs(c, route, wire, protocol, steps)
        return moved, costly + step_costs + shares, self._block_lat(lat, steps, route, route_lat)

    def _block_lat(self, lat: float, steps: int, route: tuple[int, ...], route_lat: float | None) -> float:
        """A slice's step latency; for a block of `steps` ring steps, every step's hop (its step
        latency and the route's) but the one the network adds, as the steps would pay one after
        the other, each forwarding what the one before brought in."""
        if steps == 1:
            return lat
        path = route_lat if route_lat is not None else self.net.route_lat_us(route)
        return steps * lat + (steps - 1) * path

    def _pat_stream(self, c: _CallRun, rank: int, channel: int, stream, state: list, protocol: str):
        """PAT (plan_pat.py): the steps of one round run together between two barriers; a step reads
        the connection step its offset names once the sender has posted it, writes into a step the
        receiver has freed, and the round's posts land after all its transfers have arrived."""
        prims, index = stream.prims, 0
        node, local = divmod(rank, self.per_node)
        pchan = (c.comm, channel)  # each communicator has PAT connections of its own
        while index < len(prims):
            batch = [p for p in prims[index:index + PAT_MAX_ROUND] if p.pat.round == prims[index].pat.round]
            state[0], state[1] = index, batch[0]
            for prim in batch:
                yield from self._pat_wait(rank, pchan, prim, state)
            dones = []
            for prim in batch:
                peers_out = [d for d in prim.send_to if d >= 0]
                # A PAT step is one message per peer; its connection's posted steps say which QP is next.
                sent_msgs = self._pat_conn(pchan, rank, peers_out[0])[1] * c.factor if peers_out else 0
                route, hw, route_lat, shares = self._route(c, prim, rank, channel, node, local, peers_out,
                                                           sent_msgs)
                wire = wire_nbytes(protocol, prim.nelem * c.elem_nbytes)
                lat = self.params.step_lat_us(hw, c.plan.algorithm, protocol) if hw else 0.0
                if hw == HW_NET:
                    yield from self._post(self._proxies(rank, channel), channel)
                moved, steps = self._with_step_costs(c, route, wire, protocol)
                tag = (rank, tuple(peers_out), channel, c.router)
                dones.append(self.net.transfer2(moved, wire, lat, wire, tag, self.weight[channel], route_lat,
                                                steps + shares)[1])
                if self.dead:
                    self._watch(tag, moved)
            state[3] = "its round's transfers"
            yield simpy.AllOf(self.env, dones)
            self.last_progress = self.env.now
            for prim in batch:
                if prim.pat.post_send:
                    self._pat_conn(pchan, rank, prim.send_to[0])[1] += 1
                    self._notify(("pat", pchan, rank, prim.send_to[0]))
                if prim.pat.post_recv:
                    self._pat_conn(pchan, prim.recv_from[0], rank)[0] += 1
                    self._notify(("pat", pchan, prim.recv_from[0], rank))
            index += len(batch)
        self._stream_ended(channel, state)

    def _with_step_costs(self, c: _CallRun, route: tuple[int, ...], wire: float, protocol: str, steps: int = 1
                         ) -> tuple[tuple[int, ...], tuple[tuple[int, float], ...]]:
        """The slice's route and what its bytes count as on the network connections it crosses: a
        Simple slice carries its real steps (a coarse slice stands for `factor` x its primitive's
        `steps`) at DesParams.step_us each, whatever their size, on each connection's 1 GB/s link; LL and
        LL128 flag their lines (no flush, no step round trip to wait for) and leave the connections out."""
        conns = self._conns.get(route)
        if conns is None:
            conns = self._conns[route] = tuple(sorted(set(filter(self.conn_base.__le__, route))))
        if not conns:
            return route, ()
        if protocol != "Simple" or wire <= 0:  # the route without its connections, kept only where asked for
            bare = self._bare.get(route)
            if bare is None:
                bare = self._bare[route] = tuple(filter(self.conn_base.__gt__, route))
            return bare, ()
        cost = self.params.step_us(c.plan.algorithm) * 1e3 * c.factor * steps / wire
        return route, tuple((x, cost) for x in conns)

    def _received(self, dst: int, channel: int, head: simpy.Event, done: simpy.Event, steps: int = 1
                  ) -> tuple[simpy.Event, simpy.Event]:
        """A network slice as its receiver sees it: its first step in once the receiver's proxy
        thread has taken it (a post of its own, as the sender's: test the receive, hand the step
        to the GPU; a block of ring steps waits for all its `steps` to be taken, as a chain of
        steps would), all of it once both that and the bytes are in."""
        if self.params.net_overhead_us <= 0:
            return head, done
        seen = self.env.event()
        proxies = self._proxies(dst, channel)
        if head.callbacks is None:
            self._book(proxies, channel, seen, steps)
        else:
            head.callbacks.append(lambda _: self._book(proxies, channel, seen, steps))
        return seen, _both(self.env, done, seen)

    def _post(self, proxies: tuple[int, ...], channel: int, steps: int = 1):
        """The rank's proxy thread posts `steps` network steps, sharing its time with every
        channel's posts and takes (proxy.py)."""
        if self.params.net_overhead_us > 0:
            posted = self.env.event()
            self._book(proxies, channel, posted, steps)
            yield posted

    def _book(self, proxies: tuple[int, ...], channel: int, done: simpy.Event, steps: int = 1) -> None:
        """`steps` network steps (for each channel of the lockstep group) on the proxy threads listed,
        `done` fired when the first of them is through with them. The other threads get the same
        work without holding the step up, so that they are as busy as their own ranks' would be."""
        cost_us, weight = self.params.net_overhead_us * steps, self.weight[channel]
        for shadow in proxies[1:]:
            self.proxy.post(shadow, cost_us, weight)
        self.proxy.post(proxies[0], cost_us, weight, done)

    def _pat_conn(self, channel: int, src: int, dst: int) -> list[int]:
        """[head, tail] of a PAT connection: steps freed by the receiver, steps posted by the sender."""
        return self.pat_conns.setdefault((channel, src, dst), [0, 0])

    def _pat_wait(self, rank: int, channel: int, prim, state: list):
        rs, sl = prim.op == "patReduce", prim.pat
        if prim.recv_from:
            src = prim.recv_from[0]
            conn = self._pat_conn(channel, src, rank)
            while conn[1] < conn[0] + (0 if rs else sl.step_offset) + 1:
                state[3] = ("a step posted by rank {} (PAT)", src)
                yield self._wait(("pat", channel, src, rank))
        if prim.send_to:
            dst = prim.send_to[0]
            conn = self._pat_conn(channel, rank, dst)
            while conn[0] + NCCL_STEPS < conn[1] + (sl.step_offset if rs else 0) + 1:
                state[3] = ("a step freed by rank {} (PAT)", dst)
                yield self._wait(("pat", channel, rank, dst))

    def _proxies(self, rank: int, channel: int) -> tuple[int, ...]:
        """The proxy threads a network step of `rank` occupies: its own first, then those of the
        ranks it stands for that run other channels themselves (the per-channel split); ranks
        simulated nowhere need no thread. Worked out once per rank and channel: a receiver asks at
        every network slice, and a split's members are found by a pass over every node."""
        if self.collapse is None:
            return (rank,)
        got = self._proxy_threads.get((rank, channel))
        if got is None:
            others = [m for m in self.collapse.members(rank, channel) if m != rank and m in self.simulated]
            got = self._proxy_threads[(rank, channel)] = (rank, *others)
        return got

    def _stand_ins(self, peers, channel: int) -> tuple[int, ...]:
        """The ranks simulated for `peers` (switches left out), each once, in their order."""
        key = (tuple(peers), channel)
        got = self._stand_ins_of.get(key)
        if got is None:
            ranks = [p for p in peers if p >= 0]
            if self.collapse is not None:
                ranks = list(dict.fromkeys(self.collapse.rep_rank(p, channel) for p in ranks))
            got = self._stand_ins_of[key] = tuple(ranks)
        return got

    def _switch_inputs(self, c: _CallRun, prim, channel: int, key: tuple, state: list):
        """Wait for what the switches must hold before `prim` runs; returns the completion events
        of those inputs."""
        got = []
        if NVLS_SWITCH in prim.recv_from and prim.op != "nvlsGather":
            while len(self.nvls_in.get(key, ())) < self.per_node:
                state[3] = "every GPU of the node to scatter this chunk (NVLS)"
                yield self._wait(("nvls_in", key))
            got += yield from self._heads(self.nvls_in[key], state, "the scattered chunks (NVLS)")
        if prim.op == "nvlsGather":
            while key not in self.nvls_out:
                state[3] = "the chunk's multicast (NVLS)"
                yield self._wait(("nvls_out", key))
            got += yield from self._heads([self.nvls_out[key]], state, "the chunk's multicast (NVLS)")
        if COLLNET_SWITCH in prim.recv_from:
            wanted = 1 if c.call.collective == "all_gather" else self.nodes
            ckey = (c.comm, c.index, channel, prim.offset, prim.nelem, key[-1])
            while sum(w for _, _, w in self.collnet_in.get(ckey, ())) < wanted:
                state[3] = "every node's head to reach the CollNet switch"
                yield self._wait(("collnet", ckey))
            got += yield from self._heads([(h, d) for h, d, _ in self.collnet_in[ckey]], state,
                                          "the CollNet switch's sum")
        return got

    def _heads(self, pairs, state: list, what: str):
        for head, _ in pairs:
            if not head.processed:
                state[3] = what
                yield head
        return [done for _, done in pairs]

    def _switch_outputs(self, c: _CallRun, prim, channel: int, node: int, key: tuple, head, done) -> None:
        if prim.op == "nvlsScatter":
            self.nvls_in.setdefault(key, []).append((head, done))
            self._notify(("nvls_in", key))
        elif NVLS_SWITCH in prim.send_to:
            self.nvls_out[key] = (head, done)
            self._notify(("nvls_out", key))
        if COLLNET_SWITCH in prim.send_to:
            ckey = (c.comm, c.index, channel, prim.offset, prim.nelem, key[-1])
            nodes = 1 if self.collapse is None else self.collapse.weight(node, channel)  # the nodes this one stands for
            self.collnet_in.setdefault(ckey, []).append((head, done, nodes))
            self._notify(("collnet", ckey))

    def _route(self, c: _CallRun, prim, rank: int, channel: int, node: int, local: int, peers_out,
               sent_msgs: int = 0) -> tuple:
        """The links one slice of `prim` crosses, the hardware row that prices its step, the route's
        latency where it is not the links' sum (None), and what each byte counts as on the links that
        carry only a share of it ((link, share) pairs: a connection spread over several spine routes,
        ib.py, its `sent_msgs` messages so far saying which queue pairs its slice is on); for a rank
        standing for others (symmetry.py), the links of every member's own slice, at one member's
        latency."""
        collapse = self.collapse
        if collapse is None and not self.multipath:
            route, hw, _ = self._member_route(c, prim, rank, channel, node, local, peers_out)
            return route, hw, None, ()
        # Round-robin queue pairs: the slice's messages move alongside the ones sent before it that are
        # still in flight (up to a connection's slots), each on its own QP, so the slice's bytes are
        # counted over that window's QPs: a connection's first message takes one route, later ones more.
        first, n_msgs = 0, 1
        if self.ib.round_robin:
            per_slice = c.factor * prim.steps
            first = max(0, sent_msgs - per_slice * (c.credits - 1))
            first, n_msgs = first % self.ib.qps, sent_msgs + per_slice - first
        # What it reads from matters only where a switch sends it: a receive's route is its CTA's, whoever sends.
        key = (c.plan.algorithm, c.plan.protocol, rank, channel, prim.op, COLLNET_SWITCH in prim.recv_from,
               prim.send_to, first, n_msgs)
        cached = self.routes.get(key)
        if cached is None:
            parts, hw, short = self._member_parts(c, prim, rank, channel, node, local, peers_out, first, n_msgs)
            own = tuple(chain.from_iterable(parts))
            short_own = short
            # The parallel routes have one route's latency: a link carrying a share counts that share.
            latency = self.net.latency
            lat = sum(map(latency.__getitem__, own)) - sum(latency[x] * d for x, d in short.items())
            links = own
            if collapse is not None and self.translation is not None and self.mirrors is not None:
                links, short = self._shifted_class(own, short_own) if short_own else (self._class_route(parts), {})
            elif collapse is not None:
                links, short = [], dict()
                for member in collapse.members(rank, channel):
                    if self.translation is not None:  # the member's route is the representative's, shifted
                        more, less = self._shifted(own, short_own, (member - rank) % self.job.nranks)
                    else:
                        peers = [collapse.peer_of(rank, channel, p, member) for p in peers_out]
                        more, _, less = self._member_route(c, prim, member, channel, member // self.per_node, local,
                                                           peers, first, n_msgs)
                    links += more
                    for x, d in less.items():
                        short[x] = short.get(x, 0.0) + d
                if self.mirrors is not None:  # twins' copies of links carry what the first twin's do
                    links, short, copies = self.mirrors.reduce(links, short)
                    self.net.mirror(copies)
            shares = self._shares_of(links, short)
            # The members' routes run side by side: the latency is one route's, not their sum.
            cached = (tuple(links), hw, lat if collapse is not None or short else None, shares)
            if c.keeps_setups or self.ib.round_robin:  # a long stream's queue pairs come round again
                self.routes[key] = cached
        return cached

    def _shares_of(self, links: list[int], short: dict[int, float]) -> tuple[tuple[int, float], ...]:
        """(link, share of a whole crossing) for the links of `links` that carry only a share."""
        if not short:
            return ()
        uses = Counter(links)
        one = self._shares  # one object per (link, share): spread routes list the same ones over and over
        return tuple(sorted(one.setdefault(pair, pair) for pair in ((x, (uses[x] - d) / uses[x])
                                                                   for x, d in short.items())))

    def _class_route(self, parts: list[tuple[int, ...]]) -> list[int]:
        """`_shifted_class`'s links for a route that no link carries a share of, put together from
        its parts' (`_member_parts`): a part's images, and the copies among them, are worked out once,
        and the route's are its parts' block by block."""
        per_part = []
        for part in parts:
            got = self._class_parts.get(part)
            if got is None:
                got = self._class_parts[part] = self._class_part(part)
            per_part.append(got)
        links: list[int] = []
        for k in range(len(per_part[0]) if per_part else 0):
            for got in per_part:
                links += got[k]
        return links

    def _class_part(self, part: tuple[int, ...]) -> list[list[int]]:
        """Per block, the links of `part`'s image that are not a twin's copy (those are handed to
        the network as copies)."""
        blocks = self.job.nodes // self.translation.nodes_shift
        every = self.translation.images(part, blocks)
        canon = self.mirrors.canon_of()[every]
        first = canon == every
        self.net.mirror_arrays(every[~first], canon[~first])
        ids = self._link_id_objects()
        return [ids[row[keep]].tolist()
                for row, keep in zip(every.reshape(blocks, -1), first.reshape(blocks, -1))]

    def _shifted_class(self, own: tuple[int, ...], short_own: dict[int, float]
                       ) -> tuple[list[int], dict[int, float]]:
        """What Mirrors.reduce makes of every class-mate's route, worked out on arrays, for a route
        `own` of a representative (in the first block): the mates' routes are its images
        (translation.py), so each twin's copy of a link is crossed as the first twin's is by
        construction, and reduce's route-by-route check has nothing to find. The links and shares
        come in reduce's order; the copies it names are handed to the network."""
        canon_of = self.mirrors.canon_of()
        image = self.translation.image
        links = list(chain.from_iterable(self._class_part(own)))  # block by block, as reduce lists them
        short: dict[int, float] = {}
        if short_own:
            shares = list(short_own.values())
            for k in range(self.job.nodes // self.translation.nodes_shift):
                for x, d in zip(image(list(short_own), k).tolist(), shares):
                    if canon_of[x] == x:
                        short[x] = short.get(x, 0.0) + d
        return links, short

    def _link_id_objects(self) -> np.ndarray:
        """Every link's id as one int object, made once: the routes of an alltoall hold millions of
        ids, and listing them from this array shares the objects."""
        if self._link_ids is None:
            self._link_ids = np.arange(self.translation.perm.size).astype(object)
        return self._link_ids

    def _shifted(self, own: tuple[int, ...], short_own: dict[int, float], apart: int
                 ) -> tuple[list[int], dict[int, float]]:
        """A class-mate `apart` ranks on: its route and its shares, the representative's shifted
        (translation.py says why they are)."""
        blocks = apart // self.collapse.shift
        if blocks == 0:
            return list(own), short_own
        image, ids = self.translation.image, self._link_id_objects()
        moved = ids[image(list(short_own), blocks)].tolist() if short_own else []
        return ids[image(own, blocks)].tolist(), dict(zip(moved, short_own.values()))

    def _member_route(self, c: _CallRun, prim, rank: int, channel: int, node: int, local: int, peers_out,
                      first_msg: int = 0, n_msgs: int = 1) -> tuple[tuple[int, ...], str, dict[int, float]]:
        """The links of one rank's slice, its hardware row, and per link crossed by only a share of the
        bytes what is missing from a whole crossing (summed over its listings)."""
        parts, hw, short = self._member_parts(c, prim, rank, channel, node, local, peers_out, first_msg, n_msgs)
        return tuple(chain.from_iterable(parts)), hw, short

    def _member_parts(self, c: _CallRun, prim, rank: int, channel: int, node: int, local: int, peers_out,
                      first_msg: int = 0, n_msgs: int = 1) -> tuple[list[tuple[int, ...]], str, dict[int, float]]:
        """`_member_route` with the route in the parts it is made of (a CTA, a leg, a peer's path),
        in order: the parts recur from route to route where the routes do not."""
        r = c.router
        links = [(r.cta(rank, channel),)]
        hw = ""
        if prim.op in _REDUCING_NVLS:  # multimem.ld_reduce: every GPU's copy in, the sum out to the head
            for i in range(self.per_node):
                links.append(r.nvls_up(node, i))
            links.append(r.nvls_down(node, local))
            hw = HW_NVLINK
        if NVLS_SWITCH in prim.send_to and prim.op != "nvlsScatter":  # multimem.st to every GPU of the node
            links.append(r.nvls_up(node, local))
            for i in range(self.per_node):
                links.append(r.nvls_down(node, i))
            hw = HW_NVLINK
        if COLLNET_SWITCH in prim.recv_from:
            links.append(tuple(r.collnet_down(channel, rank)))
            hw = HW_NET
        if COLLNET_SWITCH in prim.send_to:
            links.append(tuple(r.collnet_up(channel, rank)))
            if self.params.step_us(c.plan.algorithm) > 0:
                links.append((r.net_conn(rank, channel, 0),))
            hw = HW_NET
        slot = 0
        short: dict[int, float] = {}
        for dst in peers_out:
            if self.multipath and r.crosses_network(rank, dst):
                head, cables, tail = r.net_parts(channel, rank, dst)
                kind = HW_NET
                if self.trunked:
                    links += (head, self._trunk_route(cables), tail)
                elif len(cables) > 1:
                    links.append(tuple(_spread(head, cables, tail, self.ib.path_weights(len(cables), first_msg,
                                                                                        n_msgs), short)))
                else:
                    links += (head, cables[0], tail)
            else:
                route, kind = r.peer(channel, rank, dst)
                links.append(tuple(route))
            if kind == HW_NET and slot < NET_CONN_SLOTS and self.params.step_us(c.plan.algorithm) > 0:
                links.append((r.net_conn(rank, channel, slot),))
                slot += 1
            if hw != HW_NET:
                hw = kind
        if peers_out and c.plan.protocol == "LL" and c.plan.algorithm != "P2P":
            links.append((r.ll(rank),))
        return links, hw, short

    def _trunk_route(self, cables: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
        # Kept by the first route alone, all trunk_route reads: hashing every spine's route (32 of
        # them on a large fabric) at each send cost more than the lookup saved.
        got = self._trunk_routes.get(cables[0])
        if got is None:
            got = self._trunk_routes[cables[0]] = trunk_route(self.fabric, cables)
        return got

    # --- the outcome --------------------------------------------------------------------------

    def hang(self) -> HangReport | None:
        if self.finished == self.n_streams:
            return None
        names = [link.name for link in self.fabric.links]
        stalls = tuple(Stall(src, dsts, channel, names[link]) for (src, dsts, channel, _), link in self.net.stalled()
                       if link < len(names))
        after = self.ib.retry_exceeded_us or 0.0
        errors = tuple(NetError(src, dst, member, names[link], since, since + after, self.ib.timeout,
                                self.ib.retry_cnt)
                       for (src, dst, channel), (since, link) in sorted(self.stuck.items())
                       for member in self.groups.get(channel, (channel,)))  # each channel of a lockstep group
        blocked = []
        for (rank, channel, name), (index, prim, s, what, c) in sorted(self.state.items(), key=lambda kv: kv[0]):
            if what is None:
                continue
            if isinstance(what, tuple):  # (text, its fields): formatted only here, not at every slice
                what = what[0].format(*what[1:])
            blocked.append(Blocked(rank, channel, name, index, prim.op if prim else "launch",
                                   prim.offset if prim else 0, prim.nelem if prim else 0, s, what,
                                   c.index, c.call.collective, c.call.nbytes))
        return HangReport(self.env.now, tuple(blocked), stalls, self.env.now >= self.setup.timeout_us,
                          self.last_progress, tuple(sorted(self.done_ranks)), errors)

    def link_stats(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        names = [link.name for link in self.fabric.links]
        bytes_on = self.net.bytes_on
        busy_us = self.net.busy_us
        for trunk_id, trunk in enumerate(self.fabric.trunks, len(names)):  # each cable: its share of the trunk's
            for cable in trunk.members:
                bytes_on[cable] += bytes_on[trunk_id] / len(trunk.members)
                busy_us[cable] = max(busy_us[cable], busy_us[trunk_id])
        used = [i for i in range(len(names)) if bytes_on[i] > 0]
        return ({names[i]: bytes_on[i] for i in used}, {names[i]: float(busy_us[i]) for i in used},
                {names[i]: float(self.net.capacity[i]) for i in used})


def _spread(head: tuple[int, ...], cables: tuple[tuple[int, ...], ...], tail: tuple[int, ...],
            weights: tuple[float, ...], short: dict[int, float]) -> list[int]:
    """The links of the routes head + cables[i] + tail taken in the proportions `weights` gives them
    (ib.py path_weights): every link of a route with a share listed (as often as one route crosses
    it), and in `short` what its listings miss of whole crossings, e.g. 3/4 of a spine cable that a
    quarter of the bytes cross. Listed in the order of the routes' links, the first route's first;
    the head and tail, on every route, are counted once."""
    used = [(route, weight) for route, weight in zip(cables, weights) if weight > 0]
    if not used:
        return []
    share: dict[int, float] = {}
    times: dict[int, int] = {}
    for route, weight in used:
        for link, n in Counter(route).items():
            share[link] = share.get(link, 0.0) + weight * n
            times[link] = max(times.get(link, 0), n)
    carried_by_times: dict[int, float] = {}

    def whole(part: tuple[int, ...]) -> list[tuple[int, int, float]]:
        out = []
        for link, n in Counter(part).items():
            if n not in carried_by_times:
                total = 0.0
                for _, weight in used:  # summed as a link of every route would be, route by route
                    total = total + weight * n
                carried_by_times[n] = total
            out.append((link, n, carried_by_times[n]))
        return out
    cable_items = [(link, times[link], share[link]) for link in share]
    n_first = len(set(used[0][0]))
    order = whole(head) + cable_items[:n_first] + whole(tail) + cable_items[n_first:]
    links = []
    for link, n, carried in order:
        links += [link] * n
        missing = n - carried
        if missing > 1e-9:
            short[link] = short.get(link, 0.0) + missing
    return links


def _p2p_plan(job, call: Call, max_chunks: int) -> tuple[Plan, dict[int, tuple], int]:
    """NCCL's point-to-point plan record, every rank's programs for sendrecv / alltoall and their
    chunk factor: every `factor` consecutive chunks run as one primitive over their bytes, so that a
    rank runs no more than 8 x `max_chunks` of them over all its streams (at least 2 per stream)."""
    p2p = p2p_setup(job)
    longest, streams, channels = 0, 1, 1
    kinds: dict[tuple, int] = {}  # transfers_key -> an id: ranks with one id have programs alike
    key_ids = []
    seen: dict[tuple, int] = {}  # peer pattern -> the id of its transfers' key
    for rank in range(job.nranks):
        pattern = p2p.peer_pattern(call, rank)
        key_id = seen.get(pattern)
        if key_id is None:  # a rank of a new pattern: its transfers say what every rank of it makes
            transfers = p2p.transfers(call, rank)
            lengths = p2p.stream_chunks(call, rank, transfers)
            longest, streams = max([longest, *lengths]), max(streams, len(lengths))
            used = {t.channels for t in transfers if t.send or t.peer != rank}
            channels = max([channels, *(1 + c for chans in used for c in chans)])
            key_id = seen[pattern] = kinds.setdefault(transfers_key(transfers, rank, job.nranks), len(kinds))
        key_ids.append(key_id)
    factor = max(1, -(-longest // max(2, 8 * max_chunks // max(1, streams))))
    return call_plan(job, call), _P2pPrograms(p2p, call, factor, channels, tuple(key_ids)), factor


class _P2pPrograms(Mapping):
    """rank -> a point-to-point call's programs (every `factor` chunks one primitive), built when a
    rank's are first asked for and kept: an alltoall's for every rank are millions of primitives,
    and where the call runs by one block of nodes (translation.py) only that block's are asked for.
    `n_channels`: the channels they use; `key_ids`: per rank, an id of its transfers_key."""

    def __init__(self, setup, call: Call, factor: int, n_channels: int, key_ids: tuple[int, ...]):
        self.setup, self.call, self.factor, self.n_channels, self.key_ids = setup, call, factor, n_channels, key_ids
        self.nranks = len(key_ids)
        self._built: dict[int, tuple] = {}

    def __getitem__(self, rank: int) -> tuple:
        if not (isinstance(rank, int) and 0 <= rank < self.nranks):
            raise KeyError(rank)
        got = self._built.get(rank)
        if got is None:
            got = self._built[rank] = self.setup.programs(self.call, rank, self.factor)
        return got

    def __iter__(self):
        return iter(range(self.nranks))

    def __len__(self) -> int:
        return self.nranks


def _collapse(sim: "_Sim", plan: Plan) -> Collapse | None:
    """The node classes of `plan` on the simulated fabric (symmetry.py), None when every node is
    its own class."""
    job, fabric = sim.job, sim.fabric
    if job.nodes < 2 or plan.algorithm not in COLLAPSIBLE:
        return None
    if plan.algorithm in ("NVLS", "CollNetDirect", "CollNetChain") and plan.call.collective != "all_reduce":
        return None  # each node's heads own different pieces at the switch: nodes are not alike
    node_links = fabric.per_node * job.nodes
    faulty: dict[int, set] = {}
    marks: dict[int, tuple] = {}
    for fault in sim.setup.faults:
        for link in fault.links:
            mark = (fault.kind, fault.factor, fault.at_us)
            if link < node_links:
                faulty.setdefault(link // fabric.per_node, set()).add((link % fabric.per_node, *mark))
            else:
                marks[link] = mark
    root_node = -1
    if plan.call.collective in ("broadcast", "reduce"):  # the root's node runs other programs
        root_node = plan.call.root // len(job.paths.node_system.gpus())
        faulty.setdefault(root_node, set()).add((-1, "root"))

    known: dict[tuple, tuple] = {}

    def route_cables(channel: int, src: int, dst: int):
        key = (sim.router.channel_key(channel), src, dst)  # the NICs decide the cables, not the channel
        if key not in known:
            known[key] = cables_of(channel, src, dst)
        return known[key]

    def cables_of(channel: int, src: int, dst: int):
        paths = sim.router.net_cables(channel, src, dst)
        paths = paths if sim.multipath else paths[:1]
        used = paths[:sim.ib.n_used(len(paths))]  # the spine routes its queue pairs or adaptive routing take
        cables = tuple(dict.fromkeys(link for path in used for link in path))
        colours = tuple(hash((fabric.links[x].bw_gbps, fabric.links[x].lat_us, marks.get(x))) for x in cables)
        return cables, colours

    n_channels = max((p.channel for p in plan.parts), default=0) + 1
    key = ("node_classes", plan.algorithm, n_channels, sim.params.exact_nodes, root_node)
    if key not in sim.setup.derived:
        faults = {n: tuple(sorted(v)) for n, v in faulty.items()}
        late = dict(sim.setup.stragglers)
        sim.setup.derived[key] = node_classes(job, plan.algorithm, n_channels, route_cables, faults, late,
                                              sim.params.exact_nodes)
    collapse = sim.setup.derived[key]
    return None if collapse.n_classes == job.nodes else collapse


def _call_plan(job, call: Call, max_chunks: int, plan: Plan | None = None
               ) -> tuple[Plan, Plan, int, dict[int, tuple] | None]:
    """(NCCL's plan, the plan as run, its chunk factor, the point-to-point programs or None)."""
    if call.info.p2p:
        plan, programs, factor = _p2p_plan(job, call, max_chunks)
        return plan, plan, factor, programs
    plan = plan or plan_call(job.comm, call)
    run_plan, factor = coarse_plan(plan, max_chunks)
    return plan, run_plan, factor, None


def _channels_of(plan: Plan, programs: "_P2pPrograms | None") -> int:
    if programs is not None:
        return programs.n_channels
    return max((p.channel for p in plan.parts), default=0) + 1


def _collections_deferred(simulation):
    """`simulation` with the cyclic garbage collector paused while it plans and runs, and back as it
    was after (it then collects as usual). A run builds millions of objects that live to its end
    (programs, routes, shapes, connection state) and drops events by the million, which reference
    counting frees: SimPy clears an event's callbacks once it is processed, which breaks the
    cycles a waiting process makes. The collector's passes found next to nothing and cost their
    scans of the survivors: 26% of an alltoall on 512 GPUs (37.6 -> 28.2 s) and 20% of an
    all_gather (21.6 -> 17.2 s), with the same peak memory either way (1274 and 380 MiB), and
    collecting young objects 100,000 at a time, as before, saved a third of that."""
    @wraps(simulation)
    def paused(*args, **kwargs):
        enabled = gc.isenabled()
        gc.disable()
        try:
            return simulation(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()
    return paused


@_collections_deferred
def simulate(setup: DesSetup, call: Call, plan: Plan | None = None, merge: bool = True,
             collapse: bool = True, mirror: bool = True) -> DesRun:
    """Run `call` through the DES as `setup` says (NCCL's own plan unless `plan` is given).
    `merge=False` simulates every channel even where several move in lockstep, `collapse=False`
    every node even where several behave alike (symmetry.py), `mirror=False` divides every link
    even where twins' copies carry the same (mirrors.py)."""
    if mirror:
        try:
            return _simulate(setup, call, plan, merge, collapse, mirror=True)
        except Asymmetric:  # twins' links not crossed alike after all: every link divided
            pass
    return _simulate(setup, call, plan, merge, collapse, mirror=False)


def _simulate(setup: DesSetup, call: Call, plan: Plan | None, merge: bool, collapse: bool, mirror: bool) -> DesRun:
    job = setup.job
    plan, run_plan, factor, programs = _call_plan(job, call, setup.params.max_chunks, plan)
    sim = _Sim(setup, _channels_of(run_plan, programs), run_plan.algorithm, _merges_links([run_plan]))
    c = _CallRun(sim, 0, run_plan, factor)
    if programs is None:
        sim.collapse = _collapse(sim, run_plan) if collapse else None
        if sim.collapse is not None and mirror and not setup.faults and not setup.trace:
            mirrors = Mirrors(sim.fabric, sim.router, sim.collapse, sim.net.capacity)
            sim.mirrors = mirrors if mirrors.any else None
        ranks = None if sim.collapse is None else sim.collapse.rep_ranks(job.nranks)
        sim.simulated = frozenset(ranks or ())
        keep = _all_channels if sim.collapse is None else sim.collapse.channels_run_by
        if _steps_may_merge(setup, run_plan):
            programs, steps = _blocked_programs(job, run_plan, ranks or range(job.nranks), keep,
                                                setup.params.max_steps)
        else:
            programs, steps = {r: keep(r, progs) for r, progs in job_programs(job, run_plan, ranks).items()}, 1
    else:
        steps = 1
        if collapse:
            programs = _shift_collapse(sim, programs, mirror)
    sim.run(c, programs, merge)
    return replace(_outcome(sim, plan, factor, sim.collapse.n_classes if sim.collapse else job.nodes,
                            sim.collapse is None or sim.collapse.exact), step_factor=steps)


def _merges_links(plans: list[Plan]) -> bool:
    """Whether the network keeps classes of links crossed alike (linkclasses.py) for these calls:
    not where all are point-to-point. A send's route is its rank pair's own, so nearly every new
    route splits a class, and keeping the classes (a pass over the route's links, a list of the
    routes crossing each link) costs more than the smaller division saves: alltoall on 1024 GPUs
    98 -> 91 s CPU, on 128 and 256 GPUs 5-8% less, the same answers."""
    return any(plan.algorithm != "P2P" for plan in plans)


def _shift_collapse(sim: "_Sim", programs: _P2pPrograms, mirror: bool) -> Mapping[int, tuple]:
    """Point-to-point programs that look the same a block of nodes on (translation.py): the first
    block's ranks run for every block, and only their programs are kept."""
    setup, job = sim.setup, sim.job
    if job.nodes < 2 or setup.faults or setup.stragglers:
        return programs
    translation = node_shift(sim.fabric, sim.router, lambda shift: transfers_shift(programs.key_ids, shift),
                             sim.per_node, sim.ib.spreads_evenly)
    if translation is None:
        return programs
    sim.translation = translation
    sim.collapse = Collapse.shifted(sim.per_node, job.nodes, translation.nodes_shift)
    if mirror and not setup.trace:
        sim.mirrors = Mirrors(sim.fabric, sim.router, sim.collapse, sim.net.capacity)
    reps = sim.collapse.rep_ranks(job.nranks)
    sim.simulated = frozenset(reps)
    return {r: programs[r] for r in reps if r in programs}


def _all_channels(rank: int, progs: tuple) -> tuple:
    return progs


def _steps_may_merge(setup: DesSetup, plan: Plan) -> bool:
    """Whether a long ring may run in blocks of steps: not where a fault or a trace asks what each
    step did (a hang names the step it stopped in), and only for the collectives whose ring loops
    are runs of like steps (a ring broadcast's runs are chunks, which coarse_plan already bounds)."""
    return (setup.params.max_steps > 0 and not setup.faults and not setup.trace and plan.algorithm == "Ring"
            and plan.call.collective in ("all_reduce", "all_gather", "reduce_scatter"))


@_collections_deferred
def simulate_sequences(setup: DesSetup, calls: Mapping[int, Sequence[Call]],
                       comms: Mapping[int, Sequence[int]] | None = None) -> DesRun:
    """Run each rank's own sequence of calls (rank -> its calls, in the order it makes them; a rank
    left out makes none), every rank and channel in full detail. Ranks that agree finish as they
    would call by call; ranks that do not (one calls broadcast where the others call all_reduce,
    one stops early) leave the others waiting on connections that never deliver, and the HangReport
    names, per blocked rank, the call it is in (its place in that rank's sequence, collective,
    size). `comms` gives each call's communicator (rank -> one id per call; all 0 by default):
    communicators over the same ranks have connections of their own, so calls on one never take
    another's data. The run's plan is the first call's of the lowest rank that makes one."""
    job = setup.job
    for rank in calls:
        if not 0 <= rank < job.nranks:
            raise UsageError(f"rank {rank}", "calls", f"ranks 0..{job.nranks - 1}")
    planned: dict[Call, tuple] = {}
    for seq in calls.values():
        for call in seq:
            if call not in planned:
                planned[call] = _call_plan(job, call, setup.params.max_chunks)
    if not planned:
        raise UsageError("no rank makes a call", "calls", "at least one call")
    n_channels = max(_channels_of(run_plan, programs) for _, run_plan, _, programs in planned.values())
    first = next(seq[0] for _, seq in sorted(calls.items()) if seq)
    sim = _Sim(setup, n_channels, planned[first][1].algorithm,
               _merges_links([run_plan for _, run_plan, _, _ in planned.values()]))
    runs: dict[tuple[int, Call], _CallRun] = {}
    sequences: dict[int, list[tuple[_CallRun, tuple]]] = {}
    for rank in range(job.nranks):
        steps = []
        comm_of = (comms or {}).get(rank, ())
        for index, call in enumerate(calls.get(rank, ())):
            _, run_plan, factor, programs = planned[call]
            comm = comm_of[index] if index < len(comm_of) else 0
            c = runs.get((comm, index, call))
            if c is None:
                c = runs[(comm, index, call)] = _CallRun(sim, index, run_plan, factor, comm)
            progs = programs[rank] if programs is not None else job_programs(job, run_plan, [rank])[rank]
            steps.append((c, progs))
        sequences[rank] = steps
    sim.run_sequences(sequences)
    plan, _, factor, _ = planned[first]
    return _outcome(sim, plan, factor, job.nodes, True)


def _cable_series(fabric: Fabric, series):
    """(time, link, GB/s) with a trunk's rate shown on each of its cables, a share each."""
    base = len(fabric.links)
    for t, link, gbps in series:
        if base <= link < base + len(fabric.trunks):
            members = fabric.trunks[link - base].members
            yield from ((t, cable, gbps / len(members)) for cable in members)
        else:
            yield t, link, gbps


def _outcome(sim: _Sim, plan: Plan, factor: int, n_classes: int, exact: bool) -> DesRun:
    nbytes, busy, bw = sim.link_stats()
    hang = sim.hang()
    names = [link.name for link in sim.fabric.links]
    series = tuple((t, names[link], gbps) for t, link, gbps in _cable_series(sim.fabric, sim.net.series or ())
                   if link < len(names))
    return DesRun(plan, sim.end_us if hang is None else sim.env.now, nbytes, busy, bw, hang, factor,
                  dict(sorted(sim.channel_end.items())), tuple(sim.spans or ()), series, sim.net.n_transfers,
                  sim.n_streams, n_classes, exact, next(sim.env._eid))  # SimPy numbers its events in order
