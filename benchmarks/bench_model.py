"""Time the model engine end to end for 8, 64, 1024 and 8192 GPUs, as ratios to a peer in the same run.

For each job size: topology and paths (`load`), NCCL's graph search, connect (the job's rings and
trees), the communicator's cost table, and a 31-size all_reduce sweep (8 B .. 8 GiB, what
`nicksim perf all_reduce` runs). The peer is the load step of the same job, so `ratio` says how
many loads each phase costs; nodes are identical, so only connect grows with the node count. The
last column is the whole job (load through sweep) in seconds; the bar is 10 s for 8192 GPUs. Run:

    python benchmarks/bench_model.py [--system dgx-h100] [--gpus 8 64 1024 8192] [--repeat 2]
"""
from __future__ import annotations

import argparse
import time

from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.studies.perf import perf_rows, sweep_sizes


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def one_run(system: str, nodes: int):
    params = read_params({})
    t_load, job = timed(lambda: load_job(JobSpec(system=system, nodes=nodes), params))
    t_search, _ = timed(lambda: job.graphs)
    t_connect, _ = timed(lambda: job.channels)
    t_comm, _ = timed(lambda: job.comm)
    t_sweep, rows = timed(lambda: perf_rows(job, "all_reduce", sweep_sizes(8, 8 << 30)))
    return (t_load, t_search, t_connect, t_comm, t_sweep), job, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="dgx-h100")
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 64, 1024, 8192])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"# model engine on {args.system}; best of {args.repeat}; ratios are to `load` of the same job")
    print(f"# {'GPUs':>6} {'load s':>8} {'search':>8} {'connect':>8} {'comm':>8} {'sweep':>8} {'total s':>8}  "
          f"top of the sweep")
    for gpus in args.gpus:
        runs = [one_run(args.system, max(1, gpus // 8)) for _ in range(args.repeat)]
        times, job, rows = min(runs, key=lambda r: sum(r[0]))
        load = times[0]
        ratios = " ".join(f"{t / load:>8.1f}" for t in times[1:])
        row, result = rows[-1]
        print(f"  {job.nranks:>6} {load:>8.4f} {ratios} {sum(times):>8.3f}  {result.algorithm}/{result.protocol} "
              f"{row.out_of_place.busbw_gbps:.1f} GB/s busbw")


if __name__ == "__main__":
    main()
