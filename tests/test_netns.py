"""`nicksim run` across hosts: ranks in network namespaces joined by veth (tests/netns.py), shaped
with tbf, so the connections between hosts are NET over TCP sockets and those inside a host are
shared memory. CI runs as root, which making namespaces needs."""
from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from netns import Hosts
from nicksim.realhw.runner import free_port
from test_bootstrap import GUARD_S

# Network namespaces, veth pairs and tbf qdiscs need root (conftest.py skips these elsewhere, saying so).
pytestmark = pytest.mark.root

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv")


@pytest.fixture(scope="module")
def two_hosts():
    with Hosts(2, rate_mbit=2000) as hosts:
        yield hosts


def start(hosts: Hosts, per_host: int, args: list[str], **env) -> list:
    """Every rank, host by host, rank 0's process being the bootstrap root."""
    port = free_port()
    procs = []
    for rank in range(hosts.n * per_host):
        host = rank // per_host
        environ = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(hosts.n * per_host), LOCAL_RANK=str(rank % per_host),
                       NICKSIM_COMM_ID=f"{hosts.address(0)}:{port}", NCCL_HOSTID=f"host{host}")
        environ.update({"NICKSIM_TIMEOUT": "10", **env})
        procs.append(hosts.popen(host, [sys.executable, "-m", "nicksim", "run", *args], environ,
                                 stdout=None if rank else -1, stderr=-1, text=True))
    return procs


def finish(procs) -> tuple[str, list[str]]:
    outs = [p.communicate(timeout=GUARD_S) for p in procs]
    errs = [err for _, err in outs]
    assert [p.returncode for p in procs] == [0] * len(procs), errs
    return outs[0][0], errs


def rows_of(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_two_hosts_of_two_ranks_deliver_every_element(two_hosts, collective):
    # Odd sizes, two helper threads of two sockets each: steps cut into tasks over four sockets.
    out, _ = finish(start(two_hosts, 2, [collective, "-b", "1000003", "-e", "3000009", "-f", "3", "-c", "1", "-n", "2",
                                         "-w", "1", "-d", "int32" if collective != "all_reduce" else "float"],
                          NCCL_SOCKET_NTHREADS="2", NCCL_NSOCKS_PERTHREAD="2"))
    first = out.splitlines()[0]
    assert first.startswith(f"# nicksim run {collective}: 4 ranks on 2 hosts, 2 per host (shared memory inside a "
                            f"host, sockets between hosts over {two_hosts.ifname(0)}: 2 x 2 socket(s) per connection)")
    rows = rows_of(out)
    assert len(rows) == 2
    assert all(row[8] == "0" and row[12] == "0" for row in rows), out


@pytest.mark.parametrize("dtype,op", [("bfloat16", "max"), ("int8", "prod"), ("float", "avg"), ("uint64", "min")])
def test_one_rank_per_host_over_the_control_socket_alone(two_hosts, dtype, op):
    out, _ = finish(start(two_hosts, 1, ["all_reduce", "-b", "777", "-e", "600001", "-f", "29", "-c", "1", "-n", "1",
                                         "-w", "0", "-d", dtype, "-o", op]))
    assert "sockets between hosts over" in out.splitlines()[0] and ": 1 socket(s) per connection)" in out
    rows = rows_of(out)
    assert len(rows) == 2 and 0 < int(rows[0][0]) <= 777 < int(rows[1][0]) <= 777 * 29  # 777 B, then 29x
    assert all(row[8] == "0" and row[12] == "0" for row in rows), out


def test_a_rank_killed_on_the_other_host_is_named(two_hosts):
    procs = start(two_hosts, 1, ["all_reduce", "-b", "8M", "-e", "8M", "-n", "100000"])
    assert procs[0].stdout.readline().startswith("# nicksim run all_reduce: 2 ranks on 2 hosts")
    procs[1].send_signal(signal.SIGKILL)
    _, err = procs[0].communicate(timeout=GUARD_S)
    assert procs[0].returncode == 2, err
    assert err.strip() == "nicksim: error: bootstrap: rank 1 closed its connection (the process ended or was killed)"
    procs[1].wait(timeout=GUARD_S)


def test_a_socket_interface_that_does_not_exist_is_named(two_hosts):
    procs = start(two_hosts, 1, ["all_reduce", "-b", "1K", "-e", "1K"], NCCL_SOCKET_IFNAME="=nosuch0")
    errs = [p.communicate(timeout=GUARD_S)[1].strip().splitlines()[-1] for p in procs]
    assert [p.returncode for p in procs] == [2, 2]
    assert errs[0].startswith("nicksim: error: environment: NCCL_SOCKET_IFNAME==nosuch0 matches no interface with an "
                              f"IPv4 address (valid: one of lo, {two_hosts.ifname(0)}")


def test_a_rank_that_hangs_on_the_other_host_is_named_by_its_peer(two_hosts):
    """SIGSTOP keeps rank 1's sockets open, as a hung process does: its bootstrap heartbeats stop,
    and rank 0 names it within NICKSIM_TIMEOUT and a second, wherever it was."""
    procs = start(two_hosts, 1, ["all_reduce", "-b", "8M", "-e", "8M", "-n", "100000"], NICKSIM_TIMEOUT="3")
    assert procs[0].stdout.readline().startswith("# nicksim run all_reduce: 2 ranks on 2 hosts")
    time.sleep(1.5)  # past the plan's agreement and the connections, as a rule: into the iterations
    procs[1].send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        _, err = procs[0].communicate(timeout=GUARD_S)
        took = time.monotonic() - stopped
    finally:
        procs[1].kill()
        procs[1].wait(timeout=GUARD_S)
    assert procs[0].returncode == 2, err
    assert err.strip().splitlines()[-1] == "nicksim: error: bootstrap: rank 1 sent nothing for 3 s (stopped or hung)"
    assert took < 3 + 1.0