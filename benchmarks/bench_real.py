"""Time the real backend against peers measured in the same run.

A float all_reduce (or alltoall, `--collective`) of each `--size` (64 MiB by default; an
alltoall's size is each rank's whole send buffer, as nccl-tests counts it) on local ranks:
- `nicksim run` (shared memory, numpy kernels), its nccl-tests time out of place and in place;
- PyTorch's gloo backend on the same number of local processes (torch.distributed, TCP store),
  where torch is installed (`pip install torch==2.13.0` takes the CPU build kept on disk here);
- mpi4py's Allreduce over Open MPI, started by mpirun, where both are installed
  (`apt-get install openmpi-bin libopenmpi-dev; pip install mpi4py`);
- numpy's copy of the same buffer in this process, the memory bandwidth one rank can reach, and
  the same copy in two processes at once, which says how much memory bandwidth two cores share:
  a 2-rank ring all_reduce through shared memory must at least read each rank's input and write
  its output, the output through the cache (a write first reads its line), so 6 buffers' worth of
  traffic against the two copies' 4: its busbw over one memcpy's is at most t1 / (1.5 x t2).
Every peer runs the same size, warm-up and iterations, `--repeat` times; each figure is the median
of those runs (the machines are shared and noisy). Printed: ms per call and busbw (GB/s, as
nccl-tests computes it: algbw x 2(n-1)/n for all_reduce, (n-1)/n for alltoall) for each, then
nicksim's busbw (out of place) over each peer's, its in-place busbw over its out-of-place one, and
its busbw over memcpy's bandwidth, for 2 ranks and then 4. Run:

    python benchmarks/bench_real.py [--collective all_reduce] [--size 64M ...] [--ranks 2 4] [--iters 10]
                                    [--repeat 3]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from nicksim.studies.perf import parse_size
from nicksim.realhw.runner import free_port

GLOO_RANK = r"""
import os, sys, time
import torch, torch.distributed as dist
rank, size, port, nbytes, iters, warmup = map(int, sys.argv[1:7])
collective = sys.argv[7]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
x = torch.ones(nbytes // 4, dtype=torch.float32)
y = torch.empty_like(x)
call = (lambda: dist.all_reduce(x)) if collective == "all_reduce" else (lambda: dist.all_to_all_single(y, x))
for _ in range(warmup):
    call()
dist.barrier()
start = time.perf_counter()
for _ in range(iters):
    call()
elapsed = (time.perf_counter() - start) / iters
out = torch.tensor([elapsed])
dist.all_reduce(out, op=dist.ReduceOp.MAX)
if rank == 0:
    print(out.item(), flush=True)
dist.destroy_process_group()
"""


MPI_RANK = r"""
import sys, time
import numpy as np
from mpi4py import MPI
nbytes, iters, warmup = map(int, sys.argv[1:4])
collective = sys.argv[4]
comm = MPI.COMM_WORLD
x = np.ones(nbytes // 4, np.float32)
y = np.empty_like(x)
call = (lambda: comm.Allreduce(x, y)) if collective == "all_reduce" else (lambda: comm.Alltoall(x, y))
for _ in range(warmup):
    call()
comm.Barrier()
start = time.perf_counter()
for _ in range(iters):
    call()
elapsed = comm.allreduce((time.perf_counter() - start) / iters, op=MPI.MAX)
if comm.rank == 0:
    print(elapsed, flush=True)
"""


def nicksim_seconds(nranks: int, nbytes: int, iters: int, warmup: int, collective: str) -> tuple[float, float]:
    """(out of place, in place) seconds per call."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        subprocess.run([sys.executable, "-m", "nicksim", "run", collective, "-np", str(nranks), "-b", str(nbytes),
                        "-e", str(nbytes), "-n", str(iters), "-w", str(warmup), "-c", "0", "-J", out],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            row = json.load(f)["results"][0]
    return row["out_of_place"]["time"] / 1e6, row["in_place"]["time"] / 1e6


def gloo_seconds(nranks: int, nbytes: int, iters: int, warmup: int, collective: str) -> float | None:
    if importlib.util.find_spec("torch") is None:
        return None
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", GLOO_RANK, str(r), str(nranks), str(port), str(nbytes),
                               str(iters), str(warmup), collective], stdout=subprocess.PIPE, text=True)
             for r in range(nranks)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"gloo run failed: {[p.returncode for p in procs]}")
    return float(outs[0].strip())


def mpi4py_seconds(nranks: int, nbytes: int, iters: int, warmup: int, collective: str) -> float | None:
    if importlib.util.find_spec("mpi4py") is None or shutil.which("mpirun") is None:
        return None
    run = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(nranks), sys.executable,
                          "-c", MPI_RANK, str(nbytes), str(iters), str(warmup), collective],
                         capture_output=True, text=True, timeout=600)
    if run.returncode:
        raise SystemExit(f"mpi4py run failed: {run.stderr.strip()[-400:]}")
    return float(run.stdout.strip().splitlines()[-1])


def memcpy_seconds(nbytes: int, iters: int, warmup: int, ready=None) -> float:
    """numpy's copy of the buffer, per call; `ready()` is called between the warm-up and the timing."""
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    for _ in range(warmup):
        np.copyto(b, a)
    if ready is not None:
        ready()
    start = time.perf_counter()
    for _ in range(iters):
        np.copyto(b, a)
    return (time.perf_counter() - start) / iters


def _copy_in_process(barrier, results, nbytes: int, iters: int, warmup: int) -> None:
    results.put(memcpy_seconds(nbytes, iters, warmup, barrier.wait))


def concurrent_memcpy_seconds(nbytes: int, iters: int, warmup: int, nprocs: int = 2) -> float:
    """The slowest of `nprocs` processes each copying its own buffer at the same time."""
    barrier, results = multiprocessing.Barrier(nprocs), multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_copy_in_process, args=(barrier, results, nbytes, iters, warmup))
             for _ in range(nprocs)]
    for p in procs:
        p.start()
    times = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return max(times)


def median_of(repeat: int, timer, *args):
    """The median of `repeat` runs of timer(*args) (per element where it gives a tuple); None where
    the peer is not installed."""
    runs = [timer(*args) for _ in range(repeat)]
    if runs[0] is None:
        return None
    if isinstance(runs[0], tuple):
        return tuple(statistics.median(column) for column in zip(*runs))
    return statistics.median(runs)


def busbw_factor(collective: str, nranks: int) -> float:
    """nccl-tests' busbw over algbw: all_reduce 2(n-1)/n, alltoall (n-1)/n."""
    return (2 if collective == "all_reduce" else 1) * (nranks - 1) / nranks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--collective", choices=["all_reduce", "alltoall"], default="all_reduce")
    parser.add_argument("--size", nargs="+", default=["64M"])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for size in args.size:
        one_size(args, parse_size(size, "--size"))


def one_size(args, nbytes: int) -> None:
    coll = args.collective
    copy = median_of(args.repeat, memcpy_seconds, nbytes, args.iters, args.warmup)
    copy_gbps = nbytes / copy / 1e9
    both = median_of(args.repeat, concurrent_memcpy_seconds, nbytes, args.iters, args.warmup)
    print(f"# {coll} of {nbytes} bytes (float), median of {args.repeat} runs of {args.iters} iterations; "
          f"numpy memcpy of it: {copy * 1e3:.2f} ms, {copy_gbps:.2f} GB/s; two at once: {both * 1e3:.2f} ms each")
    peers = (("gloo", gloo_seconds), ("mpi4py", mpi4py_seconds))
    head = "".join(f" {name + ' ms':>10} {'busbw':>6}" for name, _ in peers)
    ratios = "".join(f" {'/' + name:>8}" for name, _ in peers)
    print(f"# {'ranks':>5} {'nicksim ms':>11} {'busbw':>6} {'inplace':>7}{head}   nicksim busbw:{ratios} "
          f"{'in/out':>7} {'/memcpy':>8}")
    for nranks in args.ranks:
        busbw = lambda s: nbytes / s / 1e9 * busbw_factor(coll, nranks)  # noqa: E731
        ours, ours_in = median_of(args.repeat, nicksim_seconds, nranks, nbytes, args.iters, args.warmup, coll)
        cols, ratio_cols = "", ""
        for _, timer in peers:
            peer = median_of(args.repeat, timer, nranks, nbytes, args.iters, args.warmup, coll)
            cols += f" {peer * 1e3:>10.2f} {busbw(peer):>6.2f}" if peer else f" {'-':>10} {'-':>6}"
            ratio_cols += f" {busbw(ours) / busbw(peer):>8.2f}" if peer else f" {'-':>8}"
        print(f"  {nranks:>5} {ours * 1e3:>11.2f} {busbw(ours):>6.2f} {busbw(ours_in):>7.2f}{cols}"
              f"                {ratio_cols} {ours / ours_in:>7.2f} {busbw(ours) / copy_gbps:>8.2f}")


if __name__ == "__main__":
    main()
