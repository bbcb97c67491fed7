"""The real backend's sockets against the rate of the link they cross, measured in one run.

Two hosts (network namespaces joined by a veth pair, tests/netns.py; needs root), every link
shaped with tc tbf at `--rate-mbit`. `nicksim run all_reduce` of `--size` bytes with one rank per
host, then two, over the sockets NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD gives (default: the
control socket alone). Printed per run: the nccl-tests time and busbw, and busbw over the shaped
rate: a ring crosses from one host to the other once each way, so every byte of busbw (the
2(n-1)/n x size each rank sends, per second) crosses the link, and busbw over the rate is the
share of the link the run used. Run:

    python benchmarks/bench_net.py [--rate-mbit 1000] [--size 64M] [--per-host 1 2] [--iters 5]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from netns import Hosts  # noqa: E402
from nicksim.studies.perf import parse_size  # noqa: E402
from nicksim.realhw.runner import free_port  # noqa: E402


def run(hosts: Hosts, per_host: int, nbytes: int, iters: int, env: dict) -> dict:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        procs = []
        for rank in range(2 * per_host):
            environ = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(2 * per_host), LOCAL_RANK=str(rank % per_host),
                           NICKSIM_COMM_ID=f"{hosts.address(0)}:{port}", NCCL_HOSTID=f"host{rank // per_host}", **env)
            argv = [sys.executable, "-m", "nicksim", "run", "all_reduce", "-b", str(nbytes), "-e", str(nbytes),
                    "-n", str(iters), "-w", "1", "-c", "0", "-J", out]
            procs.append(hosts.popen(rank // per_host, argv, environ, stdout=-3))
        if any(p.wait(timeout=900) for p in procs):
            raise SystemExit(f"nicksim run failed: {[p.returncode for p in procs]}")
        return json.loads(Path(out).read_text())["results"][0]["out_of_place"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate-mbit", type=int, default=1000)
    parser.add_argument("--size", default="64M")
    parser.add_argument("--per-host", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    nbytes = parse_size(args.size, "--size")
    env = dict(kv.split("=", 1) for kv in args.env)
    rate_gbps = args.rate_mbit / 8 / 1000  # GB/s, as busbw is
    with Hosts(2, rate_mbit=args.rate_mbit) as hosts:
        print(f"# all_reduce of {nbytes} bytes between 2 hosts, veth shaped by tbf at {args.rate_mbit} Mbit/s "
              f"({rate_gbps:.4f} GB/s); {' '.join(args.env) or 'default sockets'}")
        print(f"# {'per host':>8} {'time us':>11} {'busbw':>8} {'of rate':>8}")
        for per_host in args.per_host:
            got = run(hosts, per_host, nbytes, args.iters, env)
            print(f"  {per_host:>8} {got['time']:>11.1f} {got['bus_bw']:>8.4f} {got['bus_bw'] / rate_gbps:>8.2f}")


if __name__ == "__main__":
    main()
