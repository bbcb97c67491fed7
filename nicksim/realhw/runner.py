"""`nicksim run`: a collective run for real by N ranks on one host or several, reported as nccl-tests does.

`spawn(argv, nranks, environ)` starts the ranks itself when no launcher did: each a process
running the same command with torchrun's variables and NICKSIM_COMM_ID set, so every rank joins
the way it would under a launcher; it waits for them, stops the rest when one fails, and returns
the worst exit status. `run_rank(...)` is one rank's work: join the others (bootstrap.py), group
them into nodes by host (NCCL_HOSTID, else hostname and boot id), listen on a socket when the job
spans hosts (net.py), then for every size build the plan, agree on it (agree.py), open the
connections (execute.py), time the warm-up and timed iterations out of place and in place, check
every element when asked (-c), and leave rank 0 to print the nccl-tests table.

Each host is planned as a node whose GPUs cannot reach each other (the catalog's PCIe box without
P2P), so connections inside a host are shared memory and those between hosts NET over sockets, as
NCCL's ladder gives CPU-only nodes.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping, NoReturn, Sequence

import numpy as np

from ..calls import COLLECTIVE_TABLE, Call, call_for_size
from ..errors import NickSimError, RanksFailed, UsageError
from ..job import JobSpec, load_job
from ..topology.catalog import HOST_SYSTEM
from ..formats.joblog import JobLogger
from ..formats.logs import Identity, LogSink, debug_config
from ..params import Params
from ..plan.build import call_plan, job_programs
from ..formats.report import NCCL_TESTS_LATEST, ResultRow, closing_lines, format_row, measurement, table_footer, \
    table_header
from .agree import check_same_plan, plan_fingerprint
from .bootstrap import Bootstrap
from .execute import HOST_OPS, ExecuteError, check_runnable, open_links, run_programs
from .kernels import combine, from_float, post_op, pre_op, storage_dtype, to_float
from .cuda_kernels import GpuUnavailable, gpu_unavailable
from .launch import LAUNCHERS, RUN_ID, RankEnv, exit_with_parent, job_identity, rank_env, root_address, watch_parent
from .net import NetError, NetListener, NetPeers, ProxiedEnd, find_interfaces, socket_config
from .net_ib import IbNet, ib_net
from .verbs import VerbsError, VerbsUnavailable, verbs_unavailable
from .shm import NCCL_STEPS, ShmTimeoutError

__all__ = ["HOST_SYSTEM", "MAX_RANKS_PER_HOST", "MAX_SPAWNED_RANKS", "RunDone", "run_command", "run_job",
           "spawned_layout", "unused_here", "check_runnable_here", "plan_rank", "run_device", "slot_nbytes",
           "available_nbytes", "usable_nbytes", "rank_nbytes", "fitting_max_nbytes",
           "free_port", "spawn", "RunOptions", "run_rank", "host_id", "node_layout", "rank_input", "expected_output",
           "count_wrong"]

MAX_RANKS_PER_HOST = 8  # the GPUs HOST_SYSTEM has
MAX_SPAWNED_RANKS = 16  # perf --engine real: a process per rank of another system's job, on this host


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# After one rank failed, how long the others have to stop and clean up before they are killed
# (a stopped or hung rank never will; the others know within a second through the bootstrap).
_STRAGGLER_S = 5.0


def spawn(command: Sequence[str], nranks: int, environ: Mapping[str, str],
          poll: Callable[[], None] | None = None) -> int:
    """Run `python COMMAND` as `nranks` ranks on this host, each with torchrun's variables (a run
    id of its own among them) and NICKSIM_COMM_ID set so that it joins as under a launcher;
    `poll()` is called while they run. Once one rank fails, the others have _STRAGGLER_S to stop
    before they are killed. The worst exit status of them."""
    root = f"127.0.0.1:{free_port()}"
    run_id = f"nicksim-{os.getpid()}-{secrets.token_hex(6)}"  # the job's identity in the bootstrap hello
    procs = []
    arm = exit_with_parent()  # the ranks end with this process, however it ends
    for rank in range(nranks):
        env = dict(environ, RANK=str(rank), WORLD_SIZE=str(nranks), LOCAL_RANK=str(rank), NICKSIM_COMM_ID=root,
                   **{RUN_ID: run_id})
        # Every rank prints its own NCCL_DEBUG lines (to the shared stdout, as under mpirun) and its errors.
        procs.append(subprocess.Popen([sys.executable, *command], env=env, preexec_fn=arm))
    try:
        worst, failed_at = 0, None
        while [p.poll() for p in procs].count(None):  # every rank polled: a stopped rank 0 hides none
            codes = [p.returncode for p in procs if p.returncode is not None]
            if any(codes) and failed_at is None:
                failed_at = time.monotonic()  # the others learn through the bootstrap within a second
            if failed_at is not None and time.monotonic() - failed_at > _STRAGGLER_S:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
            if poll is not None:
                poll()
            time.sleep(0.05)
        if poll is not None:
            poll()
        for p in procs:
            worst = max(worst, p.returncode if p.returncode >= 0 else 128 - p.returncode)
        return worst
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        raise


@dataclass(frozen=True)
class RunOptions:
    """What nccl-tests' flags ask of a run."""

    collective: str
    sizes: tuple[int, ...]
    dtype: str
    redop: str
    root: int
    iters: int
    warmup_iters: int
    check: int
    nccl_version: str
    trace: bool = False  # record one more out-of-place call of the largest size, step by step
    job_spec: JobSpec | None = None  # the job whose plans run (perf --engine real); None: the hosts'


def rank_input(call: Call, rank: int) -> np.ndarray:
    """Rank `rank`'s send buffer: small whole values that differ by rank and element (exact in
    every type, so a reduction in any order gives the same integers)."""
    values = (np.arange(call.send_count, dtype=np.int64) * 7 + rank * 13) % 9 - 4
    if call.dtype == "bfloat16":
        return from_float(values.astype(np.float32))
    return values.astype(storage_dtype(call.dtype))


def expected_output(call: Call, rank: int, sends: list[np.ndarray]) -> np.ndarray | None:
    """What `rank`'s receive buffer must hold after `call`, reducing in rank order (None: nothing)."""
    if call.collective == "all_gather":
        return np.concatenate(sends)
    if call.collective == "alltoall":
        return np.concatenate([s[rank * call.count:(rank + 1) * call.count] for s in sends])
    if call.collective == "sendrecv":  # nccl-tests: from rank - 1
        return sends[(rank - 1) % call.nranks]
    if call.collective == "broadcast":
        return sends[call.root]
    if call.collective == "reduce" and rank != call.root:
        return None
    total = pre_op(sends[0], call.redop, call.dtype, call.nranks)
    for s in sends[1:]:
        total = combine(total, pre_op(s, call.redop, call.dtype, call.nranks), call.redop, call.dtype)
    total = post_op(total, call.redop, call.dtype, call.nranks)
    if call.collective == "reduce_scatter":
        return total[rank * call.count:(rank + 1) * call.count]
    return total


_ULP_LOG2 = {"half": -10, "bfloat16": -7, "float": -23, "double": -52}


def count_wrong(call: Call, got: np.ndarray, want: np.ndarray | None) -> int:
    """Elements of `got` that differ from `want`. A floating avg is summed in ring order and
    expected in rank order: it may differ by an ulp of the inputs' size (|x| <= 4) per addition."""
    if want is None:
        return 0
    if call.dtype == "bfloat16":
        got, want = to_float(got), to_float(want)
    if call.redop == "avg" and call.dtype in _ULP_LOG2:
        return int(np.sum(~(np.abs(got.astype(np.float64) - want.astype(np.float64))
                            <= 4 * 2.0 ** _ULP_LOG2[call.dtype] * call.nranks)))
    return int(np.sum(got != want))


def _buffers(call: Call, rank: int, in_place: bool, xp=np) -> tuple[np.ndarray, np.ndarray]:
    """(send, receive) buffers, the send one a view into the receive one in place (as nccl-tests
    sets them: all_gather's input at the rank's own piece, reduce_scatter's output at its own);
    made by `xp`, numpy or CuPy."""
    storage = storage_dtype(call.dtype)
    out_n, in_n = call.recv_count, call.send_count
    if not in_place:
        return xp.empty(in_n, storage), _zeroed(xp, out_n, storage)
    if call.collective == "all_gather":
        recv = _zeroed(xp, out_n, storage)
        return recv[rank * call.count:(rank + 1) * call.count], recv
    if call.collective == "reduce_scatter":
        send = xp.empty(in_n, storage)
        return send, send[rank * call.count:(rank + 1) * call.count]
    buf = xp.empty(max(in_n, out_n), storage)
    return buf, buf


def _zeroed(xp, n: int, storage) -> np.ndarray:
    """Zeros written, not only promised: numpy's zeros are pages the first call would fault in
    (a GPU allocation has its memory before the first call)."""
    buf = xp.empty(n, storage)
    buf.fill(0)
    return buf


def _exchange(boot: Bootstrap, item) -> list:
    """allgather, where a rank that reports being stuck stops every rank with its reason."""
    items = boot.allgather(item)
    for rank, got in enumerate(items):
        if isinstance(got, dict) and "stuck" in got:  # the reason as the stuck rank's error line says it
            raise ExecuteError(got["stuck"]) if rank == boot.rank else \
                ExecuteError(f"rank {rank} stopped: {got['stuck']}", "run")
    return items


# After a data-path error, how long to wait for the bootstrap to name a lost rank: a closed
# connection is known within milliseconds, a silent rank within the timeout the data path shares.
_LOST_WAIT_S = 1.0


def _report_stuck(boot: Bootstrap, err: NickSimError) -> NoReturn:
    """Stop every rank with the reason this rank stopped moving; it always raises. Where the
    bootstrap knows (or learns within _LOST_WAIT_S) that a rank ended or fell silent, its reason,
    which every survivor shares; else this rank's own, which the others get from the exchange."""
    if boot.wait_lost(_LOST_WAIT_S) is not None:
        boot.check()
    _exchange(boot, {"stuck": err.line()})
    raise err  # not reached: the exchange raises with the stuck rank's reason


def slot_nbytes(job, plan) -> dict[str, int]:
    """The slot of each protocol the plan's connections use: the plan's step; a point-to-point
    transfer on LL steps through LL's buffer (comm->buffSizes / NCCL_STEPS) whatever the chunk."""
    if plan.algorithm == "P2P":
        return {plan.protocol: plan.step_nbytes, "LL": job.comm.buff_nbytes[0] // NCCL_STEPS}
    return {plan.protocol: plan.step_nbytes}


def _timed(boot: Bootstrap, call: Call, programs, links, options: RunOptions, in_place: bool, timeout_s: float,
           gpu=None, on_call=None):
    """One placement of one size: warm-up, timed iterations, the check; its Measurement. With
    `gpu` (cuda_ipc.GpuRuntime) the buffers are on the rank's device and CuPy kernels do the work."""
    rank = boot.rank
    send, recv = _buffers(call, rank, in_place, gpu.cupy if gpu is not None else np)
    send[:] = _placed(gpu, rank_input(call, rank))
    ops = gpu.ops if gpu is not None else HOST_OPS

    # In place, a point-to-point call sends from the buffer it receives into, and its pieces
    # cross (sendrecv's whole buffer, alltoall's pieces for peers whose sends arrive first):
    # the sends read a copy taken as the call starts, within the timed call.
    # That copy goes to a buffer made and touched once, here: a fresh one per call would fault
    # its pages in within every timed call.
    snapshot = send.copy() if in_place and call.info.p2p else None

    def once():
        if on_call is not None:
            on_call(in_place)
        if snapshot is not None:
            snapshot[...] = send
        try:
            run_programs(call, programs, rank, links, send if snapshot is None else snapshot, recv, timeout_s,
                         ops=ops, alive=boot.check)
        except (ExecuteError, ShmTimeoutError, NetError) as err:
            # A peer stopped moving: tell the others through the bootstrap, whose root names a rank
            # that died (its connection closed) or hangs (it sends nothing).
            _report_stuck(boot, err)

    for _ in range(options.warmup_iters):
        once()
    _exchange(boot, None)
    start = time.perf_counter()
    for _ in range(options.iters):
        once()
    elapsed_us = (time.perf_counter() - start) / options.iters * 1e6
    wrong = None
    if options.check:
        send[:] = _placed(gpu, rank_input(call, rank))
        once()
        sends = [rank_input(call, r) for r in range(call.nranks)]
        got = gpu.to_host(recv) if gpu is not None else recv
        wrong = count_wrong(call, got, expected_output(call, rank, sends))
    times = _exchange(boot, [elapsed_us, wrong])
    total_wrong = None if wrong is None else sum(w for _, w in times)
    return measurement(call.collective, call.nranks, call.nbytes, max(max(t for t, _ in times), 1e-3), total_wrong)


def _placed(gpu, host: np.ndarray):
    """`host` where the rank's buffers are: on its GPU with `gpu`, else as it is."""
    return gpu.to_device(host) if gpu is not None else host


def plan_rank(job, call: Call, rank: int):
    """The plan of `call` (a P2P plan record for sendrecv and alltoall) and `rank`'s programs."""
    plan = call_plan(job, call)
    return plan, job_programs(job, plan, [rank])[rank]


def _one_size(boot: Bootstrap, job, call: Call, tag: str, options: RunOptions, timeout_s: float,
              net: NetPeers | None, traced: bool, gpu=None, logger: JobLogger | None = None
              ) -> tuple[ResultRow, list | None]:
    """Plan `call`, agree on the plan, connect, and time it out of place and in place; where
    `traced`, every rank's spans of one more call (`_traced`). `logger` writes each call's NCCL_DEBUG
    lines."""
    plan, programs = plan_rank(job, call, boot.rank)

    def on_call(in_place: bool) -> None:
        if logger is not None:
            logger.call(call, plan.algorithm, in_place)

    check_same_plan(_exchange(boot, plan_fingerprint(plan)))
    check_runnable(programs, plan.algorithm)
    try:
        links = open_links(programs, boot.rank, tag, plan.protocol, slot_nbytes(job, plan), timeout_s,
                           lambda: _exchange(boot, None), net, gpu)
    except (ShmTimeoutError, NetError) as err:
        _report_stuck(boot, err)  # a peer that never connected: the bootstrap says whether it ended
    try:
        out = _timed(boot, call, programs, links, options, False, timeout_s, gpu, on_call)
        inp = _timed(boot, call, programs, links, options, True, timeout_s, gpu, on_call)
        spans = _traced(boot, call, programs, links, timeout_s, gpu) if traced else None
    except BaseException:
        for ring in links.values():
            if isinstance(ring, ProxiedEnd):
                ring.abandon()
        raise
    finally:
        for ring in links.values():
            ring.close()
    plan_info = {"algorithm": plan.algorithm, "protocol": plan.protocol, "nchannels": plan.n_channels,
                 "nthreads": plan.n_threads}
    return ResultRow(call.nbytes, call.count, call.dtype, call.redop, call.root, out, inp, plan_info), spans


def _traced(boot: Bootstrap, call: Call, programs, links, timeout_s: float, gpu=None) -> list:
    """One more out-of-place call, every pass over slots recorded; every rank's spans, (rank,
    channel, stream, primitive, start_us, end_us, args), in microseconds from the moment the ranks
    left the barrier before it (each rank by its own clock)."""
    send, recv = _buffers(call, boot.rank, False, gpu.cupy if gpu is not None else np)
    send[:] = _placed(gpu, rank_input(call, boot.rank))
    mine: list = []
    _exchange(boot, None)
    start = time.perf_counter()
    try:
        run_programs(call, programs, boot.rank, links, send, recv, timeout_s, mine,
                     gpu.ops if gpu is not None else HOST_OPS, boot.check)
    except (ExecuteError, ShmTimeoutError, NetError) as err:
        _report_stuck(boot, err)
    ours = [[channel, stream, op, round((t0 - start) * 1e6, 3), round((t1 - start) * 1e6, 3),
             {"recv_from": list(recv_from), "send_to": list(send_to), "steps": [first, first + steps]}]
            for channel, stream, op, recv_from, send_to, first, steps, t0, t1 in mine]
    return [(rank, *span) for rank, spans in enumerate(_exchange(boot, ours)) for span in spans]


def host_id(params: Params) -> str:
    """This host's identity, as NCCL's getHostHash builds it: NCCL_HOSTID, else the hostname and
    the kernel's boot id (two containers of one machine are one host)."""
    if params.get("NCCL_HOSTID"):
        return str(params.get("NCCL_HOSTID"))
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}{boot}"


def node_layout(hosts: list[str]) -> tuple[int, ...]:
    """Each rank's node from the hosts they reported: ranks of a node must be consecutive and
    every node must hold as many, as the job's node x GPU numbering needs."""
    order: list[str] = []
    for h in hosts:
        if h not in order:
            order.append(h)
    nodes = tuple(order.index(h) for h in hosts)
    per_node = len(hosts) // len(order)
    if len(hosts) % len(order) or any(n != r // per_node for r, n in enumerate(nodes)):
        counts = ", ".join(f"{sum(1 for n in nodes if n == i)} on host {i}" for i in range(len(order)))
        raise UsageError(f"the ranks sit on {len(order)} hosts unevenly or out of order ({counts})", "nicksim run",
                         "as many ranks on every host, numbered host by host (rank = host x ranks per host + "
                         "local rank)")
    return nodes


def _net_peers(boot: Bootstrap, nodes: tuple[int, ...], params: Params, root: tuple[str, int],
               timeout_s: float, local_rank: int = 0) -> tuple[NetPeers | None, str]:
    """This rank's listener and every rank's address, when the job spans hosts, with the rank's
    IB verbs transport where every rank has one (NET/IB, as NCCL prefers it to sockets); and which
    interface carries the sockets (for the header)."""
    if len(set(nodes)) == 1:
        _exchange(boot, None)
        return None, ""
    ifaces = find_interfaces(params.get("NCCL_SOCKET_IFNAME"), root[0])
    ifname, addr = ifaces[0]
    ib = _ib_transport(params, local_rank)
    listener = None
    try:
        listener = NetListener(addr, timeout_s)
        reports = _exchange(boot, [list(listener.address), ib.name if ib is not None else None])
        _same_network(reports)
    except BaseException:
        if listener is not None:
            listener.close()
        if ib is not None:
            ib.close()
        raise
    addresses = tuple(tuple(a) for a, _ in reports)
    return NetPeers(nodes, addresses, listener, socket_config(params, ifname), ib), ifname


def _ib_transport(params: Params, local_rank: int) -> IbNet | None:
    """The rank's IB verbs transport, where NCCL_IB_DISABLE leaves it on and this host can open
    one (else NET over sockets, as NCCL falls back after "NET/IB : No device found.")."""
    if verbs_unavailable(params.get("NCCL_IB_HCA"), int(params.get("NCCL_IB_DISABLE"))):
        return None
    try:
        return ib_net(params, local_rank)
    except (VerbsUnavailable, VerbsError):
        return None


def _same_network(reports: list) -> None:
    """Every rank's NET must be the same kind: a rank on sockets cannot reach one on verbs."""
    on_ib = [r for r, (_, ib) in enumerate(reports) if ib is not None]
    if on_ib and len(on_ib) != len(reports):
        others = [r for r in range(len(reports)) if r not in on_ib]
        raise UsageError(f"ranks {_ranks_text(on_ib)} have NET/IB and ranks {_ranks_text(others)} only NET/Socket",
                         "NET", "RDMA devices and pyverbs on every host, or NCCL_IB_DISABLE=1 on every rank")


def _ranks_text(ranks: list[int]) -> str:
    return ",".join(str(r) for r in ranks)


def _check_root(options: RunOptions, nranks: int) -> None:
    """A rooted collective's root must be a rank of the job (else no rank would ever send it)."""
    if COLLECTIVE_TABLE[options.collective].rooted and not 0 <= options.root < nranks:
        raise UsageError(f"root {options.root} is not a rank of this job", "-r", f"0..{nranks - 1}")


_GIB = 1 << 30


def available_nbytes() -> int:
    """The memory this host can give now (MemAvailable), else all of it."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def usable_nbytes(available: int) -> int:
    """What a host's ranks may take of `available` bytes: nccl-tests (src/common.cu, 2.13+)
    reserves 1 GiB per 16 GiB (at most 4 GiB) and 1 GiB more for the rest of the process."""
    reserve = min(-(-available // (16 * _GIB)) * _GIB, 4 * _GIB) + _GIB
    return max(0, available - reserve)


def rank_nbytes(call: Call, check: int) -> int:
    """The memory a rank's buffers for `call` take at once: send and receive; with the check,
    every rank's input and the expected output besides (nccl-tests' `expected` buffer)."""
    elem = np.dtype(storage_dtype(call.dtype)).itemsize
    buffers = (call.send_count + call.recv_count) * elem
    return buffers + ((call.nranks + 2) * max(call.send_count, call.recv_count) * elem if check else 0)


def fitting_max_nbytes(options: RunOptions, nranks: int, rank_budget: int) -> int:
    """The largest nccl-tests size (at most options' largest) whose buffers fit in `rank_budget`
    bytes per rank; 0 where none does."""
    def fits(size: int) -> bool:
        call = call_for_size(options.collective, size, options.dtype, options.redop, options.root, nranks)
        return rank_nbytes(call, options.check) <= rank_budget
    lo, hi = 0, max(options.sizes)
    if fits(hi):
        return hi
    while lo < hi:  # the buffers grow with the size: the last size that fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    elem = np.dtype(storage_dtype(options.dtype)).itemsize
    return lo - lo % elem


def _sizes_that_fit(boot: Bootstrap, options: RunOptions, nodes: tuple[int, ...]) -> tuple[tuple[int, ...], int | None]:
    """The sizes the ranks run: every rank's share of its host's memory is exchanged and the
    smallest bounds the largest size, as nccl-tests reduces maxBytes "due to memory limitation"
    (and the smallest with it); the new largest size where it was reduced, else None."""
    on_host = nodes.count(nodes[boot.rank])
    budget = min(_exchange(boot, usable_nbytes(available_nbytes()) // on_host))
    most = fitting_max_nbytes(options, boot.size, budget)
    if most >= max(options.sizes):
        return options.sizes, None
    if most <= 0:
        raise UsageError(f"no size fits: {budget} bytes of this host's memory per rank", "nicksim run",
                         "a host with more memory, or fewer ranks per host")
    return tuple(s for s in options.sizes if s <= most) or (most,), most


def run_rank(env: RankEnv, root: tuple[str, int], options: RunOptions, params: Params,
             on_joined=None, on_row=None, on_trace=None) -> list[ResultRow]:
    """One rank's run (see the module docstring); rank 0 calls `on_joined(layout, reduced)` once
    every rank has joined, with a phrase saying where they run and the largest size where memory
    made it smaller than asked (else None), `on_row(row)` as each size completes and,
    with options.trace, `on_trace(row, spans)` for the largest size, and returns the rows; the
    others return []."""
    timeout_s = float(params.get("NICKSIM_TIMEOUT"))
    _check_root(options, env.size)
    watch_parent()  # a rank ends with its launcher
    with Bootstrap.join(env.rank, env.size, root, timeout_s, job_identity(os.environ)) as boot:
        nodes = node_layout(_exchange(boot, host_id(params)))
        nnodes = len(set(nodes))
        job = _job_for(options, env.size, nnodes, params)
        gpu = _gpu_for(params, env, nnodes)
        logger = _rank_logger(job, boot.rank, env, params)
        # the job's own settings: the IB knobs' defaults are its release's (NCCL_IB_TIMEOUT 18 in 2.14-2.22)
        net, ifname = _net_peers(boot, nodes, job.params, root, timeout_s, env.local_rank)
        if logger.active:
            logger.init(find_interfaces(params.get("NCCL_SOCKET_IFNAME"), root[0]),
                        net.ib.name if net is not None and net.ib is not None else None)
        try:
            # Segment names must match on every rank: rank 0's process and port name the job.
            job_tag = _exchange(boot, f"{os.getpid()}-{root[1]}" if env.rank == 0 else None)[0]
            where = _layout_text(env.size, nnodes, ifname, net, gpu)
            sizes, reduced = _sizes_that_fit(boot, options, nodes)
            if env.rank == 0 and on_joined is not None:
                on_joined(where if options.job_spec is None else f"the plans of {job.system_name} ({job.nranks} ranks, "
                          f"{job.nodes} node(s)) run by {where}", reduced)
            rows = []
            for size in sizes:
                call = call_for_size(options.collective, size, options.dtype, options.redop, options.root, env.size)
                traced = options.trace and size == sizes[-1]
                row, spans = _one_size(boot, job, call, f"{job_tag}-{len(rows)}", options, timeout_s, net, traced,
                                       gpu, logger)
                rows.append(row)
                if env.rank == 0 and on_row is not None:
                    on_row(row)
                if env.rank == 0 and spans is not None and on_trace is not None:
                    on_trace(row, spans)
        finally:
            if net is not None:
                net.listener.close()
                if net.ib is not None:
                    net.ib.close()
        logger.destroy()
        logger.sink.close()
        return rows if env.rank == 0 else []


def _rank_logger(job, rank: int, env: RankEnv, params: Params) -> JobLogger:
    """This process's NCCL_DEBUG output, under its own host name, pid and thread."""
    who = Identity(socket.gethostname(), os.getpid(), threading.get_native_id(), env.local_rank)
    config = debug_config(params, job.system.rules.version.minor)
    return JobLogger(job, LogSink(config, flush=True), (rank,), {rank: who})


def _job_for(options: RunOptions, nranks: int, nnodes: int, params: Params):
    """The job whose plans the ranks run: options.job_spec's, which must have a rank per process;
    else every host as a HOST_SYSTEM node of its ranks."""
    if options.job_spec is not None:
        job = load_job(options.job_spec, params)
        if job.nranks != nranks:
            raise UsageError(f"the job has {job.nranks} ranks and {nranks} processes run", "--engine real",
                             f"{job.nranks} processes, one per rank")
        return job
    per_node = nranks // nnodes
    if per_node > MAX_RANKS_PER_HOST:
        raise UsageError(f"{per_node} ranks on one host", "nicksim run", f"at most {MAX_RANKS_PER_HOST}: a host is "
                         f"planned as {HOST_SYSTEM}, whose GPUs join by shared memory")
    return load_job(JobSpec(system=HOST_SYSTEM, nodes=nnodes, gpus_per_node=per_node,
                            nccl_version=options.nccl_version), params)


def run_device(params: Params) -> str:
    """NICKSIM_DEVICE, checked: "cpu", or "gpu" where CuPy sees a device (else GpuUnavailable);
    `nicksim run` asks once before it starts any rank."""
    device = str(params.get("NICKSIM_DEVICE")).strip().lower()
    if device not in ("cpu", "gpu"):
        raise UsageError(f"NICKSIM_DEVICE={params.get('NICKSIM_DEVICE')}", "NICKSIM_DEVICE", "cpu or gpu")
    if device == "gpu":
        why = gpu_unavailable()
        if not why.startswith("CuPy sees"):
            raise GpuUnavailable(f"NICKSIM_DEVICE=gpu, but {why}", "cuda", "a host with an NVIDIA GPU and "
                                 "pip install 'nicksim[gpu]', or NICKSIM_DEVICE=cpu")
    return device


def _gpu_for(params: Params, env: RankEnv, nnodes: int):
    """The rank's GPU runtime where NICKSIM_DEVICE=gpu (cuda_ipc.py), else None (the CPU)."""
    if run_device(params) == "cpu":
        return None
    if nnodes > 1:
        raise UsageError(f"NICKSIM_DEVICE=gpu with ranks on {nnodes} hosts", "NICKSIM_DEVICE",
                         "gpu for ranks on one host (CUDA IPC), cpu across hosts")
    from .cuda_ipc import gpu_runtime  # CuPy is imported only where it is asked for
    return gpu_runtime(env.local_rank)


def _layout_text(nranks: int, nnodes: int, ifname: str, net: NetPeers | None, gpu=None) -> str:
    if gpu is not None:
        return f"{nranks} ranks on this host's GPUs (CUDA IPC, CuPy kernels)"
    if net is None:
        return f"{nranks} ranks on this host (shared memory)"
    if net.ib is not None:
        qps = net.ib.settings.qps
        return (f"{nranks} ranks on {nnodes} hosts, {nranks // nnodes} per host (shared memory inside a host, IB "
                f"verbs between hosts on {net.ib.name}: {qps} queue pair(s) per connection)")
    socks = f"{net.config.nthreads} x {net.config.nsocks_per_thread}" if net.config.nsocks else "1"
    return (f"{nranks} ranks on {nnodes} hosts, {nranks // nnodes} per host (shared memory inside a host, sockets "
            f"between hosts over {ifname}: {socks} socket(s) per connection)")


def spawned_layout(job) -> str:
    """Where `run_job`'s ranks run: every one a process on this host, on its GPU where
    NICKSIM_DEVICE=gpu."""
    if run_device(job.params) == "gpu":
        return f"{job.nranks} ranks on this host's GPUs (CUDA IPC, CuPy kernels)"
    return f"{job.nranks} ranks on this host (shared memory)"


def unused_here(params: Params) -> list[str]:
    """The real backend's parts this host's ranks cannot use, each with the reason."""
    unused = [] if str(params.get("NICKSIM_DEVICE")).strip().lower() == "gpu" else \
        [f"GPU kernels and CUDA IPC ({gpu_unavailable()})"]
    no_verbs = verbs_unavailable(params.get("NCCL_IB_HCA"), int(params.get("NCCL_IB_DISABLE")))
    if no_verbs:
        unused.append(f"IB verbs ({no_verbs})")
    return unused


def _rows_as_calls(job, calls: Sequence[Call]) -> tuple[int, ...]:
    """nccl-tests' sizes whose calls are `calls` (the ranks make each call from its size)."""
    first = calls[0]
    sizes = tuple(call.nbytes for call in calls)
    for call, size in zip(calls, sizes):
        again = call_for_size(first.collective, size, first.dtype, first.redop, max(first.root, 0), job.nranks)
        if call.collective != first.collective or again != call:
            raise UsageError(f"{call.collective} of {call.count} {call.dtype}", "real engine",
                             "nccl-tests' calls of one collective (as `perf` makes them for each size)")
    return sizes


def check_runnable_here(job, calls: Sequence[Call], check: int = 1) -> None:
    """Raise UsageError where `job`'s `calls` cannot run here: more ranks than processes this host
    takes, buffers larger than its memory, NICKSIM_DEVICE=gpu without a GPU, or a plan the backend
    cannot run (every rank would stop with the same line)."""
    if job.nranks > MAX_SPAWNED_RANKS:
        raise UsageError(f"the job has {job.nranks} ranks, each a process on this host", "--engine real",
                         f"a job of at most {MAX_SPAWNED_RANKS} ranks (--nodes, --gpus-per-node)")
    run_device(job.params)
    for call in calls:
        plan, programs = plan_rank(job, call, 0)
        check_runnable(programs, plan.algorithm)
    budget = usable_nbytes(available_nbytes()) // job.nranks
    too_big = [call for call in calls if rank_nbytes(call, check) > budget]
    if too_big:
        first = too_big[0]
        options = RunOptions(first.collective, tuple(c.nbytes for c in calls), first.dtype, first.redop,
                             max(first.root, 0), 1, 0, check, job.spec.nccl_version)
        raise UsageError(f"a {first.nbytes}-byte {first.collective} needs {rank_nbytes(first, check)} bytes per rank "
                         f"and this host has {budget} for each of {job.nranks} ranks", "--engine real",
                         f"sizes up to {fitting_max_nbytes(options, job.nranks, budget)} bytes (-e)")


def run_job(job, calls: Sequence[Call], iters: int, warmup_iters: int, check: int, trace: bool,
            on_result=None, result_type=None) -> list:
    """`calls` run for real on `job`'s plans: a process per rank on this host (`python -m
    nicksim.realhw.worker`), each joining as under a launcher; rank 0 hands back each size's
    times and wrong-element counts as it completes, which become `result_type` records
    (engines.CallResult) passed to `on_result`. A plan the backend cannot run is refused before
    any rank starts; ranks that fail have said why on stderr (RanksFailed)."""
    if not calls:
        return []
    sizes = _rows_as_calls(job, calls)
    first = calls[0]
    options = RunOptions(first.collective, sizes, first.dtype, first.redop, max(first.root, 0), iters, warmup_iters,
                         check, job.spec.nccl_version, trace, job.spec)
    results: list = []
    with tempfile.TemporaryDirectory(prefix="nicksim-real-") as tmp:
        task, out = Path(tmp) / "task.json", Path(tmp) / "results.jsonl"
        task.write_text(json.dumps({"options": {**asdict(options), "job_spec": asdict(job.spec)},
                                    "settings": {k: v for k, v in job.params.raw.items() if k != "NICKSIM_COMM_ID"},
                                    "results": str(out)}))
        read = [0]

        def collect() -> None:  # rank 0 appends a line per size as it completes
            if not out.exists():
                return
            text = out.read_text()
            lines = text[read[0]:].split("\n")
            for line in lines[:-1]:
                read[0] += len(line) + 1
                item = json.loads(line)
                call = calls[len(results)]
                result = result_type(call, item["time_us"], item["algorithm"], item["protocol"], item["nchannels"],
                                     item["nthreads"], "real", tuple(tuple(s) for s in item["spans"] or ()) or None,
                                     item["in_place_time_us"], tuple(item["nwrong"]))
                results.append(result)
                if on_result is not None:
                    on_result(result)

        # The ranks are this run's, whatever launcher may have started this process.
        launcher_vars = {name for launcher in LAUNCHERS for name in launcher[1:]}
        environ = {k: v for k, v in os.environ.items() if k not in launcher_vars}
        status = spawn(["-m", "nicksim.realhw.worker", str(task)], job.nranks, environ, collect)
    if status:
        raise RanksFailed(status)
    return results


@dataclass(frozen=True)
class RunDone:
    """How `nicksim run` ended in this process: its exit status, and on rank 0 (or the process
    that started the ranks: none) the rows and the ranks that ran them."""

    status: int
    rows: tuple[ResultRow, ...] = ()
    nranks: int = 0


def run_command(options: RunOptions, params: Params, nranks: int | None, argv: Sequence[str], header: str,
                emit: Callable[[str], None], on_trace=None, tests_version: str = NCCL_TESTS_LATEST) -> RunDone:
    """`nicksim run`: without a launcher, start `nranks` ranks here, each running `nicksim ARGV`
    as under one (at most MAX_RANKS_PER_HOST; a host is planned as HOST_SYSTEM); under a launcher,
    be its rank. Rank 0 writes nccl-tests' output as nccl-tests `tests_version` prints it to
    `emit` (nicksim's own lines, each starting "# nicksim": what runs where, what this host cannot
    use; `header` — nccl-tests' lines before its devices, one or more —, the table as rows
    complete, the footer and closing lines) and gives the traced size to `on_trace(row, spans,
    nranks)`."""
    env = rank_env(os.environ)
    if env is None:  # no launcher: start the ranks here, each of them joining as under one
        run_device(params)  # a device that cannot be used is said once, before any rank starts
        if nranks is None:
            raise UsageError("no launcher started this process and -np is not given", "nicksim run",
                             "-np N, or run under torchrun, mpirun or srun")
        if nranks > MAX_RANKS_PER_HOST:
            raise UsageError(f"-np {nranks} ranks on this host", "-np", f"at most {MAX_RANKS_PER_HOST}: a host "
                             f"is planned as {HOST_SYSTEM}, whose GPUs join by shared memory")
        _check_root(options, nranks)  # said once here, not by every rank
        return RunDone(spawn(["-m", "nicksim", *argv], nranks, os.environ))
    root = root_address(params, os.environ)
    if root is None:
        raise UsageError(f"rank {env.rank} of {env.size} ({env.launcher}) has no root to join", "nicksim run",
                         "NICKSIM_COMM_ID=host:port, or MASTER_ADDR and MASTER_PORT")
    if nranks is not None and nranks != env.size:
        raise UsageError(f"-np {nranks} under {env.launcher}, which started {env.size} ranks", "-np",
                         f"{env.size}, or leave -np out")

    def joined(layout: str, reduced: int | None) -> None:  # nccl-tests prints its header once every rank is up
        emit(f"# nicksim run {options.collective}: {layout}, NCCL {options.nccl_version} plans")
        unused = unused_here(params)
        if unused:
            emit(f"# nicksim: not used here: {'; '.join(unused)}")
        for line in header.split("\n"):
            emit(line)
        if reduced is not None:  # nccl-tests' own words (src/common.cu)
            emit("#")
            emit(f"# Reducing maxBytes to {reduced} due to memory limitation")
        for line in table_header(tests_version):
            emit(line)

    printed: list[ResultRow] = []

    def row_done(row: ResultRow) -> None:
        emit(format_row(row, tests_version, index=len(printed)))
        printed.append(row)

    traced = None if on_trace is None else (lambda row, spans: on_trace(row, spans, env.size))
    rows = run_rank(env, root, options, params, joined, row_done, traced)
    if env.rank == 0:
        for line in table_footer(options.collective, rows, version=tests_version, threads=1) + \
                closing_lines(tests_version):
            emit(line)
    # nccl-tests exits with EXIT_FAILURE where its check found wrong elements (the footer's FAILED).
    wrong = any((m.nwrong or 0) > 0 for row in rows for m in (row.out_of_place, row.in_place) if m is not None)
    return RunDone(1 if wrong else 0, tuple(rows), env.size if env.rank == 0 else 0)
