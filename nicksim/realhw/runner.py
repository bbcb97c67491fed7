"""`nicksim run`: a collective run for real by N ranks on this host, reported as nccl-tests does.

`spawn(argv, nranks, timeout_s)` starts the ranks itself when no launcher did: each a process
running the same command with torchrun's variables and NICKSIM_COMM_ID set, so every rank joins
the way it would under a launcher; it waits for them, stops the rest when one fails, and returns
the worst exit status. `run_rank(...)` is one rank's work: join the others (bootstrap.py), check
that they share this host (only shared memory joins ranks yet), then for every size build the
plan, agree on it (agree.py), open the connections (execute.py), time the warm-up and timed
iterations out of place and in place, check every element when asked (-c), and leave rank 0 to
print the nccl-tests table.

The host is planned as a node whose GPUs cannot reach each other (the catalog's PCIe box without
P2P), so every connection is shared memory, as NCCL's ladder gives a CPU-only node.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..calls import Call, call_for_size
from ..errors import UsageError
from ..job import JobSpec, load_job
from ..params import Params
from ..plan import plan_call, rank_programs
from ..report import measurement, ResultRow
from .agree import check_same_plan, plan_fingerprint
from .bootstrap import Bootstrap
from .execute import ExecuteError, open_links, run_programs
from .kernels import combine, from_float, post_op, pre_op, storage_dtype, to_float
from .launch import RankEnv
from .shm import ShmTimeoutError

__all__ = ["HOST_SYSTEM", "free_port", "spawn", "RunOptions", "run_rank", "rank_input", "expected_output", "count_wrong"]

HOST_SYSTEM = "pcie-8x-rtx4090"  # GPUs with no P2P between them: every connection is SHM


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn(argv: Sequence[str], nranks: int, environ: Mapping[str, str], timeout_s: float) -> int:
    """Run `nicksim ARGV` as `nranks` ranks on this host; the worst exit status of them."""
    root = f"127.0.0.1:{free_port()}"
    procs = []
    for rank in range(nranks):
        env = dict(environ, RANK=str(rank), WORLD_SIZE=str(nranks), LOCAL_RANK=str(rank), NICKSIM_COMM_ID=root)
        out = None if rank == 0 else subprocess.DEVNULL  # rank 0 prints the table; errors come from every rank
        procs.append(subprocess.Popen([sys.executable, "-m", "nicksim", *argv], env=env, stdout=out))
    try:
        worst, failed_at = 0, None
        while any(p.poll() is None for p in procs):
            codes = [p.returncode for p in procs if p.returncode is not None]
            if any(codes) and failed_at is None:
                failed_at = time.monotonic()  # the others learn through the bootstrap; give them the timeout
            if failed_at is not None and time.monotonic() - failed_at > timeout_s + 5:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
            time.sleep(0.05)
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


def rank_input(call: Call, rank: int) -> np.ndarray:
    """Rank `rank`'s send buffer: small whole values that differ by rank and element (exact in
    every type, so a reduction in any order gives the same integers)."""
    n = call.count * (call.nranks if call.collective == "reduce_scatter" else 1)
    values = (np.arange(n, dtype=np.int64) * 7 + rank * 13) % 9 - 4
    if call.dtype == "bfloat16":
        return from_float(values.astype(np.float32))
    return values.astype(storage_dtype(call.dtype))


def expected_output(call: Call, rank: int, sends: list[np.ndarray]) -> np.ndarray | None:
    """What `rank`'s receive buffer must hold after `call`, reducing in rank order (None: nothing)."""
    if call.collective == "all_gather":
        return np.concatenate(sends)
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


def _buffers(call: Call, rank: int, in_place: bool) -> tuple[np.ndarray, np.ndarray]:
    """(send, receive) buffers, the send one a view into the receive one in place (as nccl-tests
    sets them: all_gather's input at the rank's own piece, reduce_scatter's output at its own)."""
    storage = storage_dtype(call.dtype)
    out_n = call.count * (call.nranks if call.collective == "all_gather" else 1)
    in_n = call.count * (call.nranks if call.collective == "reduce_scatter" else 1)
    if not in_place:
        return np.empty(in_n, storage), np.zeros(out_n, storage)
    if call.collective == "all_gather":
        recv = np.zeros(out_n, storage)
        return recv[rank * call.count:(rank + 1) * call.count], recv
    if call.collective == "reduce_scatter":
        send = np.empty(in_n, storage)
        return send, send[rank * call.count:(rank + 1) * call.count]
    buf = np.empty(max(in_n, out_n), storage)
    return buf, buf


def _exchange(boot: Bootstrap, item) -> list:
    """allgather, where a rank that reports being stuck stops every rank with its reason."""
    items = boot.allgather(item)
    for rank, got in enumerate(items):
        if isinstance(got, dict) and "stuck" in got:
            raise ExecuteError(got["stuck"] if rank == boot.rank else f"rank {rank} stopped: {got['stuck']}", "run")
    return items


def _timed(boot: Bootstrap, call: Call, programs, links, step_nbytes: int, options: RunOptions, in_place: bool,
           timeout_s: float):
    """One placement of one size: warm-up, timed iterations, the check; its Measurement."""
    rank = boot.rank
    send, recv = _buffers(call, rank, in_place)
    send[:] = rank_input(call, rank)

    def once():
        try:
            run_programs(call, programs, rank, links, send, recv, step_nbytes, timeout_s)
        except (ExecuteError, ShmTimeoutError) as err:
            # A peer stopped moving: tell the others through the bootstrap, whose root names a rank
            # that died (its connection closed) or hangs (it sends nothing).
            _exchange(boot, {"stuck": err.line()})

    for _ in range(options.warmup_iters):
        once()
    _exchange(boot, None)
    start = time.perf_counter()
    for _ in range(options.iters):
        once()
    elapsed_us = (time.perf_counter() - start) / options.iters * 1e6
    wrong = None
    if options.check:
        send[:] = rank_input(call, rank)
        once()
        sends = [rank_input(call, r) for r in range(call.nranks)]
        wrong = count_wrong(call, recv, expected_output(call, rank, sends))
    times = _exchange(boot, [elapsed_us, wrong])
    total_wrong = None if wrong is None else sum(w for _, w in times)
    return measurement(call.collective, call.nranks, call.nbytes, max(max(t for t, _ in times), 1e-3), total_wrong)


def _one_size(boot: Bootstrap, job, call: Call, tag: str, options: RunOptions, timeout_s: float) -> ResultRow:
    """Plan `call`, agree on the plan, connect, and time it out of place and in place."""
    plan = plan_call(job.comm, call)
    check_same_plan(_exchange(boot, plan_fingerprint(plan)))
    trees = job.tree_links() if plan.algorithm == "Tree" else {}
    programs = rank_programs(plan, job.channels.rings, trees, boot.rank)
    links = open_links(programs, boot.rank, tag, plan.step_nbytes, timeout_s, lambda: _exchange(boot, None))
    try:
        out = _timed(boot, call, programs, links, plan.step_nbytes, options, False, timeout_s)
        inp = _timed(boot, call, programs, links, plan.step_nbytes, options, True, timeout_s)
    finally:
        for ring in links.values():
            ring.close()
    plan_info = {"algorithm": plan.algorithm, "protocol": plan.protocol, "nchannels": plan.n_channels,
                 "nthreads": plan.n_threads}
    return ResultRow(call.nbytes, call.count, call.dtype, call.redop, call.root, out, inp, plan_info)


def run_rank(env: RankEnv, root: tuple[str, int], options: RunOptions, params: Params,
             on_joined=None, on_row=None) -> list[ResultRow]:
    """One rank's run (see the module docstring); rank 0 calls `on_joined()` once every rank has
    joined and `on_row(row)` as each size completes, and returns the rows; the others return []."""
    timeout_s = float(params.get("NICKSIM_TIMEOUT"))
    with Bootstrap.join(env.rank, env.size, root, timeout_s) as boot:
        hosts = set(_exchange(boot, socket.gethostname()))
        if len(hosts) > 1:
            raise UsageError(f"the ranks run on {len(hosts)} hosts ({', '.join(sorted(hosts)[:4])})", "nicksim run",
                             "every rank on one host (the socket transport between hosts is not built yet)")
        job = load_job(JobSpec(system=HOST_SYSTEM, gpus_per_node=env.size, nccl_version=options.nccl_version), params)
        # Segment names must match on every rank: rank 0's process and port name the job.
        job_tag = _exchange(boot, f"{os.getpid()}-{root[1]}" if env.rank == 0 else None)[0]
        if env.rank == 0 and on_joined is not None:
            on_joined()
        rows = []
        for size in options.sizes:
            call = call_for_size(options.collective, size, options.dtype, options.redop, options.root, env.size)
            rows.append(_one_size(boot, job, call, f"{job_tag}-{len(rows)}", options, timeout_s))
            if env.rank == 0 and on_row is not None:
                on_row(rows[-1])
        return rows if env.rank == 0 else []
