"""Time the DES engine against the model engine in the same run, and show how its cost grows.

Three parts, each against a peer measured in the same run:
- `sweep`: `nicksim perf all_reduce` (31 sizes, 8 B .. 8 GiB) on 8 GPUs (one DGX H100) and on 16
  (two), des vs model; the bars are 10 s and 20 s for the des sweep on a 2-core machine;
- `growth`: one call at a time, varying one thing — nodes (ranks; a ring, whose nodes collapse, and
  NVLS Tree, whose nodes all differ), channels (NCCL_MAX_CTAS), size
  — with wall seconds, slices moved (transfers), streams simulated, and the ratio of seconds to the
  first row of the same series;
- `scale`: one 1 GiB call (all_reduce unless `--collectives` names others) on 8 x N GPUs, each in
  its own process: the CPU seconds of the simulation, the events its SimPy loop scheduled and the
  CPU seconds of a bare SimPy loop of as many events in the same process (the ratio is the cost of
  everything the model does per event), peak resident memory, against the model engine's answer
  for the same job. The bars (issue 28): all_reduce on 1024 GPUs under 10 s, on 8192 under 120 s
  and 4 GB; all_gather, reduce_scatter and alltoall on 1024 under 60 s each. all_reduce runs with
  SHARP (NCCL's choice is NVLS across nodes; every node behaves alike and is simulated once) and
  without (NVLS Tree: the two trees together set every node apart, so up to 64 nodes every node is
  simulated, and beyond that each channel's nodes are split on their own — `split` says which);
  `steps` is how many ring steps ran as one block (des.max_steps; 1: every step).
`--plot FILE` draws the growth series (seconds and transfers) to a PNG, `--scale-plot FILE` the scale
part's CPU seconds and events against ranks (log-log, beside a line of slope one). Run:

    python benchmarks/bench_des.py [--plot docs/des-cost.png] [--repeat 1] [--scale 16 128]
    python benchmarks/bench_des.py --only-scale --scale 8 32 128 --collectives all_reduce all_gather
    python benchmarks/bench_des.py --only-scale --scale 4 16 64 128 1024 --scale-plot docs/des-scale.png
    python benchmarks/bench_des.py --only-scale --scale 2 4 8 16 32 64 128 1024 \
        --collectives all_reduce all_gather reduce_scatter alltoall --up-to alltoall=64 --scale-plot docs/des-scale.png
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import simpy

from nicksim.calls import call_for_size
from nicksim.job import JobSpec, load_job
from nicksim.model.engine import des_setup, simulate
from nicksim.params import read_params
from nicksim.studies.perf import perf_rows, sweep_sizes


def job_of(nodes: int = 1, env: dict | None = None):
    job = load_job(JobSpec(system="dgx-h100", nodes=nodes), read_params(env or {}))
    job.comm  # search and connect are not what is timed here
    return job


def best(fn, repeat: int):
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        runs.append((time.perf_counter() - start, value))
    return min(runs, key=lambda r: r[0])


def sweeps(repeat: int) -> None:
    print("# sweep: all_reduce 8 B .. 8 GiB (31 sizes)")
    print(f"# {'GPUs':>5} {'model s':>9} {'des s':>9} {'des/model':>10}  largest size: des busbw vs model")
    for nodes in (1, 2):
        job = job_of(nodes)
        sizes = sweep_sizes(8, 8 << 30)
        t_model, model_rows = best(lambda: perf_rows(job, "all_reduce", sizes), repeat)
        t_des, des_rows = best(lambda: perf_rows(job, "all_reduce", sizes, engine="des"), repeat)
        m, d = model_rows[-1][0].out_of_place.busbw_gbps, des_rows[-1][0].out_of_place.busbw_gbps
        print(f"  {job.nranks:>5} {t_model:>9.3f} {t_des:>9.3f} {t_des / t_model:>10.1f}  {d:.1f} vs {m:.1f} GB/s")


def one(job, nbytes: int):
    call = call_for_size("all_reduce", nbytes, "float", "sum", 0, job.nranks)
    setup = des_setup(job)
    start = time.perf_counter()
    run = simulate(setup, call)
    return time.perf_counter() - start, run


def growth(repeat: int) -> dict[str, list[tuple]]:
    series: dict[str, list[tuple]] = {}
    cases = {
        "ranks (nodes x 8, 1 GiB, NCCL_ALGO=Ring)": [(8 * n, job_of(n, {"NCCL_ALGO": "Ring"}), 1 << 30)
                                                     for n in (1, 2, 4, 8)],
        "ranks (nodes x 8, 1 GiB, NCCL_ALGO=NVLSTree: every node simulated)": [
            (8 * n, job_of(n, {"NCCL_ALGO": "NVLSTree"}), 1 << 30) for n in (2, 4, 8, 16)],
        "channels (NCCL_MAX_CTAS, 8 GPUs, 1 GiB ring)": [(c, job_of(1, {"NCCL_ALGO": "Ring", "NCCL_MAX_CTAS": str(c)}),
                                                          1 << 30) for c in (2, 4, 8, 16, 24)],
        "size (8 GPUs, NCCL's choice)": [(nbytes, job_of(1), nbytes) for nbytes in (1 << 20, 16 << 20, 256 << 20,
                                                                                    1 << 30, 8 << 30)],
    }
    for name, points in cases.items():
        print(f"# growth in {name}")
        print(f"# {'x':>11} {'seconds':>9} {'ratio':>7} {'transfers':>10} {'streams':>8}  plan")
        rows = []
        for x, job, nbytes in points:
            seconds, run = min((one(job, nbytes) for _ in range(repeat)), key=lambda r: r[0])
            rows.append((x, seconds, run.n_transfers, run.n_streams))
            print(f"  {x:>11} {seconds:>9.3f} {seconds / rows[0][1]:>7.1f} {run.n_transfers:>10} {run.n_streams:>8}  "
                  f"{run.plan.algorithm}/{run.plan.protocol} {run.plan.n_channels}ch x{run.chunk_factor}")
        series[name] = rows
    return series


def bare_simpy_s(n_events: int, n_processes: int = 1000) -> float:
    """CPU seconds a bare SimPy loop takes for `n_events` events: `n_processes` processes each
    waiting on timeouts (one event and one process resumption each, nothing else)."""
    env = simpy.Environment()
    per = max(1, n_events // n_processes)

    def waits():
        for _ in range(per):
            yield env.timeout(1.0)

    for _ in range(n_processes):
        env.process(waits())
    start = time.process_time()
    env.run()
    return time.process_time() - start


def one_large(nodes: int, sharp: bool, collective: str = "all_reduce") -> dict:
    """One 1 GiB call on `nodes` DGX H100 (run in a child process, so that its memory and CPU time
    are its own), and a bare SimPy loop of the same event count measured after it."""
    env = {"NCCL_COLLNET_ENABLE": "1"} if sharp else {}
    start = time.process_time()
    job = load_job(JobSpec(system="dgx-h100", nodes=nodes, sharp=sharp), read_params(env))
    call = call_for_size(collective, 1 << 30, "float", "sum", 0, job.nranks)
    from nicksim.engines import model_result
    model_us = model_result(job, call).time_us
    loaded = time.process_time()
    run = simulate(des_setup(job), call)
    done = time.process_time()
    rss = peak_rss_mib()
    return {"gpus": job.nranks, "sharp": sharp, "collective": collective, "algorithm": run.plan.algorithm,
            "protocol": run.plan.protocol, "des_us": run.time_us, "model_us": model_us, "load_s": loaded - start,
            "des_s": done - loaded, "events": run.n_events, "bare_s": bare_simpy_s(run.n_events),
            "classes": run.n_node_classes, "split": "exact" if run.exact else "per-channel", "maxrss_mib": rss,
            "step_blocks": run.step_factor}


def peak_rss_mib() -> float:
    """This process's own peak resident memory (VmHWM: ru_maxrss would carry the parent's over exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def scale(node_counts: list[int], collectives: list[str], up_to: dict[str, int] | None = None
          ) -> dict[str, list[dict]]:
    print("# scale: one 1 GiB call, each in its own process; CPU seconds of the simulation (des s), of a bare")
    print("# SimPy loop of as many events in the same process (bare s), and their ratio")
    print(f"# {'coll':<14} {'GPUs':>5} {'SHARP':>5} {'algorithm':>15} {'des s':>7} {'events':>9} {'bare s':>7} "
          f"{'x bare':>6} {'MiB':>6} {'classes':>7} {'split':>11} {'steps':>5}  des vs model time")
    series: dict[str, list[dict]] = {}
    for collective in collectives:
        for sharp in (True, False) if collective == "all_reduce" else (False,):
            for nodes in node_counts:
                if nodes > (up_to or {}).get(collective, nodes):
                    print(f"  {collective:<14} {8 * nodes:>5} left out (--up-to)", flush=True)
                    continue
                out = subprocess.run([sys.executable, __file__, "--one", str(nodes), "--collectives", collective]
                                     + (["--sharp"] if sharp else []), capture_output=True, text=True, check=True)
                r = json.loads(out.stdout)
                algo = f"{r['algorithm']}/{r['protocol']}"
                print(f"  {collective:<14} {r['gpus']:>5} {'yes' if sharp else 'no':>5} {algo:>15} {r['des_s']:>7.1f} "
                      f"{r['events']:>9} {r['bare_s']:>7.2f} {r['des_s'] / r['bare_s']:>6.0f} {r['maxrss_mib']:>6.0f} "
                      f"{r['classes']:>7} {r['split']:>11} {r['step_blocks']:>5}  {r['des_us']:.0f} vs "
                      f"{r['model_us']:.0f} us", flush=True)
                series.setdefault(f"{collective}{', SHARP' if sharp else ''}", []).append(r)
    return series


def scale_plot(series: dict[str, list[dict]], path: str) -> None:
    """CPU seconds and events against ranks, log-log; circled where each channel was split on its
    own (not every node simulated exactly), squared where a ring ran its steps in blocks."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (cost, events) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, rows in series.items():
        xs = [r["gpus"] for r in rows]
        line, = cost.plot(xs, [r["des_s"] for r in rows], "o-", label=f"{name}: {rows[-1]['algorithm']}")
        split = [r for r in rows if r["split"] != "exact"]
        cost.plot([r["gpus"] for r in split], [r["des_s"] for r in split], "o", markersize=10,
                  markerfacecolor="none", color=line.get_color())
        blocks = [r for r in rows if r.get("step_blocks", 1) > 1]
        cost.plot([r["gpus"] for r in blocks], [r["des_s"] for r in blocks], "s", markersize=10,
                  markerfacecolor="none", color=line.get_color())
        events.plot(xs, [r["events"] for r in rows], "o-", color=line.get_color(), label=name)
    for ax, unit in ((cost, "CPU seconds (simulation)"), (events, "SimPy events")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("GPUs (DGX H100 nodes x 8)")
        ax.set_ylabel(unit)
        high = ax.get_xlim()[1]
        first = min(min(r["gpus"] for r in rows) for rows in series.values())
        y0 = min(r["des_s" if ax is cost else "events"] for rows in series.values() for r in rows)
        ax.plot([first, high], [y0, y0 * high / first], ":", color="grey", label="slope 1 (linear in ranks)")
        ax.legend(fontsize=7)
    cost.set_title("1 GiB call; circled: each channel split on its own; squared: ring steps in blocks", fontsize=9)
    events.set_title("events the loop scheduled", fontsize=9)
    fig.suptitle("nicksim DES: cost against ranks (2-core machine)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"# plot written to {path}")


def plot(series: dict[str, list[tuple]], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(series), figsize=(5 * len(series), 4))
    for ax, (name, rows) in zip(axes, series.items()):
        xs = [r[0] for r in rows]
        ax.plot(xs, [r[1] for r in rows], "o-", label="wall seconds")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("seconds")
        twin = ax.twinx()
        twin.plot(xs, [r[2] for r in rows], "s--", color="tab:orange", label="transfers")
        twin.set_yscale("log")
        twin.set_ylabel("transfers (slices moved)")
        ax.legend(loc="upper left", fontsize=8)
        twin.legend(loc="lower right", fontsize=8)
    fig.suptitle("nicksim DES: cost growth (dgx-h100)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"# plot written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--plot", metavar="FILE", help="write the growth plot (PNG)")
    parser.add_argument("--scale", type=int, nargs="*", default=[4, 16, 64, 128], metavar="NODES",
                        help="node counts of the scale part (default 4 16 64 128)")
    parser.add_argument("--collectives", nargs="+", default=["all_reduce"], metavar="COLL",
                        help="collectives of the scale part (default all_reduce)")
    parser.add_argument("--up-to", nargs="+", default=[], metavar="COLL=NODES",
                        help="run a collective of the scale part on at most NODES nodes (alltoall=64: its memory "
                             "grows as the square of the ranks)")
    parser.add_argument("--only-scale", action="store_true", help="run the scale part alone")
    parser.add_argument("--scale-plot", metavar="FILE", help="write the scale part's plot (PNG)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sharp", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_large(args.one, args.sharp, args.collectives[0])))
        return
    up_to = {}
    for cap in args.up_to:
        coll, _, most = cap.partition("=")
        if not most.isdigit():
            parser.error(f"--up-to {cap}: expected COLL=NODES, e.g. alltoall=64")
        up_to[coll] = int(most)
    if args.only_scale:
        series = scale(args.scale, args.collectives, up_to)
        if args.scale_plot:
            scale_plot(series, args.scale_plot)
        return
    sweeps(args.repeat)
    series = growth(args.repeat)
    print(f"# peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    if args.plot:
        plot(series, args.plot)
    if args.scale:
        scaled = scale(args.scale, args.collectives, up_to)
        if args.scale_plot:
            scale_plot(scaled, args.scale_plot)


if __name__ == "__main__":
    main()
