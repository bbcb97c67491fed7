"""The real backend's sockets against the link they cross and against iperf3, in one run.

Two hosts (network namespaces joined by a veth pair through a bridge, tests/netns.py; needs root),
every link shaped with tc tbf at `--rate-mbit` (0: raw veth, as fast as the CPUs move it).
`nicksim run all_reduce` of `--size` bytes with one rank per host, then two, over the sockets
NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD gives (default: the control socket alone). A ring
crosses from one host to the other once each way, so every byte of busbw (the 2(n-1)/n x size
each rank sends, per second) crosses the link in each direction. The peer: iperf3 --bidir (one TCP
stream each way at once, as the ring's) between the same two hosts for `--iperf-s` seconds, its
mean rate per direction. A second peer does what nicksim does on the same CPUs: PyTorch's gloo
backend, the same collective over TCP between the same hosts (its busbw by nccl-tests' factors).
On a host whose cores both hosts share, iperf3 only moves bytes while a collective also copies
and reduces them on those cores (the work a GPU does beside NCCL's proxy), so gloo is the peer
that measures the transport. Printed per run: the nccl-tests time and busbw, busbw over the shaped
rate, over iperf3's rate and over gloo's busbw; each figure the median of `--repeat` runs. Run:

    python benchmarks/bench_net.py [--rate-mbit 1000] [--size 64M] [--per-host 1 2] [--iters 5] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from netns import Hosts  # noqa: E402
from nicksim.studies.perf import parse_size  # noqa: E402
from nicksim.realhw.runner import free_port  # noqa: E402


def run(hosts: Hosts, per_host: int, nbytes: int, iters: int, env: dict, collective: str = "all_reduce") -> dict:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        procs = []
        for rank in range(2 * per_host):
            environ = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(2 * per_host), LOCAL_RANK=str(rank % per_host),
                           NICKSIM_COMM_ID=f"{hosts.address(0)}:{port}", NCCL_HOSTID=f"host{rank // per_host}", **env)
            argv = [sys.executable, "-m", "nicksim", "run", collective, "-b", str(nbytes), "-e", str(nbytes),
                    "-n", str(iters), "-w", "1", "-c", "0", "-J", out]
            procs.append(hosts.popen(rank // per_host, argv, environ, stdout=-3))
        if any(p.wait(timeout=900) for p in procs):
            raise SystemExit(f"nicksim run failed: {[p.returncode for p in procs]}")
        return json.loads(Path(out).read_text())["results"][0]["out_of_place"]


GLOO_RANK = r"""
import sys, time
import torch, torch.distributed as dist
rank, size, nbytes, iters = map(int, sys.argv[1:5])
address, collective = sys.argv[5], sys.argv[6]
dist.init_process_group("gloo", init_method=f"tcp://{address}", rank=rank, world_size=size)
x = torch.ones(nbytes // 4 // (size if collective == "all_gather" else 1), dtype=torch.float32)
y = torch.empty(nbytes // 4, dtype=torch.float32)
peer_to, peer_from = (rank + 1) % size, (rank - 1) % size
def call():
    if collective == "all_reduce":
        dist.all_reduce(x)
    elif collective == "all_gather":
        dist.all_gather(list(y.chunk(size)), x)
    else:  # sendrecv: to the next rank, from the previous, at once
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer_to), dist.P2POp(dist.irecv, y, peer_from)]):
            work.wait()
call()
dist.barrier()
start = time.perf_counter()
for _ in range(iters):
    call()
out = torch.tensor([(time.perf_counter() - start) / iters])
dist.all_reduce(out, op=dist.ReduceOp.MAX)
if rank == 0:
    print(out.item(), flush=True)
dist.destroy_process_group()
"""
# nccl-tests' busbw factor of each collective for n ranks (common.cu / *_perf.cu)
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n, "sendrecv": lambda n: 1}


def gloo_busbw(hosts: Hosts, per_host: int, nbytes: int, iters: int, collective: str) -> float | None:
    """gloo's busbw (GB/s) for the same collective, ranks and hosts; None without PyTorch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    size, address = 2 * per_host, f"{hosts.address(0)}:{free_port()}"
    procs = [hosts.popen(rank // per_host, [sys.executable, "-c", GLOO_RANK, str(rank), str(size), str(nbytes),
                                            str(iters), address, collective],
                         dict(os.environ, GLOO_SOCKET_IFNAME=hosts.ifname(rank // per_host)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(size)]
    outs = [p.communicate(timeout=900) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"gloo run failed: {[p.returncode for p in procs]}: {outs[0][1].strip()[-400:]}")
    return nbytes / float(outs[0][0].strip()) / 1e9 * BUS_FACTOR[collective](size)


def iperf3_gbps(hosts: Hosts, seconds: float) -> float | None:
    """iperf3 --bidir from host 0 to host 1: the mean of the two directions' received rates, GB/s."""
    if shutil.which("iperf3") is None:
        return None
    port = free_port()
    server = hosts.popen(1, ["iperf3", "-s", "-1", "-B", hosts.address(1), "-p", str(port)], dict(os.environ),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):  # the server listening
            client = hosts.popen(0, ["iperf3", "-c", hosts.address(1), "-p", str(port), "-t", str(seconds), "--bidir",
                                     "-J"], dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True)
            out, _ = client.communicate(timeout=seconds + 60)
            report = json.loads(out) if out.strip() else {}
            if "end" in report and not report.get("error"):
                end = report["end"]
                rates = [end["sum_received"]["bits_per_second"], end["sum_received_bidir_reverse"]["bits_per_second"]]
                return sum(rates) / len(rates) / 8 / 1e9
            time.sleep(0.1)
        raise SystemExit("iperf3 did not connect")
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate-mbit", type=int, default=1000)
    parser.add_argument("--size", default="64M")
    parser.add_argument("--per-host", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--collective", choices=["all_reduce", "all_gather", "sendrecv"], default="all_reduce")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--iperf-s", type=float, default=5)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    nbytes = parse_size(args.size, "--size")
    env = dict(kv.split("=", 1) for kv in args.env)
    rate_gbps = args.rate_mbit / 8 / 1000  # GB/s, as busbw is
    with Hosts(2, rate_mbit=args.rate_mbit or None) as hosts:
        iperf = [iperf3_gbps(hosts, args.iperf_s) for _ in range(args.repeat)]
        iperf_gbps = None if iperf[0] is None else statistics.median(iperf)
        link = f"veth shaped by tbf at {args.rate_mbit} Mbit/s ({rate_gbps:.4f} GB/s)" if args.rate_mbit else "raw veth"
        peer = "-" if iperf_gbps is None else f"{iperf_gbps:.4f} GB/s each way"
        print(f"# {args.collective} of {nbytes} bytes between 2 hosts, {link}; {' '.join(args.env) or 'default sockets'}; "
              f"iperf3 --bidir: {peer} (median of {args.repeat})")
        print(f"# {'per host':>8} {'time us':>11} {'busbw':>8} {'of rate':>8} {'/iperf3':>8} {'gloo':>8} {'/gloo':>8}")
        for per_host in args.per_host:
            runs = [run(hosts, per_host, nbytes, args.iters, env, args.collective) for _ in range(args.repeat)]
            time_us = statistics.median(r["time"] for r in runs)
            busbw = statistics.median(r["bus_bw"] for r in runs)
            of_rate = f"{busbw / rate_gbps:>8.2f}" if args.rate_mbit else f"{'-':>8}"
            of_iperf = f"{busbw / iperf_gbps:>8.2f}" if iperf_gbps else f"{'-':>8}"
            gloo = [gloo_busbw(hosts, per_host, nbytes, args.iters, args.collective) for _ in range(args.repeat)]
            gloo_gbps = None if gloo[0] is None else statistics.median(gloo)
            of_gloo = f"{gloo_gbps:>8.4f} {busbw / gloo_gbps:>8.2f}" if gloo_gbps else f"{'-':>8} {'-':>8}"
            print(f"  {per_host:>8} {time_us:>11.1f} {busbw:>8.4f} {of_rate} {of_iperf} {of_gloo}")


if __name__ == "__main__":
    main()
