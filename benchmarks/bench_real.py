"""Time the real backend against peers measured in the same run.

One float all_reduce of `--size` bytes (64 MiB by default) on local ranks:
- `nicksim run` (shared memory, numpy kernels), out of place, its nccl-tests time;
- PyTorch's gloo backend on the same number of local processes (torch.distributed, TCP store),
  the same size, warm-up and iterations, where torch is installed (`pip install torch==2.13.0`
  takes the CPU build this machine keeps on disk);
- numpy's copy of the same buffer in this process, the memory bandwidth a rank can reach.
Printed: seconds per call and GB/s (algbw) for each, and the ratios the issue asks for (nicksim
over gloo, nicksim over memcpy), for 2 ranks and then 4. Run:

    python benchmarks/bench_real.py [--size 64M] [--ranks 2 4] [--iters 5]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from nicksim.perf import parse_size
from nicksim.realhw.runner import free_port

GLOO_RANK = r"""
import os, sys, time
import torch, torch.distributed as dist
rank, size, port, nbytes, iters, warmup = map(int, sys.argv[1:7])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
x = torch.ones(nbytes // 4, dtype=torch.float32)
for _ in range(warmup):
    dist.all_reduce(x)
dist.barrier()
start = time.perf_counter()
for _ in range(iters):
    dist.all_reduce(x)
elapsed = (time.perf_counter() - start) / iters
out = torch.tensor([elapsed])
dist.all_reduce(out, op=dist.ReduceOp.MAX)
if rank == 0:
    print(out.item(), flush=True)
dist.destroy_process_group()
"""


def nicksim_seconds(nranks: int, nbytes: int, iters: int, warmup: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        subprocess.run([sys.executable, "-m", "nicksim", "run", "all_reduce", "-np", str(nranks), "-b", str(nbytes),
                        "-e", str(nbytes), "-n", str(iters), "-w", str(warmup), "-c", "0", "-J", out],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            row = json.load(f)["results"][0]
    return row["out_of_place"]["time"] / 1e6


def gloo_seconds(nranks: int, nbytes: int, iters: int, warmup: int) -> float | None:
    if importlib.util.find_spec("torch") is None:
        return None
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", GLOO_RANK, str(r), str(nranks), str(port), str(nbytes),
                               str(iters), str(warmup)], stdout=subprocess.PIPE, text=True) for r in range(nranks)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"gloo run failed: {[p.returncode for p in procs]}")
    return float(outs[0].strip())


def memcpy_seconds(nbytes: int, iters: int) -> float:
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(iters):
            np.copyto(b, a)
        best = min(best, (time.perf_counter() - start) / iters)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="64M")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    nbytes = parse_size(args.size, "--size")
    gbps = lambda s: nbytes / s / 1e9  # noqa: E731
    copy = memcpy_seconds(nbytes, args.iters)
    print(f"# all_reduce of {nbytes} bytes (float); numpy memcpy of it: {copy * 1e3:.2f} ms, {gbps(copy):.2f} GB/s")
    print(f"# {'ranks':>5} {'nicksim ms':>11} {'GB/s':>6} {'gloo ms':>9} {'GB/s':>6} {'nicksim/gloo':>13} "
          f"{'nicksim/memcpy':>15}")
    for nranks in args.ranks:
        ours = nicksim_seconds(nranks, nbytes, args.iters, args.warmup)
        peer = gloo_seconds(nranks, nbytes, args.iters, args.warmup)
        peer_text = f"{peer * 1e3:>9.2f} {gbps(peer):>6.2f} {gbps(ours) / gbps(peer):>13.2f}" if peer else \
            f"{'-':>9} {'-':>6} {'(no torch)':>13}"
        print(f"  {nranks:>5} {ours * 1e3:>11.2f} {gbps(ours):>6.2f} {peer_text} {gbps(ours) / gbps(copy):>15.2f}")


if __name__ == "__main__":
    main()
